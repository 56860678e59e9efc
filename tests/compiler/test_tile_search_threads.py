"""The tile search over several thread counts: it keeps the fastest count's tiling,
validates the counts, falls back to fewer threads, and compiles programs equal to a
numpy convolution; ResNet-18's stem (the host im2col's 1×1 convolution) gets within
2 % of its micro-op floor. The micro-op kernels equal an explicit unrolling."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tensorfab.compiler import Epilogue, Workload, conv2d, default_schedule
from tensorfab.compiler.graph.accel_lowering import model_vthreads
from tensorfab.compiler.tensor import tile_search
from tensorfab.compiler.tensor.lower import plan_instructions
from tensorfab.compiler.tensor.schedule import ScheduleError
from tensorfab.compiler.tensor.tensorize import Dim, choose_loops, make_kernel
from tensorfab.compiler.tensor.timing import simulate
from tensorfab.isa import PRESETS, Uop
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.testing.numpy_reference import conv2d_acc, epilogue


def _cycles(plan, n_alu_ops: int) -> float:
    return simulate([insn for insn, _ in plan_instructions(plan, n_alu_ops)],
                    plan.cfg).cycles


@pytest.mark.parametrize("workload", [
    Workload.conv2d(1, 64, 28, 28, 128, 1, 2, 0, name="downsample"),
    Workload.conv2d(1, 96, 14, 14, 64, 3, 1, 1, name="3x3"),
], ids=lambda w: w.name)
def test_several_counts_keep_the_fastest(workload) -> None:
    cfg = PRESETS["default"]
    both = tile_search.search_plan(workload, cfg, (2, 4), bias=1, n_alu_ops=1)
    singles = [tile_search.search_plan(workload, cfg, v, bias=1, n_alu_ops=1)
               for v in (2, 4)]
    assert both.vthreads in (2, 4)
    best = min(_cycles(p, 1) for p in singles)
    assert _cycles(both, 1) <= best * (1 + tile_search.SIM_TOLERANCE)


@pytest.mark.parametrize("bad", [(), (0,), (2, 9), (True,), 2.0])
def test_bad_thread_counts_are_named(bad) -> None:
    with pytest.raises(ScheduleError, match="virtual_thread"):
        default_schedule(Workload.conv2d(1, 16, 8, 8, 16, 3, 1, 1), PRESETS["default"], bad)


def test_counts_that_do_not_fit_fall_back_to_fewer_threads() -> None:
    # a 7×7 kernel over 16 input blocks and 16 output blocks: one thread's slot of
    # tiny's 128-entry weight buffer holds a tile, three threads' slots do not
    cfg = PRESETS["tiny"]
    wl = Workload.conv2d(1, 4, 14, 14, 4, 7, 1, 3)
    with pytest.raises(ScheduleError):
        tile_search.search_plan(wl, cfg, (3, 4))
    plan = default_schedule(wl, cfg, (3, 4)).plan()
    assert plan.vthreads < 3
    assert plan == default_schedule(wl, cfg, 4).plan()  # an int falls back alike


def test_model_thread_counts_follow_the_token_queues() -> None:
    assert model_vthreads(PRESETS["default"]) == tile_search.MODEL_VTHREADS
    assert model_vthreads(PRESETS["default"].replace(dep_queue_depth=2)) == tuple(
        v for v in tile_search.MODEL_VTHREADS if v <= 2)


def test_conv_searched_over_counts_equals_numpy() -> None:
    cfg = PRESETS["tiny"]
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (1, 12, 9, 10), dtype=np.int8)
    w = rng.integers(-128, 128, (8, 12, 3, 3), dtype=np.int8)
    bias = rng.integers(-4000, 4000, 8).astype(np.int32)
    ep = Epilogue(requant=(300, 12), relu=True)
    op = conv2d(cfg, x, w, bias, stride=1, padding=1, epilogue=ep, vthreads=(2, 3, 4))
    want = epilogue(conv2d_acc(x, w, (1, 1), (1, 1, 1, 1)), bias, (300, 12), True)
    np.testing.assert_array_equal(op.run(FunctionalSimulator()), want)


def test_resnet18_stem_near_its_micro_op_floor() -> None:
    """The stem after the host im2col: 147 channels padded to 10 blocks, 112×112
    pixels, 4 output blocks, one REQUANT pass (its 4 record entries at the top of the
    weights, no per-channel accumulator tile)."""
    cfg = PRESETS["default"]
    wl = Workload.conv2d(1, 160, 112, 112, 64, 1, 1, 0)
    kw = {"bias": 0, "n_alu_ops": 1, "records": 4}
    plan = default_schedule(wl, cfg, tile_search.MODEL_VTHREADS, **kw).plan()
    entries = 112 * 112 * 4
    floor = entries * 10 + entries // 16 + entries  # GEMM, fast reset, one ALU pass
    two = default_schedule(wl, cfg, 2, **kw).plan()
    assert _cycles(plan, 1) <= _cycles(two, 1)
    assert _cycles(plan, 1) <= 1.02 * floor


def _unrolled(dims: list[Dim], loop_candidates: set[str], base: tuple[int, ...]
              ) -> tuple[Uop, ...]:
    _, unrolled = choose_loops(dims, loop_candidates)
    uops = []
    for idx in itertools.product(*(range(d.extent) for d in unrolled)):
        off = [b + sum(i * d.strides[k] for i, d in zip(idx, unrolled, strict=True))
               for k, b in enumerate(base)]
        uops.append(Uop(acc=off[0], src=off[1], wgt=off[2] if len(base) == 3 else 0))
    return tuple(uops)


def test_micro_op_kernels_equal_the_explicit_unrolling() -> None:
    rng = np.random.default_rng(3)
    for _ in range(300):
        n_ops = int(rng.integers(2, 4))
        dims = [Dim(f"d{i}", int(rng.integers(1, 6)),
                    tuple(int(s) for s in rng.integers(0, 40, n_ops)))
                for i in range(int(rng.integers(0, 6)))]
        loops = {d.name for d in dims if rng.random() < 0.5}
        base = tuple(int(b) for b in rng.integers(0, 100, n_ops))
        assert make_kernel(dims, loops, base).uops == _unrolled(dims, loops, base)
