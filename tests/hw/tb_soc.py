"""cocotb testbench of the SoC top: programs run through the UART host bridge by the
host side of a board.

The job file (``TENSORFAB_SOC_JOB``) lists program binaries. A
:class:`~tensorfab.hil.board.BoardDevice` over a :class:`~tensorfab.hil.link.HostLink`
runs each, exactly as on a board, its bytes carried by the bit-level UART model
(:class:`hw.uart_model.UartTransport`, from a :func:`cocotb.task.bridge` thread): reset
the core, write the DRAM image, START, poll STATUS, read the counters and the whole
image back. The testbench writes the image and the CSRs (or the error) of each program
to the job's output folder. On the way, a corrupted request must be refused with a NAK,
and the response to the first START is lost, so the link's retry (the same bytes) must
be answered without starting the core twice.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.task import bridge
from cocotb.triggers import ClockCycles

from hw.uart_model import UartModel, UartTransport
from tensorfab.hil.board import BoardDevice
from tensorfab.hil.link import HostLink
from tensorfab.isa import Program, TensorfabError
from tensorfab.isa import hostlink as hl
from tensorfab.sim.testing.cocotb_runner import params_from_env

#: Period of the DUT's clock (ns); the link's times are simulated seconds of it.
CLOCK_NS = 10
#: A response's timeout beyond its own bytes, in byte times.
TIMEOUT_BYTES = 200


class LoseResponse:
    """A transport that loses the response to the first request of ``cmd`` on its way
    back to the host (it reads and drops that frame), as a noisy line would."""

    def __init__(self, inner: UartTransport, cmd: hl.Command) -> None:
        self.inner = inner
        self.cmd = cmd
        self.byte_seconds = inner.byte_seconds
        self.lost = 0
        self._armed = False

    def write(self, data: bytes) -> None:
        if not self.lost and hl.decode_frame(data).cmd == self.cmd:
            self._armed = True
        self.inner.write(data)

    def read(self, size: int, timeout: float) -> bytes:
        if not self._armed:
            return self.inner.read(size, timeout)
        reader = hl.FrameReader()
        while True:
            chunk = self.inner.read(size, timeout)
            if not chunk or reader.feed(chunk):
                break
        self._armed = False
        self.lost += 1
        return b""

    def discard_input(self) -> None:
        self.inner.discard_input()

    def close(self) -> None:
        self.inner.close()


def host(uart: UartModel, params: dict[str, Any], job: dict[str, Any]) -> None:
    """The host side, in a bridge thread: every wait on the link advances the simulation."""
    out = Path(job["out"])
    transport = UartTransport(uart, 1e9 / CLOCK_NS)
    lossy = LoseResponse(transport, hl.Command.START)
    link = HostLink(lossy, timeout=TIMEOUT_BYTES * transport.byte_seconds)
    board = BoardDevice(link, run_timeout=job["run_timeout"], name="cocotb")
    assert board.info.mem_bytes == params["mem_bytes"], board.info
    # a corrupted frame is refused and changes nothing
    bad = bytearray(hl.request(200, hl.Command.WRITE_MEM, 0,
                               data=bytes(board.info.beat_bytes)))
    bad[-1] ^= 1
    transport.write(bytes(bad))
    reader = hl.FrameReader()
    frames: list[hl.Frame] = []
    while not frames:
        chunk = transport.read(64, TIMEOUT_BYTES * transport.byte_seconds)
        assert chunk, "no NAK to a corrupted request"
        frames = reader.feed(chunk)
    assert frames[0].cmd == hl.NAK and frames[0].payload[0] == hl.NakReason.BAD_CRC, frames
    for k, item in enumerate(job["programs"]):
        prog = Program.from_bytes(Path(item["binary"]).read_bytes())
        try:
            result = board.run(prog)
        except TensorfabError as exc:
            (out / f"{k}.json").write_text(json.dumps(
                {"error": f"{type(exc).__name__}: {exc}"}))
            continue
        np.save(out / f"{k}.dram.npy", result.dram)
        (out / f"{k}.json").write_text(json.dumps({"csrs": result.csrs}))
    # the first START's response was lost: its retry, the same bytes, was answered
    assert lossy.lost == 1, lossy.lost
    assert link.stats.retries == link.stats.recovered == 1, link.stats
    assert link.stats.reported == 0, link.stats


@cocotb.test()
async def run_programs(dut) -> None:
    params = params_from_env()
    job = json.loads(Path(os.environ["TENSORFAB_SOC_JOB"]).read_text())
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    dut.rst.value = 1
    uart = UartModel(dut.clk, dut.uart_rx, dut.uart_tx, params["divisor"])
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 4)
    await bridge(host)(uart, params, job)
    assert uart.framing_errors == 0
