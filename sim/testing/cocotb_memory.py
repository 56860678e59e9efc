"""A cocotb memory model serving the memory port of a design under test.

:class:`MemModel` drives and samples the nine signals of a
:func:`tensorfab.hw.mem_port.MemPortSignature` port (``<prefix>cmd__valid``,
``<prefix>cmd__ready``, ``<prefix>cmd__payload``, and the same for ``wdata`` and
``rdata``) and implements docs/architecture.md's protocol:

- commands take effect in the order the model accepts them: a write takes effect
  beat by beat as its data arrives, and a read accepted after it is served only
  once the write is complete, so it sees the written data;
- each read command returns exactly ``len + 1`` beats in command order, each write
  command takes exactly ``len + 1`` beats;
- the model checks the master keeps ``valid`` and the payload stable until a
  transfer, and that every access lies inside the backing memory.

Timing is random but deterministic per seed: each command waits a random latency
(cycles after acceptance before its first beat), ``ready`` on ``cmd`` and
``wdata`` and ``valid`` on ``rdata`` are dropped at random (back-pressure), and an
optional bandwidth limit caps the beats moved per cycle on average.

The model runs one loop per clock cycle: at the falling edge it drives its
outputs, then in the read-only phase of the same time step it samples the
handshakes that the next rising edge completes.

Example
-------
::

    mem = MemModel(dut, cfg, prefix="port__", size=1 << 16, seed=3)
    mem.data[0:64] = image
    mem.start()
    ...
    await mem.wait_idle()
    assert mem.bytes_written == 128
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge, ReadOnly

from tensorfab.hw.mem_port import MemCmdLayout
from tensorfab.isa import HwConfig, TensorfabError

__all__ = ["MemCommand", "MemModel", "MemProtocolError"]


class MemProtocolError(TensorfabError, AssertionError):
    """The design broke the memory-port protocol or accessed memory out of range."""


@dataclass
class MemCommand:
    """One accepted command.

    Attributes
    ----------
    addr : int
        Byte address.
    write : bool
        Write command.
    beats : int
        ``len + 1``.
    cycle : int
        Cycle the model accepted it.
    start : int
        Earliest cycle its first beat may move (acceptance plus latency).
    done : int
        Beats moved so far.
    """

    addr: int
    write: bool
    beats: int
    cycle: int
    start: int
    done: int = 0


class MemModel:
    """Memory behind a ``MemPortSignature`` port, with random latency and back-pressure.

    Parameters
    ----------
    dut : cocotb handle
        The design; must have ``clk`` and the port's signals.
    cfg : HwConfig
        Gives the bus width and the command layout.
    prefix : str
        Name prefix of the port's signals (``"port__"``, ``"mem__"``...).
    size : int
        Bytes of backing memory (``data``); accesses past it raise
        :class:`MemProtocolError`.
    seed : int
        Seed of every random choice.
    latency : tuple of int
        Smallest and largest cycles from accepting a command to its first beat.
    cmd_ready, wdata_ready, rdata_valid : float
        Probability per cycle that the model accepts a command, accepts a write
        beat, offers a read beat it has (1.0: no back-pressure).
    max_outstanding : int
        Commands accepted and not yet complete; ``cmd`` is stalled beyond it.
    beats_per_cycle : float
        Average bandwidth limit in beats per cycle over both directions (1.0: none).
    clock : str
        Name of the clock signal.
    """

    def __init__(self, dut, cfg: HwConfig, *, prefix: str = "port__", size: int = 1 << 20,
                 seed: int = 0, latency: tuple[int, int] = (1, 6), cmd_ready: float = 0.8,
                 wdata_ready: float = 0.8, rdata_valid: float = 0.8,
                 max_outstanding: int = 4, beats_per_cycle: float = 1.0,
                 clock: str = "clk") -> None:
        self.dut = dut
        self.cfg = cfg
        self.clk = getattr(dut, clock)
        self.bus_bytes = cfg.mem_bus_bytes
        self.data = np.zeros(size, dtype=np.uint8)
        self.rng = random.Random(seed)
        self.latency = latency
        self.p_cmd, self.p_wdata, self.p_rdata = cmd_ready, wdata_ready, rdata_valid
        self.max_outstanding = max_outstanding
        self.beats_per_cycle = beats_per_cycle
        lay = MemCmdLayout(cfg)
        self._fields = {name: (lay[name].offset, (1 << lay[name].shape.width) - 1)
                        for name in ("addr", "write", "len")}
        sig = {name: getattr(dut, prefix + name) for name in (
            "cmd__valid", "cmd__ready", "cmd__payload", "wdata__valid", "wdata__ready",
            "wdata__payload", "rdata__valid", "rdata__ready", "rdata__payload")}
        self._sig = sig
        #: Accepted commands not yet complete, oldest first.
        self.pending: deque[MemCommand] = deque()
        self._rbeats: deque[int] = deque()  # read beats produced, not yet delivered
        self._rheld = False  # rdata.valid was offered and not taken
        self._prev_cmd: int | None = None  # payload of a command offered and not taken
        self._prev_wdata: int | None = None
        self._credit = 0.0
        self.cycle = 0
        #: Every accepted command, in order.
        self.log: list[MemCommand] = []
        self.bytes_read = 0
        self.bytes_written = 0
        self._task = None

    # ------------------------------------------------------------------ host access
    def write(self, addr: int, payload: bytes | np.ndarray) -> None:
        """Put bytes into the memory (no simulated time passes)."""
        arr = np.frombuffer(bytes(payload), dtype=np.uint8)
        self.data[addr: addr + arr.size] = arr

    def read(self, addr: int, n: int) -> bytes:
        """Bytes of the memory (no simulated time passes)."""
        return self.data[addr: addr + n].tobytes()

    @property
    def idle(self) -> bool:
        """No command is pending and no read beat waits for delivery."""
        return not self.pending and not self._rbeats

    def start(self) -> None:
        """Start serving the port (call after reset has been released)."""
        for name in ("cmd__ready", "wdata__ready", "rdata__valid"):
            self._sig[name].value = 0
        self._sig["rdata__payload"].value = 0
        self._task = cocotb.start_soon(self._run())

    def stop(self) -> None:
        """Stop serving the port (the signals keep their last values)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def wait_idle(self, timeout: int = 100000) -> None:
        """Wait until :attr:`idle`.

        Raises
        ------
        TimeoutError
            If the memory is still busy after ``timeout`` cycles.
        """
        for _ in range(timeout):
            if self.idle:
                return
            await FallingEdge(self.clk)
        raise TimeoutError(f"memory still busy after {timeout} cycles: {list(self.pending)}")

    # ------------------------------------------------------------------ internals
    def _field(self, payload: int, name: str) -> int:
        off, mask = self._fields[name]
        return (payload >> off) & mask

    def _check_range(self, addr: int, n: int, what: str) -> None:
        if addr % self.bus_bytes:
            raise MemProtocolError(f"{what} at {addr:#x}: not aligned to a {self.bus_bytes}-byte "
                                   "beat")
        if addr + n > self.data.size:
            raise MemProtocolError(f"{what} of {n} bytes at {addr:#x} runs past the "
                                   f"{self.data.size:#x}-byte memory")

    def _take_credit(self) -> bool:
        if self.beats_per_cycle >= 1.0:
            return True
        if self._credit >= 1.0:
            self._credit -= 1.0
            return True
        return False

    async def _run(self) -> None:
        s = self._sig
        bb = self.bus_bytes
        while True:
            await FallingEdge(self.clk)
            self.cycle += 1
            if self.beats_per_cycle < 1.0:
                self._credit = min(self._credit + self.beats_per_cycle, 4.0)
            # produce read beats for the oldest command if it is a read whose time came
            head = self.pending[0] if self.pending else None
            if (head is not None and not head.write and self.cycle >= head.start
                    and len(self._rbeats) < 8 and self._take_credit()):
                addr = head.addr + head.done * bb
                self._rbeats.append(int.from_bytes(self.data[addr: addr + bb].tobytes(),
                                                   "little"))
                self.bytes_read += bb
                head.done += 1
                if head.done == head.beats:
                    self.pending.popleft()
                    head = self.pending[0] if self.pending else None
            # drive
            cmd_ready = (len(self.pending) < self.max_outstanding
                         and self.rng.random() < self.p_cmd)
            s["cmd__ready"].value = int(cmd_ready)
            wready = (head is not None and head.write and self.cycle >= head.start
                      and self.rng.random() < self.p_wdata)
            s["wdata__ready"].value = int(wready)
            rvalid = bool(self._rbeats) and (self._rheld or self.rng.random() < self.p_rdata)
            s["rdata__valid"].value = int(rvalid)
            if rvalid:
                s["rdata__payload"].value = self._rbeats[0]
            await ReadOnly()
            # sample the handshakes the next rising edge completes
            cvalid = bool(int(s["cmd__valid"].value))
            cpayload = s["cmd__payload"].value.to_unsigned() if cvalid else None
            if self._prev_cmd is not None and cpayload != self._prev_cmd:
                raise MemProtocolError(f"cycle {self.cycle}: cmd withdrawn or changed before "
                                       f"it was taken ({self._prev_cmd:#x} -> {cpayload})")
            self._prev_cmd = cpayload if cvalid and not cmd_ready else None
            if cvalid and cmd_ready:
                assert cpayload is not None
                addr = self._field(cpayload, "addr")
                write = bool(self._field(cpayload, "write"))
                beats = self._field(cpayload, "len") + 1
                self._check_range(addr, beats * bb, "write" if write else "read")
                lat = self.rng.randint(*self.latency)
                c = MemCommand(addr, write, beats, self.cycle, self.cycle + 1 + lat)
                self.pending.append(c)
                self.log.append(c)
            wvalid = bool(int(s["wdata__valid"].value))
            wpayload = s["wdata__payload"].value.to_unsigned() if wvalid else None
            if self._prev_wdata is not None and wpayload != self._prev_wdata:
                raise MemProtocolError(f"cycle {self.cycle}: write beat withdrawn or changed "
                                       "before it was taken")
            self._prev_wdata = wpayload if wvalid and not wready else None
            if wvalid and wready and head is not None:
                assert wpayload is not None
                if not self._take_credit():
                    # the beat moves anyway (ready was high); charge it to the future
                    self._credit -= 1.0
                addr = head.addr + head.done * bb
                self.data[addr: addr + bb] = np.frombuffer(wpayload.to_bytes(bb, "little"),
                                                           dtype=np.uint8)
                self.bytes_written += bb
                head.done += 1
                if head.done == head.beats:
                    self.pending.popleft()
            rready = bool(int(s["rdata__ready"].value))
            if rvalid and rready:
                self._rbeats.popleft()
                self._rheld = False
            else:
                self._rheld = rvalid
