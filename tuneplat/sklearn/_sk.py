"""The scikit-learn internals this package leans on, imported in one place.

scikit-learn's own searches score a fold with ``_fit_and_score`` and report
failed fits with ``_warn_or_raise_about_fit_failures``; using the same
functions is what makes a fold scored here equal, to the bit, to the same fold
scored by ``GridSearchCV`` (fit/score timing, ``error_score`` handling,
multi-metric scorers, the warnings and their text). They are private names in
scikit-learn, so a scikit-learn release that moves them breaks only this module.
"""

from __future__ import annotations

from sklearn.metrics._scorer import _check_multimetric_scoring, _MultimetricScorer
from sklearn.model_selection._validation import (
    _aggregate_score_dicts,
    _fit_and_score,
    _insert_error_scores,
    _normalize_score_results,
    _score,
    _warn_or_raise_about_fit_failures,
)
from sklearn.utils.metaestimators import _safe_split
from sklearn.utils.validation import _check_method_params, _num_samples

__all__ = [
    "_MultimetricScorer",
    "_aggregate_score_dicts",
    "_check_method_params",
    "_check_multimetric_scoring",
    "_fit_and_score",
    "_insert_error_scores",
    "_normalize_score_results",
    "_num_samples",
    "_safe_split",
    "_score",
    "_warn_or_raise_about_fit_failures",
]
