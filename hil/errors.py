"""Errors of the hardware-in-the-loop layer (all :class:`~tensorfab.isa.TensorfabError`)."""

from __future__ import annotations

from tensorfab.isa.hostlink import HostLinkError

__all__ = ["BoardConfigMismatch", "BoardError", "BoardResetError", "BoardTimeout",
           "LinkError", "LinkTimeout", "ReplayMismatch"]


class LinkError(HostLinkError):
    """The link itself failed: a port that does not open, a closed socket, an answer
    that never came after every retry."""


class LinkTimeout(LinkError):
    """No valid response after every retry."""


class ReplayMismatch(LinkError):
    """The host wrote something other than the recording it is replayed against."""


class BoardError(HostLinkError):
    """The board answered, but not as a run needs."""


class BoardConfigMismatch(BoardError):
    """The board's HwConfig is not the program's."""


class BoardResetError(BoardError):
    """The board was reset while a program ran: its result is lost."""


class BoardTimeout(BoardError):
    """A program did not finish within the time given."""
