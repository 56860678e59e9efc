"""tensorfab.benches: one module per benchmark, and the registry ``tensorfab bench NAME`` reads.

Each module prints one JSON object as its last line when run as a script
(``python -m tensorfab.benches.fsim_gemm``).

Each returns a JSON-ready dict (its docstring's line is what ``tensorfab bench --help``
lists); the command prints it as its last line. A benchmark
whose function takes ``target`` (or any other name in ``tensorfab.cli.BENCH_OPTIONS``:
``plot``, ``board``, ``config``, ``profile``, ``requant_stage``, ``image_size``,
``separate_adds``, ``agreement``) accepts the command's ``--target`` (or ``--plot``,
``--image-size`` ...) option; the others refuse it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _fsim_gemm() -> dict[str, Any]:
    """512x512x512 int8 GEMM on the functional simulator: seconds and MACs/s."""
    from .fsim_gemm import run_fsim_gemm_bench

    return run_fsim_gemm_bench()


def _rtl_speed(plot: str | None = None, profile: bool = False) -> dict[str, Any]:
    """cycles/s of the Verilator harness, cocotb and Amaranth's simulator."""
    from .rtl_speed import PROFILE_CYCLES, run_rtl_speed_bench

    kw: dict[str, Any] = {} if plot is None else {"plot": plot or None}
    return run_rtl_speed_bench(**kw, profile_cycles=PROFILE_CYCLES if profile else 0)


def _rtl_gemm_busy() -> dict[str, Any]:
    """how busy the GEMM core stays on a compute-bound GEMM in RTL simulation."""
    from .rtl_gemm_busy import run_rtl_gemm_busy_bench

    return run_rtl_gemm_busy_bench()


def _conv2d(target: str = "rtl", plot: str | None = None) -> dict[str, Any]:
    """ResNet-18 C2-C11 utilization per virtual-thread count (--target rtl, fsim)."""
    from .conv2d import run_conv2d_bench

    kw: dict[str, Any] = {} if plot is None else {"plot": plot or None}
    return run_conv2d_bench(target, **kw)


def _requant(target: str = "rtl") -> dict[str, Any]:
    """exact per-channel requantization on ResNet-18 C2-C11: accuracy, cost."""
    from .requant import run_requant_bench

    return run_requant_bench(target)


def _hil(programs: int = 1000) -> dict[str, Any]:
    """hardware in the loop: programs under link faults, link efficiency, digits on a board."""
    from .hil import run_hil_bench

    return run_hil_bench(programs)


def _sdram_resnet18(config: str | None = None) -> dict[str, Any]:
    """ResNet-18 resident in a virtual board's SDRAM: cycles against the ideal memory."""
    from .sdram_resnet18 import run_sdram_resnet18_bench

    return run_sdram_resnet18_bench(config or "ecp5-85f")


def _digits(target: str = "fsim") -> dict[str, Any]:
    """digits CNN: float accuracy vs int8 with the convolutions on the accelerator."""
    from .digits import run_digits_bench

    return run_digits_bench(target)


def _fpga(plot: str | None = None, board: str | None = None,
          config: str | None = None) -> dict[str, Any]:
    """FPGA bitstreams per board and config: resources, fmax, peak GOPS (minutes)."""
    from .fpga import run_fpga_bench, select_builds

    return run_fpga_bench(select_builds(board=board, config=config),
                          plot="build/fpga-bench/utilization.png" if plot is None
                          else plot or None)


def _resnet18(target: str = "rtl", plot: str | None = None,
              requant_stage: str | None = None, config: str | None = None,
              image_size: int | None = None, separate_adds: bool = False,
              agreement: int = 0) -> dict[str, Any]:
    """ResNet-18 int8 end to end on the accelerator: cycles, MACs, utilization."""
    from .resnet18 import float_agreement, run_resnet18_bench

    kw: dict[str, Any] = {"fuse": not separate_adds}
    if config is not None:
        kw["config"] = config
    if image_size is not None:
        kw["image_size"] = image_size
    if agreement:  # as the module's --agreement: only the int8 graph against the float
        return float_agreement(agreement, **kw)
    if plot is not None:
        kw["plot"] = plot or None
    if requant_stage is not None:
        kw["requant_stage"] = requant_stage
    return run_resnet18_bench(target, **kw)


def _grouped_conv(target: str = "rtl") -> dict[str, Any]:
    """depthwise and grouped convolutions on the GEMM core vs the CPU kernels."""
    from .grouped_conv import run_grouped_conv_bench

    return run_grouped_conv_bench(target)


def _device_server(target: str = "fsim") -> dict[str, Any]:
    """device server on 127.0.0.1: PING round trip, remote run vs local (--target)."""
    from .device_server import run_device_server_bench

    return run_device_server_bench(target)


def _vm_dispatch(target: str = "rtl") -> dict[str, Any]:
    """the VM: dispatch ns per instruction (register vs stack), overlap from futures."""
    from .vm_dispatch import run_vm_dispatch_bench

    return run_vm_dispatch_bench(target)


def _memory_plan() -> dict[str, Any]:
    """AOT static memory plan per model: arena peak, naive sum, lower bound."""
    from .memory_plan import run_memory_plan_bench

    return run_memory_plan_bench()


def _timing_model(programs: int = 200) -> dict[str, Any]:
    """the timing model vs the RTL: cycle error per workload and random program, speed."""
    from .timing_model import run_timing_model_bench

    return run_timing_model_bench(programs=programs)


def _dse() -> dict[str, Any]:
    """design-space sweep of 24 points on 2 dask workers: points/s, cache, Pareto front."""
    from .dse import run_dse_bench

    return run_dse_bench()


def _minilm(target: str = "fsim") -> dict[str, Any]:
    """MiniLM-L6 int8 embeddings per bucket (16/64/128): time, cycles, MACs, cosine."""
    from .minilm import run_minilm_bench

    return run_minilm_bench(target)


def _orientation(target: str = "fsim") -> dict[str, Any]:
    """RapidOCR's orientation classifier (real weights): float vs int8 accuracy, MACs."""
    from .orientation import run_orientation_bench

    return run_orientation_bench(rtl_image=target == "rtl")


def _efficientnet(target: str = "fsim") -> dict[str, Any]:
    """EfficientNet-Lite0 (ImageNet weights): float vs int8 top-1 on photographs, MACs."""
    from .efficientnet import run_efficientnet_bench

    return run_efficientnet_bench(rtl_image=target == "rtl")


def _tune() -> dict[str, Any]:
    """the schedule tuner on ResNet-18 and the dense layers: RTL cycles before/after."""
    from .tune import run_tune_bench

    return run_tune_bench()


def _topologies(target: str = "fsim", config: str = "default") -> dict[str, Any]:
    """small AlexNet/ShuffleNet/DenseNet int8 (tensorfab, ort uint8): MACs on the accelerator."""
    from .topologies import run_topologies_bench

    return run_topologies_bench(target, config)


def _zoo(target: str = "fsim", config: str = "default") -> dict[str, Any]:
    """the ONNX zoo's classic CNNs at 224 px, seeded weights: float and int8, MACs, exactness."""
    from .zoo import run_zoo_bench

    return run_zoo_bench(target, config)


BENCHES: dict[str, Callable[..., dict[str, Any]]] = {
    "fsim-gemm": _fsim_gemm,
    "rtl-speed": _rtl_speed,
    "rtl-gemm-busy": _rtl_gemm_busy,
    "conv2d": _conv2d,
    "fpga": _fpga,
    "requant": _requant,
    "digits": _digits,
    "resnet18": _resnet18,
    "grouped-conv": _grouped_conv,
    "device-server": _device_server,
    "hil": _hil,
    "sdram-resnet18": _sdram_resnet18,
    "vm-dispatch": _vm_dispatch,
    "memory-plan": _memory_plan,
    "timing-model": _timing_model,
    "dse": _dse,
    "minilm": _minilm,
    "orientation": _orientation,
    "efficientnet": _efficientnet,
    "tune": _tune,
    "topologies": _topologies,
    "zoo": _zoo,
}
