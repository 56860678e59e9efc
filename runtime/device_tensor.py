"""An activation held in device memory, and reading values back to the host."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["DeviceTensor", "host_value"]


class DeviceTensor:
    """An activation in device memory: ``shape`` and ``dtype`` at byte ``addr``.

    :meth:`numpy` reads it (once) over the host link.
    """

    def __init__(self, memory: Any, addr: int, shape: tuple[int, ...], dtype: str) -> None:
        self.memory = memory
        self.addr = addr
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self._host: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize

    @property
    def on_host(self) -> bool:
        """Whether it was read to the host already (:meth:`numpy` reads no more)."""
        return self._host is not None

    def numpy(self) -> np.ndarray:
        """The value, read from device memory on first use."""
        if self._host is None:
            raw = self.memory.read(self.addr, self.nbytes)
            self._host = raw.view(self.dtype).reshape(self.shape)
        return self._host

    def __repr__(self) -> str:
        return f"DeviceTensor({self.dtype}{self.shape} @ {self.addr:#x})"


def host_value(v: Any) -> Any:
    """``v`` with every :class:`DeviceTensor` (also inside tuples) read to the host."""
    if isinstance(v, DeviceTensor):
        return v.numpy()
    if isinstance(v, tuple):
        return tuple(host_value(x) for x in v)
    return v
