"""The wire format of the device server and the tracker, declared once for both sides.

A message is a frame: a 4-byte big-endian length, then that many bytes of one msgpack
map. The map's ``type`` names the message (:class:`Msg`); the other keys are its fields,
declared in :data:`REQUESTS` (the requests a client sends) and checked by
:func:`check_request`. A reply is ``{"type": "ok", ...}`` or ``{"type": "error",
"error": CLASS, "message": TEXT}`` (:func:`error_reply`).

numpy arrays travel as msgpack extension :data:`NDARRAY_EXT`: a msgpack array
``[dtype, shape, raw bytes]`` with a numeric dtype (bool, integers, floats, in their
``dtype.str`` spelling such as ``"|u1"`` or ``"<i4"``). Nothing is ever pickled.

A frame longer than the reader's limit (:data:`MAX_MESSAGE_BYTES` by default) is refused
after its 4-byte header, before anything is allocated for it.

Examples
--------
>>> frame = encode_message({"type": "ping"})
>>> frame[:4], decode_message(frame[4:])
(b'\\x00\\x00\\x00\\x0b', {'type': 'ping'})
"""

from __future__ import annotations

import socket
import struct
import time
from enum import StrEnum
from typing import Any

import msgpack
import numpy as np

from tensorfab.isa.device import Counters, RunResult

from .errors import ConnectionClosed, WireError

__all__ = ["HEADER", "MAX_MESSAGE_BYTES", "NDARRAY_EXT", "PROTOCOL_VERSION",
           "REQUESTS", "Msg", "check_request", "decode_message", "encode_message",
           "error_reply", "ok_reply", "recv_message", "result_from_wire", "result_to_wire",
           "send_message"]

#: Version of this format; a HELLO with another one is refused.
PROTOCOL_VERSION = 1

#: Largest frame (bytes after the header) a peer accepts unless told otherwise.
MAX_MESSAGE_BYTES = 1 << 28

#: The frame header: the payload's length, big-endian unsigned 32 bits.
HEADER = struct.Struct(">I")

#: msgpack extension type code of a numpy array.
NDARRAY_EXT = 1

#: Array element kinds the wire carries: bool, signed and unsigned integers, floats.
_ARRAY_KINDS = "biuf"
_MAX_NDIM = 32


class Msg(StrEnum):
    """Message types (the ``type`` key)."""

    HELLO = "hello"
    INFO = "info"
    PING = "ping"
    RUN = "run"
    OPEN_MEMORY = "open_memory"
    WRITE = "write"
    READ = "read"
    RUN_PLACED = "run_placed"
    CLOSE = "close"
    REGISTER = "register"
    HEARTBEAT = "heartbeat"
    ACQUIRE = "acquire"
    RELEASE = "release"
    OK = "ok"
    ERROR = "error"


_Int = (int,)
_Num = (int, float)

#: Fields of each request: ``{type: {field: accepted types}}``. ``None`` among the
#: types makes the field optional (absent or nil).
REQUESTS: dict[Msg, dict[str, tuple[type | None, ...]]] = {
    # every connection opens with HELLO: the token and this format's version
    Msg.HELLO: {"token": (str,), "protocol": _Int, "client": (str, None)},
    Msg.INFO: {},
    Msg.PING: {},
    # device server: a program (Program.to_bytes) on the device, from a DRAM image
    Msg.RUN: {"program": (bytes,), "dram": (np.ndarray, None)},
    # device memory kept across runs: config JSON and size give a handle
    Msg.OPEN_MEMORY: {"config": (str,), "size": _Int},
    Msg.WRITE: {"handle": _Int, "addr": _Int, "data": (np.ndarray,)},
    Msg.READ: {"handle": _Int, "addr": _Int, "nbytes": _Int},
    Msg.RUN_PLACED: {"handle": _Int, "program": (bytes,)},
    Msg.CLOSE: {"handle": _Int},
    # tracker: servers register and heartbeat, clients acquire and release
    Msg.REGISTER: {"kind": (str,), "address": (str,)},
    Msg.HEARTBEAT: {},
    Msg.ACQUIRE: {"kind": (str,), "wait": _Num},
    Msg.RELEASE: {"lease": _Int},
}

# ----------------------------------------------------------------------- encoding
def _pack_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        if arr.dtype.kind not in _ARRAY_KINDS or arr.dtype.fields is not None:
            raise WireError(f"an array of dtype {arr.dtype} cannot be sent (bool, integer "
                            "and float arrays can)")
        body = msgpack.packb([arr.dtype.str, list(arr.shape), arr.tobytes()],
                             use_bin_type=True)
        return msgpack.ExtType(NDARRAY_EXT, body)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    raise WireError(f"a {type(obj).__name__} cannot be sent (maps, lists, strings, bytes, "
                    "numbers, None and numpy arrays can)")


def _unpack_ext(code: int, data: bytes) -> np.ndarray:
    if code != NDARRAY_EXT:
        raise WireError(f"unknown msgpack extension type {code} (arrays are {NDARRAY_EXT})")
    try:
        dtype_str, shape, raw = msgpack.unpackb(data, raw=False, use_list=True)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise WireError(f"an array extension is not [dtype, shape, bytes]: {exc}") from exc
    if not isinstance(dtype_str, str) or not isinstance(raw, bytes):
        raise WireError("an array extension is not [dtype string, shape, bytes]")
    try:
        dtype = np.dtype(dtype_str)
    except TypeError as exc:
        raise WireError(f"an array's dtype {dtype_str!r} is not a numpy dtype") from exc
    if dtype.kind not in _ARRAY_KINDS or dtype.fields is not None:
        raise WireError(f"an array's dtype {dtype_str!r} is not bool, integer or float")
    if (not isinstance(shape, list) or len(shape) > _MAX_NDIM
            or not all(type(n) is int and n >= 0 for n in shape)):
        raise WireError(f"an array's shape {shape!r} is not a list of at most {_MAX_NDIM} "
                        "non-negative integers")
    count = 1
    for n in shape:
        count *= n
    if count * dtype.itemsize != len(raw):
        raise WireError(f"an array of {dtype} and shape {tuple(shape)} needs "
                        f"{count * dtype.itemsize} bytes, it carries {len(raw)}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def encode_message(message: dict[str, Any]) -> bytes:
    """A frame (header and msgpack payload) carrying ``message``.

    Raises
    ------
    WireError
        A value the format does not carry (see :func:`_pack_default`'s message).
    """
    payload = msgpack.packb(message, default=_pack_default, use_bin_type=True)
    return HEADER.pack(len(payload)) + payload


def decode_message(payload: bytes) -> dict[str, Any]:
    """The message in a frame's payload (the bytes after the header).

    Raises
    ------
    WireError
        Not one msgpack map with a string ``type``, or an array extension that does not
        describe its bytes.
    """
    try:
        message = msgpack.unpackb(payload, raw=False, ext_hook=_unpack_ext,
                                  strict_map_key=True)
    except WireError:
        raise
    except Exception as exc:  # msgpack reports malformed input with many classes
        raise WireError(f"malformed message ({len(payload)} bytes): not msgpack "
                        f"({type(exc).__name__}: {exc})") from exc
    if not isinstance(message, dict):
        raise WireError(f"malformed message: a {type(message).__name__}, not a map")
    if not isinstance(message.get("type"), str):
        raise WireError("malformed message: no string 'type' field")
    return message


# -------------------------------------------------------------------- socket I/O
def send_message(sock: socket.socket, message: dict[str, Any],
                 timeout: float | None = None) -> None:
    """Send ``message`` as one frame (within ``timeout`` seconds per send call)."""
    frame = encode_message(message)
    sock.settimeout(timeout)
    sock.sendall(frame)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None, what: str) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{what}: {got} of {n} bytes arrived in time")
            sock.settimeout(left)
        else:
            sock.settimeout(None)
        try:
            k = sock.recv_into(view[got:])
        except TimeoutError:
            raise TimeoutError(f"{what}: {got} of {n} bytes arrived in time") from None
        if k == 0:
            if got == 0 and what == "header":
                raise ConnectionClosed("the peer closed the connection")
            raise WireError(f"the connection closed in a frame's {what} ({got} of {n} "
                            "bytes)")
        got += k
    return bytes(buf)


def recv_message(sock: socket.socket, *, max_bytes: int = MAX_MESSAGE_BYTES,
                 deadline: float | None = None,
                 body_timeout: float | None = None) -> dict[str, Any]:
    """Read one frame and decode it.

    Parameters
    ----------
    sock : socket.socket
        A connected stream socket.
    max_bytes : int
        Largest payload accepted; a longer one is refused from its header alone.
    deadline : float | None
        ``time.monotonic()`` by which the whole message must have arrived (``None``:
        wait for the header without limit).
    body_timeout : float | None
        Seconds the payload may take once the header is in (also bounded by
        ``deadline``).

    Raises
    ------
    ConnectionClosed
        The peer closed the connection before a header.
    WireError
        A frame over ``max_bytes``, one cut short, or a malformed payload.
    TimeoutError
        The deadline passed.
    """
    (length,) = HEADER.unpack(_recv_exact(sock, HEADER.size, deadline, "header"))
    if length > max_bytes:
        raise WireError(f"a frame of {length} bytes is over the {max_bytes}-byte limit")
    if body_timeout is not None:
        body_deadline = time.monotonic() + body_timeout
        deadline = body_deadline if deadline is None else min(deadline, body_deadline)
    return decode_message(_recv_exact(sock, length, deadline, "payload"))


# ------------------------------------------------------------------ messages
def check_request(message: dict[str, Any]) -> tuple[Msg, dict[str, Any]]:
    """The type and fields of a request, checked against :data:`REQUESTS`.

    Raises
    ------
    WireError
        An unknown type, a missing or unknown field, or a field of the wrong type
        (naming the request and the field).
    """
    name = message.get("type")
    try:
        kind = Msg(name)
        spec = REQUESTS[kind]
    except (ValueError, KeyError):
        known = ", ".join(m.value for m in REQUESTS)
        raise WireError(f"unknown request {name!r} (known: {known})") from None
    fields = {k: v for k, v in message.items() if k != "type"}
    extra = sorted(set(fields) - set(spec))
    if extra:
        raise WireError(f"{kind.value}: unknown field(s) {', '.join(map(str, extra))} "
                        f"(expected: {', '.join(spec) or 'none'})")
    for key, types in spec.items():
        value = fields.get(key)
        if value is None:
            if None not in types:
                raise WireError(f"{kind.value}: field {key!r} is missing")
            fields[key] = None
            continue
        accepted = tuple(t for t in types if t is not None)
        if isinstance(value, bool) or not isinstance(value, accepted):
            names = " or ".join(t.__name__ for t in accepted)
            raise WireError(f"{kind.value}: field {key!r} is a {type(value).__name__}, "
                            f"not {names}")
    return kind, fields


def ok_reply(**fields: Any) -> dict[str, Any]:
    """A success reply carrying ``fields``."""
    return {"type": Msg.OK.value, **fields}


def error_reply(exc: BaseException) -> dict[str, Any]:
    """An error reply naming ``exc``'s class and carrying its message."""
    return {"type": Msg.ERROR.value, "error": type(exc).__name__, "message": str(exc)}


# ------------------------------------------------------------------ run results
def result_to_wire(result: RunResult) -> dict[str, Any]:
    """The fields of a RUN or RUN_PLACED reply: ``dram``, ``outputs``, ``counters``,
    ``cycles``, ``device``, and ``csrs``, ``memory`` and ``clock_hz`` when the executor
    reports them (:class:`~tensorfab.sim.rtl.device.RtlRunResult`,
    :class:`~tensorfab.hil.board.BoardRunResult`)."""
    out: dict[str, Any] = {
        "dram": result.dram,
        "outputs": dict(result.outputs),
        "counters": result.counters.to_dict(),
        "cycles": result.cycles,
        "device": result.device,
    }
    for extra in ("csrs", "memory"):
        value = getattr(result, extra, None)
        if value is not None:
            out[extra] = {str(k): int(v) for k, v in value.items()}
    if getattr(result, "clock_hz", None):
        out["clock_hz"] = int(result.clock_hz)  # type: ignore[attr-defined]
    return out


def _int_map(fields: dict[str, Any], key: str) -> dict[str, int]:
    value = fields.get(key)
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and type(v) is int for k, v in value.items()):
        raise WireError(f"run result: {key!r} is not a map of names to integers")
    return value


def result_from_wire(fields: dict[str, Any]) -> RunResult:
    """The :class:`~tensorfab.isa.device.RunResult` of a RUN or RUN_PLACED reply
    (an :class:`~tensorfab.sim.rtl.device.RtlRunResult` when it carries ``csrs``, a
    :class:`~tensorfab.hil.board.BoardRunResult` when it also carries a board's
    ``clock_hz``).

    Raises
    ------
    WireError
        A field missing or of the wrong type.
    """
    dram = fields.get("dram")
    if dram is not None and not isinstance(dram, np.ndarray):
        raise WireError("run result: 'dram' is not an array")
    outputs = fields.get("outputs")
    if not isinstance(outputs, dict) or not all(
            isinstance(k, str) and isinstance(v, np.ndarray) for k, v in outputs.items()):
        raise WireError("run result: 'outputs' is not a map of names to arrays")
    counts = _int_map(fields, "counters")
    known = set(Counters().to_dict())
    if set(counts) - known:
        raise WireError(f"run result: unknown counters {sorted(set(counts) - known)}")
    cycles = fields.get("cycles")
    if cycles is not None and type(cycles) is not int:
        raise WireError("run result: 'cycles' is not an integer")
    device = fields.get("device")
    if not isinstance(device, str):
        raise WireError("run result: 'device' is not a string")
    common = dict(dram=dram, outputs=outputs, counters=Counters(**counts), cycles=cycles,
                  device=device)
    clock_hz = fields.get("clock_hz")
    if clock_hz is not None and (type(clock_hz) is not int or clock_hz <= 0):
        raise WireError("run result: 'clock_hz' is not a positive integer")
    if "csrs" in fields and clock_hz is not None:
        from .board import BoardRunResult

        return BoardRunResult(**common, csrs=_int_map(fields, "csrs"), clock_hz=clock_hz)
    if "csrs" in fields:
        from tensorfab.sim.rtl.device import RtlRunResult

        return RtlRunResult(**common, csrs=_int_map(fields, "csrs"),
                            memory=_int_map(fields, "memory") if "memory" in fields else {})
    return RunResult(**common)
