"""tensorfab.compiler: program builders and (later) the model compiler."""

from .blocked_gemm import (
    GemmTiling,
    ProgramBuilder,
    build_blocked_gemm,
    choose_tiling,
    gemm_stats,
    pack_activations,
    pack_weights,
    unpack_outputs,
)

__all__ = [
    "GemmTiling",
    "ProgramBuilder",
    "build_blocked_gemm",
    "choose_tiling",
    "gemm_stats",
    "pack_activations",
    "pack_weights",
    "unpack_outputs",
]
