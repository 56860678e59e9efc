"""``tensorfab bench orientation``: RapidOCR's text-orientation classifier (a
MobileNetV3-style network with its real weights) in int8 on the accelerator, accuracy
measured on rendered text lines.

The model is :func:`tensorfab.models.orientation.classifier_path` (the ONNX file of the
``rapidocr-onnxruntime`` wheel); the images are :func:`~tensorfab.models.orientation.
orientation_set` (text lines rendered with Pillow's font, half of them rotated by 180°,
preprocessed as RapidOCR does): ``images`` test lines (seed 0) and 64 calibration lines
(seed 1). Float accuracy is onnxruntime's on the original file; the int8 model is
:func:`~tensorfab.compiler.model_compile.compile_onnx` with tensorfab's quantizer,
calibrated on the calibration lines, loaded resident on the functional simulator
(:class:`~tensorfab.runtime.resident.ResidentModel`) and run on every test line
(``int8_accuracy``, ``agreement`` with float's decision). ``accel_mac_fraction`` is the
accelerator programs' MACs over the model's own (:func:`~tensorfab.compiler.frontend.
onnx_macs.onnx_macs`); ``host_bytes`` the activation bytes the host moved in one resident
run, against the input and output bytes; ``cpu_operators`` what stays on the CPU and why.
With ``rtl_image`` one line also runs cycle-accurately in Verilator (``rtl``: total
cycles, utilization per accelerator program, and whether its output equals fsim's).

Targets (issue 30): float accuracy ≥ 0.90, int8 within one point of it, ≥ 99 % of MACs
on the accelerator, ``host_bytes`` ≤ 2 × (input + output bytes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .model_figures import accelerator_figures, rtl_figures

__all__ = ["TARGETS", "run_orientation_bench"]

#: Targets of the benchmark (issue 30).
TARGETS = {"float_accuracy": 0.90, "accuracy_drop": 0.01, "accel_mac_fraction": 0.99,
           "host_bytes_ratio": 2.0}


def run_orientation_bench(images: int = 500, config: str = "default",
                          rtl_image: bool = False) -> dict[str, Any]:
    """Run the benchmark (see the module docstring).

    Parameters
    ----------
    images : int
        Test lines (the issue asks for ≥ 500).
    config : str
        The accelerator: a preset, a board config or a JSON config file.
    rtl_image : bool
        Also run one line in Verilator (cycles per layer, equality with fsim).

    Returns
    -------
    dict
        ``float_accuracy``, ``int8_accuracy``, ``accuracy_drop``, ``agreement``,
        ``accel_mac_fraction``, ``host_bytes``, ``io_bytes``, ``cpu_operators``,
        ``compile_seconds``, ``float_seconds``, ``int8_seconds``, ``rtl`` and targets.
    """
    import onnx
    import onnxruntime as ort

    from tensorfab.compiler.frontend.onnx_macs import onnx_macs
    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.fpga_builds.board_configs import board_config
    from tensorfab.models.orientation import INPUT_SHAPE, classifier_path, orientation_set
    from tensorfab.runtime.profiling import profile_program
    from tensorfab.runtime.resident import ResidentModel
    from tensorfab.sim import get_device

    path = classifier_path()
    test = orientation_set(images, seed=0)
    calib = orientation_set(64, seed=1)
    shape = (1, *INPUT_SHAPE)

    t0 = time.perf_counter()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    float_probs = sess.run(None, {"x": test.images})[0]
    t_float = time.perf_counter() - t0
    float_pred = float_probs.argmax(axis=1)

    t0 = time.perf_counter()
    compiled = compile_onnx(str(path), config=board_config(config),
                            calibration=calib.images, input_shapes={"x": shape})
    t_compile = time.perf_counter() - t0
    program = compiled.program

    t0 = time.perf_counter()
    model = ResidentModel(program, get_device("fsim"))
    try:
        int8_pred = np.array([int(np.asarray(model.run({"x": test.images[k:k + 1]}))
                                  .reshape(-1).argmax()) for k in range(images)])
        profile = profile_program(program, {"x": test.images[:1]}, get_device("fsim"),
                                  resident=model)
    finally:
        model.close()
    t_int8 = time.perf_counter() - t0

    macs = onnx_macs(onnx.load(str(path)), {"x": shape})
    out = np.asarray(profile.output)
    io_bytes = int(test.images[:1].nbytes + out.nbytes)
    float_acc = float((float_pred == test.labels).mean())
    int8_acc = float((int8_pred == test.labels).mean())
    result: dict[str, Any] = {
        "model": path.name,
        "config": config,
        "test_images": images,
        "float_accuracy": round(float_acc, 4),
        "int8_accuracy": round(int8_acc, 4),
        "accuracy_drop": round(float_acc - int8_acc, 4),
        "agreement": round(float((int8_pred == float_pred).mean()), 4),
        "compile_seconds": round(t_compile, 3),
        "float_seconds": round(t_float, 3),
        "int8_seconds": round(t_int8, 3),
    } | accelerator_figures(profile, compiled.cpu_operators, macs, io_bytes)
    if rtl_image:
        result["rtl"] = rtl_figures(program, {"x": test.images[:1]}, out)
    result["meets_target"] = bool(
        float_acc >= TARGETS["float_accuracy"]
        and float_acc - int8_acc <= TARGETS["accuracy_drop"]
        and result["accel_mac_fraction"] >= TARGETS["accel_mac_fraction"]
        and result["host_bytes"] is not None
        and result["host_bytes"] <= TARGETS["host_bytes_ratio"] * io_bytes)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: ``python -m tensorfab.benches.orientation [--images N]
    [--config C] [--rtl]``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=500)
    ap.add_argument("--config", default="default",
                    help="preset, board config or JSON file (default: %(default)s)")
    ap.add_argument("--rtl", action="store_true", help="also run one line in Verilator")
    args = ap.parse_args(argv)
    print(json.dumps(run_orientation_bench(args.images, args.config, args.rtl)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
