"""The AOT static memory plan per model: arena peak, naive sum, lower bound.

For each model, compiled with fixed shapes: the host arena (every CPU intermediate,
:func:`~tensorfab.runtime.static_plan.plan_host_arena`) and, for a model with an
accelerator, the device's activation arena (:func:`~tensorfab.runtime.memory_plan.
plan_memory`), each with its peak, the naive sum (every buffer its own bytes), the lower
bound (the most bytes live at one step) and the method that placed it. The model's
``arena_peak``, ``naive_sum`` and ``lower_bound`` add the two arenas; ``ratio`` is
peak / bound. The digits CNN also runs on the VM with its plan (fsim): the same output
as the interpreter and no storage allocated on the run path.

Models: the digits CNN (int8 on ``tiny``, batch 40; and float on the CPU), ResNet-18
(int8 on ``default`` at 224×224, batch 1; and float on the CPU) and a small ResNet
(``resnet_onnx(stages=((6, 1), (10, 2)), blocks_per_stage=1)``, 16×16, batch 4, int8
on ``tiny``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np


def _plans(program: Any) -> dict[str, Any]:
    from tensorfab.runtime.memory_plan import plan_memory
    from tensorfab.runtime.static_plan import plan_host_arena

    host = plan_host_arena(program).arena
    device = plan_memory(program)
    arenas = {"host": host} | ({"device": device.activations} if device is not None else {})
    out: dict[str, Any] = {name: {"arena_peak": a.peak, "naive_sum": a.naive_sum,
                                  "lower_bound": a.lower_bound, "method": a.method,
                                  "buffers": len(a.offsets)}
                           for name, a in arenas.items()}
    for key in ("arena_peak", "naive_sum", "lower_bound"):
        out[key] = sum(a[key] for a in out.values() if isinstance(a, dict))
    out["ratio"] = round(out["arena_peak"] / out["lower_bound"], 4) if out["lower_bound"] \
        else 1.0
    return out


def _digits_run(program: Any, x: np.ndarray) -> dict[str, Any]:
    from tensorfab.runtime.interpreter import run_program
    from tensorfab.runtime.resident import ResidentModel
    from tensorfab.runtime.static_plan import plan_host_arena
    from tensorfab.runtime.vm import VirtualMachine
    from tensorfab.runtime.vm_build import build_executable
    from tensorfab.sim import FunctionalSimulator

    exe = build_executable(program, plan_host_arena(program))
    with ResidentModel(program, FunctionalSimulator()) as model, \
            VirtualMachine(model, exe) as vm:
        got = vm.run([x])
        return {"matches_interpreter": bool(np.array_equal(got, run_program(program, [x]))),
                "run_allocations": vm.storage_allocations}


def run_memory_plan_bench() -> dict[str, Any]:
    """The JSON of the module docstring."""
    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.models import load_digits_split, resnet18_onnx
    from tensorfab.models.digits_cnn import model_path
    from tensorfab.models.resnet import resnet_onnx

    rng = np.random.default_rng(0)
    xtr, _, xte, _ = load_digits_split(0)
    models: dict[str, Any] = {}
    seconds: dict[str, float] = {}

    def add(name: str, model: Any, config: str | None, shape: tuple[int, ...],
            calib: np.ndarray | None) -> Any:
        t = time.perf_counter()
        key = "image" if name.startswith("digits") else "input"
        program = compile_onnx(model, config=config, calibration=calib,
                               input_shapes={key: shape}).program
        t_plan = time.perf_counter()
        models[name] = _plans(program)
        seconds[name] = round(time.perf_counter() - t_plan, 3)
        models[name]["compile_seconds"] = round(t_plan - t, 2)
        return program

    digits = add("digits_int8_tiny", model_path(), "tiny", (40, 1, 8, 8), xtr[:128])
    models["digits_int8_tiny"] |= _digits_run(digits, xte[:40])
    add("digits_float_cpu", model_path(), None, (40, 1, 8, 8), None)
    small = resnet_onnx(stages=((6, 1), (10, 2)), blocks_per_stage=1, image_size=16,
                        classes=10)
    add("small_resnet_int8_tiny", small, "tiny", (4, 3, 16, 16),
        rng.standard_normal((8, 3, 16, 16)).astype(np.float32))
    r18 = resnet18_onnx()
    add("resnet18_float_cpu", r18, None, (1, 3, 224, 224), None)
    add("resnet18_int8_default", r18, "default", (1, 3, 224, 224),
        rng.standard_normal((2, 3, 224, 224)).astype(np.float32))
    return {"bench": "memory-plan", "models": models, "plan_seconds": seconds,
            "worst_ratio": max(m["ratio"] for m in models.values()),
            "at_lower_bound": sorted(n for n, m in models.items() if m["ratio"] == 1.0)}


if __name__ == "__main__":
    import json

    print(json.dumps(run_memory_plan_bench()))
