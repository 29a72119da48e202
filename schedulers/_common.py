"""Small helpers shared by the schedulers (private)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["display", "finite_number", "is_number", "lower_quantile", "result_time"]


def is_number(value: Any) -> bool:
    """True for int/float (not bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite_number(value: Any) -> float | None:
    """``value`` as a finite float, or None when missing, non-numeric or non-finite."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def result_time(result: Mapping[str, Any], time_attr: str) -> float | None:
    """The result's progress value (``time_attr``), or None when absent or not finite.

    Raises:
        TypeError: the value is not a number (a str, a list, a bool...), as Ray's schedulers do: comparing it
            with a milestone fails. The tuner fails the trial with this message.
    """
    value = result.get(time_attr)
    if value is not None and not _is_float_like(value):
        raise TypeError(f"the scheduler's time_attr {time_attr!r} must be a number in every result, but the result "
                        f"has {time_attr}={value!r} ({type(value).__name__}); report a number under that key, or "
                        "give the scheduler another time_attr (e.g. 'training_iteration').")
    return finite_number(value)


def _is_float_like(value: Any) -> bool:
    """A numeric scalar of another library (numpy, a 0-d tensor): ``float()`` takes it."""
    if isinstance(value, (bool, str, bytes)):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def lower_quantile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-quantile of scores (lower is better), robust to ``+inf``.

    Linear interpolation between order statistics, as ``numpy.percentile``
    does, except that interpolating towards an infinite neighbour yields the
    finite lower neighbour: a diverged trial recorded at a rung can never make
    the cut-off infinite (or NaN) while a finite value sits at the quantile.

    Returns:
        None for an empty sequence.
    """
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(math.floor(position))
    high = min(low + 1, len(ordered) - 1)
    fraction = position - low
    if fraction == 0.0 or not math.isfinite(ordered[high]):
        return ordered[low]
    return ordered[low] + fraction * (ordered[high] - ordered[low])


def display(score_value: float | Sequence[float], mode: str | Sequence[str] | None) -> str:
    """A score (or a tuple of scores, several objectives) turned back into the user's values, for messages."""
    if not isinstance(score_value, (int, float)):
        modes = list(mode) if isinstance(mode, (list, tuple)) else [mode] * len(score_value)
        return "(" + ", ".join(display(v, m) for v, m in zip(score_value, modes)) + ")"
    if not math.isfinite(score_value):
        return "non-finite"
    value = score_value if mode == "min" else -score_value
    return f"{value:.4g}"
