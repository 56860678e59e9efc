"""conv2d, dense and batched matmul on the functional simulator, bit-exact against the
independent numpy reference, for randomized shapes, epilogues, schedules and threads."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tensorfab.compiler import (
    Epilogue,
    Schedule,
    ScheduleError,
    Workload,
    batch_matmul,
    check_program_order,
    conv2d,
    dense,
)
from tensorfab.isa import PRESETS
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.testing.numpy_reference import batch_matmul_acc, conv2d_acc, dense_acc, epilogue

FSIM = FunctionalSimulator()


def run_checked(op):
    """Run on fsim after checking program-order token discipline."""
    check_program_order(op.program.insns, op.program.config.dep_queue_depth)
    return op.run(FSIM)


@st.composite
def epilogues(draw):
    requant = None
    if draw(st.booleans()):
        requant = (draw(st.integers(0, 32767)), draw(st.integers(0, 31)))
    clip = None
    if draw(st.booleans()):
        lo = draw(st.integers(-200, 100))
        clip = (lo, draw(st.integers(lo, 200)))
    return draw(st.booleans()), Epilogue(requant=requant, relu=draw(st.booleans()), clip=clip)


@st.composite
def conv_cases(draw, kernel: int = 4, pad: int = 3, size: int = 9, n: int = 3,
               channels: int = 20, stride: int = 3):
    """conv2d shapes up to the given bounds (kernel side, padding, input side, batch,
    channels, stride), every one with at least one output pixel."""
    kh, kw = draw(st.integers(1, kernel)), draw(st.integers(1, kernel))
    pads = tuple(draw(st.integers(0, pad)) for _ in range(4))
    h = draw(st.integers(max(1, kh - pads[0] - pads[1]), size))
    w = draw(st.integers(max(1, kw - pads[2] - pads[3]), size))
    return dict(n=draw(st.integers(1, n)), c=draw(st.integers(1, channels)), h=h, w=w,
                o=draw(st.integers(1, channels)), kernel=(kh, kw),
                stride=(draw(st.integers(1, stride)), draw(st.integers(1, stride))),
                padding=pads)


def random_schedule(draw, wl, cfg, bias):
    """A random (possibly invalid) schedule: random tiles, order and threads."""
    s = Schedule(wl, cfg, bias=bias)
    ext = wl.extents(cfg)
    s.tile(**{a: draw(st.integers(1, e)) for a, e in ext.items()})
    s.reorder(*draw(st.permutations(["b", "oc", "oh", "ow"])))
    s.virtual_thread(draw(st.integers(1, 4)))
    return s


SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@SETTINGS
@given(case=conv_cases(), ep=epilogues(), preset=st.sampled_from(["tiny", "small"]),
       vthreads=st.integers(1, 4), data=st.data())
def test_conv2d_default_schedule(case, ep, preset, vthreads, data):
    cfg = PRESETS[preset]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = rng.integers(-128, 128, (case["n"], case["c"], case["h"], case["w"]), dtype=np.int8)
    w = rng.integers(-128, 128, (case["o"], case["c"], *case["kernel"]), dtype=np.int8)
    use_bias, epi = ep
    bias = rng.integers(-(1 << 20), 1 << 20, case["o"]).astype(np.int32) if use_bias else None
    op = conv2d(cfg, x, w, bias, stride=case["stride"], padding=case["padding"],
                epilogue=epi, vthreads=vthreads)
    want = epilogue(conv2d_acc(x, w, case["stride"], case["padding"]), bias, epi.requant,
                    epi.relu, epi.clip)
    np.testing.assert_array_equal(run_checked(op), want)


@SETTINGS
@given(case=conv_cases(), ep=epilogues(), preset=st.sampled_from(["tiny", "small"]),
       data=st.data())
def test_conv2d_random_schedule(case, ep, preset, data):
    cfg = PRESETS[preset]
    use_bias, epi = ep
    wl = Workload.conv2d(case["n"], case["c"], case["h"], case["w"], case["o"],
                         case["kernel"], case["stride"], case["padding"])
    sched = random_schedule(data.draw, wl, cfg, use_bias)
    try:
        sched.plan()
    except ScheduleError:
        assume(False)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = rng.integers(-128, 128, (case["n"], case["c"], case["h"], case["w"]), dtype=np.int8)
    w = rng.integers(-128, 128, (case["o"], case["c"], *case["kernel"]), dtype=np.int8)
    bias = rng.integers(-(1 << 20), 1 << 20, case["o"]).astype(np.int32) if use_bias else None
    op = conv2d(cfg, x, w, bias, stride=case["stride"], padding=case["padding"],
                epilogue=epi, schedule=sched)
    want = epilogue(conv2d_acc(x, w, case["stride"], case["padding"]), bias, epi.requant,
                    epi.relu, epi.clip)
    np.testing.assert_array_equal(run_checked(op), want)


@SETTINGS
@given(m=st.integers(1, 40), k=st.integers(1, 70), n=st.integers(1, 40), ep=epilogues(),
       preset=st.sampled_from(["tiny", "small", "default"]), vthreads=st.integers(1, 4),
       seed=st.integers(0, 2**32 - 1))
def test_dense(m, k, n, ep, preset, vthreads, seed):
    cfg = PRESETS[preset]
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    use_bias, epi = ep
    bias = rng.integers(-(1 << 31), 1 << 31, n).astype(np.int32) if use_bias else None
    op = dense(cfg, x, w, bias, epilogue=epi, vthreads=vthreads)
    want = epilogue(dense_acc(x, w), bias, epi.requant, epi.relu, epi.clip)
    np.testing.assert_array_equal(run_checked(op), want)


@SETTINGS
@given(g=st.integers(1, 4), m=st.integers(1, 20), k=st.integers(1, 40), n=st.integers(1, 20),
       ep=epilogues(), shared_bias=st.booleans(), preset=st.sampled_from(["tiny", "small"]),
       vthreads=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_batch_matmul(g, m, k, n, ep, shared_bias, preset, vthreads, seed):
    cfg = PRESETS[preset]
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (g, m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (g, k, n), dtype=np.int8)
    use_bias, epi = ep
    bias = None
    if use_bias:
        bias = rng.integers(-1000, 1000, (n,) if shared_bias else (g, n)).astype(np.int32)
    op = batch_matmul(cfg, a, b, bias, epilogue=epi, vthreads=vthreads)
    acc = batch_matmul_acc(a, b)
    if bias is not None:
        acc = acc + (bias if shared_bias else bias[:, None, :])
    want = epilogue(acc, None, epi.requant, epi.relu, epi.clip)
    np.testing.assert_array_equal(run_checked(op), want)


@pytest.mark.parametrize("vthreads", [1, 2, 3, 4])
def test_conv2d_overlapping_and_ragged_tiles(vthreads):
    """Tiles that do not divide any axis: shifted output tiles, a short ic tile."""
    cfg = PRESETS["tiny"]
    rng = np.random.default_rng(vthreads)
    x = rng.integers(-128, 128, (3, 19, 11, 10), dtype=np.int8)
    w = rng.integers(-128, 128, (14, 19, 3, 2), dtype=np.int8)
    bias = rng.integers(-5000, 5000, 14).astype(np.int32)
    pad = (2, 0, 1, 3)
    wl = Workload.conv2d(3, 19, 11, 10, 14, (3, 2), (2, 1), pad)
    s = Schedule(wl, cfg, bias=True).tile(b=2, oc=2, oh=2, ow=2, ic=2)
    s.reorder("ow", "oc").virtual_thread(vthreads)
    epi = Epilogue(requant=(300, 12), relu=True)
    op = conv2d(cfg, x, w, bias, stride=(2, 1), padding=pad, epilogue=epi, schedule=s)
    want = epilogue(conv2d_acc(x, w, (2, 1), pad), bias, (300, 12), True)
    np.testing.assert_array_equal(run_checked(op), want)


def test_window_wholly_in_padding():
    """Output rows whose window lies entirely in the padding load from a zero segment."""
    cfg = PRESETS["tiny"]
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (1, 4, 2, 2), dtype=np.int8)
    w = rng.integers(-128, 128, (4, 4, 1, 1), dtype=np.int8)
    pad = (3, 3, 3, 3)
    wl = Workload.conv2d(1, 4, 2, 2, 4, 1, 1, pad)
    s = Schedule(wl, cfg).tile(oh=2, ow=2).virtual_thread(2)
    op = conv2d(cfg, x, w, padding=pad, schedule=s)
    assert "zeros" in {seg.name for seg in op.program.segments}
    np.testing.assert_array_equal(run_checked(op), epilogue(conv2d_acc(x, w, (1, 1), pad)))


def test_no_padded_input_copy_in_dram():
    """The input segment holds the unpadded image: padding comes from the LOADs."""
    cfg = PRESETS["small"]
    x = np.ones((1, 8, 6, 6), dtype=np.int8)
    w = np.ones((8, 8, 3, 3), dtype=np.int8)
    op = conv2d(cfg, x, w, padding=1)
    assert op.program.segment("inp").shape[2:4] == (6, 6)
    loads = [i for i in op.program.insns if getattr(i, "buffer", None) is not None
             and i.buffer.name == "INP"]
    assert any(i.pad_top or i.pad_left for i in loads)


# ---------------------------------------------------------------- bigger sweeps (slow)
def big_conv_cases():
    return conv_cases(kernel=7, pad=4, size=24, n=4, channels=80, stride=4)


_SLOW = settings(max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
_PRESETS = st.sampled_from(["tiny", "small", "default", "large"])

test_conv2d_default_schedule_sweep = pytest.mark.slow(_SLOW(given(
    case=big_conv_cases(), ep=epilogues(), preset=_PRESETS, vthreads=st.integers(1, 4),
    data=st.data())(test_conv2d_default_schedule.hypothesis.inner_test)))
test_conv2d_random_schedule_sweep = pytest.mark.slow(_SLOW(given(
    case=big_conv_cases(), ep=epilogues(), preset=_PRESETS,
    data=st.data())(test_conv2d_random_schedule.hypothesis.inner_test)))


# ------------------------------------------------------------ refused API input
@pytest.mark.parametrize("vthreads", [0, -1, 9, 2.0, True])
def test_vthreads_outside_the_token_queues_are_refused(vthreads) -> None:
    from tensorfab.compiler import ScheduleError

    cfg = PRESETS["default"]  # dep_queue_depth 8
    x = np.zeros((1, 16, 4, 4), np.int8)
    w = np.zeros((16, 16, 3, 3), np.int8)
    with pytest.raises(ScheduleError, match=r"vthreads must be an integer in 1\.\.8"):
        conv2d(cfg, x, w, padding=1, vthreads=vthreads)


@pytest.mark.parametrize("bad", [0.5, np.nan, np.inf])
def test_fractional_float_operands_are_refused_not_truncated(bad: float) -> None:
    from tensorfab.compiler import CompileError

    cfg = PRESETS["tiny"]
    x = np.zeros((1, 4, 4, 4), np.float32)
    x[0, 1, 2, 3] = bad
    w = np.ones((4, 4, 1, 1), np.int8)
    with pytest.raises(CompileError, match=r"x\[0, 1, 2, 3\] = .* is not an integer"):
        conv2d(cfg, x, w)
    # whole floats are accepted (and mean the same as the integers)
    ok = conv2d(cfg, np.full((1, 4, 4, 4), 3.0), w).run("fsim")
    assert (ok == 12).all()


@pytest.mark.parametrize("bad", [0.9, np.nan])
def test_fractional_float_bias_is_refused_not_truncated(bad: float) -> None:
    """A float bias was cast to int32 (0.9 became 0, the result one less than asked);
    it is checked like the int8 operands."""
    from tensorfab.compiler import CompileError

    cfg = PRESETS["tiny"]
    x, w = np.ones((1, 16), np.int8), np.ones((16, 16), np.int8)
    bias = np.ones(16)
    bias[5] = bad
    with pytest.raises(CompileError, match=r"bias\[5\] = .* is not an integer"):
        dense(cfg, x, w, bias)
    with pytest.raises(CompileError, match="bias has dtype <U1; int32 operands need"):
        dense(cfg, x, w, np.array(["a"] * 16))
    with pytest.raises(CompileError, match="bias has values outside the int32 range"):
        dense(cfg, x, w, np.full(16, 1 << 31))
    assert (dense(cfg, x, w, np.full(16, 2.0)).run("fsim") == 18).all()


def test_config_and_device_of_the_wrong_type_are_named() -> None:
    """A preset's name for the config was an AttributeError from the tile search, and
    ``run(None)`` a bare AssertionError."""
    from tensorfab.compiler import CompileError

    x, w = np.ones((1, 16), np.int8), np.ones((16, 16), np.int8)
    with pytest.raises(CompileError, match=r"cfg 'default' is not an HwConfig \(e\.g\. "
                                           r"tensorfab\.isa\.PRESETS\['default'\]\)"):
        dense("default", x, w)
    op = dense(PRESETS["tiny"], x, w)
    with pytest.raises(CompileError, match="device None is neither an executor name"):
        op.run(None)
