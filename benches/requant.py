"""``tensorfab bench requant``: exact per-channel requantization on VTA's ResNet-18
convolutions C2–C11 — its accuracy against float and its cost against the 16-bit path.

For every layer: seeded int8 activations and per-channel symmetric int8 weights, an
int32 bias, random per-output-channel real scales (about ±4σ of each channel's sums
onto int8, times a random factor in [0.5, 2]) and an output zero point. Two epilogues
are compiled and run on the target for every virtual-thread count:

* ``single``: :meth:`tensorfab.compiler.Epilogue.from_scales` with ``rounding="single"``
  — TFLite's ``QuantizeMultiplier`` per channel, then one ``REQUANT`` pass (bias,
  Q31 multiplier, one rounding of the exact product, zero point, clamp) with the
  records in the weight buffer;
* ``tflite``: the same scales with ``rounding="double"`` — ``MULHI`` and ``SHR_RND``
  with per-channel vector operands, the zero point, ``CLIP``: TFLite's arithmetic bit
  for bit (``equal_fraction_tflite``, ``mean_utilization_best_tflite``);
* ``16bit``: the 16-bit path (``MUL`` immediate, ``SHR_RND`` immediate, ``CLIP``) with
  one scale per layer (the channels' geometric mean), the multiplier bounded so the
  product stays within int32 (:func:`tensorfab.compiler.accumulator_bound`).

The float reference is ``clip(round(acc · scale[c]) + zero_point)`` in float64 on the
exact int64 sums. The JSON's keys end in the epilogue they measure (``_single``,
``_tflite``, ``_16bit``): the fraction of its int8 outputs equal to the float
reference (``equal_fraction_*``, over all outputs of all layers; the 16-bit path
against its own single-scale reference), the largest difference (``max_abs_diff_*``),
and the conv2d utilization (useful MACs / (cycles × peak)) at each layer's best thread
count, averaged over the layers (``mean_utilization_best_*``), and of the layer without
any epilogue (``mean_utilization_best_no_epilogue``, int32 sums' low bytes, checked
against numpy: what ``tensorfab bench conv2d`` measures). Every run's output is
checked bit-exact against the functional simulator's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorfab.compiler import RESNET18_CONV
from tensorfab.isa import PRESETS, HwConfig
from tensorfab.sim.testing.numpy_reference import conv2d_acc

__all__ = ["TARGETS", "float_reference", "quantized_layer", "run_requant_bench"]

#: Targets of the benchmark (issue 11).
TARGETS = {"equal_fraction_single": 0.999, "max_abs_diff_single": 1,
           "mean_utilization_best_single": 0.90}


def quantized_layer(wl: Any, seed: int = 0) -> dict[str, Any]:
    """Seeded operands and per-channel scales of one layer (see the module docstring)."""
    rng = np.random.default_rng([seed, zlib.crc32(wl.name.encode())])
    x = np.clip(np.round(rng.normal(0, 40, (wl.batch, wl.in_channels, wl.height, wl.width))),
                -128, 127).astype(np.int8)
    w_sigma = rng.uniform(10, 50, wl.out_channels)
    w = np.clip(np.round(rng.normal(0, 1, (wl.out_channels, wl.in_channels, *wl.kernel))
                         * w_sigma[:, None, None, None]), -127, 127).astype(np.int8)
    sigma = 40 * w_sigma * np.sqrt(wl.in_channels * wl.kernel[0] * wl.kernel[1])
    bias = np.round(rng.normal(0, 1, wl.out_channels) * sigma / 4).astype(np.int32)
    scales = 127 / (4 * sigma) * rng.uniform(0.5, 2, wl.out_channels)
    return {"x": x, "w": w, "bias": bias, "scales": scales,
            "zero_point": int(rng.integers(-10, 11))}


def conv_sums(x: np.ndarray, w: np.ndarray, bias: np.ndarray, stride: tuple[int, int],
              padding: tuple[int, int, int, int]) -> np.ndarray:
    """Exact int64 ``Σ x·w + bias`` in NCHW."""
    return conv2d_acc(x, w, stride, padding) + bias.astype(np.int64).reshape(1, -1, 1, 1)


def float_reference(acc: np.ndarray, scales: np.ndarray | float, zero_point: int
                    ) -> np.ndarray:
    """``clip(round(acc · scale) + zero_point, -128, 127)`` in float64 (ties away from
    zero), scales per channel (axis 1) or one for all."""
    s = np.asarray(scales, dtype=np.float64)
    if s.ndim:
        s = s.reshape(1, -1, 1, 1)
    y = acc * s
    r = np.sign(y) * np.floor(np.abs(y) + 0.5)
    return np.clip(r + zero_point, -128, 127).astype(np.int64)


def run_requant_bench(target: str = "rtl", config: str | HwConfig = "default",
                      vthreads: Sequence[int] = (1, 2, 4), layers: Sequence[str] | None = None,
                      seed: int = 0, progress: bool = False) -> dict[str, Any]:
    """Run the benchmark (see the module docstring).

    Parameters
    ----------
    target : str
        Device name (:func:`tensorfab.isa.device.open_device`); ``fsim`` is untimed (no
        utilization).
    config : str or HwConfig
        Preset name or configuration.
    vthreads : sequence of int
        Virtual-thread counts of the default schedule.
    layers : sequence of str, optional
        Layer names (default C2–C11).
    seed : int
        Seed of the operands and scales.
    progress : bool
        Print one line per run (stderr).

    Returns
    -------
    dict
        ``equal_fraction_*``, ``max_abs_diff_*``, ``mean_utilization_best_*`` of each
        epilogue (``single``, ``tflite``, ``16bit``; see the module docstring),
        ``layers`` (per layer and epilogue: per thread count cycles and utilization,
        the best, equal fraction and largest difference), ``targets``, ``all_correct``.
    """
    from tensorfab.compiler import (
        Epilogue,
        accumulator_bound,
        conv2d,
        quantize_multiplier,
    )
    from tensorfab.sim import FunctionalSimulator, get_device

    cfg = PRESETS[config] if isinstance(config, str) else config
    names = list(layers) if layers is not None else list(RESNET18_CONV)
    device = get_device(target)
    timed = target != "fsim"
    peak = cfg.peak_macs_per_cycle
    fsim = FunctionalSimulator()
    t_start = time.perf_counter()
    # per epilogue: outputs equal to the reference, outputs, largest difference
    totals = {k: [0, 0, 0] for k in ("single", "tflite", "16bit", "no_epilogue")}
    out_layers: dict[str, Any] = {}
    correct = True
    for name in names:
        wl = RESNET18_CONV[name]
        d = quantized_layer(wl, seed)
        acc = conv_sums(d["x"], d["w"], d["bias"], wl.stride, wl.padding)
        reduction = wl.in_channels * wl.kernel[0] * wl.kernel[1]
        old_scale = float(np.exp(np.mean(np.log(d["scales"]))))
        bound = accumulator_bound(reduction, int(np.abs(d["bias"]).max()))
        mult, shift = quantize_multiplier(old_scale, bound)
        want_float = float_reference(acc, d["scales"], d["zero_point"])
        epilogues = {
            "single": (Epilogue.from_scales(d["scales"], zero_point=d["zero_point"],
                                         rounding="single"), want_float),
            "tflite": (Epilogue.from_scales(d["scales"], zero_point=d["zero_point"]),
                       want_float),
            "16bit": (Epilogue(requant=(mult, shift), zero_point=d["zero_point"]),
                    float_reference(acc, old_scale, d["zero_point"])),
        }
        # no epilogue (int32 sums, low bytes stored): what the epilogues cost in all
        epilogues["no_epilogue"] = (Epilogue(), (acc - d["bias"].reshape(1, -1, 1, 1)) & 0xFF)
        layer: dict[str, Any] = {}
        for kind, (ep, want) in epilogues.items():
            per: dict[str, Any] = {}
            output = None
            for v in vthreads:
                bias = None if kind == "no_epilogue" else d["bias"]
                op = conv2d(cfg, d["x"], d["w"], bias, stride=wl.stride,
                            padding=wl.padding, epilogue=ep, vthreads=v)
                t0 = time.perf_counter()
                res = device.run(op.program)
                run_s = time.perf_counter() - t0
                got = op.unpack(res.outputs["out"]).astype(np.int64)
                if kind == "no_epilogue":
                    got = got & 0xFF
                ok = output is None or np.array_equal(got, output)
                if target != "fsim":
                    ok = ok and np.array_equal(res.outputs["out"],
                                               fsim.run(op.program).outputs["out"])
                correct = correct and bool(ok)
                output = got
                rec = {"cycles": int(res.cycles) if timed else None,
                       "utilization": round(wl.macs / (res.cycles * peak), 4) if timed
                       else None,
                       "alu_insns": sum(1 for i in op.program.insns if i.mnemonic
                                        .startswith("alu")),
                       "tiling": op.plan.describe(), "run_s": round(run_s, 2),
                       "correct": bool(ok)}
                per[str(v)] = rec
                if progress:
                    print(f"{name} {kind} vt={v}: {rec['tiling']} cycles={rec['cycles']} "
                          f"util={rec['utilization']} ok={ok}", file=sys.stderr, flush=True)
            assert output is not None
            diff = np.abs(output - want)
            t = totals[kind]
            t[0] += int((diff == 0).sum())
            t[1] += int(diff.size)
            t[2] = max(t[2], int(diff.max()))
            best = max(per, key=lambda k: per[k]["utilization"] or 0.0)
            layer[kind] = {"vthreads": per, "best_vthreads": int(best),
                           "best_utilization": per[best]["utilization"],
                           "equal_fraction": round(float((diff == 0).mean()), 6),
                           "max_abs_diff": int(diff.max()), "epilogue": ep.describe()}
        out_layers[name] = layer

    def mean_best(kind: str) -> float | None:
        if not timed:
            return None
        return round(float(np.mean([out_layers[n][kind]["best_utilization"]
                                    for n in names])), 4)

    result: dict[str, Any] = {
        "bench": "requant", "config": cfg.name, "target": target,
        "vthreads": list(vthreads), "layers": out_layers,
        "outputs": totals["single"][1],
        **{f"{what}_{kind}": value for kind in ("single", "tflite", "16bit")
           for what, value in (
               ("equal_fraction", round(totals[kind][0] / totals[kind][1], 6)),
               ("max_abs_diff", totals[kind][2]),
               ("mean_utilization_best", mean_best(kind)))},
        "mean_utilization_best_no_epilogue": mean_best("no_epilogue"),
        "no_epilogue_correct": totals["no_epilogue"][2] == 0,
        "all_correct": correct,
        "seconds": round(time.perf_counter() - t_start, 1),
    }
    result["targets"] = {
        key: {"want": f"{'<=' if key.startswith('max') else '>='} {want}",
              "got": result[key],
              "met": None if result[key] is None else
              (result[key] <= want if key.startswith("max") else result[key] >= want)}
        for key, want in TARGETS.items()}
    return result


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark, print its JSON line last and return the result dict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="rtl", metavar="TARGET")
    ap.add_argument("--config", default="default", choices=sorted(PRESETS))
    ap.add_argument("--vthreads", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--layers", nargs="+", default=list(RESNET18_CONV),
                    choices=list(RESNET18_CONV))
    ap.add_argument("--json", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)
    out = run_requant_bench(args.target, args.config, args.vthreads, args.layers,
                            progress=not args.json)
    print(json.dumps(out))
    if not out["all_correct"]:
        sys.exit(1)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
