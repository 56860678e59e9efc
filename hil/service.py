"""The server side of the wire protocol, shared by the device server and the tracker:
a TCP listener, a thread per connection, the HELLO handshake with its token and
deadline, and request dispatch.

Security rules, in one place:

* it listens on 127.0.0.1 unless told otherwise, and a bind to any other address
  needs an explicit token;
* without a token it makes one (:func:`secrets.token_urlsafe`) and keeps it in
  :attr:`TokenService.token` for the operator to hand out;
* a connection's first message must be a HELLO with the token (compared with
  :func:`hmac.compare_digest`) and :data:`~tensorfab.hil.wire.PROTOCOL_VERSION`,
  complete within ``hello_timeout`` seconds; otherwise an error reply and the
  connection is closed;
* a frame over ``max_message`` bytes, a malformed one or an unknown request gets an
  error reply and the connection is closed; so does a frame whose body does not arrive
  within ``frame_timeout`` seconds;
* at most ``max_connections`` connections at once.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
import secrets
import socket
import threading
import time
from typing import Any, Self

from .errors import WRONG_TOKEN, AuthenticationError, ConnectionClosed, HilError, WireError
from .transport import REFUSED, TOKEN_LINE
from .wire import (
    MAX_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    Msg,
    check_request,
    error_reply,
    ok_reply,
    recv_message,
    send_message,
)

__all__ = ["TokenService", "is_loopback"]

log = logging.getLogger("tensorfab.hil")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, ``127.x``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class TokenService:
    """A TCP service whose clients authenticate with a shared token.

    Subclasses implement :meth:`handle` (and may extend :meth:`hello_fields`,
    :meth:`open_session` and :meth:`close_session`).

    Parameters
    ----------
    host : str
        Address to listen on (default 127.0.0.1, this machine only).
    port : int
        Port; 0 picks a free one (see :attr:`port`).
    token : str | None
        The shared secret; ``None`` makes one (loopback binds only).
    hello_timeout : float
        Seconds a new connection has to complete its HELLO.
    frame_timeout : float
        Seconds a frame's body (and a reply's send) may take once started.
    max_message : int
        Largest frame accepted, in bytes.
    max_connections : int
        Connections served at once; one more gets an error reply and is closed.

    Raises
    ------
    HilError
        A non-loopback ``host`` without a token, an empty token, a port out of range,
        or an address that cannot be bound.
    """

    #: What the service is called in logs and errors.
    service_name = "service"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, token: str | None = None, *,
                 hello_timeout: float = 5.0, frame_timeout: float = 60.0,
                 max_message: int = MAX_MESSAGE_BYTES, max_connections: int = 16) -> None:
        if token is None:
            if not is_loopback(host):
                raise HilError(f"{self.service_name} on {host}: binding beyond this machine "
                               "needs an explicit token (--token)")
            token = secrets.token_urlsafe(24)
        if not token:
            raise HilError(f"{self.service_name}: the token must not be empty")
        if not 0 <= port <= 65535:
            raise HilError(f"{self.service_name}: port {port} is out of range: a TCP port "
                           "is 0 (any free one) to 65535")
        self.token = token
        self.hello_timeout = hello_timeout
        self.frame_timeout = frame_timeout
        self.max_message = max_message
        self.max_connections = max_connections
        try:
            self._listener = socket.create_server((host, port))
        except OSError as exc:
            raise HilError(f"{self.service_name}: cannot listen on {host}:{port}: "
                           f"{exc.strerror or exc}") from exc
        self._listener.settimeout(0.2)
        self.host = host
        self.port: int = self._listener.getsockname()[1]
        self._stopping = threading.Event()
        self._conns: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._conns_lock = threading.Lock()
        self._acceptor: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle
    @property
    def address(self) -> str:
        """``tcp://host:port`` of the listener."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"tcp://{host}:{self.port}"

    def start(self) -> Self:
        """Serve in a background thread; returns the service."""
        if self._acceptor is None:
            self._acceptor = threading.Thread(target=self.serve_forever, daemon=True,
                                              name=f"{self.service_name}-accept")
            self._acceptor.start()
        return self

    def serve_forever(self) -> None:
        """Accept connections until :meth:`close` (each served in a thread of its own)."""
        while not self._stopping.is_set():
            try:
                conn, peer = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stopping.is_set():
                    return
                raise
            t = threading.Thread(target=self._serve_connection, args=(conn, peer),
                                 daemon=True, name=f"{self.service_name}-{peer[1]}")
            with self._conns_lock:
                self._threads.add(t)
            t.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop listening, drop every connection and wait (up to ``timeout`` seconds)
        for their threads."""
        self._stopping.set()
        if self._acceptor is not None and self._acceptor is not threading.current_thread():
            self._acceptor.join(timeout)
        self._listener.close()
        with self._conns_lock:
            conns, threads = list(self._conns), list(self._threads)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        end = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ for subclasses
    def hello_fields(self) -> dict[str, Any]:
        """Fields of the reply to a good HELLO."""
        return {"protocol": PROTOCOL_VERSION, "service": self.service_name}

    def open_session(self, peer: str) -> Any:
        """Per-connection state handed to :meth:`handle` (after the HELLO)."""
        return None

    def close_session(self, session: Any) -> None:
        """Release what a connection held (it is gone, or the service is closing)."""

    def handle(self, kind: Msg, fields: dict[str, Any], session: Any) -> dict[str, Any]:
        """The reply to one checked request. An exception becomes an error reply (a
        :class:`WireError` also closes the connection)."""
        raise WireError(f"{self.service_name} does not serve {kind.value!r}")

    # ----------------------------------------------------------------- internals
    def _serve_connection(self, conn: socket.socket, peer: tuple) -> None:
        who = f"{peer[0]}:{peer[1]}"
        with self._conns_lock:
            busy = len(self._conns) >= self.max_connections
            if not busy:
                self._conns.add(conn)
        session: Any = None
        opened = False
        try:
            if busy:
                self._refuse(conn, HilError(f"{self.service_name} busy: "
                                            f"{self.max_connections} connections"))
                return
            self._handshake(conn, who)
            session, opened = self.open_session(who), True
            while not self._stopping.is_set():
                message = recv_message(conn, max_bytes=self.max_message,
                                       body_timeout=self.frame_timeout)
                try:
                    kind, fields = check_request(message)
                    if kind is Msg.HELLO:
                        raise WireError("hello: only the first message may be a HELLO")
                    reply = self.handle(kind, fields, session)
                except WireError:
                    raise
                except Exception as exc:  # the device's errors go back to the client
                    log.info("%s %s: %s: %s", who, message.get("type"),
                             type(exc).__name__, exc)
                    reply = error_reply(exc)
                send_message(conn, reply, timeout=self.frame_timeout)
        except ConnectionClosed:
            pass
        except (WireError, AuthenticationError, TimeoutError) as exc:
            log.warning("%s: dropped: %s", who, exc)
            self._refuse(conn, exc)
        except OSError as exc:
            log.info("%s: connection lost: %s", who, exc)
        finally:
            if opened:
                self.close_session(session)
            with self._conns_lock:
                self._conns.discard(conn)
                self._threads.discard(threading.current_thread())
            conn.close()

    def connect_hint(self) -> str:
        """The target a client names this service by (``tcp://HOST:PORT``)."""
        return self.address

    def _refuse_a_board_client(self, conn: socket.socket, deadline: float) -> None:
        """A board's host link (``socket://``) opens with a ``TOKEN ...`` line where the
        HELLO frame belongs: answer it as a board server would, with a ``REFUSED`` line
        (which the host reports) naming the target to use, and drop it."""
        head = b""
        try:  # (the line may come in pieces: peek until it is whole or differs)
            while len(head) < len(TOKEN_LINE) and TOKEN_LINE.startswith(head):
                if time.monotonic() >= deadline:
                    return  # the HELLO's read reports it
                conn.settimeout(max(0.001, deadline - time.monotonic()))
                more = conn.recv(len(TOKEN_LINE), socket.MSG_PEEK)
                if not more:
                    return  # closed: the HELLO's read reports it
                if len(more) == len(head):  # (a peek returns what is there at once)
                    time.sleep(0.01)
                head = more
        except (TimeoutError, OSError):
            return  # the HELLO's read reports it
        if head != TOKEN_LINE:
            return
        with contextlib.suppress(OSError):
            conn.sendall(REFUSED + f"this is a tensorfab {self.service_name}, not a board: "
                         f"connect with {self.connect_hint()}, not socket://\n".encode())
            conn.shutdown(socket.SHUT_WR)
            # read what it sends until it hangs up (up to 1 s): closing with bytes unread
            # would reset the connection, and the client would see that, not the line
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                conn.settimeout(max(0.001, end - time.monotonic()))
                if not conn.recv(4096):
                    break
        raise AuthenticationError("a board's token line (a socket:// client) instead of a "
                                  "HELLO")

    def _handshake(self, conn: socket.socket, who: str) -> None:
        deadline = time.monotonic() + self.hello_timeout
        self._refuse_a_board_client(conn, deadline)
        try:
            hello = recv_message(conn, max_bytes=min(self.max_message, 1 << 16),
                                 deadline=deadline)
        except TimeoutError:
            raise AuthenticationError(f"no HELLO within {self.hello_timeout:g} s") from None
        except ConnectionClosed:
            raise
        if hello.get("type") != Msg.HELLO.value:
            raise AuthenticationError(f"the first message must be a HELLO with the token, "
                                      f"not {hello.get('type')!r}")
        _, fields = check_request(hello)
        if not hmac.compare_digest(fields["token"].encode(), self.token.encode()):
            raise AuthenticationError(WRONG_TOKEN)
        if fields["protocol"] != PROTOCOL_VERSION:
            raise AuthenticationError(f"protocol version {fields['protocol']}, this "
                                      f"{self.service_name} speaks {PROTOCOL_VERSION}")
        send_message(conn, ok_reply(**self.hello_fields()), timeout=self.frame_timeout)
        log.info("%s: connected", who)

    def _refuse(self, conn: socket.socket, exc: BaseException) -> None:
        with contextlib.suppress(OSError, HilError):
            send_message(conn, error_reply(exc), timeout=1.0)
