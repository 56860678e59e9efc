"""The store engine: STORE, accumulators narrowed to int8 and written to DRAM."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from tensorfab.isa import ErrorCode, HwConfig, Opcode, insn_width
from tensorfab.isa.config import log2

from .layouts import insn_layout
from .mem_port import LEN_WIDTH, MAX_BURST, MemWriteSignature
from .signatures import (
    BufReadSignature,
    ErrorSignature,
    InsnStreamLayout,
    TokenSignature,
    acc_entry_bits,
)

__all__ = ["StoreEngine"]


class StoreEngine(wiring.Component):
    """Executes STORE instructions (docs/isa.md) one at a time.

    For each instruction: pop the ``pop_prev`` token if asked; check the source
    fits the accumulator buffer (``SRAM_RANGE``), the destination lies below
    ``dram_size`` and outside the instruction stream ``[insn_base, insn_base +
    insn_count × insn_bytes)`` (``DRAM_RANGE``); then read the accumulator entries
    in order (one per cycle, a few ahead in a small FIFO), keep the low byte of
    every element, and write each row with burst writes (split at ``max_burst`` beats), one
    beat per cycle; when the last beat is accepted, push the ``push_prev`` token if
    asked and retire.

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
    insn : In(stream.Signature(InsnStreamLayout(cfg)))
        STORE instructions.
    pop_prev : In(TokenSignature)
        compute→store token queue (pop side).
    push_prev : Out(TokenSignature)
        store→compute token queue (push side).
    acc_rd : Out(BufReadSignature(acc_bits, acc entry bits))
        Accumulator read port (1-cycle latency).
    mem : Out(MemWriteSignature(cfg))
        Memory writes.
    dram_size : In(32)
        Bytes of DRAM that may be written (0: the whole address space).
    insn_base, insn_count : In(32)
        The instruction stream, which a STORE may not overwrite.
    halt : In(1)
        Stop (the core had an error).
    error : Out(ErrorSignature)
        ``SRAM_RANGE`` or ``DRAM_RANGE`` with the instruction index (one-cycle pulse).
    busy, stall, retire, idle : Out(1)
        Holds an instruction; of that, waits for a token; pulse per retired
        instruction; nothing in flight.
    """

    def __init__(self, cfg: HwConfig, fifo_depth: int = 6, max_burst: int = 32) -> None:
        self.cfg = cfg
        self.fifo_depth = fifo_depth
        assert 1 <= max_burst <= MAX_BURST
        self.max_burst = max_burst
        super().__init__({
            "insn": In(stream.Signature(InsnStreamLayout(cfg))),
            "pop_prev": In(TokenSignature),
            "push_prev": Out(TokenSignature),
            "acc_rd": Out(BufReadSignature(cfg.acc_bits, acc_entry_bits(cfg))),
            "mem": Out(MemWriteSignature(cfg)),
            "dram_size": In(32),
            "insn_base": In(32),
            "insn_count": In(32),
            "halt": In(1),
            "error": Out(ErrorSignature),
            "busy": Out(1),
            "stall": Out(1),
            "retire": Out(1),
            "idle": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()
        W = cfg.mem_bus_width
        aw = cfg.dram_addr_width
        bus_shift = log2(cfg.mem_bus_bytes)
        out_bits = cfg.out_entry_bytes * 8
        sh_entry = log2(cfg.out_entry_bytes)
        kout = cfg.out_entry_bytes // cfg.mem_bus_bytes
        lanes = cfg.batch * cfg.block_out

        lay = insn_layout(cfg, Opcode.STORE)
        word = Signal(lay)
        index = Signal(32)

        # ---- range checks (products in POP, comparisons in CHECK)
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
        owed = Signal(32)  # beats of accepted commands not yet sent
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
        cmd = self.mem.cmd
        rows_left = Signal(17)
        row_beats = Signal(40)
        beats_left = Signal(40)
        cur_addr = Signal(aw)
        row_addr = Signal(aw)
        stride_bytes = Signal(aw)
        cmd_stuck = Signal()
        mb = self.max_burst
        burst = Signal(range(mb + 1))
        m.d.comb += [burst.eq(Mux(beats_left > mb, mb, beats_left)),
                     cmd.payload.addr.eq(cur_addr),
                     cmd.payload.len.eq((burst - 1)[:LEN_WIDTH])]
        cmd_fire = cmd.valid & cmd.ready
        m.d.sync += cmd_stuck.eq(cmd.valid & ~cmd.ready)
        with m.If(cmd_fire):
            with m.If(beats_left == burst):
                m.d.sync += [rows_left.eq(rows_left - 1), beats_left.eq(row_beats),
                             row_addr.eq(row_addr + stride_bytes),
                             cur_addr.eq(row_addr + stride_bytes)]
            with m.Else():
                m.d.sync += [beats_left.eq(beats_left - burst),
                             cur_addr.eq(cur_addr + (burst << bus_shift))]
        m.d.sync += owed.eq(owed + Mux(cmd_fire, burst, 0) - wfire)

        # ---- control
        m.d.comb += [self.error.index.eq(index), self.busy.eq(1)]
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += [self.busy.eq(0), self.idle.eq(1), self.insn.ready.eq(~self.halt)]
                with m.If(self.insn.valid & ~self.halt):
                    m.d.sync += [word.eq(self.insn.payload.word), index.eq(self.insn.payload.index)]
                    m.next = "POP"
            with m.State("POP"):
                with m.If(self.halt):
                    m.next = "IDLE"
                with m.Elif(word.pop_prev & ~self.pop_prev.valid):
                    m.d.comb += self.stall.eq(1)
                with m.Else():
                    m.d.comb += self.pop_prev.ready.eq(word.pop_prev)
                    m.d.sync += [n_entries.eq(word.y * word.x),
                                 end_entries.eq(word.dram + (word.y - 1) * word.stride + word.x)]
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += flush.eq(1)
                m.d.sync += [
                    rows_left.eq(word.y), row_beats.eq(word.x * kout),
                    beats_left.eq(word.x * kout),
                    cur_addr.eq(start_bytes), row_addr.eq(start_bytes),
                    stride_bytes.eq(word.stride << sh_entry),
                    rd_left.eq(n_entries), rd_addr.eq(word.sram), ent_left.eq(n_entries),
                    beat.eq(0),
                ]
                with m.If(self.halt):
                    m.next = "IDLE"
                with m.Elif(sram_bad | dram_bad):
                    m.d.comb += [self.error.valid.eq(1),
                                 self.error.code.eq(Mux(sram_bad, ErrorCode.SRAM_RANGE,
                                                        ErrorCode.DRAM_RANGE))]
                    m.next = "IDLE"
                with m.Else():
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += [cmd.valid.eq((rows_left != 0) & (~self.halt | cmd_stuck)),
                             reading.eq(1), sending.eq(1)]
                with m.If(self.halt):
                    m.next = "DRAIN"
                with m.Elif(wfire & last_beat & (ent_left == 1)):
                    m.next = "PUSH"
            with m.State("PUSH"):
                m.d.comb += self.push_prev.valid.eq(word.push_prev & ~self.halt)
                with m.If(self.halt):
                    m.next = "IDLE"
                with m.Elif(~word.push_prev | self.push_prev.ready):
                    m.d.comb += self.retire.eq(1)
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += self.stall.eq(1)
            with m.State("DRAIN"):
                # finish the beats of accepted commands, then forget the instruction
                m.d.comb += [cmd.valid.eq(cmd_stuck), reading.eq(1),
                             sending.eq(owed != 0)]
                with m.If(~cmd_stuck & (owed == 0)):
                    m.d.comb += flush.eq(1)
                    m.d.sync += [rd_left.eq(0), beat.eq(0)]
                    m.next = "IDLE"
        return m
