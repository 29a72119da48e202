"""What each trial asks of the cluster: its *shape*, ``(resources per rank, ranks)``.

The experiment's shape comes from its ``ScalingConfig``; a trial may have its own
(``tune.with_resources(trainable, fn)``, a ScalingConfig with search domains),
checked once per distinct shape against what the cluster could ever give; and
``GPU_memory="auto"`` sizes a trial's GPU memory from what its shape measured
(``core/_gpu_auto.py``) just before the loop reserves room for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._config import ScalingConfig
from ..execution._executor import TrialExecutor
from ._gpu_auto import GpuMemoryAuto
from ._trial import Trial

__all__ = ["Shape", "ShapeRefused", "TrialShapes", "rank_shape"]

#: ``(resources per rank, number of ranks)``
Shape = tuple[dict[str, float], int]


def rank_shape(pgf: Any, bundle_per_rank: bool) -> Shape:
    """``(resources per rank, ranks)`` of a trial whose resources are ``pgf`` (a ``PlacementGroupFactory``).

    A trial with one bundle per rank (a Train trainer's, or one of several ranks) runs one rank
    per bundle, as Ray's ``ScalingConfig.from_placement_group_factory`` reads a trainer's
    factory (``num_workers = len(bundles)``, ``resources_per_worker = bundles[-1]``): the
    ranks all hold the same resources here, so the bundles must be equal (Ray merges a
    trainer's resources into the first; tuneplat's trainer holds none). A function
    trainable of one rank (``bundle_per_rank`` False) holds the bundles' sum in one process.

    Raises:
        ValueError: one bundle per rank, and the bundles differ.

    Example:
        >>> from tuneplat.tune.execution.placement_groups import PlacementGroupFactory
        >>> rank_shape(PlacementGroupFactory([{}, {"CPU": 1}, {"CPU": 1}]), bundle_per_rank=True)
        ({'CPU': 1.0}, 2)
        >>> rank_shape(PlacementGroupFactory([{"CPU": 1}, {"CPU": 2}]), bundle_per_rank=False)
        ({'CPU': 3.0}, 1)
    """
    if not bundle_per_rank:
        return pgf.required_resources, 1
    bundles = pgf.bundles
    if any(b != bundles[-1] for b in bundles):
        raise ValueError(
            f"{pgf} has bundles that differ, but this trial runs one rank per bundle and its ranks all hold the "
            "same resources (Ray's trainers merge the trainer's resources into the first bundle; tuneplat's "
            "trainer holds none). Return one equal bundle per rank, e.g. PlacementGroupFactory([{}] + "
            "[{'CPU': 1}] * ranks), as DistributeResources(add_bundles=True) does with increase_by unset (or equal "
            "to one rank's resources).")
    return bundles[-1], len(bundles)


class ShapeRefused(ValueError):
    """A trial that can never run: its resources function or value is bad, or no cluster could fit it."""


class TrialShapes:
    """Each trial's shape, for the loop to reserve room with.

    Args:
        request, world_size: the experiment's shape (resources per rank, ranks).
        trial_resources: ``config -> ScalingConfig`` for trials with their own resources, else None.
        executor: checks a new shape can ever fit, and says how much memory a GPU has.
    """

    def __init__(self, request: dict[str, float], world_size: int,
                 trial_resources: Callable[[Mapping[str, Any]], ScalingConfig] | None,
                 executor: TrialExecutor) -> None:
        self.request = request
        self.world_size = world_size
        self.trial_resources = trial_resources
        self._executor = executor
        #: GPU_memory="auto": the figure chosen per trial from its shape's measured peaks (core/_gpu_auto.py)
        self.gpu_auto = GpuMemoryAuto()
        self._own: dict[str, Shape] = {}  # trial id -> its own shape (trial_resources)
        self._checked: set[str] = set()  # shapes the executor said could fit
        self._resolved: dict[str, Shape] = {}  # trial id -> its auto-sized shape
        self._seeded = False  # restored trials' peaks were read (see _seed)

    def of(self, trial: Trial, trials: Sequence[Trial]) -> Shape:
        """The trial's shape, ``GPU_memory="auto"`` sized now (``trials``: the experiment's, to learn from).

        Raises:
            ShapeRefused: the trial can never run (the loop ends it as ERROR, saying why).
        """
        shape = self._asked(trial)
        if not self.gpu_auto.wants(shape[0]):
            return shape
        if not self._seeded:
            self._seed(trials)
        device = self._executor.gpu_memory_bytes()
        resolved = (self.gpu_auto.resolve(trial.trial_id, shape[0], shape[1], device), shape[1])
        self._resolved[trial.trial_id] = resolved
        return resolved

    def started(self, trial: Trial) -> tuple[dict[str, float] | None, int | None]:
        """The shape a trial starts with: its auto-sized one, its own, or None (the experiment's)."""
        if trial.resources is not None and trial.trial_id not in self._resolved:
            return self._changed(trial)
        got = self._resolved.get(trial.trial_id) or self._own.get(trial.trial_id)
        return got if got is not None else (None, None)

    def auto_sized(self, trial_id: str) -> bool:
        """Whether ``GPU_memory="auto"`` sized this trial."""
        return trial_id in self._resolved

    def _asked(self, trial: Trial) -> Shape:
        """The trial's shape as asked (what a resource-changing scheduler gave it, its own, or the experiment's)."""
        if trial.resources is not None:
            return self._changed(trial)
        if self.trial_resources is None:
            return self.request, self.world_size
        shape = self._own.get(trial.trial_id)
        if shape is None:
            try:
                sc = self.trial_resources(trial.config)
                shape = (sc.per_worker(), sc.max_workers)  # (per-trial groups have a fixed size)
                key = repr((sorted(shape[0].items()), shape[1]))
                if key not in self._checked:
                    self._executor.check_fits(*shape)
                    self._checked.add(key)
            except (TypeError, ValueError) as exc:  # a bad resources function/value, or a shape that never fits
                raise ShapeRefused(f"{type(exc).__name__}: {exc}") from exc
            self._own[trial.trial_id] = shape
        return shape

    def _changed(self, trial: Trial) -> Shape:
        """The shape a resource-changing scheduler gave the trial (see :func:`rank_shape`).

        Raises:
            ShapeRefused: the bundles are not one per rank, or the cluster could never hold them (the trial, what
                was asked, what exists).
        """
        pgf = trial.placement_group_factory
        try:
            shape = rank_shape(pgf, trial.bundle_per_rank)
        except ValueError as exc:
            raise ShapeRefused(f"trial {trial.trial_id}: {exc}") from exc
        key = repr((sorted(shape[0].items()), shape[1]))
        if key not in self._checked:
            try:
                self._executor.check_fits(*shape)
            except ValueError as exc:
                raise ShapeRefused(
                    f"trial {trial.trial_id} was given {pgf} by the ResourceChangingScheduler (its "
                    f"resources_allocation_function), which the cluster can never hold: {exc}") from exc
            self._checked.add(key)
        return shape

    def _seed(self, trials: Sequence[Trial]) -> None:
        """``Tuner.restore``: the peaks that the restored trials reported size the trials of their shapes."""
        self._seeded = True
        for t in trials:
            if not t.results:
                continue
            shape = self._own.get(t.trial_id)
            if shape is None and self.trial_resources is None:
                shape = (self.request, self.world_size)
            elif shape is None:
                try:
                    sc = self.trial_resources(t.config)  # type: ignore[misc]
                    shape = (sc.per_worker(), sc.max_workers)
                except (TypeError, ValueError):
                    continue  # (its own failure is told when it runs)
            if self.gpu_auto.wants(shape[0]):
                for result in t.results:
                    self.gpu_auto.learn(shape[0], shape[1], result)
