"""Why an RTL run ended: :class:`HangError` and :func:`describe_hang` (what each engine
was waiting for), :func:`core_error` (the core's ERROR_CODE/ERROR_INDEX as the
functional simulator's exception)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tensorfab.isa import (
    Alu,
    Buffer,
    Engine,
    ErrorCode,
    Gemm,
    IllegalInstruction,
    Insn,
    Load,
    Program,
    ProgramError,
    Store,
    buffer_entry_bytes,
    decode_insn,
)

from ..errors import Wait
from ..fsim import POPS, PUSHES, QUEUE_NAMES
from ..race import ENGINE_NAMES

#: Error codes the fetch unit reports from the instruction word alone.
_DECODE_CODES = (ErrorCode.BAD_OPCODE, ErrorCode.RESERVED_BITS, ErrorCode.BAD_FIELD)



class HangError(ProgramError):
    """The core neither finished nor reported an error.

    Either nothing happened any more (no engine working, the memory port idle) for
    ``hang_cycles`` cycles, which in hardware means for ever (typically a token no
    instruction pushes), or the cycle limit ran out.

    Attributes
    ----------
    reason : str
        ``hang`` (nothing happening) or ``limit``.
    cycles : int
        Cycles the core ran.
    waits : list[Wait]
        Engines blocked on a token queue or on fetch, by instruction index;
        :attr:`index`, :attr:`engine` and :attr:`field` are the first token wait's.
    engines : dict[str, str]
        What each engine was doing, one sentence each.
    retired : dict[str, int]
        Instructions retired per engine (LOAD_INSNS, COMPUTE_INSNS, STORE_INSNS).
    last_retired : dict[str, int | None]
        Program index of each engine's last retired instruction.
    csrs : dict[str, int]
        Every CSR.
    activity : dict[str, bool]
        Activity bits of the last cycle.
    """

    def __init__(self, message: str, *, reason: str, cycles: int, waits: list[Wait],
                 engines: dict[str, str], retired: dict[str, int],
                 last_retired: dict[str, int | None], csrs: dict[str, int],
                 activity: dict[str, bool]) -> None:
        self.reason = reason
        self.cycles = cycles
        self.waits = waits
        self.engines = engines
        self.retired = retired
        self.last_retired = last_retired
        self.csrs = csrs
        self.activity = activity
        token = [w for w in waits if w.action in ("pop", "push")]
        first = (token or waits or [None])[0]
        super().__init__(message, index=first.index if first else None,
                         engine=first.engine if first else None,
                         field=(first.flag or None) if first else None)


def run_interrupted(message: str, *, cycles: int, engines: dict[str, str],
                    retired: dict[str, int], intervals: list | None = None
                    ) -> KeyboardInterrupt:
    """The :class:`KeyboardInterrupt` of a run stopped by Ctrl-C, saying where.

    It stays a plain KeyboardInterrupt (no project error class: ``except Exception``
    must not catch a Ctrl-C), with attributes ``cycles`` (cycles the core ran),
    ``engines`` (what each engine was doing, one sentence each), ``retired``
    (instructions retired per engine) and ``intervals`` (the timeline up to the
    interrupt when the run was traced).
    """
    exc = KeyboardInterrupt(message)
    exc.cycles = cycles  # type: ignore[attr-defined]
    exc.engines = engines  # type: ignore[attr-defined]
    exc.retired = retired  # type: ignore[attr-defined]
    exc.intervals = intervals  # type: ignore[attr-defined]
    return exc


def describe_hang(program: Program, csrs: Mapping[str, int], activity: Mapping[str, bool],
                  ) -> tuple[list[Wait], dict[str, str], dict[str, int], dict[str, int | None]]:
    """What each engine of a stuck core is doing, from its CSRs and activity bits.

    Per engine, the retired-instruction counter locates the next instruction of its
    stream in the program; an engine that is busy and stalled waits on a token of
    that instruction: a queue it pops whose tokens (pushed by the producer's retired
    instructions minus popped by the consumer's) ran out, else a queue it pushes.
    An engine that holds no instruction waits for fetch to dispatch its next one.

    Returns
    -------
    waits : list[Wait]
        By instruction index.
    engines : dict[str, str]
        One sentence per engine.
    retired : dict[str, int]
        Retired instructions per engine.
    last_retired : dict[str, int | None]
        Program index of each engine's last retired instruction.
    """
    streams: dict[Engine, list[tuple[int, Insn]]] = {e: [] for e in Engine}
    for i, insn in enumerate(program.insns):
        streams[insn.engine].append((i, insn))
    retired = {e: csrs[f"{ENGINE_NAMES[e].upper()}_INSNS"] for e in Engine}
    pushed = dict.fromkeys(QUEUE_NAMES, 0)
    popped = dict.fromkeys(QUEUE_NAMES, 0)
    for e in Engine:
        for _, insn in streams[e][: retired[e]]:
            for flag, q in PUSHES[e]:
                pushed[q] += bool(getattr(insn, flag))
            for flag, q in POPS[e]:
                popped[q] += bool(getattr(insn, flag))
    depth = program.config.dep_queue_depth
    waits: list[Wait] = []
    engines: dict[str, str] = {}
    last: dict[str, int | None] = {}
    for e in Engine:
        name = ENGINE_NAMES[e]
        stream, r = streams[e], retired[e]
        last[name] = stream[r - 1][0] if 0 < r <= len(stream) else None
        done = f"retired {r} of {len(stream)}" + (
            f" (last: instruction {last[name]})" if last[name] is not None else "")
        busy, stall = activity.get(f"{name}_busy"), activity.get(f"{name}_stall")
        if not stream:
            engines[name] = f"{name} engine has no instructions"
            continue
        if r >= len(stream):
            engines[name] = f"{name} engine finished ({done})"
            continue
        index, insn = stream[r]
        here = f"instruction {index} ({insn.mnemonic})"
        if busy and stall:
            mine = [Wait(name, index, insn.mnemonic, "pop", QUEUE_NAMES[q], flag)
                    for flag, q in POPS[e]
                    if getattr(insn, flag) and pushed[q] - popped[q] <= 0]
            if not mine:
                pushes = [(flag, q) for flag, q in PUSHES[e] if getattr(insn, flag)]
                full = [(f, q) for f, q in pushes if pushed[q] - popped[q] >= depth]
                mine = [Wait(name, index, insn.mnemonic, "push", QUEUE_NAMES[q], flag)
                        for flag, q in (full or pushes)]
            waits += mine
            what = "; ".join(w.describe() for w in mine) or f"{name} engine at {here} stalls"
            engines[name] = f"{what} ({done})"
        elif busy:
            units = [u for u in ("gemm", "alu") if name == "compute"
                     and activity.get(f"{u}_busy")]
            extra = f", {' and '.join(units)} busy" if units else ""
            engines[name] = (f"{name} engine at {here} is working (no token wait{extra}; "
                             f"{done})")
        else:
            w = Wait(name, index, insn.mnemonic, "fetch", "", "")
            waits.append(w)
            engines[name] = f"{w.describe()} ({done})"
    waits.sort(key=lambda w: w.index)
    return (waits, engines, {ENGINE_NAMES[e]: retired[e] for e in Engine}, last)


def load_plan(program: Program) -> list[tuple[int, Buffer]]:
    """Bytes each LOAD reads from DRAM (padding excluded), in load-engine order."""
    cfg = program.config
    return [(insn.y * insn.x * buffer_entry_bytes(cfg, insn.buffer), insn.buffer)
            for insn in program.insns if isinstance(insn, Load)]


def reset_uops(program: Program) -> int:
    """GEMM micro-op executions of the program that only reset accumulators."""
    return sum((g.uop_end - g.uop_begin) * g.iter_out * g.iter_in for g in program.insns
               if isinstance(g, Gemm) and g.reset)


def retired_counts(program: Program) -> dict[str, int]:
    """What the core's instruction and micro-op counters (LOAD_INSNS, COMPUTE_INSNS,
    STORE_INSNS, GEMM_BUSY, ALU_BUSY) hold after a run of ``program`` that finished:
    every instruction retires once and each loop executes ``uops × iter_out ×
    iter_in`` micro-ops (a fast reset zeroes as many entries). The counts of a core
    built without counters (:attr:`~tensorfab.isa.HwConfig.perf_counters` False)."""
    counts = dict.fromkeys(("LOAD_INSNS", "COMPUTE_INSNS", "STORE_INSNS", "GEMM_BUSY",
                            "ALU_BUSY"), 0)
    for insn in program.insns:
        counts[{Load: "LOAD_INSNS", Store: "STORE_INSNS"}.get(type(insn), "COMPUTE_INSNS")] += 1
        if isinstance(insn, Gemm | Alu):
            execs = (insn.uop_end - insn.uop_begin) * insn.iter_out * insn.iter_in
            counts["GEMM_BUSY" if isinstance(insn, Gemm) else "ALU_BUSY"] += execs
    return counts


def core_error(program: Program, image: np.ndarray, code: int, index: int) -> ProgramError:
    """The exception for the core's ERROR_CODE and ERROR_INDEX.

    For errors the fetch unit finds in the word itself the Python decoder explains the
    word (field at fault), as the functional simulator does; otherwise the message
    names the instruction and its engine.
    """
    try:
        err = ErrorCode(code)
    except ValueError:
        return ProgramError(f"the core reported the unknown error code {code} at "
                            f"instruction {index}", index=index)
    cfg = program.config
    n, nb, base = len(program.insns), program.insn_bytes, program.insn_base
    tag = f"reported by the core: ERROR_CODE={err.name}, ERROR_INDEX={index}"
    if not 0 <= index < n or base + (index + 1) * nb > image.size:
        engine = "compute" if err is ErrorCode.NO_FINISH else None
        what = ("the program does not end with FINISH" if err is ErrorCode.NO_FINISH
                else "error past the last instruction")
        return ProgramError(f"{what} ({tag})", code=err, index=index, engine=engine)
    word = int.from_bytes(image[base + index * nb:base + (index + 1) * nb].tobytes(),
                          "little")
    try:
        insn = decode_insn(word, cfg, index)
    except IllegalInstruction as exc:
        if err in _DECODE_CODES:
            return IllegalInstruction(f"{exc.detail} ({tag})", code=err, index=index,
                                      engine=exc.engine, field=exc.field)
        return ProgramError(f"{err.name} ({tag}); the word is also illegal: {exc.detail}",
                            code=err, index=index, engine=exc.engine, field=exc.field)
    engine = ENGINE_NAMES[insn.engine]
    msg = f"{insn.mnemonic}: {err.name} ({tag})"
    if err in _DECODE_CODES:
        return IllegalInstruction(msg, code=err, index=index, engine=engine)
    return ProgramError(msg, code=err, index=index, engine=engine)
