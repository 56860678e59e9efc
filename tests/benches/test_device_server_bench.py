"""The device server benchmark (tensorfab.benches.device_server): its JSON line and
figures that hang together."""

from __future__ import annotations

import json

import pytest

from tensorfab.benches import BENCHES
from tensorfab.benches.device_server import main


def test_device_server_bench_last_line_json(capsys: pytest.CaptureFixture[str]) -> None:
    out = main(["--repeat", "3", "--json"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == out
    assert out["target"] == "fsim" and out["repeat"] == 3
    assert 0 < out["server_round_trip_ms"] < out["remote_run_ms"]
    assert out["remote_overhead_ms"] == pytest.approx(
        out["remote_run_ms"] - out["local_run_ms"], abs=1e-3)
    assert out["remote_over_local"] == pytest.approx(
        out["remote_run_ms"] / out["local_run_ms"], rel=1e-2)
    assert out["program_bytes"] > 0 and out["reply_dram_bytes"] > 0
    assert "device-server" in BENCHES
