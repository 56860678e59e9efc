"""The fetch unit: reads the instruction stream, checks each word, dispatches it."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from tensorfab.isa import ErrorCode, HwConfig, Opcode, insn_width

from .block_ram_fifo import BlockRamFifo
from .insn_check import InsnCheck
from .layouts import insn_layout
from .mem_port import LEN_WIDTH, MAX_BURST, MemReadSignature
from .signatures import ErrorSignature, InsnStreamLayout, clamped_insn_count, insn_index_width

__all__ = ["Fetch"]


class Fetch(wiring.Component):
    """Reads instructions ``0 .. insn_count-1`` from ``insn_base`` and dispatches them.

    Words are read with burst reads of up to ``buffer_words // 2`` words (several
    beats per word when the instruction is wider than the bus), at most
    ``buffer_words`` words being requested or buffered at once, so the unit never
    refuses a read beat (it cannot block the memory port for the engines). Each
    word leaving the buffer waits in a stage register, is checked from there by
    :class:`~.insn_check.InsnCheck` into a head register, with the verdict, and is
    handed from there, with its index, to the
    stream of its engine (LOAD to load, STORE to store, GEMM, ALU and FINISH to
    compute) in program order. (The head register and the registered end-of-stream
    flags keep the check and the 32-bit index comparisons out of the dispatch
    decision's clock period, an FPGA critical path.) The unit stops after
    dispatching FINISH. It reports the first illegal word (its code and index),
    ``NO_FINISH`` with index ``insn_count`` when the count runs out without FINISH,
    and ``NO_FINISH`` with FINISH's index when FINISH is not the last instruction.
    After FINISH, an error or ``halt`` it drains the reads still in flight.

    The command queues between this unit and the engines are not part of it.

    With ``cfg.block_ram_fifos`` the buffer is a :class:`~.block_ram_fifo.BlockRamFifo`
    asking for block RAM, whose read register is the stage register: the same cycles,
    no LUT RAM.

    Parameters
    ----------
    cfg : HwConfig
        Configuration.
    buffer_words : int
        Instruction words requested or buffered at once (at least 2).

    Attributes
    ----------
    start : In(1)
        Pulse: fetch the stream (ignored while busy).
    insn_base : In(32)
        Byte address of instruction 0 (sampled at ``start``).
    insn_count : In(32)
        Number of instructions (sampled at ``start``).
    mem : Out(MemReadSignature(cfg))
        Memory reads.
    load_insn, compute_insn, store_insn : Out(stream.Signature(InsnStreamLayout(cfg)))
        Dispatched instructions.
    error : Out(ErrorSignature)
        ``BAD_OPCODE``, ``RESERVED_BITS``, ``BAD_FIELD`` or ``NO_FINISH`` (one-cycle pulse).
    halt : In(1)
        Stop dispatching (the core had an error).
    busy : Out(1)
        Fetching, dispatching or draining.
    idle : Out(1)
        Not busy (no read in flight).
    finished : Out(1)
        FINISH was dispatched (held until the next ``start``).
    """

    def __init__(self, cfg: HwConfig, buffer_words: int = 8) -> None:
        self.cfg = cfg
        self.beats_per_word = insn_width(cfg) // cfg.mem_bus_width
        self.buffer_words = buffer_words
        self.chunk = max(1, min(buffer_words // 2, MAX_BURST // self.beats_per_word))
        #: The longest read command it issues, in beats.
        self.longest_read = self.chunk * self.beats_per_word
        if buffer_words < 2:
            raise ValueError(f"Fetch: buffer_words = {buffer_words}; the prefetch "
                             "buffer needs at least 2 instruction words")
        if self.chunk * self.beats_per_word > MAX_BURST:
            raise ValueError(f"Fetch: one {insn_width(cfg)}-bit instruction needs "
                             f"{self.beats_per_word} beats of the {cfg.mem_bus_width}-bit bus, "
                             f"more than a burst's {MAX_BURST}")
        isl = InsnStreamLayout(cfg)
        super().__init__({
            "start": In(1),
            "insn_base": In(32),
            "insn_count": In(32),
            "mem": Out(MemReadSignature(cfg)),
            "load_insn": Out(stream.Signature(isl)),
            "compute_insn": Out(stream.Signature(isl)),
            "store_insn": Out(stream.Signature(isl)),
            "error": Out(ErrorSignature),
            "halt": In(1),
            "busy": Out(1),
            "idle": Out(1),
            "finished": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()
        W = cfg.mem_bus_width
        kw = self.beats_per_word
        iw = insn_width(cfg)
        insn_bytes = iw // 8
        D = self.buffer_words

        flush = Signal()
        block_ram = cfg.block_ram_fifos
        fifo = (BlockRamFifo(iw, D, ram_style="block") if block_ram
                else SyncFIFO(width=iw, depth=D))
        m.submodules.fifo = ResetInserter({"sync": flush})(fifo)
        m.submodules.check = check = InsnCheck(cfg)

        # a program fits in DRAM: its indices take ib bits, its counts ib + 1 (the host's
        # 32-bit INSN_COUNT is clamped to the most words DRAM holds, 2**ib)
        ib = insn_index_width(cfg)
        count = Signal(ib + 1)
        m.d.comb += count.eq(clamped_insn_count(self.insn_count, cfg))
        left = Signal(ib + 1)  # words still to dispatch
        none_left = Signal()  # left == 0
        one_left = Signal()  # left == 1
        req_left = Signal(ib + 1)  # words still to request
        req_addr = Signal(cfg.dram_addr_width)
        # buffer words neither in the buffer nor requested: D - (fifo level + words
        # requested, not yet in the buffer), kept as one register so that a read's room
        # is one comparison of two registers (the sum of three was an FPGA critical path)
        free = Signal(range(D + 1), init=D)
        # beats requested and not yet received, as of the cycle before (see below)
        outstanding = Signal(range(D * kw + 1))
        disp_idx = Signal(ib + 1)  # NO_FINISH reports index = count, up to 2**ib
        cmd_stuck = Signal()
        issuing = Signal()
        take = Signal()  # the buffer's first word moves into the stage register

        # ---- read commands
        cmd = self.mem.cmd
        # n: words of the next read, min(req_left, chunk), a register updated with
        # req_left (the count comparison stays out of the request decision's cycle)
        n = Signal(range(self.chunk + 1))

        def chunk_of(words: Value) -> Value:
            return Mux(words > self.chunk, self.chunk, words)
        m.d.comb += [
            cmd.payload.addr.eq(req_addr),
            cmd.payload.len.eq((n * kw - 1)[:LEN_WIDTH]),
            cmd.valid.eq(cmd_stuck | (issuing & ~self.halt & (n != 0)
                                      & (n <= free))),
        ]
        cmd_fire = cmd.valid & cmd.ready
        m.d.sync += cmd_stuck.eq(cmd.valid & ~cmd.ready)
        with m.If(cmd_fire):
            m.d.sync += [req_left.eq(req_left - n), n.eq(chunk_of(req_left - n)),
                         req_addr.eq(req_addr + n * insn_bytes)]

        # ---- beats -> words (a read beat is never refused)
        rdata = self.mem.rdata
        m.d.comb += rdata.ready.eq(1)
        rfire = rdata.valid
        word_done = Signal()
        if kw > 1:
            beat = Signal(range(kw))
            shreg = Signal((kw - 1) * W)
            with m.If(rfire):
                m.d.sync += [beat.eq(Mux(beat == kw - 1, 0, beat + 1)),
                             shreg.eq(Cat(shreg[W:], rdata.payload.data))]
            m.d.comb += [word_done.eq(rfire & (beat == kw - 1)),
                         fifo.w_data.eq(Cat(shreg, rdata.payload.data))]
        else:
            m.d.comb += [word_done.eq(rfire), fifo.w_data.eq(rdata.payload.data)]
        m.d.comb += fifo.w_en.eq(word_done & ~flush)
        # free's next values with and without a read command, chosen by cmd_fire last
        # (it settles late: the room comparison, valid, the arbiter's ready), not
        # added after it; in IDLE the buffer is flushed and no read is outstanding
        free_kept = Signal.like(free)
        m.d.comb += free_kept.eq(free + take)
        m.d.sync += free.eq(Mux(flush, D, Mux(cmd_fire, free_kept - n, free_kept)))
        # `outstanding` only tells DRAIN when the reads are all in, so it counts a
        # command and a beat a cycle late, from registers (cmd_fire and a read beat's
        # valid both began FPGA critical paths into its carry chain): the beats
        # outstanding now are outstanding + fired_beats - got
        fired_beats = Signal.like(outstanding)
        got = Signal()
        m.d.sync += [fired_beats.eq(Mux(cmd_fire, n * kw, 0)), got.eq(rfire),
                     outstanding.eq(outstanding + fired_beats - got)]

        # ---- the buffer's first word into a register, checked from it into the head
        # register, dispatched from there (the check on the buffer's LUT RAM read was
        # an FPGA critical path)
        staged = Signal()
        stage_word = fifo.r_data if block_ram else Signal(iw)
        head_valid = Signal()
        head_word = Signal(iw)
        head_ok = Signal()
        head_code = Signal.like(check.code)
        staged_op = insn_layout(cfg, Opcode.LOAD)(stage_word).opcode
        m.d.comb += check.word.eq(stage_word)
        targets = {Opcode.LOAD: self.load_insn, Opcode.STORE: self.store_insn,
                   Opcode.GEMM: self.compute_insn, Opcode.ALU: self.compute_insn,
                   Opcode.FINISH: self.compute_insn}
        streams = (self.load_insn, self.compute_insn, self.store_insn)
        for s in streams:
            m.d.comb += [s.payload.word.eq(head_word), s.payload.index.eq(disp_idx)]
        # the head's queue (one-hot) and whether it is FINISH, decoded as it enters the
        # head register: the dispatch's valid and ready then start at flip-flops (the
        # head's opcode decode into the queues' write enables was an FPGA critical path)
        head_to = Signal(len(streams))
        is_finish = Signal()
        to_next = Cat(*(Cat(*(staged_op == op for op, t in targets.items() if t is s)).any()
                        for s in streams))
        dispatching = Signal()
        ready = Signal()
        m.d.comb += ready.eq(Cat(*(head_to[k] & s.ready for k, s in enumerate(streams))).any())
        for k, s in enumerate(streams):
            m.d.comb += s.valid.eq(dispatching & head_to[k])
        disp_fire = dispatching & ready
        advance = Signal()  # the staged word moves into the head register
        m.d.comb += [advance.eq(staged & (~head_valid | disp_fire)),
                     take.eq(fifo.r_rdy & (~staged | advance)), fifo.r_en.eq(take)]
        with m.If(flush):
            m.d.sync += staged.eq(0)
        with m.Elif(take):
            m.d.sync += staged.eq(1)
            if not block_ram:
                m.d.sync += stage_word.eq(fifo.r_data)
        with m.Elif(advance):
            m.d.sync += staged.eq(0)
        with m.If(flush):
            m.d.sync += head_valid.eq(0)
        with m.Elif(advance):
            m.d.sync += [head_valid.eq(1), head_word.eq(stage_word), head_ok.eq(check.ok),
                         head_code.eq(check.code), head_to.eq(to_next),
                         is_finish.eq(staged_op == Opcode.FINISH)]
        with m.Elif(disp_fire):
            m.d.sync += head_valid.eq(0)
        finished = Signal()
        m.d.comb += [self.finished.eq(finished), self.error.index.eq(disp_idx)]
        with m.If(disp_fire):
            m.d.sync += [disp_idx.eq(disp_idx + 1), left.eq(left - 1), none_left.eq(one_left),
                         one_left.eq(left == 2)]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += [self.idle.eq(1), flush.eq(1)]
                with m.If(self.start):
                    m.d.sync += [left.eq(count), none_left.eq(count == 0),
                                 one_left.eq(count == 1), req_left.eq(count),
                                 n.eq(chunk_of(count)),
                                 req_addr.eq(self.insn_base), disp_idx.eq(0),
                                 finished.eq(0)]
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += [self.busy.eq(1), issuing.eq(1)]
                with m.If(self.halt):
                    m.next = "DRAIN"
                with m.Elif(none_left):
                    m.d.comb += [self.error.valid.eq(1), self.error.code.eq(ErrorCode.NO_FINISH)]
                    m.next = "DRAIN"
                with m.Elif(head_valid):
                    with m.If(~head_ok):
                        m.d.comb += [self.error.valid.eq(1), self.error.code.eq(head_code)]
                        m.next = "DRAIN"
                    with m.Elif(is_finish & ~one_left):
                        m.d.comb += [self.error.valid.eq(1),
                                     self.error.code.eq(ErrorCode.NO_FINISH)]
                        m.next = "DRAIN"
                    with m.Else():
                        m.d.comb += dispatching.eq(1)
                        with m.If(ready & is_finish):
                            m.d.sync += finished.eq(1)
                            m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.comb += self.busy.eq(1)
                with m.If(~cmd_stuck & (fired_beats == 0) & (outstanding == got)):
                    m.next = "IDLE"
        return m
