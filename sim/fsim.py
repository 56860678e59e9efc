"""The bit-exact functional simulator.

:class:`FunctionalSimulator` decodes the instruction stream from the DRAM image and
runs the three engines (load, compute, store) as in-order instruction streams that
synchronize only through the four dependency-token queues, exactly as
``docs/isa.md`` specifies. A scheduler runs each engine as far as it can, round
robin; an instruction starts when every queue it pops holds a token, takes effect
at once, then pushes its tokens as room appears in their queues. The simulator
also checks what the hardware cannot: deadlocks (:class:`~.errors.DeadlockError`),
unbalanced tokens (:class:`~.errors.TokenError`) and races between engines
(:class:`~.errors.RaceError`, see :mod:`.race`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from tensorfab.isa import (
    Alu,
    Engine,
    ErrorCode,
    Finish,
    Gemm,
    HwConfig,
    Insn,
    Load,
    Program,
    ProgramError,
    Store,
    decode_insn,
)
from tensorfab.isa.device import Device, ImageMemory, RunResult
from tensorfab.isa.formats import TOKEN_QUEUES, token_pops, token_pushes
from tensorfab.isa.program import words_from_bytes

from .blas import single_threaded_blas
from .errors import DeadlockError, TokenError, Wait
from .fsim_alu import exec_alu
from .fsim_gemm import exec_gemm
from .fsim_mem import exec_load, exec_store
from .machine import Machine
from .race import ENGINE_NAMES, Access, ZeroedArrays, access_clock

#: Queue names by short key (:data:`tensorfab.isa.formats.TOKEN_QUEUES`).
QUEUE_NAMES = {q.name: q.label for q in TOKEN_QUEUES}
#: Per engine: dependency flag -> queue it pops.
POPS: dict[Engine, tuple[tuple[str, str], ...]] = {e: token_pops(e) for e in Engine}
#: Per engine: dependency flag -> queue it pushes.
PUSHES: dict[Engine, tuple[tuple[str, str], ...]] = {e: token_pushes(e) for e in Engine}
#: Per queue: the engine that pushes it and the flag that does.
QUEUE_PUSHER = {q.name: (q.producer.name.lower(), q.push) for q in TOKEN_QUEUES}

#: Decoded words a simulator keeps per configuration before starting over.
_DECODED_WORDS_KEPT = 1 << 16

Token = tuple[tuple[int, int, int], int]  # (pusher's vector clock, pusher's index)


class _EngineState:
    """Progress of one engine through its instruction stream."""

    def __init__(self, engine: Engine, stream: list[tuple[int, Insn]]) -> None:
        self.engine = engine
        self.name = ENGINE_NAMES[engine]
        self.stream = stream
        self.pos = 0
        self.pending: list[tuple[str, str]] = []  # pushes left for stream[pos]
        self.clock = [0, 0, 0]

    @property
    def done(self) -> bool:
        return self.pos == len(self.stream)

    def waits(self, queues: dict[str, deque[Token]], fetched: int) -> list[Wait]:
        """Why the engine cannot progress (empty if done)."""
        if self.done:
            return []
        index, insn = self.stream[self.pos]
        if index >= fetched:
            return [Wait(self.name, index, insn.mnemonic, "fetch", "", "")]
        if self.pending:
            return [Wait(self.name, index, insn.mnemonic, "push", QUEUE_NAMES[q], flag)
                    for flag, q in self.pending]
        return [Wait(self.name, index, insn.mnemonic, "pop", QUEUE_NAMES[q], flag)
                for flag, q in POPS[self.engine] if getattr(insn, flag) and not queues[q]]


def check_finish(insns: Sequence[Insn]) -> None:
    """Raise ``NO_FINISH`` unless FINISH is the last instruction and appears once."""
    for i, insn in enumerate(insns):
        if isinstance(insn, Finish) and i != len(insns) - 1:
            raise ProgramError(f"FINISH must be the last instruction; {len(insns) - 1 - i} "
                               "instruction(s) follow it", code=ErrorCode.NO_FINISH, index=i,
                               engine="compute", field="opcode")
    if not insns or not isinstance(insns[-1], Finish):
        raise ProgramError("the program does not end with FINISH", code=ErrorCode.NO_FINISH,
                           index=len(insns), engine="compute", field="opcode")


def decode_image(program: Program, dram: np.ndarray,
                 decoded: dict[int, Insn] | None = None) -> list[Insn]:
    """Decode the program's instructions from the DRAM image (they start at
    :attr:`~tensorfab.isa.Program.insn_base`).

    Parameters
    ----------
    program : Program
        Gives the configuration, the instruction count and where they start.
    dram : numpy.ndarray
        The image read (an instruction patched into it is what runs).
    decoded : dict, optional
        Words already decoded for ``program.config`` (a word decodes the same wherever
        it is); new legal words are added. Illegal words are never stored, so they
        raise on every run.

    Raises
    ------
    IllegalInstruction
        An illegal word, naming its index.
    ProgramError
        ``NO_FINISH`` if the decoded stream breaks the FINISH rule.
    """
    cfg = program.config
    n = len(program.insns)
    base = program.insn_base
    words = words_from_bytes(dram[base: base + n * program.insn_bytes], cfg)
    if decoded is None:
        decoded = {}
    insns = []
    for i, w in enumerate(words):
        insn = decoded.get(w)
        if insn is None:
            insn = decoded[w] = decode_insn(w, cfg, i)
        insns.append(insn)
    check_finish(insns)
    return insns


class FunctionalSimulator(Device):
    """Bit-exact, untimed executor with token-discipline and race checking.

    Parameters
    ----------
    fast : bool
        Evaluate GEMM instructions as dense contractions and ALU instructions in one
        shot where loop order cannot matter (default). ``False`` evaluates iteration
        by iteration; the results are identical (used to test the fast paths).

    Examples
    --------
    >>> result = FunctionalSimulator().run(program)  # doctest: +SKIP
    >>> result.outputs["C"]  # doctest: +SKIP
    """

    name = "fsim"

    def __init__(self, fast: bool = True) -> None:
        self.fast = fast
        # Decoded words per configuration: a resident model runs the same programs
        # over and over, and decoding costs more than most instructions' execution.
        self._decoded: dict[HwConfig, dict[int, Insn]] = {}
        self._plans: dict[HwConfig, dict] = {}
        self._zeroed = ZeroedArrays()  # the race trackers' arrays, across runs

    def run(self, program: Program, dram: np.ndarray | None = None) -> RunResult:
        """Execute ``program`` on a copy of ``dram`` (default ``program.dram_image()``).

        Raises
        ------
        ProgramError
            An illegal instruction (also one patched into the image), a memory range
            error (``SRAM_RANGE``, ``DRAM_RANGE``, ``UOP_RANGE``), or missing FINISH.
        DeadlockError, TokenError, RaceError
            Broken token discipline.
        """
        check_finish(program.insns)
        program.validate()
        return self._execute(program, self.initial_image(program, dram))

    def open_memory(self, config: HwConfig, size: int) -> ImageMemory:
        """A host image that programs run on in place (no copy per run)."""
        return _InPlaceMemory(self, config, size)

    def _execute(self, program: Program, image: np.ndarray) -> RunResult:
        """Run ``program`` on ``image``, modifying it."""
        decoded = self._decoded.setdefault(program.config, {})
        if len(decoded) > _DECODED_WORDS_KEPT:  # random programs: mostly unique words
            decoded.clear()
        insns = decode_image(program, image, decoded)
        streams: list[list[tuple[int, Insn]]] = [[], [], []]
        for i, insn in enumerate(insns):
            streams[insn.engine].append((i, insn))
        machine = Machine(program, image, streams,
                          self._plans.setdefault(program.config, {}), self._zeroed)
        try:
            with single_threaded_blas():
                _Run(machine, streams, program.config.dep_queue_depth, self.fast).run()
        finally:
            machine.release()
        return RunResult(dram=image, outputs=program.outputs(image),
                         counters=machine.counters, cycles=None, device=self.name)


class _Run:
    """The scheduler of one run."""

    def __init__(self, machine: Machine, streams: list[list[tuple[int, Insn]]],
                 capacity: int, fast: bool) -> None:
        self.m = machine
        self.capacity = capacity
        self.fast = fast
        self.queues: dict[str, deque[Token]] = {q: deque() for q in QUEUE_NAMES}
        self.engines = [_EngineState(Engine(e), streams[e]) for e in range(3)]
        # Fetch dispatches in program order; each engine holds at most its command
        # queue plus the instruction it executes, as the hardware does.
        self.order = sorted((index, insn) for stream in streams for index, insn in stream)
        self.cmd_capacity = machine.program.config.cmd_queue_depth + 1
        self.inflight = [0, 0, 0]
        self.fetched = 0
        self._dispatch()

    def _dispatch(self) -> None:
        while self.fetched < len(self.order):
            engine = self.order[self.fetched][1].engine
            if self.inflight[engine] >= self.cmd_capacity:
                return
            self.inflight[engine] += 1
            self.fetched += 1

    def _waits(self) -> list[Wait]:
        waits = [w for e in self.engines for w in e.waits(self.queues, self.fetched)]
        if self.fetched < len(self.order):
            index, insn = self.order[self.fetched]
            waits.append(Wait("fetch", index, insn.mnemonic, "dispatch",
                              f"{ENGINE_NAMES[insn.engine]} engine's command queue "
                              f"(full: {self.cmd_capacity} instructions)", ""))
        return waits

    def run(self) -> None:
        engines = self.engines
        while True:
            progress = False
            for e in engines:
                while self._step(e):
                    progress = True
            if all(e.done for e in engines) or not progress:
                break
        compute = engines[Engine.COMPUTE]
        if not compute.done:
            raise DeadlockError(self._waits(), [e.name for e in engines if e.done])
        self._check_end()

    def _step(self, e: _EngineState) -> bool:
        """Advance ``e`` by one action (start an instruction, or push pending tokens);
        return whether anything happened."""
        if e.pending:
            return self._push(e)
        if e.done:
            return False
        index, insn = e.stream[e.pos]
        if index >= self.fetched:
            return False
        pops = [q for flag, q in POPS[e.engine] if getattr(insn, flag)]
        if any(not self.queues[q] for q in pops):
            return False
        for q in pops:
            clock, _ = self.queues[q].popleft()
            e.clock = [max(a, b) for a, b in zip(e.clock, clock, strict=True)]
        e.clock[e.engine] = e.pos + 1
        access = Access(index, int(e.engine), e.pos + 1, insn.mnemonic,
                        access_clock(e.engine, e.clock))
        self._execute(access, insn)
        e.pending = [(flag, q) for flag, q in PUSHES[e.engine] if getattr(insn, flag)]
        self._push(e)
        return True

    def _push(self, e: _EngineState) -> bool:
        """Push the pending tokens that fit; retire the instruction once all are in."""
        index = e.stream[e.pos][0]
        still = []
        moved = False
        for flag, q in e.pending:
            if len(self.queues[q]) < self.capacity:
                self.queues[q].append(((e.clock[0], e.clock[1], e.clock[2]), index))
                moved = True
            else:
                still.append((flag, q))
        e.pending = still
        if not still:
            e.pos += 1
            self.inflight[e.engine] -= 1
            self._dispatch()
            c = self.m.counters
            if e.engine is Engine.LOAD:
                c.load_insns += 1
            elif e.engine is Engine.COMPUTE:
                c.compute_insns += 1
            else:
                c.store_insns += 1
        return moved

    def _execute(self, access: Access, insn: Insn) -> None:
        if isinstance(insn, Gemm):
            exec_gemm(self.m, access, insn, self.fast)
        elif isinstance(insn, Alu):
            exec_alu(self.m, access, insn, self.fast)
        elif isinstance(insn, Load):
            exec_load(self.m, access, insn)
        elif isinstance(insn, Store):
            exec_store(self.m, access, insn)

    def _check_end(self) -> None:
        """After FINISH: no engine may still wait, no token may be left over."""
        waits = [w for e in self.engines for w in e.waits(self.queues, self.fetched)]
        if waits:
            waits.sort(key=lambda w: w.index)
            first = waits[0]
            lines = "; ".join(w.describe() for w in waits)
            kind = "underflow" if first.action == "pop" else "overflow"
            raise TokenError(f"token {kind} after FINISH: {lines}", queue=first.queue,
                             waits=waits, index=first.index, engine=first.engine,
                             field=first.flag)
        for q, tokens in self.queues.items():
            if tokens:
                pushers = [index for _, index in tokens]
                pusher, flag = QUEUE_PUSHER[q]
                listed = ", ".join(str(i) for i in pushers)
                raise TokenError(
                    f"{len(tokens)} token(s) left in {QUEUE_NAMES[q]} at the end of the "
                    f"program, pushed by {pusher} instruction(s) {listed} and never popped",
                    queue=QUEUE_NAMES[q], count=len(tokens), pushers=pushers,
                    index=pushers[0], engine=pusher, field=flag)


__all__ = ["POPS", "PUSHES", "QUEUE_NAMES", "FunctionalSimulator", "check_finish",
           "decode_image"]


class _InPlaceMemory(ImageMemory):
    """The functional simulator's :class:`~.device.DeviceMemory`: each program runs on
    the image itself."""

    device: FunctionalSimulator

    def _run(self, program: Program) -> RunResult:
        check_finish(program.insns)
        program.validate()
        result = self.device._execute(program, self.image)
        result.dram, result.outputs = None, {}
        return result
