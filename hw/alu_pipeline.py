"""The compute engine's ALU stages: operands, the vector ALU, the result and its
write request."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import AluOp, HwConfig, Opcode
from tensorfab.isa.formats import ALU_PIPELINE_STAGES, MULHI_IMM_SHIFT

from .alu import AluSignature, VectorAlu
from .layouts import insn_layout

__all__ = ["AluPipeline"]


class AluPipeline(wiring.Component):
    """ALU micro-ops from the compute engine's S2 to their accumulator write at S6.

    ``ALU_PIPELINE_STAGES`` (4) register stages after the buffers' read::

        S2  operands: acc[dst], and acc[src] or the immediate, each forwarded from
            S6 when S6 writes that entry; the REQUANT record (a weight entry)
        S3, S4, S5  the :class:`~.alu.VectorAlu`'s three cycles; S5 registers the
            result
        S6  the write request (``wr_en``, ``wr_addr``, ``wr_data``)

    A micro-op that reads what one of the three ahead of it writes is the compute
    engine's to hold back (its interlock compares with :attr:`a3_addr` among others):
    forwarding a result unregistered would put the ALU and the forwarding in one
    cycle. ``drop`` (the engine's error) drops the micro-ops at S2, S3 and S4; S5's
    result is written unless its shift is out of range (:attr:`shift_bad`).

    The operation, the immediate and whether it is used are registered at ``start``
    (the engine taking an instruction) from its fields, as the engine registers the
    instruction's kind: no decoding of the instruction word in the operands' cycle.
    Wide datapath registers have no reset (the valid bits say what they hold).

    Parameters
    ----------
    cfg : HwConfig
        Accelerator configuration.

    Attributes
    ----------
    start : In(1)
        Register ``insn_op``, ``insn_use_imm`` and ``insn_imm`` (an ALU
        instruction's fields; the other instructions' values are not used).
    issue : In(1)
        An ALU micro-op is at S2: ``dst`` and ``src`` are its entries, ``dst_data``,
        ``src_data`` and ``rec`` the buffers' read data.
    drop : In(1)
        Drop the micro-ops at S2, S3 and S4 (an error).
    a3_valid, a3_addr : Out(1), Out(cfg.acc_bits)
        The micro-op at S3 and the entry it writes.
    shift_bad : Out(1)
        The result leaving the ALU this cycle has a shift out of range (it is not
        written).
    wr_en, wr_addr, wr_data : Out(1), Out(cfg.acc_bits), Out(acc entry)
        The accumulator write of S6.
    busy : Out(1)
        A micro-op is in S3 to S6.
    """

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        acc_bits = cfg.batch * cfg.block_out * cfg.acc_width
        op_layout = insn_layout(cfg, Opcode.ALU)
        super().__init__({
            "start": In(1),
            "insn_op": In(op_layout["op"].shape),
            "insn_use_imm": In(1),
            "insn_imm": In(op_layout["imm"].shape),
            "issue": In(1),
            "dst": In(cfg.acc_bits),
            "src": In(cfg.acc_bits),
            "dst_data": In(acc_bits),
            "src_data": In(acc_bits),
            "rec": In(cfg.block_out * cfg.block_in * cfg.wgt_width),
            "drop": In(1),
            "a3_valid": Out(1),
            "a3_addr": Out(cfg.acc_bits),
            "shift_bad": Out(1),
            "wr_en": Out(1),
            "wr_addr": Out(cfg.acc_bits),
            "wr_data": Out(acc_bits),
            "busy": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()
        lanes = cfg.batch * cfg.block_out
        assert ALU_PIPELINE_STAGES == 4
        m.submodules.alu = alu = VectorAlu(cfg)
        assert alu.LATENCY == 2
        alu_port = AluSignature(cfg).flip().create()
        wiring.connect(m, alu_port, alu)

        op = Signal.like(self.insn_op, name="op")
        use_imm = Signal()
        imm = Signal(signed(32))
        with m.If(self.start):
            m.d.sync += [op.eq(self.insn_op), use_imm.eq(self.insn_use_imm),
                         imm.eq(self.insn_imm)]

        vec_shape = self.wr_data.shape()
        a4_valid, a5_keep, a6_valid = Signal(), Signal(), Signal()
        a4_addr, a5_addr, a6_addr = (Signal(cfg.acc_bits, name=f"a{k}_addr")
                                     for k in range(4, 7))
        a3_a, a3_b, a6_data = (Signal(vec_shape, name=name, reset_less=True)
                               for name in ("a3_a", "a3_b", "a6_data"))
        a3_rec = Signal(len(self.rec), name="rec", reset_less=True)
        imm_b = Signal(signed(cfg.acc_width))  # the immediate operand (docs/isa.md)
        m.d.comb += imm_b.eq(Mux(op == AluOp.MULHI, imm << MULHI_IMM_SHIFT, imm))
        shift_bad = alu_port.out_valid & alu_port.shift_error
        a_in, b_in = Signal(vec_shape), Signal(vec_shape)
        m.d.comb += [
            a_in.eq(Mux(a6_valid & (a6_addr == self.dst), a6_data, self.dst_data)),
            b_in.eq(Mux(use_imm, Cat(*[imm_b] * lanes),
                        Mux(a6_valid & (a6_addr == self.src), a6_data, self.src_data))),
        ]
        a3_valid, a3_addr = self.a3_valid, self.a3_addr
        alu_in = a3_valid & ~self.drop
        m.d.sync += [a3_valid.eq(self.issue & ~self.drop), a4_valid.eq(alu_in),
                     a5_keep.eq(a4_valid & ~self.drop),
                     a6_valid.eq(alu_port.out_valid & a5_keep & ~shift_bad)]
        with m.If(self.issue):
            m.d.sync += [a3_addr.eq(self.dst), a3_a.eq(a_in), a3_b.eq(b_in),
                         a3_rec.eq(self.rec)]
        with m.If(alu_in):
            m.d.sync += a4_addr.eq(a3_addr)
        with m.If(a4_valid):
            m.d.sync += a5_addr.eq(a4_addr)
        with m.If(alu_port.out_valid):
            m.d.sync += [a6_addr.eq(a5_addr), a6_data.eq(alu_port.result)]
        a3_av = data.View(data.ArrayLayout(unsigned(cfg.acc_width), lanes), a3_a)
        a3_bv = data.View(data.ArrayLayout(unsigned(cfg.acc_width), lanes), a3_b)
        m.d.comb += [alu_port.op.eq(op), alu_port.in_valid.eq(alu_in),
                     alu_port.rec.eq(a3_rec)]
        for k in range(lanes):
            m.d.comb += [alu_port.a[k].eq(a3_av[k]), alu_port.b[k].eq(a3_bv[k])]
        m.d.comb += [self.shift_bad.eq(shift_bad),
                     self.wr_en.eq(a6_valid), self.wr_addr.eq(a6_addr),
                     self.wr_data.eq(a6_data),
                     self.busy.eq(a3_valid | a4_valid | alu_port.out_valid | a6_valid)]
        return m
