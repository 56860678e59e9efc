"""The schedule language: recording, printing, replay, comparison and errors."""

from __future__ import annotations

import pytest

from tensorfab.compiler import (
    RESNET18_CONV,
    Primitive,
    Schedule,
    ScheduleError,
    Workload,
    default_schedule,
)
from tensorfab.compiler.tensor.tile_search import search_plan
from tensorfab.isa import PRESETS

CFG = PRESETS["default"]
C2 = RESNET18_CONV["C2"]


def test_primitives_are_recorded_and_printed():
    s = Schedule(C2, CFG).split("oh", 14).tile(ow=28, ic=2, oc=2).reorder("oh", "ow")
    s.virtual_thread(2).place("inp", 1000)
    assert s.trace == [Primitive("split", ("oh", 14)), Primitive("tile", ("ow=28", "ic=2", "oc=2")),
                       Primitive("reorder", ("oh", "ow")), Primitive("virtual_thread", (2,)),
                       Primitive("place", ("inp", 1000))]
    assert str(s) == ("split(oh, 14)\ntile(ow=28, ic=2, oc=2)\nreorder(oh, ow)\n"
                      "virtual_thread(2)\nplace(inp, 1000)")
    plan = s.plan()
    assert (plan.tile("oh"), plan.tile("ow"), plan.tile("ic")) == (14, 28, 2)
    assert plan.order == ("oh", "ow", "b", "oc")
    assert plan.pitch("inp") == 1000 and plan.pitch("wgt") == CFG.wgt_depth // 2


def test_replay_reproduces_and_compares_equal():
    s = Schedule(C2, CFG).tile(oh=4, ow=56, oc=2, ic=1).reorder("oc").virtual_thread(3)
    again = Schedule.from_trace(C2, CFG, s.trace)
    assert again == s and again.plan() == s.plan() and str(again) == str(s)
    different = Schedule.from_trace(C2, CFG, s.trace[:-1])
    assert different != s
    assert different.plan().vthreads == 1


def test_default_schedule_prints_and_replays():
    s = default_schedule(C2, CFG, 2)
    assert any(p.name == "virtual_thread" for p in s.trace)
    assert Schedule.from_trace(C2, CFG, s.trace).plan() == s.plan()


def test_default_schedule_plan_matches_search():
    assert default_schedule(C2, CFG, 4).plan() == search_plan(C2, CFG, 4)


@pytest.mark.parametrize(("build", "primitive", "limit"), [
    (lambda s: s.split("oh", 56).split("ow", 56), "split(ow, 56)", "inp_depth"),
    (lambda s: s.tile(oh=28, ow=28, ic=4), "tile(oh=28, ow=28, ic=4)", "inp_depth"),
    (lambda s: s.tile(oh=8, ow=8, ic=1).virtual_thread(8).tile(oc=4, ic=4),
     "tile(oc=4, ic=4)", "inp_depth"),
    (lambda s: s.tile(oh=7, ow=7, ic=1).virtual_thread(16), "virtual_thread(16)",
     "dep_queue_depth"),
    (lambda s: s.tile(oh=14, ow=14, ic=4).virtual_thread(4), "virtual_thread(4)",
     "inp_depth"),
    (lambda s: s.tile(oh=7, ow=7, ic=1).virtual_thread(2).place("acc", 100), "place(acc, 100)",
     "acc_depth"),
    (lambda s: s.split("oh", 57), "split(oh, 57)", "oh extent"),
    (lambda s: s.split("kh", 1), "split(kh, 1)", "axes"),
    (lambda s: s.reorder("ic"), "reorder(ic)", "reduction"),
    (lambda s: s.place("uop", 5), "place(uop, 5)", "buffers"),
])
def test_invalid_schedules_name_primitive_and_limit(build, primitive, limit):
    s = Schedule(C2, CFG)
    with pytest.raises(ScheduleError) as err:
        build(s)
        s.plan()
    assert err.value.primitive == primitive
    assert err.value.limit == limit
    assert primitive in str(err.value) and limit in str(err.value)


def test_weight_slot_overflow():
    wl = RESNET18_CONV["C11"]
    s = Schedule(wl, CFG).tile(oh=1, ow=1, oc=32, ic=32)
    with pytest.raises(ScheduleError, match=r"weight tile 32×32×3×3 = 9216 entries") as err:
        s.plan()
    assert err.value.limit == "wgt_depth"


def test_micro_op_overflow_names_uop_depth():
    cfg = CFG.replace(name="few-uops", uop_depth=128)
    wl = Workload.conv2d(1, 64, 8, 8, 64, 3, 1, 1)
    s = Schedule(wl, cfg).tile(oh=8, ow=8, oc=2, ic=4).virtual_thread(2)
    with pytest.raises(ScheduleError) as err:
        s.plan()
    assert err.value.limit == "uop_depth"


def test_too_much_padding_for_the_pad_field():
    wl = Workload.conv2d(1, 4, 4, 4, 4, 1, 1, 16)
    with pytest.raises(ScheduleError, match="pad"):
        Schedule(wl, CFG).plan()


def test_bias_takes_accumulator_entries():
    wl = Workload.conv2d(1, 16, 8, 8, 32, 1)
    plan = Schedule(wl, CFG, bias=True).plan()
    assert plan.acc_entries == plan.out_entries + 2
