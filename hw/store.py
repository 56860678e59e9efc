"""The store engine: STORE, accumulators narrowed to int8 and written to DRAM."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal, Value, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import Engine, ErrorCode, HwConfig, Opcode, insn_width
from tensorfab.isa.config import log2
from tensorfab.isa.formats import REQUANT_RECORD_WORDS, requant_supported

from .burst import BurstIssuer, check_max_burst, dram_limit, transfer_phases
from .dsp import registered_product
from .layouts import insn_layout
from .mem_port import MemWriteSignature
from .register_slice import RegisterSlice
from .sequencer import InsnSequencer, engine_members
from .signatures import BufReadSignature, acc_entry_bits, clamped_insn_count
from .store_requant import StoreRequant

__all__ = ["EntryQueue", "StoreEngine"]


class EntryQueue(wiring.Component):
    """``SyncFIFOBuffered(width=width, depth=depth)`` with a ``flush`` (the FIFO reset to
    empty in the next cycle) and its flags as registers: the ports and the timing are
    the same (an entry written in one cycle is at ``r_data`` two cycles later), and
    ``r_rdy_next`` says what ``r_rdy`` is in the next cycle.

    A written entry is registered first, with nothing before that register but the
    writer's own logic (the store's is the accumulator buffer's read data, which comes
    late in its cycle from block RAM: on an ECP5 5.8 ns after the clock, and the queue's
    LUT RAM was too far for the rest of the cycle), and from there goes into a
    :class:`~.register_slice.RegisterSlice` of ``depth`` entries (``SyncFIFO``'s
    timing, its head a register): one cycle each, the two of ``SyncFIFOBuffered``.
    ``w_rdy`` counts both (a register: room for an entry besides the head, as
    ``SyncFIFOBuffered``'s inner queue has), so the slice always takes the registered
    entry.

    Parameters
    ----------
    width : int
        Bits per entry.
    depth : int
        Entries (at least 2).

    Attributes
    ----------
    w_data, w_en, w_rdy, r_data, r_en, r_rdy
        ``SyncFIFOBuffered``'s ports (``w_rdy`` and ``r_rdy`` registers).
    r_rdy_next : Out(1)
        ``r_rdy`` in the next cycle.
    flush : In(1)
        Empty the FIFO: it holds nothing in the next cycle, whatever this cycle writes.
    """

    def __init__(self, width: int, depth: int) -> None:
        if depth < 2:
            raise ValueError(f"EntryQueue: depth = {depth}; at least 2")
        self.width = width
        self.depth = depth
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1, init=1),
            "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1), "r_rdy_next": Out(1),
            "flush": In(1),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        depth = self.depth
        queue = RegisterSlice(self.width, depth)
        m.submodules.queue = ResetInserter({"sync": self.flush})(queue)
        staged = Signal()
        staged_data = Signal(self.width, reset_less=True)
        push = self.w_en & self.w_rdy
        pop = self.r_en & self.r_rdy
        m.d.sync += [staged_data.eq(self.w_data), staged.eq(push & ~self.flush)]
        m.d.comb += [queue.w_data.eq(staged_data), queue.w_en.eq(staged),
                     queue.r_en.eq(self.r_en), self.r_data.eq(queue.r_data),
                     self.r_rdy.eq(queue.r_rdy),
                     self.r_rdy_next.eq(queue.r_rdy_next & ~self.flush)]
        # the entries (staged or in the slice), and room for one more besides the
        # head: the level's comparisons chosen between by the push, the pop and the
        # head's next state (a read, from the memory's write ready, then reaches the
        # register through multiplexers only)
        level = staged + queue.level

        def at_most(k: int) -> Value:
            """The level after this cycle is at most ``k``."""
            return Mux(push & ~pop, (level <= k - 1) if k else Const(0),
                       Mux(pop & ~push, level <= k + 1, level <= k))
        m.d.sync += self.w_rdy.eq(Mux(queue.r_rdy_next, at_most(depth - 1), at_most(depth - 2)))
        with m.If(self.flush):
            m.d.sync += self.w_rdy.eq(1)
        return m


class StoreEngine(wiring.Component):
    """Executes STORE instructions (docs/isa.md) one at a time.

    An :class:`~.sequencer.InsnSequencer` takes each instruction, pops the
    ``pop_prev`` token if asked, pushes ``push_prev`` after it and retires it (its
    halt policy is the engine's). The datapath checks the source
    fits the accumulator buffer (``SRAM_RANGE``), the destination lies below
    ``dram_size`` and outside the instruction stream ``[insn_base, insn_base +
    insn_count × insn_bytes)`` (``DRAM_RANGE``); then read the accumulator entries
    in order (one per cycle, a few ahead in a small FIFO), keep the low byte of
    every element, and write each row with burst writes (split at ``max_burst`` beats,
    by a :class:`~.burst.BurstIssuer`), one beat per cycle; the instruction is done
    when the last beat is accepted.

    On ``halt`` the engine issues no further command but still sends the beats
    of the commands already accepted (the port needs them), then goes idle
    without retiring.

    Parameters
    ----------
    cfg : HwConfig
        Configuration.
    fifo_depth : int
        Entries of the :class:`EntryQueue` that holds the narrowed entries read ahead
        of the memory (at least 2).
    max_burst : int
        Longest write burst, in beats (longer rows are split, so a long store leaves
        gaps in the memory's command queue for reads).

    Attributes
    ----------
    mem : Out(MemWriteSignature(cfg))
        Memory writes.
    dram_size : In(32)
        Bytes of DRAM that may be written (0: the whole address space).
    insn_base, insn_count : In(32)
        The instruction stream, which a STORE may not overwrite.
    insn, pop_prev, push_prev, halt, error, busy, stall, retire, idle
        The sequencer's members (:func:`~.sequencer.engine_members`); ``error``
        reports ``SRAM_RANGE`` or ``DRAM_RANGE`` (a one-cycle pulse).
    """

    def __init__(self, cfg: HwConfig, fifo_depth: int = 6, max_burst: int = 32) -> None:
        if fifo_depth < 2:
            raise ValueError(f"fifo_depth must be at least 2 entries, not {fifo_depth}")
        self.cfg = cfg
        self.fifo_depth = fifo_depth
        self.max_burst = check_max_burst(max_burst)
        super().__init__(engine_members(cfg, Engine.STORE) | {
            "acc_rd": Out(BufReadSignature(cfg.acc_bits, acc_entry_bits(cfg))),
            "mem": Out(MemWriteSignature(cfg)),
            "dram_size": In(32),
            "insn_base": In(32),
            "insn_count": In(32),
        })

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()
        W = cfg.mem_bus_width
        aw = cfg.dram_addr_width
        out_bits = cfg.out_entry_bytes * 8
        sh_entry = log2(cfg.out_entry_bytes)
        kout = cfg.out_entry_bytes // cfg.mem_bus_bytes
        lanes = cfg.batch * cfg.block_out

        m.submodules.seq = seq = InsnSequencer(cfg, Engine.STORE)
        seq.connect_engine(m, self)
        ex = seq.exec
        word = insn_layout(cfg, Opcode.STORE)(ex.word)

        # ---- range checks, in stages that cost no cycle: sums registered when the
        # sequencer takes the instruction (from the command queue's word), products in
        # the next cycle, the earliest ``ex.start``; CHECK compares registers. (The
        # products computed at start and compared in CHECK were FPGA critical paths.)
        taken = insn_layout(cfg, Opcode.STORE)(self.insn.payload.word)
        take = self.insn.valid & self.insn.ready
        # the limits, in entries: DRAM_SIZE's bytes (0: the whole address space) and
        # the instruction stream's (reset_less: a start does not clear them)
        lim_entries = Signal(33, reset_less=True)
        m.d.sync += lim_entries.eq(dram_limit(self.dram_size, aw) >> sh_entry)
        # the stream as the fetch unit reads it: from insn_base within DRAM (aw bits),
        # the clamped count of words (so aw + 1 bits hold its end, not 37)
        insn_base = self.insn_base[:aw]
        insn_count = clamped_insn_count(self.insn_count, cfg)
        insn_end = Signal(aw + 1, reset_less=True)  # bytes
        base_entries = Signal(aw - sh_entry, reset_less=True)  # insn_base >> sh_entry
        protect = Signal(reset_less=True)  # insn_count != 0
        m.d.sync += [insn_end.eq(insn_base + (insn_count << log2(insn_width(cfg) // 8))),
                     base_entries.eq(insn_base >> sh_entry), protect.eq(insn_count != 0)]
        y_m1 = Signal(16)
        dram_x = Signal(aw + 1)  # dram + x: one past the first row's last entry
        room = Signal(signed(cfg.acc_bits + 2))  # acc_depth - sram
        start_hit = Signal()  # the first entry's byte lies below the stream's end
        with m.If(take):
            m.d.sync += [y_m1.eq(taken.y - 1), dram_x.eq(taken.dram + taken.x),
                         room.eq(cfg.acc_depth - taken.sram),
                         start_hit.eq((taken.dram << sh_entry) < insn_end)]
        n_entries = registered_product(m, "n_entries", word.y, word.x)
        span = registered_product(m, "span", y_m1, word.stride)  # (y - 1) * stride
        slack = Signal(signed(35))  # entries left below the limit after dram + x
        base_slack = Signal(signed(aw + 2))  # insn_base >> sh_entry - (dram + x)
        m.d.sync += [slack.eq(lim_entries - dram_x), base_slack.eq(base_entries - dram_x)]
        start_bytes = word.dram << sh_entry
        sram_bad = Signal()
        dram_bad = Signal()
        # with end = dram + (y - 1) * stride + x (entries): sram + y * x > acc_depth;
        # end << sh_entry > limit, or [dram, end) << sh_entry meets the stream
        # (insn_base < end << sh_entry is insn_base >> sh_entry < end)
        m.d.comb += [
            sram_bad.eq(n_entries > room),
            dram_bad.eq((span > slack) | (protect & start_hit & (span > base_slack))),
        ]

        # ---- accumulator reader -> FIFO of narrowed entries
        flush = Signal()
        m.submodules.fifo = fifo = EntryQueue(out_bits, self.fifo_depth)
        m.d.comb += fifo.flush.eq(flush)
        rd_left = Signal(33)
        rd_addr = Signal(cfg.acc_bits)
        rd_pending = Signal()
        reading = Signal()  # the reader may run this cycle
        # `rd_more` (rd_left != 0) and `queued` (fifo.level + rd_pending: entries read
        # and not yet sent) are registers kept beside what they stand for: the read
        # enable, which loads the counters, then starts at registers (the 33-bit
        # comparison and the FIFO level's sum fed their clock enables: an FPGA
        # critical path)
        rd_more = Signal()
        queued = Signal(range(self.fifo_depth + 1))
        entry_rd = reading & rd_more & (queued < self.fifo_depth - 1)
        narrowed = Cat(self.acc_rd.data[32 * i: 32 * i + 8] for i in range(lanes))
        if requant_supported(cfg):
            start, entry_rd, shift_bad = self._requant(m, ex, word, entry_rd, rd_addr,
                                                       rd_pending, flush, narrowed, fifo)
        else:
            start, shift_bad = None, None
            m.d.comb += [self.acc_rd.addr.eq(rd_addr), self.acc_rd.en.eq(entry_rd),
                         fifo.w_en.eq(rd_pending), fifo.w_data.eq(narrowed)]
            entry_rd = self.acc_rd.en
        with m.If(entry_rd):
            m.d.sync += [rd_left.eq(rd_left - 1), rd_addr.eq(rd_addr + 1),
                         rd_more.eq(rd_left != 1)]
        m.d.sync += rd_pending.eq(entry_rd & ~flush)

        # ---- serializer: FIFO entries -> write beats. The write-valid is a register
        # (sending & fifo.r_rdy, set from their next values): the memory's write-ready
        # then starts at registers on both sides, and so the FIFO's read enable (the
        # transfer's FSM decode before it began an FPGA critical path)
        wdata = self.mem.wdata
        ent_left = Signal(33)  # entries still to send
        ent_one = Signal()  # ent_left == 1, kept with it (out of the done decision's cycle)
        wvalid = Signal()
        m.d.comb += wdata.valid.eq(wvalid)
        wfire = wvalid & wdata.ready
        if kout > 1:
            beat = Signal(range(kout))
            last_beat = beat == kout - 1
            m.d.comb += wdata.payload.data.eq(fifo.r_data.word_select(beat, W))
            with m.If(wfire):
                m.d.sync += beat.eq(Mux(last_beat, 0, beat + 1))
        else:
            last_beat = Const(1)
            m.d.comb += wdata.payload.data.eq(fifo.r_data)
        with m.If(wfire & last_beat):
            m.d.comb += fifo.r_en.eq(1)
            m.d.sync += [ent_left.eq(ent_left - 1), ent_one.eq(ent_left == 2)]

        # ---- command issuer
        m.submodules.bursts = bursts = BurstIssuer(cfg, self.max_burst)
        wiring.connect(m, wiring.flipped(self.mem.cmd), bursts.cmd)
        m.d.comb += [bursts.addr.eq(start_bytes), bursts.rows.eq(word.y),
                     bursts.row_beats.eq(word.x * kout),
                     bursts.stride.eq(word.stride << sh_entry), bursts.beat.eq(wfire)]

        # ---- execution: CHECK, RUN; DRAIN after a halt
        ph = transfer_phases(m, ex, bursts, self.halt, sram_bad, dram_bad,
                             wfire & last_beat & ent_one, start=start,
                             other_bad=None if shift_bad is None
                             else (shift_bad, ErrorCode.SHIFT_RANGE))
        # flush (CHECK, or DRAIN once drained) is a register, set from the next phase
        # and the issuer's next state: with the start and the core's reset it makes the
        # queue's and the counters' reset, and the phase decode and the issuer's count
        # before that were an FPGA critical path
        m.d.sync += flush.eq(ph.check_next | (ph.drain_next & bursts.drained_next))
        with m.If(ph.check):
            m.d.sync += [rd_left.eq(n_entries), rd_more.eq(n_entries != 0),
                         rd_addr.eq(word.sram),
                         ent_left.eq(n_entries), ent_one.eq(n_entries == 1)]
        # beats move in RUN, and in DRAIN while the accepted commands owe some
        m.d.comb += reading.eq(ph.run | ph.drain)
        m.d.sync += wvalid.eq(ph.moving_next & fifo.r_rdy_next)
        with m.If(ph.drain & bursts.drained):  # the accepted commands' beats are sent
            m.d.sync += [rd_left.eq(0), rd_more.eq(0)]
        if kout > 1:
            with m.If(flush):
                m.d.sync += beat.eq(0)
        m.d.sync += queued.eq(Mux(flush, 0, queued + entry_rd - fifo.r_en))
        return m

    def _requant(self, m: Module, ex: wiring.PureInterface, word: data.View, entry_rd: Value,
                 rd_addr: Signal, rd_pending: Signal, flush: Signal, narrowed: Value,
                 fifo: EntryQueue) -> tuple[Value, Value, Value]:
        """A requantizing STORE's records and datapath (configs with REQUANT).

        At ``ex.start`` of a STORE with ``requant``, the records' three entries are read
        (one a cycle, while the entry reader is idle) into a :class:`StoreRequant`; the
        transfer starts the cycle after the last is loaded, and its CHECK registers the
        records' shift check (``SHIFT_RANGE``, reported after the range checks). Its
        entries then reach the FIFO through the requantization, STORE_REQUANT_LATENCY
        cycles later. Returns the transfer's start, the entry reader's read enable and
        the shift check."""
        cfg = self.cfg
        m.submodules.requant = rq = StoreRequant(cfg)
        requant = word.requant
        rec_reading = Signal()  # a record's read this cycle
        rec_addr = Signal(cfg.acc_bits)
        rec_k = Signal(range(REQUANT_RECORD_WORDS))
        rec_load = Signal(REQUANT_RECORD_WORDS)  # record word k arrives this cycle
        rec_done = Signal()  # the last record is loaded: start the transfer
        # (a halt needs no case here: the transfer it would start leaves CHECK at once,
        # and the core holds the halt until its next start resets the engine)
        with m.If(ex.start & requant):
            m.d.sync += [rec_reading.eq(1), rec_addr.eq(word.rec), rec_k.eq(0)]
        with m.Elif(rec_reading):
            m.d.sync += [rec_addr.eq(rec_addr + 1), rec_k.eq(rec_k + 1)]
            with m.If(rec_k == REQUANT_RECORD_WORDS - 1):
                m.d.sync += rec_reading.eq(0)
        m.d.sync += [rec_load.eq(Mux(rec_reading, 1 << rec_k, 0)), rec_done.eq(rec_load[-1])]
        entry = Signal()
        m.d.comb += [
            entry.eq(entry_rd),
            self.acc_rd.en.eq(entry | rec_reading),
            self.acc_rd.addr.eq(Mux(rec_reading, rec_addr, rd_addr)),
            rq.acc.eq(self.acc_rd.data), rq.rec_load.eq(rec_load),
            rq.in_valid.eq(rd_pending & requant), rq.flush.eq(flush),
            fifo.w_en.eq(Mux(requant, rq.out_valid, rd_pending)),
            fifo.w_data.eq(Mux(requant, rq.out, narrowed)),
        ]
        return (ex.start & ~requant) | rec_done, entry, rq.shift_bad
