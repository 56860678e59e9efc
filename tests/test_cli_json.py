"""The command line's one convention for results: with ``--json`` stdout is one JSON
object and nothing else (notes go to stderr); without it, a summary for people and no
JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tensorfab.cli import main
from tensorfab.demo import example_path
from tensorfab.models import load_digits_split
from tensorfab.models.digits_cnn import model_path

#: A ``fpga build`` report (the fields the command prints), as flow.build_bitstream
#: returns it.
REPORT = {
    "board": "ulx3s-25f", "config": "ecp5-25f", "family": "ecp5",
    "resources": {"ALU54B": {"used": 0, "available": 14},
                  "LUT": {"used": 12803, "available": 24288},
                  "FF": {"used": 6241, "available": 24288},
                  "DSP": {"used": 20, "available": 28},
                  "BRAM": {"used": 19, "available": 56},
                  "PLL": {"used": 1, "available": 2},
                  "USRMCLK": {"used": 0, "available": 1}},
    "clocks": {"$glbnet$clk": {"achieved_mhz": 96.12, "target_mhz": 80.0}},
    "fmax_mhz": 96.12, "target_mhz": 80.0, "timing_met": True, "macs_per_cycle": 8,
    "seconds": 902.7, "bitstream": "b/top.bit", "log": "b/build.log",
}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("json")
    xtr, _, xte, _ = load_digits_split(0)
    np.save(d / "calib.npy", xtr[:64])
    np.save(d / "images.npy", xte[:2])
    return {"dir": d, "calib": d / "calib.npy", "images": d / "images.npy"}


@pytest.fixture
def fake_build(monkeypatch):
    from tensorfab.fpga_builds import flow

    monkeypatch.setattr(flow, "build_bitstream", lambda *a, **kw: dict(REPORT))


def _commands(files: dict[str, Path]) -> list[list[str]]:
    tfm = files["dir"] / "d.tfm"
    return [
        ["compile", str(model_path()), "-o", str(tfm), "--config", "tiny", "--calib",
         str(files["calib"]), "--shape", "image=2,1,8,8"],
        ["run", str(tfm), "--input", str(files["images"])],
        ["inspect", str(tfm)],
        ["inspect", str(model_path())],
        ["config", "show", "tiny"],
        ["config", "list"],
        ["asm", str(example_path()), "-o", str(files["dir"] / "ex.bin")],
        ["hw", "verilog", "--config", "tiny", "-o", str(files["dir"] / "core.v")],
        ["fpga", "build", "--board", "ulx3s-25f", "-o", str(files["dir"] / "b")],
    ]


def test_json_only_with_json(files, capsys, fake_build) -> None:
    for argv in _commands(files):
        assert main([*argv, "--json"]) == 0, argv
        out = capsys.readouterr().out
        assert isinstance(json.loads(out), dict), argv  # one object, nothing else
        assert main(argv) == 0, argv
        out = capsys.readouterr().out
        assert out.strip() and not any(line.startswith(("{", "[")) for line in
                                       out.splitlines()), (argv, out)


def test_bench_json_only_with_json(capsys, monkeypatch) -> None:
    import tensorfab.benches.conv2d as bench

    monkeypatch.setattr(bench, "run_conv2d_bench",
                        lambda target="rtl", **kw: {"bench": "conv2d", "target": target})
    assert main(["bench", "conv2d", "--target", "fsim", "--plot", "", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"bench": "conv2d", "target": "fsim"}
    assert main(["bench", "conv2d", "--target", "fsim", "--plot", ""]) == 0
    assert capsys.readouterr().out.splitlines() == ["bench   conv2d", "target  fsim"]
