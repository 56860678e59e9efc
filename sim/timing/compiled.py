"""The decorator of the timing model's compiled functions: numba's ``njit`` with its
on-disk cache where numba finds a writable place for it (beside the source, else a
per-user directory; ``NUMBA_CACHE_DIR`` overrides), and compiled in each process
where it finds none, rather than failing at import.

numba keys a cached function by the stamp (modification time and size) of the file
that defines it only, while the code it caches includes the compiled functions it
calls from other files: a function that calls another module's names it in ``uses``,
and the stamps of those modules' files are added to its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TypeVar, overload

from numba import njit

__all__ = ["compiled", "source_stamp"]

F = TypeVar("F", bound=Callable)


def source_stamp(module: ModuleType) -> tuple[float, int]:
    """``(modification time, size)`` of ``module``'s file, as numba stamps a source."""
    st = os.stat(module.__file__ or "")
    return st.st_mtime, st.st_size


def _stamped(fn: Callable, uses: Sequence[ModuleType], inline: bool) -> Callable:
    """``njit(cache=True)(fn)`` whose cache is also keyed by the files of ``uses``
    (uncached where numba's cache object is not as expected); ``inline``: inlined into
    its compiled callers (numba's ``inline="always"``)."""
    opts = {"inline": "always"} if inline else {}
    dispatcher = njit(cache=True, **opts)(fn)
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    if not uses or not hasattr(dispatcher, "py_func"):  # NUMBA_DISABLE_JIT: fn itself
        return dispatcher
    if cache_file is None or not hasattr(cache_file, "_source_stamp"):
        return njit(**opts)(fn)  # another numba: never a stale cache
    cache_file._source_stamp = (cache_file._source_stamp, *map(source_stamp, uses))
    return dispatcher


@overload
def compiled(fn: F) -> F: ...
@overload
def compiled(*, uses: Sequence[ModuleType] = (), inline: bool = False
             ) -> Callable[[F], F]: ...


def compiled(fn: F | None = None, *, uses: Sequence[ModuleType] = (), inline: bool = False
             ) -> F | Callable[[F], F]:
    """``fn`` compiled by numba in nopython mode, cached on disk when it can be
    (``NUMBA_DISABLE_JIT=1``: ``fn`` itself).

    Parameters
    ----------
    fn : callable
        The function (``@compiled``), or ``None`` for ``@compiled(uses=...)``.
    uses : sequence of module
        Modules whose compiled functions ``fn`` calls: their files key its cache too.
    inline : bool
        Inline ``fn`` into the compiled functions that call it (numba's
        ``inline="always"``): a small helper called in a loop, whose array arguments a
        call would count references to.
    """
    def wrap(f: F) -> F:
        try:
            return _stamped(f, uses, inline)  # type: ignore[return-value]
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return njit(inline="always")(f) if inline else njit(f)
    return wrap if fn is None else wrap(fn)
