"""The device a :class:`~tensorfab.hil.server.DeviceServer` serves, kept usable across
board failures.

When a request finds the device's link dead (a board unplugged or reset, a virtual
board's server gone, a port that stopped answering: a
:class:`~tensorfab.hil.errors.LinkError`) or the board reset under a run
(:class:`~tensorfab.hil.errors.BoardResetError`), that request gets a
:class:`~tensorfab.hil.errors.DeviceLostError` naming the target and the cause, the
device is closed, and the next request that needs it opens it again: a few attempts,
the delay between them doubling, each logged. The device memories opened before are
*stale* from then on (:meth:`ServedDevice.check_memory`): the board was reset or
reconnected, so what they held is gone, and using one is refused rather than read.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from tensorfab.isa.device import Device, open_device, target_scheme

from .errors import (
    BoardResetError,
    ConnectionLost,
    DeviceLostError,
    HilError,
    LinkError,
    StaleMemoryError,
    TokenError,
)

__all__ = ["LOST", "ServedDevice", "open_served", "served_token_hint"]

log = logging.getLogger("tensorfab.hil")

#: Errors after which a served device is closed and reopened: its link failed (a
#: board's host link, or the connection to the device server behind a ``tcp://``
#: target), or the board was reset while a program ran.
LOST = (LinkError, ConnectionLost, BoardResetError)

#: Whose token a served target of each scheme of :data:`~.errors.TOKEN_SCHEMES` takes.
_TOKEN_OWNERS = {"socket": "the board's", "tcp": "the device server's",
                 "tracker": "the tracker's"}


def served_token_hint(target: str) -> tuple[str, str] | None:
    """How a server that opens ``target`` is given the token of the board, server or
    tracker behind it: ``(whose token, the target with ?token=...)``, as ``("the
    board's", "socket://host:port?token=...")`` (in its URL's query: the server's own
    ``token`` does not reach it); None for a target that takes no token."""
    owner = _TOKEN_OWNERS.get(target_scheme(target))
    return None if owner is None else (owner, f"{target.partition('?')[0]}?token=...")


def open_served(target: str) -> Device:
    """``open_device(target)``; a target that wants a token says it goes in the
    target's query (:func:`served_token_hint`)."""
    try:
        return open_device(target)
    except TokenError as exc:
        hint = served_token_hint(target)
        if hint is None:
            raise
        raise exc.given_with(f"{hint[0]} token in the target's query ('{hint[1]}')"
                             ) from None


def _cause(exc: BaseException, label: str) -> str:
    """``exc``'s message without the target it starts with, or its port (a serial
    target's path): the error names the target once."""
    text = str(exc)
    for name in (label, label.partition("://")[2]):
        if name and text.startswith(f"{name}: "):
            return text[len(name) + 2:]
    return text


@dataclass(frozen=True)
class Failure:
    """Why a served device is gone: the request that found it so, when, and the cause."""

    request: str
    cause: str
    at: float

    def __str__(self) -> str:
        clock = time.strftime("%H:%M:%S", time.localtime(self.at))
        return f"{self.request} at {clock}: {self.cause}"


class ServedDevice:
    """A served device, reopened after its link fails.

    Not thread safe: the server calls it holding its device lock.

    Parameters
    ----------
    device : str or Device
        A target for :func:`~tensorfab.isa.device.open_device` (reopened after a
        failure), or a device (kept as it is: the server cannot reopen what it did not
        open).
    reopen_attempts : int
        Opens tried by a request that finds the device gone, before it gives up (the
        next request tries again).
    reopen_backoff : float
        Seconds between the first two attempts; doubled after each.

    Attributes
    ----------
    device : Device
        The device (the last one opened).
    label : str
        The target without its query (never a token), or the device's name.
    generation : int
        How many times the device was lost: a memory opened in an earlier generation is
        stale.
    last_failure : Failure or None
        Why the device was last lost.
    gone : bool
        Lost, and not reopened yet.

    Raises
    ------
    HilError
        ``reopen_attempts`` below 1 or a negative ``reopen_backoff``.
    """

    def __init__(self, device: str | Device, *, reopen_attempts: int = 3,
                 reopen_backoff: float = 0.5) -> None:
        if reopen_attempts < 1 or not reopen_backoff >= 0:
            raise HilError(f"reopen_attempts {reopen_attempts} must be at least 1 and "
                           f"reopen_backoff {reopen_backoff} at least 0 seconds")
        self.target = device if isinstance(device, str) else None
        self.label = device.partition("?")[0] if isinstance(device, str) else device.name
        self.device = open_served(device) if isinstance(device, str) else device
        self.reopen_attempts = reopen_attempts
        self.reopen_backoff = reopen_backoff
        self.generation = 0
        self.last_failure: Failure | None = None
        self.gone = False

    @contextlib.contextmanager
    def using(self, request: str) -> Iterator[Device]:
        """The device for ``request``, reopened first if it is gone; a failure of its
        link inside the block is raised as :class:`DeviceLostError`.

        Raises
        ------
        DeviceLostError
            The device is gone and could not be reopened, or it failed in the block.
        """
        if self.gone:
            self._reopen()
        try:
            yield self.device
        except LOST as exc:
            raise self.lost(request, exc) from None

    def check_memory(self, generation: int, handle: int) -> None:
        """Refuse a memory opened in an earlier generation (before a failure).

        Raises
        ------
        StaleMemoryError
            Naming the handle, the target and the failure.
        """
        if generation == self.generation:
            return
        raise StaleMemoryError(
            f"device memory {handle} was opened before {self.label} was lost "
            f"({self.last_failure}): the board was reset or reconnected since, so what "
            "the memory held is gone; close it, open a new one and write it again")

    def lost(self, request: str, exc: BaseException) -> DeviceLostError:
        """Record that ``request`` found the device failed with ``exc``: the memories
        opened so far become stale and a device the server opened is closed, to be
        reopened on the next request. Returns the error for the request."""
        self.generation += 1
        cause = _cause(exc, self.label)
        self.last_failure = Failure(request, cause, time.time())
        if self.target is None:
            log.warning("%s: lost during %s: %s; memories opened before are stale",
                        self.label, request, cause)
            return DeviceLostError(
                f"{self.label}: lost during {request}: {cause}; this server was given the "
                "device, not a target, and cannot reopen it")
        self.gone = True
        log.warning("%s: lost during %s: %s; closed, reopened on the next request "
                    "(memories opened before are stale)", self.label, request, cause)
        self._close()
        return DeviceLostError(
            f"{self.label}: lost during {request}: {cause}; the server reopens it on the "
            "next request (device memories opened before are stale)")

    # ----------------------------------------------------------------- internals
    def _close(self) -> None:
        close = getattr(self.device, "close", None)
        if close is None:
            return
        try:
            close()
        except Exception as exc:  # it is gone: closing what is left may fail too
            log.info("%s: closing the lost device: %s", self.label, exc)

    def recover(self) -> bool:
        """Whether the device is usable: not lost, or a lost one reopened by one attempt
        now (no wait; logged only when it succeeds). (A device given as an object is
        never marked gone: the next request tries it as it is.)"""
        if not self.gone or self.target is None:
            return not self.gone
        return self._open_once() is None

    def _open_once(self) -> str | None:
        """One attempt to open the target again: None when it opened (logged), else why
        not."""
        assert self.target is not None
        try:
            device = open_served(self.target)
        except Exception as exc:  # (any failure to open is reported, not raised)
            return _cause(exc, self.label)
        self.device, self.gone = device, False
        log.info("%s: reopened", self.label)
        return None

    def _reopen(self) -> None:
        """Open the target again, :attr:`reopen_attempts` times at most.

        Raises
        ------
        DeviceLostError
            Every attempt failed (the last one's error named).
        """
        delay, cause = self.reopen_backoff, ""
        for attempt in range(1, self.reopen_attempts + 1):
            log.info("%s: reopening (attempt %d of %d)", self.label, attempt,
                     self.reopen_attempts)
            cause = self._open_once()
            if cause is None:
                return
            if attempt < self.reopen_attempts:
                log.warning("%s: reopening failed: %s; next attempt in %g s", self.label,
                            cause, delay)
                time.sleep(delay)
                delay *= 2
        log.error("%s: still gone after %d attempts: %s; the next request tries again",
                  self.label, self.reopen_attempts, cause)
        raise DeviceLostError(
            f"{self.label}: the device is gone (lost during {self.last_failure}) and reopening "
            f"it failed {self.reopen_attempts} times, last: {cause}; the server tries "
            "again on the next request")
