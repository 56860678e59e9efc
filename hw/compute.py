"""The compute engine: GEMM and ALU micro-op loops over the on-chip buffers, and FINISH."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import Out

from tensorfab.isa import Engine, ErrorCode, HwConfig, Opcode, uop_format
from tensorfab.isa.formats import UOP_INDEX_STAGES, UOP_READ_STAGES
from tensorfab.isa.insn import fast_reset_condition

from .alu_pipeline import AluPipeline
from .compute_fields import ComputeFields
from .fast_reset import FastReset
from .gemm import GemmCore
from .gemm_writeback import GemmWriteback
from .layouts import insn_layout, uop_layout
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

    The engine decodes the instruction with a :class:`~.compute_fields.ComputeFields`,
    steps its loops with a :class:`~.uop_loop.UopLoop`, and runs S0 to S1C itself;
    from S2 on a GEMM micro-op is the :class:`~.gemm.GemmCore`'s and the
    :class:`~.gemm_writeback.GemmWriteback`'s, an ALU micro-op the
    :class:`~.alu_pipeline.AluPipeline`'s. GEMM: the accumulator write of the cycle
    between its read and its write-back is forwarded, so back-to-back micro-ops on one
    entry need no stall. ALU: a micro-op reading the entry one of the three micro-ops
    ahead of it writes is held at S1C until that one reaches S5; one reading what the
    micro-op four ahead writes gets S6's result forwarded (read ports are transparent
    to the write port for anything further ahead). The pipeline drains at the end of
    each instruction before its tokens are pushed.

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

        # ------------------------------------------------------------ instruction
        error = Signal()
        finished = Signal()
        m.submodules.seq = seq = InsnSequencer(cfg, Engine.COMPUTE)
        seq.connect_engine(m, self, halt=self.halt | error | finished)
        ex = seq.exec
        # the instruction's loops (UopLoop: acc/dst, inp/src, wgt offsets), and its
        # kind and used fields registered at its start
        m.submodules.fields = fields = ComputeFields(cfg)
        m.d.comb += [fields.word.eq(ex.word), fields.start.eq(ex.start)]
        g = data.View(insn_layout(cfg, Opcode.GEMM), ex.word)
        a = data.View(insn_layout(cfg, Opcode.ALU), ex.word)
        m.submodules.loop = loop = UopLoop(cfg.uop_bits, fields.factor_width)
        m.d.comb += [loop.start.eq(ex.start), loop.uop_begin.eq(fields.uop_begin),
                     loop.uop_end.eq(fields.uop_end), loop.iter_out.eq(fields.iter_out),
                     loop.iter_in.eq(fields.iter_in)]
        m.d.comb += [loop.factor_in[k].eq(fields.factor_in[k]) for k in range(3)]
        m.d.comb += [loop.factor_out[k].eq(fields.factor_out[k]) for k in range(3)]
        cur = [loop.offsets[k] for k in range(3)]

        err_code = Signal(4)
        m.d.comb += [ex.fail.eq(error), ex.code.eq(err_code), self.finished.eq(finished)]

        # ------------------------------------------------------------- pipeline
        s1_valid = Signal()
        s1_off = [Signal(INDEX_WIDTH, name=f"s1_off{k}") for k in range(3)]
        s2_valid = Signal()
        s2_addr = Signal(cfg.acc_bits)
        s2_reset = Signal()
        s2_alu = Signal()
        s2_src = Signal(cfg.acc_bits)
        m.submodules.alu_pipe = alu_pipe = AluPipeline(cfg)
        m.submodules.writeback = wb = GemmWriteback(cfg, lat)

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
        q_gemm, q_alu, q_requant, q_reset = (fields.q_gemm, fields.q_alu, fields.q_requant,
                                             fields.q_reset)
        src_used, wgt_used = fields.src_used, fields.wgt_used

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
        a3_valid, a3_addr = alu_pipe.a3_valid, alu_pipe.a3_addr

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

        m.d.sync += s2_src.eq(idx_s)
        gemm_s2 = s2_valid & ~s2_alu
        alu_s2 = s2_valid & s2_alu

        # GEMM: products into the GemmCore at S2, write-back at S2+L
        m.d.comb += [gemm.inp.eq(self.inp_rd.data), gemm.wgt.eq(self.wgt_rd.data),
                     gemm.in_valid.eq(gemm_s2),
                     wb.valid.eq(gemm_s2), wb.addr.eq(s2_addr), wb.reset.eq(s2_reset),
                     wb.products.eq(gemm.result), wb.rd_data.eq(self.acc_rd_dst.data),
                     wb.acc_wr_en.eq(self.acc_wr.en), wb.acc_wr_addr.eq(self.acc_wr.addr),
                     wb.acc_wr_data.eq(self.acc_wr.data)]
        # the destination read: ALU at S1C; GEMM two cycles before its write-back
        with m.If(c_valid & q_alu):
            m.d.comb += [self.acc_rd_dst.addr.eq(idx_a), self.acc_rd_dst.en.eq(1)]
        with m.Else():
            m.d.comb += [self.acc_rd_dst.addr.eq(wb.rd_addr), self.acc_rd_dst.en.eq(wb.rd_en)]

        # ALU: S2 to S6 (micro-ops at S2, S3 and S4 when an error is raised are dropped,
        # as one at S1C is)
        m.d.comb += [alu_pipe.start.eq(ex.start), alu_pipe.insn_op.eq(a.op),
                     alu_pipe.insn_use_imm.eq(a.use_imm), alu_pipe.insn_imm.eq(a.imm),
                     alu_pipe.issue.eq(alu_s2), alu_pipe.dst.eq(s2_addr),
                     alu_pipe.src.eq(s2_src), alu_pipe.dst_data.eq(self.acc_rd_dst.data),
                     alu_pipe.src_data.eq(self.acc_rd_src.data),
                     alu_pipe.rec.eq(self.wgt_rd.data), alu_pipe.drop.eq(error)]
        with m.If(alu_pipe.shift_bad & ~error):
            m.d.sync += [error.eq(1), err_code.eq(ErrorCode.SHIFT_RANGE)]
        # write-back: GEMM at S2+L, ALU at S6 (never both: the pipeline drains
        # between instructions)
        with m.If(alu_pipe.wr_en):
            m.d.comb += [self.acc_wr.addr.eq(alu_pipe.wr_addr),
                         self.acc_wr.data.eq(alu_pipe.wr_data), self.acc_wr.en.eq(1)]
        with m.Elif(wb.wb_valid):
            m.d.comb += [self.acc_wr.addr.eq(wb.wb_addr), self.acc_wr.data.eq(wb.wb_data),
                         self.acc_wr.en.eq(1)]
        gemm_slow = gemm_s2
        in_flight = (r_valid | s1_valid | c_valid | s2_valid | wb.busy | alu_pipe.busy)

        # ------------------------------------------------------------ fast reset
        stop = self.halt | error
        if cfg.fast_reset:
            m.submodules.fast_reset = fr = FastReset(cfg)
            wiring.connect(m, wiring.flipped(self.acc_zero), fr.acc_zero)
            m.d.comb += [fr.start.eq(ex.start & fields.is_gemm & fast_reset_condition(g)),
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
        with m.If(seq.retire & fields.is_finish):
            m.d.sync += finished.eq(1)

        with m.FSM():
            with m.State("WAIT"), m.If(ex.start):
                with m.If(fields.is_finish):
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

