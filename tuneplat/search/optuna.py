"""Optuna-backed searcher and pruner adapter (``tuneplat.search.optuna``).

Ray Tune's import path is ``ray.tune.search.optuna``; this module is its
counterpart. It imports Optuna at import time, so ``tuneplat`` and
``tuneplat.search`` only import it lazily (``tuneplat.search.OptunaSearch``
is resolved on first access).

Mapping of ``param_space`` domains to Optuna distributions (exact):

=============================  ==============================================================
domain                         Optuna distribution (and post-processing)
=============================  ==============================================================
``uniform(a, b)``              ``FloatDistribution(a, nextafter(b, -inf))``: ``a <= x < b``
``loguniform(a, b)``           ``FloatDistribution(a, nextafter(b, -inf), log=True)``
``quniform(a, b, q)``          ``FloatDistribution(ceil(a/q)*q, floor(b/q)*q, step=q)``
``qloguniform(a, b, q)``       ``FloatDistribution(ceil(a/q)*q, floor(b/q)*q, log=True)``, the
                               value rounded to the nearest multiple of ``q`` in that range
                               (Optuna has no log+step; the trial's param keeps the raw value)
``randint(a, b)``              ``IntDistribution(a, b - 1)`` (upper exclusive)
``lograndint(a, b)``           ``IntDistribution(a, b - 1, log=True)``
``qrandint(a, b, q)``          ``IntDistribution(ceil(a/q)*q, floor(b/q)*q, step=q)`` (upper inclusive)
``qlograndint(a, b, q)``       ``IntDistribution(ceil(a/q)*q, floor(b/q)*q, log=True)``, rounded to
                               the nearest multiple of ``q`` in that range
``choice([...])``              ``CategoricalDistribution(values)`` when every value is ``None``,
                               bool, int, float or str; otherwise ``CategoricalDistribution``
                               over the indices ``0..n-1`` (mapped back to the values)
``grid_search([...])``         ``CategoricalDistribution`` with ``GridSampler`` /
                               ``BruteForceSampler`` only; refused with any other sampler
Optuna distribution            used as is
constant                       passed through into every config
``randn``/``qrandn``           refused (unbounded)
``sample_from``                refused (use a define-by-run ``space`` function)
=============================  ==============================================================

Nested keys become Optuna parameter names joined with ``"/"`` (``{"opt":
{"lr": ...}}`` → ``"opt/lr"``) and are rebuilt into nested configs.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState

from schedulers import Decision, TrialScheduler

from ._domains import Categorical, Domain, Float, Function, Integer, Normal, q_range
from ._searcher import Searcher
from ._space import _strip, format_path, is_grid, iter_leaves, validate_space

__all__ = [
    "JOURNAL_FILE",
    "OOM_ATTR",
    "STUDY_NAME",
    "TRIAL_ID_ATTR",
    "OptunaPrunerScheduler",
    "OptunaSearch",
    "convert_space",
    "oom_constraints",
]

#: File name of the Optuna journal inside the experiment folder.
JOURNAL_FILE = "optuna_journal.log"
#: Name of the study in the journal.
STUDY_NAME = "tuneplat"
#: what OptunaSearch.save() writes (JSON: a file a user hands back is never unpickled)
_SAVE_FORMAT = "tuneplat-optuna-search/1"
#: User attribute of each Optuna trial holding the tuneplat trial id.
TRIAL_ID_ATTR = "tuneplat_trial_id"

logger = logging.getLogger("tuneplat")

_PRIMITIVES = (type(None), bool, int, float, str)
_SAMPLER_NAMES = ("tpe", "cmaes", "gp", "qmc", "random", "nsgaii")
_FINISHED_STATUSES = ("TERMINATED", "ERROR")


# --------------------------------------------------------------------------
# space conversion
# --------------------------------------------------------------------------
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


def _as_float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


# --------------------------------------------------------------------------
# samplers
# --------------------------------------------------------------------------
def _require(module: str, sampler: str, pip: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ImportError(f'sampler="{sampler}" needs the {module!r} package: pip install {pip}')


#: user attribute set on an Optuna trial whose tuneplat trial ran out of memory (1.0)
OOM_ATTR = "tuneplat_oom"


def oom_constraints(trial: optuna.trial.FrozenTrial) -> list[float]:
    """A ``constraints_func`` for Optuna's samplers before 5.0: a trial that ran out of memory is infeasible.

    With Optuna >= 5 nothing is needed: an out-of-memory trial gets ``trial.set_constraint("oom", 1.0)``
    (any sampler that handles constraints reads it). On older Optuna, pass this to the sampler you give
    :class:`OptunaSearch`, e.g.
    ``OptunaSearch(sampler=optuna.samplers.NSGAIISampler(constraints_func=oom_constraints))`` (TPE, NSGA-II,
    NSGA-III and GP samplers take one). Optuna reads values ``<= 0`` as feasible: 1.0 for an out-of-memory
    trial, 0.0 otherwise.
    """
    return [float(trial.user_attrs.get(OOM_ATTR, 0.0))]


def make_sampler(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    """An Optuna sampler from its short name, seeded with ``seed``."""
    key = name.lower()
    if key == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if key == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if key == "nsgaii":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if key == "cmaes":
        _require("cmaes", "cmaes", "cmaes")
        return optuna.samplers.CmaEsSampler(seed=seed)
    if key == "qmc":
        _require("scipy", "qmc", "scipy")
        return optuna.samplers.QMCSampler(seed=seed)
    if key == "gp":
        _require("scipy", "gp", "scipy torch")
        _require("torch", "gp", "scipy torch")
        return optuna.samplers.GPSampler(seed=seed)
    raise ValueError(
        f"The value of `sampler` is {name!r}, but must be an optuna.samplers.BaseSampler "
        f"or one of {', '.join(repr(n) for n in _SAMPLER_NAMES)}."
    )


def _resume_seed(seed: int | None, n_trials: int) -> int | None:
    """Seed for a sampler continuing a study that already has ``n_trials`` trials.

    Re-using ``seed`` would replay the random start-up draws of the first
    trials; mixing in the trial count keeps resumed runs deterministic
    without repeating configs.
    """
    if seed is None or n_trials == 0:
        return seed
    return (int(seed) * 1_000_003 + n_trials) % (2**32)


# --------------------------------------------------------------------------
# the searcher
# --------------------------------------------------------------------------
class OptunaSearch(Searcher):
    """Search with an Optuna sampler (TPE by default), as Ray Tune's ``OptunaSearch``.

    Args:
        space: Either a dict of tuneplat domains / Optuna distributions
            (usually left None: the Tuner's ``param_space`` is used), or a
            define-by-run function ``space(trial) -> dict | None`` calling
            ``trial.suggest_*``; parameter names holding ``"/"`` become nested
            keys, and the returned dict holds constants merged into the config.
            Giving both a ``space`` and a ``param_space`` with domains is an error.
        metric: Metric name, or a list of names for multi-objective search.
        mode: ``"min"``/``"max"``, or a list (one per metric).
        points_to_evaluate: Configs (nested or ``"/"``-flattened, possibly
            partial) enqueued to run first, in order.
        sampler: An ``optuna.samplers.BaseSampler`` or a short name:
            ``"tpe"``, ``"cmaes"``, ``"gp"``, ``"qmc"``, ``"random"``,
            ``"nsgaii"``. Default TPE. Named samplers are seeded with ``seed``.
        study_name: the Optuna study's name (default ``"tuneplat"``).
        storage: an Optuna storage (or its URL, e.g. ``"sqlite:///optuna.db"``) to keep the study in
            instead of the experiment folder's journal (Ray's argument); a study of that name there is
            loaded and added to, never deleted.
        seed: Sampler seed; when None, ``TuneConfig.seed`` (``spec["seed"]``).
        evaluated_rewards: Metric values of ``points_to_evaluate`` (one per
            point; lists for multi-objective): the points are added to the
            study as completed trials instead of being run.

    Persistence: with ``spec["experiment_dir"]`` the study is stored in
    ``<experiment_dir>/optuna_journal.log`` (Optuna ``JournalStorage``,
    study name ``"tuneplat"``), loaded again when ``spec["resume"]`` is True.
    Without it, the study is in memory. Each Optuna trial's user attribute
    ``"tuneplat_trial_id"`` holds the tuneplat trial id.

    Example:
        >>> from tuneplat.search.optuna import OptunaSearch
        >>> from tuneplat.search import uniform
        >>> s = OptunaSearch(metric="loss", mode="min", seed=0)
        >>> s.set_search_properties(None, None, {"x": uniform(0, 1), "tag": "a"})
        True
        >>> sorted(s.suggest("t1"))
        ['tag', 'x']
    """

    def __init__(
        self,
        space: Mapping[str, Any] | Callable[[Any], Mapping[str, Any] | None] | None = None,
        metric: str | Sequence[str] | None = None,
        mode: str | Sequence[str] | None = None,
        points_to_evaluate: Sequence[Mapping[str, Any]] | None = None,
        sampler: optuna.samplers.BaseSampler | str | None = None,
        study_name: str | None = None,
        storage: Any = None,
        seed: int | None = None,
        evaluated_rewards: Sequence[Any] | None = None,
    ) -> None:
        super().__init__(metric=list(metric) if isinstance(metric, (list, tuple)) else metric,
                         mode=list(mode) if isinstance(mode, (list, tuple)) else mode)
        if space is not None and not callable(space) and not isinstance(space, Mapping):
            raise TypeError(f"`space` must be a dict or a function space(trial) -> dict | None, got {type(space).__name__}")
        if isinstance(sampler, str):
            if sampler.lower() not in _SAMPLER_NAMES:
                make_sampler(sampler, None)  # raises the ValueError
        elif sampler is not None and not isinstance(sampler, optuna.samplers.BaseSampler):
            raise TypeError(f"`sampler` must be an optuna sampler or a name, got {sampler!r}")
        elif sampler is not None and seed is not None:
            warnings.warn("OptunaSearch got a sampler object and a seed; the seed is ignored "
                          "(seed the sampler itself).", stacklevel=2)
        if evaluated_rewards is not None:
            if points_to_evaluate is None or len(evaluated_rewards) != len(points_to_evaluate):
                raise ValueError("`evaluated_rewards` needs one reward per point in `points_to_evaluate`.")
            if callable(space):
                raise ValueError("`evaluated_rewards` cannot be used with a define-by-run `space`: "
                                 "the distributions of the points are unknown. Pass them as "
                                 "points_to_evaluate only (they will be run).")
        self._space = space
        self._points = [dict(p) for p in (points_to_evaluate or [])]
        self._rewards = list(evaluated_rewards) if evaluated_rewards is not None else None
        self._sampler_arg = sampler
        self._seed = seed
        self._spec: dict[str, Any] = {}
        self._constants: dict[str, Any] = {}
        self._leaf_list: list[_Leaf] = []
        self._distributions: dict[str, BaseDistribution] = {}
        self._posts: list[tuple[str, tuple[Any, ...], Callable[[Any], Any] | None]] = []
        self._skeleton: dict[str, Any] = {}
        self._ot_trials: dict[str, optuna.trial.Trial] = {}
        self._study: optuna.Study | None = None
        self._storage: Any = None
        self._study_name = study_name or STUDY_NAME
        self._user_storage = storage  # Ray's storage=: an Optuna storage (or its URL) holding the study instead
        self._properties_set = False
        self._points_pending = False
        self._exhausted = False

    # -- configuration -------------------------------------------------
    @property
    def study(self) -> optuna.Study:
        """The Optuna study (created on first use)."""
        if self._study is None:
            self._setup_study()
        assert self._study is not None
        return self._study

    @property
    def is_multi_objective(self) -> bool:
        return isinstance(self.metric, list)

    def set_search_properties(self, metric: Any, mode: Any, config: Mapping[str, Any] | None, **spec: Any) -> bool:
        if self._study is not None:
            return False  # already running a study
        if self.metric is None and metric is not None:
            self.metric = list(metric) if isinstance(metric, (list, tuple)) else metric
        if self.mode is None and mode is not None:
            self.mode = list(mode) if isinstance(mode, (list, tuple)) else mode
        config = config or {}
        if self._space is not None and _has_search_leaves(config):
            raise ValueError(
                "OptunaSearch got a search space twice: in OptunaSearch(space=...) and in the "
                "Tuner's param_space. Define the domains in one place only (keep constants in "
                "param_space if you like)."
            )
        self._spec = dict(spec)
        if self._space is None:
            self._space = dict(config)
            self._constants = {}
        else:
            self._constants = copy.deepcopy(dict(config))  # constants only
        self._properties_set = True
        self._setup_study()
        return True

    def _directions(self) -> list[str]:
        metric, mode = self.metric, self.mode
        if metric is None or mode is None:
            raise ValueError("OptunaSearch needs a metric and a mode: pass them to OptunaSearch or "
                             "to TuneConfig(metric=..., mode=...).")
        metrics = metric if isinstance(metric, list) else [metric]
        modes = mode if isinstance(mode, list) else [mode]
        if len(metrics) != len(modes):
            raise ValueError(f"metric={metric!r} and mode={mode!r} must have the same length.")
        for m in modes:
            if m not in ("min", "max"):
                raise ValueError(f"The value of `mode` is {mode!r}, but each mode must be 'min' or 'max'.")
        if isinstance(metric, list) != isinstance(mode, list):
            raise ValueError(f"metric={metric!r} and mode={mode!r}: give both as lists for multi-objective search.")
        return ["minimize" if m == "min" else "maximize" for m in modes]

    def _prepare_space(self, sampler: optuna.samplers.BaseSampler) -> None:
        if callable(self._space):
            self._leaf_list = []
            return
        space = self._space or {}
        allow_grid = isinstance(sampler, (optuna.samplers.GridSampler, optuna.samplers.BruteForceSampler))
        self._leaf_list = _leaves(space, allow_grid)
        self._distributions = {leaf.name: leaf.distribution for leaf in self._leaf_list}
        self._posts = [(leaf.name, leaf.path, leaf.post) for leaf in self._leaf_list]
        skeleton = _strip(space)
        self._skeleton = skeleton if isinstance(skeleton, dict) else {}

    def _setup_study(self) -> None:
        directions = self._directions()
        seed = self._seed if self._seed is not None else self._spec.get("seed")
        experiment_dir = self._spec.get("experiment_dir")
        resume = bool(self._spec.get("resume"))
        if self._user_storage is not None:  # the user's own storage: the study there is loaded, never deleted
            self._storage = (optuna.storages.get_storage(self._user_storage) if isinstance(self._user_storage, str)
                             else self._user_storage)
            experiment_dir = None
        elif experiment_dir:
            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalFileBackend

            os.makedirs(experiment_dir, exist_ok=True)
            journal = os.path.join(os.fspath(experiment_dir), JOURNAL_FILE)
            with _names_damaged(journal, "Optuna's journal of this experiment's study"):
                self._storage = JournalStorage(JournalFileBackend(journal))
        else:
            self._storage = optuna.storages.InMemoryStorage()
        existing = 0
        if experiment_dir:
            try:
                study_id = self._storage.get_study_id_from_name(self._study_name)
            except KeyError:
                study_id = None
            if study_id is not None and resume:
                with _names_damaged(journal, "Optuna's journal of this experiment's study"):
                    existing = len(self._storage.get_all_trials(study_id, deepcopy=False))
            elif study_id is not None:
                warnings.warn(f"{os.path.join(os.fspath(experiment_dir), JOURNAL_FILE)} already holds study "
                              f"{self._study_name!r} and resume is False: starting a new study (the old one is "
                              "deleted).", stacklevel=3)
                optuna.delete_study(study_name=self._study_name, storage=self._storage)
        sampler = self._sampler_arg
        if sampler is None or isinstance(sampler, str):
            sampler = make_sampler(sampler or "tpe", _resume_seed(seed, existing))
        self._prepare_space(sampler)
        self._study = optuna.create_study(
            storage=self._storage, sampler=sampler, study_name=self._study_name,
            directions=directions, load_if_exists=resume or self._user_storage is not None,  # type: ignore[arg-type]  # 'minimize'/'maximize'
        )
        # Points run first: on a fresh study they are enqueued now; when resuming
        # an empty study they wait for restore_trials (which knows how many ran).
        self._points_pending = existing == 0 and resume
        if existing == 0 and not resume:
            for t in getattr(self, "_warm", []):  # restore()/restore_from_dir() before fit(): a warm start
                self._study.add_trial(t)
            self._add_points(self._points, self._rewards)

    def _point_params(self, point: Mapping[str, Any]) -> dict[str, Any]:
        """Optuna params of a (nested or flattened, possibly partial) config."""
        if callable(self._space):
            return _flatten_point(point)
        params = {}
        for leaf in self._leaf_list:
            found, value = _lookup(point, leaf)
            if found:
                params[leaf.name] = leaf.pre(value) if leaf.pre is not None else value
        return params

    def _add_points(self, points: list[dict[str, Any]], rewards: list[Any] | None) -> None:
        assert self._study is not None
        self._points_pending = False
        if rewards is None:
            for point in points:
                self._study.enqueue_trial(self._point_params(point))
            return
        for point, reward in zip(points, rewards):
            params = self._point_params(point)
            missing = [n for n in self._distributions if n not in params]
            if missing:
                raise ValueError(f"points_to_evaluate with evaluated_rewards must set every searched "
                                 f"parameter; {point!r} lacks {missing}")
            values = list(reward) if isinstance(reward, (list, tuple)) else [reward]
            ok = all(_as_float(v) is not None for v in values)
            self._study.add_trial(optuna.trial.create_trial(
                state=TrialState.COMPLETE if ok else TrialState.FAIL,
                values=[float(v) for v in values] if ok else None,
                params=params, distributions=dict(self._distributions),
            ))

    # -- suggestions ---------------------------------------------------
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        study = self._study if self._study is not None else self.study
        if self._exhausted:
            return Searcher.FINISHED
        if self._points_pending:
            self._add_points(self._points, self._rewards)
        if callable(self._space):
            ot_trial = study.ask()
            extra = self._space(ot_trial)
            if extra is not None and not isinstance(extra, Mapping):
                study.tell(ot_trial, state=TrialState.FAIL)
                raise TypeError(f"The define-by-run space function must return a dict of constants or None, "
                                f"got {type(extra).__name__}: {extra!r}")
            flat = dict(ot_trial.params)
            if extra:
                flat.update(extra)
            config = _unflatten(flat)
        else:
            ot_trial = study.ask(self._distributions)
            params = ot_trial.params
            config = _copy_containers(self._skeleton)
            for name, path, post in self._posts:
                value = params[name]
                _set(config, path, post(value) if post is not None else value)
        if self._constants:
            config = _deep_merge(_copy_containers(self._constants), config)
        ot_trial.set_user_attr(TRIAL_ID_ATTR, trial_id)
        self._ot_trials[trial_id] = ot_trial
        return config

    # -- results -------------------------------------------------------
    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> None:
        if isinstance(self.metric, list):
            return  # Optuna's intermediate values are single-objective only
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is None:
            return
        step = result.get("training_iteration")
        value = result.get(self.metric) if isinstance(self.metric, str) else None
        if step is None or value is None or isinstance(value, bool):
            return
        try:
            ot_trial.report(float(value), int(step))
        except (TypeError, ValueError):
            return

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None = None, error: bool = False, **info: Any) -> None:
        ot_trial = self._ot_trials.pop(trial_id, None)
        if ot_trial is None or self._study is None:
            return
        if error and info.get("oom"):
            # out of memory: a constraint violation (Optuna >= 5: trial.set_constraint; older: a sampler built with
            # constraints_func=oom_constraints), so the sampler learns to avoid the region. Told COMPLETE with the
            # last values it reported; FAIL when it reported none (or nothing would read the constraint).
            ot_trial.set_user_attr(OOM_ATTR, 1.0)
            values = self._values(result)
            constrained = hasattr(ot_trial, "set_constraint")
            if constrained:
                ot_trial.set_constraint("oom", 1.0)
            if values is not None and (constrained or getattr(self._study.sampler, "_constraints_func", None)):
                self._tell(ot_trial, values if len(values) > 1 else values[0], None)
            else:
                self._tell(ot_trial, None, TrialState.FAIL)
        elif error:
            self._tell(ot_trial, None, TrialState.FAIL)
        elif info.get("pruned"):
            self._tell(ot_trial, None, TrialState.PRUNED)
        else:
            values = self._values(result)
            if values is None:
                self._tell(ot_trial, None, TrialState.FAIL)
            else:
                self._tell(ot_trial, values if len(values) > 1 else values[0], None)

    def _tell(self, ot_trial: Any, values: Any, state: TrialState | None) -> None:
        assert self._study is not None
        try:
            self._study.tell(ot_trial, values, state=state, skip_if_finished=True)
        except RuntimeError as exc:
            # GridSampler/BruteForceSampler call study.stop() once every grid point
            # was tried (the trial is stored before): no more suggestions.
            if "Study.stop" not in str(exc):
                raise
            self._exhausted = True

    def _values(self, result: Mapping[str, Any] | None) -> list[float] | None:
        """The objective values of a final result; None when any is missing or NaN."""
        if result is None or self.metric is None:
            return None
        metrics: list[str] = list(self.metric) if isinstance(self.metric, list) else [str(self.metric)]
        values = []
        for m in metrics:
            v = _as_float(result.get(m))
            if v is None:
                return None
            values.append(v)
        return values

    # -- restore -------------------------------------------------------
    def restore_trials(self, trials: Sequence[Mapping[str, Any]]) -> None:
        """Re-link the study's trials to tuneplat trials after a crash.

        For each tuneplat trial (in creation order):

        * found in the study (by the ``tuneplat_trial_id`` user attribute) and
          still RUNNING there: if the tuneplat trial will be resumed
          (status not TERMINATED/ERROR) the Optuna trial is kept and re-linked,
          so its later results and completion go to it; if it already ended,
          its final state is told now (TERMINATED → COMPLETE with ``result``,
          ERROR → FAIL);
        * not in the study (e.g. in-memory storage, or a journal lost): a
          finished trial is added as a completed/failed trial with its config
          as params (so the sampler learns from it); a trial to be resumed gets
          a new Optuna trial with its config's params, linked to its id.

        Optuna trials left RUNNING that no tuneplat trial claims were suggested
        but never recorded by the tuner: they are marked FAIL (user attribute
        ``tuneplat_orphaned``) and their params enqueued so they are suggested
        again first.
        """
        study = self.study
        by_id: dict[str, Any] = {}
        for frozen in study.get_trials(deepcopy=False):
            tid = frozen.user_attrs.get(TRIAL_ID_ATTR)
            if tid is not None:
                by_id[str(tid)] = frozen
        claimed: set[int] = set()
        for t in trials:
            tid = str(t["trial_id"])
            finished = t.get("status") in _FINISHED_STATUSES
            found = by_id.get(tid)
            if found is not None:
                frozen = found
                claimed.add(frozen.number)
                if frozen.state != TrialState.RUNNING:
                    continue
                trial = optuna.trial.Trial(study, frozen._trial_id)
                if finished:
                    self._ot_trials[tid] = trial
                    self.on_trial_complete(tid, t.get("result"), error=t.get("status") == "ERROR")
                else:
                    self._ot_trials[tid] = trial
                continue
            self._restore_unknown(tid, t, finished)
        known = {str(t["trial_id"]) for t in trials}
        for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            tid = frozen.user_attrs.get(TRIAL_ID_ATTR)
            if frozen.number in claimed or tid is None or str(tid) in known:
                continue
            self._storage.set_trial_user_attr(frozen._trial_id, "tuneplat_orphaned", True)
            study.tell(frozen.number, state=TrialState.FAIL, skip_if_finished=True)
            study.enqueue_trial(dict(frozen.params))
        if self._points_pending:
            # Resuming an empty study: the first len(trials) points already ran.
            # Rewarded points were never run: they are all added again.
            if self._rewards is not None:
                self._add_points(self._points, self._rewards)
            else:
                self._add_points(self._points[len(trials):], None)

    def _restore_unknown(self, tid: str, t: Mapping[str, Any], finished: bool) -> None:
        study = self.study
        config = t.get("config") or {}
        params = self._point_params(config)
        if not callable(self._space):
            params = {k: v for k, v in params.items() if k in self._distributions}
        if finished:
            if callable(self._space) or len(params) != len(self._distributions):
                return  # cannot describe the trial to Optuna
            values = self._values(t.get("result")) if t.get("status") != "ERROR" else None
            try:
                study.add_trial(optuna.trial.create_trial(
                    state=TrialState.COMPLETE if values is not None else TrialState.FAIL,
                    values=values, params=params,
                    distributions={k: self._distributions[k] for k in params},
                    user_attrs={TRIAL_ID_ATTR: tid},
                ))
            except ValueError:
                return  # a param outside its distribution (space changed)
            return
        if not callable(self._space) and len(params) == len(self._distributions):
            try:
                study.add_trial(optuna.trial.create_trial(
                    state=TrialState.RUNNING, params=params, distributions=dict(self._distributions),
                    user_attrs={TRIAL_ID_ATTR: tid},
                ))
            except ValueError:
                pass  # a param outside its distribution: fall back to a fresh trial
            else:
                frozen = study.get_trials(deepcopy=False)[-1]
                self._ot_trials[tid] = optuna.trial.Trial(study, frozen._trial_id)
                return
        # partial config or define-by-run: a new trial with the known params fixed
        study.enqueue_trial(params, user_attrs={TRIAL_ID_ATTR: tid})
        trial = study.ask() if callable(self._space) else study.ask(self._distributions)
        if callable(self._space):
            self._space(trial)
        self._ot_trials[tid] = trial

    # -- save / restore (Ray's Searcher.save/restore/restore_from_dir) --
    def save(self, checkpoint_path: str) -> None:
        """Write the study's finished trials to ``checkpoint_path`` (JSON), to warm-start another search.

        Within an experiment nothing needs saving: the study lives in the
        experiment folder and ``Tuner.restore`` continues it.

        Example:
            >>> searcher.save("./optuna-state.json")  # doctest: +SKIP
            >>> fresh = OptunaSearch(metric="loss", mode="min")  # doctest: +SKIP
            >>> fresh.restore("./optuna-state.json")  # doctest: +SKIP
        """
        import json

        from optuna.distributions import distribution_to_json

        finished = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        trials = []
        for t in self.study.get_trials(deepcopy=False, states=finished):
            trials.append({"state": t.state.name, "values": t.values, "params": t.params,
                           "distributions": {k: distribution_to_json(d) for k, d in t.distributions.items()},
                           "intermediate_values": {str(k): v for k, v in t.intermediate_values.items()},
                           "user_attrs": {k: v for k, v in t.user_attrs.items() if k != TRIAL_ID_ATTR}})
        state = {"format": _SAVE_FORMAT, "metric": self.metric, "mode": self.mode, "trials": trials}
        path = os.fspath(checkpoint_path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, path)

    def restore(self, checkpoint_path: str) -> None:
        """Add the trials :meth:`save` wrote to this searcher's study (a warm start; no pickle is read)."""
        import json

        path = os.fspath(checkpoint_path)
        try:
            with open(path) as f:
                state = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path} is not a file written by OptunaSearch.save() (not JSON: {exc}); Ray's "
                             "pickled searcher-state files cannot be read here: run the search again, or "
                             "restore_from_dir() a tuneplat experiment folder") from None
        if not isinstance(state, dict) or state.get("format") != _SAVE_FORMAT:
            raise ValueError(f"{path} is not a file written by OptunaSearch.save() (format {_SAVE_FORMAT!r})")
        if self.metric is None:
            self.metric = state.get("metric")
        if self.mode is None:
            self.mode = state.get("mode")
        from optuna.distributions import json_to_distribution

        frozen = []
        with _names_damaged(path, "a file written by OptunaSearch.save()"):
            for t in state.get("trials", []):
                frozen.append(optuna.trial.create_trial(
                    state=TrialState[t["state"]], values=t.get("values"), params=t["params"],
                    distributions={k: json_to_distribution(d) for k, d in t["distributions"].items()},
                    intermediate_values={int(k): v for k, v in (t.get("intermediate_values") or {}).items()},
                    user_attrs=t.get("user_attrs") or {}))
        self._add_warm(frozen)

    def restore_from_dir(self, checkpoint_dir: str) -> None:
        """Warm-start from the study of an earlier experiment: its folder (``storage_path/name``).

        Reads that folder's ``optuna_journal.log`` (Optuna's own journal format)
        and adds its finished trials to this searcher's study.
        """
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        folder = os.path.expanduser(os.fspath(checkpoint_dir))
        journal = os.path.join(folder, JOURNAL_FILE)
        if not os.path.isfile(journal):
            raise FileNotFoundError(f"{folder} has no {JOURNAL_FILE}: give the folder of an experiment that ran "
                                    "OptunaSearch (storage_path/name), or a file written by OptunaSearch.save() "
                                    "to restore()")
        with _names_damaged(journal, "Optuna's journal of that experiment's study"):
            old = optuna.load_study(study_name=STUDY_NAME, storage=JournalStorage(JournalFileBackend(journal)))
            done = old.get_trials(deepcopy=True, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))
        trials = []
        for t in done:
            attrs = {k: v for k, v in t.user_attrs.items() if k != TRIAL_ID_ATTR}
            trials.append(optuna.trial.create_trial(
                state=t.state, values=t.values, params=t.params, distributions=t.distributions,
                intermediate_values=t.intermediate_values, user_attrs=attrs))
        if self.metric is None and self.mode is None and trials:
            logger.info("tuneplat: OptunaSearch.restore_from_dir(%s): metric and mode come from the Tuner", folder)
        self._add_warm(trials)

    def _add_warm(self, trials: list[Any]) -> None:
        if self._study is not None:
            for t in trials:
                self._study.add_trial(t)
        else:  # added when the study is made (set_search_properties, at fit())
            self._warm = [*getattr(self, "_warm", []), *trials]

    def close(self) -> None:
        self._ot_trials.clear()


# --------------------------------------------------------------------------
# pruner adapter
# --------------------------------------------------------------------------
class OptunaPrunerScheduler(TrialScheduler):
    """Runs an Optuna pruner (``MedianPruner``, ``HyperbandPruner``, ...) as a trial scheduler.

    The scheduler keeps its **own** in-memory Optuna study (independent of
    any ``OptunaSearch``) with one Optuna trial per tuneplat trial: every
    result's metric is reported at step ``result[time_attr]`` and the pruner's
    ``prune(study, trial)`` answer becomes ``Decision.STOP`` (True) or
    ``Decision.CONTINUE``. Completed trials are told COMPLETE with their last
    metric value (pruners such as ``MedianPruner`` compare with completed
    trials), stopped ones PRUNED, failed ones FAIL. A result without the
    metric or ``time_attr`` is ignored (CONTINUE); a NaN/non-numeric metric is
    reported as NaN, which Optuna's pruners prune.

    When the tuner ends a trial because of a STOP from this scheduler it
    should call ``searcher.on_trial_complete(..., pruned=True)``.

    Args:
        pruner: An ``optuna.pruners.BasePruner``.
        metric: Metric (single objective) or from ``TuneConfig``.
        mode: ``"min"``/``"max"`` or from ``TuneConfig``.
        time_attr: Result key used as the Optuna step (``training_iteration``).

    Example:
        >>> import optuna
        >>> s = OptunaPrunerScheduler(optuna.pruners.MedianPruner(), metric="loss", mode="min")
    """

    name = "optuna_pruner"

    def __init__(self, pruner: optuna.pruners.BasePruner, metric: str | None = None, mode: str | None = None,
                 time_attr: str = "training_iteration") -> None:
        if not isinstance(pruner, optuna.pruners.BasePruner):
            raise TypeError(f"`pruner` must be an optuna.pruners.BasePruner, got {pruner!r}")
        if isinstance(metric, (list, tuple)):
            raise ValueError("OptunaPrunerScheduler is single-objective: Optuna pruners do not "
                             "support multi-objective studies. Pass one metric.")
        super().__init__(metric, mode)
        self.pruner = pruner
        self.time_attr = time_attr
        self._study: optuna.Study | None = None
        self._trials: dict[str, optuna.trial.Trial] = {}
        self._stopped: set[str] = set()

    @property
    def study(self) -> optuna.Study:
        """The scheduler's own in-memory study (created once the mode is known)."""
        if self._study is None:
            if self.mode not in ("min", "max"):
                raise ValueError("OptunaPrunerScheduler needs a metric and a mode: pass them to the "
                                 "scheduler or to TuneConfig(metric=..., mode=...).")
            self._study = optuna.create_study(
                direction="minimize" if self.mode == "min" else "maximize",
                pruner=self.pruner, sampler=optuna.samplers.RandomSampler(seed=0),
            )
        return self._study

    def set_objective(self, metric: str | list[str] | None, mode: str | list[str] | None) -> None:
        if isinstance(metric, (list, tuple)):
            raise ValueError("OptunaPrunerScheduler is single-objective: Optuna pruners do not "
                             "support multi-objective studies.")
        super().set_objective(metric, mode)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "pruner": type(self.pruner).__name__, "time_attr": self.time_attr}

    def on_trial_add(self, trial_id: str, config: Mapping[str, Any]) -> None:
        super().on_trial_add(trial_id, config)
        if trial_id not in self._trials:
            trial = self.study.ask()
            trial.set_user_attr(TRIAL_ID_ATTR, trial_id)
            self._trials[trial_id] = trial

    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        self._require_known(trial_id)
        if trial_id in self._stopped:
            return Decision.STOP
        trial = self._trials[trial_id]
        step = result.get(self.time_attr)
        if not isinstance(self.metric, str) or self.metric not in result or step is None or isinstance(step, bool):
            return Decision.CONTINUE
        try:
            step_int = int(step)
        except (TypeError, ValueError):
            return Decision.CONTINUE
        value = _as_float(result.get(self.metric))
        trial.report(math.nan if value is None else value, step_int)
        if trial.should_prune():
            self._stopped.add(trial_id)
            shown = "NaN" if value is None else f"{value:.4g}"
            return self._record_stop(
                trial_id, f"pruned by {type(self.pruner).__name__} at {self.time_attr}={step_int}: "
                          f"{self.metric}={shown}")
        return Decision.CONTINUE

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None) -> None:
        trial = self._trials.get(trial_id)
        if trial is None:
            return
        if trial_id in self._stopped:
            self.study.tell(trial, state=TrialState.PRUNED, skip_if_finished=True)
            return
        value = _as_float(result.get(self.metric)) if result is not None and self.metric else None
        if value is None:
            self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        else:
            self.study.tell(trial, value, skip_if_finished=True)

    def on_trial_error(self, trial_id: str) -> None:
        trial = self._trials.get(trial_id)
        if trial is not None:
            self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)


@contextlib.contextmanager
def _names_damaged(path: str, what: str) -> Iterator[None]:
    """Errors reading ``path`` (damaged, truncated, edited) become a ValueError naming the file and what it is."""
    try:
        yield
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, AssertionError) as exc:
        if isinstance(exc, OSError) and not isinstance(exc, (UnicodeError,)) and exc.filename:
            raise  # (an OSError already names its file)
        raise ValueError(f"{path}: cannot read {what}: it is damaged ({type(exc).__name__}: {exc}). Restore it "
                         "from a backup, or move it aside (the search then starts without that state)") from exc
