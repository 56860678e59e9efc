"""Device planning: copies exactly where data crosses, every node on one device,
idempotence on complete programs, the compact text form, contradictions."""

from __future__ import annotations

import numpy as np
import pytest
from graph_models import ALL_MODELS

from tensorfab.compiler.graph import (
    CPU,
    Call,
    Constant,
    Expr,
    Function,
    Var,
    accel,
    astext,
    parse,
    post_order,
    structural_equal,
)
from tensorfab.compiler.graph import builder as gb
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.graph.planning import DevicePlanningError, expand_devices, plan_devices
from tensorfab.compiler.graph.rewrite import substitute

ACC = accel("default")


def conv_on_accel() -> Function:
    """A conv+relu annotated for the accelerator between cpu work, its result read by
    two cpu ops."""
    r = np.random.default_rng(5)
    x = gb.var("x", (1, 3, 8, 8), device=CPU)
    w = r.standard_normal((4, 3, 3, 3)).astype(np.float32)
    c = gb.on_device(gb.relu(gb.conv2d(gb.sigmoid(x), w, padding=(1, 1, 1, 1))),
                     device=ACC)
    return gb.function([x], gb.tuple_(gb.tanh(c), gb.add(c, np.float32(1.0))))


def copies(f: Function) -> list[Call]:
    return [e for e in post_order(f) if isinstance(e, Call) and e.op == "device_copy"]


def devices_consistent(f: Function) -> None:
    """Every node has a device; calls run where their call-arguments do; a copy reads
    from its source device; no on_device is left."""
    for e in post_order(f.body):
        assert e.virtual_device is not None, e
        if isinstance(e, Call):
            assert e.op != "on_device"
            for a in e.args:
                want = e.attrs["src_device"] if e.op == "device_copy" else e.virtual_device
                assert a.virtual_device == want, (e.op, a)
    assert f.result_device == f.body.virtual_device


def test_copies_inserted_exactly_at_crossings() -> None:
    f = conv_on_accel()
    p = plan_devices(f)
    devices_consistent(p)
    cs = copies(p)
    assert [(c.attrs["src_device"], c.attrs["dst_device"]) for c in cs] == [
        (CPU, ACC), (ACC, CPU)]
    # the sigmoid feeds the conv, so it runs there too: the parameter goes over, the
    # relu's output comes back once for both readers
    assert cs[0].args[0] is p.params[0] and cs[1].args[0].op == "relu"
    ops = {e.op: e.virtual_device for e in post_order(p) if isinstance(e, Call)
           and e.op != "device_copy"}
    assert ops == {"sigmoid": ACC, "nn.conv2d": ACC, "relu": ACC, "tanh": CPU, "add": CPU}
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    for got, want in zip(evaluate(p, [x]), evaluate(f, [x]), strict=True):
        np.testing.assert_array_equal(got, want)


def test_parameter_read_on_another_device_is_copied() -> None:
    x = gb.var("x", (2, 3), device=CPU)
    f = gb.function([x], gb.on_device(gb.relu(x), device=ACC), result_device=CPU)
    p = plan_devices(f)
    cs = copies(p)
    assert len(cs) == 2 and cs[0].args[0] is p.params[0]
    assert p.body is cs[1] and p.result_device == CPU


def test_unannotated_parameter_lives_where_it_is_read() -> None:
    x = gb.var("x", (2, 3))
    p = plan_devices(gb.function([x], gb.on_device(gb.relu(x), device=ACC)))
    assert p.params[0].virtual_device == ACC and not copies(p)
    assert p.result_device == ACC


def test_constant_made_on_each_reading_device() -> None:
    x = gb.var("x", (3,), device=CPU)
    k = gb.const(np.arange(3, dtype=np.float32))
    f = gb.function([x], gb.add(gb.on_device(gb.multiply(x, k), device=ACC), k))
    p = plan_devices(f)
    consts = {e.virtual_device for e in post_order(p) if isinstance(e, Constant)}
    assert consts == {CPU, ACC}


def test_let_bound_var_carries_its_device() -> None:
    x = gb.var("x", (4,), device=CPU)
    v = gb.var("v", (4,), device=ACC)
    f = gb.function([x], gb.let(v, gb.relu(x), lambda v: gb.sigmoid(v)), check=False)
    p = plan_devices(f)
    assert p.body.var.virtual_device == ACC
    assert p.body.value.op == "relu" and p.body.value.virtual_device == ACC
    assert p.body.body.op == "sigmoid" and p.body.body.virtual_device == CPU
    assert "let %v: Tensor[(4,), float32] @accel(default) = " in astext(p)
    assert len(copies(p)) == 2


def test_unannotated_program_runs_on_the_default_device() -> None:
    f = ALL_MODELS["small_cnn"]()
    p = plan_devices(f)
    assert not copies(p)
    assert {e.virtual_device for e in post_order(p.body)} == {CPU}
    q = plan_devices(f, default=ACC)
    assert {e.virtual_device for e in post_order(q.body)} == {ACC}


def _complete_programs() -> dict[str, Function]:
    progs = {name: plan_devices(make()) for name, make in ALL_MODELS.items()}
    progs["conv_on_accel"] = plan_devices(conv_on_accel())
    x = gb.var("x", (2, 3), device=CPU)
    v = gb.var("v", (2, 3), device=ACC)
    progs["let_on_accel"] = plan_devices(gb.function(
        [x], gb.let(v, gb.exp(x), lambda v: gb.tuple_(gb.relu(v), gb.sigmoid(v))),
        check=False))
    return progs


@pytest.mark.parametrize("name", sorted(_complete_programs()))
def test_planning_a_complete_program_changes_nothing(name: str) -> None:
    p = _complete_programs()[name]
    devices_consistent(p)
    assert structural_equal(plan_devices(p), p)


@pytest.mark.parametrize("name", sorted(_complete_programs()))
def test_compact_text_form_expands_to_the_complete_program(name: str) -> None:
    complete = _complete_programs()[name]
    text = astext(complete)
    assert "on_device" not in text
    compact = parse(text)
    assert all(e.virtual_device is None for e in post_order(compact.body)
               if not isinstance(e, Var))
    assert structural_equal(expand_devices(compact), complete)


def _raises_naming(f: Function, *parts: str) -> None:
    with pytest.raises(DevicePlanningError) as e:
        plan_devices(f)
    for part in parts:
        assert part in str(e.value), (part, str(e.value))


def test_contradiction_two_annotations_on_one_call() -> None:
    x = gb.var("x", (4,))
    r = gb.relu(x)
    f = gb.function([x], gb.add(gb.on_device(r, device=ACC), gb.on_device(r, device=CPU)))
    _raises_naming(f, "on_device(relu(...), device=accel(default))", "on accel(default)",
                   "on_device(relu(...), device=cpu)", "on cpu")


def test_contradiction_parameter_device_and_copy_source() -> None:
    x = gb.var("x", (4,), device=ACC)
    f = gb.function([x], gb.device_copy(x, src_device=CPU, dst_device=ACC))
    _raises_naming(f, "parameter %x is on accel(default)",
                   "the source of device_copy(%x, dst_device=accel(default), src_device=cpu)",
                   "is on cpu")


def test_contradiction_let_device_and_operator_annotation() -> None:
    x = gb.var("x", (4,))
    v = gb.var("v", (4,), device=CPU)
    s = gb.sigmoid(x)
    body = gb.let(v, s, lambda v: gb.add(v, gb.on_device(s, device=ACC)))
    _raises_naming(gb.function([x], body, check=False), "let %v is on cpu",
                   "on_device(sigmoid(...), device=accel(default)) is on accel(default)")


def test_contradiction_result_device_and_annotation() -> None:
    x = gb.var("x", (4,))
    body = gb.tanh(gb.device_copy(x, src_device=ACC, dst_device=CPU))
    f = Function([x], body, None, ACC)
    _raises_naming(f, "device_copy(%x, dst_device=cpu, src_device=accel(default)) is on cpu",
                   "the function result is on accel(default)")


def _op_devices(e: Expr) -> list[str]:
    return [f"{n.op}@{n.virtual_device}" for n in post_order(e) if isinstance(n, Call)]


def test_planned_encoder_runs_the_same_on_the_interpreter() -> None:
    f = ALL_MODELS["encoder_block"]()
    # put the first projection's matmul on the accelerator, the rest stays on the cpu
    first = next(e for e in post_order(f) if isinstance(e, Call) and e.op == "matmul")
    x = f.params[0]
    g = Function([x], substitute(f.body, {id(first): gb.on_device(first, device=ACC)}))
    p = plan_devices(g)
    assert "matmul@accel(default)" in _op_devices(p)
    assert len(copies(p)) == 2
    xv = np.random.default_rng(1).standard_normal((2, 5, 8)).astype(np.float32)
    np.testing.assert_array_equal(evaluate(p, [xv]), evaluate(f, [xv]))



def test_let_in_argument_position_is_read_through_a_copy() -> None:
    x = gb.var("x", (3,), device=CPU)
    v = gb.var("v", (3,))
    inner = gb.let(v, gb.on_device(gb.relu(x), device=ACC), lambda v: v)
    f = gb.function([x], gb.add(inner, x), result_device=CPU)
    p = plan_devices(f)
    devices_consistent(p)
    assert p.body.args[0].virtual_device == CPU  # the let, read by the cpu add
    assert structural_equal(plan_devices(p), p)
    assert structural_equal(expand_devices(parse(astext(p))), p)
    xv = np.array([-1.0, 0.5, 2.0], np.float32)
    np.testing.assert_array_equal(evaluate(p, [xv]), evaluate(f, [xv]))
