"""Pareto front of multi-objective results (pure Python, no Optuna needed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["pareto_front"]


def _as_float(value: Any) -> float | None:
    """``value`` as a float, or None when it is missing, a bool, not a number or NaN (a metric a result lacks)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _row(values: Any, signs: list[float]) -> tuple[float, ...] | None:
    """The row as floats where lower is better, or None when it cannot be ranked."""
    if values is None or isinstance(values, (str, bytes)):
        return None
    try:
        items = list(values)
    except TypeError:
        return None
    if len(items) != len(signs):
        return None
    out = []
    for value, sign in zip(items, signs):
        number = _as_float(value)
        if number is None:
            return None
        out.append(sign * number)
    return tuple(out)


def pareto_front(values: Sequence[Sequence[float] | None], modes: Sequence[str]) -> list[int]:
    """Indices (ascending) of the non-dominated rows of ``values``.

    Row ``a`` dominates row ``b`` when ``a`` is at least as good as ``b`` in
    every objective and strictly better in one (``modes[i]`` is ``"min"`` or
    ``"max"``). Rows that are ``None``, have the wrong length, or hold a
    missing, non-numeric or NaN value are never on the front and never
    dominate anything. Identical rows are all on the front (as in Optuna's
    ``study.best_trials``). ``±inf`` are ordinary values.

    Example:
        >>> pareto_front([[1, 5], [2, 2], [3, 3], [None, 0]], ["min", "min"])
        [0, 1]
    """
    modes = list(modes)
    for mode in modes:
        if mode not in ("min", "max"):
            raise ValueError(f"The value of `modes` is {modes!r}, but each mode must be 'min' or 'max'.")
    signs = [1.0 if mode == "min" else -1.0 for mode in modes]
    rows = [(i, r) for i, r in ((i, _row(v, signs)) for i, v in enumerate(values)) if r is not None]
    # Lexicographic order: a row can only be dominated by rows before it.
    rows.sort(key=lambda item: item[1])
    front: list[tuple[int, tuple[float, ...]]] = []
    for index, row in rows:
        dominated = False
        for _, other in front:
            if other != row and all(o <= r for o, r in zip(other, row)):
                dominated = True
                break
        if not dominated:
            front.append((index, row))
    return sorted(index for index, _ in front)
