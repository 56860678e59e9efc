"""Compiled operators bit-exact on the RTL executor (Verilator harness), against the
independent numpy reference and the functional simulator (output, DRAM image and
every counter), and the compiler's timing model against the RTL's cycle count.

The default run covers ResNet-18 C2, C5 and C11 on the default config (each with one
thread count) and seeded random convolutions and dense layers on tiny and small; the
other layers and thread counts are marked slow.
"""

from __future__ import annotations

import numpy as np
import pytest
from resnet_epilogue import requant_epilogue

from tensorfab.compiler import RESNET18_CONV, Epilogue, check_program_order, conv2d, dense
from tensorfab.compiler.tensor.timing import simulate
from tensorfab.isa import PRESETS
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl import RtlSimulator
from tensorfab.sim.testing.numpy_reference import conv2d_acc, dense_acc, epilogue, resnet_conv_case

RTL = RtlSimulator()
FSIM = FunctionalSimulator()
#: (layer, vthreads) pairs of the default run; the rest are slow.
FAST = {("C2", 2), ("C5", 4), ("C11", 1)}


def run_rtl(op):
    """Run on the RTL executor; check it against fsim; return (result, unpacked)."""
    cfg = op.program.config
    check_program_order(op.program.insns, cfg.dep_queue_depth)
    res = RTL.run(op.program)
    ref = FSIM.run(op.program)
    np.testing.assert_array_equal(res.dram, ref.dram)
    assert res.counters == ref.counters
    return res, op.unpack(res.outputs["out"])


@pytest.mark.parametrize(("name", "vthreads"), [
    pytest.param(n, v, marks=() if (n, v) in FAST else pytest.mark.slow, id=f"{n}-vt{v}")
    for n in RESNET18_CONV for v in (1, 2, 4)])
def test_resnet18_conv_on_rtl(name, vthreads):
    cfg = PRESETS["default"]
    wl = RESNET18_CONV[name]
    x, w, bias = resnet_conv_case(wl)
    ep = requant_epilogue(wl.in_channels * wl.kernel[0] * wl.kernel[1])
    op = conv2d(cfg, x, w, bias, stride=wl.stride, padding=wl.padding, epilogue=ep,
                vthreads=vthreads)
    res, got = run_rtl(op)
    want = epilogue(conv2d_acc(x, w, wl.stride, wl.padding), bias, ep.requant, relu=True)
    np.testing.assert_array_equal(got, want)
    assert np.count_nonzero(got) > got.size // 4
    # the compiler's timing model is calibrated against these cycles
    model = simulate(op.program.insns, cfg)
    assert model is not None and abs(model.cycles - res.cycles) < 0.05 * res.cycles


def _conv_case(rng: np.random.Generator) -> dict:
    while True:
        kh, kw = (int(k) for k in rng.integers(1, 4, 2))
        pad = tuple(int(p) for p in rng.integers(0, 3, 4))
        h, w = (int(v) for v in rng.integers(1, 12, 2))
        if h + pad[0] + pad[1] >= kh and w + pad[2] + pad[3] >= kw:
            return dict(n=int(rng.integers(1, 3)), c=int(rng.integers(1, 40)), h=h, w=w,
                        o=int(rng.integers(1, 40)), kernel=(kh, kw),
                        stride=tuple(int(s) for s in rng.integers(1, 3, 2)), padding=pad)


def _random_epilogue(rng: np.random.Generator) -> Epilogue:
    requant = (int(rng.integers(0, 32768)), int(rng.integers(0, 20))) \
        if rng.random() < 0.5 else None
    return Epilogue(requant=requant, relu=bool(rng.random() < 0.5))


@pytest.mark.parametrize("preset", ["tiny", "small"])
@pytest.mark.parametrize("seed", range(6))
def test_random_conv2d_on_rtl(preset, seed):
    cfg = PRESETS[preset]
    rng = np.random.default_rng(1000 * seed + len(preset))
    case = _conv_case(rng)
    x = rng.integers(-128, 128, (case["n"], case["c"], case["h"], case["w"]), dtype=np.int8)
    w = rng.integers(-128, 128, (case["o"], case["c"], *case["kernel"]), dtype=np.int8)
    bias = rng.integers(-(1 << 20), 1 << 20, case["o"]).astype(np.int32) \
        if rng.random() < 0.5 else None
    ep = _random_epilogue(rng)
    op = conv2d(cfg, x, w, bias, stride=case["stride"], padding=case["padding"], epilogue=ep,
                vthreads=int(rng.integers(1, 5)))
    _, got = run_rtl(op)
    want = epilogue(conv2d_acc(x, w, case["stride"], case["padding"]), bias, ep.requant,
                    ep.relu)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("preset", ["tiny", "small", "default"])
@pytest.mark.parametrize("seed", range(3))
def test_random_dense_on_rtl(preset, seed):
    cfg = PRESETS[preset]
    rng = np.random.default_rng(7 + 100 * seed + len(preset))
    m, k, n = (int(v) for v in rng.integers(1, 70, 3))
    x = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    bias = rng.integers(-1000, 1000, n).astype(np.int32)
    ep = _random_epilogue(rng)
    op = dense(cfg, x, w, bias, epilogue=ep, vthreads=int(rng.integers(1, 5)))
    _, got = run_rtl(op)
    np.testing.assert_array_equal(got, epilogue(dense_acc(x, w), bias, ep.requant, ep.relu))
