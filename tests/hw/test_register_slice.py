"""RegisterSlice (its tail in flip-flops or in block RAM) and AlternatingSlice against
Amaranth's SyncFIFO of the same depth and a deque, cycle by cycle."""

from __future__ import annotations

import pytest
from amaranth.hdl import Module
from amaranth.lib.fifo import SyncFIFO

from tensorfab.hw.register_slice import AlternatingSlice, RegisterSlice

from .fifo_stimulus import run_fifo_stimulus


@pytest.mark.parametrize(("depth", "seed", "block_ram"),
                         [(2, 0, False), (2, 1, False), (2, 2, False), (3, 0, False),
                          (3, 1, False), (5, 0, False), (16, 0, False),
                          (3, 0, True), (3, 1, True), (5, 0, True), (16, 0, True),
                          (16, 1, True)])
def test_register_slice_is_a_fifo(depth: int, seed: int, block_ram: bool) -> None:
    m = Module()
    m.submodules.dut = dut = RegisterSlice(8, depth, block_ram=block_ram)
    m.submodules.ref = ref = SyncFIFO(width=8, depth=depth)

    def head(ctx, model, last) -> None:  # the queue's first entry shows while not empty
        if model:
            assert ctx.get(dut.r_data) == ctx.get(ref.r_data) == model[0]

    seen = run_fifo_stimulus(m, dut, ref, depth, seed, head)
    assert all(seen.values()), seen  # every situation occurred


def test_register_slice_needs_two_entries() -> None:
    with pytest.raises(ValueError, match="depth = 1"):
        RegisterSlice(8, 1)


def test_register_slice_in_block_ram_needs_three_entries() -> None:
    with pytest.raises(ValueError, match="depth = 2; at least 3 in block RAM"):
        RegisterSlice(8, 2, block_ram=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alternating_slice_is_a_fifo(seed: int) -> None:
    m = Module()
    m.submodules.dut = dut = AlternatingSlice(8)
    m.submodules.ref = ref = SyncFIFO(width=8, depth=2)

    def head(ctx, model, last) -> None:  # the queue's first entry shows while not empty
        if model:
            assert ctx.get(dut.r_data) == ctx.get(ref.r_data) == model[0]

    seen = run_fifo_stimulus(m, dut, ref, 2, seed, head)
    assert all(seen.values()), seen  # every situation occurred
