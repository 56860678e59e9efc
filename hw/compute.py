"""The compute engine: GEMM and ALU micro-op loops over the on-chip buffers, and FINISH."""

from __future__ import annotations

import functools
import operator

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import Out

from tensorfab.isa import AluOp, Engine, ErrorCode, HwConfig, Opcode, uop_format
from tensorfab.isa.formats import MULTIPLYING_ALU_OPS, header_format
from tensorfab.isa.insn import fast_reset_condition

from .alu_pipeline import AluPipeline
from .fast_reset import FastReset
from .gemm import GemmCore
from .gemm_write_back import GemmWriteBack
from .layouts import format_layout, insn_layout
from .sequencer import InsnSequencer, engine_members
from .signatures import BufReadSignature, BufWriteSignature, ZeroSignature, zero_lanes
from .uop_issue import UopIssue
from .uop_loop import OFFSETS, UopLoop

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
        S2  GEMM: products enter the GemmCore  ALU: the entries read registered
        S3                                     ALU: operands registered
        S4                                     ALU: first cycle (VectorAlu)
        S5                                     ALU: second cycle
        S6                                     ALU: third cycle, OP(a, b) registered
        S7                                     ALU: write acc[d]
        S2+L-3  GEMM: read acc[a]  (L = GemmCore.LATENCY; the data registered twice)
        S2+L    GEMM: write acc[a] + products (or 0 with reset)

    The loops are a :class:`~.uop_loop.UopLoop`; S0 to S2 (the micro-op read and
    its registers, the index sums, the range checks, the interlock and the buffer
    reads) a :class:`~.uop_issue.UopIssue`; the ALU's S2 to S7 an
    :class:`~.alu_pipeline.AluPipeline`; GEMM's S2+L-3 to S2+L, behind the
    :class:`~.gemm.GemmCore`, a :class:`~.gemm_write_back.GemmWriteBack`. Each
    documents its stages and the timing reasons for them. The engine decodes the
    instruction, runs the loops from its state machine (``RUN``, ``DRAIN``,
    ``FAST_RESET``), keeps the error register and shares two ports: the destination
    read (the ALU's at S1C, else GEMM's) and the accumulator write (the ALU's at S7,
    else GEMM's; never both: the pipeline drains between instructions).

    Back-to-back GEMM micro-ops on one entry need no stall (the GemmWriteBack
    forwards); an ALU micro-op reading what one of the three ahead of it writes is held
    at S1C (the UopIssue's interlock), one four or five ahead gets the result S7 writes
    forwarded (the AluPipeline). The pipeline drains at the end of each instruction
    (``DRAIN``) before its tokens are pushed.

    **Fast reset.** A GEMM with ``reset`` whose accumulator indices run in contiguous
    lines (one micro-op, ``acc_factor_in = 1``, every input and weight factor 0, as
    compilers emit it) does not go through the pipeline: a
    :class:`~.fast_reset.FastReset` reads its micro-op and zeroes each line
    ``uop.acc + i·acc_factor_out + [0, iter_in)`` through :attr:`acc_zero`, up to
    :func:`~.signatures.zero_lanes` entries per cycle. Range checks and errors are those
    of the micro-op loop; :attr:`gemm_uops` counts every entry zeroed. Without
    ``cfg.fast_reset`` there is no fast reset: such a GEMM goes through the pipeline
    like any other, and :attr:`acc_zero` stays low.

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
    acc_port_next : Out(1)
        The engine claims the accumulator write port in the next cycle: the next value
        of ``acc_wr.en | acc_zero.en``, from their registers' inputs (the load engine,
        which writes when the engine does not, registers it: ``acc_taken_next``).
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
            "acc_port_next": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()

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
        # (without the vector ALU, the fetch unit refuses ALU words: BAD_OPCODE)
        is_alu = opcode == Opcode.ALU if cfg.vector_alu else Const(0)

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
        m.d.comb += [loop.factor_in[k].eq(f_in[k]) for k in range(OFFSETS)]
        m.d.comb += [loop.factor_out[k].eq(f_out[k]) for k in range(OFFSETS)]

        err_code = Signal(4)
        m.d.comb += [ex.fail.eq(error), ex.code.eq(err_code), self.finished.eq(finished)]

        # ------------------------------------------------------------- issue
        # stepping: the loops advance (in RUN, unless held); issuing: and a micro-op
        # enters the pipeline (not after a halt or an error). The loop registers and the
        # micro-op read are enabled by `stepping`: a halt or an error (the core's error
        # register, with a fan-out across the core) need not reach them, as the valid
        # bits stop the micro-ops and a start resets the loops
        stepping = Signal()
        issuing = Signal()
        m.submodules.issue = issue = UopIssue(cfg)
        # hold: the ALU micro-op at S1C reads the entry one at S2, S3 or S4 writes; it
        # waits at S1C (and S0, S0R, S1 with it) until it can meet the result registered
        hold = issue.hold
        m.d.comb += [self.uop_rd.addr.eq(loop.uop), loop.step.eq(stepping),
                     issue.stepping.eq(stepping), issue.issuing.eq(issuing),
                     issue.halt.eq(self.halt), issue.error.eq(error),
                     issue.uop_data.eq(self.uop_rd.data)]
        m.d.comb += [issue.offsets[k].eq(loop.offsets[k]) for k in range(OFFSETS)]
        # the instruction's kind and the fields its micro-ops use, registered by the
        # issue at its start; fields an instruction does not use are ignored
        # (docs/isa.md): a resetting GEMM reads no input or weight, an ALU op with an
        # immediate no source
        if cfg.sequential_multiplier:
            m.d.comb += issue.is_mul.eq(is_alu & functools.reduce(
                operator.or_, (a.op == op for op in MULTIPLYING_ALU_OPS)))
        m.d.comb += [issue.start.eq(ex.start), issue.is_gemm.eq(is_gemm),
                     issue.is_alu.eq(is_alu), issue.is_requant.eq(is_requant),
                     issue.is_reset.eq(g.reset),
                     issue.src_used.eq(Mux(is_gemm, ~g.reset, ~a.use_imm & ~is_requant)),
                     issue.wgt_used.eq(Mux(is_gemm, ~g.reset, is_requant))]
        with m.If(issue.uop_bad & ~error):
            m.d.sync += [error.eq(1), err_code.eq(ErrorCode.UOP_RANGE)]
        with m.Elif(issue.range_bad & ~error):
            m.d.sync += [error.eq(1), err_code.eq(ErrorCode.SRAM_RANGE)]
        for request, port in ((issue.inp_rd, self.inp_rd), (issue.wgt_rd, self.wgt_rd),
                              (issue.src_rd, self.acc_rd_src)):
            m.d.comb += [port.addr.eq(request.addr), port.en.eq(request.en)]

        # the destination read, registered as it leaves the block RAM: one register
        # for both readers (the ALU's operand at S3, GEMM's entry at S2+L-1), which
        # the placer can keep by the RAM (no reset: the reads say what it holds)
        dst_entry = Signal(len(self.acc_rd_dst.data), reset_less=True)
        m.d.sync += dst_entry.eq(self.acc_rd_dst.data)

        # ------------------------------------------------------------- GEMM
        m.submodules.gemm = gemm = GemmCore(cfg)
        m.submodules.write_back = wb = GemmWriteBack(cfg, gemm.LATENCY)
        gemm_slow = issue.s2_valid & ~issue.s2_alu  # a micro-op enters the GEMM core
        m.d.comb += [gemm.inp.eq(self.inp_rd.data), gemm.wgt.eq(self.wgt_rd.data),
                     gemm.in_valid.eq(gemm_slow), gemm.in_clear.eq(issue.s2_reset),
                     wb.valid.eq(gemm_slow), wb.addr.eq(issue.s2_dst),
                     wb.reset.eq(issue.s2_reset), wb.products.eq(gemm.result),
                     wb.fetched.eq(dst_entry)]

        # ------------------------------------------------------------- ALU
        alu_s2 = issue.s2_valid & issue.s2_alu
        if cfg.vector_alu:
            m.submodules.alu = alu = AluPipeline(cfg)
            m.d.comb += [alu.start.eq(ex.start), alu.op.eq(a.op), alu.use_imm.eq(a.use_imm),
                         alu.imm.eq(a.imm), alu.valid.eq(alu_s2), alu.dst.eq(issue.s2_dst),
                         alu.src.eq(issue.s2_src), alu.s3_dst_data.eq(dst_entry),
                         alu.src_data.eq(self.acc_rd_src.data), alu.rec.eq(self.wgt_rd.data),
                         alu.error.eq(error), issue.a3_valid.eq(alu.a3_valid),
                         issue.a3_dst.eq(alu.a3_dst)]
            with m.If(alu.shift_error & ~error):
                m.d.sync += [error.eq(1), err_code.eq(ErrorCode.SHIFT_RANGE)]
            alu_wr, alu_wr_next, alu_busy = alu.acc_wr, alu.acc_wr_next, alu.busy
        else:
            alu_wr = BufWriteSignature(cfg.acc_bits, len(self.acc_wr.data)).create()
            alu_wr_next, alu_busy = Const(0), Const(0)

        # the shared ports: the destination read (ALU at S1C, else GEMM two cycles
        # before its write-back) and the write (ALU at S7, else GEMM at S2+L)
        with m.If(issue.dst_rd.en):
            m.d.comb += [self.acc_rd_dst.addr.eq(issue.dst_rd.addr), self.acc_rd_dst.en.eq(1)]
        with m.Else():
            m.d.comb += [self.acc_rd_dst.addr.eq(wb.acc_rd.addr),
                         self.acc_rd_dst.en.eq(wb.acc_rd.en)]
        with m.If(alu_wr.en):
            m.d.comb += [self.acc_wr.addr.eq(alu_wr.addr),
                         self.acc_wr.data.eq(alu_wr.data), self.acc_wr.en.eq(1)]
        with m.Elif(wb.acc_wr.en):
            m.d.comb += [self.acc_wr.addr.eq(wb.acc_wr.addr),
                         self.acc_wr.data.eq(wb.acc_wr.data), self.acc_wr.en.eq(1)]
        in_flight = issue.busy | wb.busy | alu_busy

        # ------------------------------------------------------------ fast reset
        stop = self.halt | error
        if cfg.fast_reset:
            m.submodules.fast_reset = fr = FastReset(cfg)
            wiring.connect(m, wiring.flipped(self.acc_zero), fr.acc_zero)
            m.d.comb += [fr.start.eq(ex.start & is_gemm & fast_reset_condition(g)),
                         fr.stop.eq(stop), fr.iter_out.eq(g.iter_out),
                         fr.iter_in.eq(g.iter_in), fr.acc_factor_out.eq(g.acc_factor_out),
                         fr.acc.eq(issue.uop.acc), fr.src.eq(issue.uop.src),
                         fr.wgt.eq(issue.uop.wgt)]
            m.d.comb += [self.uop_rd.en.eq(stepping | fr.uop_rd_en),
                         self.gemm_busy.eq(gemm_slow | fr.zeroing), self.alu_busy.eq(alu_s2),
                         self.gemm_uops.eq(Mux(fr.zeroing, fr.zeroed, gemm_slow))]
            with m.If(fr.fail & ~error):
                m.d.sync += [error.eq(1), err_code.eq(fr.code)]
            fr_start, fr_done, zero_next = fr.start, fr.done, fr.acc_zero_next
        else:
            # (HwConfig.fast_reset False: every GEMM goes through the pipeline, and
            # acc_zero stays low)
            m.d.comb += [self.uop_rd.en.eq(stepping), self.gemm_busy.eq(gemm_slow),
                         self.alu_busy.eq(alu_s2), self.gemm_uops.eq(gemm_slow)]
            fr_start, fr_done, zero_next = Const(0), Const(0), Const(0)
        m.d.comb += self.acc_port_next.eq(alu_wr_next | wb.acc_wr_next | zero_next)
        # ------------------------------------------------------------- execution
        with m.If(seq.retire & (opcode == Opcode.FINISH)):
            m.d.sync += finished.eq(1)

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

