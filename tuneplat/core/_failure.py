"""What follows a failed attempt: :class:`FailurePolicy` (Ray Train V2's ``FailurePolicy`` shape).

One object owns the three budgets of ``FailureConfig`` (``max_failures``,
``max_oom_retries`` with ``oom_halve``, ``max_preemption_failures``) and decides,
from the trial and its typed :class:`~tuneplat.execution._failure.Failure`:
:class:`Retry` (from the latest checkpoint), :class:`RetrySmaller` (an OOM retried
with a smaller config), :class:`Requeue` (a lost start, a preemption: no failure counted)
or :class:`End` (the trial ends as an error). The loop
carries the decision out (journal events, the queue); the policy writes nothing.

Example:
    >>> from tuneplat import FailureConfig
    >>> from tuneplat.core._trial import Trial
    >>> from tuneplat.execution._failure import Failure
    >>> policy = FailurePolicy(FailureConfig(max_failures=1))
    >>> trial = Trial(trial_id="t", config={}, path="/tmp/t", name="t")
    >>> policy.decide(trial, Failure("error", message="boom"))
    Retry(kind='error')
    >>> trial.num_failures = 1
    >>> policy.decide(trial, Failure("error", message="boom again"))
    End(kind='error', error='boom again')
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from .._config import FailureConfig
from ..execution._failure import OOM, Failure
from ._oom import shrink_config
from ._trial import Trial

__all__ = ["End", "FailureDecision", "FailurePolicy", "Requeue", "Retry", "RetrySmaller"]

logger = logging.getLogger("tuneplat")


@dataclass(frozen=True)
class Retry:
    """Run the trial again from its latest checkpoint (counts against ``max_failures``)."""

    kind: str | None = None


@dataclass(frozen=True)
class RetrySmaller:
    """Out of memory: run again with ``config`` (``change``: ``{key: [old, new]}``); its own budget."""

    config: dict[str, Any]
    change: dict[str, Any]
    kind: str = OOM


@dataclass(frozen=True)
class End:
    """The trial ends as an error with ``error``."""

    kind: str | None
    error: str


@dataclass(frozen=True)
class Requeue:
    """Put the trial back in the queue without counting a failure (a lost start, a preempted host)."""

    reason: str
    #: its attempt ran no user code: it does not count as an attempt either
    not_started: bool = False


FailureDecision = Retry | RetrySmaller | Requeue | End


class FailurePolicy:
    """Decides what follows a failure, within ``FailureConfig``'s budgets (see the module docstring).

    Args:
        config: the experiment's ``FailureConfig``.
    """

    def __init__(self, config: FailureConfig) -> None:
        self.config = config

    def decide(self, trial: Trial, failure: Failure, *, retryable: bool = True) -> FailureDecision:
        """What follows ``failure`` of ``trial`` (whose ``num_failures`` does not count this one yet).

        Args:
            trial: the trial, as its state holds it.
            failure: the attempt's failure, typed.
            retryable: False when no retry can help (the experiment is stopping, or every trial would fail the
                same way, as with a misspelt metric): the trial ends.
        """
        fc = self.config
        if failure.kind == OOM and retryable and fc.oom_halve is not None and trial.oom_retries < fc.max_oom_retries:
            try:
                shrunk = shrink_config(trial.config, fc.oom_halve, fc.oom_double)
            except ValueError as exc:
                shrunk = None
                logger.warning("tuneplat: trial %s ran out of memory and cannot be shrunk: %s", trial.trial_id, exc)
            if shrunk is not None:
                return RetrySmaller(shrunk[0], shrunk[1])
        failures = trial.num_failures + 1
        if retryable and (fc.max_failures == -1 or failures <= fc.max_failures):
            return Retry(failure.kind)
        message = failure.message
        return End(failure.kind, f"out of memory (OOM): {message}" if failure.kind == OOM else message)

    def lost_start(self, message: str | None) -> Requeue:
        """A worker was lost before the trial's code ran: it is placed again; nothing counts."""
        return Requeue(message or "a worker was lost before the trial started", not_started=True)

    def preempted(self, trial: Trial, message: str | None) -> Requeue | End:
        """``trial``'s group ended because its host was preempted (its preemptions counted, this one included):
        it starts again from its checkpoint, or ends once ``max_preemption_failures`` is spent."""
        budget = self.config.max_preemption_failures
        if budget != -1 and trial.num_preemptions > budget:
            return End("preempted", f"preempted {trial.num_preemptions} times, more than "
                                    f"FailureConfig(max_preemption_failures={budget}): {message}")
        return Requeue(f"elastic resize: {message}")
