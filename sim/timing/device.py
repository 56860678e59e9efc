"""The ``timing`` device: a program's cycles and per-engine busy and stall time from
the timing model (:mod:`.model`), with no RTL.

The :class:`~tensorfab.isa.device.Device` contract asks for outputs (a model run on
``--target timing`` needs each layer's results to feed the next), so by default the
functional simulator computes the data and the timing model the cycles:
``run().cycles`` is the model's estimate. ``TimingSimulator(functional=False)``
skips the data (the result's ``dram`` is the initial image and ``outputs`` hold
its output segments unchanged): what a design-space sweep wants, 800 to 29,000 times
faster than the RTL executor on ResNet-18's layers (docs/compiler.md, "Timing model").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensorfab.isa import Program, ProgramError, UsageError
from tensorfab.isa.device import Device, RunResult

from ..fsim import FunctionalSimulator
from .model import DEFAULT_TIMING, TimingParams, program_timing

__all__ = ["TimingRunResult", "TimingSimulator"]


@dataclass
class TimingRunResult(RunResult):
    """A :class:`~tensorfab.isa.device.RunResult` with the model's engine activity.

    Attributes
    ----------
    busy : dict[str, int]
        Cycles each engine (``load``, ``compute``, ``store``) held an instruction,
        token waits included (the RTL's ``<engine>_busy`` counters).
    stall : dict[str, int]
        Of those, cycles it waited on a dependency token.
    """

    busy: dict[str, int] = field(default_factory=dict)
    stall: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """:meth:`RunResult.to_json` with ``busy`` and ``stall``."""
        return super().to_json() | {"busy": dict(self.busy), "stall": dict(self.stall)}


class TimingSimulator(Device):
    """Runs programs on the timing model (``open_device("timing")``).

    Parameters
    ----------
    functional : bool
        Compute the outputs with the functional simulator (the default); without it
        only the timing is computed.
    read_latency : int, optional
        The memory's read latency in cycles, as the RTL harness's
        :class:`~tensorfab.sim.rtl.MemoryTiming` (default: its default, 20; 1 or
        more).

    Raises
    ------
    UsageError
        ``functional`` is not a bool, or ``read_latency`` not an integer of 1 or more.
    """

    name = "timing"

    def __init__(self, *, functional: bool = True,
                 read_latency: int | None = None) -> None:
        if not isinstance(functional, bool | np.bool_):  # ("no" would read as true)
            raise UsageError(f"functional = {functional!r}: give True (compute the "
                             "outputs too) or False (the timing only)")
        self.functional = bool(functional)
        self.params: TimingParams = (DEFAULT_TIMING if read_latency is None
                                     else TimingParams.for_memory(read_latency))

    def run(self, program: Program, dram: np.ndarray | None = None) -> TimingRunResult:
        """Estimate ``program``'s cycles (and compute its outputs if :attr:`functional`).

        Raises
        ------
        ProgramError
            As the functional simulator raises them (with :attr:`functional`), or when
            the program's tokens deadlock (a :class:`~tensorfab.sim.errors.DeadlockError`
            naming each waiting engine, its instruction and queue).
        """
        if self.functional:
            base = FunctionalSimulator().run(program, dram)
            image, outputs, counters = base.dram, base.outputs, base.counters
        else:
            image = self.initial_image(program, dram)
            outputs = program.outputs(image)
            counters = None
        try:
            timing = program_timing(program, self.params)
        except ProgramError:  # the model knows only that the tokens deadlock: say where
            if not self.functional:
                FunctionalSimulator().run(program, dram)
            raise
        busy = {e: round(timing.busy[e] + timing.stall[e]) for e in timing.busy}
        stall = {e: round(v) for e, v in timing.stall.items()}
        result = TimingRunResult(dram=image, outputs=outputs, cycles=round(timing.cycles),
                                 device=self.name, busy=busy, stall=stall)
        if counters is not None:
            result.counters = counters
        return result
