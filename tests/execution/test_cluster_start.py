"""The embedded cluster's start: trials start as soon as one worker can run them, the others join later.

One worker's start is held by a preload (``hold_worker_preload.py``) until the
test lets it go, so "before the second worker joined" is a fact of the test,
not a race: a tuner that waited for every worker would find the held worker
failing to start after ``HOLD_LIMIT_S`` instead.
"""

from __future__ import annotations

import os
import socket
import uuid

import dask
import distributed  # (imported first: its config defaults must be loaded before the fixture's dask.config.set)
import pytest

import tuneplat
from tuneplat import PlacementError, RunConfig, ScalingConfig, TuneConfig, Tuner
from tuneplat.execution._cluster import Ledger, Slot, scheduler_workers

HOLD_PRELOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hold_worker_preload.py")


class Hold:
    """Holds the embedded cluster's worker ``name`` at its start until :meth:`release`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: int = 1) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=8)
        monkeypatch.setenv("TUNEPLAT_TEST_HOLD_WORKER", f"{name}@{self.listener.getsockname()[1]}")
        monkeypatch.setenv("TUNEPLAT_NUM_CPUS", "2")  # two worker processes, whatever the machine
        monkeypatch.setenv("TUNEPLAT_LOCAL_TLS", "1")
        self.released = False

    def __getstate__(self) -> dict:  # (the callbacks holding it are saved for restore; the socket is not)
        return {"released": True}

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.listener.close()  # the held worker's waiting connection is reset: it goes on starting


@pytest.fixture
def hold(monkeypatch):
    h = Hold(monkeypatch)
    with dask.config.set({"distributed.worker.preload": [HOLD_PRELOAD]}):
        try:
            yield h
        finally:
            h.release()


def where_am_i(config):
    from distributed import Event, get_client, get_worker

    workers = len(scheduler_workers(get_client()))  # as the cluster's scheduler sees it now
    name = str(get_worker().name)
    row = {"worker": name, "workers_up": workers, "world_size": tuneplat.get_context().get_world_size()}
    tuneplat.report({"loss": config["x"], **row})
    met = None
    if config.get("meet"):  # trials on worker 0 end only once a trial runs on worker 1 (so it must be used)
        event = Event(config["meet"])
        if name == "1":
            event.set()
        met = event.wait(timeout=120)
    tuneplat.report({"loss": config["x"] + 1, "met": met, **row})


class ReleaseAtFirstResult(tuneplat.Callback):
    def __init__(self, hold: Hold) -> None:
        self.hold = hold
        self.first: dict | None = None

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if self.first is None:
            self.first = dict(result)
            self.hold.release()


def test_the_first_trial_runs_before_the_second_worker_joins_and_the_second_worker_is_used(hold, tmp_path):
    first = ReleaseAtFirstResult(hold)
    grid = Tuner(where_am_i, param_space={"x": tuneplat.grid_search([0.0, 1.0, 2.0, 3.0]),
                                          "meet": f"tuneplat-test-meet-{uuid.uuid4().hex}"},
                 tune_config=TuneConfig(metric="loss", mode="min"),
                 run_config=RunConfig(storage_path=str(tmp_path), mlflow=False, verbose=0,
                                      callbacks=[first])).fit()
    assert first.first is not None
    # the first result came from worker 0 while worker 1 was still held at its start
    assert first.first["worker"] == "0" and first.first["workers_up"] == 1
    assert not grid.errors
    # worker 1 joined once let go, and the executor placed trials on it while worker 0 was busy
    assert {r.metrics["worker"] for r in grid} == {"0", "1"}
    assert all(r.metrics["met"] for r in grid)


class ReleaseAtSetup(tuneplat.Callback):
    def __init__(self, hold: Hold) -> None:
        self.hold = hold

    def setup(self, **info):  # after the executor's set-up, before any trial is placed
        self.hold.release()


def test_a_two_worker_group_waits_for_the_second_worker_instead_of_being_refused(hold, tmp_path):
    grid = Tuner(where_am_i, param_space={"x": 0.0}, scaling_config=ScalingConfig(num_workers=2),
                 tune_config=TuneConfig(metric="loss", mode="min"),
                 run_config=RunConfig(storage_path=str(tmp_path), mlflow=False, verbose=0,
                                      callbacks=[ReleaseAtSetup(hold)])).fit()
    assert not grid.errors
    result = grid[0].metrics
    assert result["world_size"] == 2 and result["workers_up"] == 2


class ReleaseAtEnd(tuneplat.Callback):
    def __init__(self, hold: Hold) -> None:
        self.hold = hold

    def on_experiment_end(self, trials, **info):  # before the cluster closes (it waits for workers starting)
        self.hold.release()


def test_a_group_larger_than_the_whole_cluster_is_refused_at_once_with_its_final_size(hold, tmp_path):
    tuner = Tuner(where_am_i, param_space={"x": 0.0}, scaling_config=ScalingConfig(num_workers=3),
                  tune_config=TuneConfig(metric="loss", mode="min"),
                  run_config=RunConfig(storage_path=str(tmp_path), mlflow=False, verbose=0,
                                       callbacks=[ReleaseAtEnd(hold)]))
    # refused while worker 1 is still held: its slot counts as the one it will be
    with pytest.raises(PlacementError, match=r"3 rank\(s\).*the cluster has 2 worker process\(es\).*still starting"):
        tuner.fit()


def _slot(address: str, cpu: float = 1.0) -> Slot:
    return Slot(address, "127.0.0.1", cpu, {}, None)


def test_ledger_counts_workers_still_starting_only_when_deciding_what_can_ever_fit():
    ledger = Ledger()
    ledger.refresh([_slot("tls://127.0.0.1:1")])
    starting = [_slot("(worker 2 of 2, starting)")]
    with pytest.raises(PlacementError, match=r"1 worker process\(es\)"):
        ledger.check_fits_empty({"CPU": 1}, 2)
    ledger.check_fits_empty({"CPU": 1}, 2, starting=starting)  # fits once the second worker is up
    with pytest.raises(PlacementError, match=r"2 worker process\(es\).*\(1 of them still starting\)"):
        ledger.check_fits_empty({"CPU": 1}, 3, starting=starting)
    with pytest.raises(PlacementError, match=r"CPU=2"):
        ledger.check_fits_empty({"CPU": 2}, 1)
    ledger.check_fits_empty({"CPU": 2}, 1, starting=starting)  # the host's 2 CPUs (CPUs count per host)
    with pytest.raises(PlacementError, match=r"CPU=3"):
        ledger.check_fits_empty({"CPU": 3}, 1, starting=starting)
    assert ledger.allocate({"CPU": 1}, 2) is None  # a starting worker is never placed on
    assert [a.address for a in ledger.allocate({"CPU": 1}, 1) or []] == ["tls://127.0.0.1:1"]


def quick(config):
    tuneplat.report({"loss": config["x"]})


def refuse_to_start(monkeypatch, names: set[str]) -> None:
    """The embedded cluster's nannies named in ``names`` fail to start their worker process (as when the machine
    has no processes or memory left): a real start, failing where Dask's own start can fail."""
    original = distributed.Nanny.start_unsafe

    async def start_unsafe(self):
        if str(self.name) in names:
            raise OSError(f"nanny {self.name}: cannot start a worker process")
        return await original(self)

    monkeypatch.setattr(distributed.Nanny, "start_unsafe", start_unsafe)
    monkeypatch.setenv("TUNEPLAT_NUM_CPUS", "2")


def test_an_embedded_cluster_whose_workers_cannot_start_is_an_error_saying_why(monkeypatch, tmp_path):
    refuse_to_start(monkeypatch, {"0", "1"})
    tuner = Tuner(quick, param_space={"x": 0.0}, tune_config=TuneConfig(metric="loss", mode="min"),
                  run_config=RunConfig(storage_path=str(tmp_path), mlflow=False, verbose=0))
    with pytest.raises(RuntimeError, match=r"worker processes did not start: .*\(OSError: nanny .: cannot start a worker process\)"):
        tuner.fit()


def test_trials_go_on_with_the_workers_that_started(monkeypatch, tmp_path):
    refuse_to_start(monkeypatch, {"1"})
    grid = Tuner(quick, param_space={"x": tuneplat.grid_search([0.0, 1.0, 2.0])},
                 tune_config=TuneConfig(metric="loss", mode="min"),
                 run_config=RunConfig(storage_path=str(tmp_path), mlflow=False, verbose=0)).fit()
    assert not grid.errors and len(grid) == 3


def test_closing_the_embedded_cluster_ends_its_own_workers_and_no_other_clusters(monkeypatch):
    """Another cluster in this process (a user's ``LocalCluster``) spawns a worker while the embedded one closes
    (as a nanny restarting a worker does): the embedded cluster's workers are gone after close(), the other's
    worker still runs. Ending "every worker process started since the close began" ended it."""
    import psutil
    from distributed import Client, LocalCluster

    from tuneplat.execution._cluster import Cluster

    monkeypatch.setenv("TUNEPLAT_NUM_CPUS", "1")
    cluster = Cluster()
    ours = cluster._embedded_processes()  # (its nannies' worker processes)
    assert ours, "the embedded cluster started no worker process"
    other: list = []
    real_close = cluster._close

    def close_while_another_cluster_starts() -> None:
        real_close()
        other.append(LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None))

    monkeypatch.setattr(cluster, "_close", close_while_another_cluster_starts)
    cluster.close()
    try:
        assert not [p.pid for p in ours if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        with Client(other[0]) as client:
            assert len(client.run(os.getpid)) == 1  # its worker answers: it was not ended
    finally:
        other[0].close()


def _worker_settings() -> tuple[str, str]:
    return (str(dask.config.get("distributed.worker.profile.interval")),
            str(dask.config.get("distributed.admin.tick.interval")))


def test_embedded_workers_sample_and_tick_less_often_unless_the_user_configured_it(monkeypatch):
    """Dask's profiler (every 10 ms, stack walks holding the GIL) and tick (20 ms) cost a trial's thread time; the
    embedded cluster's workers run them at 100 ms and 500 ms. A value the user set in their Dask config is kept."""
    from tuneplat.execution._cluster import Cluster

    monkeypatch.setenv("TUNEPLAT_NUM_CPUS", "1")
    cluster = Cluster()
    try:
        assert list(cluster.client.run(_worker_settings).values()) == [("100ms", "500ms")]
    finally:
        cluster.close()
    with dask.config.set({"distributed.worker.profile.interval": "37ms"}):
        cluster = Cluster()
        try:
            assert list(cluster.client.run(_worker_settings).values()) == [("37ms", "500ms")]
        finally:
            cluster.close()
    assert _worker_settings() == ("10ms", "20ms")  # the user's own process keeps Dask's defaults


def test_the_ledger_never_reads_a_cluster_without_workers_while_the_client_refreshes(dask_client):
    """Client.scheduler_info(n_workers=-1) refreshes the client's cached identity, then returns the cache, which the
    client's periodic refresh overwrites meanwhile with one that lists no workers (distributed 2025+). The tuner read
    that as every worker gone (CI: "the cluster has no workers" on a 2-worker cluster). With the refresh every
    millisecond the old read saw an empty cluster in some of 1,000 calls (72 of 2,000 at 5 ms, measured); the
    fetch the tuner uses now never goes through that cache, so none may."""
    from distributed import Client

    from tuneplat.execution._cluster import Cluster

    with dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}):
        client = Client(dask_client.scheduler.address, set_as_default=False, security=dask_client.security)
    try:
        cluster = Cluster(client=client)
        seen = {len(cluster.slots()) for _ in range(1000)}
        assert seen == {2}, seen
    finally:
        client.close()
