"""The host side of the host link: requests to an SoC's bridge over any transport.

:class:`HostLink` frames each request (:mod:`tensorfab.isa.hostlink`, the one
declaration of the protocol), waits for its response and retries what was lost or
corrupted with the very same bytes (same sequence number, same CRC), which the bridge
recognises: a retried WRITE_MEM, WRITE_CSR, START or RESET is answered but never
applied twice. Bulk transfers shrink their blocks while the link is noisy and grow
them back when it is clean. The same client serves a board's serial port, a virtual
board's TCP socket or pty, and a recorded fixture (:mod:`tensorfab.hil.transport`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tensorfab.isa import hostlink as hl

from .errors import BoardError, LinkError, LinkTimeout
from .transport import Transport

__all__ = ["MIN_BLOCK", "RETRYABLE_NAKS", "HostLink", "LinkStats"]

#: NAKs a corrupted or cut request can cause: the host only sends well-formed
#: requests, so these are retried; BAD_ADDRESS and BUSY are the board's answer.
#: Smallest block a noisy bulk transfer shrinks to (bytes).
MIN_BLOCK = 16

RETRYABLE_NAKS = frozenset({hl.NakReason.BAD_CRC, hl.NakReason.TIMEOUT,
                            hl.NakReason.BAD_LENGTH, hl.NakReason.BAD_COMMAND,
                            hl.NakReason.BAD_VERSION})


@dataclass
class LinkStats:
    """Traffic and faults of a :class:`HostLink`.

    Attributes
    ----------
    requests : int
        Requests answered successfully.
    retries : int
        Requests sent again (after a timeout, a corrupted response or a retryable NAK).
    recovered : int
        Requests that needed a retry and then succeeded.
    reported : int
        Requests given up on (raised to the caller).
    corrupt_responses : int
        Received frames that failed their check (CRC, length, version).
    stale_responses : int
        Responses to an earlier request, dropped.
    bytes_out, bytes_in : int
        Bytes written and read.
    payload_out, payload_in : int
        Memory bytes moved by WRITE_MEM and READ_MEM.
    faults : dict[str, int]
        What caused the retries, by kind.
    """

    requests: int = 0
    retries: int = 0
    recovered: int = 0
    reported: int = 0
    corrupt_responses: int = 0
    stale_responses: int = 0
    bytes_out: int = 0
    bytes_in: int = 0
    payload_out: int = 0
    payload_in: int = 0
    faults: dict[str, int] = field(default_factory=dict)

    def fault(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1


class HostLink:
    """Requests over a :class:`~tensorfab.hil.transport.Transport`.

    Parameters
    ----------
    transport : Transport
        The byte pipe.
    timeout : float
        Seconds to wait for a response beyond the bytes' own time on the wire
        (``transport.byte_seconds`` per byte, twice over).
    retries : int
        Times a request is sent again before :class:`LinkTimeout` or the NAK is raised.
    block : int
        Largest memory block of one WRITE_MEM or READ_MEM (at most
        :data:`~tensorfab.isa.hostlink.MAX_DATA`).
    name : str, optional
        The board's target (``serial:///dev/ttyUSB0``), which the errors name; default:
        the transport's ``url``, else ``host link``.

    Attributes
    ----------
    transfer_progress : callable or None
        Called after each block of :meth:`write_mem` and :meth:`read_mem` with
        ``("write" or "read", bytes done, bytes of the whole transfer)``: a model
        loaded over a UART takes minutes, and a command line shows how far it is.
    """

    def __init__(self, transport: Transport, *, timeout: float = 1.0, retries: int = 8,
                 block: int = hl.MAX_DATA, name: str | None = None) -> None:
        if not 0 < block <= hl.MAX_DATA:
            raise LinkError(f"block {block} must be in 1..{hl.MAX_DATA}")
        self.transport = transport
        self.name: str = name or getattr(transport, "url", None) or "host link"
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.max_block = block
        self.stats = LinkStats()
        self._seq = 0
        self._reader = hl.FrameReader()
        self._beat = 1
        self._block = block
        self.transfer_progress: Callable[[str, int, int], None] | None = None

    # ------------------------------------------------------------------ one request
    def call(self, cmd: hl.Command, *args: int, data: bytes = b"") -> bytes:
        """Send one request and return its response payload, retrying as the class says.

        Raises
        ------
        NakError
            The bridge refused the request (BAD_ADDRESS, BUSY), or a retryable NAK
            persisted through every retry.
        LinkTimeout
            No valid response after every retry.
        """
        try:
            return self._call(cmd, args, data, self.retries)
        except (hl.NakError, LinkTimeout):
            self.stats.reported += 1
            raise

    def _call(self, cmd: hl.Command, args: tuple[int, ...], data: bytes, retries: int
              ) -> bytes:
        self._seq = (self._seq + 1) & 0xFF
        seq = self._seq
        frame = hl.request(seq, cmd, *args, data=data)
        want = hl.HEADER_BYTES + hl.response_length(cmd, *args) + hl.CRC_BYTES
        wait = self.timeout + 2 * (len(frame) + want) * self.transport.byte_seconds
        last: Exception | None = None
        received = self.stats.bytes_in
        for attempt in range(retries + 1):
            if attempt:
                self.stats.retries += 1
                self.transport.discard_input()
                self._reader = hl.FrameReader()
            self.transport.write(frame)
            self.stats.bytes_out += len(frame)
            try:
                payload = self._response(seq, cmd, args, wait)
            except hl.NakError as exc:
                if exc.reason not in RETRYABLE_NAKS:
                    raise
                self.stats.fault(f"nak_{exc.reason.name.lower()}")
                last = exc
                continue
            except _Lost as exc:
                self.stats.fault(exc.kind)
                last = exc
                continue
            self.stats.requests += 1
            if attempt:
                self.stats.recovered += 1
            return payload
        if isinstance(last, hl.NakError):
            raise last
        received = self.stats.bytes_in - received
        heard = (f"{received} bytes received, none a response" if received else
                 "nothing received")
        raise LinkTimeout(f"{self.name}: no valid response to {cmd.name} (seq {seq}) after "
                          f"{retries + 1} attempts ({heard}): {last}")

    def _response(self, seq: int, cmd: hl.Command, args: tuple[int, ...],
                  wait: float) -> bytes:
        deadline = time.monotonic() + wait
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Lost("timeout", f"no response within {wait:.3g} s")
            chunk = self.transport.read(4096, left)
            self.stats.bytes_in += len(chunk)
            try:
                frames = self._reader.feed(chunk)
            except hl.FrameVersionError:
                raise
            except hl.FrameError as exc:
                self.stats.corrupt_responses += 1
                raise _Lost("corrupt_response", str(exc)) from None
            for frame in frames:
                if frame.cmd != hl.NAK and frame.seq != seq:
                    self.stats.stale_responses += 1
                    continue
                try:
                    return hl.response_payload(frame, seq, cmd, *args)
                except hl.ResponseMismatch as exc:
                    self.stats.corrupt_responses += 1
                    raise _Lost("mismatched_response", str(exc)) from None

    # ------------------------------------------------------------------- commands
    def info(self) -> hl.LinkInfo:
        """INFO, which also sets the beat that memory transfers are aligned to.

        Raises
        ------
        BoardError
            The board speaks another protocol version (its bitstream is older or newer
            than this host's tensorfab).
        LinkTimeout
            No answer (the first request of a session: the port has no board, or the
            bit rate is not the board's), naming the port.
        """
        try:
            info = hl.LinkInfo.unpack(self.call(hl.Command.INFO))
        except LinkTimeout as exc:
            rate = ("" if self.name.startswith("socket://") or not self.transport.byte_seconds
                    else f", at {10 / self.transport.byte_seconds:.0f} baud (?baud=N)")
            raise LinkTimeout(f"{exc}: is this the port of a board with a tensorfab "
                              f"bitstream{rate}?") from None
        except hl.FrameVersionError as exc:
            raise BoardError(f"the board's host-link frames are of another version ({exc}); "
                             "build its bitstream with this tensorfab") from None
        if info.version != hl.VERSION:
            raise BoardError(f"the board speaks host-link version {info.version}, this host "
                             f"{hl.VERSION}; build its bitstream with this tensorfab")
        self._beat = info.beat_bytes
        self._block = max(self._beat, self.max_block // self._beat * self._beat)
        self.max_block = self._block
        return info

    def write_mem(self, addr: int, data: bytes) -> None:
        """Write whole beats at ``addr`` (a beat multiple), in blocks."""
        off = 0
        while off < len(data):
            n = self._transfer(hl.Command.WRITE_MEM, addr + off, len(data) - off, data, off)
            self.stats.payload_out += n
            off += n
            if self.transfer_progress is not None:
                self.transfer_progress("write", off, len(data))

    def read_mem(self, addr: int, nbytes: int) -> bytes:
        """Read ``nbytes`` (whole beats) from ``addr``, in blocks."""
        out = bytearray()
        while len(out) < nbytes:
            n = self._transfer(hl.Command.READ_MEM, addr + len(out), nbytes - len(out), out,
                               len(out))
            self.stats.payload_in += n
            if self.transfer_progress is not None:
                self.transfer_progress("read", len(out), nbytes)
        return bytes(out)

    def _transfer(self, cmd: hl.Command, addr: int, left: int, buf: bytes | bytearray,
                  off: int) -> int:
        """Move one block of a bulk transfer; returns its size.

        A block that fails is not retried whole: it is given up after one retry and the
        block halves (a long frame is likelier hit; memory reads and writes may be
        repeated, unlike START), down to :data:`MIN_BLOCK`, which gets every retry.
        After a clean block the size doubles back.
        """
        floor = max(self._beat, MIN_BLOCK // self._beat * self._beat)
        write = cmd is hl.Command.WRITE_MEM
        while True:
            n = min(self._block, left)
            small = self._block <= floor
            retries = self.stats.retries
            try:
                got = self._call(cmd, (addr,) if write else (addr, n),
                                 bytes(buf[off:off + n]) if write else b"",
                                 self.retries if small else 1)
            except (hl.NakError, LinkTimeout) as exc:
                if small or (isinstance(exc, hl.NakError)
                             and exc.reason not in RETRYABLE_NAKS):
                    self.stats.reported += 1
                    raise
                self._block = max(floor, self._block // 2 // self._beat * self._beat)
                continue
            if not write:
                assert isinstance(buf, bytearray)
                buf += got
            if self.stats.retries > retries:
                self._block = max(floor, self._block // 2 // self._beat * self._beat)
            else:
                self._block = min(self.max_block, self._block * 2)
            return n

    def read_csr(self, offset: int) -> int:
        """One CSR by byte offset."""
        return hl.u32s(self.call(hl.Command.READ_CSR, offset))[0]

    def write_csr(self, offset: int, value: int) -> None:
        """Write one CSR by byte offset."""
        self.call(hl.Command.WRITE_CSR, offset, value)

    def start(self, insn_base: int, insn_count: int, dram_size: int) -> None:
        """START a program (applied once however often the request is retried)."""
        self.call(hl.Command.START, insn_base, insn_count, dram_size)

    def status(self) -> hl.LinkStatus:
        """STATUS, ERROR_CODE, ERROR_INDEX, CYCLES."""
        return hl.LinkStatus(*hl.u32s(self.call(hl.Command.STATUS)))

    def counters(self) -> dict[str, int]:
        """The counter CSRs by name (:data:`~tensorfab.isa.hostlink.COUNTER_CSRS`)."""
        return dict(zip(hl.COUNTER_CSRS, hl.u32s(self.call(hl.Command.COUNTERS)),
                        strict=True))

    def reset(self) -> None:
        """Reset the core and the memory controller (memory contents stay)."""
        self.call(hl.Command.RESET)

    def close(self) -> None:
        """Close the transport."""
        self.transport.close()


class _Lost(LinkError):
    """A response that did not come or could not be used (retried)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
