"""The virtual board with its device memory in SDRAM: the SoC's SDRAM controller (the
one the ULX3S bitstreams hold) in Verilator, the chip modelled in the harness with its
timing rules checked. Programs are bit-exact against fsim; the memory stalls it adds
are measured against the RTL executor's ideal memory."""

from __future__ import annotations

import numpy as np
import pytest
from support.device_compare import assert_same_as_fsim
from support.isa_programs import directed_programs

from tensorfab.hil.board import BoardDevice
from tensorfab.hil.targets import VirtualBoardDevice
from tensorfab.hil.virtual import DirectMemory
from tensorfab.isa import PRESETS
from tensorfab.isa.device import open_device
from tensorfab.isa.errors import UsageError
from tensorfab.sim.rtl import RtlSimulator
from tensorfab.sim.testing.random_program import random_program

CFG = PRESETS["tiny"]


@pytest.fixture(scope="module")
def board() -> VirtualBoardDevice:
    return VirtualBoardDevice(sdram=True)


def test_sdram_target_by_name() -> None:
    dev = open_device("virtual://?sdram=1")
    assert isinstance(dev, VirtualBoardDevice) and dev.sdram
    assert dev.memory_bytes(CFG) == 1 << CFG.dram_addr_width  # 16 MB of the 32 MB chip


@pytest.mark.slow
def test_programs_on_sdram_match_fsim(board: VirtualBoardDevice) -> None:
    """The directed suite and random programs, bit-exact against fsim; the chip saw no
    timing violation; the stalls against the ideal memory are bounded."""
    progs = {**directed_programs(CFG),
             **{f"random{s}": random_program(CFG, s) for s in range(6)}}
    ideal = RtlSimulator()
    cycles = ideal_cycles = 0
    for name, prog in progs.items():
        got = board.run(prog)
        assert_same_as_fsim(prog, got, f"virtual sdram {name}")
        cycles += got.cycles
        ideal_cycles += ideal.run(prog).cycles
    vb = board.device(CFG).link.transport.board  # type: ignore[attr-defined]
    assert vb.sdram_violations == (0, "")
    assert vb.sdram_commands > 100
    ratio = cycles / ideal_cycles
    print(f"SDRAM / ideal memory cycles: {cycles} / {ideal_cycles} = {ratio:.3f}")
    assert 1.0 <= ratio < 3.0


def test_direct_memory_needs_sdram() -> None:
    with pytest.raises(UsageError, match="direct_memory needs sdram"):
        open_device("virtual://?direct_memory=1")
    dev = open_device("virtual://?sdram=1&direct_memory=1")
    assert isinstance(dev, VirtualBoardDevice) and dev.direct_memory


@pytest.mark.slow
def test_direct_memory_is_the_memory_the_link_reaches(board: VirtualBoardDevice) -> None:
    """Bytes written directly into the chip read back over the host link (through the
    bridge and the SDRAM controller) and the other way round, at odd addresses and
    lengths; a program whose image goes in and out directly runs as on fsim."""
    dev = board.device(CFG)
    vb = dev.link.transport.board  # type: ignore[attr-defined]
    direct = DirectMemory(vb)
    rng = np.random.default_rng(5)
    beat = CFG.mem_bus_bytes
    for addr, n in ((0, 64), (3 * beat + 1, 37), ((1 << 20) + 6, 200)):
        data = rng.integers(0, 256, n, np.uint8).tobytes()
        direct.write_mem(addr, data)
        lo, hi = addr // beat * beat, -(-(addr + n) // beat) * beat
        assert dev.link.read_mem(lo, hi - lo)[addr - lo: addr - lo + n] == data
        block = rng.integers(0, 256, hi - lo, np.uint8).tobytes()
        dev.link.write_mem(lo, block)
        assert direct.read_mem(lo, hi - lo) == block
        assert direct.read_mem(addr, n) == block[addr - lo: addr - lo + n]
    with pytest.raises(UsageError, match="past the SDRAM chip's end"):
        direct.read_mem((32 << 20) - 4, 8)
    fast = BoardDevice(dev.link, name="virtual", memory=direct)
    prog = random_program(CFG, 11)
    assert_same_as_fsim(prog, fast.run(prog), "virtual sdram, direct memory")
    assert vb.sdram_violations == (0, "")

