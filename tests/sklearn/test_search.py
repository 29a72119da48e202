"""TuneGridSearchCV / TuneSearchCV against scikit-learn's own GridSearchCV / RandomizedSearchCV.

Every search runs its trials on the session's real 2-worker Dask LocalCluster; the scikit-learn search
runs the same grid on the same CV splits in this process. What scikit-learn code relies on must match:
cv_results_ keys (and their order), dtypes, masks, candidate order, key order inside params, the
scores (to float tolerance), best_* and the refit estimator's predictions.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import sk_helpers as H
from numpy.ma import MaskedArray
from scipy.stats import loguniform, randint, uniform
from sklearn.datasets import load_iris, make_classification
from sklearn.decomposition import PCA
from sklearn.exceptions import FitFailedWarning
from sklearn.linear_model import LogisticRegression, SGDClassifier
from sklearn.model_selection import GridSearchCV, GroupKFold, KFold, RandomizedSearchCV, StratifiedKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MinMaxScaler, StandardScaler
from sklearn.svm import SVC

import tuneplat as tune
from tuneplat.sklearn import TuneGridSearchCV, TuneSearchCV

IRIS = load_iris(return_X_y=True)
X_CLS, Y_CLS = make_classification(n_samples=120, n_features=6, n_informative=4, random_state=0)


@pytest.fixture
def kw(dask_client, tmp_path):
    """What every search here gets: the session's cluster, a temporary storage path, no MLflow."""
    return {"client": dask_client, "storage_path": str(tmp_path / "results"), "mlflow": False}


def assert_same_results(ours: dict, theirs: dict) -> None:
    assert list(ours) == list(theirs)  # same keys, same order
    for key, b in theirs.items():
        a = ours[key]
        if key == "params":
            assert [list(p) for p in a] == [list(p) for p in b]  # candidate order and key order
            assert [{k: repr(v) for k, v in p.items()} for p in a] == [{k: repr(v) for k, v in p.items()} for p in b]
        elif key.startswith("param_"):
            assert isinstance(a, MaskedArray) and isinstance(b, MaskedArray), key
            assert a.dtype == b.dtype and a.shape == b.shape, (key, a.dtype, b.dtype)
            assert np.array_equal(np.ma.getmaskarray(a), np.ma.getmaskarray(b)), key
            assert [repr(v) for v in a.compressed()] == [repr(v) for v in b.compressed()], key
        else:
            assert isinstance(a, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, (key, a, b)
            if "time" not in key:
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=key)


def test_grid_matches_gridsearchcv_keys_dtypes_masks_order_scores_and_refit(kw):
    X, y = IRIS
    grid = [{"kernel": ["rbf"], "gamma": [0.1, 1.0], "C": [1, 10]}, {"kernel": ["linear"], "C": range(1, 3)}]
    cv = KFold(3, shuffle=True, random_state=0)
    ours = TuneGridSearchCV(SVC(), grid, cv=cv, return_train_score=True, **kw).fit(X, y)
    theirs = GridSearchCV(SVC(), grid, cv=cv, return_train_score=True).fit(X, y)
    assert_same_results(ours.cv_results_, theirs.cv_results_)
    assert np.ma.getmaskarray(ours.cv_results_["param_gamma"]).tolist() == [False] * 4 + [True] * 2
    assert ours.best_params_ == theirs.best_params_ and list(ours.best_params_) == list(theirs.best_params_)
    assert ours.best_index_ == theirs.best_index_
    assert ours.best_score_ == pytest.approx(theirs.best_score_)
    np.testing.assert_array_equal(ours.predict(X), theirs.predict(X))
    np.testing.assert_allclose(ours.decision_function(X), theirs.decision_function(X))
    assert ours.score(X, y) == pytest.approx(theirs.score(X, y))
    assert list(ours.classes_) == [0, 1, 2] and ours.n_features_in_ == 4 and ours.n_splits_ == 3
    assert ours.multimetric_ is False and ours.refit_time_ > 0
    assert type(ours.scorer_) is type(theirs.scorer_)
    # the trials are tuneplat trials: one per candidate in the result grid, with the CV scores as metrics
    assert len(ours.result_grid_) == 6 and ours.result_grid_.num_errors == 0
    scores = sorted(r.metrics["mean_test_score"] for r in ours.result_grid_)
    np.testing.assert_allclose(scores, sorted(theirs.cv_results_["mean_test_score"]))


def test_random_search_draws_randomizedsearchcv_candidates_and_scores(kw):
    space = {"C": loguniform(1e-3, 1e2), "fit_intercept": [True, False], "max_iter": randint(50, 200)}
    cv = StratifiedKFold(4, shuffle=True, random_state=1)
    ours = TuneSearchCV(LogisticRegression(), space, n_iter=5, cv=cv, random_state=3, **kw).fit(X_CLS, Y_CLS)
    theirs = RandomizedSearchCV(LogisticRegression(), space, n_iter=5, cv=cv, random_state=3).fit(X_CLS, Y_CLS)
    assert_same_results(ours.cv_results_, theirs.cv_results_)
    assert ours.best_params_ == theirs.best_params_
    np.testing.assert_allclose(ours.predict_proba(X_CLS), theirs.predict_proba(X_CLS))
    np.testing.assert_allclose(ours.predict_log_proba(X_CLS), theirs.predict_log_proba(X_CLS))


def test_tuneplat_domains_reproducible_with_random_state(kw):
    space = {"C": tune.loguniform(1e-2, 10), "penalty": tune.choice(["l2", None]), "tol": uniform(1e-4, 1e-3)}
    a = TuneSearchCV(LogisticRegression(max_iter=300), space, n_trials=4, cv=3, random_state=7, **kw)
    b = TuneSearchCV(LogisticRegression(max_iter=300), space, n_trials=4, cv=3, random_state=7, **kw)
    pa = a.fit(X_CLS, Y_CLS).cv_results_["params"]
    assert pa == b.fit(X_CLS, Y_CLS).cv_results_["params"]
    assert all(1e-2 <= p["C"] < 10 and p["penalty"] in ("l2", None) for p in pa)
    assert list(pa[0]) == ["C", "penalty", "tol"]  # ParameterSampler's (sorted) key order


def test_pipeline_grid_with_estimators_passthrough_and_range_values_never_fitted_in_place(kw):
    scaler, minmax = StandardScaler(), MinMaxScaler()
    grid = {"scale": [scaler, minmax, "passthrough"], "clf__C": range(1, 3)}
    pipe = Pipeline([("scale", StandardScaler()), ("clf", LogisticRegression(max_iter=500))])
    ours = TuneGridSearchCV(pipe, grid, cv=3, **kw).fit(X_CLS, Y_CLS)
    theirs = GridSearchCV(pipe, grid, cv=3).fit(X_CLS, Y_CLS)
    assert_same_results(ours.cv_results_, theirs.cv_results_)
    assert ours.cv_results_["param_scale"].dtype == object
    assert not hasattr(scaler, "mean_") and not hasattr(minmax, "data_min_")  # cloned, never fitted in place
    assert ours.best_estimator_.named_steps["scale"] is not ours.best_params_["scale"]
    np.testing.assert_array_equal(ours.predict(X_CLS), theirs.predict(X_CLS))


def test_multimetric_refit_by_name_callable_and_false(kw):
    X, y = IRIS
    grid = {"C": [0.1, 1.0, 10.0]}
    scoring = {"acc": "accuracy", "f1": "f1_macro"}
    cv = KFold(3, shuffle=True, random_state=0)
    ours = TuneGridSearchCV(LogisticRegression(max_iter=500), grid, scoring=scoring, refit="f1", cv=cv,
                            return_train_score=True, **kw).fit(X, y)
    theirs = GridSearchCV(LogisticRegression(max_iter=500), grid, scoring=scoring, refit="f1", cv=cv,
                          return_train_score=True).fit(X, y)
    assert_same_results(ours.cv_results_, theirs.cv_results_)
    assert ours.multimetric_ and ours.best_params_ == theirs.best_params_
    assert ours.best_score_ == pytest.approx(theirs.best_score_)
    assert ours.score(X, y) == pytest.approx(theirs.score(X, y))
    assert set(ours.scorer_) == {"acc", "f1"}

    def worst(results):
        return int(np.argmin(results["mean_test_acc"]))

    cal = TuneGridSearchCV(LogisticRegression(max_iter=500), grid, scoring=scoring, refit=worst, cv=cv, **kw)
    cal.fit(X, y)
    assert cal.best_index_ == worst(cal.cv_results_) and not hasattr(cal, "best_score_")
    assert cal.best_estimator_.C == cal.best_params_["C"]

    off = TuneGridSearchCV(LogisticRegression(max_iter=500), grid, scoring=scoring, refit=False, cv=cv, **kw)
    off.fit(X, y)
    assert not hasattr(off, "best_estimator_") and not hasattr(off, "best_index_")
    assert not hasattr(off, "predict")
    with pytest.raises(AttributeError, match="has no attribute 'predict'") as got:
        off.predict(X)
    assert "refit=False" in str(got.value.__cause__)


def test_numeric_error_score_warns_like_scikit_learn(kw):
    grid = {"fail": [False, True], "C": [0.5, 2.0]}
    with pytest.warns(FitFailedWarning, match="6 fits failed out of a total of 12") as got:
        ours = TuneGridSearchCV(H.FailingClassifier(), grid, cv=3, error_score=-1.0, **kw).fit(X_CLS, Y_CLS)
    assert any("BrokenFit: cannot fit" in str(w.message) for w in got)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitFailedWarning)
        theirs = GridSearchCV(H.FailingClassifier(), grid, cv=3, error_score=-1.0).fit(X_CLS, Y_CLS)
    assert_same_results(ours.cv_results_, theirs.cv_results_)
    failed = ours.cv_results_["param_fail"].astype(bool)
    assert failed.tolist() == [False, True, False, True]  # ParameterGrid's order: C, then fail
    assert (ours.cv_results_["mean_test_score"][failed] == -1.0).all()
    with pytest.warns(FitFailedWarning), pytest.warns(UserWarning, match="non-finite"):
        nan = TuneGridSearchCV(H.FailingClassifier(), grid, cv=3, **kw).fit(X_CLS, Y_CLS)
    assert np.isnan(nan.cv_results_["mean_test_score"][failed]).all()
    assert nan.cv_results_["rank_test_score"][failed].tolist() == [3, 3]


def test_error_score_raise_reraises_the_original_exception(kw):
    search = TuneGridSearchCV(H.FailingClassifier(), {"fail": [False, True]}, cv=3, error_score="raise", **kw)
    with pytest.raises(H.BrokenFit, match="cannot fit with C=1.0"):
        search.fit(X_CLS, Y_CLS)
    with pytest.raises(ValueError, match="All the 6 fits failed"):
        TuneGridSearchCV(H.FailingClassifier(fail=True), {"C": [1.0, 2.0]}, cv=3, **kw).fit(X_CLS, Y_CLS)


def test_fit_params_sliced_per_fold_groups_and_any_cv_splitter(kw):
    X = np.column_stack([np.arange(60) % 7, np.arange(60)]).astype(float)
    y = (np.arange(60) % 2).astype(int)
    weights = X[:, 0] + 1
    groups = np.arange(60) // 10
    grid = {"shift": [0, 1]}
    ours = TuneGridSearchCV(H.WeightRecorder(), grid, cv=GroupKFold(3), error_score="raise", **kw)
    ours.fit(X, y, groups=groups, sample_weight=weights)
    theirs = GridSearchCV(H.WeightRecorder(), grid, cv=GroupKFold(3), error_score="raise")
    theirs.fit(X, y, groups=groups, sample_weight=weights)
    assert_same_results(ours.cv_results_, theirs.cv_results_)
    # an iterable of (train, test) index pairs is a CV splitter too
    splits = [(np.arange(0, 40), np.arange(40, 60)), (np.arange(20, 60), np.arange(0, 20))]
    it = TuneGridSearchCV(LogisticRegression(), {"C": [1.0, 3.0]}, cv=splits, **kw).fit(X_CLS[:60], Y_CLS[:60])
    ref = GridSearchCV(LogisticRegression(), {"C": [1.0, 3.0]}, cv=splits).fit(X_CLS[:60], Y_CLS[:60])
    assert it.n_splits_ == 2
    assert_same_results(it.cv_results_, ref.cv_results_)


def test_transform_inverse_transform_and_unsupervised_score(kw):
    X, _ = IRIS
    ours = TuneGridSearchCV(PCA(), {"n_components": [1, 2, 3]}, cv=3, **kw).fit(X)
    theirs = GridSearchCV(PCA(), {"n_components": [1, 2, 3]}, cv=3).fit(X)
    assert ours.best_params_ == theirs.best_params_
    np.testing.assert_allclose(ours.transform(X), theirs.transform(X))
    np.testing.assert_allclose(ours.inverse_transform(ours.transform(X)), theirs.inverse_transform(theirs.transform(X)))


def test_optuna_and_searcher_instances_fill_the_same_keys(kw):
    space = {"alpha": loguniform(1e-5, 1e-1), "penalty": ["l2", "l1"], "loss": [SGDClassifier().loss, "log_loss"]}
    ours = TuneSearchCV(SGDClassifier(max_iter=20, tol=None), space, n_trials=5, cv=3, random_state=0,
                        search_optimization="optuna", **kw).fit(X_CLS, Y_CLS)
    ref = RandomizedSearchCV(SGDClassifier(max_iter=20, tol=None), space, n_iter=5, cv=3, random_state=0)
    ref.fit(X_CLS, Y_CLS)
    assert list(ours.cv_results_) == list(ref.cv_results_) and len(ours.cv_results_["params"]) == 5
    assert ours.best_score_ == pytest.approx(np.max(ours.cv_results_["mean_test_score"]))
    from tuneplat.search import BasicVariantGenerator

    est = SVC()
    objects = {"C": [1.0, 2.0], "class_weight": [None, {0: 1, 1: 2}]}  # a dict value: index-coded for a searcher
    inst = TuneSearchCV(est, objects, n_trials=3, cv=3, search_optimization=BasicVariantGenerator(random_state=0),
                        **kw).fit(X_CLS, Y_CLS)
    assert len(inst.cv_results_["params"]) == 3
    assert all(p["class_weight"] in (None, {0: 1, 1: 2}) for p in inst.cv_results_["params"])


def test_clear_errors_before_anything_runs(kw):
    with pytest.raises(ValueError, match=r"Invalid parameter 'alpah'.*Did you mean 'alpha'"):
        TuneSearchCV(SGDClassifier(), {"alpah": [0.1]}, **kw).fit(X_CLS, Y_CLS)
    with pytest.raises(ValueError, match=r"'accuracyy' is not a scoring name.*Did you mean 'accuracy'"):
        TuneGridSearchCV(SVC(), {"C": [1]}, scoring="accuracyy", **kw).fit(X_CLS, Y_CLS)
    with pytest.raises(ValueError, match="early_stopping=True.*SVC has neither"):
        TuneGridSearchCV(SVC(), {"C": [1]}, early_stopping=True, **kw).fit(X_CLS, Y_CLS)
    with pytest.raises(ValueError, match="n_iter=3 and n_trials=5 disagree"):
        TuneSearchCV(SVC(), {"C": [1]}, n_iter=3, n_trials=5, **kw).fit(X_CLS, Y_CLS)
    with pytest.raises(ValueError, match="search_optimization='bayes'"):
        TuneSearchCV(SVC(), {"C": [1]}, search_optimization="bayes", **kw).fit(X_CLS, Y_CLS)
    with pytest.raises(ValueError, match="For multi-metric scoring, the parameter refit"):
        TuneGridSearchCV(SVC(), {"C": [1]}, scoring=["accuracy", "f1"], **kw).fit(X_CLS, Y_CLS)


def test_scikit_learn_estimator_checks_for_meta_estimators(kw, dask_client):
    from sklearn.base import clone, is_classifier
    from sklearn.utils import estimator_checks as ec

    # check_set_params deep-copies get_params(), which a Dask client cannot survive: these checks run the
    # search on the active client (Dask's convention; what a search without client= uses)
    search = TuneGridSearchCV(LogisticRegression(), {"C": [1.0, 2.0]}, cv=2, storage_path=kw["storage_path"],
                              mlflow=False)
    with dask_client.as_current():
        for check in (ec.check_no_attributes_set_in_init, ec.check_get_params_invariance, ec.check_set_params,
                      ec.check_estimator_repr, ec.check_dont_overwrite_parameters, ec.check_fit_check_is_fitted,
                      ec.check_estimators_overwrite_params, ec.check_fit2d_1sample):
            check(type(search).__name__, search)
    given = TuneGridSearchCV(LogisticRegression(), {"C": [1.0, 2.0]}, **kw)
    copy = clone(given)  # clone shares the client (it cannot be copied) and clones everything else
    assert copy.client is given.client and copy.estimator is not given.estimator
    assert is_classifier(given)
