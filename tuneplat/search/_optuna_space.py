"""``param_space`` domains as Optuna distributions, and configs rebuilt from Optuna's parameters.

The mapping is documented in :mod:`tuneplat.search.optuna`; :class:`~tuneplat.search.optuna.OptunaSearch`
and :func:`~tuneplat.search.optuna.convert_space` use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from ._domains import Categorical, Domain, Float, Function, Integer, Normal, q_range
from ._space import format_path, is_grid, iter_leaves, validate_space

__all__ = ["convert_space"]

_PRIMITIVES = (type(None), bool, int, float, str)


class _Leaf:
    """One searched parameter: Optuna name, key path, distribution, value mapping."""

    __slots__ = ("name", "path", "distribution", "post", "pre")

    def __init__(self, name: str, path: tuple[Any, ...], distribution: BaseDistribution,
                 post: Callable[[Any], Any] | None = None, pre: Callable[[Any], Any] | None = None) -> None:
        self.name = name
        self.path = path
        self.distribution = distribution
        self.post = post  # Optuna value -> config value
        self.pre = pre  # config value -> Optuna value (points_to_evaluate)


def _param_name(path: tuple[Any, ...]) -> str:
    return "/".join(str(p) for p in path)


def _q_grid(lower: float, upper: float, q: float, integer: bool) -> tuple[Any, Any]:
    """Smallest and largest multiple of ``q`` in ``[lower, upper]`` (the domain's grid).

    Float bounds are computed in decimal (``3 * 0.1 -> 0.3``, not
    ``0.30000000000000004``) so that Optuna accepts ``high - low`` as a
    multiple of ``step``.
    """
    k_lo, k_hi = q_range(lower, upper, q)
    if integer:
        return int(k_lo * q), int(k_hi * q)
    return _k_times_q(k_lo, q), _k_times_q(k_hi, q)


def _k_times_q(k: int, q: float) -> float:
    return float(Decimal(k) * Decimal(str(q)))


def _snap(q: float, low: float, high: float, integer: bool) -> Callable[[Any], Any]:
    """Optuna value -> nearest multiple of ``q`` in ``[low, high]`` (log + q domains)."""
    k_lo, k_hi = round(low / q), round(high / q)

    def post(value: Any) -> Any:
        k = min(max(round(value / q), k_lo), k_hi)
        return int(k * q) if integer else _k_times_q(k, q)

    return post


def _refuse(path: tuple[Any, ...], what: str, instead: str) -> ValueError:
    return ValueError(f"OptunaSearch cannot search {format_path(path)} = {what}: {instead}")


def _convert_leaf(path: tuple[Any, ...], value: Any, allow_grid: bool) -> _Leaf:
    name = _param_name(path)
    if isinstance(value, BaseDistribution):
        return _Leaf(name, path, value)
    if is_grid(value):
        if not allow_grid:
            raise _refuse(
                path, f"grid_search({value['grid_search']!r})",
                "a model-based Optuna sampler cannot run an exhaustive grid. Use "
                "tune.choice([...]) to let the sampler pick among the values, pass "
                "sampler=optuna.samplers.GridSampler(...)/BruteForceSampler(), or use "
                "BasicVariantGenerator for grid search.",
            )
        return _categorical(name, path, list(value["grid_search"]))
    if isinstance(value, Function):
        raise _refuse(
            path, repr(value),
            "Optuna cannot model values computed by sample_from. Pass a define-by-run "
            "function instead: OptunaSearch(space=lambda trial: {...}) computing the value "
            "from trial.suggest_*() results (return it in the dict as a constant).",
        )
    if isinstance(value, Normal):
        raise _refuse(
            path, repr(value),
            "Optuna has no unbounded normal distribution. Use a bounded domain such as "
            f"tune.uniform({value.mean!r} - 3 * {value.sd!r}, {value.mean!r} + 3 * {value.sd!r}).",
        )
    if isinstance(value, Float):
        if value.q is not None:
            low, high = _q_grid(value.lower, value.upper, value.q, integer=False)
            if value.log:
                return _Leaf(name, path, FloatDistribution(low, high, log=True),
                             post=_snap(value.q, low, high, integer=False))
            return _Leaf(name, path, FloatDistribution(low, high, step=value.q))
        high = math.nextafter(value.upper, -math.inf)
        return _Leaf(name, path, FloatDistribution(value.lower, high, log=bool(value.log)))
    if isinstance(value, Integer):
        if value.q is not None:
            low, high = _q_grid(value.lower, value.upper, value.q, integer=True)
            if value.log:
                return _Leaf(name, path, IntDistribution(low, high, log=True),
                             post=_snap(value.q, low, high, integer=True))
            return _Leaf(name, path, IntDistribution(low, high, step=value.q))
        return _Leaf(name, path, IntDistribution(value.lower, value.upper - 1, log=bool(value.log)))
    if isinstance(value, Categorical):
        return _categorical(name, path, list(value.categories))
    raise _refuse(path, repr(value), f"{type(value).__name__} domains are not supported by OptunaSearch.")


def _categorical(name: str, path: tuple[Any, ...], values: list[Any]) -> _Leaf:
    if all(isinstance(v, _PRIMITIVES) for v in values):
        return _Leaf(name, path, CategoricalDistribution(values))

    def pre(value: Any) -> int:
        for i, v in enumerate(values):
            if v is value or v == value:
                return i
        raise ValueError(f"{value!r} is not one of the choices {values!r} of {format_path(path)}")

    return _Leaf(name, path, CategoricalDistribution(list(range(len(values)))),
                 post=values.__getitem__, pre=pre)


def convert_space(space: Mapping[str, Any], allow_grid: bool = False) -> dict[str, BaseDistribution]:
    """``param_space`` → ``{flattened name: Optuna distribution}`` (constants left out).

    Raises:
        SearchSpaceError: invalid domain arguments (``validate_space``).
        ValueError: a domain Optuna cannot express, naming its key path.

    Example:
        >>> from tuneplat.search import randint
        >>> convert_space({"model": {"depth": randint(1, 5)}})
        {'model/depth': IntDistribution(high=4, log=False, low=1, step=1)}
    """
    return {leaf.name: leaf.distribution for leaf in _leaves(space, allow_grid)}


def _leaves(space: Mapping[str, Any], allow_grid: bool) -> list[_Leaf]:
    validate_space(space)
    return [
        _convert_leaf(path, value, allow_grid)
        for path, value in iter_leaves(space)
        if isinstance(value, (Domain, BaseDistribution)) or is_grid(value)
    ]


def _has_search_leaves(space: Mapping[str, Any] | None) -> bool:
    if not space:
        return False
    return any(isinstance(v, (Domain, BaseDistribution)) or is_grid(v) for _, v in iter_leaves(space))


def _set(node: Any, path: tuple[Any, ...], value: Any) -> None:
    for p in path[:-1]:
        child = node.get(p) if isinstance(node, dict) else node[p]
        if child is None and isinstance(node, dict):
            child = node[p] = {}
        node = child
    node[path[-1]] = value


def _deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = value
    return base


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = str(key).split("/")
        node = out
        for p in parts[:-1]:
            nxt = node.get(p)
            if not isinstance(nxt, dict):
                nxt = node[p] = {}
            node = nxt
        node[parts[-1]] = value
    return out


def _flatten_point(point: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in point.items():
        if isinstance(value, Mapping) and value and not is_grid(value):
            for sub, v in _flatten_point(value).items():
                out[f"{key}/{sub}"] = v
        else:
            out[str(key)] = value
    return out


def _lookup(point: Mapping[str, Any], leaf: _Leaf) -> tuple[bool, Any]:
    """``point``'s value for ``leaf``: by flattened name, else by nested key path."""
    if leaf.name in point:
        return True, point[leaf.name]
    node: Any = point
    for p in leaf.path:
        if isinstance(node, Mapping) and p in node:
            node = node[p]
        elif isinstance(node, list) and isinstance(p, int) and 0 <= p < len(node):
            node = node[p]
        else:
            return False, None
    return True, node


def _copy_containers(value: Any) -> Any:
    """Copy of the dict/list structure; other values are shared (cheap per suggestion)."""
    if isinstance(value, dict):
        return {k: _copy_containers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_containers(v) for v in value]
    return value
