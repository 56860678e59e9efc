"""Quantization parameters against onnxruntime's own (quant_utils and QuantizeLinear),
and the observers against numpy."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnxruntime.quantization import quant_utils

from tensorfab.compiler.graph.qparams import (
    MinMaxObserver,
    PercentileObserver,
    QParams,
    activation_qparams,
    dequantize,
    quantize,
    quantize_bias,
    weight_qparams,
)
from tensorfab.compiler.graph.types import GraphError

finite = st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(finite, finite)
def test_activation_qparams_match_onnxruntime(a: float, b: float) -> None:
    rmin, rmax = min(a, b), max(a, b)
    qp = activation_qparams(rmin, rmax)
    zp, scale = quant_utils.compute_scale_zp(np.float32(min(rmin, 0)), np.float32(max(rmax, 0)),
                                             np.int8(-128), np.int8(127))
    if float(scale) < np.finfo(np.float32).tiny:
        assert float(qp.scale) == 1.0 and int(qp.zero_point) == 0
        return
    assert float(qp.scale) == pytest.approx(float(scale), rel=1e-6)
    assert abs(int(qp.zero_point) - int(zp)) <= 1  # float32 vs float64 rounding at .5


def _quantize_linear(x: np.ndarray, scale: np.ndarray, zp: np.ndarray,
                     axis: int | None) -> np.ndarray:
    """onnxruntime's QuantizeLinear on a one-node model."""
    attrs = {} if axis is None else {"axis": axis}
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT8, list(x.shape))],
        [helper.make_tensor("s", TensorProto.FLOAT, scale.shape, scale.ravel().tolist()),
         helper.make_tensor("z", TensorProto.INT8, zp.shape, zp.ravel().tolist())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def test_quantize_matches_quantize_linear_per_tensor_and_per_channel() -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4, 6, 3, 3)) * 3).astype(np.float32)
    x.ravel()[:5] = [0.5, 1.5, -0.5, -2.5, 2.5]  # ties, which round to even
    qp = activation_qparams(-2.0, 7.0)
    want = _quantize_linear(x, np.float32(qp.scale).reshape(()), np.int8(qp.zero_point).reshape(()),
                            None)
    got = quantize(x, qp)
    assert np.abs(got.astype(int) - want).max() <= 1
    assert np.mean(got == want) > 0.99  # ±1 only where float32 and float64 disagree on a tie
    w = (rng.standard_normal((6, 4, 3, 3)) * rng.uniform(0.01, 2, (6, 1, 1, 1))).astype(np.float32)
    wq = weight_qparams(w)
    want = _quantize_linear(w, wq.scale.astype(np.float32), wq.zero_point.astype(np.int8), 0)
    np.testing.assert_array_equal(quantize(w, wq), want)
    # symmetric per-channel: every channel's largest magnitude maps to ±127
    assert (np.abs(quantize(w, wq).reshape(6, -1)).max(1) == 127).all()


def test_dequantize_round_trip_error_is_half_a_step() -> None:
    x = np.linspace(-3, 5, 1001).astype(np.float32)
    qp = activation_qparams(-3, 5)
    err = np.abs(dequantize(quantize(x, qp), qp) - x)
    assert err.max() <= float(qp.scale) / 2 + 1e-6


def test_bias_and_its_overflow() -> None:
    w = weight_qparams(np.array([[1.0, -2.0], [0.5, 0.25]]))
    b = quantize_bias(np.array([0.3, -0.2]), 0.01, w)
    np.testing.assert_array_equal(b, np.rint(np.array([0.3, -0.2]) / (0.01 * w.scale)))
    assert b.dtype == np.int32
    with pytest.raises(GraphError, match="channel 1"):
        quantize_bias(np.array([0.0, 1e9]), 1e-6, w)


def test_observers() -> None:
    rng = np.random.default_rng(2)
    batches = [rng.standard_normal(10_000) * (1 + k) for k in range(4)]
    mm = MinMaxObserver()
    pc = PercentileObserver(percentile=99.9, bins=4096)
    for b in batches:
        mm.observe(b)
        pc.observe(b)
    allx = np.concatenate(batches)
    assert (mm.min, mm.max) == (allx.min(), allx.max())
    lo, hi = pc.range()
    step = (allx.max() - allx.min()) / 4096 * 2  # re-binning may move a bound by a bin
    assert lo == pytest.approx(np.percentile(allx, 0.1), abs=2 * step)
    assert hi == pytest.approx(np.percentile(allx, 99.9), abs=2 * step)
    assert mm.max > hi  # the percentile clips the tail


def test_bad_parameters_are_named() -> None:
    with pytest.raises(GraphError, match="no calibration data"):
        MinMaxObserver().qparams()
    with pytest.raises(GraphError, match="positive"):
        QParams(np.float64(0.0), np.int64(0))
    with pytest.raises(GraphError, match="non-finite"):
        weight_qparams(np.array([[np.nan]]))
    with pytest.raises(GraphError, match="percentile"):
        PercentileObserver(percentile=20)
