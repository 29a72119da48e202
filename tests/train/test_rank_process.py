"""What a rank's process looks like to the user's code, as in Ray Train's workers: its environment before the
training function is unpickled, its working directory, how the processes it starts are started."""

from __future__ import annotations

import json
import os

import pytest
import wg_trainables as wt

import tuneplat as tune
from tuneplat.train.torch import TorchTrainer


def test_a_script_function_sees_its_rank_at_unpickling_runs_in_the_run_folder_and_forks_loader_workers(
        dask_client, storage):
    result = TorchTrainer(wt.script_like_train_func(), scaling_config=tune.ScalingConfig(num_workers=2),
                          run_config=tune.RunConfig(name="rankproc", storage_path=storage, verbose=0, mlflow=False),
                          client=dask_client).fit()
    for rank in (0, 1):
        path = os.path.join(result.path, f"probe{rank}.json")  # a relative write lands in the run's folder
        assert os.path.isfile(path), os.listdir(result.path)
        with open(path, encoding="utf-8") as f:
            probe = json.load(f)
        # a module-level `import pytorch_lightning` while unpickling sees these (Lightning's rank_zero_only)
        assert probe["at_unpickle"] == {"RANK": str(rank), "LOCAL_RANK": str(rank), "NODE_RANK": "0",
                                        "WORLD_SIZE": "2"}
        # DataLoader(num_workers=2) over a class defined in the script: its workers fork (no pickling of the class)
        assert probe["total"] == sum(i * i for i in range(8)) and probe["start"] == "fork"
    assert result.metrics["total"] == 140
    assert not os.path.exists("probe0.json")


def test_rank0_keeps_the_rendezvous_store_open_until_every_rank_has_finished(dask_client, storage):
    grid = tune.Tuner(wt.rank1_uses_the_store_after_rank0_ended, scaling_config=tune.ScalingConfig(num_workers=2),
                      run_config=tune.RunConfig(name="latestore", storage_path=storage, verbose=0, mlflow=False),
                      client=dask_client).fit()
    assert grid[0].error is None, grid[0].error  # not DistNetworkError: Failed to recv


def test_a_rank_asking_two_cpus_runs_on_two_one_cpu_workers_of_its_host_with_two_threads(dask_client, storage):
    # the shared cluster: 2 worker processes of 1 CPU on one host. {"CPU": 2} holds both CPUs of the host (one
    # process runs the rank), as Ray accounts per node; two such trials therefore run one after the other
    grid = tune.Tuner(tune.with_resources(wt.threads_of_a_rank, {"CPU": 2}), param_space={"x": tune.grid_search([1, 2])},
                      run_config=tune.RunConfig(name="twocpu", storage_path=storage, verbose=0, mlflow=False),
                      client=dask_client).fit()
    assert not grid.errors, grid.errors
    for r in grid:
        assert (r.metrics["omp"], r.metrics["mkl"], r.metrics["torch_threads"]) == (2, 2, 2)
    events = [(e["event"], e.get("trial_id")) for e in tune.read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
              if e["event"] in ("trial_start", "trial_end")]
    starts = [i for i, (kind, _) in enumerate(events) if kind == "trial_start"]
    first_end = next(i for i, (kind, _) in enumerate(events) if kind == "trial_end")
    assert starts[1] > first_end, events  # never both at once: the host has 2 CPUs


def test_a_rank_asking_more_cpus_than_any_host_has_is_refused_with_the_numbers(dask_client, storage):
    tuner = tune.Tuner(tune.with_resources(wt.threads_of_a_rank, {"CPU": 3}),
                       run_config=tune.RunConfig(name="threecpu", storage_path=storage, verbose=0, mlflow=False),
                       client=dask_client)
    with pytest.raises(tune.PlacementError) as err:
        tuner.fit()
    message = str(err.value)
    assert "No host has 3 CPUs" in message and "the largest has 2" in message and "CPUs per host [2.0]" in message
