"""A model's own MACs counted from the ONNX file: a small hand-made model against the
count by hand, and the errors that name the input or node whose shape is unknown."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorfab.compiler.frontend.onnx_macs import onnx_macs
from tensorfab.compiler.frontend.onnx_ops import OnnxImportError


def _model(batch: int | str = 1) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.zeros((8, 2, 3, 3), np.float32), "w")  # groups=2
    fc = numpy_helper.from_array(np.zeros((8 * 4 * 4, 5), np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", group=2,
                              pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Flatten", ["y"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["z"], name="fc")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], [w, fc])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_conv_and_matmul_macs_by_hand() -> None:
    conv = (1 * 8 * 4 * 4) * (2 * 3 * 3)  # outputs × input channels per group × taps
    dense = 5 * 128                        # outputs × the reduced dimension
    assert onnx_macs(_model()) == conv + dense
    assert onnx_macs(_model("N"), {"x": (3, 4, 8, 8)}) == 3 * (conv + dense)


def test_an_input_without_a_static_shape_is_named() -> None:
    with pytest.raises(OnnxImportError, match=r"ONNX input 'x': shape \[-1, 4, 8, 8\]"):
        onnx_macs(_model("N"))
