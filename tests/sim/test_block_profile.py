"""The per-block profile of the Verilated model (tensorfab.sim.rtl.block_profile)."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

from tensorfab.sim.rtl.block_profile import (
    HARNESS_BLOCK,
    RUNTIME_BLOCK,
    UNNAMED_BLOCK,
    ProfileError,
    attribute_lines,
    block_of,
    parse_callgrind,
    profile_blocks,
)

# A callgrind file in its compressed form: file and function names given once with an
# id, then by id; relative line positions; a call whose inclusive cost must not count.
CALLGRIND = """\
version: 1
positions: line
events: Ir
summary: 1111
fl=(1) /build/obj/Vmodel__0.cpp
fn=(1) eval
10 100
+2 200
* 5
calls=1 40
50 999
fl=(2) /usr/include/verilated_funcs.h
fn=(2) VL_SHIFTR_WWI
-30 300
fl=(1)
fn=(1)
12 6
fi=(3) /build/harness.cpp
7 500
totals: 1111
"""


def test_parse_callgrind_reads_self_costs_by_file_and_line() -> None:
    costs = parse_callgrind(CALLGRIND.splitlines())
    # 10 → 100; +2 → line 12: 200; * → line 12 again: 5; the call's 999 is inclusive;
    # -30 from line 50 → line 20 of verilated_funcs.h; back in the model, line 12: 6
    assert costs == Counter({("/build/obj/Vmodel__0.cpp", 10): 100,
                             ("/build/obj/Vmodel__0.cpp", 12): 211,
                             ("/usr/include/verilated_funcs.h", 20): 300,
                             ("/build/harness.cpp", 7): 500})


def test_parse_callgrind_refuses_costs_that_do_not_add_up() -> None:
    with pytest.raises(ProfileError, match="sum to 1,111, its summary says 1,112"):
        parse_callgrind(CALLGRIND.replace("summary: 1111", "summary: 1112").splitlines())


@pytest.mark.parametrize(("signal", "depth", "block"), [
    ("tf_harness_top__DOT__core__DOT__compute__DOT__alu__DOT__a3", 2, "compute.alu"),
    ("tf_harness_top__DOT__core__DOT__compute__DOT__alu__DOT__a3", 1, "compute"),
    ("tf_harness_top__DOT__core__DOT__compute__DOT__acc_reg", 2, "compute"),
    ("tf_harness_top__DOT__core__DOT__zero_flags", 2, "core"),
    ("tf_harness_top__DOT__clk_alu", 2, "top"),
])
def test_block_of_names_the_hierarchy_below_the_core(signal: str, depth: int,
                                                     block: str) -> None:
    assert block_of(signal, depth) == block


def test_attribute_lines_follows_statements_temporaries_and_delayed_copies() -> None:
    core = "tf_harness_top__DOT__core__DOT__"
    model = [
        "void eval(Vroot* vlSelf) {",                                          # 1
        f"    vlSelfRef.{core}load__DOT__count = (1U",                          # 2
        f"        + vlSelfRef.{core}store__DOT__n);",                           # 3
        "    __Vtemp_3 = (vlSelfRef.clk & 1U);",                                # 4
        f"    vlSelfRef.{core}arbiter__DOT__rd_fifo__DOT__w = __Vtemp_3;",      # 5
        f"    vlSelfRef.__Vdly__{core}compute__DOT__gemm__DOT__acc = 0U;",      # 6
        "}",                                                                   # 7
    ]
    costs = Counter({("/x/obj/Vmodel__0.cpp", 3): 30,   # second line of load's statement
                     ("/x/obj/Vmodel__0.cpp", 4): 40,   # temp → arbiter.rd_fifo
                     ("/x/obj/Vmodel__0.cpp", 6): 60,   # delayed copy → compute.gemm
                     ("/x/obj/Vmodel__0.cpp", 7): 7,    # a brace: no signal
                     ("/x/harness.cpp", 9): 9, ("/x/mem_model.h", 1): 1,
                     ("/usr/include/verilated_funcs.h", 5): 5, ("???", 0): 2})
    blocks = attribute_lines(costs, {"Vmodel__0.cpp": model}, depth=2)
    assert blocks == Counter({"load": 30, "arbiter.rd_fifo": 40, "compute.gemm": 60,
                              UNNAMED_BLOCK: 7, HARNESS_BLOCK: 10, RUNTIME_BLOCK: 7})
    assert sum(blocks.values()) == sum(costs.values())


def test_profile_blocks_refuses_no_cycles() -> None:
    from tensorfab.benches.rtl_speed import bench_program
    from tensorfab.isa import PRESETS

    with pytest.raises(ProfileError, match="cycles = 0"):
        profile_blocks(bench_program(PRESETS["tiny"], 16, 16, 16), cycles=0)


def test_profile_blocks_names_missing_valgrind(monkeypatch, tmp_path) -> None:
    from tensorfab.benches.rtl_speed import bench_program
    from tensorfab.isa import PRESETS

    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no valgrind on it
    with pytest.raises(ProfileError, match="`valgrind` is not on the PATH"):
        profile_blocks(bench_program(PRESETS["tiny"], 16, 16, 16), cycles=100)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_profile_blocks_on_the_tiny_core() -> None:
    from tensorfab.benches.rtl_speed import bench_memory, bench_program
    from tensorfab.isa import PRESETS

    program = bench_program(PRESETS["tiny"], 64, 64, 128)
    bp = profile_blocks(program, cycles=4000, memory=bench_memory())
    assert bp.cycles == 4000
    # parse_callgrind checked the lines against callgrind's own total
    assert sum(bp.blocks.values()) == pytest.approx(bp.per_cycle)
    assert bp.blocks["compute.gemm"] > 0 and bp.blocks["load"] > 0
    # the GEMM program leaves the ALU idle: its gated clock costs it little
    assert bp.blocks.get("compute.alu", 0.0) < bp.blocks["compute.gemm"]
