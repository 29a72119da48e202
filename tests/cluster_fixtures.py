"""A real Dask LocalCluster for tests: worker processes, one slot each, as tuneplat starts by default."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def local_client(n_workers: int = 2) -> Iterator[Any]:
    import dask
    from distributed import Client, LocalCluster

    # for the cluster's whole life: its nannies read `daemon` each time they restart a worker (after a kill), and
    # LocalCluster reads `lost-worker-timeout` each time a worker is lost: a worker whose restart takes longer (15 s by
    # default: a loaded machine, torch imported again) has its nanny closed for good, and the cluster is one worker
    # short for the rest of the session (seen in the slow lane: "no worker could take this trial for 60s")
    with dask.config.set({"distributed.worker.daemon": False, "distributed.scheduler.allowed-failures": 0,
                          "distributed.deploy.lost-worker-timeout": "600s"}):
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address="127.0.0.1:0", resources={"CPU": 1})
        client = Client(cluster, set_as_default=False)
        try:
            yield client
        finally:
            client.close()
            cluster.close()
