"""The planned graph's text form in a ``.tfm`` (``graph.txt``): it parses back, with
its large constants from the file's arrays, into the compiled function; ``inspect``
prints it."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorfab.cli import main
from tensorfab.compiler.graph.ir import structural_equal
from tensorfab.compiler.graph.parser import ParseError, parse
from tensorfab.compiler.graph.planning import expand_devices
from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.models import load_digits_split
from tensorfab.models.digits_cnn import model_path
from tensorfab.runtime.artifact import load_graph_text, load_model, save_model


def residual_block_onnx(seed: int = 0) -> onnx.ModelProto:
    """conv-relu-conv + identity, relu: a ResNet basic block."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    for i in range(2):
        inits += [numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.1
                                           ).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array((rng.standard_normal(16) * 0.1).astype(np.float32),
                                          f"b{i}")]
    nodes += [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1] * 4),
              helper.make_node("Relu", ["c0"], ["r0"]),
              helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], pads=[1] * 4),
              helper.make_node("Add", ["c1", "x"], ["s"]),
              helper.make_node("Relu", ["s"], ["y"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 16, 6, 6]) for n in "xy"]
    graph = helper.make_graph(nodes, "block", [io[0]], [io[1]], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _models():
    xtr = load_digits_split(0)[0]
    rng = np.random.default_rng(1)
    return {
        "digits": (str(model_path()), xtr[:64], {"image": (4, 1, 8, 8)}),
        "residual": (residual_block_onnx(), rng.standard_normal((8, 16, 6, 6)
                                                                 ).astype(np.float32), None),
    }


@pytest.mark.parametrize("name", ["digits", "residual"])
@pytest.mark.parametrize("config", [None, "tiny"])
def test_tfm_graph_text_parses_back_to_the_planned_function(name, config, tmp_path) -> None:
    model, calib, shapes = _models()[name]
    compiled = compile_onnx(model, config=config, calibration=calib, input_shapes=shapes)
    path = tmp_path / "m.tfm"
    save_model(compiled.program, path, compiled.graph_text)
    text = load_graph_text(path)
    assert text == compiled.graph_text
    program = load_model(path)
    constants = {f"c{slot}": v for slot, v in program.constants.items()}
    back = parse(text, constants)
    # the text is the compact form: devices where they belong to the program (params,
    # result, copies); planning it again gives every sub-expression's device back
    assert structural_equal(expand_devices(back), compiled.function)
    if config:  # accelerator programs are referenced, not printed
        assert "meta[c" in text and "accel.program(" in text and "@accel(tiny)" in text
    assert len(text) < 20_000  # weights live once, in constants.npz


def test_meta_reference_without_its_array_names_it(tmp_path) -> None:
    compiled = compile_onnx(str(model_path()), config="tiny",
                            calibration=load_digits_split(0)[0][:64],
                            input_shapes={"image": (4, 1, 8, 8)})
    with pytest.raises(ParseError, match=r"meta\[c\d+\]: no such constant"):
        parse(compiled.graph_text, {})


def test_inspect_prints_the_planned_graph_or_the_program(tmp_path, capsys) -> None:
    xtr = load_digits_split(0)[0]
    np.save(tmp_path / "calib.npy", xtr[:64])
    tfm = tmp_path / "d.tfm"
    assert main(["compile", str(model_path()), "-o", str(tfm), "--config", "tiny",
                 "--calib", str(tmp_path / "calib.npy"), "--shape", "image=4,1,8,8"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(tfm)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fn (%image: Tensor[(4, 1, 8, 8), float32] @cpu)")
    assert "\ninputs: image 4×1×8×8 float32\n" in out and "accelerator: tiny," in out
    assert main(["inspect", str(tfm), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["listing"] == "graph"
    assert main(["inspect", "--program", str(tfm)]) == 0
    assert "@accel(tiny)" in capsys.readouterr().out
    assert main(["inspect", "--program", str(tfm), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["listing"] == "program"
    # a .tfm written without the text (an older file) still inspects, as its program
    old = tmp_path / "old.tfm"
    with zipfile.ZipFile(tfm) as src, zipfile.ZipFile(old, "w") as dst:
        for item in src.namelist():
            if item != "graph.txt":
                dst.writestr(item, src.read(item))
    assert load_graph_text(old) is None
    assert main(["inspect", str(old), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["listing"] == "program"


def test_load_graph_text_errors_name_the_file(tmp_path) -> None:
    from tensorfab.runtime.artifact import ModelFileError

    with pytest.raises(ModelFileError, match=r"none\.tfm: no such file"):
        load_graph_text(tmp_path / "none.tfm")
    (tmp_path / "junk.tfm").write_bytes(b"junk")
    with pytest.raises(ModelFileError, match=r"junk\.tfm: not a tensorfab model file"):
        load_graph_text(tmp_path / "junk.tfm")
    with zipfile.ZipFile(tmp_path / "bad.tfm", "w") as z:
        z.writestr("graph.txt", b"\xff\xfe fn")
    with pytest.raises(ModelFileError, match=r"bad\.tfm: not a tensorfab model file"):
        load_graph_text(tmp_path / "bad.tfm")
