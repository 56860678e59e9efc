"""The schedule tuner: GA + learned cost model on the timing model, its log reused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tensorfab.compiler.tensor import Workload
from tensorfab.compiler.tensor.epilogue import Epilogue
from tensorfab.compiler.tensor.operators import conv2d
from tensorfab.compiler.tensor.tile_search import schedule_for
from tensorfab.dse.tuner import _Space, mac_bound, tune_workload
from tensorfab.isa import PRESETS, TensorfabError
from tensorfab.sim import FunctionalSimulator

CFG = PRESETS["tiny"]
WL = Workload.conv2d(1, 16, 8, 8, 16, (3, 3), 1, 1)


def _conv_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Plain numpy 3x3 convolution, padding 1, stride 1, int32 sums."""
    n, _, h, wd = x.shape
    xp = np.pad(x.astype(np.int32), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd), np.int32)
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd],
                             w[:, :, i, j].astype(np.int32))
    return out


def test_tuner_never_slower_and_its_log_is_reused(tmp_path: Path) -> None:
    log = tmp_path / "tune.jsonl"
    first = tune_workload("conv", WL, CFG, trials=20, log=log, seed=1)
    assert first.measured == 20 and first.reused == 0
    assert first.best_cycles <= first.baseline_cycles
    assert first.best_cycles >= first.mac_bound == mac_bound(WL, CFG) > 0
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 20 and {r["key"] for r in lines} == {first.key}
    assert min(r["cycles"] for r in lines if r["cycles"] is not None) == first.best_cycles
    again = tune_workload("conv", WL, CFG, trials=20, log=log, seed=1)
    assert again.measured == 0 and again.reused == 20
    assert again.best_genome == first.best_genome
    assert len(log.read_text().splitlines()) == 20


def test_a_record_cut_off_by_an_interrupted_run_is_dropped(tmp_path: Path) -> None:
    """A run killed while writing leaves its last record without its newline: the log
    was refused ('LOG:N: not a tuning-log record') until the line was deleted by hand.
    Now that record is left out and measured again, the log stays one record a line,
    and a broken line elsewhere is still refused."""
    from tensorfab.dse.tuner import TuningLog
    from tensorfab.isa import UsageError

    log = tmp_path / "tune.jsonl"
    tune_workload("conv", WL, CFG, trials=6, log=log, seed=1)
    text = log.read_text()
    log.write_text(text[:-20])  # the last record cut off
    assert len(TuningLog(log).best) == 1
    again = tune_workload("conv", WL, CFG, trials=6, log=log, seed=1)
    assert again.reused == 5 and again.measured == 1
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 6 and log.read_text().endswith("\n")
    log.write_text(log.read_text().rstrip("\n"))  # a whole last record, no newline
    assert tune_workload("conv", WL, CFG, trials=7, log=log, seed=1).reused == 6
    assert len(log.read_text().splitlines()) == 7
    log.write_text("cut off\n" + log.read_text())
    with pytest.raises(UsageError, match=r"tune\.jsonl:1: not a tuning-log record"):
        TuningLog(log)


def test_tuned_schedule_computes_the_convolution() -> None:
    """The tuned schedule's program on fsim equals a numpy convolution (small values:
    the sums stay in int8)."""
    result = tune_workload("conv", WL, CFG, trials=12, seed=2)
    plan = _Space(WL, CFG, Epilogue()).plan(result.best_genome)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2, (1, 16, 8, 8)).astype(np.int8)
    w = (rng.integers(0, 2, (16, 16, 3, 3)) * (rng.random((16, 16, 3, 3)) < 0.3)).astype(
        np.int8)
    want = _conv_reference(x, w)
    assert want.max() <= 127
    op = conv2d(CFG, x, w, padding=1, schedule=schedule_for(plan))
    assert np.array_equal(op.run(FunctionalSimulator()), want.astype(np.int8))


def test_tune_of_a_missing_model_file_is_one_clear_error(capsys) -> None:
    from tensorfab.cli import main

    assert main(["tune", "nope.onnx", "--config", "tiny"]) != 0
    err = capsys.readouterr().err
    assert "tune nope.onnx: no such file (give resnet18 or an ONNX model)" in err
    assert "Traceback" not in err


def test_tune_an_onnx_model_then_compile_it_with_the_log(tmp_path: Path) -> None:
    """`tune digits.onnx` tunes the operators compiling the model records (its two
    convolutions and the dense layer), never slower than the tile search on the timing
    model; `compile --tuning-log` then takes the logged schedules (one per operator)
    and the compiled model's per-program estimated cycles are the tuned ones; the
    outputs stay those of the untuned model (the runtime's default executor)."""
    import subprocess
    import sys

    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.dse.tuner import TuningLog
    from tensorfab.models.digits_cnn import load_digits_split, model_path
    from tensorfab.runtime.accel_contract import ACCEL_PROGRAM
    from tensorfab.runtime.interpreter import run_program

    calib = load_digits_split(0)[0][:64]
    np.save(tmp_path / "calib.npy", calib)
    log = tmp_path / "digits.jsonl"
    exe = str(Path(sys.executable).parent / "tensorfab")
    run = subprocess.run([exe, "tune", str(model_path()), "--config", "tiny", "--calib",
                          str(tmp_path / "calib.npy"), "--shape", "image=1,1,8,8",
                          "--trials", "8", "--log", str(log), "--json"],
                         capture_output=True, text=True, timeout=600, check=True)
    layers = json.loads(run.stdout)["layers"]
    assert len(layers) >= 2
    for layer in layers:
        assert layer["best_cycles"] <= layer["baseline_cycles"]
        assert layer["measured"] >= 1
    shapes = {"image": (1, 1, 8, 8)}
    plain = compile_onnx(str(model_path()), config=CFG, calibration=calib,
                         input_shapes=shapes)
    source = TuningLog(log)
    tuned = compile_onnx(str(model_path()), config=CFG, calibration=calib,
                         input_shapes=shapes, schedules=source)
    assert len(source.used) == len(layers)

    def cycles(compiled: object) -> int:
        return sum(int(n.attrs.get("estimated_cycles", 0))
                   for n in compiled.program.nodes if n.op == ACCEL_PROGRAM)

    assert cycles(tuned) == sum(r["best_cycles"] for r in layers)
    assert cycles(tuned) <= cycles(plain)
    image = calib[:1]
    np.testing.assert_array_equal(run_program(tuned.program, [image]),
                                  run_program(plain.program, [image]))


def test_tune_bench_is_registered() -> None:
    from tensorfab.benches import BENCHES

    assert "tune" in BENCHES


def test_compiler_takes_the_logged_schedule_through_its_hook(tmp_path: Path) -> None:
    """conv2d(schedules=TuningLog) compiles the log's fastest schedule (the plan the
    tuner picked), computes the convolution, and leaves unlogged workloads to the tile
    search; a broken log is one error naming file and line."""
    from tensorfab.dse.tuner import TuningLog
    from tensorfab.isa import UsageError

    log = tmp_path / "tune.jsonl"
    result = tune_workload("conv", WL, CFG, trials=16, log=log, seed=3)
    tuned = _Space(WL, CFG, Epilogue()).plan(result.best_genome)
    rng = np.random.default_rng(1)
    x = rng.integers(0, 2, (1, 16, 8, 8)).astype(np.int8)
    w = (rng.integers(0, 2, (16, 16, 3, 3)) * (rng.random((16, 16, 3, 3)) < 0.3)).astype(
        np.int8)
    source = TuningLog(log)
    op = conv2d(CFG, x, w, padding=1, schedules=source)
    assert op.plan == tuned and source.used == [WL.name]
    assert np.array_equal(op.run(FunctionalSimulator()), _conv_reference(x, w).astype(np.int8))
    other = conv2d(CFG, x[:, :, :6, :6], w, padding=1, schedules=source)
    assert other.plan == conv2d(CFG, x[:, :, :6, :6], w, padding=1).plan
    log.write_text(log.read_text() + "not json\n")
    with pytest.raises(UsageError, match=r"tune\.jsonl:17: not a tuning-log record"):
        TuningLog(log)


def test_cycle_floor_bounds_every_schedule_from_below() -> None:
    """The floor is at least the MAC bound, at most every measured schedule's cycles
    (timing model) and the tile search's pick on RTL; for a batch-1 dense layer it is
    the bus beats of its weights and outputs, counted here from the shapes."""
    from tensorfab.compiler.tensor.operators import compile_workload
    from tensorfab.dse.tuner import cycle_floor
    from tensorfab.sim.rtl import RtlSimulator
    from tensorfab.sim.timing.model import compute_micro_ops, program_timing

    op = compile_workload(WL, CFG)
    floor = cycle_floor(WL, CFG, op.program)
    out_entries = 8 * 8 * (16 // CFG.block_out)  # batch 1: one entry per pixel and block
    assert mac_bound(WL, CFG) < floor <= mac_bound(WL, CFG) + 2 * out_entries
    assert floor == compute_micro_ops(op.program.insns, CFG)
    assert RtlSimulator().run(op.program).cycles >= floor
    space = _Space(WL, CFG, Epilogue())
    rng = np.random.default_rng(3)
    legal = 0
    for _ in range(40):
        try:
            prog = compile_workload(WL, CFG, schedule=schedule_for(space.plan(space.random(rng))))
        except (TensorfabError, ValueError, AssertionError):  # illegal, as measure() has it
            continue
        legal += 1
        assert program_timing(prog.program).cycles >= cycle_floor(WL, CFG, prog.program)
    assert legal >= 5

    dense = Workload.dense(1, 256, 512)
    prog = compile_workload(dense, CFG).program
    moved = 256 * 512 + 512  # int8 weights and outputs, no channel padding here
    assert cycle_floor(dense, CFG, prog) == -(-moved // CFG.mem_bus_bytes)
    assert program_timing(prog).cycles >= cycle_floor(dense, CFG, prog)


def test_tune_bench_reports_each_layer_against_its_floor() -> None:
    """One layer of ``bench tune``: the floor lies between the MAC bound and the RTL
    cycles, and the ratios are those cycles over it."""
    from tensorfab.benches.tune import run_tune_bench

    res = run_tune_bench(trials=6, layers=["C4"])
    row = res["layers"]["C4"]
    assert row["mac_bound"] < row["floor"] <= row["rtl_after"] <= row["rtl_before"]
    assert row["before_over_floor"] == round(row["rtl_before"] / row["floor"], 4)
    assert row["after_over_floor"] == round(row["rtl_after"] / row["floor"], 4)
    assert res["faster"] + (row["rtl_after"] == row["rtl_before"]) == 1
    unchanged = row["before_over_floor"] if row["rtl_after"] == row["rtl_before"] else None
    assert res["unchanged_max_over_floor"] == unchanged


def test_tune_refuses_a_log_that_is_not_a_tuning_log_before_any_work(
        tmp_path: Path, capsys) -> None:
    """`tune --log notes.txt` named a user's file: it was a JSONDecodeError traceback
    (after compiling), and the file was about to be appended to. Now one line naming
    the file and the line, and the file is left as it was."""
    from tensorfab.cli import main

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    assert main(["tune", "resnet18", "--config", "tiny", "--trials", "2",
                 "--log", str(notes)]) == 2
    err = capsys.readouterr().err
    assert f"{notes}:1: not a tuning-log record" in err
    assert "Traceback" not in err
    assert notes.read_text() == "my notes\n"
    assert main(["tune", "resnet18", "--config", "tiny", "--trials", "0",
                 "--log", str(tmp_path / "log.jsonl")]) == 2
    assert "--trials 0: give at least 1" in capsys.readouterr().err
    assert not (tmp_path / "log.jsonl").exists()
