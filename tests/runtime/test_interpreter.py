"""The runtime's interpreter and kernels on their own (graphs given as data), and the
one-way import rule: the runtime never imports the compiler."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tensorfab.runtime.interpreter import (
    GraphProgram,
    InputSpec,
    Node,
    ProgramFormatError,
    RuntimeInputError,
    run_program,
)
from tensorfab.runtime.kernels import KERNELS, KernelError
from tensorfab.runtime.layout_transform import LayoutError, layout_transform, parse_layout


def _program() -> GraphProgram:
    """y = (max(a, b) - exp(a), shape(a)) over slots; a is (n, 3), b (3,)."""
    return GraphProgram(
        inputs=[InputSpec("a", 0, ("n", 3), "float32"), InputSpec("b", 1, (3,), "float32")],
        constants={},
        nodes=[Node("maximum", (0, 1), {}, 2), Node("exp", (0,), {}, 3),
               Node("subtract", (2, 3), {}, 4), Node("shape_of", (0,), {}, 5),
               Node("tuple", (4, 5), {}, 6)],
        output=6)


def test_program_as_data_runs() -> None:
    a = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    b = np.array([0.1, -0.2, 0.3], np.float32)
    y, shape = run_program(_program(), {"a": a, "b": b})
    want = np.maximum(a, b).astype(np.float64) - np.exp(a.astype(np.float64))
    np.testing.assert_allclose(y, want.astype(np.float32), rtol=1e-6)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(shape, [4, 3])


@pytest.mark.parametrize("inputs,match", [
    ({"a": np.zeros((2, 3), np.float32)}, r"inputs missing: \['b'\]"),
    ({"a": np.zeros((2, 3), np.float64), "b": np.zeros(3, np.float32)},
     "input 'a': dtype float64, expected float32"),
    ({"a": np.zeros((2, 4), np.float32), "b": np.zeros(3, np.float32)},
     "input 'a': dim 1 is 4, expected 3"),
    ({"a": np.zeros((2, 3), np.float32), "b": np.zeros((1, 3), np.float32)},
     r"input 'b': shape \(1, 3\)"),
])
def test_input_errors_name_the_input(inputs: dict, match: str) -> None:
    with pytest.raises(RuntimeInputError, match=match):
        run_program(_program(), inputs)


def test_symbol_bound_once_across_inputs() -> None:
    p = GraphProgram([InputSpec("a", 0, ("n",), "float32"), InputSpec("b", 1, ("n",),
                                                                       "float32")],
                     {}, [Node("add", (0, 1), {}, 2)], 2)
    assert run_program(p, [np.ones(2, np.float32), np.ones(2, np.float32)]).shape == (2,)
    with pytest.raises(RuntimeInputError, match="dim 0 \\(n\\) is 3, another input has n=2"):
        run_program(p, [np.ones(2, np.float32), np.ones(3, np.float32)])


def test_malformed_programs() -> None:
    bad_op = GraphProgram([], {0: np.ones(2)}, [Node("nope", (0,), {}, 1)], 1)
    with pytest.raises(ProgramFormatError, match="no CPU kernel for 'nope'"):
        bad_op.validate()
    bad_slot = GraphProgram([], {}, [Node("relu", (7,), {}, 1)], 1)
    with pytest.raises(ProgramFormatError, match="reads slot 7 before it is written"):
        bad_slot.validate()


def test_kernels_of_ops_onnx_has_no_single_node_for() -> None:
    x = np.array([[-1.5, 2.0], [0.25, -3.0]], np.float32)
    np.testing.assert_array_equal(KERNELS["negative"]([x], {}), -x)
    np.testing.assert_array_equal(KERNELS["minimum"]([x, np.float32(0)], {}), np.minimum(x, 0))
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    np.testing.assert_array_equal(KERNELS["divide"]([a, b], {}), [3, -3, -3, 3])
    q = np.array([-300, -2, 0, 5, 1000], np.int32)
    out = KERNELS["qnn.requantize"]([q, np.float32(0.5), np.int8(3)],
                                    {"axis": 1, "out_dtype": "int8"})
    np.testing.assert_array_equal(out, [-128, 2, 3, 5, 127])  # 2.5 rounds to even 2
    with pytest.raises(KernelError, match="symbol 'n'"):
        KERNELS["reshape"]([x], {"newshape": ("n", 2)})


def test_blocked_conv_kernel_matches_plain() -> None:
    r = np.random.default_rng(1)
    x = r.standard_normal((1, 6, 5, 5)).astype(np.float32)
    w = r.standard_normal((3, 6, 3, 3)).astype(np.float32)
    attrs = {"strides": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1,
             "data_layout": "NCHW", "kernel_layout": "OIHW"}
    plain = KERNELS["nn.conv2d"]([x, w], attrs)
    blocked = KERNELS["nn.conv2d"](
        [layout_transform(x, "NCHW", "NCHW1n4c"), layout_transform(w, "OIHW", "OIHW4o4i")],
        {**attrs, "data_layout": "NCHW1n4c", "kernel_layout": "OIHW4o4i"})
    back = layout_transform(blocked, "NCHW1n4c", "NCHW")
    np.testing.assert_allclose(back[:, :3], plain, rtol=1e-6)
    np.testing.assert_array_equal(back[:, 3:], 0)


def test_layout_strings() -> None:
    lay = parse_layout("NCHW1n16c")
    assert lay.base == "NCHW" and lay.blocks == (("N", 1), ("C", 16)) and lay.ndim == 6
    for bad in ("nchw", "NCHW16x", "NCHW4c4c", "NNCHW"):
        with pytest.raises(LayoutError):
            parse_layout(bad)
    with pytest.raises(LayoutError, match="one must be the plain form"):
        layout_transform(np.zeros((1, 1, 1, 1)), "NCHW", "OIHW4o4i")
    x = np.random.default_rng(2).standard_normal((3, 5, 2, 2))
    packed = layout_transform(x, "NCHW", "NCHW2n4c")
    assert packed.shape == (2, 2, 2, 2, 2, 4)
    np.testing.assert_array_equal(layout_transform(packed, "NCHW2n4c", "NCHW")[:3, :5], x)


def test_runtime_never_imports_the_compiler() -> None:
    code = ("import sys, tensorfab.runtime.interpreter, tensorfab.runtime.kernels, "
            "tensorfab.runtime.layout_transform; "
            "print([m for m in sys.modules if m.startswith('tensorfab.compiler')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_reshape_to_symbols_bound_by_the_inputs() -> None:
    p = GraphProgram([InputSpec("a", 0, ("b", "s", 4), "float32")], {},
                     [Node("reshape", (0,), {"newshape": ("b", "s", 2, 2)}, 1)], 1)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(run_program(p, [x]), x.reshape(2, 3, 2, 2))


def test_model_files_round_trip_and_errors(tmp_path) -> None:
    import json
    import zipfile

    from tensorfab.runtime.artifact import ModelFileError, load_model, save_model

    p = _program()
    p.constants[9] = np.array([1.5, -np.inf], np.float32)
    p.nodes.append(Node("clip", (4,), {"a_min": -1.0, "a_max": float("inf")}, 10))
    save_model(p, tmp_path / "m.tfm")
    q = load_model(tmp_path / "m.tfm")
    a = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
    b = np.ones(3, np.float32)
    for x, y in zip(run_program(q, [a, b]), run_program(p, [a, b]), strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(q.constants[9], p.constants[9])
    with pytest.raises(ModelFileError, match="no such file"):
        load_model(tmp_path / "none.tfm")
    (tmp_path / "junk.tfm").write_bytes(b"junk")
    with pytest.raises(ModelFileError, match=r"junk\.tfm: not a tensorfab model file"):
        load_model(tmp_path / "junk.tfm")
    with zipfile.ZipFile(tmp_path / "old.tfm", "w") as z:
        z.writestr("graph.json", json.dumps({"format": "tensorfab-model", "version": 99}))
        z.writestr("constants.npz", b"")
    with pytest.raises(ModelFileError, match="version 99; this runtime reads"):
        load_model(tmp_path / "old.tfm")


def test_a_model_file_is_replaced_only_once_written(tmp_path, monkeypatch) -> None:
    """Ctrl-C or an error while save_model wrote (``compile -o model.tfm`` over a model
    compiled before) left a truncated zip in its place, the earlier model lost; the new
    file is now written beside it and moved into place, and nothing is left behind."""
    from tensorfab.runtime.artifact import load_model, save_model
    from tensorfab.runtime.vm_executable import Executable

    path = tmp_path / "m.tfm"
    save_model(_program(), path)
    before = path.read_bytes()

    def interrupted(self: Executable) -> dict:
        raise KeyboardInterrupt

    monkeypatch.setattr(Executable, "to_json", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_model(_program(), path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tfm"]
    monkeypatch.undo()
    load_model(path)
    save_model(_program(), tmp_path / "n.tfm")  # a new file, no leftovers either
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tfm", "n.tfm"]
