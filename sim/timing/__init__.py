"""The timing model: a program's cycles and per-engine activity without RTL
(:mod:`.model`, :mod:`.alu_interlock`, numba-compiled over the table of
:mod:`.insn_table`), and the ``timing`` device (:mod:`.device`)."""

from .device import TimingRunResult, TimingSimulator
from .model import (
    DEFAULT_TIMING,
    Timing,
    TimingParams,
    estimated_program_cycles,
    program_timing,
    simulate,
)

__all__ = ["DEFAULT_TIMING", "Timing", "TimingParams", "TimingRunResult", "TimingSimulator",
           "estimated_program_cycles", "program_timing", "simulate"]
