"""``tensorfab bench grouped-conv``: depthwise and grouped convolutions on the GEMM core
(block-diagonal weights, :mod:`tensorfab.compiler.tensor.grouped_conv`) against the CPU
integer kernels.

Layers: MobileNetV2's depthwise 3×3 convolutions at 224×224 (32 channels at 112×112 …
960 at 7×7), a 5×5 depthwise (EfficientNet), AlexNet's ``groups=2`` 5×5, a ShuffleNet
``groups=3`` 1×1 (240 channels). Each is compiled with one-pass requantization,
checked bit for bit against the CPU kernels (``qnn.conv2d_integer`` +
``qnn.requantize_q31``) on the functional simulator, and run on ``target`` (default
``rtl``). Per layer: ``macs`` (the model's), ``cycles``, ``accel_seconds`` at the
config's clock, ``utilization`` (MACs / (cycles × peak)), ``gemm_uops``,
``cpu_seconds`` (the two kernels, best of three), ``host_bytes`` (input + output: what
the CPU placement moves over the host link between accelerator neighbours),
``uart_seconds`` (those bytes at 115,200 baud, 10 bits a byte), ``exact``; and totals.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorfab.sim import get_device

__all__ = ["LAYERS", "run_grouped_conv_bench"]

#: ``name: (channels in, channels out, groups, size, kernel, stride)``.
LAYERS = {
    "mbv2_dw1": (32, 32, 32, 112, 3, 1),
    "mbv2_dw2": (96, 96, 96, 112, 3, 2),
    "mbv2_dw3": (144, 144, 144, 56, 3, 1),
    "mbv2_dw5": (192, 192, 192, 28, 3, 1),
    "mbv2_dw8": (384, 384, 384, 14, 3, 1),
    "mbv2_dw12": (576, 576, 576, 14, 3, 1),
    "mbv2_dw15": (960, 960, 960, 7, 3, 1),
    "effnet_dw5x5": (240, 240, 240, 14, 5, 1),
    "alexnet_conv2_g2": (96, 256, 2, 27, 5, 1),
    "shufflenet_g3_1x1": (240, 240, 3, 28, 1, 1),
}

#: UART bits per byte (8N1).
_UART_BITS = 10


def _cpu(x: np.ndarray, w: np.ndarray, bias: np.ndarray, attrs: dict, q31: dict
         ) -> tuple[np.ndarray, float]:
    from tensorfab.runtime.kernels import KERNELS

    best, out = float("inf"), None
    for _ in range(3):
        t0 = time.perf_counter()
        acc = KERNELS["qnn.conv2d_integer"]([x, w, np.int8(0), np.int8(0)], attrs)
        out = KERNELS["qnn.requantize_q31"]([acc + bias.reshape(1, -1, 1, 1)], q31)
        best = min(best, time.perf_counter() - t0)
    assert out is not None
    return out, best


def run_grouped_conv_bench(target: str = "rtl", config: str = "default",
                           layers: Sequence[str] | None = None, seed: int = 0
                           ) -> dict[str, Any]:
    """Run the benchmark (see the module docstring)."""
    from tensorfab.compiler.tensor.epilogue import Epilogue
    from tensorfab.compiler.tensor.grouped_conv import grouped_conv2d
    from tensorfab.compiler.tensor.requant import quantize_multipliers
    from tensorfab.isa import PRESETS
    from tensorfab.sim import FunctionalSimulator

    cfg = PRESETS[config]
    rng = np.random.default_rng(seed)
    device = get_device(target)
    fsim = FunctionalSimulator()
    out: dict[str, Any] = {}
    for name in layers or list(LAYERS):
        c, o, g, size, k, s = LAYERS[name]
        x = rng.integers(-128, 128, (1, c, size, size)).astype(np.int8)
        w = rng.integers(-128, 128, (o, c // g, k, k)).astype(np.int8)
        bias = rng.integers(-3000, 3000, o).astype(np.int32)
        mult, exp = quantize_multipliers(rng.uniform(1e-4, 4e-3, o))
        ep = Epilogue(bias=True, multiplier=mult, shift=exp, rounding="single")
        t0 = time.perf_counter()
        op = grouped_conv2d(cfg, x, w, bias, groups=g, stride=s, padding=k // 2,
                            epilogue=ep)
        compile_seconds = time.perf_counter() - t0
        attrs = {"strides": (s, s), "padding": (k // 2,) * 4, "dilation": (1, 1),
                 "groups": g, "data_layout": "NCHW", "kernel_layout": "OIHW",
                 "out_dtype": "int32"}
        q31 = {"multiplier": tuple(mult), "shift": tuple(exp), "zero_point": 0,
               "rounding": "single"}
        want, cpu_seconds = _cpu(x, w, bias, attrs, q31)
        ref = fsim.run(op.program)
        exact = bool(np.array_equal(op.unpack(ref.outputs["out"]), want))
        res = device.run(op.program) if target != "fsim" else ref
        if target != "fsim":
            exact = exact and bool(np.array_equal(res.dram, ref.dram))
        macs = op.workload.out_height * op.workload.out_width * o * (c // g) * k * k
        cycles = int(res.cycles) if res.cycles is not None else None
        host = int(x.nbytes + want.nbytes)
        out[name] = {
            "groups": g, "macs": int(macs), "cycles": cycles,
            "accel_seconds": None if cycles is None
            else round(cycles / (cfg.clock_mhz * 1e6), 6),
            "utilization": None if not cycles
            else round(macs / (cycles * cfg.peak_macs_per_cycle), 4),
            "gemm_uops": int(res.counters.gemm_uops),
            "cpu_seconds": round(cpu_seconds, 6), "host_bytes": host,
            "uart_seconds": round(host * _UART_BITS / 115_200, 3),
            "compile_seconds": round(compile_seconds, 3), "plan": op.plan.describe(),
            "exact": exact,
        }
    timed = [v for v in out.values() if v["cycles"]]
    return {
        "target": target, "config": config, "layers": out,
        "all_exact": all(v["exact"] for v in out.values()),
        "accel_seconds": round(sum(v["accel_seconds"] for v in timed), 6) if timed else None,
        "cpu_seconds": round(sum(v["cpu_seconds"] for v in out.values()), 6),
        "host_bytes": sum(v["host_bytes"] for v in out.values()),
        "accel_faster_than_cpu_kernel": sum(v["accel_seconds"] < v["cpu_seconds"]
                                            for v in timed),
        "layer_count": len(out),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tensorfab.benches.grouped_conv [--target T] [--layers A,B]``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="rtl")
    ap.add_argument("--config", default="default")
    ap.add_argument("--layers", default="")
    args = ap.parse_args(argv)
    layers = [s for s in args.layers.split(",") if s] or None
    print(json.dumps(run_grouped_conv_bench(args.target, args.config, layers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
