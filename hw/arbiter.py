"""Memory arbiter: fetch, load and store share one memory port."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import HwConfig

from .mem_port import LEN_WIDTH, MAX_BURST, MemPortSignature, MemReadSignature, MemWriteSignature
from .register_slice import AlternatingSlice, RegisterSlice

__all__ = ["MemArbiter"]

#: Master numbers in the outstanding-read FIFO.
FETCH, LOAD, STORE = 0, 1, 2


class MemArbiter(wiring.Component):
    """Grants whole commands round robin and routes data beats in command order.

    A read master's command is granted only while at most ``read_beats`` minus the
    master's longest command (``longest_reads``) beats of the reads granted are not
    yet delivered (or none are), so that the beats in flight, its own included, stay
    within ``read_beats``: the memory serves commands in order, so a deep queue of
    reads would hold up every write behind it; ``read_beats`` above the memory's
    latency (in beats) keeps the reads at full bandwidth. The rule does not look at
    the command's own length, so that whether a master may be granted a read is a
    register, set from the counter's next value.

    A granted read command records ``(master, len)`` in a FIFO of outstanding reads (a
    :class:`~.register_slice.RegisterSlice`, its head a register); read beats from the
    port go to the master at its head, ``len + 1`` of them. A granted write command
    records its ``len`` in a FIFO of outstanding writes; the store's write beats are
    forwarded only while the port has taken the command at that FIFO's head, so the
    port never sees a beat before its command. A master whose FIFO is full is not
    granted (nor in the cycle after a command leaves a full FIFO). Each master's
    commands pass a two-entry :class:`~.register_slice.AlternatingSlice` first (its
    entries' enables do not depend on the grant), and the granted commands a two-entry
    :class:`~.register_slice.RegisterSlice` on their way to the port (one cycle of
    latency each, full throughput), so that the grant logic sees registered commands
    and room, the masters a registered ``ready`` and the port registered commands. The
    grant is one-hot, each master's a few gates of registers (its eligibility, the
    others' and the last grant), and it chooses the read budget's next count and rooms
    among values computed beside each other for each outcome.

    Parameters
    ----------
    cfg : HwConfig
        Address and bus widths.
    outstanding : int
        Depth of each of the two FIFOs: commands that may be in flight (at least 2).
    read_beats : int
        Read beats that may be in flight (granted, not delivered).
    longest_reads : tuple of int
        The longest read command, in beats, that the fetch and the load master issue
        (at most ``MAX_BURST``). A longer command is still served; the beats in flight
        may then exceed ``read_beats`` by the difference.

    Attributes
    ----------
    fetch, load : In(MemReadSignature(cfg))
        Read masters.
    store : In(MemWriteSignature(cfg))
        The write master.
    port : Out(MemPortSignature(cfg))
        The memory port.
    """

    def __init__(self, cfg: HwConfig, outstanding: int = 16, read_beats: int = 64,
                 longest_reads: tuple[int, int] = (MAX_BURST, MAX_BURST)) -> None:
        if outstanding < 2:
            raise ValueError(f"MemArbiter: outstanding = {outstanding}; at least 2")
        if len(longest_reads) != 2 or not all(1 <= n <= MAX_BURST for n in longest_reads):
            raise ValueError(f"MemArbiter: longest_reads = {longest_reads!r}; give the fetch's "
                             f"and the load's longest read in beats, 1 to {MAX_BURST}")
        self.cfg = cfg
        self.outstanding = outstanding
        self.read_beats = read_beats
        self.longest_reads = tuple(longest_reads)
        super().__init__({
            "fetch": In(MemReadSignature(cfg)),
            "load": In(MemReadSignature(cfg)),
            "store": In(MemWriteSignature(cfg)),
            "port": Out(MemPortSignature(cfg)),
        })

    @staticmethod
    def _first_eligible(m: Module, eligible: list[Value], last: Value) -> list[Signal]:
        """One-hot: the eligible master first in the round robin after ``last`` (the
        order ``last + 1``, ``last + 2``, ``last``), each its eligibility and no
        eligible master ahead of it: a few gates of the registers eligibility and
        ``last`` are made of."""
        first = [Signal(name=f"first_{name}") for name in ("fetch", "load", "store")]
        for i, f in enumerate(first):
            blocked = []
            for lv in range(3):
                order = [(lv + 1) % 3, (lv + 2) % 3, lv]
                ahead = order[:order.index(i)]
                if ahead:
                    blocked.append((last == lv) & Cat(*(eligible[j] for j in ahead)).any())
            m.d.comb += f.eq(eligible[i] & ~Cat(*blocked).any())
        return first

    def _read_budget(self, m: Module, in_flight: Signal, room: list[Signal],
                     lens: list[Value], grant: list[Signal], delivered: Signal) -> None:
        """The count of read beats in flight and each read master's ``room``, from the
        grants and the beat ``delivered`` in the cycle before.

        The count's next value and the rooms for each read master's grant (``lens``:
        the length field of each one's command) are computed beside each other and
        chosen by the grant last (it settles late: eligibility, the round robin, the
        port's ready), not a multiplexed length added after it; the rooms by an AND-OR
        of the grants, not a multiplexer, which synthesis would fold into one
        comparison of a multiplexed count, the grant through its carry chain (an FPGA
        critical path). A delivered beat leaves the count a cycle late: the masters'
        read-ready (a halt, a buffer's write port) settles too late in its cycle for
        the count's carry chain; the room is then one beat short for a cycle, never
        over."""
        def rooms_after(count: Value) -> list[Value]:
            return [(count == 0) | (count <= self.read_beats - longest)
                    for longest in self.longest_reads]
        kept_in_flight = Signal.like(in_flight)
        m.d.comb += kept_in_flight.eq(in_flight - delivered)
        m.d.sync += in_flight.eq(kept_in_flight)
        rooms = [(~grant[FETCH] & ~grant[LOAD], rooms_after(kept_in_flight))]
        for i in (FETCH, LOAD):
            after = Signal.like(in_flight, name=f"in_flight_after_{('fetch', 'load')[i]}")
            m.d.comb += after.eq(kept_in_flight + lens[i] + 1)
            with m.If(grant[i]):
                m.d.sync += in_flight.eq(after)
            rooms.append((grant[i], rooms_after(after)))
        m.d.sync += [r.eq(Cat(*(chosen & values[j] for chosen, values in rooms)).any())
                     for j, r in enumerate(room)]

    def elaborate(self, platform: object) -> Module:
        m = Module()
        # (heads in registers: routing read beats from a LUT RAM's read began FPGA
        # critical paths into every read master)
        # (in block RAM with HwConfig.block_ram_fifos: an iCE40 has no LUT RAM)
        block_ram = self.cfg.block_ram_fifos and self.outstanding >= 3
        m.submodules.rd_fifo = rd_fifo = RegisterSlice(1 + LEN_WIDTH, self.outstanding,
                                                       block_ram=block_ram)
        m.submodules.wr_fifo = wr_fifo = RegisterSlice(LEN_WIDTH, self.outstanding,
                                                       block_ram=block_ram)
        # ---- each master's commands enter through a two-entry queue of registers, so
        # that no path runs from one master's command logic through the grant into
        # another's (the FPGA's critical path): one cycle more per command. Its entries
        # are flip-flops (a SyncFIFO's LUT RAM read began the budget's critical path)
        # written and read in turn, so that the grant reaches only its read pointer
        # and flags (a head reloaded by the grant was an FPGA critical path)
        cmds = []
        for name, mst in (("fetch", self.fetch), ("load", self.load), ("store", self.store)):
            layout = mst.cmd.payload.shape()
            q = AlternatingSlice(layout.size)
            m.submodules[f"{name}_cmd_slice"] = q
            m.d.comb += [q.w_data.eq(mst.cmd.payload), q.w_en.eq(mst.cmd.valid),
                         mst.cmd.ready.eq(q.w_rdy)]
            cmds.append((q.r_rdy, data.View(layout, q.r_data), q.r_en))

        # ---- read-beat budget: beats of granted reads not yet delivered; `room`, a
        # register, says whether a read may be granted (the comparison of a head's
        # length with what was left of the budget began the grant's FPGA critical path)
        in_flight = Signal(range(self.read_beats + MAX_BURST + 1))
        room = [Signal(init=1, name=f"room_{name}") for name in ("fetch", "load")]

        # ---- command grant (round robin). Room in
        # an outstanding FIFO is a register too, set from its level and this cycle's
        # push, not counting a pop (the level's comparison began the grant's FPGA
        # critical path): it is low for a cycle after a pop from a full FIFO
        fifo_room = [Signal(init=1, name=f"{name}_fifo_room") for name in ("rd", "wr")]
        eligible = [cmds[FETCH][0] & fifo_room[0] & room[FETCH],
                    cmds[LOAD][0] & fifo_room[0] & room[LOAD],
                    cmds[STORE][0] & fifo_room[1]]
        last = Signal(range(3), init=STORE)  # last granted master
        first = self._first_eligible(m, eligible, last)
        sel = Signal(range(3))
        m.d.comb += sel.eq(Mux(first[FETCH], FETCH, Mux(first[LOAD], LOAD, STORE)))
        # ---- the granted command waits in a two-entry register slice for the port,
        # so that the grant sees the slice's registered room, not the port's ready,
        # and the port registers (the grant through the port's handshake into the
        # outstanding FIFOs was an FPGA critical path)
        port_cmd = self.port.cmd
        cmd_layout = port_cmd.payload.shape()
        m.submodules.port_cmd_slice = out = RegisterSlice(cmd_layout.size)
        granted = data.View(cmd_layout, out.w_data)
        grant = [Signal(name=f"grant_{name}") for name in ("fetch", "load", "store")]
        m.d.comb += [g.eq(out.w_rdy & f) for g, f in zip(grant, first, strict=True)]
        m.d.comb += out.w_en.eq(Cat(*first).any())
        with m.Switch(sel):
            for i, (_valid, payload, _take) in enumerate(cmds):
                with m.Case(i):
                    m.d.comb += [granted.addr.eq(payload.addr), granted.len.eq(payload.len),
                                 granted.write.eq(i == STORE)]
        m.d.comb += [take.eq(g) for (_valid, _payload, take), g in zip(cmds, grant, strict=True)]
        fire = out.w_en & out.w_rdy  # a command is granted
        with m.If(fire):
            m.d.sync += last.eq(sel)
        m.d.comb += [port_cmd.valid.eq(out.r_rdy), port_cmd.payload.eq(out.r_data),
                     out.r_en.eq(port_cmd.ready)]
        m.d.comb += [
            rd_fifo.w_data.eq(((sel == LOAD) << LEN_WIDTH) | granted.len),
            rd_fifo.w_en.eq(grant[FETCH] | grant[LOAD]),
            wr_fifo.w_data.eq(granted.len),
            wr_fifo.w_en.eq(grant[STORE]),
        ]
        for ok, f in zip(fifo_room, (rd_fifo, wr_fifo), strict=True):
            m.d.sync += ok.eq(Mux(f.w_en, f.level < self.outstanding - 1,
                                  f.level < self.outstanding))

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
        # (a delivered beat leaves the count a cycle late: see _read_budget)
        delivered = Signal()
        m.d.sync += delivered.eq(rdata.valid & rdata.ready)
        self._read_budget(m, in_flight, room, [cmds[i][1].len for i in (FETCH, LOAD)],
                          grant, delivered)
        with m.If(rdata.valid & rdata.ready):
            with m.If(rd_count == head_len):
                m.d.sync += rd_count.eq(0)
                m.d.comb += rd_fifo.r_en.eq(1)
            with m.Else():
                m.d.sync += rd_count.eq(rd_count + 1)

        # ---- write data from the store for its commands the port has taken (the head
        # of the outstanding writes is one once `at_port`, the count of write
        # commands the port took and whose beats have not all gone, is not zero)
        wr_count = Signal(LEN_WIDTH)
        at_port = Signal(range(self.outstanding + 1))
        # whether the head may send (wr_fifo.r_rdy & at_port != 0), a register set from
        # their next values: the store's write-ready then starts at two flip-flops, this
        # one and the port's (it reaches the store FIFO's head enables, an FPGA
        # critical path at 100 MHz)
        sending = Signal()
        wdata = self.port.wdata
        m.d.comb += [
            wdata.payload.eq(self.store.wdata.payload),
            wdata.valid.eq(self.store.wdata.valid & sending),
            self.store.wdata.ready.eq(wdata.ready & sending),
        ]
        took_write = port_cmd.valid & port_cmd.ready & port_cmd.payload.write
        sent_all = Signal()
        with m.If(wdata.valid & wdata.ready):
            with m.If(wr_count == wr_fifo.r_data):
                m.d.sync += wr_count.eq(0)
                m.d.comb += [wr_fifo.r_en.eq(1), sent_all.eq(1)]
            with m.Else():
                m.d.sync += wr_count.eq(wr_count + 1)
        m.d.sync += [at_port.eq(at_port + took_write - sent_all),
                     sending.eq(wr_fifo.r_rdy_next
                                & (took_write | (at_port > 1) | ((at_port == 1) & ~sent_all)))]
        return m
