"""The compute engine: GEMM and ALU micro-op loops over the on-chip buffers, and FINISH."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import Out

from tensorfab.isa import AluOp, Engine, ErrorCode, HwConfig, Opcode, uop_format
from tensorfab.isa.formats import (
    ALU_PIPELINE_STAGES,
    MULHI_IMM_SHIFT,
    UOP_INDEX_STAGES,
    UOP_READ_STAGES,
    header_format,
)
from tensorfab.isa.insn import fast_reset_condition

from .alu import AluSignature, VectorAlu
from .fast_reset import FastReset
from .gemm import GemmCore
from .layouts import format_layout, insn_layout, uop_layout
from .sequencer import InsnSequencer, engine_members
from .signatures import BufReadSignature, BufWriteSignature, ZeroSignature, zero_lanes
from .uop_loop import INDEX_WIDTH, UopLoop

__all__ = ["ComputeEngine"]



class ComputeEngine(wiring.Component):
    """Executes GEMM, ALU and FINISH, one micro-op per cycle in steady state.

    Pipeline of one loop iteration (``S0`` issues the micro-op read)::

        S0  read uop[u]
        S0R the micro-op is registered (nothing but routing after the block RAM)
        S1  indices = uop + loop offsets, their range checks and the interlock's
            comparisons with the three micro-ops ahead, all registered
        S1C range errors, the interlock (`hold`);
            GEMM: read inp[x], wgt[w]          ALU: read acc[d], acc[s] (REQUANT: wgt[w])
        S2  GEMM: products enter the GemmCore  ALU: operands registered
        S3                                     ALU: first cycle (VectorAlu)
        S4                                     ALU: second cycle
        S5                                     ALU: third cycle, OP(a, b) registered
        S6                                     ALU: write acc[d]
        S2+L-2  GEMM: read acc[a]  (L = GemmCore.LATENCY; the data registered)
        S2+L    GEMM: write acc[a] + products (or 0 with reset)

    GEMM: the accumulator write of the cycle between its read and its write-back is
    forwarded, so back-to-back micro-ops on one entry need no stall. ALU: a micro-op
    reading the entry one of the three micro-ops ahead of it writes is held at S1C
    until that one reaches S5; one reading what the micro-op four ahead writes gets
    S6's result forwarded (read ports are transparent to the write port for anything
    further ahead). The pipeline drains at the end of each instruction before its
    tokens are pushed.

    **Fast reset.** A GEMM with ``reset`` whose accumulator indices run in contiguous
    lines (one micro-op, ``acc_factor_in = 1``, every input and weight factor 0, as
    compilers emit it) does not go through the pipeline: a
    :class:`~.fast_reset.FastReset` reads its micro-op and zeroes each line
    ``uop.acc + i·acc_factor_out + [0, iter_in)`` through :attr:`acc_zero`, up to
    :func:`~.signatures.zero_lanes` entries per cycle. Range checks and errors are those
    of the micro-op loop; :attr:`gemm_uops` counts every entry zeroed. The loops
    themselves are a :class:`~.uop_loop.UopLoop`. Without ``cfg.fast_reset`` there is
    no fast reset: such a GEMM goes through the pipeline like any other, and
    :attr:`acc_zero` stays low.

    Parameters
    ----------
    cfg : HwConfig
        Accelerator configuration.

    Attributes
    ----------
    insn, pop_prev, pop_next, push_prev, push_next, halt, error, busy, stall, retire, idle
        The sequencer's members (:func:`~.sequencer.engine_members`): an
        :class:`~.sequencer.InsnSequencer` takes each instruction, pops and pushes its
        tokens and retires it. ``error`` (``UOP_RANGE``, ``SRAM_RANGE``) stays high
        until reset and halts the engine, as does the retire of FINISH.
    finished : Out(1)
        FINISH has retired.
    acc_zero : Out(ZeroSignature(cfg))
        Bulk zeroing of accumulator entries (fast reset).
    gemm_busy, alu_busy : Out(1)
        The GEMM path (a micro-op entering the GEMM core, or a fast-reset cycle) or
        the ALU accepts work this cycle.
    gemm_uops : Out(...)
        GEMM micro-ops executed this cycle (1 in the pipeline, up to
        ``zero_lanes(cfg)`` in a fast reset).

    """

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        inp_bits = cfg.batch * cfg.block_in * cfg.inp_width
        wgt_bits = cfg.block_out * cfg.block_in * cfg.wgt_width
        acc_bits = cfg.batch * cfg.block_out * cfg.acc_width
        super().__init__(engine_members(cfg, Engine.COMPUTE) | {
            "uop_rd": Out(BufReadSignature(cfg.uop_bits, uop_format(cfg).used_bits)),
            "inp_rd": Out(BufReadSignature(cfg.inp_bits, inp_bits)),
            "wgt_rd": Out(BufReadSignature(cfg.wgt_bits, wgt_bits)),
            "acc_rd_dst": Out(BufReadSignature(cfg.acc_bits, acc_bits)),
            "acc_rd_src": Out(BufReadSignature(cfg.acc_bits, acc_bits)),
            "acc_wr": Out(BufWriteSignature(cfg.acc_bits, acc_bits)),
            "finished": Out(1),
            "gemm_busy": Out(1),
            "alu_busy": Out(1),
            "gemm_uops": Out(range(zero_lanes(cfg) + 1)),
            "acc_zero": Out(ZeroSignature(cfg)),
        })

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()
        m.submodules.gemm = gemm = GemmCore(cfg)
        lat = gemm.LATENCY
        lanes = cfg.batch * cfg.block_out

        # ------------------------------------------------------------ instruction
        error = Signal()
        finished = Signal()
        m.submodules.seq = seq = InsnSequencer(cfg, Engine.COMPUTE)
        seq.connect_engine(m, self, halt=self.halt | error | finished)
        ex = seq.exec
        word = ex.word
        # every format starts with the header (opcode and flags): FINISH's layout is it
        opcode = data.View(format_layout(header_format(cfg)), word).opcode
        g = data.View(insn_layout(cfg, Opcode.GEMM), word)
        a = data.View(insn_layout(cfg, Opcode.ALU), word)
        is_gemm = opcode == Opcode.GEMM
        is_alu = opcode == Opcode.ALU

        is_requant = is_alu & (a.op == AluOp.REQUANT)
        # REQUANT steps its record (weight) index by the source factors
        f_out = [Mux(is_gemm, g.acc_factor_out, a.dst_factor_out),
                 Mux(is_gemm, g.inp_factor_out, a.src_factor_out),
                 Mux(is_gemm, g.wgt_factor_out, a.src_factor_out)]
        f_in = [Mux(is_gemm, g.acc_factor_in, a.dst_factor_in),
                Mux(is_gemm, g.inp_factor_in, a.src_factor_in),
                Mux(is_gemm, g.wgt_factor_in, a.src_factor_in)]
        iter_in = Mux(is_gemm, g.iter_in, a.iter_in)
        # the micro-op loop (acc/dst, inp/src, wgt offsets)
        factor_width = max(len(f) for f in f_out + f_in)
        m.submodules.loop = loop = UopLoop(cfg.uop_bits, factor_width)
        m.d.comb += [loop.start.eq(ex.start),
                     loop.uop_begin.eq(Mux(is_gemm, g.uop_begin, a.uop_begin)),
                     loop.uop_end.eq(Mux(is_gemm, g.uop_end, a.uop_end)),
                     loop.iter_out.eq(Mux(is_gemm, g.iter_out, a.iter_out)),
                     loop.iter_in.eq(iter_in)]
        m.d.comb += [loop.factor_in[k].eq(f_in[k]) for k in range(3)]
        m.d.comb += [loop.factor_out[k].eq(f_out[k]) for k in range(3)]
        cur = [loop.offsets[k] for k in range(3)]

        err_code = Signal(4)
        m.d.comb += [ex.fail.eq(error), ex.code.eq(err_code), self.finished.eq(finished)]

        # ------------------------------------------------------------- pipeline
        s1_valid = Signal()
        s1_off = [Signal(INDEX_WIDTH, name=f"s1_off{k}") for k in range(3)]
        s2_valid = Signal()
        s2_addr = Signal(cfg.acc_bits)
        s2_reset = Signal()
        # GEMM delay line: entry k is the micro-op at stage S2+k
        dl_valid = [Signal(name=f"dl_valid{k}") for k in range(lat + 1)]
        dl_addr = [Signal(cfg.acc_bits, name=f"dl_addr{k}") for k in range(lat + 1)]
        dl_reset = [Signal(name=f"dl_reset{k}") for k in range(lat + 1)]
        s2_alu = Signal()
        alu_op = Signal(4)
        use_imm = Signal()
        imm = Signal(signed(32))

        issuing = Signal()
        # stepping: the loops advance (in RUN, unless held); issuing: and a micro-op
        # enters the pipeline (not after a halt or an error). The loop registers and the
        # micro-op read are enabled by `stepping`: a halt or an error (the core's error
        # register, with a fan-out across the core) need not reach them, as the valid
        # bits stop the micro-ops and a start resets the loops
        stepping = Signal()
        # hold: the ALU micro-op at S1C reads the entry the one at S2 or S3 writes; it
        # waits at S1C (and S0, S0R, S1 with it) until it can meet the result registered
        hold = Signal()
        # S0R: the micro-op read is registered (UOP_READ_STAGES): the block RAM's
        # clock-to-output leaves too little of a cycle for the index adders
        assert UOP_READ_STAGES == 2
        r_valid = Signal()
        r_off = [Signal(INDEX_WIDTH, name=f"r_off{k}") for k in range(3)]
        uop_q = Signal(len(self.uop_rd.data))
        # S1C: the indices are registered (UOP_INDEX_STAGES) before the range checks,
        # the interlock and the reads: index adders, range comparisons, the interlock's
        # comparisons and the loop counters' advance in one cycle were an FPGA
        # critical path
        assert UOP_INDEX_STAGES == 1
        c_valid = Signal()
        with m.If(~hold):
            m.d.sync += [r_valid.eq(issuing & ~self.halt & ~error),
                         s1_valid.eq(r_valid & ~self.halt & ~error),
                         c_valid.eq(s1_valid & ~self.halt & ~error),
                         uop_q.eq(self.uop_rd.data)]
        with m.Else():
            m.d.sync += [r_valid.eq(r_valid & ~self.halt & ~error),
                         s1_valid.eq(s1_valid & ~self.halt & ~error),
                         c_valid.eq(c_valid & ~self.halt & ~error)]
        m.d.comb += [self.uop_rd.addr.eq(loop.uop), loop.step.eq(stepping)]
        with m.If(stepping):
            m.d.sync += [r_off[k].eq(cur[k]) for k in range(3)]
        with m.If(r_valid & ~hold):
            m.d.sync += [s1_off[k].eq(r_off[k]) for k in range(3)]

        # S1: the indices (registered); S1C: range checks, interlock, reads
        uop_raw = Signal(uop_format(cfg).width)
        m.d.comb += uop_raw.eq(Cat(uop_q, Const(0, uop_format(cfg).width
                                                - uop_format(cfg).used_bits)))
        uop = data.View(uop_layout(cfg), uop_raw)
        # the instruction's kind and the fields its micro-ops use, registered at its
        # start for the micro-op pipeline (its first micro-op reaches S1 three cycles
        # later): no decoding of the instruction word ahead of the checks and the reads
        q_gemm, q_alu, q_requant, q_reset = Signal(), Signal(), Signal(), Signal()
        src_used, wgt_used = Signal(), Signal()
        with m.If(ex.start):
            # fields an instruction does not use are ignored (docs/isa.md): a resetting
            # GEMM reads no input or weight, an ALU op with an immediate no source
            m.d.sync += [q_gemm.eq(is_gemm), q_alu.eq(is_alu), q_requant.eq(is_requant),
                         q_reset.eq(g.reset),
                         src_used.eq(Mux(is_gemm, ~g.reset, ~a.use_imm & ~is_requant)),
                         wgt_used.eq(Mux(is_gemm, ~g.reset, is_requant))]

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
        s1_ok = c_valid & ~uop_bad & ~range_bad & ~error & ~self.halt
        with m.If(uop_bad & ~error):
            m.d.sync += [error.eq(1), err_code.eq(ErrorCode.UOP_RANGE)]
        with m.Elif(range_bad & ~error):
            m.d.sync += [error.eq(1), err_code.eq(ErrorCode.SRAM_RANGE)]

        # the reads at S1C: by c_valid alone, not s1_ok (a read changes nothing, and the
        # micro-op an error, a halt or a range check stops is dropped at S2 all the same;
        # the error register's fan-out into the buffers' read ports and the zero flags
        # was an FPGA critical path at 100 MHz)
        m.d.comb += [
            self.inp_rd.addr.eq(idx_s), self.inp_rd.en.eq(c_valid & q_gemm),
            self.wgt_rd.addr.eq(idx_w), self.wgt_rd.en.eq(c_valid & (q_gemm | q_requant)),
            self.acc_rd_src.addr.eq(idx_s), self.acc_rd_src.en.eq(c_valid & q_alu),
        ]
        # The interlock: whether the micro-op at S1C reads the entry the one at S2
        # (`c_dep2`), S3 (`c_dep3`) or S4 (`c_dep4`) writes, registered a cycle ahead,
        # when it enters S1C, from its index sums at S1 (so `hold`, which enables every
        # register before S2 and the loops, is a gate of registers). While it waits
        # the micro-ops ahead move on a stage and a bubble enters S2. The comparisons
        # take the entry bits only: an index past the buffer fails its range check.
        c_dep2, c_dep3, c_dep4 = Signal(), Signal(), Signal()
        a3_valid = Signal()
        a3_addr = Signal(cfg.acc_bits)

        def reads(addr: Value) -> Value:  # the micro-op entering S1C reads `addr`
            return ((sum_a[:cfg.acc_bits] == addr)
                    | (src_used & (sum_s[:cfg.acc_bits] == addr)))
        with m.If(hold):
            m.d.sync += [c_dep2.eq(0), c_dep3.eq(c_dep2), c_dep4.eq(c_dep3)]
        with m.Else():
            m.d.sync += [c_dep2.eq(s1_ok & reads(idx_a[:cfg.acc_bits])),
                         c_dep3.eq(s2_valid & s2_alu & reads(s2_addr)),
                         c_dep4.eq(a3_valid & reads(a3_addr))]
        # (without s1_ok's halt and error: a held micro-op is dropped by them all the same)
        m.d.comb += hold.eq(c_valid & ~c_uop_bad & ~c_index_bad & q_alu
                            & (c_dep2 | c_dep3 | c_dep4))
        m.d.sync += [s2_valid.eq(s1_ok & ~hold), s2_addr.eq(idx_a),
                     s2_reset.eq(q_reset & q_gemm), s2_alu.eq(q_alu)]

        # GEMM products and delay line
        m.d.comb += [gemm.inp.eq(self.inp_rd.data), gemm.wgt.eq(self.wgt_rd.data),
                     gemm.in_valid.eq(s2_valid & ~s2_alu)]
        m.d.comb += [dl_valid[0].eq(s2_valid & ~s2_alu), dl_addr[0].eq(s2_addr),
                     dl_reset[0].eq(s2_reset)]
        for k in range(1, lat + 1):
            m.d.sync += [dl_valid[k].eq(dl_valid[k - 1]), dl_addr[k].eq(dl_addr[k - 1]),
                         dl_reset[k].eq(dl_reset[k - 1])]
        wb_valid, wb_addr, wb_reset = dl_valid[lat], dl_addr[lat], dl_reset[lat]

        # the destination read: ALU at S1; GEMM two cycles before its write-back (the
        # read data is registered, and the write of the cycle in between, which the
        # read could not see, forwarded)
        assert lat >= 2
        gemm_rd_valid, gemm_rd_addr = dl_valid[lat - 2], dl_addr[lat - 2]
        with m.If(c_valid & q_alu):
            m.d.comb += [self.acc_rd_dst.addr.eq(idx_a), self.acc_rd_dst.en.eq(1)]
        with m.Else():
            m.d.comb += [self.acc_rd_dst.addr.eq(gemm_rd_addr),
                         self.acc_rd_dst.en.eq(gemm_rd_valid)]

        # write-back: GEMM at S2+L, ALU at S2 (never both: the pipeline drains
        # between instructions)
        prod = gemm.result
        gemm_new = Signal(self.acc_wr.data.shape())
        alu_new = Signal(self.acc_wr.data.shape())
        # wide datapath registers without a reset (the valid bits say what they hold):
        # with one, Verilator copies every word of them on every cycle
        acc_reg = Signal(self.acc_wr.data.shape(), reset_less=True)  # the read data,
        # one cycle later; last_data: the accumulator write of the previous cycle, and
        # whether it was to the entry written back now: compared a cycle ahead, with the
        # delay line's address one stage before the write-back, so that a register, not
        # a comparison, selects the data ahead of the adders
        last_data = Signal(self.acc_wr.data.shape(), reset_less=True)
        forward = Signal()
        acc_cur = Signal(self.acc_wr.data.shape())
        with m.If(dl_valid[lat - 1]):
            m.d.sync += acc_reg.eq(self.acc_rd_dst.data)
        m.d.sync += forward.eq(self.acc_wr.en & (self.acc_wr.addr == dl_addr[lat - 1]))
        with m.If(self.acc_wr.en):
            m.d.sync += last_data.eq(self.acc_wr.data)
        m.d.comb += acc_cur.eq(Mux(forward, last_data, acc_reg))
        acc_old = data.View(data.ArrayLayout(unsigned(cfg.acc_width), lanes), acc_cur)
        m.d.comb += gemm_new.eq(Cat(*[
            Mux(wb_reset, 0, (acc_old[k] + prod[k].as_unsigned())[:cfg.acc_width])
            for k in range(lanes)]))
        # the ALU pipeline (ALU_PIPELINE_STAGES == 4 register stages after the read):
        # S2 registers the operands, forwarding a result at S6 to the same entry; S3,
        # S4 and S5 are the VectorAlu's three cycles, S5 registers the result; S6
        # writes it back. A micro-op that reads what one of the three before it writes
        # waits at S1C (`hold`): the result it needs is not registered before it would
        # be at S2, and forwarding it unregistered would put the ALU and the
        # forwarding in one cycle.
        assert ALU_PIPELINE_STAGES == 4
        m.submodules.alu = alu = VectorAlu(cfg)
        assert alu.LATENCY == 2
        alu_port = AluSignature(cfg).flip().create()
        wiring.connect(m, alu_port, alu)
        vec_shape = self.acc_wr.data.shape()
        a4_valid, a5_keep, a6_valid = Signal(), Signal(), Signal()
        a4_addr, a5_addr, a6_addr = (Signal(cfg.acc_bits, name=f"a{k}_addr")
                                     for k in range(4, 7))
        s2_src = Signal(cfg.acc_bits)
        m.d.sync += s2_src.eq(idx_s)
        a3_a, a3_b, a6_data = (Signal(vec_shape, name=name, reset_less=True)
                               for name in ("a3_a", "a3_b", "a6_data"))
        a3_rec = Signal(len(self.wgt_rd.data), reset_less=True)
        imm_b = Signal(signed(cfg.acc_width))  # the immediate operand (docs/isa.md)
        m.d.comb += imm_b.eq(Mux(alu_op == AluOp.MULHI, imm << MULHI_IMM_SHIFT, imm))
        alu_s2 = s2_valid & s2_alu
        shift_bad = alu_port.out_valid & alu_port.shift_error
        a_in, b_in = Signal(vec_shape), Signal(vec_shape)
        m.d.comb += [
            a_in.eq(Mux(a6_valid & (a6_addr == s2_addr), a6_data, self.acc_rd_dst.data)),
            b_in.eq(Mux(use_imm, Cat(*[imm_b] * lanes),
                        Mux(a6_valid & (a6_addr == s2_src), a6_data, self.acc_rd_src.data))),
        ]
        # micro-ops at S2, S3 and S4 when an error is raised are dropped (as one at S1C
        # is); S5's result is written unless its shift is out of range
        alu_in = a3_valid & ~error
        m.d.sync += [a3_valid.eq(alu_s2 & ~error), a4_valid.eq(alu_in),
                     a5_keep.eq(a4_valid & ~error),
                     a6_valid.eq(alu_port.out_valid & a5_keep & ~shift_bad)]
        with m.If(alu_s2):
            m.d.sync += [a3_addr.eq(s2_addr), a3_a.eq(a_in), a3_b.eq(b_in),
                         a3_rec.eq(self.wgt_rd.data)]
        with m.If(alu_in):
            m.d.sync += a4_addr.eq(a3_addr)
        with m.If(a4_valid):
            m.d.sync += a5_addr.eq(a4_addr)
        with m.If(alu_port.out_valid):
            m.d.sync += [a6_addr.eq(a5_addr), a6_data.eq(alu_new)]
        a3_av = data.View(data.ArrayLayout(unsigned(cfg.acc_width), lanes), a3_a)
        a3_bv = data.View(data.ArrayLayout(unsigned(cfg.acc_width), lanes), a3_b)
        m.d.comb += [alu_port.op.eq(alu_op), alu_port.in_valid.eq(alu_in),
                     alu_port.rec.eq(a3_rec), alu_new.eq(alu_port.result)]
        for k in range(lanes):
            m.d.comb += [alu_port.a[k].eq(a3_av[k]), alu_port.b[k].eq(a3_bv[k])]
        with m.If(shift_bad & ~error):
            m.d.sync += [error.eq(1), err_code.eq(ErrorCode.SHIFT_RANGE)]
        with m.If(a6_valid):
            m.d.comb += [self.acc_wr.addr.eq(a6_addr), self.acc_wr.data.eq(a6_data),
                         self.acc_wr.en.eq(1)]
        with m.Elif(wb_valid):
            m.d.comb += [self.acc_wr.addr.eq(wb_addr), self.acc_wr.data.eq(gemm_new),
                         self.acc_wr.en.eq(1)]
        gemm_slow = s2_valid & ~s2_alu
        in_flight = (r_valid | s1_valid | c_valid | s2_valid | Cat(*dl_valid).any() | a3_valid
                     | a4_valid | alu_port.out_valid | a6_valid)

        # ------------------------------------------------------------ fast reset
        stop = self.halt | error
        if cfg.fast_reset:
            m.submodules.fast_reset = fr = FastReset(cfg)
            wiring.connect(m, wiring.flipped(self.acc_zero), fr.acc_zero)
            m.d.comb += [fr.start.eq(ex.start & is_gemm & fast_reset_condition(g)),
                         fr.stop.eq(stop), fr.iter_out.eq(g.iter_out),
                         fr.iter_in.eq(g.iter_in), fr.acc_factor_out.eq(g.acc_factor_out),
                         fr.acc.eq(uop.acc), fr.src.eq(uop.src), fr.wgt.eq(uop.wgt)]
            m.d.comb += [self.uop_rd.en.eq(stepping | fr.uop_rd_en),
                         self.gemm_busy.eq(gemm_slow | fr.zeroing), self.alu_busy.eq(alu_s2),
                         self.gemm_uops.eq(Mux(fr.zeroing, fr.zeroed, gemm_slow))]
            with m.If(fr.fail & ~error):
                m.d.sync += [error.eq(1), err_code.eq(fr.code)]
            fr_start, fr_done = fr.start, fr.done
        else:
            # (HwConfig.fast_reset False: every GEMM goes through the pipeline, and
            # acc_zero stays low)
            m.d.comb += [self.uop_rd.en.eq(stepping), self.gemm_busy.eq(gemm_slow),
                         self.alu_busy.eq(alu_s2), self.gemm_uops.eq(gemm_slow)]
            fr_start, fr_done = Const(0), Const(0)
        # ------------------------------------------------------------- execution
        with m.If(seq.retire & (opcode == Opcode.FINISH)):
            m.d.sync += finished.eq(1)
        with m.If(ex.start):
            m.d.sync += [alu_op.eq(a.op), use_imm.eq(a.use_imm), imm.eq(a.imm)]

        with m.FSM():
            with m.State("WAIT"), m.If(ex.start):
                with m.If(opcode == Opcode.FINISH):
                    m.d.comb += ex.done.eq(1)
                with m.Elif(fr_start):
                    m.next = "FAST_RESET"
                with m.Else():
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += [stepping.eq(~hold), issuing.eq(~stop & ~hold)]
                with m.If(stop):
                    m.next = "WAIT"
                with m.Elif(~hold & loop.last):
                    m.next = "DRAIN"
            with m.State("FAST_RESET"):
                m.d.comb += ex.done.eq(fr_done)
                with m.If(stop | fr_done):
                    m.next = "WAIT"
            with m.State("DRAIN"):
                with m.If(stop):
                    m.next = "WAIT"
                with m.Elif(~in_flight):
                    m.d.comb += ex.done.eq(1)
                    m.next = "WAIT"
        m.d.comb += ex.idle.eq(~in_flight)
        return m

