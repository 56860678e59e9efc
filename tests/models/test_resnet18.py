"""The seeded ResNet-18: ImageNet topology, checked structurally and run by onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tensorfab.models import resnet18


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory):
    return resnet18.resnet18_path(tmp_path_factory.mktemp("models"))


def test_topology(model_file) -> None:
    model = onnx.load(model_file)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Conv") == 20  # stem + 16 in blocks + 3 downsamples
    assert ops.count("BatchNormalization") == 20
    assert ops.count("Add") == 8 and ops.count("MaxPool") == 1 and ops.count("Gemm") == 1
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer
                 if t.name.split(".")[-1] not in ("scale", "bias", "mean", "var")
                 or t.name.startswith("fc"))
    assert params == pytest.approx(11_689_512 - 9_600, rel=1e-3)  # torchvision's, less BN
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in inferred.graph.value_info}
    assert shapes["pool1"] == [1, 64, 56, 56]
    assert shapes["layer4.1.out"] == [1, 512, 7, 7]


def test_runs_in_onnxruntime_and_is_seeded(model_file, tmp_path) -> None:
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    sess = ort.InferenceSession(model_file.as_posix(), providers=["CPUExecutionProvider"])
    y = sess.run(None, {"input": x})[0]
    assert y.shape == (1, 1000) and np.isfinite(y).all() and y.std() > 0
    again = resnet18.resnet18_path(tmp_path)  # same seed, new file: same weights
    assert again.read_bytes() == model_file.read_bytes()
