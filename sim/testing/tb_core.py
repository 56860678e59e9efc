"""cocotb testbench of the whole core: runs program binaries and dumps what it finds.

Parameters come from ``TENSORFAB_PARAMS`` (the build's) and ``TENSORFAB_CORE_JOB`` (a
JSON file written by :mod:`tensorfab.sim.testing.core_harness`): a list of programs,
each with its binary, memory-model settings and a cycle limit. For each program the
testbench loads the DRAM image, programs the CSRs, starts the core, clocks it until
STATUS reports done or error (or the limit), then writes the final DRAM image and every
CSR to the job's output folder. The pytest side compares them with the functional
simulator.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly

from tensorfab.isa import CSR_BY_NAME, CSRS, Program
from tensorfab.isa.csr import STATUS_DONE, STATUS_ERROR
from tensorfab.sim.testing.cocotb_memory import MemModel


async def csr_write(dut, name: str, value: int) -> None:
    await FallingEdge(dut.clk)
    dut.csr__addr.value = CSR_BY_NAME[name].offset
    dut.csr__w_data.value = value
    dut.csr__w_en.value = 1
    await FallingEdge(dut.clk)
    dut.csr__w_en.value = 0


async def csr_read(dut, name: str) -> int:
    await FallingEdge(dut.clk)
    dut.csr__addr.value = CSR_BY_NAME[name].offset
    await ReadOnly()
    return int(dut.csr__r_data.value.to_unsigned())


@cocotb.test()
async def run_programs(dut) -> None:
    job = json.loads(Path(os.environ["TENSORFAB_CORE_JOB"]).read_text())
    out = Path(job["out"])
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.csr__w_en.value = 0
    dut.csr__addr.value = 0
    dut.csr__w_data.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    for k, item in enumerate(job["programs"]):
        prog = Program.from_bytes(Path(item["binary"]).read_bytes())
        image = np.load(item["image"]) if item.get("image") else prog.dram_image()
        # a fresh reset and memory per program: an error may leave reads in flight
        await FallingEdge(dut.clk)
        dut.rst.value = 1
        await ClockCycles(dut.clk, 2)
        dut.rst.value = 0
        mem = MemModel(dut, prog.config, prefix="mem__", size=image.size,
                       seed=job["seed"] + k, latency=tuple(job["latency"]),
                       cmd_ready=job["p_ready"], wdata_ready=job["p_ready"],
                       rdata_valid=job["p_ready"])
        mem.data[:] = image
        mem.start()
        await csr_write(dut, "INSN_BASE", 0)
        await csr_write(dut, "INSN_COUNT", len(prog.insns))
        await csr_write(dut, "DRAM_SIZE", image.size)
        await csr_write(dut, "CTRL", 1)
        cycles = 0
        status = 0
        while cycles < item["max_cycles"]:
            await ClockCycles(dut.clk, 16)
            cycles += 16
            status = await csr_read(dut, "STATUS")
            if status & (STATUS_DONE | STATUS_ERROR):
                break
        csrs = {c.name: await csr_read(dut, c.name) for c in CSRS}
        if status & STATUS_DONE:
            await mem.wait_idle(timeout=1000)
        mem.stop()
        np.save(out / f"{k}.dram.npy", mem.data.copy())
        (out / f"{k}.json").write_text(json.dumps({
            "csrs": csrs, "timed_out": not status & (STATUS_DONE | STATUS_ERROR),
            "mem_bytes_read": mem.bytes_read, "mem_bytes_written": mem.bytes_written}))
