"""A device server whose board dies (hil/served.py): the virtual board on its real TCP
socket, served by the real device server, taken down and brought back.

Before, the server kept the dead link: every request after the board's server went
away failed with ``LinkError: ... write failed: [Errno 32] Broken pipe``, also once the
board was back on its port, until ``tensorfab serve`` was restarted; and a device
memory opened before answered with the same error rather than saying it was gone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import Process, memory_session, scattered
from support.isa_programs import directed_programs

from tensorfab.hil.board_server import BoardServer
from tensorfab.hil.errors import HilError, RemoteError
from tensorfab.hil.remote import RemoteDevice
from tensorfab.hil.server import DeviceServer
from tensorfab.hil.tracker import Tracker, TrackerRegistration
from tensorfab.hil.virtual import SocSpec, VirtualBoard
from tensorfab.isa import PRESETS, Program
from tensorfab.isa import hostlink as hl
from tensorfab.isa.device import open_device
from tensorfab.isa.placement import place_program
from tensorfab.sim import FunctionalSimulator

CFG = PRESETS["tiny"]
MEM = 1 << 16
BOARD_TOKEN = "the-boards-token"
#: What the host link adds when the board's end of its socket closed.
BOARD_CLOSED = "(the board's end closed the connection: is its server still running?)"
#: Seconds a request that finds the board gone may take (the test servers' reopen
#: attempts wait 0.05 + 0.1 s; pyserial's socket close waits 0.3 s).
PROMPT = 5.0


def new_board() -> VirtualBoard:
    """A virtual board just powered up (its memory zeros)."""
    return VirtualBoard(SocSpec.for_board(None, CFG, mem_bytes=MEM))


class BoardOnTcp:
    """A virtual board behind its TCP server, which a test takes down and brings back
    on the same port (as a board is unplugged and plugged in again)."""

    def __init__(self, board: VirtualBoard, server: type[BoardServer] = BoardServer) -> None:
        self.server_class = server
        self.server = server(board, pty=False, token=BOARD_TOKEN).start()
        self.address = self.server.address

    @property
    def target(self) -> str:
        return f"{self.address}?token={BOARD_TOKEN}"

    def down(self) -> None:
        self.server.close()

    def up(self, board: VirtualBoard) -> None:
        self.server = self.server_class(board, port=self.server.port, pty=False,
                                        token=BOARD_TOKEN).start()


@pytest.fixture(scope="module")
def board() -> Iterator[VirtualBoard]:
    vb = new_board()
    yield vb
    vb.close()


@pytest.fixture
def on_tcp(board: VirtualBoard) -> Iterator[BoardOnTcp]:
    served = BoardOnTcp(board)
    yield served
    served.down()


@pytest.fixture
def hil_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="tensorfab.hil")
    return caplog


def gemm() -> Program:
    return directed_programs(CFG)["gemm_vt2"]


def check_run(dev: RemoteDevice) -> None:
    """A GEMM runs on ``dev`` as on fsim: the final DRAM image and the GEMM's micro-ops."""
    got, ref = dev.run(gemm()), FunctionalSimulator().run(gemm())
    np.testing.assert_array_equal(got.dram, ref.dram)
    assert got.counters.gemm_uops == ref.counters.gemm_uops


def assert_closed_under_run(detail: str, address: str, then: str) -> None:
    """``detail`` says that the board's end of the socket closed during a run, then
    ``then``. (Which end of the socket failed first varies: 'read failed: socket
    disconnected', 'write failed: [Errno 32] Broken pipe', 'Connection reset by
    peer'.)"""
    assert detail.startswith(f"{address}: lost during run: "), detail
    assert " failed: " in detail and detail.endswith(f"{BOARD_CLOSED}; {then}"), detail


def lost(request, *, within: float = PROMPT) -> RemoteError:
    """The error ``request()`` gets from the server, which must come within ``within``
    seconds."""
    start = time.monotonic()
    with pytest.raises(RemoteError) as err:
        request()
    assert time.monotonic() - start < within, err.value
    assert "Traceback" not in str(err.value) and BOARD_TOKEN not in str(err.value)
    return err.value


def test_a_board_gone_fails_one_request_and_is_reopened_once_back(serve, on_tcp, hil_log
                                                                  ) -> None:
    """The request that finds the board gone gets one line naming it and the cause, at
    once; the client stays connected; requests while the board is away say that
    reopening failed; once it is back the same client's runs are fsim's again."""
    server = serve(on_tcp.target, reopen_backoff=0.05)
    with RemoteDevice(server.address, token=server.token) as dev:
        check_run(dev)
        on_tcp.down()
        err = lost(lambda: dev.run(gemm()))
        assert err.remote_class == "DeviceLostError", err
        assert_closed_under_run(err.detail, on_tcp.address, "the server reopens it on the "
                                "next request (device memories opened before are stale)")
        dev.ping()  # the client's connection is still good
        # while the board is away, each request tries (3 times) and says so
        err = lost(lambda: dev.run(gemm()))
        assert err.remote_class == "DeviceLostError", err
        assert err.detail.startswith(f"{on_tcp.address}: the device is gone (lost during "
                                     "run at "), err
        assert err.detail.endswith(
            f"reopening it failed 3 times, last: cannot open {on_tcp.address}: Connection "
            "refused; the server tries again on the next request"), err
        on_tcp.up(new_board())  # plugged in again (powered up: its memory zeros)
        check_run(dev)
        check_run(dev)
    log = hil_log.text
    for said in (f"{on_tcp.address}: lost during run: ",
                 "reopening (attempt 1 of 3)",
                 "reopening failed: cannot open",
                 "next attempt in 0.05 s",
                 "next attempt in 0.1 s",
                 "still gone after 3 attempts",
                 f"{on_tcp.address}: reopened"):
        assert said in log, said
    assert BOARD_TOKEN not in log


def test_serve_reopens_the_board_and_logs_it(processes, on_tcp) -> None:
    """`tensorfab serve --device socket://...`: the board's server stopped and started
    again under it; serve goes on, and its log on stderr says what happened."""
    p = Process("serve", "--device", on_tcp.target)
    processes.append(p)
    address = p.expect(rf"serving {on_tcp.address} at (tcp://127\.0\.0\.1:\d+)$")[1]
    token = p.expect(r"token: (\S+)$")[1]
    with RemoteDevice(address, token=token) as dev:
        check_run(dev)
        on_tcp.down()
        assert lost(lambda: dev.run(gemm())).remote_class == "DeviceLostError"
        on_tcp.up(new_board())
        check_run(dev)
    code, err = p.interrupt()
    assert code == 0 and "Traceback" not in err, err
    for said in (f"{on_tcp.address}: lost during run: ",
                 f"{BOARD_CLOSED}; closed, reopened on the next request",
                 f"{on_tcp.address}: reopening (attempt 1 of 3)",
                 f"{on_tcp.address}: reopened"):
        assert said in err, (said, err)
    assert BOARD_TOKEN not in err


def placed_gemm() -> Program:
    """The GEMM with its regions scattered in the memory (as a resident model's)."""
    return place_program(gemm(), scattered(gemm()))


def test_memories_opened_before_the_board_died_are_refused(serve, on_tcp, program) -> None:
    """A memory of another connection than the one whose request found the board gone
    is stale too; it closes without a word; a new one works on the board plugged in
    again, bit for bit."""
    server = serve(on_tcp.target, reopen_backoff=0.05)
    with (RemoteDevice(server.address, token=server.token) as dev,
          RemoteDevice(server.address, token=server.token) as other):
        placed = placed_gemm()
        mem = dev.open_memory(CFG, placed.dram_size)
        mem.write(0, placed.dram_image())
        mem.run(placed)
        want = FunctionalSimulator().run(placed).dram
        np.testing.assert_array_equal(mem.read(0, placed.dram_size), want)
        on_tcp.down()
        assert lost(lambda: other.run(gemm())).remote_class == "DeviceLostError"
        on_tcp.up(new_board())
        for use in (lambda: mem.read(0, 64), lambda: mem.write(0, placed.dram_image()),
                    lambda: mem.run(placed)):
            err = lost(use)
            assert err.remote_class == "StaleMemoryError", err
            assert err.detail.startswith(
                f"device memory {mem.handle} was opened before {on_tcp.address} was lost "
                "(run at "), err
            assert err.detail.endswith(
                "the board was reset or reconnected since, so what the memory held is "
                "gone; close it, open a new one and write it again"), err
        mem.close()
        got, _ = memory_session(dev, program)
        want_outputs, _ = memory_session(FunctionalSimulator(), program)
        for g, w in zip(got, want_outputs, strict=True):
            np.testing.assert_array_equal(g, w)


class ResetOnStatus(BoardServer):
    """The board server, its reset button pressed when the first STATUS request of a run
    arrives once :attr:`armed` (the program started: the run is under way)."""

    armed = False

    def _to_uart(self, data: bytes) -> None:
        if self.armed and data[:2] == hl.MAGIC and data[4:5] == bytes([hl.Command.STATUS]):
            self.armed = False
            self.press_reset()
        super()._to_uart(data)


def test_a_board_reset_mid_run_makes_memories_stale(serve, board, hil_log) -> None:
    """The board's reset while a program runs: that run's error says so, and the memory
    it ran in (which the run left half written) is refused from then on."""
    on_tcp = BoardOnTcp(board, ResetOnStatus)
    try:
        server = serve(on_tcp.target, reopen_backoff=0.05)
        with RemoteDevice(server.address, token=server.token) as dev:
            placed = placed_gemm()
            mem = dev.open_memory(CFG, placed.dram_size)
            mem.write(0, placed.dram_image())
            on_tcp.server.armed = True
            err = lost(lambda: mem.run(placed))
            assert err.remote_class == "DeviceLostError", err
            assert err.detail.startswith(
                f"{on_tcp.address}: lost during run_placed: the board was reset while "
                "tiny's program ran (STATUS idle after START"), err
            assert lost(lambda: mem.read(0, 64)).remote_class == "StaleMemoryError"
            check_run(dev)
        assert f"{on_tcp.address}: reopened" in hil_log.text
    finally:
        on_tcp.down()


def test_a_device_given_as_an_object_is_not_reopened(serve, on_tcp) -> None:
    """The server cannot reopen a device it did not open: it says so; memories opened
    before are stale all the same."""
    device = open_device(on_tcp.target, timeout=0.5)
    server = serve(device)
    with RemoteDevice(server.address, token=server.token) as dev:
        mem = dev.open_memory(CFG, 4096)
        on_tcp.down()
        err = lost(lambda: dev.run(gemm()))
        assert_closed_under_run(err.detail, on_tcp.address, "this server was given the "
                                "device, not a target, and cannot reopen it")
        assert lost(lambda: mem.read(0, 64)).remote_class == "StaleMemoryError"
    device.close()


@pytest.mark.parametrize(("attempts", "backoff"), [(0, 0.5), (3, -1.0), (3, float("nan"))])
def test_reopen_options_are_checked(attempts: int, backoff: float) -> None:
    with pytest.raises(HilError, match=r"reopen_attempts .* must be at least 1 and "
                                       r"reopen_backoff .* at least 0 seconds"):
        DeviceServer("fsim", reopen_attempts=attempts, reopen_backoff=backoff)


def test_a_served_device_server_that_dies_is_reopened(serve, hil_log) -> None:
    """A ``tcp://`` target (a device server serving another's device): when the inner
    server goes away, the request that finds it gets a ``DeviceLostError`` naming it
    (its connection's failure was a plain ``HilError``, which the outer server passed
    on and then kept failing on, as with a board's link before), and once the inner
    server is back on its port the outer one reconnects."""
    inner_token = "the-inner-servers-token"
    inner = serve("fsim", token=inner_token)
    port = inner.port
    outer = serve(f"{inner.address}?token={inner_token}", reopen_backoff=0.05)
    with RemoteDevice(outer.address, token=outer.token) as dev:
        check_run(dev)
        inner.close()
        err = lost(lambda: dev.run(gemm()))
        assert err.remote_class == "DeviceLostError", err
        assert err.detail.startswith(f"{inner.address}: lost during run: "), err
        assert err.detail.endswith("the server reopens it on the next request (device "
                                   "memories opened before are stale)"), err
        assert inner_token not in err.detail
        serve("fsim", port=port, token=inner_token)  # back on the same port
        check_run(dev)
    assert f"{inner.address}: reopened" in hil_log.text


def test_a_server_whose_board_is_gone_is_not_handed_out(serve, on_tcp, hil_log) -> None:
    """Registered with a tracker, a server whose board died withholds its heartbeats
    (each beat tries to reopen the board once), so the tracker stops handing it out
    after its ``heartbeat_ttl`` (it handed a dead board out to every client); once the
    board is back the heartbeats resume and a client gets it and runs on it."""
    token = "a-tracker-token"
    tracker = Tracker(token=token, heartbeat_ttl=0.5).start()
    server = serve(on_tcp.target, token=token, reopen_backoff=0.05)
    reg = TrackerRegistration(f"127.0.0.1:{tracker.port}", token, "board", server.address,
                              interval=0.1, available=server.device_available)
    target = f"tracker://127.0.0.1:{tracker.port}/board"
    try:
        with RemoteDevice(target, token=token) as dev:
            check_run(dev)
            on_tcp.down()
            assert lost(lambda: dev.run(gemm())).remote_class == "DeviceLostError"
        time.sleep(1.0)  # the ttl passes without a heartbeat
        with pytest.raises(RemoteError, match="no free device of kind 'board' within "):
            RemoteDevice(target, token=token, acquire_timeout=0.2)
        on_tcp.up(new_board())
        with RemoteDevice(target, token=token, acquire_timeout=5.0) as dev:
            check_run(dev)
    finally:
        reg.close()
        tracker.close()
    for said in ("the device is gone: no heartbeats until it reopens",
                 f"{on_tcp.address}: reopened",
                 "the device is back: heartbeats resume"):
        assert said in hil_log.text, said
