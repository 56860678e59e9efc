"""A deliberately naive reference interpreter of the ISA, written from docs/isa.md.

It exists to check the fast functional simulator (``tensorfab.sim``), so it shares
no code with it: only the :mod:`tensorfab.isa` data classes, the config, and
``Program.dram_image()`` / ``Program.layout()`` (through the image). Everything is
plain Python integers and loops, one micro-op iteration at a time:

* buffers are ``bytearray`` s holding entries in their DRAM layout (inp and wgt
  int8, acc little-endian int32, uop the micro-op words), so LOAD is a byte copy
  and the arithmetic unpacks entries with :mod:`struct`;
* micro-op words are decoded here from the field order of docs/isa.md (``acc``,
  ``src``, ``wgt`` from bit 0 up, widths from the buffer depths);
* the ALU operations are the table of docs/isa.md on Python integers, wrapped to
  int32 afterwards;
* the machine is the one of *Machine model*: a fetch unit dispatching in program
  order into per-engine command queues (each engine holds ``cmd_queue_depth``
  queued instructions plus the one it executes), three in-order engines, and four
  token queues of ``dep_queue_depth`` tokens. An instruction pops all its tokens
  (waiting while a queue is empty), executes at once, then pushes its tokens as
  room appears. A scheduler (round robin or seeded random) picks which of fetch and
  the engines acts next, so different legal interleavings can be compared. The
  buffers start as zeros or, optionally, random junk.

Errors are :class:`ReferenceFailure` subclasses; the interpreter checks every index
against its range (programs given to it are expected to be legal) and reports
deadlocks and leftover tokens, but does not look for races.
"""

from __future__ import annotations

import random
import struct
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from tensorfab.isa import Alu, AluOp, Buffer, Finish, Gemm, Insn, Load, Program, Store
from tensorfab.isa import uop_format as _uop_format

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

#: Engine of each instruction class (docs/isa.md, *Machine model*).
LOAD_ENGINE, COMPUTE_ENGINE, STORE_ENGINE = "load", "compute", "store"
ENGINES = (LOAD_ENGINE, COMPUTE_ENGINE, STORE_ENGINE)

#: ``(engine, flag) -> queue``: which queue a dependency flag pops or pushes.
POP_QUEUE = {(LOAD_ENGINE, "pop_next"): "c2l",
             (COMPUTE_ENGINE, "pop_prev"): "l2c", (COMPUTE_ENGINE, "pop_next"): "s2c",
             (STORE_ENGINE, "pop_prev"): "c2s"}
PUSH_QUEUE = {(LOAD_ENGINE, "push_next"): "l2c",
              (COMPUTE_ENGINE, "push_prev"): "c2l", (COMPUTE_ENGINE, "push_next"): "c2s",
              (STORE_ENGINE, "push_prev"): "s2c"}
QUEUES = ("l2c", "c2l", "c2s", "s2c")

#: Names of the counters, as the functional simulator's ``Counters``.
COUNTER_NAMES = ("load_insns", "compute_insns", "store_insns", "load_bytes_inp",
                 "load_bytes_wgt", "load_bytes_acc", "load_bytes_uop", "store_bytes",
                 "gemm_macs", "gemm_uops", "alu_ops", "alu_uops")


class ReferenceFailure(Exception):
    """The reference interpreter could not run the program to the end."""


class ReferenceRangeError(ReferenceFailure):
    """An index or address outside its buffer or DRAM (the program is illegal)."""


class ReferenceDeadlock(ReferenceFailure):
    """No agent (fetch or engine) can act and the program has not ended."""


class ReferenceTokenError(ReferenceFailure):
    """Tokens left in a queue at the end of the program."""


@dataclass
class ReferenceResult:
    """Outcome of :func:`run_reference`.

    Attributes
    ----------
    dram : numpy.ndarray
        Final DRAM image (``uint8``).
    counters : dict[str, int]
        Same names and meanings as the functional simulator's ``Counters``.
    order : list[int]
        Instruction indices in the order they executed.
    """

    dram: np.ndarray
    counters: dict[str, int]
    order: list[int] = field(default_factory=list)


def engine_of(insn: Insn) -> str:
    """The engine executing ``insn``."""
    if isinstance(insn, Load):
        return LOAD_ENGINE
    if isinstance(insn, Store):
        return STORE_ENGINE
    return COMPUTE_ENGINE


def wrap32(v: int) -> int:
    """Two's-complement wrap of a Python integer to int32."""
    return ((v - INT32_MIN) & 0xFFFFFFFF) + INT32_MIN


def alu_op(op: AluOp, a: int, b: int) -> int:
    """``OP(a, b)`` from the ALU table of docs/isa.md (int32 operands and result)."""
    if op is AluOp.ADD:
        return wrap32(a + b)
    if op is AluOp.MUL:
        return wrap32(a * b)
    if op is AluOp.MIN:
        return a if a < b else b
    if op is AluOp.MAX:
        return a if a > b else b
    if op is AluOp.SHR:
        return a >> (b & 31)  # Python's >> on negative integers is arithmetic
    if op is AluOp.SHR_RND:
        s = b & 31
        rem = a & ((1 << s) - 1)
        thr = (((1 << s) - 1) >> 1) + (1 if a < 0 else 0)
        return (a >> s) + (1 if rem > thr else 0)
    if op is AluOp.SHL:
        return wrap32(a << (b & 31))
    if op is AluOp.CLIP:
        lo = -b - 1
        return min(max(a, lo), b)
    if op is AluOp.MOV:
        return b
    if op is AluOp.MULHI:  # gemmlowp SaturatingRoundingDoublingHighMul
        if a == b == INT32_MIN:
            return INT32_MAX
        ab = a * b
        v = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
        return v // (1 << 31) if v >= 0 else -((-v) // (1 << 31))  # truncating division
    raise ReferenceFailure(f"unknown ALU op {op!r}")


def _log2(n: int) -> int:
    return n.bit_length() - 1


class _Machine:
    """State and instruction semantics (no scheduling)."""

    def __init__(self, program: Program, junk: random.Random | None) -> None:
        cfg = program.config
        self.cfg = cfg
        self.dram = bytearray(program.dram_image().tobytes())
        self.insn_end = len(program.insns) * program.insn_bytes
        self.batch, self.bi, self.bo = cfg.batch, cfg.block_in, cfg.block_out
        # DRAM size of one entry of each buffer (docs/isa.md, *DRAM addressing*)
        self.entry_bytes = {Buffer.INP: self.batch * self.bi, Buffer.WGT: self.bo * self.bi,
                            Buffer.ACC: 4 * self.batch * self.bo,
                            Buffer.UOP: _uop_format(cfg).bytes}
        self.out_bytes = self.batch * self.bo
        self.depth = {Buffer.INP: cfg.inp_depth, Buffer.WGT: cfg.wgt_depth,
                      Buffer.ACC: cfg.acc_depth, Buffer.UOP: cfg.uop_depth}
        # docs/isa.md does not define the buffers' contents at start
        self.buf = {b: bytearray(self.depth[b] * self.entry_bytes[b]) if junk is None
                    else bytearray(junk.randbytes(self.depth[b] * self.entry_bytes[b]))
                    for b in Buffer}
        # micro-op fields from bit 0 up: acc, src, wgt
        self.acc_bits = _log2(cfg.acc_depth)
        self.src_bits = max(_log2(cfg.inp_depth), _log2(cfg.acc_depth))
        self.wgt_bits = _log2(cfg.wgt_depth)
        self.counters = dict.fromkeys(COUNTER_NAMES, 0)

    # ---------------------------------------------------------------- entry access
    def _entry(self, buf: Buffer, k: int, what: str) -> bytearray:
        if not 0 <= k < self.depth[buf]:
            raise ReferenceRangeError(f"{what}: {buf.name.lower()} entry {k} outside "
                                      f"0..{self.depth[buf] - 1}")
        eb = self.entry_bytes[buf]
        return self.buf[buf][k * eb:(k + 1) * eb]

    def _set_entry(self, buf: Buffer, k: int, data: bytes | bytearray, what: str) -> None:
        if not 0 <= k < self.depth[buf]:
            raise ReferenceRangeError(f"{what}: {buf.name.lower()} entry {k} outside "
                                      f"0..{self.depth[buf] - 1}")
        eb = self.entry_bytes[buf]
        assert len(data) == eb
        self.buf[buf][k * eb:(k + 1) * eb] = data

    def _dram_read(self, byte: int, n: int, what: str) -> bytearray:
        if byte < 0 or byte + n > len(self.dram):
            raise ReferenceRangeError(f"{what}: DRAM bytes {byte}..{byte + n - 1} outside "
                                      f"the {len(self.dram)}-byte image")
        return self.dram[byte:byte + n]

    def _dram_write(self, byte: int, data: bytes, what: str) -> None:
        if byte < self.insn_end or byte + len(data) > len(self.dram):
            raise ReferenceRangeError(f"{what}: DRAM bytes {byte}..{byte + len(data) - 1} "
                                      "outside the writable image")
        self.dram[byte:byte + len(data)] = data

    def _acc_values(self, k: int, what: str) -> list[int]:
        n = self.batch * self.bo
        return list(struct.unpack(f"<{n}i", self._entry(Buffer.ACC, k, what)))

    def _set_acc(self, k: int, values: list[int], what: str) -> None:
        self._set_entry(Buffer.ACC, k, struct.pack(f"<{len(values)}i", *values), what)

    def _uop(self, u: int, what: str) -> tuple[int, int, int]:
        word = int.from_bytes(self._entry(Buffer.UOP, u, what), "little")
        acc = word & ((1 << self.acc_bits) - 1)
        src = (word >> self.acc_bits) & ((1 << self.src_bits) - 1)
        wgt = (word >> (self.acc_bits + self.src_bits)) & ((1 << self.wgt_bits) - 1)
        return acc, src, wgt

    # ---------------------------------------------------------------- instructions
    def execute(self, index: int, insn: Insn) -> None:
        what = f"instruction {index} ({insn.mnemonic})"
        if isinstance(insn, Load):
            self.load(insn, what)
        elif isinstance(insn, Store):
            self.store(insn, what)
        elif isinstance(insn, Gemm):
            self.gemm(insn, what)
        elif isinstance(insn, Alu):
            self.alu(insn, what)
        elif not isinstance(insn, Finish):
            raise ReferenceFailure(f"{what}: unknown instruction {insn!r}")

    def load(self, insn: Load, what: str) -> None:
        buf = insn.buffer
        eb = self.entry_bytes[buf]
        top, bottom, left, right = insn.pad_top, insn.pad_bottom, insn.pad_left, insn.pad_right
        if buf is Buffer.UOP and (top or bottom or left or right):
            raise ReferenceRangeError(f"{what}: a micro-op load cannot be padded")
        if insn.x < 1 or insn.y < 1:
            raise ReferenceRangeError(f"{what}: empty transfer")
        rows, cols = top + insn.y + bottom, left + insn.x + right
        for r in range(rows):
            for c in range(cols):
                entry = insn.sram + r * cols + c
                if top <= r < top + insn.y and left <= c < left + insn.x:
                    d = insn.dram + (r - top) * insn.stride + (c - left)
                    data = self._dram_read(d * eb, eb, what)
                else:
                    data = bytearray(eb)
                self._set_entry(buf, entry, data, what)
        key = {Buffer.INP: "load_bytes_inp", Buffer.WGT: "load_bytes_wgt",
               Buffer.ACC: "load_bytes_acc", Buffer.UOP: "load_bytes_uop"}[buf]
        self.counters[key] += insn.y * insn.x * eb

    def store(self, insn: Store, what: str) -> None:
        if insn.x < 1 or insn.y < 1:
            raise ReferenceRangeError(f"{what}: empty transfer")
        ob = self.out_bytes
        records = None
        if insn.requant:  # record word k of channel o: lane o of acc entry rec + k
            words = [self._acc_values(insn.rec + k, what) for k in range(3)]
            records = [b"".join(struct.pack("<i", words[k][o]) for k in range(3))
                       for o in range(self.bo)]
        for r in range(insn.y):  # in row order: when rows overlap, later rows win
            for c in range(insn.x):
                values = self._acc_values(insn.sram + r * insn.x + c, what)
                if records is not None:
                    values = [self._requant_lane(a, records[lane % self.bo], what)
                              for lane, a in enumerate(values)]
                low = bytes(v & 0xFF for v in values)
                d = insn.dram + r * insn.stride + c
                self._dram_write(d * ob, low, what)
        self.counters["store_bytes"] += insn.y * insn.x * ob

    def _loop(self, insn: Gemm | Alu):
        if insn.uop_begin >= insn.uop_end or insn.iter_out < 1 or insn.iter_in < 1:
            raise ReferenceRangeError(f"empty loop in {insn!r}")
        for i in range(insn.iter_out):
            for j in range(insn.iter_in):
                for u in range(insn.uop_begin, insn.uop_end):
                    yield i, j, u

    def gemm(self, insn: Gemm, what: str) -> None:
        b, bi, bo = self.batch, self.bi, self.bo
        for i, j, u in self._loop(insn):
            ua, ux, uw = self._uop(u, what)
            a = ua + i * insn.acc_factor_out + j * insn.acc_factor_in
            x = ux + i * insn.inp_factor_out + j * insn.inp_factor_in
            w = uw + i * insn.wgt_factor_out + j * insn.wgt_factor_in
            self.counters["gemm_uops"] += 1
            if insn.reset:
                self._set_acc(a, [0] * (b * bo), what)
                continue
            acc = self._acc_values(a, what)
            inp = struct.unpack(f"{b * bi}b", self._entry(Buffer.INP, x, what))
            wgt = struct.unpack(f"{bo * bi}b", self._entry(Buffer.WGT, w, what))
            out = []
            for bb in range(b):
                for o in range(bo):
                    s = 0
                    for k in range(bi):
                        s += inp[bb * bi + k] * wgt[o * bi + k]  # inp[x] @ wgt[w].T
                    out.append(wrap32(acc[bb * bo + o] + s))
            self._set_acc(a, out, what)
            self.counters["gemm_macs"] += b * bi * bo

    def alu(self, insn: Alu, what: str) -> None:
        n = self.batch * self.bo
        imm = insn.imm & 0xFFFF  # the 16-bit field, sign-extended to 32 bits
        if imm >= 0x8000:
            imm -= 0x10000
        shift_op = insn.op in (AluOp.SHR, AluOp.SHR_RND, AluOp.SHL)
        if insn.use_imm and shift_op and not 0 <= imm <= 31:
            raise ReferenceRangeError(f"{what}: shift immediate {imm} outside 0..31")
        if insn.op is AluOp.MULHI:
            imm = wrap32(imm << 16)  # the immediate is the multiplier's high half
        if insn.op is AluOp.REQUANT:
            self.requant(insn, what)
            return
        for i, j, u in self._loop(insn):
            ua, us, _ = self._uop(u, what)
            d = ua + i * insn.dst_factor_out + j * insn.dst_factor_in
            a_vals = self._acc_values(d, what)
            if insn.use_imm:
                b_vals = [imm] * n
            else:
                s = us + i * insn.src_factor_out + j * insn.src_factor_in
                b_vals = self._acc_values(s, what)  # sees every earlier iteration
                if shift_op and not all(0 <= bv <= 31 for bv in b_vals):
                    raise ReferenceRangeError(f"{what}: vector shift amount outside 0..31")
            self._set_acc(d, [alu_op(insn.op, a, bv) for a, bv in zip(a_vals, b_vals,
                                                                       strict=True)], what)
            self.counters["alu_uops"] += 1
            self.counters["alu_ops"] += n


    @staticmethod
    def _requant_lane(a: int, r: bytes | bytearray, what: str) -> int:
        """REQUANT of one accumulator ``a`` with the 12-byte record ``r``."""
        m, bias = struct.unpack("<Ii", r[:8])
        m &= 0x7FFFFFFF  # the multiplier is the low 31 bits
        shift, zp, lo, hi = r[8], struct.unpack("b", r[9:10])[0], \
            struct.unpack("b", r[10:11])[0], struct.unpack("b", r[11:12])[0]
        if shift > 62:
            raise ReferenceRangeError(f"{what}: REQUANT shift {shift} past 62")
        p = wrap32(a + bias) * m
        q, rem = divmod(abs(p), 1 << shift)
        if shift and 2 * rem >= 1 << shift:
            q += 1
        return min(max((q if p >= 0 else -q) + zp, lo), hi)

    def requant(self, insn: Alu, what: str) -> None:
        """docs/isa.md's REQUANT: records in weight rows, one rounding, Python ints."""
        n, bo, bi = self.batch * self.bo, self.bo, self.bi
        for i, j, u in self._loop(insn):
            ua, _, uw = self._uop(u, what)
            d = ua + i * insn.dst_factor_out + j * insn.dst_factor_in
            w = uw + i * insn.src_factor_out + j * insn.src_factor_in
            rows = self._entry(Buffer.WGT, w, what)  # row o: bytes o*bi .. o*bi+bi
            out = [self._requant_lane(a, rows[(lane % bo) * bi:][:12], what)
                   for lane, a in enumerate(self._acc_values(d, what))]
            self._set_acc(d, out, what)
            self.counters["alu_uops"] += 1
            self.counters["alu_ops"] += n


class _Engine:
    def __init__(self, name: str) -> None:
        self.name = name
        self.cmd: deque[tuple[int, Insn]] = deque()
        self.current: tuple[int, Insn] | None = None
        self.started = False
        self.pending: list[str] = []  # queues still to push for the current instruction


def run_reference(program: Program, *, schedule: str = "round_robin", seed: int = 0,
                  junk_buffers: bool = False) -> ReferenceResult:
    """Run ``program`` on the naive reference machine.

    Parameters
    ----------
    program : Program
        A legal program.
    schedule : str
        ``"round_robin"`` (fetch, load, compute, store, one action each in turn) or
        ``"random"`` (a random agent that can act, from ``seed``).
    seed : int
        Seed of the random schedule and of the junk buffer contents.
    junk_buffers : bool
        Start with random bytes in every on-chip buffer instead of zeros (the ISA
        does not define their initial contents, so a program's results must not
        depend on them).

    Returns
    -------
    ReferenceResult
        Final DRAM image, counters, execution order.

    Raises
    ------
    ReferenceRangeError, ReferenceDeadlock, ReferenceTokenError
        The program is illegal or breaks the token discipline.
    """
    if schedule not in ("round_robin", "random"):
        raise ValueError(f"unknown schedule {schedule!r}")
    cfg = program.config
    insns = list(program.insns)
    finishes = [i for i, insn in enumerate(insns) if isinstance(insn, Finish)]
    if finishes != [len(insns) - 1]:
        raise ReferenceFailure("FINISH must be the last instruction and appear once")
    m = _Machine(program, random.Random(seed + 1) if junk_buffers else None)
    tokens = dict.fromkeys(QUEUES, 0)
    engines = {name: _Engine(name) for name in ENGINES}
    fetched = 0
    finished = False
    order: list[int] = []
    rng = random.Random(seed)

    def fetch_can() -> bool:
        if fetched >= len(insns):
            return False
        e = engines[engine_of(insns[fetched])]
        return len(e.cmd) < cfg.cmd_queue_depth

    def fetch_act() -> None:
        nonlocal fetched
        insn = insns[fetched]
        engines[engine_of(insn)].cmd.append((fetched, insn))
        fetched += 1

    def pops(e: _Engine, insn: Insn) -> list[str]:
        return [q for (eng, flag), q in POP_QUEUE.items()
                if eng == e.name and getattr(insn, flag)]

    def engine_can(e: _Engine) -> bool:
        if e.current is None:
            return bool(e.cmd)
        if not e.started:
            return all(tokens[q] > 0 for q in pops(e, e.current[1]))
        return any(tokens[q] < cfg.dep_queue_depth for q in e.pending)

    def engine_act(e: _Engine) -> None:
        nonlocal finished
        if e.current is None:
            e.current = e.cmd.popleft()  # leaves the command queue
            e.started = False
            return
        index, insn = e.current
        if not e.started:
            for q in pops(e, insn):
                tokens[q] -= 1
            m.execute(index, insn)
            order.append(index)
            e.started = True
            e.pending = [q for (eng, flag), q in PUSH_QUEUE.items()
                         if eng == e.name and getattr(insn, flag)]
        still = []
        for q in e.pending:
            if tokens[q] < cfg.dep_queue_depth:
                tokens[q] += 1
            else:
                still.append(q)
        e.pending = still
        if not still:
            m.counters[f"{e.name}_insns"] += 1
            if isinstance(insn, Finish):
                finished = True
            e.current = None

    def ended() -> bool:
        return finished and fetched == len(insns) and all(
            e.current is None and not e.cmd for e in engines.values())

    agents = ["fetch", *ENGINES]
    turn = 0
    while not ended():
        able = [a for a in agents
                if (fetch_can() if a == "fetch" else engine_can(engines[a]))]
        if not able:
            raise ReferenceDeadlock(_deadlock_message(engines, insns, fetched, tokens))
        if schedule == "random":
            agent = rng.choice(able)
        else:
            while agents[turn % len(agents)] not in able:
                turn += 1
            agent = agents[turn % len(agents)]
            turn += 1
        if agent == "fetch":
            fetch_act()
        else:
            engine_act(engines[agent])
    left = {q: n for q, n in tokens.items() if n}
    if left:
        raise ReferenceTokenError(f"tokens left at the end of the program: {left}")
    return ReferenceResult(np.frombuffer(bytes(m.dram), dtype=np.uint8).copy(),
                           dict(m.counters), order)


def _deadlock_message(engines: dict[str, _Engine], insns: list[Insn], fetched: int,
                      tokens: dict[str, int]) -> str:
    parts = []
    for e in engines.values():
        if e.current is not None:
            index, insn = e.current
            state = "waits to push" if e.started else "waits to pop"
            parts.append(f"{e.name} at instruction {index} ({insn.mnemonic}) {state}")
        elif e.cmd:
            parts.append(f"{e.name} has queued instructions")
    if fetched < len(insns):
        parts.append(f"fetch at instruction {fetched} ({insns[fetched].mnemonic}) waits "
                     "for room in its command queue")
    return f"deadlock: {'; '.join(parts) or 'nothing runs'}; tokens {tokens}"


__all__ = ["COUNTER_NAMES", "ReferenceDeadlock", "ReferenceFailure", "ReferenceRangeError",
           "ReferenceResult", "ReferenceTokenError", "alu_op", "engine_of", "run_reference",
           "wrap32"]
