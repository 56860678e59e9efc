"""QDQ programs lowered to integer operators: onnxruntime's fused int8 execution as the
reference, hand-built patterns, and what stays in QDQ form."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from ort_reference import reference_session

from tensorfab.compiler.frontend import from_onnx, quantize_onnx
from tensorfab.compiler.graph import Call, Function, astext, parse, post_order, structural_equal
from tensorfab.compiler.graph import builder as gb
from tensorfab.compiler.graph.constant_folding import fold_constants
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.graph.planning import plan_devices
from tensorfab.compiler.graph.qdq_lowering import lower_qdq
from tensorfab.models import digits_cnn_onnx, load_digits_split, train_digits_cnn


def ops(f: Function) -> list[str]:
    return [e.op for e in post_order(f) if isinstance(e, Call)]


@pytest.fixture(scope="module")
def digits_qdq() -> onnx.ModelProto:
    xtr, _, _, _ = load_digits_split(0)
    return quantize_onnx(digits_cnn_onnx(train_digits_cnn(seed=0)),
                         [{"image": xtr[i:i + 64]} for i in range(0, 512, 64)])


def test_digits_int8_graph_matches_onnxruntime_fused_int8(digits_qdq) -> None:
    g = lower_qdq(fold_constants(from_onnx(digits_qdq)))
    names = ops(g)
    assert "nn.conv2d" not in names and "matmul" not in names
    assert names.count("qnn.conv2d_integer") == 2 and names.count("qnn.matmul_integer") == 1
    assert names.count("qnn.dequantize") == 1 and names.count("qnn.quantize") == 1
    _, _, xte, yte = load_digits_split(0)
    # onnxruntime's default optimizations fuse the QDQ patterns into QLinearConv/-MatMul
    want = reference_session(digits_qdq).run(None, {"image": xte})[0]
    got = evaluate(g, {"image": xte})
    step = float(onnx.numpy_helper.to_array(
        next(e for e in digits_qdq.graph.initializer if e.name == "logits_scale")))
    diff = np.abs(got - want) / step
    assert diff.max() <= 1.0 + 1e-6 and (diff > 1e-3).mean() < 0.01
    assert (got.argmax(axis=1) == yte).mean() >= 0.93
    assert structural_equal(parse(astext(g)), g)
    p = plan_devices(g)
    assert structural_equal(plan_devices(p), p)


def test_scale_commuting_ops_and_plain_requantization() -> None:
    x = gb.var("x", (1, 2, 4, 4), "int8")
    s1, s2 = np.float32(0.05), np.float32(0.02)
    z = np.int8(0)
    deq = gb.dequantize(x, s1, z)
    same = gb.quantize(gb.max_pool2d(deq, pool_size=(2, 2), strides=(2, 2)), s1, z)
    other = gb.quantize(gb.relu(deq), s2, z)
    direct = gb.quantize(deq, s2, z)
    f = gb.function([x], gb.tuple_(same, other, direct))
    g = lower_qdq(f)
    assert sorted(ops(g)) == sorted(["nn.max_pool2d", "cast", "relu", "qnn.requantize",
                                     "cast", "qnn.requantize"])
    xv = np.random.default_rng(0).integers(-128, 128, (1, 2, 4, 4)).astype(np.int8)
    for lowered, qdq in zip(evaluate(g, [xv]), evaluate(f, [xv]), strict=True):
        assert lowered.dtype == np.int8
        assert np.abs(lowered.astype(int) - qdq.astype(int)).max() <= 1


def test_relu6_clip_lowers_to_an_exact_int8_clip() -> None:
    # every int8 value through clip(x·s, 0, 6) / s in float, against the int8 clip;
    # s = 0.1 puts the upper bound (60) inside the int8 range, so both bounds act
    x = gb.var("x", (256,), "int8")
    s, z = np.float32(0.1), np.int8(0)
    relu6 = gb.call("clip", gb.dequantize(x, s, z), a_min=0.0, a_max=6.0)
    f = gb.function([x], gb.quantize(relu6, s, z))
    g = lower_qdq(f)
    assert ops(g) == ["clip"]
    clip = next(e for e in post_order(g) if isinstance(e, Call))
    assert (clip.attrs["a_min"], clip.attrs["a_max"]) == (0, 60)
    xv = np.arange(-128, 128).astype(np.int8)
    want = np.rint(np.clip(xv.astype(np.float32) * s, 0.0, 6.0) / s).astype(np.int8)
    got = evaluate(g, [xv])
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(evaluate(f, [xv]), want)
    # another output scale: left in QDQ form (the CPU runs it as it is)
    other = gb.function([x], gb.quantize(relu6, np.float32(0.05), z))
    assert "clip" in ops(lower_qdq(other)) and "qnn.quantize" in ops(lower_qdq(other))


def test_asymmetric_quantization_stays_in_qdq_form() -> None:
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parents[1] / "frontend"))
    from onnx_models import qdq_cnn

    f = fold_constants(from_onnx(qdq_cnn()))
    g = lower_qdq(f)
    assert "nn.conv2d" in ops(g)  # its output zero point is -10: not lowered
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(evaluate(g, [x]), evaluate(f, [x]))


def test_int8_convolutions_on_the_accelerator_give_identical_results(digits_qdq) -> None:
    from tensorfab.compiler.graph import CPU, accel
    from tensorfab.compiler.graph.layout_planning import pack_accel_layouts
    from tensorfab.compiler.graph.partitioning import accelerator_chains, annotate_accelerator

    g = lower_qdq(fold_constants(from_onnx(digits_qdq, input_shapes={"image": (8, 1, 8, 8)})))
    chains = accelerator_chains(g)
    assert [[e.op for e in c] for c in chains] == [
        ["qnn.conv2d_integer", "add", "qnn.requantize", "relu"]] * 2
    _, _, xte, _ = load_digits_split(0)
    want = evaluate(g, [xte[:8]])
    for cfg in ("tiny", "default"):
        dev = accel(cfg)
        p = pack_accel_layouts(plan_devices(annotate_accelerator(g, dev)))
        on_accel = sorted(e.op for e in post_order(p) if isinstance(e, Call)
                          and e.virtual_device == dev and e.op != "device_copy")
        assert on_accel == sorted(["qnn.conv2d_integer", "add", "qnn.requantize", "relu"] * 2)
        copies = [e for e in post_order(p) if isinstance(e, Call) and e.op == "device_copy"]
        assert len(copies) == 4  # into and out of each chain
        transforms = [e for e in post_order(p) if isinstance(e, Call)
                      and e.op == "layout_transform"]
        assert len(transforms) == 4 and all(t.virtual_device == CPU for t in transforms)
        np.testing.assert_array_equal(evaluate(p, [xte[:8]]), want)


def test_convolutions_the_accelerator_cannot_take_stay_on_the_cpu() -> None:
    from tensorfab.compiler.graph import accel
    from tensorfab.compiler.graph.partitioning import accelerator_chains, annotate_accelerator

    r = np.random.default_rng(4)
    x = gb.var("x", (1, 4, 5, 5), "int8")
    w = r.integers(-128, 128, (4, 4, 3, 3)).astype(np.int8)

    def int8(acc):  # (the accelerator stores int8: a chain requantizes its sums)
        return gb.requantize(acc, np.float32(0.01), np.int8(0), out_dtype="int8")

    ok = gb.relu(int8(gb.conv2d_integer(x, w, np.int8(0), np.int8(0))))
    grouped = int8(gb.conv2d_integer(x, w[:, :2], np.int8(0), np.int8(0), groups=2))
    offset = int8(gb.conv2d_integer(x, w, np.int8(3), np.int8(0)))
    shared = int8(gb.conv2d_integer(x, w, np.int8(0), np.int8(0), padding=(1, 1, 1, 1)))
    # int32 sums no requantization follows: no chain (relu before one: only up to it)
    sums = gb.conv2d_integer(x, w, np.int8(0), np.int8(0))
    early = gb.conv2d_integer(x, w, np.int8(0), np.int8(0))
    f = gb.function([x], gb.tuple_(ok, grouped, offset, gb.relu(shared), gb.negative(shared),
                                   gb.relu(sums), int8(gb.relu(early))))
    chains = accelerator_chains(f)
    assert [[e.op for e in c] for c in chains] == [
        ["qnn.conv2d_integer", "qnn.requantize", "relu"],
        ["qnn.conv2d_integer", "qnn.requantize"]]
    p = plan_devices(annotate_accelerator(f, accel("tiny")))
    placed = {e.op + str(e.attrs.get("groups", "")) for e in post_order(p)
              if isinstance(e, Call) and e.virtual_device == accel("tiny")
              and e.op != "device_copy"}
    assert placed == {"qnn.conv2d_integer1", "qnn.requantize", "relu"}
    xv = r.integers(-128, 128, (1, 4, 5, 5)).astype(np.int8)
    for a, b in zip(evaluate(p, [xv]), evaluate(f, [xv]), strict=True):
        np.testing.assert_array_equal(a, b)
