"""The shipped digits CNN: its ONNX file, the numpy network that trained it, and
onnxruntime as the independent reference."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from tensorfab.models import digits


@pytest.fixture(scope="module")
def data() -> digits.DigitsData:
    return digits.load_data()


def _params(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_shipped_model_is_valid_and_accurate(data: digits.DigitsData) -> None:
    model = onnx.load(digits.model_path())
    onnx.checker.check_model(model, full_check=True)
    sess = ort.InferenceSession(digits.model_path().as_posix(),
                                providers=["CPUExecutionProvider"])
    logits = sess.run(None, {"input": data.x_test})[0]
    acc = float(np.mean(logits.argmax(1) == data.y_test))
    assert acc >= 0.95, acc
    # the numpy network that trained it computes the same logits
    ref = digits.forward(_params(model), data.x_test)
    np.testing.assert_allclose(logits, ref, rtol=1e-4, atol=1e-4)


def test_split_is_stratified_and_disjoint(data: digits.DigitsData) -> None:
    assert len(data.y_test) == 360 and len(data.y_train) == 1797 - 360
    assert set(np.bincount(data.y_test)) <= {35, 36, 37}
    train = {x.tobytes() for x in data.x_train}
    # the digits set has a few duplicate images; almost none may cross the split
    assert sum(x.tobytes() in train for x in data.x_test) <= 3


def test_backward_matches_finite_differences() -> None:
    rng = np.random.default_rng(0)
    p = {k: v.astype(np.float64) for k, v in digits.init_params(1).items()}
    x = rng.random((3, 1, 8, 8))
    y = np.array([1, 4, 7])

    def loss(params: dict[str, np.ndarray]) -> float:
        z = digits.forward(params, x)
        z = z - z.max(1, keepdims=True)
        return float(-(z[np.arange(3), y] - np.log(np.exp(z).sum(1))).mean())

    cache: list = []
    z = digits.forward(p, x, cache)
    e = np.exp(z - z.max(1, keepdims=True))
    prob = e / e.sum(1, keepdims=True)
    prob[np.arange(3), y] -= 1
    grads = digits._backward(p, cache, prob / 3)
    for name in ("conv1.w", "conv2.w", "conv2.b", "fc.w"):
        flat = p[name].reshape(-1)
        for i in rng.choice(flat.size, 4, replace=False):
            old = flat[i]
            flat[i] = old + 1e-5
            up = loss(p)
            flat[i] = old - 1e-5
            down = loss(p)
            flat[i] = old
            assert grads[name].reshape(-1)[i] == pytest.approx((up - down) / 2e-5,
                                                               rel=1e-3, abs=1e-7)


@pytest.mark.slow
def test_training_reproduces_the_shipped_accuracy(data: digits.DigitsData) -> None:
    p = digits.train(data)
    shipped = _params(onnx.load(digits.model_path()))
    assert digits.accuracy(p, data.x_test, data.y_test) == pytest.approx(
        digits.accuracy(shipped, data.x_test, data.y_test), abs=0.01)
