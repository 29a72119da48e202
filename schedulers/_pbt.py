"""Population Based Training (Jaderberg et al., 2017), as Ray Tune's ``PopulationBasedTraining``."""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ._base import Decision, Launch, Resume, TrialScheduler, require_argument
from ._common import display, is_number, result_time

__all__ = ["PopulationBasedTraining"]


class _Status(Enum):
    RUNNING = "RUNNING"
    WAITING = "WAITING"  # synch mode: paused at the perturbation boundary
    DONE = "DONE"


@dataclass
class _State:
    config: dict[str, Any]
    order: int
    status: _Status = _Status.RUNNING
    last_score: float | None = None
    last_time: float = 0.0
    last_perturbation_time: float = 0.0
    lineage: list[dict[str, Any]] = field(default_factory=list)


def _is_domain(value: Any) -> bool:
    return callable(getattr(value, "sample", None))


def _check_mutations(mutations: Mapping[str, Any], prefix: str) -> None:
    for key, spec in mutations.items():
        name = f"{prefix}[{key!r}]"
        if isinstance(spec, Mapping):
            require_argument(bool(spec), name, spec, f"{name} is a non-empty dict")
            _check_mutations(spec, name)
        elif isinstance(spec, (list, tuple)):
            require_argument(bool(spec), name, spec, f"{name} is a non-empty list")
        else:
            require_argument(_is_domain(spec) or callable(spec), name, spec,
                             f"{name} is a list, a callable, an object with .sample(rng) "
                             "or a dict of those")


def _resample(spec: Any, rng: random.Random) -> Any:
    if _is_domain(spec):
        return spec.sample(rng)
    return spec()


def _perturb(value: Any, spec: Any, factor: float) -> Any:
    del spec  # as in Ray, a perturbed value may leave the domain's bounds
    new = value * factor
    if isinstance(value, int):
        new = int(new)
    return new


def explore(
    config: Mapping[str, Any],
    mutations: Mapping[str, Any],
    rng: random.Random,
    resample_probability: float,
    perturbation_factors: Sequence[float],
) -> dict[str, Any]:
    """Return a perturbed deep copy of ``config`` (PBT's explore step, as Ray's).

    For each key of ``mutations`` (in order; nested dicts recurse):

    * list/tuple: with probability ``resample_probability``, or when the
      current value is not in the list, a uniformly drawn element; otherwise
      the neighbour one index up or down (clamped at the ends);
    * object with ``.sample(rng)`` (a search-space domain, duck-typed) or a
      zero-argument callable: with probability ``resample_probability``, or
      when the current value is not a number, a fresh sample; otherwise the
      value times a factor drawn from ``perturbation_factors`` (ints are
      truncated with ``int()`` as Ray does; like Ray, the result is not
      clipped to the domain's bounds, so repeated perturbation can leave them).

    All randomness comes from ``rng`` (callables draw their own).
    """
    new = copy.deepcopy(dict(config))
    for key, spec in mutations.items():
        current = config.get(key)
        if isinstance(spec, Mapping):
            new[key] = explore(current if isinstance(current, Mapping) else {}, spec, rng,
                               resample_probability, perturbation_factors)
        elif isinstance(spec, (list, tuple)):
            if rng.random() < resample_probability or current not in spec:
                new[key] = rng.choice(list(spec))
            else:
                index = list(spec).index(current) + rng.choice((-1, 1))
                new[key] = spec[max(0, min(len(spec) - 1, index))]
        elif rng.random() < resample_probability or not is_number(current):
            new[key] = _resample(spec, rng)
        else:
            new[key] = _perturb(current, spec, rng.choice(list(perturbation_factors)))
    return new


class PopulationBasedTraining(TrialScheduler):
    """Population Based Training with Ray Tune's arguments and defaults.

    Every ``perturbation_interval`` of ``time_attr`` (after
    ``burn_in_period``) a trial is ranked by its last score among the live
    trials that reported. If it is in the bottom ``quantile_fraction`` it
    gets ``PAUSE`` and a ``Launch(trial_id, config, from_trial, info)`` is
    queued: ``from_trial`` is drawn (scheduler RNG) from the top quantile,
    ``config`` is :func:`explore` applied to ``from_trial``'s config, and the
    tuner restarts ``trial_id`` from ``from_trial``'s latest checkpoint. Any
    other trial CONTINUEs. The quantile size is
    ``ceil(n * quantile_fraction)``, at most ``floor(n / 2)``; with fewer
    than 2 ranked trials nothing happens. An exploited trial is unranked
    until its next result (its own checkpoint is still the old model until
    the tuner relaunches it) and takes over ``from_trial``'s ``time_attr``
    for the interval count. PBT never stops trials.

    ``synch=True``: a trial reaching the next common boundary (multiples of
    ``perturbation_interval``) gets PAUSE; once :meth:`on_search_finished`
    was called and every live trial waits, the bottom quantile gets
    ``Launch`` actions and the others ``Resume`` (the trial whose result
    completed the round gets CONTINUE or PAUSE + Launch directly).

    ``hyperparam_mutations`` values may be lists, zero-argument callables,
    any object with a ``.sample(rng: random.Random)`` method (tuneplat search
    domains qualify; duck-typed, nothing imported), or dicts of those.

    Non-finite/missing metrics rank last (such a trial is exploited first).
    A result without ``time_attr`` raises ``ValueError`` when
    ``require_attrs`` (else it is ignored); a missing *metric* always counts
    as the worst value instead of raising (differs from Ray).

    Args:
        time_attr: Result key measuring progress (default ``time_total_s``, as Ray's: with the default
            ``perturbation_interval=60`` a trial is perturbed every 60 seconds of its training time).
        metric: Metric to optimise (or via ``set_objective``).
        mode: "min" or "max".
        perturbation_interval: ``time_attr`` between two exploit checks (``> 0``).
        burn_in_period: No exploit before this ``time_attr``.
        hyperparam_mutations: How to explore each hyperparameter (see above).
        quantile_fraction: Size of the top/bottom quantiles, in ``(0, 0.5]``.
        resample_probability: Chance of resampling instead of perturbing.
        perturbation_factors: Factors for numeric perturbation.
        custom_explore_fn: ``f(config) -> config`` applied after the built-in explore.
        log_config: Put the old and new configs in each Launch's ``info``.
        require_attrs: Raise on results without ``time_attr``.
        synch: Synchronous PBT (see above).
        seed: Seed of the scheduler's RNG.
    """

    name = "pbt"

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        burn_in_period: float = 0.0,
        hyperparam_mutations: Mapping[str, Any] | None = None,
        quantile_fraction: float = 0.25,
        resample_probability: float = 0.25,
        perturbation_factors: Sequence[float] = (1.2, 0.8),
        custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
        seed: int | None = None,
    ) -> None:
        super().__init__(metric, mode)
        require_argument(isinstance(time_attr, str) and bool(time_attr), "time_attr", time_attr,
                         "time_attr is a non-empty str")
        require_argument(is_number(perturbation_interval) and perturbation_interval > 0,
                         "perturbation_interval", perturbation_interval,
                         "perturbation_interval > 0")
        require_argument(is_number(burn_in_period) and burn_in_period >= 0, "burn_in_period",
                         burn_in_period, "burn_in_period >= 0")
        require_argument(custom_explore_fn is None or callable(custom_explore_fn),
                         "custom_explore_fn", custom_explore_fn, "custom_explore_fn is callable")
        if not hyperparam_mutations and custom_explore_fn is None:
            raise ValueError(
                f"The value of `hyperparam_mutations` is {hyperparam_mutations!r}, but must be "
                "`a non-empty dict when custom_explore_fn is None`."
            )
        require_argument(hyperparam_mutations is None or isinstance(hyperparam_mutations, Mapping),
                         "hyperparam_mutations", hyperparam_mutations,
                         "hyperparam_mutations is a dict")
        _check_mutations(hyperparam_mutations or {}, "hyperparam_mutations")
        require_argument(is_number(quantile_fraction) and 0 < quantile_fraction <= 0.5,
                         "quantile_fraction", quantile_fraction, "0 < quantile_fraction <= 0.5")
        require_argument(is_number(resample_probability) and 0 <= resample_probability <= 1,
                         "resample_probability", resample_probability,
                         "0 <= resample_probability <= 1")
        factors = tuple(perturbation_factors) if isinstance(perturbation_factors,
                                                           (list, tuple)) else ()
        require_argument(bool(factors) and all(is_number(f) and f > 0 for f in factors),
                         "perturbation_factors", perturbation_factors,
                         "perturbation_factors is a non-empty tuple of numbers > 0")
        self.time_attr = time_attr
        self.perturbation_interval = perturbation_interval
        self.burn_in_period = burn_in_period
        self.hyperparam_mutations = dict(hyperparam_mutations or {})
        self.quantile_fraction = quantile_fraction
        self.resample_probability = resample_probability
        self.perturbation_factors = factors
        self.custom_explore_fn = custom_explore_fn
        self.log_config = bool(log_config)
        self.require_attrs = bool(require_attrs)
        self.synch = bool(synch)
        self.seed = seed
        self._rng = random.Random(seed)
        self._state: dict[str, _State] = {}
        self._next_sync = max(float(perturbation_interval), float(burn_in_period))
        self._search_finished = False
        self._num_exploits = 0

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "time_attr": self.time_attr,
            "perturbation_interval": self.perturbation_interval,
            "burn_in_period": self.burn_in_period,
            "hyperparam_mutations": sorted(self.hyperparam_mutations),
            "quantile_fraction": self.quantile_fraction,
            "resample_probability": self.resample_probability,
            "perturbation_factors": list(self.perturbation_factors),
            "custom_explore_fn": getattr(self.custom_explore_fn, "__name__", None),
            "synch": self.synch,
            "seed": self.seed,
        }

    def lineage(self, trial_id: str) -> list[dict[str, Any]]:
        """The trial's exploit events, oldest first (each the ``info`` of its Launch)."""
        return [dict(event) for event in self._state[trial_id].lineage]

    def config(self, trial_id: str) -> dict[str, Any]:
        """The trial's current config (after any exploit)."""
        return copy.deepcopy(self._state[trial_id].config)

    def quantiles(self) -> tuple[list[str], list[str]]:
        """``(bottom, top)`` trial ids by last score among live trials that reported."""
        ranked = sorted(
            (s for s in self._state.items()
             if s[1].last_score is not None and s[1].status is not _Status.DONE),
            key=lambda item: (item[1].last_score, item[1].order),
        )
        if len(ranked) <= 1:
            return [], []
        size = math.ceil(len(ranked) * self.quantile_fraction)
        size = min(size, len(ranked) // 2)
        ids = [trial_id for trial_id, _ in ranked]
        return ids[len(ids) - size:], ids[:size]

    # -- events -------------------------------------------------------
    def on_trial_add(self, trial_id: str, config: Mapping[str, Any]) -> None:
        super().on_trial_add(trial_id, config)
        if trial_id not in self._state:
            self._state[trial_id] = _State(copy.deepcopy(dict(config)), order=len(self._state))

    def on_trial_result(self, trial_id: str, result: Mapping[str, Any]) -> Decision:
        self._require_known(trial_id)
        state = self._state[trial_id]
        if state.status is _Status.WAITING:
            return Decision.PAUSE
        time = result_time(result, self.time_attr)
        if time is None:
            if self.require_attrs:
                raise ValueError(
                    f"PopulationBasedTraining needs `{self.time_attr}` in every result; trial "
                    f"{trial_id!r} reported keys {sorted(result)}. Pass require_attrs=False to "
                    "ignore such results."
                )
            return Decision.CONTINUE
        state.last_score = self._score(result)
        state.last_time = time
        if time < self.burn_in_period:
            return Decision.CONTINUE
        if self.synch:
            if time < self._next_sync:
                return Decision.CONTINUE
            state.status = _Status.WAITING
            verdict = self._sync(current=trial_id)
            return Decision.PAUSE if verdict is None else verdict
        if time - state.last_perturbation_time < self.perturbation_interval:
            return Decision.CONTINUE
        state.last_perturbation_time = time
        bottom, top = self.quantiles()
        if trial_id in bottom and top:
            self._exploit(trial_id, top, time)
            return Decision.PAUSE
        return Decision.CONTINUE

    def on_trial_complete(self, trial_id: str, result: Mapping[str, Any] | None) -> None:
        state = self._state.get(trial_id)
        # A trial may end (its own stop criteria) on the very result that exploited it.
        self._drop_actions(trial_id)
        if state is not None:
            state.status = _Status.DONE
            if self.synch:
                self._sync()

    def on_trial_error(self, trial_id: str) -> None:
        self.on_trial_complete(trial_id, None)

    def on_search_finished(self) -> None:
        self._search_finished = True
        if self.synch:
            self._sync()

    # -- internals ----------------------------------------------------
    def _exploit(self, trial_id: str, top: list[str], time: float) -> None:
        state = self._state[trial_id]
        source_id = self._rng.choice(top)
        source = self._state[source_id]
        new_config = explore(source.config, self.hyperparam_mutations, self._rng,
                             self.resample_probability, self.perturbation_factors)
        if self.custom_explore_fn is not None:
            new_config = self.custom_explore_fn(new_config)
        self._num_exploits += 1
        info: dict[str, Any] = {
            "step": time,
            "time_attr": self.time_attr,
            "from_trial": source_id,
            "from_step": source.last_time,
            "score": display(state.last_score if state.last_score is not None else math.inf,
                             self.mode),
            "from_score": display(source.last_score if source.last_score is not None
                                  else math.inf, self.mode),
        }
        if self.log_config:
            info["old_config"] = copy.deepcopy(state.config)
            info["new_config"] = copy.deepcopy(new_config)
        state.lineage.append(info)
        state.config = copy.deepcopy(new_config)
        # The trial will hold the source's model (its latest checkpoint): take over its
        # clock, so the next exploit check is a full interval later. It is unranked
        # until it reports again: until relaunched, its own latest checkpoint is still
        # the old model, so nobody may clone it on the strength of the source's score.
        state.last_perturbation_time = source.last_time
        state.last_time = source.last_time
        state.last_score = None
        self._actions.append(Launch(trial_id, copy.deepcopy(new_config), source_id, info))

    def _sync(self, current: str | None = None) -> Decision | None:
        live = [t for t, s in self._state.items() if s.status is not _Status.DONE]
        if not self._search_finished or not live:
            return None
        if any(self._state[t].status is not _Status.WAITING for t in live):
            return None
        bottom, top = self.quantiles()
        latest = max(self._state[t].last_time for t in live)
        while self._next_sync <= latest:
            self._next_sync += self.perturbation_interval
        verdict: Decision | None = None
        for trial_id in live:
            state = self._state[trial_id]
            state.status = _Status.RUNNING
            state.last_perturbation_time = state.last_time
            if trial_id in bottom and top:
                self._exploit(trial_id, top, state.last_time)
                if trial_id == current:
                    verdict = Decision.PAUSE
            elif trial_id == current:
                verdict = Decision.CONTINUE
            else:
                self._actions.append(Resume(trial_id))
        return verdict
