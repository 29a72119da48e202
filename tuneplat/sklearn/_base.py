"""What ``TuneSearchCV`` and ``TuneGridSearchCV`` share: the scikit-learn meta-estimator protocol, the checks
of their arguments, and ``fit``: candidates as tuneplat trials, ``cv_results_``, refit."""

from __future__ import annotations

import copy
import datetime
import difflib
import logging
import numbers
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone, is_classifier
from sklearn.exceptions import NotFittedError
from sklearn.metrics import check_scoring, get_scorer_names
from sklearn.model_selection import check_cv
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted, indexable

from ..search._searcher import Searcher
from . import _results, _space
from ._pool import cluster_for
from ._sk import (
    _check_method_params,
    _check_multimetric_scoring,
    _insert_error_scores,
    _MultimetricScorer,
    _warn_or_raise_about_fit_failures,
)
from ._trial import CANDIDATE_KEY, EXCEPTION_KEY, DataRef, FitData, Plan, forget_local_data, run_candidate
from ._tuning import Candidates, StopOnRaise, accepts_sample_weight, check_finished, unpickle_exception

__all__ = ["TuneSearchBase"]

logger = logging.getLogger("tuneplat")


def _estimator_has(attr: str) -> Callable[[Any], bool]:
    """Delegate ``attr`` to the best estimator when refit, else check the unfitted estimator (as scikit-learn)."""

    def check(self: Any) -> bool:
        if not self.refit:
            raise AttributeError(f"This {type(self).__name__} instance was initialized with `refit=False`. {attr} is "
                                 "available only after refitting on the best parameters. You can refit an estimator "
                                 "manually using the `best_params_` attribute")
        getattr(self.best_estimator_ if hasattr(self, "best_estimator_") else self.estimator, attr)
        return True

    return check


def _scoring_hint(scoring: Any) -> None:
    """A scoring name scikit-learn does not know: say which names are close."""
    names = [scoring] if isinstance(scoring, str) else (list(scoring) if isinstance(scoring, (list, tuple)) else [])
    known = get_scorer_names()
    for name in names:
        if isinstance(name, str) and name not in known:
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ValueError(f"scoring={scoring!r}: {name!r} is not a scoring name scikit-learn knows.{hint} "
                             "See sklearn.metrics.get_scorer_names() for all of them, or pass a callable "
                             "scorer(estimator, X, y).")


class TuneSearchBase(MetaEstimatorMixin, BaseEstimator):
    """What both searches share: scoring, folds on the cluster, trials, ``cv_results_`` and refit."""

    # -------------------------------------------------------------- scikit-learn protocol
    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import get_tags

        tags = super().__sklearn_tags__()
        inner = get_tags(self.estimator)
        tags.estimator_type = inner.estimator_type
        tags.classifier_tags = copy.deepcopy(inner.classifier_tags)
        tags.regressor_tags = copy.deepcopy(inner.regressor_tags)
        tags.input_tags.pairwise = inner.input_tags.pairwise
        tags.input_tags.sparse = inner.input_tags.sparse
        return tags

    def __sklearn_clone__(self) -> TuneSearchBase:
        """``sklearn.base.clone``: every parameter cloned as scikit-learn does, except ``client`` (shared, not copied)."""
        params = self.get_params(deep=False)
        client = params.pop("client", None)
        return type(self)(**{k: clone(v, safe=False) for k, v in params.items()}, client=client)

    def __deepcopy__(self, memo: dict[int, Any]) -> TuneSearchBase:
        """A deep copy that shares ``client`` (a Dask client cannot be copied)."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            setattr(new, k, v if k == "client" else copy.deepcopy(v, memo))
        return new

    def __getstate__(self) -> dict[str, Any]:
        """A fitted search pickles without a Dask client: it loads and predicts anywhere."""
        state = dict(super().__getstate__())
        state["client"] = None
        return state

    @property
    def _estimator_type(self) -> str | None:
        return getattr(self.estimator, "_estimator_type", None)

    # -------------------------------------------------------------- delegation to best_estimator_
    @available_if(_estimator_has("predict"))
    def predict(self, X: Any) -> Any:
        """``best_estimator_.predict(X)``."""
        check_is_fitted(self)
        return self.best_estimator_.predict(X)

    @available_if(_estimator_has("predict_proba"))
    def predict_proba(self, X: Any) -> Any:
        """``best_estimator_.predict_proba(X)``."""
        check_is_fitted(self)
        return self.best_estimator_.predict_proba(X)

    @available_if(_estimator_has("predict_log_proba"))
    def predict_log_proba(self, X: Any) -> Any:
        """``best_estimator_.predict_log_proba(X)``."""
        check_is_fitted(self)
        return self.best_estimator_.predict_log_proba(X)

    @available_if(_estimator_has("decision_function"))
    def decision_function(self, X: Any) -> Any:
        """``best_estimator_.decision_function(X)``."""
        check_is_fitted(self)
        return self.best_estimator_.decision_function(X)

    @available_if(_estimator_has("score_samples"))
    def score_samples(self, X: Any) -> Any:
        """``best_estimator_.score_samples(X)``."""
        check_is_fitted(self)
        return self.best_estimator_.score_samples(X)

    @available_if(_estimator_has("transform"))
    def transform(self, X: Any) -> Any:
        """``best_estimator_.transform(X)``."""
        check_is_fitted(self)
        return self.best_estimator_.transform(X)

    @available_if(_estimator_has("inverse_transform"))
    def inverse_transform(self, X: Any) -> Any:
        """``best_estimator_.inverse_transform(X)``."""
        check_is_fitted(self)
        return self.best_estimator_.inverse_transform(X)

    def score(self, X: Any, y: Any = None) -> float:
        """The refit metric's scorer on ``best_estimator_`` (``best_estimator_.score`` when scoring is None)."""
        if not self.refit:
            raise AttributeError(f"This {type(self).__name__} instance was initialized with `refit=False`. score is "
                                 "available only after refitting on the best parameters.")
        check_is_fitted(self)
        if self.scorer_ is None:
            raise ValueError(f"No score function explicitly defined, and the estimator doesn't provide one "
                             f"{self.best_estimator_}")
        if isinstance(self.scorer_, dict):
            scorer: Any = self.scorer_[self.refit] if self.multimetric_ else self.scorer_
            return scorer(self.best_estimator_, X, y)  # type: ignore[no-any-return]
        value = self.scorer_(self.best_estimator_, X, y)
        return value[self.refit] if self.multimetric_ else value  # type: ignore[no-any-return]

    @property
    def n_features_in_(self) -> int:
        """Number of features seen during ``fit`` (only when ``refit`` is set)."""
        try:
            check_is_fitted(self)
        except NotFittedError as exc:
            raise AttributeError(f"{type(self).__name__} object has no n_features_in_ attribute.") from exc
        return self.best_estimator_.n_features_in_  # type: ignore[no-any-return]

    @property
    def classes_(self) -> Any:
        """Class labels (only when ``refit`` is set and the estimator is a classifier)."""
        _estimator_has("classes_")(self)
        return self.best_estimator_.classes_

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "cv_results_")

    # -------------------------------------------------------------- what subclasses provide
    def _candidate_list(self) -> list[dict[str, Any]] | None:
        raise NotImplementedError

    def _searcher_space(self) -> tuple[Searcher, dict[str, Any], dict[str, list[Any]], int]:
        raise NotImplementedError

    # -------------------------------------------------------------- checks
    def _get_scorers(self) -> tuple[Any, str]:
        refit_metric = "score"
        if callable(self.scoring):
            return self.scoring, refit_metric
        _scoring_hint(self.scoring if not isinstance(self.scoring, dict) else list(self.scoring.values()))
        if self.scoring is None or isinstance(self.scoring, str):
            return check_scoring(self.estimator, self.scoring), refit_metric
        scorers = _check_multimetric_scoring(self.estimator, self.scoring)
        self._check_refit_for_multimetric(scorers)
        return _MultimetricScorer(scorers=scorers, raise_exc=(self.error_score == "raise")), self.refit

    def _check_refit_for_multimetric(self, scores: Mapping[str, Any]) -> None:
        if self.refit is not False and not (isinstance(self.refit, str) and self.refit in scores) \
                and not callable(self.refit):
            raise ValueError(
                "For multi-metric scoring, the parameter refit must be set to a scorer key or a callable to refit an "
                "estimator with the best parameter setting on the whole data and make the best_* attributes "
                f"available for that metric. If this is not needed, refit should be set to False explicitly. "
                f"{self.refit!r} was passed. The scorer keys are {sorted(scores)}.")

    def _check_params(self) -> None:
        if not hasattr(self.estimator, "fit"):
            raise TypeError(f"estimator must be a scikit-learn estimator (with fit), got {self.estimator!r}")
        es = self.error_score
        if not (es == "raise" or (isinstance(es, numbers.Number) and not isinstance(es, bool))):
            raise ValueError(f"The value of `error_score` is {es!r}, but must be 'raise' or a number (np.nan by "
                             "default).")
        if not isinstance(self.max_iters, numbers.Integral) or isinstance(self.max_iters, bool) or self.max_iters < 1:
            raise ValueError(f"The value of `max_iters` is {self.max_iters!r}, but must be an int >= 1.")

    def _early_mode(self) -> str | None:
        es = self.early_stopping
        if es is None or es is False:
            return None
        est = self.estimator
        if hasattr(est, "partial_fit"):
            return "partial_fit"
        params = est.get_params(deep=False)
        if "warm_start" in params and "n_estimators" in params:
            return "n_estimators"
        if "warm_start" in params and "max_iter" in params:
            return "max_iter"
        raise ValueError(
            f"early_stopping={es!r} trains each candidate in increments, which needs an estimator with partial_fit "
            "(SGDClassifier, MLPClassifier, naive Bayes, ...) or a warm_start parameter with n_estimators "
            f"(ensembles) or max_iter (linear models); {type(est).__name__} has neither. Use early_stopping=None, "
            "or an estimator that supports incremental training.")

    def _scheduler(self, mode: str | None) -> Any:
        if mode is None:
            return None
        es = self.early_stopping
        from .. import schedulers

        if es is True or (isinstance(es, str) and es.upper() == "ASHA"):
            if self.max_iters < 2:
                raise ValueError(f"early_stopping={es!r} with max_iters={self.max_iters}: there is nothing to stop "
                                 "early with one increment; set max_iters to 2 or more (e.g. 10).")
            return schedulers.ASHAScheduler(time_attr="training_iteration", max_t=self.max_iters, grace_period=1,
                                            reduction_factor=3)
        if isinstance(es, str):
            raise ValueError(f"early_stopping={es!r} is not a scheduler tuneplat knows by name: use True or 'ASHA', "
                             "or pass a scheduler instance (tuneplat.schedulers.HyperBandScheduler(...), ...).")
        if not hasattr(es, "on_result") and not hasattr(es, "on_trial_result"):
            raise TypeError(f"early_stopping must be None, True, 'ASHA' or a tuneplat scheduler, got {es!r}")
        return es

    # -------------------------------------------------------------- fit
    def fit(self, X: Any, y: Any = None, *, groups: Any = None, **fit_params: Any) -> TuneSearchBase:
        """Run every candidate as a tuneplat trial, cross-validated; then refit the best on all of ``X``.

        Args:
            X: training data, indexable, ``n_samples`` long.
            y: targets (None for unsupervised estimators).
            groups: group labels for group-aware CV splitters.
            **fit_params: passed to the estimator's ``fit``; arrays of length
                ``n_samples`` (``sample_weight``) are sliced per fold.

        Returns:
            self, fitted.
        """
        from .. import RunConfig, TuneConfig, Tuner, with_parameters
        from .._mainguard import check_main_guard

        self._check_params()
        scorers, refit_metric = self._get_scorers()
        mode = self._early_mode()
        scheduler = self._scheduler(mode)
        X, y = indexable(X, y)
        fit_params = _check_method_params(X, params=fit_params)
        if groups is None:
            groups = fit_params.pop("groups", None)
        cv = check_cv(self.cv, y, classifier=is_classifier(self.estimator))
        n_splits = cv.get_n_splits(X, y, groups)
        splits = list(cv.split(X, y, groups))
        if len(splits) != n_splits:
            raise ValueError(f"cv.split and cv.get_n_splits return inconsistent results. Expected {n_splits} "
                             f"splits, got {len(splits)}")
        self.n_splits_ = n_splits
        score_params = {}
        if fit_params.get("sample_weight") is not None and accepts_sample_weight(scorers):
            score_params["sample_weight"] = fit_params["sample_weight"]

        candidates = self._candidate_list()
        decode: dict[str, list[Any]] = {}
        if candidates is not None:
            if not candidates:
                raise ValueError("No fits were performed: the parameter grid has no candidates.")
            searcher: Searcher = Candidates([_space.display(c) for c in candidates])
            space: dict[str, Any] = {}
            num_samples = len(candidates)
            if self.verbose > 0:
                print(f"Fitting {n_splits} folds for each of {len(candidates)} candidates, totalling "
                      f"{n_splits * len(candidates)} fits")
        else:
            searcher, space, decode, num_samples = self._searcher_space()
        metric_key = f"mean_test_{refit_metric if isinstance(refit_metric, str) else 'score'}"
        if isinstance(self.scoring, (list, tuple, dict)) and not isinstance(self.refit, str):
            metric_key = f"mean_test_{next(iter(self.scoring if isinstance(self.scoring, dict) else self.scoring))}"
        plan = Plan(
            estimator=clone(self.estimator), scorer=scorers, n_splits=n_splits, n_jobs=self.n_jobs,
            pre_dispatch=self.pre_dispatch, verbose=self.verbose, error_score=self.error_score,
            return_train_score=bool(self.return_train_score), metric_key=metric_key,
            refit_name=self.refit if isinstance(self.refit, str) else None, candidates=candidates, decode=decode,
            early=mode, max_iters=int(self.max_iters) if mode else 1,
            n_candidates=len(candidates) if candidates is not None else None,
        )
        classes = np.unique(y) if (mode == "partial_fit" and y is not None and is_classifier(self.estimator)) else None
        data = FitData(X, y, fit_params, score_params, splits, classes)

        check_main_guard(self.client, None, caller=f"{type(self).__name__}.fit()")  # a spawned child re-running it
        raise_stopper = StopOnRaise() if self.error_score == "raise" else None
        with cluster_for(self.client) as cluster:
            client = cluster.client
            future = client.scatter(data, hash=False)  # once per fit: trials and fold tasks share it
            dataset = f"tuneplat-sklearn-{uuid.uuid4().hex}"
            client.publish_dataset(future, name=dataset)
            try:
                trainable = with_parameters(run_candidate, plan=plan, data=DataRef(dataset))
                name = self.name or (f"{type(self).__name__}_{type(self.estimator).__name__}_"
                                     f"{datetime.datetime.now():%Y-%m-%d_%H-%M-%S-%f}")
                tuner = Tuner(
                    trainable, param_space=space, client=client,
                    tune_config=TuneConfig(metric=metric_key, mode="max", search_alg=searcher, scheduler=scheduler,
                                           num_samples=num_samples, max_concurrent_trials=self.max_concurrent_trials,
                                           time_budget_s=self.time_budget_s),
                    run_config=RunConfig(name=name, storage_path=self.storage_path, mlflow=self.mlflow,
                                         verbose=min(int(self.verbose), 2), stop=raise_stopper),
                )
                grid = tuner.fit()
            finally:
                try:  # leave nothing of this fit on the cluster (the user's, or the kept embedded one)
                    client.unpublish_dataset(dataset)
                    client.run(forget_local_data)
                    future.release()
                except Exception:  # noqa: BLE001 - a cluster that went away meanwhile has nothing left to free
                    logger.debug("tuneplat: could not free the search's data on the cluster", exc_info=True)
        self.result_grid_ = grid
        self._collect(grid, plan, candidates, n_splits, refit_metric, scorers)
        self._refit(X, y, fit_params)
        self.scorer_ = scorers._scorers if isinstance(scorers, _MultimetricScorer) else scorers
        return self

    def _collect(self, grid: Any, plan: Plan, candidates: list[dict[str, Any]] | None, n_splits: int,
                 refit_metric: Any, scorers: Any) -> None:
        results = list(grid)
        check_finished(grid, results, len(candidates) if candidates is not None else None, self.time_budget_s)
        for r in results:  # error_score="raise": the first exception, as scikit-learn raises it
            blob = (r.metrics or {}).get(EXCEPTION_KEY)
            if blob is not None:
                raise unpickle_exception(blob, r.metrics.get("sklearn_traceback"))
        if self.error_score == "raise":
            for r in results:
                if r.error is not None:
                    raise r.error
        rtrain = bool(self.return_train_score)
        names = list(scorers._scorers) if isinstance(scorers, _MultimetricScorer) else None
        if candidates is not None:
            by_index = {int(r.config[CANDIDATE_KEY]): r for r in results if CANDIDATE_KEY in (r.config or {})}
            pairs = [(c, by_index.get(i)) for i, c in enumerate(candidates)]
        else:
            pairs = [(plan.params_for(r.config), r) for r in results]
        params_list, outs = [], []
        for params, r in pairs:
            params_list.append(params)
            report = r.metrics if r is not None else None
            if r is None or r.error is not None or not report or "split0_fit_time" not in report:
                why = ("the trial never ran (time budget or an interrupted search)" if r is None else
                       f"trial {r.trial_id} ended without scores: {r.error or 'no result reported'}")
                outs.extend(_results.failed_outputs(why, n_splits, self.error_score, names, rtrain))
            else:
                outs.extend(_results.fold_outputs(report, n_splits, rtrain))
        if not outs:
            raise ValueError("No fits were performed. Was the CV iterator empty? Were there no candidates?")
        _warn_or_raise_about_fit_failures(outs, self.error_score)
        if callable(self.scoring):
            _insert_error_scores(outs, self.error_score)
        cv_results = _results.format_cv_results(params_list, n_splits, outs, rtrain)
        first = next((o["test_scores"] for o in outs if o["fit_error"] is None), outs[0]["test_scores"])
        self.multimetric_ = isinstance(first, dict)
        if callable(self.scoring) and self.multimetric_:
            self._check_refit_for_multimetric(first)
            refit_metric = self.refit
        if self.refit or not self.multimetric_:
            if callable(self.refit):
                best = self.refit(cv_results)
                if not isinstance(best, numbers.Integral):
                    raise TypeError("best_index_ returned is not an integer")
                if int(best) < 0 or int(best) >= len(cv_results["params"]):
                    raise IndexError("best_index_ index out of range")
            else:
                best = cv_results[f"rank_test_{refit_metric}"].argmin()
                self.best_score_ = cv_results[f"mean_test_{refit_metric}"][best]
            self.best_index_ = best
            self.best_params_ = cv_results["params"][best]
        self.cv_results_ = cv_results

    def _refit(self, X: Any, y: Any, fit_params: dict[str, Any]) -> None:
        if not self.refit:
            return
        self.best_estimator_ = clone(self.estimator).set_params(**clone(self.best_params_, safe=False))
        start = time.time()
        if y is not None:
            self.best_estimator_.fit(X, y, **fit_params)
        else:
            self.best_estimator_.fit(X, **fit_params)
        self.refit_time_ = time.time() - start
        if hasattr(self.best_estimator_, "feature_names_in_"):
            self.feature_names_in_ = self.best_estimator_.feature_names_in_
