"""Errors of the hardware-in-the-loop layer: the wire, the device server and its clients."""

from __future__ import annotations

from tensorfab.isa import TensorfabError

__all__ = ["AuthenticationError", "ConnectionClosed", "HilError", "RemoteError", "WireError"]


class HilError(TensorfabError):
    """Base class of the hardware-in-the-loop errors: each names the address or the
    message at fault."""


class WireError(HilError):
    """A message that breaks the wire format (:mod:`tensorfab.hil.wire`): a frame over
    the size limit, bytes that are not msgpack, a field missing or of the wrong type,
    an unknown request."""


class ConnectionClosed(HilError):
    """The peer closed the connection between two messages."""


class AuthenticationError(HilError):
    """A connection that did not open with a HELLO carrying the right token and
    protocol version in time."""


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
