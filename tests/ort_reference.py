"""onnxruntime sessions whose results do not depend on the host CPU, for references."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper


@functools.cache
def u8s8_kernels_saturate() -> bool:
    """Whether this CPU's onnxruntime adds pairs of U8S8 products in 16 bits.

    Without VNNI (AVX2, AVX-512 without VNNI), onnxruntime's U8S8 integer kernels use
    ``vpmaddubsw``, whose 16-bit pair sums saturate (microsoft/onnxruntime#16105):
    ``255·(-128) + 255·(-128)`` comes out as ``-32768``. Found by running that product.
    """
    a = helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])
    b = helper.make_tensor("b", TensorProto.INT8, [2, 1], [-128, -128])
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
                              "probe", [a], [y], [b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"a": np.full((1, 2), 255, np.uint8)})[0]
    return int(got[0, 0]) != 2 * 255 * -128


def reference_session(model: onnx.ModelProto) -> ort.InferenceSession:
    """A CPU session of ``model`` for reference results.

    Where :func:`u8s8_kernels_saturate`, QDQ groups are not fused into onnxruntime's
    integer kernels (``session.disable_quant_qdq``): they run as dequantize, float
    operator, quantize, which is the QDQ format's definition, instead of kernels that
    differ from the exact result by tens of units on such a CPU.
    """
    opts = ort.SessionOptions()
    if u8s8_kernels_saturate():
        opts.add_session_config_entry("session.disable_quant_qdq", "1")
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
