"""The multiply-accumulates of an ONNX model, counted from the file: what an
``accel_mac_fraction`` is a fraction of."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from .onnx_ops import OnnxImportError

__all__ = ["onnx_macs"]

_MAC_OPS = ("Conv", "MatMul", "Gemm", "ConvInteger", "MatMulInteger", "QLinearConv",
            "QLinearMatMul")


def onnx_macs(model: onnx.ModelProto,
              input_shapes: Mapping[str, Sequence[int]] | None = None) -> int:
    """The model's multiply-accumulates for one run: per convolution, output elements ×
    input channels per group × kernel taps; per matrix product, output elements × the
    reduced dimension. Shapes come from ONNX shape inference, with ``input_shapes``
    replacing the declared shapes of named inputs.

    Raises
    ------
    OnnxImportError
        A convolution or matrix product whose shapes could not be determined (names the
        node), or an input without a static shape.
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for inp in model.graph.input:
        if input_shapes and inp.name in input_shapes:
            dims = inp.type.tensor_type.shape.dim
            del dims[:]
            for d in input_shapes[inp.name]:
                dims.add().dim_value = int(d)
    inferred = shape_inference.infer_shapes(model)
    shapes: dict[str, tuple[int, ...]] = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value")
                                                         for d in dims):
            shapes[vi.name] = tuple(d.dim_value for d in dims)
    for init in inferred.graph.initializer:
        shapes[init.name] = tuple(init.dims)
    for node in inferred.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    shapes[node.output[0]] = tuple(numpy_helper.to_array(attr.t).shape)
    missing = [n.output[0] for n in inferred.graph.node
               if n.op_type in _MAC_OPS and n.output[0] not in shapes]
    if missing:
        shapes.update(_shapes_by_running(model, missing))
    total = 0
    for k, node in enumerate(inferred.graph.node):
        if node.op_type not in _MAC_OPS:
            continue
        w_index = 3 if node.op_type.startswith("QLinear") else 1
        w, y = node.input[w_index], node.output[0]
        if w not in shapes or y not in shapes:
            raise OnnxImportError(f"ONNX node {node.name or k} ({node.op_type}): shape of "
                             f"{w!r} or {y!r} unknown (give every input's shape)")
        out = int(np.prod(shapes[y]))
        if "Conv" in node.op_type:
            total += out * int(np.prod(shapes[w][1:]))
        elif node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute):
            total += out * shapes[w][-1]
        else:
            total += out * shapes[w][-2] if len(shapes[w]) >= 2 else out
    return total


def _shapes_by_running(model: onnx.ModelProto, names: list[str]) -> dict[str, tuple[int, ...]]:
    """The shapes of ``names`` that shape inference left open (a reshape to a computed
    shape), from one onnxruntime run on zeros of the inputs' (now static) shapes."""
    import onnxruntime as ort
    from onnx import helper

    probe = onnx.ModelProto.FromString(model.SerializeToString())
    del probe.graph.output[:]
    probe.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    feeds = {}
    inits = {i.name for i in probe.graph.initializer}
    for inp in probe.graph.input:
        if inp.name in inits:
            continue
        t = inp.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
        if any(d < 0 for d in dims):
            raise OnnxImportError(f"ONNX input {inp.name!r}: shape {dims} is not static; give "
                             "it in input_shapes")
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[inp.name] = np.zeros(dims, dtype)
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    return {n: tuple(int(d) for d in v.shape)
            for n, v in zip(names, sess.run(names, feeds), strict=True)}
