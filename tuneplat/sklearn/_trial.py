"""What runs inside one trial: one candidate's cross-validation, on a Dask worker.

A trial is one candidate configuration. Its folds are scored by scikit-learn's
own ``_fit_and_score`` (or, with early stopping, trained in increments here),
in the trial's process when ``n_jobs`` is 1/None, else as joblib tasks on the
same Dask cluster (joblib's Dask backend, which secedes the trial's thread
while it waits, so two trials on two single-threaded workers never deadlock).

The data travels once per ``fit``: the search scatters one :class:`FitData`
and hands the trials its future. Fold tasks get that future as an argument,
so Dask resolves it where the fold runs (copying it between workers at most
once per worker); a trial that scores its folds itself fetches it once per
worker process (:func:`local_data`).
"""

from __future__ import annotations

import math
import numbers
import pickle
import time
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["DataRef", "FitData", "Plan", "forget_local_data", "local_data", "run_candidate"]

#: the result key that carries an exception raised with ``error_score="raise"`` (pickled)
EXCEPTION_KEY = "sklearn_exception"


@dataclass
class FitData:
    """Everything the folds need that is the same for every candidate (scattered once per ``fit``)."""

    X: Any
    y: Any
    fit_params: dict[str, Any]
    score_params: dict[str, Any]
    splits: list[tuple[np.ndarray, np.ndarray]]
    classes: Any = None  # np.unique(y) for partial_fit(classes=...)


@dataclass
class Plan:
    """How a trial turns its config into a candidate and scores it (pickled once per ``fit``)."""

    estimator: Any
    scorer: Any
    n_splits: int
    n_jobs: int | None
    pre_dispatch: Any
    verbose: int
    error_score: Any
    return_train_score: bool
    metric_key: str  # what the tuner optimises: e.g. "mean_test_score"
    refit_name: str | None  # the scorer whose mean is the metric (multi-metric), else None
    candidates: list[dict[str, Any]] | None = None  # grid/random: config {"candidate_index": i}
    decode: dict[str, list[Any]] = field(default_factory=dict)  # searcher: index-coded categorical values
    early: str | None = None  # "partial_fit" | "n_estimators" | "max_iter"
    max_iters: int = 1
    n_candidates: int | None = None

    def params_for(self, config: Mapping[str, Any]) -> dict[str, Any]:
        if self.candidates is not None:
            return dict(self.candidates[int(config[CANDIDATE_KEY])])
        out = {}
        for k in sorted(config):  # keys sorted, as scikit-learn's ParameterSampler gives them
            values = self.decode.get(k)
            out[k] = values[int(config[k])] if values is not None else config[k]
        return out


#: the config key of a grid or pre-sampled random search: the candidate's index
CANDIDATE_KEY = "candidate_index"

_LOCAL: dict[str, Any] = {}


@dataclass(frozen=True)
class DataRef:
    """The name under which the fit's scattered :class:`FitData` is published on the cluster (a name pickles anywhere)."""

    key: str

    def future(self) -> Any:
        """A future for the data, held by this worker's client (so fold tasks can take it as an argument)."""
        from distributed import get_client

        return get_client().get_dataset(self.key)


def local_data(data: Any) -> FitData:
    """The fit's data in this process: fetched from the cluster once per worker process and fit."""
    if isinstance(data, FitData):
        return data
    key = data.key
    got = _LOCAL.get(key)
    if got is None:
        got = (data.future() if isinstance(data, DataRef) else data).result()
        _LOCAL.clear()
        _LOCAL[key] = got
    return got  # type: ignore[no-any-return]


def forget_local_data() -> None:
    """Drop the cached data (run on every worker when a ``fit`` ends)."""
    _LOCAL.clear()


# ------------------------------------------------------------------ one fold, whole (no early stopping)
def fold_task(estimator: Any, data: Any, k: int, params: dict[str, Any], plan: Plan,
              candidate: int | None) -> dict[str, Any]:
    """Score candidate ``params`` on fold ``k`` with scikit-learn's ``_fit_and_score``."""
    from sklearn.base import clone

    from ._sk import _fit_and_score

    d = local_data(data)
    train, test = d.splits[k]
    out = _fit_and_score(
        clone(estimator), d.X, d.y, scorer=plan.scorer, train=train, test=test, verbose=plan.verbose,
        parameters=params, fit_params=d.fit_params, score_params=d.score_params,
        return_train_score=plan.return_train_score, return_n_test_samples=True, return_times=True,
        error_score=plan.error_score, split_progress=(k, plan.n_splits),
        candidate_progress=(candidate, plan.n_candidates) if candidate is not None and plan.n_candidates else None,
    )
    out["worker"] = _where()
    return out  # type: ignore[no-any-return]


def _where() -> str:
    """The Dask worker (or process) that ran a fold: reported so that tests and users can see where folds ran."""
    import os

    try:
        from distributed import get_worker

        return str(get_worker().address)
    except ValueError:
        return f"pid:{os.getpid()}"


# ------------------------------------------------------------------ one fold, one increment (early stopping)
def _accepts(method: Callable[..., Any], name: str) -> bool:
    import inspect

    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def step_task(state: dict[str, Any] | None, data: Any, k: int, params: dict[str, Any], plan: Plan,
              step: int) -> dict[str, Any]:
    """Train fold ``k``'s estimator one increment further (``step`` of ``plan.max_iters``) and score it.

    ``state`` is what the previous increment returned (None at the first):
    the fold's estimator, its cumulative fit time and, after a failure, the
    error (a failed fold stays failed, its scores ``error_score``).
    """
    from sklearn.base import clone

    from ._sk import _check_method_params, _num_samples, _safe_split, _score

    d = local_data(data)
    train, test = d.splits[k]
    if state is None:
        est = clone(plan.estimator)
        state = {"estimator": None, "fit_time": 0.0, "fit_error": None, "target": None}
        try:
            est.set_params(**clone(params, safe=False))
            if plan.early in ("n_estimators", "max_iter"):
                state["target"] = int(est.get_params()[plan.early])
                est.set_params(warm_start=True)
        except Exception:
            if plan.error_score == "raise":
                raise
            state["fit_error"] = traceback.format_exc()
        state["estimator"] = est
    if state["fit_error"] is not None:
        return _failed(state, d, test, plan)
    est = state["estimator"]
    fit_params = _check_method_params(d.X, params=d.fit_params, indices=train)
    X_train, y_train = _safe_split(est, d.X, d.y, train)
    X_test, y_test = _safe_split(est, d.X, d.y, test, train)
    start = time.time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=_convergence_warning())  # increments stop early on purpose
            if plan.early == "partial_fit":
                extra = dict(fit_params)
                if d.classes is not None and _accepts(est.partial_fit, "classes"):
                    extra["classes"] = d.classes
                if y_train is None:
                    est.partial_fit(X_train, **extra)
                else:
                    est.partial_fit(X_train, y_train, **extra)
            else:
                target = state["target"]
                if plan.early == "n_estimators":
                    est.set_params(n_estimators=max(1, math.ceil(step * target / plan.max_iters)))
                else:
                    est.set_params(max_iter=max(1, math.ceil(target / plan.max_iters)))
                if y_train is None:
                    est.fit(X_train, **fit_params)
                else:
                    est.fit(X_train, y_train, **fit_params)
    except Exception:
        state["fit_time"] += time.time() - start
        if plan.error_score == "raise":
            raise
        state["fit_error"] = traceback.format_exc()
        return _failed(state, d, test, plan)
    state["fit_time"] += time.time() - start
    start = time.time()
    score_test = _check_method_params(d.X, params=d.score_params, indices=test)
    state["test_scores"] = _score(est, X_test, y_test, plan.scorer, score_test, plan.error_score)
    state["score_time"] = time.time() - start
    if plan.return_train_score:
        score_train = _check_method_params(d.X, params=d.score_params, indices=train)
        state["train_scores"] = _score(est, X_train, y_train, plan.scorer, score_train, plan.error_score)
    state["n_test_samples"] = _num_samples(X_test)
    state["worker"] = _where()
    return state


def _convergence_warning() -> type[Warning]:
    from sklearn.exceptions import ConvergenceWarning

    return ConvergenceWarning


def _failed(state: dict[str, Any], d: FitData, test: Any, plan: Plan) -> dict[str, Any]:
    from ._sk import _MultimetricScorer, _num_samples

    scores: Any = plan.error_score
    if isinstance(plan.scorer, _MultimetricScorer):
        scores = {name: plan.error_score for name in plan.scorer._scorers}
    state["estimator"] = None
    state["test_scores"] = scores
    if plan.return_train_score:
        state["train_scores"] = scores if not isinstance(scores, dict) else dict(scores)
    state["score_time"] = 0.0
    state["n_test_samples"] = _num_samples(test)
    state["worker"] = _where()
    return state


# ------------------------------------------------------------------ running the folds of a trial
def _run_folds(fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], plan: Plan) -> list[Any]:
    """``[fn(*a) for a in args]``: here when ``n_jobs`` is 1/None, else as joblib tasks on the Dask cluster."""
    if plan.n_jobs in (None, 1):
        return [fn(*a) for a in args]
    import joblib

    with joblib.parallel_config(backend="dask"):
        return list(joblib.Parallel(n_jobs=plan.n_jobs, pre_dispatch=plan.pre_dispatch)(
            joblib.delayed(fn)(*a) for a in args))


def summarize(outs: list[dict[str, Any]], plan: Plan, step: int | None = None) -> dict[str, Any]:
    """One trial's report: per-split scores and times as flat numbers (MLflow logs them), plus their means."""
    report: dict[str, Any] = {}
    first_ok = next((o["test_scores"] for o in outs if o.get("fit_error") is None), outs[0]["test_scores"])
    names = list(first_ok) if isinstance(first_ok, dict) else None
    report["multimetric"] = names is not None
    report["scorer_names"] = names if names is not None else ["score"]
    for which in ("test", "train"):
        key = f"{which}_scores"
        if key not in outs[0]:
            continue
        for name in report["scorer_names"]:
            vals = []
            for k, o in enumerate(outs):
                s = o[key]
                v = s.get(name, plan.error_score) if isinstance(s, dict) else s
                v = float(v) if isinstance(v, numbers.Real) else float("nan")
                report[f"split{k}_{which}_{name}"] = v
                vals.append(v)
            arr = np.asarray(vals, dtype=np.float64)
            report[f"mean_{which}_{name}"] = float(arr.mean())
            report[f"std_{which}_{name}"] = float(arr.std())
    for what in ("fit_time", "score_time"):
        vals = [float(o.get(what, 0.0)) for o in outs]
        for k, v in enumerate(vals):
            report[f"split{k}_{what}"] = v
        report[f"mean_{what}"] = float(np.mean(vals))
    for k, o in enumerate(outs):
        report[f"split{k}_n_test_samples"] = int(o.get("n_test_samples", 0))
    errors = [o.get("fit_error") for o in outs]
    if any(e is not None for e in errors):
        report["fit_errors"] = errors
    report["fold_workers"] = [o.get("worker") for o in outs]
    if plan.metric_key not in report:  # a callable scorer that returned a dict: optimise its first metric
        first = report["scorer_names"][0]
        report[plan.metric_key] = report.get(f"mean_test_{first}", float("nan"))
    if step is not None:
        report["sklearn_iterations"] = step
    return report


def _raise_report(exc: BaseException, plan: Plan) -> dict[str, Any]:
    """The result that carries an ``error_score="raise"`` exception back to the search."""
    try:
        blob = pickle.dumps(exc)
    except Exception:  # noqa: BLE001 - an exception that cannot be pickled: send its text
        blob = pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    return {plan.metric_key: float("nan"), EXCEPTION_KEY: blob,
            "sklearn_traceback": traceback.format_exc(), "done": True}


def run_candidate(config: dict[str, Any], plan: Plan | None = None, data: Any = None) -> None:
    """The trainable: cross-validate one candidate and report its scores (after every increment with early stopping)."""
    from ..train import report

    assert plan is not None and data is not None
    params = plan.params_for(config)
    if plan.n_jobs not in (None, 1) and isinstance(data, DataRef):
        data = data.future()  # fold tasks take the future: Dask resolves it where each fold runs
    candidate = int(config[CANDIDATE_KEY]) if CANDIDATE_KEY in config else None
    ks = range(plan.n_splits)
    try:
        if plan.early is None:
            outs = _run_folds(fold_task, [(plan.estimator, data, k, params, plan, candidate) for k in ks], plan)
            report(summarize(outs, plan))
            return
        states: list[Any] = [None] * plan.n_splits
        for step in range(1, plan.max_iters + 1):
            states = _run_folds(step_task, [(states[k], data, k, params, plan, step) for k in ks], plan)
            if all(s["fit_error"] is not None for s in states):
                report(summarize(states, plan, step) | {"done": True})
                return
            report(summarize(states, plan, step))
    except Exception as exc:
        if plan.error_score != "raise":
            raise
        report(_raise_report(exc, plan))
