"""Early stopping: candidates trained in increments (partial_fit, warm_start), ASHA stops the bad ones.

Candidates are listed good first, so ASHA (grace period 1, reduction factor 3) has the good ones' scores
at its first rung when the bad ones reach it: the bad ones must stop there, the good ones go on.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression, SGDClassifier
from sklearn.naive_bayes import GaussianNB

from tuneplat import read_journal
from tuneplat.schedulers import ASHAScheduler, FIFOScheduler
from tuneplat.sklearn import TuneGridSearchCV, TuneSearchCV

X, Y = load_digits(return_X_y=True)
X = X[:600] / 16.0
Y = Y[:600]


@pytest.fixture
def kw(dask_client, tmp_path):
    return {"client": dask_client, "storage_path": str(tmp_path / "results"), "mlflow": False, "name": "es"}


def _iterations(search):
    return {r.config["alpha" if "alpha" in r.config else "max_depth"]: r.metrics["training_iteration"]
            for r in search.result_grid_}


def test_asha_stops_bad_sgd_candidates_trained_with_partial_fit(kw, tmp_path):
    grid = {"alpha": [1e-4, 3e-4, 1e-3, 3.0, 10.0, 30.0]}
    search = TuneGridSearchCV(SGDClassifier(random_state=0), grid, cv=3, early_stopping=True, max_iters=9, **kw)
    search.fit(X, Y)
    its = _iterations(search)
    # a candidate first at every rung goes on to max_iters: with two trials running at once, which of the good ones
    # reaches a rung first depends on the machine, so the one trained to the end is found, not assumed
    full = [a for a in (1e-4, 3e-4, 1e-3) if its[a] == 9]
    assert full, its
    assert all(its[a] < 9 for a in (3.0, 10.0, 30.0)), its  # bad ones stopped at a rung
    assert sum(its.values()) < 6 * 9
    # every increment was reported (one training_iteration per partial_fit epoch), and the scores moved
    best = next(r for r in search.result_grid_ if r.config["alpha"] == full[0])
    hist = best.metrics_dataframe
    assert hist["training_iteration"].tolist() == list(range(1, 10))
    assert hist["sklearn_iterations"].tolist() == list(range(1, 10))
    assert hist["mean_test_score"].nunique() > 1
    # cv_results_ still has every candidate (a stopped one with its scores when it stopped), scikit-learn's keys
    assert len(search.cv_results_["params"]) == 6 and search.best_params_["alpha"] in (1e-4, 3e-4, 1e-3)
    assert "split2_test_score" in search.cv_results_ and "training_iteration" not in search.cv_results_
    events = read_journal(str(tmp_path / "results" / "es" / "journal.jsonl"))
    reported = [e for e in events if e.get("event") == "result"]
    assert len(reported) == sum(its.values())  # every increment of every trial is in the journal


def test_warm_start_ensemble_grows_n_estimators_in_increments(kw):
    grid = {"max_depth": [None, 12, 1, 2]}
    search = TuneGridSearchCV(RandomForestClassifier(n_estimators=12, random_state=0), grid, cv=3,
                              early_stopping="ASHA", max_iters=4, **kw).fit(X, Y)
    its = _iterations(search)
    assert its[None] == 4 and its[12] == 4 and its[1] < 4 and its[2] < 4, its
    full = next(r for r in search.result_grid_ if r.config["max_depth"] is None)
    fit_times = full.metrics_dataframe["mean_fit_time"].tolist()
    assert fit_times == sorted(fit_times)  # cumulative: each increment adds trees to the same forest
    assert search.best_estimator_.n_estimators == 12  # the refit trains the full ensemble


def test_max_iter_warm_start_partial_fit_nb_scheduler_instance_and_no_early_stopping(kw):
    lr = TuneGridSearchCV(LogisticRegression(max_iter=40), {"C": [1.0, 0.1]}, cv=3, early_stopping=FIFOScheduler(),
                          max_iters=4, **kw).fit(X, Y)
    assert all(r.metrics["training_iteration"] == 4 for r in lr.result_grid_)
    nb = TuneGridSearchCV(GaussianNB(), {"var_smoothing": [1e-9, 1e-2]}, cv=3,
                          early_stopping=ASHAScheduler(max_t=3, grace_period=1), max_iters=3, **kw).fit(X, Y)
    assert max(r.metrics["training_iteration"] for r in nb.result_grid_) == 3
    plain = TuneSearchCV(SGDClassifier(max_iter=5, tol=None), {"alpha": [1e-4, 1e-2]}, n_trials=2, cv=3,
                         random_state=0, **kw).fit(X, Y)
    assert [r.metrics["training_iteration"] for r in plain.result_grid_] == [1, 1]  # one report per trial
    assert np.isfinite(plain.best_score_)


def test_early_stopping_folds_on_dask_with_n_jobs(kw):
    search = TuneSearchCV(SGDClassifier(random_state=0), {"alpha": [1e-4, 10.0, 30.0, 100.0]}, n_trials=4, cv=3,
                          early_stopping=True, max_iters=3, n_jobs=-1, random_state=0, **kw).fit(X, Y)
    assert search.best_params_ == {"alpha": 1e-4}
    assert len(search.cv_results_["params"]) == 4
