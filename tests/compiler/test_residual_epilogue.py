"""A residual add fused into the convolution's program (``Epilogue.residual``): the
int8 residual tile enters the accumulators before the convolution's GEMMs
(``acc = r · K[c] + Σ x·w``) and one REQUANT pass rounds the sum. Checked bit for bit
against an independent numpy reference (direct convolution, exact integer sum, one
rounding half away from zero), against the graph's CPU kernel
(``qnn.requantize_residual_q31``), and on the RTL against the functional simulator."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.compiler.tensor.epilogue import Epilogue
from tensorfab.compiler.tensor.errors import CompileError
from tensorfab.compiler.tensor.operators import conv2d
from tensorfab.compiler.tensor.requant import quantize_multipliers
from tensorfab.isa import PRESETS
from tensorfab.runtime.kernels import KERNELS
from tensorfab.sim import FunctionalSimulator

DEFAULT = PRESETS["default"]


def direct_conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """int64 NCHW convolution by its definition."""
    n, _, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", win, w[:, :, i, j].astype(np.int64))
    return out


def one_rounding(t: np.ndarray, mult: np.ndarray, exp: np.ndarray, zp: int, lo: int,
                 hi: int) -> np.ndarray:
    """``clamp(round(t · M / 2^(31 - e)) + zp)``, rounding half away from zero, in
    Python integers (no shared code with the simulator)."""
    shape = (1, -1, 1, 1)
    out = np.empty(t.shape, np.int64)
    m, e = np.broadcast_to(mult.reshape(shape), t.shape), np.broadcast_to(exp.reshape(shape),
                                                                        t.shape)
    for idx in np.ndindex(t.shape):
        p, n = int(t[idx]) * int(m[idx]), 31 - int(e[idx])
        q = (abs(p) + (1 << (n - 1))) >> n
        out[idx] = min(max((q if p >= 0 else -q) + zp, lo), hi)
    return out.astype(np.int8)


def _case(seed: int, x_shape, o: int, k: int, stride: int, bias: bool):
    rng = np.random.default_rng(seed)
    n, c, h, w = x_shape
    pad = k // 2
    x = rng.integers(-128, 128, x_shape).astype(np.int8)
    wt = rng.integers(-128, 128, (o, c, k, k)).astype(np.int8)
    b = rng.integers(-20000, 20000, o).astype(np.int32) if bias else None
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    r = rng.integers(-128, 128, (n, o, oh, ow)).astype(np.int8)
    factor = rng.integers(256, 4000, o)
    mult, exp = quantize_multipliers(rng.uniform(2e-6, 4e-5, o))
    return x, wt, b, r, factor, mult, exp, pad


@pytest.mark.parametrize(("seed", "x_shape", "o", "k", "stride", "bias", "relu", "vthreads"), [
    (0, (1, 32, 14, 14), 40, 3, 1, True, True, 2),     # ragged output channels
    (1, (1, 64, 14, 14), 32, 1, 2, True, False, 2),    # a 1×1 downsample
    (2, (1, 16, 9, 9), 16, 3, 1, False, False, 1),     # no bias, one thread
    (3, (2, 16, 8, 8), 48, 3, 2, True, True, 4),       # batch 2, stride 2, four threads
])
def test_fsim_equals_numpy_and_cpu_kernel(seed, x_shape, o, k, stride, bias, relu,
                                          vthreads) -> None:
    x, wt, b, r, factor, mult, exp, pad = _case(seed, x_shape, o, k, stride, bias)
    zp, lo = 5, (0 if relu else -128)
    ep = Epilogue(bias=bias, multiplier=mult, shift=exp, zero_point=zp, rounding="single",
                  residual=tuple(factor), clip=(lo, 127))
    op = conv2d(DEFAULT, x, wt, b, stride=stride, padding=pad, epilogue=ep,
                vthreads=vthreads, residual=r)
    assert op.plan.residual and "res" in {s.name for s in op.program.segments}
    got = op.run(FunctionalSimulator())
    acc = direct_conv(x, wt, stride, pad) + (0 if b is None else b.reshape(1, -1, 1, 1))
    t = acc + r.astype(np.int64) * factor.reshape(1, -1, 1, 1)
    want = one_rounding(t, mult, exp, zp, lo, 127)
    np.testing.assert_array_equal(got, want)
    attrs = {"multiplier": tuple(mult), "shift": tuple(exp), "zero_point": zp,
             "residual_factor": tuple(factor), "lo": lo, "hi": 127}
    kernel = KERNELS["qnn.requantize_residual_q31"]
    np.testing.assert_array_equal(kernel([acc.astype(np.int32), r], attrs), want)


def test_rtl_equals_fsim_image_and_counters() -> None:
    from tensorfab.sim.rtl import RtlSimulator

    x, wt, b, r, factor, mult, exp, pad = _case(5, (1, 32, 10, 10), 32, 3, 1, True)
    ep = Epilogue(bias=True, multiplier=mult, shift=exp, zero_point=-3, rounding="single",
                  residual=tuple(factor), clip=(0, 127))
    op = conv2d(DEFAULT, x, wt, b, padding=pad, epilogue=ep, residual=r)
    res = RtlSimulator().run(op.program)
    ref = FunctionalSimulator().run(op.program)
    np.testing.assert_array_equal(res.dram, ref.dram)
    assert res.counters == ref.counters


def test_residual_epilogue_errors_name_what_is_wrong() -> None:
    mult, exp = quantize_multipliers(np.full(16, 1e-4))
    with pytest.raises(CompileError, match="rounding='single'"):
        Epilogue(multiplier=mult, shift=exp, residual=(300,) * 16)
    with pytest.raises(CompileError, match="15 residual factors for 16 channels"):
        Epilogue(multiplier=mult, shift=exp, rounding="single", residual=(300,) * 15)
    x = np.zeros((1, 16, 4, 4), np.int8)
    w = np.zeros((16, 16, 1, 1), np.int8)
    ep = Epilogue(multiplier=mult, shift=exp, rounding="single", residual=(300,) * 16)
    with pytest.raises(CompileError, match="residual has shape"):
        conv2d(DEFAULT, x, w, epilogue=ep, residual=np.zeros((1, 16, 3, 3), np.int8))
