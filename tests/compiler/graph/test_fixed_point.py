"""The accelerator's fixed-point requantization in the graph IR: the CPU interpreter's
result equals the compiled convolution run on the functional simulator, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.compiler import Epilogue
from tensorfab.compiler import conv2d as compile_conv2d
from tensorfab.compiler.graph import Call, post_order
from tensorfab.compiler.graph import builder as gb
from tensorfab.compiler.graph.fixed_point import fixed_point_requantize
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.isa import PRESETS


def _layer(r, n, c, h, o, k, stride, pad, scale, per_channel=False):
    x = gb.var("x", (n, c, h, h), "int8")
    w = r.integers(-128, 128, (o, c, k, k)).astype(np.int8)
    b = r.integers(-3000, 3000, o).astype(np.int32)
    acc = gb.add(gb.conv2d_integer(x, w, np.int8(0), np.int8(0), strides=(stride, stride),
                                   padding=(pad,) * 4), b.reshape(o, 1, 1))
    s = (np.full(o, scale) * r.uniform(0.5, 1.5, o) if per_channel
         else np.array(scale)).astype(np.float32)
    y = gb.relu(gb.requantize(acc, s, np.zeros(s.shape, np.int8), out_dtype="int8"))
    return gb.function([x], y), w, b


@pytest.mark.parametrize("cfg,shape", [
    ("tiny", (1, 5, 6, 7, 3, 1, 1)),
    ("small", (1, 8, 7, 8, 3, 2, 1)),
    ("default", (1, 16, 5, 16, 1, 1, 0)),
])
def test_interpreter_equals_the_accelerator(cfg: str, shape: tuple) -> None:
    n, c, h, o, k, stride, pad = shape
    r = np.random.default_rng(c * 31 + h)
    f, w, b = _layer(r, n, c, h, o, k, stride, pad, scale=0.0021)
    g = fixed_point_requantize(f)
    fixed = [e for e in post_order(g) if isinstance(e, Call) and e.op == "qnn.requantize_fixed"]
    assert len(fixed) == 1 and "qnn.requantize" not in {e.op for e in post_order(g)
                                                         if isinstance(e, Call)}
    mult, shift = fixed[0].attrs["multiplier"], fixed[0].attrs["shift"]
    x = r.integers(-128, 128, (n, c, h, h)).astype(np.int8)
    ours = evaluate(g, [x])
    op = compile_conv2d(PRESETS[cfg], x, w, b, stride=stride, padding=pad,
                        epilogue=Epilogue(bias=True, requant=(mult, shift), relu=True))
    np.testing.assert_array_equal(ours, op.run("fsim"))
    # and the fixed-point result is the float requantization's, up to one unit
    assert np.abs(ours.astype(int) - evaluate(f, [x]).astype(int)).max() <= 1


def test_per_channel_requantization_stays() -> None:
    f, _, _ = _layer(np.random.default_rng(0), 1, 4, 5, 6, 3, 1, 1, 0.002, per_channel=True)
    g = fixed_point_requantize(f)
    assert "qnn.requantize" in {e.op for e in post_order(g) if isinstance(e, Call)}
