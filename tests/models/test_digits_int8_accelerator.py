"""The int8 digits CNN end to end: onnxruntime's per-tensor QDQ quantization, integer
lowering, the accelerator's fixed-point requantization, partitioning, device planning,
blocked layouts, and the convolution chains compiled by the tensor compiler and run on
the functional simulator, the rest on the CPU interpreter."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tensorfab.compiler.frontend import from_onnx, quantize_onnx
from tensorfab.compiler.graph import Call, Function, accel, astext, parse, post_order
from tensorfab.compiler.graph.accel_lowering import lower_accelerator_chains
from tensorfab.compiler.graph.constant_folding import fold_constants
from tensorfab.compiler.graph.fixed_point import fixed_point_requantize
from tensorfab.compiler.graph.layout_planning import pack_accel_layouts
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.graph.partitioning import annotate_accelerator
from tensorfab.compiler.graph.planning import plan_devices
from tensorfab.compiler.graph.qdq_lowering import lower_qdq
from tensorfab.models import digits_cnn_onnx, load_digits_split, train_digits_cnn

BATCH = 40


@pytest.fixture(scope="module")
def int8_model():
    xtr, _, xte, yte = load_digits_split(0)
    qdq = quantize_onnx(digits_cnn_onnx(train_digits_cnn(seed=0)),
                        [{"image": xtr[i:i + 64]} for i in range(0, 512, 64)],
                        per_channel=False)
    f = from_onnx(qdq, input_shapes={"image": (BATCH, 1, 8, 8)})
    return qdq, fixed_point_requantize(lower_qdq(fold_constants(f))), xte[:BATCH], yte[:BATCH]


def ops(f: Function) -> list[str]:
    return [e.op for e in post_order(f) if isinstance(e, Call)]


@pytest.mark.parametrize("cfg", ["tiny", "default"])
def test_convolutions_run_on_the_simulated_accelerator(int8_model, cfg: str) -> None:
    qdq, g, images, labels = int8_model
    assert ops(g).count("qnn.requantize_fixed") == 3  # per-tensor scales: all fixed point
    planned = pack_accel_layouts(plan_devices(annotate_accelerator(g, accel(cfg))))
    compiled = lower_accelerator_chains(planned)
    names = ops(compiled)
    assert names.count("accel.program") == 2 and "qnn.conv2d_integer" not in names
    got = evaluate(compiled, [images])
    np.testing.assert_array_equal(got, evaluate(g, [images]))  # bit for bit
    assert (got.argmax(axis=1) == labels).mean() >= 0.9
    # the fixed-point int8 network agrees with onnxruntime's int8 execution of the model
    want = ort.InferenceSession(qdq.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None,
                                                                        {"image": images})[0]
    assert (got.argmax(axis=1) == want.argmax(axis=1)).mean() >= 0.95
    # the compiled program is data: its text form (programs as bytes) runs the same
    np.testing.assert_array_equal(evaluate(parse(astext(compiled)), [images]), got)


def test_saved_model_runs_with_the_runtime_alone(int8_model, tmp_path) -> None:
    import subprocess
    import sys

    from tensorfab.compiler.graph.lower_runtime import lower_to_runtime
    from tensorfab.runtime.artifact import save_model

    _, g, images, _ = int8_model
    compiled = lower_accelerator_chains(pack_accel_layouts(plan_devices(
        annotate_accelerator(g, accel("default")))))
    save_model(lower_to_runtime(compiled), tmp_path / "digits.tfm")
    np.save(tmp_path / "images.npy", images)
    code = (
        "import sys, numpy as np\n"
        "from tensorfab.runtime.artifact import load_model\n"
        "from tensorfab.runtime.interpreter import run_program\n"
        f"p = load_model({str(tmp_path / 'digits.tfm')!r})\n"
        f"y = run_program(p, [np.load({str(tmp_path / 'images.npy')!r})])\n"
        f"np.save({str(tmp_path / 'out.npy')!r}, y)\n"
        "print([m for m in sys.modules if m.startswith('tensorfab.compiler')])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), evaluate(compiled, [images]))
