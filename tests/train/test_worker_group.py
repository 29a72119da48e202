"""Worker groups: 2 CPU ranks over gloo on real Dask worker processes."""

from __future__ import annotations

import json
import os
import threading

import pytest
import torch
import wg_trainables as wt

import tuneplat as tune
from tuneplat.train.torch import TorchConfig, TorchTrainer


def _rc(storage: str, name: str, **kw) -> tune.RunConfig:
    return tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False, **kw)


def _journal(grid_or_dir) -> list[dict]:
    path = grid_or_dir if isinstance(grid_or_dir, str) else grid_or_dir.experiment_path
    with open(os.path.join(path, "journal.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _single_process_reference() -> dict[str, torch.Tensor]:
    """The same SGD steps in one process, each on the concatenation of both ranks' rows."""
    model = wt.initial_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = wt.make_data(2)
    for step in range(wt.STEPS):
        lo, hi = step * 2 * wt.BATCH, (step + 1) * 2 * wt.BATCH
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x[lo:hi]), y[lo:hi]).backward()
        opt.step()
    return model.state_dict()


def test_ddp_gradients_are_averaged_across_ranks(dask_client, storage):
    grid = tune.Tuner(wt.ddp_linear, param_space={"lr": 0.1}, scaling_config=tune.ScalingConfig(num_workers=2),
                      run_config=_rc(storage, "ddp_avg"), client=dask_client).fit()
    result = grid[0]
    assert result.error is None, result.error
    assert result.metrics["training_iteration"] == wt.STEPS
    folder = result.checkpoint.path
    r0 = torch.load(os.path.join(folder, "rank0.pt"), weights_only=True)
    r1 = torch.load(os.path.join(folder, "rank1.pt"), weights_only=True)
    reference = _single_process_reference()
    initial = wt.initial_model().state_dict()
    for key in reference:
        assert torch.equal(r0[key], r1[key]), f"{key} differs between ranks"
        torch.testing.assert_close(r0[key], reference[key], rtol=1e-5, atol=1e-6)
        assert not torch.allclose(r0[key], initial[key]), "training did not move the parameters"


def _rank_files(trial_path: str) -> list[dict]:
    out = []
    for r in range(2):
        with open(os.path.join(trial_path, f"rank{r}.json"), encoding="utf-8") as f:
            out.append(json.load(f))
    return out


@pytest.mark.parametrize("num_workers", [0, 1])
def test_data_loader_shards_and_context(dask_client, storage, num_workers):
    n, batch = 40, 4
    grid = tune.Tuner(wt.sharding, param_space={"n": n, "batch_size": batch, "num_workers": num_workers},
                      scaling_config=tune.ScalingConfig(num_workers=2),
                      run_config=_rc(storage, f"shards{num_workers}"), client=dask_client).fit()
    result = grid[0]
    assert result.error is None, result.error
    ranks = _rank_files(result.path)
    for epoch in range(2):
        a, b = (set(r["seen"][epoch]) for r in ranks)
        assert not a & b, f"epoch {epoch}: ranks saw the same rows {sorted(a & b)}"
        assert a | b == set(range(n)), f"epoch {epoch}: rows missing {sorted(set(range(n)) - (a | b))}"
        assert len(ranks[0]["seen"][epoch]) == len(ranks[1]["seen"][epoch]) == n // 2
    for r in ranks:
        assert r["seen"][0] != r["seen"][1], "the sampler's epoch was not advanced (same order in both passes)"
        assert set(r["sizes"]) == {batch}, "the user's batch size was not kept"
        assert r["len"] == n // 2 // batch
        assert r["device"] == "cpu"
    trial_name = os.path.basename(result.path)
    for rank, r in enumerate(ranks):
        assert (r["world_rank"], r["world_size"]) == (rank, 2)
        assert (r["local_rank"], r["local_world_size"], r["node_rank"]) == (rank, 2, 0)  # both workers on this host
        assert r["trial_name"] == trial_name and r["trial_id"] == result.trial_id
        assert r["experiment_name"] == f"shards{num_workers}"
        assert os.path.samefile(r["trial_dir"], result.path)
        assert r["env"]["RANK"] == str(rank) and r["env"]["WORLD_SIZE"] == "2" and r["env"]["LOCAL_RANK"] == str(rank)
        assert r["env"]["MASTER_ADDR"] == "127.0.0.1" and int(r["env"]["MASTER_PORT"]) > 0
        assert r["daemon"] is False


def test_failing_rank_ends_group_and_next_trial_runs(dask_client, storage):
    grid = tune.Tuner(wt.fail_one_rank, param_space={"fail_rank": tune.grid_search([1, 0, -1])},
                      scaling_config=tune.ScalingConfig(num_workers=2),
                      tune_config=tune.TuneConfig(max_concurrent_trials=1),
                      run_config=_rc(storage, "rank_fail"), client=dask_client).fit()
    by_rank = {r.config["fail_rank"]: r for r in grid}
    for failing in (1, 0):
        err = by_rank[failing].error
        assert err is not None and f"rank {failing} fails on purpose" in str(err), err
        assert by_rank[failing].metrics["training_iteration"] == 2  # both ranks reported steps 0 and 1
    ok = by_rank[-1]
    assert ok.error is None and ok.metrics["training_iteration"] == 4
    events = _journal(grid)
    starts = [e for e in events if e["event"] == "trial_start"]
    assert len(starts) == 3
    # The surviving rank errored out of its collective and left by itself: no worker was
    # killed and restarted, so every trial ran on the same two worker processes.
    assert all(sorted(s["workers"]) == sorted(starts[0]["workers"]) for s in starts)
    failures = [e for e in events if e["event"] == "trial_failure"]
    assert len(failures) == 2 and all(not f["retry"] for f in failures)


def test_impossible_placement_is_refused_at_once(dask_client, storage):
    with pytest.raises(tune.PlacementError, match=r"3 rank\(s\).*2 worker process") as info:
        tune.Tuner(wt.short_loop, scaling_config=tune.ScalingConfig(num_workers=3),
                   run_config=_rc(storage, "three"), client=dask_client).fit()
    assert "num_workers" in str(info.value)
    with pytest.raises(tune.PlacementError, match=r"GPU=1.*0 GPU"):
        tune.Tuner(wt.short_loop, scaling_config=tune.ScalingConfig(num_workers=1, use_gpu=True),
                   run_config=_rc(storage, "gpu"), client=dask_client).fit()


def test_single_and_two_rank_trials_share_the_cluster(dask_client, storage):
    """Two 1-rank trials and a 2-rank trial at the same time on 2 slots all finish."""
    grids: dict[str, tune.ResultGrid] = {}
    errors: list[BaseException] = []

    def run(name: str, workers: int, samples: int) -> None:
        try:
            grids[name] = tune.Tuner(wt.short_loop, param_space={"steps": 5},
                                     tune_config=tune.TuneConfig(num_samples=samples),
                                     scaling_config=tune.ScalingConfig(num_workers=workers),
                                     run_config=_rc(storage, name), client=dask_client).fit()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=("ones", 1, 2)), threading.Thread(target=run, args=("pair", 2, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not any(t.is_alive() for t in threads), "a tuner did not finish (deadlock?)"
    assert not errors, errors
    assert [r.metrics["world_size"] for r in grids["ones"]] == [1, 1]
    assert grids["pair"][0].metrics["world_size"] == 2
    for grid in grids.values():
        for r in grid:
            assert r.error is None and r.metrics["training_iteration"] == 5


def test_torch_trainer_with_torch_config(dask_client, storage):
    trainer = TorchTrainer(wt.short_loop, train_loop_config={"steps": 2}, scaling_config=tune.ScalingConfig(num_workers=2),
                           torch_config=TorchConfig(backend="gloo", timeout_s=30),
                           run_config=_rc(storage, "trainer"), client=dask_client)
    result = trainer.fit()
    assert result.metrics["world_size"] == 2 and result.metrics["training_iteration"] == 2


def test_torch_config_validates():
    with pytest.raises(ValueError, match="timeout_s"):
        TorchConfig(timeout_s=0)
    with pytest.raises(TypeError, match="TorchConfig"):
        TorchTrainer(wt.short_loop, torch_config={"timeout_s": 5})


def test_rendezvous_listens_on_the_worker_address_only(dask_client, storage):
    grid = tune.Tuner(wt.listeners, scaling_config=tune.ScalingConfig(num_workers=2),
                      run_config=_rc(storage, "listen"), client=dask_client).fit()
    result = grid[0]
    assert result.error is None, result.error
    listening = result.metrics["listening"]  # rank 0: Dask worker, TCPStore, gloo
    assert listening, "expected the rank's listeners"
    assert all(a.startswith("127.0.0.1:") for a in listening), listening


def test_importing_tuneplat_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, tuneplat, tuneplat.train; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.slow
def test_data_loader_workers_start_after_a_crash_restarted_the_embedded_clusters_workers(storage):
    # a nanny reads `distributed.worker.daemon` each time it starts a worker process: the embedded cluster keeps it
    # False for its whole life, so a worker restarted after a crash can still start DataLoader processes
    grid = tune.Tuner(wt.loader_after_crash, param_space={"k": tune.grid_search([1, 2, 3])},
                      run_config=_rc(storage, "restarted", failure_config=tune.FailureConfig(max_failures=1))).fit()
    assert grid.num_errors == 0, [str(e) for e in grid.errors]
    assert [r.metrics["rows"] for r in grid] == [28, 28, 28]
