"""The opt-in retry of an out-of-memory trial with a smaller config (``FailureConfig(oom_halve=...)``).

Whether a failure is an OOM is decided from its exception's types or the host's OOM-killer evidence, never from
its words (:class:`~tuneplat.execution._failure.Failure`); :class:`~tuneplat.core._failure.FailurePolicy` calls
:func:`shrink_config`. See ``docs/resources.md``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ..execution._failure import OOM

__all__ = ["OOM", "shrink_config"]


def _path(key: str) -> list[str]:
    return [part for part in key.replace("/", ".").split(".") if part]


def _get(config: Mapping[str, Any], path: list[str]) -> Any:
    node: Any = config
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(part)
        node = node[part]
    return node


def _set(config: dict[str, Any], path: list[str], value: Any) -> None:
    node = config
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


def shrink_config(config: Mapping[str, Any], halve: str,
                  double: str | None = None) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A copy of ``config`` with ``halve`` halved (and ``double`` doubled), or None when it cannot shrink.

    Keys may name nested values (``"train_loop_config.micro_batch_size"`` or ``"a/b"``). An int is halved
    with floor division and must stay ``>= 1``; a float must stay ``> 0``.

    Returns:
        ``(new config, {key: [old, new], ...})``; None when ``halve`` is missing, not a positive number,
        or already 1 (an int).

    Raises:
        ValueError: ``double`` names a value that is missing or not a number.

    Example:
        >>> shrink_config({"mb": 32, "acc": 1}, "mb", "acc")
        ({'mb': 16, 'acc': 2}, {'mb': [32, 16], 'acc': [1, 2]})
        >>> shrink_config({"mb": 1}, "mb") is None
        True
    """
    try:
        value = _get(config, _path(halve))
    except KeyError:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    if isinstance(value, int) and value <= 1:
        return None
    new_value: int | float = value // 2 if isinstance(value, int) else value / 2
    new = copy.deepcopy(dict(config))
    _set(new, _path(halve), new_value)
    change: dict[str, Any] = {halve: [value, new_value]}
    if double:
        try:
            other = _get(config, _path(double))
        except KeyError:
            raise ValueError(f"FailureConfig(oom_double={double!r}): the trial's config has no such key") from None
        if isinstance(other, bool) or not isinstance(other, (int, float)):
            raise ValueError(f"FailureConfig(oom_double={double!r}): the value {other!r} is not a number")
        _set(new, _path(double), other * 2)
        change[double] = [other, other * 2]
    return new, change
