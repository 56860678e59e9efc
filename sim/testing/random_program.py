"""Seeded random programs for differential testing (functional simulator vs. RTL).

:func:`random_program` builds a small, legal :class:`~tensorfab.isa.Program` from a
config and a seed: a few dozen instructions, small transfers, every instruction
kind, buffer and ALU operation, one to four virtual threads, and a token discipline
that is valid by construction (no deadlock in any schedule, no leftover token, no
race). All input data lives in segments; results land in output segments.

Structure of a program with ``V`` virtual threads and ``n`` steps (step ``s``
belongs to thread ``s mod V``, which owns a ``1/V`` slice of every buffer)::

    [prologue loads]                       load engine, before any computation
    for s in 0 .. n-1:
        [release s-V]                      compute: pops s2c of S(s-V), pushes c2l
        L(s)  loads into the slices        first pops c2l (s >= V), last pushes l2c
        C(s)  GEMM / ALU on the slices     first pops l2c, last pushes c2s (if S(s))
        S(s)  stores to output segments    first pops c2s, last pushes s2c (release)
    FINISH                                 may pop the last store's s2c

The release of step ``s-V`` (the token that lets thread ``v`` overwrite its slices)
is either a dedicated relay instruction on a scratch accumulator (the last entry,
outside every slice) or piggybacks on an instruction of ``C(s-1)``. Releases are
ordered after every store before them, so a load may read back DRAM that a store of
step ``s-V`` or earlier wrote (segment ``fb``). Finally the three engine streams are
sometimes re-interleaved into another program order that is still executable
instruction by instruction (so the in-order fetch unit cannot deadlock).

The generator never reads a buffer entry this program has not written (buffers are
not assumed to start at zero) and keeps every index in range.

Run ``python -m tensorfab.sim.testing.random_program CONFIG SEED`` to print a program.
"""

from __future__ import annotations

import argparse
import dataclasses
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tensorfab.isa import (
    PRESETS,
    UOP_SEGMENT,
    Alu,
    AluOp,
    Buffer,
    Engine,
    Finish,
    Gemm,
    HwConfig,
    Insn,
    Load,
    Program,
    Segment,
    Store,
    Uop,
    buffer_depth,
    buffer_entry_bytes,
    get_config,
)
from tensorfab.isa.disasm import format_insn
from tensorfab.isa.errors import UsageError
from tensorfab.isa.formats import (
    MAX_SHIFT,
    REQUANT_MAX_SHIFT,
    REQUANT_RECORD_WORDS,
    REQUANT_SHIFT_BYTE,
    SHIFT_OPS,
    alu_requant_supported,
    requant_supported,
    token_pops,
    token_pushes,
)
from tensorfab.isa.insn import segment_dram

#: Name of the informational segment recording how a program was generated.
META_SEGMENT = "random_meta"
#: Bump when the same (config, seed) starts giving different programs.
GENERATOR_VERSION = 5
#: Share of the bias rows (on configs with REQUANT) made to hold a legal REQUANT shift
#: in batch row 0, so that a requantizing STORE can take its records from the entries
#: a LOAD puts them in.
RECORD_BIAS_ROWS = 0.5
#: Most virtual threads :func:`random_program` picks on its own.
MAX_VTHREADS = 4
#: Default cap on the number of steps.
DEFAULT_MAX_STEPS = 8
#: Most DRAM bytes of data one ordinary LOAD transfers (keeps RTL runs short).
_LOAD_BYTES = 8192
#: Most DRAM bytes of data a full-depth LOAD transfers.
_FULL_DEPTH_BYTES = 32768
#: Probability that a multi-row STORE has overlapping rows (``stride < x``: later rows
#: win, docs/isa.md); 0 keeps every store's rows disjoint.
STORE_ROW_OVERLAP = 0.05
#: Probability that a multi-row LOAD re-reads DRAM (``stride < x``, always harmless).
LOAD_ROW_OVERLAP = 0.15
#: Most micro-op executions of one GEMM/ALU instruction.
_MAX_ITERATIONS = 96

_NEVER = -(1 << 40)  # "written by no store" in the feedback tracker

# Flags: which queue each (engine, flag) pushes to or pops from.
_POPS = {e: token_pops(e) for e in Engine}
_PUSHES = {e: token_pushes(e) for e in Engine}


def _fingerprint(cfg: HwConfig) -> int:
    return zlib.crc32(cfg.to_json().encode())


def _bases(valid: np.ndarray, offsets: Iterable[int]) -> np.ndarray:
    """Indices ``b`` with ``valid[b + o]`` for every (non-negative) offset ``o``."""
    n = valid.size
    ok = valid.copy()
    for o in set(int(o) for o in offsets):
        if o >= n:
            return np.zeros(0, dtype=np.int64)
        if o:
            ok[: n - o] &= valid[o:]
            ok[n - o:] = False
    return np.flatnonzero(ok)


def _loop_offsets(n_out: int, n_in: int, f_out: int, f_in: int) -> set[int]:
    return {i * f_out + j * f_in for i in range(n_out) for j in range(n_in)}


@dataclass
class _Role:
    """One index a GEMM/ALU computes: micro-op field, loop factors, valid entries."""

    field: str          # "acc", "src" or "wgt" (micro-op field)
    valid: np.ndarray   # bool per buffer entry: may this index land here
    f_out: int = 0
    f_in: int = 0


@dataclass
class _Item:
    """An instruction in program order; ``seg`` makes LOAD/STORE ``dram`` relative."""

    insn: Insn
    seg: str | None = None

    def flag(self, **flags: bool) -> None:
        self.insn = dataclasses.replace(self.insn, **flags)


class _Generator:
    def __init__(self, cfg: HwConfig, seed: int, vthreads: int | None,
                 max_steps: int | None) -> None:
        if not isinstance(seed, int | np.integer) or seed < 0:
            raise UsageError(f"seed = {seed!r} must be a non-negative integer")
        self.cfg = cfg
        self.seed = int(seed)
        self.rng = np.random.default_rng(np.random.SeedSequence([int(seed),
                                                                 _fingerprint(cfg)]))
        rng = self.rng
        self.store_rng = np.random.default_rng(np.random.SeedSequence(
            [int(seed), _fingerprint(cfg), 1]))
        # Slices: the last acc and uop entries are the relays' scratch, outside them.
        usable = {Buffer.INP: cfg.inp_depth, Buffer.WGT: cfg.wgt_depth,
                  Buffer.ACC: cfg.acc_depth - 1, Buffer.UOP: cfg.uop_depth - 1}
        # Up to V store->compute tokens wait in program order (S(t) .. S(t+V-1) push
        # before the release of step t pops), hence V <= dep_queue_depth.
        v_max = min(cfg.dep_queue_depth, *usable.values())
        if vthreads is None:
            V = int(rng.integers(1, min(MAX_VTHREADS, v_max) + 1))
        else:
            V = int(vthreads)
            if not 1 <= V <= v_max:
                raise UsageError(f"vthreads = {vthreads} must be between 1 and {v_max} "
                                 "(dep_queue_depth, and entries of the smallest buffer)")
        max_steps = DEFAULT_MAX_STEPS if max_steps is None else int(max_steps)
        if max_steps < 1:
            raise UsageError(f"max_steps = {max_steps} must be at least 1")
        self.V = V
        self.scratch_acc = cfg.acc_depth - 1
        self.relay_uop = cfg.uop_depth - 1
        self.slices: dict[Buffer, list[tuple[int, int]]] = {}
        for buf, n in usable.items():
            size = n // V
            self.slices[buf] = [(v * size, (v + 1) * size) for v in range(V)]
        lo_steps = max(1, V - 1)
        hi_steps = max(lo_steps, min(max_steps, 2 * V + 2))
        self.n_steps = min(max_steps, int(rng.integers(lo_steps, hi_steps + 1)))
        # What the generator knows of the machine state.
        self.init = {b: np.zeros(buffer_depth(cfg, b), dtype=bool)
                     for b in (Buffer.INP, Buffer.WGT, Buffer.ACC)}
        # accumulator entries known to hold shift amounts 0..31 in every element (the
        # only legal vector operands of shift operations; else SHIFT_RANGE)
        self.shift_ok = np.zeros(cfg.acc_depth, dtype=bool)
        # accumulator entries whose batch row 0 holds a legal REQUANT shift in every
        # element's shift byte: the record word of a requantizing STORE that holds the
        # shift (the shift entries above, and bias rows made so)
        self.record_shift_ok = np.zeros(cfg.acc_depth, dtype=bool)
        # weight entries holding legal REQUANT records (loaded from the "wgt" segment,
        # whose shift bytes are 0..REQUANT_MAX_SHIFT, or padding)
        self.records_ok = np.zeros(cfg.wgt_depth, dtype=bool)
        self.uop_buf: list[Uop | None] = [None] * cfg.uop_depth
        self.kernels: list[list[tuple[int, int]]] = [[] for _ in range(V)]
        self.items: list[_Item] = []
        self.table: list[Uop] = []  # the micro-op table in DRAM
        self.compute_groups: list[list[int]] = []
        self.store_groups: list[list[int]] = []
        self._segments()
        # Release of step t (for step t+V): dedicated relay or piggyback on C(t+V-1).
        self.release_relay = [V == 1 or bool(rng.random() < 0.4)
                              for _ in range(max(0, self.n_steps - V))]

    # ------------------------------------------------------------------ random helpers
    def _pick(self, options: Sequence[int], weights: Sequence[float]) -> int:
        w = np.asarray(weights, dtype=float)
        return int(options[int(self.rng.choice(len(options), p=w / w.sum()))])

    def _small(self, hi: int) -> int:
        """A size in 1..hi, mostly small, sometimes the edge values."""
        if hi <= 1:
            return 1
        r = self.rng.random()
        if r < 0.3:
            return 1
        if r < 0.4:
            return hi
        if r < 0.85:
            return int(self.rng.integers(1, min(hi, 4) + 1))
        return int(self.rng.integers(1, hi + 1))

    def _extent(self) -> int:
        return self._pick([1, 2, 3, 4, 6, 8, 16], [40, 18, 12, 12, 8, 6, 4])

    def _factor(self, n_slice: int, extent: int, depth: int) -> int:
        """A loop factor: mostly 0, 1 or small, sometimes spanning the slice; always
        below ``depth`` (the factor fields are as wide as the buffer's index)."""
        r = self.rng.random()
        if (extent <= 1 and r < 0.7) or r < 0.3:
            f = 0
        elif r < 0.6:
            f = 1
        elif r < 0.85:
            f = int(self.rng.integers(2, 5))
        else:
            f = int(self.rng.integers(0, max(1, n_slice // max(extent, 1))))
        return min(f, depth - 1)

    def _imm(self, op: AluOp) -> int:
        if op in SHIFT_OPS or (op is AluOp.MOV and self.rng.random() < 0.5):
            return self._pick([0, 1, MAX_SHIFT, int(self.rng.integers(0, MAX_SHIFT + 1))],
                              [1, 1, 1, 5])
        specials = [0, 1, -1, 127, -128, 255, 32767, -32768]
        if self.rng.random() < 0.3:
            return specials[int(self.rng.integers(len(specials)))]
        return int(self.rng.integers(-32768, 32768))

    # ---------------------------------------------------------------------- segments
    def _segments(self) -> None:
        cfg, rng = self.cfg, self.rng
        b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out

        def i8(shape: tuple[int, ...]) -> np.ndarray:
            return rng.integers(-128, 128, size=shape, dtype=np.int64).astype(np.int8)

        n_inp = int(rng.integers(24, 97))
        n_wgt = int(rng.integers(12, 49))
        n_bias = int(rng.integers(12, 49))
        n_out = int(rng.integers(32, 129))
        n_fb = int(rng.integers(16, 65))
        if rng.random() < 0.5:
            bias = rng.integers(-(1 << 31), 1 << 31, size=(n_bias, b, bo), dtype=np.int64)
        else:  # bias-like: small values
            bias = rng.integers(-(1 << 12), 1 << 12, size=(n_bias, b, bo), dtype=np.int64)
        if requant_supported(cfg):  # (a stream of its own: the instructions stay)
            bias = self._record_bias(bias)
        wgt = i8((n_wgt, bo, bi))
        if alu_requant_supported(cfg):  # every row a REQUANT record with a legal shift
            wgt[..., REQUANT_SHIFT_BYTE] = rng.integers(0, REQUANT_MAX_SHIFT + 1, (n_wgt, bo))
        segs = [Segment("inp", "int8", (n_inp, b, bi), i8((n_inp, b, bi))),
                Segment("wgt", "int8", (n_wgt, bo, bi), wgt),
                Segment("bias", "int32", (n_bias, b, bo), bias.astype(np.int32)),
                Segment("out", "int8", (n_out, b, bo), output=True),
                Segment("fb", "int8", (n_fb, b, bo), i8((n_fb, b, bo)), output=True)]
        order = rng.permutation(len(segs))
        meta = np.array([self.seed & 0x7FFFFFFF, (self.seed >> 31) & 0x7FFFFFFF, self.V,
                         self.n_steps, GENERATOR_VERSION], dtype=np.int32)
        self.segments = [segs[i] for i in order] + [Segment(META_SEGMENT, "int32", (5,),
                                                            meta)]
        self.seg_bytes = {s.name: s.nbytes for s in self.segments}
        self.fb_writer = np.full(self.seg_bytes["fb"], _NEVER, dtype=np.int64)

    def _record_bias(self, bias: np.ndarray) -> np.ndarray:
        """``bias`` with :data:`RECORD_BIAS_ROWS` of its rows (picked by a random stream
        of their own) holding a legal REQUANT shift in batch row 0's shift bytes; sets
        :attr:`bias_record_ok`, whether each row holds one."""
        rng = np.random.default_rng(np.random.SeedSequence([self.seed,
                                                            _fingerprint(self.cfg), 2]))
        at = 8 * (REQUANT_SHIFT_BYTE % 4)  # the shift's bits in its record word
        words = bias.astype(np.int64) & 0xFFFFFFFF
        shift = (words[:, 0, :] >> at) & 0xFF
        rows = rng.random(len(bias)) < RECORD_BIAS_ROWS
        legal = shift % (REQUANT_MAX_SHIFT + 1)
        words[rows, 0, :] += (legal[rows] - shift[rows]) << at
        self.bias_record_ok = ((words[:, 0, :] >> at) & 0xFF <= REQUANT_MAX_SHIFT).all(axis=1)
        return np.where(words >= 1 << 31, words - (1 << 32), words)

    def _loaded_record_shifts(self, insn: Load, seg: str | None) -> np.ndarray:
        """Per entry a LOAD of the accumulators writes, whether it holds a legal
        REQUANT shift where a record's shift goes: its padding (zeros) and the bias
        rows that do (:meth:`_record_bias`)."""
        ok = np.ones((insn.rows, insn.cols), dtype=bool)
        if seg == "bias" and requant_supported(self.cfg):
            rows = insn.dram + np.arange(insn.y)[:, None] * insn.stride + np.arange(insn.x)
            data = self.bias_record_ok[rows]
        else:
            data = False
        ok[insn.pad_top:insn.pad_top + insn.y, insn.pad_left:insn.pad_left + insn.x] = data
        return ok.ravel()

    def _source(self, buf: Buffer) -> str:
        """Segment a LOAD of ``buf`` reads (``fb`` sometimes, for read-back)."""
        if buf is Buffer.UOP:
            return UOP_SEGMENT
        if self.rng.random() < {Buffer.INP: 0.2, Buffer.WGT: 0.1, Buffer.ACC: 0.15}[buf]:
            return "fb"
        return {Buffer.INP: "inp", Buffer.WGT: "wgt", Buffer.ACC: "bias"}[buf]

    # ------------------------------------------------------------------------- loads
    def _dram_rows(self, avail: int, y: int, x: int, *, overlap: float) -> tuple[int, int]:
        """``(stride, offset)`` of a ``y × x`` block inside ``avail >= x`` entries; rows
        overlap (``stride < x``) with probability ``overlap`` when ``y > 1``, and
        never when ``overlap`` is 0 (then ``y * x <= avail`` is required)."""
        rng = self.rng
        if y == 1:
            stride = int(rng.integers(0, x + 6))  # irrelevant for one row
        elif rng.random() < overlap:
            stride = int(rng.integers(0, x))
        else:
            stride = x if rng.random() < 0.5 else x + int(rng.integers(1, 9))
        if y > 1 and (y - 1) * stride + x > avail:
            stride = min(stride, (avail - x) // (y - 1))
            if not overlap:
                stride = max(stride, x)
        foot = (y - 1) * stride + x
        assert foot <= avail
        return stride, int(rng.integers(0, avail - foot + 1))

    def _fb_ok(self, load_step: int, byte_ranges: Iterable[tuple[int, int]]) -> bool:
        limit = load_step - self.V
        return all(int(self.fb_writer[a:b].max()) <= limit for a, b in byte_ranges)

    def _plan_load(self, buf: Buffer, window: tuple[int, int], step: int,
                   seg: str | None = None) -> _Item | None:
        """A random LOAD of ``buf`` into entries ``window`` (half-open) from segment
        ``seg`` (default: :meth:`_source`); ``None`` only if nothing fits."""
        cfg, rng = self.cfg, self.rng
        seg = seg or self._source(buf)
        eb = buffer_entry_bytes(cfg, buf)
        fallback = {Buffer.INP: "inp", Buffer.WGT: "wgt", Buffer.ACC: "bias",
                    Buffer.UOP: UOP_SEGMENT}[buf]
        if seg == "fb" and self.seg_bytes[seg] < eb:
            seg = fallback  # not one whole entry of this buffer
        avail = self.seg_bytes[seg] // eb if seg != UOP_SEGMENT else len(self.table)
        if seg == UOP_SEGMENT and avail < 4:
            self._junk_uops(int(rng.integers(4, 17)))
            avail = len(self.table)
        space = window[1] - window[0]
        if avail < 1 or space < 1:
            return None
        max_data = max(4, _LOAD_BYTES // eb)
        for attempt in range(12):
            shrink = 2 ** (attempt // 3)
            y = self._small(max(1, min(8 // shrink, avail, space)))
            x = self._small(max(1, min(12 // shrink, avail, space)))
            pads = [0, 0, 0, 0]
            if buf is not Buffer.UOP:
                for k in range(4):
                    r = rng.random()
                    if r < 0.12:
                        pads[k] = int(rng.integers(1, 4))
                    elif r < 0.16:
                        pads[k] = 15 if rng.random() < 0.5 else int(rng.integers(4, 16))
            rows, cols = pads[0] + y + pads[1], pads[2] + x + pads[3]
            if rows * cols > space or y * x > max_data or x > avail:
                continue
            stride, off = self._dram_rows(avail, y, x, overlap=LOAD_ROW_OVERLAP)
            if seg == "fb":
                ranges = [((off + r * stride) * eb, (off + r * stride + x) * eb)
                          for r in range(y)]
                if not self._fb_ok(step, ranges):
                    off_ok = False
                    for _ in range(6):
                        off = int(rng.integers(0, avail - ((y - 1) * stride + x) + 1))
                        ranges = [((off + r * stride) * eb, (off + r * stride + x) * eb)
                                  for r in range(y)]
                        if self._fb_ok(step, ranges):
                            off_ok = True
                            break
                    if not off_ok:
                        return self._plan_load(buf, window, step, fallback)
            sram = window[0] + int(rng.integers(0, space - rows * cols + 1))
            insn = Load(buffer=buf, sram=sram, dram=off, y=y, x=x, stride=stride,
                        pad_top=pads[0], pad_bottom=pads[1], pad_left=pads[2],
                        pad_right=pads[3])
            return _Item(insn, seg)
        if seg == "fb":
            return self._plan_load(buf, window, step, fallback)
        return _Item(Load(buffer=buf, sram=window[0] + int(rng.integers(0, space)),
                          dram=int(rng.integers(0, avail)), y=1, x=1, stride=1), seg)

    def _junk_uops(self, n: int) -> int:
        """Append ``n`` random (encodable) micro-ops to the DRAM table; return the first."""
        cfg, rng = self.cfg, self.rng
        first = len(self.table)
        src_max = max(cfg.inp_depth, cfg.acc_depth)
        for _ in range(n):
            self.table.append(Uop(acc=int(rng.integers(cfg.acc_depth)),
                                  src=int(rng.integers(src_max)),
                                  wgt=int(rng.integers(cfg.wgt_depth))))
        return first

    def _apply_load(self, item: _Item) -> None:
        """Update the generator's view of the buffers after a LOAD."""
        insn = item.insn
        assert isinstance(insn, Load)
        n = insn.rows * insn.cols
        lo, hi = insn.sram, insn.sram + n
        if insn.buffer is Buffer.UOP:
            assert item.seg == UOP_SEGMENT
            for r in range(insn.y):
                for c in range(insn.x):
                    self.uop_buf[lo + r * insn.x + c] = \
                        self.table[insn.dram + r * insn.stride + c]
            for ks in self.kernels:
                ks[:] = [(b, e) for b, e in ks if e <= lo or b >= hi]
        else:
            self.init[insn.buffer][lo:hi] = True
            if insn.buffer is Buffer.ACC:
                self.shift_ok[lo:hi] = False
                self.record_shift_ok[lo:hi] = self._loaded_record_shifts(insn, item.seg)
            if insn.buffer is Buffer.WGT:
                self.records_ok[lo:hi] = item.seg == "wgt"

    def _full_depth_load(self, buf: Buffer) -> _Item | None:
        """A LOAD writing the whole of ``buf`` (data kept small with padding or a
        short stride), or ``None`` if none fits the byte budget."""
        cfg, rng = self.cfg, self.rng
        depth = buffer_depth(cfg, buf)
        eb = buffer_entry_bytes(cfg, buf)
        options = []
        for k in range(depth.bit_length()):
            cols = 1 << k
            rows = depth // cols
            if buf is Buffer.UOP:
                options.append((rows, cols, [0, 0, 0, 0]))
                continue
            xmin, ymin = max(1, cols - 30), max(1, rows - 30)
            x = int(rng.integers(xmin, min(cols, xmin + 3) + 1))
            y = int(rng.integers(ymin, min(rows, ymin + 3) + 1))
            pl = int(rng.integers(max(0, cols - x - 15), min(15, cols - x) + 1))
            pt = int(rng.integers(max(0, rows - y - 15), min(15, rows - y) + 1))
            options.append((y, x, [pt, rows - y - pt, pl, cols - x - pl]))
        options = [o for o in options if o[0] * o[1] * eb <= _FULL_DEPTH_BYTES]
        if not options:
            return None
        y, x, pads = options[int(rng.integers(len(options)))]
        seg = UOP_SEGMENT if buf is Buffer.UOP else \
            {Buffer.INP: "inp", Buffer.WGT: "wgt", Buffer.ACC: "bias"}[buf]
        if seg == UOP_SEGMENT:
            # junk micro-ops; rows re-read a short stretch of the table
            avail = x + int(rng.integers(0, 9))
            off = self._junk_uops(avail)
        else:
            avail = self.seg_bytes[seg] // eb
            if x > avail:
                return None
            off = 0
        # rows may overlap in DRAM (stride < x): harmless for a load
        stride = x if y == 1 else int(rng.integers(0, min(x, (avail - x) // (y - 1)) + 1))
        off += int(rng.integers(0, avail - ((y - 1) * stride + x) + 1))
        return _Item(Load(buffer=buf, sram=0, dram=off, y=y, x=x, stride=stride,
                          pad_top=pads[0], pad_bottom=pads[1], pad_left=pads[2],
                          pad_right=pads[3]), seg)

    # ----------------------------------------------------------------------- compute
    def _slice_mask(self, buf: Buffer, v: int) -> np.ndarray:
        lo, hi = self.slices[buf][v]
        m = np.zeros(buffer_depth(self.cfg, buf), dtype=bool)
        m[lo:hi] = True
        return m

    def _kernel_fits(self, begin: int, end: int, roles: list[_Role], loops: tuple[int, int]
                     ) -> bool:
        for u in range(begin, end):
            uop = self.uop_buf[u]
            if uop is None:
                return False
            for role in roles:
                base = getattr(uop, role.field)
                for off in _loop_offsets(*loops, role.f_out, role.f_in):
                    k = base + off
                    if k >= role.valid.size or not role.valid[k]:
                        return False
        return True

    def _new_kernel(self, n_uops: int, roles: list[_Role], loops: tuple[int, int],
                    filler: dict[str, int]) -> list[Uop] | None:
        """``n_uops`` micro-ops whose every role index stays valid over the loops."""
        rng = self.rng
        loop_offs = {id(r): _loop_offsets(*loops, r.f_out, r.f_in) for r in roles}
        pattern = self._pick([0, 1, 2], [4, 4, 2])  # random, affine, 2-D grid
        rows_n = 1
        if pattern == 2:
            divs = [d for d in range(2, n_uops) if n_uops % d == 0]
            if not divs:
                pattern = 1
            else:
                rows_n = divs[int(rng.integers(len(divs)))]
        values: dict[str, list[int]] = {}
        for role in roles:
            offs = loop_offs[id(role)]
            picked: list[int] | None = None
            if pattern:
                steps = [self._pick([0, 1, 2, 3], [3, 4, 1, 1]) for _ in range(2)]
                if pattern == 1:
                    grid = [u * steps[0] for u in range(n_uops)]
                else:
                    cols_n = n_uops // rows_n
                    grid = [r * steps[0] * cols_n + c * steps[1]
                            for r in range(rows_n) for c in range(cols_n)]
                bases = _bases(role.valid, {o + g for o in offs for g in grid})
                if bases.size:
                    base = int(bases[int(rng.integers(bases.size))])
                    picked = [base + g for g in grid]
            if picked is None:
                bases = _bases(role.valid, offs)
                if not bases.size:
                    return None
                picked = [int(bases[int(rng.integers(bases.size))]) for _ in range(n_uops)]
            values[role.field] = picked
        uops = []
        for u in range(n_uops):
            fields = {f: values[f][u] if f in values else filler[f]
                      for f in ("acc", "src", "wgt")}
            uops.append(Uop(**fields))
        return uops

    def _kernel_load(self, uops: list[Uop], v: int, reserved: np.ndarray) -> _Item | None:
        """Place ``uops`` in thread ``v``'s micro-op slice avoiding ``reserved`` entries;
        the LOAD.UOP bringing them there (1-D or 2-D from the DRAM table)."""
        rng = self.rng
        n = len(uops)
        lo, hi = self.slices[Buffer.UOP][v]
        free = ~reserved[lo:hi]
        starts = _bases(free, range(n))
        if not starts.size:
            return None
        sram = lo + int(starts[int(rng.integers(starts.size))])
        divs = [d for d in range(1, n + 1) if n % d == 0]
        y = divs[int(rng.integers(len(divs)))] if rng.random() < 0.5 else 1
        x = n // y
        if y == 1:
            stride = int(rng.integers(0, x + 4))
            gap = 0
        else:
            gap = 0 if rng.random() < 0.5 else int(rng.integers(1, 4))
            stride = x + gap
        if rng.random() < 0.3:
            self._junk_uops(int(rng.integers(1, 4)))  # DRAM offset not at a row start
        first = len(self.table)
        for r in range(y):
            self.table.extend(uops[r * x:(r + 1) * x])
            if r < y - 1 and gap:
                self._junk_uops(gap)
        return _Item(Load(buffer=Buffer.UOP, sram=sram, dram=first, y=y, x=x,
                          stride=stride), UOP_SEGMENT)

    def _plan_compute(self, v: int, reserved: np.ndarray,
                      kernel_loads: list[_Item]) -> Insn | None:
        """One random GEMM or ALU instruction for thread ``v`` reading only initialized
        entries of its slices; appends any new kernel's LOAD.UOP to ``kernel_loads``."""
        cfg, rng = self.cfg, self.rng
        acc_slice = self._slice_mask(Buffer.ACC, v)
        acc_init = acc_slice & self.init[Buffer.ACC]
        # gemm reset, gemm, alu (none without the vector ALU)
        kind = self._pick([0, 1, 2], [2, 3, 5 if cfg.vector_alu else 0])
        op, use_imm = AluOp.ADD, False
        if kind == 1:
            inp_ok = self._slice_mask(Buffer.INP, v) & self.init[Buffer.INP]
            wgt_ok = self._slice_mask(Buffer.WGT, v) & self.init[Buffer.WGT]
            if not (acc_init.any() and inp_ok.any() and wgt_ok.any()):
                kind = 0
        if kind == 2:
            op = AluOp(int(rng.integers(len(AluOp))))
            use_imm = bool(rng.random() < 0.5)
            records = self._slice_mask(Buffer.WGT, v) & self.records_ok
            if op is AluOp.REQUANT:
                use_imm = False
                if not (alu_requant_supported(cfg) and records.any()):
                    op = AluOp.ADD
            if not acc_init.any():
                op, use_imm = AluOp.MOV, True
            shifts = acc_slice & self.shift_ok
            if shifts.any() and rng.random() < 0.3:  # a prepared shift vector: use it
                op, use_imm = sorted(SHIFT_OPS)[int(rng.integers(len(SHIFT_OPS)))], False
            if op in SHIFT_OPS and not use_imm:
                if shifts.any() and (acc_init & ~shifts).any():
                    acc_init = acc_init & ~shifts  # destinations never shift sources
                else:
                    use_imm = True
        if kind == 0:
            roles = [_Role("acc", acc_slice),
                     _Role("src", self._slice_mask(Buffer.INP, v)),
                     _Role("wgt", self._slice_mask(Buffer.WGT, v))]
        elif kind == 1:
            roles = [_Role("acc", acc_init), _Role("src", inp_ok), _Role("wgt", wgt_ok)]
        elif op is AluOp.REQUANT:  # the "source" factors step the record index
            roles = [_Role("acc", acc_init), _Role("wgt", records)]
        else:
            src_ok = shifts if op in SHIFT_OPS else acc_init
            roles = [_Role("acc", acc_slice if op is AluOp.MOV else acc_init),
                     _Role("src", acc_slice if use_imm else src_ok)]
        for attempt in range(8):
            n_out, n_in = self._extent(), self._extent()
            n_uops = self._pick([1, 2, 3, 4, 6, 8], [30, 20, 15, 15, 10, 10])
            if attempt >= 4:
                n_out, n_in, n_uops = 1, self._pick([1, 2], [1, 1]), 1
            while n_out * n_in * n_uops > _MAX_ITERATIONS:
                n_in = max(1, n_in // 2)
                n_out = max(1, n_out // 2)
            loops = (n_out, n_in)
            for role in roles:
                n_slice = int(role.valid.sum())
                depth = role.valid.size
                role.f_out = self._factor(n_slice, n_out, depth) if attempt < 6 else 0
                role.f_in = self._factor(n_slice, n_in, depth) if attempt < 6 else 0
            begin = end = -1
            resident = self.kernels[v]
            if resident and rng.random() < 0.4:
                b, e = resident[int(rng.integers(len(resident)))]
                if e - b > 1 and rng.random() < 0.3:
                    b = int(rng.integers(b, e))
                    e = int(rng.integers(b + 1, e + 1))
                if (e - b) * n_out * n_in <= _MAX_ITERATIONS and \
                        self._kernel_fits(b, e, roles, loops):
                    begin, end = b, e
            if begin < 0:
                filler = {"src": int(rng.integers(cfg.inp_depth)),
                          "wgt": int(rng.integers(cfg.wgt_depth))}
                uops = self._new_kernel(n_uops, roles, loops, filler)
                if uops is None:
                    continue
                item = self._kernel_load(uops, v, reserved)
                if item is None:
                    continue
                kernel_loads.append(item)
                self._apply_load(item)
                assert isinstance(item.insn, Load)
                begin, end = item.insn.sram, item.insn.sram + len(uops)
                self.kernels[v].append((begin, end))
                assert self._kernel_fits(begin, end, roles, loops)
            reserved[begin:end] = True
            acc_role = roles[0]
            if kind in (0, 1):
                insn: Insn = Gemm(reset=kind == 0, uop_begin=begin, uop_end=end,
                                  iter_out=n_out, iter_in=n_in,
                                  acc_factor_out=acc_role.f_out, acc_factor_in=acc_role.f_in,
                                  inp_factor_out=roles[1].f_out, inp_factor_in=roles[1].f_in,
                                  wgt_factor_out=roles[2].f_out, wgt_factor_in=roles[2].f_in)
            else:
                insn = Alu(op=op, use_imm=use_imm, imm=self._imm(op) if use_imm else 0,
                           uop_begin=begin, uop_end=end, iter_out=n_out, iter_in=n_in,
                           dst_factor_out=acc_role.f_out, dst_factor_in=acc_role.f_in,
                           src_factor_out=roles[1].f_out, src_factor_in=roles[1].f_in)
            shift_value = (isinstance(insn, Alu) and op is AluOp.MOV and use_imm
                           and 0 <= insn.imm <= MAX_SHIFT)
            for u in range(begin, end):
                uop = self.uop_buf[u]
                assert uop is not None
                for off in _loop_offsets(*loops, acc_role.f_out, acc_role.f_in):
                    if kind == 0 or op is AluOp.MOV:
                        self.init[Buffer.ACC][uop.acc + off] = True
                    self.shift_ok[uop.acc + off] = shift_value
                    self.record_shift_ok[uop.acc + off] = shift_value
            return insn
        return None

    def _relay(self) -> Insn:
        """A compute instruction touching only the scratch accumulator (carries tokens)."""
        rng = self.rng
        loops = {"iter_out": self._pick([1, 2, 3], [3, 1, 1]),
                 "iter_in": self._pick([1, 2, 3], [3, 1, 1])}
        scratch_init = bool(self.init[Buffer.ACC][self.scratch_acc])
        self.init[Buffer.ACC][self.scratch_acc] = True
        if rng.random() < 0.5 or not self.cfg.vector_alu:
            return Gemm(reset=True, uop_begin=self.relay_uop, uop_end=self.relay_uop + 1,
                        **loops)
        op = AluOp(int(rng.integers(AluOp.REQUANT))) if scratch_init else AluOp.MOV
        return Alu(op=op, use_imm=True, imm=self._imm(op), uop_begin=self.relay_uop,
                   uop_end=self.relay_uop + 1, **loops)

    # ------------------------------------------------------------------------ stores
    def _plan_store(self, step: int, v: int) -> _Item | None:
        rng = self.rng
        lo, hi = self.slices[Buffer.ACC][v]
        init = self.init[Buffer.ACC][lo:hi]
        idx = np.flatnonzero(init)
        if not idx.size:
            return None
        start = int(idx[int(rng.integers(idx.size))])
        gaps = np.flatnonzero(~init[start:])
        run = int(gaps[0]) if gaps.size else hi - lo - start
        seg = "fb" if rng.random() < 0.25 else "out"
        ob = self.cfg.out_entry_bytes
        avail = self.seg_bytes[seg] // ob
        x = self._small(min(run, 12, avail))
        y = self._small(max(1, min(run // x, 6)))
        if (y - 1) * x + x > avail:
            y = max(1, avail // x)
        stride, off = self._dram_rows(avail, y, x, overlap=STORE_ROW_OVERLAP)
        sram = lo + start + int(rng.integers(0, run - y * x + 1))
        if seg == "fb":
            for r in range(y):
                self.fb_writer[(off + r * stride) * ob:(off + r * stride + x) * ob] = step
        # (a stream of its own: the programs of configs with REQUANT are otherwise as
        # the generator made them before it had requantizing STOREs)
        rec = (self._records_at(lo, hi)
               if requant_supported(self.cfg) and self.store_rng.random() < 0.4 else None)
        return _Item(Store(sram=sram, dram=off, y=y, x=x, stride=stride,
                           requant=rec is not None, rec=rec or 0), seg)

    def _records_at(self, lo: int, hi: int) -> int | None:
        """The first of :data:`REQUANT_RECORD_WORDS` initialized accumulator entries in
        ``[lo, hi)`` that hold legal records of a requantizing STORE (the one with the
        shift byte holding a legal shift in every element of batch row 0), or None."""
        n = hi - lo - REQUANT_RECORD_WORDS + 1
        if n < 1:
            return None
        init = self.init[Buffer.ACC][lo:hi]
        ok = self.record_shift_ok[lo + REQUANT_SHIFT_BYTE // 4:][:n].copy()
        for word in range(REQUANT_RECORD_WORDS):
            ok &= init[word:word + n]
        first = np.flatnonzero(ok)
        return lo + int(first[int(self.store_rng.integers(first.size))]) if first.size \
            else None

    # ------------------------------------------------------------------------ phases
    def _emit(self, item: _Item) -> int:
        self.items.append(item)
        return len(self.items) - 1

    def _ordered_loads(self, loads: list[_Item]) -> list[_Item]:
        """A random order of ``loads`` keeping the order of any two that write the same
        buffer entries (so the generator's view of the buffers stays right)."""
        def span(it: _Item) -> tuple[Buffer, int, int]:
            i = it.insn
            assert isinstance(i, Load)
            return i.buffer, i.sram, i.sram + i.rows * i.cols

        spans = [span(it) for it in loads]
        preds = [{j for j in range(k) if spans[j][0] is spans[k][0]
                  and spans[j][1] < spans[k][2] and spans[k][1] < spans[j][2]}
                 for k in range(len(loads))]
        done: list[int] = []
        left = list(range(len(loads)))
        while left:
            ready = [k for k in left if preds[k] <= set(done)]
            k = ready[int(self.rng.integers(len(ready)))]
            done.append(k)
            left.remove(k)
        return [loads[k] for k in done]

    def _prologue(self) -> list[_Item]:
        """Loads before any computation: full-depth transfers and wide junk fills."""
        rng = self.rng
        out: list[_Item] = []
        if rng.random() < 0.25:
            for buf in rng.permutation([int(b) for b in Buffer])[:int(rng.integers(1, 3))]:
                item = self._full_depth_load(Buffer(int(buf)))
                if item is not None:
                    out.append(item)
        if rng.random() < 0.2:
            buf = Buffer(int(rng.choice([Buffer.INP, Buffer.WGT, Buffer.ACC])))
            item = self._plan_load(buf, (0, buffer_depth(self.cfg, buf)), -1)
            if item is not None:
                out.append(item)
        for item in out:
            self._apply_load(item)
        return out

    def _step(self, s: int, prologue: list[_Item]) -> None:
        rng, V = self.rng, self.V
        v = s % V
        n = self.n_steps
        # 1. the release that lets this thread's loads overwrite its slices
        if s >= V:
            t = s - V
            pops = bool(self.store_groups[t])
            if self.release_relay[t]:
                idx = self._emit(_Item(self._relay()))
            else:
                group = self.compute_groups[s - 1]
                idx = group[int(rng.integers(len(group)))]
            self.items[idx].flag(pop_next=pops, push_prev=True)
        # 2. loads
        loads = list(prologue)
        if s == 0 and any(self.release_relay):
            relay = _Item(Load(buffer=Buffer.UOP, sram=self.relay_uop, dram=len(self.table),
                               y=1, x=1, stride=int(rng.integers(0, 3))), UOP_SEGMENT)
            self.table.append(Uop(acc=self.scratch_acc, src=0, wgt=0))
            self._apply_load(relay)
            loads.append(relay)
        n_loads = self._pick([1, 2, 3, 4], [3, 4, 3, 1])
        for _ in range(n_loads):
            buf = Buffer(self._pick([Buffer.INP, Buffer.WGT, Buffer.ACC, Buffer.UOP],
                                    [4, 3, 2, 1]))
            item = self._plan_load(buf, self.slices[buf][v], s)
            if item is not None:
                self._apply_load(item)
                loads.append(item)
        # 3. computation (may add kernel loads)
        reserved = np.zeros(self.cfg.uop_depth, dtype=bool)
        computes: list[Insn] = []
        for _ in range(self._pick([1, 2, 3, 4], [3, 4, 3, 1])):
            insn = self._plan_compute(v, reserved, loads)
            if insn is not None:
                computes.append(insn)
        if not computes:  # always at least one instruction to carry the tokens
            computes.append(self._relay_for(v, reserved, loads))
        if not loads:
            item = self._plan_load(Buffer.INP, self.slices[Buffer.INP][v], s, "inp")
            assert item is not None
            self._apply_load(item)
            loads.append(item)
        loads = self._ordered_loads(loads)
        if s >= V:
            loads[0].flag(pop_next=True)
        loads[-1].flag(push_next=True)
        for item in loads:
            self._emit(item)
        group = [self._emit(_Item(c)) for c in computes]
        self.items[group[0]].flag(pop_prev=True)
        self.compute_groups.append(group)
        # 4. stores
        stores = []
        for _ in range(self._pick([0, 1, 2, 3], [2, 5, 3, 1])):
            item = self._plan_store(s, v)
            if item is not None:
                stores.append(self._emit(item))
        self.store_groups.append(stores)
        if stores:
            self.items[group[-1]].flag(push_next=True)
            self.items[stores[0]].flag(pop_prev=True)
            if s + V < n:
                self.items[stores[-1]].flag(push_prev=True)

    def _relay_for(self, v: int, reserved: np.ndarray, loads: list[_Item]) -> Insn:
        """A compute instruction that always fits: MOV of an immediate into the slice (a
        resetting GEMM without the vector ALU)."""
        lo, _ = self.slices[Buffer.ACC][v]
        uop = Uop(acc=lo, src=lo, wgt=0)
        item = self._kernel_load([uop], v, reserved)
        assert item is not None
        self._apply_load(item)
        loads.append(item)
        assert isinstance(item.insn, Load)
        reserved[item.insn.sram] = True
        self.kernels[v].append((item.insn.sram, item.insn.sram + 1))
        self.init[Buffer.ACC][lo] = True
        if not self.cfg.vector_alu:  # zeros, through a resetting GEMM
            self.shift_ok[lo] = self.record_shift_ok[lo] = True
            return Gemm(reset=True, uop_begin=item.insn.sram, uop_end=item.insn.sram + 1)
        imm = self._imm(AluOp.MOV)
        self.shift_ok[lo] = self.record_shift_ok[lo] = 0 <= imm <= MAX_SHIFT
        return Alu(op=AluOp.MOV, use_imm=True, imm=imm,
                   uop_begin=item.insn.sram, uop_end=item.insn.sram + 1)

    def _finish(self) -> None:
        finish = Finish()
        stores = [g for g in self.store_groups if g]
        if stores:
            last = stores[-1][-1]
            st = self.items[last].insn
            if not st.push_prev and self.rng.random() < 0.5:
                self.items[last].flag(push_prev=True)
                finish = Finish(pop_next=True)
        self._emit(_Item(finish))

    # -------------------------------------------------------------------- ordering
    def _interleave(self) -> None:
        """Check that program order executes instruction by instruction within the
        token-queue capacity; sometimes re-interleave the engine streams into another
        such order."""
        items = self.items
        cap = self.cfg.dep_queue_depth
        streams: list[list[_Item]] = [[], [], []]
        for it in items[:-1]:
            streams[it.insn.engine].append(it)

        def ready(it: _Item, q: dict[str, int]) -> bool:
            e = it.insn.engine
            return all(q[name] > 0 for f, name in _POPS[e] if getattr(it.insn, f)) and \
                all(q[name] < cap for f, name in _PUSHES[e] if getattr(it.insn, f))

        def apply(it: _Item, q: dict[str, int]) -> None:
            e = it.insn.engine
            for f, name in _POPS[e]:
                if getattr(it.insn, f):
                    q[name] -= 1
            for f, name in _PUSHES[e]:
                if getattr(it.insn, f):
                    q[name] += 1

        q = dict.fromkeys(("l2c", "c2l", "c2s", "s2c"), 0)
        for k, it in enumerate(items):
            assert ready(it, q), f"generator bug: instruction {k} cannot run in order"
            apply(it, q)
        assert not any(q.values()), f"generator bug: tokens left over {q}"
        if self.rng.random() < 0.5:
            return
        weights = self.rng.random(3) + 0.1
        q = dict.fromkeys(q, 0)
        pos = [0, 0, 0]
        order: list[_Item] = []
        while len(order) < len(items) - 1:
            cands = [e for e in range(3) if pos[e] < len(streams[e])
                     and ready(streams[e][pos[e]], q)]
            if not cands:
                return  # keep the original order
            w = np.array([weights[e] for e in cands])
            e = cands[int(self.rng.choice(len(cands), p=w / w.sum()))]
            it = streams[e][pos[e]]
            pos[e] += 1
            apply(it, q)
            order.append(it)
        assert ready(items[-1], q)
        self.items = [*order, items[-1]]

    # ------------------------------------------------------------------------ build
    def build(self) -> Program:
        prologue = self._prologue()
        for s in range(self.n_steps):
            self._step(s, prologue if s == 0 else [])
        self._finish()
        self._interleave()
        prog = Program(self.cfg, [it.insn for it in self.items], list(self.table),
                       list(self.segments))
        layout = prog.layout()
        resolved = []
        for it in self.items:
            insn = it.insn
            if it.seg is not None:
                assert isinstance(insn, Load | Store)
                base = segment_dram(self.cfg, insn, it.seg, layout[it.seg].offset)
                insn = dataclasses.replace(insn, dram=insn.dram + base)
            resolved.append(insn)
        prog.insns = resolved
        prog.validate()
        return prog


def random_program(cfg: HwConfig, seed: int, *, vthreads: int | None = None,
                   max_steps: int | None = None) -> Program:
    """A seeded random legal program for differential testing.

    Parameters
    ----------
    cfg : HwConfig
        Target configuration.
    seed : int
        Non-negative seed; the program depends only on ``(cfg, seed)`` and the
        keyword arguments.
    vthreads : int | None
        Virtual threads (each owns ``1/vthreads`` of every buffer); random 1..4 when
        ``None``.
    max_steps : int | None
        Most steps (one load / compute / store group each); default 8.

    Returns
    -------
    Program
        A validated program: inputs in segments ``inp``, ``wgt``, ``bias`` and
        ``fb``, results in the output segments ``out`` and ``fb`` (which later loads
        may read back), and segment ``random_meta`` recording seed, vthreads and steps
        for :func:`describe`. It runs on the functional simulator without deadlock,
        token or race errors, reads no buffer entry it did not write and keeps every
        index in range.

    Raises
    ------
    ValueError
        A negative seed, ``vthreads < 1`` or too many for the buffers, or
        ``max_steps < 1``.
    """
    return _Generator(cfg, seed, vthreads, max_steps).build()


def program_meta(program: Program) -> dict[str, int] | None:
    """``seed``, ``vthreads``, ``steps`` and ``version`` of a program made by
    :func:`random_program` (``None`` for other programs)."""
    try:
        seg = program.segment(META_SEGMENT)
    except KeyError:
        return None
    if seg.data is None or seg.size != 5:
        return None
    d = [int(v) for v in np.asarray(seg.data).ravel()]
    return {"seed": d[0] | (d[1] << 31), "vthreads": d[2], "steps": d[3], "version": d[4]}


def describe(program: Program, *, listing: bool = True) -> str:
    """A summary of ``program`` for failure messages.

    Parameters
    ----------
    program : Program
        Any program; those of :func:`random_program` also show seed, vthreads and steps.
    listing : bool
        Append the instruction listing (one numbered line per instruction, DRAM
        addresses relative to segments).

    Returns
    -------
    str
        Multi-line text.
    """
    cfg = program.config
    lines = []
    meta = program_meta(program)
    head = f"config {cfg.name}"
    if meta is not None:
        head += (f", seed {meta['seed']}, {meta['vthreads']} vthread(s), "
                 f"{meta['steps']} step(s), generator v{meta['version']}")
    lines.append(head)
    counts: dict[str, int] = {}
    flags = dict.fromkeys(("pop_prev", "pop_next", "push_prev", "push_next"), 0)
    for insn in program.insns:
        counts[insn.mnemonic] = counts.get(insn.mnemonic, 0) + 1
        for f in flags:
            flags[f] += int(getattr(insn, f))
    lines.append(f"{len(program.insns)} instructions: "
                 + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    lines.append("flags: " + ", ".join(f"{k} {v}" for k, v in flags.items()))
    lines.append(f"{len(program.uops)} micro-ops in DRAM; segments: "
                 + ", ".join(f"{s.name} {s.dtype}{list(s.shape)}{' out' if s.output else ''}"
                             for s in program.segments)
                 + f"; DRAM image {program.dram_size} bytes")
    if listing:
        width = len(str(len(program.insns)))
        lines += [f"  {i:>{width}}  {format_insn(insn, program)}"
                  for i, insn in enumerate(program.insns)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m tensorfab.sim.testing.random_program CONFIG SEED [--vthreads N] [--asm]``."""
    from tensorfab.isa.disasm import disassemble

    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("config", help=f"preset ({', '.join(PRESETS)}) or JSON config file")
    ap.add_argument("seed", type=int)
    ap.add_argument("--vthreads", type=int, default=None)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--asm", action="store_true", help="print the full assembly instead")
    args = ap.parse_args(argv)
    prog = random_program(get_config(args.config), args.seed, vthreads=args.vthreads,
                          max_steps=args.max_steps)
    print(disassemble(prog) if args.asm else describe(prog), end="\n")


__all__ = ["GENERATOR_VERSION", "LOAD_ROW_OVERLAP", "META_SEGMENT", "STORE_ROW_OVERLAP",
           "describe", "program_meta", "random_program"]

if __name__ == "__main__":
    main()
