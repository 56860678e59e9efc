"""VTA's ResNet-18 conv workloads C2–C11 and two dense layers on the default config,
compiled with the default schedule and checked bit-exact on the functional simulator."""

from __future__ import annotations

import numpy as np
import pytest
from resnet_epilogue import requant_epilogue

from tensorfab.compiler import (
    DENSE_LAYERS,
    RESNET18_CONV,
    Epilogue,
    accumulator_bound,
    check_program_order,
    conv2d,
    dense,
    quantize_multiplier,
)
from tensorfab.isa import PRESETS
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.testing.numpy_reference import conv2d_acc, dense_acc, epilogue, resnet_conv_case

CFG = PRESETS["default"]
#: (layer, vthreads) pairs kept in the default run; the rest are marked slow.
FAST = {("C2", 2), ("C4", 1), ("C8", 4), ("C11", 2), ("fc1000", 2), ("proj", 1)}


def cases(layers):
    return [pytest.param(name, v, marks=() if (name, v) in FAST else pytest.mark.slow,
                         id=f"{name}-vt{v}") for name in layers for v in (1, 2, 4)]


@pytest.mark.parametrize(("name", "vthreads"), cases(RESNET18_CONV))
def test_resnet18_conv(name, vthreads):
    wl = RESNET18_CONV[name]
    x, w, bias = resnet_conv_case(wl)
    ep = requant_epilogue(wl.in_channels * wl.kernel[0] * wl.kernel[1])
    op = conv2d(CFG, x, w, bias, stride=wl.stride, padding=wl.padding, epilogue=ep,
                vthreads=vthreads)
    assert op.workload == wl.__class__.conv2d(1, wl.in_channels, wl.height, wl.width,
                                              wl.out_channels, wl.kernel, wl.stride,
                                              wl.padding)
    check_program_order(op.program.insns, CFG.dep_queue_depth)
    got = op.run(FunctionalSimulator())
    want = epilogue(conv2d_acc(x, w, wl.stride, wl.padding), bias, ep.requant, relu=True)
    np.testing.assert_array_equal(got, want)
    assert np.count_nonzero(got) > got.size // 4  # the scale keeps the results informative


@pytest.mark.parametrize(("name", "vthreads"), cases(DENSE_LAYERS))
def test_dense_layers(name, vthreads):
    wl = DENSE_LAYERS[name]
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (wl.batch, wl.in_channels), dtype=np.int8)
    w = rng.integers(-128, 128, (wl.out_channels, wl.in_channels), dtype=np.int8)
    bias = rng.integers(-1000, 1000, wl.out_channels).astype(np.int32)
    mult, shift = quantize_multiplier(1 / 3000, accumulator_bound(wl.in_channels, 1000))
    ep = Epilogue(requant=(mult, shift))
    op = dense(CFG, x, w, bias, epilogue=ep, vthreads=vthreads)
    check_program_order(op.program.insns, CFG.dep_queue_depth)
    got = op.run(FunctionalSimulator())
    np.testing.assert_array_equal(got, epilogue(dense_acc(x, w), bias, ep.requant))
