"""What the compute engine reads of a GEMM or ALU instruction: its loops, and the
kind and fields its micro-ops use."""

from __future__ import annotations

from amaranth.hdl import Module, Mux
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import AluOp, HwConfig, Opcode
from tensorfab.isa.formats import header_format, insn_width

from .layouts import format_layout, insn_layout

__all__ = ["ComputeFields"]


class ComputeFields(wiring.Component):
    """The compute engine's decoding of the instruction its sequencer holds.

    The loop bounds and factors (docs/isa.md), the GEMM's or the ALU instruction's as
    the opcode says, combinationally from ``word`` for the
    :class:`~.uop_loop.UopLoop`, which registers them at the start. REQUANT steps its
    record (weight) index by the source factors. At ``start`` the instruction's kind
    and what its micro-ops use are registered for the micro-op pipeline (its first
    micro-op reaches the index checks three cycles later): no decoding of the
    instruction word ahead of the checks and the reads. Fields an instruction does not
    use are ignored: a resetting GEMM reads no input or weight, an ALU operation with
    an immediate no source.

    Parameters
    ----------
    cfg : HwConfig
        Accelerator configuration.

    Attributes
    ----------
    word : In(insn_width(cfg))
        The instruction.
    start : In(1)
        The engine starts it: register the ``q_*`` and ``*_used`` outputs.
    is_gemm, is_alu, is_finish : Out(1)
        Its opcode (from ``word``).
    uop_begin, uop_end, iter_out, iter_in : Out(...)
        Its loop bounds (from ``word``).
    factor_out, factor_in : Out(ArrayLayout(unsigned(width), 3))
        Its accumulator (destination), input (source) and weight (record) index
        steps (from ``word``).
    q_gemm, q_alu, q_requant, q_reset : Out(1)
        Registered at ``start``: a GEMM, an ALU operation, a REQUANT, a resetting GEMM.
    src_used, wgt_used : Out(1)
        Registered at ``start``: its micro-ops read the source (input or accumulator)
        buffer, the weight buffer.
    """

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        g = insn_layout(cfg, Opcode.GEMM)
        a = insn_layout(cfg, Opcode.ALU)
        factor_width = max(layout[name].shape.width for layout, names in (
            (g, ("acc_factor_out", "inp_factor_out", "wgt_factor_out", "acc_factor_in",
                 "inp_factor_in", "wgt_factor_in")),
            (a, ("dst_factor_out", "src_factor_out", "dst_factor_in", "src_factor_in")))
            for name in names)
        #: Width of a factor output.
        self.factor_width = factor_width

        def widest(name: str) -> int:
            return max(g[name].shape.width, a[name].shape.width)
        super().__init__({
            "word": In(insn_width(cfg)),
            "start": In(1),
            "is_gemm": Out(1),
            "is_alu": Out(1),
            "is_finish": Out(1),
            "uop_begin": Out(widest("uop_begin")),
            "uop_end": Out(widest("uop_end")),
            "iter_out": Out(widest("iter_out")),
            "iter_in": Out(widest("iter_in")),
            "factor_out": Out(data.ArrayLayout(factor_width, 3)),
            "factor_in": Out(data.ArrayLayout(factor_width, 3)),
            "q_gemm": Out(1),
            "q_alu": Out(1),
            "q_requant": Out(1),
            "q_reset": Out(1),
            "src_used": Out(1),
            "wgt_used": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()
        word = self.word
        # every format starts with the header (opcode and flags): FINISH's layout is it
        opcode = data.View(format_layout(header_format(cfg)), word).opcode
        g = data.View(insn_layout(cfg, Opcode.GEMM), word)
        a = data.View(insn_layout(cfg, Opcode.ALU), word)
        is_gemm = opcode == Opcode.GEMM
        is_alu = opcode == Opcode.ALU
        is_requant = is_alu & (a.op == AluOp.REQUANT)
        m.d.comb += [self.is_gemm.eq(is_gemm), self.is_alu.eq(is_alu),
                     self.is_finish.eq(opcode == Opcode.FINISH)]
        for name in ("uop_begin", "uop_end", "iter_out", "iter_in"):
            m.d.comb += getattr(self, name).eq(Mux(is_gemm, getattr(g, name),
                                                   getattr(a, name)))
        f_out = [Mux(is_gemm, g.acc_factor_out, a.dst_factor_out),
                 Mux(is_gemm, g.inp_factor_out, a.src_factor_out),
                 Mux(is_gemm, g.wgt_factor_out, a.src_factor_out)]
        f_in = [Mux(is_gemm, g.acc_factor_in, a.dst_factor_in),
                Mux(is_gemm, g.inp_factor_in, a.src_factor_in),
                Mux(is_gemm, g.wgt_factor_in, a.src_factor_in)]
        m.d.comb += [self.factor_out[k].eq(f_out[k]) for k in range(3)]
        m.d.comb += [self.factor_in[k].eq(f_in[k]) for k in range(3)]
        with m.If(self.start):
            m.d.sync += [self.q_gemm.eq(is_gemm), self.q_alu.eq(is_alu),
                         self.q_requant.eq(is_requant), self.q_reset.eq(g.reset),
                         self.src_used.eq(Mux(is_gemm, ~g.reset, ~a.use_imm & ~is_requant)),
                         self.wgt_used.eq(Mux(is_gemm, ~g.reset, is_requant))]
        return m
