"""The compute engine's micro-op issue: stages S0 to S2, from the micro-op read to the
buffer reads, with the index range checks and the ALU interlock."""

from __future__ import annotations

from collections.abc import Callable

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import HwConfig, uop_format
from tensorfab.isa.formats import (
    SEQUENTIAL_MULTIPLY_CYCLES,
    SEQUENTIAL_MULTIPLY_DISTANCE,
    UOP_INDEX_STAGES,
    UOP_READ_STAGES,
)

from .layouts import uop_layout
from .signatures import ReadRequestSignature
from .uop_loop import INDEX_WIDTH, OFFSETS

__all__ = ["UopIssue"]


class UopIssue(wiring.Component):
    """Issues the micro-ops of a GEMM or ALU instruction into the compute pipeline::

        S0  read uop[u] (the engine drives the read from its UopLoop)
        S0R the micro-op is registered (nothing but routing after the block RAM)
        S1  indices = uop + loop offsets, their range checks and the interlock's
            comparisons with the three micro-ops ahead, all registered
        S1C range errors, the interlock (`hold`);
            GEMM: read inp[x], wgt[w]          ALU: read acc[d], acc[s] (REQUANT: wgt[w])
        S2  the micro-op leaves: ``s2_*`` registered

    ``stepping`` registers the loop's offsets with the micro-op read, ``issuing``
    makes that micro-op valid. The instruction's kind and the buffers its micro-ops
    read are registered at ``start`` (its first micro-op reaches S1 three cycles
    later), so nothing decodes the instruction word ahead of the checks and the reads.

    **Range checks.** At S1C, a micro-op whose source field is past its buffer raises
    ``uop_bad``, one whose destination, source or weight index is past its buffer
    ``range_bad`` (fields and indices an instruction does not use, docs/isa.md, are
    not checked); either drops it, as do ``error`` and ``halt``.

    **Interlock.** An ALU micro-op at S1C that reads the entry one of the three ALU
    micro-ops ahead of it writes (at S2, or at S3 and S4 of the
    :class:`~.alu_pipeline.AluPipeline`, which reports the one at S3 through
    ``a3_valid``/``a3_dst``) raises ``hold``: it and the micro-ops behind it wait
    (the engine stops its loop) while the ones ahead move on and a bubble enters S2,
    so it enters S2 at least four cycles after that writer. The comparisons are
    registered when it enters S1C, from its index sums at S1, so ``hold`` is a gate of
    registers; they take the entry bits only (an index past the buffer fails its range
    check).

    Parameters
    ----------
    cfg : HwConfig
        Accelerator configuration.

    Attributes
    ----------
    start : In(1)
        An instruction starts: ``is_gemm`` .. ``wgt_used`` are registered.
    is_gemm, is_alu, is_requant, is_reset : In(1)
        The instruction is a GEMM, an ALU op, REQUANT; the GEMM resets (read at
        ``start``).
    is_mul : In(1)
        With ``cfg.sequential_multiplier`` only: the instruction multiplies (MUL,
        MULHI, REQUANT; read at ``start``). Its micro-ops then pass S1C
        ``SEQUENTIAL_MULTIPLY_CYCLES`` cycles apart, one that reads the entry the last
        one writes ``SEQUENTIAL_MULTIPLY_DISTANCE`` cycles after it.
    src_used, wgt_used : In(1)
        Its micro-ops read a source (input or accumulator) entry, a weight entry (read
        at ``start``).
    stepping : In(1)
        The loop advances: the micro-op read this cycle and ``offsets`` are registered.
    issuing : In(1)
        And that micro-op enters the pipeline.
    halt, error : In(1)
        No micro-op enters or moves on past S1C (every valid bit but S2's clears).
    offsets : In(ArrayLayout(INDEX_WIDTH, 3))
        The loop's accumulator, input and weight offsets of the micro-op read (S0).
    uop_data : In(...)
        The micro-op buffer's read data (S0R).
    a3_valid, a3_dst : In(1), In(acc_bits)
        The ALU micro-op at S3 and the entry it writes.
    uop : Out(uop_layout(cfg))
        The micro-op registered at S0R (held while ``hold``), for the fast reset too.
    hold : Out(1)
        The micro-op at S1C waits for the interlock.
    uop_bad, range_bad : Out(1)
        The micro-op at S1C fails its range check (``UOP_RANGE``, ``SRAM_RANGE``).
    inp_rd, wgt_rd, src_rd, dst_rd : Out(ReadRequestSignature(...))
        The reads at S1C: the input and weight entries (GEMM; REQUANT reads the
        weight entry too), the ALU's source and destination accumulator entries.
    s2_valid, s2_alu, s2_reset, s2_dst, s2_src : Out(...)
        The micro-op at S2: valid, an ALU op (else a GEMM), a resetting GEMM, the
        accumulator entry it writes and the source entry it read.
    busy : Out(1)
        A micro-op is at any stage from S0R to S2.
    """

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        sequential = {"is_mul": In(1)} if cfg.sequential_multiplier else {}
        super().__init__({
            "start": In(1),
            **sequential,
            "is_gemm": In(1),
            "is_alu": In(1),
            "is_requant": In(1),
            "is_reset": In(1),
            "src_used": In(1),
            "wgt_used": In(1),
            "stepping": In(1),
            "issuing": In(1),
            "halt": In(1),
            "error": In(1),
            "offsets": In(data.ArrayLayout(unsigned(INDEX_WIDTH), OFFSETS)),
            "uop_data": In(uop_format(cfg).used_bits),
            "a3_valid": In(1),
            "a3_dst": In(cfg.acc_bits),
            "uop": Out(uop_layout(cfg)),
            "hold": Out(1),
            "uop_bad": Out(1),
            "range_bad": Out(1),
            "inp_rd": Out(ReadRequestSignature(cfg.inp_bits)),
            "wgt_rd": Out(ReadRequestSignature(cfg.wgt_bits)),
            "src_rd": Out(ReadRequestSignature(cfg.acc_bits)),
            "dst_rd": Out(ReadRequestSignature(cfg.acc_bits)),
            "s2_valid": Out(1),
            "s2_alu": Out(1),
            "s2_reset": Out(1),
            "s2_dst": Out(cfg.acc_bits),
            "s2_src": Out(cfg.acc_bits),
            "busy": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()
        halt, error, hold = self.halt, self.error, self.hold
        # S0R: the micro-op read is registered (UOP_READ_STAGES): the block RAM's
        # clock-to-output leaves too little of a cycle for the index adders
        assert UOP_READ_STAGES == 2
        r_valid = Signal()
        r_off = [Signal(INDEX_WIDTH, name=f"r_off{k}") for k in range(OFFSETS)]
        uop_q = Signal(len(self.uop_data))
        # S1C: the indices are registered (UOP_INDEX_STAGES) before the range checks,
        # the interlock and the reads: index adders, range comparisons, the interlock's
        # comparisons and the loop counters' advance in one cycle were an FPGA
        # critical path
        assert UOP_INDEX_STAGES == 1
        s1_valid = Signal()
        s1_off = [Signal(INDEX_WIDTH, name=f"s1_off{k}") for k in range(OFFSETS)]
        c_valid = Signal()
        # the registers before S2 are enabled by ~hold, the offsets' by `stepping`: a
        # halt or an error (the core's error register, with a fan-out across the core)
        # need not reach them, as the valid bits stop the micro-ops and a start resets
        # the loops
        with m.If(~hold):
            m.d.sync += [r_valid.eq(self.issuing & ~halt & ~error),
                         s1_valid.eq(r_valid & ~halt & ~error),
                         c_valid.eq(s1_valid & ~halt & ~error),
                         uop_q.eq(self.uop_data)]
        with m.Else():
            m.d.sync += [r_valid.eq(r_valid & ~halt & ~error),
                         s1_valid.eq(s1_valid & ~halt & ~error),
                         c_valid.eq(c_valid & ~halt & ~error)]
        with m.If(self.stepping):
            m.d.sync += [r_off[k].eq(self.offsets[k]) for k in range(OFFSETS)]
        with m.If(r_valid & ~hold):
            m.d.sync += [s1_off[k].eq(r_off[k]) for k in range(OFFSETS)]

        # S1: the indices (registered); S1C: range checks, interlock, reads
        uop_raw = Signal(uop_format(cfg).width)
        m.d.comb += uop_raw.eq(Cat(uop_q, Const(0, uop_format(cfg).width
                                                - uop_format(cfg).used_bits)))
        uop = data.View(uop_layout(cfg), uop_raw)
        m.d.comb += self.uop.eq(uop_raw)
        q_gemm, q_alu, q_requant, q_reset = Signal(), Signal(), Signal(), Signal()
        src_used, wgt_used = Signal(), Signal()
        with m.If(self.start):
            m.d.sync += [q_gemm.eq(self.is_gemm), q_alu.eq(self.is_alu),
                         q_requant.eq(self.is_requant), q_reset.eq(self.is_reset),
                         src_used.eq(self.src_used),
                         wgt_used.eq(self.wgt_used)]

        def src_beyond(index: Value) -> Value:  # past the source buffer's depth
            return Mux(q_gemm, index >= cfg.inp_depth, index >= cfg.acc_depth)
        idx_a = Signal(INDEX_WIDTH)
        idx_s = Signal(INDEX_WIDTH)
        idx_w = Signal(INDEX_WIDTH)
        c_uop_bad = Signal()  # the micro-op's source field itself is out of range
        # and each index past its buffer, found from the sums before they are
        # registered: at S1C, a range check is one registered bit, not a comparison
        # of 32 bits on the way to `hold`
        c_index_bad = Signal()
        sum_a, sum_s, sum_w = (uop.acc + s1_off[0]), (uop.src + s1_off[1]), (uop.wgt + s1_off[2])
        with m.If(~hold):
            m.d.sync += [idx_a.eq(sum_a), idx_s.eq(sum_s), idx_w.eq(sum_w),
                         c_uop_bad.eq(src_used & src_beyond(uop.src)),
                         c_index_bad.eq((sum_a >= cfg.acc_depth)
                                        | (src_used & src_beyond(sum_s))
                                        | (wgt_used & (sum_w >= cfg.wgt_depth)))]
        uop_bad = c_valid & c_uop_bad
        range_bad = c_valid & c_index_bad
        s1_ok = c_valid & ~uop_bad & ~range_bad & ~error & ~halt
        m.d.comb += [self.uop_bad.eq(uop_bad), self.range_bad.eq(range_bad)]

        # the reads at S1C: by c_valid alone, not s1_ok (a read changes nothing, and the
        # micro-op an error, a halt or a range check stops is dropped at S2 all the same;
        # the error register's fan-out into the buffers' read ports and the zero flags
        # was an FPGA critical path at 100 MHz)
        m.d.comb += [
            self.inp_rd.addr.eq(idx_s), self.inp_rd.en.eq(c_valid & q_gemm),
            self.wgt_rd.addr.eq(idx_w), self.wgt_rd.en.eq(c_valid & (q_gemm | q_requant)),
            self.src_rd.addr.eq(idx_s), self.src_rd.en.eq(c_valid & q_alu),
            self.dst_rd.addr.eq(idx_a), self.dst_rd.en.eq(c_valid & q_alu),
        ]
        # The interlock: whether the micro-op at S1C reads the entry the one at S2
        # (`c_dep2`), S3 (`c_dep3`) or S4 (`c_dep4`) writes, registered a cycle ahead,
        # when it enters S1C, from its index sums at S1 (so `hold`, which enables every
        # register before S2 and the loops, is a gate of registers). While it waits
        # the micro-ops ahead move on a stage and a bubble enters S2.
        c_dep2, c_dep3, c_dep4 = Signal(), Signal(), Signal()
        s2_valid, s2_addr, s2_alu = self.s2_valid, self.s2_dst, self.s2_alu

        def reads(addr: Value) -> Value:  # the micro-op entering S1C reads `addr`
            return ((sum_a[:cfg.acc_bits] == addr)
                    | (src_used & (sum_s[:cfg.acc_bits] == addr)))
        with m.If(hold):
            m.d.sync += [c_dep2.eq(0), c_dep3.eq(c_dep2), c_dep4.eq(c_dep3)]
        with m.Else():
            m.d.sync += [c_dep2.eq(s1_ok & reads(idx_a[:cfg.acc_bits])),
                         c_dep3.eq(s2_valid & s2_alu & reads(s2_addr)),
                         c_dep4.eq(self.a3_valid & reads(self.a3_dst))]
        waits = c_dep2 | c_dep3 | c_dep4
        if cfg.sequential_multiplier:
            waits = waits | self._multiplier_waits(m, s1_ok & ~hold, idx_a[:cfg.acc_bits],
                                                   reads)
        # (without s1_ok's halt and error: a held micro-op is dropped by them all the same)
        m.d.comb += hold.eq(c_valid & ~c_uop_bad & ~c_index_bad & q_alu & waits)
        m.d.sync += [s2_valid.eq(s1_ok & ~hold), s2_addr.eq(idx_a),
                     self.s2_reset.eq(q_reset & q_gemm), s2_alu.eq(q_alu),
                     self.s2_src.eq(idx_s)]
        m.d.comb += self.busy.eq(r_valid | s1_valid | c_valid | s2_valid)
        return m

    def _multiplier_waits(self, m: Module, passing: Value, dst: Value,
                          reads: Callable[[Value], Value]) -> Value:
        """Whether the multiplying micro-op at S1C waits for the sequential multiplier
        (``passing``: the one at S1C enters S2, writing ``dst``; ``reads(addr)``: the
        one entering S1C reads ``addr``). Counters from the last multiplying micro-op
        to pass, and its destination compared a cycle ahead, as the other
        dependencies are: ``hold`` stays a gate of registers."""
        q_mul = Signal()
        gap = Signal(range(SEQUENTIAL_MULTIPLY_CYCLES))
        dep_left = Signal(range(SEQUENTIAL_MULTIPLY_DISTANCE))
        last_dst = Signal(self.cfg.acc_bits)
        c_dep = Signal()  # the micro-op at S1C reads last_dst
        with m.If(self.start):
            m.d.sync += [q_mul.eq(self.is_mul), gap.eq(0), dep_left.eq(0)]
        with m.Elif(passing & q_mul):
            m.d.sync += [gap.eq(SEQUENTIAL_MULTIPLY_CYCLES - 1),
                         dep_left.eq(SEQUENTIAL_MULTIPLY_DISTANCE - 1), last_dst.eq(dst)]
        with m.Else():
            with m.If(gap != 0):
                m.d.sync += gap.eq(gap - 1)
            with m.If(dep_left != 0):
                m.d.sync += dep_left.eq(dep_left - 1)
        with m.If(~self.hold):
            m.d.sync += c_dep.eq(Mux(passing, reads(dst), reads(last_dst)))
        return q_mul & ((gap != 0) | ((dep_left != 0) & c_dep))
