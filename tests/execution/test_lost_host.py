"""A host lost and not replaced within the wait: the trial ends ERROR with the reason, TorchTrainer raises."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from procs import popen, stop

import tuneplat
from tuneplat import FailureConfig, RunConfig, ScalingConfig
from tuneplat.train import TorchTrainer, TrainingFailedError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def lose_host_at_step_2(config):
    from tuneplat import get_context

    for step in range(1, 6):
        if step == 2 and get_context().get_world_rank() == 1:
            os._exit(1)  # a worker without a nanny: nothing starts it again, as when its host is gone
        tuneplat.report({"loss": 1.0 / step})


@pytest.fixture
def no_nanny_cluster(tmp_path):
    """``dask scheduler`` and two ``dask worker --no-nanny`` (a dead worker stays dead)."""
    from distributed import Client

    scheduler_file = str(tmp_path / "scheduler.json")
    env = dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False",
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "execution")]))
    log = open(tmp_path / "cluster.log", "w")  # noqa: SIM115 - closed below
    procs = [popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                    "--port", "0", "--dashboard-address", "127.0.0.1:0", "--scheduler-file",
                    scheduler_file], env=env, stdout=log, stderr=subprocess.STDOUT)]
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(scheduler_file):
            assert procs[0].poll() is None and time.monotonic() < deadline, "dask scheduler did not start"
            time.sleep(0.05)  # another process's file; nothing to block on
        for _ in range(2):
            procs.append(popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", scheduler_file,
                 "--no-nanny", "--nthreads", "1", "--resources", "CPU=1", "--host", "127.0.0.1",
                 "--dashboard-address", "127.0.0.1:0"], env=env, stdout=log, stderr=subprocess.STDOUT))
        client = Client(scheduler_file=scheduler_file, set_as_default=False)
        client.wait_for_workers(2, timeout=120)
        yield client
        client.close()
    finally:
        for p in reversed(procs):  # workers first; each whole process group, killed if it does not stop
            stop(p)
        log.close()


@pytest.mark.slow
def test_lost_host_not_replaced_fails_the_trial_and_torch_trainer_raises(tmp_path, monkeypatch, no_nanny_cluster):
    monkeypatch.setenv("TUNEPLAT_WORKER_WAIT_S", "3")
    trainer = TorchTrainer(lose_host_at_step_2, scaling_config=ScalingConfig(num_workers=2), client=no_nanny_cluster,
                           run_config=RunConfig(storage_path=str(tmp_path / "results"), name="lost", mlflow=False,
                                                verbose=0, failure_config=FailureConfig(max_failures=1)))
    with pytest.raises(TrainingFailedError, match="could not be placed again.*no worker could take"):
        trainer.fit()
    grid = tuneplat.Tuner.restore(str(tmp_path / "results" / "lost"), lose_host_at_step_2).get_results()
    assert [r.status for r in grid] == ["ERROR"]
    assert "could not be placed again" in str(grid[0].error)
