"""A virtual board behind a TCP socket and a pty, as a board sits behind its USB-serial
port: ``tensorfab board virtual``.

The host reaches it exactly as a real board, through pyserial: ``socket://HOST:PORT``
(after a ``TOKEN <token>`` line, which the server requires) or the pty's path as a
serial port (``serial:///dev/pts/N``; the pty is the user's alone, mode 0600). One
thread owns the simulation: it feeds received bytes into the SoC's UART, clocks the SoC
while anything is happening, and sends what the board transmits back to whoever spoke
last. One client at a time (a serial port has one user): a second TCP client is
refused, and so is one while a program holds the pty (clients open it exclusively, with
an advisory lock, as :class:`~.transport.SerialTransport` does); while a TCP client is
connected the server holds that lock, so the pty cannot be opened.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import os
import secrets
import select
import socket
import threading
import time
import tty

from .errors import HilError
from .service import is_loopback
from .transport import BAD_TOKEN, REFUSED, TOKEN_LINE
from .virtual import CHUNK_CYCLES, LinkFaults, VirtualBoard

__all__ = ["BoardServer", "board_token"]

#: Longest ``TOKEN ...`` line accepted (bytes).
MAX_TOKEN_LINE = 256


def board_token(host: str, token: str | None) -> str:
    """The token a board server on ``host`` requires: ``token``, or a new one on a
    loopback address. Checked before a board is built (minutes the first time).

    Raises
    ------
    HilError
        No token on a non-loopback address; an empty token, or one a ``TOKEN`` line
        cannot carry (spaces at its ends, a line break), which would let in anyone or no
        one.
    """
    if token is None:
        if not is_loopback(host):
            raise HilError(f"virtual board on {host}: binding beyond this machine needs "
                           "an explicit token (--token)")
        return secrets.token_urlsafe(24)
    if not token.strip():
        raise HilError("virtual board: the token must not be empty")
    if token != token.strip() or "\n" in token or "\r" in token:
        raise HilError(f"virtual board: token {token!r}: no spaces at its ends and no line "
                       "breaks (a client sends it as one line, 'TOKEN <token>')")
    return token


class BoardServer:
    """Serve a :class:`VirtualBoard` on TCP and a pty.

    Parameters
    ----------
    board : VirtualBoard
    host : str
        Address to listen on (default 127.0.0.1, this machine only).
    port : int
        TCP port; 0 picks a free one (:attr:`port`).
    token : str, optional
        The secret a TCP client sends first; made and exposed as :attr:`token` if not
        given (loopback binds only).
    pty : bool
        Also open a pty (:attr:`pty_path`).
    faults : LinkFaults, optional
        Faults injected into both directions.
    hello_timeout : float
        Seconds a TCP client has to send its token line; one that sends none is told
        so (a ``REFUSED`` line) and disconnected.

    Raises
    ------
    HilError
        A non-loopback bind without a token, a token :func:`board_token` refuses, or an
        address that cannot be bound.
    """

    def __init__(self, board: VirtualBoard, host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None, *, pty: bool = True,
                 faults: LinkFaults | None = None, hello_timeout: float = 5.0) -> None:
        self.token = board_token(host, token)
        self.board = board
        self.hello_timeout = hello_timeout
        faults = faults or LinkFaults()
        self._faults_in, self._faults_out = faults.injectors()
        self._held: list[tuple[float, str, bytes]] = []  # (release time, direction, bytes)
        try:
            self._listener = socket.create_server((host, port))
        except OSError as exc:
            raise HilError(f"virtual board: cannot listen on {host}:{port}: "
                           f"{exc.strerror or exc}") from exc
        self.host = host
        self.port: int = self._listener.getsockname()[1]
        self._client: socket.socket | None = None
        self._pending: dict[socket.socket, tuple[float, bytes]] = {}
        self._pty_master: int | None = None
        self.pty_path: str | None = None
        if pty:
            master, slave = os.openpty()
            tty.setraw(slave)
            self.pty_path = os.ttyname(slave)
            os.chmod(self.pty_path, 0o600)
            self._pty_master, self._pty_slave = master, slave
        self._reply_to: str = "tcp"
        self._busy = False
        self._reset = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refused = 0

    @property
    def address(self) -> str:
        """``socket://host:port`` (pyserial's URL of the TCP side)."""
        return f"socket://{self.host}:{self.port}"

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> BoardServer:
        """Serve in a background thread."""
        self._thread = threading.Thread(target=self.serve_forever, daemon=True,
                                        name="virtual-board")
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; close the socket and the pty (not the board)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        for s in (self._client, *self._pending, self._listener):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()
        if self._pty_master is not None:
            os.close(self._pty_master)
            os.close(self._pty_slave)
            self._pty_master = None

    def __enter__(self) -> BoardServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the loop
    def serve_forever(self) -> None:
        """Pump bytes and clock the board until :meth:`close`."""
        while not self._stop.is_set():
            readers: list[object] = [self._listener, *self._pending]
            if self._client is not None:
                readers.append(self._client)
            if self._pty_master is not None:
                readers.append(self._pty_master)
            wait = 0.0 if self._busy or self._held else 0.05
            ready, _, _ = select.select(readers, [], [], wait)
            for r in ready:
                self._readable(r)
            self._expire_pending()
            self._release_held()
            if self._reset.is_set():
                self._reset.clear()
                self.board.reset()
                self._held.clear()
            self._clock()

    def _readable(self, r: object) -> None:
        if r is self._listener:
            conn, _ = self._listener.accept()
            conn.setblocking(False)
            self._pending[conn] = (time.monotonic() + self.hello_timeout, b"")
        elif r in self._pending:
            self._hello(r)  # type: ignore[arg-type]
        elif r is self._client:
            try:
                data = self._client.recv(65536)
            except OSError:
                data = b""
            if not data:
                self._drop_client()
                return
            self._reply_to = "tcp"
            self._to_uart(data)
        elif r == self._pty_master:
            try:
                data = os.read(self._pty_master, 65536)  # type: ignore[arg-type]
            except OSError:
                return
            if self._client is not None:  # a writer that did not take the lock
                return
            self._reply_to = "pty"
            self._to_uart(data)

    def _hello(self, conn: socket.socket) -> None:
        deadline, got = self._pending[conn]
        try:
            chunk = conn.recv(MAX_TOKEN_LINE)
        except OSError:
            chunk = b""
        got += chunk
        # a client that sends something else first (a host-link frame: it has no
        # token) is refused at once, not after hello_timeout
        may_be_token = got[:len(TOKEN_LINE)] == TOKEN_LINE[:len(got)]
        if b"\n" not in got and chunk and len(got) < MAX_TOKEN_LINE and may_be_token:
            self._pending[conn] = (deadline, got)
            return
        del self._pending[conn]
        line, _, rest = got.partition(b"\n")
        ok = line.startswith(TOKEN_LINE) and hmac.compare_digest(
            line[len(TOKEN_LINE):].strip(), self.token.encode())
        reason = (BAD_TOKEN if not ok else "the board is in use" if self._client is not None
                  else None if self._lock_pty() else
                  f"the board is in use on its pty {self.pty_path}")
        if reason is not None:
            self.refused += 1
            with contextlib.suppress(OSError):
                conn.sendall(REFUSED + reason.encode() + b"\n")
            conn.close()
            return
        self._client = conn
        self._reply_to = "tcp"
        self._to_uart(rest)

    def _lock_pty(self) -> bool:
        """Take the pty's lock for a TCP client; False while a program holds it."""
        if self._pty_master is None:
            return True
        try:
            fcntl.flock(self._pty_slave, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True

    def _drop_client(self) -> None:
        """Close the TCP client and let the pty be opened again."""
        if self._client is not None:
            with contextlib.suppress(OSError):
                self._client.close()
            self._client = None
        if self._pty_master is not None:
            fcntl.flock(self._pty_slave, fcntl.LOCK_UN)

    def _expire_pending(self) -> None:
        now = time.monotonic()
        for conn, (deadline, _) in list(self._pending.items()):
            if now > deadline:
                del self._pending[conn]
                self.refused += 1
                with contextlib.suppress(OSError):
                    conn.sendall(REFUSED + f"no token line within {self.hello_timeout:g} s "
                                 "(send 'TOKEN <token>' and a newline first)\n".encode())
                conn.close()

    def _to_uart(self, data: bytes) -> None:
        data, delay = self._faults_in.apply(data)
        if delay:
            self._held.append((time.monotonic() + self._faults_in.faults.delay_seconds,
                               "board", data))
        else:
            self.board.push(data)
        self._busy = True

    def _to_host(self, data: bytes) -> None:
        data, delay = self._faults_out.apply(data)
        if delay:
            self._held.append((time.monotonic() + self._faults_out.faults.delay_seconds,
                               "host", data))
            return
        self._send(data)

    def _send(self, data: bytes) -> None:
        if self._reply_to == "pty" and self._pty_master is not None:
            with contextlib.suppress(OSError):
                os.write(self._pty_master, data)
        elif self._client is not None:
            try:
                self._client.setblocking(True)
                self._client.sendall(data)
                self._client.setblocking(False)
            except OSError:
                self._drop_client()

    def _release_held(self) -> None:
        now = time.monotonic()
        due = [h for h in self._held if h[0] <= now]
        self._held = [h for h in self._held if h[0] > now]
        for _, direction, data in due:
            if direction == "board":
                self.board.push(data)
                self._busy = True
            else:
                self._send(data)

    def _clock(self) -> None:
        if not self._busy:
            return
        idle = self.board.run(CHUNK_CYCLES // 10)
        out = self.board.take()
        if out:
            self._to_host(out)
        self._busy = not idle

    def press_reset(self) -> None:
        """Press the board's reset button (from any thread; bytes on the way are lost)."""
        self._reset.set()
