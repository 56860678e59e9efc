"""A cycle estimate of a built instruction stream: three in-order engines, dependency
tokens, in-order dispatch into bounded command queues and one shared memory bus.

One model for every user: the compiler's tile search
(:mod:`tensorfab.compiler.tensor.tile_search`) ranks its best analytic candidates by
it, :func:`tensorfab.compiler.tensor.tokens.dispatch_order` orders instructions by its
start times, and the ``timing`` device (:class:`.device.TimingSimulator`) reports its
cycles. It is an event simulation, not a cycle-accurate one:

* each instruction keeps its engine busy for fixed cycles (:class:`TimingParams`) and,
  for LOAD and STORE, for the bus beats it moves; beats of a LOAD and a STORE in
  flight at once share the bus equally (one beat per cycle in all);
* an instruction starts when its engine is free, fetch has dispatched it and the
  tokens it pops have been pushed (a token is pushed when its instruction ends);
* fetch dispatches in program order; an engine's queue holds ``cmd_queue_depth``
  instructions besides the one the engine holds;
* the fetch unit reads bursts of ``fetch_words / 2`` instruction words whenever it
  holds few enough (:attr:`TimingParams.fetch_held`), and dispatches a word only once
  its beats have arrived; the memory serves the bursts and the LOADs' reads in the
  order of their commands: a LOAD whose read command comes after a burst's gets its
  data after the burst's beats, and a burst requested while a long LOAD still has more
  than :attr:`TimingParams.read_window` beats to read lands among them (the rest of
  the LOAD waits for it);
* a STORE's write waits for the reads of the LOAD running when its data is ready
  (not for the LOADs after it: their reads queue behind the write);
* a LOAD into the accumulators shares the accumulator's write port with the compute
  engine's micro-ops (which take it first): from its first data on (its read latency
  needs no port) its padding moves in the cycles they leave free, its data needs one
  port cycle per entry of ``acc_entry_bytes / mem_bus_bytes`` beats;
* a LOAD walks its padded block (:func:`load_walk`): padding one entry per cycle, data
  as its beats arrive after the read latency;
* an ALU instruction's results leave its pipeline ``ALU_PIPELINE_STAGES`` cycles after
  its last micro-op: the compute engine takes its next instruction meanwhile, the
  tokens it pushes wait for them;
* an ALU instruction is held by the pipeline's interlock (:mod:`.alu_interlock`) when
  :func:`program_timing` is given the whole program (its micro-ops).

The constants of :data:`DEFAULT_TIMING` are calibrated against the RTL executor
(docs/compiler.md, "Timing model").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tensorfab.isa import (
    Alu,
    Buffer,
    Engine,
    Finish,
    Gemm,
    HwConfig,
    Insn,
    Load,
    Program,
    ProgramError,
    Store,
    buffer_entry_bytes,
    insn_width,
)
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

from .alu_interlock import alu_interlock_cycles

__all__ = ["DEFAULT_TIMING", "FAST_RESET_LANES", "Timing", "TimingParams",
           "estimated_cycles", "fast_reset", "insn_work", "load_walk", "program_timing",
           "simulate"]

_EPS = 1e-9
#: Register slices a read command and its data pass in the memory arbiter.
ARBITER_SLICES = 2
_QUEUE_INDEX = {q.name: k for k, q in enumerate(TOKEN_QUEUES)}
#: Per engine, ``(queue index, flag)`` of the queues it pops and pushes.
_POPS = {e: [(_QUEUE_INDEX[q], f) for f, q in token_pops(e)] for e in Engine}
_PUSHES = {e: [(_QUEUE_INDEX[q], f) for f, q in token_pushes(e)] for e in Engine}


@dataclass(frozen=True)
class TimingParams:
    """Constants of the model, in core clock cycles.

    Attributes
    ----------
    load_fixed : float
        Per LOAD besides its walk (:func:`load_walk`): decode, range check, the token
        push; measured as 3 on an isolated LOAD (the waits behind a STORE's write and
        the fetch unit's reads are modelled apart).
    store_fixed : float
        Per STORE besides its beats.
    compute_fixed : float
        Per GEMM or ALU instruction besides its micro-ops (micro-op read, pipeline
        fill and drain, tokens).
    start : float
        Cycles before the first instruction can start (the first instruction fetch).
    read_latency : float
        Cycles from the start of a LOAD's walk to its first data beat: the memory's
        read latency (:class:`tensorfab.sim.rtl.MemoryTiming`, 20 by default) and
        the arbiter's two register slices.
    outstanding : float
        Read commands in flight at once (the memory's ``max_outstanding``): rows of
        ``b`` beats arrive at most every ``(read_latency + b) / outstanding`` cycles.
    in_order_memory : bool
        The memory serves commands in order: a STORE's write waits for the reads of
        the LOAD running when it gets there, and a LOAD's reads for the beats of a
        write under way.
    fetch_words : int
        Instruction words the fetch unit requests or buffers at once
        (:class:`tensorfab.hw.fetch.Fetch`'s ``buffer_words``): it reads bursts of half
        as many words, each word ``insn_width / mem_bus_width`` beats on the bus.
    fetch_held : int
        Words the fetch unit holds outside its buffer (its stage and head registers):
        it requests the next burst once at most ``fetch_words / 2 + fetch_held`` words
        are requested and not dispatched.
    fetch_issue : float
        Cycles from the dispatch that makes room for a burst to the burst's read
        command at the memory.
    fetch_word : float
        Cycles from a word's last beat to its dispatch (the stage and head registers).
    load_command : float
        Cycles from the start of a LOAD to its first read command at the memory (a
        burst requested by the dispatch its start allows comes first).
    read_window : float
        Read beats a LOAD keeps in flight (:class:`tensorfab.hw.arbiter.MemArbiter`
        grants a load read while at most ``read_beats`` minus its longest burst, 64 -
        32, are in flight): a burst requested while more than these are still to come
        lands among the LOAD's reads.
    """

    load_fixed: float = 3.0
    store_fixed: float = 6.0
    compute_fixed: float = 9.0 + UOP_READ_STAGES  # calibrated as 10 with one read stage
    start: float = 30.0
    read_latency: float = 22.0
    outstanding: float = 16.0
    in_order_memory: bool = True
    fetch_words: int = 8
    fetch_held: int = 2
    fetch_issue: float = 4.0
    fetch_word: float = 2.0
    load_command: float = 5.0
    read_window: float = 32.0

    @classmethod
    def for_memory(cls, read_latency: int) -> TimingParams:
        """The constants for a memory of ``read_latency`` cycles (the RTL harness's
        :attr:`~tensorfab.sim.rtl.MemoryTiming.read_latency`; one beat per cycle)."""
        return cls(read_latency=read_latency + ARBITER_SLICES)


#: The calibrated model (docs/compiler.md).
DEFAULT_TIMING = TimingParams()


fast_reset = is_fast_reset  # the old name of the ISA's predicate


def insn_work(insn: Insn, cfg: HwConfig, params: TimingParams = DEFAULT_TIMING,
              entry_bytes: Mapping[Buffer, int] | None = None) -> tuple[float, float]:
    """``(fixed cycles, bus beats)`` of one instruction: how long it holds its engine
    (an ALU instruction's tokens are pushed ``ALU_PIPELINE_STAGES`` cycles later).

    ``entry_bytes`` gives :func:`~tensorfab.isa.buffer_entry_bytes` of each buffer when
    the caller has it (many instructions of one config)."""
    bus = cfg.mem_bus_bytes
    if isinstance(insn, Load):
        row = (entry_bytes[insn.buffer] if entry_bytes is not None
               else buffer_entry_bytes(cfg, insn.buffer))
        beats = -(-insn.x * row // bus)
        walk = load_walk(insn, beats, params)
        return params.load_fixed + walk - insn.y * beats, float(insn.y * beats)
    if isinstance(insn, Store):
        return params.store_fixed, float(insn.y * insn.x * cfg.out_entry_bytes // bus)
    if cfg.fast_reset and is_fast_reset(insn):
        lanes = fast_reset_lanes(cfg)
        lines = insn.iter_out * (math.ceil(insn.iter_in / lanes) + 1)
        return params.compute_fixed + lines, 0.0
    if isinstance(insn, Gemm | Alu):
        # an ALU instruction's pipeline drains beside the next one (its pushes wait)
        n = (insn.uop_end - insn.uop_begin) * insn.iter_out * insn.iter_in
        return params.compute_fixed + UOP_INDEX_STAGES + n, 0.0
    return 1.0, 0.0


def load_walk(insn: Load, row_beats: int, params: TimingParams = DEFAULT_TIMING) -> float:
    """Cycles the load engine's sequencer takes to walk ``insn``'s padded block.

    It writes one padding entry per cycle and the data as its beats arrive; the
    memory delivers the beats of all rows back to back, the first
    ``params.read_latency`` cycles after the walk starts (the padding before the first
    data row overlaps that latency).

    Parameters
    ----------
    insn : Load
        The instruction.
    row_beats : int
        Bus beats of one data row.
    params : TimingParams
        Constants.
    """
    cols = insn.cols
    t = float(insn.pad_top * cols)
    arrived = params.read_latency
    # one read command per row: at most `outstanding` in flight
    spacing = max(float(row_beats), (params.read_latency + row_beats) / params.outstanding)
    if insn.pad_left == insn.pad_right == 0 and t + row_beats <= arrived + spacing:
        # every row waits for its data (rows arrive no faster than they are written)
        return arrived + insn.y * spacing + insn.pad_bottom * cols
    for _ in range(insn.y):
        arrived += spacing
        t = max(t + insn.pad_left + row_beats, arrived) + insn.pad_right
    return t + insn.pad_bottom * cols


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
    stall : dict[str, float]
        Cycles each engine had its next instruction dispatched and waited for the
        tokens it pops (the RTL's ``stall``; the RTL's ``busy`` is ``busy + stall``).
    """

    cycles: float
    start: list[float]
    end: list[float]
    busy: dict[str, float]
    stall: dict[str, float] = field(default_factory=dict)


def simulate(insns: Sequence[Insn], cfg: HwConfig, params: TimingParams = DEFAULT_TIMING,
             *, fetch: bool = True, extra: Sequence[float] | None = None) -> Timing | None:
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
        Model in-order dispatch into bounded command queues and the fetch unit's reads
        on the bus; without it every instruction is available from the start (the
        order only each engine's own).
    extra : sequence of float, optional
        Cycles each instruction holds its engine beyond :func:`insn_work` (the ALU
        interlock's, :func:`.alu_interlock.alu_interlock_cycles`).
    """
    n = len(insns)
    if extra is not None and len(extra) != n:
        raise ValueError(f"simulate: {len(extra)} extra cycles for {n} instructions")
    entry_bytes = {b: buffer_entry_bytes(cfg, b) for b in Buffer}
    static: dict[Insn, tuple] = {}
    eng_of = [0] * n
    pops: list[tuple[int, ...]] = [()] * n
    pushes: list[tuple[int, ...]] = [()] * n
    fixed = [0.0] * n
    beats = [0.0] * n
    acc_load = [False] * n
    push_late = [0.0] * n  # cycles after its end an instruction's tokens are pushed
    # per LOAD into the accumulators: the fixed cycles left when it first writes them
    port_fixed = [0.0] * n
    # per compute instruction: the fraction of its micro-op cycles writing the
    # accumulators (the ALU interlock's bubbles write nothing)
    acc_writes = [0.0] * n
    streams: tuple[list[int], ...] = ([], [], [])
    pos = [0] * n  # position of each instruction in its engine's stream
    for i, insn in enumerate(insns):
        s = static.get(insn)
        if s is None:
            s = static[insn] = _insn_static(insn, cfg, params, entry_bytes)
        e, pops[i], pushes[i], f, b, acc_load[i], compute, push_late[i] = s
        eng_of[i] = e
        pos[i] = len(streams[e])
        streams[e].append(i)
        x = extra[i] if extra is not None else 0.0
        fixed[i] = f + x
        beats[i] = b
        if acc_load[i]:
            port_fixed[i] = max(0.0, f - params.load_fixed - params.read_latency)
        if compute:
            busy_uops = fixed[i] - params.compute_fixed
            acc_writes[i] = (min(1.0, max(0.0, (busy_uops - x) / busy_uops))
                             if busy_uops > _EPS else 0.0)
    ld, cp, st = int(Engine.LOAD), int(Engine.COMPUTE), int(Engine.STORE)
    engines = (ld, cp, st)
    stream_len = [len(s) for s in streams]
    depth = cfg.cmd_queue_depth
    in_order = params.in_order_memory
    acc_entry_beats = cfg.acc_entry_bytes / cfg.mem_bus_bytes
    compute_fixed = params.compute_fixed
    pushed: list[list[float]] = [[] for _ in TOKEN_QUEUES]
    popped = [0] * len(TOKEN_QUEUES)
    ptr = [0, 0, 0]
    run = [-1, -1, -1]  # instruction each engine runs (-1: idle)
    run_fixed = [0.0, 0.0, 0.0]
    run_beats = [0.0, 0.0, 0.0]
    start = [0.0] * n
    end = [0.0] * n
    busy_t = [0.0, 0.0, 0.0]
    stall_t = [0.0, 0.0, 0.0]
    dispatched = 0 if fetch else n
    writing = False  # the running STORE's write has begun
    behind = -1  # the LOAD whose reads the running STORE's write waits behind
    disp_t = [params.start] * n  # when fetch dispatched each instruction
    free_t = [params.start] * 3  # when each engine last became free
    t = params.start
    done = 0
    inf = math.inf
    # the fetch unit's reads in the memory's order: words requested, when each reaches
    # the dispatch, when the beats of the bursts so far have moved
    words = 0
    if fetch:  # FINISH's word too
        words = n if n and isinstance(insns[-1], Finish) else n + 1
    word_beats = -(-insn_width(cfg) // cfg.mem_bus_width)
    chunk = max(1, params.fetch_words // 2)
    room = params.fetch_words - chunk + params.fetch_held
    mem_latency = params.read_latency - ARBITER_SLICES  # command to first beat
    word_at: list[float] = []
    fetch_end = 0.0
    requested = 0
    while requested < min(words, params.fetch_words):  # the first bursts, from reset:
        w = min(chunk, words - requested)  # their commands at the memory 4, 5, ... cycles on
        begin = max(ARBITER_SLICES + 2.0 + requested // chunk + mem_latency, fetch_end)
        word_at += [begin + (j + 1) * word_beats + params.fetch_word for j in range(w)]
        fetch_end = begin + w * word_beats
        requested += w
    ld_command = -inf  # the running LOAD's first read command, and when its data ends
    ld_data_end = -inf
    window = params.read_window
    while done < n:
        started_ld = False
        fetch_wait = inf
        again = True
        while again:  # while a start or a burst lets fetch dispatch more
            again = False
            # fetch: dispatch in program order the words arrived while the target
            # queue has room
            while dispatched < n:
                k = pos[dispatched] - depth
                if k >= 0 and ptr[eng_of[dispatched]] <= k:
                    break
                if fetch and (dispatched >= requested or word_at[dispatched] > t + _EPS):
                    if dispatched < requested:
                        fetch_wait = word_at[dispatched]
                    break
                disp_t[dispatched] = t
                dispatched += 1
            starved = dispatched < n and dispatched >= requested
            # the next bursts: their command after a LOAD's that started before them,
            # before a LOAD's that starts now or later
            while requested < words and requested - dispatched <= room:
                w = min(chunk, words - requested)
                command = t + params.fetch_issue
                begin = max(command + mem_latency, fetch_end)
                if run[ld] >= 0 and ld_command <= command:
                    if run_beats[ld] > window:  # among the LOAD's reads: they wait for it
                        begin = max(begin, t + run_fixed[ld] + window)
                        run_fixed[ld] += w * word_beats
                        ld_data_end += w * word_beats
                    else:
                        begin = max(begin, ld_data_end)
                word_at += [begin + (j + 1) * word_beats + params.fetch_word
                            for j in range(w)]
                fetch_end = begin + w * word_beats
                requested += w
                again = starved
            # idle engines take their next instruction when dispatched and its tokens exist
            wake = inf
            for e in engines:
                if run[e] >= 0 or ptr[e] >= stream_len[e]:
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
                    at = pushed[q][popped[q]]
                    if at > ready_at:
                        ready_at = at
                if not ok:
                    continue
                if ready_at > t:
                    if ready_at < wake:
                        wake = ready_at
                    continue
                for q in pops[i]:
                    popped[q] += 1
                ptr[e] += 1
                start[i] = t
                stall_t[e] += t - max(free_t[e], disp_t[i])
                run[e] = i
                run_fixed[e] = fixed[i]
                run_beats[e] = beats[i]
                if dispatched < n and eng_of[dispatched] == e:
                    again = True  # its queue has room for the next word
                if e == st:
                    writing = False
                    behind = -1
                elif e == ld and in_order:
                    if run[st] >= 0 and writing:
                        run_fixed[e] += run_beats[st]  # its read waits for the write's beats
                    started_ld = True
                    ld_command = t + params.load_command
        if started_ld and fetch:
            # its data after the beats of the bursts whose commands came first
            run_fixed[ld] += max(0.0, fetch_end - (ld_command + mem_latency))
            ld_data_end = t + run_fixed[ld] + run_beats[ld]
        if fetch_wait < wake:
            wake = fetch_wait
        i_ld, i_cp, i_st = run
        if i_ld < 0 and i_cp < 0 and i_st < 0:
            if wake == inf:
                return None  # deadlock
            t = wake
            continue
        held = -1  # a store whose write waits for the load's reads ahead of it
        if i_st >= 0 and run_fixed[st] <= _EPS and not writing:
            if in_order and i_ld >= 0 and behind in (-1, i_ld):
                held = st
                behind = i_ld
            else:
                writing = True
        # a LOAD into the accumulators waits while the compute engine writes them: its
        # padding moves at the rate of the cycles the compute engine leaves the port
        # free, its data needs the port once per entry of `acc_entry_beats` beats (not
        # before its first data: the read latency needs no port)
        rate_ld = 1.0
        nxt = wake
        if i_ld >= 0 and i_cp >= 0 and acc_load[i_ld] and acc_writes[i_cp] > 0.0:
            tail = run_fixed[cp] - compute_fixed
            if tail > _EPS:
                before = run_fixed[ld] - port_fixed[i_ld]
                if before > _EPS:
                    nxt = min(nxt, t + before)
                else:
                    rate_ld = 1.0 - acc_writes[i_cp]
                    if run_fixed[ld] <= _EPS:
                        rate_ld = min(1.0, rate_ld * acc_entry_beats)
                    nxt = min(nxt, t + tail)
        share = 0
        for e in engines:
            if (run[e] >= 0 and run_fixed[e] <= _EPS and run_beats[e] > _EPS and e != held
                    and (e != ld or rate_ld > _EPS)):
                share += 1
        share = share or 1
        for e in engines:
            if run[e] < 0 or e == held:
                continue
            rate = rate_ld if e == ld else 1.0
            if rate <= _EPS:
                continue
            f = run_fixed[e]
            at = t + (f if f > _EPS else run_beats[e] * share) / rate
            if at < nxt:
                nxt = at
        dt = nxt - t
        for e in engines:
            if run[e] < 0:
                continue
            busy_t[e] += dt
            if e == held:
                continue
            rate = rate_ld if e == ld else 1.0
            if run_fixed[e] > _EPS:
                run_fixed[e] -= dt * rate
            else:
                run_beats[e] -= dt * rate / share
        t = nxt
        for e in engines:
            i = run[e]
            if i >= 0 and run_fixed[e] <= _EPS and run_beats[e] <= _EPS:
                end[i] = t
                for q in pushes[i]:
                    pushed[q].append(t + push_late[i])
                run[e] = -1
                free_t[e] = t
                done += 1
    busy = {e.name.lower(): busy_t[int(e)] for e in Engine}
    stall = {e.name.lower(): stall_t[int(e)] for e in Engine}
    # the last ALU instruction's results leave the pipeline after its end
    last = max(map(float.__add__, end, push_late), default=t)
    return Timing(cycles=last, start=start, end=end, busy=busy, stall=stall)


def _insn_static(insn: Insn, cfg: HwConfig, params: TimingParams,
                 entry_bytes: Mapping[Buffer, int]
                 ) -> tuple[int, tuple[int, ...], tuple[int, ...], float, float, bool, bool,
                            float]:
    """What :func:`simulate` needs of one instruction: its engine, the queues it pops
    and pushes, its fixed cycles and beats, whether it loads the accumulators, whether
    it runs micro-ops and how long after its end its tokens are pushed."""
    engine = insn.engine
    return (int(engine),
            tuple([q for q, f in _POPS[engine] if getattr(insn, f)]),
            tuple([q for q, f in _PUSHES[engine] if getattr(insn, f)]),
            *insn_work(insn, cfg, params, entry_bytes),
            isinstance(insn, Load) and insn.buffer is Buffer.ACC,
            isinstance(insn, Gemm | Alu),
            float(ALU_PIPELINE_STAGES) if isinstance(insn, Alu) else 0.0)


def estimated_cycles(insns: Sequence[Insn], cfg: HwConfig) -> int:
    """The model's cycles of ``insns`` (:func:`simulate` with the calibrated constants),
    rounded; 0 when the tokens deadlock."""
    timing = simulate(insns, cfg)
    return round(timing.cycles) if timing else 0


def program_timing(program: Program, params: TimingParams = DEFAULT_TIMING) -> Timing:
    """:func:`simulate` of a whole program, the ALU interlock included.

    Raises
    ------
    ProgramError
        If the program's tokens deadlock.
    """
    insns = [insn for insn in program.insns if not isinstance(insn, Finish)]
    timing = simulate(insns, program.config, params, extra=alu_interlock_cycles(program, insns))
    if timing is None:
        raise ProgramError("the timing model found the program's dependency tokens "
                           "deadlocked (a pop no instruction's push satisfies)")
    return timing
