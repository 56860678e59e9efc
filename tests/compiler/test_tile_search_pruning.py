"""The tile search's speed-ups change nothing: pruning by the compute bound picks the
tiling a full search picks, the bound never exceeds the estimate, and the memoized
search returns each layer's own workload."""

from __future__ import annotations

import dataclasses

import pytest

from tensorfab.compiler import RESNET18_CONV, Workload, default_schedule
from tensorfab.compiler.tensor import tile_search
from tensorfab.compiler.tensor.cost_model import cycles_lower_bound, estimate_cost
from tensorfab.isa import PRESETS

WORKLOADS = [
    RESNET18_CONV["C11"],
    RESNET18_CONV["C10"],
    Workload.conv2d(1, 160, 28, 28, 64, 1, 1, 0, name="stem-im2col-like"),
    Workload.conv2d(1, 20, 13, 11, 36, 3, 2, 1, name="odd"),
    Workload.dense(4, 96, 200, name="dense"),
]


CASES = [pytest.param("default", w, 3, 9, id=f"default-{w.name}") for w in WORKLOADS] + [
    pytest.param("tiny", w, 1, 2, id=f"tiny-{w.name}",
                 marks=[pytest.mark.slow] if w.height * w.in_channels > 2000 else [])
    for w in WORKLOADS]


@pytest.mark.parametrize(("preset", "workload", "bias", "n_alu_ops"), CASES)
def test_pruned_search_picks_the_full_search_plan(monkeypatch, preset, workload, bias,
                                                  n_alu_ops) -> None:
    cfg = PRESETS[preset]
    pruned = tile_search.search_plan(workload, cfg, 2, bias=bias, n_alu_ops=n_alu_ops)
    estimated: list[tuple[float, float]] = []

    def recording(plan, n):
        est = estimate_cost(plan, n)
        estimated.append((cycles_lower_bound(plan, n), est.cycles))
        return est

    monkeypatch.setattr(tile_search, "_cannot_win", lambda *a: False)
    monkeypatch.setattr(tile_search, "estimate_cost", recording)
    full = tile_search.search_plan(workload, cfg, 2, bias=bias, n_alu_ops=n_alu_ops)
    assert pruned == full
    assert estimated and all(lb <= cycles for lb, cycles in estimated)
    assert any(lb > 0.5 * cycles for lb, cycles in estimated)  # the bound is not vacuous


def test_memoized_search_keeps_each_layers_workload(monkeypatch) -> None:
    cfg = PRESETS["default"]
    calls: list[Workload] = []
    real = tile_search.search_plan

    def counting(workload, *args, **kwargs):
        calls.append(workload)
        return real(workload, *args, **kwargs)

    monkeypatch.setattr(tile_search, "search_plan", counting)
    tile_search._searched_plan.cache_clear()
    a = dataclasses.replace(RESNET18_CONV["C11"], name="layer_a")
    b = dataclasses.replace(RESNET18_CONV["C11"], name="layer_b")
    sa, sb = default_schedule(a, cfg, 2, bias=2, n_alu_ops=5), \
        default_schedule(b, cfg, 2, bias=2, n_alu_ops=5)
    assert len(calls) == 1 and calls[0].name == ""
    assert sa.workload == a and sb.workload == b
    assert sb.plan() == dataclasses.replace(sa.plan(), workload=b)
    default_schedule(b, cfg, 2, bias=2, n_alu_ops=4)  # another epilogue: searched again
    assert len(calls) == 2
    tile_search._searched_plan.cache_clear()
