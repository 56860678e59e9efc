"""The RTL executor (``tensorfab.sim.rtl``): Verilator harness with a C++ memory model.

- every directed program of ``isa_programs`` agrees with the functional simulator on
  the whole final DRAM image and every counter (tiny and small; default is slow);
- the same programs under the cocotb testbench with the same deterministic memory
  timing give the same CYCLES and every other CSR (tiny; default is slow);
- token deadlocks raise ``HangError`` naming the waiting engine and queue, core
  errors raise ``ProgramError`` with ERROR_CODE/ERROR_INDEX, build failures quote
  the relevant log lines;
- timelines agree with the busy/stall counters and export to Perfetto JSON and PNG.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from support.error_programs import patchable_program, patched_opcode, patched_word
from support.isa_programs import (
    PAD_CASES,
    build_gemm,
    build_load_store_acc,
    build_padded_load_inp,
    build_requant,
    directed_programs,
)

from tensorfab.hw.core import ACTIVITY
from tensorfab.hw.mem_port import MemCmdLayout
from tensorfab.isa import (
    CSRS,
    PRESETS,
    AluOp,
    Buffer,
    ErrorCode,
    Finish,
    Gemm,
    IllegalInstruction,
    Load,
    Program,
    ProgramError,
    Segment,
    Store,
    Uop,
    UsageError,
    insn_formats,
)
from tensorfab.isa.formats import Opcode
from tensorfab.sim import FunctionalSimulator, get_device
from tensorfab.sim.rtl import (
    HangError,
    Harness,
    MemoryTiming,
    RtlRunResult,
    RtlSimulator,
    RunStatus,
)
from tensorfab.sim.rtl import build as rtl_build
from tensorfab.sim.rtl.build import HarnessBuildError, build_harness, config_header
from tensorfab.sim.trace import TRACKS, Interval, plot_timeline, write_chrome_trace

TINY = PRESETS["tiny"]


def _where(program: Program, offset: int) -> str:
    return next((n for n, r in program.layout().items()
                 if r.nbytes and r.offset <= offset < r.offset + r.nbytes), "?")


@pytest.mark.parametrize("preset", ["tiny", "small",
                                    pytest.param("default", marks=pytest.mark.slow)])
def test_directed_programs_match_fsim(preset: str) -> None:
    sim = RtlSimulator()
    failures = []
    for name, prog in directed_programs(PRESETS[preset], large_gemm=True).items():
        ref = FunctionalSimulator().run(prog)
        res = sim.run(prog)
        assert isinstance(res, RtlRunResult) and res.device == "rtl"
        mism = np.flatnonzero(res.dram != ref.dram)
        if mism.size:
            failures.append(f"{name}: {mism.size} DRAM bytes differ, first at {mism[0]:#x} "
                            f"in {_where(prog, int(mism[0]))}")
        elif res.counters != ref.counters:
            failures.append(f"{name}: counters {res.counters} != fsim {ref.counters}")
        for key in ref.outputs:
            if not np.array_equal(res.outputs[key], ref.outputs[key]):
                failures.append(f"{name}: output {key} differs")
        assert res.cycles == res.csrs["CYCLES"] > 0
    assert not failures, "\n".join(failures)


# --------------------------------------------------------------------- cocotb cross-check
def _cocotb_equal_memory(latency: int) -> MemoryTiming:
    # the cocotb model with latency (L-1, L-1) and no back-pressure (mem_model.h)
    return MemoryTiming(read_latency=latency, write_latency=latency, bandwidth=1 << 16,
                        max_outstanding=4)


@pytest.mark.parametrize("preset,latency", [
    ("tiny", 1), ("tiny", 20), pytest.param("default", 20, marks=pytest.mark.slow)])
def test_same_cycles_as_cocotb_testbench(preset: str, latency: int, tmp_path: Path) -> None:
    from tensorfab.sim.testing.core_harness import run_on_core

    cfg = PRESETS[preset]
    rng = np.random.default_rng(3)
    m, n, k = {"tiny": (64, 64, 64), "default": (16, 64, 128)}[preset]
    progs = [build_load_store_acc(cfg, rng)[0],
             build_gemm(cfg, rng, m=m, n=n, k=k, vthreads=2)[0],
             build_requant(cfg, rng)[0],
             build_padded_load_inp(cfg, rng, PAD_CASES["all"])[0]]
    runs = run_on_core(progs, tmp_path, latency=(latency - 1, latency - 1), p_ready=1.0)
    sim = RtlSimulator(_cocotb_equal_memory(latency))
    for k, (prog, run) in enumerate(zip(progs, runs, strict=True)):
        assert run.done, f"program {k}: cocotb run did not finish"
        res = sim.run(prog)
        assert res.cycles == run.csrs["CYCLES"], f"program {k}"
        assert res.csrs == run.csrs, f"program {k}"
        assert np.array_equal(res.dram, run.dram), f"program {k}"


# --------------------------------------------------------------------------- hangs
def test_token_nobody_pushes_raises_hang_error() -> None:
    prog = Program(TINY, [Load(buffer=Buffer.UOP, sram=0, dram=0, y=1, x=1, stride=1),
                          Gemm(pop_prev=True, reset=True), Finish()], [Uop()], [])
    with pytest.raises(HangError) as info:
        RtlSimulator(hang_cycles=2000).run(prog)
    err = info.value
    assert err.reason == "hang"
    assert (err.engine, err.index, err.field) == ("compute", 1, "pop_prev")
    assert err.code is ErrorCode.NONE
    assert "compute engine at instruction 1 (gemm) waits to pop from load→compute" in str(err)
    assert err.retired == {"load": 1, "compute": 0, "store": 0}
    assert err.last_retired == {"load": 0, "compute": None, "store": None}
    assert err.activity["compute_busy"] and err.activity["compute_stall"]
    assert isinstance(err, ProgramError)


def test_full_command_queue_hangs_like_fsim_deadlock() -> None:
    """Loads behind a load waiting on compute fill the load engine's command queue, so
    fetch never dispatches the GEMM that would release it (as the fsim test)."""
    seg = Segment("x", "int8", (4, 4))
    depth = TINY.cmd_queue_depth + 1
    loads = [Load(buffer=Buffer.INP, dram=0, pop_next=True)]
    loads += [Load(buffer=Buffer.INP, sram=k + 1, dram=0) for k in range(depth)]
    prog = Program(TINY, [*loads, Gemm(push_prev=True), Finish()], [Uop()], [seg])
    with pytest.raises(HangError) as info:
        RtlSimulator(hang_cycles=2000).run(prog)
    msg = str(info.value)
    assert "load engine at instruction 0 (load.inp) waits to pop from compute→load" in msg
    assert f"compute engine waits for fetch to dispatch instruction {depth + 1} (gemm)" in msg
    # one load fewer: the GEMM is dispatched and the program finishes
    ok = Program(TINY, [*loads[:-1], Gemm(push_prev=True), Finish()], [Uop()], [seg])
    assert RtlSimulator().run(ok).counters.load_insns == depth


def test_cycle_limit_raises_hang_error_with_limit_reason() -> None:
    prog = build_gemm(TINY, np.random.default_rng(0), vthreads=2)[0]
    with pytest.raises(HangError, match="did not finish within 500 cycles") as info:
        RtlSimulator(max_cycles=500).run(prog)
    assert info.value.reason == "limit"
    assert info.value.cycles == 500


# --------------------------------------------------------------------------- errors
def test_illegal_opcode_in_image_is_bad_opcode_like_fsim() -> None:
    prog = patchable_program(TINY)
    image = patched_opcode(prog, 2, 7)
    with pytest.raises(IllegalInstruction) as ref:
        FunctionalSimulator().run(prog, image)
    with pytest.raises(IllegalInstruction, match="unknown opcode 7") as info:
        RtlSimulator().run(prog, image)
    err = info.value
    assert (err.code, err.index, err.engine, err.field) == (ErrorCode.BAD_OPCODE, 2, None,
                                                            "opcode")
    assert (err.code, err.index, err.engine) == (ref.value.code, ref.value.index,
                                                 ref.value.engine)


def test_reserved_bits_and_range_errors_match_fsim() -> None:
    prog = patchable_program(TINY)
    fmt = insn_formats(TINY)[Opcode.FINISH]
    image = patched_word(prog, 3, int(Opcode.FINISH) | 1 << (fmt.width - 1))
    with pytest.raises(IllegalInstruction) as info:
        RtlSimulator().run(prog, image)
    assert (info.value.code, info.value.index, info.value.engine) == (
        ErrorCode.RESERVED_BITS, 3, "compute")
    # a LOAD past the end of DRAM and a STORE into the instruction stream
    seg = Segment("x", "int8", (8, 4), np.arange(32) - 16)
    ok = [Load(buffer=Buffer.ACC, sram=0, dram=0, y=1, x=1, push_next=True),
          Finish(pop_prev=True)]
    for insns in ([Load(buffer=Buffer.INP, dram=1 << 16, y=1, x=1), *ok],
                  [ok[0], Store(sram=0, dram=0, y=1, x=1), ok[1]]):
        p = Program(TINY, insns, [Uop()], [seg])
        with pytest.raises(ProgramError) as ref:
            FunctionalSimulator().run(p)
        with pytest.raises(ProgramError, match="reported by the core") as info:
            RtlSimulator().run(p)
        got, want = info.value, ref.value
        assert (got.code, got.index, got.engine) == (want.code, want.index, want.engine)


# --------------------------------------------------------------------------- builds
def test_invalid_verilator_flag_quotes_verilator_error() -> None:
    with pytest.raises(HarnessBuildError) as info:
        build_harness(TINY, verilator_args=["--no-such-verilator-flag"], pgo=False)
    msg = str(info.value)
    assert "Verilator failed" in msg
    assert "--no-such-verilator-flag" in msg and "%Error" in msg


def test_broken_cxx_build_quotes_compiler_error() -> None:
    with pytest.raises(HarnessBuildError) as info:
        build_harness(TINY, cxxflags=["-DTF_BREAK_BUILD"], pgo=False)
    msg = str(info.value)
    assert "compiling the harness failed" in msg
    assert "#error" in msg and "deliberately broken harness build" in msg


def test_key_covers_every_module_the_rtl_is_elaborated_from() -> None:
    import subprocess
    import sys

    # a fresh interpreter: the modules that elaborating the core and the SoC top imports
    code = ("import sys\n"
            "from tensorfab.isa import PRESETS\n"
            "from tensorfab.hw.verilog import core_verilog\n"
            "import tensorfab.hw.soc.top\n"
            "core_verilog(PRESETS['tiny'])\n"
            "for name, mod in sorted(sys.modules.items()):\n"
            "    if name.startswith('tensorfab.') and getattr(mod, '__file__', None):\n"
            "        print(mod.__file__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    hashed = {p.resolve() for p in rtl_build.rtl_sources()}
    used = {Path(f).resolve() for f in out}
    assert used <= hashed, sorted(str(p) for p in used - hashed)
    names = {p.as_posix() for p in hashed}
    assert any(n.endswith("isa/formats.py") for n in names)
    assert any(n.endswith("hw/soc/top.py") for n in names)


def test_elaborated_again_only_when_a_source_changes(tmp_path: Path, monkeypatch) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    for path in (pkg / "__init__.py", pkg / "sub" / "__init__.py"):
        path.write_text("")
    layout = pkg / "sub" / "layout.py"

    def write(text: str) -> None:  # as if written before this process started
        layout.write_text(text)
        os.utime(layout, (0, 0))
    write("WIDTH = 8\n")
    monkeypatch.setattr(rtl_build, "rtl_sources", lambda: [layout])
    monkeypatch.setenv("TENSORFAB_VERILATOR_CACHE", str(tmp_path / "cache"))
    calls: list[str] = []

    def design() -> str:
        calls.append(layout.read_text())
        return f"module m; localparam W = {len(calls)}; endmodule\n"

    first = rtl_build.elaborated("m", {"n": 1}, design)
    assert rtl_build.elaborated("m", {"n": 1}, design) == first
    assert len(calls) == 1
    write("WIDTH = 16\n")
    assert rtl_build.elaborated("m", {"n": 1}, design) != first
    assert calls == ["WIDTH = 8\n", "WIDTH = 16\n"]
    rtl_build.elaborated("m", {"n": 2}, design)
    assert len(calls) == 3
    # a source edited while this process runs: its modules may be the old ones, so
    # what it elaborates is not kept under the new sources' key
    layout.write_text("WIDTH = 32\n")
    rtl_build.elaborated("m", {"n": 1}, design)
    rtl_build.elaborated("m", {"n": 1}, design)
    assert len(calls) == 5


def test_build_key_is_the_elaborated_verilog() -> None:
    text = rtl_build.core_source(TINY)
    assert text == rtl_build.core_source(TINY)  # from the cache the second time
    key = rtl_build.harness_key(TINY, text)
    assert rtl_build.harness_key(TINY, text) == key  # an unchanged design reuses its build
    # a changed design (one constant of the Verilog) gets a new key
    changed = text.replace("1'h0", "1'h1", 1)
    assert changed != text
    assert rtl_build.harness_key(TINY, changed) != key
    assert rtl_build.harness_key(TINY, text, pgo=False) != key
    # the same design elaborated from another checkout, or after an edit that only
    # moves lines (its source-location attributes differ): the same build
    assert '(* src = "' in text
    moved = re.sub(r'\(\* src = "([^"]*):(\d+)" \*\)',
                   lambda m: f'(* src = "/elsewhere/{m.group(1)}:{int(m.group(2)) + 3}" *)',
                   text)
    assert moved != text
    assert rtl_build.harness_key(TINY, moved) == key


def test_config_header_is_derived_from_the_declarations() -> None:
    text = config_header(TINY)
    lay = MemCmdLayout(TINY)
    for name in ("addr", "write", "len"):
        assert f"#define TF_CMD_{name.upper()}_OFFSET {lay[name].offset}\n" in text
        assert f"#define TF_CMD_{name.upper()}_WIDTH {lay[name].shape.width}\n" in text
    for c in CSRS:
        assert f"#define TF_CSR_{c.name} {c.offset:#x}\n" in text
    for k, name in enumerate(ACTIVITY):
        assert f"#define TF_ACT_{name.upper()} {k}\n" in text
    assert f"#define TF_BUS_BYTES {TINY.mem_bus_bytes}\n" in text


# ------------------------------------------------------------------- harness and memory
def test_harness_api_runs_in_pieces() -> None:
    prog = build_gemm(TINY, np.random.default_rng(1), vthreads=2)[0]
    whole = RtlSimulator().run(prog)
    image = prog.dram_image()
    with Harness(build_harness(TINY)) as h:
        h.load_dram(image)
        h.reset()
        h.write_csr("INSN_BASE", 0)
        assert h.read_csr("INSN_BASE") == 0
        h.start(0, len(prog.insns), image.size)
        assert h.run(1000) is RunStatus.LIMIT
        assert h.run_cycles == 1000
        assert h.read_csr("STATUS") & 1  # busy
        status = RunStatus.LIMIT
        while status is RunStatus.LIMIT:
            status = h.run(5000)
        assert status is RunStatus.DONE
        assert h.read_csr("CYCLES") == whole.cycles
        assert np.array_equal(h.read_dram(), whole.dram)
        assert h.stats()["bytes_written"] == whole.counters.store_bytes


def test_memory_timing_changes_cycles_not_results() -> None:
    prog = build_gemm(TINY, np.random.default_rng(2), vthreads=2)[0]
    ref = FunctionalSimulator().run(prog)
    cycles = []
    for mem in (MemoryTiming(read_latency=1), MemoryTiming(read_latency=20),
                MemoryTiming(read_latency=100), MemoryTiming(read_latency=20, bandwidth=1)):
        res = RtlSimulator(mem).run(prog)
        assert np.array_equal(res.dram, ref.dram)
        assert res.counters == ref.counters
        cycles.append(res.cycles)
    assert cycles[0] < cycles[1] < cycles[2]
    assert cycles[3] > cycles[1]  # a quarter of the bus width per cycle
    with pytest.raises(ValueError, match="read_latency"):
        MemoryTiming(read_latency=0)


def test_rtl_is_a_registered_device() -> None:
    assert isinstance(get_device("rtl"), RtlSimulator)


# ------------------------------------------------------------------------ timelines
def test_timelines_agree_with_counters_and_export(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    prog = build_gemm(TINY, rng, vthreads=2, epilogue=[(AluOp.SHR, 2), (AluOp.CLIP, 127)])[0]
    res = RtlSimulator(trace=True).run(prog)
    assert res.intervals
    total: dict[tuple[str, str], int] = {}
    for iv in res.intervals:
        assert 0 <= iv.start < iv.end <= res.cycles
        total[iv.track, iv.kind] = total.get((iv.track, iv.kind), 0) + iv.cycles
    csr = {("load", "busy"): "LOAD_BUSY", ("load", "stall"): "LOAD_STALL",
           ("compute", "busy"): "COMPUTE_BUSY", ("compute", "stall"): "COMPUTE_STALL",
           ("gemm", "busy"): "GEMM_BUSY", ("alu", "busy"): "ALU_BUSY",
           ("store", "busy"): "STORE_BUSY", ("store", "stall"): "STORE_STALL"}
    for key, name in csr.items():
        if key == ("gemm", "busy"):
            # GEMM_BUSY counts micro-ops: a fast reset zeroes several in one busy cycle
            assert 0 < total.get(key, 0) <= res.csrs[name], name
        else:
            assert total.get(key, 0) == res.csrs[name], name
    busy = {t: [iv for iv in res.intervals if iv.track == t and iv.kind == "busy"]
            for t in TRACKS}
    for iv in res.intervals:
        if iv.kind == "stall":
            assert any(b.start <= iv.start and iv.end <= b.end for b in busy[iv.track])

    trace = json.loads(write_chrome_trace(res.intervals, tmp_path / "t.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == set(TRACKS)
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(res.intervals)
    png = plot_timeline(res.intervals, tmp_path / "t.png", cycles=res.cycles)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # an untraced run records nothing
    assert RtlSimulator().run(prog).intervals is None


def test_chrome_trace_nests_stalls_and_scales_to_the_clock(tmp_path: Path) -> None:
    ivs = [Interval("load", "busy", 0, 10), Interval("load", "stall", 0, 4),
           Interval("gemm", "busy", 5, 7)]
    trace = json.loads(write_chrome_trace(ivs, tmp_path / "x.json",
                                          clock_mhz=100.0).read_text())
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"]) for e in xs] == [
        ("busy", 0.0, 0.1), ("stall", 0.0, 0.04), ("busy", 0.05, 0.02)]


def test_cli_sim_rtl_writes_trace_and_plot(tmp_path: Path, capsys) -> None:
    from tensorfab.cli import main

    prog = build_requant(TINY, np.random.default_rng(4))[0]
    src = tmp_path / "p.bin"
    src.write_bytes(prog.to_bytes())
    out_json, out_png = tmp_path / "o.json", tmp_path / "o.png"
    assert main(["sim", str(src), "--target", "rtl", "--json", "--trace", str(out_json),
                 "--plot", str(out_png)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["device"] == "rtl" and summary["cycles"] > 0
    trace = json.loads(out_json.read_text())
    assert trace["otherData"]["clock_mhz"] == prog.config.clock_mhz  # hardware time:
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]   # µs at the clock
    assert slices and all(
        e["ts"] == pytest.approx(e["args"]["first_cycle"] / prog.config.clock_mhz)
        and e["dur"] == pytest.approx(e["args"]["cycles"] / prog.config.clock_mhz)
        for e in slices)
    assert out_png.read_bytes()[:4] == b"\x89PNG"
    assert main(["sim", str(src), "--target", "fsim", "--trace", str(out_json)]) == 2


# ---------------------------------------------------------------------- slow checks
@pytest.mark.slow
def test_one_evaluation_per_cycle_equals_two() -> None:
    prog = build_gemm(TINY, np.random.default_rng(6), vthreads=2,
                      epilogue=[(AluOp.SHR, 3)])[0]
    one = RtlSimulator(trace=True).run(prog)
    two = RtlSimulator(trace=True)
    two.build = lambda cfg: build_harness(cfg, two_evals=True)  # type: ignore[method-assign]
    assert "two evaluations" in two.build(TINY).clocking
    res = two.run(prog)
    assert res.csrs == one.csrs and res.intervals == one.intervals
    assert np.array_equal(res.dram, one.dram)


@pytest.mark.slow
def test_concurrent_processes_build_a_key_once(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    code = ("from tensorfab.isa import PRESETS\n"
            "from tensorfab.sim.rtl.build import build_harness\n"
            "print(build_harness(PRESETS['tiny'], pgo=False).build_seconds)\n")
    env = {**os.environ, "TENSORFAB_VERILATOR_CACHE": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    seconds = [float(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(s > 0 for s in seconds) == [False, True]  # one built, one reused
    assert len(list(tmp_path.glob("core-tiny-*/build.ok"))) == 1


@pytest.mark.parametrize("kwargs,match", [
    ({"max_cycles": "10"}, r"max_cycles = '10': give an integer number of cycles of 1"),
    ({"max_cycles": 0}, r"max_cycles = 0: "),
    ({"hang_cycles": -1}, r"hang_cycles = -1: give an integer number of cycles of 0"),
])
def test_cycle_limits_name_the_bad_argument(kwargs, match) -> None:
    """open_device('rtl', max_cycles='10') raised TypeError ('<' not supported between
    'str' and 'int') and max_cycles=0 said 'max_cycles must be positive and
    hang_cycles not negative'; now the argument and its value are named."""
    with pytest.raises(UsageError, match=match):
        RtlSimulator(**kwargs)
