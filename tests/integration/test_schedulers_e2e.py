"""Schedulers through ``Tuner.fit()`` on the real Dask cluster: stop, pause/resume, clone."""

from __future__ import annotations

import math
import os

import integration_trainables as T
import pytest

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.schedulers import (
    ASHAScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    OptunaPrunerScheduler,
    PopulationBasedTraining,
)


def _fit(client, storage, fn, space, name, **tc):
    tuner = tune.Tuner(
        fn, param_space=space, tune_config=tune.TuneConfig(**tc),
        run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False), client=client,
    )
    return tuner.fit()


def _journal(results):
    return read_journal(os.path.join(results.experiment_path, "journal.jsonl"))


def _iterations(result) -> list[int]:
    df = result.metrics_dataframe
    return [int(i) for i in df["training_iteration"]] if len(df) else []


# A fixed shuffle of 16 floors, so the best trial is neither first nor last.
FLOORS = [0.45, 0.3, 0.75, 0.0, 0.6, 0.9, 0.15, 0.525, 0.225, 0.825, 0.375, 0.675, 0.075, 0.975, 0.525 + 0.2, 0.8]


def test_asha_stops_bad_trials_early_and_keeps_the_best(dask_client, storage):
    asha = ASHAScheduler(max_t=27, grace_period=1, reduction_factor=3)
    results = _fit(dask_client, storage, T.curve_no_checkpoint,
                   {"floor": tune.grid_search(FLOORS), "max_steps": 100}, "asha",
                   metric="loss", mode="min", scheduler=asha)
    assert len(results) == 16 and results.num_errors == 0
    iterations = {r.trial_id: _iterations(r) for r in results}
    # every trial reported 1..n with nothing lost, and nobody ran past max_t (the trainable would go to 100)
    for its in iterations.values():
        assert its == list(range(1, len(its) + 1))
        assert 1 <= len(its) <= 27
    survivors = [r for r in results if len(iterations[r.trial_id]) == 27]
    stopped_early = [r for r in results if len(iterations[r.trial_id]) < 27]
    assert len(stopped_early) >= 10, [len(v) for v in iterations.values()]
    assert sum(map(len, iterations.values())) < 16 * 27 / 2  # FIFO would run 16 x 27 (the order of arrivals varies)
    for r in stopped_early:
        assert r.stop_reason.startswith("stopped by ASHA at rung"), r.stop_reason
    for r in survivors:
        assert "reached max_t=27" in r.stop_reason
    # the best config (floor 0.0) is among the survivors, and it is the best result
    best = results.get_best_result()
    assert best.config["floor"] == 0.0 and best in survivors
    # the journal holds one STOP decision per trial, at its last iteration
    decisions = [e for e in _journal(results) if e["event"] == "decision"]
    assert sorted(e["trial_id"] for e in decisions) == sorted(iterations)
    for e in decisions:
        assert e["decision"] == "STOP" and e["iteration"] == len(iterations[e["trial_id"]])


def test_hyperband_pauses_and_resumes_from_checkpoints_without_losing_an_iteration(dask_client, storage):
    hb = HyperBandScheduler(max_t=9, reduction_factor=3)
    floors = [0.5, 0.1, 0.8, 0.3, 0.0, 0.9, 0.4, 0.7, 0.2, 0.6, 0.05, 0.35]
    results = _fit(dask_client, storage, T.learning_curve,
                   {"floor": tune.grid_search(floors), "max_steps": 50}, "hyperband",
                   metric="loss", mode="min", scheduler=hb)
    assert len(results) == 12 and results.num_errors == 0
    journal = _journal(results)
    paused = {e["trial_id"] for e in journal if e["event"] == "trial_paused"}
    resumed = {e["trial_id"] for e in journal if e["event"] == "trial_resume"}
    assert paused and resumed and resumed <= paused
    restarts = [e for e in journal if e["event"] == "trial_start" and e["start_iteration"] > 0]
    assert {e["trial_id"] for e in restarts} == resumed
    for e in restarts:  # each restart began from the checkpoint of the iteration it paused at
        assert e["checkpoint"] is not None and e["checkpoint"].endswith(f"checkpoint_{e['start_iteration']:06d}")
    assert not [e for e in journal if e["event"] == "superseded" and e["count"]]
    for r in results:
        its = _iterations(r)
        df = r.metrics_dataframe
        assert its == list(range(1, len(its) + 1)), (r.trial_id, its)  # no gap, no repeat
        assert list(df["step"]) == its  # the trainable's own count, carried by the checkpoints, agrees
        assert len(its) <= 9
        assert r.status == "TERMINATED"
        if r.trial_id in resumed:
            assert set(df["resumed_at"]) - {0}, r.trial_id  # it really restarted from a checkpoint
    assert any(len(_iterations(r)) == 9 for r in results)
    assert results.get_best_result().config["floor"] == 0.0
    # PAUSE is not a stop reason; non-promoted trials say why they stopped
    assert all(r.stop_reason is None or not r.stop_reason.startswith("paused") for r in results)


def test_pbt_clones_perturbs_and_resumes_from_the_cloned_checkpoint(dask_client, storage):
    pbt = PopulationBasedTraining(time_attr="training_iteration",
        perturbation_interval=3, hyperparam_mutations={"h0": [0.0, 0.25, 0.5, 0.75, 1.0], "h1": tune.uniform(0, 1)},
        quantile_fraction=0.25, resample_probability=0.25, seed=0,
    )
    results = _fit(dask_client, storage, T.pbt_quadratic,
                   {"h0": tune.grid_search([0.0, 0.25, 1.0, 0.5]), "h1": 0.0, "steps": 15}, "pbt",
                   metric="Q", mode="max", scheduler=pbt)
    assert len(results) == 4 and results.num_errors == 0
    journal = _journal(results)
    exploits = [e for e in journal if e["event"] == "exploit"]
    assert exploits, "PBT never exploited"
    lineage = [dict(ev, owner=r.trial_id) for r in results for ev in r.lineage]
    assert len(lineage) == len(exploits)
    frames = {r.trial_id: r.metrics_dataframe for r in results}
    checked = 0
    for r in results:
        its = _iterations(r)
        # As in Ray, a clone goes on from the source checkpoint's training_iteration (the scheduler took over
        # the source's clock): the count steps by one except where an exploit restarted it
        jumps = [b for a, b in zip(its, its[1:]) if b != a + 1]
        assert len(jumps) <= len(r.lineage), (r.trial_id, its)
        rows = frames[r.trial_id].to_dict("records")
        j = 0
        for ev in r.lineage:
            assert ev["trial_id"] == r.trial_id and ev["from_trial"] != r.trial_id
            # the exploit came after the trial's result of ev["iteration"]; the next result continues from the
            # source's checkpoint at from_iteration: the state the source had when it reported that iteration
            while j < len(rows) and rows[j]["training_iteration"] != ev["iteration"]:
                j += 1
            if j + 1 < len(rows):
                row = rows[j + 1]
                src = frames[ev["from_trial"]]
                src_row = src[src["training_iteration"] == ev["from_iteration"]].iloc[-1]
                assert row["training_iteration"] == ev["from_iteration"] + 1
                assert row["ckpt_trial"] == ev["from_trial"]
                assert row["ckpt_step"] == src_row["own_step"]
                assert row["own_step"] == src_row["own_step"] + 1
                checked += 1
            j += 1
        if r.lineage:  # the trial ends with the config of its last exploit
            assert r.config == r.lineage[-1]["new_config"]
    assert checked >= 1
    # explore: each perturbed h0 is a neighbour in the list (or a resample), h1 = source value x 0.8/1.2 or resampled
    for ev in exploits:
        assert ev["new_config"]["h0"] in (0.0, 0.25, 0.5, 0.75, 1.0)
        assert 0.0 <= ev["new_config"]["h1"] <= 1.2


def test_median_stopping_rule_stops_a_clearly_bad_trial(dask_client, storage):
    median = MedianStoppingRule(time_attr="training_iteration", grace_period=2, min_samples_required=2)
    results = _fit(dask_client, storage, T.curve_no_checkpoint,
                   {"floor": tune.grid_search([0.1, 0.2, 5.0]), "max_steps": 12}, "median",
                   metric="loss", mode="min", scheduler=median, max_concurrent_trials=1)
    by_floor = {r.config["floor"]: r for r in results}
    bad = by_floor[5.0]
    assert len(_iterations(bad)) < 12
    assert "median" in bad.stop_reason.lower(), bad.stop_reason
    assert all(len(_iterations(by_floor[f])) == 12 for f in (0.1, 0.2))


def _schedulers():
    import optuna

    return {
        "asha": lambda: ASHAScheduler(max_t=9, grace_period=1, reduction_factor=2),
        "hyperband": lambda: HyperBandScheduler(max_t=9, reduction_factor=3),
        "median": lambda: MedianStoppingRule(time_attr="training_iteration", grace_period=1, min_samples_required=1),
        "pbt": lambda: PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2, hyperparam_mutations={"lr": [0.1, 0.2]},
                                               seed=0),
        "optuna_pruner": lambda: OptunaPrunerScheduler(optuna.pruners.MedianPruner(n_startup_trials=1)),
    }


@pytest.mark.parametrize("name", ["asha", "hyperband", "median", "pbt", "optuna_pruner"])
def test_non_finite_metrics_never_crash_a_scheduler(dask_client, storage, name):
    space = {"bad": tune.grid_search(["nan", "ok0", "inf", "-inf", "nan_late", "ok3"]), "lr": 0.1, "max_steps": 9}
    results = _fit(dask_client, storage, T.bad_values, space, f"nonfinite-{name}",
                   metric="loss", mode="min", scheduler=_schedulers()[name]())
    assert len(results) == 6 and results.num_errors == 0, [str(e) for e in results.errors]
    warned = {e["trial_id"] for e in _journal(results) if e["event"] == "warning"}
    kinds = {r.trial_id: (r.lineage[0]["old_config"] if r.lineage else r.config)["bad"] for r in results}  # as added
    # every non-finite report was logged ("nan_late" turns NaN at step 3, if it gets there)
    assert {t for t, k in kinds.items() if k in ("nan", "inf", "-inf")} <= warned
    assert {kinds[t] for t in warned} <= {"nan", "inf", "-inf", "nan_late"}
    # the finite trials are judged as without the others: the best one runs to the end
    best = results.get_best_result()
    assert best.config["bad"] == "ok0" and math.isfinite(best.metrics["loss"])
    if name != "pbt":  # (PBT may hand the best trial's config to another one)
        assert best.metrics["training_iteration"] == 9
