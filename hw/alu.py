"""The vector ALU: one element-wise int32 operation over an accumulator vector per cycle."""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import AluOp, HwConfig, Opcode, insn_formats

__all__ = ["VectorAlu", "alu_lane"]


def alu_lane(m: Module, op: Value, a: Value, b: Value, width: int) -> Value:
    """Combinational logic of one lane: ``OP(a, b)`` as specified in docs/isa.md.

    Parameters
    ----------
    m : Module
        Module the lane's logic is added to.
    op : Value
        AluOp code; codes outside :class:`~tensorfab.isa.AluOp` give 0.
    a, b : Value
        Signed operands of ``width`` bits.
    width : int
        Element width (32).

    Returns
    -------
    Value
        A signed ``width``-bit signal holding the result.
    """
    shift_bits = (width - 1).bit_length()
    out = Signal(signed(width))
    s = b.as_unsigned()[:shift_bits]
    mask = Signal(unsigned(width))
    m.d.comb += mask.eq(((Const(1, width + 1) << s) - 1)[:width])
    rem = a.as_unsigned() & mask
    thr = (mask >> 1) + a[width - 1]
    lo = Signal(signed(width))  # -b - 1, wrapping: the one's complement of b
    m.d.comb += lo.eq(~b)
    clipped_lo = Signal(signed(width))
    m.d.comb += clipped_lo.eq(Mux(a > lo, a, lo))
    with m.Switch(op):
        with m.Case(AluOp.ADD):
            m.d.comb += out.eq((a + b)[:width])
        with m.Case(AluOp.MUL):
            m.d.comb += out.eq((a * b)[:width])
        with m.Case(AluOp.MIN):
            m.d.comb += out.eq(Mux(a < b, a, b))
        with m.Case(AluOp.MAX):
            m.d.comb += out.eq(Mux(a > b, a, b))
        with m.Case(AluOp.SHR):
            m.d.comb += out.eq(a >> s)
        with m.Case(AluOp.SHR_RND):
            m.d.comb += out.eq((a >> s) + (rem > thr))
        with m.Case(AluOp.SHL):
            m.d.comb += out.eq((a << s)[:width])
        with m.Case(AluOp.CLIP):
            m.d.comb += out.eq(Mux(clipped_lo < b, clipped_lo, b))
        with m.Case(AluOp.MOV):
            m.d.comb += out.eq(b)
        with m.Default():
            m.d.comb += out.eq(0)
    return out


class VectorAlu(wiring.Component):
    """Element-wise ALU over ``batch × block_out`` int32 lanes.

    Fully pipelined: accepts one vector operation every cycle and delivers its
    result :attr:`LATENCY` cycles later (inputs registered, then all lanes
    computed and registered). There is no back-pressure. Operations follow the
    ALU table of docs/isa.md bit for bit; an op code outside
    :class:`~tensorfab.isa.AluOp` (9..15, which the decoder rejects as
    ``BAD_FIELD``) yields zeros.

    Parameters
    ----------
    cfg : HwConfig
        Gives the lane count (``batch * block_out``), the element width
        (``acc_width``) and the op field width.

    Attributes
    ----------
    op : In(unsigned)
        AluOp code, as wide as the ALU instruction's ``op`` field.
    a, b : In(ArrayLayout(signed(acc_width), lanes))
        Operand vectors; lane ``i`` occupies bits ``[32 i, 32 i + 32)``.
    in_valid : In(1)
        The inputs hold an operation this cycle.
    result : Out(ArrayLayout(signed(acc_width), lanes))
        ``OP(a, b)`` per lane, :attr:`LATENCY` cycles after the inputs.
    out_valid : Out(1)
        ``in_valid`` delayed by :attr:`LATENCY` cycles.
    """

    #: Cycles from an accepted input to its result.
    LATENCY = 2

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        self.lanes = cfg.batch * cfg.block_out
        self.width = cfg.acc_width
        vec = data.ArrayLayout(signed(self.width), self.lanes)
        op_width = insn_formats(cfg)[Opcode.ALU].field("op").width
        super().__init__({
            "op": In(op_width),
            "a": In(vec),
            "b": In(vec),
            "in_valid": In(1),
            "result": Out(vec),
            "out_valid": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        """Build the pipeline."""
        m = Module()
        op_r = Signal.like(self.op)
        a_r = Signal.like(self.a)
        b_r = Signal.like(self.b)
        valid_r = Signal()
        m.d.sync += [op_r.eq(self.op), a_r.eq(self.a), b_r.eq(self.b),
                     valid_r.eq(self.in_valid)]
        for i in range(self.lanes):
            lane = alu_lane(m, op_r, a_r[i].as_signed(), b_r[i].as_signed(), self.width)
            m.d.sync += self.result[i].eq(lane)
        m.d.sync += self.out_valid.eq(valid_r)
        return m
