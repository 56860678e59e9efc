"""The onnx wheel's light zoo models with seeded weights (:mod:`tensorfab.models.onnx_zoo_light`):
the loader against the shipped files, and the models compiled float and int8 and run on fsim
against onnxruntime (float) and the CPU integer graph (int8, bit for bit).

The fast tests load ShuffleNet and run SqueezeNet end to end at 64 px; every model at full
size (224 px) is a slow test.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from tensorfab.benches.zoo import zoo_model_figures
from tensorfab.models.onnx_zoo_light import (
    LIGHT_MODELS,
    LightModelError,
    light_model_path,
    load_light_model,
)


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
         outputs: list[str] | None = None) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(outputs, feeds)


def _conv_gemm_macs(model: onnx.ModelProto) -> int:
    """Convolution and dense MACs counted here: output elements × weight elements per
    output channel (onnx's shape inference), and the Gemm weights' sizes."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in (*inferred.graph.value_info, *inferred.graph.output)}
    dims = {t.name: list(t.dims) for t in model.graph.initializer}
    total = 0
    for node in model.graph.node:
        if node.op_type == "Conv":
            total += int(np.prod(shapes[node.output[0]])) * int(np.prod(dims[node.input[1]][1:]))
        elif node.op_type == "Gemm":  # (Inception v1's weight is a reshaped initializer)
            total += int(np.prod(dims.get(node.input[1]) or shapes[node.input[1]]))
    return total


def test_every_light_model_is_in_the_onnx_wheel() -> None:
    for name in LIGHT_MODELS:
        assert onnx.load(light_model_path(name), load_external_data=False).graph.node


def test_unknown_model_and_unsupported_size_are_named() -> None:
    with pytest.raises(LightModelError, match=r"unknown light zoo model 'lenet'.*squeezenet"):
        load_light_model("lenet")
    with pytest.raises(LightModelError, match=r"'resnet50': input size 96 .*only 224"):
        load_light_model("resnet50", size=96)
    with pytest.raises(LightModelError, match=r"'squeezenet': input size 16 .*at least 32"):
        load_light_model("squeezenet", size=16)


def test_shufflenet_weights_replace_the_constant_of_shape_nodes() -> None:
    """Every ConstantOfShape of the shipped file becomes a seeded initializer of the
    shape it declared (listed among the inputs, old-IR style); the batch norms'
    statistics are those of the activations that reach them (measured here by
    onnxruntime on the same seeded image the loader uses)."""
    shipped = onnx.load(light_model_path("shufflenet"))
    shapes = {t.name: numpy_helper.to_array(t) for t in shipped.graph.initializer}
    declared = {n.output[0]: tuple(shapes[n.input[0]]) for n in shipped.graph.node
                if n.op_type == "ConstantOfShape"}
    light = load_light_model("shufflenet", seed=3)
    assert light.input_shape == (1, 3, 224, 224)
    assert not any(n.op_type == "ConstantOfShape" for n in light.model.graph.node)
    weights = {t.name: numpy_helper.to_array(t) for t in light.model.graph.initializer}
    assert {n: weights[n].shape for n in declared} == declared
    assert {t.name for t in light.model.graph.initializer} <= {
        i.name for i in light.model.graph.input}
    for n in declared:
        assert np.unique(weights[n]).size > 1, n
    again = load_light_model("shufflenet", seed=3)
    assert all(np.array_equal(numpy_helper.to_array(t), weights[t.name])
               for t in again.model.graph.initializer)
    conv = next(n for n in light.model.graph.node if n.op_type == "Conv"
                and weights[n.input[1]].shape[1] > 16)
    w = weights[conv.input[1]]
    assert abs(w.std() - np.sqrt(2.0 / np.prod(w.shape[1:]))) < 0.1 * w.std()
    # the batch norms normalize what reaches them: their outputs' per-channel mean is
    # their shift and their standard deviation their scale
    bns = [n for n in light.model.graph.node if n.op_type == "BatchNormalization"]
    x = np.random.default_rng(4).normal(0, 1, light.input_shape).astype(np.float32)
    picked = [bns[1], bns[len(bns) // 2], bns[-1]]
    probe = onnx.ModelProto()
    probe.CopyFrom(light.model)
    probe.graph.output.extend(onnx.helper.make_tensor_value_info(b.output[0], 1, None)
                              for b in picked)
    got = _ort(probe, {light.input_name: x}, [b.output[0] for b in picked])
    for bn, y in zip(picked, got, strict=True):
        scale, shift = weights[bn.input[1]], weights[bn.input[2]]
        np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), shift, atol=0.5)
        ratio = y.std(axis=(0, 2, 3)) / scale
        assert 0.5 < np.median(ratio) < 2.0, (bn.name, np.median(ratio))


def test_squeezenet_64px_float_and_int8_on_fsim() -> None:
    """Float (CPU) equals onnxruntime; int8 on the accelerator, with tensorfab's quantizer
    and as onnxruntime's uint8 QDQ model of the opset-9, IR-3 file, equals the CPU
    integer graph bit for bit, with its convolutions' MACs on the accelerator."""
    r = zoo_model_figures("squeezenet", size=64)
    assert r["size"] == 64 and r["float_cosine"] > 0.99999
    assert r["macs"] == _conv_gemm_macs(load_light_model("squeezenet", size=64).model)
    for row, close in ((r, 0.98), (r["ort_uint8"], 0.9)):  # (softmax outputs)
        assert row["exact"] and row["cosine"] > close, row["cosine"]
        assert row["accel_mac_fraction"] > 0.98
        assert row["io_bytes"] == 3 * 64 * 64 * 4 + 1000 * 4
        reasons = dict(op.split(": ", 1) for op in row["cpu_operators"])
        assert "max pooling" in reasons["nn.max_pool2d x3"]
        assert "softmax" in reasons["nn.softmax x1"]
        assert "patches" in reasons["nn.im2col x1"]


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_full_size_float_and_int8(name: str) -> None:
    """Every zoo model at 224 px: no traceback, int8 on fsim bit-exact against the CPU
    integer graph, close to onnxruntime's float output, every CPU operator with its
    reason."""
    r = zoo_model_figures(name)
    assert r["macs"] == _conv_gemm_macs(load_light_model(name).model)
    assert r["float_cosine"] > 0.9999
    assert r["cosine"] > 0.95, r["cosine"]
    # onnxruntime's QDQ models: batch norms and Caffe's Scale layers quantized one by one
    # (Inception v2: 0.84); Inception v1's softmax output all zeros, as onnxruntime's
    # own run of its QDQ model gives (a fixed [0, 1] range for 1000 near-equal classes)
    ort_cosine = r["ort_uint8"]["cosine"]
    assert ort_cosine is None if name == "inception_v1" else ort_cosine > 0.8, ort_cosine
    for row in (r, r["ort_uint8"]):
        assert row["exact"]
        assert row["accel_mac_fraction"] > 0.99
        for op in row["cpu_operators"]:
            what, _, reason = op.partition(": ")
            assert what and len(reason) > 10, op
