"""Single-node ONNX models made with onnx.helper, run by onnxruntime and by tensorfab."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper
from ort_reference import reference_session

from tensorfab.compiler.frontend import from_onnx
from tensorfab.compiler.graph import astext, parse, structural_equal
from tensorfab.compiler.graph.lower_runtime import evaluate

Inputs = Sequence[tuple[str, np.ndarray | None]]


def single_op_model(op_type: str, inputs: Inputs, attrs: dict | None = None, *,
                    constant: Sequence[str] = (), n_outputs: int = 1,
                    opset: int = 17) -> onnx.ModelProto:
    """One ``op_type`` node; inputs named in ``constant`` are initializers, a ``None``
    array is an omitted optional input."""
    graph_inputs, inits, names = [], [], []
    for name, value in inputs:
        if value is None:
            names.append("")
            continue
        names.append(name)
        if name in constant:
            inits.append(numpy_helper.from_array(value, name))
        else:
            elem = helper.np_dtype_to_tensor_dtype(value.dtype)
            graph_inputs.append(helper.make_tensor_value_info(name, elem, value.shape))
    outputs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outputs, name=f"the_{op_type}",
                            **(attrs or {}))
    graph = helper.make_graph([node], "single", graph_inputs,
                              [onnx.ValueInfoProto(name=o) for o in outputs],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 9)
    return onnx.shape_inference.infer_shapes(model)


def run_both(model: onnx.ModelProto, inputs: Inputs,
             constant: Sequence[str] = ()) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(onnxruntime's outputs, tensorfab's outputs) as lists."""
    feeds = {n: v for n, v in inputs if v is not None and n not in constant}
    session = reference_session(model)
    ref = session.run(None, feeds)
    fn = from_onnx(model)
    assert structural_equal(parse(astext(fn)), fn)  # every imported model round-trips
    ours = evaluate(fn, feeds)
    ours = list(ours) if isinstance(ours, tuple) else [ours]
    return ref, ours


def check_op(op_type: str, inputs: Inputs, attrs: dict | None = None, *,
             constant: Sequence[str] = (), n_outputs: int = 1, opset: int = 17,
             rtol: float = 1e-5, atol: float = 1e-6) -> list[np.ndarray]:
    """Assert tensorfab matches onnxruntime on one node: floats within ``rtol``, integers
    and booleans exactly. Returns onnxruntime's outputs."""
    model = single_op_model(op_type, inputs, attrs, constant=constant,
                            n_outputs=n_outputs, opset=opset)
    ref, ours = run_both(model, inputs, constant)
    assert len(ref) == len(ours)
    for r, o in zip(ref, ours, strict=True):
        assert o.shape == r.shape, (o.shape, r.shape)
        assert o.dtype == r.dtype, (o.dtype, r.dtype)
        if r.dtype.kind == "f":
            np.testing.assert_allclose(o, r, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(o, r)
    return ref
