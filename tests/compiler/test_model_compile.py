"""The ONNX → runtime pipeline (compiler/model_compile.py): the digits CNN quantized by
tensorfab's PTQ on the accelerator equals the CPU int8 interpreter bit for bit; the
onnxruntime quantizer stays selectable; calibration batching and errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from tensorfab.compiler.frontend import from_onnx
from tensorfab.compiler.graph import builder as gb
from tensorfab.compiler.model_compile import (
    CALIBRATION_BATCH,
    ModelCompileError,
    calibration_batches,
    compile_onnx,
)
from tensorfab.isa import PRESETS
from tensorfab.models import load_digits_split
from tensorfab.models.digits_cnn import model_path
from tensorfab.runtime.interpreter import run_program

BATCH = 40


@pytest.fixture(scope="module")
def data() -> dict:
    xtr, _, xte, yte = load_digits_split(0)
    return {"calib": xtr[:512], "x": xte[:2 * BATCH], "y": yte[:2 * BATCH]}


def _predict(program, x: np.ndarray) -> np.ndarray:
    return np.concatenate([np.asarray(run_program(program, [x[i:i + BATCH]]))
                           for i in range(0, len(x), BATCH)])


@pytest.mark.parametrize("method", ["minmax", "percentile"])
def test_accelerator_equals_cpu_int8_bit_for_bit(data, method: str) -> None:
    shapes = {"image": (BATCH, 1, 8, 8)}
    kw = dict(calibration=data["calib"], method=method, input_shapes=shapes)
    on_accel = compile_onnx(model_path(), config="default", **kw)
    on_cpu = compile_onnx(model_path(), **kw)
    assert on_accel.quantized and on_cpu.quantized
    accel_nodes = [n for n in on_accel.program.nodes if n.op == "accel.program"]
    # the two convolutions and the classifier (a 1x1 convolution: dense_as_conv)
    assert len(accel_nodes) == 3 and all(n.attrs["layer"].startswith("conv2d_integer")
                                         for n in accel_nodes)
    assert not any(n.op == "accel.program" for n in on_cpu.program.nodes)
    got, want = _predict(on_accel.program, data["x"]), _predict(on_cpu.program, data["x"])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    assert (got.argmax(axis=1) == data["y"]).mean() >= 0.9


def test_onnxruntime_quantizer_is_selectable(data) -> None:
    shapes = {"image": (BATCH, 1, 8, 8)}
    ort = compile_onnx(model_path(), config="tiny", calibration=data["calib"][:128],
                       quantizer="ort", input_shapes=shapes)
    ours = compile_onnx(model_path(), config="tiny", calibration=data["calib"][:128],
                        input_shapes=shapes)
    assert [n.op for n in ort.program.nodes] == [n.op for n in ours.program.nodes]
    a, b = _predict(ort.program, data["x"]), _predict(ours.program, data["x"])
    assert (a.argmax(axis=1) == b.argmax(axis=1)).mean() >= 0.95


def test_config_from_a_json_file(tmp_path: Path, data) -> None:
    cfg = PRESETS["tiny"].to_dict()
    cfg["name"] = "tiny_copy"
    (tmp_path / "mine.json").write_text(json.dumps(cfg))
    compiled = compile_onnx(model_path(), config=str(tmp_path / "mine.json"),
                            calibration=data["calib"][:64],
                            input_shapes={"image": (8, 1, 8, 8)})
    assert compiled.config is not None and compiled.config.name == "tiny_copy"
    assert sum(n.op == "accel.program" for n in compiled.program.nodes) == 3


def test_symbolic_dims_suggest_shape(data) -> None:
    with pytest.raises(ModelCompileError,
                       match=r"digits_cnn.onnx: input 'image' has symbolic dims \('N', 1, "
                             r"8, 8\); the accelerator needs fixed shapes: pass --shape "
                             r"image=1,1,8,8"):
        compile_onnx(model_path(), config="tiny", calibration=data["calib"])
    # a dynamic dim written as -1 (Paddle's exporter) and symbolic spatial dims
    model = onnx.load(str(model_path()))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[0].Clear()
    dims[0].dim_value = -1
    for d in dims[2:]:
        d.Clear()
        d.dim_param = "_"
    with pytest.raises(ModelCompileError, match=r"input 'image' has symbolic dims "
                       r"\('image_d0', 1, '_', '_'\); .*pass --shape image=1,1,D2,D3 "
                       r"\(D2, D3, ... the sizes to run it at\)"):
        compile_onnx(model, config="tiny", calibration=data["calib"])
    # on the CPU symbolic dims are fine
    cpu = compile_onnx(model_path(), calibration=data["calib"][:64])
    assert cpu.program.inputs[0].shape == ("N", 1, 8, 8)
    assert run_program(cpu.program, [data["x"][:3]]).shape == (3, 10)


def test_float_model_for_the_accelerator_needs_calibration() -> None:
    with pytest.raises(ModelCompileError, match="is a float model and the accelerator runs "
                                                "int8 layers: pass calibration data"):
        compile_onnx(model_path(), config="tiny", input_shapes={"image": (2, 1, 8, 8)})


def test_calibration_batches() -> None:
    x = gb.var("x", ("N", 3))
    sym = gb.function([x], gb.relu(x))
    samples = np.arange(150 * 3, dtype=np.float32).reshape(150, 3)
    b = calibration_batches(sym, samples)
    assert [len(f["x"]) for f in b] == [CALIBRATION_BATCH, CALIBRATION_BATCH, 22]
    np.testing.assert_array_equal(np.concatenate([f["x"] for f in b]), samples)
    y = gb.var("x", (16, 3))
    fixed = gb.function([y], gb.relu(y))
    assert [len(f["x"]) for f in calibration_batches(fixed, samples)] == [16] * 9
    few = calibration_batches(fixed, samples[:5])  # repeated to fill one batch
    np.testing.assert_array_equal(few[0]["x"], np.resize(samples[:5], (16, 3)))
    with pytest.raises(ModelCompileError, match=r"inputs missing \['x'\], unknown \['y'\]"):
        calibration_batches(sym, {"y": samples})
    two = gb.function([gb.var("a", (2,)), gb.var("b", (2,))], gb.var("a", (2,)), check=False)
    with pytest.raises(ModelCompileError, match="one array fits a model with one input"):
        calibration_batches(two, samples)
    # inputs without a batch axis ((3,)), samples along axis 0: one run per sample (was
    # "calibration batch 0: input 'x': shape (16, 3), expected (3,)" when quantizing)
    flat = gb.function([gb.var("x", (3,))], gb.relu(gb.var("x", (3,))), check=False)
    runs = calibration_batches(flat, samples[:7])
    assert len(runs) == 7 and all(r["x"].shape == (3,) for r in runs)
    np.testing.assert_array_equal(runs[6]["x"], samples[6])
    mixed = gb.function([gb.var("a", (2, 3)), gb.var("b", (3,))], gb.var("a", (2, 3)),
                        check=False)
    with pytest.raises(ModelCompileError, match=r"'b' has one sample per run \(its array "
                                                r"\(150, 3\) for an input of 1 dims\) while "
                                                r"'a' takes batches of 2 \(its dim 0 is "
                                                r"fixed\): give 'a' whole inputs too"):
        calibration_batches(mixed, {"a": samples, "b": samples})
    # a 0-dim array (np.savez(..., lo=np.float32(0))) was "TypeError: len() of unsized
    # object"
    with pytest.raises(ModelCompileError, match=r"input 'b' is a single value \(a 0-dim"):
        calibration_batches(mixed, {"a": samples, "b": np.float32(0)})
    with pytest.raises(ModelCompileError, match=r"input 'x' is a single value"):
        calibration_batches(flat, np.array(1.0))


def test_a_model_input_without_a_batch_axis_is_calibrated_per_sample() -> None:
    """x of shape (8,) (no batch axis), calibration samples (32, 8): quantized to int8
    and within int8 error of onnxruntime (was 'calibration batch 0: input 'x': shape
    (16, 8), expected (8,)')."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(w, "W")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    calib = rng.standard_normal((32, 8)).astype(np.float32)
    compiled = compile_onnx(model, calibration={"x": calib})
    assert compiled.quantized
    session = ort.InferenceSession(model.SerializeToString())
    want = np.stack([session.run(None, {"x": x})[0] for x in calib])
    step = np.abs(want).max() / 127  # about one int8 step of the output
    for x, w_x in zip(calib[:8], want, strict=False):
        got = np.asarray(run_program(compiled.program, [x]))
        assert got.shape == (4,) and np.abs(got - w_x).max() <= 2 * step


def _batched_and_scalar_model() -> onnx.ModelProto:
    """``y = (x @ W) * s``: ``x`` batched (``N`` x 8), ``s`` a rank-0 input."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]),
         helper.make_node("Mul", ["h", "s"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
        [numpy_helper.from_array(w, "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_batched_input_with_a_rank0_input_is_calibrated() -> None:
    """x (N, 8) with s (rank 0): samples x (32, 8) and s (32,) were refused ("'s' has
    one sample per run ... while 'x' is cut into batches"), one s for all (a 0-dim
    array, what `run` calibrates on when given its inputs) too ("is a single value").
    Now each sample is one run (x[i:i+1], s[i]), a single s goes with every batch, and
    the int8 model is within int8 error of onnxruntime."""
    import onnxruntime as ort

    model = _batched_and_scalar_model()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 8)).astype(np.float32)
    s = rng.uniform(0.5, 2.0, 32).astype(np.float32)
    fn = from_onnx(model)
    runs = calibration_batches(fn, {"x": x, "s": s})
    assert len(runs) == 32
    for i, run in enumerate(runs):
        np.testing.assert_array_equal(run["x"], x[i:i + 1])
        assert run["s"].shape == () and run["s"] == s[i]
    one = calibration_batches(fn, {"x": x, "s": np.float32(1.5)})
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in one]), x)
    assert all(b["s"].shape == () and b["s"] == np.float32(1.5) for b in one)
    session = ort.InferenceSession(model.SerializeToString())
    for calibration in ({"x": x, "s": s}, {"x": x, "s": np.float32(1.5)}):
        compiled = compile_onnx(model, calibration=calibration)
        assert compiled.quantized
        for scale in (np.array(0.7, np.float32), np.array(1.5, np.float32)):
            want = session.run(None, {"x": x[:4], "s": scale})[0]
            got = np.asarray(run_program(compiled.program, [x[:4], scale]))
            step = np.abs(want).max() / 127  # about one int8 step of the output
            assert got.shape == want.shape and np.abs(got - want).max() <= 2 * step


def test_unknown_quantizer() -> None:
    with pytest.raises(ModelCompileError, match="unknown quantizer 'tflite'"):
        compile_onnx(onnx.load(str(model_path())), quantizer="tflite")
