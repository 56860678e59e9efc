"""The RTL executor: ``Core(cfg)`` in Verilator with a C++ memory model.

:class:`RtlSimulator` (device ``rtl``) runs a :class:`~tensorfab.isa.Program` on the
Verilated core through the harness library of :mod:`.build` (built
once per configuration and RTL, cached): it loads the DRAM image into the memory
model, programs the CSRs as a host does (INSN_BASE = 0, INSN_COUNT, DRAM_SIZE = image
size, CTRL = 1) and clocks the core in C++ until STATUS reports done or error, so no
Python runs per cycle. :class:`Harness` is the lower-level handle on one core
instance (DRAM, CSRs, start, run, statistics, activity intervals).

Errors are those of the functional simulator where the hardware can tell:
``STATUS.error`` raises :class:`~tensorfab.isa.ProgramError` (or
:class:`~tensorfab.isa.IllegalInstruction`) with the core's ERROR_CODE and
ERROR_INDEX; a core that stops making progress, or does not finish within the cycle
limit, raises :class:`HangError`, which tells what each engine was doing; Ctrl-C
raises a :class:`KeyboardInterrupt` that tells the same
(:func:`.diagnosis.run_interrupted`). A traced run that fails hands
its timeline on as the exception's ``intervals``.

Modules: :mod:`.build` (Verilator build of the harness library, cached),
:mod:`.train` (the profile-guided build's training run), :mod:`.harness` (ctypes),
:mod:`.diagnosis` (hangs and core errors), :mod:`.device` (the Device).
"""

from .device import RtlRunResult, RtlSimulator
from .diagnosis import HangError
from .harness import DEFAULT_MEMORY, ONCHIP_MEMORY, Harness, HarnessError, MemoryTiming, RunStatus

__all__ = [
    "DEFAULT_MEMORY",
    "ONCHIP_MEMORY",
    "HangError",
    "Harness",
    "HarnessError",
    "MemoryTiming",
    "RtlRunResult",
    "RtlSimulator",
    "RunStatus",
]
