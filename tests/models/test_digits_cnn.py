"""The digits CNN: numpy training (gradients checked by finite differences), its ONNX
file on the CPU interpreter against onnxruntime, and device planning of it."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tensorfab.compiler.frontend import from_onnx
from tensorfab.compiler.graph import (
    CPU,
    Call,
    Function,
    Var,
    accel,
    astext,
    parse,
    post_order,
    structural_equal,
)
from tensorfab.compiler.graph import builder as gb
from tensorfab.compiler.graph.layout_planning import pack_accel_layouts
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.graph.planning import plan_devices
from tensorfab.compiler.graph.rewrite import substitute
from tensorfab.models import DigitsCNN, digits_cnn_onnx, load_digits_split, train_digits_cnn
from tensorfab.models.digits_cnn import _backward, _forward


@pytest.fixture(scope="module")
def trained() -> DigitsCNN:
    return train_digits_cnn(seed=0)


def test_training_reaches_accuracy(trained: DigitsCNN) -> None:
    assert trained.test_accuracy >= 0.95
    _, _, xte, yte = load_digits_split(0)
    assert (trained.logits(xte).argmax(axis=1) == yte).mean() == trained.test_accuracy


def test_backward_matches_finite_differences() -> None:
    r = np.random.default_rng(7)
    p = [r.standard_normal(s) * 0.5 for s in [(8, 1, 3, 3), (8,), (16, 8, 3, 3), (16,),
                                              (10, 64), (10,)]]
    x = r.random((3, 1, 8, 8))
    target = r.standard_normal((3, 10))

    def loss(params: list[np.ndarray]) -> float:
        return float((_forward(params, x)[0] * target).sum())
    _, cache = _forward(p, x)
    grads = _backward(p, cache, target)
    for i, g in enumerate(grads):
        for _ in range(4):
            idx = tuple(r.integers(0, s) for s in p[i].shape)
            eps = 1e-6
            plus = [q.copy() for q in p]
            minus = [q.copy() for q in p]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            numeric = (loss(plus) - loss(minus)) / (2 * eps)
            assert abs(numeric - g[idx]) <= 1e-4 * max(1.0, abs(numeric)), (i, idx)


def test_onnx_model_on_interpreter_matches_onnxruntime(trained: DigitsCNN) -> None:
    model = digits_cnn_onnx(trained)
    f = from_onnx(model)
    _, _, xte, yte = load_digits_split(0)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"image": xte})[0]
    assert structural_equal(parse(astext(f)), f)
    got = evaluate(f, {"image": xte})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert (got.argmax(axis=1) == yte).mean() == pytest.approx(trained.test_accuracy)


def test_convs_on_the_accelerator_in_blocked_layout(trained: DigitsCNN) -> None:
    f = from_onnx(digits_cnn_onnx(trained), input_shapes={"image": (4, 1, 8, 8)})
    # the image on the cpu; conv1+bias+relu on the accelerator, the rest on the cpu
    image = Var("image", f.params[0].type_annotation, CPU)
    body = substitute(f.body, {id(f.params[0]): image})
    first_relu = next(e for e in post_order(body) if isinstance(e, Call) and e.op == "relu")
    body = substitute(body, {id(first_relu): gb.on_device(first_relu, device=accel())})
    g = Function([image], body, None, CPU)
    p = pack_accel_layouts(plan_devices(g))
    on_accel = sorted(e.op for e in post_order(p) if isinstance(e, Call)
                      and e.virtual_device == accel() and e.op != "device_copy")
    assert on_accel == ["add", "nn.conv2d", "relu"]
    _, _, xte, _ = load_digits_split(0)
    np.testing.assert_allclose(evaluate(p, [xte[:4]]), evaluate(f, [xte[:4]]), rtol=1e-6,
                               atol=1e-6)



def test_int8_qdq_model_on_interpreter_matches_onnxruntime(trained: DigitsCNN) -> None:
    from tensorfab.compiler.frontend import quantize_onnx

    xtr, _, xte, yte = load_digits_split(0)
    model = quantize_onnx(digits_cnn_onnx(trained),
                          [{"image": xtr[i:i + 64]} for i in range(0, 512, 64)])
    f = from_onnx(model)
    quant_ops = {e.op for e in post_order(f) if isinstance(e, Call) and e.op.startswith("qnn.")}
    assert quant_ops == {"qnn.quantize", "qnn.dequantize"}
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"]).run(None, {"image": xte})[0]
    got = evaluate(f, {"image": xte})
    # the output is quantized: values agree, or differ by one step of its scale where a
    # float accumulation lands on the other side of a rounding boundary
    scale = next(e for e in model.graph.initializer if e.name == "logits_scale")
    step = float(onnx.numpy_helper.to_array(scale))
    diff = np.abs(got - want)
    assert diff.max() <= 1.01 * step
    assert (diff > 1e-6).mean() < 0.02
    accuracy = (got.argmax(axis=1) == yte).mean()
    assert accuracy >= trained.test_accuracy - 0.03


def test_shipped_onnx_file_is_the_seeded_training(trained: DigitsCNN) -> None:
    """tensorfab/models/digits_cnn.onnx is what ``python -m tensorfab.models.digits_cnn``
    trains (seed 0); onnxruntime reaches the measured accuracy on the held-out split."""
    from onnx import numpy_helper

    from tensorfab.models.digits_cnn import model_path

    shipped = onnx.load(model_path())
    onnx.checker.check_model(shipped, full_check=True)
    weights = {t.name: numpy_helper.to_array(t) for t in shipped.graph.initializer}
    for name, want in zip(("w1", "b1", "w2", "b2", "fc", "fc_b"), trained.params(),
                          strict=True):
        np.testing.assert_allclose(weights[name], want, rtol=1e-5, atol=1e-6, err_msg=name)
    _, _, xte, yte = load_digits_split(0)
    sess = ort.InferenceSession(model_path().as_posix(), providers=["CPUExecutionProvider"])
    acc = float((sess.run(None, {"image": xte})[0].argmax(1) == yte).mean())
    assert acc == pytest.approx(trained.test_accuracy, abs=0.005) and acc > 0.95
