"""A cycle estimate of a built instruction stream: three in-order engines, dependency
tokens, in-order dispatch into bounded command queues and one shared memory bus.

The tile search (:mod:`.tile_search`) ranks its best analytic candidates by this
model, and :func:`.tokens.dispatch_order` orders instructions by its start times. It is
an event simulation, not a cycle-accurate one:

* each instruction keeps its engine busy for fixed cycles (:class:`TimingParams`) and,
  for LOAD and STORE, for the bus beats it moves; beats of a LOAD and a STORE in
  flight at once share the bus equally (one beat per cycle in all);
* an instruction starts when its engine is free, fetch has dispatched it and the
  tokens it pops have been pushed (a token is pushed when its instruction ends);
* fetch dispatches in program order; an engine's queue holds ``cmd_queue_depth``
  instructions besides the one the engine holds.

The constants of :data:`DEFAULT_TIMING` are calibrated against the RTL executor
(docs/compiler.md, "Cost model calibration").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tensorfab.isa import Alu, Engine, Gemm, HwConfig, Insn, Load, Store, buffer_entry_bytes
from tensorfab.isa.formats import (
    ALU_PIPELINE_STAGES,
    FAST_RESET_LANES,
    TOKEN_QUEUES,
    UOP_INDEX_STAGES,
    UOP_READ_STAGES,
    token_pops,
    token_pushes,
)
from tensorfab.isa.insn import fast_reset_lanes, is_fast_reset

__all__ = ["DEFAULT_TIMING", "FAST_RESET_LANES", "Timing", "TimingParams",
           "estimated_cycles", "fast_reset", "insn_work", "simulate"]

_EPS = 1e-9
_POPS = {e: [(q, f) for f, q in token_pops(e)] for e in Engine}
_PUSHES = {e: [(q, f) for f, q in token_pushes(e)] for e in Engine}


@dataclass(frozen=True)
class TimingParams:
    """Constants of the model, in core clock cycles.

    Attributes
    ----------
    load_fixed : float
        Per LOAD besides its beats: decode, range check, the memory's read latency,
        the token push.
    pad_entry : float
        Per padding entry a LOAD writes (the load engine writes one per cycle).
    store_fixed : float
        Per STORE besides its beats.
    compute_fixed : float
        Per GEMM or ALU instruction besides its micro-ops (micro-op read, pipeline
        fill and drain, tokens).
    start : float
        Cycles before the first instruction can start (the first instruction fetch).
    read_latency : float
        Cycles from a read command to its first beat.
    outstanding : float
        Read commands in flight at once (the memory arbiter's limit): a LOAD whose rows
        are ``b`` beats long moves at most ``outstanding · b / (read_latency + b)``
        beats per cycle.
    """

    load_fixed: float = 24.0
    pad_entry: float = 1.0
    store_fixed: float = 6.0
    compute_fixed: float = 9.0 + UOP_READ_STAGES  # calibrated as 10 with one read stage
    start: float = 30.0
    read_latency: float = 20.0
    outstanding: float = 16.0


#: The calibrated model (docs/compiler.md).
DEFAULT_TIMING = TimingParams()


fast_reset = is_fast_reset  # the old name of the ISA's predicate


def insn_work(insn: Insn, cfg: HwConfig, params: TimingParams = DEFAULT_TIMING
              ) -> tuple[float, float]:
    """``(fixed cycles, bus beats)`` of one instruction."""
    bus = cfg.mem_bus_bytes
    if isinstance(insn, Load):
        row = insn.x * buffer_entry_bytes(cfg, insn.buffer) // bus
        rate = min(1.0, params.outstanding * row / (params.read_latency + row))
        pad = insn.rows * insn.cols - insn.y * insn.x
        return params.load_fixed + params.pad_entry * pad, insn.y * row / rate
    if isinstance(insn, Store):
        return params.store_fixed, float(insn.y * insn.x * cfg.out_entry_bytes // bus)
    if is_fast_reset(insn):
        lanes = fast_reset_lanes(cfg)
        lines = insn.iter_out * (math.ceil(insn.iter_in / lanes) + 1)
        return params.compute_fixed + lines, 0.0
    if isinstance(insn, Gemm | Alu):
        n = (insn.uop_end - insn.uop_begin) * insn.iter_out * insn.iter_in
        drain = ALU_PIPELINE_STAGES if isinstance(insn, Alu) else 0
        return params.compute_fixed + UOP_INDEX_STAGES + drain + n, 0.0
    return 1.0, 0.0


@dataclass
class Timing:
    """What :func:`simulate` predicts.

    Attributes
    ----------
    cycles : float
        Until the last instruction ends.
    start, end : list[float]
        Per instruction.
    busy : dict[str, float]
        Cycles each engine held an instruction that was running (token waits
        excluded).
    """

    cycles: float
    start: list[float]
    end: list[float]
    busy: dict[str, float]


def simulate(insns: Sequence[Insn], cfg: HwConfig, params: TimingParams = DEFAULT_TIMING,
             *, fetch: bool = True) -> Timing | None:
    """Estimate the cycles of ``insns`` (see the module docstring); ``None`` when the
    tokens deadlock (a pop no instruction can satisfy).

    Parameters
    ----------
    insns : sequence of Insn
        The program's instructions in program order (FINISH may be left out).
    cfg : HwConfig
        The configuration (bus width, command-queue depth).
    params : TimingParams
        Constants.
    fetch : bool
        Model in-order dispatch into bounded command queues; without it every
        instruction is available from the start (the order only each engine's own).
    """
    n = len(insns)
    engines = list(Engine)
    n_eng = len(engines)
    eng_of = [int(insn.engine) for insn in insns]
    queues = [q.name for q in TOKEN_QUEUES]
    q_index = {q: k for k, q in enumerate(queues)}
    # per instruction: queues it pops and pushes (indices)
    pops = [tuple(q_index[q] for q, f in _POPS[insn.engine] if getattr(insn, f))
            for insn in insns]
    pushes = [tuple(q_index[q] for q, f in _PUSHES[insn.engine] if getattr(insn, f))
              for insn in insns]
    streams: list[list[int]] = [[] for _ in range(n_eng)]
    pos = [0] * n  # position of each instruction in its engine's stream
    for i, e in enumerate(eng_of):
        pos[i] = len(streams[e])
        streams[e].append(i)
    work_cache: dict[Insn, tuple[float, float]] = {}
    work = []
    for insn in insns:
        w = work_cache.get(insn)
        if w is None:
            w = work_cache[insn] = insn_work(insn, cfg, params)
        work.append(w)
    depth = cfg.cmd_queue_depth
    pushed: list[list[float]] = [[] for _ in queues]
    popped = [0] * len(queues)
    ptr = [0] * n_eng
    n_taken = [0] * n_eng
    run_i = [-1] * n_eng  # instruction each engine runs (-1: idle)
    run_fixed = [0.0] * n_eng
    run_beats = [0.0] * n_eng
    start = [0.0] * n
    end = [0.0] * n
    busy_t = [0.0] * n_eng
    dispatched = 0 if fetch else n
    t = params.start
    done = 0
    inf = math.inf
    while done < n:
        # fetch: dispatch in program order while the target queue has room
        while dispatched < n:
            k = pos[dispatched] - depth
            if k >= 0 and n_taken[eng_of[dispatched]] <= k:
                break
            dispatched += 1
        # idle engines take their next instruction when dispatched and its tokens exist
        wake = inf
        for e in range(n_eng):
            if run_i[e] >= 0 or ptr[e] >= len(streams[e]):
                continue
            i = streams[e][ptr[e]]
            if i >= dispatched:
                continue
            ready_at = t
            ok = True
            for q in pops[i]:
                if popped[q] >= len(pushed[q]):
                    ok = False
                    break
                ready_at = max(ready_at, pushed[q][popped[q]])
            if not ok:
                continue
            if ready_at > t:
                wake = min(wake, ready_at)
                continue
            for q in pops[i]:
                popped[q] += 1
            n_taken[e] += 1
            ptr[e] += 1
            start[i] = t
            run_i[e] = i
            run_fixed[e], run_beats[e] = work[i]
        active = [e for e in range(n_eng) if run_i[e] >= 0]
        if not active:
            if wake == inf:
                return None  # deadlock
            t = wake
            continue
        share = sum(1 for e in active if run_fixed[e] <= _EPS and run_beats[e] > _EPS) or 1
        nxt = wake
        for e in active:
            f = run_fixed[e]
            nxt = min(nxt, t + (f if f > _EPS else run_beats[e] * share))
        dt = nxt - t
        for e in active:
            busy_t[e] += dt
            if run_fixed[e] > _EPS:
                run_fixed[e] -= dt
            else:
                run_beats[e] -= dt / share
        t = nxt
        for e in active:
            if run_fixed[e] <= _EPS and run_beats[e] <= _EPS:
                i = run_i[e]
                end[i] = t
                for q in pushes[i]:
                    pushed[q].append(t)
                run_i[e] = -1
                done += 1
    busy = {e.name.lower(): busy_t[int(e)] for e in engines}
    return Timing(cycles=max(end, default=t), start=start, end=end, busy=busy)


def estimated_cycles(insns: Sequence[Insn], cfg: HwConfig) -> int:
    """The model's cycles of ``insns`` (:func:`simulate` with the calibrated constants),
    rounded; 0 when the tokens deadlock."""
    timing = simulate(insns, cfg)
    return round(timing.cycles) if timing else 0
