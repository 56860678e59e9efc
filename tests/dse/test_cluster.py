"""The dask client the sweeps run on: a local cluster computes, a bad address is refused."""

from __future__ import annotations

import pytest

from tensorfab.dse.cluster import dask_client
from tensorfab.isa import UsageError


def _square(x: int) -> int:
    return x * x


def test_local_cluster_runs_tasks_on_two_workers() -> None:
    with dask_client(workers=2) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        futures = client.map(_square, range(10))
        assert client.gather(futures) == [x * x for x in range(10)]
        assert client.dashboard_link.startswith("http://127.0.0.1:")


def test_malformed_scheduler_address_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="tcp://host:8786"), dask_client("localhost"):
        pass


def test_a_scheduler_without_workers_is_refused_not_waited_on_forever() -> None:
    from distributed import LocalCluster

    # tensorfab dse --scheduler tcp://... of a scheduler no worker had joined hung:
    # its tasks waited for a worker that never came
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as empty:
        address = empty.scheduler_address
        with pytest.raises(UsageError) as info, dask_client(address, worker_timeout=0.5):
            pass
    assert str(info.value) == (f"--scheduler {address}: the scheduler has no workers (none "
                               "joined in 0.5 s), so nothing would run; start one with "
                               f"`dask worker {address}`")
