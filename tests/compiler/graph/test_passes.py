"""Constant folding and batch-norm folding: same results as before, the expected shape
of the program after."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from graph_models import small_cnn

from tensorfab.compiler.graph import (
    CPU,
    Call,
    Constant,
    Function,
    accel,
    post_order,
    structural_equal,
)
from tensorfab.compiler.graph import builder as gb
from tensorfab.compiler.graph.batch_norm_folding import fold_batch_norm
from tensorfab.compiler.graph.constant_folding import fold_constants
from tensorfab.compiler.graph.lower_runtime import evaluate

sys.path.insert(0, str(Path(__file__).parents[1] / "frontend"))


def ops(f: Function) -> list[str]:
    return [e.op for e in post_order(f) if isinstance(e, Call)]


def test_constant_chains_fold_and_results_stay() -> None:
    x = gb.var("x", (2, 3))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    k = gb.multiply(gb.transpose(gb.transpose(a)), np.float32(0.5))
    parts = gb.split(gb.const(np.arange(4, dtype=np.float32)), axis=0, sections=(1, 3))
    f = gb.function([x], gb.add(gb.add(x, k), gb.tuple_item(parts, 0)))
    g = fold_constants(f)
    assert ops(g) == ["add", "add"]
    xv = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(evaluate(g, [xv]), evaluate(f, [xv]))
    assert structural_equal(fold_constants(g), g)


def test_literal_tuple_items_and_kept_ops() -> None:
    x = gb.var("x", (4,))
    q = gb.dequantize(np.arange(4, dtype=np.int8), np.float32(0.5), np.int8(1), axis=0)
    copied = gb.device_copy(np.ones(4, np.float32), src_device=CPU, dst_device=accel())
    f = gb.function([x], gb.tuple_item(gb.tuple_(gb.add(x, q), copied), 0), check=False)
    g = fold_constants(f)
    assert ops(g) == ["qnn.dequantize", "add"]  # quantization kept, the tuple item taken
    h = fold_constants(f, keep_quantization=False)
    assert ops(h) == ["add"]
    np.testing.assert_array_equal(evaluate(h, [np.zeros(4, np.float32)]),
                                  (np.arange(4) - 1) * 0.5)
    kept = fold_constants(gb.function([x], gb.tuple_(x, copied)))
    assert "device_copy" in ops(kept)


def test_shared_nodes_stay_shared() -> None:
    x = gb.var("x", (3,))
    s = gb.sigmoid(gb.add(x, gb.negative(np.ones(3, np.float32))))
    g = fold_constants(gb.function([x], gb.multiply(s, s)))
    assert g.body.args[0] is g.body.args[1]


def test_batch_norm_folds_into_conv() -> None:
    f = small_cnn(batch=2)
    g = fold_batch_norm(f)
    assert "nn.batch_norm" not in ops(g)
    assert ops(g).count("nn.conv2d") == ops(f).count("nn.conv2d")
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(evaluate(g, [x]), evaluate(f, [x]), rtol=1e-5, atol=1e-6)


def test_batch_norm_after_conv_with_bias_from_onnx() -> None:
    import onnxruntime as ort
    from onnx_models import small_cnn as onnx_cnn

    from tensorfab.compiler.frontend import from_onnx

    model = onnx_cnn()
    f = fold_constants(fold_batch_norm(from_onnx(model)))
    assert "nn.batch_norm" not in ops(f)
    first = next(e for e in post_order(f) if isinstance(e, Call) and e.op == "nn.conv2d")
    readers = [e for e in post_order(f) if isinstance(e, Call) and first in e.args]
    assert [r.op for r in readers] == ["add"]  # one add: conv bias and bn shift merged
    x = np.random.default_rng(1).standard_normal((2, 3, 10, 10)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(evaluate(f, [x]), want, rtol=1e-5, atol=1e-6)


def test_batch_norm_elsewhere_becomes_multiply_add() -> None:
    r = np.random.default_rng(2)
    x = gb.var("x", (1, 4, 3, 3))
    conv = gb.conv2d(x, r.standard_normal((4, 4, 1, 1)).astype(np.float32))
    params = [r.uniform(0.5, 1.5, 4).astype(np.float32) for _ in range(4)]
    bn_of_relu = gb.batch_norm(gb.relu(x), *params)
    bn_of_shared_conv = gb.batch_norm(conv, *params)
    f = gb.function([x], gb.tuple_(gb.add(bn_of_relu, conv), bn_of_shared_conv))
    g = fold_batch_norm(f)
    assert "nn.batch_norm" not in ops(g)
    convs = [e for e in post_order(g) if isinstance(e, Call) and e.op == "nn.conv2d"]
    assert len(convs) == 1 and convs[0].args[1] is conv.args[1]  # shared conv untouched
    xv = r.standard_normal((1, 4, 3, 3)).astype(np.float32)
    for got, want in zip(evaluate(g, [xv]), evaluate(f, [xv]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_folded_constants_keep_devices() -> None:
    x = gb.var("x", (2,), device=CPU)
    k = gb.const(np.ones(2, np.float32))
    f = gb.function([x], gb.add(x, gb.multiply(k, k)))
    from tensorfab.compiler.graph.planning import plan_devices
    g = fold_constants(plan_devices(f))
    c = next(e for e in post_order(g) if isinstance(e, Constant))
    assert c.virtual_device == CPU
    assert structural_equal(plan_devices(g), g)
