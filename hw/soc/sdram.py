"""An SDR SDRAM controller behind the core's memory port (the ULX3S's 32 MB chip).

The chip: a 16-bit SDR SDRAM of 4 banks, 8192 rows of 512 columns (32 MB; the
AS4C32M16SB and IS42S16160 class the ULX3S carries). Its timing (:class:`SdramTiming`)
is in nanoseconds and converted to cycles of the controller's clock.

One memory-port beat is ``mem_bus_width / 16`` words, read or written as one SDRAM
burst of that length (the mode register's burst length), so a beat costs one column
command and the data bus carries one word a cycle. Addresses map, from the LSB,
column, bank, row: consecutive beats run along a row and then into the next bank, so
a long burst moves from bank to bank. Each bank keeps its row open until a beat needs
another row of it (or a refresh closes all), so bursts that return to a row need no
activation (open-page policy).

The read latency the controller counts, from the READ command leaving its register
to the first word it samples, is the CAS latency plus ``board_delay`` cycles: 0 when
the chip's clock is the controller's (the simulation models), 1 on the ULX3S, whose
SDRAM clock is the inverse of the SoC clock (see :class:`~tensorfab.fpga_builds.
board_top.BoardTop`), so a word leaves the chip half a cycle late and is sampled a
whole cycle later. :class:`tensorfab.sim.sdram_chip.SdramChip` models the chip, and
checks every timing rule, in Amaranth simulation; ``sim/harness/sdram_model.h`` in
Verilator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from amaranth.hdl import Array, Cat, Module, Mux, ResetInserter, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from tensorfab.hw.mem_port import MemPortSignature
from tensorfab.isa import HwConfig
from tensorfab.isa.config import log2

__all__ = ["SDRAM_CMD", "SdramController", "SdramGeometry", "SdramPinsSignature",
           "SdramTiming", "mode_register", "sdram_size_bytes"]

#: Command encodings as (ras, cas, we), active high (the pins are active low; the
#: board's ``PinsN`` inverts); chip select is asserted for all but a deselect.
SDRAM_CMD: dict[str, tuple[int, int, int]] = {
    "NOP": (0, 0, 0), "ACTIVE": (1, 0, 0), "READ": (0, 1, 0), "WRITE": (0, 1, 1),
    "PRECHARGE": (1, 0, 1), "REFRESH": (1, 1, 0), "LOAD_MODE": (1, 1, 1),
}

#: Burst lengths the mode register offers and their codes (A2:A0).
_BURST_CODE = {1: 0, 2: 1, 4: 2, 8: 3}


@dataclass(frozen=True)
class SdramGeometry:
    """A chip's organisation.

    Attributes
    ----------
    banks, rows, cols : int
        Powers of two.
    width : int
        Data bits (16).
    addr_bits : int
        Address pins (13: the row address; the column uses the low bits, A10 is the
        precharge-all flag).
    """

    banks: int = 4
    rows: int = 8192
    cols: int = 512
    width: int = 16
    addr_bits: int = 13

    @property
    def size_bytes(self) -> int:
        """Capacity in bytes."""
        return self.banks * self.rows * self.cols * self.width // 8

    @property
    def col_bits(self) -> int:
        """Column address bits."""
        return log2(self.cols)

    @property
    def bank_bits(self) -> int:
        """Bank address bits."""
        return log2(self.banks)

    @property
    def row_bits(self) -> int:
        """Row address bits."""
        return log2(self.rows)


@dataclass(frozen=True)
class SdramTiming:
    """A chip's timing (ns unless named in clocks): the -7 speed grade's figures of
    the AS4C32M16SB, which cover the IS42S16160 (-7) as well.

    Attributes
    ----------
    cl : int
        CAS latency in clocks (3: up to 143 MHz).
    t_rp, t_rcd, t_ras, t_rc, t_rrd, t_wr, t_rfc : float
        Precharge, activate to column command, activate to precharge, activate to
        activate (same bank), activate to activate (other bank), write recovery,
        refresh cycle.
    t_mrd : int
        Load mode to any command, clocks.
    t_refi : float
        Average refresh interval (64 ms / 8192 rows).
    t_init : float
        Power-up wait before the first command.
    init_refreshes : int
        Refreshes in the initialization (8 satisfies both parts).
    """

    cl: int = 3
    t_rp: float = 21.0
    t_rcd: float = 21.0
    t_ras: float = 42.0
    t_rc: float = 63.0
    t_rrd: float = 14.0
    t_wr: float = 14.0
    t_rfc: float = 63.0
    t_mrd: int = 2
    t_refi: float = 7812.5
    t_init: float = 200_000.0
    init_refreshes: int = 8

    def clocks(self, ns: float, clk_hz: int) -> int:
        """``ns`` in whole cycles of ``clk_hz`` (rounded up, at least 1)."""
        return max(1, math.ceil(ns * clk_hz / 1e9 - 1e-9))


def sdram_size_bytes(cfg: HwConfig, geometry: SdramGeometry = SdramGeometry()) -> int:
    """The device memory a chip gives ``cfg``: the chip within the core's address range."""
    return min(geometry.size_bytes, 1 << cfg.dram_addr_width)


def mode_register(burst: int, cl: int) -> int:
    """The mode register value: sequential bursts of ``burst`` words, CAS latency
    ``cl``, burst writes.

    Raises
    ------
    ValueError
        For a burst length the chip does not offer (1, 2, 4, 8) or a CAS latency
        other than 2 or 3.
    """
    if burst not in _BURST_CODE:
        raise ValueError(f"SDRAM burst of {burst} words: the chip bursts 1, 2, 4 or 8")
    if cl not in (2, 3):
        raise ValueError(f"CAS latency {cl}: 2 or 3")
    return _BURST_CODE[burst] | cl << 4


def SdramPinsSignature(geometry: SdramGeometry = SdramGeometry()) -> wiring.Signature:
    """The chip's pins, from the controller's side, active high (``dq`` split into
    ``dq_o``, ``dq_oe``, ``dq_i``).

    Returns
    -------
    amaranth.lib.wiring.Signature
    """
    g = geometry
    return wiring.Signature({
        "clk_en": Out(1), "cs": Out(1), "ras": Out(1), "cas": Out(1), "we": Out(1),
        "ba": Out(g.bank_bits), "a": Out(g.addr_bits), "dqm": Out(g.width // 8),
        "dq_o": Out(g.width), "dq_oe": Out(1), "dq_i": In(g.width),
    })


class SdramController(wiring.Component):
    """The memory side of a memory port, on an SDR SDRAM chip.

    Serves the memory-port protocol (docs/architecture.md) as
    :class:`~tensorfab.hw.soc.memory.OnChipMemory` does: commands in order, a write
    takes its beats from ``wdata``, a read's beats leave through a queue, under
    back-pressure (a READ is issued only when the queue has room for its beat and
    those in flight). Between beats the controller refreshes when due, which closes
    every row. Until the initialization is done it accepts no command.

    Parameters
    ----------
    cfg : HwConfig
        Gives the bus width (16 × 1, 2, 4 or 8 bits).
    clk_hz : int
        The controller's clock, for the timing in cycles.
    geometry : SdramGeometry
    timing : SdramTiming
    board_delay : int
        Cycles the read data takes beyond the CAS latency (see the module's text).

    Attributes
    ----------
    port : In(MemPortSignature(cfg))
    sdram : Out(SdramPinsSignature(geometry))
    ready : Out(1)
        The initialization is done.
    abort : In(1)
        Drop the command under way and the read beats not yet taken (the SoC's
        RESET); refresh, open rows and the chip's timing carry on.
    """

    def __init__(self, cfg: HwConfig, clk_hz: int, *,
                 geometry: SdramGeometry = SdramGeometry(),
                 timing: SdramTiming = SdramTiming(),
                 board_delay: int = 0) -> None:
        g = geometry
        if cfg.mem_bus_width % g.width or cfg.mem_bus_width // g.width not in _BURST_CODE:
            raise ValueError(f"memory bus of {cfg.mem_bus_width} bits: an SDRAM beat is "
                             f"1, 2, 4 or 8 words of {g.width} bits")
        self.cfg = cfg
        self.clk_hz = int(clk_hz)
        self.geometry = g
        self.timing = timing
        self.board_delay = board_delay
        self.burst = cfg.mem_bus_width // g.width
        self.size_bytes = sdram_size_bytes(cfg, g)
        super().__init__({"port": In(MemPortSignature(cfg)),
                          "sdram": Out(SdramPinsSignature(g)), "ready": Out(1),
                          "abort": In(1)})

    def cycles(self, ns: float) -> int:
        """``ns`` in cycles of the controller's clock."""
        return self.timing.clocks(ns, self.clk_hz)

    @property
    def read_delay(self) -> int:
        """Cycles from a READ leaving its register to the sampling of its first word."""
        return self.timing.cl + self.board_delay

    @property
    def refresh_interval(self) -> int:
        """Cycles between refreshes: 96 % of tREFI (a beat may be under way when due)."""
        return int(self.timing.t_refi * 0.96 * self.clk_hz / 1e9)

    def elaborate(self, platform: object) -> Module:
        m = Module()
        g, t, port, pins = self.geometry, self.timing, self.port, self.sdram
        bl = self.burst
        t_rp, t_rcd, t_rfc = self.cycles(t.t_rp), self.cycles(t.t_rcd), self.cycles(t.t_rfc)
        t_ras, t_rrd, t_wr = self.cycles(t.t_ras), self.cycles(t.t_rrd), self.cycles(t.t_wr)
        t_rc = self.cycles(t.t_rc)
        t_rfc = max(t_rfc, t_rc)
        init_wait = self.cycles(t.t_init)
        # the longest wait one counter holds
        longest = max(t_rp, t_rcd, t_rfc, t.t_mrd, t_ras, t_rrd, bl + t_wr,
                      self.read_delay + bl + 1)

        # --- the pins: registered, a NOP unless a command is issued ----------------
        cmd = Signal(3)  # (we, cas, ras) as Cat
        ba = Signal(g.bank_bits)
        a = Signal(g.addr_bits)
        m.d.sync += [pins.cs.eq(1), Cat(pins.ras, pins.cas, pins.we).eq(cmd),
                     pins.ba.eq(ba), pins.a.eq(a), pins.dqm.eq(0)]
        m.d.comb += pins.clk_en.eq(1)

        def issue(name: str, bank: object = 0, addr: object = 0) -> list:
            ras, cas, we = SDRAM_CMD[name]
            return [cmd.eq(ras | cas << 1 | we << 2), ba.eq(bank), a.eq(addr)]

        # --- the address of the current beat -------------------------------------
        shift = log2(g.width // 8)
        word = Signal(self.cfg.dram_addr_width - shift)  # word address of the beat
        left = Signal(8)
        writing = Signal()
        have = Signal()  # a beat to serve
        col = word[:g.col_bits]
        bank = word[g.col_bits:g.col_bits + g.bank_bits]
        row_hi = min(len(word), g.col_bits + g.bank_bits + g.row_bits)
        row = Signal(g.row_bits)
        m.d.comb += row.eq(word[g.col_bits + g.bank_bits:row_hi])

        # --- bank state ---------------------------------------------------------
        open_row = Array(Signal(g.row_bits, name=f"open_row{b}") for b in range(g.banks))
        is_open = Signal(g.banks)
        pre_wait = Array(Signal(range(longest + 1), name=f"pre_wait{b}")
                         for b in range(g.banks))  # cycles until PRECHARGE is allowed
        for b in range(g.banks):
            with m.If(pre_wait[b] != 0):
                m.d.sync += pre_wait[b].eq(pre_wait[b] - 1)
        wait = _Countdown(m, "wait", max(longest, init_wait))  # any command
        col_wait = _Countdown(m, "col_wait", bl)  # the next column command
        turn = _Countdown(m, "turn", longest)  # a WRITE after a READ's data
        rrd = _Countdown(m, "rrd", t_rrd)  # an ACTIVE after an ACTIVE
        # Whether the beat's row is the open one, registered: the comparison would
        # otherwise sit between the address and ``wdata.ready`` (into the core's store
        # path). It lags the address and the bank state by a cycle, so the cycle after
        # either changes (``stale``) decides nothing. An ACTIVE's or PRECHARGE's
        # ``wait`` covers that cycle, and so does a column command's ``col_wait`` for
        # bursts of two words or more; it costs a cycle after each new command (and
        # after each beat on a 16-bit bus).
        hit = Signal()
        hit_next = Signal()
        stale = Signal()
        m.d.comb += hit_next.eq(is_open.bit_select(bank, 1) & (open_row[bank] == row))
        m.d.sync += [hit.eq(hit_next), stale.eq(0)]

        # --- refresh ------------------------------------------------------------
        refresh_count = _Countdown(m, "refresh_count", self.refresh_interval,
                                   init=self.refresh_interval)
        refresh_due = Signal()
        refresh_done = Signal()
        with m.If(refresh_count.zero):
            m.d.sync += [*refresh_count.load(self.refresh_interval), refresh_due.eq(1)]
        with m.If(refresh_done):
            m.d.sync += refresh_due.eq(0)

        # --- read data: words sampled read_delay cycles after their READ ---------
        depth = 2 + (self.read_delay + bl) // bl + 2
        m.submodules.rfifo = rfifo = ResetInserter(self.abort)(
            SyncFIFOBuffered(width=self.cfg.mem_bus_width, depth=depth))
        in_flight = Signal(range(depth + 1))
        issue_read = Signal()
        pipe = Signal(self.read_delay + bl)
        m.d.sync += pipe.eq(Cat(issue_read, pipe[:-1]))
        gathered = Signal(self.cfg.mem_bus_width)
        for k in range(bl):
            with m.If(pipe[self.read_delay + k]):
                m.d.sync += gathered[k * g.width:(k + 1) * g.width].eq(pins.dq_i)
        last = pipe[self.read_delay + bl - 1]
        beat_done = Signal()
        m.d.sync += beat_done.eq(last)
        m.d.comb += [rfifo.w_data.eq(gathered), rfifo.w_en.eq(beat_done),
                     port.rdata.valid.eq(rfifo.r_rdy),
                     port.rdata.payload.data.eq(rfifo.r_data),
                     rfifo.r_en.eq(port.rdata.ready)]
        m.d.sync += in_flight.eq(in_flight + issue_read - beat_done)
        room = rfifo.level + in_flight < depth

        # --- write data: word k of the beat k cycles after the WRITE -------------
        wshift = Signal(self.cfg.mem_bus_width)
        wleft = Signal(range(bl + 1))
        issue_write = Signal()
        with m.If(issue_write):
            m.d.sync += [pins.dq_o.eq(port.wdata.payload.data[:g.width]),
                         wshift.eq(port.wdata.payload.data >> g.width),
                         pins.dq_oe.eq(1), wleft.eq(bl - 1)]
        with m.Elif(wleft != 0):
            m.d.sync += [pins.dq_o.eq(wshift[:g.width]), wshift.eq(wshift >> g.width),
                         wleft.eq(wleft - 1)]
        with m.Else():
            m.d.sync += pins.dq_oe.eq(0)

        # --- the command stream ---------------------------------------------------
        def next_beat() -> list:
            return [word.eq(word + bl), left.eq(left - 1), have.eq(left != 0),
                    stale.eq(1)]

        m.d.comb += self.ready.eq(0)
        serving = Signal()  # in SERVE
        can_write = Signal()  # SERVE takes a write beat in this cycle (see below)
        init_left = Signal(range(t.init_refreshes + 1))
        close = Signal()  # precharge the beat's bank
        with m.FSM(name="sdram"):
            with m.State("POWER_UP"):
                m.d.sync += [*wait.load(init_wait), init_left.eq(t.init_refreshes)]
                m.next = "INIT_WAIT"
            with m.State("INIT_WAIT"), m.If(wait.zero):
                m.d.comb += issue("PRECHARGE", 0, 1 << 10)
                m.d.sync += wait.load(t_rp - 1)
                m.next = "INIT_REFRESH"
            with m.State("INIT_REFRESH"), m.If(wait.zero):
                with m.If(init_left == 0):
                    m.d.comb += issue("LOAD_MODE", 0, mode_register(bl, t.cl))
                    m.d.sync += wait.load(t.t_mrd - 1)
                    m.next = "SERVE"
                with m.Else():
                    m.d.comb += issue("REFRESH")
                    m.d.sync += [*wait.load(t_rfc - 1), init_left.eq(init_left - 1)]
            with m.State("SERVE"):
                m.d.comb += [self.ready.eq(1), serving.eq(1)]
                with m.If(can_write), m.If(port.wdata.valid):
                    m.d.comb += issue("WRITE", bank, col)
                    m.d.sync += [*next_beat(), *col_wait.load(bl - 1),
                                 pre_wait[bank].eq(_at_least(pre_wait[bank], bl - 1 + t_wr))]
                with m.Elif(~wait.zero):
                    pass
                with m.Elif(refresh_due):
                    with m.If(is_open == 0):
                        m.d.comb += [*issue("REFRESH"), refresh_done.eq(1)]
                        m.d.sync += wait.load(t_rfc - 1)
                    with m.Elif(Cat(pre_wait[b] == 0 for b in range(g.banks)).all()):
                        m.d.comb += issue("PRECHARGE", 0, 1 << 10)
                        m.d.sync += [*wait.load(t_rp - 1), is_open.eq(0), stale.eq(1)]
                with m.Elif(~have):
                    m.d.comb += port.cmd.ready.eq(1)
                    with m.If(port.cmd.valid):
                        m.d.sync += [word.eq(port.cmd.payload.addr >> shift),
                                     left.eq(port.cmd.payload.len),
                                     writing.eq(port.cmd.payload.write), have.eq(1),
                                     stale.eq(1)]
                with m.Elif(stale):
                    pass
                with m.Elif(hit), m.If(col_wait.zero & ~writing & room):  # (a write: can_write)
                    m.d.comb += [*issue("READ", bank, col), issue_read.eq(1)]
                    m.d.sync += [*next_beat(), *col_wait.load(bl - 1),
                                 *turn.load(self.read_delay + bl),
                                 pre_wait[bank].eq(_at_least(pre_wait[bank], bl - 1))]
                with m.Elif(is_open.bit_select(bank, 1)):  # another row is open: close it
                    m.d.comb += close.eq(pre_wait[bank] == 0)
                with m.Elif(rrd.zero):
                    m.d.comb += issue("ACTIVE", bank, row)
                    m.d.sync += [*wait.load(t_rcd - 1), *rrd.load(t_rrd - 1),
                                 is_open.bit_select(bank, 1).eq(1), open_row[bank].eq(row),
                                 pre_wait[bank].eq(t_ras - 1), stale.eq(1)]
        with m.If(close):
            m.d.comb += issue("PRECHARGE", bank, 0)
            m.d.sync += [*wait.load(t_rp - 1), is_open.bit_select(bank, 1).eq(0),
                         stale.eq(1)]
        # ``can_write``: SERVE takes a write beat (nothing waits, no refresh is due, the
        # beat is a write to the open row, ``stale`` is clear), registered a cycle ahead
        # from what the terms become. Anything else SERVE does needs a term here false
        # (accepting a command: ``have``; a READ: ``writing``; a refresh or PRECHARGE
        # ALL: ``refresh_due``; the beat's PRECHARGE or ACTIVE: ``hit_next``, which is
        # ``hit`` while ``stale`` is clear), so when all hold the counters only count
        # down and ``stale`` stays clear; a WRITE sets ``stale``.
        m.d.sync += can_write.eq(
            serving & have & writing & ~issue_write & ~self.abort & hit_next
            & wait.zero_next & col_wait.zero_next & turn.zero_next
            & ~refresh_due & ~refresh_count.zero)
        # ready whether or not a beat is valid (the core's valid would otherwise come
        # back to it as this ready in the same cycle); can_write is only set in SERVE
        m.d.comb += [port.wdata.ready.eq(can_write),
                     issue_write.eq(can_write & port.wdata.valid)]
        with m.If(self.abort):  # after the FSM: these assignments win
            m.d.sync += [have.eq(0), pipe.eq(0), in_flight.eq(0), beat_done.eq(0)]
        return m


class _Countdown:
    """A counter that counts down to 0 and stays there, beside a register that says it
    is 0, so that a decision waits for a flip-flop rather than a comparison.

    Parameters
    ----------
    m : Module
    name : str
    top : int
        The largest value loaded.
    init : int
    """

    def __init__(self, m: Module, name: str, top: int, *, init: int = 0) -> None:
        self.count = Signal(range(top + 1), name=name, init=init)
        self.zero = Signal(name=f"{name}_zero", init=init == 0)
        with m.If(self.count != 0):
            m.d.sync += self.count.eq(self.count - 1)
        m.d.sync += self.zero.eq(self.zero_next)

    @property
    def zero_next(self) -> Value:
        """``zero`` of the next cycle, unless the counter is loaded in this one."""
        return self.count <= 1

    def load(self, cycles: int) -> list:
        """Statements (``sync``) that set the counter to ``cycles``."""
        return [self.count.eq(cycles), self.zero.eq(cycles == 0)]


def _at_least(value: Signal, const: int) -> Value:
    """``max(value, const)``, an expression."""
    return Mux(value > const, value, const)
