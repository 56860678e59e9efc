"""``tensorfab bench resnet18``: ResNet-18 in int8 with its convolution chains on the
accelerator, cycle-accurate.

The model is :func:`tensorfab.models.resnet18_onnx` (torchvision topology, seeded
weights), quantized by onnxruntime's QDQ quantizer with per-channel weights (calibrated
on seeded normal images), lowered to integers with exact per-channel requantization
(``qnn.requantize_q31``: one REQUANT pass, ``rounding="single"``, on configs that have
it, else TFLite's arithmetic) fused into each chain's accelerator epilogue, the
classifier as a 1×1 convolution (:mod:`~tensorfab.compiler.graph.dense_as_conv`),
partitioned, planned, the 7×7 stem turned into a host im2col and a 1×1
convolution (:mod:`~tensorfab.compiler.graph.stem_im2col`), packed, and each chain
compiled by the tensor compiler (``compile_seconds``). The model is then loaded on the
target executor once (:class:`~tensorfab.runtime.resident.ResidentModel`: programs and
weights placed in one device memory, ``load_seconds``) and one seeded image runs
(``run_seconds``: load and run, CPU parts included), activations staying in device memory
between consecutive accelerator programs; ``host_bytes`` is the activation traffic the
host moved in the run, against ``host_bytes_standalone`` when every program runs with its
own image (instructions and weights included, as before models ran resident). The
output is compared bit for bit with the integer graph on the CPU interpreter
(``matches_reference``). ``total_cycles`` is the sum of the programs' cycles, ``macs`` the
model's multiply-accumulates (convolutions and the dense layer, unpadded channels),
``accel_mac_fraction`` the share of them in accelerator programs,
``conv_utilization`` the convolution programs' MACs / (their cycles × peak MACs per
cycle) and ``accel_utilization`` the same over every accelerator program (the
classifier included).
The eight residual adds are fused into the convolutions before them
(:mod:`~tensorfab.compiler.graph.residual_fusion`, ``fused_residual_adds``); with
``--separate-adds`` (``fuse=False``) they stay int8 ``qnn.add_q31`` and go where the
partitioner's cost model puts them, the other placement compiled and run too in the
same session (``residual_adds_cpu``, ``residual_adds_accel``; None for a placement a
config cannot run), each add measured alone on both devices (:func:`residual_add_keys`).
Per program under ``layers``: the model's own ``macs`` as the compiler records them,
``cycles``, ``utilization`` and ``fused_residual``. :func:`float_agreement`
(``--agreement N``) measures the int8 graph against the float model.
A PNG shows cycles and utilization per convolution.

``targets_met`` (:data:`TARGETS`): ``run_seconds`` ≤ 6 on ``--target rtl`` (None on
another target), ``total_cycles`` ≤ 7.46 M (0.95 of the MAC limit; None off ``default``
at 224 px), compile < 30 s, ≥ 99 % of MACs on the accelerator, conv utilization ≥ 0.85.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tensorfab.fpga_builds.board_configs import board_config
from tensorfab.isa import PRESETS, HwConfig, UsageError
from tensorfab.sim import get_device

__all__ = ["TARGETS", "plot_layers", "run_resnet18_bench"]

#: Targets of the benchmark: ``run_seconds`` on ``--target rtl`` (issue 27: the core's
#: simulation speed), ``total_cycles`` (issue 30: 0.95 of the MAC limit on ``default``),
#: the others from issue 12.
TARGETS = {"run_seconds": 6.0, "compile_seconds": 30.0, "accel_mac_fraction": 0.99,
           "conv_utilization": 0.85, "total_cycles": 7_460_000}


def run_resnet18_bench(target: str = "rtl", image_size: int = 224,
                       config: str | HwConfig = "default",
                       plot: str | None = "build/bench/resnet18-layers.png", seed: int = 0,
                       fuse: bool = True, requant_stage: str = "store") -> dict[str, Any]:
    """Run the benchmark (see the module docstring); ``plot`` is the PNG path (None:
    no chart); ``requant_stage`` is where the convolutions' REQUANT runs (``"store"``:
    requantizing STOREs, ``"alu"``: an ALU pass, :attr:`~tensorfab.compiler.Epilogue.
    requant_stage`); ``config`` is a preset, a board configuration or a JSON file
    (:func:`~tensorfab.fpga_builds.board_configs.board_config`), or the config itself.

    Raises
    ------
    UsageError
        ``image_size`` is not a positive integer.
    ConfigError
        ``config`` names no configuration.
    """
    from tensorfab.compiler.graph import Call, accel, post_order
    from tensorfab.compiler.graph.accel_lowering import (
        accel_chain_macs,
        is_model_mac_layer,
        lower_accelerator_chains,
        with_macs,
    )
    from tensorfab.compiler.graph.layout_planning import pack_accel_layouts
    from tensorfab.compiler.graph.lower_runtime import lower_to_runtime
    from tensorfab.compiler.graph.partitioning import annotate_accelerator, residual_add_chains
    from tensorfab.compiler.graph.planning import plan_devices
    from tensorfab.compiler.graph.stem_im2col import im2col_small_channel_convs
    from tensorfab.compiler.tensor.vector_program import vector_program_refusal
    from tensorfab.models.digits_int8 import mac_layers
    from tensorfab.runtime.interpreter import run_program
    from tensorfab.runtime.profiling import profile_program
    from tensorfab.runtime.resident import ResidentModel, standalone_host_bytes

    cfg = board_config(config)
    rng = np.random.default_rng(seed)
    shape = (1, 3, _image_size(image_size), image_size)
    t0 = time.perf_counter()
    _, g, integer, rounding = integer_graph(cfg, image_size, seed, fuse, rng)
    x = rng.standard_normal(shape).astype(np.float32)

    def compile_with(residual_adds: str) -> tuple[Any, Any]:
        plain = im2col_small_channel_convs(plan_devices(
            annotate_accelerator(g, accel(cfg), residual_adds=residual_adds)))
        planned = pack_accel_layouts(plain)
        lowered = with_macs(lower_accelerator_chains(planned, requant_stage=requant_stage),
                            accel_chain_macs(plain))
        return planned, lower_to_runtime(lowered)

    # the partitioner's choice (residual adds by its cost model), then the alternative
    chosen = "accel" if residual_add_chains(g, accel(cfg), "auto") else "cpu"
    planned, program = compile_with(chosen)
    t_compile = time.perf_counter() - t0
    layers = mac_layers(integer, planned)
    # (a config that runs no vector program has one placement: the CPU)
    other = None if vector_program_refusal(cfg) else "cpu" if chosen == "accel" else "accel"
    other_program = compile_with(other)[1] if other is not None else None

    device = get_device(target)
    t0 = time.perf_counter()
    with ResidentModel(program, device) as model:  # programs and weights placed once
        t_load = time.perf_counter() - t0
        profile = profile_program(program, [x], device, resident=model)
        t_run = time.perf_counter() - t0
        # the A/B: each placement run twice, alternating, the faster run of each kept
        # (the first run of a session also warms caches)
        ab = {chosen: [profile]}
        if other is not None:
            ab[other] = []
            with ResidentModel(other_program, device) as other_model:
                for placement, prog, resident in ((other, other_program, other_model),
                                                  (chosen, program, model),
                                                  (other, other_program, other_model)):
                    ab[placement].append(profile_program(prog, [x], device,
                                                         resident=resident))
    got = profile.output
    reference = run_program(lower_to_runtime(g), [x])
    runs = [r for r in profile.layers if r.device == "accel"]
    peak = cfg.peak_macs_per_cycle
    total_macs = sum(layer.macs for layer in layers)  # the model's, counted in numpy
    accel_macs = profile.accel_macs  # the compiler's count per program (no padding)
    total_cycles = sum(int(r.cycles or 0) for r in runs)
    # programs in execution order: the MAC layers' kinds in the model's order (the
    # classifier last), residual adds (with --separate-adds) and the global average
    # pooling apart
    kinds = ["conv" if layer.op == "qnn.conv2d_integer" else "dense" for layer in layers]
    mac_runs = [r for r in runs if is_model_mac_layer(r.op)]
    per_layer: dict[str, dict[str, Any]] = {}
    conv_runs = []
    for i, (r, kind) in enumerate(zip(mac_runs, kinds, strict=True), 1):
        c = int(r.cycles or 0)
        per_layer[f"{kind}{i}"] = {
            "macs": r.macs, "cycles": c,
            "utilization": round(r.macs / (c * peak), 4) if c and r.macs else None,
            "fused_residual": "requantize_residual" in r.op}
        if kind == "conv":
            conv_runs.append(r)
    for i, r in enumerate((r for r in runs if r.op.startswith("add_q31")), 1):
        per_layer[f"add{i}"] = {"macs": r.macs, "cycles": int(r.cycles or 0),
                                "utilization": None, "fused_residual": False}
    for i, r in enumerate((r for r in runs if not is_model_mac_layer(r.op)
                           and not r.op.startswith("add_q31")), 1):
        per_layer[f"{r.op.split()[0]}{i}"] = {"macs": r.macs, "cycles": int(r.cycles or 0),
                                              "utilization": None, "fused_residual": False}
    conv_cycles = sum(int(r.cycles or 0) for r in conv_runs)
    conv_util = sum(r.macs or 0 for r in conv_runs) / (conv_cycles * peak) \
        if conv_cycles else None
    result: dict[str, Any] = {
        "target": target, "config": cfg.name, "image_size": image_size,
        "accel_programs": len(runs), "requant_rounding": rounding,
        "requant_stage": requant_stage, "layers": per_layer,
        "peak_macs_per_cycle": peak,
        "total_cycles": total_cycles,
        "macs": total_macs,
        "accel_mac_fraction": round(accel_macs / total_macs, 6),
        "conv_utilization": round(conv_util, 4) if conv_util is not None else None,
        "accel_utilization": round(accel_macs / (total_cycles * peak), 4) if total_cycles
        else None,
        "run_seconds": round(t_run, 3),
        "compile_seconds": round(t_compile, 3),
        "load_seconds": round(t_load, 3),
        "matches_reference": bool(np.array_equal(got, reference)),
        "device_memory_bytes": model.plan.size,
        "weight_bytes_loaded_once": model.load_bytes,
        "programs_reading_input_on_device": model.plan.on_device_inputs,
        "host_bytes": profile.host_traffic.total if profile.host_traffic else None,
        "host_bytes_standalone": standalone_host_bytes(program),
        "residual_adds": chosen,
        "fused_residual_adds": sum(isinstance(e, Call) and e.op == "qnn.requantize_residual_q31"
                                   for e in post_order(g)),
    }
    for placement in ("cpu", "accel"):
        fastest = min(ab.get(placement, ()), key=lambda p: p.seconds, default=None)
        result[f"residual_adds_{placement}"] = (_placement_keys(fastest, reference)
                                                if fastest is not None else None)
    result.update(residual_add_keys(g, cfg, device, seed))
    result["targets_met"] = {
        "run_seconds": t_run <= TARGETS["run_seconds"] if target == "rtl" else None,
        "total_cycles": (total_cycles <= TARGETS["total_cycles"]
                         if (cfg, image_size) == (PRESETS["default"], 224) else None),
        "compile_seconds": t_compile < TARGETS["compile_seconds"],
        "accel_mac_fraction": accel_macs / total_macs >= TARGETS["accel_mac_fraction"],
        "conv_utilization": conv_util is not None
        and conv_util >= TARGETS["conv_utilization"],
    }
    if plot:
        result["plot"] = str(plot_layers(result, plot))
    return result


def _image_size(size: int) -> int:
    """``size``, checked: the side of the input images, in pixels."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise UsageError(f"image_size = {size!r}: the side of the input images is a "
                         "positive number of pixels")
    return size


def integer_graph(config: str | HwConfig = "default", image_size: int = 224, seed: int = 0,
                  fuse: bool = True, rng: np.random.Generator | None = None
                  ) -> tuple[Any, Any, Any, str]:
    """ResNet-18 (seeded weights) quantized by onnxruntime's QDQ quantizer (per-channel
    weights, two batches of seeded normal images to calibrate), lowered to integers with
    exact per-channel requantization and, with ``fuse``, its residual adds fused into
    the convolutions before them (:mod:`~tensorfab.compiler.graph.residual_fusion`).

    Returns
    -------
    tuple
        ``(float ONNX model, integer graph, integer graph before fixed-point
        requantization, rounding)``.
    """
    from tensorfab.compiler.frontend import from_onnx, quantize_onnx
    from tensorfab.compiler.graph.constant_folding import fold_constants
    from tensorfab.compiler.graph.dense_as_conv import dense_as_conv
    from tensorfab.compiler.graph.fixed_point import fixed_point_requantize, rounding_for
    from tensorfab.compiler.graph.qdq_lowering import lower_qdq
    from tensorfab.compiler.graph.residual_fusion import fuse_residual_adds
    from tensorfab.models import resnet18_onnx

    cfg = board_config(config)
    rng = rng if rng is not None else np.random.default_rng(seed)
    shape = (1, 3, _image_size(image_size), image_size)
    calib = [{"input": rng.standard_normal((2, *shape[1:])).astype(np.float32)}
             for _ in range(2)]
    model = resnet18_onnx(seed=seed, image_size=image_size)
    qdq = quantize_onnx(model, calib, per_channel=True)
    integer = lower_qdq(fold_constants(from_onnx(qdq, input_shapes={"input": shape})))
    rounding = rounding_for(cfg)
    g = fixed_point_requantize(dense_as_conv(integer), per_channel=True, rounding=rounding,
                               every_q31=not cfg.vector_alu)
    if fuse and rounding == "single":
        g = fuse_residual_adds(g)
    return model, g, integer, rounding


def float_agreement(images: int = 32, image_size: int = 224, config: str = "default",
                    seed: int = 0, fuse: bool = True) -> dict[str, Any]:
    """How closely the int8 graph (CPU interpreter) follows the float model
    (onnxruntime) on ``images`` seeded normal images: ``top1_agreement`` (share of
    equal argmax), ``logit_cosine_mean`` and ``logit_cosine_min``."""
    import onnxruntime as ort

    from tensorfab.compiler.graph.lower_runtime import lower_to_runtime

    if isinstance(images, bool) or not isinstance(images, int) or images < 1:
        raise UsageError(f"images = {images!r}: the agreement needs a positive number of "
                         "images")
    from tensorfab.models import resnet18_onnx
    from tensorfab.runtime.interpreter import run_program

    _, g, _, _ = integer_graph(config, image_size, seed, fuse)
    program = lower_to_runtime(g)
    model = resnet18_onnx(seed=seed, image_size=image_size)  # quantizing changed the other
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed + 1)
    agree, cosines = 0, []
    for _ in range(images):
        x = rng.standard_normal((1, 3, image_size, image_size)).astype(np.float32)
        ref = session.run(None, {"input": x})[0].astype(np.float64).ravel()
        got = np.asarray(run_program(program, [x]), np.float64).ravel()
        agree += int(np.argmax(ref) == np.argmax(got))
        cosines.append(float(ref @ got / (np.linalg.norm(ref) * np.linalg.norm(got))))
    return {"images": images, "fused": fuse, "top1_agreement": round(agree / images, 4),
            "logit_cosine_mean": round(float(np.mean(cosines)), 5),
            "logit_cosine_min": round(float(np.min(cosines)), 5)}


def _placement_keys(profile: Any, reference: np.ndarray) -> dict[str, Any]:
    """One run's keys for the residual-add A/B (see :func:`residual_add_keys`)."""
    host = sum(r.seconds for r in profile.layers if r.device != "accel")
    return {
        "total_cycles": sum(int(r.cycles or 0) for r in profile.layers
                            if r.device == "accel"),
        "add_cycles": sum(int(r.cycles or 0) for r in profile.layers
                          if r.op.startswith("add_q31")),
        "add_seconds": round(sum(r.seconds for r in profile.layers
                                 if r.op == "qnn.add_q31" or r.op.startswith("add_q31")), 4),
        "run_seconds": round(profile.seconds, 3),
        "host_seconds": round(host, 4),
        "host_time_share": round(host / profile.seconds, 4),
        "host_bytes": profile.host_traffic.total if profile.host_traffic else None,
        "matches_reference": bool(np.array_equal(profile.output, reference)),
    }


def residual_add_keys(g: Any, cfg: Any, device: Any, seed: int) -> dict[str, Any]:
    """Each residual add measured alone (the run keys are ``residual_adds``, the
    partitioner's placement, and ``residual_adds_cpu`` / ``residual_adds_accel``, the
    loaded model run with each placement in the same session: ``total_cycles``,
    ``add_cycles``, ``add_seconds`` (wall time of the adds, simulation included),
    ``run_seconds`` (load excluded), ``host_seconds`` (CPU kernels), ``host_time_share``,
    ``host_bytes``, ``matches_reference``).

    :func:`~tensorfab.compiler.graph.residual_add_placement.measure_residual_adds`:
    ``residual_adds_cpu_kernel_seconds`` (the kernel, best of five),
    ``residual_adds_accel_cycles`` (the programs on the target, bit-exact with the
    kernel: ``residual_adds_accel_exact``), ``residual_adds_accel_seconds`` (at the
    config's clock), ``residual_adds_host_bytes`` (what the CPU placement moves over the
    host link) and ``residual_adds_preferred`` (the placement rule on these measured
    costs). A config that runs no residual add on the accelerator
    (:func:`~tensorfab.compiler.tensor.vector_program.vector_program_refusal`) gives
    ``residual_adds_accel_refusal``, why, instead."""
    from tensorfab.compiler.graph.residual_add_placement import (
        measure_residual_adds,
        residual_add_calls,
        residual_add_device,
    )
    from tensorfab.compiler.tensor.vector_program import vector_program_refusal

    lacks = vector_program_refusal(cfg)
    if lacks is not None and residual_add_calls(g):
        return {"residual_adds_accel_refusal": f"config {cfg.name!r} runs no residual add "
                                               f"on the accelerator: it needs {lacks}"}
    adds = measure_residual_adds(g, cfg, device, seed=seed)
    if not adds:
        return {}
    accel_cycles = sum(m.accel_cycles if m.accel_cycles is not None
                       else m.accel_estimated_cycles for m in adds)
    return {
        "residual_add_count": len(adds),
        "residual_add_elements": sum(m.elements for m in adds),
        "residual_adds_cpu_kernel_seconds": round(sum(m.cpu_seconds for m in adds), 4),
        "residual_adds_accel_cycles": accel_cycles,
        "residual_adds_accel_estimated_cycles": sum(m.accel_estimated_cycles for m in adds),
        "residual_adds_accel_seconds": round(accel_cycles / (cfg.clock_mhz * 1e6), 5),
        "residual_adds_accel_exact": all(bool(m.exact) for m in adds),
        "residual_adds_host_bytes": sum(m.host_bytes for m in adds),
        "residual_adds_preferred": "+".join(sorted({residual_add_device(m, cfg)
                                                     for m in adds})),
    }


def plot_layers(result: dict[str, Any], path: str | Path) -> Path:
    """Cycles (bars, log scale) and MAC utilization (line) per accelerator layer."""
    from tensorfab.sim.png_figure import png_figure

    names = list(result["layers"])
    with png_figure(path, (max(8.0, 0.5 * len(names)), 4.5)) as (_fig, ax):
        ax.bar(range(len(names)), [result["layers"][n]["cycles"] for n in names],
               color="tab:blue", label="cycles")
        ax.set_yscale("log")
        ax.set_ylabel("cycles")
        ax.set_xticks(range(len(names)), names, rotation=60, fontsize=8)
        ax2 = ax.twinx()
        ax2.plot(range(len(names)),
                 [result["layers"][n]["utilization"] or 0.0 for n in names],
                 color="tab:orange", marker="o", label="utilization")
        ax2.axhline(TARGETS["conv_utilization"], color="gray", lw=0.8, ls="--")
        ax2.set_ylim(0, 1.05)
        ax2.set_ylabel("MAC utilization")
        ax.set_title(f"ResNet-18 int8 {result['image_size']}px on {result['target']} "
                     f"({result['config']}): {result['total_cycles']:,} cycles, "
                     f"utilization {result['conv_utilization']}")
    return Path(path)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tensorfab.benches.resnet18 [--target T] [--image-size N] [--plot P]``."""
    from tensorfab.compiler.tensor.epilogue import REQUANT_STAGES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="rtl")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--config", default="default")
    ap.add_argument("--plot", default="build/bench/resnet18-layers.png")
    ap.add_argument("--separate-adds", action="store_true",
                    help="keep the residual adds as separate int8 adds (not fused into "
                         "the convolutions before them)")
    ap.add_argument("--agreement", type=int, default=0, metavar="N",
                    help="only measure the int8 graph against the float model on N "
                         "seeded images (top-1 agreement, cosine of the logits)")
    ap.add_argument("--requant-stage", choices=REQUANT_STAGES, default=REQUANT_STAGES[0],
                    help="where the convolutions' REQUANT runs: requantizing STOREs "
                         "(default) or an ALU pass before them")
    args = ap.parse_args(argv)
    if args.agreement:
        print(json.dumps(float_agreement(args.agreement, args.image_size, args.config,
                                         fuse=not args.separate_adds)))
        return 0
    print(json.dumps(run_resnet18_bench(args.target, args.image_size, args.config,
                                        args.plot or None, fuse=not args.separate_adds,
                                        requant_stage=args.requant_stage)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
