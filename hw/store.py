"""The store engine: STORE, accumulators narrowed to int8 and written to DRAM."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from tensorfab.isa import Engine, HwConfig, Opcode, insn_width
from tensorfab.isa.config import log2

from .burst import BurstIssuer, check_max_burst, transfer_phases
from .layouts import insn_layout
from .mem_port import MemWriteSignature
from .sequencer import InsnSequencer, engine_members
from .signatures import BufReadSignature, acc_entry_bits

__all__ = ["StoreEngine"]


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
        Narrowed entries read ahead of the memory.
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

        # ---- range checks (products at start, comparisons in CHECK)
        n_entries = Signal(33)
        end_entries = Signal(aw + 34)
        limit = Signal(33)
        m.d.comb += limit.eq(Mux((self.dram_size == 0) | (self.dram_size > (1 << aw)),
                                 1 << aw, self.dram_size))
        start_bytes = word.dram << sh_entry
        end_bytes = end_entries << sh_entry
        insn_end = self.insn_base + (self.insn_count << log2(insn_width(cfg) // 8))
        sram_bad = Signal()
        dram_bad = Signal()
        m.d.comb += [
            sram_bad.eq(word.sram + n_entries > cfg.acc_depth),
            dram_bad.eq((end_bytes > limit)
                        | ((self.insn_count != 0) & (start_bytes < insn_end)
                           & (self.insn_base < end_bytes))),
        ]
        with m.If(ex.start):
            m.d.sync += [n_entries.eq(word.y * word.x),
                         end_entries.eq(word.dram + (word.y - 1) * word.stride + word.x)]

        # ---- accumulator reader -> FIFO of narrowed entries
        flush = Signal()
        fifo = SyncFIFOBuffered(width=out_bits, depth=self.fifo_depth)
        m.submodules.fifo = ResetInserter({"sync": flush})(fifo)
        rd_left = Signal(33)
        rd_addr = Signal(cfg.acc_bits)
        rd_pending = Signal()
        reading = Signal()  # the reader may run this cycle
        m.d.comb += [
            self.acc_rd.addr.eq(rd_addr),
            self.acc_rd.en.eq(reading & (rd_left != 0)
                              & (fifo.level + rd_pending < self.fifo_depth - 1)),
        ]
        with m.If(self.acc_rd.en):
            m.d.sync += [rd_left.eq(rd_left - 1), rd_addr.eq(rd_addr + 1)]
        m.d.sync += rd_pending.eq(self.acc_rd.en & ~flush)
        m.d.comb += [
            fifo.w_en.eq(rd_pending),
            fifo.w_data.eq(Cat(self.acc_rd.data[32 * i: 32 * i + 8] for i in range(lanes))),
        ]

        # ---- serializer: FIFO entries -> write beats
        wdata = self.mem.wdata
        beat = Signal(range(max(kout, 2)))
        ent_left = Signal(33)  # entries still to send
        sending = Signal()
        m.d.comb += [wdata.payload.data.eq(fifo.r_data.word_select(beat, W) if kout > 1
                                           else fifo.r_data),
                     wdata.valid.eq(sending & fifo.r_rdy)]
        wfire = wdata.valid & wdata.ready
        last_beat = beat == kout - 1
        with m.If(wfire):
            m.d.sync += beat.eq(Mux(last_beat, 0, beat + 1))
            with m.If(last_beat):
                m.d.comb += fifo.r_en.eq(1)
                m.d.sync += ent_left.eq(ent_left - 1)

        # ---- command issuer
        m.submodules.bursts = bursts = BurstIssuer(cfg, self.max_burst)
        wiring.connect(m, wiring.flipped(self.mem.cmd), bursts.cmd)
        m.d.comb += [bursts.addr.eq(start_bytes), bursts.rows.eq(word.y),
                     bursts.row_beats.eq(word.x * kout),
                     bursts.stride.eq(word.stride << sh_entry), bursts.beat.eq(wfire)]

        # ---- execution: CHECK, RUN; DRAIN after a halt
        ph = transfer_phases(m, ex, bursts, self.halt, sram_bad, dram_bad,
                             wfire & last_beat & (ent_left == 1))
        with m.If(ph.check):
            m.d.comb += flush.eq(1)
            m.d.sync += [rd_left.eq(n_entries), rd_addr.eq(word.sram),
                         ent_left.eq(n_entries), beat.eq(0)]
        m.d.comb += [reading.eq(ph.run | ph.drain),
                     sending.eq(ph.run | (ph.drain & (bursts.owed != 0)))]
        with m.If(ph.drain & bursts.drained):  # the accepted commands' beats are sent
            m.d.comb += flush.eq(1)
            m.d.sync += [rd_left.eq(0), beat.eq(0)]
        return m
