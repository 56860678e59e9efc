"""The tracker (hil/tracker.py): servers register by kind and heartbeat; clients of
``tracker://HOST:PORT/KIND`` get a free device each, wait in turn when all are taken,
and give it back on close; a server that leaves is no longer handed out."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from tensorfab.hil.errors import HilError, RemoteError, TokenError
from tensorfab.hil.remote import RemoteDevice
from tensorfab.hil.tracker import Tracker, TrackerRegistration
from tensorfab.isa.device import open_device
from tensorfab.sim import FunctionalSimulator

TOKEN = "tracker-test-token"


@pytest.fixture
def tracker() -> Iterator[Tracker]:
    t = Tracker(token=TOKEN, hello_timeout=1.0).start()
    yield t
    t.close()


@pytest.fixture
def two_servers(serve, tracker) -> Iterator[list]:
    servers = [serve("fsim", token=TOKEN) for _ in range(2)]
    regs = [TrackerRegistration(f"127.0.0.1:{tracker.port}", TOKEN, "fsim", s.address,
                                interval=0.2) for s in servers]
    yield servers
    for r in regs:
        r.close()


def test_two_clients_get_two_devices_and_a_third_waits_its_turn(tracker, two_servers,
                                                                program) -> None:
    target = f"tracker://127.0.0.1:{tracker.port}/fsim"
    want = FunctionalSimulator().run(program).counters
    a = open_device(target, token=TOKEN)
    b = RemoteDevice(target, token=TOKEN)
    assert {a.address, b.address} == {s.address for s in two_servers}
    assert a.run(program).counters == b.run(program).counters == want
    assert all(d["leased"] for d in tracker.devices())
    with pytest.raises(RemoteError, match=f"tcp://127.0.0.1:{tracker.port}: HilError: no "
                                          "free device of kind 'fsim' within 0.3 s "
                                          "\\(2 registered\\)"):
        RemoteDevice(target, token=TOKEN, acquire_timeout=0.3)
    got: list[RemoteDevice] = []
    waiter = threading.Thread(target=lambda: got.append(RemoteDevice(target, token=TOKEN)))
    waiter.start()
    time.sleep(0.2)
    assert not got  # waiting
    a.close()
    waiter.join(5)
    assert got and got[0].address == a.address
    assert got[0].run(program).counters == want
    got[0].close()
    b.close()
    deadline = time.monotonic() + 5
    while any(d["leased"] for d in tracker.devices()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(d["leased"] for d in tracker.devices())


def test_a_kind_nobody_serves_and_a_wrong_token_are_errors(tracker, two_servers) -> None:
    """A kind no server is registered as (a typo, say) waited out the whole
    acquire_timeout (300 s from the command line, silently) before '0 registered'; it
    is an error after UNREGISTERED_KIND_WAIT seconds naming the kinds registered."""
    start = time.monotonic()
    with pytest.raises(RemoteError, match=r"no device of kind 'ulx3s' is registered with "
                                          r"this tracker \(registered: fsim\); a server "
                                          r"registers with `tensorfab serve --tracker "
                                          r"HOST:PORT --kind ulx3s`"):
        RemoteDevice(f"tracker://127.0.0.1:{tracker.port}/ulx3s", token=TOKEN,
                     acquire_timeout=30)
    assert time.monotonic() - start < 10
    with pytest.raises(TokenError, match="the server refused the connection: wrong token"):
        RemoteDevice(f"tracker://127.0.0.1:{tracker.port}/fsim", token="nope")
    with pytest.raises(Exception, match="name the kind of device"):
        RemoteDevice(f"tracker://127.0.0.1:{tracker.port}", token=TOKEN)


def test_a_server_registering_just_after_the_client_asks_is_handed_out(serve, tracker
                                                                       ) -> None:
    """A script that starts a server and its client together: the client's ACQUIRE
    comes before the registration and waits for it (UNREGISTERED_KIND_WAIT)."""
    server = serve("fsim", token=TOKEN)
    regs: list[TrackerRegistration] = []
    later = threading.Timer(0.5, lambda: regs.append(TrackerRegistration(
        f"127.0.0.1:{tracker.port}", TOKEN, "late", server.address, interval=0.2)))
    later.start()
    try:
        dev = RemoteDevice(f"tracker://127.0.0.1:{tracker.port}/late", token=TOKEN,
                           acquire_timeout=30)
        assert dev.address == server.address
        dev.close()
    finally:
        later.join()
        for r in regs:
            r.close()


def test_a_server_that_leaves_is_not_handed_out(serve, tracker) -> None:
    server = serve("fsim", token=TOKEN)
    reg = TrackerRegistration(f"127.0.0.1:{tracker.port}", TOKEN, "fsim", server.address,
                              interval=0.2)
    assert [d["address"] for d in tracker.devices()] == [server.address]
    reg.close()
    deadline = time.monotonic() + 5
    while tracker.devices() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tracker.devices() == []


def test_a_registration_without_heartbeats_expires(serve) -> None:
    t = Tracker(token=TOKEN, heartbeat_ttl=0.3).start()
    try:
        server = serve("fsim", token=TOKEN)
        reg = TrackerRegistration(f"127.0.0.1:{t.port}", TOKEN, "fsim", server.address,
                                  interval=60)  # registers, then beats only after 60 s
        try:
            time.sleep(0.5)
            with pytest.raises(RemoteError, match="no free device of kind 'fsim'"):
                RemoteDevice(f"tracker://127.0.0.1:{t.port}/fsim", token=TOKEN,
                             acquire_timeout=0.1)
        finally:
            reg.close()
    finally:
        t.close()


def test_a_tracker_given_as_a_device_server_says_so(tracker, program) -> None:
    """`run --target tcp://TRACKER` connected (the tracker takes the same token) and
    then failed on the first request with 'WireError: tracker does not serve
    open_memory'; the address is now refused at connect, naming tracker://."""
    where = f"127.0.0.1:{tracker.port}"
    with pytest.raises(HilError, match=f"tcp://{where} is a tracker, not a device server: "
                                       f"ask it for a device of a kind with "
                                       f"tracker://{where}/KIND"):
        RemoteDevice(f"tcp://{where}", token=TOKEN)
    with pytest.raises(HilError, match="is a tracker"):
        open_device(f"tcp://{where}", token=TOKEN)
