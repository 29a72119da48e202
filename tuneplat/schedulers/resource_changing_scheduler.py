"""``ray.tune.schedulers.resource_changing_scheduler``: change a live trial's resources while the experiment runs.

:class:`ResourceChangingScheduler` wraps another scheduler. On each result the
wrapped scheduler decides first; when it says CONTINUE, the
``resources_allocation_function`` may return new resources for the trial (a
:class:`~tuneplat.execution.placement_groups.PlacementGroupFactory`). When they
differ from the trial's, the trial is paused (its latest checkpoint is its
state) and queued again with the new resources: the tuner journals the change
(a ``trial_resources`` event, so a restore and ``tuneplat status`` see it) and
starts the trial's next attempt from that checkpoint on room of the new size.
Inside the trial ``tune.get_context().get_trial_resources()`` returns them
(``head_cpus``: the CPUs its rank holds, and its threads use).

A Train trainer's trial (or one of several ranks) has Ray Train's factory: an empty head
bundle and one bundle per rank. New bundles restart its group from the latest checkpoint
with one rank per bundle (``num_workers = len(bundles)``, each rank ``bundles[-1]``, as
Ray's ``ScalingConfig.from_placement_group_factory``): ``DistributeResources(add_bundles=True)``
adds and removes ranks.

The allocation function is called as Ray calls it,
``fn(tune_controller, trial, result, scheduler)``: ``tune_controller`` is a
read-only view with Ray's ``get_live_trials()``, ``get_trials()`` and
``_resource_updater.get_num_cpus()``/``get_num_gpus()`` (the cluster's total);
``trial`` is the tuner's trial (``trial_id``, ``config``, ``last_result``,
``placement_group_factory``). :class:`DistributeResources` (the default) and
:class:`DistributeResourcesToTopJob` are Ray's two allocation functions.

Example:
    >>> from tuneplat.tune.schedulers import ASHAScheduler, ResourceChangingScheduler
    >>> from tuneplat.tune.schedulers.resource_changing_scheduler import DistributeResources
    >>> scheduler = ResourceChangingScheduler(base_scheduler=ASHAScheduler(max_t=16),
    ...                                       resources_allocation_function=DistributeResources())
    >>> scheduler.describe()["scheduler"]
    'resource_changing'
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from schedulers import Decision, FIFOScheduler, Launch, Resume, Stop, TrialScheduler

from ..core._trial import Trial
from ..core._view import TunerView
from ..execution.placement_groups import PlacementGroupFactory, resource_dict_to_pg_factory

__all__ = ["DistributeResources", "DistributeResourcesToTopJob", "ResourceChangingScheduler", "TuneControllerView"]

logger = logging.getLogger("tuneplat")

Bundles = list[dict[str, float]]
AllocationFunction = Callable[[Any, Trial, dict[str, Any], "ResourceChangingScheduler"], Any]


class _ResourceUpdater:
    """Ray's ``TuneController._resource_updater``: the cluster's total CPUs and GPUs."""

    __slots__ = ("_view",)

    def __init__(self, view: TunerView) -> None:
        self._view = view

    def _total(self, name: str) -> float | int:
        value = float(self._view.cluster_resources().get(name, 0.0))
        return int(value) if value.is_integer() else value

    def get_num_cpus(self) -> float | int:
        """The cluster's CPUs, busy or free."""
        return self._total("CPU")

    def get_num_gpus(self) -> float | int:
        """The cluster's GPUs, busy or free."""
        return self._total("GPU")


class TuneControllerView:
    """What an allocation function gets as ``tune_controller``: Ray's read-only calls on the running experiment.

    Trials are created as room frees up (Ray creates its pending trials ahead), so
    ``get_live_trials()`` holds the trials that exist and have not ended: running,
    paused and queued ones.
    """

    __slots__ = ("_resource_updater", "_view")

    def __init__(self, view: TunerView) -> None:
        self._view = view
        self._resource_updater = _ResourceUpdater(view)

    def get_trials(self) -> list[Trial]:
        """Every trial of the experiment, in creation order."""
        return list(self._view.trials)

    def get_live_trials(self) -> list[Trial]:
        """The trials that have not ended (running, paused or waiting to run)."""
        return [t for t in self._view.trials if not t.status.is_finished()]

    def get_trial(self, trial_id: str) -> Trial | None:
        return self._view.by_id.get(trial_id)


def _is_empty(bundle: Mapping[str, float]) -> bool:
    return not (bundle.get("CPU", 0) or bundle.get("GPU", 0))


def _total(bundles: Sequence[Mapping[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            out[k] = out.get(k, 0.0) + v
    return out


class DistributeResources:
    """Ray's default allocation function: share the cluster's CPUs and GPUs evenly among the live trials.

    Each trial keeps at least what it started with (``scheduler.base_trial_resources``);
    the rest of the cluster (less ``reserve_resources``) is handed out in units of
    ``increase_by`` (default: one CPU, or one GPU when the trials use GPUs), as evenly
    as the units allow; a trial is given what is free now, up to its even share, and
    gives back what is missing when more is used than the cluster has.

    Args:
        add_bundles: add the units as new bundles (True) or add them to the trial's one bundle (False).
        increase_by: the unit a trial grows by (e.g. ``{"CPU": 2}``); default one CPU (one GPU if it has GPUs).
        increase_by_times: the most units a trial gets (< 1: no limit); used with ``increase_by``.
        reserve_resources: resources never handed out (e.g. ``{"CPU": 1}``).

    Raises (when called):
        ValueError: the base resources are not a PlacementGroupFactory, or have several bundles with
            ``add_bundles=False``.
    """

    def __init__(self, add_bundles: bool = False, increase_by: dict[str, float] | None = None,
                 increase_by_times: int = -1, reserve_resources: dict[str, float] | None = None) -> None:
        self.add_bundles = add_bundles
        self.increase_by = increase_by or {}
        self.increase_by_times = increase_by_times
        self.reserve_resources = reserve_resources or {}

    # -- the steps, as methods a subclass may replace (Ray's structure)
    def _validate(self, base_trial_resource: Any, result: Mapping[str, Any]) -> bool:
        """False: keep the trial's resources (its first result); raise when the base resources do not fit."""
        if not isinstance(base_trial_resource, PlacementGroupFactory):
            raise ValueError(f"{type(self).__name__} only supports PlacementGroupFactories (the trials' base "
                             f"resources are {base_trial_resource!r}).")
        if not self.add_bundles and len(base_trial_resource.bundles) > 1:
            raise ValueError("If `add_bundles` is False, the number of bundles in the trials' resources must be 1 "
                             f"(got {len(base_trial_resource.bundles)}: {base_trial_resource}).")
        return result.get("training_iteration", 0) >= 1

    def _get_total_available_resources(self, tune_controller: Any) -> tuple[float, float]:
        """The cluster's CPUs and GPUs in total (busy or free), less ``reserve_resources``."""
        updater = tune_controller._resource_updater
        return (updater.get_num_cpus() - self.reserve_resources.get("CPU", 0),
                updater.get_num_gpus() - self.reserve_resources.get("GPU", 0))

    def _get_used_cpus_and_gpus(self, t: Trial) -> tuple[float, float]:
        """What a trial holds now."""
        req = t.placement_group_factory.required_resources
        return req.get("CPU", 0), req.get("GPU", 0)

    def _unit(self, base: PlacementGroupFactory) -> dict[str, float]:
        if self.increase_by:
            unit = dict(self.increase_by)
            if _is_empty(unit) or unit.get("CPU", 0) < 0 or unit.get("GPU", 0) < 0:
                raise ValueError(f"The value of `increase_by` is {self.increase_by!r}, but must hold CPU and/or "
                                 "GPU amounts >= 0, not all 0.")
            return unit
        if self.add_bundles:
            return dict(base.bundles[-1])
        return {"GPU": 1} if base.bundles[0].get("GPU", 0) else {"CPU": 1}

    def _units_in(self, unit: Mapping[str, float], cpus: float, gpus: float) -> int:
        """How many ``unit``s ``cpus`` and ``gpus`` hold (negative when they are negative)."""
        uc, ug = unit.get("CPU", 0), unit.get("GPU", 0)
        if uc and ug:
            return int(min(cpus // uc, gpus // ug))
        return int(gpus // ug) if ug else int(cpus // uc)

    def _cap(self, even_share: int) -> int:
        """The most units a trial may hold: its even share, and ``increase_by_times`` (<= 0: no cap)."""
        if even_share > 0 and self.increase_by_times > 0:
            return min(even_share, self.increase_by_times)
        return self.increase_by_times if self.increase_by_times > 0 else even_share

    def _added(self, bundles: Bundles, base: Bundles) -> Bundles:
        """What ``bundles`` hold beyond ``base``."""
        if self.add_bundles:
            return [dict(b) for b in bundles[len(base):]]
        have, was = (bundles or [{}])[0], (base or [{}])[0]
        return [{"CPU": have.get("CPU", 0) - was.get("CPU", 0), "GPU": have.get("GPU", 0) - was.get("GPU", 0)}]

    def _grow(self, added: Bundles, unit: Mapping[str, float], units: int, cap: int) -> Bundles:
        """``added`` with ``units`` more units (fewer when negative), at most ``cap`` units (> 0)."""
        if units < 0:
            if self.add_bundles:
                return added[:units]
            a = (added or [{}])[0]
            return [{"CPU": max(a.get("CPU", 0) + unit.get("CPU", 0) * units, 0),
                     "GPU": max(a.get("GPU", 0) + unit.get("GPU", 0) * units, 0)}]
        if units == 0:
            return added
        if self.add_bundles:
            grown = [b for b in added if not _is_empty(b)] + ([dict(unit)] if not _is_empty(unit) else []) * units
            return grown[:cap] if cap > 0 else grown
        a = (added or [{}])[0]
        cpus = a.get("CPU", 0) + unit.get("CPU", 0) * units
        gpus = a.get("GPU", 0) + unit.get("GPU", 0) * units
        if cap > 0:
            cpus, gpus = min(cpus, unit.get("CPU", 0) * cap), min(gpus, unit.get("GPU", 0) * cap)
        return [{"CPU": cpus, "GPU": gpus}]

    def _even_share(self, n_trials: int, base: Bundles, unit: Mapping[str, float], total_cpus: float,
                    total_gpus: float) -> int:
        """Units the first trial gets when what the cluster has beyond every trial's base is dealt out in turn."""
        base_total = _total(base)
        cpus = total_cpus - base_total.get("CPU", 0) * n_trials
        gpus = total_gpus - base_total.get("GPU", 0) * n_trials
        uc, ug = unit.get("CPU", 0), unit.get("GPU", 0)
        if n_trials <= 0 or cpus < uc or gpus < ug:
            return 0
        units = self._units_in(unit, cpus, gpus)
        share = math.ceil(units / n_trials)
        return min(share, self.increase_by_times) if self.increase_by_times > 0 else share

    def _get_new_added_bundles(self, trial: Trial, all_trials: list[Trial], base_bundles: Bundles,
                               increase_by: dict[str, float], total_available_cpus: float,
                               total_available_gpus: float, used_cpus: float, used_gpus: float) -> Bundles:
        """What the trial holds beyond its base resources after this call."""
        share = self._even_share(len(all_trials), base_bundles, increase_by, total_available_cpus,
                                 total_available_gpus)
        free = self._units_in(increase_by, total_available_cpus - used_cpus, total_available_gpus - used_gpus)
        added = self._added(trial.placement_group_factory.bundles, base_bundles)
        return self._grow(added, increase_by, free, self._cap(share))

    def __call__(self, tune_controller: Any, trial: Trial, result: dict[str, Any],
                 scheduler: ResourceChangingScheduler) -> PlacementGroupFactory | None:
        """The trial's new resources (None: keep them); the scheduler skips a value equal to the trial's."""
        base = scheduler.base_trial_resources
        if not self._validate(base_trial_resource=base, result=result):
            return None
        if base is None:
            base = PlacementGroupFactory([{"CPU": 1, "GPU": 0}])
        unit = self._unit(base)
        base_bundles = base.bundles
        total_cpus, total_gpus = self._get_total_available_resources(tune_controller)
        live = tune_controller.get_live_trials()
        used = [self._get_used_cpus_and_gpus(t) for t in live]
        added = self._get_new_added_bundles(trial, live, base_bundles, unit, total_cpus, total_gpus,
                                            sum(u[0] for u in used), sum(u[1] for u in used))
        if self.add_bundles:
            bundles = [b for b in base_bundles if not _is_empty(b)] + [b for b in added if not _is_empty(b)]
        else:
            first, more = (base_bundles or [{}])[0], (added or [{}])[0]
            bundles = [{"CPU": first.get("CPU", 0) + more.get("CPU", 0),
                        "GPU": first.get("GPU", 0) + more.get("GPU", 0)}]
        head: Bundles = [{}] if base.head_bundle_is_empty else []
        return PlacementGroupFactory(head + bundles, base.strategy, *base._args, **base._kwargs)


class DistributeResourcesToTopJob(DistributeResources):
    """Ray's allocation function that gives what is free to the best trial (by ``metric``/``mode``).

    Trials keep what they were given (nobody is shrunk unless more is used than the
    cluster has); the best trial that can still grow takes the free units.

    Args:
        add_bundles, increase_by, increase_by_times, reserve_resources: as :class:`DistributeResources`.
        metric: the metric that ranks trials (default: the base scheduler's, then the TuneConfig's).
        mode: ``"min"`` or ``"max"`` (default: as ``metric``).
    """

    def __init__(self, add_bundles: bool = False, increase_by: dict[str, float] | None = None,
                 increase_by_times: int = -1, reserve_resources: dict[str, float] | None = None,
                 metric: str | None = None, mode: str | None = None) -> None:
        super().__init__(add_bundles, increase_by, increase_by_times, reserve_resources)
        self.metric = metric
        self.mode = mode

    @property
    def _metric_op(self) -> float:
        if self.mode not in ("min", "max"):
            raise ValueError(f"The value of `mode` is {self.mode!r}, but must be 'min' or 'max'.")
        return 1.0 if self.mode == "max" else -1.0

    def _below_limit(self, bundles: Bundles, base: Bundles) -> bool:
        """Whether a trial holding ``bundles`` may still grow (``increase_by_times``)."""
        if self.increase_by_times > 0:
            max_cpus = self.increase_by.get("CPU", 0) * self.increase_by_times
            max_gpus = self.increase_by.get("GPU", 0) * self.increase_by_times
        else:
            max_cpus = max_gpus = math.inf
        added = _total(self._added(bundles, base) if base else bundles)
        return added.get("CPU", -math.inf) < max_cpus or added.get("GPU", -math.inf) < max_gpus

    def _get_new_added_bundles(self, trial: Trial, all_trials: list[Trial], base_bundles: Bundles,
                               increase_by: dict[str, float], total_available_cpus: float,
                               total_available_gpus: float, used_cpus: float, used_gpus: float) -> Bundles:
        if self.metric is None:
            raise ValueError("DistributeResourcesToTopJob needs a metric: set it in DistributeResourcesToTopJob("
                             "metric=...), the base scheduler or tune.TuneConfig(metric=...).")
        op, metric = self._metric_op, self.metric
        ranked = sorted(all_trials, key=lambda t: -op * t.last_result.get(metric, math.inf))
        free = self._units_in(increase_by, total_available_cpus - used_cpus, total_available_gpus - used_gpus)
        added = self._added(trial.placement_group_factory.bundles, base_bundles)
        best = next((t for t in ranked if self._below_limit(t.placement_group_factory.bundles, base_bundles)),
                    ranked[0])
        if trial.trial_id != best.trial_id and free >= 0:
            return added
        return self._grow(added, increase_by, free, self._cap(-1))


_DistributeResourcesDefault = DistributeResources(add_bundles=False)
_DistributeResourcesDistributedDefault = DistributeResources(add_bundles=True)


class ResourceChangingScheduler(TrialScheduler):
    """Ray's ``ResourceChangingScheduler``: changes a live trial's resources (see the module docstring).

    The trainable must save a checkpoint at each report (a resized trial goes on from its
    latest one) and read its resources with ``tune.get_context().get_trial_resources()``.
    A function trainable or ``tune.Trainable`` class of one rank holds the sum of the bundles
    in its one process (as in Ray). A Train trainer's trial (``Tuner(TorchTrainer(...))``,
    ``XGBoostTrainer``, ...) or a trial of several ranks (``ScalingConfig(num_workers=n)``)
    has Ray Train's factory, an empty head bundle and one bundle per rank, and is read back
    as Ray's ``ScalingConfig.from_placement_group_factory`` reads it: new bundles restart
    the group from its latest checkpoint with one rank per bundle
    (``DistributeResources(add_bundles=True)`` adds ranks; with ``add_bundles=False`` a
    one-rank trainer's rank grows). Elastic groups (``num_workers=(min, max)``) are refused:
    both would decide the ranks.

    Args:
        base_scheduler: the scheduler that decides on results (default: FIFO).
        resources_allocation_function: ``fn(tune_controller, trial, result, scheduler)`` returning a
            ``PlacementGroupFactory`` (or a dict like ``{"CPU": 2}``), or None to keep the trial's
            resources; called on each result the base scheduler lets continue. None: never change them.
            Default: :class:`DistributeResources`.

    Raises:
        TypeError: ``base_scheduler`` is not a scheduler or the function is not callable; at a result, the
            function returned something else than the types above (that trial fails, naming it).

    Example:
        >>> from tuneplat.tune.schedulers import ASHAScheduler, ResourceChangingScheduler
        >>> rcs = ResourceChangingScheduler(ASHAScheduler(max_t=16, grace_period=1))
        >>> rcs.base_trial_resources is None  # the first trial's, once the experiment runs
        True
    """

    name = "resource_changing"

    def __init__(self, base_scheduler: TrialScheduler | None = None,
                 resources_allocation_function: AllocationFunction | None = _DistributeResourcesDefault) -> None:
        super().__init__()
        if base_scheduler is not None and not isinstance(base_scheduler, TrialScheduler):
            raise TypeError(f"The value of `base_scheduler` is {base_scheduler!r}, but must be a scheduler such as "
                            "ASHAScheduler(...) (or None for FIFO).")
        if resources_allocation_function is None:
            warnings.warn("`resources_allocation_function` is None. No resource requirements will be changed at "
                          "any time. Pass a correctly defined function to enable functionality.", stacklevel=2)
        elif not callable(resources_allocation_function):
            raise TypeError(f"The value of `resources_allocation_function` is {resources_allocation_function!r}, "
                            "but must be a function fn(tune_controller, trial, result, scheduler) or None.")
        self._resources_allocation_function = resources_allocation_function
        self._base_scheduler: TrialScheduler = base_scheduler or FIFOScheduler()
        self._base_trial_resources: PlacementGroupFactory | None = None
        self._reallocated_trial_ids: set[str] = set()
        self._controller: TuneControllerView | None = None
        self._pause_reasons: dict[str, str] = {}
        self._view: TunerView | None = None
        self._base_settled = False  # the first trial's base was read after it started (its own shape known)

    # -- what the tuner reads of the base scheduler
    @property
    def base_scheduler(self) -> TrialScheduler:
        return self._base_scheduler

    @property
    def base_trial_resources(self) -> PlacementGroupFactory | None:
        """The resources the first trial was configured with (every trial keeps at least these)."""
        return self._base_trial_resources

    @property
    def max_t(self) -> Any:
        return getattr(self._base_scheduler, "max_t", None)

    @property
    def time_attr(self) -> Any:
        return getattr(self._base_scheduler, "time_attr", None)

    def describe(self) -> dict[str, Any]:
        fn = self._resources_allocation_function
        return {"scheduler": self.name, "metric": self.metric, "mode": self.mode,
                "base_scheduler": self._base_scheduler.describe(),
                "resources_allocation_function": None if fn is None else getattr(
                    fn, "__qualname__", type(fn).__name__)}

    def requires_objective(self) -> bool:
        return self._base_scheduler.requires_objective()

    def supports_multi_objective(self) -> bool:
        return self._base_scheduler.supports_multi_objective()

    def set_objective(self, metric: str | list[str] | None, mode: str | list[str] | None) -> None:
        self._base_scheduler.set_objective(metric, mode)
        self.metric, self.mode = self._base_scheduler.metric, self._base_scheduler.mode

    def stop_reason(self, trial_id: str) -> str | None:
        return self._base_scheduler.stop_reason(trial_id)

    def pause_reason(self, trial_id: str) -> str | None:
        """Why the trial was paused last (its new resources), for the journal's decision."""
        return self._pause_reasons.get(trial_id)

    def bind_tuner(self, view: TunerView) -> None:
        """The tuner hands its read-only view once the experiment is set up (before any new result).

        Raises:
            ValueError: the trials are elastic groups, or have several ranks and the allocation function is a
                :class:`DistributeResources` with ``add_bundles=False`` (which grows one bundle only).
        """
        if view.min_world_size is not None:
            raise ValueError(
                f"ResourceChangingScheduler and an elastic ScalingConfig(num_workers=({view.min_world_size}, "
                f"{view.world_size})) would both decide how many ranks a trial runs. Use one of them: "
                "ScalingConfig(num_workers=n) with ResourceChangingScheduler(resources_allocation_function="
                "DistributeResources(add_bundles=True)) to give trials ranks as the scheduler decides (from their "
                "checkpoints), or the elastic group alone to grow and shrink with the cluster (docs/elastic.md).")
        fn = self._resources_allocation_function
        if isinstance(fn, DistributeResources) and not fn.add_bundles and view.world_size > 1:
            raise ValueError(
                f"ResourceChangingScheduler: {type(fn).__name__}(add_bundles=False) (the default) grows a trial's "
                f"one bundle, and this experiment's trials have {view.world_size} ranks, one bundle each "
                f"(ScalingConfig(num_workers={view.world_size})). Pass resources_allocation_function="
                f"{type(fn).__name__}(add_bundles=True) to add or remove ranks, or use num_workers=1 to grow the "
                "resources of one rank.")
        self._view = view
        self._controller = TuneControllerView(view)
        if self._base_trial_resources is None and view.trials:  # (a restore: the first trial's configured ones)
            self._base_trial_resources = _configured(view.trials[0])

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_view"] = state["_controller"] = None  # (the running tuner's view: bound again by the next run)
        return state

    # -- events
    def on_trial_add(self, trial_id: str, config: Mapping[str, Any]) -> None:
        super().on_trial_add(trial_id, config)
        if self._base_trial_resources is None and self._view is not None:
            trial = self._view.by_id.get(trial_id)
            if trial is not None:
                self._base_trial_resources = _configured(trial)
        self._base_scheduler.on_trial_add(trial_id, config)

    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        decision = self._base_scheduler.on_trial_result(trial_id, result)
        if decision is not Decision.CONTINUE or self._view is None or self._controller is None:
            return decision  # (before bind_tuner: a restore replays past results, already decided)
        trial = self._view.by_id.get(trial_id)
        if trial is None:
            return decision
        self._check_base(trial)
        new = self.reallocate_trial_resources_if_needed(self._controller, trial, dict(result))
        if new is None:
            return decision
        self._reallocated_trial_ids.add(trial_id)
        fn = self._resources_allocation_function
        per_rank = trial.bundle_per_rank
        why = (f"ResourceChangingScheduler: {getattr(fn, '__qualname__', type(fn).__name__)} gave "
               f"{_describe(new, per_rank)} (had {_describe(trial.placement_group_factory, per_rank)})")
        self._pause_reasons[trial_id] = why
        head: Bundles = [{}] if new.head_bundle_is_empty else []  # (Ray's empty head bundle: part of its equality)
        self._actions.append(Resume(trial_id, resources={"bundles": head + new.bundles, "strategy": new.strategy,
                                                         "reason": why}))
        logger.info("tuneplat: trial %s pauses to restart with %s", trial_id, new)
        return Decision.PAUSE

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None) -> None:
        self._base_scheduler.on_trial_complete(trial_id, result)

    def on_trial_error(self, trial_id: str) -> None:
        self._base_scheduler.on_trial_error(trial_id)

    def on_search_finished(self) -> None:
        self._base_scheduler.on_search_finished()

    def pop_actions(self) -> list[Resume | Launch | Stop]:
        """The base scheduler's actions, then the resumes (with new resources) of the trials paused here."""
        mine, self._actions = self._actions, []
        return self._base_scheduler.pop_actions() + mine

    def debug_string(self) -> str:
        return f"(ResourceChangingScheduler) {self._base_scheduler.name}"

    # -- Ray's helpers
    def reallocate_trial_resources_if_needed(self, tune_controller: Any, trial: Trial,
                                             result: dict[str, Any]) -> PlacementGroupFactory | None:
        """The allocation function's new resources for ``trial`` when they differ from its own, else None.

        Raises:
            TypeError: the function returned something other than a PlacementGroupFactory, a dict or None.
        """
        fn = self._resources_allocation_function
        if fn is None:
            return None
        for attr, value in (("metric", self._base_scheduler.metric), ("mode", self._base_scheduler.mode)):
            if not getattr(fn, attr, None) and value is not None:
                try:
                    setattr(fn, attr, value)
                except AttributeError:  # (a builtin or a frozen object: it does without)
                    pass
        try:
            new = fn(tune_controller, trial, result, self)
        except Exception as exc:  # noqa: BLE001 - the function's failure fails this trial, not the experiment
            raise TypeError(f"ResourceChangingScheduler: resources_allocation_function "
                            f"{getattr(fn, '__qualname__', type(fn).__name__)!r} raised {type(exc).__name__}: {exc} "
                            f"for trial {trial.trial_id} (which has {trial.placement_group_factory})") from exc
        if new is None:
            return None
        if isinstance(new, Mapping) and not isinstance(new, PlacementGroupFactory):
            try:
                new = resource_dict_to_pg_factory(new)
            except (TypeError, ValueError) as exc:
                raise TypeError(self._bad_return(trial, new, f" ({exc})")) from None
        if not isinstance(new, PlacementGroupFactory):
            raise TypeError(self._bad_return(trial, new, ""))
        if new == trial.placement_group_factory:
            return None
        return new

    def _check_base(self, trial: Trial) -> None:
        """Ray's rule: every trial starts with the first trial's resources (a trial of its own shape, from
        ``with_resources(fn, resources_fn)`` or a searched ScalingConfig, is known once it started).

        Raises:
            TypeError: the trial was configured with other resources than the first trial (that trial fails).
        """
        first = self._view.trials[0] if self._view is not None and self._view.trials else None
        if first is not None and first.attempts and not getattr(self, "_base_settled", False):
            self._base_trial_resources = _configured(first)  # (its own shape is known now that it started)
            self._base_settled = True
        base = self._base_trial_resources
        if base is not None and _configured(trial) != base:
            raise TypeError(f"ResourceChangingScheduler doesn't support trials with varying base resources (as in "
                            f"Ray). First trial had {base}, trial {trial.trial_id} has {_configured(trial)}: give "
                            "every trial the same resources (one with_resources() value or ScalingConfig).")

    def _bad_return(self, trial: Trial, value: Any, detail: str) -> str:
        fn = self._resources_allocation_function
        return (f"ResourceChangingScheduler: resources_allocation_function "
                f"{getattr(fn, '__qualname__', fn)!r} returned {value!r}{detail} for trial {trial.trial_id} "
                f"(which has {trial.placement_group_factory}); it must return a PlacementGroupFactory([{{'CPU': 2}}]), "
                "a dict like {'CPU': 2}, or None to keep the trial's resources")


def _configured(trial: Trial) -> PlacementGroupFactory:
    """A trial's resources as configured (before any change): one bundle, or Ray Train's trainer form (an empty
    head bundle and one bundle per rank) for a trainer's trial or one of several ranks."""
    base = {k: v for k, v in (trial.base_resources or {"CPU": 1.0}).items() if not k.startswith("GPU_")}
    base = base if any(base.values()) else {"CPU": 1.0}
    if trial.bundle_per_rank:
        return PlacementGroupFactory([{}] + [base] * trial.configured_ranks, trial.placement_strategy)
    return PlacementGroupFactory([base])


def _describe(pgf: PlacementGroupFactory, per_rank: bool) -> str:
    """``{CPU: 3}``, or ``2 ranks of {CPU: 1}`` for a trial of one bundle per rank."""
    if not per_rank:
        return _spell(pgf.required_resources)
    bundles = pgf.bundles
    if all(b == bundles[-1] for b in bundles):
        return f"{len(bundles)} rank{'s' if len(bundles) != 1 else ''} of {_spell(bundles[-1])}"
    return " + ".join(_spell(b) for b in bundles)


def _spell(resources: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in resources.items()) + "}"
