"""A bit-level UART model for cocotb and a host-link driver on top of it.

:class:`UartModel` drives the DUT's receive line and decodes its transmit line, one
cocotb wait per bit (not per clock), so a simulated board costs little Python.
:class:`UartHostLink` speaks :mod:`tensorfab.isa.hostlink` through it: the same
requests a host sends a real board over its serial port.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import cocotb
from cocotb.triggers import ClockCycles, Edge

from tensorfab.isa import hostlink as hl


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

    async def wait_bytes(self, n: int, timeout_bits: int) -> bool:
        """Wait until ``n`` bytes are buffered or ``timeout_bits`` bit times pass."""
        waited = 0
        while len(self.received) < n and waited < timeout_bits:
            await ClockCycles(self.clk, self.divisor * 10)
            waited += 10
        return len(self.received) >= n


class UartHostLink:
    """Host-link requests over a :class:`UartModel`, with timeouts and sequence numbers."""

    def __init__(self, uart: UartModel, *, timeout_bytes: int = 2 * hl.MAX_FRAME) -> None:
        self.uart = uart
        self.seq = 0
        self.timeout_bytes = timeout_bytes
        self.reader = hl.FrameReader()
        self.last: tuple[bytes, hl.Command, tuple[int, ...]] | None = None

    async def call(self, cmd: hl.Command, *args: int, data: bytes = b"") -> bytes:
        """Send one request and return its response payload.

        Raises
        ------
        NakError, ResponseMismatch
            As :func:`tensorfab.isa.hostlink.response_payload`.
        TimeoutError
            No complete response within ``timeout_bytes`` byte times.
        """
        self.seq = (self.seq + 1) & 0xFF
        self.last = (hl.request(self.seq, cmd, *args, data=data), cmd, args)
        return await self.retry()

    async def retry(self) -> bytes:
        """Send the last request again, the very same bytes (the host link's retry)."""
        frame, cmd, args = self.last
        await self.uart.send(frame)
        waited = 0
        while waited < self.timeout_bytes:
            frames = self.reader.feed(bytes(self.uart.received))
            self.uart.received.clear()
            if frames:
                return hl.response_payload(frames[0], self.seq, cmd, *args)
            await ClockCycles(self.uart.clk, self.uart.divisor * 10)
            waited += 1
        raise TimeoutError(f"no response to {cmd.name} (seq {self.seq}) within "
                           f"{self.timeout_bytes} byte times")

    async def info(self) -> hl.LinkInfo:
        return hl.LinkInfo.unpack(await self.call(hl.Command.INFO))

    async def write_mem(self, addr: int, data: bytes) -> None:
        for off in range(0, len(data), hl.MAX_DATA):
            await self.call(hl.Command.WRITE_MEM, addr + off, data=data[off:off + hl.MAX_DATA])

    async def read_mem(self, addr: int, n: int) -> bytes:
        out = bytearray()
        for off in range(0, n, hl.MAX_DATA):
            k = min(hl.MAX_DATA, n - off)
            out += await self.call(hl.Command.READ_MEM, addr + off, k)
        return bytes(out)

    async def start(self, insn_base: int, insn_count: int, dram_size: int) -> None:
        await self.call(hl.Command.START, insn_base, insn_count, dram_size)

    async def status(self) -> hl.LinkStatus:
        return hl.LinkStatus(*hl.u32s(await self.call(hl.Command.STATUS)))

    async def counters(self) -> dict[str, int]:
        return dict(zip(hl.COUNTER_CSRS, hl.u32s(await self.call(hl.Command.COUNTERS)),
                        strict=True))

    async def reset(self) -> None:
        await self.call(hl.Command.RESET)


__all__ = ["UartHostLink", "UartModel"]
