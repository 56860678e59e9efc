"""Directed ISA test programs, modeled on TVM VTA's ``test_vta_insn.py``.

Every builder takes a :class:`~tensorfab.isa.HwConfig` and a numpy ``Generator`` and
returns ``(program, inputs)``: the complete program (inputs already in its segments,
results in the segments marked ``output``) and a dict of the values a reference
needs — the logical input arrays and any immediate the builder drew. Expected
outputs are deliberately *not* computed here: the functional-simulator tests and the
RTL tests each check results against their own references.

Conventions shared by the builders:

* The load engine first loads the micro-op table, then the data; its last LOAD pushes
  one ``l2c`` token. The compute engine's first instruction pops it and its last one
  pushes one ``c2s`` token, which the first STORE pops. Programs whose compute phase
  would otherwise be empty use a *relay*: a GEMM ``reset`` of one scratch accumulator
  (the buffer's last entry) that no output reads.
* ALU programs observe all 32 bits of their results: the result region is copied
  (``MOV``) into three more regions that are shifted right by 8, 16 and 24 (``SHR``),
  and the four regions are stored as output ``out`` of shape
  ``(4, n, batch, block_out)``: byte lane ``l`` of every element.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorfab.isa import (
    Alu,
    AluOp,
    Buffer,
    Gemm,
    HwConfig,
    Load,
    Program,
    ProgramBuilder,
    Segment,
    Store,
    Uop,
)
from tensorfab.isa.formats import (
    ALU_PIPELINE_STAGES,
    BINARY_ALU_OPS,
    alu_requant_supported,
    requant_supported,
)
from tensorfab.isa.requant_record import pack_requant_acc_records, pack_requant_records
from tensorfab.sim.testing.blocked_gemm import GemmTiling, build_blocked_gemm

Inputs = dict[str, np.ndarray]

#: Shift operations: immediates must be 0..31.
SHIFT_OPS = (AluOp.SHR, AluOp.SHR_RND, AluOp.SHL)
#: ALU test geometry: rows x columns of accumulator entries.
ALU_ROWS, ALU_COLS = 4, 8


def _i32(rng: np.random.Generator, shape: tuple[int, ...], lo: int = -(1 << 31),
         hi: int = (1 << 31) - 1) -> np.ndarray:
    return rng.integers(lo, hi, size=shape, endpoint=True, dtype=np.int64).astype(np.int32)


def _i8(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-128, 127, size=shape, endpoint=True, dtype=np.int8)


def _relay(bld: ProgramBuilder, relay_uop: int, **flags: bool) -> int:
    """Compute-engine no-op carrying tokens: reset the scratch accumulator."""
    return bld.emit(Gemm(reset=True, uop_begin=relay_uop, uop_end=relay_uop + 1, **flags))


# ------------------------------------------------------------------ load / store
def build_load_store_acc(cfg: HwConfig, rng: np.random.Generator, *, rows: int = 3,
                         cols: int = 5) -> tuple[Program, Inputs]:
    """Save/load of outputs: 2-D ``load.acc`` then 2-D ``store`` (low-byte narrowing).

    ``X`` is ``(rows, cols + 1, batch, block_out)`` int32 (full range); the load reads
    its first ``cols`` entries of each row (stride ``cols + 1``) into accumulators
    ``0 .. rows*cols-1``; the store writes them to output ``out``
    ``(rows, cols + 2, batch, block_out)`` int8 with stride ``cols + 2``, so the last
    two entries of each output row stay zero.
    """
    e = (cfg.batch, cfg.block_out)
    x = _i32(rng, (rows, cols + 1, *e))
    bld = ProgramBuilder(cfg)
    bld.add_segment(Segment("X", "int32", x.shape, x))
    bld.add_segment(Segment("out", "int8", (rows, cols + 2, *e), output=True))
    relay = bld.add_uops([Uop(acc=cfg.acc_depth - 1)])[0]
    bld.load_uops()
    bld.emit(Load(buffer=Buffer.ACC, sram=0, dram=0, y=rows, x=cols, stride=cols + 1,
                  push_next=True), segment="X")
    _relay(bld, relay, pop_prev=True, push_next=True)
    bld.emit(Store(sram=0, dram=0, y=rows, x=cols, stride=cols + 2, pop_prev=True),
             segment="out")
    return bld.build(), {"X": x}


# ----------------------------------------------------------------- padded loads
PAD_CASES: dict[str, tuple[int, int, int, int]] = {
    "top": (2, 0, 0, 0),
    "bottom": (0, 2, 0, 0),
    "left": (0, 0, 2, 0),
    "right": (0, 0, 0, 2),
    "all": (1, 2, 3, 1),
}
"""Padding ``(top, bottom, left, right)`` of the padded-load tests, by name."""

PAD_Y, PAD_X = 3, 4
"""Data block of the padded-load tests: rows, entries per row (DRAM stride ``PAD_X + 2``)."""


def build_padded_load_inp(cfg: HwConfig, rng: np.random.Generator,
                          pad: Sequence[int]) -> tuple[Program, Inputs]:
    """Padded ``load.inp``, observed through a GEMM with an identity weight.

    ``X`` is ``(PAD_Y, PAD_X + 2, batch, block_in)`` int8; the first ``PAD_X`` entries of
    each row are loaded with padding ``pad = (top, bottom, left, right)`` into input
    entries that were first filled with non-zero junk (``J``), so zero padding is
    observable. One weight entry ``W = eye(block_out, block_in)`` maps each input
    entry to an accumulator entry (``acc[e] = inp[e] @ W.T``), stored as output ``out``
    ``(rows, cols, batch, block_out)`` int8 with ``rows = top + PAD_Y + bottom`` and
    ``cols = left + PAD_X + right``.
    """
    top, bottom, left, right = (int(p) for p in pad)
    rows, cols = top + PAD_Y + bottom, left + PAD_X + right
    n = rows * cols
    x = _i8(rng, (PAD_Y, PAD_X + 2, cfg.batch, cfg.block_in))
    junk = rng.integers(1, 127, size=(n, cfg.batch, cfg.block_in), endpoint=True,
                        dtype=np.int8)
    w = np.eye(cfg.block_out, cfg.block_in, dtype=np.int8)[None]
    bld = ProgramBuilder(cfg)
    bld.add_segment(Segment("X", "int8", x.shape, x))
    bld.add_segment(Segment("J", "int8", junk.shape, junk))
    bld.add_segment(Segment("W", "int8", w.shape, w))
    bld.add_segment(Segment("out", "int8", (rows, cols, cfg.batch, cfg.block_out),
                            output=True))
    u = bld.add_uops([Uop(acc=0, src=0, wgt=0)])[0]
    bld.load_uops()
    bld.emit(Load(buffer=Buffer.WGT, sram=0, dram=0, y=1, x=1, stride=1), segment="W")
    bld.emit(Load(buffer=Buffer.INP, sram=0, dram=0, y=1, x=n, stride=n), segment="J")
    bld.emit(Load(buffer=Buffer.INP, sram=0, dram=0, y=PAD_Y, x=PAD_X, stride=PAD_X + 2,
                  pad_top=top, pad_bottom=bottom, pad_left=left, pad_right=right,
                  push_next=True), segment="X")
    loop = {"iter_out": rows, "iter_in": cols, "acc_factor_out": cols, "acc_factor_in": 1}
    bld.emit(Gemm(reset=True, uop_begin=u, uop_end=u + 1, pop_prev=True, **loop))
    bld.emit(Gemm(uop_begin=u, uop_end=u + 1, inp_factor_out=cols, inp_factor_in=1,
                  push_next=True, **loop))
    bld.emit(Store(sram=0, dram=0, y=rows, x=cols, stride=cols, pop_prev=True),
             segment="out")
    return bld.build(), {"X": x, "J": junk, "W": w}


def build_padded_load_acc(cfg: HwConfig, rng: np.random.Generator,
                          pad: Sequence[int]) -> tuple[Program, Inputs]:
    """Padded ``load.acc`` over non-zero junk, then ``store``.

    ``X`` is ``(PAD_Y, PAD_X + 2, batch, block_out)`` int32 loaded as in
    :func:`build_padded_load_inp`; output ``out`` is ``(rows, cols, batch, block_out)``
    int8 (low bytes).
    """
    top, bottom, left, right = (int(p) for p in pad)
    rows, cols = top + PAD_Y + bottom, left + PAD_X + right
    n = rows * cols
    e = (cfg.batch, cfg.block_out)
    x = _i32(rng, (PAD_Y, PAD_X + 2, *e))
    junk = _i32(rng, (n, *e), 1, 127)
    bld = ProgramBuilder(cfg)
    bld.add_segment(Segment("X", "int32", x.shape, x))
    bld.add_segment(Segment("J", "int32", junk.shape, junk))
    bld.add_segment(Segment("out", "int8", (rows, cols, *e), output=True))
    relay = bld.add_uops([Uop(acc=cfg.acc_depth - 1)])[0]
    bld.load_uops()
    bld.emit(Load(buffer=Buffer.ACC, sram=0, dram=0, y=1, x=n, stride=n), segment="J")
    bld.emit(Load(buffer=Buffer.ACC, sram=0, dram=0, y=PAD_Y, x=PAD_X, stride=PAD_X + 2,
                  pad_top=top, pad_bottom=bottom, pad_left=left, pad_right=right,
                  push_next=True), segment="X")
    _relay(bld, relay, pop_prev=True, push_next=True)
    bld.emit(Store(sram=0, dram=0, y=rows, x=cols, stride=cols, pop_prev=True),
             segment="out")
    return bld.build(), {"X": x, "J": junk}


# ------------------------------------------------------------------------- GEMM
GEMM_SIZES: dict[str, tuple[int, int, int]] = {
    "tiny": (64, 64, 64),
    "small": (128, 256, 256),
    "default": (256, 512, 512),
}
"""``(m, n, k)`` of the blocked-GEMM tests per preset: several tiles at 1, 2, 4 threads."""


def build_gemm(cfg: HwConfig, rng: np.random.Generator, *, m: int | None = None,
               n: int | None = None, k: int | None = None, vthreads: int = 1,
               tiling: GemmTiling | None = None,
               epilogue: Sequence[tuple[AluOp, int]] | None = None
               ) -> tuple[Program, Inputs]:
    """Blocked GEMM through :func:`~tensorfab.compiler.build_blocked_gemm`.

    Sizes default to :data:`GEMM_SIZES` for the preset (else ``(8*batch, 8*block_out,
    8*block_in)``). Inputs: ``A`` ``(m, k)`` and ``B`` ``(k, n)`` int8 (logical, not
    packed); output ``C`` is packed (see :func:`~tensorfab.compiler.unpack_outputs`).
    """
    dm, dn, dk = GEMM_SIZES.get(cfg.name, (8 * cfg.batch, 8 * cfg.block_out,
                                           8 * cfg.block_in))
    m, n, k = m or dm, n or dn, k or dk
    a = _i8(rng, (m, k))
    b = _i8(rng, (k, n))
    prog = build_blocked_gemm(cfg, m, n, k, vthreads=vthreads, a=a, b=b, tiling=tiling,
                              epilogue=epilogue)
    return prog, {"A": a, "B": b}


# -------------------------------------------------------------------------- ALU
def _alu_program(cfg: HwConfig, x: np.ndarray, y: np.ndarray | None,
                 ops: Sequence[tuple[AluOp, int | None]],
                 extra_inputs: Inputs) -> tuple[Program, Inputs]:
    """Apply ``ops`` in order to ``X`` (operand ``Y`` where an op's immediate is None)
    and store the four byte lanes of the result.

    Accumulator map: result ``[0, n)``, lanes 1..3 ``[n, 4n)``, operand ``[4n, 5n)``.
    The op loop covers the ``ALU_ROWS x ALU_COLS`` entries with two micro-ops (even
    and odd columns), ``iter_out`` over rows and ``iter_in`` over column pairs.
    """
    e = (cfg.batch, cfg.block_out)
    n = ALU_ROWS * ALU_COLS
    bld = ProgramBuilder(cfg)
    bld.add_segment(Segment("X", "int32", (n, *e), x))
    if y is not None:
        bld.add_segment(Segment("Y", "int32", (n, *e), y))
    bld.add_segment(Segment("out", "int8", (4, n, *e), output=True))
    k_op = bld.add_uops([Uop(acc=c, src=4 * n + c) for c in range(2)])[0]
    k_lane = bld.add_uops([Uop(acc=n, src=0)])[0]
    k_shr = bld.add_uops([Uop(acc=lane * n, src=lane * n) for lane in (1, 2, 3)])[0]
    bld.load_uops()
    bld.emit(Load(buffer=Buffer.ACC, sram=0, dram=0, y=1, x=n, stride=n,
                  push_next=y is None), segment="X")
    if y is not None:
        bld.emit(Load(buffer=Buffer.ACC, sram=4 * n, dram=0, y=1, x=n, stride=n,
                      push_next=True), segment="Y")
    first = True
    for op, imm in ops:
        bld.emit(Alu(op=op, use_imm=imm is not None, imm=0 if imm is None else int(imm),
                     uop_begin=k_op, uop_end=k_op + 2, iter_out=ALU_ROWS,
                     iter_in=ALU_COLS // 2, dst_factor_out=ALU_COLS, dst_factor_in=2,
                     src_factor_out=ALU_COLS, src_factor_in=2, pop_prev=first))
        first = False
    # Byte lanes: copy the result to lanes 1..3, shift lane l right by 8*l.
    bld.emit(Alu(op=AluOp.MOV, uop_begin=k_lane, uop_end=k_lane + 1, iter_out=3, iter_in=n,
                 dst_factor_out=n, dst_factor_in=1, src_factor_out=0, src_factor_in=1,
                 pop_prev=first))
    for lane in (1, 2, 3):
        bld.emit(Alu(op=AluOp.SHR, use_imm=True, imm=8 * lane, uop_begin=k_shr + lane - 1,
                     uop_end=k_shr + lane, iter_out=1, iter_in=n, dst_factor_in=1,
                     src_factor_in=1, push_next=lane == 3))
    bld.emit(Store(sram=0, dram=0, y=4, x=n, stride=n, pop_prev=True), segment="out")
    inputs: Inputs = {"X": x, **extra_inputs}
    if y is not None:
        inputs["Y"] = y
    return bld.build(), inputs


def _alu_shape(cfg: HwConfig) -> tuple[int, ...]:
    return (ALU_ROWS * ALU_COLS, cfg.batch, cfg.block_out)


def random_imm(op: AluOp, rng: np.random.Generator) -> int:
    """A legal random immediate for ``op``: 0..31 for shifts, 0..32767 for CLIP, any
    16-bit value otherwise."""
    if op in SHIFT_OPS:
        return int(rng.integers(0, 31, endpoint=True))
    if op is AluOp.CLIP:
        return int(rng.integers(0, (1 << 15) - 1, endpoint=True))
    return int(rng.integers(-(1 << 15), (1 << 15) - 1, endpoint=True))


def build_alu(cfg: HwConfig, rng: np.random.Generator, op: AluOp, *, use_imm: bool,
              imm: int | None = None) -> tuple[Program, Inputs]:
    """One ALU operation with an immediate or a vector operand, on full-range int32.

    Inputs: ``X`` (first operand, also the destination), ``Y`` (vector operand; only
    without ``use_imm``) of shape ``(ALU_ROWS*ALU_COLS, batch, block_out)`` int32, and
    ``imm`` (0-d int64; only with ``use_imm``; random legal value unless given).
    Output ``out``: the result's four byte lanes (see the module docstring).
    """
    op = AluOp(op)
    x = _i32(rng, _alu_shape(cfg))
    if use_imm:
        imm = random_imm(op, rng) if imm is None else int(imm)
        return _alu_program(cfg, x, None, [(op, imm)], {"imm": np.array(imm)})
    # vector shift amounts must be 0..31 (else SHIFT_RANGE)
    y = _i32(rng, _alu_shape(cfg), 0, 31) if op in SHIFT_OPS else _i32(rng, _alu_shape(cfg))
    if op is AluOp.MULHI:  # gemmlowp's edge operands in the first entries
        edges = np.array([-(1 << 31), -(1 << 31) + 1, -1, 0, 1, (1 << 31) - 1])
        x.reshape(-1)[:edges.size * edges.size] = np.repeat(edges, edges.size)[
            :x.size]
        y.reshape(-1)[:edges.size * edges.size] = np.tile(edges, edges.size)[:y.size]
    return _alu_program(cfg, x, y, [(op, None)], {})


def build_relu(cfg: HwConfig, rng: np.random.Generator) -> tuple[Program, Inputs]:
    """ReLU: ``alu.max imm=0`` on full-range ``X``. Output as :func:`build_alu`."""
    x = _i32(rng, _alu_shape(cfg))
    return _alu_program(cfg, x, None, [(AluOp.MAX, 0)], {})


def build_requant(cfg: HwConfig, rng: np.random.Generator) -> tuple[Program, Inputs]:
    """Shift-and-scale requantisation: ``MUL imm=mul``, ``SHR_RND imm=shift``,
    ``CLIP imm=127``.

    ``X`` holds GEMM-like sums in ``[-2^16, 2^16]``, ``mul`` is in ``[1, 2^14]`` and
    ``shift`` in ``[16, 24]``, so products stay within int32 and a fair share of the
    results saturate. Inputs: ``X``, ``mul``, ``shift`` (0-d). Output as
    :func:`build_alu` (lane 0 is the int8 result).
    """
    x = _i32(rng, _alu_shape(cfg), -(1 << 16), 1 << 16)
    mul = int(rng.integers(1, 1 << 14, endpoint=True))
    shift = int(rng.integers(16, 24, endpoint=True))
    return _alu_program(cfg, x, None,
                        [(AluOp.MUL, mul), (AluOp.SHR_RND, shift), (AluOp.CLIP, 127)],
                        {"mul": np.array(mul), "shift": np.array(shift)})


def build_requant_records(cfg: HwConfig, rng: np.random.Generator
                          ) -> tuple[Program, Inputs]:
    """REQUANT over ``ALU_ROWS × ALU_COLS`` entries of full-range ``X`` with records of
    random legal fields (``R``, one weight entry per channel block, the micro-ops
    cycling over two of them). Output ``out``: the int8 results."""
    e = (cfg.batch, cfg.block_out)
    n = ALU_ROWS * ALU_COLS
    x = _i32(rng, (n, *e))
    c = 2 * cfg.block_out
    lo = rng.integers(-128, 128, c)
    rec = pack_requant_records(
        cfg, multiplier=rng.integers(0, 1 << 31, c), bias=rng.integers(-(1 << 31), 1 << 31, c),
        shift=rng.integers(0, 63, c), zero_point=rng.integers(-128, 128, c), lo=lo,
        hi=np.maximum(lo, rng.integers(-128, 128, c)))
    bld = ProgramBuilder(cfg)
    bld.add_segment(Segment("X", "int32", (n, *e), x))
    bld.add_segment(Segment("R", "int8", rec.shape, rec))
    bld.add_segment(Segment("out", "int8", (n, *e), output=True))
    k = bld.add_uops([Uop(acc=i, src=0, wgt=i % 2) for i in range(2)])[0]
    bld.load_uops()
    bld.emit(Load(buffer=Buffer.WGT, sram=0, dram=0, y=1, x=2, stride=2), segment="R")
    bld.emit(Load(buffer=Buffer.ACC, sram=0, dram=0, y=1, x=n, stride=n, push_next=True),
             segment="X")
    bld.emit(Alu(op=AluOp.REQUANT, uop_begin=k, uop_end=k + 2, iter_out=n // 2,
                 dst_factor_out=2, pop_prev=True, push_next=True))
    bld.emit(Store(sram=0, dram=0, y=1, x=n, stride=n, pop_prev=True), segment="out")
    return bld.build(), {"X": x, "R": rec}


def store_requant_program(cfg: HwConfig, x: np.ndarray, rec: np.ndarray, rec_at: int,
                          y: int = 1, stride: int | None = None) -> Program:
    """acc[0:k] = x, acc[rec_at:rec_at+3] = rec; STORE the k entries as ``y`` rows
    through the records. A compute instruction hands the tokens from load to store: an
    ALU pass adding 0, or without the vector ALU a resetting GEMM of the last
    accumulator entry (which ``x`` and ``rec`` must leave free)."""
    k = x.shape[0]
    cols = k // y
    stride = cols if stride is None else stride
    bld = ProgramBuilder(cfg)
    bld.add_segment(Segment("X", "int32", x.shape, x))
    bld.add_segment(Segment("R", "int32", rec.shape, rec))
    bld.add_segment(Segment("out", "int8", ((y - 1) * stride + cols, cfg.batch, cfg.block_out),
                            output=True))
    scratch = 0 if cfg.vector_alu else cfg.acc_depth - 1
    begin, end = bld.add_uops([Uop(acc=scratch, src=0, wgt=0)])
    bld.load_uops()
    bld.emit(Load(buffer=Buffer.ACC, sram=0, dram=0, x=k), segment="X")
    bld.emit(Load(buffer=Buffer.ACC, sram=rec_at, dram=0, x=3, push_next=True), segment="R")
    if cfg.vector_alu:
        bld.emit(Alu(op=AluOp.ADD, use_imm=True, imm=0, uop_begin=begin, uop_end=end,
                     pop_prev=True, push_next=True))
    else:
        bld.emit(Gemm(reset=True, uop_begin=begin, uop_end=end, pop_prev=True,
                      push_next=True))
    bld.emit(Store(sram=0, dram=0, y=y, x=cols, stride=stride, requant=True, rec=rec_at,
                   pop_prev=True), segment="out")
    return bld.build()


def build_store_requant(cfg: HwConfig, rng: np.random.Generator) -> tuple[Program, Inputs]:
    """A requantizing STORE of ``ALU_ROWS × ALU_COLS`` entries of full-range ``X`` as
    two rows with a gap, through records of random legal fields (``R``, three
    accumulator entries, past ``X``). Output ``out``: the int8 results."""
    e = (cfg.batch, cfg.block_out)
    n = ALU_ROWS * ALU_COLS
    x = _i32(rng, (n, *e))
    lo = rng.integers(-128, 128, cfg.block_out)
    rec = pack_requant_acc_records(
        cfg, multiplier=rng.integers(0, 1 << 31, cfg.block_out),
        bias=rng.integers(-(1 << 31), 1 << 31, cfg.block_out),
        shift=rng.integers(0, 63, cfg.block_out),
        zero_point=rng.integers(-128, 128, cfg.block_out), lo=lo,
        hi=np.maximum(lo, rng.integers(-128, 128, cfg.block_out)))
    return (store_requant_program(cfg, x, rec, n + 1, y=2, stride=n // 2 + 3),
            {"X": x, "R": rec})


def build_alu_reduction(cfg: HwConfig, rng: np.random.Generator, op: AluOp = AluOp.MAX,
                        *, groups: int = 4, width: int = 5, apart: int = 1
                        ) -> tuple[Program, Inputs]:
    """Reduction through ALU loop order (max-pooling style): ``dst`` fixed, ``src``
    moving, each iteration seeing the previous ones' results.

    ``X`` is ``(groups, width, batch, block_out)`` int32 at accumulators
    ``[groups, groups*(1+width))``; ``MOV`` copies column 0 of each group to
    accumulator ``g``, then one ``op`` instruction folds columns 1..width-1 in:
    ``apart`` micro-ops, one per group of a block of ``apart`` groups (``iter_out``
    over blocks, ``iter_in`` over columns), so each micro-op reads what the one
    ``apart`` ahead of it wrote (the compute pipeline's hazard distance). Output
    ``out`` ``(groups, batch, block_out)`` int8: low bytes of the reductions.
    """
    if groups % apart:
        raise ValueError(f"groups={groups} is not a multiple of apart={apart}")
    e = (cfg.batch, cfg.block_out)
    x = _i32(rng, (groups, width, *e))
    bld = ProgramBuilder(cfg)
    bld.add_segment(Segment("X", "int32", x.shape, x))
    bld.add_segment(Segment("out", "int8", (groups, *e), output=True))
    k_mov = bld.add_uops([Uop(acc=0, src=groups)])[0]
    k_red = bld.add_uops([Uop(acc=g, src=groups + g * width + 1) for g in range(apart)])[0]
    bld.load_uops()
    bld.emit(Load(buffer=Buffer.ACC, sram=groups, dram=0, y=1, x=groups * width,
                  stride=groups * width, push_next=True), segment="X")
    bld.emit(Alu(op=AluOp.MOV, uop_begin=k_mov, uop_end=k_mov + 1, iter_out=groups,
                 iter_in=1, dst_factor_out=1, src_factor_out=width, pop_prev=True))
    bld.emit(Alu(op=AluOp(op), uop_begin=k_red, uop_end=k_red + apart,
                 iter_out=groups // apart, iter_in=width - 1, dst_factor_out=apart,
                 dst_factor_in=0, src_factor_out=apart * width, src_factor_in=1,
                 push_next=True))
    bld.emit(Store(sram=0, dram=0, y=1, x=groups, stride=groups, pop_prev=True),
             segment="out")
    return bld.build(), {"X": x}


__all__ = [
    "ALU_COLS",
    "ALU_ROWS",
    "GEMM_SIZES",
    "PAD_CASES",
    "PAD_X",
    "PAD_Y",
    "SHIFT_OPS",
    "build_alu",
    "build_alu_reduction",
    "build_gemm",
    "build_load_store_acc",
    "build_padded_load_acc",
    "build_padded_load_inp",
    "build_relu",
    "build_requant",
    "random_imm",
]


#: GEMM sizes (m, n, k) of the directed suite per preset.
DIRECTED_GEMM_DIMS = {"tiny": (8, 8, 16), "small": (16, 16, 32), "default": (16, 32, 64)}


def directed_programs(cfg: HwConfig, *, large_gemm: bool = False) -> dict[str, Program]:
    """Every directed program of the foundation suite, by name, with seeded data. A
    config without the vector ALU gets its loads, stores and GEMMs and a requantizing
    STORE (``store_requant``) instead of the ALU's programs.

    Parameters
    ----------
    cfg : HwConfig
        A preset (its name picks the GEMM size; others use the ``small`` size).
    large_gemm : bool
        Add ``gemm_large_vt2``, a GEMM of :func:`build_gemm`'s default size.
    """
    rng = np.random.default_rng(7)
    progs: dict[str, Program] = {"save_load_out": build_load_store_acc(cfg, rng)[0]}
    for side, pad in PAD_CASES.items():
        progs[f"padded_inp_{side}"] = build_padded_load_inp(cfg, rng, pad)[0]
        progs[f"padded_acc_{side}"] = build_padded_load_acc(cfg, rng, pad)[0]
    m, n, k = DIRECTED_GEMM_DIMS.get(cfg.name, DIRECTED_GEMM_DIMS["small"])
    for v in (1, 2, 4):
        progs[f"gemm_vt{v}"] = build_gemm(cfg, rng, m=m, n=n, k=k, vthreads=v)[0]
    if not cfg.vector_alu:  # the STOREs' REQUANT instead of the ALU's programs
        if requant_supported(cfg):
            progs["store_requant"] = build_store_requant(cfg, rng)[0]
        if large_gemm:
            progs["gemm_large_vt2"] = build_gemm(cfg, rng, vthreads=2)[0]
        return progs
    if alu_requant_supported(cfg):
        progs["alu_requant_records"] = build_requant_records(cfg, rng)[0]
    for op in BINARY_ALU_OPS:
        for use_imm in (True, False):
            progs[f"alu_{op.name.lower()}_{'imm' if use_imm else 'vec'}"] = build_alu(
                cfg, rng, op, use_imm=use_imm)[0]
    progs["relu"] = build_relu(cfg, rng)[0]
    progs["requant"] = build_requant(cfg, rng)[0]
    for op in (AluOp.MAX, AluOp.ADD):
        progs[f"alu_reduction_{op.name.lower()}"] = build_alu_reduction(cfg, rng, op)[0]
    # each hazard distance of the ALU pipeline: held (below ALU_INTERLOCK_DISTANCE), the
    # two forwarded (the write now and the one a cycle before), one past them
    for apart in range(2, ALU_PIPELINE_STAGES + 2):
        progs[f"alu_reduction_add_apart{apart}"] = build_alu_reduction(
            cfg, rng, AluOp.ADD, groups=3 * apart, apart=apart)[0]
    if large_gemm:
        progs["gemm_large_vt2"] = build_gemm(cfg, rng, vthreads=2)[0]
    return progs
