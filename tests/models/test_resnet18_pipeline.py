"""ResNet-18 (onnx.helper, weights from a fixed seed): float on the interpreter against
onnxruntime, and int8 with every convolution chain compiled for the accelerator and run
on the functional simulator."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tensorfab.compiler.frontend import from_onnx, quantize_onnx
from tensorfab.compiler.graph import Call, Function, accel, post_order
from tensorfab.compiler.graph.accel_lowering import lower_accelerator_chains
from tensorfab.compiler.graph.batch_norm_folding import fold_batch_norm
from tensorfab.compiler.graph.constant_folding import fold_constants
from tensorfab.compiler.graph.fixed_point import fixed_point_requantize
from tensorfab.compiler.graph.layout_planning import pack_accel_layouts
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.graph.partitioning import annotate_accelerator
from tensorfab.compiler.graph.planning import plan_devices
from tensorfab.compiler.graph.qdq_lowering import lower_qdq
from tensorfab.models import resnet18_onnx


def ops(f: Function) -> list[str]:
    return [e.op for e in post_order(f) if isinstance(e, Call)]


def ort_run(model, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]


def test_float_resnet18_matches_onnxruntime() -> None:
    model = resnet18_onnx(seed=0, image_size=224)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    want = ort_run(model, x)
    f = from_onnx(model)
    assert ops(f).count("nn.conv2d") == 20 and ops(f).count("nn.batch_norm") == 20
    tol = 1e-5 * np.abs(want).max()
    np.testing.assert_allclose(evaluate(f, [x]), want, rtol=1e-5, atol=tol)
    folded = fold_constants(fold_batch_norm(f))
    assert "nn.batch_norm" not in ops(folded) and ops(folded).count("nn.conv2d") == 20
    np.testing.assert_allclose(evaluate(folded, [x]), want, rtol=1e-5, atol=tol)


def _int8_on_accelerator(size: int, cfg: str) -> None:
    model = resnet18_onnx(seed=0, image_size=size)
    r = np.random.default_rng(1)
    calib = [{"input": r.standard_normal((2, 3, size, size)).astype(np.float32)}
             for _ in range(2)]
    qdq = quantize_onnx(model, calib, per_channel=False)
    g = fixed_point_requantize(lower_qdq(fold_constants(
        from_onnx(qdq, input_shapes={"input": (1, 3, size, size)}))))
    assert ops(g).count("qnn.conv2d_integer") == 20 and "nn.conv2d" not in ops(g)
    compiled = lower_accelerator_chains(pack_accel_layouts(plan_devices(
        annotate_accelerator(g, accel(cfg)))))
    # 20 convolutions; the residual adds stay on the CPU here (annotate_accelerator's
    # default), so does the global average pooling of the last one
    assert ops(compiled).count("accel.program") == 20
    x = r.standard_normal((1, 3, size, size)).astype(np.float32)
    got = evaluate(compiled, [x])
    np.testing.assert_array_equal(got, evaluate(g, [x]))
    want = ort_run(qdq, x)  # onnxruntime's own int8 arithmetic
    assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.99


def test_int8_resnet18_convolutions_on_the_accelerator() -> None:
    _int8_on_accelerator(32, "default")


@pytest.mark.slow
def test_int8_resnet18_at_224_on_the_accelerator() -> None:
    _int8_on_accelerator(224, "default")
