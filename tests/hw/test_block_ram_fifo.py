"""BlockRamFifo against Amaranth's SyncFIFO followed by a register loaded on each read,
and a deque, cycle by cycle; and the memory Yosys maps to iCE40 block RAM."""

from __future__ import annotations

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib.fifo import SyncFIFO

from tensorfab.hw.block_ram_fifo import BlockRamFifo

from .fifo_stimulus import run_fifo_stimulus


@pytest.mark.parametrize(("depth", "seed"), [(2, 0), (2, 1), (3, 0), (5, 1), (8, 0), (8, 1)])
def test_block_ram_fifo_is_a_fifo_read_into_a_register(depth: int, seed: int) -> None:
    m = Module()
    m.submodules.dut = dut = BlockRamFifo(8, depth, ram_style="block")
    m.submodules.ref = ref = SyncFIFO(width=8, depth=depth)
    ref_out = Signal(8)  # the reference's read register
    with m.If(ref.r_en & ref.r_rdy):
        m.d.sync += ref_out.eq(ref.r_data)

    def last_read(ctx, model, last) -> None:  # the entry of the last read is held
        if last is not None:
            assert ctx.get(dut.r_data) == ctx.get(ref_out) == last

    seen = run_fifo_stimulus(m, dut, ref, depth, seed, last_read)
    assert all(seen.values()), seen  # every situation occurred


def test_block_ram_fifo_needs_two_entries() -> None:
    with pytest.raises(ValueError, match=r"depth = 1; at least 2"):
        BlockRamFifo(8, 1)


def test_fetch_sized_fifo_maps_to_ice40_block_ram(tmp_path) -> None:
    """Eight 128-bit words (the fetch buffer of `up5k`) in 8 EBRs (256 × 16 each),
    with no flip-flop per stored bit: only pointers, level and control remain."""
    import json
    import os
    import subprocess

    from amaranth.back import rtlil

    from tensorfab.fpga_builds.flow import yowasp_env

    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    (tmp_path / "fifo.il").write_text(rtlil.convert(BlockRamFifo(128, 8, ram_style="block"),
                                                    name="top"))
    (tmp_path / "s.ys").write_text("read_rtlil fifo.il\nsynth_ice40 -top top\n"
                                   "tee -q -o stat.json stat -json\n")
    env = yowasp_env()
    subprocess.run([env["YOSYS"], "-q", "-s", "s.ys"], cwd=tmp_path, env=env, check=True,
                   capture_output=True, timeout=300)
    cells = json.loads((tmp_path / "stat.json").read_text())["design"]["num_cells_by_type"]
    assert cells.get("SB_RAM40_4K") == 8
    flip_flops = sum(n for kind, n in cells.items() if kind.startswith("SB_DFF"))
    assert flip_flops < 32, cells
