"""A device served over the network: :class:`RemoteDevice` (``tcp://host:port``, or
``tracker://host:port/KIND`` for the next free device of a kind) and the device memory
it opens there, :class:`RemoteMemory`.

``open_device("tcp://127.0.0.1:9000", token=...)`` makes one (the ``tcp`` and
``tracker`` schemes are registered as entry points).
"""

from __future__ import annotations

from typing import Any, Self
from urllib.parse import parse_qs

import numpy as np

from tensorfab.isa import HwConfig, Program
from tensorfab.isa.device import Device, DeviceMemory, RunResult, target_scheme
from tensorfab.isa.errors import UsageError

from .connection import Connection, parse_address, resolve_token, url_token
from .errors import HilError
from .tracker import Lease
from .wire import MAX_MESSAGE_BYTES, Msg, result_from_wire

__all__ = ["RemoteDevice", "RemoteMemory", "open_remote"]

#: Bytes per WRITE or READ message: a larger transfer goes in parts.
CHUNK_BYTES = 1 << 22


class RemoteDevice(Device):
    """The device of a :class:`~tensorfab.hil.server.DeviceServer`.

    Parameters
    ----------
    target : str
        ``tcp://host:port``: that server; ``tracker://host:port/KIND``: the next free
        device of ``KIND`` registered with that tracker, held until :meth:`close`.
        Either may carry the token in its query (``tcp://host:port?token=...``).
    token : str | None
        The server's (and tracker's) token; default the target's ``?token=``, else
        ``$TENSORFAB_TOKEN``.
    connect_timeout : float
        Seconds to connect and authenticate.
    reply_timeout : float
        Seconds to wait for each reply (a run included).
    acquire_timeout : float
        Seconds to wait for a free device of the tracker (``tracker://`` only).
    max_message : int
        Largest reply accepted, in bytes.

    Raises
    ------
    HilError
        Server unreachable, no token, a tracker's address given as ``tcp://``, or no
        free device in time (each naming the address).
    RemoteError
        The server refused the token or the protocol version.
    UsageError
        An option in the target's query other than ``token``.

    Examples
    --------
    >>> dev = RemoteDevice("tcp://127.0.0.1:9000", token="...")  # doctest: +SKIP
    >>> dev.run(program).outputs  # doctest: +SKIP
    """

    def __init__(self, target: str, *, token: str | None = None,
                 connect_timeout: float = 10.0, reply_timeout: float = 300.0,
                 acquire_timeout: float = 300.0,
                 max_message: int = MAX_MESSAGE_BYTES) -> None:
        self.lease: Lease | None = None
        target, query = target.partition("?")[::2]  # (the token is no part of its name)
        unknown = sorted(set(parse_qs(query, keep_blank_values=True)) - {"token"})
        if unknown:
            raise UsageError(f"{target}: unknown option {', '.join(unknown)} (a "
                             f"{target_scheme(target)}:// target takes token)")
        if token is None:
            token = url_token(f"?{query}")
        if target.startswith("tracker://"):
            host, port, kind = parse_address(target, "tracker")
            if not kind:
                raise HilError(f"{target!r}: name the kind of device: "
                               "tracker://HOST:PORT/KIND")
            token = resolve_token(token, target)
            self.lease = Lease.acquire(host, port, token, kind, timeout=acquire_timeout,
                                       connect_timeout=connect_timeout)
            address = self.lease.address
        else:
            address = target
        host, port, _ = parse_address(address, "tcp")
        try:
            self.connection = Connection(host, port, resolve_token(token, address),
                                         connect_timeout=connect_timeout,
                                         reply_timeout=reply_timeout,
                                         max_message=max_message)
        except Exception:
            self._release()
            raise
        self.address = self.connection.address
        service = self.connection.hello.get("service")
        if service == "tracker":  # it runs nothing: every request would be refused
            self.connection.close()
            self._release()
            where = self.address.removeprefix("tcp://")
            raise HilError(f"{self.address} is a tracker, not a device server: ask it "
                           f"for a device of a kind with tracker://{where}/KIND")
        #: The server's executor (``fsim``, ``rtl``...).
        self.remote_name = str(self.connection.hello.get("device", "?"))
        self.name = f"{self.remote_name}@{self.address.removeprefix('tcp://')}"

    def info(self) -> dict[str, Any]:
        """The server's ``device`` and ``server`` (tensorfab version)."""
        return self.connection.request(Msg.INFO)

    def ping(self) -> None:
        """One round trip to the server."""
        self.connection.request(Msg.PING)

    def run(self, program: Program, dram: np.ndarray | None = None) -> RunResult:
        """Run ``program`` on the server's device (see :meth:`Device.run`).

        Raises
        ------
        RemoteError
            The device's error (its class and message), naming the server.
        HilError
            The connection failed or timed out.
        """
        image = None if dram is None else np.ascontiguousarray(dram)
        reply = self.connection.request(Msg.RUN, program=program.to_bytes(), dram=image)
        return result_from_wire(reply)

    def open_memory(self, config: HwConfig, size: int) -> RemoteMemory:
        """A device memory on the server, kept until :meth:`RemoteMemory.close` (or this
        connection's end)."""
        reply = self.connection.request(Msg.OPEN_MEMORY, config=config.to_json(), size=size)
        return RemoteMemory(self, config, size, int(reply["handle"]))

    def _release(self) -> None:
        if self.lease is not None:
            self.lease.release()
            self.lease = None

    def close(self) -> None:
        """Close the connection (the server closes this client's memories) and give a
        tracker's device back."""
        if hasattr(self, "connection"):
            self.connection.close()
        self._release()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteDevice({self.name!r})"


class RemoteMemory(DeviceMemory):
    """A :class:`~tensorfab.isa.device.DeviceMemory` on a server's device: what is
    written stays there across runs (a resident model's weights are sent once)."""

    def __init__(self, device: RemoteDevice, config: HwConfig, size: int,
                 handle: int) -> None:
        super().__init__(config, size)
        self.device = device
        self.handle = handle
        self._closed = False

    def _request(self, kind: Msg, **fields: Any) -> dict[str, Any]:
        if self._closed:
            raise HilError(f"{self.device.address}: device memory {self.handle} is closed")
        return self.device.connection.request(kind, handle=self.handle, **fields)

    def _write(self, addr: int, raw: np.ndarray) -> None:
        for start in range(0, raw.size, CHUNK_BYTES):
            self._request(Msg.WRITE, addr=addr + start, data=raw[start: start + CHUNK_BYTES])

    def _read(self, addr: int, nbytes: int) -> np.ndarray:
        parts = [self._request(Msg.READ, addr=addr + start,
                               nbytes=min(CHUNK_BYTES, nbytes - start))["data"]
                 for start in range(0, nbytes, CHUNK_BYTES)]
        out = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
        if out.dtype != np.uint8 or out.size != nbytes:
            raise HilError(f"{self.device.address}: a read of {nbytes} bytes returned "
                           f"{out.size} of {out.dtype}")
        return out

    def _run(self, program: Program) -> RunResult:
        return result_from_wire(self._request(Msg.RUN_PLACED, program=program.to_bytes()))

    def close(self) -> None:
        """Release the memory on the server."""
        if self._closed:
            return
        self._closed = True
        if not self.device.connection.closed:
            self.device.connection.request(Msg.CLOSE, handle=self.handle)


def open_remote(target: str, **options: Any) -> RemoteDevice:
    """The device factory of the ``tcp`` and ``tracker`` schemes
    (:func:`~tensorfab.isa.device.open_device`)."""
    return RemoteDevice(target, **options)
