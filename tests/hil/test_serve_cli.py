"""``tensorfab serve`` and ``tensorfab tracker`` (tensorfab/serve_cli.py) as processes:
they print the address and the token, serve until Ctrl-C and then end quietly; bad
options are one-line errors."""

from __future__ import annotations

import re

import pytest
from conftest import Process

from tensorfab.cli import main
from tensorfab.hil.remote import RemoteDevice
from tensorfab.isa.device import open_device
from tensorfab.sim import FunctionalSimulator


def test_serve_prints_its_address_and_token_and_ends_quietly_on_ctrl_c(processes,
                                                                       program) -> None:
    p = Process("serve", "--device", "fsim")
    processes.append(p)
    address = p.expect(r"serving fsim at (tcp://127\.0\.0\.1:\d+)$")[1]
    token = p.expect(r"token: (\S+)$")[1]
    p.expect(r"connect: TENSORFAB_TOKEN=")
    with RemoteDevice(address, token=token) as dev:
        assert dev.run(program).counters == FunctionalSimulator().run(program).counters
    code, err = p.interrupt()
    assert code == 0 and "Traceback" not in err and "connected" in err


def test_serve_with_a_tracker(processes, program) -> None:
    t = Process("tracker", "--token", "cli-test-token")
    processes.append(t)
    tracker = t.expect(r"tracker at tcp://(127\.0\.0\.1:\d+)$")[1]
    t.expect(r"token: cli-test-token$")
    s = Process("serve", "--device", "fsim", "--tracker", tracker, "--kind", "sim",
                "--token", "cli-test-token")
    processes.append(s)
    address = s.expect(r"serving fsim at (tcp://\S+)$")[1]
    s.expect(r"token: cli-test-token$")
    s.expect(rf"registered with tracker {tracker} as sim \({re.escape(address)}\)$")
    with open_device(f"tracker://{tracker}/sim", token="cli-test-token") as dev:
        assert dev.address == address
        assert dev.run(program).counters == FunctionalSimulator().run(program).counters
    for proc in (s, t):
        code, err = proc.interrupt()
        assert code == 0 and "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["serve", "--host", "0.0.0.0"], "binding beyond this machine needs an explicit token"),
    (["serve", "--tracker", "127.0.0.1:1"], "--tracker and --kind go together"),
    (["serve", "--tracker", "127.0.0.1:1", "--kind", "x"], "--tracker needs --token"),
    (["serve", "--device", "nonsense"], "unknown executor 'nonsense'"),
    (["tracker", "--host", "0.0.0.0"], "binding beyond this machine needs an explicit token"),
    # an OverflowError traceback from socket.bind before
    (["serve", "--port", "99999"], "device server: port 99999 is out of range: a TCP port "
                                   "is 0 (any free one) to 65535"),
    (["serve", "--port", "-1"], "port -1 is out of range"),
    (["tracker", "--port", "70000"], "tracker: port 70000 is out of range"),
])
def test_bad_options_are_one_line_errors(args, message, capsys) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("error:")
