"""A rank the host's OOM killer ends is an out-of-memory failure: real worker processes in a real memory cgroup.

A one-worker LocalCluster whose worker process (and every replacement its nanny starts) joins a child memory
cgroup with a small limit; a trial that allocates past it is SIGKILLed by the kernel. The tuner must record
``kind="oom"`` from the kernel's evidence (the cgroup's OOM-kill count, the kernel log), and with
``FailureConfig(oom_halve=...)`` retry it smaller until it fits.
"""

from __future__ import annotations

import os
import uuid

import ft_trainables as F
import pytest

import tuneplat as tune
from tuneplat import read_journal

LIMIT_MIB = 320  # a worker process holds ~100-150 MiB before the trial allocates anything


def _own_memory_cgroup() -> tuple[str, str] | None:
    """(directory of this process's memory cgroup, the file that sets its limit), cgroup v1 or v2."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            lines = [line.strip().split(":", 2) for line in f if line.strip()]
    except OSError:
        return None
    for _, controllers, path in lines:
        if "memory" in controllers.split(","):
            d = "/sys/fs/cgroup/memory" + path
            if os.path.exists(os.path.join(d, "memory.limit_in_bytes")):
                return d, "memory.limit_in_bytes"
    for num, controllers, path in lines:
        if num == "0" and controllers == "":
            d = "/sys/fs/cgroup" + path
            if os.path.exists(os.path.join(d, "memory.events")):
                return d, "memory.max"
    return None


def _remove_cgroup(path: str, parent: str) -> None:
    for _ in range(200):  # processes leave it as they exit: move stragglers up, then remove it
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            try:
                with open(os.path.join(path, "cgroup.procs"), encoding="utf-8") as f:
                    pids = f.read().split()
                for pid in pids:
                    with open(os.path.join(parent, "cgroup.procs"), "w", encoding="utf-8") as f:
                        f.write(pid)
            except OSError:
                pass
    os.rmdir(path)


@pytest.fixture
def limited_cgroup():
    """A child memory cgroup of this process's, limited to LIMIT_MIB; removed afterwards."""
    own = _own_memory_cgroup()
    if own is None:
        pytest.skip("no memory cgroup found for this process (/proc/self/cgroup, /sys/fs/cgroup)")
    parent, limit_file = own
    path = os.path.join(parent, f"tuneplat-oomtest-{uuid.uuid4().hex[:8]}")
    try:
        os.mkdir(path)
        with open(os.path.join(path, limit_file), "w", encoding="utf-8") as f:
            f.write(str(LIMIT_MIB * 2**20))
    except OSError as exc:
        if os.path.isdir(path):
            os.rmdir(path)
        pytest.skip(f"memory cgroups are not writable here ({exc}): run as root on a host with a cgroup mount")
    try:
        yield path
    finally:
        _remove_cgroup(path, parent)


class _JoinCgroup:
    """A Dask worker plugin: the worker process joins a memory cgroup when it starts (replacements too)."""

    name = "tuneplat-test-join-cgroup"

    def __init__(self, path: str) -> None:
        self.path = path

    def setup(self, worker) -> None:
        with open(os.path.join(self.path, "cgroup.procs"), "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))


@pytest.fixture
def limited_client(limited_cgroup):
    from cluster_fixtures import local_client
    from distributed.diagnostics.plugin import WorkerPlugin

    plugin = type("JoinCgroup", (_JoinCgroup, WorkerPlugin), {})(limited_cgroup)
    with local_client(1) as client:
        client.register_plugin(plugin)
        pids = client.run(os.getpid)
        with open(os.path.join(limited_cgroup, "cgroup.procs"), encoding="utf-8") as f:
            assert set(pids.values()) <= {int(p) for p in f.read().split()}
        yield client


def _fit(client, storage, mib, name, failure):
    return tune.Tuner(F.grab_memory, param_space={"mib": mib},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False,
                                                failure_config=failure),
                      client=client).fit()


@pytest.mark.timeout(300)
def test_a_rank_killed_by_the_host_oom_killer_is_an_oom_and_is_retried_smaller(limited_client, storage):
    # no retry: the trial ends as an out-of-memory error, naming the rank, its host and the cgroup's limit
    grid = _fit(limited_client, storage, 4 * LIMIT_MIB, "plain", tune.FailureConfig(max_failures=0))
    error = str(grid[0].error)
    assert error.startswith("out of memory (OOM): rank 0 on "), error
    assert "killed by the kernel's OOM killer" in error and f"memory limit {LIMIT_MIB} MiB" in error, error
    events = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    assert [e["kind"] for e in events if e["event"] == "trial_failure"] == ["oom"]
    assert [e.get("error_kind") for e in events if e["event"] == "trial_end"] == ["oom"]

    # oom_halve: halved until it fits under the limit, then it succeeds
    failure = tune.FailureConfig(max_failures=0, oom_halve="mib", max_oom_retries=4)
    grid = _fit(limited_client, storage, 4 * LIMIT_MIB, "halved", failure)
    (result,) = list(grid)
    assert result.error is None, result.error
    assert result.metrics["held_mib"] == result.config["mib"] < LIMIT_MIB
    events = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    kinds = [e["kind"] for e in events if e["event"] == "trial_failure"]
    assert kinds and set(kinds) == {"oom"}, kinds
    assert [e["change"]["mib"] for e in events if e["event"] == "oom_retry"][0] == [4 * LIMIT_MIB, 2 * LIMIT_MIB]

    # nothing is guessed: a rank SIGKILLed by something else in the same cgroup (which has seen OOM kills before
    # this rank started) stays a process that died
    grid = tune.Tuner(F.poison, run_config=tune.RunConfig(name="killed", storage_path=storage, verbose=0,
                                                          mlflow=False, failure_config=tune.FailureConfig(
                                                              max_failures=0, oom_halve="mib")),
                      tune_config=tune.TuneConfig(metric="loss", mode="min"), client=limited_client).fit()
    error = str(grid[0].error)
    assert "lost its connection (its process or Dask worker died)" in error and "OOM" not in error, error
    events = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    assert [e.get("kind") for e in events if e["event"] == "trial_failure"] == ["lost"]  # a process that died, no OOM


@pytest.mark.timeout(300)
def test_a_rank_on_another_host_is_checked_by_a_worker_of_that_host(limited_cgroup, storage):
    """The rank's worker runs under another hostname (its own UTS namespace): the tuner cannot read that host's
    files itself, so a live Dask worker of the same host (address) reads the cgroup and the kernel log for it."""
    import shutil
    import subprocess
    import sys

    from cluster_fixtures import local_client

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to give a worker a hostname of its own")
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, here, os.environ.get("PYTHONPATH", "")])}
    with local_client(1) as client:  # the peer: a worker of the same host (127.0.0.1), under this hostname
        cmd = (f"hostname tuneplat-oom-host && echo $$ > {limited_cgroup}/cgroup.procs && exec {sys.executable} -m "
               f"distributed.cli.dask_worker {client.scheduler.address} --host 127.0.0.1 --nthreads 1 --no-nanny "
               "--no-dashboard --resources 'CPU=1 oomhost=1'")
        proc = subprocess.Popen(["unshare", "--uts", "bash", "-c", cmd], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            client.wait_for_workers(2, timeout=60)
            grid = tune.Tuner(tune.with_resources(F.grab_memory, {"cpu": 1, "oomhost": 1}),
                              param_space={"mib": 4 * LIMIT_MIB},
                              run_config=tune.RunConfig(name="remote", storage_path=storage, verbose=0, mlflow=False,
                                                        failure_config=tune.FailureConfig(max_failures=0)),
                              client=client).fit()
        finally:
            proc.kill()
            proc.wait()
    error = str(grid[0].error)
    assert error.startswith("out of memory (OOM): rank 0 on "), error
    assert "(host tuneplat-oom-host) was killed by the kernel's OOM killer" in error, error
    assert f"memory limit {LIMIT_MIB} MiB" in error and "oom_kill 0 -> 1" in error, error
