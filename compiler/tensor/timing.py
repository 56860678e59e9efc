"""The compiler's name for the timing model, which lives in :mod:`tensorfab.sim.timing`
(one model for the tile search, :func:`.tokens.dispatch_order`, the ``timing`` device
and the benchmarks)."""

from __future__ import annotations

from tensorfab.sim.timing.model import (
    DEFAULT_TIMING,
    FAST_RESET_LANES,
    Timing,
    TimingParams,
    estimated_program_cycles,
    fast_reset,
    insn_work,
    simulate,
)

__all__ = ["DEFAULT_TIMING", "FAST_RESET_LANES", "Timing", "TimingParams",
           "estimated_program_cycles", "fast_reset", "insn_work", "simulate"]
