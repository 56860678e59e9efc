"""Timelines named by instruction (sim/trace.py), on hand-written intervals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tensorfab.isa.asm import assemble
from tensorfab.sim.trace import Interval, attribute_intervals, plot_timeline, trace_events

#: The README's program: 3 loads, gemm (reset), gemm, store, finish.
PROGRAM = """\
.config tiny
.segment A int8 2,2,4
.segment W int8 1,2,4,4
.segment C int8 2,1,4 output
.uop acc=0 src=0 wgt=0
.uop acc=0 src=1 wgt=1
load.uop sram=0 dram=uops y=1 x=2 stride=2
load.inp sram=0 dram=A y=2 x=2 stride=2
load.wgt sram=0 dram=W y=1 x=2 stride=2 push_next
gemm uop=0:1 iter=2,1 acc=1,0 inp=0,0 wgt=0,0 reset pop_prev
gemm uop=0:2 iter=2,1 acc=1,0 inp=2,0 wgt=0,0 push_next
store sram=0 dram=C y=2 x=1 stride=1 pop_prev push_prev
finish pop_next
"""

#: What the RTL recorded for it (tiny, default memory timing).
RECORDED = [
    Interval("load", "busy", 27, 52), Interval("compute", "busy", 39, 123),
    Interval("compute", "stall", 39, 112), Interval("store", "busy", 47, 145),
    Interval("store", "stall", 47, 137), Interval("load", "busy", 53, 80),
    Interval("load", "busy", 81, 112), Interval("gemm", "busy", 115, 117),
    Interval("compute", "busy", 124, 137), Interval("gemm", "busy", 127, 131),
    Interval("compute", "busy", 138, 147), Interval("compute", "stall", 138, 145),
]


@pytest.fixture(scope="module")
def prog():
    return assemble(PROGRAM)


def test_each_interval_names_the_instruction_its_engine_held(prog) -> None:
    named = attribute_intervals(RECORDED, prog)
    assert [iv[:4] for iv in named] == [iv[:4] for iv in RECORDED]  # same order, same cycles
    assert [(iv.track, iv.kind, iv.label) for iv in named] == [
        ("load", "busy", "#0 load.uop"), ("compute", "busy", "#3 gemm"),
        ("compute", "stall", "#3 gemm"), ("store", "busy", "#5 store"),
        ("store", "stall", "#5 store"), ("load", "busy", "#1 load.inp"),
        ("load", "busy", "#2 load.wgt"), ("gemm", "busy", "#3 gemm"),
        ("compute", "busy", "#4 gemm"), ("gemm", "busy", "#4 gemm"),
        ("compute", "busy", "#6 finish"), ("compute", "stall", "#6 finish")]
    assert named[6].insn == "load.wgt sram=0 dram=W y=1 x=2 stride=2 push_next"


def test_a_run_cut_short_names_what_it_can(prog) -> None:
    """A hang: the compute engine holds its first instruction; a busy interval past an
    engine's stream and activity outside any instruction stay unnamed."""
    cut = [Interval("load", "busy", 0, 10), Interval("compute", "busy", 5, 50),
           Interval("compute", "stall", 5, 50), Interval("store", "busy", 1, 2),
           Interval("store", "busy", 3, 4), Interval("alu", "busy", 60, 61)]
    named = attribute_intervals(cut, prog)
    assert [iv.label for iv in named] == ["#0 load.uop", "#3 gemm", "#3 gemm", "#5 store",
                                          "busy", "busy"]


def test_trace_slices_carry_the_instruction(prog, tmp_path: Path) -> None:
    events = trace_events(attribute_intervals(RECORDED, prog))["traceEvents"]
    slices = {(e["cat"], e["ts"], e["args"]["kind"]): e for e in events if e["ph"] == "X"}
    wgt = slices["load", 81, "busy"]
    assert wgt["name"] == "#2 load.wgt"
    assert wgt["args"]["instruction"] == 2 and wgt["args"]["insn"].startswith("load.wgt ")
    assert slices["compute", 39, "busy"]["name"] == "#3 gemm"
    stall = [e for e in events if e["ph"] == "X" and e["args"]["kind"] == "stall"]
    assert {e["name"] for e in stall} == {"stall #3 gemm", "stall #5 store", "stall #6 finish"}
    # unnamed intervals keep their kind as the name
    assert trace_events(RECORDED)["traceEvents"][-1]["name"] in ("busy", "stall")
    png = plot_timeline(attribute_intervals(RECORDED, prog), tmp_path / "t.png", cycles=148)
    assert png.read_bytes()[:4] == b"\x89PNG"
    json.dumps(events)
