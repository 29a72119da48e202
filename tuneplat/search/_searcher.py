"""The searcher interface and the default random + grid generator."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from ._space import _has_path, grid_variants, resolve, validate_space

__all__ = ["BasicVariantGenerator", "ConcurrencyLimiter", "Repeater", "Searcher"]


class Searcher:
    """Suggests configs; learns from results.

    The tuner calls :meth:`set_search_properties` once, then
    :meth:`suggest` whenever it can start a trial, :meth:`on_trial_result` for
    every streamed result and :meth:`on_trial_complete` when a trial ends.

    ``suggest`` returns a config dict, ``None`` when it cannot suggest right
    now (e.g. a concurrency limit; the tuner asks again after the next trial
    ends) or :attr:`FINISHED` when it never will again.
    """

    FINISHED = "FINISHED"

    def __init__(self, metric: str | Sequence[str] | None = None, mode: str | Sequence[str] | None = None) -> None:
        self.metric = metric
        self.mode = mode

    def set_search_properties(self, metric: Any, mode: Any, config: Mapping[str, Any] | None, **spec: Any) -> bool:
        """Adopt the experiment's metric, mode and param_space.

        ``spec`` carries ``num_samples``, ``seed``, ``experiment_dir`` and
        ``resume`` (True when an experiment is being restored). Returns False
        when the searcher was already configured with a different space.
        """
        self.metric = self.metric if self.metric is not None else metric
        self.mode = self.mode if self.mode is not None else mode
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        raise NotImplementedError

    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> None:
        """A streamed intermediate result."""

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None = None, error: bool = False, **info: Any) -> None:
        """The trial ended. ``info`` may hold ``pruned=True`` (stopped by the scheduler)."""

    def restore_trials(self, trials: Sequence[Mapping[str, Any]]) -> None:
        """Rebuild state when an experiment is restored.

        ``trials`` lists, in creation order, ``{"trial_id", "config", "status",
        "result"}`` for every trial this searcher suggested before the crash.
        """

    def close(self) -> None:
        """Release files and connections at the end of ``fit()``."""


class BasicVariantGenerator(Searcher):
    """Random sampling + grid search, seeded, exactly Ray Tune's counting rule.

    Every ``grid_search`` is crossed with the others and the whole grid is
    repeated ``num_samples`` times, each repetition drawing fresh samples for
    the other domains: ``num_samples * prod(len(grid))`` trials.

    Args:
        points_to_evaluate: configs (possibly partial) that run first, in order;
            missing keys are sampled. As in Ray, each point takes the place of one
            of the ``num_samples`` repetitions (of every grid combination).
        max_concurrent: 0 means no limit of its own.
        constant_grid_search: draw the random values once per repetition and keep them for every grid
            combination of it (Ray's option), instead of fresh values per combination.
        random_state: seed for the sampler (overrides ``TuneConfig.seed``).

    Example:
        >>> from tuneplat.search import BasicVariantGenerator
        >>> from tuneplat import uniform, grid_search
        >>> g = BasicVariantGenerator(random_state=0)
        >>> g.set_search_properties("loss", "min", {"x": uniform(0, 1), "d": grid_search([1, 2])}, num_samples=2)
        True
        >>> [c["d"] for c in (g.suggest(str(i)) for i in range(4))]
        [1, 2, 1, 2]
    """

    def __init__(self, points_to_evaluate: Sequence[Mapping[str, Any]] | None = None, max_concurrent: int = 0,
                 constant_grid_search: bool = False, random_state: int | None = None) -> None:
        super().__init__()
        self._constant_grid = bool(constant_grid_search)
        self._points = [dict(p) for p in (points_to_evaluate or [])]
        self._max_concurrent = max_concurrent
        self._seed = random_state
        self._space: Mapping[str, Any] = {}
        self._rng = random.Random(random_state)
        #: configs drawn and not suggested yet, each with its grid combination and preset point
        self._pending: list[tuple[dict[str, Any], dict[Any, Any], dict[str, Any] | None]] = []
        self._resolved: tuple[dict[Any, Any], dict[str, Any] | None] | None = None
        self._num_samples = 1
        self._sample_index = 0
        self._live: set[str] = set()
        self.total = 0

    def set_search_properties(self, metric: Any, mode: Any, config: Mapping[str, Any] | None, **spec: Any) -> bool:
        super().set_search_properties(metric, mode, config)
        self._space = config or {}
        validate_space(self._space)
        self._num_samples = int(spec.get("num_samples", 1))
        seed = self._seed if self._seed is not None else spec.get("seed")
        self._rng = random.Random(seed)
        self._grid = grid_variants(self._space)
        # Ray's rule: each point fills one repetition of the grid (num_samples grows if there are more points);
        # grid keys a point fixes are not crossed again (Ray's docstring example: 6 trials, not 8)
        if self._num_samples < 0:  # -1: sample until the experiment is stopped (Ray's meaning)
            self.total = 0
            return True
        self._num_samples = max(self._num_samples, len(self._points))
        self.total = (sum(len(self._grid_for(p)) for p in self._points)
                      + (self._num_samples - len(self._points)) * len(self._grid))
        return True

    def _grid_for(self, point: Mapping[str, Any] | None) -> list[dict[Any, Any]]:
        """The grid combinations to run with ``point``: those of the grid keys it does not fix."""
        if not point:
            return self._grid
        out: list[dict[Any, Any]] = []
        for g in self._grid:
            kept = {path: v for path, v in g.items() if not _has_path(point, path)}
            if kept not in out:
                out.append(kept)
        return out

    def _next(self) -> dict[str, Any] | None:
        if not self._pending:
            if 0 <= self._num_samples <= self._sample_index:
                return None
            self._sample_index += 1
            point = self._points.pop(0) if self._points else None
            grid = self._grid_for(point)
            if self._constant_grid:  # one draw of the random values per repetition, the same for every combination
                state = self._rng.getstate()
                self._pending = []
                for g in grid:
                    self._rng.setstate(state)
                    self._pending.append((resolve(self._space, g, self._rng, point), g, point))
            else:
                self._pending = [(resolve(self._space, g, self._rng, point), g, point) for g in grid]
        config, g, point = self._pending.pop(0)
        self._resolved = (g, point)
        return config

    def resolved_paths(self) -> tuple[tuple[Any, ...], ...]:
        """The key paths the last suggested config resolved (grid values, sampled domains; not constants nor what a
        ``points_to_evaluate`` point fixed): what its ``experiment_tag`` shows, as Ray's."""
        if self._resolved is None:
            return ()
        from ._tags import resolved_paths

        grid, point = self._resolved
        return resolved_paths(self._space, grid, point)

    def is_finished(self) -> bool:
        """Every configuration has been suggested (Ray's ``is_finished``): known without asking for another."""
        return not self._pending and 0 <= self._num_samples <= self._sample_index

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self._max_concurrent and len(self._live) >= self._max_concurrent:
            return None
        config = self._next()
        if config is None:
            return Searcher.FINISHED
        self._live.add(trial_id)
        return config

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None = None, error: bool = False, **info: Any) -> None:
        self._live.discard(trial_id)

    def restore_trials(self, trials: Sequence[Mapping[str, Any]]) -> None:
        # The seeded sequence is deterministic: drawing as many configs as were
        # created before reproduces the generator's state exactly.
        for t in trials:
            self._next()
            if t.get("status") not in ("TERMINATED", "ERROR"):
                self._live.add(t["trial_id"])


class ConcurrencyLimiter(Searcher):
    """Wraps a searcher so that at most ``max_concurrent`` of its trials are live.

    Example:
        >>> from tuneplat.search import ConcurrencyLimiter, BasicVariantGenerator
        >>> limited = ConcurrencyLimiter(BasicVariantGenerator(), max_concurrent=2)
    """

    def __init__(self, searcher: Searcher, max_concurrent: int, batch: bool = False) -> None:
        if not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise ValueError(f"The value of `max_concurrent` is {max_concurrent!r}, but must be an int >= 1.")
        super().__init__(searcher.metric, searcher.mode)
        self.searcher = searcher
        self.max_concurrent = max_concurrent
        self._live: set[str] = set()

    def set_search_properties(self, metric: Any, mode: Any, config: Mapping[str, Any] | None, **spec: Any) -> bool:
        ok = self.searcher.set_search_properties(metric, mode, config, **spec)
        self.metric, self.mode = self.searcher.metric, self.searcher.mode
        return ok

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if len(self._live) >= self.max_concurrent:
            return None
        config = self.searcher.suggest(trial_id)
        if isinstance(config, dict):
            self._live.add(trial_id)
        return config

    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None = None, error: bool = False, **info: Any) -> None:
        self._live.discard(trial_id)
        self.searcher.on_trial_complete(trial_id, result=result, error=error, **info)

    def restore_trials(self, trials: Sequence[Mapping[str, Any]]) -> None:
        self.searcher.restore_trials(trials)
        self._live = {t["trial_id"] for t in trials if t.get("status") not in ("TERMINATED", "ERROR")}

    def close(self) -> None:
        self.searcher.close()


class _RepeatGroup:
    def __init__(self, primary: str, config: dict[str, Any]) -> None:
        self.primary = primary
        self.config = config
        self.members: list[str] = []
        self.results: dict[str, Mapping[str, Any] | None] = {}


class Repeater(Searcher):
    """Runs each config of ``searcher`` ``repeat`` times and tells it the mean (``ray.tune.search.Repeater``).

    With ``set_index`` each repetition's config holds ``"__trial_index__"``
    (0 … repeat-1), e.g. to seed each run differently. The wrapped searcher
    learns once per config, from the mean of the metric over the repetitions
    that reported it (an errored repetition is left out; all errored: an error).
    Set ``num_samples`` to a multiple of ``repeat``.

    Example:
        >>> from tuneplat.search import BasicVariantGenerator, Repeater
        >>> r = Repeater(BasicVariantGenerator(random_state=0), repeat=2)
        >>> r.set_search_properties("loss", "min", {"x": 1}, num_samples=4)
        True
        >>> [r.suggest(str(i))["__trial_index__"] for i in range(2)]
        [0, 1]
    """

    def __init__(self, searcher: Searcher, repeat: int = 1, set_index: bool = True) -> None:
        if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
            raise ValueError(f"The value of `repeat` is {repeat!r}, but must be an int >= 1.")
        if not isinstance(searcher, Searcher):
            raise TypeError(f"Repeater wraps a tuneplat Searcher, got {type(searcher).__name__}")
        super().__init__(searcher.metric, searcher.mode)
        self.searcher = searcher
        self.repeat = repeat
        self.set_index = set_index
        self._current: _RepeatGroup | None = None
        self._groups: dict[str, _RepeatGroup] = {}

    def set_search_properties(self, metric: Any, mode: Any, config: Mapping[str, Any] | None, **spec: Any) -> bool:
        samples = spec.get("num_samples")
        if isinstance(samples, int) and samples > 0:  # num_samples counts trials: the searcher makes 1/repeat of them
            spec = {**spec, "num_samples": -(-samples // self.repeat)}
        ok = self.searcher.set_search_properties(metric, mode, config, **spec)
        self.metric, self.mode = self.searcher.metric, self.searcher.mode
        if isinstance(samples, int) and samples > 0 and samples % self.repeat:
            import logging

            logging.getLogger("tuneplat").warning(
                "tuneplat: Repeater(repeat=%d) with num_samples=%d: the last config runs fewer times; set "
                "num_samples to a multiple of %d", self.repeat, samples, self.repeat)
        return ok

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        group = self._current
        if group is None or len(group.members) >= self.repeat:
            config = self.searcher.suggest(trial_id)
            if not isinstance(config, dict):
                return config
            group = self._current = _RepeatGroup(trial_id, config)
        import copy

        config = copy.deepcopy(group.config)
        if self.set_index:
            config["__trial_index__"] = len(group.members)
        group.members.append(trial_id)
        self._groups[trial_id] = group
        return config

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None = None, error: bool = False,
                          **info: Any) -> None:
        group = self._groups.pop(trial_id, None)
        if group is None:
            return
        group.results[trial_id] = None if error else result
        if len(group.results) < self.repeat:
            return
        if group is self._current:
            self._current = None
        metrics: list[Any] = list(self.metric) if isinstance(self.metric, (list, tuple)) else [self.metric]
        mean: dict[str, Any] = {}
        for m in metrics:
            values = []
            for r in group.results.values():
                v = r.get(str(m)) if r is not None and m is not None else None
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v:
                    values.append(float(v))
            if values:
                mean[str(m)] = sum(values) / len(values)
        if len(mean) < len(metrics):
            self.searcher.on_trial_complete(group.primary, None, error=True)
        else:
            self.searcher.on_trial_complete(group.primary, mean)

    def restore_trials(self, trials: Sequence[Mapping[str, Any]]) -> None:
        # the wrapped searcher knows configs, not repetitions: give it the first repetition of each
        self.searcher.restore_trials([t for t in trials if (t.get("config") or {}).get("__trial_index__", 0) == 0])

    def close(self) -> None:
        self.searcher.close()
