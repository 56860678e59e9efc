"""Grouped and depthwise convolutions on the GEMM core (block-diagonal weights over
super-groups of whole blocks): bit-exact against a numpy reference written here
(per-group direct convolution, one rounding) and the CPU kernels, on fsim and, for one
layer, on the RTL against fsim (DRAM image and counters)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.compiler.tensor.epilogue import Epilogue
from tensorfab.compiler.tensor.errors import CompileError
from tensorfab.compiler.tensor.grouped_conv import (
    block_diagonal_weights,
    grouped_conv2d,
    super_group_plan,
    super_group_size,
)
from tensorfab.compiler.tensor.requant import quantize_multipliers
from tensorfab.isa import PRESETS
from tensorfab.runtime.kernels import KERNELS
from tensorfab.sim import FunctionalSimulator

DEFAULT = PRESETS["default"]


def grouped_reference(x, w, bias, groups, stride, pad, mult, exp, zp) -> np.ndarray:
    """Each group convolved by its definition, then ``round(acc · M / 2^(31 - e))``
    half away from zero, + zp, clamped to int8."""
    _, _, h, wd = x.shape
    o, ci, kh, kw = w.shape
    co = o // groups
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    acc = np.zeros((1, o, oh, ow), np.int64)
    for g in range(groups):
        xs = xp[:, g * ci:(g + 1) * ci]
        for i in range(kh):
            for j in range(kw):
                win = xs[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
                acc[:, g * co:(g + 1) * co] += np.einsum(
                    "nchw,oc->nohw", win, w[g * co:(g + 1) * co, :, i, j].astype(np.int64))
    acc += bias.reshape(1, -1, 1, 1)
    p = acc * np.asarray(mult, np.int64).reshape(1, -1, 1, 1)
    n = (31 - np.asarray(exp, np.int64)).reshape(1, -1, 1, 1)
    q = (np.abs(p) + (np.int64(1) << (n - 1))) >> n
    return np.clip(np.sign(p) * q + zp, -128, 127).astype(np.int8)


@pytest.mark.parametrize(("c", "o", "groups", "size", "k", "stride"), [
    (32, 32, 32, 12, 3, 1),    # depthwise 3×3 (16 groups a super-group)
    (48, 48, 48, 9, 5, 2),     # depthwise 5×5, stride 2, odd size
    (64, 96, 2, 8, 3, 1),      # AlexNet-like groups=2
    (64, 32, 8, 6, 1, 1),      # 8 in / 4 out channels a group: super-groups of 4
    (24, 24, 24, 6, 3, 2),     # depthwise, 24 channels: 32 groups, the last 8 padding
    (40, 40, 20, 5, 5, 1),     # 2 channels a group, 20 groups: 24, the last 4 padding
    (136, 136, 4, 5, 1, 1),    # ShuffleNet's 4 groups of 34: one dense 136×136 kernel
    (24, 112, 4, 6, 1, 1),     # 6 in / 28 out a group: one dense kernel, outputs padded
])
def test_fsim_equals_numpy_and_cpu_kernels(c, o, groups, size, k, stride) -> None:
    rng = np.random.default_rng(c + groups)
    x = rng.integers(-128, 128, (1, c, size, size)).astype(np.int8)
    w = rng.integers(-128, 128, (o, c // groups, k, k)).astype(np.int8)
    bias = rng.integers(-3000, 3000, o).astype(np.int32)
    mult, exp = quantize_multipliers(rng.uniform(1e-4, 4e-3, o))
    ep = Epilogue(bias=True, multiplier=mult, shift=exp, rounding="single", zero_point=-4)
    op = grouped_conv2d(DEFAULT, x, w, bias, groups=groups, stride=stride, padding=k // 2,
                        epilogue=ep)
    got = op.run(FunctionalSimulator())
    want = grouped_reference(x, w, bias, groups, stride, k // 2, mult, exp, -4)
    np.testing.assert_array_equal(got, want)
    attrs = {"strides": (stride, stride), "padding": (k // 2,) * 4, "dilation": (1, 1),
             "groups": groups, "data_layout": "NCHW", "kernel_layout": "OIHW",
             "out_dtype": "int32"}
    acc = KERNELS["qnn.conv2d_integer"]([x, w, np.int8(0), np.int8(0)], attrs)
    cpu = KERNELS["qnn.requantize_q31"](
        [acc + bias.reshape(1, -1, 1, 1)],
        {"multiplier": tuple(mult), "shift": tuple(exp), "zero_point": -4,
         "rounding": "single"})
    np.testing.assert_array_equal(got, cpu)


def test_rtl_equals_fsim() -> None:
    from tensorfab.sim.rtl import RtlSimulator

    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, (1, 32, 10, 10)).astype(np.int8)
    w = rng.integers(-128, 128, (32, 1, 3, 3)).astype(np.int8)
    mult, exp = quantize_multipliers(rng.uniform(1e-3, 4e-3, 32))
    op = grouped_conv2d(DEFAULT, x, w, np.zeros(32, np.int32), groups=32, padding=1,
                        epilogue=Epilogue(multiplier=mult, shift=exp, rounding="single"))
    res, ref = RtlSimulator().run(op.program), FunctionalSimulator().run(op.program)
    np.testing.assert_array_equal(res.dram, ref.dram)
    assert res.counters == ref.counters
    assert res.counters.gemm_uops == 2 * 100 * 9 + 2 * 100  # one per tap, the reset


def test_block_diagonal_layout_and_refusals() -> None:
    w = np.arange(4 * 1 * 1 * 1, dtype=np.int8).reshape(4, 1, 1, 1) + 1
    d = block_diagonal_weights(w, 4, 2)
    assert d.shape == (4, 2, 1, 1)
    np.testing.assert_array_equal(d[:, :, 0, 0], [[1, 0], [0, 2], [3, 0], [0, 4]])
    assert super_group_size(DEFAULT, 32, 32, 32) == 16
    assert super_group_size(DEFAULT, 96, 256, 2) == 1
    with pytest.raises(CompileError, match="no number of whole groups"):
        super_group_size(DEFAULT, 24, 24, 3)  # 8 lanes a group, 3 groups
    # padding groups: only up to the blocked layout's channel padding
    assert super_group_plan(DEFAULT, 200, 200, 200) == (16, 208)
    assert super_group_plan(DEFAULT, 24, 24, 3) == (2, 4)  # 8 lanes a group: 32 channels
    np.testing.assert_array_equal(block_diagonal_weights(w[:3], 3, 2, 4)[:, :, 0, 0],
                                  [[1, 0], [0, 2], [3, 0], [0, 0]])
    # 3 channels a group: 16 groups of 48 would exceed the layout's padding; 3 groups
    # run as one dense convolution of the block-diagonal kernel
    assert super_group_plan(DEFAULT, 9, 9, 3) == (3, 3)
    with pytest.raises(CompileError, match=r"exceed the blocked layout's channel padding"
                       r".*at most 8 groups"):
        super_group_plan(DEFAULT, 27, 27, 9)  # 9 groups of 3: 16 groups of 48
    with pytest.raises(CompileError, match="rounding='single'"):
        mult, exp = quantize_multipliers(np.full(32, 1e-3))
        grouped_conv2d(DEFAULT, np.zeros((1, 32, 4, 4), np.int8),
                       np.zeros((32, 1, 3, 3), np.int8), groups=32, padding=1,
                       epilogue=Epilogue(multiplier=mult, shift=exp))
