"""tensorfab's post-training quantization (compiler/graph/ptq.py, calibration.py):
observers against numpy written here, the QDQ form onnxruntime's quantizer gives, the
digits CNN's accuracy, and the int8 graph on the accelerator bit for bit."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import onnx
import pytest

from tensorfab.compiler.frontend import from_onnx, quantize_onnx
from tensorfab.compiler.graph import Call, post_order
from tensorfab.compiler.graph import builder as gb
from tensorfab.compiler.graph.batch_norm_folding import fold_batch_norm
from tensorfab.compiler.graph.calibration import (
    CalibrationError,
    MinMaxObserver,
    PercentileObserver,
    make_observer,
)
from tensorfab.compiler.graph.constant_folding import fold_constants
from tensorfab.compiler.graph.fixed_point import fixed_point_requantize
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.graph.ptq import quantize_graph, quantize_weight
from tensorfab.compiler.graph.qdq_lowering import lower_qdq
from tensorfab.models import load_digits_split
from tensorfab.models.digits_cnn import model_path

RNG = np.random.default_rng(12)


def _batches() -> list[np.ndarray]:
    """Three batches with a few outliers (what percentile observers are for)."""
    out = []
    for k in range(3):
        b = RNG.standard_normal((50, 7)).astype(np.float32) * (k + 1)
        b[k, k] = 40.0 * (-1) ** k
        out.append(b)
    return out


def _percentile_by_hand(values: np.ndarray, p: float) -> float:
    """The p-th percentile by linear interpolation between the sorted values (numpy's
    default definition), written out."""
    s = sorted(float(v) for v in values)
    rank = p / 100 * (len(s) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (rank - lo) * (s[hi] - s[lo])


def test_minmax_observer_is_the_largest_magnitude() -> None:
    obs = MinMaxObserver()
    batches = _batches()
    for b in batches:
        obs.update(b)
    lo = min(float(b.min()) for b in batches)
    hi = max(float(b.max()) for b in batches)
    assert obs.amax() == max(-lo, hi) == 40.0


@pytest.mark.parametrize("p", [99.99, 99.0, 90.0, 50.0])
def test_percentile_observer_matches_a_sorted_list(p: float) -> None:
    obs = PercentileObserver(p)
    batches = _batches()
    for b in batches:
        obs.update(b)
    everything = np.concatenate([np.abs(b).ravel() for b in batches])
    assert obs.amax() == pytest.approx(_percentile_by_hand(everything, p), rel=1e-6)
    if p <= 99.0:  # 3 outliers in 1050 values are cut
        assert obs.amax() < 40.0


def test_observer_errors() -> None:
    with pytest.raises(CalibrationError, match="percentile 0 is not in"):
        PercentileObserver(0)
    with pytest.raises(CalibrationError, match="unknown calibration method 'kl'"):
        make_observer("kl")
    with pytest.raises(CalibrationError, match="saw no values"):
        MinMaxObserver().amax()


def test_weights_per_channel_symmetric() -> None:
    w = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)
    w[2] = 0.0  # an all-zero channel keeps scale 1
    q, s = quantize_weight(w, 0)
    for c in range(4):
        amax = float(np.abs(w[c]).max())
        want_s = amax / 127 if amax else 1.0
        assert s[c] == np.float32(want_s)
        want_q = np.clip(np.round(w[c] / np.float32(want_s)), -127, 127)
        np.testing.assert_array_equal(q[c], want_q.astype(np.int8))
    assert q.dtype == np.int8 and s.dtype == np.float32 and np.abs(q).max() == 127


def _one_conv(bias: np.ndarray, weight: np.ndarray):
    """y = relu(conv1x1(x, W) + b) as a float program (a 1×1 convolution is an einsum)."""
    x = gb.var("x", (4, 3, 5, 5))
    y = gb.relu(gb.add(gb.conv2d(x, weight), bias.reshape(-1, 1, 1)))
    return gb.function([x], y)


@pytest.mark.parametrize("method", ["minmax", "percentile"])
def test_scales_and_bias_of_one_convolution(method: str) -> None:
    w = RNG.standard_normal((6, 3, 1, 1)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    f = _one_conv(b, w)
    xs = [RNG.standard_normal((4, 3, 5, 5)).astype(np.float32) for _ in range(2)]
    q = quantize_graph(f, [{"x": x} for x in xs], method=method, percentile=99.0)
    # the reference: observe x and relu(W·x + b) in numpy
    ys = [np.maximum(np.einsum("oi,nihw->nohw", w[:, :, 0, 0].astype(np.float64),
                               x.astype(np.float64)) + b.reshape(1, -1, 1, 1), 0)
          for x in xs]

    def amax(arrays: list[np.ndarray]) -> float:
        mags = np.concatenate([np.abs(a).ravel() for a in arrays])
        return float(mags.max()) if method == "minmax" else _percentile_by_hand(mags, 99.0)

    s_x, s_y = np.float32(amax(xs) / 127), np.float32(amax(ys) / 127)
    calls = [e for e in post_order(q) if isinstance(e, Call)]
    quant = [e for e in calls if e.op == "qnn.quantize"]
    assert len(quant) == 3  # x, the convolution's output, the relu's (same scale)
    got = [float(e.args[1].data) for e in quant]
    assert got[0] == pytest.approx(float(s_x), rel=1e-5)
    assert got[1] == got[2] == pytest.approx(float(s_y), rel=1e-4)
    bias_dq = [e for e in calls if e.op == "qnn.dequantize"
               and e.args[0].checked_type.dtype == "int32"]
    assert len(bias_dq) == 1
    _, s_w = quantize_weight(w, 0)
    acc = (np.float32(got[0]) * s_w).astype(np.float32)
    np.testing.assert_array_equal(bias_dq[0].args[0].data, np.rint(b / acc).astype(np.int32))
    # the QDQ program approximates the float one to within a few output quanta
    x = RNG.standard_normal((4, 3, 5, 5)).astype(np.float32) * 0.5
    np.testing.assert_allclose(evaluate(q, [x]), evaluate(f, [x]), atol=4 * float(s_y))


@pytest.fixture(scope="module")
def digits():
    float_model = onnx.load(str(model_path()))
    xtr, _, xte, yte = load_digits_split(0)
    calib = [{"image": xtr[i:i + 64]} for i in range(0, 512, 64)]
    f = fold_constants(fold_batch_norm(from_onnx(float_model)))
    return {"model": float_model, "float": f, "calib": calib, "x": xte, "y": yte}


def _accuracy(fn, x, y) -> float:
    return float((np.asarray(evaluate(fn, {"image": x})).argmax(axis=1) == y).mean())


@pytest.mark.parametrize("method", ["minmax", "percentile"])
def test_digits_int8_keeps_float_accuracy(digits, method: str) -> None:
    q = quantize_graph(digits["float"], digits["calib"], method=method)
    g = fixed_point_requantize(lower_qdq(fold_constants(q)), per_channel=True)
    fp = _accuracy(digits["float"], digits["x"], digits["y"])
    i8 = _accuracy(g, digits["x"], digits["y"])
    assert abs(fp - i8) <= 0.01, (fp, i8)
    # every convolution and the dense layer are integer operators
    ops = Counter(e.op for e in post_order(g) if isinstance(e, Call))
    assert ops["qnn.conv2d_integer"] == 2 and ops["qnn.matmul_integer"] == 1
    assert "nn.conv2d" not in ops and "matmul" not in ops


def test_same_integer_form_as_onnxruntimes_quantizer(digits) -> None:
    """Our QDQ program lowers to the same operators, in the same order, as the QDQ model
    of onnxruntime's quantizer (so partitioning and accelerator lowering apply)."""
    ours = lower_qdq(fold_constants(quantize_graph(digits["float"], digits["calib"])))
    ort = lower_qdq(fold_constants(from_onnx(quantize_onnx(digits["model"],
                                                           digits["calib"]))))

    def ops(fn) -> list[str]:
        return [e.op for e in post_order(fn) if isinstance(e, Call)]

    assert ops(ours) == ops(ort)


def test_bad_calibration_data_names_the_input(digits) -> None:
    with pytest.raises(CalibrationError, match="calibration batch 0: input 'image': dtype "
                                               "float64, expected float32"):
        quantize_graph(digits["float"], [{"image": np.zeros((2, 1, 8, 8))}])
    with pytest.raises(CalibrationError, match="calibration data is empty"):
        quantize_graph(digits["float"], [])


def _attention(seq: int):
    """softmax(s)·v over ``seq`` tokens, two heads, as a float program."""
    s = gb.var("s", (2, seq, seq))
    v = gb.var("v", (2, seq, 8))
    return gb.function([s, v], gb.matmul(gb.call("nn.softmax", s, axis=-1), v))


def _attention_batch(seq: int) -> dict[str, np.ndarray]:
    # near-uniform attention (weights about 1/seq), as a trained model's heads often
    # are, but for one token attending only to itself (probabilities up to 1, as on
    # BERT's [CLS] and [SEP]); values exact in int8 (integers, ±127 present: scale 1),
    # so that only P and the output round
    s = RNG.standard_normal((2, seq, seq)) * 0.5
    s[0, 0, 0] = 30.0
    v = RNG.integers(-127, 128, (2, seq, 8))
    v[0, 0, 0], v[1, 0, 0] = 127, -127
    return {"s": s.astype(np.float32), "v": v.astype(np.float32)}


def test_two_part_probabilities_keep_diffuse_attention_exact() -> None:
    seq = 128
    f = _attention(seq)
    calib = [_attention_batch(seq) for _ in range(3)]
    one = quantize_graph(f, calib, activation_matmuls=True)
    two = quantize_graph(f, calib, activation_matmuls=True, two_part_probabilities=True)
    # two activation matmuls, the high part at the fixed scale 1/127
    mms = [e for e in post_order(two) if isinstance(e, Call) and e.op == "matmul"]
    assert len(mms) == 2
    high = mms[0].args[0]
    assert high.op == "qnn.dequantize" and float(high.args[1].data) == pytest.approx(1 / 127)
    # the reference in numpy (float64)
    x = _attention_batch(seq)
    e = np.exp(x["s"].astype(np.float64) - x["s"].max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)) @ x["v"].astype(np.float64)
    rms = float(np.sqrt(np.mean(want ** 2)))
    err_one = float(np.sqrt(np.mean((evaluate(one, x) - want) ** 2))) / rms
    err_two = float(np.sqrt(np.mean((evaluate(two, x) - want) ** 2))) / rms
    # one int8 scale: the diffuse weights are one step of 1/127 and P·V is off by a
    # quarter; two parts: what is left is the output's own int8 rounding (rms step/√12)
    out_rounding = np.abs(want).max() / 127 / math.sqrt(12) / rms
    assert err_one > 3 * out_rounding
    assert err_two < 1.5 * out_rounding
