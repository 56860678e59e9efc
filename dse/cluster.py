"""Where the design-space jobs run: a dask.distributed client on a LocalCluster of this
machine, or on an existing scheduler given by address."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from tensorfab.isa import UsageError

__all__ = ["dask_client"]


@contextmanager
def dask_client(scheduler: str | None = None, workers: int = 2,
                threads_per_worker: int = 1) -> Iterator[object]:
    """A ``distributed.Client``, closed (and its LocalCluster shut down) on exit.

    Parameters
    ----------
    scheduler
        Address of an existing scheduler (``tcp://host:8786``); ``None`` starts a
        LocalCluster of processes on this machine, its dashboard bound to localhost.
    workers, threads_per_worker
        Size of the LocalCluster (ignored with ``scheduler``).

    Raises
    ------
    UsageError
        The scheduler address is malformed or nothing answers there.
    """
    from distributed import Client, LocalCluster

    if scheduler is not None:
        if "://" not in scheduler:
            raise UsageError(f"--scheduler {scheduler!r}: expected an address such as "
                             "tcp://host:8786")
        try:
            client = Client(scheduler, timeout="10s")
        except OSError as e:
            raise UsageError(f"--scheduler {scheduler}: no dask scheduler answers "
                             f"({e})") from None
        try:
            yield client
        finally:
            client.close()
        return
    if workers < 1:
        raise UsageError(f"workers must be at least 1 (got {workers})")
    with LocalCluster(n_workers=workers, threads_per_worker=threads_per_worker,
                      processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        yield client
