"""Test helpers shipped with the package: a virtual-time simulator and the scheduler contract.

Everything here is pure Python and deterministic, fast enough for unit tests
and benchmarks.

* :func:`simulate` runs a scheduler against synthetic trials (learning
  curves or small stateful models) with a fixed number of slots, the way the
  tuner drives it: ``on_trial_add`` when a trial starts, a result per
  iteration, decisions and actions carried out, ``on_search_finished`` once
  the last trial was added.
* :func:`check_scheduler_contract` (or the :class:`SchedulerContract` test
  mixin) checks the properties every scheduler must have.
"""

from __future__ import annotations

import copy
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, Union, runtime_checkable

from ._actions import ActionPlan, TrialPhase, plan_action
from ._base import Decision, Launch, Stop, TrialScheduler

__all__ = [
    "MISSING",
    "SchedulerContract",
    "SimModel",
    "SimulationError",
    "SimulationResult",
    "check_deterministic",
    "check_non_finite_metrics",
    "check_scheduler_contract",
    "check_stop_is_final",
    "check_unknown_trial_rejected",
    "contract_curves",
    "poisoned_curves",
    "simulate",
]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: Return this from a curve to report a result *without* the metric key.
MISSING: Any = _Missing()


@runtime_checkable
class SimModel(Protocol):
    """A stateful simulated trainable: one ``train`` call is one iteration.

    The simulator deep-copies the source's model on ``Launch`` (PBT exploit),
    so the launched trial continues from the source's state with its new config.
    """

    def train(self, config: Mapping[str, Any]) -> Any:
        """Advance one iteration with ``config`` and return the metric value."""


#: A curve: ``f(step) -> value`` (step is 1-based), a sequence of values
#: (the trial completes at its end), or a :class:`SimModel`.
Curve = Union[Callable[[int], Any], Sequence[Any], SimModel]


class SimulationError(RuntimeError):
    """The scheduler broke the protocol (e.g. resumed a running trial, left trials paused)."""


class _Status(Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    QUEUED = "QUEUED"  # paused, with a Resume/Launch to carry out
    TERMINATED = "TERMINATED"


@dataclass
class _SimTrial:
    trial_id: str
    curve: Curve
    config: dict[str, Any]
    status: _Status = _Status.PENDING
    step: int = 0
    iterations: int = 0
    last_result: dict[str, Any] | None = None

    def exhausted(self) -> bool:
        return isinstance(self.curve, Sequence) and self.step >= len(self.curve)

    def advance(self) -> Any:
        self.step += 1
        self.iterations += 1
        if isinstance(self.curve, SimModel):
            return self.curve.train(self.config)
        if isinstance(self.curve, Sequence):
            return self.curve[self.step - 1]
        return self.curve(self.step)


@dataclass
class SimulationResult:
    """What a simulated experiment did.

    Attributes:
        total_iterations: Iterations computed by all trials (the compute cost).
        best_value: Best finite metric value reported (in the metric's own sign), or None.
        best_trial: Trial that reported it.
        iterations: Iterations computed per trial (including after Launch).
        steps: Final curve position per trial (``training_iteration`` of its last result).
        last_values: Last metric value reported per trial.
        configs: Final config per trial (after PBT Launches).
        decisions: Log of events, deterministic and comparable:
            ``(tick, "result", trial_id, step, decision)`` and
            ``(tick, "resume"|"launch"|"stop", trial_id, from_trial_or_reason)``.
        stop_reasons: ``scheduler.stop_reason(t)`` per trial.
        ticks: Virtual time (each tick every running trial does one iteration).
    """

    total_iterations: int
    best_value: float | None
    best_trial: str | None
    iterations: dict[str, int]
    steps: dict[str, int]
    last_values: dict[str, Any]
    configs: dict[str, dict[str, Any]]
    decisions: list[tuple[Any, ...]] = field(default_factory=list)
    stop_reasons: dict[str, str | None] = field(default_factory=dict)
    ticks: int = 0

    def decisions_for(self, trial_id: str) -> list[str]:
        """The decisions (names) given to one trial's results, in order."""
        return [d[4] for d in self.decisions if d[1] == "result" and d[2] == trial_id]


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or value is None or value is MISSING:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def simulate(
    scheduler: TrialScheduler,
    curves: Mapping[str, Curve] | Sequence[tuple[Mapping[str, Any], Curve]],
    *,
    configs: Mapping[str, Mapping[str, Any]] | None = None,
    max_concurrent: int = 2,
    max_t: int = 100,
    metric: str | list[str] = "loss",
    mode: str | list[str] = "min",
    curve_for_config: Callable[[Mapping[str, Any]], Curve] | None = None,
    max_ticks: int = 1_000_000,
) -> SimulationResult:
    """Run ``scheduler`` on synthetic trials in virtual time, deterministically.

    Trials start in the order of ``curves`` when a slot is free (resumed and
    launched trials first), and each running trial does one iteration per
    tick, reporting ``{metric: value, "training_iteration": step,
    "time_total_s": float(step), "trial_id": id}`` (a curve returning
    :data:`MISSING` omits the metric). A trial completes at ``max_t`` or at
    the end of its sequence (the tuner's own stop criteria, which win over a
    PAUSE), or on STOP; then ``on_trial_complete`` is called. Actions are
    drained after every event: ``Resume`` re-queues a paused trial;
    ``Launch`` sets its config and copies the source trial's position (curve
    and step, or a deep copy of its :class:`SimModel`; with
    ``curve_for_config`` the curve is rebuilt from the new config, keeping
    the copied step) then re-queues it; ``Stop`` ends a paused trial.

    Args:
        scheduler: A fresh scheduler (``set_objective(metric, mode)`` is called).
        curves: ``{trial_id: curve}`` or ``[(config, curve), ...]`` (ids ``t000``...).
        configs: Configs by trial id for the mapping form (default ``{}``).
        max_concurrent: Slots.
        max_t: The tuner's stop criterion on ``training_iteration``.
        metric: Metric key reported.
        mode: "min" or "max" (for ``best_value``).
        curve_for_config: Rebuild a trial's curve from its config on Launch.
        max_ticks: Safety limit.

    Raises:
        SimulationError: protocol violations, trials left paused at the end.
    """
    if max_concurrent < 1:
        raise ValueError(f"The value of `max_concurrent` is {max_concurrent!r}, but must be "
                         "`max_concurrent >= 1`.")
    scheduler.set_objective(metric, mode)
    metrics = list(metric) if isinstance(metric, (list, tuple)) else [metric]
    first_metric = metrics[0]
    modes = list(mode) if isinstance(mode, (list, tuple)) else [mode]
    metric_name, mode = first_metric, modes[0]  # the best value is tracked on the first objective
    trials: dict[str, _SimTrial] = {}
    if isinstance(curves, Mapping):
        for trial_id, curve in curves.items():
            trials[trial_id] = _SimTrial(trial_id, curve, dict((configs or {}).get(trial_id, {})))
    else:
        width = max(3, len(str(len(curves))))
        for index, (config, curve) in enumerate(curves):
            trial_id = f"t{index:0{width}d}"
            trials[trial_id] = _SimTrial(trial_id, curve, copy.deepcopy(dict(config)))
    pending = deque(trials)
    restart: deque[str] = deque()
    running: list[str] = []
    log: list[tuple[Any, ...]] = []
    best: tuple[float, str] | None = None
    tick = 0
    search_finished = False

    def complete(trial: _SimTrial) -> None:
        trial.status = _Status.TERMINATED
        scheduler.on_trial_complete(trial.trial_id, trial.last_result)

    def drain() -> None:
        while True:
            actions = scheduler.pop_actions()
            if not actions:
                return
            for action in actions:
                trial = trials.get(action.trial_id)
                # the simulator runs a trial's result and its decision at once, so a trial that is not
                # PAUSED here is one the tuner would ignore the action for: the scheduler broke its contract
                plan = plan_action(action, TrialPhase.PAUSED) if trial is not None else ActionPlan.IGNORE
                if trial is None or trial.status is not _Status.PAUSED or not plan.carries_out():
                    state = "unknown" if trial is None else trial.status.value
                    raise SimulationError(
                        f"{type(scheduler).__name__} issued {action!r} for a trial that is "
                        f"{state}, not PAUSED"
                    )
                if plan is ActionPlan.REQUEUE:
                    log.append((tick, "resume", trial.trial_id, None))
                    trial.status = _Status.QUEUED
                    restart.append(trial.trial_id)
                elif plan is ActionPlan.CLONE_AND_REQUEUE and isinstance(action, Launch):
                    log.append((tick, "launch", trial.trial_id, action.from_trial))
                    trial.config = copy.deepcopy(dict(action.config))
                    if action.from_trial is None:
                        trial.step = 0
                    else:
                        source = trials.get(action.from_trial)
                        if source is None:
                            raise SimulationError(f"Launch from unknown trial {action.from_trial!r}")
                        trial.step = source.step
                        trial.curve = copy.deepcopy(source.curve) if isinstance(
                            source.curve, SimModel) else source.curve
                    if curve_for_config is not None:
                        trial.curve = curve_for_config(trial.config)
                    trial.status = _Status.QUEUED
                    restart.append(trial.trial_id)
                elif plan is ActionPlan.END and isinstance(action, Stop):
                    log.append((tick, "stop", trial.trial_id, action.reason))
                    complete(trial)
                else:
                    raise SimulationError(f"unknown action {action!r}")

    def fill() -> None:
        nonlocal search_finished
        while len(running) < max_concurrent:
            if restart:
                trial = trials[restart.popleft()]
            elif pending:
                trial = trials[pending.popleft()]
                scheduler.on_trial_add(trial.trial_id, copy.deepcopy(trial.config))
            else:
                break
            trial.status = _Status.RUNNING
            running.append(trial.trial_id)
            drain()
        if not pending and not search_finished:
            search_finished = True
            scheduler.on_search_finished()
            drain()

    while True:
        fill()
        if not running:
            if restart:
                continue
            break
        tick += 1
        if tick > max_ticks:
            raise SimulationError(f"simulation exceeded max_ticks={max_ticks}")
        for trial_id in list(running):
            trial = trials[trial_id]
            value = trial.advance()
            result: dict[str, Any] = {
                "training_iteration": trial.step,
                "time_total_s": float(trial.step),
                "trial_id": trial_id,
            }
            if isinstance(value, Mapping):  # several metrics at once (e.g. two objectives)
                result.update(value)
                value = value.get(first_metric, MISSING)
            elif value is not MISSING:
                for name in metrics:  # a plain value is reported for every metric
                    result[name] = value
            trial.last_result = result
            number = _finite(value)
            if number is not None:
                signed = number if mode == "min" else -number
                if best is None or signed < best[0]:
                    best = (signed, trial_id)
            decision = scheduler.on_trial_result(trial_id, result)
            if not isinstance(decision, Decision):
                raise SimulationError(f"on_trial_result returned {decision!r}, not a Decision")
            log.append((tick, "result", trial_id, trial.step, decision.name))
            if decision is Decision.STOP or trial.step >= max_t or trial.exhausted():
                running.remove(trial_id)
                complete(trial)
            elif decision is Decision.PAUSE:
                running.remove(trial_id)
                trial.status = _Status.PAUSED
            drain()

    paused = [t.trial_id for t in trials.values() if t.status is not _Status.TERMINATED]
    if paused:
        raise SimulationError(
            f"{type(scheduler).__name__} left trials paused forever: {paused}"
        )
    best_value = None if best is None else (best[0] if mode == "min" else -best[0])
    return SimulationResult(
        total_iterations=sum(t.iterations for t in trials.values()),
        best_value=best_value,
        best_trial=None if best is None else best[1],
        iterations={t.trial_id: t.iterations for t in trials.values()},
        steps={t.trial_id: t.step for t in trials.values()},
        last_values={t.trial_id: (t.last_result or {}).get(metric_name) for t in trials.values()},
        configs={t.trial_id: t.config for t in trials.values()},
        decisions=log,
        stop_reasons={t: scheduler.stop_reason(t) for t in trials},
        ticks=tick,
    )


# -- the contract -------------------------------------------------------

Factory = Callable[[], TrialScheduler]


def _fail(message: str) -> None:
    raise AssertionError(message)


def contract_curves(max_t: int) -> dict[str, Curve]:
    """Eight crossing, deterministic learning curves (loss, lower is better).

    ``"best"`` is the best of all at every step.
    """

    def curve(final: float, speed: float) -> Callable[[int], float]:
        return lambda step: final + (1.0 - final) * math.exp(-speed * step)

    curves: dict[str, Curve] = {
        "best": lambda step: 0.05 / step,
        "fast_bad": curve(0.6, 1.0),
        "slow_good": curve(0.2, 0.05),
        "mid": curve(0.4, 0.3),
        "flat": lambda step: 0.9,
        "worse": curve(0.7, 0.5),
        "noisy": lambda step: 0.5 + 0.1 * math.sin(step),
        "late": curve(0.3, 0.1),
    }
    assert all(callable(c) for c in curves.values())
    return curves


def poisoned_curves() -> dict[str, Curve]:
    """Curves reporting NaN, ±inf, None, strings and missing metrics."""
    return {
        "nan": lambda step: math.nan,
        "neg_inf": lambda step: -math.inf,
        "pos_inf": lambda step: math.inf,
        "none": lambda step: None,
        "text": lambda step: "oops",
        "missing": lambda step: MISSING,
        "flaky": lambda step: math.nan if step % 2 else 0.8,
    }


def check_deterministic(factory: Factory, *, max_t: int = 27, metric: Any = "loss",
                        mode: Any = "min") -> None:
    """Same seed + same events ⇒ same decisions and actions."""
    runs = [simulate(factory(), {**contract_curves(max_t), **poisoned_curves()},
                     max_concurrent=3, max_t=max_t, metric=metric, mode=mode)
            for _ in range(2)]
    if runs[0].decisions != runs[1].decisions:
        _fail("two runs with the same events gave different decisions")
    if runs[0].stop_reasons != runs[1].stop_reasons:
        _fail("two runs with the same events gave different stop reasons")


def check_stop_is_final(factory: Factory, *, max_t: int = 27, metric: Any = "loss",
                        mode: Any = "min") -> None:
    """A trial given STOP (decision or Stop action) gets STOP for any later result."""
    scheduler = factory()
    run = simulate(scheduler, contract_curves(max_t), max_concurrent=3, max_t=max_t,
                   metric=metric, mode=mode)
    stopped = {d[2]: d[3] for d in run.decisions if d[1] == "result" and d[4] == "STOP"}
    stopped.update({d[2]: run.steps[d[2]] for d in run.decisions if d[1] == "stop"})
    good = 0.0 if _first(mode) == "min" else 1e9
    for trial_id, step in sorted(stopped.items()):
        for later in (step + 1, step + 100):
            decision = scheduler.on_trial_result(
                trial_id, {**_each(metric, good), "training_iteration": later,
                           "time_total_s": float(later), "trial_id": trial_id})
            if decision is not Decision.STOP:
                _fail(f"trial {trial_id!r} was stopped, then got {decision} for a later result")
        if not scheduler.stop_reason(trial_id):
            _fail(f"trial {trial_id!r} was stopped without a stop_reason")


def check_unknown_trial_rejected(factory: Factory, *, metric: Any = "loss",
                                 mode: Any = "min") -> None:
    """A result for a trial never added raises KeyError/ValueError naming the trial."""
    scheduler = factory()
    scheduler.set_objective(metric, mode)
    scheduler.on_trial_add("known", {})
    try:
        scheduler.on_trial_result("ghost-trial", {**_each(metric, 1.0), "training_iteration": 1,
                                                  "time_total_s": 1.0})
    except (KeyError, ValueError) as error:
        if "ghost-trial" not in str(error):
            _fail(f"the error for an unknown trial does not name it: {error}")
        return
    _fail("on_trial_result accepted a trial that was never added")


def check_non_finite_metrics(factory: Factory, *, max_t: int = 27, metric: Any = "loss",
                             mode: Any = "min", full_budget: bool = True) -> None:
    """NaN/inf/None/str/missing metrics neither crash nor hurt the best trial.

    The best trial (best at every step) must still reach ``max_t`` (with
    ``full_budget=False``, for schedulers that choose the budget themselves
    such as PASHA: at least as far as any other trial); ``-inf`` must not
    count as a great loss.
    """
    curves = {**contract_curves(max_t), **poisoned_curves()}
    if _first(mode) == "max":
        curves = {k: _negated(c) for k, c in curves.items()}
    run = simulate(factory(), curves, max_concurrent=3, max_t=max_t, metric=metric, mode=mode)
    if not full_budget:
        max_t = max(run.steps.values())
    if run.steps["best"] < max_t:
        _fail(f"the best trial was ended at step {run.steps['best']} < {max_t} among "
              f"non-finite trials (reason: {run.stop_reasons.get('best')})")
    if run.best_trial != "best":
        _fail(f"the best value came from {run.best_trial!r}, not 'best'")


def _first(mode: Any) -> Any:
    return mode[0] if isinstance(mode, (list, tuple)) else mode


def _each(metric: Any, value: Any) -> dict[str, Any]:
    return {m: value for m in (metric if isinstance(metric, (list, tuple)) else [metric])}


def _negated(curve: Curve) -> Curve:
    def negated(step: int) -> Any:
        value = curve(step)  # type: ignore[operator]
        return -value if isinstance(value, float) else value
    return negated


def check_scheduler_contract(factory: Factory, *, max_t: int = 27, metric: Any = "loss",
                             mode: Any = "min", check_unknown_trial: bool = True,
                             full_budget: bool = True) -> None:
    """Run every contract check on schedulers built by ``factory`` (fixed seed).

    Raises:
        AssertionError: naming the property that does not hold.
    """
    check_deterministic(factory, max_t=max_t, metric=metric, mode=mode)
    check_stop_is_final(factory, max_t=max_t, metric=metric, mode=mode)
    check_non_finite_metrics(factory, max_t=max_t, metric=metric, mode=mode, full_budget=full_budget)
    if check_unknown_trial:
        check_unknown_trial_rejected(factory, metric=metric, mode=mode)


class SchedulerContract:
    """Test mixin: subclass it as ``class TestMine(SchedulerContract)`` and define
    :meth:`make_scheduler` (a fresh, seeded scheduler). Each check is a test."""

    max_t: int = 27
    check_unknown_trial: bool = True
    #: the objective(s) the scheduler is set to: a list checks a multi-objective scheduler
    #: (every metric gets the curve's value, and each check runs with every mode the same)
    metric: str | list[str] = "loss"
    #: False for schedulers that choose the budget themselves (PASHA): the best trial must get as far as any
    full_budget: bool = True

    def make_scheduler(self) -> TrialScheduler:
        raise NotImplementedError

    def _modes(self, mode: str) -> Any:
        return [mode] * len(self.metric) if isinstance(self.metric, list) else mode

    def test_contract_deterministic(self) -> None:
        for mode in ("min", "max"):
            check_deterministic(self.make_scheduler, max_t=self.max_t, metric=self.metric, mode=self._modes(mode))

    def test_contract_stop_is_final(self) -> None:
        check_stop_is_final(self.make_scheduler, max_t=self.max_t, metric=self.metric, mode=self._modes("min"))

    def test_contract_non_finite_metrics(self) -> None:
        for mode in ("min", "max"):
            check_non_finite_metrics(self.make_scheduler, max_t=self.max_t, metric=self.metric,
                                     mode=self._modes(mode), full_budget=self.full_budget)

    def test_contract_unknown_trial(self) -> None:
        if self.check_unknown_trial:
            check_unknown_trial_rejected(self.make_scheduler, metric=self.metric, mode=self._modes("min"))
