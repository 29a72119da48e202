"""tuneplat.sklearn vs scikit-learn's own searches: same grids, same CV splits, same machine, same run.

Workloads:
  (grid)  SVC on digits, a 4x4 grid, 5 folds: GridSearchCV(n_jobs=2) vs TuneGridSearchCV, alternated (the
          embedded cluster kept between fits); also the first fit (it starts the cluster), folds as joblib
          tasks (n_jobs=2) and MLflow on. Same best_params_ and scores are checked.
  (random) RandomizedSearchCV(n_jobs=2) vs TuneSearchCV, same distributions and random_state (same candidates).
  (early) SGDClassifier on 100k generated rows: TuneSearchCV with ASHA early stopping vs the same search
          training every candidate for max_iters partial_fit epochs (FIFO), vs RandomizedSearchCV(n_jobs=2)
          fitting SGDClassifier(max_iter=max_iters): wall time, partial_fit epochs and best CV score.

Usage:
  python benchmarks/sklearn.py            # prints one JSON object
  python benchmarks/sklearn.py --quick    # smaller workloads (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
# this file is named sklearn.py: its folder must not shadow scikit-learn (here, or in the spawned Dask workers)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
sys.path.insert(0, os.path.dirname(HERE))


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def grid_workload(storage: str, quick: bool) -> dict:
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.svm import SVC

    from tuneplat.execution._cluster import Cluster
    from tuneplat.sklearn import TuneGridSearchCV

    X, y = load_digits(return_X_y=True)
    if quick:
        X, y = X[:600], y[:600]
    grid = {"C": [0.1, 1.0, 10.0, 100.0], "gamma": [1e-4, 1e-3, 1e-2, 1e-1]}
    cv = StratifiedKFold(5, shuffle=True, random_state=0)
    common = {"cv": cv, "storage_path": storage, "mlflow": False}
    # the first fit of a process starts the embedded cluster (kept for the next fits, as loky keeps its workers)
    first, first_s = _timed(lambda: TuneGridSearchCV(SVC(), grid, **common).fit(X, y))
    pairs = []  # then alternate, so that a change in the machine's load hits both sides alike
    for _ in range(2 if quick else 3):
        sk, sk_s = _timed(lambda: GridSearchCV(SVC(), grid, cv=cv, n_jobs=2).fit(X, y))
        tp, tp_s = _timed(lambda: TuneGridSearchCV(SVC(), grid, **common).fit(X, y))
        pairs.append((sk_s, tp_s))
    folds, folds_s = _timed(lambda: TuneGridSearchCV(SVC(), grid, n_jobs=2, **common).fit(X, y))
    ml, ml_s = _timed(lambda: TuneGridSearchCV(SVC(), grid, cv=cv, storage_path=storage).fit(X, y))
    cluster, start_s = _timed(Cluster)
    cluster.close()
    ratios = sorted(t / k for k, t in pairs)
    same = all(s.best_params_ == sk.best_params_ for s in (first, tp, folds, ml))
    close = all(np.allclose(s.cv_results_["mean_test_score"], sk.cv_results_["mean_test_score"])
                for s in (first, tp, folds, ml))
    return {
        "candidates": 16, "folds": 5, "rows": len(X),
        "sklearn_GridSearchCV_n_jobs2_s": [round(k, 2) for k, _ in pairs],
        "tuneplat_TuneGridSearchCV_s": [round(t, 2) for _, t in pairs],
        "ratio_tuneplat_vs_sklearn_median": round(ratios[len(ratios) // 2], 2),
        "tuneplat_first_fit_with_cluster_start_s": round(first_s, 2),
        "embedded_cluster_start_s": round(start_s, 2),
        "tuneplat_folds_n_jobs2_s": round(folds_s, 2),
        "tuneplat_mlflow_on_s": round(ml_s, 2),
        "same_best_params": same, "same_mean_test_scores": close,
    }


def random_workload(storage: str, quick: bool) -> dict:
    from scipy.stats import loguniform
    from sklearn.datasets import load_digits
    from sklearn.model_selection import RandomizedSearchCV, StratifiedKFold
    from sklearn.svm import SVC

    from tuneplat.sklearn import TuneSearchCV

    X, y = load_digits(return_X_y=True)
    if quick:
        X, y = X[:600], y[:600]
    space = {"C": loguniform(1e-2, 1e3), "gamma": loguniform(1e-5, 1e-1)}
    cv = StratifiedKFold(5, shuffle=True, random_state=0)
    n = 8 if quick else 20
    sk, sk_s = _timed(lambda: RandomizedSearchCV(SVC(), space, n_iter=n, cv=cv, n_jobs=2, random_state=0).fit(X, y))
    tp, tp_s = _timed(lambda: TuneSearchCV(SVC(), space, n_trials=n, cv=cv, random_state=0, storage_path=storage,
                                           mlflow=False).fit(X, y))
    return {"candidates": n, "sklearn_RandomizedSearchCV_n_jobs2_s": round(sk_s, 2),
            "tuneplat_TuneSearchCV_s": round(tp_s, 2), "ratio": round(tp_s / sk_s, 2),
            "same_best_params": tp.best_params_ == sk.best_params_}


def early_workload(storage: str, quick: bool) -> dict:
    from scipy.stats import loguniform
    from sklearn.datasets import make_classification
    from sklearn.linear_model import SGDClassifier
    from sklearn.model_selection import RandomizedSearchCV
    from sklearn.preprocessing import StandardScaler

    from tuneplat.schedulers import FIFOScheduler
    from tuneplat.sklearn import TuneSearchCV

    rows = 20_000 if quick else 100_000
    X, y = make_classification(n_samples=rows, n_features=40, n_informative=20, n_classes=4, n_clusters_per_class=2,
                               flip_y=0.05, random_state=0)
    X = StandardScaler().fit_transform(X)
    space = {"alpha": loguniform(1e-7, 1e0), "penalty": ["l2", "l1", "elasticnet"], "loss": ["hinge", "log_loss",
                                                                                          "modified_huber"]}
    n, iters = (8, 9) if quick else (16, 9)
    common: dict[str, Any] = {"n_trials": n, "cv": 3, "random_state": 0, "max_iters": iters, "storage_path": storage,
              "mlflow": False}
    est = SGDClassifier(random_state=0)
    es, es_s = _timed(lambda: TuneSearchCV(est, space, early_stopping=True, **common).fit(X, y))
    full, full_s = _timed(lambda: TuneSearchCV(est, space, early_stopping=FIFOScheduler(), **common).fit(X, y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk, sk_s = _timed(lambda: RandomizedSearchCV(SGDClassifier(random_state=0, max_iter=iters, tol=None), space,
                                                     n_iter=n, cv=3, n_jobs=2, random_state=0).fit(X, y))
    epochs_es = sum(r.metrics["training_iteration"] for r in es.result_grid_)
    epochs_full = sum(r.metrics["training_iteration"] for r in full.result_grid_)
    return {
        "rows": rows, "candidates": n, "max_iters": iters, "folds": 3,
        "asha_s": round(es_s, 2), "full_training_s": round(full_s, 2),
        "sklearn_RandomizedSearchCV_n_jobs2_s": round(sk_s, 2),
        "asha_partial_fit_epochs": epochs_es, "full_partial_fit_epochs": epochs_full,
        "epochs_fraction": round(epochs_es / epochs_full, 3),
        "asha_best_cv_score": round(float(es.best_score_), 4), "full_best_cv_score": round(float(full.best_score_), 4),
        "sklearn_best_cv_score": round(float(sk.best_score_), 4),
        "asha_within_1pct_of_full": bool(es.best_score_ >= 0.99 * full.best_score_),
        "speedup_asha_vs_full": round(full_s / es_s, 2), "speedup_asha_vs_sklearn": round(sk_s / es_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["grid", "random", "early"])
    args = parser.parse_args()
    import sklearn

    out: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "sklearn": sklearn.__version__}, "quick": args.quick}
    with tempfile.TemporaryDirectory() as storage:
        for name, fn in (("grid", grid_workload), ("random", random_workload), ("early", early_workload)):
            if args.only in (None, name):
                out[name] = fn(storage, args.quick)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
