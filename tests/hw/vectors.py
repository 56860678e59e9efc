"""Packing numpy arrays into and out of the flat ports of Amaranth components.

Element ``i`` of a flattened (row-major) array occupies bits
``[w i, w i + w)`` of the port, as Amaranth's ``ArrayLayout`` places it.
"""

from __future__ import annotations

import numpy as np


def pack(values: np.ndarray, dtype: str) -> int:
    """The port integer holding ``values`` (row-major) as little-endian ``dtype``."""
    return int.from_bytes(np.ascontiguousarray(values, dtype=dtype).tobytes(), "little")


def unpack(word: int, dtype: str, count: int) -> np.ndarray:
    """``count`` elements of ``dtype`` from a port integer."""
    size = np.dtype(dtype).itemsize * count
    return np.frombuffer(int(word).to_bytes(size, "little"), dtype=dtype).copy()
