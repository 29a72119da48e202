"""ResourceChangingScheduler on a real TorchTrainer group: a 1-rank trial given 2 bundles restarts as 2 ranks.

The scheduler's decisions against Ray's are checked in virtual time (tests/core/test_resource_changing_ranks.py);
this is the one real run: 2 Dask worker processes, a gloo group, the checkpoint the group restarts from.
"""

from __future__ import annotations

import json
import os

import wg_trainables as wt
from tuneplat.tune.execution.placement_groups import PlacementGroupFactory
from tuneplat.tune.schedulers import FIFOScheduler, ResourceChangingScheduler

import tuneplat as tune
from tuneplat.train.torch import TorchTrainer


def two_ranks(tune_controller, trial, result, scheduler):
    """Ray Train's factory of 2 workers (an empty head bundle, one bundle per worker), from the first result on.

    Fixed rather than DistributeResources(add_bundles=True), which gives the same on this 2-CPU cluster: the
    test does not depend on the shared cluster having both workers up at that instant."""
    return PlacementGroupFactory([{}, {"CPU": 1}, {"CPU": 1}])


def test_a_one_rank_trainer_given_two_bundles_restarts_from_its_checkpoint_as_two_ranks(dask_client, storage):
    trainer = TorchTrainer(wt.steps_from_checkpoint, train_loop_config={"steps": 3},
                           scaling_config=tune.ScalingConfig(num_workers=1))
    grid = tune.Tuner(trainer, tune_config=tune.TuneConfig(
                          metric="world_size", mode="max", scheduler=ResourceChangingScheduler(FIFOScheduler(),
                                                                                               two_ranks)),
                      run_config=tune.RunConfig(name="rcs_torch", storage_path=storage, verbose=0, mlflow=False),
                      client=dask_client).fit()
    result = grid[0]
    assert result.error is None, result.error
    rows = result.metrics_dataframe.to_dict("records")
    assert [m["training_iteration"] for m in rows] == [1, 2, 3]  # no step lost nor repeated
    # step 1 by the 1-rank group; then the 2-rank group, started from the checkpoint of step 1 on both ranks
    assert [(m["world_size"], m["ranks_in_group"], m["started_at"]) for m in rows] == [(1, 1, 0), (2, 2, 1), (2, 2, 1)]
    assert rows[1]["ranks_from_checkpoint"] == 2
    with open(os.path.join(grid.experiment_path, "journal.jsonl"), encoding="utf-8") as f:
        events = [json.loads(line) for line in f if line.strip()]
    change = next(e for e in events if e["event"] == "trial_resources")
    assert change["num_workers"] == 2 and change["request"] == {"CPU": 1.0} and change["iteration"] == 1
    assert len(next(e for e in events if e["event"] == "trial_start")["workers"]) == 1
    # (causal order only: the restart follows the change; a start the cluster answered NOT_STARTED may repeat)
    restarts = [e for e in events[events.index(change):] if e["event"] == "trial_start"]
    assert restarts and all(len(e["workers"]) == 2 for e in restarts)
    assert restarts[0]["checkpoint"].endswith("checkpoint_000001")
