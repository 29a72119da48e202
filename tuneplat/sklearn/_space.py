"""Parameter grids and distributions: checking names, drawing candidates, mapping to tuneplat domains.

scikit-learn users give ``param_grid``/``param_distributions`` as a dict (or a
list of dicts) of lists, ``range`` objects, scipy.stats distributions, and
here also tuneplat domains (``tune.uniform(...)``). A grid search and the
default random search know their candidates before the first trial (drawn
with scikit-learn's own ``ParameterGrid``/``ParameterSampler``, so the same
``random_state`` gives the same candidates as ``RandomizedSearchCV``); Optuna
and other searchers get the space as tuneplat domains.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Mapping, Sequence
from typing import Any

from ..search import choice, loguniform, randint, uniform
from ..search._domains import Categorical, Domain

__all__ = ["as_sampler_space", "check_param_names", "to_domains", "to_grid"]


def _primitive(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _as_dicts(space: Any, argument: str) -> list[Mapping[str, Any]]:
    if isinstance(space, Mapping):
        return [space]
    if isinstance(space, Sequence) and not isinstance(space, str) and all(isinstance(s, Mapping) for s in space):
        return list(space)
    raise TypeError(f"`{argument}` must be a dict (or a list of dicts) of parameter name -> values, got "
                    f"{type(space).__name__}: {space!r}")


def check_param_names(estimator: Any, space: Any, argument: str) -> None:
    """Refuse a parameter that ``estimator.set_params`` would not know, saying which and what was meant."""
    known = set(estimator.get_params(deep=True))
    for grid in _as_dicts(space, argument):
        for name in grid:
            if not isinstance(name, str):
                raise TypeError(f"`{argument}` has the key {name!r}; parameter names are strings.")
            if name in known:
                continue
            # "step__param" where "step" itself is searched over (an estimator given as a grid value)
            prefix = name.rsplit("__", 1)[0] if "__" in name else None
            if prefix is not None and prefix in grid:
                continue
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"Invalid parameter {name!r} in `{argument}` for estimator {type(estimator).__name__}: it is not in "
                f"estimator.get_params().{hint} Valid parameters are: {sorted(known)}.")


class _DomainRVS:
    """A tuneplat domain seen as a scipy-like distribution (``rvs(random_state=...)``), for ParameterSampler."""

    def __init__(self, domain: Domain) -> None:
        self.domain = domain

    def rvs(self, random_state: Any = None) -> Any:
        seed = int(random_state.randint(0, 2**31 - 1)) if random_state is not None else None
        return self.domain.sample(random.Random(seed))

    def __repr__(self) -> str:
        return repr(self.domain)


def _values(v: Any, key: str, argument: str) -> Any:
    if isinstance(v, Domain):
        return _DomainRVS(v)
    if isinstance(v, Mapping) and list(v) == ["grid_search"]:  # tune.grid_search([...]): its values
        return list(v["grid_search"])
    if hasattr(v, "rvs") or (isinstance(v, Sequence) and not isinstance(v, str)) or hasattr(v, "__array__"):
        return v
    raise TypeError(f"`{argument}[{key!r}]` is {v!r}: give a list of values, a range, a scipy.stats "
                    "distribution or a tuneplat domain (tune.uniform(...)); wrap a single value in a list.")


def as_sampler_space(space: Any, argument: str) -> list[dict[str, Any]]:
    """``param_distributions`` in the form scikit-learn's ParameterSampler takes (tuneplat domains wrapped)."""
    return [{k: _values(v, k, argument) for k, v in grid.items()} for grid in _as_dicts(space, argument)]


def to_grid(space: Any, argument: str) -> list[dict[str, Any]]:
    """``param_grid`` for ParameterGrid: lists (ranges, arrays, ``tune.grid_search``) only."""
    out = []
    for grid in _as_dicts(space, argument):
        g: dict[str, Any] = {}
        for k, v in grid.items():
            if isinstance(v, Mapping) and list(v) == ["grid_search"]:
                v = list(v["grid_search"])
            elif isinstance(v, Categorical):
                v = list(v.categories)
            elif isinstance(v, Domain) or hasattr(v, "rvs"):
                raise TypeError(f"`{argument}[{k!r}]` is a distribution ({v!r}); a grid search needs the values "
                                "listed. Use TuneSearchCV for distributions.")
            g[k] = v
        out.append(g)
    return out


def _scipy_domain(dist: Any, key: str) -> Domain:
    name = getattr(getattr(dist, "dist", None), "name", None)
    lo, hi = (float(x) for x in dist.support())
    if name == "uniform":
        return uniform(lo, hi)
    if name in ("loguniform", "reciprocal"):
        return loguniform(lo, hi)
    if name == "randint":
        return randint(int(lo), int(hi) + 1)
    raise TypeError(f"param_distributions[{key!r}] is scipy.stats.{name}, which Optuna cannot search: use "
                    "scipy.stats uniform, loguniform or randint, a list of values, or a tuneplat domain "
                    "(tune.uniform/loguniform/randint/choice), or search_optimization='random'.")


def to_domains(space: Any, argument: str) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """The space as tuneplat domains, for a searcher; lists of non-primitive values become index choices.

    Returns the space and, for each index-coded key, its values (a trial's config holds the index).
    """
    grids = _as_dicts(space, argument)
    if len(grids) != 1:
        raise ValueError(f"`{argument}` is a list of {len(grids)} dicts; a searcher (Optuna, or a Searcher "
                         "instance) searches one space: give one dict, or use search_optimization='random'.")
    domains: dict[str, Any] = {}
    decode: dict[str, list[Any]] = {}
    for k, v in grids[0].items():
        if isinstance(v, Mapping) and list(v) == ["grid_search"]:
            v = list(v["grid_search"])
        if isinstance(v, Domain):
            domains[k] = v
        elif hasattr(v, "rvs") and hasattr(v, "support"):
            domains[k] = _scipy_domain(v, k)
        elif isinstance(v, (Sequence, range)) and not isinstance(v, str) or hasattr(v, "__array__"):
            values = list(v)
            if not values:
                raise ValueError(f"`{argument}[{k!r}]` is empty; give at least one value.")
            if all(_primitive(x) for x in values):
                domains[k] = choice([x.item() if hasattr(x, "item") else x for x in values])
            else:
                decode[k] = values
                domains[k] = choice(list(range(len(values))))
        else:
            raise TypeError(f"`{argument}[{k!r}]` is {v!r}: give a list of values, a scipy.stats distribution or "
                            "a tuneplat domain.")
    return domains, decode


def display(params: Mapping[str, Any]) -> dict[str, Any]:
    """A candidate's parameters as the trial's config shows them (journal, MLflow params, result grid)."""
    return {k: (v if _primitive(v) else (v.item() if hasattr(v, "item") and getattr(v, "ndim", 1) == 0 else repr(v)))
            for k, v in params.items()}
