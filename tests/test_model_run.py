"""``tensorfab run`` (issue 12): a .tfm or an .onnx, bare ``--input``, ``--target fsim|rtl``,
the per-layer table, ``--trace`` as one Perfetto timeline; ``compile --config --calib``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tensorfab.cli import main
from tensorfab.models import load_digits_split
from tensorfab.models.digits_cnn import model_path
from tensorfab.runtime.artifact import load_executable, load_model
from tensorfab.runtime.interpreter import run_program
from tensorfab.sim.trace import is_tensorfab_trace

BATCH = 8


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("run")
    xtr, _, xte, yte = load_digits_split(0)
    np.save(d / "calib.npy", xtr[:256])
    np.savez(d / "calib.npz", image=xtr[:256])
    np.save(d / "images.npy", xte[:BATCH])
    return {"dir": d, "calib": d / "calib.npy", "npz": d / "calib.npz",
            "images": d / "images.npy", "labels": yte[:BATCH]}


def _compile(files, name: str, *extra: str) -> Path:
    out = files["dir"] / name
    assert main(["compile", str(model_path()), "-o", str(out), "--shape",
                 f"image={BATCH},1,8,8", "--json", *extra]) == 0
    return out


@pytest.fixture(scope="module")
def tiny_tfm(files) -> Path:
    return _compile(files, "tiny.tfm", "--config", "tiny", "--calib", str(files["npz"]))


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_run_prints_layers_and_writes_one_timeline(files, tiny_tfm, capsys) -> None:
    trace = files["dir"] / "t.json"
    assert main(["run", str(tiny_tfm), "--input", str(files["images"]),
                 "--trace", str(trace)]) == 0
    out = capsys.readouterr().out  # the tables; the result's JSON with --json
    assert "{" not in out.splitlines()[-1]
    assert main(["run", str(tiny_tfm), "--input", str(files["images"]), "--json"]) == 0
    summary = _last_json(capsys.readouterr().out)
    program = load_model(tiny_tfm)
    want = np.asarray(run_program(program, [np.load(files["images"])]))
    assert summary["outputs"][0]["argmax"] == want.argmax(axis=1).tolist()
    assert summary["target"] == "fsim" and summary["accel_layers"] == 3
    # a row per node that runs: a CPU kernel (the executable's) or a program; a reshape
    # placed over its input is a view and runs nothing
    ran = len(load_executable(tiny_tfm).nodes) + summary["accel_layers"]
    assert ran < len(program.nodes)
    assert summary["layers"] == ran and summary["cycles_estimated"]
    # the model ran resident: programs and weights loaded once, then only activations
    from tensorfab.runtime.memory_plan import plan_memory

    plan = plan_memory(program)
    assert summary["device_memory_bytes"] == plan.size
    assert 0 < summary["host_bytes"] < plan.size
    # the table: one row per node that ran, accelerator rows with (estimated) cycles
    table_rows = [line for line in out.splitlines() if line.startswith("│")]
    assert len(table_rows) == ran
    accel_rows = [r for r in table_rows if "│ accel " in r]
    assert len(accel_rows) == 3 and all("conv2d_integer+add+requantize_q31" in r
                                        and "~" in r for r in accel_rows)
    assert "output 0 float32 (8, 10)" in out
    assert is_tensorfab_trace(trace)
    slices = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == ran
    assert {e["cat"] for e in slices} == {"cpu", "accel"}
    # the trace is ours: written again without --force
    assert main(["run", str(tiny_tfm), "--input", f"image={files['images']}", "--json",
                 "--trace", str(trace)]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 1  # --json: only JSON


def test_run_onnx_compiles_in_memory_like_compile(files, capsys) -> None:
    tfm = _compile(files, "default.tfm", "--config", "default", "--calib",
                   str(files["calib"]), "--calib-method", "percentile")
    capsys.readouterr()
    a, b = files["dir"] / "a.npy", files["dir"] / "b.npy"
    assert main(["run", str(tfm), "--input", str(files["images"]), "-o", str(a)]) == 0
    assert main(["run", str(model_path()), "--input", str(files["images"]), "--calib",
                 str(files["calib"]), "--calib-method", "percentile", "-o", str(b),
                 "--json"]) == 0
    assert _last_json(capsys.readouterr().out)["accel_layers"] == 3
    np.testing.assert_array_equal(np.load(a), np.load(b))
    assert (np.load(a).argmax(axis=1) == files["labels"]).mean() >= 0.75
    # without --calib an .onnx is calibrated on the input itself, and says so
    assert main(["run", str(model_path()), "--input", str(files["images"])]) == 0
    captured = capsys.readouterr()
    assert "calibrating the int8 quantization on the input itself" in captured.err
    assert f"output 0 float32 ({BATCH}, 10)" in captured.out


def test_compile_spellings_and_quantizers(files, capsys) -> None:
    """--accel/--int8 stay as aliases of --config/--calib; --quantizer ort works."""
    new = _compile(files, "new.tfm", "--config", "tiny", "--calib", str(files["calib"]))
    old = _compile(files, "old.tfm", "--accel", "tiny", "--int8", str(files["calib"]))
    ort = _compile(files, "ort.tfm", "--config", "tiny", "--calib", str(files["calib"]),
                   "--quantizer", "ort", "--calib-method", "percentile")
    outs = capsys.readouterr().out.strip().splitlines()
    assert all(json.loads(line)["config"] == "tiny" for line in outs)
    x = np.load(files["images"])
    a, b = (np.asarray(run_program(load_model(p), [x])) for p in (new, old))
    np.testing.assert_array_equal(a, b)
    c = np.asarray(run_program(load_model(ort), [x]))
    assert (c.argmax(axis=1) == a.argmax(axis=1)).mean() >= 0.75
    assert main(["inspect", str(new), "--json"]) == 0
    assert _last_json(capsys.readouterr().out)["configs"] == ["tiny"]


def test_rtl_target_cycle_accurate_with_engine_tracks(files, capsys) -> None:
    """One small run on the RTL core (Verilator; the default config's build is cached):
    the same outputs as fsim, measured cycles, engine tracks in the timeline."""
    tfm = _compile(files, "rtl.tfm", "--config", "default", "--calib", str(files["calib"]))
    capsys.readouterr()
    trace = files["dir"] / "rtl.json"
    assert main(["run", str(tfm), "--input", str(files["images"]), "--target", "rtl",
                 "--trace", str(trace), "-o", str(files["dir"] / "rtl.npy"),
                 "--json"]) == 0
    summary = _last_json(capsys.readouterr().out)
    assert summary["target"] == "rtl" and not summary["cycles_estimated"]
    assert summary["total_cycles"] > 0
    # conv1 (1 → 8 channels) and conv2 (8 → 16), 8×8 and 4×4 images, 3×3 kernels;
    # the classifier (64 → 10)
    assert summary["accel_macs"] == BATCH * (8 * 8 * 8 * 1 * 9 + 16 * 4 * 4 * 8 * 9
                                             + 64 * 10)
    peak = 16 * 16  # default: batch 1, 16×16 block
    assert summary["utilization"] == pytest.approx(
        summary["accel_macs"] / (summary["total_cycles"] * peak), abs=1e-4)
    fsim = np.asarray(run_program(load_model(tfm), [np.load(files["images"])]))
    np.testing.assert_array_equal(np.load(files["dir"] / "rtl.npy"), fsim)
    events = json.loads(trace.read_text())["traceEvents"]
    engines = {e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == 2}
    assert {"load", "compute", "gemm", "store"} <= engines
    cycles = sum(e["args"]["cycles"] for e in events if e["ph"] == "X" and e["pid"] == 1
                 and e["cat"] == "accel")
    assert cycles == summary["total_cycles"]


def test_cli_choices_are_the_compilers() -> None:
    """The command line lists the quantizers and observers without importing the
    compiler at start-up; they are the compiler's."""
    from tensorfab import model_cli
    from tensorfab.compiler.graph.calibration import CALIBRATION_METHODS
    from tensorfab.compiler.model_compile import DEFAULT_QUANTIZER, QUANTIZERS

    assert model_cli.QUANTIZERS == QUANTIZERS and QUANTIZERS[0] == DEFAULT_QUANTIZER
    assert model_cli.CALIB_METHODS == CALIBRATION_METHODS
