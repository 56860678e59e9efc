"""advise: the digits model on the ULX3S 85F, device memory against the board's 64 KiB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.dse.advice import advise
from tensorfab.isa import PRESETS
from tensorfab.models.digits_cnn import load_digits_split, model_path
from tensorfab.runtime.memory_plan import plan_memory


@pytest.fixture(scope="module")
def calib() -> np.ndarray:
    return load_digits_split(0)[0][:256]


def test_digits_one_image_fits_and_tiny_is_the_config_to_build(calib: np.ndarray) -> None:
    out = advise(str(model_path()), "ulx3s-85f", calib, {"image": (1, 1, 8, 8)},
                 ["tiny", "small", "default"])
    # the 85F's device memory is its SDRAM: 32 MB, of which tiny's 24-bit addresses reach
    # 16 MB
    assert (out["board_memory"], out["board_memory_bytes"]) == ("sdram", 32 << 20)
    assert out["clock_mhz"] == 70.0
    rows = {r["config"]: r for r in out["configs"]}
    assert [rows[n]["board_memory_bytes"] for n in ("tiny", "small", "default")] == [
        16 << 20, 32 << 20, 32 << 20]
    for name in ("tiny", "default"):
        ref = compile_onnx(str(model_path()), config=PRESETS[name], calibration=calib,
                           input_shapes={"image": (1, 1, 8, 8)})
        assert rows[name]["device_memory_bytes"] == plan_memory(ref.program).size
        assert rows[name]["fits_memory"]
        r = rows[name]
        assert r["estimated_latency_ms"] == pytest.approx(r["estimated_cycles"] / 70e3)
    # tiny: a real build; default: the resource model's estimate, over the 85F's 156 DSPs
    # (256 GEMM multipliers alone)
    assert rows["tiny"]["resources"] == "built" and rows["tiny"]["fits_board"] is True
    assert rows["default"]["resources"] == "estimated"
    assert rows["default"]["fits_board"] is False and rows["default"]["dsp"] > 256
    assert any(o.startswith("DSP ") for o in rows["default"]["over"])
    # tiny's SDRAM build (76.1 MHz), whose counts are docs/fpga.md's
    assert (rows["tiny"]["built_memory"], rows["tiny"]["resource_counts"]) == (
        "sdram", "built")
    assert [rows["tiny"][k] for k in ("lut", "ff", "dsp", "bram")] == [16304, 8076, 36, 18]
    assert (rows["tiny"]["fmax_mhz"], rows["tiny"]["meets_clock"]) == (76.1, True)
    # on-chip: the same figures against the 85F's 64 KiB of block RAM, and the on-chip
    # build's counts (docs/fpga.md's table)
    on_chip = advise(str(model_path()), "ulx3s-85f", calib, {"image": (1, 1, 8, 8)},
                     ["tiny"], memory="on-chip")
    assert (on_chip["board_memory"], on_chip["board_memory_bytes"]) == ("on-chip", 64 << 10)
    (tiny_on_chip,) = on_chip["configs"]
    assert tiny_on_chip["device_memory_bytes"] == rows["tiny"]["device_memory_bytes"]
    assert tiny_on_chip["resource_counts"] == "built"
    assert [tiny_on_chip[k] for k in ("lut", "ff", "dsp", "bram")] == [16872, 6655, 36, 50]
    # the bigger core takes fewer cycles but does not fit: tiny is the one to build
    assert rows["default"]["estimated_cycles"] < rows["tiny"]["estimated_cycles"]
    assert out["build"] == "tiny" and out["fastest_fitting_memory"] == "default"
    assert "estimated" in out["resources_source"]
    # small fits the 85F by its estimate (and its placed build's counts), but its real
    # build did not route (docs/fpga.md): never recommended though it is faster
    small = rows["small"]
    assert small["resources"] == "built" and small["fits_board"] is False
    assert small["dsp"] == 100 and small["lut"] < 83640
    assert any("did not route" in o for o in small["over"])
    assert small["estimated_cycles"] < rows["tiny"]["estimated_cycles"]


def test_the_85f_builds_its_1x8x8_with_sdram_and_flags_builds_below_its_clock(
        calib: np.ndarray) -> None:
    from tensorfab.dse.resource_model import REPORTED_BUILDS

    out = advise(str(model_path()), "ulx3s-85f", calib, {"image": (1, 1, 8, 8)},
                 ["tiny", "ecp5-85f"])
    rows = {r["config"]: r for r in out["configs"]}
    # the board's default: the 1x8x8 built with its SDRAM (99.9 MHz at a 100 MHz
    # constraint, above the board's 70)
    fast = rows["ecp5-85f"]
    assert (fast["fmax_mhz"], fast["meets_clock"], fast["built_memory"]) == (
        99.9, True, "sdram")
    assert fast["estimated_cycles"] < rows["tiny"]["estimated_cycles"]
    assert out["build"] == "ecp5-85f" and out["build_resources"] == "built"
    # with on-chip memory the 1x8x8's build at the board's 70 MHz (router1) reached
    # 73.08 MHz, tiny's at 60 MHz only 63.6: the 1x8x8 is the one to build
    on_chip = advise(str(model_path()), "ulx3s-85f", calib, {"image": (1, 1, 8, 8)},
                     ["tiny", "ecp5-85f"], memory="on-chip")
    rows = {r["config"]: r for r in on_chip["configs"]}
    build = next(b for b in REPORTED_BUILDS if (b["board"], b["config"], b["memory"])
                 == ("ulx3s-85f", "ecp5-85f", "on-chip"))
    on_chip_fast = rows["ecp5-85f"]
    assert on_chip_fast["fmax_mhz"] == build["fmax_mhz"] == 73.08
    assert on_chip["clock_mhz"] == 70.0
    assert on_chip_fast["meets_clock"] is True and on_chip_fast["fits_board"] is True
    assert (rows["tiny"]["fmax_mhz"], rows["tiny"]["meets_clock"]) == (63.6, False)
    assert any("below the board's 70 MHz" in o for o in rows["tiny"]["over"])
    assert on_chip["build"] == "ecp5-85f"
    assert on_chip["fastest_fitting_memory"] == "ecp5-85f"


def test_a_symbolic_batch_is_advised_at_batch_one_other_symbolic_dims_are_refused(
        tmp_path: Path, calib: np.ndarray) -> None:
    import onnx

    from tensorfab.compiler.model_compile import ModelCompileError

    # the digits model's input is (N, 1, 8, 8)
    out = advise(str(model_path()), "ulx3s-85f", calib, None, ["tiny"])
    fixed = advise(str(model_path()), "ulx3s-85f", calib, {"image": (1, 1, 8, 8)}, ["tiny"])
    assert out["batch_one"] == ["image"] and fixed["batch_one"] == []
    assert out["configs"] == fixed["configs"]
    # a symbolic dim other than the batch is the user's to choose
    model = onnx.load(str(model_path()))
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"
    onnx.save(model, tmp_path / "digits_h.onnx")
    with pytest.raises(ModelCompileError, match=r"--shape image=1,1,D2,8"):
        advise(str(tmp_path / "digits_h.onnx"), "ulx3s-85f", calib, None, ["tiny"])


def test_host_traffic_per_config_is_what_a_resident_run_counts(calib: np.ndarray) -> None:
    from tensorfab.runtime.resident import ResidentModel
    from tensorfab.sim import FunctionalSimulator

    shapes = {"image": (1, 1, 8, 8)}
    out = advise(str(model_path()), "ulx3s-85f", calib, shapes, ["tiny", "default"])
    for row in out["configs"]:
        ref = compile_onnx(str(model_path()), config=PRESETS[row["config"]],
                           calibration=calib, input_shapes=shapes)
        with ResidentModel(ref.program, FunctionalSimulator()) as model:
            model.run([calib[:1].reshape(1, 1, 8, 8)])
            counted = model.last_run
        assert (row["host_bytes_written"], row["host_bytes_read"]) == (counted.written,
                                                                      counted.read)
        assert row["host_bytes"] == counted.total > 0


def test_digits_batch_64_exceeds_the_85f_memory_and_is_flagged(tmp_path: Path,
                                                                calib: np.ndarray) -> None:
    """64 images need more than the 85F's 64 KiB of block RAM (``--memory on-chip``) and
    fit its SDRAM, the board's device memory."""
    np.save(tmp_path / "calib.npy", calib)
    args = [str(Path(sys.executable).parent / "tensorfab"), "advise", str(model_path()),
            "--board", "ulx3s-85f", "--calib", str(tmp_path / "calib.npy"), "--shape",
            "image=64,1,8,8", "--configs", "tiny", "--json"]
    out = json.loads(subprocess.run([*args, "--memory", "on-chip"], capture_output=True,
                                    text=True, timeout=300, check=True).stdout)
    (tiny,) = out["configs"]
    assert tiny["device_memory_bytes"] > 64 * 1024
    assert tiny["fits_memory"] is False
    assert out["build"] is None and out["fastest_fitting_memory"] is None
    out = json.loads(subprocess.run(args, capture_output=True, text=True, timeout=300,
                                    check=True).stdout)
    (in_sdram,) = out["configs"]
    assert in_sdram["device_memory_bytes"] == tiny["device_memory_bytes"]
    assert in_sdram["fits_memory"] is True and out["build"] == "tiny"
    bad = subprocess.run([*args[:3], "--board", "icebreaker", "--memory", "sdram"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "icebreaker: no SDRAM on this board" in bad.stderr


def test_a_model_problem_is_one_error_not_one_per_config(calib: np.ndarray) -> None:
    from tensorfab.compiler.model_compile import ModelCompileError

    # (a symbolic dim other than the batch is named once, before any config is
    # compiled: test_a_symbolic_batch_is_advised_at_batch_one_...)
    # a float model with no calibration fails every config the same way: one error
    with pytest.raises(ModelCompileError, match="is a float model") as info:
        advise(str(model_path()), "ulx3s-85f", None, {"image": (1, 1, 8, 8)},
               ["tiny", "small"])
    # the fix named is advise's own option, not compile's --config
    assert "--calib" in str(info.value) and "--config" not in str(info.value)


def test_a_json_config_is_named_by_its_name_and_an_estimated_pick_says_so(
        tmp_path: Path, calib: np.ndarray) -> None:
    """A config given as a JSON file is a row under its own name; the build line gives
    the file ``fpga build --config`` takes and says when the pick's fit is only the
    resource model's estimate."""
    from tensorfab.fpga_builds.board_configs import board_config

    mine = board_config("ecp5-85f").replace(name="e85-lite", inp_depth=256)
    path = tmp_path / "lite.json"
    path.write_text(mine.to_json())
    np.save(tmp_path / "calib.npy", calib)
    out = advise(str(model_path()), "ulx3s-85f", calib, {"image": (1, 1, 8, 8)},
                 ["tiny", str(path)])
    rows = {r["config"]: r for r in out["configs"]}
    assert set(rows) == {"tiny", "e85-lite"}
    assert rows["e85-lite"]["config_file"] == str(path) and rows["tiny"]["config_file"] is None
    assert rows["e85-lite"]["resources"] == "estimated" and rows["e85-lite"]["fits_board"]
    assert rows["e85-lite"]["estimated_cycles"] < rows["tiny"]["estimated_cycles"]
    assert (out["build"], out["build_config"], out["build_resources"]) == (
        "e85-lite", str(path), "estimated")
    text = subprocess.run(
        [str(Path(sys.executable).parent / "tensorfab"), "advise", str(model_path()),
         "--board", "ulx3s-85f", "--calib", str(tmp_path / "calib.npy"), "--shape",
         "image=1,1,8,8", "--configs", f"tiny,{path}"],
        capture_output=True, text=True, timeout=300, check=True).stdout
    # a file whose name is taken by a preset in the list is told apart by its path
    taken = tmp_path / "taken.json"
    taken.write_text(mine.replace(name="tiny").to_json())
    out = advise(str(model_path()), "ulx3s-85f", calib, {"image": (1, 1, 8, 8)},
                 ["tiny", str(taken)])
    assert [r["config"] for r in out["configs"]] == ["tiny", str(taken)]
    assert out["configs"][1]["resources"] == "estimated"  # not tiny's real build
    assert str(path) not in text.split("build:")[0]  # the table names it e85-lite
    assert (f"build: e85-lite ({path}); its fit is the resource model's estimate: "
            f"`tensorfab fpga build --board ulx3s-85f --config {path} --memory sdram` "
            "confirms it") in text


def test_the_orangecrab_85f_builds_its_1x8x8_at_56_mhz(calib: np.ndarray) -> None:
    """The OrangeCrab 85F's default build (ecp5-85f, on-chip memory, 56 MHz) is the one
    advised: fewer cycles than tiny, in its 64 KiB, its recorded build above its clock."""
    out = advise(str(model_path()), "orangecrab-85f", calib, {"image": (1, 1, 8, 8)},
                 ["tiny", "ecp5-85f"])
    assert (out["board_memory"], out["board_memory_bytes"], out["clock_mhz"]) == (
        "on-chip", 64 << 10, 56.0)
    rows = {r["config"]: r for r in out["configs"]}
    big = rows["ecp5-85f"]
    assert big["fits_memory"] and big["fits_board"] and big["resources"] == "built"
    assert (big["fmax_mhz"], big["meets_clock"]) == (79.18, True)
    assert big["estimated_cycles"] < rows["tiny"]["estimated_cycles"]
    assert out["build"] == "ecp5-85f"


def test_configs_with_empty_names(tmp_path: Path, calib: np.ndarray,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """--configs 'tiny,' was refused as HwConfig.name = ''; an empty name is left out
    (as dse and verify do), and --configs naming none is refused as such."""
    from tensorfab.cli import main

    np.save(tmp_path / "calib.npy", calib)
    base = ["advise", str(model_path()), "--board", "ulx3s-85f", "--calib",
            str(tmp_path / "calib.npy"), "--shape", "image=1,1,8,8", "--json"]
    assert main([*base, "--configs", "tiny,"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["config"] for r in out["configs"]] == ["tiny"]
    assert main([*base, "--configs", ","]) == 2
    assert "--configs ',' names no config" in capsys.readouterr().err
