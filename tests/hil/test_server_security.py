"""The device server's security rules (hil/service.py), each on its own: the token, the
HELLO deadline, the frame size limit, malformed and unknown messages, and the bind
address. After each bad client the server still serves a good one."""

from __future__ import annotations

import time

import pytest
from conftest import TEST_HELLO_TIMEOUT, TEST_MAX_MESSAGE

from tensorfab.hil.errors import HilError, RemoteError, TokenError
from tensorfab.hil.remote import RemoteDevice
from tensorfab.hil.server import DeviceServer
from tensorfab.hil.tracker import Tracker
from tensorfab.hil.wire import HEADER, PROTOCOL_VERSION, Msg
from tensorfab.sim import FunctionalSimulator


def still_serves(server, program) -> None:
    with RemoteDevice(server.address, token=server.token) as dev:
        assert dev.run(program).counters == FunctionalSimulator().run(program).counters


def test_a_wrong_token_gets_an_error_and_the_connection_closed(serve, program,
                                                               raw_client) -> None:
    """The client reported the refusal as a RemoteError ('tcp://...: AuthenticationError:
    wrong token'), which said nothing of how to give the token; it is a TokenError now,
    as a board's refusal on socket:// is."""
    server = serve("fsim")
    with pytest.raises(TokenError) as refused:
        RemoteDevice(server.address, token=server.token + "x")
    assert str(refused.value) == (f"{server.address}: the server refused the connection: "
                                  "wrong token: pass token=... or set TENSORFAB_TOKEN (the "
                                  "server prints its token when it starts)")
    assert refused.value.address == server.address
    assert not isinstance(refused.value, RemoteError)
    raw = raw_client(server.port)
    reply = raw.hello("")
    assert reply == {"type": "error", "error": "AuthenticationError", "message": "wrong token"}
    assert raw.is_closed_by_server()
    still_serves(server, program)


def test_a_request_without_hello_is_refused(serve, program, raw_client) -> None:
    server = serve("fsim")
    raw = raw_client(server.port)
    raw.send({"type": "run", "program": program.to_bytes()})
    reply = raw.recv()
    assert reply["error"] == "AuthenticationError"
    assert "first message must be a HELLO with the token, not 'run'" in reply["message"]
    assert raw.is_closed_by_server() and server.runs == 0
    still_serves(server, program)


def test_a_hello_of_another_protocol_version_is_refused(serve, raw_client) -> None:
    server = serve("fsim")
    raw = raw_client(server.port)
    raw.send({"type": "hello", "token": server.token, "protocol": PROTOCOL_VERSION + 1})
    assert raw.recv()["message"] == (f"protocol version {PROTOCOL_VERSION + 1}, this "
                                     f"device server speaks {PROTOCOL_VERSION}")
    assert raw.is_closed_by_server()


def test_a_slow_client_is_dropped_at_the_deadline_and_others_are_served(
        serve, program, raw_client) -> None:
    server = serve("fsim")
    slow = raw_client(server.port)
    sent_half = raw_client(server.port)
    sent_half.send_raw(HEADER.pack(100) + b"\x82")  # a HELLO that never completes
    start = time.monotonic()
    still_serves(server, program)  # meanwhile
    for c in (slow, sent_half):
        reply = c.recv(within=TEST_HELLO_TIMEOUT + 3)
        assert reply["error"] == "AuthenticationError"
        assert reply["message"] == f"no HELLO within {TEST_HELLO_TIMEOUT:g} s"
        assert c.is_closed_by_server()
    assert time.monotonic() - start < TEST_HELLO_TIMEOUT + 2
    still_serves(server, program)


def test_an_oversized_frame_is_refused(serve, program, raw_client) -> None:
    server = serve("fsim")
    raw = raw_client(server.port)
    raw.hello(server.token)
    raw.send_raw(HEADER.pack(TEST_MAX_MESSAGE + 1) + bytes(1024))
    reply = raw.recv()
    assert reply["error"] == "WireError"
    assert reply["message"] == (f"a frame of {TEST_MAX_MESSAGE + 1} bytes is over the "
                                f"{TEST_MAX_MESSAGE}-byte limit")
    assert raw.is_closed_by_server()
    # a client's own limit too: a reply over it is refused, naming the server
    with RemoteDevice(server.address, token=server.token, max_message=256) as dev, \
            pytest.raises(HilError, match=f"{server.address}: run: a frame of .* bytes is "
                                          "over the 256-byte limit"):
        dev.run(program)
    still_serves(server, program)


def test_a_frame_claiming_a_huge_length_is_refused_from_its_header(serve, program,
                                                                   raw_client) -> None:
    server = serve("fsim")
    for authenticated in (False, True):
        raw = raw_client(server.port)
        if authenticated:
            raw.hello(server.token)
        start = time.monotonic()
        raw.send_raw(HEADER.pack(0xFFFF_FFFF))  # 4 GiB announced, nothing follows
        reply = raw.recv(within=2)
        assert reply["error"] == "WireError"
        assert "a frame of 4294967295 bytes is over the" in reply["message"]
        assert time.monotonic() - start < 2  # not waiting for the announced bytes
        assert raw.is_closed_by_server()
    still_serves(server, program)


def test_malformed_msgpack_is_refused(serve, program, raw_client) -> None:
    server = serve("fsim")
    raw = raw_client(server.port)
    raw.hello(server.token)
    raw.send_payload(b"\xc1\x00\x01")
    reply = raw.recv()
    assert reply["error"] == "WireError"
    assert reply["message"].startswith("malformed message (3 bytes): not msgpack")
    assert raw.is_closed_by_server()
    still_serves(server, program)


def test_an_unknown_request_is_refused(serve, program, raw_client) -> None:
    server = serve("fsim")
    raw = raw_client(server.port)
    raw.hello(server.token)
    raw.send({"type": "shell", "command": "rm -rf /"})
    reply = raw.recv()
    assert reply["error"] == "WireError"
    assert reply["message"].startswith("unknown request 'shell' (known: hello, info")
    assert raw.is_closed_by_server()
    still_serves(server, program)


def test_a_tracker_request_to_a_device_server_is_refused(serve, raw_client) -> None:
    server = serve("fsim")
    raw = raw_client(server.port)
    raw.hello(server.token)
    raw.send({"type": "acquire", "kind": "fsim", "wait": 1})
    assert raw.recv()["message"] == "device server does not serve 'acquire'"
    assert raw.is_closed_by_server()


def test_memory_handles_are_per_connection_and_bounded(serve, program) -> None:
    server = serve("fsim", max_memory_bytes=8192)
    with RemoteDevice(server.address, token=server.token) as a, \
            RemoteDevice(server.address, token=server.token) as b:
        mem = a.open_memory(program.config, 4096)
        with pytest.raises(RemoteError, match="no device memory with handle 1 on this "
                                              "connection \\(open: none\\)"):
            b.connection.request(Msg.READ, handle=mem.handle, addr=0, nbytes=4)
        with pytest.raises(RemoteError, match="would take this connection over the "
                                              "server's 8192-byte limit"):
            a.open_memory(program.config, 8192)
        mem.close()
        a.open_memory(program.config, 8192).close()


@pytest.mark.parametrize("service", [DeviceServer, Tracker])
def test_a_bind_beyond_loopback_needs_an_explicit_token(service) -> None:
    args = ("fsim",) if service is DeviceServer else ()
    with pytest.raises(HilError, match="binding beyond this machine needs an explicit "
                                       "token"):
        service(*args, host="0.0.0.0")
    with service(*args, host="0.0.0.0", token="t0k3n-for-the-test") as s:
        assert s.token == "t0k3n-for-the-test" and s.port > 0
    with service(*args) as s:  # loopback: a token is made
        assert len(s.token) >= 32 and s.address.startswith("tcp://127.0.0.1:")


def test_a_frame_body_that_stalls_is_dropped_after_the_frame_timeout(serve, program,
                                                                     raw_client) -> None:
    server = serve("fsim", frame_timeout=0.5)
    raw = raw_client(server.port)
    raw.hello(server.token)
    raw.send_raw(HEADER.pack(1000) + b"\x82")  # an authenticated client that stalls
    start = time.monotonic()
    reply = raw.recv(within=3)
    assert reply["error"] == "TimeoutError" and "payload: 1 of 1000 bytes" in reply["message"]
    assert 0.4 < time.monotonic() - start < 3
    assert raw.is_closed_by_server()
    still_serves(server, program)


def test_connections_past_the_limit_are_turned_away(serve, program, raw_client) -> None:
    server = serve("fsim", max_connections=1)
    first = raw_client(server.port)
    first.hello(server.token)
    second = raw_client(server.port)
    assert second.recv()["message"] == "device server busy: 1 connections"
    assert second.is_closed_by_server()
    first.close()
    deadline = time.monotonic() + 5  # until the server notices the first one's end
    while True:
        try:
            return still_serves(server, program)
        except RemoteError as exc:
            assert "busy" in str(exc) and time.monotonic() < deadline
            time.sleep(0.02)


def test_a_board_client_is_told_to_connect_with_tcp(serve, program) -> None:
    """`--target socket://` (a board's link) to a device server or a tracker was 'read
    failed: read failed: [Errno 104] Connection reset by peer' (its token line read as
    a frame header); the server now answers it as a board server would, with a
    REFUSED line naming the target to use, and still serves good clients."""
    from tensorfab.isa.device import open_device

    server = serve("fsim", token="board-test")
    with pytest.raises(HilError, match=f"socket://127.0.0.1:{server.port}: the board "
                                       "refused the connection: this is a tensorfab device "
                                       "server, not a board: connect with "
                                       f"tcp://127.0.0.1:{server.port}, not socket://"):
        open_device(f"socket://127.0.0.1:{server.port}", token="board-test")
    still_serves(server, program)
    with Tracker(token="board-test").start() as tracker, pytest.raises(
            HilError, match=f"this is a tensorfab tracker, not a board: connect with "
                            f"tracker://127.0.0.1:{tracker.port}/KIND, not socket://"):
        open_device(f"socket://127.0.0.1:{tracker.port}", token="board-test")


def test_a_board_clients_token_line_in_pieces_is_told_to_connect_with_tcp(serve) -> None:
    """A board client's token line split across TCP segments ('TOK', then 'EN ...')
    got the generic handshake error (one peek saw 'TOK'), not the REFUSED line that
    names tcp://."""
    import socket

    server = serve("fsim", token="board-test")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
        conn.sendall(b"TOK")
        time.sleep(0.2)
        conn.sendall(b"EN board-test\n")
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = conn.recv(4096)
            if not chunk:
                break
            reply += chunk
    assert reply.startswith(b"REFUSED: this is a tensorfab device server, not a board: "
                            b"connect with tcp://127.0.0.1:%d" % server.port), reply
