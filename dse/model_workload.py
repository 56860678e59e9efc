"""Whole ONNX models as workloads of a design-space sweep (``tensorfab dse --workloads
digits,model.onnx``).

A :class:`ModelWorkload` carries the model's bytes, its calibration inputs and its
fixed input shapes, so a dask worker on another machine compiles exactly what the user
gave; its :attr:`~ModelWorkload.digest` keys the sweep's cache. A point's figures are
those of the model's accelerator programs (the CPU operators between them are not
timed): the timing model's cycles summed over the programs, the multiply-accumulates
they run, and the device memory the resident model needs.
"""

from __future__ import annotations

import functools
import hashlib
import io
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tensorfab.isa import HwConfig, UsageError

__all__ = ["DIGITS", "ModelWorkload", "batch_one_shapes", "digits_workload",
           "evaluate_model", "model_workload", "rtl_cycles_of_model"]

#: The built-in model workload: the digits CNN of ``tensorfab samples``.
DIGITS = "digits"


@dataclass(frozen=True)
class ModelWorkload:
    """An ONNX model to compile for every point of a sweep.

    Attributes
    ----------
    name : str
        The workload's name in the sweep's rows (``digits``, or the file's stem).
    onnx_bytes : bytes
        The serialized model.
    calibration : dict of str to ndarray, or ndarray, or None
        Calibration inputs (``--calib``): a float model is quantized with them.
    input_shapes : dict of str to tuple of int
        Fixed shapes of the inputs (``--shape``, a symbolic batch taken as 1).
    """

    name: str
    onnx_bytes: bytes = field(repr=False)
    calibration: Any = field(default=None, repr=False)
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    @functools.cached_property
    def digest(self) -> str:
        """A hash of the model, its calibration and its shapes (the sweep's cache key;
        made once, not at every point)."""
        h = hashlib.sha256(self.onnx_bytes)
        cal = self.calibration
        arrays = cal.items() if isinstance(cal, dict) else [("", cal)] if cal is not None \
            else []
        for key, a in sorted(arrays, key=lambda kv: kv[0]):
            a = np.ascontiguousarray(a)
            h.update(f"{key}:{a.dtype.str}:{a.shape}".encode())
            h.update(a.tobytes())
        h.update(repr(sorted(self.input_shapes.items())).encode())
        return h.hexdigest()[:16]

    @functools.cached_property
    def model_macs(self) -> int:
        """The model's own multiply-accumulates at its shapes
        (:func:`~tensorfab.compiler.frontend.onnx_macs.onnx_macs`; made once)."""
        import onnx

        from tensorfab.compiler.frontend.onnx_macs import onnx_macs

        return onnx_macs(onnx.load_from_string(self.onnx_bytes), dict(self.input_shapes))


def batch_one_shapes(prepared: Any, input_shapes: Mapping[str, tuple[int | str, ...]] | None
                     ) -> tuple[dict[str, tuple[int | str, ...]], list[str]]:
    """``input_shapes`` with each input whose only symbolic dim is its first (the batch)
    and that ``input_shapes`` does not fix taken at batch 1, and the names of those
    inputs; any other symbolic dim is left for
    :func:`~tensorfab.compiler.model_compile.check_fixed_inputs` to name."""
    from tensorfab.compiler.frontend.onnx_import import symbolic_inputs

    shapes = dict(input_shapes or {})
    batch_one: list[str] = []
    for name, shape in symbolic_inputs(prepared, shapes):
        if isinstance(shape[0], str) and not any(isinstance(d, str) for d in shape[1:]):
            batch_one.append(name)
            shapes[name] = (1, *shape[1:])
    return shapes, batch_one


def model_workload(path: str | Path, calibration: Any = None,
                   input_shapes: Mapping[str, tuple[int | str, ...]] | None = None,
                   name: str | None = None) -> ModelWorkload:
    """A model workload from an ONNX file, checked here (readable, fixed shapes) rather
    than on every worker.

    Raises
    ------
    UsageError
        No such file.
    ModelCompileError
        The model cannot be read, or an input keeps a symbolic dim other than its
        batch (the ``--shape`` that fixes it named).
    """
    from tensorfab.compiler.frontend.onnx_import import load_onnx
    from tensorfab.compiler.model_compile import check_fixed_inputs

    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--workloads {path}: no such ONNX file (or a known workload "
                         "name: see --help)")
    data = p.read_bytes()
    prepared = load_onnx(str(p))
    shapes, _ = batch_one_shapes(prepared, input_shapes)
    check_fixed_inputs(prepared, shapes)
    return ModelWorkload(name or p.stem, data, calibration,
                         {k: tuple(int(d) for d in v) for k, v in shapes.items()})


def digits_workload() -> ModelWorkload:
    """The digits CNN with its 256 calibration images, one image per inference."""
    from tensorfab.models.digits_cnn import model_path, sample_files

    calib = np.load(io.BytesIO(sample_files()["calib.npy"]))
    return ModelWorkload(DIGITS, model_path().read_bytes(), calib,
                         {"image": (1, 1, 8, 8)})


def _compile(config: HwConfig, wl: ModelWorkload) -> Any:
    import onnx

    from tensorfab.compiler.model_compile import compile_onnx

    return compile_onnx(onnx.load_from_string(wl.onnx_bytes), config=config,
                        calibration=wl.calibration, input_shapes=dict(wl.input_shapes))


def _accel_nodes(compiled: Any) -> list[tuple[int, Any]]:
    from tensorfab.runtime.accel_contract import accel_nodes

    return list(accel_nodes(compiled.program))


def evaluate_model(config_json: str, wl: ModelWorkload) -> dict[str, Any]:
    """Compile ``wl`` for the config and time its accelerator programs on the timing
    model.

    Returns
    -------
    dict
        :func:`~tensorfab.dse.sweep.evaluate`'s keys (``cycles``, ``macs``,
        ``utilization``, ``gops``, ``error``) over the accelerator programs, and
        ``accel_programs``, ``accel_mac_fraction`` (the model's MACs the accelerator
        runs) and ``device_memory_bytes`` (the resident model's device memory).
    """
    from tensorfab.compiler.model_compile import FloatModelError
    from tensorfab.isa import TensorfabError
    from tensorfab.runtime.memory_plan import OutOfDeviceMemory, plan_memory

    cfg = HwConfig.from_json(config_json)
    failed = {"cycles": None, "macs": None, "utilization": None, "gops": None,
              "accel_programs": 0, "accel_mac_fraction": None, "device_memory_bytes": None}
    try:
        compiled = _compile(cfg, wl)
    except FloatModelError:
        return failed | {"error": f"FloatModelError: {wl.name} is a float model and the "
                                  "accelerator runs int8 layers: pass calibration inputs "
                                  "(--calib calib.npy) to quantize it"}
    except TensorfabError as e:
        return failed | {"error": f"{type(e).__name__}: {e}"}
    accel = _accel_nodes(compiled)
    cycles = sum(int(n.attrs["estimated_cycles"]) for _, n in accel)
    macs = sum(max(int(n.attrs.get("macs", -1)), 0) for _, n in accel)
    try:
        plan = plan_memory(compiled.program)
        memory = plan.size if plan is not None else 0
    except OutOfDeviceMemory as e:
        memory = e.needed
    peak = cfg.batch * cfg.block_in * cfg.block_out
    return {"cycles": cycles or None, "macs": macs,
            "utilization": macs / (cycles * peak) if cycles else None,
            "gops": 2 * macs * cfg.clock_mhz / cycles / 1e3 if cycles else None,
            "accel_programs": len(accel),
            "accel_mac_fraction": macs / wl.model_macs if wl.model_macs else None,
            "device_memory_bytes": int(memory),
            "error": None if accel else "no operator of the model runs on the accelerator"}


def rtl_cycles_of_model(config_json: str, wl: ModelWorkload) -> dict[str, Any]:
    """The cycles of ``wl``'s accelerator programs on the RTL executor (each program
    run alone, without operand data: its cycles do not depend on it) and on the timing
    model, summed.

    Returns
    -------
    dict
        ``rtl_cycles``, ``model_cycles``, ``error`` (``(model - rtl) / rtl``),
        ``rtl_seconds``.
    """
    from tensorfab.runtime.accel_contract import decode_program, program_blob
    from tensorfab.sim.rtl import RtlSimulator

    cfg = HwConfig.from_json(config_json)
    compiled = _compile(cfg, wl)
    accel = _accel_nodes(compiled)
    model = sum(int(n.attrs["estimated_cycles"]) for _, n in accel)
    rtl = RtlSimulator()
    t0 = time.perf_counter()
    cycles = sum(rtl.run(decode_program(program_blob(compiled.program, k))).cycles
                 for k, _ in accel)
    return {"rtl_cycles": cycles, "model_cycles": model, "error": (model - cycles) / cycles,
            "rtl_seconds": round(time.perf_counter() - t0, 3)}
