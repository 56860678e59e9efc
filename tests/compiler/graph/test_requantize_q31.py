"""``qnn.requantize_q31``: TFLite's per-channel requantization on the CPU interpreter
(against gemmlowp's arithmetic written here with Python integers), its layouts, the
``fixed_point_requantize(per_channel=True)`` rewrite, and the per-channel int8 digits
CNN with both convolution chains on the accelerator bit-exact to the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.compiler.graph import Call, accel, post_order
from tensorfab.compiler.graph.accel_lowering import lower_accelerator_chains
from tensorfab.compiler.graph.layout_planning import pack_accel_layouts
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.graph.partitioning import annotate_accelerator
from tensorfab.compiler.graph.planning import plan_devices
from tensorfab.isa import Program
from tensorfab.models import load_digits_split
from tensorfab.runtime.kernels import KERNELS


def program_of(blob: bytes) -> Program:
    """The program an ``accel.program`` call runs."""
    return Program.from_bytes(blob, "accel.program")


def gemmlowp(x: int, m: int, e: int, zp: int) -> int:
    """TFLite's MultiplyByQuantizedMultiplier + zero point + int8 clamp, one value."""
    left, right = max(e, 0), max(-e, 0)
    a = x << left
    a = (a + (1 << 31)) % (1 << 32) - (1 << 31)  # int32 wrap of the shift
    ab = a * m
    v = ab + (1 << 30 if ab >= 0 else 1 - (1 << 30))
    hi = abs(v) >> 31 if v >= 0 else -(abs(v) >> 31)  # C division: toward zero
    if right:
        mask = (1 << right) - 1
        rem, thr = hi & mask, (mask >> 1) + (1 if hi < 0 else 0)
        hi = (hi >> right) + (1 if rem > thr else 0)
    return min(max(hi + zp, -128), 127)


@pytest.mark.parametrize("blocked", [False, True])
def test_kernel_equals_gemmlowp(blocked: bool) -> None:
    rng = np.random.default_rng(3)
    c = 5
    x = rng.integers(-(1 << 20), 1 << 20, (2, c, 3, 3)).astype(np.int32)
    x[0, :, 0, 0] = [0, -1, 1, (1 << 31) - 1, -(1 << 31)]
    mult = rng.integers(1 << 30, 1 << 31, c)
    shift = np.array([-12, -3, 0, 2, -31])
    zp = -7
    attrs = {"multiplier": tuple(int(v) for v in mult),
             "shift": tuple(int(v) for v in shift), "zero_point": zp}
    want = np.array([[[[gemmlowp(int(x[n, k, i, j]), int(mult[k]), int(shift[k]), zp)
                        for j in range(3)] for i in range(3)] for k in range(c)]
                     for n in range(2)], np.int8)
    if not blocked:
        got = KERNELS["qnn.requantize_q31"]([x], attrs)
    else:  # NCHW1n8c: channels padded to 8 (padding channels use multiplier 0)
        xp = np.zeros((2, 8, 3, 3), np.int32)
        xp[:, :c] = x
        xb = xp.reshape(2, 1, 8, 3, 3).transpose(0, 1, 3, 4, 2).reshape(2, 1, 3, 3, 1, 8)
        yb = KERNELS["qnn.requantize_q31"]([xb], attrs)
        got = yb.reshape(2, 3, 3, 8).transpose(0, 3, 1, 2)
        assert np.all(got[:, c:] == zp)
        got = got[:, :c]
    np.testing.assert_array_equal(got, want)


def single(x: int, m: int, e: int, zp: int) -> int:
    """One rounding of x·m·2^(e-31), half away from zero, + zero point, int8 clamp."""
    p, n = x * m, 31 - e
    q, rem = divmod(abs(p), 1 << n)
    q += 2 * rem >= 1 << n
    return min(max((q if p >= 0 else -q) + zp, -128), 127)


def test_kernel_single_rounding() -> None:
    rng = np.random.default_rng(4)
    c = 5
    x = rng.integers(-(1 << 20), 1 << 20, (2, c, 3, 3)).astype(np.int32)
    x[0, :, 0, 0] = [0, -1, 1, (1 << 31) - 1, -(1 << 31)]
    mult = rng.integers(1 << 30, 1 << 31, c)
    shift = np.array([-12, -3, 0, 2, -31])
    attrs = {"multiplier": tuple(int(v) for v in mult),
             "shift": tuple(int(v) for v in shift), "zero_point": 5, "rounding": "single"}
    want = np.array([[[[single(int(x[n, k, i, j]), int(mult[k]), int(shift[k]), 5)
                        for j in range(3)] for i in range(3)] for k in range(c)]
                     for n in range(2)], np.int8)
    np.testing.assert_array_equal(KERNELS["qnn.requantize_q31"]([x], attrs), want)


@pytest.mark.parametrize("rounding", ["double", "single"])
def test_digits_per_channel_on_accelerator_is_bit_exact(rounding: str) -> None:
    from tensorfab.compiler.frontend import from_onnx, quantize_onnx
    from tensorfab.compiler.graph.constant_folding import fold_constants
    from tensorfab.compiler.graph.fixed_point import fixed_point_requantize
    from tensorfab.compiler.graph.qdq_lowering import lower_qdq
    from tensorfab.models import digits_cnn_onnx, train_digits_cnn

    xtr, _, xte, yte = load_digits_split(0)
    qdq = quantize_onnx(digits_cnn_onnx(train_digits_cnn(seed=0)),
                        [{"image": xtr[i:i + 64]} for i in range(0, 512, 64)],
                        per_channel=True)
    g = lower_qdq(fold_constants(from_onnx(qdq, input_shapes={"image": (40, 1, 8, 8)})))
    pc = fixed_point_requantize(g, per_channel=True, rounding=rounding)
    ops = [e.op for e in post_order(pc) if isinstance(e, Call)]
    assert ops.count("qnn.requantize_q31") == 2  # the two convolutions
    assert ops.count("qnn.requantize") == 1  # the dense layer's stays
    assert "qnn.requantize_q31" not in [e.op for e in post_order(fixed_point_requantize(g))
                                        if isinstance(e, Call)]
    planned = pack_accel_layouts(plan_devices(annotate_accelerator(pc, accel("default"))))
    x = xte[:40]
    for stage in ("alu", "store"):  # the one-pass REQUANT in an ALU pass or the STOREs
        compiled = lower_accelerator_chains(planned, requant_stage=stage)
        names = [e.op for e in post_order(compiled) if isinstance(e, Call)]
        assert names.count("accel.program") == 2 and "qnn.requantize_q31" not in names
        programs = [e for e in post_order(compiled) if isinstance(e, Call)
                    and e.op == "accel.program"]
        insns = [i for p in programs for i in program_of(p.args[1].data.tobytes()).insns]
        single = rounding == "single"
        assert ("alu.requant" in {i.mnemonic for i in insns}) == (single and stage == "alu")
        assert any(getattr(i, "requant", False) for i in insns) == (single and stage == "store")
        got = evaluate(compiled, [x])
        np.testing.assert_array_equal(got, evaluate(pc, [x]))
    # exact integer requantization stays close to onnxruntime's float-scale rounding
    assert (got.argmax(axis=1) == evaluate(g, [x]).argmax(axis=1)).mean() >= 0.95
    assert (got.argmax(axis=1) == yte[:40]).mean() >= 0.9


def test_unknown_rounding_names_the_call() -> None:
    from tensorfab.compiler.graph import builder as gb
    from tensorfab.compiler.graph.types import TypeInferenceError

    x = gb.var("x", (1, 2, 3, 3), "int32")
    with pytest.raises(TypeInferenceError,
                       match=r"in call qnn\.requantize_q31\(%x.*rounding 'triple' is neither"):
        gb.function([x], gb.call("qnn.requantize_q31", x, multiplier=(1 << 30, 1 << 30),
                                 shift=(-3, -3), rounding="triple"))
