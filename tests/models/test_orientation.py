"""RapidOCR's text-orientation classifier with its real weights: the rendered text lines,
RapidOCR's preprocessing, float accuracy (onnxruntime) and the int8 model on the
accelerator (fsim) against float."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tensorfab.compiler.frontend.onnx_macs import onnx_macs
from tensorfab.models import orientation
from tensorfab.models.orientation import (
    INPUT_SHAPE,
    OrientationError,
    classifier_path,
    orientation_set,
    preprocess,
    resize_bilinear,
)


def _float_predictions(images: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(classifier_path()), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": images})[0].argmax(axis=1)


def test_resize_is_bilinear_at_half_pixel_centres() -> None:
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (5, 7, 3)).astype(np.uint8)
    out = resize_bilinear(img, 11, 9)
    # an independent evaluation, one output pixel at a time
    for y, x in [(0, 0), (4, 5), (8, 10), (3, 1)]:
        sy = min(max((y + 0.5) * 5 / 9 - 0.5, 0), 4)
        sx = min(max((x + 0.5) * 7 / 11 - 0.5, 0), 6)
        y0, x0 = math.floor(sy), math.floor(sx)
        y1, x1 = min(y0 + 1, 4), min(x0 + 1, 6)
        fy, fx = sy - y0, sx - x0
        a = img.astype(np.float64)
        want = ((a[y0, x0] * (1 - fx) + a[y0, x1] * fx) * (1 - fy)
                + (a[y1, x0] * (1 - fx) + a[y1, x1] * fx) * fy)
        np.testing.assert_allclose(out[y, x], want, rtol=1e-5)
    # the same size is the identity
    np.testing.assert_allclose(resize_bilinear(img, 7, 5), img)


def test_preprocess_keeps_aspect_scales_and_pads_as_rapidocr() -> None:
    img = np.full((24, 40, 3), 255, np.uint8)  # white, 40/24 → width ceil(48 × 5/3) = 80
    x = preprocess(img)
    assert x.shape == INPUT_SHAPE and x.dtype == np.float32
    np.testing.assert_allclose(x[:, :, :80], 1.0)   # (255/255 − 0.5) / 0.5
    np.testing.assert_array_equal(x[:, :, 80:], 0.0)  # padding
    wide = preprocess(np.zeros((10, 500, 3), np.uint8))  # capped at 192: all −1
    np.testing.assert_allclose(wide, -1.0)
    with pytest.raises(OrientationError, match=r"H×W×3"):
        preprocess(np.zeros((10, 0, 3), np.uint8))


def test_missing_package_names_the_install_command(monkeypatch) -> None:
    monkeypatch.setattr(orientation, "MODEL_PACKAGE", "no_such_package_tf")
    with pytest.raises(OrientationError, match="pip install --no-deps rapidocr"):
        classifier_path()


def test_rendered_set_is_deterministic_and_balanced() -> None:
    a, b = orientation_set(60, seed=5), orientation_set(60, seed=5)
    np.testing.assert_array_equal(a.images, b.images)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert 0.3 < a.labels.mean() < 0.7
    assert not np.array_equal(orientation_set(5, seed=6).images, a.images[:5])


def test_float_classifier_reads_the_rendered_lines() -> None:
    s = orientation_set(200, seed=0)
    assert (_float_predictions(s.images) == s.labels).mean() >= 0.9


def test_model_macs_counted_from_the_file() -> None:
    # independently: every Conv's output as onnxruntime computes it × (input channels
    # per group × taps) from its weight, the Constant node that holds it; the classifier
    # MatMul: output elements × the reduced dimension
    from onnx import helper, numpy_helper

    model = onnx.load(classifier_path())
    consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t)
              for n in model.graph.node if n.op_type == "Constant"}
    convs = [n for n in model.graph.node if n.op_type in ("Conv", "MatMul")]
    assert len(convs) > 20 and not any(n.op_type == "Gemm" for n in model.graph.node)
    probe = onnx.ModelProto.FromString(model.SerializeToString())
    probe.graph.output.extend(helper.make_empty_tensor_value_info(n.output[0]) for n in convs)
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run([n.output[0] for n in convs], {"x": np.zeros((1, *INPUT_SHAPE), np.float32)})
    want = sum(int(o.size) * (int(np.prod(consts[n.input[1]].shape[1:])) if n.op_type == "Conv"
                              else consts[n.input[1]].shape[0])
               for n, o in zip(convs, outs, strict=True))
    assert onnx_macs(model, {"x": (1, *INPUT_SHAPE)}) == want
    assert onnx_macs(model, {"x": (2, *INPUT_SHAPE)}) == 2 * want


def test_int8_on_the_accelerator_agrees_with_float() -> None:
    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.runtime.resident import ResidentModel
    from tensorfab.sim import get_device

    test, calib = orientation_set(30, seed=0), orientation_set(32, seed=1)
    compiled = compile_onnx(str(classifier_path()), config="default",
                            calibration=calib.images, input_shapes={"x": (1, *INPUT_SHAPE)})
    model = ResidentModel(compiled.program, get_device("fsim"))
    try:
        pred = np.array([np.asarray(model.run({"x": test.images[k:k + 1]})).argmax()
                         for k in range(len(test.labels))])
    finally:
        model.close()
    assert (pred == _float_predictions(test.images)).mean() >= 29 / 30


@pytest.mark.slow
def test_int8_line_on_rtl_equals_functional_simulator() -> None:
    """One rendered line through every accelerator program cycle-accurately (Verilator):
    the class probabilities equal fsim's bit for bit, and both decide as float does."""
    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.runtime.profiling import profile_program
    from tensorfab.sim import get_device

    line, calib = orientation_set(2, seed=0), orientation_set(16, seed=1)
    compiled = compile_onnx(str(classifier_path()), config="default",
                            calibration=calib.images, input_shapes={"x": (1, *INPUT_SHAPE)})
    x = {"x": line.images[:1]}
    fsim = profile_program(compiled.program, x, get_device("fsim"))
    rtl = profile_program(compiled.program, x, get_device("rtl"))
    np.testing.assert_array_equal(np.asarray(rtl.output), np.asarray(fsim.output))
    assert rtl.total_cycles > 0 and rtl.accel_macs == fsim.accel_macs
    assert np.asarray(rtl.output).reshape(-1).argmax() == _float_predictions(line.images[:1])[0]
