"""``tensorfab bench vm-dispatch`` and ``bench memory-plan``: their keys and figures
checked against what the runtime computes on its own."""

from __future__ import annotations

import json

import pytest

from tensorfab.benches import BENCHES
from tensorfab.benches.memory_plan import run_memory_plan_bench
from tensorfab.benches.vm_dispatch import run_vm_dispatch_bench


@pytest.mark.slow  # about 20 s (the VM itself: tests/runtime/test_vm.py)
def test_vm_dispatch_bench_on_fsim(tmp_path) -> None:
    r = run_vm_dispatch_bench("fsim", trace=str(tmp_path / "t.json"))
    tracks = {e["args"]["name"] for e in json.loads((tmp_path / "t.json").read_text())[
        "traceEvents"] if e["name"] == "thread_name"}
    assert tracks == {"cpu", "accelerator", "wait"}
    json.dumps(r)
    assert {"register_ns_per_insn", "stack_ns_per_insn", "digits_dispatch_fraction",
            "overlap_seconds", "futures_speedup"} <= set(r)
    assert 0 <= r["digits_dispatch_fraction"] < 0.5  # kernels dominate the run
    assert r["seconds_with_futures"] > 0 and r["seconds_without_futures"] > 0
    assert "vm-dispatch" in BENCHES and "memory-plan" in BENCHES


@pytest.mark.slow  # compiles ResNet-18 twice (about 40 s)
def test_memory_plan_bench() -> None:
    r = run_memory_plan_bench()
    json.dumps(r)
    models = r["models"]
    assert set(models) == {"digits_int8_tiny", "digits_float_cpu", "small_resnet_int8_tiny",
                           "resnet18_float_cpu", "resnet18_int8_default"}
    for m in models.values():
        arenas = [v for v in m.values() if isinstance(v, dict)]
        assert m["arena_peak"] == sum(a["arena_peak"] for a in arenas)
        assert all(a["lower_bound"] <= a["arena_peak"] <= a["naive_sum"] for a in arenas)
        assert m["arena_peak"] <= 1.05 * m["lower_bound"]
    for name in ("digits_int8_tiny", "resnet18_int8_default"):
        assert models[name]["ratio"] == 1.0
    digits = models["digits_int8_tiny"]
    assert digits["matches_interpreter"] and digits["run_allocations"] == 0
