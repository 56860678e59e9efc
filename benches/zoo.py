"""``tensorfab bench zoo``: the ONNX model zoo's classic CNNs at full size (the ``onnx``
wheel's light models with seeded weights, :mod:`tensorfab.models.onnx_zoo_light`),
compiled as a new user would: float (all on the CPU) and int8 with tensorfab's quantizer
on a few seeded calibration images for the default accelerator, run on ``target``.

Per model: ``size`` (input height and width), ``macs`` (the ONNX model's),
``accel_macs``, ``accel_mac_fraction``, ``host_bytes`` (host link traffic of one int8
inference) against ``io_bytes`` (input + output), ``exact`` (the int8 output equals the
CPU integer graph's), ``float_cosine`` (tensorfab's float run against onnxruntime's),
``cosine`` (int8 against onnxruntime's float output; null when the int8 output is all
zeros), ``top1_agree`` (the same top
class), ``cpu_operators`` (what stays on the CPU, with the reason),
``compile_seconds`` and ``run_seconds`` (int8). Under ``ort_uint8`` the same int8
figures for onnxruntime's ``quantize_static`` QDQ model (asymmetric uint8 activations,
per-channel int8 weights; the opset-9 model converted to opset 13 first) on the same
calibration images; ``quantize_seconds`` is onnxruntime's calibration.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .model_figures import cosine, int8_run_figures, model_bench_main

__all__ = ["CALIBRATION_IMAGES", "run_zoo_bench", "zoo_model_figures"]

#: Seeded calibration images per model.
CALIBRATION_IMAGES = 4


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def zoo_model_figures(name: str, target: str = "fsim", config: str = "default",
                      size: int = 224, seed: int = 0, ort_uint8: bool = True
                      ) -> dict[str, Any]:
    """The figures of the module docstring for one light zoo model.

    Parameters
    ----------
    name : str
        One of :data:`~tensorfab.models.onnx_zoo_light.LIGHT_MODELS`.
    target, config : str
        The executor and the accelerator (a preset, a board configuration or a JSON
        file: :func:`~tensorfab.fpga_builds.board_configs.board_config`).
    size : int
        The input's height and width (224 as the zoo's models take).
    seed : int
        Seeds the weights, the calibration images and the test image.
    ort_uint8 : bool
        Also onnxruntime's uint8 QDQ model (the ``ort_uint8`` figures).
    """
    import onnx
    import onnxruntime as ort

    from tensorfab.compiler.frontend import quantize_onnx
    from tensorfab.compiler.frontend.onnx_macs import onnx_macs
    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.fpga_builds.board_configs import board_config
    from tensorfab.models.onnx_zoo_light import load_light_model
    from tensorfab.runtime.profiling import profile_program
    from tensorfab.sim import get_device

    cfg = board_config(config)
    light = load_light_model(name, seed=seed, size=size)
    rng = np.random.default_rng(seed + 2)
    calib = rng.normal(0, 1, (CALIBRATION_IMAGES, *light.input_shape[1:])
                       ).astype(np.float32)
    x = rng.normal(0, 1, light.input_shape).astype(np.float32)
    feeds = {light.input_name: x}
    session = ort.InferenceSession(light.model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    reference = session.run(None, feeds)[0]
    macs = onnx_macs(light.model, {light.input_name: light.input_shape})
    device = get_device(target)

    def int8_figures(model: onnx.ModelProto, **calibration: Any) -> dict[str, Any]:
        t0 = time.perf_counter()
        compiled = compile_onnx(model, config=cfg, **calibration)
        compile_seconds = round(time.perf_counter() - t0, 3)
        return {**int8_run_figures(compiled, feeds, device, macs, reference),
                "compile_seconds": compile_seconds}

    floating = compile_onnx(light.model)
    float_out = np.asarray(profile_program(floating.program, feeds, device).output)
    row: dict[str, Any] = {"size": size, "macs": macs,
                           "float_cosine": _rounded(cosine(float_out, reference), 6)}
    row.update(int8_figures(light.model, calibration=calib))
    if ort_uint8:
        t0 = time.perf_counter()
        qdq = quantize_onnx(light.model, [{light.input_name: c[None]} for c in calib],
                            symmetric=False, preprocess=False, activation_dtype="uint8")
        quantize_seconds = round(time.perf_counter() - t0, 3)
        row["ort_uint8"] = {"quantize_seconds": quantize_seconds, **int8_figures(qdq)}
    return row


def run_zoo_bench(target: str = "fsim", config: str = "default",
                  models: Sequence[str] | None = None) -> dict[str, Any]:
    """The figures of the module docstring per model (all of
    :data:`~tensorfab.models.onnx_zoo_light.LIGHT_MODELS` by default)."""
    from tensorfab.fpga_builds.board_configs import board_config
    from tensorfab.models.onnx_zoo_light import LIGHT_MODELS

    board_config(config)  # a name that resolves, before the first model's work
    result: dict[str, Any] = {"target": target, "config": config, "models": {}}
    for name in models or LIGHT_MODELS:
        result["models"][name] = zoo_model_figures(name, target, config)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tensorfab.benches.zoo [--target T] [--config C] [--models A,B]``."""
    return model_bench_main(argv, __doc__.splitlines()[0], run_zoo_bench)


if __name__ == "__main__":
    sys.exit(main())
