"""The digits example trains a real model with 2 ranks, checkpoints it and resumes from the checkpoint."""

from __future__ import annotations

import json
import os

import pytest
import torch

import tuneplat as tune


@pytest.mark.slow
def test_digits_example_sweep_and_trainer(dask_client, storage):
    from examples import digits_ddp

    grid = digits_ddp.sweep(epochs=4, samples=1, storage=storage, address=None, client=dask_client, mlflow=False)
    best = grid.get_best_result()
    assert best.error is None, best.error
    assert best.metrics["val_accuracy"] > 0.9
    assert [r["epoch"] for r in best.metrics_dataframe.to_dict("records")] == [0, 1, 2, 3]

    result = digits_ddp.single_run(epochs=4, storage=storage, address=None, client=dask_client, mlflow=False)
    assert result.metrics["val_accuracy"] > 0.9
    state = torch.load(os.path.join(result.checkpoint.path, "model.pt"), weights_only=True)
    assert state["epoch"] == 3 and "net.0.weight" in state["model"]


def test_digits_train_loop_resumes_from_its_checkpoint(dask_client, storage):
    import wg_trainables as wt

    rc = tune.RunConfig(name="digits_resume", storage_path=storage, verbose=0, mlflow=False,
                        failure_config=tune.FailureConfig(max_failures=1))
    result = tune.Tuner(wt.digits_fails_once, param_space={"epochs": 4}, run_config=rc, client=dask_client).fit()[0]
    assert result.error is None, result.error
    # the retry loaded epoch 1's checkpoint and went on with epochs 2 and 3 (not from 0 again)
    epochs = [r["epoch"] for r in result.metrics_dataframe.to_dict("records")]
    assert epochs == [0, 1, 2, 3], epochs
    with open(os.path.join(storage, "digits_resume", "journal.jsonl"), encoding="utf-8") as f:
        events = [json.loads(line) for line in f if line.strip()]
    reported = [e["result"]["epoch"] for e in events if e["event"] == "result"]
    assert reported == [0, 1, 2, 3], f"the retry did not resume from the checkpoint: {reported}"
    assert result.metrics["val_accuracy"] > 0.8
