"""Run numpy's BLAS single-threaded for the duration of a simulation.

The simulator's matrix products are small to medium (one GEMM instruction's
tiles). A multi-threaded OpenBLAS spins its threads against each other whenever
another process holds a core (a parallel test run, a compiler), which makes those
products up to a hundred times slower; one thread is fast and predictable. This is
best effort: without a recognisable OpenBLAS it does nothing.
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache

import numpy as np

_PREFIXES = ("scipy_openblas_", "openblas_")
_SUFFIXES = ("64_", "_64_", "")


@cache
def _openblas() -> tuple[Callable[[], int], Callable[[int], None]] | None:
    """The ``(get_num_threads, set_num_threads)`` functions of numpy's OpenBLAS."""
    root = os.path.dirname(os.path.dirname(np.__file__))
    paths = glob.glob(os.path.join(root, "numpy.libs", "*openblas*.so*"))
    paths += glob.glob(os.path.join(os.path.dirname(np.__file__), ".libs", "*openblas*.so*"))
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in _PREFIXES:
            for suffix in _SUFFIXES:
                get = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
                put = getattr(lib, f"{prefix}set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    get.restype = ctypes.c_int
                    get.argtypes = []
                    put.restype = None
                    put.argtypes = [ctypes.c_int]
                    return get, put
    return None


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Limit numpy's OpenBLAS to one thread inside the ``with`` block, then restore."""
    funcs = _openblas()
    if funcs is None:
        yield
        return
    get, put = funcs
    before = int(get())
    if before == 1:
        yield
        return
    put(1)
    try:
        yield
    finally:
        put(before)


__all__ = ["single_threaded_blas"]
