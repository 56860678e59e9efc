"""The compute engine's ALU pipeline: stages S2 to S7 of an ALU micro-op, from its
operands to the accumulator write."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import AluOp, HwConfig, Opcode
from tensorfab.isa.formats import ALU_PIPELINE_STAGES, MULHI_IMM_SHIFT

from .alu import VectorAlu
from .layouts import insn_layout
from .signatures import WriteRequestSignature, acc_entry_bits, wgt_entry_bits

__all__ = ["AluPipeline"]


class AluPipeline(wiring.Component):
    """``acc[d] = OP(acc[d], acc[s] or imm)`` for one ALU micro-op per cycle::

        S2  the entries read, registered as they leave the block RAM
        S3  operands registered (the results written at S7 now and in the cycle
            before forwarded)
        S4  first cycle of the VectorAlu
        S5  second cycle
        S6  third cycle, OP(a, b) registered
        S7  write acc[d] (``acc_wr``)

    (``ALU_PIPELINE_STAGES`` = 5 register stages after the read.) A micro-op enters at
    S2 with the entries its issue read at S1C (``src_data``; REQUANT's records in
    ``rec``), which go into registers with no logic before them (an FPGA's block RAM
    output comes late in its cycle, and the accumulator's blocks are spread over the
    die). The destination entry's register is the engine's, shared with the GEMM
    write-back (``s3_dst_data``, at S3). The read ports are transparent to the write
    port, so the entries hold everything written before S2; what the micro-ops at S7
    write in the micro-op's S2 and S3 is forwarded at S3. A micro-op that reads what one
    of the three micro-ops ahead of it writes must not enter before that one is at S6,
    four cycles later (``ALU_INTERLOCK_DISTANCE``; the issue's interlock holds it: the
    result it needs is not registered before it would be at S3, and forwarding it
    unregistered would put the ALU and the forwarding in one cycle);
    ``a3_valid``/``a3_dst`` tell the interlock the micro-op at S3.

    ``error`` drops the micro-ops at S2, S3, S4 and S5; S6's result is written unless
    its shift is out of range (``shift_error``, the engine's ``SHIFT_RANGE``).

    Parameters
    ----------
    cfg : HwConfig
        Accelerator configuration.

    Attributes
    ----------
    start : In(1)
        An instruction starts: ``op``, ``use_imm`` and ``imm`` are registered (the
        pipeline must be empty).
    op, use_imm, imm : In(...)
        The ALU instruction's fields (read at ``start``).
    valid : In(1)
        A micro-op enters at S2.
    dst, src : In(acc_bits)
        The entries it writes and reads (``src``: unless ``use_imm``).
    s3_dst_data : In(acc entry)
        ``dst`` as read at S1C, registered at S2 (valid at S3).
    src_data : In(acc entry)
        ``src`` as read at S1C.
    rec : In(wgt entry)
        The weight entry read at S1C (REQUANT's records).
    error : In(1)
        Drop the micro-ops at S2, S3, S4 and S5.
    acc_wr : Out(WriteRequestSignature(acc_bits, acc entry))
        The write of the micro-op at S7.
    acc_wr_next : Out(1)
        ``acc_wr.en``'s next value (its register's input): a micro-op is written in
        the next cycle.
    shift_error : Out(1)
        The micro-op at S6 has a shift out of range; its result is not written.
    a3_valid, a3_dst : Out(1), Out(acc_bits)
        The micro-op at S3 and the entry it writes.
    busy : Out(1)
        A micro-op is at S3, S4, S5, S6 or S7.
    """

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        fields = insn_layout(cfg, Opcode.ALU)
        vec_bits = acc_entry_bits(cfg)
        super().__init__({
            "start": In(1),
            "op": In(fields["op"].shape),
            "use_imm": In(1),
            "imm": In(fields["imm"].shape),
            "valid": In(1),
            "dst": In(cfg.acc_bits),
            "src": In(cfg.acc_bits),
            "s3_dst_data": In(vec_bits),
            "src_data": In(vec_bits),
            "rec": In(wgt_entry_bits(cfg)),
            "error": In(1),
            "acc_wr": Out(WriteRequestSignature(cfg.acc_bits, vec_bits)),
            "acc_wr_next": Out(1),
            "shift_error": Out(1),
            "a3_valid": Out(1),
            "a3_dst": Out(cfg.acc_bits),
            "busy": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()
        lanes = cfg.batch * cfg.block_out
        error = self.error
        alu_op = Signal(4)
        use_imm = Signal()
        imm = Signal(signed(32))
        with m.If(self.start):
            m.d.sync += [alu_op.eq(self.op), use_imm.eq(self.use_imm), imm.eq(self.imm)]
        assert ALU_PIPELINE_STAGES == 5
        # (alu_op loads as an instruction starts, cycles before its first operation)
        # (its first-cycle registers load with a micro-op at S3, error or not)
        m.submodules.vector = alu = VectorAlu(cfg, op_held=True, load_enable=True)
        assert alu.LATENCY == 2
        vec_shape = unsigned(len(self.src_data))
        s3_valid, a3_valid, a4_valid, a5_keep, a6_valid, a7_valid = (
            Signal(name=name) for name in ("s3_valid", "a3_valid", "a4_valid", "a5_keep",
                                           "a6_valid", "a7_valid"))
        s3_dst, s3_src, a3_addr, a4_addr, a5_addr, a6_addr, a7_addr = (
            Signal(cfg.acc_bits, name=name)
            for name in ("s3_dst", "s3_src", "a3_addr", "a4_addr", "a5_addr", "a6_addr",
                         "a7_addr"))
        # wide datapath registers without a reset (the valid bits say what they hold):
        # with one, Verilator copies every word of them on every cycle
        s3_b, a3_a, a3_b, a6_data, a7_data = (
            Signal(vec_shape, name=name, reset_less=True)
            for name in ("s3_b", "a3_a", "a3_b", "a6_data", "a7_data"))
        s3_rec = Signal(len(self.rec), reset_less=True)
        a3_rec = Signal(len(self.rec), reset_less=True)
        alu_new = Signal(vec_shape)
        imm_b = Signal(signed(cfg.acc_width))  # the immediate operand (docs/isa.md)
        m.d.comb += imm_b.eq(Mux(alu_op == AluOp.MULHI, imm << MULHI_IMM_SHIFT, imm))
        alu_s2 = self.valid
        shift_bad = alu.out_valid & alu.shift_error
        alu_in = a3_valid & ~error
        a6_next = Signal()
        m.d.comb += a6_next.eq(alu.out_valid & a5_keep & ~shift_bad)
        # S2: the read entries straight into registers, and whether S7 will write either
        # entry in the next cycle (a6: the result now at S6) or wrote it a cycle before
        # (a7: the write now at S7), compared a cycle ahead
        hits = {name: Signal(name=f"s3_{name}") for name in ("dst6", "dst7", "src6", "src7")}
        m.d.sync += s3_valid.eq(alu_s2 & ~self.error)
        with m.If(alu_s2):
            m.d.sync += [s3_dst.eq(self.dst), s3_src.eq(self.src), s3_b.eq(self.src_data),
                         s3_rec.eq(self.rec)]
            for side, addr in (("dst", self.dst), ("src", self.src)):
                m.d.sync += [hits[f"{side}6"].eq(a6_next & (a5_addr == addr)),
                             hits[f"{side}7"].eq(a6_valid & (a6_addr == addr))]
        # S3: the operands, with what S7 writes now (a6) and wrote in the cycle before
        # (a7) forwarded, the newer first
        def forwarded(side: str, read: Value) -> Value:
            return Mux(hits[f"{side}6"], a6_data, Mux(hits[f"{side}7"], a7_data, read))
        a_in, b_in = Signal(vec_shape), Signal(vec_shape)
        m.d.comb += [a_in.eq(forwarded("dst", self.s3_dst_data)),
                     b_in.eq(Mux(use_imm, Cat(*[imm_b] * lanes), forwarded("src", s3_b)))]
        m.d.sync += [a3_valid.eq(s3_valid & ~error), a4_valid.eq(alu_in), a6_valid.eq(a6_next),
                     a7_valid.eq(a6_valid)]
        if cfg.sequential_multiplier:
            # a multiplication's result comes SEQUENTIAL_MULTIPLY_CYCLES - 1 cycles
            # later: kept from S5 until it comes (the next micro-op's S5 is its cycle
            # at the earliest, the issue spacing them)
            with m.If(a4_valid & ~error):
                m.d.sync += a5_keep.eq(1)
            with m.Elif(alu.out_valid | error):
                m.d.sync += a5_keep.eq(0)
        else:
            m.d.sync += a5_keep.eq(a4_valid & ~error)
        with m.If(s3_valid):
            m.d.sync += [a3_addr.eq(s3_dst), a3_a.eq(a_in), a3_b.eq(b_in), a3_rec.eq(s3_rec)]
        with m.If(a3_valid):
            m.d.sync += a4_addr.eq(a3_addr)
        with m.If(a4_valid):
            m.d.sync += a5_addr.eq(a4_addr)
        with m.If(alu.out_valid):
            m.d.sync += [a6_addr.eq(a5_addr), a6_data.eq(alu_new)]
        with m.If(a6_valid):
            m.d.sync += [a7_addr.eq(a6_addr), a7_data.eq(a6_data)]
        a3_av = data.View(data.ArrayLayout(unsigned(cfg.acc_width), lanes), a3_a)
        a3_bv = data.View(data.ArrayLayout(unsigned(cfg.acc_width), lanes), a3_b)
        m.d.comb += [alu.op.eq(alu_op), alu.in_valid.eq(alu_in), alu.in_load.eq(a3_valid),
                     alu.rec.eq(a3_rec), alu_new.eq(alu.result)]
        for k in range(lanes):
            m.d.comb += [alu.a[k].eq(a3_av[k]), alu.b[k].eq(a3_bv[k])]
        busy = s3_valid | a3_valid | a4_valid | alu.out_valid | a6_valid
        m.d.comb += [self.acc_wr.addr.eq(a6_addr), self.acc_wr.data.eq(a6_data),
                     self.acc_wr.en.eq(a6_valid), self.acc_wr_next.eq(a6_next),
                     self.shift_error.eq(shift_bad),
                     self.a3_valid.eq(s3_valid), self.a3_dst.eq(s3_dst),
                     self.busy.eq(busy | a5_keep if cfg.sequential_multiplier else busy)]
        return m
