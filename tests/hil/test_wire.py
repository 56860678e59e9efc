"""The wire format (hil/wire.py): arrays round-trip bit for bit with their dtype and
shape, nothing else is accepted as an array, a frame over the limit is refused from its
header alone, and requests are checked field by field."""

from __future__ import annotations

import socket

import msgpack
import numpy as np
import pytest

from tensorfab.hil.errors import ConnectionClosed, WireError
from tensorfab.hil.wire import (
    HEADER,
    NDARRAY_EXT,
    Msg,
    check_request,
    decode_message,
    encode_message,
    recv_message,
    result_from_wire,
    result_to_wire,
)
from tensorfab.sim import FunctionalSimulator


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", ">i4", "<u4", "int64",
                                   "float32", "float64", "bool"])
def test_arrays_round_trip_with_dtype_and_shape(dtype) -> None:
    rng = np.random.default_rng(0)
    arr = rng.integers(0, 200, (3, 0, 2) if dtype == "int16" else (3, 5, 2)).astype(dtype)
    frame = encode_message({"type": "ok", "a": arr, "t": arr[:, ::2].T})
    (length,) = HEADER.unpack(frame[:4])
    assert length == len(frame) - 4
    got = decode_message(frame[4:])
    for key, want in (("a", arr), ("t", arr[:, ::2].T)):
        assert got[key].dtype == want.dtype and got[key].shape == want.shape
        np.testing.assert_array_equal(got[key], want)
        assert got[key].flags.writeable


def test_object_arrays_and_python_objects_are_not_sent() -> None:
    with pytest.raises(WireError, match="dtype object cannot be sent"):
        encode_message({"type": "ok", "a": np.array([None, 1])})
    with pytest.raises(WireError, match="a set cannot be sent"):
        encode_message({"type": "ok", "a": {1, 2}})


def _ext(dtype: str, shape: list, raw: bytes, code: int = NDARRAY_EXT) -> bytes:
    body = msgpack.packb([dtype, shape, raw], use_bin_type=True)
    return msgpack.packb({"type": "ok", "a": msgpack.ExtType(code, body)}, use_bin_type=True)


@pytest.mark.parametrize("payload, match", [
    (_ext("|O", [1], b"\0" * 8), "dtype '\\|O' is not bool, integer or float"),
    (_ext("no-such", [1], b"\0"), "dtype 'no-such' is not a numpy dtype"),
    (_ext("<i4", [2, 2], b"\0" * 12), "needs 16 bytes, it carries 12"),
    (_ext("<i4", [-1], b""), "not a list of at most 32 non-negative integers"),
    (_ext("|u1", [1], b"\0", code=7), "unknown msgpack extension type 7"),
    (b"\xc1", "malformed message \\(1 bytes\\): not msgpack"),
    (msgpack.packb([1, 2]), "a list, not a map"),
    (msgpack.packb({"kind": "ping"}), "no string 'type' field"),
    (msgpack.packb({1: 2}), "not msgpack"),
    (msgpack.packb({"type": "ping"}) + b"\0", "not msgpack \\(ExtraData"),
])
def test_malformed_payloads_are_named(payload, match) -> None:
    with pytest.raises(WireError, match=match):
        decode_message(payload)


def test_a_huge_length_is_refused_after_the_header_alone() -> None:
    a, b = socket.socketpair()
    with a, b:
        # the header claims 4 GiB; what follows it stays unread in the socket
        a.sendall(HEADER.pack(0xFFFF_FFFF) + b"next")
        with pytest.raises(WireError, match="frame of 4294967295 bytes is over the 1024"):
            recv_message(b, max_bytes=1024, deadline=None)
        b.settimeout(1)
        assert b.recv(16) == b"next"


def test_a_frame_cut_short_and_a_clean_close_differ() -> None:
    a, b = socket.socketpair()
    with b:
        a.sendall(HEADER.pack(10) + b"abc")
        a.close()
        with pytest.raises(WireError, match="closed in a frame's payload \\(3 of 10"):
            recv_message(b)
    a, b = socket.socketpair()
    with b:
        a.close()
        with pytest.raises(ConnectionClosed):
            recv_message(b)


def test_a_slow_frame_times_out_at_the_deadline() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(HEADER.pack(10) + b"abc")
        with pytest.raises(TimeoutError, match="payload: 3 of 10 bytes"):
            recv_message(b, body_timeout=0.2)


@pytest.mark.parametrize("message, match", [
    ({"type": "format_disk"}, "unknown request 'format_disk' \\(known: hello, info"),
    ({"type": "ok"}, "unknown request 'ok'"),
    ({"type": "run"}, "run: field 'program' is missing"),
    ({"type": "run", "program": "text"}, "run: field 'program' is a str, not bytes"),
    ({"type": "read", "handle": True, "addr": 0, "nbytes": 1},
     "read: field 'handle' is a bool, not int"),
    ({"type": "ping", "extra": 1}, "ping: unknown field\\(s\\) extra \\(expected: none\\)"),
])
def test_requests_are_checked_field_by_field(message, match) -> None:
    with pytest.raises(WireError, match=match):
        check_request(message)


def test_optional_fields_may_be_absent() -> None:
    kind, fields = check_request({"type": "run", "program": b"x"})
    assert kind is Msg.RUN and fields == {"program": b"x", "dram": None}


def test_a_run_result_round_trips(program) -> None:
    res = FunctionalSimulator().run(program)
    frame = encode_message({"type": "ok", **result_to_wire(res)})
    got = result_from_wire(decode_message(frame[4:]))
    assert got.counters == res.counters and got.cycles == res.cycles
    assert got.device == "fsim" and got.outputs.keys() == res.outputs.keys()
    np.testing.assert_array_equal(got.dram, res.dram)
    with pytest.raises(WireError, match="unknown counters \\['bogus'\\]"):
        result_from_wire(result_to_wire(res) | {"counters": {"bogus": 1}})
