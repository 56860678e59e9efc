"""The ``rtl`` device: :class:`RtlSimulator` and its :class:`RtlRunResult`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensorfab.isa import (
    HwConfig,
    Program,
)
from tensorfab.isa.csr import STATUS_DONE
from tensorfab.isa.device import Counters, Device, DeviceMemory, RunResult
from tensorfab.isa.errors import UsageError

from ..trace import Interval, attribute_intervals
from .build import DEFAULT_THREADS, HarnessBuild, build_harness
from .diagnosis import (
    HangError,
    core_error,
    describe_hang,
    load_plan,
    reset_uops,
    retired_counts,
    run_interrupted,
)
from .harness import DEFAULT_MEMORY, Harness, HarnessError, MemoryTiming, RunStatus


# ----------------------------------------------------------------------- results
@dataclass
class RtlRunResult(RunResult):
    """:class:`~tensorfab.sim.RunResult` of the RTL executor, with what the core and
    the memory model report.

    Attributes
    ----------
    csrs : dict[str, int]
        Every CSR at the end of the run.
    memory : dict[str, int]
        Memory-model statistics (:meth:`Harness.stats`).
    intervals : list[Interval] | None
        Engine activity intervals when traced.
    """

    csrs: dict[str, int] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)
    intervals: list[Interval] | None = None

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["csrs"] = dict(self.csrs)
        out["memory"] = dict(self.memory)
        return out


# ---------------------------------------------------------------------- the device
class RtlSimulator(Device):
    """Cycle-accurate executor: the Amaranth core in Verilator, driven from C++.

    Parameters
    ----------
    memory : MemoryTiming, optional
        Memory model timing (default :data:`DEFAULT_MEMORY`: 20-cycle read latency,
        8 bytes per cycle).
    max_cycles : int
        Cycle limit of a run; past it :class:`HangError` (reason ``limit``).
    hang_cycles : int
        Cycles with no engine working and the memory port idle after which the run
        stops with :class:`HangError` (reason ``hang``); 0 waits for ``max_cycles``.
    trace : bool
        Record engine activity intervals (:attr:`RtlRunResult.intervals`), each named
        with its instruction (:func:`~tensorfab.sim.trace.attribute_intervals`). A
        failed run's exception carries the timeline up to the failure as
        ``intervals``.
    threads : int
        Verilator threads of the model (see docs/architecture.md for measurements).
    verilator_args, cxxflags : sequence of str
        Extra build flags (part of the build's cache key).
    pgo : bool
        Profile-guided build of the model (faster runs, longer first build).

    Examples
    --------
    >>> res = RtlSimulator(trace=True).run(program)  # doctest: +SKIP
    >>> res.cycles, res.counters.gemm_uops  # doctest: +SKIP
    """

    name = "rtl"

    #: Cycles :meth:`run` clocks per call into the library: Ctrl-C and :attr:`progress`
    #: act between two calls (well under a second on the default config).
    CHUNK = 1_000_000

    #: Called between chunks of a run with the cycle count and the instructions
    #: retired per engine (``{"load": n, ...}``); the command line shows it.
    progress: Callable[[int, dict[str, int]], None] | None = None

    def __init__(self, memory: MemoryTiming | None = None, *, max_cycles: int = 500_000_000,
                 hang_cycles: int = 10_000, trace: bool = False,
                 threads: int = DEFAULT_THREADS, verilator_args: Sequence[str] = (),
                 cxxflags: Sequence[str] = (), pgo: bool = True) -> None:
        self.memory = memory if memory is not None else DEFAULT_MEMORY
        for name, value, least in (("max_cycles", max_cycles, 1), ("hang_cycles", hang_cycles, 0)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) \
                    or value < least:
                raise UsageError(f"{name} = {value!r}: give an integer number of cycles of "
                                 f"{least} or more")
        self.max_cycles = max_cycles
        self.hang_cycles = hang_cycles
        self.trace = trace
        self.threads = threads
        self.verilator_args = tuple(verilator_args)
        self.cxxflags = tuple(cxxflags)
        self.pgo = pgo

    def build(self, cfg: HwConfig) -> HarnessBuild:
        """The harness library for ``cfg`` (built unless cached)."""
        return build_harness(cfg, threads=self.threads, verilator_args=self.verilator_args,
                             cxxflags=self.cxxflags, pgo=self.pgo)

    def harness(self, cfg: HwConfig) -> Harness:
        """A fresh core instance for ``cfg`` with this simulator's memory timing."""
        return Harness(self.build(cfg), self.memory)

    def run(self, program: Program, dram: np.ndarray | None = None) -> RtlRunResult:
        """Run ``program`` on the core from a copy of ``dram`` (default its image).

        Raises
        ------
        ProgramError
            The core's STATUS.error (code and index from ERROR_CODE and ERROR_INDEX;
            :class:`~tensorfab.isa.IllegalInstruction` for illegal words).
        HangError
            No done or error: nothing happening for ``hang_cycles`` cycles, or
            ``max_cycles`` reached.
        HarnessError
            The memory model faulted (an access outside the image).
        HarnessBuildError
            The harness could not be built.
        """
        image = self.initial_image(program, dram)
        with self.harness(program.config) as h:
            h.load_dram(image)
            result = self._execute(h, program, lambda: image)
            final = h.read_dram()
        result.dram = final
        result.outputs = program.outputs(final)
        return result

    def open_memory(self, config: HwConfig, size: int) -> RtlMemory:
        """A core for ``config`` whose memory model (``size`` bytes) persists across
        runs (:class:`RtlMemory`)."""
        return RtlMemory(self, config, size)

    def _execute(self, h: Harness, program: Program,
                 image: Callable[[], np.ndarray]) -> RtlRunResult:
        """Reset the core, run ``program`` (placed in ``h``'s memory) to its end and
        return its cycles, counters and CSRs (``dram`` and ``outputs`` left empty);
        ``image`` gives the memory for an error's diagnosis."""
        h.reset()
        base = program.insn_base
        h.set_attribution((base, base + len(program.insns) * program.insn_bytes),
                          load_plan(program))
        h.start(base, len(program.insns), h.dram_size)
        status = RunStatus.LIMIT
        left = self.max_cycles
        try:
            while left > 0:
                chunk = min(left, self.CHUNK)
                status = h.run(chunk, self.hang_cycles, self.trace)
                if status is not RunStatus.LIMIT:
                    break
                left -= chunk
                if self.progress is not None:
                    self.progress(h.run_cycles, self._retired(h))
        except KeyboardInterrupt:
            raise self._interrupted(program, h) from None
        if self.trace and status is RunStatus.LIMIT:
            h.close_trace()
        cycles = h.run_cycles  # the CYCLES counter's count, with or without counters
        csrs = h.read_csrs()
        intervals = attribute_intervals(h.intervals(), program) if self.trace else None
        failure: Exception | None = None
        if status is RunStatus.FAULT:
            failure = HarnessError(f"memory fault after {h.run_cycles} cycles: "
                                   f"{h.message} (the core should have reported "
                                   "DRAM_RANGE)")
        elif status is RunStatus.ERROR:
            failure = core_error(program, image(), csrs["ERROR_CODE"], csrs["ERROR_INDEX"])
        elif status in (RunStatus.LIMIT, RunStatus.HANG):
            failure = self._hang(program, h, csrs, status)
        if failure is not None:
            failure.intervals = intervals  # type: ignore[attr-defined]
            raise failure
        assert csrs["STATUS"] & STATUS_DONE
        if not h.drain():
            raise HarnessError(f"the core reported done with {h.message or 'memory'} "
                               "commands still pending")
        mem = h.stats()
        return RtlRunResult(dram=None, outputs={}, counters=core_counters(program, csrs, mem),
                            cycles=cycles, device=self.name, csrs=csrs, memory=mem,
                            intervals=intervals)

    @staticmethod
    def _retired(h: Harness) -> dict[str, int]:
        return {e: h.read_csr(f"{e.upper()}_INSNS") for e in ("load", "compute", "store")}

    def _interrupted(self, program: Program, h: Harness) -> KeyboardInterrupt:
        """Where a run stopped by Ctrl-C was (between two chunks, so the core's state
        is consistent)."""
        csrs = h.read_csrs()
        _, engines, retired, _ = describe_hang(program, csrs, h.activity)
        intervals = None
        if self.trace:
            h.close_trace()
            intervals = attribute_intervals(h.intervals(), program)
        msg = (f"interrupted at cycle {h.run_cycles:,} of {program.config.name}: "
               + "; ".join(engines.values()))
        return run_interrupted(msg, cycles=h.run_cycles, engines=engines, retired=retired,
                               intervals=intervals)

    def _hang(self, program: Program, h: Harness, csrs: dict[str, int],
              status: RunStatus) -> HangError:
        activity = h.activity
        waits, engines, retired, last = describe_hang(program, csrs, activity)
        cycles = h.run_cycles
        if status is RunStatus.HANG:
            reason = "hang"
            head = (f"the core hung: no engine working and the memory idle for "
                    f"{self.hang_cycles} cycles (at cycle {cycles})")
        else:
            reason = "limit"
            head = f"the core did not finish within {self.max_cycles} cycles"
        msg = f"{head}: " + "; ".join(engines.values())
        return HangError(msg, reason=reason, cycles=cycles, waits=waits, engines=engines,
                         retired=retired, last_retired=last, csrs=csrs, activity=activity)


def core_counters(program: Program, csrs: Mapping[str, int], mem: Mapping[str, int]
                  ) -> Counters:
    """The :class:`~tensorfab.isa.device.Counters` of a run from the core's CSRs and the
    memory's byte counts (``bytes_load_inp``, ``bytes_load_wgt``, ``bytes_load_acc``,
    ``bytes_load_uop``, ``bytes_written``): what the RTL executor and a board report.
    A core without counters (:attr:`~tensorfab.isa.HwConfig.perf_counters` False)
    reads 0 from them: its instruction and micro-op counts are then the program's
    (:func:`~.diagnosis.retired_counts`, a finished run's)."""
    cfg = program.config
    if not cfg.perf_counters:
        csrs = dict(csrs) | retired_counts(program)
    gemm_uops = csrs["GEMM_BUSY"]
    return Counters(
        load_insns=csrs["LOAD_INSNS"], compute_insns=csrs["COMPUTE_INSNS"],
        store_insns=csrs["STORE_INSNS"],
        load_bytes_inp=mem["bytes_load_inp"], load_bytes_wgt=mem["bytes_load_wgt"],
        load_bytes_acc=mem["bytes_load_acc"], load_bytes_uop=mem["bytes_load_uop"],
        store_bytes=mem["bytes_written"],
        gemm_uops=gemm_uops,
        gemm_macs=max(0, gemm_uops - reset_uops(program)) * cfg.peak_macs_per_cycle,
        alu_uops=csrs["ALU_BUSY"], alu_ops=csrs["ALU_BUSY"] * cfg.batch * cfg.block_out)


class RtlMemory(DeviceMemory):
    """The memory model of one core kept across runs: written once, each program run
    from its own instruction base after a core reset (which leaves the memory's
    contents as they are)."""

    def __init__(self, simulator: RtlSimulator, config: HwConfig, size: int) -> None:
        super().__init__(config, size)
        self.simulator = simulator
        self.harness = simulator.harness(config)
        self.harness.load_dram(np.zeros(self.size, dtype=np.uint8))

    def _write(self, addr: int, raw: np.ndarray) -> None:
        self.harness.write_dram(addr, raw)

    def _read(self, addr: int, nbytes: int) -> np.ndarray:
        return self.harness.read_dram_at(addr, nbytes)

    def _run(self, program: Program) -> RtlRunResult:
        return self.simulator._execute(self.harness, program, self.harness.read_dram)

    def close(self) -> None:
        self.harness.close()
