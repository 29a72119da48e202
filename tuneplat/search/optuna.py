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

import copy
import logging
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import TrialState

from . import _optuna_samplers, _optuna_space
from ._optuna_pruner import OptunaPrunerScheduler
from ._optuna_samplers import _SAMPLER_NAMES, OOM_ATTR, _resume_seed, make_sampler, oom_constraints
from ._optuna_space import (
    _copy_containers,
    _deep_merge,
    _flatten_point,
    _has_search_leaves,
    _Leaf,
    _leaves,
    _lookup,
    _set,
    _unflatten,
    convert_space,
)
from ._optuna_state import (
    JOURNAL_FILE,
    STUDY_NAME,
    TRIAL_ID_ATTR,
    _names_damaged,
    journal_storage,
    journal_trials,
    read_saved,
    saved_trials,
    write_saved,
)
from ._pareto import _as_float
from ._searcher import Searcher
from ._space import _strip

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

logger = logging.getLogger("tuneplat")

_FINISHED_STATUSES = ("TERMINATED", "ERROR")

#: private names this module defined before they moved: the saved Tuner (``tuner.pkl``, cloudpickle) of an
#: experiment run then refers to them here (a searcher's ``_Leaf`` objects and their value mappings)
_MOVED = {**dict.fromkeys(("_PRIMITIVES", "_categorical", "_convert_leaf", "_k_times_q", "_param_name", "_q_grid",
                            "_refuse", "_snap"), _optuna_space), "_require": _optuna_samplers}


def __getattr__(name: str) -> Any:
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)


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
            self._storage, journal = journal_storage(experiment_dir)
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
        write_saved(self.study, self.metric, self.mode, checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        """Add the trials :meth:`save` wrote to this searcher's study (a warm start; no pickle is read)."""
        path = os.fspath(checkpoint_path)
        state = read_saved(path)
        if self.metric is None:
            self.metric = state.get("metric")
        if self.mode is None:
            self.mode = state.get("mode")
        self._add_warm(saved_trials(path, state))

    def restore_from_dir(self, checkpoint_dir: str) -> None:
        """Warm-start from the study of an earlier experiment: its folder (``storage_path/name``).

        Reads that folder's ``optuna_journal.log`` (Optuna's own journal format)
        and adds its finished trials to this searcher's study.
        """
        folder = os.path.expanduser(os.fspath(checkpoint_dir))
        trials = journal_trials(folder)
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
