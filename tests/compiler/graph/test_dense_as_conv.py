"""``dense_as_conv``: int8 dense chains as 1×1 convolutions, the same numbers on the CPU
interpreter, and compiled for the accelerator bit-exact to the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.compiler.graph import Call, accel, post_order
from tensorfab.compiler.graph import builder as gb
from tensorfab.compiler.graph.accel_lowering import lower_accelerator_chains
from tensorfab.compiler.graph.dense_as_conv import dense_as_conv
from tensorfab.compiler.graph.fixed_point import fixed_point_requantize
from tensorfab.compiler.graph.layout_planning import pack_accel_layouts
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.graph.partitioning import annotate_accelerator
from tensorfab.compiler.graph.planning import plan_devices


def dense_chain(rng: np.random.Generator, m: int = 5, k: int = 40, n: int = 24,
                per_channel: bool = True, relu: bool = True):
    """x int8 (m, k) → matmul_integer with a constant weight → + bias → requantize (per
    channel or per tensor, axis 1) → relu; and the weights, for the numpy reference."""
    x = gb.var("x", (m, k), "int8")
    w = rng.integers(-127, 128, (k, n)).astype(np.int8)
    bias = rng.integers(-3000, 3000, n).astype(np.int32)
    scale = (rng.uniform(0.002, 0.01, n) if per_channel else np.array(0.005)).astype(
        np.float32)
    zero = np.array(0, np.int8)
    acc = gb.call("qnn.matmul_integer", x, w, zero, zero)
    y = gb.call("qnn.requantize", gb.call("add", acc, bias), scale, np.array(0, np.int8),
                axis=1, out_dtype="int8")
    body = gb.call("relu", y) if relu else y
    return gb.function([x], body), w, bias, scale


def numpy_dense(x, w, bias, scale, relu):
    """ONNX-style: round-half-even(float32(acc) · scale), saturate, relu."""
    acc = x.astype(np.int64) @ w.astype(np.int64) + bias
    y = np.clip(np.rint(acc.astype(np.float32) * scale.astype(np.float32)), -128, 127)
    return np.maximum(y, 0) if relu else y


@pytest.mark.parametrize("per_channel", [True, False])
def test_rewrite_keeps_the_numbers(per_channel: bool) -> None:
    rng = np.random.default_rng(int(per_channel))
    f, w, bias, scale = dense_chain(rng, per_channel=per_channel)
    g = dense_as_conv(f)
    ops = [e.op for e in post_order(g) if isinstance(e, Call)]
    assert ops == ["reshape", "qnn.conv2d_integer", "add", "qnn.requantize", "relu",
                   "reshape"]
    x = rng.integers(-128, 128, (5, 40)).astype(np.int8)
    want = numpy_dense(x, w, bias, scale, relu=True)
    np.testing.assert_array_equal(evaluate(f, [x]), want)
    np.testing.assert_array_equal(evaluate(g, [x]), want)


def test_ineligible_matmuls_stay() -> None:
    a = gb.var("a", (5, 40), "int8")
    b = gb.var("b", (40, 8), "int8")  # not a constant weight
    zero = np.array(0, np.int8)
    f = gb.function([a, b], gb.call("qnn.matmul_integer", a, b, zero, zero))
    assert dense_as_conv(f).body.op == "qnn.matmul_integer"
    w = np.ones((40, 8), np.int8)
    f = gb.function([a], gb.call("qnn.matmul_integer", a, w, np.array(3, np.int8), zero))
    assert dense_as_conv(f).body.op == "qnn.matmul_integer"  # input zero point 3


@pytest.mark.parametrize("rounding", ["double", "single"])
def test_dense_chain_on_the_accelerator(rounding: str) -> None:
    rng = np.random.default_rng(7)
    f, w, bias, scale = dense_chain(rng, m=12, k=200, n=70)
    g = fixed_point_requantize(dense_as_conv(f), per_channel=True, rounding=rounding)
    compiled = lower_accelerator_chains(pack_accel_layouts(plan_devices(
        annotate_accelerator(g, accel("default")))))
    ops = [e.op for e in post_order(compiled) if isinstance(e, Call)]
    assert ops.count("accel.program") == 1 and "qnn.conv2d_integer" not in ops
    x = rng.integers(-128, 128, (12, 200)).astype(np.int8)
    got = evaluate(compiled, [x])
    np.testing.assert_array_equal(got, evaluate(g, [x]))
    # the integer requantization stays within one step of onnxruntime-style float
    f_ref = numpy_dense(x, w, bias, scale, relu=True)
    assert np.abs(got.astype(np.int64) - f_ref).max() <= 1

