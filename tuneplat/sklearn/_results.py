"""``cv_results_`` in scikit-learn's exact layout, from the trials' reports."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.ma import MaskedArray
from scipy.stats import rankdata

from ._sk import _aggregate_score_dicts, _normalize_score_results

__all__ = ["fold_outputs", "format_cv_results", "param_columns"]


def fold_outputs(report: Mapping[str, Any], n_splits: int, return_train_score: bool) -> list[dict[str, Any]]:
    """A trial's flat report back in the shape of ``_fit_and_score``'s output, one dict per fold."""
    names = list(report.get("scorer_names") or ["score"])
    multi = bool(report.get("multimetric"))
    errors = report.get("fit_errors") or [None] * n_splits
    outs = []
    for k in range(n_splits):
        out: dict[str, Any] = {"fit_error": errors[k]}
        for which in ("test", "train") if return_train_score else ("test",):
            scores = {n: report[f"split{k}_{which}_{n}"] for n in names}
            out[f"{which}_scores"] = scores if multi else scores[names[0]]
        out["n_test_samples"] = report.get(f"split{k}_n_test_samples", 0)
        out["fit_time"] = report.get(f"split{k}_fit_time", 0.0)
        out["score_time"] = report.get(f"split{k}_score_time", 0.0)
        outs.append(out)
    return outs


def failed_outputs(message: str, n_splits: int, error_score: float, scorer_names: Sequence[str] | None,
                   return_train_score: bool) -> list[dict[str, Any]]:
    """Folds of a candidate whose trial never produced scores (it errored outside the folds, or never ran)."""
    outs = []
    for _ in range(n_splits):
        scores: Any = {n: error_score for n in scorer_names} if scorer_names else error_score
        out = {"fit_error": message, "test_scores": scores, "n_test_samples": 0, "fit_time": 0.0, "score_time": 0.0}
        if return_train_score:
            out["train_scores"] = dict(scores) if isinstance(scores, dict) else scores
        outs.append(out)
    return outs


def param_columns(candidate_params: Sequence[Mapping[str, Any]]) -> dict[str, MaskedArray]:
    """``param_<name>``: one masked array per parameter, masked where a candidate does not have it.

    The dtype is what numpy infers from the values, except strings and values
    numpy would stack into more than one dimension, which are kept as objects
    (as scikit-learn does, so ``cv_results_`` of the two compare equal).
    """
    n = len(candidate_params)
    by_name: dict[str, dict[int, Any]] = {}
    for i, params in enumerate(candidate_params):
        for name, value in params.items():
            by_name.setdefault(f"param_{name}", {})[i] = value
    columns = {}
    for key, values in by_name.items():
        try:
            arr = np.array(list(values.values()))
        except ValueError:  # ragged sequences
            dtype = np.dtype(object)
        else:
            dtype = arr.dtype if arr.dtype.kind != "U" and arr.ndim == 1 else np.dtype(object)
        column = MaskedArray(np.empty(n, dtype=dtype), mask=True)
        for i, value in values.items():
            column[i] = value
        columns[key] = column
    return columns


def format_cv_results(candidate_params: list[dict[str, Any]], n_splits: int, outs: list[dict[str, Any]],
                      return_train_score: bool) -> dict[str, Any]:
    """``cv_results_`` from ``outs`` (candidate-major, split-minor), keys in scikit-learn's order."""
    n = len(candidate_params)
    agg = _aggregate_score_dicts(outs)
    results: dict[str, Any] = {}

    def store(name: str, values: Any, splits: bool = False, rank: bool = False) -> None:
        table = np.array(values, dtype=np.float64).reshape(n, n_splits)
        if splits:
            for k in range(n_splits):
                results[f"split{k}_{name}"] = table[:, k]
        means = np.average(table, axis=1)
        results[f"mean_{name}"] = means
        if name.startswith(("train_", "test_")) and np.any(~np.isfinite(means)):
            warnings.warn(f"One or more of the {name.split('_')[0]} scores are non-finite: {means}",
                          category=UserWarning, stacklevel=3)
        results[f"std_{name}"] = np.sqrt(np.average((table - means[:, np.newaxis]) ** 2, axis=1))
        if rank:
            if np.isnan(means).all():
                ranks = np.ones_like(means, dtype=np.int32)
            else:  # failed candidates (NaN) tie with the worst
                filled = np.where(np.isnan(means), np.nanmin(means) - 1, means)
                ranks = rankdata(-filled, method="min").astype(np.int32, copy=False)
            results[f"rank_{name}"] = ranks

    store("fit_time", agg["fit_time"])
    store("score_time", agg["score_time"])
    results.update(param_columns(candidate_params))
    results["params"] = candidate_params
    test = _normalize_score_results(agg["test_scores"])
    train = _normalize_score_results(agg["train_scores"]) if return_train_score else {}
    for name in test:
        store(f"test_{name}", test[name], splits=True, rank=True)
        if return_train_score:
            store(f"train_{name}", train[name], splits=True)
    return results
