"""Importing whole ONNX models: results against onnxruntime, symbolic dims, files, old
opsets, the text form and planning of imported graphs, and the errors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx_models import encoder_layer, qdq_cnn, small_cnn
from onnx_single_op import single_op_model

from tensorfab.compiler.frontend import MAX_OPSET, OnnxImportError, from_onnx, supported_op_types
from tensorfab.compiler.graph import (
    Call,
    Constant,
    TensorType,
    astext,
    parse,
    post_order,
    structural_equal,
)
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.graph.planning import plan_devices
from tensorfab.runtime.kernels import KernelError


def ort_run(model: onnx.ModelProto, feeds: dict, optimize: bool = True) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(model.SerializeToString(), opts,
                             providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def test_small_cnn_from_file_with_symbolic_batch(tmp_path: Path) -> None:
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    f = from_onnx(path)
    assert f.params[0].type_annotation == TensorType(("N", 3, 10, 10), "float32")
    assert f.checked_type.result == TensorType(("N", 5), "float32")
    x = np.random.default_rng(0).standard_normal((3, 3, 10, 10)).astype(np.float32)
    np.testing.assert_allclose(evaluate(f, [x]), ort_run(small_cnn(), {"x": x})[0],
                               rtol=1e-5, atol=1e-6)


def test_input_shapes_override() -> None:
    f = from_onnx(small_cnn(), input_shapes={"x": (2, 3, 10, 10)})
    assert f.checked_type.result == TensorType((2, 5), "float32")
    with pytest.raises(OnnxImportError, match=r"input_shapes names \['y'\]"):
        from_onnx(small_cnn(), input_shapes={"y": (1,)})


def test_old_opset_is_converted() -> None:
    m = small_cnn(opset=13)
    # an opset-9 model: Relu and Add only, which the version converter lifts to 13
    old = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["a"], ["r"]),
                           helper.make_node("Add", ["r", "a"], ["y"])], "old",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]),
        opset_imports=[helper.make_opsetid("", 9)])
    old.ir_version = 4
    a = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(evaluate(from_onnx(old), [a]), ort_run(old, {"a": a})[0])
    assert from_onnx(m) is not None


def test_encoder_layer_matches_onnxruntime() -> None:
    model = encoder_layer()
    f = from_onnx(model)
    # the Shape/Gather/Concat chains were folded: reshapes take constant shapes
    assert not any(isinstance(e, Call) and e.op in ("shape_of", "take")
                   for e in post_order(f))
    r = np.random.default_rng(2)
    x = r.standard_normal((2, 6, 8)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], np.int64)
    want = ort_run(model, {"x": x, "mask": mask})[0]
    np.testing.assert_allclose(evaluate(f, {"x": x, "mask": mask}), want, rtol=1e-5,
                               atol=1e-5)


def test_qdq_model_matches_onnxruntime_within_one_quantum() -> None:
    model = qdq_cnn()
    f = from_onnx(model)
    ops = {e.op for e in post_order(f) if isinstance(e, Call)}
    assert {"qnn.quantize", "qnn.dequantize"} <= ops  # kept for the quantized flow
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = evaluate(f, [x])
    want = ort_run(model, {"x": x}, optimize=False)[0]
    # a float conv rounded to int8 may fall on the other side of a tie: at most one
    # quantum (0.05) of one activation, averaged by the pool over 64 values, times fc
    np.testing.assert_allclose(got, want, rtol=0, atol=0.05 / 64 * 127 * 0.01 * 6 + 1e-5)


@pytest.mark.parametrize("make", [small_cnn, encoder_layer, qdq_cnn])
def test_imported_graphs_round_trip_and_plan(make) -> None:
    f = from_onnx(make())
    assert structural_equal(parse(astext(f)), f)
    p = plan_devices(f)
    assert structural_equal(plan_devices(p), p)


def test_symbolic_shape_kept_and_runtime_reshape_on_the_cpu() -> None:
    n = helper.make_node
    model = helper.make_model(helper.make_graph(
        [n("Shape", ["x"], ["s"]), n("Reshape", ["x", "s"], ["y"], name="the_reshape")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4])]),
        opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    f = from_onnx(model)  # the shape (B, 4) is known at import: a static reshape
    assert isinstance(f.body, Call) and f.body.op == "reshape"
    assert f.body.attrs["newshape"] == ("B", 4)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(evaluate(f, [x]), x)
    given = helper.make_model(helper.make_graph(  # a shape known only at run time
        [n("Reshape", ["x", "s"], ["y"], name="the_reshape")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["R", "C"])]),
        opset_imports=[helper.make_opsetid("", 14)])
    given.ir_version = 8
    f = from_onnx(given)
    assert isinstance(f.body, Call) and f.body.op == "dynamic_reshape"
    np.testing.assert_array_equal(evaluate(f, [x, np.array([2, 6], np.int64)]),
                                  x.reshape(2, 6))


def test_reshape_of_a_symbolic_batch_with_minus_one_for_it() -> None:
    """Reshape (B, 4, 6, 6) to (-1, 144) (a TensorFlow export's flatten) with a symbolic
    B: the -1 is B, but the import refused it ('symbolic dims do not match')."""
    n = helper.make_node
    model = helper.make_model(helper.make_graph(
        [n("Reshape", ["x", "s"], ["y"], name="flatten0")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 144])],
        [helper.make_tensor("s", TensorProto.INT64, [2], [-1, 144])]),
        opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    f = from_onnx(model)
    assert f.body.checked_type.shape == ("B", 144)  # type: ignore[union-attr]
    for batch in (1, 3):
        x = np.arange(batch * 144, dtype=np.float32).reshape(batch, 4, 6, 6)
        np.testing.assert_array_equal(evaluate(f, [x]), ort_run(model, {"x": x})[0])


def test_shape_of_symbolic_input() -> None:
    model = single_op_model("Shape", [("x", np.zeros((2, 3), np.float32))])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "B"
    f = from_onnx(model)
    assert isinstance(f.body, Call) and f.body.op == "shape_of"
    np.testing.assert_array_equal(evaluate(f, [np.zeros((5, 3), np.float32)]), [5, 3])
    static = from_onnx(single_op_model("Shape", [("x", np.zeros((2, 3), np.float32))]))
    assert isinstance(static.body, Constant)


def test_unsupported_op_names_node_op_type_opset_and_the_supported_ops() -> None:
    model = single_op_model("Einsum", [("a", np.zeros((2, 3), np.float32)),
                                       ("b", np.zeros((3, 4), np.float32))],
                            {"equation": "ij,jk->ik"}, opset=17)
    with pytest.raises(OnnxImportError) as e:
        from_onnx(model)
    msg = str(e.value)
    assert "node 'the_Einsum' (op_type Einsum, opset 17) is not supported" in msg
    assert "Conv, ConvInteger" in msg and "QLinearConv" in msg
    assert set(supported_op_types()) == set(ISSUE_OPS)


ISSUE_OPS = [
    "Conv", "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Sum", "Relu", "Clip", "LeakyRelu",
    "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Erf", "BatchNormalization", "MaxPool",
    "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LRN", "Flatten", "Reshape",
    "Transpose", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Gather", "Shape",
    "Constant", "ConstantOfShape", "Identity", "Dropout", "Cast", "Pad", "Softmax",
    "ReduceMean", "Pow", "Sqrt", "LayerNormalization", "Where", "QuantizeLinear",
    "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger",
    # the ops the _expanded node tests of the above are written in (issue 34)
    "Neg", "Reciprocal", "Exp", "Size", "Less", "Max", "Min", "CastLike", "ReduceSum",
    "ReduceMax",
    "Gelu",
]


def test_unsupported_op_of_a_converted_old_opset_names_the_models_own_node() -> None:
    """An opset-9 model is converted to opset 13 first. Its Upsample became a Resize
    without a name: the error said "node '#1' (op_type Resize, opset 13)", an op, a node
    and an opset the user's model does not have."""
    node = helper.make_node("Upsample", ["x", "scales"], ["y"], name="up0", mode="nearest")
    graph = helper.make_graph(
        [node], "old", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])],
        [helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 4
    with pytest.raises(OnnxImportError, match=r"\(op_type Resize, opset 13, converted from "
                                              r"the model's Upsample 'up0' of opset 9\) is "
                                              r"not supported"):
        from_onnx(model)


def test_other_domain_is_unsupported() -> None:
    node = helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft", name="g")
    model = helper.make_model(
        helper.make_graph([node], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    with pytest.raises(OnnxImportError, match=r"in domain 'com\.microsoft' is not supported"):
        from_onnx(model)


def test_malformed_model_gives_checker_message_and_file(tmp_path: Path) -> None:
    bad = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["nowhere"], ["y"])], "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]),
        opset_imports=[helper.make_opsetid("", 17)])
    bad.ir_version = 8
    path = tmp_path / "bad.onnx"
    onnx.save(bad, path)
    with pytest.raises(OnnxImportError) as e:
        from_onnx(path)
    msg = str(e.value)
    assert str(path) in msg and "the onnx checker rejects the model" in msg
    assert "nowhere" in msg
    with pytest.raises(OnnxImportError, match="no such file"):
        from_onnx(tmp_path / "missing.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"\x00not a protobuf\xff" * 3)
    with pytest.raises(OnnxImportError, match=r"junk\.onnx"):
        from_onnx(tmp_path / "junk.onnx")


def test_model_without_outputs_is_refused_naming_the_file(tmp_path: Path, capsys) -> None:
    """A graph with no outputs passed the checker and imported as `%0 = ();` (and
    compiled to a model computing nothing); it is refused at import now."""
    from tensorfab.cli import main

    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])], []),
        opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path / "noout.onnx"
    onnx.save(model, path)
    onnx.checker.check_model(onnx.load(path))  # the checker accepts it
    with pytest.raises(OnnxImportError, match=rf"^{re.escape(str(path))}: the graph has "
                                              r"no outputs"):
        from_onnx(path)
    capsys.readouterr()
    assert main(["compile", str(path), "-o", str(tmp_path / "noout.tfm")]) == 2
    assert capsys.readouterr().err == (f"error: {path}: the graph has no outputs; a model "
                                       "computes at least one (list it in graph.output)\n")
    assert not (tmp_path / "noout.tfm").exists()


def test_empty_or_non_protobuf_file_is_not_an_onnx_model(tmp_path: Path, capsys) -> None:
    """A 0-byte .onnx said 'the onnx checker rejects the model: The model does not have
    an ir_version set properly.', a text file 'not a readable ONNX model: Error parsing
    message ...'; each now says what the file is."""
    from tensorfab.cli import main

    cases = {"empty.onnx": (b"", "not an ONNX model: the file is empty (0 bytes)"),
             "text.onnx": (b"hello, this is not protobuf\n",
                           "not an ONNX model, or a damaged one (it does not parse: "),
             # bytes that parse as a protobuf message of unknown fields only
             "other.onnx": (b"\x50\x01", "not an ONNX model: it holds no ir_version and "
                                         "no graph")}
    for name, (data, words) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(OnnxImportError, match=re.escape(f"{path}: {words}")):
            from_onnx(path)
        capsys.readouterr()
        assert main(["inspect", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {path}: {words}") and "checker" not in err, err


def test_too_new_opset_is_refused() -> None:
    model = single_op_model("Relu", [("x", np.zeros(2, np.float32))])
    model.opset_import[0].version = MAX_OPSET + 1
    with pytest.raises(OnnxImportError, match=rf"opset {MAX_OPSET + 1} is newer than the "
                                              rf"supported 11\.\.{MAX_OPSET}"):
        from_onnx(model)


def test_type_error_in_a_node_names_the_node() -> None:
    model = single_op_model("Relu", [("x", np.zeros((2, 3), np.float32))])
    conv = single_op_model("Conv", [("x", np.zeros((1, 3, 5, 5), np.float32)),
                                    ("w", np.zeros((2, 3, 3, 3), np.float32))],
                           {"pads": [1, 1, 1, 1]})
    assert from_onnx(model) is not None and from_onnx(conv) is not None
    conv3d = single_op_model("Conv", [("x", np.zeros((1, 3, 5, 5, 5), np.float32)),
                                      ("w", np.zeros((2, 3, 3, 3, 3), np.float32))])
    with pytest.raises(OnnxImportError, match=r"node 'the_Conv' \(op_type Conv, opset 17\)"
                                              r": input has shape .*only 2-D"):
        from_onnx(conv3d)


def test_attribute_out_of_range_that_onnx_lets_through_names_the_node() -> None:
    """ONNX's checker and shape inference accept LRN size=0; the import refuses it by
    node instead of a numpy error in the kernel at run time."""
    lrn = single_op_model("LRN", [("x", np.zeros((1, 3, 4, 4), np.float32))], {"size": 0})
    with pytest.raises(OnnxImportError, match=r"node 'the_LRN' \(op_type LRN, opset 17\)"
                                              r".*attribute size=0 must be at least 1"):
        from_onnx(lrn)


def test_clip_bound_of_more_than_one_value_names_the_node() -> None:
    """ONNX's Clip takes scalar bounds (onnxruntime refuses others); a (3,) min gave
    numpy's ``cannot reshape array of size 3 into shape ()`` without the node."""
    clip = single_op_model("Clip", [("x", np.zeros((2, 3), np.float32)),
                                    ("lo", np.zeros(3, np.float32))], constant=("lo",))
    with pytest.raises(OnnxImportError, match=r"node 'the_Clip' \(op_type Clip, opset 17\)"
                                              r": Clip's min has shape \(3,\); ONNX takes "
                                              r"one value"):
        from_onnx(clip)


@pytest.mark.parametrize("op, shape, pads", [
    ("MaxPool", (1, 2, 3, 3), [2, 0, 0, 0]), ("AveragePool", (1, 2, 3, 3), [0, 0, 0, 2]),
    ("AveragePool", (1, 2, 5), [0, 3]), ("MaxPool", (1, 2, 3, 3, 3), [0, 0, 2, 0, 0, 0])])
def test_pool_padded_by_its_kernel_or_more_is_refused_by_node(op: str, shape: tuple,
                                                              pads: list) -> None:
    """A pad as large as the kernel makes windows wholly in the padding: the max pool
    gave -inf there and the average pool NaN, silently (onnxruntime refuses the model)."""
    kernel = [2] * (len(shape) - 2)
    pool = single_op_model(op, [("x", np.zeros(shape, np.float32))],
                           {"kernel_shape": kernel, "pads": pads})
    with pytest.raises(OnnxImportError, match=rf"node 'the_{op}' \(op_type {op}, opset 17\)"
                                              r": pads \(.*\) with kernel_shape \(.*\): each"
                                              r" pad must be smaller than the kernel"):
        from_onnx(pool)


def test_gather_index_out_of_range_is_a_kernel_error() -> None:
    """ONNX lets a constant Gather index past the axis through; running it is a one-line
    KernelError naming the ONNX node, the index and the axis, not numpy's IndexError
    (the node was not named: 'take: index 7 ...')."""
    gather = single_op_model("Gather", [("x", np.zeros((2, 3), np.float32)),
                                        ("i", np.array([1, 7], np.int64))],
                             constant=("i",))
    f = from_onnx(gather)
    with pytest.raises(KernelError, match=r"^node 'the_Gather' \(take\): index 7 is out of "
                                          r"range for axis 0 of size 2 \(indices run "
                                          r"-2\.\.1\)$"):
        evaluate(f, [np.ones((2, 3), np.float32)])


@pytest.mark.parametrize("opset", range(11, MAX_OPSET + 1))
def test_every_native_opset(opset: int) -> None:
    model = small_cnn(opset=opset)
    x = np.random.default_rng(opset).standard_normal((2, 3, 10, 10)).astype(np.float32)
    np.testing.assert_allclose(evaluate(from_onnx(model), [x]), ort_run(model, {"x": x})[0],
                               rtol=1e-5, atol=1e-6)
    if opset >= 17:
        enc = encoder_layer(opset=opset)
        r = np.random.default_rng(opset)
        feeds = {"x": r.standard_normal((2, 6, 8)).astype(np.float32),
                 "mask": np.ones((2, 6), np.int64)}
        np.testing.assert_allclose(evaluate(from_onnx(enc), feeds), ort_run(enc, feeds)[0],
                                   rtol=1e-5, atol=1e-5)


def test_input_names_are_kept_for_feeding() -> None:
    model = single_op_model("Relu", [("input:0", np.zeros((2, 3), np.float32))])
    f = from_onnx(model)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    np.testing.assert_array_equal(evaluate(f, {"input:0": x}), np.maximum(x, 0))
    assert "%input_0: Tensor[(2, 3), float32]" in astext(f)
    assert structural_equal(parse(astext(f)), f)
