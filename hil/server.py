"""The device server: one :class:`~tensorfab.isa.device.Device` served over TCP to
clients holding its token (:class:`~tensorfab.hil.remote.RemoteDevice` on the other end).

Runs are serialized: one lock guards the device, so clients take it in turn; a client
that disconnects mid-run leaves the run to finish and the device to the next client,
and the memories it opened are closed. An error the device raises goes back as an
error reply naming the exception's class. A device whose link fails is reopened on the
next request, and the memories opened before are refused from then on
(:mod:`tensorfab.hil.served`).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tensorfab.isa import HwConfig, Program
from tensorfab.isa.device import Device, DeviceMemory

from .errors import HilError
from .served import ServedDevice, served_token_hint
from .service import TokenService, log
from .wire import Msg, ok_reply, result_to_wire

__all__ = ["DEFAULT_MAX_MEMORY_BYTES", "DeviceServer", "served_token_hint", "server_version"]

#: Default limit on the device memory one connection may hold (and on a program's DRAM).
DEFAULT_MAX_MEMORY_BYTES = 1 << 30


def server_version() -> str:
    """The installed tensorfab's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tensorfab")
    except PackageNotFoundError:
        return "unknown"


@dataclass
class _Held:
    """An open device memory and the device's generation it was opened in."""

    memory: DeviceMemory
    generation: int


@dataclass
class _Session:
    """What one connection holds: its open device memories, by handle."""

    peer: str
    memories: dict[int, _Held] = field(default_factory=dict)
    handles: itertools.count = field(default_factory=lambda: itertools.count(1))

    def memory_bytes(self, generation: int) -> int:
        """Bytes of the memories held on the device of ``generation`` (stale ones hold
        none)."""
        return sum(h.memory.size for h in self.memories.values()
                   if h.generation == generation)


class DeviceServer(TokenService):
    """Serve a device to clients holding the token.

    Parameters
    ----------
    device : str or Device
        The device, or a target for :func:`~tensorfab.isa.device.open_device`
        (``fsim``, ``rtl``, ``serial:///dev/ttyUSB0``...); a board's socket takes its
        token in the query (``socket://HOST:PORT?token=...``), not ``token``.
    host, port, token
        Where to listen and the shared secret (see
        :class:`~tensorfab.hil.service.TokenService`: 127.0.0.1 by default, a token
        made when none is given, an explicit token required beyond loopback).
    max_memory_bytes : int
        Device memory one connection may hold at once; also the largest DRAM image a
        RUN may use.
    reopen_attempts, reopen_backoff
        After the device's link fails, the next request that needs it tries to open
        ``device`` this many times, waiting ``reopen_backoff`` seconds after the first
        failure and twice as long after each next one
        (:class:`~tensorfab.hil.served.ServedDevice`).
    **options
        :class:`~tensorfab.hil.service.TokenService` limits (``hello_timeout``,
        ``frame_timeout``, ``max_message``, ``max_connections``).

    Examples
    --------
    >>> with DeviceServer("fsim") as server:  # doctest: +SKIP
    ...     dev = RemoteDevice(server.address, token=server.token)
    ...     dev.run(program).outputs
    """

    service_name = "device server"

    def __init__(self, device: str | Device, host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None, *,
                 max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES, reopen_attempts: int = 3,
                 reopen_backoff: float = 0.5, **options: Any) -> None:
        #: The device, reopened after a failure of its link.
        self.served = ServedDevice(device, reopen_attempts=reopen_attempts,
                                   reopen_backoff=reopen_backoff)
        self.max_memory_bytes = max_memory_bytes
        #: Held while the device runs or its memory is touched: clients take turns.
        self.device_lock = threading.Lock()
        self.runs = 0
        super().__init__(host, port, token, **options)
        self._handlers = {
            Msg.INFO: self._info, Msg.PING: self._ping, Msg.RUN: self._run,
            Msg.OPEN_MEMORY: self._open_memory, Msg.WRITE: self._write,
            Msg.READ: self._read, Msg.RUN_PLACED: self._run_placed, Msg.CLOSE: self._close,
        }

    @property
    def device(self) -> Device:
        """The served device (the one opened last)."""
        return self.served.device

    def device_available(self) -> bool:
        """Whether the device can take a request: it is running one (its lock is held),
        it is not lost, or a lost one reopens now at the first attempt
        (:meth:`~tensorfab.hil.served.ServedDevice.recover`). What a tracker
        registration asks before each heartbeat, so that a server whose board is gone
        is not handed out, and comes back once it reopens."""
        if not self.device_lock.acquire(blocking=False):
            return True
        try:
            return self.served.recover()
        finally:
            self.device_lock.release()

    def hello_fields(self) -> dict[str, Any]:
        return super().hello_fields() | {"device": self.device.name, "server": server_version()}

    def open_session(self, peer: str) -> _Session:
        return _Session(peer)

    def close_session(self, session: _Session) -> None:
        with self.device_lock:
            for handle, held in list(session.memories.items()):
                try:
                    held.memory.close()
                except Exception as exc:  # the device may be gone already
                    log.warning("%s: closing memory %d: %s", session.peer, handle, exc)
            session.memories.clear()

    def handle(self, kind: Msg, fields: dict[str, Any], session: Any) -> dict[str, Any]:
        try:
            handler = self._handlers[kind]
        except KeyError:
            return super().handle(kind, fields, session)
        return handler(fields, session)

    # ---------------------------------------------------------------- requests
    def _info(self, fields: dict[str, Any], session: Any) -> dict[str, Any]:
        return ok_reply(device=self.device.name, server=server_version())

    def _ping(self, fields: dict[str, Any], session: Any) -> dict[str, Any]:
        return ok_reply()

    def _program(self, blob: bytes) -> Program:
        program = Program.from_bytes(blob, source="the program sent")
        if program.dram_size > self.max_memory_bytes:
            raise HilError(f"the program's DRAM ({program.dram_size} bytes) is over this "
                           f"server's {self.max_memory_bytes}-byte limit")
        return program

    def _run(self, fields: dict[str, Any], session: Any) -> dict[str, Any]:
        program = self._program(fields["program"])
        dram = fields["dram"]
        if dram is not None and dram.nbytes > self.max_memory_bytes:
            raise HilError(f"a DRAM image of {dram.nbytes} bytes is over this server's "
                           f"{self.max_memory_bytes}-byte limit")
        with self._device("run") as device:
            result = device.run(program, dram)
            self.runs += 1
        return ok_reply(**result_to_wire(result))

    @contextlib.contextmanager
    def _device(self, request: str) -> Iterator[Device]:
        """The device, held for ``request`` (reopened first if its link failed)."""
        with self.device_lock, self.served.using(request) as device:
            yield device

    def _held(self, session: _Session, handle: int) -> _Held:
        try:
            return session.memories[handle]
        except KeyError:
            raise HilError(f"no device memory with handle {handle} on this connection "
                           f"(open: {sorted(session.memories) or 'none'})") from None

    @contextlib.contextmanager
    def _memory(self, held: _Held, handle: int, request: str) -> Iterator[DeviceMemory]:
        """Memory ``handle`` of this connection, held for ``request``; refused if it was
        opened before the device was lost."""
        with self.device_lock:
            self.served.check_memory(held.generation, handle)
            with self.served.using(request):
                yield held.memory

    def _open_memory(self, fields: dict[str, Any], session: _Session) -> dict[str, Any]:
        config = HwConfig.from_json(fields["config"])
        size = fields["size"]
        with self._device("open_memory") as device:
            if session.memory_bytes(self.served.generation) + size > self.max_memory_bytes:
                raise HilError(f"a device memory of {size} bytes would take this "
                               "connection over the server's "
                               f"{self.max_memory_bytes}-byte limit")
            memory = device.open_memory(config, size)
            held = _Held(memory, self.served.generation)
        handle = next(session.handles)
        session.memories[handle] = held
        return ok_reply(handle=handle)

    def _write(self, fields: dict[str, Any], session: _Session) -> dict[str, Any]:
        held = self._held(session, fields["handle"])
        with self._memory(held, fields["handle"], "write") as memory:
            memory.write(fields["addr"], fields["data"])
        return ok_reply()

    def _read(self, fields: dict[str, Any], session: _Session) -> dict[str, Any]:
        held = self._held(session, fields["handle"])
        if fields["nbytes"] > self.max_message - 1024:
            raise HilError(f"a read of {fields['nbytes']} bytes is over the "
                           f"{self.max_message}-byte message limit; read in parts")
        with self._memory(held, fields["handle"], "read") as memory:
            data = memory.read(fields["addr"], fields["nbytes"])
        return ok_reply(data=data)

    def _run_placed(self, fields: dict[str, Any], session: _Session) -> dict[str, Any]:
        held = self._held(session, fields["handle"])
        program = self._program(fields["program"])
        with self._memory(held, fields["handle"], "run_placed") as memory:
            result = memory.run(program)
            self.runs += 1
        return ok_reply(**result_to_wire(result))

    def _close(self, fields: dict[str, Any], session: _Session) -> dict[str, Any]:
        """Close a memory; a stale one is only forgotten (its device is gone)."""
        held = self._held(session, fields["handle"])
        del session.memories[fields["handle"]]
        with self.device_lock:
            if held.generation != self.served.generation:
                return ok_reply()
            with self.served.using("close"):
                held.memory.close()
        return ok_reply()
