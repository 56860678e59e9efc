"""The host link: the framed, versioned protocol between a host and an SoC's bridge.

Declared once here. The gateware (:mod:`tensorfab.hw.soc.framer` and
:mod:`tensorfab.hw.soc.executor`, joined in :mod:`tensorfab.hw.soc.bridge`) takes
its header fields, constants, command codes and payload layouts from this module,
and the host side encodes requests and decodes responses with the functions below.

Frame (all integers little-endian)::

    offset  size  field
    0       2     MAGIC (0x54 0x46, "TF")
    2       1     VERSION
    3       1     seq       request: chosen by the host; response: echoed
    4       1     cmd       request: a Command; response: cmd | RESPONSE, or NAK
    5       2     length    payload bytes, at most MAX_PAYLOAD
    7       n     payload
    7 + n   4     CRC-32 (zlib's) of bytes 0 .. 7 + n - 1

A request gets exactly one response frame. A NAK's payload is two bytes: the
:class:`NakReason` and the command byte received. A frame whose magic does not
match is never answered (the receiver hunts for the next magic); a frame whose
bytes stop arriving for ``RX_TIMEOUT_BYTES`` byte times is dropped with a NAK
TIMEOUT. The host sends a request only after the previous response (or its own
timeout): the bridge does not read while it executes or answers.

Retries. The host gives each new request the next ``seq`` (mod 256). When it
retries a request (after its own timeout, a corrupted response, or a NAK BAD_CRC
or TIMEOUT) it sends the very same bytes again: same ``seq``, same CRC. The
bridge remembers the ``seq`` and the CRC-32 of the last request it *executed* (a
NAKed request was not executed; nothing is remembered after power-up, and the
RESET command does not reset the bridge). A request whose ``seq`` and CRC both
equal the remembered ones is a retry:

- a command of :data:`SIDE_EFFECTS` (WRITE_MEM, WRITE_CSR, START, RESET) is not
  executed again, and the bridge answers with the success response it sent the
  first time (empty payload, ``cmd | RESPONSE``, the same ``seq``), even if the
  core now runs (a retried START after a lost response is not BUSY);
- any other command (INFO, READ_MEM, READ_CSR, STATUS, COUNTERS) executes again.

Only the last executed request is remembered: a retry is the very next request
after the one it repeats, and a frame with the same ``seq`` but other bytes is a
new request. A host that opens a session on a bridge that may have served
another one starts with a request outside :data:`SIDE_EFFECTS` (INFO), so its
first side effect can never match a request of the previous session.

Memory accesses are whole bus beats: the address and the data length must be
multiples of the beat (``mem_bus_width / 8`` bytes, :attr:`LinkInfo.beat_bytes`).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum

from .config import HwConfig
from .csr import CSR_BY_NAME
from .errors import TensorfabError

__all__ = [
    "COUNTER_CSRS",
    "CRC_BYTES",
    "HEADER",
    "HEADER_BYTES",
    "HEADER_FIELDS",
    "MAGIC",
    "MAX_DATA",
    "MAX_FRAME",
    "MAX_PAYLOAD",
    "NAK",
    "REQUEST_ARGS",
    "RESPONSE",
    "RX_TIMEOUT_BYTES",
    "SIDE_EFFECTS",
    "STATUS_CSRS",
    "VERSION",
    "Command",
    "Frame",
    "FrameCrcError",
    "FrameError",
    "FrameMagicError",
    "FrameReader",
    "FrameTooLongError",
    "FrameTruncatedError",
    "FrameVersionError",
    "HostLinkError",
    "LinkInfo",
    "LinkStatus",
    "NakError",
    "NakReason",
    "ResponseMismatch",
    "config_crc",
    "crc32",
    "decode_frame",
    "encode_frame",
    "request",
    "response_payload",
]

MAGIC = b"TF"
VERSION = 2
#: Header fields in order, with their sizes in bytes (integers little-endian).
HEADER_FIELDS: tuple[tuple[str, int], ...] = (("magic", 2), ("version", 1), ("seq", 1),
                                              ("cmd", 1), ("length", 2))
#: Header layout: magic, version, seq, cmd, length.
HEADER = struct.Struct("<2sBBBH")
assert HEADER.size == sum(size for _, size in HEADER_FIELDS) and len(MAGIC) == 2
HEADER_BYTES = HEADER.size
CRC_BYTES = 4
#: Largest data block of one READ_MEM or WRITE_MEM.
MAX_DATA = 256
#: Largest payload of any frame (a WRITE_MEM: 4 address bytes + MAX_DATA).
MAX_PAYLOAD = 4 + MAX_DATA
MAX_FRAME = HEADER_BYTES + MAX_PAYLOAD + CRC_BYTES
#: A response's cmd byte is the request's with this bit set.
RESPONSE = 0x80
#: cmd byte of a negative acknowledgement.
NAK = 0xFF
#: Byte times without a byte after which the bridge drops a partial frame.
RX_TIMEOUT_BYTES = 32


class Command(IntEnum):
    """Request commands (``cmd`` byte of a request)."""

    INFO = 0x01  #: -> LinkInfo
    READ_MEM = 0x02  #: addr u32, length u16 -> data
    WRITE_MEM = 0x03  #: addr u32, data -> (empty)
    READ_CSR = 0x04  #: offset u8 -> value u32
    WRITE_CSR = 0x05  #: offset u8, value u32 -> (empty)
    START = 0x06  #: insn_base u32, insn_count u32, dram_size u32 -> (empty)
    STATUS = 0x07  #: -> STATUS_CSRS values, u32 each
    COUNTERS = 0x08  #: -> COUNTER_CSRS values, u32 each
    RESET = 0x09  #: -> (empty), sent before the core and memory controller reset


class NakReason(IntEnum):
    """First payload byte of a NAK."""

    BAD_CRC = 1
    BAD_VERSION = 2
    BAD_COMMAND = 3
    BAD_LENGTH = 4  #: payload length wrong for the command, or above MAX_PAYLOAD
    BAD_ADDRESS = 5  #: unaligned, not whole beats, or past the end of memory
    BUSY = 6  #: memory access or START while the core runs
    TIMEOUT = 7  #: the frame stopped arriving


#: Commands a retry (same seq and CRC as the last executed request) does not execute
#: again; the others have no side effect and execute again.
SIDE_EFFECTS: frozenset[Command] = frozenset({Command.WRITE_MEM, Command.WRITE_CSR,
                                              Command.START, Command.RESET})

#: Fixed request payload layouts (``struct`` formats); WRITE_MEM is ``<I`` + data.
REQUEST_ARGS: dict[Command, str] = {
    Command.INFO: "<",
    Command.READ_MEM: "<IH",
    Command.WRITE_MEM: "<I",
    Command.READ_CSR: "<B",
    Command.WRITE_CSR: "<BI",
    Command.START: "<III",
    Command.STATUS: "<",
    Command.COUNTERS: "<",
    Command.RESET: "<",
}

#: CSRs a STATUS response carries, in order.
STATUS_CSRS: tuple[str, ...] = ("STATUS", "ERROR_CODE", "ERROR_INDEX", "CYCLES")
#: CSRs a COUNTERS response carries, in order.
COUNTER_CSRS: tuple[str, ...] = ("CYCLES", "LOAD_BUSY", "LOAD_STALL", "COMPUTE_BUSY",
                                 "COMPUTE_STALL", "STORE_BUSY", "STORE_STALL", "GEMM_BUSY",
                                 "ALU_BUSY", "LOAD_INSNS", "COMPUTE_INSNS", "STORE_INSNS")
assert all(n in CSR_BY_NAME for n in STATUS_CSRS + COUNTER_CSRS)

#: INFO response layout: version, beat bytes, max payload, memory bytes, clock Hz,
#: baud, CRC-32 of the config's JSON.
INFO_FORMAT = struct.Struct("<BBHIIII")


# ------------------------------------------------------------------------- errors
class HostLinkError(TensorfabError):
    """Base class of host-link errors."""


class FrameError(HostLinkError):
    """A received frame that cannot be accepted."""


class FrameMagicError(FrameError):
    """The frame does not start with :data:`MAGIC`."""


class FrameVersionError(FrameError):
    """The frame's version is not :data:`VERSION`."""


class FrameTruncatedError(FrameError):
    """Fewer bytes than the header's length field announces."""


class FrameTooLongError(FrameError):
    """A length field above :data:`MAX_PAYLOAD`."""


class FrameCrcError(FrameError):
    """The CRC-32 does not match the frame's bytes."""


class NakError(HostLinkError):
    """The bridge answered with a NAK.

    Attributes
    ----------
    reason : NakReason | int
    command : int
        The command byte the bridge received.
    """

    def __init__(self, reason: int, command: int) -> None:
        try:
            self.reason: NakReason | int = NakReason(reason)
            name = self.reason.name
        except ValueError:
            self.reason, name = reason, f"unknown reason {reason}"
        self.command = command
        try:
            cname = Command(command).name
        except ValueError:
            cname = f"0x{command:02x}"
        super().__init__(f"NAK {name} for command {cname}")


class ResponseMismatch(HostLinkError):
    """A response whose sequence number, command or length does not fit the request."""


# --------------------------------------------------------------------------- frames
def crc32(data: bytes) -> int:
    """CRC-32 of the frame check (IEEE 802.3, reflected, as :func:`zlib.crc32`).

    Written out bit by bit: the gateware computes the same recurrence per byte.
    """
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


@dataclass(frozen=True)
class Frame:
    """One decoded frame."""

    seq: int
    cmd: int
    payload: bytes
    version: int = VERSION


def encode_frame(seq: int, cmd: int, payload: bytes = b"") -> bytes:
    """The bytes of one frame.

    Raises
    ------
    FrameTooLongError
        If the payload exceeds :data:`MAX_PAYLOAD`.
    ValueError
        If ``seq`` or ``cmd`` is not a byte.
    """
    if len(payload) > MAX_PAYLOAD:
        raise FrameTooLongError(f"payload of {len(payload)} bytes exceeds MAX_PAYLOAD "
                                f"({MAX_PAYLOAD})")
    for name, v in (("seq", seq), ("cmd", cmd)):
        if not 0 <= v <= 255:
            raise ValueError(f"{name} = {v} is not a byte")
    head = HEADER.pack(MAGIC, VERSION, seq, cmd, len(payload)) + bytes(payload)
    return head + zlib.crc32(head).to_bytes(4, "little")


def decode_frame(data: bytes) -> Frame:
    """Decode exactly one frame.

    Raises
    ------
    FrameMagicError, FrameVersionError, FrameTooLongError, FrameTruncatedError,
    FrameCrcError
        Named for what is wrong; trailing bytes count as a wrong length.
    """
    if len(data) < HEADER_BYTES:
        raise FrameTruncatedError(f"{len(data)} bytes, fewer than the {HEADER_BYTES}-byte "
                                  "header")
    magic, version, seq, cmd, length = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise FrameMagicError(f"magic {magic!r}, expected {MAGIC!r}")
    if length > MAX_PAYLOAD:
        raise FrameTooLongError(f"length field {length} exceeds MAX_PAYLOAD ({MAX_PAYLOAD})")
    want = HEADER_BYTES + length + CRC_BYTES
    if len(data) < want:
        raise FrameTruncatedError(f"{len(data)} bytes, the header announces {want}")
    if len(data) > want:
        raise FrameTruncatedError(f"{len(data)} bytes, the header announces only {want}")
    body = data[:HEADER_BYTES + length]
    got = int.from_bytes(data[HEADER_BYTES + length:want], "little")
    if zlib.crc32(body) != got:
        raise FrameCrcError(f"CRC-32 0x{got:08x}, the bytes give 0x{zlib.crc32(body):08x}")
    if version != VERSION:
        raise FrameVersionError(f"version {version}, this host speaks {VERSION}")
    return Frame(seq, cmd, bytes(data[HEADER_BYTES:HEADER_BYTES + length]), version)


class FrameReader:
    """Incremental decoder: feed bytes as they arrive, take frames as they complete.

    Bytes before a magic are skipped (counted in :attr:`skipped`). A frame with a
    bad CRC, length or version raises from :meth:`feed`, and the reader resumes
    hunting after that frame's first byte.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self.skipped = 0

    def feed(self, data: bytes) -> list[Frame]:
        """Add bytes; return the frames completed (in order)."""
        self._buf += data
        frames = []
        while True:
            at = self._buf.find(MAGIC)
            if at < 0:
                keep = 1 if self._buf[-1:] == MAGIC[:1] else 0
                self.skipped += len(self._buf) - keep
                del self._buf[:len(self._buf) - keep]
                return frames
            self.skipped += at
            del self._buf[:at]
            if len(self._buf) < HEADER_BYTES:
                return frames
            length = HEADER.unpack_from(self._buf)[4]
            if length > MAX_PAYLOAD:
                del self._buf[:1]
                raise FrameTooLongError(f"length field {length} exceeds MAX_PAYLOAD "
                                        f"({MAX_PAYLOAD})")
            n = HEADER_BYTES + length + CRC_BYTES
            if len(self._buf) < n:
                return frames
            raw = bytes(self._buf[:n])
            try:
                frames.append(decode_frame(raw))
            except FrameError:
                del self._buf[:1]
                raise
            del self._buf[:n]

    @property
    def pending(self) -> int:
        """Bytes held of a frame not yet complete."""
        return len(self._buf)


# ---------------------------------------------------------- requests and responses
def request(seq: int, cmd: Command, *args: int, data: bytes = b"") -> bytes:
    """Encode a request frame from its arguments (:data:`REQUEST_ARGS`).

    Examples
    --------
    >>> len(request(0, Command.READ_MEM, 0x100, 16))
    17
    """
    payload = struct.pack(REQUEST_ARGS[cmd], *args) + data
    return encode_frame(seq, int(cmd), payload)


@dataclass(frozen=True)
class LinkInfo:
    """The INFO response: what the SoC at the other end is."""

    version: int
    beat_bytes: int
    max_payload: int
    mem_bytes: int
    clock_hz: int
    baud: int
    config_crc: int

    @classmethod
    def unpack(cls, payload: bytes) -> LinkInfo:
        """Decode an INFO payload."""
        return cls(*INFO_FORMAT.unpack(payload))

    def pack(self) -> bytes:
        """Encode as an INFO payload (what the gateware sends)."""
        return INFO_FORMAT.pack(self.version, self.beat_bytes, self.max_payload,
                                self.mem_bytes, self.clock_hz, self.baud, self.config_crc)


def config_crc(cfg: HwConfig) -> int:
    """The CRC-32 of a config's JSON (:meth:`HwConfig.to_json`): what INFO reports as
    ``config_crc``, and what a host compares with its program's config."""
    return zlib.crc32(cfg.to_json().encode())


@dataclass(frozen=True)
class LinkStatus:
    """The STATUS response."""

    status: int
    error_code: int
    error_index: int
    cycles: int

    @property
    def busy(self) -> bool:
        """STATUS.busy."""
        return bool(self.status & 1)

    @property
    def done(self) -> bool:
        """STATUS.done."""
        return bool(self.status & 2)

    @property
    def error(self) -> bool:
        """STATUS.error."""
        return bool(self.status & 4)


def response_length(cmd: Command, *args: int) -> int:
    """Payload bytes of a successful response to ``cmd`` with these arguments."""
    if cmd is Command.READ_MEM:
        return args[1]
    return {Command.INFO: INFO_FORMAT.size, Command.READ_CSR: 4,
            Command.STATUS: 4 * len(STATUS_CSRS),
            Command.COUNTERS: 4 * len(COUNTER_CSRS)}.get(cmd, 0)


def response_payload(frame: Frame, seq: int, cmd: Command, *args: int) -> bytes:
    """Check a response frame against its request and return its payload.

    Raises
    ------
    NakError
        The response is a NAK.
    ResponseMismatch
        Wrong sequence number, command or payload length.
    """
    if frame.cmd == NAK:
        if len(frame.payload) != 2:
            raise ResponseMismatch(f"NAK with a {len(frame.payload)}-byte payload, not 2")
        raise NakError(frame.payload[0], frame.payload[1])
    if frame.seq != seq:
        raise ResponseMismatch(f"response seq {frame.seq}, request seq {seq}")
    if frame.cmd != int(cmd) | RESPONSE:
        raise ResponseMismatch(f"response cmd 0x{frame.cmd:02x} to {cmd.name} "
                               f"(expected 0x{int(cmd) | RESPONSE:02x})")
    want = response_length(cmd, *args)
    if len(frame.payload) != want:
        raise ResponseMismatch(f"{cmd.name} response of {len(frame.payload)} bytes, "
                               f"expected {want}")
    return frame.payload


def u32s(payload: bytes) -> tuple[int, ...]:
    """A payload of little-endian u32 values."""
    return struct.unpack(f"<{len(payload) // 4}I", payload)
