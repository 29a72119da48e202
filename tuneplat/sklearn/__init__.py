"""scikit-learn searches on tuneplat: ``TuneSearchCV`` and ``TuneGridSearchCV``.

Drop-in replacements for ``RandomizedSearchCV`` and ``GridSearchCV`` whose
candidates run as tuneplat trials on a Dask cluster (the embedded
LocalCluster by default), with the folds of each candidate as joblib tasks on
the same cluster, optional early stopping (ASHA over ``partial_fit`` or
``warm_start`` increments), and every trial in the journal, the result grid
and MLflow.

Example:
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.svm import SVC
    >>> from tuneplat.sklearn import TuneGridSearchCV
    >>> X, y = load_iris(return_X_y=True)
    >>> search = TuneGridSearchCV(SVC(), {"C": [0.1, 1, 10]}, cv=3).fit(X, y)  # doctest: +SKIP
"""

from __future__ import annotations

from ._search import TuneGridSearchCV, TuneSearchCV

__all__ = ["TuneGridSearchCV", "TuneSearchCV"]
