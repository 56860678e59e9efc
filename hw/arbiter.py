"""Memory arbiter: fetch, load and store share one memory port."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from tensorfab.isa import HwConfig

from .mem_port import LEN_WIDTH, MAX_BURST, MemPortSignature, MemReadSignature, MemWriteSignature
from .register_slice import RegisterSlice

__all__ = ["MemArbiter"]

#: Master numbers in the outstanding-read FIFO.
FETCH, LOAD, STORE = 0, 1, 2


class MemArbiter(wiring.Component):
    """Grants whole commands round robin and routes data beats in command order.

    A read command is granted only while the beats of the reads granted and not yet
    delivered, its own included, stay within ``read_beats`` (or none are in flight):
    the memory serves commands in order, so a deep queue of reads would hold up every
    write behind it; ``read_beats`` above the memory's latency (in beats) keeps the
    reads at full bandwidth.

    A granted read command records ``(master, len)`` in a FIFO of outstanding
    reads; read beats from the port go to the master at its head, ``len + 1`` of
    them. A granted write command records its ``len`` in a FIFO of outstanding
    writes; the store's write beats are forwarded only while that FIFO holds a
    command, so the port never sees a beat before its command. A master whose
    FIFO is full is not granted. The command choice is held while the port stalls
    it, as :mod:`amaranth.lib.stream` requires. Each master's commands pass a
    two-entry register slice first (one cycle of latency, full throughput), so that
    the grant logic sees registered commands and the masters a registered ``ready``.

    Parameters
    ----------
    cfg : HwConfig
        Address and bus widths.
    outstanding : int
        Depth of each of the two FIFOs: commands that may be in flight.
    read_beats : int
        Read beats that may be in flight (granted, not delivered).

    Attributes
    ----------
    fetch, load : In(MemReadSignature(cfg))
        Read masters.
    store : In(MemWriteSignature(cfg))
        The write master.
    port : Out(MemPortSignature(cfg))
        The memory port.
    """

    def __init__(self, cfg: HwConfig, outstanding: int = 16, read_beats: int = 64) -> None:
        self.cfg = cfg
        self.outstanding = outstanding
        self.read_beats = read_beats
        super().__init__({
            "fetch": In(MemReadSignature(cfg)),
            "load": In(MemReadSignature(cfg)),
            "store": In(MemWriteSignature(cfg)),
            "port": Out(MemPortSignature(cfg)),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.rd_fifo = rd_fifo = SyncFIFO(width=1 + LEN_WIDTH, depth=self.outstanding)
        m.submodules.wr_fifo = wr_fifo = SyncFIFO(width=LEN_WIDTH, depth=self.outstanding)
        # ---- each master's commands enter through a two-entry register slice, so
        # that no path runs from one master's command logic through the grant into
        # another's (the FPGA's critical path): one cycle more per command. Its head
        # is a flip-flop (a SyncFIFO's LUT RAM read began the budget's critical path)
        cmds = []
        for name, mst in (("fetch", self.fetch), ("load", self.load), ("store", self.store)):
            layout = mst.cmd.payload.shape()
            q = RegisterSlice(layout.size)
            m.submodules[f"{name}_cmd_slice"] = q
            m.d.comb += [q.w_data.eq(mst.cmd.payload), q.w_en.eq(mst.cmd.valid),
                         mst.cmd.ready.eq(q.w_rdy)]
            cmds.append((q.r_rdy, data.View(layout, q.r_data), q.r_en))

        # ---- read-beat budget: beats of granted reads not yet delivered, and what is
        # left of read_beats (kept beside it, so that a command's room is one
        # comparison, not a sum and a comparison, ahead of the grant)
        in_flight = Signal(range(self.read_beats + MAX_BURST + 1))
        budget = Signal(signed(len(in_flight) + 1), init=self.read_beats)
        room = [(in_flight == 0) | (budget > payload.len)
                for _valid, payload, _take in cmds[:STORE]]

        # ---- command grant (round robin, choice held while the port stalls)
        eligible = [cmds[FETCH][0] & rd_fifo.w_rdy & room[0],
                    cmds[LOAD][0] & rd_fifo.w_rdy & room[1],
                    cmds[STORE][0] & wr_fifo.w_rdy]
        last = Signal(range(3), init=STORE)  # last granted master
        held = Signal()
        held_sel = Signal(range(3))
        choice = Signal(range(3))
        sel = Signal(range(3))
        # priority order after `last`: (last+1, last+2, last)
        with m.Switch(last):
            for lv in range(3):
                with m.Case(lv):
                    order = [(lv + 1) % 3, (lv + 2) % 3, lv]
                    with m.If(eligible[order[0]]):
                        m.d.comb += choice.eq(order[0])
                    with m.Elif(eligible[order[1]]):
                        m.d.comb += choice.eq(order[1])
                    with m.Else():
                        m.d.comb += choice.eq(order[2])
        m.d.comb += sel.eq(Mux(held, held_sel, choice))
        port_cmd = self.port.cmd
        with m.Switch(sel):
            for i, (_valid, payload, take) in enumerate(cmds):
                with m.Case(i):
                    m.d.comb += [
                        port_cmd.valid.eq(eligible[i]),
                        port_cmd.payload.addr.eq(payload.addr),
                        port_cmd.payload.len.eq(payload.len),
                        port_cmd.payload.write.eq(i == STORE),
                        take.eq(port_cmd.ready & eligible[i]),
                    ]
        with m.If(port_cmd.valid & port_cmd.ready):
            m.d.sync += [held.eq(0), last.eq(sel)]
        with m.Elif(port_cmd.valid):
            m.d.sync += [held.eq(1), held_sel.eq(sel)]
        fire = port_cmd.valid & port_cmd.ready
        m.d.comb += [
            rd_fifo.w_data.eq(((sel == LOAD) << LEN_WIDTH) | port_cmd.payload.len),
            rd_fifo.w_en.eq(fire & (sel != STORE)),
            wr_fifo.w_data.eq(port_cmd.payload.len),
            wr_fifo.w_en.eq(fire & (sel == STORE)),
        ]

        # ---- read data back to the master at the head of the read FIFO
        rd_count = Signal(LEN_WIDTH)
        head_load = rd_fifo.r_data[LEN_WIDTH]
        head_len = rd_fifo.r_data[:LEN_WIDTH]
        rdata = self.port.rdata
        for mst, is_head in ((self.fetch, ~head_load), (self.load, head_load)):
            m.d.comb += [mst.rdata.payload.eq(rdata.payload),
                         mst.rdata.valid.eq(rdata.valid & rd_fifo.r_rdy & is_head)]
        m.d.comb += rdata.ready.eq(rd_fifo.r_rdy & Mux(head_load, self.load.rdata.ready,
                                                                self.fetch.rdata.ready))
        # The counters' next values for each read master's grant, chosen by the grant
        # last (it settles late: eligibility, the round robin, the port's ready), not a
        # multiplexed length added after it. A delivered beat leaves the budget a cycle
        # late: the masters' read-ready (a halt, a buffer's write port) settles too
        # late in its cycle for the counters' carry chains; the budget is then one beat
        # short for a cycle, never over.
        delivered = Signal()
        m.d.sync += delivered.eq(rdata.valid & rdata.ready)
        kept_in_flight = Signal.like(in_flight)
        kept_budget = Signal.like(budget)
        m.d.comb += [kept_in_flight.eq(in_flight - delivered), kept_budget.eq(budget + delivered)]
        m.d.sync += [in_flight.eq(kept_in_flight), budget.eq(kept_budget)]
        for i in (FETCH, LOAD):
            beats = cmds[i][1].len + 1
            with m.If(fire & (sel == i)):
                m.d.sync += [in_flight.eq(kept_in_flight + beats),
                             budget.eq(kept_budget - beats)]
        with m.If(rdata.valid & rdata.ready):
            with m.If(rd_count == head_len):
                m.d.sync += rd_count.eq(0)
                m.d.comb += rd_fifo.r_en.eq(1)
            with m.Else():
                m.d.sync += rd_count.eq(rd_count + 1)

        # ---- write data from the store for its granted commands
        wr_count = Signal(LEN_WIDTH)
        wdata = self.port.wdata
        m.d.comb += [
            wdata.payload.eq(self.store.wdata.payload),
            wdata.valid.eq(self.store.wdata.valid & wr_fifo.r_rdy),
            self.store.wdata.ready.eq(wdata.ready & wr_fifo.r_rdy),
        ]
        with m.If(wdata.valid & wdata.ready):
            with m.If(wr_count == wr_fifo.r_data):
                m.d.sync += wr_count.eq(0)
                m.d.comb += wr_fifo.r_en.eq(1)
            with m.Else():
                m.d.sync += wr_count.eq(wr_count + 1)
        return m
