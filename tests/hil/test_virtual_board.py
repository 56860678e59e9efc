"""What is particular to the virtual board (SoC in Verilator) behind the host-link
client and BoardDevice: its target name, resident memory, a config mismatch, a reset
mid-run, the recorded traffic. The programs themselves run on it in the device suite
(test_device_suite.py, whose default device it is, with and without link faults)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from support.device_compare import assert_same_as_fsim
from support.isa_programs import directed_programs

from tensorfab.hil.board import BoardDevice
from tensorfab.hil.errors import BoardConfigMismatch, BoardResetError
from tensorfab.hil.link import HostLink
from tensorfab.hil.targets import VirtualBoardDevice
from tensorfab.hil.transport import RecordingTransport, ReplayTransport
from tensorfab.hil.virtual import DirectMemory, InProcessTransport, SocSpec, VirtualBoard
from tensorfab.isa import PRESETS
from tensorfab.isa.device import open_device
from tensorfab.isa.errors import UsageError
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import ONCHIP_MEMORY, RtlSimulator
from tensorfab.sim.testing.random_program import random_program

CFG = PRESETS["tiny"]
MEM = 1 << 16
FIXTURE = Path(__file__).parent / "fixtures" / "gemm_tiny.link.json"


@pytest.fixture(scope="module")
def board() -> VirtualBoardDevice:
    return VirtualBoardDevice(mem_bytes=MEM)


def test_virtual_target_by_name() -> None:
    dev = open_device("virtual", mem_bytes=MEM)
    assert isinstance(dev, VirtualBoardDevice)


def test_resident_memory_keeps_weights(board: VirtualBoardDevice) -> None:
    """Written once, the memory serves two runs (each after a core reset)."""
    prog = directed_programs(CFG)["gemm_vt2"]
    ref = FunctionalSimulator().run(prog)
    with board.open_memory(CFG, MEM) as mem:
        mem.write(0, prog.dram_image())
        written = mem.host_bytes_written
        for _ in range(2):
            result = mem.run(prog)
            assert result.cycles and result.dram is None
            assert np.array_equal(mem.read(0, ref.dram.size), ref.dram)
        assert mem.host_bytes_written == written
        got = mem.read(0, 8)
        # unaligned partial access: read-modify-write on the board
        mem.write(3, np.array([1, 2, 3], np.uint8))
        assert mem.read(2, 5).tolist() == [got[2], 1, 2, 3, got[6]]


def test_direct_memory_refuses_on_chip_memory(board: VirtualBoardDevice) -> None:
    """On-chip memory is inside the Verilated model, reached over the link only: direct
    access is refused, naming why."""
    vb = board.device(CFG).link.transport.board  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="needs a virtual board with SDRAM"):
        DirectMemory(vb)
    with pytest.raises(UsageError, match="needs a virtual board with SDRAM"):
        vb.read_memory(0, 8)


def test_config_mismatch_names_both() -> None:
    vb = VirtualBoard(SocSpec.for_board(None, CFG, mem_bytes=MEM))
    dev = BoardDevice(HostLink(InProcessTransport(vb)))
    other = directed_programs(PRESETS["small"])["gemm_vt2"]
    with pytest.raises(BoardConfigMismatch, match=r"the board runs tiny \(CRC .*the program "
                       r"is for small"):
        dev.run(other)


def test_reset_mid_run_is_an_error_not_a_result() -> None:
    prog = directed_programs(CFG)["gemm_vt2"]
    vb = VirtualBoard(SocSpec.for_board(None, CFG, mem_bytes=MEM))
    transport = InProcessTransport(vb)
    link = HostLink(transport, timeout=64 * transport.byte_seconds)
    dev = BoardDevice(link)
    start = link.start

    def start_then_reset(*args: int) -> None:
        start(*args)
        transport.press_reset_at(vb.cycle + 20)  # the board's button, while it runs

    link.start = start_then_reset  # type: ignore[method-assign]
    with pytest.raises(BoardResetError, match="reset while tiny's program ran"):
        dev.run(prog)


def test_recorded_traffic_replays_without_a_simulator(tmp_path: Path) -> None:
    """The committed fixture replays the host side; recording it again gives the same
    bytes (so the fixture stays true to the gateware)."""
    prog = directed_programs(CFG)["gemm_vt2"]
    vb = VirtualBoard(SocSpec.for_board(None, CFG, mem_bytes=MEM))
    rec = RecordingTransport(InProcessTransport(vb), tmp_path / "rec.json")
    BoardDevice(HostLink(rec)).run(prog)
    rec.save()
    fresh = (tmp_path / "rec.json").read_text()
    if os.environ.get("TENSORFAB_RERECORD") == "1":
        FIXTURE.write_text(fresh)
    assert fresh == FIXTURE.read_text(), ("the recorded link traffic changed: re-record it "
                                          "with TENSORFAB_RERECORD=1")


def test_replay_fixture_runs_the_host_side() -> None:
    prog = directed_programs(CFG)["gemm_vt2"]
    replay = ReplayTransport(FIXTURE)
    got = BoardDevice(HostLink(replay)).run(prog)
    assert_same_as_fsim(prog, got, "replay")
    assert replay.finished


def test_memory_transfers_report_their_progress_block_by_block() -> None:
    """What ``tensorfab run`` shows while a model's memory moves over the link: after
    each block, the bytes done of the whole transfer, up to all of them."""
    prog = directed_programs(CFG)["gemm_vt2"]
    link = HostLink(ReplayTransport(FIXTURE))
    seen: list[tuple[str, int, int]] = []
    link.transfer_progress = lambda kind, done, total: seen.append((kind, done, total))
    BoardDevice(link).run(prog)
    for kind in ("write", "read"):
        steps = [(done, total) for k, done, total in seen if k == kind]
        (total,) = {t for _, t in steps}
        done = [d for d, _ in steps]
        assert done == sorted(set(done)) and done[-1] == total, kind
        assert len(done) == -(-total // link.max_block), kind
    assert [k for k, _, _ in seen] == sorted(k for k, _, _ in seen)[::-1]  # writes first


def test_a_virtual_board_passes_its_transfer_progress_to_each_link(
        board: VirtualBoardDevice) -> None:
    seen: list[tuple[str, int, int]] = []
    board.transfer_progress = lambda kind, done, total: seen.append((kind, done, total))
    try:
        board.run(directed_programs(CFG)["gemm_vt2"])
    finally:
        board.transfer_progress = None
    assert {k for k, _, _ in seen} == {"write", "read"}
    assert all(0 < done <= total for _, done, total in seen)
    assert board.device(CFG).link.transfer_progress is None


def test_board_cycles_equal_the_rtl_executor_with_the_socs_memory(board) -> None:
    """The virtual board's CYCLES (its own counter, read over the link) equal the RTL
    executor's with the on-chip memory model, program for program."""
    progs = [*directed_programs(CFG).values()][:12] + [random_program(CFG, s)
                                                         for s in range(4)]
    rtl = RtlSimulator(ONCHIP_MEMORY)
    assert [board.run(p).cycles for p in progs] == [rtl.run(p).cycles for p in progs]


def test_an_image_larger_than_the_board_names_the_board(board: VirtualBoardDevice) -> None:
    """`sim big.bin --target socket://...` said 'the program's DRAM image has 95344
    bytes, the board's memory 8192' without naming the board (`run` does)."""
    from tensorfab.isa import ProgramError

    dev = board.device(CFG)
    prog = directed_programs(CFG)["gemm_vt2"]
    with pytest.raises(ProgramError, match=rf"^{re.escape(dev.name)}: the program's DRAM image has "
                                           rf"{MEM + 64} bytes, more than the board's memory "
                                           rf"of {MEM}"):
        dev.run(prog, np.zeros(MEM + 64, np.uint8))
