"""``tensorfab bench topologies``: small seeded standard CNNs
(:mod:`tensorfab.models.cnn_topologies`: AlexNet's ``groups=2`` convolutions, a
ShuffleNet stage, a DenseNet block) compiled int8 for the accelerator with tensorfab's
quantizer and as onnxruntime's asymmetric uint8 QDQ model, run on ``target``.

Per model and quantizer: ``macs`` (the ONNX model's), ``accel_macs``,
``accel_mac_fraction``, ``host_bytes`` (host link traffic of one inference) against
``io_bytes`` (input + output), ``exact`` (the output equals the CPU integer graph's),
``cosine`` of the output with onnxruntime's float output, ``top1_agree`` (the same
largest entry), ``cpu_operators`` (what stays
on the CPU, with the reason), ``compile_seconds``, ``run_seconds``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .model_figures import int8_run_figures, model_bench_main

__all__ = ["run_topologies_bench"]


def run_topologies_bench(target: str = "fsim", config: str = "default",
                         models: Sequence[str] | None = None) -> dict[str, Any]:
    """The figures of the module docstring, per model (all of
    :data:`~tensorfab.models.cnn_topologies.TOPOLOGIES` by default) and quantizer."""
    import onnxruntime as ort

    from tensorfab.compiler.frontend import quantize_onnx
    from tensorfab.compiler.frontend.onnx_macs import onnx_macs
    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.fpga_builds.board_configs import board_config
    from tensorfab.models.cnn_topologies import TOPOLOGIES
    from tensorfab.sim import get_device

    cfg = board_config(config)  # a preset, a board configuration or a JSON file
    device = get_device(target)
    result: dict[str, Any] = {"target": target, "config": config, "models": {}}
    for name in models or sorted(TOPOLOGIES):
        model = TOPOLOGIES[name]()
        shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
        rng = np.random.default_rng(1)
        calib = rng.normal(0, 1, (8, *shape[1:])).astype(np.float32)
        x = rng.normal(0, 1, shape).astype(np.float32)
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        reference = session.run(None, {"x": x})[0]
        macs = onnx_macs(model, {"x": shape})
        rows = {}
        for quantizer in ("tensorfab", "ort_uint8"):
            t0 = time.perf_counter()
            if quantizer == "tensorfab":
                compiled = compile_onnx(model, config=cfg, calibration=calib)
            else:
                qdq = quantize_onnx(model, [{"x": c[None]} for c in calib], symmetric=False,
                                    preprocess=False, activation_dtype="uint8")
                compiled = compile_onnx(qdq, config=cfg)
            compile_seconds = round(time.perf_counter() - t0, 3)
            rows[quantizer] = {"macs": macs, **int8_run_figures(compiled, {"x": x}, device,
                                                                macs, reference),
                               "compile_seconds": compile_seconds}
        result["models"][name] = rows
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tensorfab.benches.topologies [--target T] [--config C] [--models A,B]``."""
    return model_bench_main(argv, __doc__.splitlines()[0], run_topologies_bench)


if __name__ == "__main__":
    sys.exit(main())
