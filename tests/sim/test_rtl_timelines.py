"""RTL timelines named by instruction, kept when a run fails or is interrupted
(sim/rtl/device.py with sim/trace.py, and ``tensorfab sim --target rtl``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.isa_programs import build_gemm

from tensorfab.cli import main
from tensorfab.isa import PRESETS, AluOp, Buffer, Finish, Gemm, Load, Program, Uop
from tensorfab.sim.race import ENGINE_NAMES
from tensorfab.sim.rtl import HangError, Harness, RtlSimulator

TINY = PRESETS["tiny"]


def _stuck() -> Program:
    """The GEMM pops a token no instruction pushes: a hang at instruction 1."""
    return Program(TINY, [Load(buffer=Buffer.UOP, sram=0, dram=0, y=1, x=1, stride=1),
                          Gemm(pop_prev=True, reset=True), Finish()], [Uop()], [])


def test_every_interval_of_a_run_names_its_instruction_in_engine_order() -> None:
    prog = build_gemm(TINY, np.random.default_rng(5), vthreads=2,
                      epilogue=[(AluOp.SHR, 2), (AluOp.CLIP, 127)])[0]
    res = RtlSimulator(trace=True).run(prog)
    assert all(iv.index is not None for iv in res.intervals)
    for e in ENGINE_NAMES:  # the k-th busy interval is the engine's k-th instruction
        stream = [i for i, insn in enumerate(prog.insns) if ENGINE_NAMES[insn.engine] == e]
        busy = sorted((iv for iv in res.intervals if iv.track == e and iv.kind == "busy"),
                      key=lambda iv: iv.start)
        assert [iv.index for iv in busy] == stream, e
    for iv in res.intervals:
        insn = prog.insns[iv.index]
        assert iv.insn.split()[0] == insn.mnemonic
        if iv.track == "gemm":
            assert isinstance(insn, Gemm)
        if iv.track == "alu":
            assert insn.mnemonic.startswith("alu.")


def test_failed_run_hands_on_its_timeline() -> None:
    with pytest.raises(HangError) as info:
        RtlSimulator(trace=True, hang_cycles=2000).run(_stuck())
    ivs = info.value.intervals
    assert ("load", "#0 load.uop") in {(iv.track, iv.label) for iv in ivs}
    stalls = [iv for iv in ivs if iv.track == "compute" and iv.kind == "stall"]
    assert stalls and all(iv.label == "#1 gemm" for iv in stalls)
    assert max(iv.end for iv in ivs) <= info.value.cycles


def test_cli_writes_trace_and_plot_of_a_hung_run(tmp_path: Path, capsys) -> None:
    src = tmp_path / "stuck.bin"
    src.write_bytes(_stuck().to_bytes())
    trace, png = tmp_path / "t.json", tmp_path / "t.png"
    assert main(["sim", str(src), "--target", "rtl", "--trace", str(trace),
                 "--plot", str(png)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "the core hung" in err
    names = {e["name"] for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"}
    assert {"#0 load.uop", "#1 gemm", "stall #1 gemm"} <= names
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_ctrl_c_says_where_the_run_stopped(tmp_path: Path, capsys, monkeypatch) -> None:
    """Ctrl-C lands between two chunks of clocking (here: during the third call)."""
    monkeypatch.setattr(RtlSimulator, "CHUNK", 10_000)
    real = Harness.run
    calls = []

    def run(self, *a, **k):
        status = real(self, *a, **k)
        calls.append(status)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return status

    monkeypatch.setattr(Harness, "run", run)
    with pytest.raises(KeyboardInterrupt) as info:
        RtlSimulator(hang_cycles=0, trace=True).run(_stuck())
    err = info.value
    assert err.cycles == 30_000 and err.retired == {"load": 1, "compute": 0, "store": 0}
    assert "interrupted at cycle 30,000 of tiny" in str(err)
    assert "instruction 1 (gemm) waits to pop" in str(err)
    assert {iv.label for iv in err.intervals} >= {"#0 load.uop", "#1 gemm"}

    calls.clear()
    src = tmp_path / "stuck.bin"
    src.write_bytes(_stuck().to_bytes())
    monkeypatch.setattr(RtlSimulator, "__init__", _with_no_hang(RtlSimulator.__init__))
    assert main(["sim", str(src), "--target", "rtl", "--trace",
                 str(tmp_path / "t.json")]) == 130
    out = capsys.readouterr().err
    assert "interrupted at cycle 30,000" in out and "Traceback" not in out
    assert (tmp_path / "t.json").exists()


def _with_no_hang(init):
    def patched(self, *a, **k):
        init(self, *a, **k)
        self.hang_cycles = 0

    return patched


def test_progress_is_called_between_chunks(monkeypatch) -> None:
    monkeypatch.setattr(RtlSimulator, "CHUNK", 10_000)
    sim = RtlSimulator(hang_cycles=0, max_cycles=30_000)
    seen = []
    sim.progress = lambda cycles, retired: seen.append((cycles, retired))
    with pytest.raises(HangError, match="did not finish within 30000 cycles"):
        sim.run(_stuck())
    stuck = {"load": 1, "compute": 0, "store": 0}
    assert seen == [(10_000, stuck), (20_000, stuck), (30_000, stuck)]
