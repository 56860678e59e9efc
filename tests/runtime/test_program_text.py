"""The listing of a runtime program (runtime/program_text.py, ``tensorfab inspect``)."""

from __future__ import annotations

import numpy as np

from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.models import load_digits_split
from tensorfab.models.digits_cnn import model_path
from tensorfab.runtime.accel_contract import decode_program
from tensorfab.runtime.interpreter import GraphProgram, InputSpec, Node
from tensorfab.runtime.program_text import program_text


def test_one_line_per_node_with_its_device() -> None:
    xtr, _, _, _ = load_digits_split(0)
    program = compile_onnx(model_path(), config="tiny", calibration=xtr[:32],
                           input_shapes={"image": (2, 1, 8, 8)}).program
    lines = program_text(program).splitlines()
    assert lines[0] == "%0: Tensor[(2, 1, 8, 8), float32]  // input image"
    assert len(lines) == 1 + len(program.nodes) + 1
    assert lines[-1] == f"return %{program.output}"
    for node, line in zip(program.nodes, lines[1:-1], strict=True):
        assert line.startswith(f"%{node.output} = {node.op}(")
        if node.op == "accel.program":
            prog = decode_program(program.constants[node.inputs[1]])
            assert line.endswith("@accel(tiny)")
            assert f"program(tiny, {len(prog.insns)} insns)" in line
            assert f'layer="{node.attrs["layer"]}"' in line and "executor" not in line
        else:
            assert line.endswith("@cpu")


def test_constants_and_long_attributes_are_summarized() -> None:
    p = GraphProgram([InputSpec("x", 0, ("n", 3), "float32")],
                     {1: np.zeros((3,), np.float32)},
                     [Node("add", (0, 1), {}, 2),
                      Node("reshape", (2,), {"newshape": tuple(range(1, 11))}, 3)], 3)
    assert program_text(p) == (
        "%0: Tensor[('n', 3), float32]  // input x\n"
        "%2 = add(%0, c1: float32[3])  @cpu\n"
        "%3 = reshape(%2, newshape=[10 values])  @cpu\n"
        "return %3\n")
