"""A cycle-level model of an SDR SDRAM chip for Amaranth simulation, which checks the
chip's timing rules.

:class:`SdramChip` watches the command pins of :class:`~tensorfab.hw.soc.sdram.
SdramController` at every clock edge, as the chip samples them, keeps the contents
(a dict, so a 32 MB chip costs only what is written) and drives the read data on
``dq_i`` the CAS latency after a READ (plus the board's delay). Any command the chip
forbids at that moment (before the initialization, to a bank in the wrong state, too
soon after another command by its tRP, tRCD, tRAS, tRC, tRRD, tWR, tRFC, tMRD; a
column outside the open row's burst; both sides driving ``dq``; a refresh gap over
tREFI) raises :class:`SdramViolation` naming the rule, the cycle and the command.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tensorfab.hw.soc.sdram import SDRAM_CMD, SdramGeometry, SdramTiming
from tensorfab.isa import TensorfabError

__all__ = ["SdramChip", "SdramViolation"]

_BY_BITS = {v: k for k, v in SDRAM_CMD.items()}
_BURSTS = {0: 1, 1: 2, 2: 4, 3: 8}


class SdramViolation(TensorfabError):
    """A command the chip forbids at that moment (the message names the rule)."""


@dataclass
class _Bank:
    row: int | None = None
    activated: int = -(10**9)  # cycle of the last ACTIVE
    precharged: int = -(10**9)  # cycle of the last PRECHARGE
    read_at: int = -(10**9)  # cycle of the last READ
    write_end: int = -(10**9)  # cycle of the last written word


@dataclass
class _Stats:
    commands: dict[str, int] = field(default_factory=dict)
    max_refresh_gap: int = 0
    words_read: int = 0
    words_written: int = 0


class SdramChip:
    """The chip on ``pins`` (a :func:`~tensorfab.hw.soc.sdram.SdramPinsSignature`
    interface), clocked with the controller.

    Parameters
    ----------
    pins : object
        The controller's ``sdram`` interface.
    clk_hz : int
        The clock, for the timing in nanoseconds.
    geometry, timing
        The chip's (as the controller's).
    board_delay : int
        Extra cycles before read data reaches ``dq_i`` (the controller's).

    Attributes
    ----------
    mem : dict
        ``(bank, row, col)`` → word.
    stats : object
        ``commands`` (count per command), ``max_refresh_gap`` (cycles),
        ``words_read``, ``words_written``.
    """

    def __init__(self, pins: Any, clk_hz: int, *,
                 geometry: SdramGeometry = SdramGeometry(),  # noqa: B008
                 timing: SdramTiming = SdramTiming(),  # noqa: B008
                 board_delay: int = 0) -> None:
        self.pins = pins
        self.g = geometry
        self.t = timing
        self.clk_hz = clk_hz
        self.board_delay = board_delay
        self.mem: dict[tuple[int, int, int], int] = {}
        self.stats = _Stats()
        c = lambda ns: timing.clocks(ns, clk_hz)  # noqa: E731
        self.t_rp, self.t_rcd, self.t_ras = c(timing.t_rp), c(timing.t_rcd), c(timing.t_ras)
        self.t_rc, self.t_rrd, self.t_wr = c(timing.t_rc), c(timing.t_rrd), c(timing.t_wr)
        self.t_rfc = c(timing.t_rfc)
        self.t_refi = int(timing.t_refi * clk_hz / 1e9)
        self.t_init = c(timing.t_init)
        self.banks = [_Bank() for _ in range(geometry.banks)]
        self.cycle = 0
        self.refreshes = 0
        self.init_precharged = False
        self.mode: int | None = None
        self.mode_at = -(10**9)
        self.refreshed = -(10**9)
        self.last_activate = -(10**9)
        self.reads: deque[tuple[int, int]] = deque()  # (cycle to drive, word)
        self.driving_until = -1  # the chip drives dq until this cycle
        self.write: list[Any] | None = None  # [bank, row, col, words left]
        self.burst_end = -(10**9)  # cycle the current burst's last word is on the bus

    @property
    def burst(self) -> int:
        """Burst length of the mode register."""
        assert self.mode is not None
        return _BURSTS[self.mode & 7]

    @property
    def cl(self) -> int:
        """CAS latency of the mode register."""
        assert self.mode is not None
        return (self.mode >> 4) & 7

    def fail(self, rule: str, command: str) -> None:
        """Raise :class:`SdramViolation` for ``command`` at this cycle."""
        raise SdramViolation(f"SDRAM cycle {self.cycle}: {command}: {rule}")

    def since(self, then: int, needed: int, rule: str, command: str) -> None:
        """Fail unless ``needed`` cycles passed since ``then``."""
        if self.cycle - then < needed:
            self.fail(f"{rule} is {needed} cycles, only {self.cycle - then} passed", command)

    async def process(self, ctx: Any) -> None:
        """The chip: an Amaranth simulator process (``sim.add_process``)."""
        p = self.pins
        async for sample in ctx.tick().sample(p.cs, p.ras, p.cas, p.we, p.ba, p.a, p.dq_o,
                                              p.dq_oe, p.dqm, p.clk_en):
            _clk, _rst, cs, ras, cas, we, ba, a, dq, oe, dqm, cke = sample
            self.cycle += 1
            self.edge(cs, (ras, cas, we), ba, a, dq if oe else None, dqm, cke)
            # what the chip drives during the next cycle
            value = 0
            while self.reads and self.reads[0][0] <= self.cycle:
                drive_at, word = self.reads.popleft()
                if drive_at == self.cycle:
                    value = word
            ctx.set(p.dq_i, value)

    def edge(self, cs: int, bits: tuple[int, int, int], ba: int, a: int,
             dq: int | None, dqm: int, cke: int) -> None:
        """One rising clock edge: the command and data the chip samples."""
        if dq is not None and self.cycle <= self.driving_until:
            self.fail("the controller drives dq while the chip drives read data",
                      "data bus")
        if self.write is not None:
            self.take_write_word(dq, dqm)
        name = _BY_BITS[bits] if cs else "NOP"
        if name == "NOP":
            return
        if not cke:
            self.fail("clock enable low", name)
        self.stats.commands[name] = self.stats.commands.get(name, 0) + 1
        if self.cycle < self.t_init:
            self.fail(f"the power-up wait is {self.t_init} cycles", name)
        if self.cycle - self.mode_at < self.t.t_mrd:
            self.fail(f"tMRD is {self.t.t_mrd} cycles", name)
        getattr(self, f"cmd_{name.lower()}")(ba, a, dq, dqm, name)

    def initialized(self, name: str) -> None:
        """Fail unless the initialization (precharge, refreshes, mode) is done."""
        if self.mode is None:
            self.fail("before the initialization set the mode register", name)

    def cmd_load_mode(self, ba: int, a: int, dq: int | None, dqm: int, name: str) -> None:
        if not self.init_precharged or self.refreshes < self.t.init_refreshes:
            self.fail(f"the mode register is set after a precharge-all and "
                      f"{self.t.init_refreshes} refreshes ({self.refreshes} so far)", name)
        if any(b.row is not None for b in self.banks):
            self.fail("a bank is active", name)
        self.since(self.refreshed, self.t_rfc, "tRFC", name)
        if (a & 7) not in _BURSTS or (a >> 4) & 7 not in (2, 3) or a & 0x8 or a >> 7:
            self.fail(f"mode {a:#x}: not a sequential burst with CAS latency 2 or 3", name)
        self.mode, self.mode_at = a, self.cycle

    def cmd_precharge(self, ba: int, a: int, dq: int | None, dqm: int, name: str) -> None:
        targets = range(self.g.banks) if a >> 10 & 1 else [ba]
        if self.mode is None and a >> 10 & 1:
            self.init_precharged = True
        for b in targets:
            bank = self.banks[b]
            if bank.row is not None:
                self.since(bank.activated, self.t_ras, f"tRAS (bank {b})", name)
                self.since(bank.write_end, self.t_wr, f"tWR (bank {b})", name)
                if self.mode is not None:
                    self.since(bank.read_at, self.burst, f"a read burst (bank {b})", name)
            bank.row = None
            bank.precharged = self.cycle

    def cmd_refresh(self, ba: int, a: int, dq: int | None, dqm: int, name: str) -> None:
        if self.mode is None and not self.init_precharged:
            self.fail("the initialization's precharge-all comes first", name)
        for b, bank in enumerate(self.banks):
            if bank.row is not None:
                self.fail(f"bank {b} is active", name)
            self.since(bank.precharged, self.t_rp, f"tRP (bank {b})", name)
        self.since(self.refreshed, self.t_rfc, "tRFC", name)
        if self.mode is not None and self.refreshed > 0:
            gap = self.cycle - self.refreshed
            self.stats.max_refresh_gap = max(self.stats.max_refresh_gap, gap)
            if gap > self.t_refi:
                self.fail(f"{gap} cycles since the last refresh; tREFI is {self.t_refi}",
                          name)
        self.refreshed = self.cycle
        self.refreshes += 1

    def cmd_active(self, ba: int, a: int, dq: int | None, dqm: int, name: str) -> None:
        self.initialized(name)
        bank = self.banks[ba]
        if bank.row is not None:
            self.fail(f"bank {ba} already has row {bank.row} open", name)
        if a >= self.g.rows:
            self.fail(f"row {a} of {self.g.rows}", name)
        self.since(bank.precharged, self.t_rp, f"tRP (bank {ba})", name)
        self.since(bank.activated, self.t_rc, f"tRC (bank {ba})", name)
        self.since(self.last_activate, self.t_rrd, "tRRD", name)
        self.since(self.refreshed, self.t_rfc, "tRFC", name)
        bank.row, bank.activated, self.last_activate = a, self.cycle, self.cycle

    def column(self, ba: int, a: int, name: str) -> tuple[int, int]:
        """Check a READ or WRITE; its row and column."""
        self.initialized(name)
        bank = self.banks[ba]
        if bank.row is None:
            self.fail(f"bank {ba} has no open row", name)
        assert bank.row is not None
        self.since(bank.activated, self.t_rcd, f"tRCD (bank {ba})", name)
        if a >> 10 & 1:
            self.fail("auto-precharge (A10) is not expected", name)
        col = a & ((1 << 10) - 1)
        if col >= self.g.cols or col % self.burst:
            self.fail(f"column {col}: outside the row or not burst aligned", name)
        if self.cycle <= self.burst_end:
            self.fail("a burst interrupted by the next column command", name)
        self.burst_end = self.cycle + self.burst - 1
        return bank.row, col

    def cmd_read(self, ba: int, a: int, dq: int | None, dqm: int, name: str) -> None:
        row, col = self.column(ba, a, name)
        self.banks[ba].read_at = self.cycle
        for k in range(self.burst):
            # driven after edge cycle + cl - 1 + k, sampled at the next edge
            when = self.cycle + self.cl - 1 + k + self.board_delay
            self.reads.append((when, self.mem.get((ba, row, col + k), 0xDEAD)))
        self.driving_until = self.cycle + self.cl + self.burst
        self.stats.words_read += self.burst

    def cmd_write(self, ba: int, a: int, dq: int | None, dqm: int, name: str) -> None:
        row, col = self.column(ba, a, name)
        self.write = [ba, row, col, self.burst]
        self.take_write_word(dq, dqm)

    def take_write_word(self, dq: int | None, dqm: int) -> None:
        """One word of the write burst under way (masked bytes keep their value)."""
        assert self.write is not None
        ba, row, col, left = self.write
        self.write = None if left == 1 else [ba, row, col, left - 1]
        if dq is None:  # a burst cut short by the controller's reset: nothing written
            return
        key = (ba, row, col + self.burst - left)
        old = self.mem.get(key, 0)
        keep = (0xFF if dqm & 1 else 0) | (0xFF00 if dqm & 2 else 0)
        self.mem[key] = (old & keep) | (dq & ~keep & 0xFFFF)
        self.banks[ba].write_end = self.cycle
        self.stats.words_written += 1
