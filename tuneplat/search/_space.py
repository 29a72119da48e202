"""Walking a param_space: validation with key paths, grids, resolution."""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Iterator, Mapping
from typing import Any

from ._domains import Domain, Function

__all__ = [
    "SearchSpaceError",
    "flatten_dict",
    "format_path",
    "grid_variants",
    "is_grid",
    "iter_leaves",
    "resolve",
    "unflatten_dict",
    "validate_space",
]

Path = tuple[Any, ...]


class SearchSpaceError(ValueError):
    """The search space has invalid domains; the message names every key path."""


def is_grid(value: Any) -> bool:
    """``{"grid_search": [...]}`` and nothing else."""
    return isinstance(value, Mapping) and len(value) == 1 and "grid_search" in value


def format_path(path: Path) -> str:
    return "param_space" + "".join(f"[{p!r}]" for p in path)


def iter_leaves(space: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Yield ``(path, value)`` for every domain, grid or constant in a nested dict/list."""
    if is_grid(space) or isinstance(space, Domain):
        yield path, space
    elif isinstance(space, Mapping):
        for key, value in space.items():
            yield from iter_leaves(value, path + (key,))
    elif isinstance(space, list):
        for i, value in enumerate(space):
            yield from iter_leaves(value, path + (i,))
    else:
        yield path, space


def validate_space(space: Any) -> None:
    """Raise :class:`SearchSpaceError` naming each invalid domain by key path."""
    if space is None:
        return
    if not isinstance(space, Mapping):
        raise SearchSpaceError(f"param_space must be a dict, got {type(space).__name__}: {space!r}")
    problems = []
    for path, value in iter_leaves(space):
        if isinstance(value, Domain):
            for p in value.problems():
                problems.append(f"{format_path(path)} = {value!r}: {p}")
        elif is_grid(value):
            values = value["grid_search"]
            if not isinstance(values, (list, tuple)) or len(values) == 0:
                problems.append(f"{format_path(path)}: grid_search needs a non-empty list of values, got {values!r}")
    if problems:
        raise SearchSpaceError("Invalid search space:\n  " + "\n  ".join(problems))


def _set(config: Any, path: Path, value: Any) -> None:
    node = config
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


def grid_variants(space: Mapping[str, Any]) -> list[dict[Path, Any]]:
    """All combinations of the grid values, as ``{path: value}`` dicts (first key varies slowest)."""
    grids = [(path, value["grid_search"]) for path, value in iter_leaves(space) if is_grid(value)]
    if not grids:
        return [{}]
    paths = [p for p, _ in grids]
    return [dict(zip(paths, combo)) for combo in itertools.product(*(v for _, v in grids))]


class _AttrDict(dict):
    """A dict whose keys read as attributes too (``spec.config.alpha``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    @classmethod
    def wrap(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return cls({k: cls.wrap(v) for k, v in value.items()})
        return value


class _Spec(_AttrDict):
    """What ``sample_from`` functions receive: the config resolved so far.

    Both of Ray's spellings read it: ``config["alpha"]`` (the dict form of Ray
    2.x's guides) and ``spec.config.alpha`` / ``spec["config"]["alpha"]`` (the
    older one), unless the config has a key ``"config"`` of its own.
    """

    def __init__(self, config: Any) -> None:
        super().__init__({k: _AttrDict.wrap(v) for k, v in (config or {}).items()})

    def __missing__(self, key: Any) -> Any:
        if key == "config":
            return self
        raise KeyError(key)


def resolve(space: Mapping[str, Any], grid: Mapping[Path, Any], rng: random.Random,
            preset: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One concrete config: grid values placed, domains sampled, ``preset`` values (from
    ``points_to_evaluate``) laid over them, ``sample_from`` last (so it sees the final values)."""
    config = copy.deepcopy(_strip(space))
    deferred = []
    for path, value in iter_leaves(space):
        if not path:
            continue
        if is_grid(value):
            if path in grid:  # (a grid key fixed by a preset point has no grid value)
                _set(config, path, grid[path])
        elif isinstance(value, Function):
            deferred.append((path, value))
        elif isinstance(value, Domain):
            _set(config, path, value.sample(rng))
    if preset:
        config = _overlay(config, preset)
        deferred = [(p, v) for p, v in deferred if not _has_path(preset, p)]
    for path, value in deferred:
        try:
            sampled = value.sample(rng, _Spec(config))
        except Exception as exc:  # noqa: BLE001 - the user's function: say which key it computes
            raise SearchSpaceError(f"{format_path(path)} = {value!r} raised {type(exc).__name__}: {exc} (its function "
                                   "receives the config resolved so far: config['other_key'], or spec.config.other_key)"
                                   ) from exc
        _set(config, path, sampled)
    return config


def _overlay(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in override.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = _overlay(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _has_path(d: Mapping[str, Any], path: Path) -> bool:
    node: Any = d
    for p in path:
        if not isinstance(node, Mapping) or p not in node:
            return False
        node = node[p]
    return True


def _strip(space: Any) -> Any:
    """A copy of the nested structure with domains/grids replaced by None (constants kept)."""
    if is_grid(space) or isinstance(space, Domain):
        return None
    if isinstance(space, Mapping):
        return {k: _strip(v) for k, v in space.items()}
    if isinstance(space, list):
        return [_strip(v) for v in space]
    return space


def flatten_dict(d: Mapping[str, Any], prefix: str = "", sep: str = "/") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a/b": 1}`` (Ray's separator)."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.update(flatten_dict(value, name, sep))
        else:
            out[name] = value
    return out


def unflatten_dict(d: Mapping[str, Any], sep: str = "/") -> dict[str, Any]:
    """Inverse of :func:`flatten_dict`."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        parts = key.split(sep)
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out
