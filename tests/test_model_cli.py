"""``tensorfab compile``, ``run`` and ``inspect`` on the digits CNN."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from tensorfab.cli import main
from tensorfab.compiler.graph import parse
from tensorfab.models import digits_cnn_onnx, load_digits_split, train_digits_cnn


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cli")
    xtr, _, xte, yte = load_digits_split(0)
    onnx.save(digits_cnn_onnx(train_digits_cnn(seed=0)), d / "digits.onnx")
    np.save(d / "calib.npy", xtr[:256])
    np.save(d / "images.npy", xte[:16])
    np.save(d / "labels.npy", yte[:16])
    return {"dir": d, "onnx": d / "digits.onnx", "calib": d / "calib.npy",
            "images": d / "images.npy", "labels": d / "labels.npy"}


def last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.parametrize("accel", [None, "tiny"])
def test_compile_run_inspect(files, capsys, accel: str | None) -> None:
    out = files["dir"] / f"digits_{accel}.tfm"
    args = ["compile", str(files["onnx"]), "-o", str(out), "--shape", "image=16,1,8,8"]
    if accel:
        args += ["--int8", str(files["calib"]), "--accel", accel]
    assert main([*args, "--json"]) == 0
    compiled = last_json(capsys)
    assert compiled["accel_programs"] == (3 if accel else 0)  # 2 convolutions, the dense
    result = files["dir"] / f"out_{accel}.npy"  # (run -o replaces no file without --force)
    assert main(["run", str(out), "--input", f"image={files['images']}", "-o",
                 str(result), "--json"]) == 0
    summary = last_json(capsys)
    logits = np.load(result)
    assert summary["outputs"][0]["shape"] == [16, 10]
    assert summary["outputs"][0]["argmax"] == logits.argmax(axis=1).tolist()
    assert (logits.argmax(axis=1) == np.load(files["labels"])).mean() >= 0.85
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert main(["inspect", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["inputs"] == [{"name": "image", "shape": [16, 1, 8, 8], "dtype": "float32"}]
    assert ("accel.program" in info["ops"]) == bool(accel)
    # the device-memory map of the accelerator programs (None when all on the CPU)
    assert (info["device_memory_bytes"] is not None) == bool(accel)
    assert ("device memory (" in text) == bool(accel)


def test_inspect_onnx_prints_the_text_form(files, capsys) -> None:
    assert main(["inspect", str(files["onnx"]), "--values"]) == 0
    f = parse(capsys.readouterr().out)
    assert f.params[0].name == "image"


def test_inspect_onnx_shows_the_weights_shapes_not_their_values(files, capsys) -> None:
    assert main(["inspect", str(files["onnx"])]) == 0
    text = capsys.readouterr().out
    assert "// meta[w0]: float32 8×1×3×3\n" in text and "= meta[w0];" in text
    assert not re.search(r'"[A-Za-z0-9+/=]{40,}"', text), "no base64 blobs"


def test_run_onnx_with_nothing_to_quantize_runs_on_the_cpu(tmp_path, capsys) -> None:
    """``tensorfab run`` calibrates an .onnx on its input; a model with no layer to
    make int8 (one LeakyRelu) then runs on the CPU, where it said it was a float
    model and asked for the calibration data it had just been given."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    node = helper.make_node("LeakyRelu", ["x"], ["y"], name="leaky", alpha=0.5)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                              opset_imports=[helper.make_operatorsetid("", 17)])
    onnx.save(model, tmp_path / "leaky.onnx")
    data = np.array([[-2, -1, 0], [1, 2, 3]], np.float32)
    np.save(tmp_path / "x.npy", data)
    out = tmp_path / "y.npy"
    assert main(["run", str(tmp_path / "leaky.onnx"), "--input", str(tmp_path / "x.npy"),
                 "-o", str(out), "--json"]) == 0
    summary = last_json(capsys)
    assert summary["accel_layers"] == 0
    np.testing.assert_array_equal(np.load(out), np.where(data < 0, 0.5 * data, data))


def test_errors_are_reported(files, capsys) -> None:
    assert main(["compile", str(files["onnx"]), "-o", str(files["dir"] / "x.tfm"),
                 "--accel", "tiny", "--shape", "image=2,1,8,8"]) == 2
    assert "is a float model and the accelerator runs int8 layers" in capsys.readouterr().err
    assert main(["run", str(files["dir"] / "missing.tfm")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["compile", str(files["onnx"]), "-o", str(files["dir"] / "x.tfm"),
                 "--shape", "image"]) == 2
    assert "expected NAME=D,D" in capsys.readouterr().err


def test_compiling_again_replaces_the_tfm(files, capsys) -> None:
    out = files["dir"] / "again.tfm"
    args = ["compile", str(files["onnx"]), "-o", str(out), "--shape", "image=2,1,8,8"]
    assert main(args) == 0
    assert main(args) == 0, capsys.readouterr().err  # no --force for its own file
    other = files["dir"] / "other.tfm"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("graph.json", json.dumps({"format": "something-else"}))
    capsys.readouterr()
    assert main([*args[:3], str(other), *args[4:]]) == 2
    assert "pass --force" in capsys.readouterr().err


@pytest.mark.parametrize("quantizer", ["tensorfab", "ort"])
def test_run_onnx_loads_and_checks_the_file_once(files, capsys, monkeypatch,
                                                 quantizer: str) -> None:
    # run model.onnx: one onnx.load of the file and one checker pass, through reading
    # the inputs' types, quantizing (either quantizer) and compiling
    import onnx.checker

    counts = {"load": 0, "check": 0}
    load, check = onnx.load, onnx.checker.check_model

    def counted_load(f, *a, **k):
        if str(f) == str(files["onnx"]):
            counts["load"] += 1
        return load(f, *a, **k)

    def counted_check(m, *a, **k):
        counts["check"] += 1
        return check(m, *a, **k)

    monkeypatch.setattr(onnx, "load", counted_load)
    monkeypatch.setattr(onnx.checker, "check_model", counted_check)
    assert main(["run", str(files["onnx"]), "--input", str(files["images"]), "--config",
                 "tiny", "--calib", str(files["calib"]), "--quantizer", quantizer,
                 "--json"]) == 0, capsys.readouterr().err
    # the ort flow imports the quantized QDQ model it made: one more check, of that one
    assert counts == {"load": 1, "check": 1 if quantizer == "tensorfab" else 2}
    assert last_json(capsys)["accel_layers"] == 3
