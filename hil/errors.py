"""Errors of the hardware-in-the-loop layer: the host link, boards, the wire, the device
server and its clients (all :class:`~tensorfab.isa.TensorfabError`)."""

from __future__ import annotations

from tensorfab.isa import TensorfabError
from tensorfab.isa.hostlink import HostLinkError

__all__ = [
    "TOKEN_ENV",
    "TOKEN_SCHEMES",
    "WRONG_TOKEN",
    "AuthenticationError",
    "BoardConfigMismatch",
    "BoardError",
    "BoardResetError",
    "BoardTimeout",
    "ConnectionClosed",
    "ConnectionLost",
    "DeviceLostError",
    "HilError",
    "LinkError",
    "LinkTimeout",
    "RemoteError",
    "ReplayMismatch",
    "StaleMemoryError",
    "TokenError",
    "WireError",
]

#: Environment variable read for a server's or a board's token when none is passed.
TOKEN_ENV = "TENSORFAB_TOKEN"
#: Target schemes that take a token: the ``token=`` option, ``?token=`` in the URL, or
#: :data:`TOKEN_ENV`.
TOKEN_SCHEMES = ("tcp", "tracker", "socket")
#: The message of the :class:`AuthenticationError` a server refuses a HELLO with when its
#: token is not the server's; its client makes the reply a :class:`TokenError`.
WRONG_TOKEN = "wrong token"


class HilError(TensorfabError):
    """Base class of the hardware-in-the-loop errors: each names the address or the
    message at fault."""


class WireError(HilError):
    """A message that breaks the wire format (:mod:`tensorfab.hil.wire`): a frame over
    the size limit, bytes that are not msgpack, a field missing or of the wrong type,
    an unknown request."""


class ConnectionClosed(HilError):
    """The peer closed the connection between two messages."""


class ConnectionLost(HilError):
    """A connection to a device server or tracker failed under a request: closed by
    the peer, reset, or no reply within the time given (the connection is closed
    then)."""


class AuthenticationError(HilError):
    """A connection that did not open with a HELLO carrying the right token and
    protocol version in time."""


class TokenError(AuthenticationError):
    """The client's side: no token for a server or board that needs one, or one it
    refused. The message ends with how to give one.

    Attributes
    ----------
    address : str
        The server or board (``tcp://host:port``, ``socket://host:port``...).
    problem : str
        What is wrong (``no token``, ``the board refused the connection: ...``).
    """

    def __init__(self, address: str, problem: str, option: str = "token=...") -> None:
        self.address = address
        self.problem = problem
        super().__init__(f"{address}: {problem}: pass {option} or set {TOKEN_ENV} (the "
                         "server prints its token when it starts)")

    def given_with(self, option: str) -> TokenError:
        """The same error naming ``option`` (a command line's ``--token``) as the way to
        pass the token."""
        return TokenError(self.address, self.problem, option)


class RemoteError(HilError):
    """An error the far side of a connection reported (a device's ``ProgramError``, a
    refused request...).

    Attributes
    ----------
    address : str
        The server that reported it (``tcp://host:port``).
    remote_class : str
        The class name of the exception raised there.
    detail : str
        Its message.
    """

    def __init__(self, address: str, remote_class: str, detail: str) -> None:
        self.address = address
        self.remote_class = remote_class
        self.detail = detail
        super().__init__(f"{address}: {remote_class}: {detail}")


class LinkError(HostLinkError, HilError):
    """The host link itself failed: a port that does not open, a closed socket, an
    answer that never came after every retry."""


class LinkTimeout(LinkError):
    """No valid response after every retry."""


class ReplayMismatch(LinkError):
    """The host wrote something other than the recording it is replayed against."""


class BoardError(HostLinkError, HilError):
    """The board answered, but not as a run needs."""


class BoardConfigMismatch(BoardError):
    """The board's HwConfig is not the program's."""


class BoardResetError(BoardError):
    """The board was reset while a program ran: its result is lost."""


class BoardTimeout(BoardError):
    """A program did not finish within the time given."""


class DeviceLostError(HilError):
    """A device server's device failed under a request (its link closed or stopped
    answering, the board was reset mid-run), or could not be reopened since: the server
    reopens it on the next request."""


class StaleMemoryError(HilError):
    """A device memory opened before its device failed and was reopened: the board was
    reset or reconnected since, so what the memory held is gone."""
