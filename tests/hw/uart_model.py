"""A bit-level UART model for cocotb, and the host link's byte transport over it.

:class:`UartModel` drives the DUT's receive line and decodes its transmit line, one
cocotb wait per bit (not per clock), so a simulated board costs little Python.
:class:`UartTransport` is a :class:`~tensorfab.hil.transport.Transport` over it, so that
the host side of a board (:class:`~tensorfab.hil.link.HostLink`,
:class:`~tensorfab.hil.board.BoardDevice`) runs unchanged against the simulated SoC:
called from a thread started with :func:`cocotb.task.bridge`, each write and read
advances the simulation (:func:`cocotb.task.resume`) while the thread waits.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import cocotb
from cocotb.task import resume
from cocotb.triggers import ClockCycles, Edge


class UartModel:
    """8N1 at ``divisor`` clock cycles per bit, on ``rx`` (to the DUT) and ``tx``."""

    def __init__(self, clk: Any, rx: Any, tx: Any, divisor: int) -> None:
        self.clk, self.rx, self.tx, self.divisor = clk, rx, tx, divisor
        self.received: deque[int] = deque()
        self.framing_errors = 0
        rx.value = 1
        self._task = cocotb.start_soon(self._receive())

    async def send(self, data: bytes) -> None:
        """Send bytes back to back."""
        for byte in data:
            for bit in (0, *((byte >> i) & 1 for i in range(8)), 1):
                self.rx.value = bit
                await ClockCycles(self.clk, self.divisor)

    async def _receive(self) -> None:
        while True:
            while int(self.tx.value) == 1:
                await Edge(self.tx)
            await ClockCycles(self.clk, self.divisor + self.divisor // 2)
            byte = 0
            for i in range(8):
                byte |= int(self.tx.value) << i
                await ClockCycles(self.clk, self.divisor)
            if int(self.tx.value) == 1:
                self.received.append(byte)
            else:
                self.framing_errors += 1
            await ClockCycles(self.clk, self.divisor // 2)


class UartTransport:
    """The host link's byte pipe over a :class:`UartModel`, in simulated time.

    Parameters
    ----------
    uart : UartModel
    clock_hz : float
        The frequency of the DUT's clock in simulated time: a byte takes ``10 *
        divisor / clock_hz`` seconds (:attr:`byte_seconds`), and a read's timeout
        counts simulated seconds.
    idle_bytes : int
        A read that has bytes returns once the line has been quiet this many byte
        times (a response comes back to back, so it is returned whole).
    """

    def __init__(self, uart: UartModel, clock_hz: float, *, idle_bytes: int = 8) -> None:
        self.uart = uart
        self.byte_seconds = 10 * uart.divisor / clock_hz
        self.idle_bytes = idle_bytes

    def write(self, data: bytes) -> None:
        resume(self.uart.send)(data)

    def read(self, size: int, timeout: float) -> bytes:
        return resume(self._read)(size, timeout)

    async def _read(self, size: int, timeout: float) -> bytes:
        clk, cycles = self.uart.clk, 10 * self.uart.divisor
        rx = self.uart.received
        waited, limit = 0, max(1, int(timeout / self.byte_seconds))
        while not rx and waited < limit:
            await ClockCycles(clk, cycles)
            waited += 1
        quiet = 0
        while rx and len(rx) < size and quiet < self.idle_bytes:
            have = len(rx)
            await ClockCycles(clk, cycles)
            quiet = 0 if len(rx) > have else quiet + 1
        return bytes(rx.popleft() for _ in range(min(size, len(rx))))

    def discard_input(self) -> None:
        self.uart.received.clear()

    def close(self) -> None:
        pass


__all__ = ["UartModel", "UartTransport"]
