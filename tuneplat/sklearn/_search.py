"""``TuneSearchCV`` and ``TuneGridSearchCV``: scikit-learn searches whose candidates are tuneplat trials."""

from __future__ import annotations

import copy
import numbers
from typing import Any

import numpy as np
from sklearn.model_selection import ParameterGrid, ParameterSampler
from sklearn.utils import check_random_state

from ..search._searcher import Searcher
from . import _space
from ._base import TuneSearchBase

__all__ = ["TuneGridSearchCV", "TuneSearchCV"]


_COMMON_DOC = """
    Args:
        estimator: a scikit-learn estimator (or Pipeline); cloned, never fitted in place.
        scoring: None (the estimator's ``score``), a scorer name, a callable, or a list/tuple/dict of
            them (multi-metric; then ``refit`` names the one that picks the best candidate).
        n_jobs: the folds of one candidate: None/1 run them in the trial's process, anything else runs
            them as joblib tasks on the Dask cluster (joblib's Dask backend). Candidates run as
            tuneplat trials, as many at once as the cluster has worker slots (``max_concurrent_trials``).
        refit: True, a scorer name (multi-metric), a callable ``cv_results_ -> index``, or False.
        cv: None (5-fold), an int, a CV splitter, or an iterable of (train, test) splits.
        verbose: 0 silent; 1 the "Fitting ..." line and the trial table; 2+ also fold lines (on the workers).
        pre_dispatch: passed to joblib.Parallel for the folds.
        error_score: "raise" (re-raise the first fit's exception) or a number for a failed fit's scores
            (with a FitFailedWarning, as scikit-learn).
        return_train_score: add the ``*_train_*`` keys to ``cv_results_``.
        early_stopping: None; True or "ASHA" (ASHA over ``max_iters`` increments); or a tuneplat
            scheduler. Needs ``partial_fit`` (one call per increment) or ``warm_start`` with
            ``n_estimators`` (grown to the candidate's value) or ``max_iter`` (split into increments).
        max_iters: increments per candidate with early stopping.
        client: a ``distributed.Client`` to run on (default: the active client, else an embedded
            LocalCluster, shut down after ``fit``). Not pickled with the search.
        storage_path, name: where the experiment folder (journal, trial folders) goes
            (``RunConfig``'s; default ``./tuneplat_results`` and a generated name).
        mlflow: ``RunConfig.mlflow``: None (default MLflow store), an ``MLflowConfig``, or False.
        max_concurrent_trials, time_budget_s: ``TuneConfig``'s.
"""


class TuneGridSearchCV(TuneSearchBase):
    """Exhaustive search over a parameter grid, each candidate a tuneplat trial (``GridSearchCV``'s drop-in).

    Candidates come from scikit-learn's ``ParameterGrid``, in its order; ``cv_results_``,
    ``best_*``, refit and delegation behave as ``GridSearchCV``'s. The trials land in the
    experiment's journal, ``result_grid_`` (a :class:`tuneplat.ResultGrid`) and MLflow (one child
    run per candidate with its parameters and CV scores).
    """ + _COMMON_DOC + """
        param_grid: dict (or list of dicts) of parameter name -> list of values (ranges, arrays,
            estimators and "passthrough" too).

    Example:
        >>> from sklearn.datasets import load_iris
        >>> from sklearn.svm import SVC
        >>> from tuneplat.sklearn import TuneGridSearchCV
        >>> X, y = load_iris(return_X_y=True)
        >>> search = TuneGridSearchCV(SVC(), {"C": [0.1, 1, 10]}, cv=3)
        >>> search.fit(X, y).best_params_  # doctest: +SKIP
        {'C': 1}
    """

    def __init__(self, estimator: Any, param_grid: Any, *, scoring: Any = None, n_jobs: int | None = None,
                 refit: Any = True, cv: Any = None, verbose: int = 0, pre_dispatch: Any = "2*n_jobs",
                 error_score: Any = np.nan, return_train_score: bool = False, early_stopping: Any = None,
                 max_iters: int = 10, client: Any = None, storage_path: str | None = None, name: str | None = None,
                 mlflow: Any = None, max_concurrent_trials: int | None = None,
                 time_budget_s: float | None = None) -> None:
        self.estimator = estimator
        self.param_grid = param_grid
        self.scoring = scoring
        self.n_jobs = n_jobs
        self.refit = refit
        self.cv = cv
        self.verbose = verbose
        self.pre_dispatch = pre_dispatch
        self.error_score = error_score
        self.return_train_score = return_train_score
        self.early_stopping = early_stopping
        self.max_iters = max_iters
        self.client = client
        self.storage_path = storage_path
        self.name = name
        self.mlflow = mlflow
        self.max_concurrent_trials = max_concurrent_trials
        self.time_budget_s = time_budget_s

    def _candidate_list(self) -> list[dict[str, Any]]:
        _space.check_param_names(self.estimator, self.param_grid, "param_grid")
        return list(ParameterGrid(_space.to_grid(self.param_grid, "param_grid")))


class TuneSearchCV(TuneSearchBase):
    """Search over parameter distributions, each candidate a tuneplat trial (``RandomizedSearchCV``'s drop-in).

    ``search_optimization="random"`` draws ``n_trials`` candidates with scikit-learn's
    ``ParameterSampler`` (the same candidates as ``RandomizedSearchCV`` with the same
    ``random_state``); ``"optuna"`` lets Optuna's TPE choose them as results arrive; a
    :class:`tuneplat.search.Searcher` instance is used as given.
    """ + _COMMON_DOC + """
        param_distributions: dict (or list of dicts, random search only) of parameter name -> a list,
            a scipy.stats distribution, or a tuneplat domain (``tune.uniform(1e-4, 1e-1)``).
        n_trials: how many candidates; ``n_iter`` is its scikit-learn alias.
        search_optimization: "random", "optuna", or a Searcher instance.
        random_state: seeds the random draws (or Optuna's sampler).

    Example:
        >>> from scipy.stats import loguniform
        >>> from sklearn.linear_model import SGDClassifier
        >>> from tuneplat.sklearn import TuneSearchCV
        >>> search = TuneSearchCV(SGDClassifier(), {"alpha": loguniform(1e-5, 1e-1)}, n_trials=8,
        ...                       early_stopping=True, max_iters=10, random_state=0)
        >>> search.fit(X, y)  # doctest: +SKIP
    """

    def __init__(self, estimator: Any, param_distributions: Any, *, n_trials: int = 10, n_iter: int | None = None,
                 scoring: Any = None, n_jobs: int | None = None, refit: Any = True, cv: Any = None, verbose: int = 0,
                 pre_dispatch: Any = "2*n_jobs", random_state: Any = None, error_score: Any = np.nan,
                 return_train_score: bool = False, early_stopping: Any = None, max_iters: int = 10,
                 search_optimization: Any = "random", client: Any = None, storage_path: str | None = None,
                 name: str | None = None, mlflow: Any = None, max_concurrent_trials: int | None = None,
                 time_budget_s: float | None = None) -> None:
        self.estimator = estimator
        self.param_distributions = param_distributions
        self.n_trials = n_trials
        self.n_iter = n_iter
        self.scoring = scoring
        self.n_jobs = n_jobs
        self.refit = refit
        self.cv = cv
        self.verbose = verbose
        self.pre_dispatch = pre_dispatch
        self.random_state = random_state
        self.error_score = error_score
        self.return_train_score = return_train_score
        self.early_stopping = early_stopping
        self.max_iters = max_iters
        self.search_optimization = search_optimization
        self.client = client
        self.storage_path = storage_path
        self.name = name
        self.mlflow = mlflow
        self.max_concurrent_trials = max_concurrent_trials
        self.time_budget_s = time_budget_s

    def _n(self) -> int:
        n = self.n_iter if self.n_iter is not None else self.n_trials
        if self.n_iter is not None and self.n_trials not in (10, self.n_iter):
            raise ValueError(f"n_iter={self.n_iter!r} and n_trials={self.n_trials!r} disagree; n_iter is "
                             "scikit-learn's name for n_trials: give one of them.")
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
            raise ValueError(f"The value of `n_trials` (or `n_iter`) is {n!r}, but must be an int >= 1.")
        return int(n)

    def _how(self) -> Any:
        how = self.search_optimization
        if isinstance(how, Searcher):
            return how
        if isinstance(how, str) and how.lower() in ("random", "optuna"):
            return how.lower()
        raise ValueError(f"search_optimization={how!r}: use 'random', 'optuna', or a tuneplat.search.Searcher "
                         "instance (e.g. tuneplat.search.optuna.OptunaSearch(sampler=...)).")

    def _candidate_list(self) -> list[dict[str, Any]] | None:
        _space.check_param_names(self.estimator, self.param_distributions, "param_distributions")
        n = self._n()
        if self._how() != "random":
            return None
        space = _space.as_sampler_space(self.param_distributions, "param_distributions")
        return list(ParameterSampler(space, n, random_state=self.random_state))

    def _searcher_space(self) -> tuple[Searcher, dict[str, Any], dict[str, list[Any]], int]:
        how = self._how()
        space, decode = _space.to_domains(self.param_distributions, "param_distributions")
        if how == "optuna":
            from ..search.optuna import OptunaSearch

            rs = self.random_state
            seed = int(rs) if isinstance(rs, numbers.Integral) else (
                int(check_random_state(rs).randint(0, 2**31 - 1)) if rs is not None else None)
            searcher: Searcher = OptunaSearch(seed=seed)
        else:
            searcher = copy.deepcopy(how)  # the search may be cloned and fitted again: never reuse a used searcher
        return searcher, space, decode, self._n()
