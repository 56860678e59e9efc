"""Properties over random programs: the text form round-trips, and device planning
either reports a contradiction or gives a complete program that re-plans to itself,
expands back from its compact text, and computes the same values."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorfab.compiler.graph import (
    CPU,
    Call,
    Expr,
    Function,
    accel,
    astext,
    parse,
    post_order,
    structural_equal,
)
from tensorfab.compiler.graph import builder as gb
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.graph.planning import DevicePlanningError, expand_devices, plan_devices

DEVICES = [CPU, accel("default"), accel("small")]
SHAPE = ("n", 3)
FLOATS = st.floats(-4, 4, allow_nan=False, width=32) | st.sampled_from(
    [0.0, -0.0, 1e-30, 3.0e38, float("inf"), float("-inf")])


@st.composite
def programs(draw) -> Function:
    params = [gb.var(f"p{i}", SHAPE, device=draw(st.sampled_from([None, *DEVICES])))
              for i in range(draw(st.integers(1, 3)))]
    nodes: list[Expr] = list(params)
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["unary", "binary", "const", "let"]))
        a = draw(st.sampled_from(nodes))
        if kind == "unary":
            op = draw(st.sampled_from(["relu", "sigmoid", "tanh", "negative"]))
            e: Expr = gb.call(op, a)
        elif kind == "binary":
            op = draw(st.sampled_from(["add", "subtract", "maximum", "minimum"]))
            e = gb.call(op, a, draw(st.sampled_from(nodes)))
        elif kind == "const":
            values = draw(st.lists(FLOATS, min_size=3, max_size=3))
            c = np.array(values, np.float32) if draw(st.booleans()) else np.float32(values[0])
            e = gb.clip(gb.multiply(a, c), a_min=draw(st.sampled_from([None, -1.0])),
                        a_max=draw(st.sampled_from([None, 2.5])))
        else:
            v = gb.var(f"v{len(nodes)}", SHAPE, device=draw(st.sampled_from([None,
                                                                              *DEVICES])))
            e = gb.let(v, a, lambda v: gb.relu(v))
        if draw(st.integers(0, 3)) == 0:
            e = gb.on_device(e, device=draw(st.sampled_from(DEVICES)))
        nodes.append(e)
    body: Expr = nodes[-1] if draw(st.booleans()) else gb.tuple_(nodes[-1],
                                                                draw(st.sampled_from(nodes)))
    result = draw(st.sampled_from([None, *DEVICES]))
    return gb.function(params, body, result_device=result)


SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(programs())
def test_text_form_round_trips(f: Function) -> None:
    text = astext(f)
    g = parse(text)
    assert structural_equal(g, f)
    assert astext(g) == text


@SETTINGS
@given(programs())
def test_planning_is_complete_stable_and_exact(f: Function) -> None:
    try:
        p = plan_devices(f)
    except DevicePlanningError as e:
        assert "contradictory devices" in str(e) and str(e).count(" is on ") == 2
        return
    for e in post_order(p.body):
        assert e.virtual_device is not None
        if isinstance(e, Call):
            assert e.op != "on_device"
            want = e.attrs["src_device"] if e.op == "device_copy" else e.virtual_device
            assert all(a.virtual_device == want for a in e.args)
            if e.op == "device_copy":
                assert e.attrs["src_device"] != e.attrs["dst_device"]
    assert structural_equal(plan_devices(p), p)
    assert structural_equal(expand_devices(parse(astext(p))), p)
    inputs = [np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3) * (i + 1)
              for i in range(len(f.params))]
    got, want = evaluate(p, inputs), evaluate(f, inputs)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
