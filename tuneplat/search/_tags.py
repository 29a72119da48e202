"""Ray's ``experiment_tag``: a short text of a trial's index and config values (``"0_lr=0.0100,momentum=0.9000"``).

Ray Tune (2.x) writes it three ways, and so does tuneplat:

- the default generator (random + grid): ``"{index}"``, then ``"_"`` and the values it resolved (grid values and
  sampled domains, not constants nor values a ``points_to_evaluate`` point fixed), if any;
- any other searcher (Optuna, a ``ConcurrencyLimiter``, your own): ``"{index + 1}_"`` and every value of the
  config (Ray's ``SearchGenerator`` counts from 1);
- PBT's exploit: ``"{tag at creation}@perturbed[...]"`` with the values of the mutated keys.

Values are ``last_key=value`` pairs sorted by key path, floats with 4 decimals, and every run of characters other
than letters, digits, ``_`` and ``-`` replaced by ``_`` (the text is used in folder names), as Ray's ``format_vars``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ._domains import Domain
from ._space import _has_path, is_grid, iter_leaves

__all__ = ["format_vars", "perturbed_tag", "resolved_paths", "suggested_tag", "variant_tag"]

_INVALID = re.compile(r"[^a-zA-Z0-9_-]+")


def _clean(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return _INVALID.sub("_", str(value)).strip("_")


def format_vars(resolved: Mapping[tuple[Any, ...], Any]) -> str:
    """``last_key=value`` for each ``{path: value}``, sorted by path, comma-separated (Ray's ``format_vars``).

    Example:
        >>> format_vars({("lr",): 0.01, ("net", "act"): "relu", ("momentum",): 0.9})
        'lr=0.0100,momentum=0.9000,act=relu'
    """
    items = list(resolved.items())
    try:
        items.sort(key=lambda kv: kv[0])
    except TypeError:  # (keys of different types along a path: Ray would fail here; order them by their text)
        items.sort(key=lambda kv: tuple(str(p) for p in kv[0]))
    return ",".join(f"{_clean(path[-1])}={_clean(value)}" for path, value in items)


def resolved_paths(space: Mapping[str, Any], grid: Mapping[tuple[Any, ...], Any],
                   preset: Mapping[str, Any] | None = None) -> tuple[tuple[Any, ...], ...]:
    """The key paths of ``space`` that a config drawn with ``grid`` (and ``preset``) resolved: its grid values and
    sampled domains, without those the preset point fixed (they are constants there, as in Ray)."""
    out = []
    for path, value in iter_leaves(space):
        if not path or (preset and _has_path(preset, path)):
            continue
        if (is_grid(value) and path in grid) or isinstance(value, Domain):
            out.append(path)
    return tuple(out)


def _value_at(config: Any, path: tuple[Any, ...]) -> Any:
    node = config
    for p in path:
        node = node[p]
    return node


def variant_tag(index: int, config: Mapping[str, Any], paths: Iterable[tuple[Any, ...]]) -> str:
    """The tag of the default generator's trial ``index``: its resolved values (``paths``) in ``config``.

    Example:
        >>> variant_tag(0, {"lr": 0.01, "momentum": 0.9, "epochs": 5}, [("lr",), ("momentum",)])
        '0_lr=0.0100,momentum=0.9000'
    """
    resolved = {}
    for path in paths:
        try:
            resolved[tuple(path)] = _value_at(config, tuple(path))
        except (KeyError, IndexError, TypeError):
            continue
    return f"{index}_{format_vars(resolved)}" if resolved else str(index)


def _nested(config: Mapping[str, Any], prefix: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], Any]:
    out: dict[tuple[Any, ...], Any] = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update(_nested(v, prefix + (k,)))
        else:
            out[prefix + (k,)] = v
    return out


def suggested_tag(index: int, config: Mapping[str, Any]) -> str:
    """The tag of a searcher's trial ``index`` (counted from 0 here, from 1 in the tag, as Ray's): every value.

    Example:
        >>> suggested_tag(0, {"lr": 0.01, "opt": {"name": "sgd"}})
        '1_lr=0.0100,name=sgd'
    """
    return f"{index + 1}_{format_vars(_nested(config))}"


def perturbed_tag(original: str, config: Mapping[str, Any], keys: Iterable[Any]) -> str:
    """The tag of a trial after PBT's exploit: its tag at creation and the values of the mutated ``keys``.

    Example:
        >>> perturbed_tag("3_lr=0.0100", {"lr": 0.02, "momentum": 0.9}, ["lr"])
        '3_lr=0.0100@perturbed[lr=0.0200]'
    """
    return f"{original}@perturbed[{format_vars({(k,): config[k] for k in keys if k in config})}]"
