"""``tensorfab run MODEL.tfm --target virtual|tcp://...``: the digits CNN resident on a
virtual board (directly, and served over TCP), outputs equal to fsim's, per-layer cycles
from the board's counters with their hardware time at the board's clock, the timeline
on the hardware-time axis, and a model too large for the board refused in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tensorfab.cli import main
from tensorfab.hil.targets import VirtualBoardDevice
from tensorfab.models import load_digits_split
from tensorfab.models.digits_cnn import model_path
from tensorfab.runtime.artifact import load_model
from tensorfab.runtime.interpreter import run_program
from tensorfab.runtime.memory_plan import plan_memory
from tensorfab.sim.trace import is_tensorfab_trace

BATCH = 4
#: The virtual board without a board to model runs at 100 MHz (SocSpec.for_board).
VIRTUAL_HZ = 100e6


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("board-run")
    xtr, _, xte, _ = load_digits_split(0)
    np.save(d / "calib.npy", xtr[:256])
    np.save(d / "images.npy", xte[:BATCH])
    tfm = d / "digits.tfm"
    assert main(["compile", str(model_path()), "-o", str(tfm), "--config", "tiny",
                 "--calib", str(d / "calib.npy"), "--shape", f"image={BATCH},1,8,8"]) == 0
    return {"dir": d, "images": d / "images.npy", "tfm": tfm}


def _fsim(files: dict[str, Path]) -> np.ndarray:
    return np.asarray(run_program(load_model(files["tfm"]), [np.load(files["images"])]))


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def _check_timing(summary: dict, clock_hz: float) -> None:
    """Every accelerator program's hardware time is its measured cycles / the clock."""
    timing = summary["accel_timing"]
    assert len(timing) == summary["accel_layers"] == 3
    for t in timing:
        assert not t["estimated"] and t["cycles"] > 0 and t["clock_hz"] == clock_hz
        assert t["hardware_seconds"] == t["cycles"] / clock_hz
    assert summary["total_cycles"] == sum(t["cycles"] for t in timing)
    assert summary["clock_mhz"] == clock_hz / 1e6
    assert summary["hardware_seconds"] == pytest.approx(summary["total_cycles"] / clock_hz)


def test_run_on_the_virtual_board_matches_fsim_in_hardware_time(files, capsys) -> None:
    trace, out = files["dir"] / "board.json", files["dir"] / "board.npy"
    args = ["run", str(files["tfm"]), "--input", str(files["images"]), "--target", "virtual",
            "-o", str(out)]
    assert main([*args, "--trace", str(trace)]) == 0
    printed = capsys.readouterr().out
    np.testing.assert_array_equal(np.load(out), _fsim(files))
    # the same run (-o written by the first: --force): the board's cycles are the same
    assert main([*args, "--json", "--force"]) == 0
    summary = _last_json(capsys.readouterr().out)
    assert summary["target"] == "virtual" and not summary["cycles_estimated"]
    _check_timing(summary, VIRTUAL_HZ)
    # the one-time load (the SoC's build, the weights' upload) is not in the run's time
    assert summary["load_seconds"] > 0 and summary["seconds"] > 0
    # the table: an accelerator row's hardware time (µs) is its cycles at 100 MHz
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in printed.splitlines()
            if line.startswith("│")]
    # columns: #, node, device, op, inputs, output, cycles, hw µs, ...
    accel = [r for r in rows if r[2] == "accel"]
    assert [int(r[6].replace(",", "")) for r in accel] == [
        t["cycles"] for t in summary["accel_timing"]]
    assert [float(r[7].replace(",", "")) for r in accel] == [
        round(t["cycles"] / 100, 2) for t in summary["accel_timing"]]
    assert all(r[7] == "—" for r in rows if r[2] == "cpu")
    assert re.search(r"hardware: accelerator [\d.]+ µs at 100 MHz \([\d,]+ cycles", printed)
    assert "model load" in printed and "(once)" in printed
    # the timeline: valid JSON, nodes one after another on the hardware-time axis
    assert is_tensorfab_trace(trace)
    data = json.loads(trace.read_text())
    assert data["otherData"]["clock_mhz"] == 100.0
    slices = [e for e in data["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
    assert [e["ts"] for e in slices] == pytest.approx(
        [0.0, *np.cumsum([e["dur"] for e in slices])[:-1]])
    programs = [e for e in slices if e["cat"] == "accel"]
    assert [e["args"]["cycles"] for e in programs] == [
        t["cycles"] for t in summary["accel_timing"]]
    for e in programs:  # µs at the board's clock, whatever the simulation's wall time
        assert e["dur"] == pytest.approx(e["args"]["cycles"] / 100.0)
        assert e["args"]["time"] == "hardware"
    counters = [e for e in data["traceEvents"] if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"load busy", "compute busy", "gemm busy",
                                             "alu busy", "store busy"}
    for e in programs:  # each engine's busy cycles (board CSRs) during its program
        busy = [c for c in counters if c["ts"] == e["ts"] and c["args"]["cycles"]]
        assert busy and all(c["args"]["cycles"] <= e["args"]["cycles"] for c in busy)


def test_run_on_a_served_virtual_board_keeps_its_clock(files, serve, capsys) -> None:
    """tcp:// with --token: the board's clock crosses the device server."""
    board = VirtualBoardDevice(mem_bytes=1 << 16)
    server = serve(board)
    out = files["dir"] / "remote.npy"
    assert main(["run", str(files["tfm"]), "--input", str(files["images"]), "--target",
                 server.address, f"--token={server.token}", "-o", str(out), "--json"]) == 0
    np.testing.assert_array_equal(np.load(out), _fsim(files))
    _check_timing(_last_json(capsys.readouterr().out), VIRTUAL_HZ)


def test_fsim_is_untimed_its_hardware_time_unknown(files, serve, capsys, monkeypatch
                                                   ) -> None:
    """fsim (here behind a device server, its token from TENSORFAB_TOKEN): estimated
    cycles only, so no hardware time."""
    server = serve("fsim")
    monkeypatch.setenv("TENSORFAB_TOKEN", server.token)
    out = files["dir"] / "fsim.npy"
    args = ["run", str(files["tfm"]), "--input", str(files["images"]), "--target",
            server.address, "-o", str(out)]
    assert main(args) == 0
    assert "hardware: accelerator — (" in capsys.readouterr().out
    np.testing.assert_array_equal(np.load(out), _fsim(files))
    assert main([*args, "--json", "--force"]) == 0  # (-o written by the first run)
    summary = _last_json(capsys.readouterr().out)
    assert summary["cycles_estimated"] and summary["hardware_seconds"] is None
    assert all(t["hardware_seconds"] is None for t in summary["accel_timing"])


def test_a_model_larger_than_the_board_is_one_line(files, capsys) -> None:
    needed = plan_memory(load_model(files["tfm"])).size
    assert needed > 8192
    assert main(["run", str(files["tfm"]), "--input", str(files["images"]),
                 "--target", "virtual://?mem_bytes=8192"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert (f"digits.tfm does not fit virtual://?mem_bytes=8192: it needs {needed} bytes"
            in err and "the board has 8192 (8 KiB)" in err
            and f"{needed - 8192} bytes too many" in err), err


def test_token_only_for_networked_targets(files, capsys) -> None:
    assert main(["run", str(files["tfm"]), "--input", str(files["images"]),
                 "--token", "x"]) == 2
    assert "--token applies to tcp://, tracker://, socket:// targets, not 'fsim'" in (
        capsys.readouterr().err)


def test_a_board_of_another_config_is_refused_before_its_build(files, capsys) -> None:
    assert main(["run", str(files["tfm"]), "--input", str(files["images"]),
                 "--target", "virtual://ulx3s-25f"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: virtual://ulx3s-25f runs ecp5-25f, the program is for tiny: "
                   "compile for ecp5-25f (--config ecp5-25f)")


def test_socket_target_sends_the_token_of_its_url() -> None:
    """``socket://HOST:PORT?token=T`` opens the link with ``TOKEN T`` (what a virtual
    board's socket expects first); this listener answers nothing."""
    import socket
    import threading

    from tensorfab.hil.errors import HilError
    from tensorfab.hil.targets import open_link_board

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    got: list[bytes] = []

    def accept() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5)
            data = b""
            while not data.endswith(b"\n"):
                data += conn.recv(1)
            got.append(data)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    with pytest.raises(HilError):
        open_link_board(f"socket://127.0.0.1:{port}?token=s3cret", timeout=0.05,
                        retries=1)
    thread.join(5)
    listener.close()
    assert got == [b"TOKEN s3cret\n"]


def test_a_served_board_too_small_is_one_line(files, serve, capsys) -> None:
    """Behind a device server the board refuses the memory (before its SoC is built),
    and the error comes back in one line naming both sizes."""
    server = serve(VirtualBoardDevice(mem_bytes=8192))
    needed = plan_memory(load_model(files["tfm"])).size
    assert main(["run", str(files["tfm"]), "--input", str(files["images"]), "--target",
                 server.address, f"--token={server.token}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert (f"{server.address}: UsageError: virtual: a device memory of {needed} bytes "
            "does not fit the board's 8192 bytes") in err, err
