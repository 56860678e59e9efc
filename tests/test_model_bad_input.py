"""Bad input to ``tensorfab compile`` and ``run`` (issue 12): each is one line on stderr,
exit status 2, naming what is wrong and where."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from tensorfab.cli import main
from tensorfab.models import load_digits_split
from tensorfab.models.digits_cnn import model_path
from tensorfab.runtime.artifact import ModelFileError, load_model

BATCH = 4


def one_line_error(capsys, *words: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: "), err
    for w in words:
        assert w in err, err
    return err


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    xtr, _, xte, _ = load_digits_split(0)
    np.save(d / "calib.npy", xtr[:64])
    np.save(d / "images.npy", xte[:BATCH])
    tfm = d / "tiny.tfm"
    assert main(["compile", str(model_path()), "-o", str(tfm), "--config", "tiny",
                 "--calib", str(d / "calib.npy"), "--shape", f"image={BATCH},1,8,8"]) == 0
    return {"dir": d, "calib": d / "calib.npy", "images": d / "images.npy", "tfm": tfm}


def _run(files, tfm: Path | str, *extra: str) -> int:
    return main(["run", str(tfm), "--input", str(files["images"]), *extra])


@pytest.mark.parametrize("model", ["tfm", "onnx"])
def test_input_of_the_wrong_dtype(files, capsys, model: str) -> None:
    path = files["dir"] / "f64.npy"
    np.save(path, np.load(files["images"]).astype(np.float64))
    target = files["tfm"] if model == "tfm" else model_path()
    capsys.readouterr()
    assert main(["run", str(target), "--input", str(path)]) == 2
    one_line_error(capsys, "input 'image': dtype float64, expected float32")


def test_input_of_the_wrong_shape(files, capsys) -> None:
    path = files["dir"] / "five.npy"
    np.save(path, np.zeros((5, 1, 8, 8), np.float32))
    capsys.readouterr()
    assert main(["run", str(files["tfm"]), "--input", str(path)]) == 2
    one_line_error(capsys, "input 'image': dim 0 is 5, expected 4 (shape (4, 1, 8, 8))")
    np.save(path, np.zeros((4, 64), np.float32))
    assert main(["run", str(files["tfm"]), "--input", str(path)]) == 2
    one_line_error(capsys, "input 'image': shape (4, 64), expected (4, 1, 8, 8)")


def test_input_files(files, capsys) -> None:
    capsys.readouterr()
    assert main(["run", str(files["tfm"]), "--input", str(files["dir"] / "none.npy")]) == 2
    one_line_error(capsys, "none.npy: no such file")
    junk = files["dir"] / "junk.npy"
    junk.write_text("not numpy")
    assert main(["run", str(files["tfm"]), "--input", str(junk)]) == 2
    err = one_line_error(capsys, "junk.npy: not a NumPy .npy or .npz file (no .npy header, "
                         "not a zip archive)")
    assert "pickle" not in err  # numpy's message for it suggested allow_pickle=
    assert main(["run", str(files["tfm"]), "--input", str(files["dir"])]) == 2
    one_line_error(capsys, f"{files['dir']}: a folder; give a .npy file")
    assert main(["run", str(files["tfm"]), "--input", f"wrong={files['images']}"]) == 2
    one_line_error(capsys, "--input wrong=", "the model has no input 'wrong'",
                   "its inputs: image")
    assert main(["run", str(files["tfm"]), "--config", "nope", "--input",
                 str(files["images"])]) == 2
    one_line_error(capsys, "'nope'", "tiny", "ecp5-25f", "up5k", "JSON config file")
    assert main(["run", str(files["tfm"])]) == 2
    one_line_error(capsys, "inputs missing: ['image']", "pass --input FILE.npy")
    assert main(["run", str(files["tfm"]), "--input", str(files["images"]), "--input",
                 f"image={files['images']}"]) == 2
    one_line_error(capsys, "input 'image' is given twice")


def _damaged(files, name: str, edit) -> Path:
    out = files["dir"] / name
    with zipfile.ZipFile(files["tfm"]) as z:
        members = {n: z.read(n) for n in z.namelist()}
    members = edit(members)
    with zipfile.ZipFile(out, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    return out


def _flip_program(members: dict) -> dict:
    """Damage the header of the first accelerator program inside constants.npz."""
    import io

    graph = json.loads(members["graph.json"])
    slot = next(n["inputs"][1] for n in graph["nodes"] if n["op"] == "accel.program")
    with np.load(io.BytesIO(members["constants.npz"])) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays[f"c{slot}"] = arrays[f"c{slot}"][:20].copy()
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return {**members, "constants.npz": buf.getvalue()}


@pytest.mark.parametrize(("name", "edit", "words"), [
    ("truncated.tfm", None, "not a tensorfab model file"),
    ("badjson.tfm", lambda m: {**m, "graph.json": b"{\"format\": "},
     "not a tensorfab model file"),
    ("noconst.tfm", lambda m: {"graph.json": m["graph.json"]},
     "not a tensorfab model file"),
    ("badnode.tfm", lambda m: {**m, "graph.json": m["graph.json"].replace(
        b'"op": "flatten"', b'"op": "bogus"')}, "malformed graph: node"),
    ("badprog.tfm", _flip_program, "damaged accelerator program"),
])
def test_corrupt_or_truncated_model_files(files, capsys, name, edit, words) -> None:
    if edit is None:
        data = files["tfm"].read_bytes()
        path = files["dir"] / name
        path.write_bytes(data[: len(data) // 2])
    else:
        path = _damaged(files, name, edit)
    with pytest.raises(ModelFileError, match=name.replace(".", r"\.")):
        load_model(path)
    capsys.readouterr()
    assert _run(files, path) == 2
    one_line_error(capsys, name, words)


def test_graph_keys_missing_or_of_another_type_are_named(files, capsys) -> None:
    """A node without "op" was `malformed graph: 'op'` (a bare KeyError's text), attrs
    that are not an object or a graph.json that is not one a traceback; each names the
    node (index, op) or input and the key now."""
    with zipfile.ZipFile(files["tfm"]) as z:
        graph = json.loads(z.read("graph.json"))
    k = next(i for i, n in enumerate(graph["nodes"]) if n["op"] == "flatten")
    graph["nodes"][k]["name"] = ""  # the node named by its op where it has no name
    cases = [
        (lambda g: g["nodes"][k].pop("op"), f"malformed graph: node {k}: missing key 'op'"),
        (lambda g: g["nodes"][k].update(name="flat") or g["nodes"][k].pop("op"),
         f"malformed graph: node {k} (flat): missing key 'op'"),
        (lambda g: g["nodes"][k].pop("output"),
         f"malformed graph: node {k} (flatten): missing key 'output'"),
        (lambda g: g["nodes"][k].update(attrs=[]),
         f"malformed graph: node {k} (flatten): attrs = [] is not a dict"),
        (lambda g: g["nodes"].__setitem__(k, "x"),
         f"malformed graph: node {k}: not a JSON object"),
        (lambda g: g["inputs"][0].pop("shape"), "malformed graph: input 0: missing key "
                                                "'shape'"),
        (lambda g: g.pop("nodes"), "malformed graph: missing key 'nodes'"),
        (lambda g: g["constants"].append(9999),
         "malformed graph: constant slot 9999 is not in constants.npz"),
        # value_types was read by unpacking: a bare TypeError's text before
        (lambda g: g.update(value_types={"3": 5}),
         "malformed graph: value_types['3'] = 5 is not [shape, dtype]"),
        (lambda g: g.update(value_types={"x": [[1], "int8"]}),
         "malformed graph: value_types['x']: the key is not a slot number"),
        (lambda g: g.update(value_types={"3": [["a"], "int8"]}),
         "malformed graph: value_types['3']: shape ['a'] is not a list of integers"),
        (lambda g: g.update(value_types=[]), "malformed graph: value_types = [] is not a "
                                             "JSON object"),
        # an unknown dtype was taken as the input's: `input 'image': dtype float32,
        # expected float99` at run time, as if the user's array were wrong
        (lambda g: g["inputs"][0].update(dtype="float99"),
         f"malformed graph: input 0 ({graph['inputs'][0]['name']!r}): dtype 'float99' is "
         "not a dtype name"),
        (lambda g: g.update(value_types={"3": [[1], "int99"]}),
         "malformed graph: value_types['3']: dtype 'int99' is not a dtype name"),
    ]
    for n, (edit, words) in enumerate(cases):
        g = json.loads(json.dumps(graph))
        edit(g)
        path = _damaged(files, f"keys{n}.tfm",
                        lambda m, g=g: {**m, "graph.json": json.dumps(g).encode()})
        with pytest.raises(ModelFileError, match=re.escape(f"keys{n}.tfm: {words}")):
            load_model(path)
        capsys.readouterr()
        assert _run(files, path) == 2
        one_line_error(capsys, f"keys{n}.tfm: {words}")
    path = _damaged(files, "list.tfm", lambda m: {**m, "graph.json": b"[]"})
    capsys.readouterr()
    assert _run(files, path) == 2
    one_line_error(capsys, "list.tfm: graph.json is not a JSON object")


def test_model_compiled_for_another_config(files, capsys) -> None:
    capsys.readouterr()
    assert _run(files, files["tfm"], "--config", "default") == 2
    one_line_error(capsys, "tiny.tfm was compiled for HwConfig 'tiny', but the device is "
                           "'default': recompile it with --config default")
    assert _run(files, files["tfm"], "--config", "tiny", "--json") == 0


def test_symbolic_dims_need_shape(files, capsys) -> None:
    capsys.readouterr()
    assert main(["compile", str(model_path()), "-o", str(files["dir"] / "s.tfm"),
                 "--config", "tiny", "--calib", str(files["calib"])]) == 2
    one_line_error(capsys, "input 'image' has symbolic dims ('N', 1, 8, 8)",
                   "pass --shape image=1,1,8,8")


def test_shape_of_an_unknown_input_wrong_rank_or_not_numbers(files, capsys) -> None:
    """--shape foo=... (no such input) was reported as the model's symbolic dims,
    image=4,1,8 as a convolution of a 1-D input, image=a,b,c,d taken as symbols; each
    is now one line naming what is wrong with --shape."""
    out = str(files["dir"] / "s.tfm")
    base = ["compile", str(model_path()), "-o", out, "--calib", str(files["calib"])]
    capsys.readouterr()
    assert main([*base, "--config", "tiny", "--shape", "foo=4,1,8,8"]) == 2
    one_line_error(capsys, "--shape foo=...: the model has no input 'foo'; its inputs: image")
    assert main([*base, "--shape", "foo=4,1,8,8"]) == 2  # on the CPU alike
    one_line_error(capsys, "the model has no input 'foo'")
    assert main([*base, "--config", "tiny", "--shape", "image=4,1,8"]) == 2
    one_line_error(capsys, "input 'image' given the shape (4, 1, 8) of 3 dims, but the "
                   "model declares 4: ('N', 1, 8, 8)")
    assert main([*base, "--config", "tiny", "--shape", "image=a,b,c,d"]) == 2
    one_line_error(capsys, "--shape image=a,b,c,d: the accelerator needs fixed shapes: "
                   "give every dim as a number")
    wrong = files["dir"] / "rank3.npy"
    np.save(wrong, np.zeros((4, 8, 8), np.float32))
    assert main(["run", str(model_path()), "--input", str(wrong), "--calib",
                 str(files["calib"])]) == 2
    one_line_error(capsys, "input 'image' given the shape (4, 8, 8) of 3 dims")


def test_shape_with_an_empty_dim_or_given_twice(files, capsys) -> None:
    """On the CPU --shape image=4,,8,8 compiled a model whose input channel count was
    'the symbol \'\'' (an error about conv1), image=4.5,1,8,8 made '4.5' a symbol, and
    a second --shape of the same input silently replaced the first; each is now one
    line naming the --shape value, as --input given twice is."""
    out = files["dir"] / "e.tfm"
    base = ["compile", str(model_path()), "-o", str(out)]
    capsys.readouterr()
    assert main([*base, "--shape", "image=4,,8,8"]) == 2
    one_line_error(capsys, "--shape image=4,,8,8: dim 1 is '', neither a size nor a "
                           "symbol name (e.g. N)")
    assert main([*base, "--shape", "image=4.5,1,8,8"]) == 2
    one_line_error(capsys, "--shape image=4.5,1,8,8: dim 0 is '4.5'")
    assert main([*base, "--shape", "image=4,1,8,8", "--shape", "image=2,1,8,8"]) == 2
    one_line_error(capsys, "--shape image=2,1,8,8: input 'image' is given twice")
    assert not out.exists()
    assert main([*base, "--shape", "image=N,1,8,8", "--json"]) == 0  # a symbol is kept


def test_shape_with_a_zero_or_negative_dim(files, capsys) -> None:
    """--shape image=0,1,8,8 with --config was a ZeroDivisionError traceback from the
    calibration batches (image=-1,... an error about conv1's input); each is now one
    line naming the input and the dim, on the accelerator and the CPU alike, and so is
    an empty input file given to run MODEL.onnx."""
    out = str(files["dir"] / "z.tfm")
    base = ["compile", str(model_path()), "-o", out, "--calib", str(files["calib"])]
    capsys.readouterr()
    assert main([*base, "--config", "tiny", "--shape", "image=0,1,8,8"]) == 2
    one_line_error(capsys, "input 'image' given the shape (0, 1, 8, 8): dim 0 is 0; "
                   "every dim is at least 1")
    assert main([*base, "--shape", "image=4,1,-8,8"]) == 2
    one_line_error(capsys, "input 'image' given the shape (4, 1, -8, 8): dim 2 is -8")
    empty = files["dir"] / "empty.npy"
    np.save(empty, np.zeros((0, 1, 8, 8), np.float32))
    assert main(["run", str(model_path()), "--input", str(empty), "--calib",
                 str(files["calib"])]) == 2
    one_line_error(capsys, "input 'image' given the shape (0, 1, 8, 8): dim 0 is 0")
    assert not Path(out).exists()


def test_run_output_never_overwrites_an_input(files, capsys, tmp_path) -> None:
    """run -o x.npy with --input x.npy replaced the input images by the logits (any .npy
    may be replaced, and --force did not matter); an input of the run (--input, by
    name or bare, --calib) is now refused as the output, as asm refuses its own."""
    images = tmp_path / "x.npy"
    np.save(images, np.load(files["images"]))
    before = images.read_bytes()
    capsys.readouterr()
    for given in (str(images), f"image={images}"):
        for force in ([], ["--force"]):
            assert main(["run", str(files["tfm"]), "--input", given, "-o", str(images),
                         *force]) == 2
            one_line_error(capsys, f"{images}: the output would overwrite the input; "
                                   "name another output with -o")
    calib = tmp_path / "calib.npy"
    np.save(calib, np.load(files["calib"]))
    assert main(["run", str(model_path()), "--input", str(images), "--calib", str(calib),
                 "-o", str(calib)]) == 2
    one_line_error(capsys, f"{calib}: the output would overwrite the input")
    assert images.read_bytes() == before
    assert main(["run", str(files["tfm"]), "--input", str(images), "-o",
                 str(tmp_path / "out.npy"), "--json"]) == 0


def test_run_output_replaces_an_existing_file_only_with_force(files, capsys,
                                                              tmp_path) -> None:
    """run -o mine.npy replaced any existing .npy array without a word (the user's own
    data, not an input of the run), though --force says it overwrites 'outputs
    tensorfab did not write'; an existing -o file is now refused unless --force, which
    writes what a run into a new file writes."""
    mine = tmp_path / "mine.npy"
    np.save(mine, np.arange(5))
    before = mine.read_bytes()
    run = ["run", str(files["tfm"]), "--input", str(files["images"]), "--json", "-o"]
    capsys.readouterr()
    assert main([*run, str(mine)]) == 2
    one_line_error(capsys, f"{mine} exists and is not a file this command writes; pass "
                           "--force to overwrite it")
    assert mine.read_bytes() == before
    assert main([*run, str(mine), "--force"]) == 0
    assert main([*run, str(tmp_path / "fresh.npy")]) == 0
    assert mine.read_bytes() == (tmp_path / "fresh.npy").read_bytes()


def test_missing_external_data(files, capsys, tmp_path) -> None:
    model = onnx.load(str(model_path()))
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="ext.data",
                    size_threshold=0)
    assert main(["run", str(path), "--input", str(files["images"]), "--json"]) == 0
    (tmp_path / "ext.data").rename(tmp_path / "moved.data")
    capsys.readouterr()
    for argv in (["run", str(path), "--input", str(files["images"])],
                 ["compile", str(path), "-o", str(tmp_path / "e.tfm")],
                 ["inspect", str(path)]):
        assert main(argv) == 2
        one_line_error(capsys, "ext.onnx: initializer", "keeps its data in the external "
                       "file 'ext.data', which is missing")
    (tmp_path / "ext.data").write_bytes((tmp_path / "moved.data").read_bytes()[:100])
    assert main(["inspect", str(path)]) == 2
    one_line_error(capsys, "ext.onnx: cannot read its external data")


def test_calibration_files(files, capsys) -> None:
    out = str(files["dir"] / "c.tfm")
    np.savez(files["dir"] / "wrong.npz", pixels=np.zeros((4, 1, 8, 8), np.float32))
    capsys.readouterr()
    assert main(["compile", str(model_path()), "-o", out, "--calib",
                 str(files["dir"] / "wrong.npz")]) == 2
    one_line_error(capsys, "calibration data: inputs missing ['image'], unknown ['pixels']")
    assert main(["compile", str(model_path()), "-o", out, "--calib",
                 str(files["dir"] / "none.npz")]) == 2
    one_line_error(capsys, "--calib", "none.npz: no such file")
    assert main(["run", str(files["tfm"]), "--input", str(files["images"]), "--calib",
                 str(files["calib"])]) == 2
    one_line_error(capsys, "--calib applies to an .onnx model")


def test_interrupted_run_writes_its_trace(files, capsys, monkeypatch) -> None:
    """Ctrl-C in the second accelerator program: the timeline up to there, the stopped
    layer's engine intervals included, and the interrupt's message (exit 130)."""
    from tensorfab.runtime.resident import ResidentModel
    from tensorfab.sim.trace import Interval, is_tensorfab_trace

    run_accel = ResidentModel.run_accel
    calls = []

    def stop_second(self, index, *args):
        calls.append(index)
        if len(calls) == 2:
            exc = KeyboardInterrupt("interrupted after 700 cycles")
            exc.intervals = [Interval("gemm", "busy", 0, 500), Interval("load", "busy",
                                                                          0, 700)]
            raise exc
        return run_accel(self, index, *args)

    monkeypatch.setattr(ResidentModel, "run_accel", stop_second)
    trace = files["dir"] / "stopped.json"
    capsys.readouterr()
    assert _run(files, files["tfm"], "--trace", str(trace)) == 130
    err = capsys.readouterr().err
    assert "interrupted after 700 cycles" in err and f"wrote {trace}" in err
    assert is_tensorfab_trace(trace)
    events = json.loads(trace.read_text())["traceEvents"]
    layers = [e for e in events if e["ph"] == "X" and e["pid"] == events[0]["pid"]]
    assert layers[-1]["name"].endswith("(stopped)") and layers[-1]["cat"] == "accel"
    assert sum(e["cat"] == "accel" for e in layers) == 2
    engines = [e for e in events if e["ph"] == "X" and e["pid"] != events[0]["pid"]]
    assert {e["args"]["layer"] for e in engines} == {calls[1]}


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def test_run_time_kernel_error_names_the_onnx_node(tmp_path, capsys) -> None:
    """A kernel's error at run time named only the kernel ('take: index 7 is out of
    range ...'); the .tfm keeps the source node names and the VM puts the node first."""
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("Gather", ["x", "idx"], ["y"], name="ga_idx", axis=0)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        initializer=[numpy_helper.from_array(np.array([7], np.int64), "idx")])
    path = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
                 tmp_path / "gather_idx.onnx")
    np.save(tmp_path / "x.npy", np.zeros((2, 3), np.float32))
    tfm = tmp_path / "g.tfm"
    assert main(["compile", str(path), "-o", str(tfm)]) == 0
    capsys.readouterr()
    assert main(["run", str(tfm), "--input", str(tmp_path / "x.npy")]) == 2
    err = one_line_error(capsys, "node 'ga_idx' (take): index 7 is out of range for axis 0 "
                         "of size 2 (indices run -2..1)")
    assert err.count("ga_idx") == 1 and err.count("take") == 1


def test_symbolic_dim_on_the_cpu_suggests_shape(tmp_path, capsys) -> None:
    """A Conv over an input declared [None, 3, None, 8] compiled for the CPU said only
    'height is the symbol 'x_d2'; it must be static'; it now suggests --shape as the
    --config path does (one hint)."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, None, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4, None, 6])],
        initializer=[numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")])
    path = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
                 tmp_path / "m.onnx")
    out = str(tmp_path / "m.tfm")
    hint = "pass --shape x=1,3,D2,8 (D2, D3, ... the sizes to run it at)"
    capsys.readouterr()
    assert main(["compile", str(path), "-o", out]) == 2
    one_line_error(capsys, "m.onnx: node 'conv'", "height is the symbol 'x_d2'; it must be "
                   f"static: {hint}")
    assert main(["compile", str(path), "-o", out, "--config", "tiny"]) == 2
    one_line_error(capsys, f"the accelerator needs fixed shapes: {hint}")
    assert main(["compile", str(path), "-o", out, "--shape", "x=1,3,5,8"]) == 0


def test_unsupported_input_type_names_the_file_on_both_paths(tmp_path, capsys) -> None:
    """A BFLOAT16 input of symbolic dims: looking for symbolic inputs (for the --shape
    hint on the CPU, the fixed-shape check with --config) raised the importer's type
    error without the model's file or node; the error is from_onnx's, naming both."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="act")], "g",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [None, 4])])
    path = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]),
                 tmp_path / "m.onnx")
    out = str(tmp_path / "m.tfm")
    words = (f"{path}: input 'x': element type BFLOAT16 is not supported",
             "an input of node 'act'")
    capsys.readouterr()
    assert main(["compile", str(path), "-o", out]) == 2
    one_line_error(capsys, *words)
    assert main(["compile", str(path), "-o", out, "--config", "tiny"]) == 2
    one_line_error(capsys, *words)
