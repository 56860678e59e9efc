"""Board configurations by name on every command (``config``, ``compile``, ``run``), and
``compile --board``: the model's device memory checked against the board's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tensorfab.cli import main
from tensorfab.fpga_builds.boards import BOARDS
from tensorfab.isa import PRESETS
from tensorfab.models import load_digits_split
from tensorfab.models.digits_cnn import model_path
from tensorfab.runtime.artifact import load_model
from tensorfab.runtime.memory_plan import OutOfDeviceMemory, plan_memory


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("board")
    xtr, _, xte, _ = load_digits_split(0)
    np.save(d / "calib.npy", xtr[:256])
    np.save(d / "images.npy", xte[:1])
    return {"dir": d, "calib": d / "calib.npy", "images": d / "images.npy"}


def last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def compile_args(files: dict[str, Path], out: Path, batch: int, *more: str) -> list[str]:
    return ["compile", str(model_path()), "-o", str(out), "--calib", str(files["calib"]),
            "--shape", f"image={batch},1,8,8", "--json", *more]


def test_config_list_and_show_know_the_board_configs(capsys) -> None:
    assert main(["config", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [*PRESETS, "ecp5-25f", "ecp5-25f-4x4",
                                                   "ecp5-85f", "up5k"]
    assert [line.endswith("(board config)") for line in lines] == [False] * 4 + [True] * 4
    assert main(["config", "show", "ecp5-25f", "--json"]) == 0
    cfg = json.loads(capsys.readouterr().out)["config"]
    assert (cfg["name"], cfg["block_in"], cfg["block_out"]) == ("ecp5-25f", 4, 2)


def test_unknown_config_lists_presets_board_configs_and_json_files(files, capsys) -> None:
    for args in (["config", "show", "ecp5-52f"],
                 compile_args(files, files["dir"] / "x.tfm", 1, "--config", "ecp5-52f"),
                 ["run", str(model_path()), "--input", str(files["images"]), "--config",
                  "ecp5-52f"]):
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert "'ecp5-52f'" in err and "tiny, small, default, large" in err
        assert "ecp5-25f, ecp5-25f-4x4, ecp5-85f, up5k" in err and "JSON config file" in err
    assert not (files["dir"] / "x.tfm").exists()
    assert main(["config", "show", str(files["dir"] / "mine.json")]) == 2
    assert "mine.json': no such JSON config file" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["ecp5-25f", "ecp5-25f-4x4", "up5k"])
def test_compile_and_run_for_a_board_config_by_name(files, capsys, name: str) -> None:
    out = files["dir"] / f"digits-{name}.tfm"
    assert main(compile_args(files, out, 1, "--config", name)) == 0
    summary = last_json(capsys)
    assert (summary["config"], summary["accel_programs"]) == (name, 3)
    assert main(["run", str(out), "--input", str(files["images"]), "--config", name,
                 "--json"]) == 0
    from_tfm = last_json(capsys)
    assert from_tfm["accel_layers"] == 3
    assert main(["run", str(model_path()), "--input", str(files["images"]), "--calib",
                 str(files["calib"]), "--config", name, "--json"]) == 0
    assert last_json(capsys)["outputs"] == from_tfm["outputs"]


@pytest.mark.parametrize(("board", "batch"), [("ulx3s-85f", 40), ("icebreaker", 16),
                                              ("icebreaker", 32)])
def test_compile_for_a_board_that_is_too_small_is_refused(files, capsys, board: str,
                                                          batch: int) -> None:
    # the digits CNN needs more than ulx3s-85f's 64 KiB with tiny for 40 images, more
    # than the iCEBreaker's 32 KiB with up5k for 16, more than up5k's whole 16-bit address
    # space for 32
    b = BOARDS[board]
    reference = files["dir"] / f"digits-{b.config}-{batch}.tfm"
    assert main(compile_args(files, reference, batch, "--config", b.config)) == 0
    capsys.readouterr()
    try:
        plan = plan_memory(load_model(reference))
        assert plan is not None
        needed, split = plan.size, f" ({plan.static_bytes} static + "
    except OutOfDeviceMemory as e:
        needed, split = e.needed, ""
    assert needed > b.mem_bytes and (split == "") == (batch == 32)
    out = files["dir"] / f"digits-{board}-{batch}.tfm"
    on_chip = ["--memory", "on-chip"] if BOARDS[board].sdram_bytes else []
    assert main(compile_args(files, out, batch, "--board", board, *on_chip)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"needs {needed} bytes of device memory{split}" in err and board in err
    assert f"has {b.mem_bytes}" in err
    assert f"{needed - b.mem_bytes} bytes too many" in err
    # the ULX3S's SDRAM is named with its size (16 MB within tiny's 24-bit addresses)
    assert err.endswith("; its SDRAM gives a model 16777216 bytes (--memory sdram)") == (
        board == "ulx3s-85f"), err
    assert not out.exists()


def test_compile_for_a_board_with_sdram_checks_the_sdram(files, capsys) -> None:
    """What does not fit the ULX3S-85F's 64 KiB fits its SDRAM, the board's device
    memory by default (``--memory sdram`` says so); the SDRAM of a board without one is
    refused, and so is ``--memory`` without a board."""
    for more in ([], ["--memory", "sdram"]):
        out = files["dir"] / f"digits-ulx3s-85f-sdram{len(more)}.tfm"
        assert main(compile_args(files, out, 40, "--board", "ulx3s-85f", *more)) == 0
        summary = last_json(capsys)
        plan = plan_memory(load_model(out))
        assert plan is not None and plan.size > BOARDS["ulx3s-85f"].mem_bytes
        # 16 MB of the 32 MB chip: what tiny's 24-bit addresses reach
        assert (summary["board_memory"], summary["board_memory_bytes"]) == ("sdram", 1 << 24)
        assert summary["device_memory_bytes"] == plan.size
    out = files["dir"] / "digits-icebreaker.tfm"
    assert main(compile_args(files, out, 1, "--board", "icebreaker")) == 0
    assert last_json(capsys)["board_memory"] == "on-chip"  # no SDRAM: on-chip by default
    for more, says in ((["--board", "icebreaker", "--memory", "sdram"],
                        "icebreaker: no SDRAM on this board (boards with one: ulx3s-85f, "
                        "ulx3s-25f)"),
                       (["--config", "tiny", "--memory", "sdram"],
                        "--memory sdram checks the fit in a board's memory: give --board")):
        bad = files["dir"] / "digits-no-sdram.tfm"
        assert main(compile_args(files, bad, 1, *more)) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and len(err.splitlines()) == 1, err
        assert not bad.exists()


@pytest.mark.parametrize(("board", "config"), [("ulx3s-25f", None), ("ulx3s-85f", "up5k")])
def test_compile_for_a_board_that_fits(files, capsys, board: str, config: str | None) -> None:
    """On-chip too (``--memory on-chip``); up5k's 16-bit addresses reach 64 KiB of the
    85F's SDRAM."""
    out = files["dir"] / f"digits-{board}.tfm"
    more = ["--board", board] + (["--config", config] if config else [])
    assert main(compile_args(files, out, 1, *more)) == 0
    summary = last_json(capsys)
    plan = plan_memory(load_model(out))
    assert plan is not None
    assert summary["config"] == (config or BOARDS[board].config)
    assert summary["board"] == board
    reach = 1 << (16 if config == "up5k" else 24)
    assert (summary["board_memory"], summary["board_memory_bytes"]) == ("sdram", reach)
    assert summary["device_memory_bytes"] == plan.size
    assert main(compile_args(files, out, 1, *more, "--memory", "on-chip", "--force")) == 0
    summary = last_json(capsys)
    assert (summary["board_memory"], summary["board_memory_bytes"]) == (
        "on-chip", BOARDS[board].mem_bytes)
    assert summary["device_memory_bytes"] == plan.size <= BOARDS[board].mem_bytes


def test_unknown_board_is_a_one_line_error(files, capsys) -> None:
    assert main(compile_args(files, files["dir"] / "y.tfm", 1, "--board", "ulx3s-99f")) == 2
    err = capsys.readouterr().err.strip()
    assert "'ulx3s-99f'" in err and "ulx3s-25f" in err and len(err.splitlines()) == 1
