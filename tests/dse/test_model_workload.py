"""Whole ONNX models as sweep workloads (``--workloads digits,model.onnx``): the
figures against the timing model on each decoded program and the model's own MAC
count, the cache keyed by the model's bytes and calibration, the command's errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tensorfab.dse.cluster import dask_client
from tensorfab.dse.model_workload import digits_workload, evaluate_model, model_workload
from tensorfab.dse.space import load_space, space_points
from tensorfab.dse.sweep import run_sweep, workload_by_name
from tensorfab.isa import PRESETS, UsageError
from tensorfab.models.digits_cnn import CHANNELS, CLASSES, KERNEL, load_digits_split, model_path

EXE = str(Path(sys.executable).parent / "tensorfab")
SPACE = "block_in: [8, 16]\nblock_out: [8]\n"


def digits_macs() -> int:
    """The digits CNN's multiply-accumulates for one 8×8 image, from its architecture:
    two 3×3 convolutions (8×8, then 4×4 after a 2×2 pool) and the classifier over the
    16 channels of 2×2."""
    c0, c1, c2 = CHANNELS
    conv1 = 8 * 8 * c1 * c0 * KERNEL * KERNEL
    conv2 = 4 * 4 * c2 * c1 * KERNEL * KERNEL
    return conv1 + conv2 + c2 * 2 * 2 * CLASSES


def test_a_model_point_is_its_programs_on_the_timing_model() -> None:
    import onnx

    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.runtime.accel_contract import accel_nodes, decode_program, program_blob
    from tensorfab.sim.timing.model import program_timing

    wl = digits_workload()
    cfg = PRESETS["tiny"]
    r = evaluate_model(cfg.to_json(), wl)
    assert r["error"] is None
    compiled = compile_onnx(onnx.load(str(model_path())), config=cfg,
                            calibration=wl.calibration, input_shapes=dict(wl.input_shapes))
    programs = [decode_program(program_blob(compiled.program, k))
                for k, _ in accel_nodes(compiled.program)]
    assert r["accel_programs"] == len(programs) == 3
    assert r["cycles"] == sum(round(program_timing(p).cycles) for p in programs)
    assert r["macs"] == digits_macs() and r["accel_mac_fraction"] == 1.0
    peak = cfg.batch * cfg.block_in * cfg.block_out
    assert r["utilization"] == pytest.approx(digits_macs() / (r["cycles"] * peak))
    assert r["gops"] == pytest.approx(2 * digits_macs() * cfg.clock_mhz / r["cycles"] / 1e3)
    # the weights (conv: 72 + 1152, classifier 640 int8 values) live in device memory
    assert r["device_memory_bytes"] > 72 + 1152 + 640


def test_a_sweep_over_model_workloads_caches_by_bytes_and_calibration(tmp_path: Path) -> None:
    """The digits CNN built in and as a file with the same calibration give the same
    cycles; a rerun is free; another calibration is another model (computed again)."""
    calib = digits_workload().calibration
    np.save(tmp_path / "calib.npy", calib)
    (tmp_path / "mycnn.onnx").write_bytes(model_path().read_bytes())
    points = space_points(load_space(_space(tmp_path)))
    as_file = workload_by_name([str(tmp_path / "mycnn.onnx")], calib)
    assert as_file[0].name == "mycnn" and dict(as_file[0].input_shapes) == {
        "image": (1, 1, 8, 8)}  # the symbolic batch taken as 1
    with dask_client(workers=1) as client:
        first = run_sweep(points, ["dense64", digits_workload(), *as_file], client,
                          tmp_path / "cache")
        again = run_sweep(points, [digits_workload(), *as_file], client, tmp_path / "cache")
        other = run_sweep(points, [model_workload(tmp_path / "mycnn.onnx", calib[:32])],
                          client, tmp_path / "cache")
    assert (first.computed, first.cached) == (6, 0)
    assert (again.computed, again.cached) == (0, 4)
    assert (other.computed, other.cached) == (2, 0)
    by = {(r["workload"], r["block_in"]): r for r in first.rows}
    for bi in (8, 16):
        assert by[("digits", bi)]["cycles"] == by[("mycnn", bi)]["cycles"] > 0
        assert by[("digits", bi)]["macs"] == digits_macs()
        assert by[("dense64", bi)]["macs"] == 16 * 64 * 64
        want = evaluate_model(by[("digits", bi)]["config"], digits_workload())
        assert by[("digits", bi)]["cycles"] == want["cycles"]
    assert first.errors() == {}


def _space(tmp_path: Path) -> Path:
    p = tmp_path / "space.yaml"
    p.write_text(SPACE)
    return p


def test_dse_command_over_onnx_files_reports_errors_by_workload(tmp_path: Path) -> None:
    calib = load_digits_split(0)[0][:64]
    np.save(tmp_path / "calib.npy", calib)
    model = tmp_path / "mycnn.onnx"
    model.write_bytes(model_path().read_bytes())
    space = str(_space(tmp_path))
    run = subprocess.run([EXE, "dse", "--space", space, "--workloads",
                          f"digits,{model}", "--calib", str(tmp_path / "calib.npy"),
                          "--workers", "1", "--out", str(tmp_path / "a"), "--json"],
                         capture_output=True, text=True, timeout=300, check=True)
    report = json.loads(run.stdout)
    assert report["workloads"] == ["digits", "mycnn"] and report["errors"] == {}
    assert all(s["cycles"] and s["macs"] == 2 * digits_macs() for s in report["summary"])
    # a float model without --calib: every point says why, and the sweep still ends
    run = subprocess.run([EXE, "dse", "--space", space, "--workloads", str(model),
                          "--workers", "1", "--out", str(tmp_path / "b")],
                         capture_output=True, text=True, timeout=300, check=True)
    assert ("mycnn does not compile for 2 of 2 points: FloatModelError: mycnn is a float "
            "model") in run.stdout and "--calib calib.npy" in run.stdout
    for args, message in (
            (["--workloads", "dense64", "--calib", str(tmp_path / "calib.npy")],
             "--calib and --shape are for ONNX workloads"),
            (["--workloads", str(tmp_path / "none.onnx")], "none.onnx: no such ONNX file"),
            (["--workloads", f"{model},{model}"], "'mycnn' is given twice"),
            (["--workloads", "digitz"], "unknown workload 'digitz'")):
        bad = subprocess.run([EXE, "dse", "--space", space, *args, "--out",
                              str(tmp_path / "c")], capture_output=True, text=True,
                             timeout=120)
        assert bad.returncode == 2 and message in bad.stderr, (args, bad.stderr)
        assert "Traceback" not in bad.stderr


def test_unknown_workload_names_the_model_forms() -> None:
    with pytest.raises(UsageError, match="digits, or an ONNX file"):
        workload_by_name(["resnet50"])


@pytest.mark.slow
def test_check_rtl_on_a_model_workload_sums_its_programs(tmp_path: Path) -> None:
    """--check-rtl on the digits CNN for a tiny-sized core: its three programs on the
    RTL against the timing model, within the model's 3 % target."""
    space = tmp_path / "space.yaml"
    space.write_text("block_in: [4]\nblock_out: [4]\ninp_depth: [256]\nwgt_depth: [128]\n"
                     "acc_depth: [256]\nuop_depth: [512]\nmem_bus_width: [32]\n")
    run = subprocess.run([EXE, "dse", "--space", str(space), "--workloads", "digits",
                          "--workers", "1", "--check-rtl", "1", "--out",
                          str(tmp_path / "out"), "--json"], capture_output=True, text=True,
                         timeout=1500, check=True)
    (c,) = json.loads(run.stdout)["rtl_check"]["checked"]
    assert c["workload"] == "digits" and c["rtl_cycles"] > 0
    assert abs(c["error"]) <= 0.03
