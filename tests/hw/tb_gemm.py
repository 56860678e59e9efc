"""cocotb testbench of :class:`tensorfab.hw.gemm.GemmCore` against numpy."""

from __future__ import annotations

import random
from collections.abc import Collection

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge

from hw.pipeline_driver import drive_pipeline, reset_pipeline
from hw.vectors import pack, unpack
from tensorfab.isa import PRESETS, HwConfig
from tensorfab.sim.testing.cocotb_runner import params_from_env

Tile = tuple[np.ndarray, np.ndarray, np.ndarray]


def gemm_reference(inp: np.ndarray, wgt: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """``acc + inp @ wgt.T`` in int64, wrapped to int32."""
    r = acc.astype(np.int64) + inp.astype(np.int64) @ wgt.astype(np.int64).T
    return ((r + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


def wgt_port(wgt: np.ndarray) -> np.ndarray:
    """The weight buffer's format the core takes: column-major, sign bits inverted."""
    return wgt.T.view(np.uint8) ^ 0x80


def tiles(cfg: HwConfig, rng: np.random.Generator, count: int) -> list[Tile]:
    """Random tiles, plus extremes: all -128 (largest positive sums), mixed
    -128/127, and accumulators near the int32 limits so the sum wraps."""
    shape_i = (cfg.batch, cfg.block_in)
    shape_w = (cfg.block_out, cfg.block_in)
    shape_a = (cfg.batch, cfg.block_out)
    out: list[Tile] = [
        (np.full(shape_i, -128), np.full(shape_w, -128), np.full(shape_a, (1 << 31) - 1)),
        (np.full(shape_i, -128), np.full(shape_w, 127), np.full(shape_a, -(1 << 31))),
        (np.full(shape_i, 127), np.full(shape_w, 127), np.zeros(shape_a)),
        (np.zeros(shape_i), np.zeros(shape_w), np.full(shape_a, -1)),
    ]
    for i in range(count):
        inp = rng.integers(-128, 128, shape_i)
        wgt = rng.integers(-128, 128, shape_w)
        if i % 3 == 0:
            acc = rng.integers(-(1 << 31), 1 << 31, shape_a)
        else:
            acc = rng.integers(-1000, 1000, shape_a)
        out.append((inp, wgt, acc))
    return [(i.astype(np.int8), w.astype(np.int8), a.astype(np.int32)) for i, w, a in out]


async def run_stream(dut, cfg: HwConfig, work: list[Tile], gaps: random.Random | None = None,
                     clears: Collection[int] = ()) -> None:
    """Drive tiles (back to back or with idle cycles) and compare every result; the
    tiles numbered in ``clears`` enter with ``in_clear`` (result 0, ``acc_out`` their
    accumulators)."""
    shape_a = (cfg.batch, cfg.block_out)
    lanes = shape_a[0] * shape_a[1]
    items = [(n, tile) for n, tile in enumerate(work)]

    def apply(item: tuple[int, Tile]) -> None:
        n, (inp, wgt, acc) = item
        dut.inp.value = pack(inp, "<i1")
        dut.wgt.value = pack(wgt_port(wgt), "<u1")
        dut.acc_in.value = pack(acc, "<i4")
        dut.in_clear.value = int(n in clears)

    def capture() -> tuple[np.ndarray, np.ndarray]:
        return (unpack(dut.acc_out.value.to_unsigned(), "<i4", lanes).reshape(shape_a),
                unpack(dut.result.value.to_unsigned(), "<i4", lanes).reshape(shape_a))

    outputs = await drive_pipeline(dut, items, apply, capture, gaps=gaps, max_idle=30)
    for n, ((inp, wgt, acc), (acc_out, result)) in enumerate(zip(work, outputs, strict=True)):
        if n in clears:
            inp, wgt = np.zeros_like(inp), np.zeros_like(wgt)
        want = gemm_reference(inp, wgt, acc)
        assert np.array_equal(want, acc_out), f"tile #{n}: want\n{want}\ngot\n{acc_out}"
        want = gemm_reference(inp, wgt, np.zeros_like(result))
        assert np.array_equal(want, result), f"tile #{n} result: want\n{want}\ngot\n{result}"


async def reset(dut) -> None:
    """Start the clock and hold reset for two cycles."""
    await reset_pipeline(dut, (dut.inp, dut.wgt, dut.acc_in, dut.in_clear))


def _cfg() -> HwConfig:
    return PRESETS[params_from_env()["preset"]]


@cocotb.test()
async def gemm_latency(dut) -> None:
    """A single tile comes out exactly ``latency`` cycles after it went in."""
    cfg = _cfg()
    latency = params_from_env()["latency"]
    await reset(dut)
    inp, wgt, acc = tiles(cfg, np.random.default_rng(0), 1)[-1]
    await FallingEdge(dut.clk)
    dut.inp.value = pack(inp, "<i1")
    dut.wgt.value = pack(wgt_port(wgt), "<u1")
    dut.acc_in.value = pack(acc, "<i4")
    dut.in_valid.value = 1
    await FallingEdge(dut.clk)
    dut.in_valid.value = 0
    for cycle in range(1, latency + 3):
        if cycle == latency:
            assert int(dut.out_valid.value), f"no result after {latency} cycles"
            have = unpack(dut.acc_out.value.to_unsigned(), "<i4", cfg.batch * cfg.block_out)
            assert np.array_equal(have.reshape(cfg.batch, cfg.block_out),
                                  gemm_reference(inp, wgt, acc))
        else:
            assert not int(dut.out_valid.value), f"unexpected result at cycle {cycle}"
        await FallingEdge(dut.clk)


@cocotb.test()
async def gemm_back_to_back(dut) -> None:
    """Random and extreme tiles, one per cycle."""
    cfg = _cfg()
    await reset(dut)
    await run_stream(dut, cfg, tiles(cfg, np.random.default_rng(1), 200))


@cocotb.test()
async def gemm_with_gaps(dut) -> None:
    """Random tiles with idle cycles between them."""
    cfg = _cfg()
    await reset(dut)
    await run_stream(dut, cfg, tiles(cfg, np.random.default_rng(2), 60), gaps=random.Random(3))


@cocotb.test()
async def gemm_clear(dut) -> None:
    """Tiles entering with ``in_clear`` among others (runs of them and single ones, with
    and without idle cycles) give a zero product; their neighbours theirs."""
    cfg = _cfg()
    await reset(dut)
    rng = random.Random(4)
    work = tiles(cfg, np.random.default_rng(5), 80)
    clears = {n for n in range(len(work)) if rng.random() < 0.3} | {10, 11, 12}
    await run_stream(dut, cfg, work, clears=clears)
    await run_stream(dut, cfg, work, gaps=random.Random(6), clears=clears)
