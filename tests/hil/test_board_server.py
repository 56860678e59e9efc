"""The virtual board behind TCP and a pty: the host reaches it through pyserial, as a
board behind its USB-serial port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from support.isa_programs import directed_programs

from tensorfab.hil.board import BoardDevice
from tensorfab.hil.board_server import BoardServer
from tensorfab.hil.errors import TOKEN_ENV, HilError, LinkError, TokenError
from tensorfab.hil.virtual import LinkFaults, SocSpec, VirtualBoard
from tensorfab.isa import PRESETS, UsageError
from tensorfab.isa.device import open_device
from tensorfab.sim import FunctionalSimulator

CFG = PRESETS["tiny"]
MEM = 1 << 16


@pytest.fixture(scope="module")
def board() -> VirtualBoard:
    vb = VirtualBoard(SocSpec.for_board(None, CFG, mem_bytes=MEM))
    yield vb
    vb.close()


def _check(dev: BoardDevice) -> None:
    prog = directed_programs(CFG)["gemm_vt2"]
    got, ref = dev.run(prog), FunctionalSimulator().run(prog)
    assert np.array_equal(got.dram, ref.dram)
    assert got.counters.gemm_uops == ref.counters.gemm_uops


def test_tcp_with_token_runs_programs(board: VirtualBoard) -> None:
    with BoardServer(board, pty=False) as server:
        dev = open_device(server.address, token=server.token, timeout=2.0)
        assert isinstance(dev, BoardDevice) and dev.info.mem_bytes == MEM
        _check(dev)
        dev.close()


def test_pty_is_a_serial_port(board: VirtualBoard) -> None:
    with BoardServer(board) as server:
        assert server.pty_path and (os.stat(server.pty_path).st_mode & 0o777) == 0o600
        dev = open_device(f"serial://{server.pty_path}", timeout=2.0)
        _check(dev)
        dev.close()


def test_faults_on_the_socket_are_recovered(board: VirtualBoard) -> None:
    faults = LinkFaults(bit_flip=1e-3, drop=0.01, delay=0.01, seed=3)
    with BoardServer(board, pty=False, faults=faults) as server:
        dev = open_device(server.address, token=server.token, timeout=0.05, retries=12)
        _check(dev)
        assert dev.link.stats.recovered > 0 and dev.link.stats.reported == 0
        dev.close()


def test_wrong_token_is_refused(board: VirtualBoard) -> None:
    with BoardServer(board, pty=False, token="right") as server:
        with pytest.raises(TokenError):
            open_device(server.address, token="wrong", timeout=0.2, retries=1)
        assert server.refused == 1
        with socket.create_connection(("127.0.0.1", server.port)) as s:
            s.sendall(b"TOKEN wrong\n")
            assert s.recv(100).startswith(b"REFUSED: wrong or missing token")


def test_a_refusal_names_its_reason(board: VirtualBoard, monkeypatch) -> None:
    """The server's REFUSED line, lost by pyserial when the socket closes ("read failed:
    read failed: socket disconnected"), is what the client reports: a wrong token, a
    missing one (refused at once, not after the hello timeout, and even with a
    timeout shorter than the server's answer), a board in use."""
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with BoardServer(board, pty=False, token="right", hello_timeout=30) as server:
        refused = (f"{server.address}: the board refused the connection: wrong or missing "
                   f"token: pass token=... or set {TOKEN_ENV}")
        for token, timeout in (("wrong", 2.0), (None, 2.0), ("wrong", 0.001)):
            start = time.monotonic()
            with pytest.raises(TokenError) as info:
                open_device(server.address, token=token, timeout=timeout, retries=3)
            assert str(info.value).startswith(refused), info.value
            assert time.monotonic() - start < 10
        dev = open_device(f"{server.address}?token=right", timeout=2.0)
        with pytest.raises(LinkError, match=f"{server.address}: the board refused the "
                                            "connection: the board is in use$"):
            open_device(server.address, token="right", timeout=2.0)
        _check(dev)
        dev.close()
        assert server.refused == 4


def test_the_command_line_names_its_token_option(board: VirtualBoard, monkeypatch,
                                                capsys) -> None:
    """`tensorfab sim --target socket://...` with a wrong or no token: one line saying
    the board refused it and naming --token."""
    from tensorfab.cli import main
    from tensorfab.example import example_path

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with BoardServer(board, pty=False, token="right") as server:
        for token in (["--token", "wrong"], []):
            capsys.readouterr()
            assert main(["sim", str(example_path()), "--target", server.address,
                         *token]) == 2
            assert capsys.readouterr().err == (
                f"error: {server.address}: the board refused the connection: wrong or "
                "missing token: pass --token or set TENSORFAB_TOKEN (the server prints "
                "its token when it starts)\n")


def test_serving_a_board_names_the_targets_token_query(board: VirtualBoard, monkeypatch,
                                                      capsys) -> None:
    """`tensorfab serve --device socket://...` (and DeviceServer('socket://...')) without
    the board's token said 'pass token=... or set TENSORFAB_TOKEN', but serve's --token
    and DeviceServer's token= are the server's own: the board's token goes in the
    target's ?token= query, which the message now says."""
    from tensorfab.cli import main
    from tensorfab.hil.server import DeviceServer

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with BoardServer(board, pty=False, token="right") as server:
        refused = (f"{server.address}: the board refused the connection: wrong or missing "
                   f"token: pass the board's token in ")
        for device in (server.address, f"{server.address}?token=wrong"):
            capsys.readouterr()
            assert main(["serve", "--device", device, "--token", "mine"]) == 2
            assert capsys.readouterr().err == (
                f"error: {refused}--device '{server.address}?token=...' (--token is this "
                f"server's own) or set {TOKEN_ENV} (the server prints its token when it "
                "starts)\n")
            with pytest.raises(TokenError) as info:
                DeviceServer(device)
            assert str(info.value).startswith(
                f"{refused}the target's query ('{server.address}?token=...') or set "), info
        assert "wrong" not in str(info.value).replace("wrong or missing", "")


def test_silent_client_is_dropped_and_a_second_client_refused(board: VirtualBoard) -> None:
    with BoardServer(board, pty=False, token="t", hello_timeout=0.3) as server:
        silent = socket.create_connection(("127.0.0.1", server.port))
        time.sleep(0.8)
        # told why, then closed by the server (it was closed without a word)
        assert silent.recv(200) == (b"REFUSED: no token line within 0.3 s (send 'TOKEN "
                                    b"<token>' and a newline first)\n")
        assert silent.recv(10) == b""
        silent.close()
        dev = open_device(server.address, token="t", timeout=2.0)
        with socket.create_connection(("127.0.0.1", server.port)) as s:
            s.sendall(b"TOKEN t\n")
            assert s.recv(100).startswith(b"REFUSED: the board is in use")
        _check(dev)
        dev.close()


def test_non_loopback_bind_needs_a_token(board: VirtualBoard) -> None:
    with pytest.raises(HilError, match="needs an explicit token"):
        BoardServer(board, host="0.0.0.0", pty=False)


@pytest.mark.parametrize("token", ["", "  ", "t\n"])
def test_a_token_a_token_line_cannot_carry_is_refused(board: VirtualBoard,
                                                      token: str) -> None:
    """BoardServer(token="") served a board that any client sending 'TOKEN ' and a
    newline could use, on any address."""
    with pytest.raises(HilError, match=r"virtual board: (the token must not be empty|token)"):
        BoardServer(board, host="0.0.0.0", token=token, pty=False)


def test_board_virtual_command(tmp_path: Path) -> None:
    """`tensorfab board virtual` as a process: prints where it listens; a program runs
    through it; SIGINT ends it quietly."""
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "tensorfab.cli", "board", "virtual",
                             "--config", "tiny", "--mem-bytes", str(MEM), "--no-pty"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        lines: dict[str, str] = {}
        deadline = time.monotonic() + 600
        while "token: " not in lines and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            for key in ("listening at ", "token: "):
                if line.startswith(key):
                    lines[key] = line[len(key):].strip()
        assert "token: " in lines, proc.stderr.read() if proc.poll() is not None else lines
        dev = open_device(lines["listening at "], token=lines["token: "], timeout=2.0)
        _check(dev)
        dev.close()
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_board_virtual_refuses_bad_options_before_building(monkeypatch, capsys) -> None:
    """A port in use, a probability above 1, a port out of range or a size of 0 were
    found only after the Verilator build (minutes the first time), or not at all; each
    is now one line before the build starts."""
    import socket

    import tensorfab.hil.virtual as virtual
    from tensorfab.cli import main

    def no_build(*_a: object, **_k: object) -> None:
        raise AssertionError("the board was built")

    monkeypatch.setattr(virtual, "VirtualBoard", no_build)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        cases = [(["--port", str(port)], f"cannot listen on 127.0.0.1:{port}"),
                 (["--drop", "2"], "--drop: 2.0 is not a probability (a number from 0 "
                                   "to 1)"),
                 (["--bit-flip", "-0.1"], "--bit-flip: -0.1 is not a probability"),
                 (["--delay", "nan"], "--delay: nan is not a probability"),
                 (["--port", "99999"], "--port 99999: a TCP port is 0"),
                 (["--mem-bytes", "0"], "--mem-bytes 0: give a positive size"),
                 # these three were found after the build; an empty token let anyone in
                 (["--host", "0.0.0.0"], "binding beyond this machine needs an explicit "
                                         "token (--token)"),
                 (["--host", "nonexistent.invalid", "--token", "t"],
                  "cannot listen on nonexistent.invalid:0"),
                 (["--token", ""], "virtual board: the token must not be empty"),
                 (["--token", " t"], "token ' t': no spaces at its ends")]
        for extra, words in cases:
            capsys.readouterr()
            assert main(["board", "virtual", "--config", "tiny", *extra]) == 2
            err = capsys.readouterr().err
            assert words in err and "Traceback" not in err, err


@pytest.mark.parametrize(("field", "value"), [("drop", 2), ("bit_flip", -0.1),
                                              ("delay", "0.1"), ("drop", True),
                                              ("bit_flip", float("nan")), ("delay", None)])
def test_link_faults_refuse_what_is_not_a_probability(field: str, value: object) -> None:
    """LinkFaults took any value from the Python API (only `board virtual` checked its
    options): a drop of 2 dropped every byte, a delay of '0.1' failed inside the fault
    injector. It refuses them now with the check the command line uses."""
    with pytest.raises(UsageError) as info:
        LinkFaults(**{field: value})
    assert str(info.value) == (f"LinkFaults.{field}: {value!r} is not a probability (a "
                               "number from 0 to 1)")
    assert isinstance(info.value, ValueError)
    assert LinkFaults(**{field: 1}).injectors()  # the bounds are probabilities


@pytest.mark.parametrize(("field", "value", "words"), [
    ("delay_seconds", -1.0, "is not a number of seconds"),
    ("delay_seconds", float("inf"), "is not a number of seconds"),
    ("delay_seconds", "0.1", "is not a number of seconds"),
    ("reset_at_cycle", -5, "is not a cycle"),
    ("reset_at_cycle", 2.5, "is not a cycle"),
    ("reset_at_cycle", True, "is not a cycle"),
    ("seed", "3", "is not an integer"),
    ("seed", 1.5, "is not an integer")])
def test_link_faults_refuse_bad_delays_resets_and_seeds(field: str, value: object,
                                                        words: str) -> None:
    """The other fields of LinkFaults were not checked either: a negative delay or a
    reset at cycle 2.5 reached the virtual board, a seed of '3' the random generator."""
    with pytest.raises(UsageError) as info:
        LinkFaults(**{field: value})
    assert str(info.value).startswith(f"LinkFaults.{field}: {value!r} {words}")
    assert LinkFaults(delay_seconds=0, reset_at_cycle=0, seed=7).injectors()


@pytest.mark.parametrize("noise", [False, True])
def test_a_port_without_a_board_is_named_with_what_came(noise: bool) -> None:
    """A serial port with no board on it (a pty nobody answers, or one sending junk, as
    a wrong bit rate does) was 'no valid response to INFO (seq 1) after 9 attempts: no
    response within 1.01 s', naming neither the port nor what to check."""
    import threading
    import tty

    master, slave = os.openpty()
    tty.setraw(slave)
    path = os.ttyname(slave)
    stop = threading.Event()

    def junk() -> None:
        while not stop.wait(0.01):
            os.write(master, bytes(range(7, 71)))

    sender = threading.Thread(target=junk, daemon=True)
    if noise:
        sender.start()
    try:
        with pytest.raises(LinkError) as err:
            open_device(f"serial://{path}?baud=9600", timeout=0.1, retries=1)
    finally:
        stop.set()
        if noise:
            sender.join()
        os.close(master)
        os.close(slave)
    msg = str(err.value)
    assert msg.startswith(f"serial://{path}: no valid response to INFO"), msg
    assert ("bytes received, none a response" if noise else "nothing received") in msg, msg
    assert "is this the port of a board with a tensorfab bitstream, at 9600 baud" in msg


def test_a_board_server_gone_mid_session_is_named_once(board: VirtualBoard) -> None:
    """A virtual board stopped under its client was 'socket://...: read failed: read
    failed: socket disconnected' (pyserial's prefix twice, nothing about which end)."""
    server = BoardServer(board, pty=False).start()
    dev = open_device(server.address, token=server.token, timeout=0.5)
    server.close()
    with pytest.raises(LinkError) as err:
        for _ in range(3):  # the first write may still reach the socket's buffer
            dev.run(directed_programs(CFG)["gemm_vt2"])
    dev.close()
    msg = str(err.value)
    assert msg.startswith(f"{server.address}: "), msg
    assert msg.count("failed:") == 1, msg
    assert "the board's end closed the connection: is its server still running?" in msg, msg


def _open_when_free(target: str, **options: object) -> BoardDevice:
    """``target``'s device once the server has seen the last client go."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return open_device(target, timeout=0.5, **options)
        except LinkError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_the_pty_and_a_tcp_client_exclude_each_other(board: VirtualBoard) -> None:
    """A program on the pty and one over TCP used the board at once: their frames
    interleaved, and a GEMM's run over TCP ended in 'ProgramError: instruction 10, load
    engine: load.wgt: NO_FINISH' (its image overwritten by the other's), or in a wrong
    result. Now one at a time, as on a serial port, each refusal naming the other."""
    with BoardServer(board) as server:
        pty = f"serial://{server.pty_path}"
        tcp = open_device(server.address, token=server.token, timeout=0.5)
        with pytest.raises(LinkError) as err:
            open_device(pty, timeout=0.5)
        assert str(err.value).startswith(f"cannot open {server.pty_path}: the port is in "
                                         "use by another program"), err.value
        _check(tcp)
        tcp.close()
        dev = _open_when_free(pty)
        with pytest.raises(LinkError) as err:
            open_device(server.address, token=server.token, timeout=0.5)
        assert (f"{server.address}: the board refused the connection: the board is in use "
                f"on its pty {server.pty_path}") in str(err.value), err.value
        _check(dev)
        dev.close()
        tcp = _open_when_free(server.address, token=server.token)
        _check(tcp)
        tcp.close()
