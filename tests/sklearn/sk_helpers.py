"""Estimators for the tuneplat.sklearn tests (importable by the Dask workers: this folder is on their sys.path)."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.linear_model import LogisticRegression


class FailingClassifier(ClassifierMixin, BaseEstimator):
    """LogisticRegression that raises ``BrokenFit`` in fit when ``fail`` is true."""

    def __init__(self, C=1.0, fail=False):
        self.C = C
        self.fail = fail

    def fit(self, X, y):
        if self.fail:
            raise BrokenFit(f"cannot fit with C={self.C}")
        self.model_ = LogisticRegression(C=self.C, max_iter=500).fit(X, y)
        self.classes_ = self.model_.classes_
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X):
        return self.model_.predict(X)


class BrokenFit(ValueError):
    """A user's own exception class (it must reach the caller as itself with error_score='raise')."""


class WeightRecorder(ClassifierMixin, BaseEstimator):
    """Predicts the majority class; remembers the sample_weight it was fitted with (to check slicing per fold)."""

    def __init__(self, shift=0):
        self.shift = shift

    def fit(self, X, y, sample_weight=None):
        if sample_weight is None or len(sample_weight) != len(X):
            raise ValueError(f"sample_weight not sliced to the fold: {None if sample_weight is None else len(sample_weight)} vs {len(X)}")
        if not np.allclose(sample_weight, X[:, 0] + 1):  # the test passes weights = X[:, 0] + 1
            raise ValueError("sample_weight rows do not match X rows")
        self.classes_ = np.unique(y)
        self.majority_ = np.bincount(y).argmax()
        return self

    def predict(self, X):
        return np.full(len(X), self.majority_)
