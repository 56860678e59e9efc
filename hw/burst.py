"""The DMA engines' shared parts: the burst issuer (a 2-D transfer as memory
commands) and the execution phases of one transfer."""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Module, Mux, Signal, Value, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import ErrorCode, HwConfig
from tensorfab.isa.config import log2

from .mem_port import LEN_WIDTH, MAX_BURST, MemXferLayout

__all__ = ["BurstIssuer", "TransferPhases", "check_max_burst", "dram_limit", "owed_limit_bits",
           "transfer_phases"]

#: Width of the row count (a transfer's ``y`` is at most 2^16 - 1 rows).
ROWS_WIDTH = 17
#: Width of a row's beat count.
BEATS_WIDTH = 32
#: Commands of ``max_burst`` beats that may be owed before the issuer holds back (a
#: bound on ``owed``, far above what the memory arbiter lets a master have in flight).
OWED_COMMANDS = 32


def owed_limit_bits(max_burst: int) -> int:
    """log2 of the beats owed at which :class:`BurstIssuer` stops offering commands:
    the least power of two of at least ``OWED_COMMANDS`` bursts of ``max_burst``."""
    return (OWED_COMMANDS * max_burst - 1).bit_length()


def dram_limit(dram_size: Value, addr_width: int) -> Value:
    """The bytes a LOAD or STORE may reach: DRAM_SIZE, or the whole address space
    (``2^addr_width``) when it is 0 or larger."""
    return Mux((dram_size == 0) | (dram_size > (1 << addr_width)), 1 << addr_width, dram_size)


def check_max_burst(max_burst: int) -> int:
    """``max_burst`` if it is a legal burst length (1 to :data:`~.mem_port.MAX_BURST`).

    Raises
    ------
    ValueError
        Naming ``max_burst`` when it is out of range.
    """
    if not 1 <= max_burst <= MAX_BURST:
        raise ValueError(f"max_burst must be 1 to {MAX_BURST} beats, not {max_burst}")
    return max_burst


class BurstIssuer(wiring.Component):
    """Issues the commands of a 2-D transfer: ``rows`` rows of ``row_beats`` beats,
    ``stride`` bytes apart from ``addr`` on, each row split into bursts of at most
    ``max_burst`` beats, and counts the beats the memory and the engine still owe.

    ``start`` loads a transfer. While ``issue`` is high the issuer offers its next
    command; a command offered stays offered until the memory takes it, whatever
    ``issue`` does next (the stream rule), so an engine that halts drops ``issue``
    and waits for :attr:`drained`. No new command is offered while ``2^``
    :func:`owed_limit_bits` beats or more are owed, which bounds ``owed`` to
    ``owed_limit_bits + 1`` bits (a 32-bit count was an FPGA critical path: its
    carry chain ends the cycle of ``beat``).

    Parameters
    ----------
    cfg : HwConfig
        Address and bus widths.
    max_burst : int
        Longest burst, in beats (1 to :data:`~.mem_port.MAX_BURST`).

    Attributes
    ----------
    cmd : Out(stream.Signature(MemXferLayout(cfg)))
        The commands (``addr``, ``len`` = beats - 1).
    start : In(1)
        Load the transfer given by ``addr`` (bytes, beat aligned), ``rows``,
        ``row_beats`` and ``stride`` (bytes).
    issue : In(1)
        Offer commands.
    beat : In(1)
        A data beat of an issued command moved (read beat taken, write beat sent).
    owed : Out(owed_limit_bits(max_burst) + 1)
        Beats of issued commands that have not moved yet.
    owing : Out(1)
        ``owed`` is not zero (a register).
    owing_next : Out(1)
        What ``owing`` is in the next cycle.
    issued : Out(1)
        Every command of the transfer has been taken.
    drained : Out(1)
        No command is held offered and no beat is owed.
    drained_next : Out(1)
        What ``drained`` is in the next cycle.
    """

    def __init__(self, cfg: HwConfig, max_burst: int = 32) -> None:
        self.cfg = cfg
        self.max_burst = check_max_burst(max_burst)
        aw = cfg.dram_addr_width
        super().__init__({
            "cmd": Out(stream.Signature(MemXferLayout(cfg))),
            "start": In(1),
            "addr": In(aw),
            "rows": In(ROWS_WIDTH),
            "row_beats": In(BEATS_WIDTH),
            "stride": In(aw),
            "issue": In(1),
            "beat": In(1),
            "owed": Out(owed_limit_bits(self.max_burst) + 1),
            "owing": Out(1),
            "owing_next": Out(1),
            "issued": Out(1),
            "drained": Out(1),
            "drained_next": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        """Build the row and burst counters."""
        m = Module()
        aw = self.cfg.dram_addr_width
        bus_shift = log2(self.cfg.mem_bus_bytes)
        rows_left = Signal(ROWS_WIDTH)  # rows still to request
        row_beats = Signal(BEATS_WIDTH)
        beats_left = Signal(BEATS_WIDTH)  # beats of the current row still to request
        cur_addr = Signal(aw)
        row_addr = Signal(aw)
        stride = Signal(aw)
        stuck = Signal()  # a command offered last cycle and not taken
        mb = self.max_burst
        # Flags kept with the counters they describe, so that whether a command is
        # offered and how long it is come from registers, not from 17- and 32-bit
        # comparisons in the cycle of the offer (an FPGA critical path):
        has_rows = Signal()  # rows_left != 0
        long = Signal()  # beats_left > mb: the next burst is a full one, not the row's last
        row_long = Signal()  # row_beats > mb
        burst = Signal(range(mb + 1))
        cmd = self.cmd
        m.d.comb += [
            burst.eq(Mux(long, mb, beats_left[:len(burst)])),
            cmd.payload.addr.eq(cur_addr),
            cmd.payload.len.eq((burst - 1)[:LEN_WIDTH]),
            # (owed's top bit only rises with a command taken, so a command held
            # offered is never withdrawn by it)
            cmd.valid.eq(has_rows & ((self.issue & ~self.owed[-1]) | stuck)),
            self.issued.eq(~has_rows),
            self.drained.eq(~stuck & ~self.owing),
        ]
        fire = cmd.valid & cmd.ready
        # owing: the next owed (owed + f - beat, f the beats of a command taken) is not
        # zero, from comparisons of the register owed rather than of the sum (out of
        # the cycle of ``beat``, which the store engine sends while owing)
        f_some = fire & (burst != 0)
        f_one = fire & (burst == 1)
        owed_many = self.owed[1:] != 0  # owed >= 2
        owed_one = self.owed == 1
        owed_none = self.owed == 0
        # the change of owed, summed on its few bits first: one carry chain over owed
        delta = Signal(signed(len(burst) + 1))
        m.d.comb += delta.eq(Mux(fire, burst, 0) - self.beat)
        m.d.comb += self.owing_next.eq(owed_many | (owed_one & (f_some | ~self.beat))
                                       | (owed_none & ~((~f_some & ~self.beat)
                                                        | (f_one & self.beat))))
        m.d.comb += self.drained_next.eq(~(cmd.valid & ~cmd.ready) & ~self.owing_next)
        m.d.sync += [stuck.eq(cmd.valid & ~cmd.ready),
                     self.owed.eq(self.owed + delta),
                     self.owing.eq(self.owing_next)]
        with m.If(self.start):
            m.d.sync += [rows_left.eq(self.rows), row_beats.eq(self.row_beats),
                         beats_left.eq(self.row_beats), cur_addr.eq(self.addr),
                         row_addr.eq(self.addr), stride.eq(self.stride),
                         has_rows.eq(self.rows != 0), long.eq(self.row_beats > mb),
                         row_long.eq(self.row_beats > mb)]
        with m.Elif(fire):
            with m.If(~long):  # row done
                m.d.sync += [rows_left.eq(rows_left - 1), beats_left.eq(row_beats),
                             has_rows.eq(rows_left != 1), long.eq(row_long),
                             row_addr.eq(row_addr + stride), cur_addr.eq(row_addr + stride)]
            with m.Else():
                m.d.sync += [beats_left.eq(beats_left - mb), long.eq(beats_left > 2 * mb),
                             cur_addr.eq(cur_addr + (mb << bus_shift))]
        return m


@dataclass(frozen=True)
class TransferPhases:
    """Which phase of :func:`transfer_phases` a DMA engine is in (one-bit signals)."""

    #: The cycle after ``start``: the range checks; the burst issuer loads the transfer.
    check: Signal
    #: What ``check`` is in the next cycle.
    check_next: Signal
    #: Moving data (also in the cycle ``halt`` rises; not in the first RUN cycle of an
    #: instruction that fails its range checks).
    run: Signal
    #: After a halt: the memory's beats still owed move, then the transfer is forgotten.
    drain: Signal
    #: What ``run`` is in the next cycle.
    run_next: Signal
    #: What ``drain`` is in the next cycle.
    drain_next: Signal
    #: What ``run`` is in the next cycle unless that is RUN's first (where no beat
    #: moves: no command was issued before it): ``run_next`` without the range checks'
    #: verdict, whose comparisons in CHECK would otherwise reach the registers that
    #: gate the engines' beats (an FPGA critical path).
    beats_next: Signal
    #: Whether, in the next cycle, ``run`` after its first cycle or ``drain`` with
    #: beats owed will be high (``beats_next``, ``drain_next`` and the issuer's
    #: ``owing_next``): a register of it gates data beats without the FSM's decode.
    moving_next: Signal


def transfer_phases(m: Module, ex: wiring.PureInterface, bursts: BurstIssuer, halt: Value,
                    sram_bad: Value, dram_bad: Value, last: Value, *,
                    start: Value | None = None,
                    other_bad: tuple[Value, ErrorCode] | None = None) -> TransferPhases:
    """The execution of one LOAD or STORE behind its :class:`~.sequencer.InsnSequencer`.

    ``ex.start`` leads to CHECK, where the range checks ``sram_bad`` and ``dram_bad``
    are registered, then to RUN. In its first cycle RUN fails the instruction with
    ``SRAM_RANGE`` (if ``sram_bad`` was high) or ``DRAM_RANGE`` (if ``dram_bad``)
    before any memory access or buffer write (``run`` stays low and no command is
    offered), else it issues ``bursts`` and is done in the cycle ``last`` is high.
    (Registering the checks keeps their comparisons out of the cycle of the failure,
    which feeds the sequencer and the core's error registers, an FPGA critical path;
    an instruction that passes them spends no extra cycle, one that fails reports its
    error a cycle later.) A ``halt`` in CHECK forgets the instruction at once, in RUN
    it goes through DRAIN until ``bursts`` is drained.

    Parameters
    ----------
    m : Module
        The engine's module.
    ex : interface of ExecSignature
        The sequencer's ``exec`` port (this drives its ``done``, ``fail``, ``code``
        and ``idle``).
    bursts : BurstIssuer
        The engine's issuer (this drives its ``start`` and ``issue``).
    halt : Value
        The engine's halt.
    sram_bad, dram_bad : Value
        The range checks, valid in CHECK.
    last : Value
        In RUN: the transfer's last data moves this cycle.
    start : Value, optional
        What starts the transfer instead of ``ex.start`` (an engine with work of its
        own before CHECK).
    other_bad : (Value, ErrorCode), optional
        A further check, valid in CHECK, and its error code, reported after the range
        checks' as they are.

    Returns
    -------
    TransferPhases
    """
    phases = TransferPhases(Signal(name="check"), Signal(name="check_next"), Signal(name="run"),
                            Signal(name="drain"),
                            Signal(name="run_next"), Signal(name="drain_next"),
                            Signal(name="beats_next"), Signal(name="moving_next"))
    # the checks' verdict, registered in CHECK: run_ok is (RUN and the checks passed),
    # one register for what gates the datapath and the issuer (out of the FSM's
    # decode); in RUN, a failed check means RUN's first cycle (it fails the
    # instruction at once, unless a halt, which has priority, leaves for DRAIN)
    run_ok = Signal(name="run_ok")
    sram_bad_r = Signal(name="sram_bad_r")
    m.d.sync += run_ok.eq(phases.run_next)
    m.d.comb += [phases.run.eq(run_ok), bursts.issue.eq(run_ok & ~halt),
                 phases.run_next.eq(run_ok),
                 phases.beats_next.eq(phases.run_next & ~phases.check),
                 phases.moving_next.eq(phases.beats_next
                                       | (phases.drain_next & bursts.owing_next))]
    passed = ~sram_bad & ~dram_bad
    code = Mux(sram_bad_r, ErrorCode.SRAM_RANGE, ErrorCode.DRAM_RANGE)
    if other_bad is not None:
        range_bad_r = Signal(name="range_bad_r")
        passed = passed & ~other_bad[0]
        code = Mux(range_bad_r, code, other_bad[1])
    with m.FSM(name="transfer"):
        with m.State("WAIT"):
            m.d.comb += ex.idle.eq(1)
            with m.If(ex.start if start is None else start):
                m.d.comb += phases.check_next.eq(1)
                m.next = "CHECK"
        with m.State("CHECK"):
            m.d.comb += [phases.check.eq(1), ex.idle.eq(1), bursts.start.eq(1)]
            m.d.sync += sram_bad_r.eq(sram_bad)
            if other_bad is not None:
                m.d.sync += range_bad_r.eq(sram_bad | dram_bad)
            with m.If(halt):
                m.next = "WAIT"
            with m.Else():
                m.d.comb += phases.run_next.eq(passed)
                m.next = "RUN"
        with m.State("RUN"):
            with m.If(halt):
                m.d.comb += [phases.run_next.eq(0), phases.drain_next.eq(1)]
                m.next = "DRAIN"
            with m.Elif(~run_ok):
                m.d.comb += [ex.idle.eq(1), ex.fail.eq(1), ex.code.eq(code)]
                m.next = "WAIT"
            with m.Elif(last):
                m.d.comb += [ex.done.eq(1), phases.run_next.eq(0)]
                m.next = "WAIT"
        with m.State("DRAIN"):
            m.d.comb += [phases.drain.eq(1), ex.idle.eq(bursts.drained),
                         phases.drain_next.eq(~bursts.drained)]
            with m.If(bursts.drained):
                m.next = "WAIT"
    return phases
