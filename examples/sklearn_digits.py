"""Tune an SGD classifier on scikit-learn's digits with early stopping, the scikit-learn way.

Written like scikit-learn's own examples: no ``if __name__ == "__main__":``
guard. ``TuneSearchCV`` is a drop-in ``RandomizedSearchCV``: each candidate is
a tuneplat trial on the embedded Dask cluster, trained one ``partial_fit``
epoch at a time, and ASHA stops the candidates that fall behind. Then the
usual scikit-learn attributes, plus the tuneplat result grid.

Run:
    python examples/sklearn_digits.py            # results in ./tuneplat_results/sklearn-digits
"""

import pandas as pd
from scipy.stats import loguniform
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import train_test_split

from tuneplat.sklearn import TuneSearchCV

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.25, random_state=0)

search = TuneSearchCV(
    SGDClassifier(random_state=0),
    {"alpha": loguniform(1e-6, 1e0), "penalty": ["l2", "l1", "elasticnet"], "loss": ["hinge", "log_loss"]},
    n_trials=12,
    cv=3,
    early_stopping=True,  # ASHA over partial_fit epochs
    max_iters=9,
    random_state=0,
    name="sklearn-digits",
    mlflow=False,  # MLflow is on by default (a sqlite store next to the results); off to keep the example quick
)
search.fit(X_train, y_train)

print("best params:", search.best_params_)
print(f"best CV accuracy: {search.best_score_:.3f}   test accuracy: {search.score(X_test, y_test):.3f}")
df = pd.DataFrame(search.cv_results_)
print(df[["param_alpha", "param_penalty", "param_loss", "mean_test_score", "rank_test_score"]]
      .sort_values("rank_test_score").head().to_string(index=False))
epochs = sum(r.metrics["training_iteration"] for r in search.result_grid_)
print(f"partial_fit epochs per fold: {epochs} of {12 * 9} without early stopping")
