"""The tracker: where device servers register (kind, address) and clients ask for the
next free device of a kind.

A server registers over a connection of its own and heartbeats on it
(:class:`TrackerRegistration`); its registration ends with that connection or when
heartbeats stop for ``heartbeat_ttl`` seconds. A client's ACQUIRE waits until a device
of the kind is free (a kind no server has registered is an error after
:data:`UNREGISTERED_KIND_WAIT` seconds)
and returns its address and a lease (:class:`Lease`); the device is
the client's until RELEASE or until the client's tracker connection closes. The same
wire format and token rules as the device server apply
(:mod:`tensorfab.hil.service`).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

from .connection import Connection, parse_address
from .errors import HilError
from .service import TokenService, log
from .wire import Msg, ok_reply

__all__ = ["UNREGISTERED_KIND_WAIT", "Lease", "Tracker", "TrackerRegistration"]

#: Seconds an ACQUIRE of a kind no server has registered waits for one to register
#: before it is refused (the full wait is for a registered kind whose devices are taken).
UNREGISTERED_KIND_WAIT = 3.0


@dataclass
class _Entry:
    """A registered device server."""

    kind: str
    address: str
    last_seen: float
    lease: int | None = None
    released_at: float = 0.0


@dataclass
class _Session:
    peer: str
    entries: list[_Entry] = field(default_factory=list)
    leases: set[int] = field(default_factory=set)


class Tracker(TokenService):
    """Hand out registered device servers by kind, one client at a time each.

    Parameters
    ----------
    host, port, token
        As :class:`~tensorfab.hil.service.TokenService` (loopback by default, a token
        made when none is given, an explicit one beyond loopback).
    heartbeat_ttl : float
        Seconds without a heartbeat after which a registration is not handed out.
    max_acquire_wait : float
        Longest an ACQUIRE waits, whatever it asks.
    **options
        Other :class:`~tensorfab.hil.service.TokenService` limits.
    """

    service_name = "tracker"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, token: str | None = None, *,
                 heartbeat_ttl: float = 30.0, max_acquire_wait: float = 3600.0,
                 **options: Any) -> None:
        super().__init__(host, port, token, **options)
        self.heartbeat_ttl = heartbeat_ttl
        self.max_acquire_wait = max_acquire_wait
        self._cond = threading.Condition()
        self._entries: list[_Entry] = []
        self._leases: dict[int, _Entry] = {}
        self._lease_ids = itertools.count(1)

    def connect_hint(self) -> str:
        """``tracker://HOST:PORT/KIND``: clients ask a tracker for a device of a kind."""
        return f"{self.address.replace('tcp://', 'tracker://', 1)}/KIND"

    def devices(self) -> list[dict[str, Any]]:
        """The registered servers: kind, address, whether leased."""
        with self._cond:
            return [{"kind": e.kind, "address": e.address, "leased": e.lease is not None}
                    for e in self._entries]

    def close(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        super().close(timeout)

    def open_session(self, peer: str) -> _Session:
        return _Session(peer)

    def close_session(self, session: _Session) -> None:
        with self._cond:
            for lease in session.leases:
                self._free(lease)
            for e in session.entries:
                if e in self._entries:
                    self._entries.remove(e)
                if e.lease is not None:
                    self._leases.pop(e.lease, None)
            self._cond.notify_all()

    def _free(self, lease: int) -> None:
        entry = self._leases.pop(lease, None)
        if entry is not None:
            entry.lease = None
            entry.released_at = time.monotonic()

    def handle(self, kind: Msg, fields: dict[str, Any], session: Any) -> dict[str, Any]:
        if kind is Msg.PING:
            return ok_reply()
        if kind is Msg.INFO:
            return ok_reply(service=self.service_name, devices=self.devices())
        if kind is Msg.REGISTER:
            parse_address(fields["address"], "tcp")
            entry = _Entry(fields["kind"], fields["address"], time.monotonic())
            with self._cond:
                self._entries.append(entry)
                session.entries.append(entry)
                self._cond.notify_all()
            log.info("tracker: %s registered %s (%s)", session.peer, entry.address, entry.kind)
            return ok_reply()
        if kind is Msg.HEARTBEAT:
            with self._cond:
                for e in session.entries:
                    e.last_seen = time.monotonic()
                self._cond.notify_all()
            return ok_reply()
        if kind is Msg.ACQUIRE:
            return self._acquire(fields["kind"], float(fields["wait"]), session)
        if kind is Msg.RELEASE:
            lease = fields["lease"]
            if lease not in session.leases:
                raise HilError(f"lease {lease} is not held by this connection")
            with self._cond:
                session.leases.discard(lease)
                self._free(lease)
                self._cond.notify_all()
            return ok_reply()
        return super().handle(kind, fields, session)

    def _acquire(self, kind: str, timeout: float, session: _Session) -> dict[str, Any]:
        wait = max(0.0, min(timeout, self.max_acquire_wait))

        def free() -> _Entry | None:
            now = time.monotonic()
            ready = [e for e in self._entries if e.kind == kind and e.lease is None
                     and now - e.last_seen <= self.heartbeat_ttl]
            return min(ready, key=lambda e: e.released_at) if ready else None

        with self._cond:
            # a kind none of whose servers is registered: a few seconds for one that is
            # starting (a script that starts the server and the client together), not
            # the whole wait for a misspelt kind
            self._cond.wait_for(lambda: self._stopping.is_set()
                                or any(e.kind == kind for e in self._entries),
                                min(wait, UNREGISTERED_KIND_WAIT))
            if not any(e.kind == kind for e in self._entries):  # none to wait for
                kinds = sorted({e.kind for e in self._entries})
                raise HilError(f"no device of kind {kind!r} is registered with this "
                               f"tracker (registered: {', '.join(kinds) or 'none'}); a "
                               f"server registers with `tensorfab serve --tracker "
                               f"HOST:PORT --kind {kind}`")
            entry = self._cond.wait_for(lambda: self._stopping.is_set() or free(), wait)
            entry = free() if entry and not self._stopping.is_set() else None
            if entry is None:
                n = sum(e.kind == kind for e in self._entries)
                raise HilError(f"no free device of kind {kind!r} within {wait:g} s "
                               f"({n} registered)")
            lease = next(self._lease_ids)
            entry.lease = lease
            self._leases[lease] = entry
            session.leases.add(lease)
        log.info("tracker: %s leased %s (%s)", session.peer, entry.address, kind)
        return ok_reply(address=entry.address, lease=lease)


class Lease:
    """A device of a tracker held by this client: :attr:`address` is the server's.

    Make one with :meth:`acquire`; :meth:`release` gives it back (so does closing the
    process: the tracker frees leases of connections that close).
    """

    def __init__(self, connection: Connection, kind: str, address: str, lease: int) -> None:
        self.connection = connection
        self.kind = kind
        self.address = address
        self.lease = lease

    @classmethod
    def acquire(cls, host: str, port: int, token: str, kind: str, *, timeout: float = 300.0,
                connect_timeout: float = 10.0) -> Lease:
        """The next free device of ``kind`` at the tracker ``host:port``, waiting up to
        ``timeout`` seconds while every one registered is taken.

        Raises
        ------
        RemoteError
            No device of ``kind`` registered, none free in time, or the tracker
            refused the token.
        HilError
            The tracker cannot be reached.
        """
        conn = Connection(host, port, token, connect_timeout=connect_timeout)
        try:
            reply = conn.request(Msg.ACQUIRE, kind=kind, wait=timeout,
                                 timeout=timeout + connect_timeout)
        except Exception:
            conn.close()
            raise
        return cls(conn, kind, str(reply["address"]), int(reply["lease"]))

    def release(self) -> None:
        """Give the device back to the tracker."""
        if self.connection.closed:
            return
        try:
            self.connection.request(Msg.RELEASE, lease=self.lease)
        except HilError as exc:  # the tracker frees it when the connection closes anyway
            log.info("tracker %s: release of lease %d: %s", self.connection.address,
                     self.lease, exc)
        finally:
            self.connection.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class TrackerRegistration:
    """Keep a device server registered with a tracker: register, then heartbeat every
    ``interval`` seconds, registering again if the tracker restarts.

    Parameters
    ----------
    tracker : str
        ``host:port`` (or ``tcp://host:port``) of the tracker.
    token : str
        The tracker's token.
    kind : str
        What the server serves (``fsim``, ``ulx3s-85f``...): clients ask for it.
    address : str
        ``tcp://host:port`` clients reach the server at.
    interval : float
        Seconds between heartbeats.
    available : callable, optional
        Asked before each heartbeat: while it says False (the server's board is gone,
        :meth:`~tensorfab.hil.server.DeviceServer.device_available`) no heartbeat goes
        out, so the tracker stops handing the server out once its ``heartbeat_ttl``
        passes, and hands it out again after the next heartbeat.

    Raises
    ------
    HilError, RemoteError
        The first registration failed (tracker unreachable, wrong token).
    """

    def __init__(self, tracker: str, token: str, kind: str, address: str, *,
                 interval: float = 5.0, available: Callable[[], bool] | None = None
                 ) -> None:
        self.host, self.port, _ = parse_address(tracker, "tcp")
        self.token, self.kind, self.address, self.interval = token, kind, address, interval
        self.available = available
        self._withheld = False  # the last beat was withheld (logged once per outage)
        self._stop = threading.Event()
        self._conn: Connection | None = self._register()
        self._thread = threading.Thread(target=self._beat, daemon=True,
                                        name="tracker-heartbeat")
        self._thread.start()

    def _register(self) -> Connection:
        conn = Connection(self.host, self.port, self.token,
                          connect_timeout=max(self.interval, 1.0))
        try:
            conn.request(Msg.REGISTER, kind=self.kind, address=self.address)
        except Exception:
            conn.close()
            raise
        return conn

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            if not self._device_available():
                continue
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._register()
                    log.info("registered with tracker %s again", self._conn.address)
                else:
                    self._conn.request(Msg.HEARTBEAT, timeout=self.interval)
            except HilError as exc:
                log.warning("tracker tcp://%s:%d: %s", self.host, self.port, exc)
                if self._conn is not None:
                    self._conn.close()

    def _device_available(self) -> bool:
        """:attr:`available`'s answer (True without one), its changes logged."""
        ok = self.available is None or self.available()
        if ok == self._withheld:  # a change
            if ok:
                log.info("tracker tcp://%s:%d: the device is back: heartbeats resume",
                         self.host, self.port)
            else:
                log.warning("tracker tcp://%s:%d: the device is gone: no heartbeats until "
                            "it reopens (the tracker stops handing it out)",
                            self.host, self.port)
            self._withheld = not ok
        return ok

    def close(self) -> None:
        """Stop heartbeating and leave the tracker."""
        self._stop.set()
        self._thread.join(self.interval + 1.0)
        if self._conn is not None:
            self._conn.close()
