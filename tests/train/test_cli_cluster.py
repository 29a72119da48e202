"""The path users take to scale out: a cluster started as separate processes, its address given to the Tuner."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
import torch
import wg_trainables as wt
from procs import popen, stop

import tuneplat as tune

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _dask_cli() -> list[str]:
    """The ``dask`` command of the interpreter running the tests (``python -m dask``: the same CLI as the console
    script, found without the virtual environment's bin folder on PATH)."""
    return [sys.executable, "-m", "dask"]


def _alive(pgid: int, grace_s: float = 10.0) -> bool:
    """A process of group ``pgid`` still runs ``grace_s`` after it was killed (zombies waiting for their reaper
    do not count: ``killpg(pgid, 0)`` alone would see them)."""
    import psutil

    def members() -> list[psutil.Process]:
        out = []
        for p in psutil.process_iter():
            try:
                if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except (psutil.Error, ProcessLookupError):
                continue
        return out

    _gone, alive = psutil.wait_procs(members(), timeout=grace_s)  # SIGKILL is delivered, not always acted on yet
    return bool(alive)


@pytest.fixture
def cli_cluster(tmp_path):
    """``dask scheduler`` + two ``dask worker --nthreads 1 --resources CPU=1`` on 127.0.0.1.

    Each CLI process leads its own process group (its nanny's worker process
    included); teardown ends every group and checks nothing is left.
    """
    from distributed import Client

    scheduler_file = str(tmp_path / "scheduler.json")
    env = dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False",
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "train")]))
    log = open(tmp_path / "cluster.log", "w")  # noqa: SIM115 - closed below
    scheduler = popen(
        _dask_cli() + ["scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0",
                       "--scheduler-file", scheduler_file],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    procs = [scheduler]
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(scheduler_file):
            assert scheduler.poll() is None, open(tmp_path / "cluster.log").read()
            assert time.monotonic() < deadline, "dask scheduler did not start"
            time.sleep(0.05)  # waiting for another process's file; nothing to block on
        for _ in range(2):
            procs.append(popen(
                _dask_cli() + ["worker", "--scheduler-file", scheduler_file, "--nthreads", "1", "--nworkers", "1",
                               "--resources", "CPU=1", "--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        client = Client(scheduler_file=scheduler_file, set_as_default=False)
        client.wait_for_workers(2, timeout=120)
        address = client.scheduler.address
        client.close()
        yield address, [p.pid for p in procs]
    finally:
        for p in reversed(procs):  # workers first, then the scheduler; each whole group, killed if need be
            stop(p)
        log.close()
        assert not any(_alive(p.pid) for p in procs), "processes of the CLI cluster outlived the test"


@pytest.mark.slow
def test_two_ranks_on_a_cli_cluster(cli_cluster, storage):
    address, pids = cli_cluster
    grid = tune.Tuner(wt.ddp_linear, param_space={"lr": 0.1}, scaling_config=tune.ScalingConfig(num_workers=2),
                      run_config=tune.RunConfig(name="cli", storage_path=storage, verbose=0, mlflow=False,
                                                address=address)).fit()
    result = grid[0]
    assert result.error is None, result.error
    r0 = torch.load(os.path.join(result.checkpoint.path, "rank0.pt"), weights_only=True)
    r1 = torch.load(os.path.join(result.checkpoint.path, "rank1.pt"), weights_only=True)
    for key in r0:
        assert torch.equal(r0[key], r1[key])
    # the trial ran on the CLI workers, not on a cluster started here
    assert result.metrics["pid"] not in (os.getpid(),)
    listening = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=False).stdout if shutil.which("ss") else ""
    for line in listening.splitlines():
        if any(f"pid={pid}," in line for pid in pids):
            assert "127.0.0.1:" in line, f"a cluster process listens beyond loopback: {line}"
