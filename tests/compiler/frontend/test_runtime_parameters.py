"""Shape parameters computed at run time (the dynamic_* CPU ops): results against
onnxruntime on models whose output shapes ONNX cannot infer (symbolic dims), and a
clear error when the run-time values contradict a declared shape."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from ort_reference import reference_session

from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.isa import TensorfabError
from tensorfab.runtime.interpreter import run_program

RNG = np.random.default_rng(20261126)


def _model(op: str, inputs: list[tuple[str, int, list]], ranks: tuple[int, ...],
           **attrs: object) -> onnx.ModelProto:
    """One ``op`` node whose outputs have the given ranks and only symbolic dims."""
    outs = [f"y{i}" for i in range(len(ranks))]
    node = helper.make_node(op, [n for n, _, _ in inputs], outs, name=f"the_{op}", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [f"{o}_{k}" for k in range(r)])
         for o, r in zip(outs, ranks, strict=True)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


I64, F32 = TensorProto.INT64, TensorProto.FLOAT
CASES = {
    "Slice": (_model("Slice", [("x", F32, [6, 5]), ("s", I64, [2]), ("e", I64, [2]),
                               ("a", I64, [2]), ("p", I64, [2])], (2,)),
              {"s": np.array([1, -1]), "e": np.array([5, -5]), "a": np.array([0, 1]),
               "p": np.array([2, -1])}),
    "Reshape": (_model("Reshape", [("x", F32, [6, 5]), ("s", I64, [3])], (3,)),
                {"s": np.array([3, -1, 5])}),
    "Pad": (_model("Pad", [("x", F32, [3, 4]), ("s", I64, [4])], (2,), mode="reflect"),
            {"s": np.array([1, 2, 0, 1])}),
    "ReduceMean": (_model("ReduceMean", [("x", F32, [3, 4, 2]), ("s", I64, [1])], (2,),
                          keepdims=0), {"s": np.array([-2])}),
    "Split": (_model("Split", [("x", F32, [7, 2]), ("s", I64, [2])], (2, 2)),
              {"s": np.array([3, 4])}),
    "Unsqueeze": (_model("Unsqueeze", [("x", F32, [3, 4]), ("s", I64, [2])], (4,)),
                  {"s": np.array([0, -1])}),
}


@pytest.mark.parametrize("op", sorted(CASES))
def test_runtime_parameters_match_onnxruntime(op: str) -> None:
    model, params = CASES[op]
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": RNG.standard_normal(shape).astype(np.float32), **params}
    want = reference_session(model).run(None, feeds)
    compiled = compile_onnx(model)
    got = run_program(compiled.program, feeds)
    got = list(got) if isinstance(got, tuple) else [got]
    assert any(n.op.startswith("dynamic_") for n in compiled.program.nodes)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_run_time_values_contradicting_the_declared_shape_are_an_error() -> None:
    model, _ = CASES["Reshape"]
    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y0", F32, [3, 2, 5]))
    program = compile_onnx(model).program
    x = np.zeros((6, 5), np.float32)
    np.testing.assert_array_equal(run_program(program, {"x": x, "s": np.array([3, 2, 5])}),
                                  x.reshape(3, 2, 5))
    # the VM names the node whose kernel refused, then the contradiction
    with pytest.raises(TensorfabError, match=r"^node 'the_Reshape' \(dynamic_reshape\): .* "
                                             r"shape \(2, 3, 5\); the model declares "
                                             r"\(3, 2, 5\)$"):
        run_program(program, {"x": x, "s": np.array([2, 3, 5])})
