"""cocotb testbench of the SoC top: programs run through the UART host bridge.

The job file (``TENSORFAB_SOC_JOB``) lists program binaries. For each, the host
driver (:class:`hw.uart_model.UartHostLink`, bit-level UART) resets the core,
writes the DRAM image, starts the program, polls STATUS, then reads back the whole
image and the counters, and writes them to the job's output folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from hw.uart_model import UartHostLink, UartModel
from tensorfab.isa import Program
from tensorfab.isa import hostlink as hl
from tensorfab.sim.testing.cocotb_runner import params_from_env


@cocotb.test()
async def run_programs(dut) -> None:
    params = params_from_env()
    job = json.loads(Path(os.environ["TENSORFAB_SOC_JOB"]).read_text())
    out = Path(job["out"])
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    uart = UartModel(dut.clk, dut.uart_rx, dut.uart_tx, params["divisor"])
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 4)
    link = UartHostLink(uart)
    info = await link.info()
    assert info.mem_bytes == params["mem_bytes"], info
    # a corrupted frame is refused and changes nothing
    bad = bytearray(hl.request(200, hl.Command.WRITE_MEM, 0, data=bytes(info.beat_bytes)))
    bad[-1] ^= 1
    await uart.send(bytes(bad))
    assert await uart.wait_bytes(hl.HEADER_BYTES + 2 + hl.CRC_BYTES, 400)
    frame = link.reader.feed(bytes(uart.received))[0]
    uart.received.clear()
    assert frame.cmd == hl.NAK and frame.payload[0] == hl.NakReason.BAD_CRC, frame
    for k, item in enumerate(job["programs"]):
        prog = Program.from_bytes(Path(item["binary"]).read_bytes())
        image = prog.dram_image()
        size = -(-image.size // info.beat_bytes) * info.beat_bytes
        data = np.zeros(size, np.uint8)
        data[:image.size] = image
        await link.reset()
        await link.write_mem(0, data.tobytes())
        await link.start(0, len(prog.insns), size)
        if k == 0:
            # a retried START (its response lost) is answered, and the core runs once
            assert await link.retry() == b""
        polls = 0
        while True:
            st = await link.status()
            if st.done or st.error or polls > item["max_polls"]:
                break
            polls += 1
        got = np.frombuffer(await link.read_mem(0, size), np.uint8)[:image.size]
        csrs = {"STATUS": st.status, "ERROR_CODE": st.error_code,
                "ERROR_INDEX": st.error_index} | await link.counters()
        np.save(out / f"{k}.dram.npy", got)
        (out / f"{k}.json").write_text(json.dumps({
            "csrs": csrs, "timed_out": not (st.done or st.error), "polls": polls}))
    assert uart.framing_errors == 0
