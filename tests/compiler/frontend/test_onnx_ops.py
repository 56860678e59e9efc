"""Every frontend op against onnxruntime on single-node models (floats within 1e-5
relative, integer ops exact)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_single_op import check_op
from ort_reference import u8s8_kernels_saturate

RNG = np.random.default_rng(20261122)


def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def pos32(*shape: int) -> np.ndarray:
    return RNG.uniform(0.5, 2.0, shape).astype(np.float32)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# ---------------------------------------------------------------------------- elementwise
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)),
                                    ((2, 1, 4), (3, 1))])
def test_binary_float(op: str, shapes: tuple) -> None:
    a = f32(*shapes[0])
    b = pos32(*shapes[1]) if op == "Div" else f32(*shapes[1])
    check_op(op, [("a", a), ("b", b)])


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_int(op: str) -> None:
    a = RNG.integers(-50, 50, (3, 4)).astype(np.int32)
    b = RNG.integers(1, 7, (3, 4)).astype(np.int32) * RNG.choice([-1, 1], (3, 4)).astype(
        np.int32)
    check_op(op, [("a", a), ("b", b)])


def test_pow_with_int_exponent() -> None:
    check_op("Pow", [("a", pos32(3, 4)), ("b", np.array(3, np.int64))], constant=["b"])
    check_op("Pow", [("a", pos32(3, 4)), ("b", f32(3, 4))])


def test_sum_of_three() -> None:
    check_op("Sum", [("a", f32(2, 3)), ("b", f32(3)), ("c", f32(2, 1))])


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Erf", "HardSwish", "Identity"])
def test_unary(op: str) -> None:
    check_op(op, [("x", f32(2, 3, 5, scale=3.0))])


def test_sqrt() -> None:
    check_op("Sqrt", [("x", pos32(4, 5))])


def test_leaky_relu_and_hard_sigmoid() -> None:
    check_op("LeakyRelu", [("x", f32(3, 7))], {"alpha": 0.2})
    check_op("LeakyRelu", [("x", f32(3, 7))])
    check_op("HardSigmoid", [("x", f32(3, 7, scale=4.0))], {"alpha": 0.3, "beta": 0.4})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_opset20(approximate: str) -> None:
    check_op("Gelu", [("x", f32(3, 5, 7, scale=3.0))], {"approximate": approximate},
             opset=20)


@pytest.mark.parametrize("bounds", [(-0.5, 0.7), (None, 0.3), (0.0, None)])
def test_clip(bounds: tuple) -> None:
    lo, hi = (None if b is None else np.array(b, np.float32) for b in bounds)
    inputs = [("x", f32(4, 5)), ("min", lo), ("max", hi)]
    while inputs[-1][1] is None:
        inputs.pop()
    check_op("Clip", inputs, constant=["min", "max"])


def test_clip_int() -> None:
    x = RNG.integers(-100, 100, (4, 5)).astype(np.int32)
    check_op("Clip", [("x", x), ("min", np.array(-10, np.int32)),
                      ("max", np.array(20, np.int32))], constant=["min", "max"])


def test_where() -> None:
    c = RNG.random((3, 4)) > 0.5
    check_op("Where", [("c", c), ("x", f32(3, 4)), ("y", f32(4))])


@pytest.mark.parametrize("to,src", [(TensorProto.INT32, "f"), (TensorProto.FLOAT, "i"),
                                    (TensorProto.INT64, "f"), (TensorProto.BOOL, "f")])
def test_cast(to: int, src: str) -> None:
    x = f32(3, 4, scale=5.0) if src == "f" else RNG.integers(-9, 9, (3, 4)).astype(np.int32)
    check_op("Cast", [("x", x)], {"to": to})


def test_dropout_inference() -> None:
    check_op("Dropout", [("x", f32(2, 5))], n_outputs=2)


# ------------------------------------------------------------------------------- conv
CONV_CASES = {
    "plain": ((1, 3, 9, 9), (8, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "stride2": ((2, 4, 10, 11), (6, 4, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
    "dilated": ((1, 3, 12, 12), (4, 3, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    "groups": ((1, 8, 7, 7), (6, 4, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    "depthwise": ((1, 8, 9, 9), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
    "same_upper": ((1, 3, 9, 10), (5, 3, 4, 3), {"auto_pad": "SAME_UPPER",
                                                 "strides": [2, 2]}),
    "same_lower": ((1, 3, 9, 10), (5, 3, 4, 4), {"auto_pad": "SAME_LOWER"}),
    "valid": ((1, 3, 8, 8), (5, 3, 3, 3), {"auto_pad": "VALID", "strides": [2, 1]}),
    "1x1": ((2, 16, 5, 5), (8, 16, 1, 1), {}),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv(case: str) -> None:
    xs, ws, attrs = CONV_CASES[case]
    check_op("Conv", [("x", f32(*xs)), ("w", f32(*ws)), ("b", f32(ws[0]))], attrs,
             constant=["w", "b"])


def test_conv_without_bias_weight_as_input() -> None:
    check_op("Conv", [("x", f32(1, 3, 6, 6)), ("w", f32(4, 3, 3, 3))])


@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm(trans: tuple) -> None:
    a = f32(3, 5) if not trans[0] else f32(5, 3)
    b = f32(5, 4) if not trans[1] else f32(4, 5)
    check_op("Gemm", [("a", a), ("b", b), ("c", f32(4))],
             {"transA": trans[0], "transB": trans[1], "alpha": 0.5, "beta": 2.0},
             constant=["b", "c"])


def test_gemm_without_c() -> None:
    check_op("Gemm", [("a", f32(2, 6)), ("b", f32(3, 6))], {"transB": 1})


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)),
                                    ((2, 3, 4), (2, 4, 6)), ((4,), (4, 3)),
                                    ((2, 1, 3, 4), (5, 4, 2))])
def test_matmul(shapes: tuple) -> None:
    check_op("MatMul", [("a", f32(*shapes[0])), ("b", f32(*shapes[1]))])


def test_batch_norm() -> None:
    c = 5
    check_op("BatchNormalization",
             [("x", f32(2, c, 4, 3)), ("g", f32(c)), ("b", f32(c)), ("m", f32(c)),
              ("v", pos32(c))], {"epsilon": 1e-3}, constant=["g", "b", "m", "v"])


POOL_CASES = {
    "k2s2": {"kernel_shape": [2, 2], "strides": [2, 2]},
    "k3s1p1": {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    "k3s2_ceil": {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    # ceil mode whose last window would start in the end padding: dropped (width 8)
    "k1s2_ceil_last_window": {"kernel_shape": [1, 1], "strides": [2, 2], "ceil_mode": 1},
    "k3s3p1_ceil_last_window": {"kernel_shape": [3, 3], "strides": [3, 3],
                                "pads": [1, 1, 1, 1], "ceil_mode": 1},
    "asym_pads": {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 0, 1]},
    "same_upper": {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
}


@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_max_pool(case: str) -> None:
    check_op("MaxPool", [("x", f32(2, 3, 9, 8))], POOL_CASES[case])


def test_max_pool_dilated() -> None:
    check_op("MaxPool", [("x", f32(1, 2, 10, 10))],
             {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [1, 1, 1, 1]})


@pytest.mark.parametrize("include", [0, 1])
@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_avg_pool(case: str, include: int) -> None:
    check_op("AveragePool", [("x", f32(2, 3, 9, 8))],
             {**POOL_CASES[case], "count_include_pad": include})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op: str) -> None:
    check_op(op, [("x", f32(2, 6, 5, 7))])


def test_lrn() -> None:
    check_op("LRN", [("x", f32(2, 7, 4, 4))],
             {"size": 3, "alpha": 1e-2, "beta": 0.75, "bias": 2.0})
    check_op("LRN", [("x", f32(1, 6, 3, 3))], {"size": 5})


@pytest.mark.parametrize("opset,axis", [(17, -1), (17, 1), (11, 1), (11, -1)])
def test_softmax(opset: int, axis: int) -> None:
    check_op("Softmax", [("x", f32(2, 3, 5, scale=3.0))], {"axis": axis}, opset=opset)


def test_layer_norm() -> None:
    check_op("LayerNormalization", [("x", f32(2, 5, 8)), ("g", f32(8)), ("b", f32(8))],
             {"epsilon": 1e-5}, constant=["g", "b"])
    check_op("LayerNormalization", [("x", f32(2, 3, 4)), ("g", f32(3, 4))], {"axis": 1},
             constant=["g"])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(mode: str) -> None:
    inputs = [("x", f32(2, 3, 4, 5)), ("pads", i64(0, 0, 1, 2, 0, 1, 2, 1)),
              ("value", np.array(1.5, np.float32))]
    check_op("Pad", inputs, {"mode": mode}, constant=["pads", "value"])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads_at_run_time", [False, True])
def test_pad_with_negative_pads_crops(mode: str, pads_at_run_time: bool) -> None:
    """A negative pad removes values (ONNX allows it); the kernel gave numpy's
    ``ValueError: index can't contain negative values`` when the model ran."""
    inputs = [("x", f32(1, 2, 5, 6)), ("pads", i64(0, 0, -1, 2, 0, -1, 2, -2))]
    check_op("Pad", inputs, {"mode": mode}, constant=[] if pads_at_run_time else ["pads"],
             opset=19)


def test_pad_with_axes() -> None:
    check_op("Pad", [("x", f32(2, 3, 4)), ("pads", i64(1, 2, 3, 0)), ("value", None),
                     ("axes", i64(0, 2))], constant=["pads", "axes"], opset=18)


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_mean(opset: int, keepdims: int) -> None:
    if opset >= 18:
        check_op("ReduceMean", [("x", f32(2, 3, 4)), ("axes", i64(1, -1))],
                 {"keepdims": keepdims}, constant=["axes"], opset=opset)
    else:
        check_op("ReduceMean", [("x", f32(2, 3, 4))], {"axes": [1, -1],
                                                        "keepdims": keepdims}, opset=opset)
    check_op("ReduceMean", [("x", f32(2, 3, 4))], {"keepdims": keepdims}, opset=opset)


# ------------------------------------------------------------------------------ shapes
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_flatten(axis: int) -> None:
    check_op("Flatten", [("x", f32(2, 3, 4))], {"axis": axis})


@pytest.mark.parametrize("shape", [(6, 4), (0, -1), (-1,), (2, 0, 2, 2)])
def test_reshape(shape: tuple) -> None:
    check_op("Reshape", [("x", f32(2, 3, 4)), ("s", i64(*shape))], constant=["s"])


def test_transpose() -> None:
    check_op("Transpose", [("x", f32(2, 3, 4))], {"perm": [1, 2, 0]})
    check_op("Transpose", [("x", f32(2, 3, 4))])


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze(opset: int) -> None:
    x = f32(1, 3, 1, 4)
    if opset >= 13:
        check_op("Squeeze", [("x", x), ("a", i64(0, 2))], constant=["a"], opset=opset)
        check_op("Unsqueeze", [("x", x), ("a", i64(0, -1))], constant=["a"], opset=opset)
    else:
        check_op("Squeeze", [("x", x)], {"axes": [2]}, opset=opset)
        check_op("Unsqueeze", [("x", x)], {"axes": [1, 5]}, opset=opset)
    check_op("Squeeze", [("x", x)], opset=opset)


def test_concat() -> None:
    check_op("Concat", [("a", f32(2, 3)), ("b", f32(2, 1)), ("c", f32(2, 4))], {"axis": 1})


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split(opset: int) -> None:
    x = f32(2, 7, 3)
    if opset >= 13:
        check_op("Split", [("x", x), ("s", i64(2, 5))], {"axis": 1}, constant=["s"],
                 n_outputs=2, opset=opset)
    else:
        check_op("Split", [("x", x)], {"axis": 1, "split": [3, 4]}, n_outputs=2,
                 opset=opset)
    attrs = {"num_outputs": 3} if opset >= 18 else {}
    check_op("Split", [("x", f32(6, 2))], attrs, n_outputs=3, opset=opset)


def test_split_num_outputs_uneven() -> None:
    check_op("Split", [("x", f32(7, 2))], {"num_outputs": 3}, n_outputs=3, opset=18)


@pytest.mark.parametrize("spec", [
    ((0,), (2,), None, None),
    ((1, 0), (-1, 100), (1, 2), None),
    ((-1,), (-9223372036854775807,), (1,), (-1,)),
    ((0, 3), (4, 0), (0, 2), (2, -2)),
])
def test_slice(spec: tuple) -> None:
    starts, ends, axes, steps = spec
    inputs = [("x", f32(5, 6, 7)), ("st", i64(*starts)), ("en", i64(*ends)),
              ("ax", None if axes is None else i64(*axes)),
              ("sp", None if steps is None else i64(*steps))]
    while inputs[-1][1] is None:
        inputs.pop()
    check_op("Slice", inputs, constant=["st", "en", "ax", "sp"])


@pytest.mark.parametrize("axis", [0, 1])
def test_gather(axis: int) -> None:
    idx = np.array([[0, 2], [-1, 1]], np.int64)
    check_op("Gather", [("x", f32(4, 3)), ("i", idx)], {"axis": axis})


def test_shape_and_constant_of_shape() -> None:
    check_op("Shape", [("x", f32(2, 3, 4))])
    check_op("Shape", [("x", f32(2, 3, 4))], {"start": 1}, opset=15)
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [2.5])
    check_op("ConstantOfShape", [("s", i64(2, 3))], {"value": value}, constant=["s"])


def test_constant() -> None:
    t = helper.make_tensor("v", TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0])
    check_op("Constant", [], {"value": t})
    check_op("Constant", [], {"value_ints": [1, 2, 3]})
    check_op("Constant", [], {"value_float": 0.25})


# ---------------------------------------------------------------------------- quantized
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_quantize_dequantize(dtype: type) -> None:
    x = f32(2, 4, 3, scale=4.0)
    zp = np.array(3 if dtype == np.int8 else 128, dtype)
    scale = np.array(0.05, np.float32)
    check_op("QuantizeLinear", [("x", x), ("s", scale), ("z", zp)], constant=["s", "z"])
    q = RNG.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (2, 4, 3)).astype(dtype)
    check_op("DequantizeLinear", [("q", q), ("s", scale), ("z", zp)], constant=["s", "z"])


def test_quantize_ties_round_to_even() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 300.0, -300.0], np.float32)
    out = check_op("QuantizeLinear", [("x", x), ("s", np.array(1.0, np.float32)),
                                      ("z", np.array(0, np.int8))], constant=["s", "z"])
    np.testing.assert_array_equal(out[0], [0, 2, 2, 0, -2, -2, 127, -128])


def test_quantize_per_axis() -> None:
    x = f32(2, 3, 4)
    scale = np.array([0.02, 0.05, 0.1], np.float32)
    zp = np.array([0, 5, -3], np.int8)
    check_op("QuantizeLinear", [("x", x), ("s", scale), ("z", zp)], {"axis": 1},
             constant=["s", "z"])
    q = RNG.integers(-128, 127, (2, 3, 4)).astype(np.int8)
    check_op("DequantizeLinear", [("q", q), ("s", scale), ("z", zp)], {"axis": 1},
             constant=["s", "z"])


def test_dequantize_int32_without_zero_point() -> None:
    q = RNG.integers(-5000, 5000, (6,)).astype(np.int32)
    check_op("DequantizeLinear", [("q", q), ("s", np.array(0.001, np.float32))],
             constant=["s"])


def _q(shape: tuple, dtype: type) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("xdt,wdt", [(np.uint8, np.uint8), (np.uint8, np.int8),
                                     (np.int8, np.int8)])
def test_conv_integer(xdt: type, wdt: type) -> None:
    check_op("ConvInteger", [("x", _q((1, 3, 7, 7), xdt)), ("w", _q((4, 3, 3, 3), wdt)),
                             ("xz", np.array(7, xdt)), ("wz", np.array(2, wdt))],
             {"pads": [1, 1, 1, 1], "strides": [2, 2]}, constant=["w", "xz", "wz"])


def test_conv_integer_grouped_without_zero_points() -> None:
    check_op("ConvInteger", [("x", _q((1, 4, 6, 6), np.uint8)),
                             ("w", _q((4, 2, 3, 3), np.uint8))], {"group": 2})


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_matmul_integer(dtype: type) -> None:
    check_op("MatMulInteger", [("a", _q((3, 5), dtype)), ("b", _q((5, 4), dtype)),
                               ("az", np.array(3, dtype)), ("bz", np.array(1, dtype))],
             constant=["b", "az", "bz"])
    check_op("MatMulInteger", [("a", _q((2, 3, 5), dtype)), ("b", _q((5, 4), dtype))])


def test_matmul_integer_per_column_zero_point() -> None:
    check_op("MatMulInteger", [("a", _q((3, 5), np.uint8)), ("b", _q((5, 4), np.uint8)),
                               ("az", np.array(3, np.uint8)),
                               ("bz", np.array([1, 2, 3, 4], np.uint8))],
             constant=["b", "az", "bz"])


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
def test_qlinear_conv(per_channel: bool, xdt: type) -> None:
    o = 6
    ws = (RNG.uniform(0.002, 0.01, o) if per_channel else np.array(0.004)).astype(np.float32)
    wz = np.zeros(o if per_channel else (), np.int8)
    yzp = np.array(10 if xdt == np.uint8 else -5, xdt)
    w = _q((o, 4, 3, 3), np.int8)
    if xdt == np.uint8 and u8s8_kernels_saturate():
        # 7-bit weights (onnxruntime's reduce_range): this CPU's U8S8 kernel adds pairs
        # of products in 16 bits, which saturate with 8-bit weights (ort_reference.py)
        w = w // 2
    check_op("QLinearConv",
             [("x", _q((1, 4, 8, 8), xdt)), ("xs", np.array(0.02, np.float32)),
              ("xz", np.array(100 if xdt == np.uint8 else 3, xdt)),
              ("w", w), ("ws", ws), ("wz", wz),
              ("ys", np.array(0.15, np.float32)), ("yz", yzp),
              ("b", RNG.integers(-2000, 2000, o).astype(np.int32))],
             {"pads": [1, 1, 1, 1]}, constant=["xs", "xz", "w", "ws", "wz", "ys", "yz", "b"])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_matmul(dtype: type) -> None:
    check_op("QLinearMatMul",
             [("a", _q((4, 16), dtype)), ("as", np.array(0.03, np.float32)),
              ("az", np.array(5, dtype)), ("b", _q((16, 8), dtype)),
              ("bs", np.array(0.02, np.float32)), ("bz", np.array(2, dtype)),
              ("ys", np.array(0.4, np.float32)), ("yz", np.array(7, dtype))],
             constant=["as", "az", "b", "bs", "bz", "ys", "yz"])
