"""Where the design-space jobs run: a dask.distributed client on a LocalCluster of this
machine, or on an existing scheduler given by address."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tensorfab.isa import UsageError

__all__ = ["WORKER_TIMEOUT", "dask_client"]

#: Seconds an existing scheduler is given to have a worker before the job is refused
#: (without one its tasks would wait forever).
WORKER_TIMEOUT = 30.0


def _wait_for_a_worker(client: Any, scheduler: str, timeout: float) -> None:
    """Wait up to ``timeout`` seconds for the scheduler to have a worker; a
    :class:`UsageError` naming the scheduler if none comes."""
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError:
        raise UsageError(f"--scheduler {scheduler}: the scheduler has no workers (none "
                         f"joined in {timeout:g} s), so nothing would run; start one "
                         f"with `dask worker {scheduler}`") from None


@contextmanager
def dask_client(scheduler: str | None = None, workers: int = 2,
                threads_per_worker: int = 1,
                worker_timeout: float = WORKER_TIMEOUT) -> Iterator[object]:
    """A ``distributed.Client``, closed (and its LocalCluster shut down) on exit.

    Parameters
    ----------
    scheduler
        Address of an existing scheduler (``tcp://host:8786``); ``None`` starts a
        LocalCluster of processes on this machine, its dashboard bound to localhost.
    workers, threads_per_worker
        Size of the LocalCluster (ignored with ``scheduler``).
    worker_timeout
        Seconds to wait for the ``scheduler`` to have at least one worker.

    Raises
    ------
    UsageError
        The scheduler address is malformed, nothing answers there, or the scheduler
        has no worker within ``worker_timeout`` seconds.
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
            _wait_for_a_worker(client, scheduler, worker_timeout)
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
