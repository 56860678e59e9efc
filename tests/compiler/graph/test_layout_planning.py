"""Blocked accelerator layouts: transforms only next to device copies, never between two
accelerator ops, packed constants, same results as the unplanned program."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfab.compiler.graph import (
    CPU,
    Call,
    Function,
    accel,
    astext,
    parse,
    post_order,
    structural_equal,
)
from tensorfab.compiler.graph import builder as gb
from tensorfab.compiler.graph.layout_planning import (
    LayoutPlanningError,
    pack_accel_layouts,
)
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.graph.planning import expand_devices, plan_devices
from tensorfab.isa import PRESETS, HwConfig
from tensorfab.isa.layout import pack_nchw, pack_oihw


def two_convs(cfg: str | HwConfig, c_mid: int, float_dtype: bool = True) -> Function:
    r = np.random.default_rng(11)
    dev = accel(cfg)
    x = gb.var("x", (1, 3, 9, 9), device=CPU)
    w1 = r.standard_normal((c_mid, 3, 3, 3)).astype(np.float32)
    b1 = r.standard_normal((c_mid, 1, 1)).astype(np.float32)
    w2 = r.standard_normal((5, c_mid, 3, 3)).astype(np.float32)
    y = gb.relu(gb.add(gb.conv2d(x, w1, padding=(1, 1, 1, 1)), b1))
    y = gb.clip(gb.multiply(gb.conv2d(y, w2, strides=(2, 2)), np.float32(0.5)), a_min=-1.0,
                a_max=None)
    return gb.function([x], gb.softmax(gb.flatten(gb.on_device(y, device=dev))))


def _transforms_at_crossings_only(p: Function) -> None:
    readers: dict[int, list[Call]] = {}
    for e in post_order(p):
        if isinstance(e, Call):
            for a in e.args:
                readers.setdefault(id(a), []).append(e)
    for e in post_order(p):
        if not (isinstance(e, Call) and e.op == "layout_transform"):
            continue
        assert e.virtual_device == CPU
        arg = e.args[0]
        next_to_copy = (isinstance(arg, Call) and arg.op == "device_copy") or all(
            r.op == "device_copy" for r in readers[id(e)])
        assert next_to_copy, astext(p)
    for e in post_order(p):  # accelerator ops read accelerator ops directly
        if isinstance(e, Call) and e.virtual_device.kind == "accel" and e.op != "device_copy":
            for a in e.args:
                assert not (isinstance(a, Call) and a.op == "layout_transform")


@pytest.mark.parametrize("cfg,c_mid", [("tiny", 6), ("small", 8), ("default", 20)])
def test_blocked_layouts_give_the_same_result(cfg: str, c_mid: int) -> None:
    f = two_convs(cfg, c_mid)
    p = pack_accel_layouts(plan_devices(f))
    _transforms_at_crossings_only(p)
    convs = [e for e in post_order(p) if isinstance(e, Call) and e.op == "nn.conv2d"]
    hw = PRESETS[cfg]
    assert [c.attrs["data_layout"] for c in convs] == [f"NCHW{hw.batch}n{hw.block_in}c"] * 2
    assert sum(1 for e in post_order(p) if isinstance(e, Call)
               and e.op == "layout_transform") == 2
    x = np.random.default_rng(2).standard_normal((1, 3, 9, 9)).astype(np.float32)
    np.testing.assert_allclose(evaluate(p, [x]), evaluate(f, [x]), rtol=1e-6, atol=1e-7)
    # the packed program is itself complete and round-trips through the compact text form
    assert structural_equal(expand_devices(parse(astext(p))), p)
    assert structural_equal(plan_devices(p), p)


@pytest.mark.parametrize(("block_in", "block_out"), [(4, 2), (2, 4)])
def test_block_in_and_block_out_differ_a_relayout_between_convolutions(block_in, block_out):
    # the first convolution gives NCHW1n{block_out}c, the second takes NCHW1n{block_in}c:
    # one relayout between them (to the cpu, unpacked and cropped, packed, back); the
    # bias after the first is packed in the convolution's output layout
    hw = PRESETS["tiny"].replace(name=f"tiny-i{block_in}-o{block_out}", block_in=block_in,
                                 block_out=block_out, mem_bus_width=16)
    f = two_convs(hw, 6)
    p = pack_accel_layouts(plan_devices(f))
    calls = [e for e in post_order(p) if isinstance(e, Call)]
    convs = [e for e in calls if e.op == "nn.conv2d"]
    assert [c.attrs["data_layout"] for c in convs] == [f"NCHW1n{block_in}c"] * 2
    transforms = [(e.attrs["src_layout"], e.attrs["dst_layout"]) for e in calls
                  if e.op == "layout_transform"]
    assert transforms == [("NCHW", f"NCHW1n{block_in}c"), (f"NCHW1n{block_out}c", "NCHW"),
                          ("NCHW", f"NCHW1n{block_in}c"), (f"NCHW1n{block_out}c", "NCHW")]
    relayout = convs[1].args[0]
    assert relayout.op == "device_copy" and relayout.attrs["src_device"] == CPU
    # 6 channels pad to 8 in blocks of 4: the padding is cropped before repacking
    slices = [e for e in calls if e.op == "strided_slice"]
    assert len(slices) == (block_out == 4) + (5 % block_out != 0)
    x = np.random.default_rng(2).standard_normal((1, 3, 9, 9)).astype(np.float32)
    np.testing.assert_allclose(evaluate(p, [x]), evaluate(f, [x]), rtol=1e-6, atol=1e-7)


def test_packed_weights_are_the_tensor_compilers_layout() -> None:
    f = two_convs("tiny", 6)
    p = pack_accel_layouts(plan_devices(f))
    convs = [e for e in post_order(p) if isinstance(e, Call) and e.op == "nn.conv2d"]
    orig = [e for e in post_order(f) if isinstance(e, Call) and e.op == "nn.conv2d"]
    for packed, plain in zip(convs, orig, strict=True):
        np.testing.assert_array_equal(packed.args[1].data, pack_oihw(plain.args[1].data, 4, 4))


def test_runtime_layout_transform_matches_compiler_layout() -> None:
    from tensorfab.runtime.layout_transform import layout_transform
    x = np.random.default_rng(3).standard_normal((2, 5, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(layout_transform(x, "NCHW", "NCHW1n4c"), pack_nchw(x, 1, 4))
    np.testing.assert_array_equal(layout_transform(x, "NCHW", "NCHW2n8c"), pack_nchw(x, 2, 8))
    w = np.random.default_rng(4).standard_normal((6, 5, 3, 3)).astype(np.float32)
    np.testing.assert_array_equal(layout_transform(w, "OIHW", "OIHW4o2i"), pack_oihw(w, 4, 2))


def test_integer_conv_on_accel() -> None:
    r = np.random.default_rng(6)
    x = gb.var("x", (1, 5, 6, 6), "int8", device=CPU)
    w = r.integers(-128, 128, (7, 5, 3, 3)).astype(np.int8)
    acc = gb.conv2d_integer(x, w, np.int8(0), np.int8(0), padding=(1, 1, 1, 1))
    y = gb.requantize(gb.add(acc, r.integers(-99, 99, (7, 1, 1)).astype(np.int32)),
                      np.float32(0.01), np.int8(0), out_dtype="int8")
    f = gb.function([x], gb.on_device(gb.relu(y), device=accel("tiny")), result_device=CPU)
    p = pack_accel_layouts(plan_devices(f, default=CPU))
    _transforms_at_crossings_only(p)
    xv = r.integers(-128, 128, (1, 5, 6, 6)).astype(np.int8)
    np.testing.assert_array_equal(evaluate(p, [xv]), evaluate(f, [xv]))


@pytest.mark.parametrize("make,match", [
    (lambda y: gb.max_pool2d(y, pool_size=(2, 2)), "nn.max_pool2d.*has no blocked-layout form"),
    (lambda y: gb.conv2d(y, gb.var("w", (4, 4, 1, 1))), "the weight must be a constant"),
    (lambda y: gb.conv2d(y, np.ones((4, 2, 1, 1), np.float32), groups=2),
     "grouped float convolutions have no blocked form"),
])
def test_unsupported_accelerator_ops_are_named(make, match: str) -> None:
    x = gb.var("x", (1, 4, 4, 4), device=CPU)
    y = gb.conv2d(x, np.ones((4, 4, 1, 1), np.float32))
    body = gb.on_device(make(y), device=accel("tiny"))
    params = [x] + [e for e in post_order(body) if isinstance(e, type(x)) and e is not x]
    f = gb.function(params, body, result_device=CPU)
    with pytest.raises(LayoutPlanningError, match=match):
        pack_accel_layouts(plan_devices(f))


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_conv_chains_on_the_accelerator(data) -> None:
    cfg = data.draw(st.sampled_from(["tiny", "small", "default"]))
    n_layers = data.draw(st.integers(1, 4))
    start = data.draw(st.integers(0, n_layers - 1))
    stop = data.draw(st.integers(start + 1, n_layers))
    r = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    channels = [data.draw(st.integers(1, 20)) for _ in range(n_layers + 1)]
    x = gb.var("x", (1, channels[0], 5, 5), device=CPU)
    y = x
    for i in range(n_layers):
        w = r.standard_normal((channels[i + 1], channels[i], 3, 3)).astype(np.float32)
        y = gb.conv2d(y, w, padding=(1, 1, 1, 1))
        if data.draw(st.booleans()):
            y = gb.add(y, r.standard_normal((channels[i + 1], 1, 1)).astype(np.float32))
        y = data.draw(st.sampled_from([gb.relu, lambda t: gb.clip(t, a_min=-0.5, a_max=2.0),
                                       lambda t: gb.multiply(t, np.float32(0.5))]))(y)
        if start <= i < stop:
            y = gb.on_device(y, device=accel(cfg))
    f = gb.function([x], y, result_device=CPU)
    p = pack_accel_layouts(plan_devices(f))
    _transforms_at_crossings_only(p)
    xv = r.standard_normal((1, channels[0], 5, 5)).astype(np.float32)
    np.testing.assert_allclose(evaluate(p, [xv]), evaluate(f, [xv]), rtol=1e-5, atol=1e-5)
    assert structural_equal(expand_devices(parse(astext(p))), p)


def test_an_accel_device_carries_its_config() -> None:
    # a config named like a preset but with other values needs no registry, lives beside
    # the preset, and travels with its device (pickled, as to a worker process)
    import pickle

    from tensorfab.compiler.graph.layout_planning import hw_config_of

    other = PRESETS["tiny"].replace(block_in=2, mem_bus_width=16)
    assert other.name == "tiny" and other != PRESETS["tiny"]
    dev, preset = accel(other), accel("tiny")
    assert hw_config_of(dev) is other and hw_config_of(preset) is PRESETS["tiny"]
    assert dev != preset
    assert hw_config_of(pickle.loads(pickle.dumps(dev))) == other
    p = pack_accel_layouts(plan_devices(two_convs(other, 6)))
    convs = [e for e in post_order(p) if isinstance(e, Call) and e.op == "nn.conv2d"]
    assert [c.attrs["data_layout"] for c in convs] == ["NCHW1n2c"] * 2
    with pytest.raises(LayoutPlanningError, match="carries no HwConfig"):
        hw_config_of(accel("not-a-preset"))
    from tensorfab.compiler.graph.device import VirtualDevice
    from tensorfab.compiler.graph.types import GraphError

    with pytest.raises(GraphError, match=r"accel\(small\) given the config named 'tiny'"):
        VirtualDevice("accel", "small", None, PRESETS["tiny"])
