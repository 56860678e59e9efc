"""How many threads the BLAS library under numpy uses inside the CPU kernels.

The CPU kernels' matrix products are small (a MiniLM layer at 16 tokens multiplies
16×384 by 384×1536) and run beside the simulators, test workers and other processes.
OpenBLAS's threads spin while they wait for work: with two of them per process on a
loaded 2-core machine one such product took 20–30 ms instead of 1.7 ms on one thread.
So the kernels run BLAS on ``TENSORFAB_BLAS_THREADS`` threads (default 1); the limit
applies only while a kernel runs, or a VM run (which sets it once for its kernels), so
numpy code of the caller keeps its own setting (the limit is the process's: a thread
running numpy beside a VM run runs it on the kernels' threads meanwhile). It
applies to the BLAS libraries loaded when the first kernel runs (numpy's; one loaded
later, such as scipy's, is not what the kernels call).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator

__all__ = ["BLAS_THREADS_ENV", "kernel_blas_threads", "limited_blas"]

#: Environment variable: BLAS threads inside the CPU kernels (a positive integer).
BLAS_THREADS_ENV = "TENSORFAB_BLAS_THREADS"


def kernel_blas_threads() -> int:
    """The BLAS threads of the CPU kernels: ``TENSORFAB_BLAS_THREADS``, else 1.

    Raises
    ------
    ValueError
        If the variable is set to anything but a positive integer (names it).
    """
    value = os.environ.get(BLAS_THREADS_ENV, "1")
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ValueError(f"{BLAS_THREADS_ENV}={value!r}: expected a positive integer")
    return threads


@functools.cache
def _controller():  # type: ignore[no-untyped-def]
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


_lock = threading.Lock()
_depth = 0  # limited_blas bodies running (the limit is the process's, set once)


@contextlib.contextmanager
def limited_blas() -> Iterator[None]:
    """Run the body with BLAS on :func:`kernel_blas_threads` threads (setting it costs
    10-25 µs). Inside another ``limited_blas`` body (the VM holds one for a whole run,
    so that its kernels do not pay it each), it changes nothing."""
    global _depth
    if _depth:  # already limited: a kernel inside a VM run
        yield
        return
    with _lock:
        outer = _depth == 0
        _depth += 1
    try:
        if outer:
            with _controller().limit(limits=kernel_blas_threads(), user_api="blas"):
                yield
        else:
            yield
    finally:
        with _lock:
            _depth -= 1
