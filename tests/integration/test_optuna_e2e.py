"""OptunaSearch and OptunaPrunerScheduler through ``Tuner.fit()`` on the real Dask cluster."""

from __future__ import annotations

import os

import integration_trainables as T
import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.schedulers import ASHAScheduler, MedianStoppingRule, OptunaPrunerScheduler
from tuneplat.search.optuna import OptunaSearch

SPACE = {"x": tune.uniform(-3.0, 3.0), "steps": 4}


def _tuner(client, storage, name, fn=T.quadratic_curve, space=SPACE, callbacks=None, **tc):
    return tune.Tuner(
        fn, param_space=space, tune_config=tune.TuneConfig(**tc),
        run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False,
                                  callbacks=callbacks or []),
        client=client,
    )


def _study(experiment_path: str) -> optuna.Study:
    storage = JournalStorage(JournalFileBackend(os.path.join(experiment_path, "optuna_journal.log")))
    return optuna.load_study(study_name="tuneplat", storage=storage)


def _tpe(seed: int) -> OptunaSearch:
    return OptunaSearch(sampler=optuna.samplers.TPESampler(n_startup_trials=3, seed=seed))


def test_tpe_seeded_and_one_at_a_time_suggests_the_same_configs_in_the_same_order(dask_client, storage):
    runs = []
    for name in ("tpe-a", "tpe-b"):
        results = _tuner(dask_client, storage, name, metric="loss", mode="min", num_samples=8,
                         max_concurrent_trials=1, search_alg=_tpe(7)).fit()
        assert results.num_errors == 0
        runs.append([r.config["x"] for r in results])
    assert runs[0] == runs[1]
    assert len(set(runs[0])) == 8
    other = _tuner(dask_client, storage, "tpe-c", metric="loss", mode="min", num_samples=8,
                   max_concurrent_trials=1, search_alg=_tpe(8)).fit()
    assert [r.config["x"] for r in other] != runs[0]
    # the study in the experiment folder holds the same trials, told COMPLETE with the last loss
    results_b = _tuner(dask_client, storage, "tpe-d", metric="loss", mode="min", num_samples=8,
                       max_concurrent_trials=1, search_alg=_tpe(7)).fit()
    study = _study(results_b.experiment_path)
    by_id = {t.user_attrs["tuneplat_trial_id"]: t for t in study.trials}
    assert len(by_id) == 8
    for r in results_b:
        ot = by_id[r.trial_id]
        assert ot.state == TrialState.COMPLETE
        assert ot.params["x"] == r.config["x"] and ot.value == pytest.approx(r.metrics["loss"])
        assert sorted(ot.intermediate_values) == [1, 2, 3, 4]  # every result reached the Optuna trial


def test_optuna_pruner_marks_pruned_and_failed_trials_in_the_study(dask_client, storage):
    points = [{"x": 1.0}, {"x": 1.2}, {"x": 0.8}, {"x": 2.9}, {"x": -5.0}, {"x": 2.8}, {"x": 1.1}]
    pruner = OptunaPrunerScheduler(optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1))
    results = _tuner(dask_client, storage, "pruner", space={"x": tune.uniform(-6.0, 3.0), "steps": 6},
                     metric="loss", mode="min", num_samples=7, max_concurrent_trials=1, scheduler=pruner,
                     search_alg=OptunaSearch(points_to_evaluate=points, seed=0)).fit()
    assert [r.config["x"] for r in results] == [p["x"] for p in points]  # points first, in order
    by_x = {r.config["x"]: r for r in results}
    pruned = [by_x[2.9], by_x[2.8]]
    for r in pruned:  # far worse than the median of the completed trials at step 2: pruned there
        assert r.metrics["training_iteration"] < 6
        assert r.stop_reason.startswith("pruned by MedianPruner"), r.stop_reason
    assert by_x[-5.0].status == "ERROR"
    states = {t.user_attrs["tuneplat_trial_id"]: t.state for t in _study(results.experiment_path).trials}
    assert states == {r.trial_id: (TrialState.PRUNED if r in pruned else
                                   TrialState.FAIL if r.config["x"] == -5.0 else TrialState.COMPLETE)
                      for r in results}


def test_asha_stop_at_max_t_is_complete_and_early_stop_is_pruned(dask_client, storage):
    results = _tuner(dask_client, storage, "asha-optuna", space={"x": tune.uniform(-3.0, 3.0), "steps": 9},
                     metric="loss", mode="min", num_samples=8, max_concurrent_trials=2, seed=1,
                     scheduler=ASHAScheduler(max_t=4, grace_period=1, reduction_factor=2),
                     search_alg=OptunaSearch(sampler="random")).fit()
    states = {t.user_attrs["tuneplat_trial_id"]: t.state for t in _study(results.experiment_path).trials}
    for r in results:
        reached = r.metrics["training_iteration"] == 4
        assert states[r.trial_id] == (TrialState.COMPLETE if reached else TrialState.PRUNED), r.stop_reason
    assert TrialState.PRUNED in states.values() and TrialState.COMPLETE in states.values()


def test_multi_objective_nsga2_gives_the_pareto_front(dask_client, storage):
    space = {"x": tune.uniform(-1.0, 2.0), "y": tune.uniform(0.0, 1.0)}
    results = _tuner(dask_client, storage, "nsga2", fn=T.two_objectives, space=space,
                     metric=["loss", "latency"], mode=["min", "min"], num_samples=16, seed=3,
                     search_alg=OptunaSearch(sampler="nsgaii")).fit()
    assert len(results) == 16 and results.num_errors == 0
    front = results.get_best_results()
    assert front
    values = [(r.metrics["loss"], r.metrics["latency"]) for r in results]
    for r in results:  # brute force: on the front iff nobody dominates it
        mine = (r.metrics["loss"], r.metrics["latency"])
        dominated = any(o[0] <= mine[0] and o[1] <= mine[1] and o != mine for o in values)
        assert (r in front) == (not dominated)
    df = results.get_dataframe()
    assert df["pareto"].dtype == bool
    assert set(df[df["pareto"]]["trial_id"]) == {r.trial_id for r in front}
    # the same front as Optuna's study.best_trials
    study = _study(results.experiment_path)
    assert {t.user_attrs["tuneplat_trial_id"] for t in study.best_trials} == {r.trial_id for r in front}
    with pytest.raises(ValueError, match="several metrics"):
        results.get_best_result()


def test_a_single_metric_scheduler_in_a_multi_objective_experiment_is_refused_at_fit(dask_client, storage):
    """Median stopping decides on one metric: refused, naming the fix. (ASHA and HyperBand take the objectives:
    MO-ASHA, tests/sched.)"""
    tuner = _tuner(dask_client, storage, "mo-median", fn=T.two_objectives,
                   space={"x": tune.uniform(-1.0, 2.0), "y": tune.uniform(0.0, 1.0)},
                   metric=["loss", "latency"], mode=["min", "min"], num_samples=2,
                   scheduler=MedianStoppingRule(grace_period=1))
    with pytest.raises(ValueError, match=r"multi-objective.*MedianStoppingRule\(metric='loss', mode='min'"):
        tuner.fit()


class _InterruptAfter(tune.Callback):
    """Ctrl-C after ``n`` trials completed (raised on the tuner's loop, as a real SIGINT would be)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.done = 0

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.done += 1
        if self.done == self.n:
            raise KeyboardInterrupt("test interrupt")


def test_restore_continues_the_same_optuna_study(dask_client, storage):
    # two at a time, so a trial is usually running when the interrupt comes: it is resumed into its Optuna trial
    tuner = _tuner(dask_client, storage, "optuna-restore", metric="loss", mode="min", num_samples=8,
                   max_concurrent_trials=2, search_alg=_tpe(0), callbacks=[_InterruptAfter(3)])
    first = tuner.fit()
    path = first.experiment_path
    done_first = [r.trial_id for r in first if r.status == "TERMINATED"]
    assert 3 <= len(done_first) < 8
    before = _study(path).trials
    assert len(before) >= 3

    # tuner.pkl restores the searcher (a fresh OptunaSearch that loads the journal); the run config
    # is given again only to leave the interrupting callback out
    run_config = tune.RunConfig(name="optuna-restore", storage_path=storage, verbose=0, mlflow=False)
    restored = tune.Tuner.restore(path, T.quadratic_curve, run_config=run_config, client=dask_client)
    results = restored.fit()
    assert len(results) == 8 and results.num_errors == 0
    assert all(r.status == "TERMINATED" for r in results)
    study = _study(path)
    ids = [t.user_attrs.get("tuneplat_trial_id") for t in study.trials]
    # one study: the first run's trials are still there, the restored run's were added to it
    assert [t.number for t in before] == [t.number for t in study.trials[: len(before)]]
    assert set(done_first) <= set(ids)
    assert len(ids) == len(set(ids)) == 8  # a trial interrupted while running kept its Optuna trial
    assert {r.trial_id for r in results} <= set(ids)
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert {t.user_attrs["tuneplat_trial_id"] for t in complete} == {r.trial_id for r in results}
    starts = [e for e in read_journal(os.path.join(path, "journal.jsonl")) if e["event"] == "experiment"]
    assert [e["resume"] for e in starts] == [False, True]
