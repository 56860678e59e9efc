"""The decorator of the timing model's compiled functions: numba's ``njit`` with its
on-disk cache where numba finds a writable place for it (beside the source, else a
per-user directory; ``NUMBA_CACHE_DIR`` overrides), and compiled in each process
where it finds none, rather than failing at import."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from numba import njit

__all__ = ["compiled"]

F = TypeVar("F", bound=Callable)


def compiled(fn: F) -> F:
    """``fn`` compiled by numba in nopython mode, cached on disk when it can be
    (``NUMBA_DISABLE_JIT=1``: ``fn`` itself)."""
    try:
        return njit(cache=True)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return njit(fn)
