"""End-to-end behaviour of Tuner.fit() on a real Dask LocalCluster."""

from __future__ import annotations

import json
import math
import os
import threading

import pandas as pd
import pytest
import trainables as T

import tuneplat as tune
from tuneplat import read_journal


def _fit(client, storage, fn, space, **tc):
    run_kw = tc.pop("run", {})
    tuner = tune.Tuner(
        fn, param_space=space,
        tune_config=tune.TuneConfig(**tc),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, mlflow=False, **run_kw),
        client=client,
    )
    return tuner, tuner.fit()


def test_quickstart_grid_times_samples_and_best(dask_client, storage):
    space = {"x": tune.uniform(-10, 10), "act": tune.choice(["relu", "tanh"]), "depth": tune.grid_search([2, 4]),
             "nested": {"const": 7, "y": tune.randint(0, 3)}}
    _, results = _fit(dask_client, storage, T.quadratic, space, metric="loss", mode="min", num_samples=3,
                      max_concurrent_trials=2, seed=0, run={"name": "qs", "stop": {"training_iteration": 3}})
    assert len(results) == 6  # grid of 2 x num_samples 3
    assert sorted(r.config["depth"] for r in results) == [2, 2, 2, 4, 4, 4]
    assert all(r.config["nested"]["const"] == 7 and r.config["nested"]["y"] in (0, 1, 2) for r in results)
    assert results.num_errors == 0 and results.num_terminated == 6
    # stop criterion: every trial ended at iteration 3 although it would report 5 times
    assert all(r.metrics["training_iteration"] == 3 for r in results)
    best = results.get_best_result()
    assert best.metrics["loss"] == min(r.metrics["loss"] for r in results)
    assert abs(best.config["x"] - 3) == min(abs(r.config["x"] - 3) for r in results)
    df = results.get_dataframe()
    assert isinstance(df, pd.DataFrame) and len(df) == 6
    for col in ("loss", "training_iteration", "time_total_s", "timestamp", "trial_id", "config/x", "config/nested/y"):
        assert col in df.columns, col
    hist = best.metrics_dataframe
    assert list(hist["training_iteration"]) == [1, 2, 3]
    assert os.path.isdir(best.path)
    with open(os.path.join(best.path, "params.json")) as f:
        assert json.load(f)["depth"] == best.config["depth"]


def test_same_seed_same_configs_in_same_order(dask_client, storage):
    space = {"x": tune.uniform(-10, 10), "k": tune.choice(list(range(100)))}
    cfgs = []
    for i in range(2):
        _, results = _fit(dask_client, storage, T.one_report, space, metric="loss", mode="min", num_samples=4, seed=42,
                          max_concurrent_trials=1, run={"name": f"seed{i}"})
        cfgs.append([r.config for r in results])
    assert cfgs[0] == cfgs[1]
    _, other = _fit(dask_client, storage, T.one_report, space, metric="loss", mode="min", num_samples=4, seed=43,
                    run={"name": "seed-other"})
    assert [r.config for r in other] != cfgs[0]


class _Arrivals(tune.Callback):
    def __init__(self):
        self.seen = []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        import time

        self.seen.append((trial.trial_id, result["training_iteration"], time.time(), result["timestamp"]))


def test_results_stream_in_order_and_decisions_obeyed_at_that_report(dask_client, storage, tmp_path):
    marker_dir = tmp_path / "markers"
    marker_dir.mkdir()
    cb = _Arrivals()
    tuner = tune.Tuner(
        T.count_to, param_space={"marker_dir": str(marker_dir), "i": tune.grid_search([0, 1])},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, mlflow=False, stop={"training_iteration": 4},
                                  callbacks=[cb]),
        client=dask_client,
    )
    results = tuner.fit()
    for r in results:
        assert [h["training_iteration"] for h in r._history] == [1, 2, 3, 4]
        assert r.metrics["trial_id"] == r.trial_id
        assert r.metrics["time_total_s"] >= 0 and r.metrics["timestamp"] > 0
        # report() returned 3 times; the 4th report got STOP and never returned
        markers = sorted(p.name for p in marker_dir.iterdir() if p.name.startswith(r.trial_id))
        assert markers == [f"{r.trial_id}_{i}" for i in (1, 2, 3)]
    # each result reached the tuner before the worker produced the next one
    by_trial = {}
    for tid, it, arrived, produced in cb.seen:
        by_trial.setdefault(tid, []).append((it, arrived, produced))
    for rows in by_trial.values():
        assert [r[0] for r in rows] == [1, 2, 3, 4]
        for (_, arrived, _), (_, _, next_produced) in zip(rows, rows[1:]):
            assert arrived <= next_produced


def test_callable_stop_and_time_budget(dask_client, storage):
    _, results = _fit(dask_client, storage, T.quadratic, {"x": 3.0, "steps": 10}, metric="loss", mode="min",
                      run={"stop": lambda tid, r: r["training_iteration"] >= 2})
    assert results[0].metrics["training_iteration"] == 2
    _, results = _fit(dask_client, storage, T.sleeps_forever, {"x": tune.grid_search([1, 2, 3, 4])}, metric="loss",
                      mode="min", time_budget_s=1.0, max_concurrent_trials=2)
    assert results.num_errors == 0
    assert len(results) <= 4
    # (a trial the budget ended before its first report has no metrics: how many reported depends on the load)
    assert all(r.status == "TERMINATED" and r.metrics.get("training_iteration", 0) < 1000 for r in results)


def test_failing_trial_is_isolated_with_traceback(dask_client, storage):
    _, results = _fit(dask_client, storage, T.fails_if_negative, {"x": tune.grid_search([-1, 1, 2])},
                      metric="loss", mode="min")
    assert results.num_errors == 1 and results.num_terminated == 2
    bad = next(r for r in results if r.config["x"] == -1)
    assert bad.status == "ERROR"
    assert "ValueError: x=-1 is negative" in str(bad.error)
    assert "fails_if_negative" in bad.error.traceback
    assert len(results.errors) == 1
    assert results.get_best_result().config["x"] in (1, 2)
    events = read_journal(os.path.join(results.experiment_path, "journal.jsonl"))
    ends = [e for e in events if e["event"] == "trial_end" and e["status"] == "ERROR"]
    assert len(ends) == 1 and "negative" in ends[0]["error"]


def test_missing_metric_is_a_clear_trial_error(dask_client, storage):
    _, results = _fit(dask_client, storage, T.forgets_metric, {"x": 1}, metric="loss", mode="min")
    err = str(results[0].error)
    assert results[0].status == "ERROR"
    assert "without the metric 'loss'" in err and "['accuracy']" in err and results[0].trial_id in err


def test_non_finite_metric_is_reported_and_does_not_win(dask_client, storage):
    _, results = _fit(dask_client, storage, T.reports_nan, {"x": 1}, metric="loss", mode="min")
    assert results[0].status == "TERMINATED"
    hist = results[0].metrics_dataframe
    assert math.isnan(hist["loss"].iloc[0]) and hist["loss"].iloc[1] == 1.0
    events = read_journal(os.path.join(results.experiment_path, "journal.jsonl"))
    assert any(e["event"] == "warning" and "non-finite" in e["message"] for e in events)


def test_unpicklable_trainable_fails_at_build_time(dask_client, storage):
    lock = threading.Lock()

    def uses_lock(config):
        with lock:
            tune.report({"loss": 1})

    with pytest.raises(TypeError, match="cannot be pickled"):
        tune.Tuner(uses_lock, run_config=tune.RunConfig(storage_path=storage))


@pytest.mark.parametrize("domain, needle", [
    (tune.uniform(5, 1), "lower=5 must be < upper=1"),
    (tune.loguniform(0, 1), "must be > 0 on a log scale"),
    (tune.choice([]), "at least one value"),
    (tune.quniform(0, 1, 0), "q=0 must be a number > 0"),
])
def test_invalid_domain_fails_when_tuner_is_built_naming_the_key(domain, needle, storage):
    with pytest.raises(tune.SearchSpaceError) as info:
        tune.Tuner(T.one_report, param_space={"model": {"lr": domain}}, run_config=tune.RunConfig(storage_path=storage))
    assert "param_space['model']['lr']" in str(info.value) and needle in str(info.value)


def test_bad_config_values_name_the_argument():
    with pytest.raises(ValueError, match=r"`TuneConfig.num_samples` is 0"):
        tune.TuneConfig(num_samples=0)
    with pytest.raises(ValueError, match=r"`TuneConfig.mode` is 'minimize'"):
        tune.TuneConfig(metric="loss", mode="minimize")
    with pytest.raises(ValueError, match=r"ScalingConfig.num_workers"):
        tune.ScalingConfig(num_workers=-1)  # (0 is Ray Train V2's local mode: tests/train/test_ray_train_v2.py)


def test_impossible_placement_is_refused_at_once(dask_client, storage):
    tuner = tune.Tuner(T.one_report, param_space={"x": 1}, scaling_config=tune.ScalingConfig(num_workers=3),
                       run_config=tune.RunConfig(storage_path=storage, verbose=0, mlflow=False), client=dask_client)
    with pytest.raises(tune.PlacementError, match=r"needs 3 rank\(s\).*2 worker process"):
        tuner.fit()


def test_journal_torn_last_line_is_tolerated_and_damage_elsewhere_is_not(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_text('{"event": "a"}\n{"event": "b"}\n{"event": "c", "x": [1, 2')
    assert [e["event"] for e in read_journal(str(path))] == ["a", "b"]
    path.write_text('{"event": "a"}\n{"event": \n{"event": "c"}\n')
    from tuneplat.core._journal import JournalError

    with pytest.raises(JournalError, match=r"journal.jsonl:2"):
        read_journal(str(path))


def test_embedded_local_cluster_is_started_and_closed(storage):
    """No client given and none active: fit() starts its own LocalCluster on 127.0.0.1 and closes it."""
    from distributed import Client

    tuner = tune.Tuner(T.one_report, param_space={"x": tune.grid_search([1.0, 2.0])},
                       tune_config=tune.TuneConfig(metric="loss", mode="min"),
                       run_config=tune.RunConfig(storage_path=storage, verbose=0, mlflow=False))
    results = tuner.fit()
    assert results.num_terminated == 2
    with pytest.raises(ValueError):
        Client.current()  # nothing left as the default client


def test_trial_name_and_dirname_creators(dask_client, storage):
    tuner = tune.Tuner(
        T.one_report, param_space={"x": tune.grid_search([1.0, 2.0])},
        tune_config=tune.TuneConfig(metric="loss", mode="min",
                                    trial_name_creator=lambda t: f"x={t.config['x']}",
                                    trial_dirname_creator=lambda t: f"dir_{t.trial_id}"),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, mlflow=False), client=dask_client,
    )
    results = tuner.fit()
    assert sorted(os.path.basename(r.path) for r in results) == sorted(f"dir_{r.trial_id}" for r in results)
    events = read_journal(os.path.join(results.experiment_path, "journal.jsonl"))
    assert sorted(e["name"] for e in events if e["event"] == "trial_add") == ["x=1.0", "x=2.0"]


def test_public_api_all_is_sorted_and_complete():
    names = [n for n in dir(tune) if not n.startswith("_") or n == "__version__"]
    public = {n for n in names if not isinstance(getattr(tune, n), type(os))} | {"schedulers", "search", "train"}
    assert tune.__all__ == sorted(tune.__all__)
    assert len(tune.__all__) == len(set(tune.__all__))
    assert all(hasattr(tune, n) for n in tune.__all__)
    missing = public - set(tune.__all__) - {"annotations", "tracking", "cli", "config", "execution"}
    assert not missing, missing


@pytest.mark.slow
def test_a_cluster_that_cannot_take_trials_ends_the_experiment_restorably(storage, monkeypatch):
    """Every worker gone (and none coming back): the experiment ends with a clear reason instead of hanging."""
    import dask
    from distributed import Client, LocalCluster

    monkeypatch.setenv("TUNEPLAT_WORKER_WAIT_S", "1")
    with dask.config.set({"distributed.worker.daemon": False}):
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0")
    client = Client(cluster, set_as_default=False)
    try:
        class ScaleToZero(tune.Callback):
            def on_trial_result(self, iteration, trials, trial, result, **info):
                cluster.scale(0)  # the only worker leaves for good while the first trial runs

        tuner = tune.Tuner(T.kills_cluster_worker, param_space={"i": tune.grid_search([0, 1, 2])},
                           tune_config=tune.TuneConfig(metric="loss", mode="min"),
                           run_config=tune.RunConfig(storage_path=storage, verbose=0, mlflow=False,
                                                     failure_config=tune.FailureConfig(max_failures=5),
                                                     callbacks=[ScaleToZero()]),
                           client=client)
        results = tuner.fit()
    finally:
        client.close()
        cluster.close()
    events = read_journal(os.path.join(results.experiment_path, "journal.jsonl"))
    assert any(e["event"] == "starved" and "no worker could take this trial" in e["message"] for e in events)
    assert events[-1]["event"] == "experiment_end" and events[-1]["status"] in ("interrupted", "failed")


def test_a_new_run_with_the_same_name_starts_its_own_journal(dask_client, storage, caplog):
    def run(x):
        return tune.Tuner(T.quadratic, param_space={"x": x},
                          run_config=tune.RunConfig(name="same", storage_path=storage, verbose=0, mlflow=False),
                          client=dask_client).fit()

    first = run(1.0)
    second = run(2.0)
    assert [r.config["x"] for r in first] == [1.0] and [r.config["x"] for r in second] == [2.0]
    exp = os.path.join(storage, "same")
    assert "already held a run of experiment 'same'" in caplog.text and "Tuner.restore(" in caplog.text
    restored = tune.Tuner.restore(exp, T.quadratic).get_results()
    assert [r.config["x"] for r in restored] == [2.0]  # only the new run's trials
    (old,) = [f for f in os.listdir(storage) if f.startswith("same.")]  # the previous run, moved aside whole
    old_trials = [e for e in tune.read_journal(os.path.join(storage, old, "journal.jsonl")) if e["event"] == "trial_add"]
    assert [e["config"]["x"] for e in old_trials] == [1.0]  # nothing lost


@pytest.mark.parametrize("scheduler", ["PASHAScheduler", "ASHAScheduler", "HyperBandScheduler", "MedianStoppingRule",
                                       "PopulationBasedTraining"])
def test_a_non_numeric_time_attr_fails_that_trial_naming_the_key(dask_client, storage, scheduler):
    """Ray's schedulers raise TypeError comparing a str time_attr; silently ignoring every result is worse."""
    from tuneplat import schedulers

    kw = {"hyperparam_mutations": {"y": [1, 2]}} if scheduler == "PopulationBasedTraining" else {}
    _, results = _fit(dask_client, storage, T.reports_phase, {"x": tune.grid_search([0, 1])}, metric="loss",
                      mode="min", scheduler=getattr(schedulers, scheduler)(time_attr="phase", **kw))
    bad = next(r for r in results if r.config["x"] == 0)
    assert bad.status == "ERROR" and "TypeError" in str(bad.error) and "'phase'" in str(bad.error)
    assert "phase='warmup' (str)" in str(bad.error)
    good = next(r for r in results if r.config["x"] == 1)
    assert good.error is None  # the other trial goes on: the experiment is not taken down
