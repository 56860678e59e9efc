"""Hypothesis strategies for legal instructions, micro-ops and programs of any config."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from tensorfab.isa import (
    PRESETS,
    Alu,
    AluOp,
    Buffer,
    Finish,
    Gemm,
    HwConfig,
    Load,
    Program,
    Segment,
    Store,
    Uop,
    buffer_depth,
    insn_formats,
    uop_format,
)
from tensorfab.isa.formats import (
    MAX_SHIFT,
    REQUANT_RECORD_WORDS,
    Opcode,
    alu_requant_supported,
    requant_supported,
)
from tensorfab.isa.insn import SHIFT_OPS

configs = st.sampled_from(list(PRESETS.values()))


def _bits(cfg: HwConfig, op: Opcode, name: str) -> st.SearchStrategy[int]:
    f = insn_formats(cfg)[op].field(name)
    return st.integers(f.lo, f.hi)


def _deps(engine: str) -> st.SearchStrategy[dict[str, bool]]:
    b = st.booleans()
    if engine == "load":
        return st.fixed_dictionaries({"pop_next": b, "push_next": b})
    if engine == "store":
        return st.fixed_dictionaries({"pop_prev": b, "push_prev": b})
    return st.fixed_dictionaries({"pop_prev": b, "pop_next": b, "push_prev": b,
                                  "push_next": b})


@st.composite
def loads(draw, cfg: HwConfig) -> Load:
    buf = draw(st.sampled_from(list(Buffer)))
    f = lambda n: draw(_bits(cfg, Opcode.LOAD, n))  # noqa: E731
    pads = {} if buf is Buffer.UOP else {p: f(p) for p in
                                         ("pad_top", "pad_bottom", "pad_left", "pad_right")}
    return Load(buffer=buf, sram=draw(st.integers(0, buffer_depth(cfg, buf) - 1)),
                dram=f("dram"), y=draw(st.integers(1, (1 << 16) - 1)),
                x=draw(st.integers(1, (1 << 16) - 1)), stride=f("stride"), **pads,
                **draw(_deps("load")))


@st.composite
def stores(draw, cfg: HwConfig) -> Store:
    f = lambda n: draw(_bits(cfg, Opcode.STORE, n))  # noqa: E731
    requant = requant_supported(cfg) and draw(st.booleans())
    rec = draw(st.integers(0, cfg.acc_depth - REQUANT_RECORD_WORDS)) if requant else 0
    return Store(sram=draw(st.integers(0, cfg.acc_depth - 1)), dram=f("dram"),
                 y=draw(st.integers(1, (1 << 16) - 1)), x=draw(st.integers(1, (1 << 16) - 1)),
                 stride=f("stride"), requant=requant, rec=rec, **draw(_deps("store")))


@st.composite
def _loop(draw, cfg: HwConfig, op: Opcode) -> dict[str, int]:
    begin = draw(st.integers(0, cfg.uop_depth - 1))
    end = draw(st.integers(begin + 1, cfg.uop_depth))
    f = lambda n: draw(_bits(cfg, op, n))  # noqa: E731
    return {"uop_begin": begin, "uop_end": end,
            "iter_out": draw(st.integers(1, (1 << 14) - 1)),
            "iter_in": draw(st.integers(1, (1 << 14) - 1))} | {
        n: f(n) for n in (("acc_factor_out", "acc_factor_in", "inp_factor_out",
                           "inp_factor_in", "wgt_factor_out", "wgt_factor_in")
                          if op is Opcode.GEMM else
                          ("dst_factor_out", "dst_factor_in", "src_factor_out",
                           "src_factor_in"))}


@st.composite
def gemms(draw, cfg: HwConfig) -> Gemm:
    return Gemm(reset=draw(st.booleans()), **draw(_loop(cfg, Opcode.GEMM)),
                **draw(_deps("compute")))


@st.composite
def alus(draw, cfg: HwConfig) -> Alu:
    legal = [op for op in AluOp if op is not AluOp.REQUANT or alu_requant_supported(cfg)]
    op = draw(st.sampled_from(legal))
    use_imm = draw(st.booleans()) and op is not AluOp.REQUANT
    imm = 0
    if use_imm:
        imm = draw(st.integers(0, MAX_SHIFT) if op in SHIFT_OPS
                   else _bits(cfg, Opcode.ALU, "imm"))
    return Alu(op=op, use_imm=use_imm, imm=imm, **draw(_loop(cfg, Opcode.ALU)),
               **draw(_deps("compute")))


def insns(cfg: HwConfig):
    """Any legal non-FINISH instruction for ``cfg``."""
    return st.one_of(loads(cfg), stores(cfg), gemms(cfg), alus(cfg))


@st.composite
def uops(draw, cfg: HwConfig) -> Uop:
    fmt = uop_format(cfg)
    return Uop(**{f.name: draw(st.integers(0, f.hi)) for f in fmt.fields})


@st.composite
def programs(draw, cfg: HwConfig | None = None) -> Program:
    """A random program that validates (not one that runs: tokens are random)."""
    cfg = cfg or draw(configs)
    body = draw(st.lists(insns(cfg), max_size=12))
    fin = Finish(**draw(_deps("compute")))
    segs = []
    for i in range(draw(st.integers(0, 3))):
        dtype = draw(st.sampled_from(["int8", "uint8", "int32"]))
        shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
        data = None
        if draw(st.booleans()):
            info = np.iinfo(dtype)
            vals = draw(st.lists(st.integers(int(info.min), int(info.max)),
                                 min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
            data = np.array(vals, dtype=np.int64)
        segs.append(Segment(f"seg{i}", dtype, shape, data, output=draw(st.booleans())))
    return Program(cfg, [*body, fin], draw(st.lists(uops(cfg), max_size=6)), segs)
