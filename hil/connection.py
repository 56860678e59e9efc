"""The client side of the wire protocol: one authenticated connection to a device
server or a tracker, requests and their replies with timeouts, errors naming the
address."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from .errors import (
    TOKEN_ENV,
    WRONG_TOKEN,
    ConnectionClosed,
    ConnectionLost,
    HilError,
    RemoteError,
    TokenError,
    WireError,
)
from .wire import MAX_MESSAGE_BYTES, PROTOCOL_VERSION, Msg, encode_message, recv_message

__all__ = ["TOKEN_ENV", "Connection", "parse_address", "resolve_token", "url_token"]


def parse_address(target: str, scheme: str = "tcp") -> tuple[str, int, str]:
    """``(host, port, path)`` of ``scheme://host:port[/path]`` (or a bare
    ``host:port``).

    Raises
    ------
    HilError
        Another scheme, or no host or port.
    """
    text = target if "://" in target else f"{scheme}://{target}"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:  # urllib's 'Port out of range 0-65535', 'Invalid IPv6 URL'
        raise HilError(f"{target!r} is not an address of the form {scheme}://HOST:PORT: "
                       f"{exc}") from None
    if parts.scheme != scheme or not parts.hostname or port is None:
        raise HilError(f"{target!r} is not an address of the form {scheme}://HOST:PORT")
    return parts.hostname, port, parts.path.strip("/")


def url_token(target: str) -> str | None:
    """The token in a target URL's query (``tcp://host:port?token=...``), if any."""
    return parse_qs(urlsplit(target).query).get("token", [None])[0]


def resolve_token(token: str | None, address: str) -> str:
    """``token``, else ``$TENSORFAB_TOKEN``.

    Raises
    ------
    TokenError
        Neither is set.
    """
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    if not token:
        raise TokenError(address, "no token")
    return token


class Connection:
    """An authenticated connection to ``host:port``, opened at construction.

    Parameters
    ----------
    host, port : str, int
        The server.
    token : str
        Its token.
    connect_timeout : float
        Seconds to connect and complete the HELLO.
    reply_timeout : float
        Seconds to wait for each reply (a request may pass its own).
    max_message : int
        Largest reply accepted, in bytes.

    Attributes
    ----------
    address : str
        ``tcp://host:port``, named in every error.
    hello : dict
        The server's reply to the HELLO (``device``, ``server``, ``protocol``...).

    Raises
    ------
    HilError
        The server cannot be reached or does not answer the HELLO in time.
    TokenError
        The server refused the token (a wrong one).
    RemoteError
        The server refused the HELLO otherwise (another protocol version).
    """

    def __init__(self, host: str, port: int, token: str, *, connect_timeout: float = 10.0,
                 reply_timeout: float = 300.0, max_message: int = MAX_MESSAGE_BYTES) -> None:
        self.address = f"tcp://{f'[{host}]' if ':' in host else host}:{port}"
        self.reply_timeout = reply_timeout
        self.max_message = max_message
        self._lock = threading.Lock()
        try:
            self._sock: socket.socket | None = socket.create_connection(
                (host, port), timeout=connect_timeout)
        except OSError as exc:
            raise HilError(f"{self.address}: cannot connect: "
                           f"{exc.strerror or exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.hello = self.request(Msg.HELLO, timeout=connect_timeout, token=token,
                                      protocol=PROTOCOL_VERSION, client="tensorfab")
        except RemoteError as exc:
            self.close()
            if (exc.remote_class, exc.detail) == ("AuthenticationError", WRONG_TOKEN):
                raise TokenError(self.address, "the server refused the connection: "
                                 f"{WRONG_TOKEN}") from None
            raise
        except Exception:
            self.close()
            raise

    @property
    def closed(self) -> bool:
        """Whether the connection is closed (by :meth:`close` or after a failure)."""
        return self._sock is None

    def request(self, kind: Msg, /, *, timeout: float | None = None,
                **fields: Any) -> dict[str, Any]:
        """Send a request and return its reply's fields.

        Raises
        ------
        RemoteError
            The server replied with an error.
        WireError
            A field the wire format does not carry (nothing is sent).
        ConnectionLost
            The connection failed or no reply came within ``timeout`` seconds (default
            :attr:`reply_timeout`); the connection is closed then.
        HilError
            A reply that breaks the wire format (the connection is closed).
        """
        wait = self.reply_timeout if timeout is None else timeout
        frame = encode_message({"type": kind.value, **fields})  # a WireError sends nothing
        with self._lock:
            if self._sock is None:
                raise ConnectionLost(f"{self.address}: the connection is closed")
            try:
                self._sock.settimeout(wait)
                self._sock.sendall(frame)
                reply = recv_message(self._sock, max_bytes=self.max_message,
                                     deadline=time.monotonic() + wait)
            except TimeoutError:
                self._drop()
                raise ConnectionLost(f"{self.address}: no reply to {kind.value} within "
                               f"{wait:g} s") from None
            except ConnectionClosed:
                self._drop()
                raise ConnectionLost(f"{self.address}: the server closed the connection during "
                               f"{kind.value}") from None
            except WireError as exc:
                self._drop()
                raise HilError(f"{self.address}: {kind.value}: {exc}") from exc
            except OSError as exc:
                self._drop()
                raise ConnectionLost(f"{self.address}: {kind.value}: connection lost: "
                               f"{exc.strerror or exc}") from exc
        fields = {k: v for k, v in reply.items() if k != "type"}
        if reply["type"] == Msg.ERROR.value:
            raise RemoteError(self.address, str(fields.get("error", "Error")),
                              str(fields.get("message", "")))
        if reply["type"] != Msg.OK.value:
            self.close()
            raise HilError(f"{self.address}: {kind.value}: a reply of type "
                           f"{reply['type']!r}, expected ok or error")
        return fields

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def close(self) -> None:
        """Close the connection (the server releases what it held for it)."""
        with self._lock:
            self._drop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
