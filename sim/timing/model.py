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
  tokens it pops have been pushed (a token is pushed when its instruction ends: the
  compute engine drains an ALU instruction's pipeline before it retires);
* fetch dispatches in program order, a word a cycle; an engine's queue holds
  ``cmd_queue_depth`` instructions besides the one the engine holds (an idle engine
  holds its next instruction while it waits for tokens);
* the memory serves commands in order, each placed in the memory's time: the fetch
  unit requests a burst of up to ``fetch_words / 2`` words once that many of its buffer
  words are free (a word leaves the buffer at its arrival while the stage and head
  registers are free, else at the dispatch that frees them); a LOAD issues a read
  command per row (split at :data:`LOAD_BURST` beats) a cycle while at most
  :attr:`TimingParams.read_window` read beats are in flight (:func:`_read_grants`);
  a burst commanded before a LOAD's first read delays its data, one commanded while
  the LOAD still issues reads lands among them (ties go to the fetch after a LOAD's
  command: the arbiter's round robin), each costing the LOAD what its walk's padding
  does not absorb (:func:`_walk_delay`: the delays so far counted, and the memory
  holding at most :data:`READ_BUFFER` beats the walk has not taken, so that a burst
  among a padded LOAD's reads waits for its walk);
* a STORE's write command goes to the memory a cycle after its data is ready and waits
  for the running LOAD's reads and the bursts commanded before it; a burst among its
  row writes holds the later rows; a LOAD whose first read comes after a write's
  command waits for the write's beats that outlast its read latency, one whose reads
  are granted after it has each served after the write's bursts commanded before it
  (the round robin alternates them); a LOAD whose reads the memory has all served
  takes its data from the read buffer (its beats share the bus with none);
* a LOAD into the accumulators shares the accumulator's write port with the compute
  engine's micro-ops, which take it first (a compute instruction's last cycles but
  :data:`ACC_WRITE_DRAIN`, after its pipeline's fill): each padding entry of its walk
  needs a free cycle, those before its first data while the data is on its way (the
  read latency runs on meanwhile), the others (between its rows and after its last)
  after its data phase; its data needs one port cycle per entry of ``acc_entry_bytes
  / mem_bus_bytes`` beats, and the last ``2 * acc_entry_beats - 1`` cycles of a run of
  compute writes cost it nothing (an entry waits in its write register, the load
  engine takes the next entry's beats but its last meanwhile); an ALU instruction's
  interlock bubbles break its writes into runs, each holding the data beyond that
  slack (:func:`.alu_interlock._port_held`);
* a LOAD walks its padded block (:func:`load_walk`): padding one entry per cycle, data
  as its beats arrive after the read latency;
* FINISH: the compute engine takes it after its last instruction and the tokens left
  for it, and the core is done :data:`FINISH_CYCLES` later (at least a cycle after the
  last LOAD or STORE);
* an ALU instruction is held by the pipeline's interlock (:mod:`.alu_interlock`) when
  :func:`program_timing` is given the whole program (its micro-ops).

The constants of :data:`DEFAULT_TIMING` are calibrated against the RTL executor
(docs/compiler.md, "Timing model").

The simulation is numba-compiled code (:func:`.compiled.compiled`) over the instruction
table of :mod:`.insn_table`; :func:`program_timing` makes one compiled call per program,
from the words the program keeps encoded when it has them (table, interlock and
simulation); ``NUMBA_DISABLE_JIT=1`` runs it as Python (docs/architecture.md, "The
timing model's compiled code").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields
from functools import cache, cached_property

import numpy as np

from tensorfab.isa import (
    Alu,
    Buffer,
    Engine,
    Finish,
    Gemm,
    HwConfig,
    Insn,
    Load,
    Opcode,
    Program,
    ProgramError,
    UsageError,
    buffer_entry_bytes,
    insn_width,
    uop_format,
)
from tensorfab.isa.formats import (
    ALU_PIPELINE_STAGES,
    ENGINE_OF,
    FAST_RESET_LANES,
    TOKEN_QUEUES,
    UOP_INDEX_STAGES,
    UOP_READ_STAGES,
)
from tensorfab.isa.insn import fast_reset_lanes, is_fast_reset

from . import alu_interlock
from . import insn_table as col
from .alu_interlock import fill_interlock_cycles, interlock_layout, table_interlock_cycles
from .compiled import compiled
from .insn_table import insn_table, uop_indices, word_fields, word_table

__all__ = ["DEFAULT_TIMING", "FAST_RESET_LANES", "Timing", "TimingParams",
           "compute_micro_ops", "estimated_program_cycles", "fast_reset",
           "insn_work", "load_walk", "program_timing", "simulate"]

#: Register slices a read command and its data pass in the memory arbiter.
ARBITER_SLICES = 2
#: The load engine's longest read command, in beats (:class:`tensorfab.hw.load.LoadEngine`'s
#: ``max_burst``): a longer row is read in several commands.
LOAD_BURST = 32
#: Cycles from the compute engine taking FINISH (after its last instruction and the
#: tokens FINISH pops) to the core's done: its start, its retire, the done register.
FINISH_CYCLES = 3
#: Cycles from a compute instruction's last accumulator write to its end (the GEMM's
#: write-back at S2+L, the ALU's at S7, then the retire): its writes come last, after
#: the pipeline's fill.
ACC_WRITE_DRAIN = 2
#: Read beats the memory produces ahead of the core taking them
#: (:attr:`tensorfab.sim.rtl.MemoryTiming.read_buffer`): a LOAD's beats not yet
#: taken by its walk hold up the beats commanded after them.
READ_BUFFER = 8
#: Cycles a requantizing STORE spends before its first data beyond a STORE's: its
#: three records read one a cycle and the last loaded a cycle later, the transfer's
#: start a cycle after that (:class:`tensorfab.hw.store.StoreEngine`), and its data's
#: four cycles through the requantization (:class:`tensorfab.hw.store_requant.StoreRequant`).
STORE_REQUANT = 9
#: Cycles an ALU instruction holds the compute engine beyond a GEMM of as many
#: micro-ops: its pipeline's register after the accumulator read (its other stages'
#: fill and drain take as long as the GEMM's, in ``compute_fixed``).
ALU_EXTRA_CYCLES = ALU_PIPELINE_STAGES - 4
#: Rows of a LOAD whose data delays the model follows one by one (the later rows share
#: the last's).
_ROW_DELAYS = 64


@dataclass(frozen=True)
class TimingParams:
    """Constants of the model, in core clock cycles.

    Attributes
    ----------
    load_fixed : float
        Per LOAD besides its walk (:func:`load_walk`): decode, range check, the token
        push, and the load engine's cycle between two instructions; measured as 3 on an
        isolated LOAD's busy interval (the waits behind a STORE's write and the fetch
        unit's reads are modelled apart).
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
        command at the memory, in the memory's time (the model's engine starts are 2
        cycles before the RTL's busy intervals; a word leaving the buffer at its
        arrival gives room 3 cycles before the command).
    fetch_word : float
        Cycles from a word's last beat to its dispatch (the stage and head registers).
    load_command : float
        Cycles from the model's start of a LOAD to its first read command at the
        memory (5 after its RTL busy interval starts, which is 2 after the model's).
    read_window : float
        Read beats a LOAD keeps in flight (:class:`tensorfab.hw.arbiter.MemArbiter`
        grants a load read while at most ``read_beats`` minus its longest burst, 64 -
        32, are in flight): a burst requested while more than these are still to come
        lands among the LOAD's reads.
    """

    load_fixed: float = 4.0
    store_fixed: float = 6.0
    compute_fixed: float = 9.0 + UOP_READ_STAGES  # calibrated as 10 with one read stage
    start: float = 30.0
    read_latency: float = 22.0
    outstanding: float = 16.0
    in_order_memory: bool = True
    fetch_words: int = 8
    fetch_held: int = 2
    fetch_issue: float = 6.0
    fetch_word: float = 2.0
    load_command: float = 7.0
    read_window: float = 32.0

    @classmethod
    def for_memory(cls, read_latency: int) -> TimingParams:
        """The constants for a memory of ``read_latency`` cycles (the RTL harness's
        :attr:`~tensorfab.sim.rtl.MemoryTiming.read_latency`; one beat per cycle).

        Raises
        ------
        UsageError
            ``read_latency`` is not an integer of 1 or more, as the RTL harness's.
        """
        if (not isinstance(read_latency, int) or isinstance(read_latency, bool)
                or not 1 <= read_latency < 1 << 32):
            raise UsageError(f"read_latency = {read_latency!r}: the memory's read latency "
                             "is a number of cycles, an integer from 1 to 2**32 - 1 (as "
                             "MemoryTiming.read_latency)")
        return cls(read_latency=read_latency + ARBITER_SLICES)


#: The calibrated model (docs/compiler.md).
DEFAULT_TIMING = TimingParams()


fast_reset = is_fast_reset  # the old name of the ISA's predicate
_ENGINES = [e.name.lower() for e in Engine]

# The compiled code reads every constant it does not own from two arrays (numba's
# cache is keyed by this file's source only, so nothing of another module may be
# compiled into it): the ISA's and the table's integers (_LAYOUT) and, per config and
# constants, the numbers of _constants().
# _LAYOUT: table columns, opcodes, engine of each opcode, Buffer.ACC, then per token
# queue (producer engine, push column, consumer engine, pop column)
_L_OPCODE, _L_X, _L_Y, _L_BUFFER, _L_PAD_TOP, _L_PAD_BOTTOM, _L_PAD_LEFT, _L_PAD_RIGHT, \
    _L_UOP_BEGIN, _L_UOP_END, _L_ITER_OUT, _L_ITER_IN, _L_FAST_RESET, _L_LOAD, _L_STORE, \
    _L_GEMM, _L_ALU, _L_ENGINE_OF, _L_ACC, _L_QUEUES, _L_STORE_REQUANT = (
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 22, 23, 39)
_LAYOUT = np.array(
    [col.OPCODE, col.X, col.Y, col.LOAD_BUFFER, col.LOAD_PAD_TOP, col.LOAD_PAD_BOTTOM,
     col.LOAD_PAD_LEFT, col.LOAD_PAD_RIGHT, col.UOP_BEGIN, col.UOP_END, col.ITER_OUT,
     col.ITER_IN, col.FAST_RESET, Opcode.LOAD, Opcode.STORE, Opcode.GEMM, Opcode.ALU,
     *[ENGINE_OF[Opcode(k)] for k in range(len(Opcode))], Buffer.ACC,
     *[v for q in TOKEN_QUEUES
       for v in (q.producer, getattr(col, q.push.upper()), q.consumer,
                 getattr(col, q.pop.upper()))], col.STORE_REQUANT], dtype=np.int64)
# _constants(): the TimingParams fields in order, then the config's and the ISA's
(_K_LOAD_FIXED, _K_STORE_FIXED, _K_COMPUTE_FIXED, _K_START, _K_READ_LATENCY,
 _K_OUTSTANDING, _K_IN_ORDER, _K_FETCH_WORDS, _K_FETCH_HELD, _K_FETCH_ISSUE, _K_FETCH_WORD,
 _K_LOAD_COMMAND, _K_READ_WINDOW) = range(13)
(_K_BUS_BYTES, _K_ENTRY_BYTES, _K_OUT_ENTRY_BYTES, _K_LANES, _K_DEPTH,
 _K_ACC_ENTRY_BEATS, _K_WORD_BEATS, _K_INDEX_STAGES, _K_ARBITER_SLICES, _K_LOAD_BURST,
 _K_FINISH, _K_ACC_DRAIN, _K_READ_BUFFER, _K_STORE_REQUANT, _K_ALU_EXTRA) = (
    13, 14, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30)

# the indices are literals (the compiled code keeps them): check them against the ISA
if (_L_ENGINE_OF + len(Opcode) != _L_ACC or _L_QUEUES != _L_ACC + 1
        or _L_QUEUES + 4 * len(TOKEN_QUEUES) != _L_STORE_REQUANT
        or _LAYOUT.size != _L_STORE_REQUANT + 1
        or len(fields(TimingParams)) != _K_READ_WINDOW + 1
        or _K_ENTRY_BYTES + len(Buffer) != _K_OUT_ENTRY_BYTES):
    raise ImportError("sim/timing/model.py: renumber the _L_* and _K_* indices for the "
                      "ISA's opcodes, buffers and token queues and TimingParams' fields")

#: What the compiled code reads of a config and constants, by the identity of both
#: (hashing a HwConfig takes longer than timing a short program): the numbers of
#: _constants(), the integers of _integers(), the micro-op word's bytes
_CONSTANTS: dict[tuple[int, int], tuple[HwConfig, TimingParams, np.ndarray, np.ndarray,
                                        int]] = {}


def _config_arrays(cfg: HwConfig, params: TimingParams
                   ) -> tuple[HwConfig, TimingParams, np.ndarray, np.ndarray, int]:
    """``_CONSTANTS``' entry of ``(cfg, params)``."""
    hit = _CONSTANTS.get((id(cfg), id(params)))
    if hit is not None and hit[0] is cfg and hit[1] is params:
        return hit
    if len(_CONSTANTS) > 64:
        _CONSTANTS.clear()
    hit = _CONSTANTS[id(cfg), id(params)] = (cfg, params, _new_constants(cfg, params),
                                             _integers(cfg), uop_format(cfg).bytes)
    return hit


#: The config, constants and arrays of the last _program_arrays call
_LAST: tuple = (None, None, None, None)


def _program_arrays(cfg: HwConfig, params: TimingParams) -> tuple[np.ndarray, np.ndarray]:
    """``(_constants(), _integers())`` of ``(cfg, params)``, those of the last call's
    pair without a look-up (a sweep times many programs of one config)."""
    global _LAST
    last = _LAST
    if last[0] is cfg and last[1] is params:
        return last[2], last[3]
    _, _, k, ints, _ = _config_arrays(cfg, params)
    _LAST = (cfg, params, k, ints)
    return k, ints


def _constants(cfg: HwConfig, params: TimingParams) -> np.ndarray:
    """The numbers the compiled code reads (the ``_K_*`` indices)."""
    return _config_arrays(cfg, params)[2]


# _integers(): where _LAYOUT, the interlock's layout and the words' field positions
# (.insn_table.word_fields) start in it, the micro-op depth, the accumulator index
# mask, then those three arrays
_I_LAYOUT, _I_INTERLOCK, _I_WORDS, _I_UOP_DEPTH, _I_ACC_MASK = range(5)


@cache
def _integers(cfg: HwConfig) -> np.ndarray:
    """The integers the compiled program entries read (the ``_I_*`` indices): one
    array, as each array argument costs a compiled call time."""
    parts = [_LAYOUT, interlock_layout(cfg), word_fields(cfg)]
    starts = np.cumsum([5] + [a.size for a in parts])
    return np.concatenate([[*starts[:3], cfg.uop_depth, cfg.acc_depth - 1], *parts]
                          ).astype(np.int64)


@cache
def _new_constants(cfg: HwConfig, params: TimingParams) -> np.ndarray:
    return np.array([*map(float, astuple(params)), cfg.mem_bus_bytes,
                     *[buffer_entry_bytes(cfg, b) for b in Buffer], cfg.out_entry_bytes,
                     fast_reset_lanes(cfg) if cfg.fast_reset else 0, cfg.cmd_queue_depth,
                     cfg.acc_entry_bytes / cfg.mem_bus_bytes,
                     -(-insn_width(cfg) // cfg.mem_bus_width),
                     UOP_INDEX_STAGES, ARBITER_SLICES, LOAD_BURST, FINISH_CYCLES,
                     ACC_WRITE_DRAIN, READ_BUFFER, STORE_REQUANT, ALU_EXTRA_CYCLES],
                    dtype=np.float64)


@compiled
def _data_slack(k: np.ndarray) -> float:
    """Cycles of the compute engine's accumulator writes an accumulator LOAD's data
    absorbs: an entry waits in the load engine's write register, the next one's beats
    but its last go into its shift register."""
    return 2.0 * k[_K_ACC_ENTRY_BEATS] - 1.0


@compiled
def _load_walk(top: int, bottom: int, left: int, right: int, x: int, y: int,
               row_beats: int, read_latency: float, outstanding: int) -> float:
    """:func:`load_walk` of a LOAD of these padding, ``x`` and ``y`` (scalars: a helper's
    array arguments would count references)."""
    cols = left + x + right
    t = float(top * cols)
    arrived = read_latency
    # one read command per row a cycle: the first `outstanding` rows' beats back to
    # back after the latency; with `outstanding` in flight, a row's command waits for
    # the one `outstanding` rows before it to complete
    spacing = float(row_beats)
    if y > outstanding:
        spacing = max(spacing, (read_latency + row_beats) / outstanding)
    if left == 0 and right == 0 and t + row_beats <= arrived + spacing:
        # every row waits for its data (rows arrive no faster than they are written)
        return arrived + y * spacing + bottom * cols
    for _ in range(y):
        arrived += spacing
        t = max(t + left + row_beats, arrived) + right
    return t + bottom * cols


@compiled(inline=True)
def _walk_delay(table: np.ndarray, i: int, row_beats: int, k: np.ndarray, lay: np.ndarray,
                from_row: int, delay: float, row_delay: np.ndarray,
                row_bursts: np.ndarray, in_row: float) -> float:
    """How much later :func:`load_walk` of row ``i`` of ``table`` ends when the data of its rows
    from ``from_row`` on arrives ``delay`` cycles later (less than ``delay`` when the
    walk's padding, not the data, keeps it busy), its rows' data being late by
    ``row_delay`` already (the delays so far, which this one is added to: a walk's
    slack absorbs them once) and ``row_bursts`` the beats of the bursts before each row
    so far; ``in_row`` beats of row ``from_row`` come before the delaying ones (a row
    read in several commands)."""
    pad_left = table[i, lay[_L_PAD_LEFT]]
    pad_right = table[i, lay[_L_PAD_RIGHT]]
    y = table[i, lay[_L_Y]]
    t = float(table[i, lay[_L_PAD_TOP]] * (pad_left + table[i, lay[_L_X]] + pad_right))
    read_latency = k[_K_READ_LATENCY]
    outstanding = int(k[_K_OUTSTANDING])
    spacing = float(row_beats)
    if y > outstanding:
        spacing = max(spacing, (read_latency + row_beats) / outstanding)
    if delay <= 0.0 or y <= from_row:
        return 0.0
    n = min(row_delay.size, y)  # (its last entry stands for the later rows)
    if pad_left == 0 and pad_right == 0 and t + row_beats <= read_latency + spacing:
        for r in range(min(from_row, n - 1), n):
            row_delay[r] += delay
        return delay  # every row waits for its data
    # the memory holds at most `READ_BUFFER` beats the walk has not taken: of the
    # delaying beats (those of all bursts before row `from_row`) all but that many
    # come after the walk has taken the rows before them, and the later rows' data
    # after them, a row after the other
    row_bursts[min(from_row, n - 1)] += delay
    queued = max(0.0, row_bursts[min(from_row, n - 1)] - k[_K_READ_BUFFER])
    last = 0.0  # the last entry's new delay (its old one stands for the later rows)
    arrived = read_latency
    late = t
    got = 0.0
    for r in range(y):
        arrived += spacing
        so_far = row_delay[min(r, n - 1)]
        t = max(t + pad_left + row_beats, arrived + so_far) + pad_right
        if r < from_row:
            got = arrived + so_far
        elif r == from_row and in_row > 0.0:
            got = max(arrived + so_far + delay, late + pad_left + row_beats + queued)
        elif r == from_row and r > 0:
            got = max(arrived + so_far + delay, late - pad_right + queued + row_beats)
        elif r == from_row:
            got = arrived + so_far + delay
        else:
            got = max(arrived + so_far + delay, got + row_beats)
        late = max(late + pad_left + row_beats, got) + pad_right
        if r >= from_row and r < n - 1:
            row_delay[r] = got - arrived
        elif r == n - 1:
            last = got - arrived
    if from_row <= n - 1:
        row_delay[n - 1] = last
    return late - t


@compiled
def _insn_works(table: np.ndarray, k: np.ndarray, lay: np.ndarray, fixed: np.ndarray,
                beats: np.ndarray) -> None:
    """:func:`insn_work` of each row of ``table`` into ``fixed`` and ``beats``."""
    bus = int(k[_K_BUS_BYTES])
    lanes = int(k[_K_LANES])
    for i in range(table.shape[0]):
        opcode = table[i, lay[_L_OPCODE]]
        beats[i] = 0.0
        if opcode == lay[_L_LOAD]:
            entry = int(k[_K_ENTRY_BYTES + table[i, lay[_L_BUFFER]]])
            b = -(-table[i, lay[_L_X]] * entry // bus)
            walk = _load_walk(table[i, lay[_L_PAD_TOP]], table[i, lay[_L_PAD_BOTTOM]],
                              table[i, lay[_L_PAD_LEFT]], table[i, lay[_L_PAD_RIGHT]],
                              table[i, lay[_L_X]], table[i, lay[_L_Y]], b,
                              k[_K_READ_LATENCY], int(k[_K_OUTSTANDING]))
            y = table[i, lay[_L_Y]]
            fixed[i] = k[_K_LOAD_FIXED] + walk - y * b
            beats[i] = float(y * b)
        elif opcode == lay[_L_STORE]:
            fixed[i] = k[_K_STORE_FIXED] + k[_K_STORE_REQUANT] * table[i, lay[_L_STORE_REQUANT]]
            beats[i] = float(table[i, lay[_L_Y]] * table[i, lay[_L_X]]
                             * int(k[_K_OUT_ENTRY_BYTES]) // bus)
        # (a config without the fast reset has 0 lanes: such a GEMM runs as any other)
        elif table[i, lay[_L_FAST_RESET]] and k[_K_LANES] > 0:
            lines = table[i, lay[_L_ITER_OUT]] * (
                math.ceil(table[i, lay[_L_ITER_IN]] / lanes) + 1)
            fixed[i] = k[_K_COMPUTE_FIXED] + lines
        elif opcode == lay[_L_GEMM] or opcode == lay[_L_ALU]:
            # an ALU instruction's pipeline drains before it retires
            n = ((table[i, lay[_L_UOP_END]] - table[i, lay[_L_UOP_BEGIN]])
                 * table[i, lay[_L_ITER_OUT]] * table[i, lay[_L_ITER_IN]])
            fixed[i] = k[_K_COMPUTE_FIXED] + k[_K_INDEX_STAGES] + n
            if opcode == lay[_L_ALU]:
                fixed[i] += k[_K_ALU_EXTRA]
        else:
            fixed[i] = 1.0


def insn_work(insn: Insn, cfg: HwConfig, params: TimingParams = DEFAULT_TIMING
              ) -> tuple[float, float]:
    """``(fixed cycles, bus beats)`` of one instruction: how long it holds its engine
    (its tokens are pushed at its end)."""
    fixed, beats = np.empty(1), np.empty(1)
    _insn_works(insn_table([insn]), _constants(cfg, params), _LAYOUT, fixed, beats)
    return fixed.item(), beats.item()


def compute_micro_ops(insns: Sequence[Insn], cfg: HwConfig) -> int:
    """Cycles the compute engine spends on the micro-ops of ``insns`` at one a cycle:
    each GEMM's and ALU instruction's micro-ops, and the lines of a fast reset.

    The floor under the program's cycles: :func:`insn_work` without the fixed cycles
    of each instruction, and none of the waits for loads, stores and tokens. For one
    workload and epilogue it hardly depends on the schedule (the GEMM micro-ops are
    the blocked MACs, the epilogue's ALU passes one per output entry each; only the
    fast reset's line count follows the tile shape)."""
    compute = [insn for insn in insns if type(insn) in (Gemm, Alu)]
    if not compute:
        return 0
    table = insn_table(compute)
    k = _constants(cfg, DEFAULT_TIMING)
    fixed, beats = np.empty(len(compute)), np.empty(len(compute))
    _insn_works(table, k, _LAYOUT, fixed, beats)
    fast = (table[:, col.FAST_RESET] != 0) & (k[_K_LANES] > 0)
    overhead = k[_K_COMPUTE_FIXED] + np.where(fast, 0.0, k[_K_INDEX_STAGES])
    return round(float((fixed - overhead).sum()))


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
    return _load_walk(insn.pad_top, insn.pad_bottom, insn.pad_left, insn.pad_right, insn.x,
                      insn.y, row_beats, float(params.read_latency),
                      int(float(params.outstanding)))


@compiled(inline=True)
def _row_commands(row_beats: float, burst: float) -> int:
    """Read commands of a row of ``row_beats`` beats split at ``burst`` (whole numbers:
    in integers, as a float floor division calls out of the compiled code)."""
    return max(1, -(-int(row_beats) // int(burst)))


@compiled(inline=True)
def _command_beats(col: int, row_beats: float, burst: float) -> float:
    """The beats of a LOAD's read command ``col`` of its row (of ``row_beats`` beats,
    read in commands of up to ``burst``)."""
    return min(burst, row_beats - col * burst)


@compiled(inline=True)
def _read_grants(first: float, skip: int, rows: int, row_beats: float, burst: float,
                 window: float, mem_latency: float, prior_begin: float, prior_end: float,
                 grant: np.ndarray, data_end: np.ndarray) -> int:
    """When the memory gets each read command of a LOAD (the arbiter's read budget).

    The commands (one per row, split at ``burst`` beats) from number ``skip`` on leave
    one per cycle from ``first`` on while at most ``window`` beats of the reads
    granted are not yet delivered (or none are); the memory delivers the beats in
    command order, one per cycle, a command's first ``mem_latency`` cycles after it.
    The reads before them are the beats of ``[prior_begin, prior_end)``. Fills
    ``grant`` and ``data_end`` (when each command's last beat is delivered) from
    ``skip`` on and returns the number of commands, or -1 when there are more than
    ``grant`` holds."""
    per_row = _row_commands(row_beats, burst)
    n = rows * per_row
    if n > grant.size:
        return -1
    prior = max(0.0, prior_end - prior_begin)
    granted = prior  # beats granted, the prior reads' included
    last_end = prior_end
    t = first
    head = skip  # the first command not wholly delivered by the cycle before t
    done = 0.0  # the beats of the commands before it
    # the command of its row each of c and head is (followed: no division a command)
    c_col = skip % per_row
    head_col = c_col
    for c in range(skip, n):
        b = _command_beats(c_col, row_beats, burst)
        if c > skip:
            t += 1.0
        # beats delivered by the cycle before t: the prior reads, then the commands
        # (each one's beats end at its data_end, back to back from its start)
        x = t - 1.0
        while head < c and data_end[head] <= x:
            done += _command_beats(head_col, row_beats, burst)
            head += 1
            head_col = head_col + 1 if head_col + 1 < per_row else 0
        delivered = min(prior, max(0.0, x - prior_begin)) + done
        if head < c:
            b_h = _command_beats(head_col, row_beats, burst)
            delivered += min(b_h, max(0.0, x - (data_end[head] - b_h)))
        if granted - delivered > window:
            # the cycle after the one in which `granted - window` beats are delivered
            need = granted - window
            cum = prior + done
            at = prior_begin + need
            if need > prior:
                j_col = head_col
                for j in range(head, c):
                    b_j = _command_beats(j_col, row_beats, burst)
                    if cum + b_j >= need:
                        at = data_end[j] - b_j + (need - cum)
                        break
                    cum += b_j
                    j_col = j_col + 1 if j_col + 1 < per_row else 0
            t = max(t, at + 1.0)
        grant[c] = t
        last_end = max(t + mem_latency, last_end) + b
        data_end[c] = last_end
        granted += b
        c_col = c_col + 1 if c_col + 1 < per_row else 0
    return n


class Timing:
    """What :func:`simulate` predicts, read from the compiled simulation's array when
    first asked for.

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

    def __init__(self, out: np.ndarray, n: int) -> None:
        self._out = out  # _simulate's array, of n instructions (it may be longer)
        self._n = n
        self.cycles: float = out.item(0)

    @cached_property
    def start(self) -> list[float]:
        """Each instruction's start."""
        return self._out[7:7 + self._n].tolist()

    @cached_property
    def end(self) -> list[float]:
        """Each instruction's end."""
        return self._out[7 + self._n:7 + 2 * self._n].tolist()

    @cached_property
    def busy(self) -> dict[str, float]:
        """Per engine, the cycles it ran an instruction."""
        return dict(zip(_ENGINES, self._out[1:4].tolist(), strict=True))

    @cached_property
    def stall(self) -> dict[str, float]:
        """Per engine, the cycles it waited for a token."""
        return dict(zip(_ENGINES, self._out[4:7].tolist(), strict=True))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Timing) and self._n == other._n
                and np.array_equal(self._out[:7 + 2 * self._n],
                                   other._out[:7 + 2 * other._n]))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"Timing(cycles={self.cycles}, busy={self.busy}, stall={self.stall}, "
                f"instructions={self._n})")


@compiled
def _simulate(table: np.ndarray, extra: np.ndarray, k: np.ndarray, lay: np.ndarray,
              fetch: bool, words: int, out: np.ndarray) -> None:
    """The event simulation of :func:`simulate` over ``table``, written to ``out`` (at
    least ``7 + 2 * n`` long): the cycles (-1 when the tokens deadlock), the busy then
    the stall cycles of each engine, then each instruction's start, then each one's
    end."""
    eps = 1e-9
    inf = math.inf
    n = table.shape[0]
    out[:7] = 0.0  # (every start and end is written)
    activity = out[1:7]
    start = out[7:7 + n]
    end = out[7 + n:7 + 2 * n]
    n_queues = (lay.size - _L_QUEUES) // 4
    load_fixed = k[_K_LOAD_FIXED]
    read_latency = k[_K_READ_LATENCY]
    compute_fixed = k[_K_COMPUTE_FIXED]
    fetch_words = int(k[_K_FETCH_WORDS])
    chunk = max(1, fetch_words // 2)
    # the working arrays are rows of three blocks (an allocation costs more than timing
    # a short program's instruction), zeroed where read before written
    width = max(n, words + chunk, 9 + 2 * n_queues)
    # (one allocation of the floats: `small` after the rows)
    n_reals = (9 + n_queues) * width
    floats = np.empty(n_reals + 137 + 2 * _ROW_DELAYS)
    reals = floats[:n_reals].reshape((9 + n_queues, width))
    ints = np.empty((10 + 2 * n_queues, width), np.int64)
    small = floats[n_reals:]
    small[:] = 0.0
    eng_of = ints[0]
    n_pops = ints[1]  # per instruction, the token queues it pops (pushes), in order
    n_pushes = ints[2]
    acc_load = ints[3]
    rows = ints[4]  # per LOAD and STORE: its rows
    pos = ints[5]  # position of each instruction in its engine's stream
    streams = ints[6:9]
    few = ints[9]
    pop_q = ints[10:10 + n_queues]
    push_q = ints[10 + n_queues:10 + 2 * n_queues]
    stream_len = few[0:3]
    ptr = few[3:6]
    run = few[6:9]  # instruction each engine runs (-1: idle)
    n_pushed = few[9:9 + n_queues]
    popped = few[9 + n_queues:9 + 2 * n_queues]
    fixed = reals[0]
    beats = reals[1]
    row_beats = reals[2]  # per LOAD: the beats of one data row
    # per LOAD into the accumulators, the padding entries of its walk (each needs the
    # port): before its first data (written while the data is on its way), and the
    # others, after its data phase (those between its rows with those after its last)
    early_pads = reals[3]
    post_pads = reals[7]
    # per compute instruction: the fraction of its micro-op cycles writing the
    # accumulators (the ALU interlock's bubbles write nothing)
    acc_writes = reals[4]
    # and the share of them in which its runs of writes hold a LOAD's data off the
    # port beyond the load engine's slack (the interlock's, .alu_interlock._port_held)
    port_held = reals[8]
    disp_t = reals[5]  # when fetch dispatched each instruction
    word_at = reals[6]
    pushed = reals[9:9 + n_queues]
    grant = small[0:64]
    grant_end = small[64:128]
    run_fixed = small[128:131]
    run_beats = small[131:134]
    free_t = small[134:137]  # when each engine last became free
    reals[2:5, :n] = 0.0
    port_held[:n] = 0.0
    post_pads[:n] = 0.0
    ints[1:3, :n] = 0
    rows[:n] = 0
    few[:] = 0
    _insn_works(table, k, lay, fixed, beats)
    for i in range(n):
        opcode = table[i, lay[_L_OPCODE]]
        e = lay[_L_ENGINE_OF + opcode]
        for q in range(n_queues):
            base = _L_QUEUES + 4 * q
            if lay[base] == e and table[i, lay[base + 1]] != 0:
                push_q[n_pushes[i], i] = q
                n_pushes[i] += 1
            if lay[base + 2] == e and table[i, lay[base + 3]] != 0:
                pop_q[n_pops[i], i] = q
                n_pops[i] += 1
        f = fixed[i]
        b = beats[i]
        eng_of[i] = e
        pos[i] = stream_len[e]
        streams[e, stream_len[e]] = i
        stream_len[e] += 1
        x = extra[0, i]
        fixed[i] = f + x
        beats[i] = b
        acc_load[i] = opcode == lay[_L_LOAD] and table[i, lay[_L_BUFFER]] == lay[_L_ACC]
        if opcode == lay[_L_LOAD] and table[i, lay[_L_Y]] > 0:
            row_beats[i] = b / table[i, lay[_L_Y]]
        if opcode == lay[_L_LOAD] or opcode == lay[_L_STORE]:
            rows[i] = table[i, lay[_L_Y]]
        if acc_load[i]:
            y = table[i, lay[_L_Y]]
            cols = table[i, lay[_L_PAD_LEFT]] + table[i, lay[_L_X]] + table[i, lay[_L_PAD_RIGHT]]
            early_pads[i] = table[i, lay[_L_PAD_TOP]] * cols + table[i, lay[_L_PAD_LEFT]]
            if y > 0:
                post_pads[i] = ((y - 1) * (table[i, lay[_L_PAD_LEFT]] + table[i, lay[_L_PAD_RIGHT]])
                                + table[i, lay[_L_PAD_RIGHT]] + table[i, lay[_L_PAD_BOTTOM]] * cols)
            else:
                early_pads[i] = (table[i, lay[_L_PAD_TOP]] + table[i, lay[_L_PAD_BOTTOM]]) * cols
            fixed[i] -= post_pads[i]
        if opcode == lay[_L_GEMM] or opcode == lay[_L_ALU]:
            busy_uops = fixed[i] - compute_fixed
            acc_writes[i] = (min(1.0, max(0.0, (busy_uops - x) / busy_uops))
                             if busy_uops > eps else 0.0)
            if busy_uops > eps:
                port_held[i] = min(1.0, extra[1, i] / busy_uops)
    ld, cp, st = 0, 1, 2
    depth = int(k[_K_DEPTH])
    in_order = k[_K_IN_ORDER] != 0.0
    acc_entry_beats = k[_K_ACC_ENTRY_BEATS]
    data_slack = _data_slack(k)
    acc_drain = k[_K_ACC_DRAIN]
    # the running LOAD into the accumulators: the end of its decode, its padding
    # entries before its first data still to write, whether it is in its walk's end
    ld_decode_end = -inf
    ld_early = 0.0
    ld_tail = False
    run[:] = -1
    busy_t = activity[:3]
    stall_t = activity[3:]
    dispatched = 0 if fetch else n
    writing = False  # the running STORE's write has begun, its first write command
    st_command = inf
    st_ready = inf  # when the running STORE's data was first ready to write
    behind = -1  # the LOAD whose reads the running STORE's write waits behind
    disp_t[:] = k[_K_START]
    free_t[:] = k[_K_START]
    t = k[_K_START]
    done = 0
    # the fetch unit's reads in the memory's order: words requested, when each reaches
    # the dispatch, when the beats of the bursts so far have moved
    word_beats = k[_K_WORD_BEATS]
    held_words = int(k[_K_FETCH_HELD])
    slices = k[_K_ARBITER_SLICES]
    mem_latency = read_latency - slices  # command to first beat
    fetch_end = 0.0
    fetch_begin = 0.0  # when the bursts' beats moving back to back until fetch_end began
    requested = 0
    while requested < min(words, fetch_words):  # the first bursts, from reset:
        w = min(chunk, words - requested)  # their commands at the memory 4, 5, ... cycles on
        begin = max(slices + 2.0 + requested // chunk + mem_latency, fetch_end)
        if begin > fetch_end + eps:
            fetch_begin = begin
        for j in range(w):
            word_at[requested + j] = begin + (j + 1) * word_beats + k[_K_FETCH_WORD]
        fetch_end = begin + w * word_beats
        requested += w
    ld_command = -inf  # the running LOAD's first read command, and when its data ends
    ld_data_end = -inf
    window = k[_K_READ_WINDOW]
    # the running LOAD's read commands at the memory and when each one's data ends
    # (ld_grants -1: too many to follow, the LOAD takes bursts while more than
    # `window` of its beats are to come)
    ld_grants = -1
    # the running LOAD's rows' data delays so far (by bursts before and among its
    # reads; the last entry for its later rows), and the bursts' beats before each row
    row_delay = small[137:137 + _ROW_DELAYS]
    row_bursts = small[137 + _ROW_DELAYS:137 + 2 * _ROW_DELAYS]
    last_burst = -inf  # the last burst's command, the last LOAD's last command before it
    last_ld_grant = -inf
    wake = inf
    while done < n:
        started_ld = False
        fetch_wait = inf
        again = True
        while again:  # while a start or a burst lets fetch dispatch more
            again = False
            # fetch: dispatch in program order the words arrived while the target
            # queue has room
            while dispatched < n:
                kq = pos[dispatched] - depth
                e = eng_of[dispatched]
                # an idle engine holds its next instruction while it waits for tokens
                held_e = ptr[e] + (1 if run[e] < 0 and ptr[e] < stream_len[e]
                                   and streams[e, ptr[e]] < dispatched else 0)
                if kq >= 0 and held_e <= kq:
                    break
                if fetch and (dispatched >= requested or word_at[dispatched] > t + eps):
                    if dispatched < requested:
                        fetch_wait = word_at[dispatched]
                    break
                if fetch and dispatched > 0 and disp_t[dispatched - 1] + 1.0 > t + eps:
                    fetch_wait = disp_t[dispatched - 1] + 1.0  # one word a cycle
                    break
                disp_t[dispatched] = t
                dispatched += 1
            starved = dispatched < n and dispatched >= requested
            # the next bursts: their command after a LOAD's that started before them,
            # before a LOAD's that starts now or later
            while requested < words:
                # room for a burst of w words: the word fetch_words - w before its
                # first has left the buffer (the fetch's stage and head take the
                # words that arrive while they are free), its command 3 cycles on
                w = min(chunk, words - requested)
                need = requested - fetch_words + w - 1
                if dispatched + held_words <= need:
                    break
                taken_at = word_at[need] - k[_K_FETCH_WORD]
                if taken_at > t + eps:
                    fetch_wait = min(fetch_wait, taken_at)
                    break
                command = max(disp_t[need - held_words] + k[_K_FETCH_ISSUE],
                              taken_at + 3.0)
                begin = max(command + mem_latency, fetch_end)
                if (run[ld] >= 0 and not started_ld and command <= ld_command + eps
                        and (command < ld_command - eps or last_burst < last_ld_grant)):
                    # before the running LOAD's first read (the round robin gives a
                    # tie to the fetch after a LOAD's command): its data after the burst
                    old_start = max(ld_command + mem_latency, fetch_end)
                    if command >= ld_command - eps:
                        ld_command += 1.0
                    extra = max(0.0, max(ld_command + mem_latency, begin + w * word_beats)
                                - old_start)
                    run_fixed[ld] += extra
                    ld_data_end += extra
                    i_ld = run[ld]
                    ld_grants = _read_grants(ld_command, 0, rows[i_ld], row_beats[i_ld],
                                             k[_K_LOAD_BURST], window, mem_latency,
                                             fetch_begin if begin <= fetch_end + eps
                                             else begin, begin + w * word_beats,
                                             grant, grant_end)
                elif run[ld] >= 0 and ld_command <= command:
                    shift = w * word_beats
                    if ld_grants > 0:
                        # (a tie with a later read goes to the fetch: the LOAD had
                        # the last grant)
                        among = (command < grant[ld_grants - 1] - eps
                                 or (command <= grant[ld_grants - 1] + eps
                                     and grant[0] < command - eps))
                    else:
                        among = run_beats[ld] > window
                    if among:  # among the LOAD's reads: the later ones wait for it
                        if ld_grants > 0:
                            rest = 0  # the LOAD's commands after the burst's
                            while rest < ld_grants and grant[rest] < command - eps:
                                begin = max(begin, grant_end[rest])
                                rest += 1
                            # the later commands wait for room beside its beats
                            i_ld = run[ld]
                            per_row = _row_commands(row_beats[i_ld], k[_K_LOAD_BURST])
                            late = _walk_delay(table, i_ld, int(row_beats[i_ld]), k, lay,
                                               rest // per_row, shift, row_delay,
                                               row_bursts,
                                               min(row_beats[i_ld], (rest % per_row)
                                                   * k[_K_LOAD_BURST]))
                            _read_grants(command + 1.0, rest, rows[i_ld], row_beats[i_ld],
                                         k[_K_LOAD_BURST], window, mem_latency,
                                         grant_end[0] - min(row_beats[i_ld],
                                                            k[_K_LOAD_BURST]),
                                         begin + shift, grant, grant_end)
                        else:
                            begin = max(begin, t + run_fixed[ld] + window)
                            late = shift
                        run_fixed[ld] += late
                        ld_data_end += late
                    else:
                        begin = max(begin, ld_data_end)
                i_st = run[st]
                if (writing and st_command <= command
                        and command < st_command + rows[i_st] - 1.0 - eps):
                    # among the running STORE's row writes: the later rows wait for it
                    run_fixed[st] = max(run_fixed[st], begin + w * word_beats - t
                                        - run_beats[st] / rows[i_st])
                if begin > fetch_end + eps:
                    fetch_begin = begin
                for j in range(w):
                    word_at[requested + j] = begin + (j + 1) * word_beats + k[_K_FETCH_WORD]
                fetch_end = begin + w * word_beats
                last_burst = command
                requested += w
                again = starved
            # idle engines take their next instruction when dispatched and its tokens exist
            wake = inf
            for e in range(3):
                if run[e] >= 0 or ptr[e] >= stream_len[e]:
                    continue
                i = streams[e, ptr[e]]
                if i >= dispatched:
                    continue
                ready_at = t
                ok = True
                for j in range(n_pops[i]):
                    q = pop_q[j, i]
                    if popped[q] >= n_pushed[q]:
                        ok = False
                        break
                    at = pushed[q, popped[q]]
                    if at > ready_at:
                        ready_at = at
                if not ok:
                    continue
                if ready_at > t:
                    if ready_at < wake:
                        wake = ready_at
                    continue
                for j in range(n_pops[i]):
                    popped[pop_q[j, i]] += 1
                ptr[e] += 1
                start[i] = t
                stall_t[e] += t - max(free_t[e], disp_t[i])
                run[e] = i
                run_fixed[e] = fixed[i]
                run_beats[e] = beats[i]
                if dispatched < n and eng_of[dispatched] == e:
                    again = True  # its queue has room for the next word
                if e == ld:
                    ld_decode_end = t + load_fixed
                    ld_early = early_pads[i]
                    ld_tail = False
                if e == st:
                    writing = False
                    st_command = inf
                    st_ready = inf
                    behind = -1
                elif e == ld and in_order:
                    if run[st] >= 0 and writing:
                        # its reads wait for the write's beats ahead of them, which
                        # move during its command's way and the read latency
                        run_fixed[e] += max(0.0, run_beats[st] - k[_K_LOAD_COMMAND]
                                            - mem_latency)
                    started_ld = True
                    last_ld_grant = grant[ld_grants - 1] if ld_grants > 0 else ld_command
                    ld_command = t + k[_K_LOAD_COMMAND]
        if started_ld and fetch:
            # its data after the beats of the bursts whose commands came first
            i_ld = run[ld]
            used = max(0, min(_ROW_DELAYS, rows[i_ld]))  # (the entries _walk_delay reads)
            row_delay[:used] = 0.0
            row_bursts[:used] = 0.0
            run_fixed[ld] += _walk_delay(table, i_ld, int(row_beats[i_ld]), k, lay, 0,
                                         fetch_end - (ld_command + mem_latency), row_delay,
                                         row_bursts, 0.0)
            ld_data_end = t + run_fixed[ld] + run_beats[ld]
            ld_grants = _read_grants(ld_command, 0, rows[i_ld], row_beats[i_ld],
                                     k[_K_LOAD_BURST], window, mem_latency, fetch_begin,
                                     fetch_end, grant, grant_end)
        if fetch_wait < wake:
            wake = fetch_wait
        i_ld = run[ld]
        i_cp = run[cp]
        i_st = run[st]
        if i_ld < 0 and i_cp < 0 and i_st < 0:
            if wake == inf:
                out[0] = -1.0  # deadlock
                return
            t = wake
            continue
        held = -1  # a store whose write waits for the load's reads ahead of it
        reads_end = inf  # when the memory has served them
        if i_st >= 0 and run_fixed[st] <= eps and not writing:
            if st_ready == inf:
                st_ready = t  # its write command at the memory a cycle on
            reads_end = -inf
            behind_ld = in_order and i_ld >= 0 and (behind == -1 or behind == i_ld)
            if behind_ld and fetch and ld_grants > 0:
                # the reads commanded before its write command (a cycle before its
                # data); the LOAD's later reads share the bus with the write's beats
                reads_end = -inf
                for c in range(ld_grants):
                    if grant[c] <= st_ready + 1.0 + eps:
                        reads_end = max(reads_end, grant_end[c])
            elif behind_ld:
                reads_end = inf
            if in_order and fetch and last_burst < st_ready - 1.0 - eps:
                # and the beats of the bursts whose commands came before its write
                # command (a cycle before its data)
                reads_end = max(reads_end, fetch_end)
            if reads_end > t + eps:
                held = st
                if behind_ld:
                    behind = i_ld
            else:
                reads_end = inf
                writing = True
                st_command = t - 1.0
                if in_order and i_ld >= 0 and ld_command > st_command + eps:
                    # a LOAD whose first read comes after the write's command: its
                    # data after the write's beats
                    late = max(0.0, t + run_beats[st] - (ld_command + mem_latency))
                    run_fixed[ld] += late
                    ld_data_end += late
                elif in_order and i_ld >= 0 and ld_grants > 0:
                    # the LOAD's reads granted after the write's command take turns
                    # with its bursts (the round robin; a row split at LOAD_BURST beats
                    # as the LOAD's): the memory serves each read after the write's
                    # beats commanded before it, and the read budget grants each
                    # later by those before the read ahead of it
                    burst = min(k[_K_LOAD_BURST], beats[i_st] / max(1, rows[i_st]))
                    ahead = 0.0
                    for c in range(ld_grants):
                        if grant[c] > st_command + eps:
                            grant[c] += ahead
                            ahead = min(run_beats[st], ahead + burst)
                            grant_end[c] += ahead
        # a LOAD into the accumulators shares their write port with the compute
        # engine, whose micro-ops take it first: each padding entry of its walk needs a
        # free cycle (those before its first data while the data is on its way: the
        # wait goes on meanwhile), its data one per entry of `acc_entry_beats` beats;
        # its decode and its waits for data need none
        rate_ld = 1.0
        rate_early = 0.0  # of its padding before its first data
        nxt = min(wake, reads_end)
        if i_ld >= 0 and acc_load[i_ld]:
            free = 1.0  # the share of cycles the compute engine leaves the port
            writes_left = 0.0  # the compute engine's run of writes still to come
            if i_cp >= 0 and acc_writes[i_cp] > 0.0:
                # its writes are its last cycles but `acc_drain`: before them (the
                # pipeline's fill) the port is free
                tail = run_fixed[cp] - acc_drain
                writes = fixed[i_cp] - compute_fixed
                if tail > writes + eps:
                    nxt = min(nxt, t + tail - writes)
                elif tail > eps:
                    free = 1.0 - acc_writes[i_cp]
                    writes_left = tail
            r = run_fixed[ld]
            if free >= 1.0:
                # the port is its own: its early padding runs down after its decode
                rate_early = -1.0
            elif r > eps and not ld_tail:  # its decode, early padding, wait for data
                if t < ld_decode_end - eps:
                    nxt = min(nxt, ld_decode_end)
                elif ld_early > eps:
                    rate_early = free
                    wait_left = r - ld_early  # the wait for data runs on meanwhile
                    if wait_left <= eps:
                        rate_ld = free
                    else:
                        nxt = min(nxt, t + wait_left / (1.0 - free))
                    if free > eps:
                        nxt = min(nxt, t + ld_early / free)
            elif r > eps:  # its padding after its data: an entry a free cycle
                rate_ld = free
            elif writes_left > data_slack + eps:
                # data: an entry a free cycle; the load engine holds an entry in its
                # write register and takes the next one's beats into its shift
                # register meanwhile, so the last `data_slack` cycles of the compute
                # engine's writes cost none
                rate_ld = min(1.0, free * acc_entry_beats)
                # an ALU instruction's interlock bubbles free the port between runs of
                # writes, but each run beyond the slack holds the data: its data at
                # the share of the instruction's cycles no such run holds
                rate_ld = min(rate_ld, 1.0 - port_held[i_cp])
                nxt = min(nxt, t + writes_left - data_slack)
            if free < 1.0:
                nxt = min(nxt, t + writes_left)
        # a LOAD whose reads the memory has all served takes its data from the read
        # buffer: its beats share the bus with none
        ld_served = (i_ld >= 0 and in_order and ld_grants > 0
                     and grant_end[ld_grants - 1] <= t + eps)
        share = 0
        for e in range(3):
            if (run[e] >= 0 and run_fixed[e] <= eps and run_beats[e] > eps and e != held
                    and (e != ld or (rate_ld > eps and not ld_served))):
                share += 1
        if share == 0:
            share = 1
        if share > 1 and i_ld >= 0 and ld_grants > 0 and not ld_served:
            nxt = min(nxt, grant_end[ld_grants - 1])
        for e in range(3):
            if run[e] < 0 or e == held:
                continue
            rate = rate_ld if e == ld else 1.0
            if rate <= eps:
                continue
            f = run_fixed[e]
            left = f if f > eps else run_beats[e] * (1 if e == ld and ld_served else share)
            at = t + (left if rate == 1.0 else left / rate)  # (no division by 1: slow)
            if at < nxt:
                nxt = at
        dt = nxt - t
        for e in range(3):
            if run[e] < 0:
                continue
            busy_t[e] += dt
            if e == held:
                continue
            moved = dt if e != ld or rate_ld == 1.0 else dt * rate_ld
            if run_fixed[e] > eps:
                run_fixed[e] -= moved
            else:
                on_bus = 1 if e == ld and ld_served else share
                run_beats[e] -= moved if on_bus == 1 else moved / on_bus
        if rate_early < 0.0:
            ld_early = max(0.0, ld_early - max(0.0, nxt - max(t, ld_decode_end)))
        else:
            ld_early = max(0.0, ld_early - dt * rate_early)
        t = nxt
        for e in range(3):
            i = run[e]
            if (e == ld and i >= 0 and not ld_tail and run_fixed[e] <= eps
                    and run_beats[e] <= eps and post_pads[i] > 0.0):
                ld_tail = True  # its walk's padding after its last data
                run_fixed[e] = post_pads[i]
            if i >= 0 and run_fixed[e] <= eps and run_beats[e] <= eps:
                end[i] = t
                for j in range(n_pushes[i]):
                    q = push_q[j, i]
                    pushed[q, n_pushed[q]] = t
                    n_pushed[q] += 1
                run[e] = -1
                free_t[e] = t
                done += 1
    # FINISH: the compute engine takes it after its last instruction and the tokens
    # pushed to it and not popped, and the core is done `finish` cycles on; the load
    # and store engines a cycle after their last instruction
    finish = free_t[cp]
    for q in range(n_queues):
        if lay[_L_QUEUES + 4 * q + 2] == cp:
            for j in range(popped[q], n_pushed[q]):
                finish = max(finish, pushed[q, j])
    out[0] = finish + k[_K_FINISH]
    for i in range(n):
        if eng_of[i] != cp and end[i] + 1.0 > out[0]:
            out[0] = end[i] + 1.0
    return out


def _run(table: np.ndarray, cfg: HwConfig, params: TimingParams, fetch: bool,
         extra: np.ndarray, words: int) -> Timing | None:
    """:func:`_simulate` of ``table``, as a :class:`Timing`."""
    n = table.shape[0]
    out = np.empty(7 + 2 * n)
    _simulate(table, extra, _constants(cfg, params), _LAYOUT, fetch, words, out)
    return None if out[0] < 0 else Timing(out, n)


@compiled(uses=(alu_interlock,))
def _table_program_simulate(table: np.ndarray, uop_acc: np.ndarray, uop_src: np.ndarray,
                            k: np.ndarray, ints: np.ndarray, uop_base: int,
                            out: np.ndarray) -> int:
    """:func:`_simulate` of a program's table with its ALU interlock
    (:func:`.alu_interlock.fill_interlock_cycles`, the micro-ops a UOP load copies from
    DRAM entry ``a`` being ``uop_acc/src[a - uop_base]``) into ``out``; ``ints`` is
    :func:`_integers`. Returns the number of instructions, or -1 when an ALU
    instruction needs micro-ops from elsewhere in the DRAM image (``uop_base`` -1: the
    table's are not whole entries there; or a UOP load reads outside it)."""
    lay = ints[ints[_I_LAYOUT]:ints[_I_INTERLOCK]]
    n = table.shape[0]
    extra = np.zeros((2, n))
    if _has_alu(table, lay) and (uop_base < 0 or not fill_interlock_cycles(
            table, uop_acc, uop_src, uop_base, True, ints[_I_UOP_DEPTH], ints[_I_ACC_MASK],
            ints[ints[_I_INTERLOCK]:ints[_I_WORDS]], _data_slack(k),
            extra)):
        return -1
    _simulate(table, extra, k, lay, True, n + 1, out)
    return n


@compiled
def _has_alu(table: np.ndarray, lay: np.ndarray) -> bool:
    """Whether ``table`` holds an ALU instruction."""
    for i in range(table.shape[0]):  # noqa: SIM110 (numba compiles no generator)
        if table[i, lay[_L_OPCODE]] == lay[_L_ALU]:
            return True
    return False


@compiled(uses=(col, alu_interlock))
def _words_program_simulate(insns: np.ndarray, uops: np.ndarray, k: np.ndarray,
                            ints: np.ndarray, uop_offset: int, out: np.ndarray) -> int:
    """:func:`_table_program_simulate` of a program's encoded words
    (:meth:`Program.encoded`, its micro-ops at byte ``uop_offset``), decoded by
    :func:`.insn_table.word_table` and :func:`.insn_table.uop_indices` (the micro-ops
    only for a program with ALU instructions)."""
    wf = ints[ints[_I_WORDS]:]
    table = word_table(insns, wf)
    uop_bytes = uops.shape[1]
    uop_base = -1
    if uops.shape[0] and uop_offset % uop_bytes == 0:
        uop_base = uop_offset // uop_bytes
    if _has_alu(table, ints[ints[_I_LAYOUT]:ints[_I_INTERLOCK]]):
        acc, src = uop_indices(uops, wf)
    else:
        acc, src = uop_indices(uops[:0], wf)
    return _table_program_simulate(table, acc, src, k, ints, uop_base, out)


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
    words = 0
    if fetch:  # FINISH's word too
        words = n if n and isinstance(insns[-1], Finish) else n + 1
    extra_cycles = np.zeros((2, n))  # (the port's runs of writes unknown)
    if extra is not None:
        extra_cycles[0] = extra
    return _run(insn_table(insns), cfg, params, fetch, extra_cycles, words)


def estimated_program_cycles(program: Program) -> int:
    """The model's cycles of a whole program (:func:`program_timing` with the
    calibrated constants: the ALU interlock included, which :func:`simulate` of its
    instructions alone leaves out), rounded; 0 when its tokens deadlock."""
    try:
        return round(program_timing(program).cycles)
    except ProgramError:
        return 0


def program_timing(program: Program, params: TimingParams = DEFAULT_TIMING) -> Timing:
    """:func:`simulate` of a whole program, the ALU interlock included.

    One compiled call, from the program's encoded words where it keeps them
    (:meth:`Program.kept_encoded <tensorfab.isa.Program.kept_encoded>`: an executor
    has loaded it, or it was written out), else from its instruction objects
    (:func:`.insn_table.insn_table`, which costs less than encoding them).

    Raises
    ------
    ProgramError
        If the program's tokens deadlock.
    """
    k, ints = _program_arrays(program.config, params)
    words = program.kept_encoded()
    if words is not None:
        out = np.empty(7 + 2 * len(words.insns))  # (len: no shape tuple)
        n = _words_program_simulate(words.insns, words.uops, k, ints, words.uop_offset, out)
    else:
        insns = [insn for insn in program.insns if type(insn) is not Finish]
        uops = program.uops if any(type(insn) is Alu for insn in insns) else []
        uop_bytes = _config_arrays(program.config, params)[4]
        base, rem = divmod(program.uop_offset, uop_bytes) if uops else (-1, 0)
        out = np.empty(7 + 2 * len(insns))
        n = _table_program_simulate(
            insn_table(insns), np.array([u.acc for u in uops], dtype=np.int64),
            np.array([u.src for u in uops], dtype=np.int64), k, ints, -1 if rem else base,
            out)
    if n < 0:  # the interlock reads micro-ops of the DRAM image
        insns = [insn for insn in program.insns if type(insn) is not Finish]
        table = insn_table(insns)
        n = len(insns)
        out = np.empty(7 + 2 * n)
        _simulate(table, table_interlock_cycles(program, table,
                                                _data_slack(k)),
                  k, _LAYOUT, True, n + 1, out)
    timing = Timing(out, n)
    if timing.cycles < 0:  # (a float's compare: quicker than reading out[0])
        raise ProgramError("the timing model found the program's dependency tokens "
                           "deadlocked (a pop no instruction's push satisfies)")
    return timing
