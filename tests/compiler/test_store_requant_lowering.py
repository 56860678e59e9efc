"""One-pass requantization in the STOREs (``Epilogue(requant_stage="store")``, the
default) against the ALU's REQUANT pass (``requant_stage="alu"``): conv2d (with and
without a ReLU clip, several output-channel blocks per tile in each of the lowering's
three STORE forms, a fused residual, four threads), dense and grouped matmul compiled
both ways run on fsim (whose race detector checks the records' tokens) to outputs equal
to each other and to integer references written in the tests; the "store" programs have
no ALU REQUANT and only requantizing STOREs, each within one block of channels."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest
from support.requant_cases import assert_requant_stage, quantized_case, single_rounding
from test_residual_epilogue import _case as residual_case
from test_residual_epilogue import direct_conv, one_rounding

from tensorfab.compiler import (
    CompiledOp,
    Epilogue,
    Schedule,
    Workload,
    batch_matmul,
    conv2d,
    dense,
    fold_input_zero_point,
)
from tensorfab.compiler.tensor.epilogue import REQUANT_STAGES
from tensorfab.isa import PRESETS, Buffer, Load
from tensorfab.sim.testing.numpy_reference import conv2d_acc, dense_acc

DEFAULT = PRESETS["default"]


def both_ways(compile_op: Callable[[Epilogue], CompiledOp], ep: Epilogue) -> np.ndarray:
    """The fsim output of ``compile_op`` with ``ep`` requantizing in the STOREs and in
    the ALU, checked equal and checked for where each program requantizes."""
    out = {}
    for stage in REQUANT_STAGES:
        op = compile_op(dataclasses.replace(ep, requant_stage=stage))
        assert_requant_stage(op.program, stage)
        top = [(i.sram, i.y, i.x) for i in op.program.insns if isinstance(i, Load)
               and i.buffer is Buffer.ACC and i.sram >= op.plan.acc_capacity]
        if stage == "store":  # the records: one LOAD to the top of the accumulators
            n = op.plan.acc_records
            assert n and top == [(DEFAULT.acc_depth - n, 1, n)]
            assert op.plan.records == int(ep.residual is not None)  # the identity entry
        else:
            assert not op.plan.acc_records and not top
        out[stage] = op.run("fsim")
    np.testing.assert_array_equal(out["store"], out["alu"])
    return out["store"]


@pytest.mark.parametrize("relu", [False, True])
def test_conv2d_store_requant_equals_alu_and_reference(relu: bool) -> None:
    rng = np.random.default_rng(40 + relu)
    x, w, bias, zx, zy, scales = quantized_case(rng, (1, 24, 9, 9), (40, 24, 3, 3), 24 * 9)
    scales[3] = 2.5  # a positive exponent
    acc = conv2d_acc(x.astype(np.int64) - zx, w, (1, 1), (0, 0, 0, 0)) \
        + bias.reshape(1, -1, 1, 1)
    ep = Epilogue.from_scales(scales, zero_point=zy, relu=relu, rounding="single")
    got = both_ways(lambda e: conv2d(DEFAULT, x, w, fold_input_zero_point(bias, w, zx),
                                     epilogue=e), ep)
    np.testing.assert_array_equal(got, single_rounding(acc, scales, zy,
                                                       lo=zy if relu else -128))


@pytest.mark.parametrize(("tiles", "vthreads", "n"), [
    ({"oc": 3}, 2, 1),                 # whole image: one STORE per channel block
    ({"oc": 2, "oh": 3}, 2, 1),        # full-width rows
    ({"oc": 2, "oh": 2, "ow": 3}, 4, 1),  # partial rows, four threads
    ({"oc": 3, "b": 2}, 2, 2),         # whole images of two batch blocks
])
def test_several_channel_blocks_per_tile(tiles: dict[str, int], vthreads: int, n: int
                                         ) -> None:
    """Tiles of two or three output-channel blocks: each STORE of the "store" program
    covers one block (its own records); clipped to (-20, 30)."""
    rng = np.random.default_rng(sum(tiles.values()))
    x, w, bias, _, zy, scales = quantized_case(rng, (n, 16, 7, 7), (44, 16, 3, 3), 16 * 9)
    acc = conv2d_acc(x.astype(np.int64), w, (1, 1), (1, 1, 1, 1)) + bias.reshape(1, -1, 1, 1)
    ep = dataclasses.replace(Epilogue.from_scales(scales, zero_point=zy, bias=True,
                                                  rounding="single"), clip=(-20, 30))
    wl = Workload.conv2d(n, 16, 7, 7, 44, 3, 1, 1)

    def compile_op(e: Epilogue) -> CompiledOp:
        sched = Schedule(wl, DEFAULT, records=e.record_entries(DEFAULT, 44),
                         acc_records=e.acc_record_entries(DEFAULT, 44)).tile(**tiles)
        op = conv2d(DEFAULT, x, w, bias, padding=1, epilogue=e,
                    schedule=sched.virtual_thread(vthreads))
        assert op.plan.tile("oc") == tiles["oc"]
        return op

    got = both_ways(compile_op, ep)
    np.testing.assert_array_equal(got, single_rounding(acc, scales, zy, -20, 30))


@pytest.mark.parametrize(("seed", "x_shape", "o", "k", "stride", "relu", "vthreads"), [
    (0, (1, 32, 14, 14), 40, 3, 1, True, 2),    # ragged output channels
    (1, (1, 64, 14, 14), 32, 1, 2, False, 4),   # a 1×1 downsample, four threads
])
def test_fused_residual_store_requant(seed, x_shape, o, k, stride, relu, vthreads) -> None:
    """A residual epilogue: the identity entry alone in the weight buffer, the records in
    the accumulators; equal to the direct convolution plus the scaled residual, rounded
    once."""
    x, wt, b, r, factor, mult, exp, pad = residual_case(seed, x_shape, o, k, stride, True)
    zp, lo = 5, (0 if relu else -128)
    ep = Epilogue(bias=True, multiplier=mult, shift=exp, zero_point=zp, rounding="single",
                  residual=tuple(factor), clip=(lo, 127))
    got = both_ways(lambda e: conv2d(DEFAULT, x, wt, b, stride=stride, padding=pad,
                                     epilogue=e, vthreads=vthreads, residual=r), ep)
    t = direct_conv(x, wt, stride, pad) + b.reshape(1, -1, 1, 1) \
        + r.astype(np.int64) * factor.reshape(1, -1, 1, 1)
    np.testing.assert_array_equal(got, one_rounding(t, mult, exp, zp, lo, 127))


def test_dense_and_grouped_matmul_store_requant() -> None:
    rng = np.random.default_rng(6)
    x, w, bias, zx, zy, scales = quantized_case(rng, (12, 200), (70, 200), 200)
    ep = Epilogue.from_scales(scales, zero_point=zy, relu=True, rounding="single")
    got = both_ways(lambda e: dense(DEFAULT, x, w, fold_input_zero_point(bias, w, zx),
                                    epilogue=e), ep)
    acc = dense_acc(x.astype(np.int64) - zx, w) + bias
    np.testing.assert_array_equal(got, single_rounding(acc, scales, zy, lo=zy))
    # two groups, each its own operands, bias and records
    a = rng.integers(-128, 128, (2, 9, 48)).astype(np.int8)
    b = rng.integers(-128, 128, (2, 48, 20)).astype(np.int8)
    gbias = rng.integers(-5000, 5000, (2, 20)).astype(np.int32)
    s = rng.uniform(1e-3, 5e-3, 20)
    got = both_ways(lambda e: batch_matmul(DEFAULT, a, b, gbias, epilogue=e),
                    Epilogue.from_scales(s, rounding="single"))
    acc = np.einsum("gmk,gkn->gmn", a.astype(np.int64), b.astype(np.int64)) \
        + gbias[:, None, :]
    np.testing.assert_array_equal(got, single_rounding(acc, s, 0, axis=2))
