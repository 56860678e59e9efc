"""Byte transports of the host link: a serial port or a TCP socket (one code path,
pyserial's ``serial_for_url``), and wrappers that record or replay the traffic.

A transport moves bytes and knows nothing of frames; :class:`tensorfab.hil.link.HostLink`
speaks the protocol over any of them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qs, urlsplit

from .errors import LinkError, ReplayMismatch, TokenError

__all__ = ["BAD_TOKEN", "REFUSED", "TOKEN_LINE", "RecordingTransport", "ReplayTransport",
           "SerialTransport", "Transport", "parse_link_url"]

#: What a client of a board server (:mod:`tensorfab.hil.board_server`) sends first:
#: this, its token and a newline.
TOKEN_LINE = b"TOKEN "
#: What a board server sends before it closes a connection it refuses: this, the
#: reason and a newline.
REFUSED = b"REFUSED: "
#: The reason it gives for a token line that is wrong or missing.
BAD_TOKEN = "wrong or missing token"
#: Longest refusal line read (bytes).
MAX_REFUSAL = 256


class Transport(Protocol):
    """What :class:`~tensorfab.hil.link.HostLink` needs of a byte pipe."""

    #: Seconds one byte takes on the wire (0 when unknown); timeouts grow with it.
    byte_seconds: float

    def write(self, data: bytes) -> None:
        """Send ``data``."""

    def read(self, size: int, timeout: float) -> bytes:
        """Up to ``size`` bytes as soon as any arrive; ``b""`` after ``timeout`` seconds."""

    def discard_input(self) -> None:
        """Drop bytes received and not read yet."""

    def close(self) -> None:
        """Release the port or socket."""


def parse_link_url(target: str, baud: int | None = None) -> tuple[str, int]:
    """The pyserial URL and bit rate of a board target.

    ``serial:///dev/ttyUSB0?baud=115200`` → (``/dev/ttyUSB0``, 115200);
    ``socket://127.0.0.1:9000`` and ``tcp://…`` (a raw byte stream, as the virtual
    board serves) → (``socket://127.0.0.1:9000``, ``baud`` or 115200).

    Raises
    ------
    LinkError
        A target of another scheme, without a port or path, whose address cannot be
        parsed (a port beyond 65535, an unclosed ``[``), or with an option it does not
        take (``?baud=`` on both, ``?token=`` on ``socket://``): a misspelt one would
        be left out without a word.
    """
    try:
        parts = urlsplit(target)
        port = parts.port
    except ValueError as exc:  # urllib's 'Port out of range 0-65535', 'Invalid IPv6 URL'
        raise LinkError(f"{target}: not a board address: {exc}") from None
    query = parse_qs(parts.query, keep_blank_values=True)
    takes = ("baud",) if parts.scheme == "serial" else ("baud", "token")
    unknown = sorted(set(query) - set(takes))
    if unknown:
        raise LinkError(f"{target}: unknown option {', '.join(unknown)} (a "
                        f"{parts.scheme}:// target takes {', '.join(takes)})")
    if "baud" in query:
        try:
            baud = int(query["baud"][0])
        except ValueError:
            raise LinkError(f"{target}: baud={query['baud'][0]!r} is not a number") from None
    if baud is None:  # not 'baud or': baud=0 is refused, not taken for the default
        baud = 115200
    if baud <= 0:
        raise LinkError(f"{target}: baud {baud} must be positive")
    if parts.scheme == "serial":
        path = parts.path or parts.netloc
        if not path:
            raise LinkError(f"{target}: no serial port (serial:///dev/ttyUSB0)")
        return path, baud
    if parts.scheme in ("socket", "tcp"):
        if not parts.hostname or not port:
            raise LinkError(f"{target}: give host and port (socket://127.0.0.1:9000)")
        return f"socket://{parts.hostname}:{port}", baud
    raise LinkError(f"{target}: a board link is serial:// or socket://")


def _open_failure(exc: Exception) -> str:
    """Why pyserial could not open a port: the system's reason (``Connection refused``,
    ``No such file or directory``) rather than its ``could not open port URL: [Errno
    N] ...``, which names the port the message already names."""
    cause = exc.__context__
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror
    return str(exc)


class SerialTransport:
    """A serial port or a TCP byte stream through pyserial.

    Parameters
    ----------
    url : str
        pyserial URL: a device path (``/dev/ttyUSB0``, a pty) or ``socket://host:port``.
    baud : int
        Bit rate (8N1: ten bits a byte); for a socket it only sets :attr:`byte_seconds`.
    token : str, optional
        Sent first, as the line ``TOKEN <token>``, to a virtual board's socket
        (:mod:`tensorfab.hil.board_server`), which refuses a connection without it.

    Raises
    ------
    LinkError
        The port cannot be opened (a serial port is opened exclusively: one in use by
        another program is refused, as two programs on one board would garble each
        other's frames), or fails (each read and write).
    TokenError
        A socket's first bytes are a board server's refusal of the token
        (:data:`REFUSED`, :data:`BAD_TOKEN`); another refusal (the board in use) is a
        :class:`LinkError` naming the server's reason.
    """

    def __init__(self, url: str, baud: int = 115200, token: str | None = None) -> None:
        import serial

        self.url = url
        self.baud = int(baud)
        self.byte_seconds = 10.0 / self.baud
        exclusive = None if url.startswith("socket://") else True
        try:
            self._port = serial.serial_for_url(url, baudrate=self.baud, timeout=0,
                                               write_timeout=30, exclusive=exclusive)
        except (serial.SerialException, OSError, ValueError) as exc:
            busy = "exclusively lock" in str(exc)
            raise LinkError(f"cannot open {url}: " + (
                "the port is in use by another program (another tensorfab on this board, a "
                "terminal, or a virtual board's TCP client)" if busy else _open_failure(exc))
            ) from None
        # a socket's first bytes may be a board server's refusal
        self._opening = url.startswith("socket://")
        self._pending = b""
        if token is not None:
            self.write(TOKEN_LINE + token.encode() + b"\n")

    def write(self, data: bytes) -> None:
        import serial

        try:
            self._port.write(data)
            self._port.flush()
        except (serial.SerialException, OSError) as exc:
            raise self._failed("write", exc) from None

    def read(self, size: int, timeout: float) -> bytes:
        import serial

        if self._pending:
            out, self._pending = self._pending[:size], self._pending[size:]
            return out
        self._port.timeout = max(0.0, timeout)
        try:
            first = self._port.read(1)
            if not first:
                return b""
            if self._opening:
                first = self._first_bytes(first)
                if len(first) > size:
                    first, self._pending = first[:size], first[size:]
            self._port.timeout = 0
            return first + self._port.read(max(0, size - len(first)))
        except (serial.SerialException, OSError) as exc:
            raise self._failed("read", exc) from None

    def _first_bytes(self, head: bytes) -> bytes:
        """The first bytes received on a socket, ``head`` and more while they may be
        :data:`REFUSED`: a refusal line is read whole and raised, anything else returned.

        A byte at a time: pyserial's socket read drops what it received when it meets
        the closed socket in the same call, and the server closes right after the line.
        """
        import serial

        self._opening = False
        self._port.timeout = max(self._port.timeout or 0.0, 1.0)
        try:
            while (REFUSED.startswith(head)  # what came may be the start of a refusal
                   or (head.startswith(REFUSED) and not head.endswith(b"\n")
                       and len(head) < MAX_REFUSAL)):
                more = self._port.read(1)
                if not more:
                    break
                head += more
        except (serial.SerialException, OSError):
            if not head.startswith(REFUSED):
                raise
        if not head.startswith(REFUSED):
            return head
        self.close()
        reason = head[len(REFUSED):].decode("latin-1").strip()
        if reason == BAD_TOKEN:
            raise TokenError(self.url, f"the board refused the connection: {reason}")
        raise LinkError(f"{self.url}: the board refused the connection: {reason}")

    def _failed(self, what: str, exc: Exception) -> LinkError:
        """The error of a failed read or write: pyserial's reason without the
        ``read failed:`` it often starts with already, and on a socket whose other end
        closed it, which end that was."""
        detail = str(exc).removeprefix(f"{what} failed: ")
        closed = ("socket disconnected", "Broken pipe", "reset by peer")
        if self.url.startswith("socket://") and any(c in detail for c in closed):
            detail += " (the board's end closed the connection: is its server still running?)"
        return LinkError(f"{self.url}: {what} failed: {detail}")

    def discard_input(self) -> None:
        import serial

        self._pending = b""
        if self._opening:  # a refusal is raised, not dropped
            self.read(MAX_REFUSAL, 0.0)
            self._pending = b""
        try:
            self._port.reset_input_buffer()
        except (serial.SerialException, OSError) as exc:
            raise self._failed("read", exc) from None

    def close(self) -> None:
        self._port.close()


class RecordingTransport:
    """Passes bytes through to ``inner`` and records them, in order, for
    :class:`ReplayTransport` (a JSON file: ``{"byte_seconds": s, "events": [["w"|"r",
    hex], ...]}``)."""

    def __init__(self, inner: Transport, path: str | Path) -> None:
        self.inner = inner
        self.path = Path(path)
        self.byte_seconds = inner.byte_seconds
        self.events: list[list[str]] = []

    def write(self, data: bytes) -> None:
        self.events.append(["w", data.hex()])
        self.inner.write(data)

    def read(self, size: int, timeout: float) -> bytes:
        data = self.inner.read(size, timeout)
        if data:
            self.events.append(["r", data.hex()])
        return data

    def discard_input(self) -> None:
        self.inner.discard_input()

    def save(self) -> Path:
        """Write the recording; returns its path."""
        self.path.write_text(json.dumps({"byte_seconds": self.byte_seconds,
                                         "events": self.events}))
        return self.path

    def close(self) -> None:
        self.save()
        self.inner.close()


class ReplayTransport:
    """A fake port playing back a recording: each write must equal the recorded one
    (else :class:`ReplayMismatch` names the event), and reads return the bytes the
    board sent then. Tests the host side without a simulator or a board."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        doc = json.loads(self.path.read_text())
        self.byte_seconds = float(doc["byte_seconds"])
        self._events = [(kind, bytes.fromhex(data)) for kind, data in doc["events"]]
        self._at = 0
        self._pending = b""

    def _next(self, kind: str) -> bytes | None:
        if self._at < len(self._events) and self._events[self._at][0] == kind:
            self._at += 1
            return self._events[self._at - 1][1]
        return None

    def write(self, data: bytes) -> None:
        want = self._next("w")
        if want is None:
            raise ReplayMismatch(f"{self.path}: event {self._at}: the host writes "
                                 f"{len(data)} bytes where the recording has none")
        if want != data:
            raise ReplayMismatch(f"{self.path}: event {self._at - 1}: the host writes "
                                 f"{data[:16].hex()}…, the recording {want[:16].hex()}…")

    def read(self, size: int, timeout: float) -> bytes:
        if not self._pending:
            self._pending = self._next("r") or b""
            if not self._pending:
                time.sleep(min(timeout, 0.001))
                return b""
        out, self._pending = self._pending[:size], self._pending[size:]
        return out

    def discard_input(self) -> None:
        self._pending = b""

    @property
    def finished(self) -> bool:
        """Every recorded event was played."""
        return self._at == len(self._events) and not self._pending

    def close(self) -> None:
        pass
