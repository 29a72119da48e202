"""Ray Train V2's error classes: what ``Trainer.fit()`` raises when training fails.

``TrainingFailedError`` is the base; ``WorkerGroupError`` carries each failed
rank's exception (``worker_failures``), ``ControllerError`` a failure outside
the ranks (the group could not be placed, the run could not start),
``PreemptionError`` a run whose preemption budget
(``FailureConfig(max_preemption_failures=...)``) ran out.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["ControllerError", "NCCLHangError", "PreemptionError", "TrainingFailedError", "WorkerGroupError", "fit_error"]


class TrainingFailedError(RuntimeError):
    """``Trainer.fit()`` failed (``ray.train.TrainingFailedError``): a :class:`WorkerGroupError`,
    a :class:`ControllerError` or a :class:`PreemptionError`."""


class WorkerGroupError(TrainingFailedError):
    """Ranks of the group failed (``ray.train.WorkerGroupError``).

    Args:
        error_message: what failed, readable.
        worker_failures: each failed rank (its world rank) to the exception it raised
            (a :class:`tuneplat.TrialError` with the rank's traceback).
    """

    def __init__(self, error_message: str, worker_failures: dict[int, Exception]) -> None:
        super().__init__("Training failed due to worker errors:\n" + error_message)
        self._error_message = error_message
        self.worker_failures = worker_failures

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self._error_message, self.worker_failures))


class NCCLHangError(WorkerGroupError):
    """Ray's error for a hang its NCCL watchdog saw (``ray.train.NCCLHangError``). tuneplat reports a hung group
    as a :class:`WorkerGroupError` naming the ranks and their stacks (``docs/observability.md``); this class is
    there for ``except`` clauses ported from Ray."""


class ControllerError(TrainingFailedError):
    """The run failed outside its ranks (``ray.train.ControllerError``).

    Args:
        controller_failure: the exception (e.g. a :class:`tuneplat.PlacementError`).
    """

    def __init__(self, controller_failure: Exception) -> None:
        super().__init__("Training failed due to controller error:\n" + str(controller_failure))
        self.controller_failure = controller_failure

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.controller_failure,))


class PreemptionError(TrainingFailedError):
    """Preemptions used up ``FailureConfig(max_preemption_failures=...)`` (``ray.train.PreemptionError``).

    Args:
        preemption_info: the last preemption (a :class:`tuneplat.train.PreemptionInfo`).
        drain_timed_out: Ray's flag (the deadline passed while ranks still ran); tuneplat reports False.
    """

    def __init__(self, preemption_info: Any, drain_timed_out: bool = False) -> None:
        self.preemption_info = preemption_info
        self.drain_timed_out = drain_timed_out
        ranks = getattr(preemption_info, "preempted_ranks", preemption_info)
        super().__init__(f"Training was interrupted by node preemption (preempted_ranks={ranks}, "
                         f"drain_timed_out={drain_timed_out}).")

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.preemption_info, self.drain_timed_out))


_RANK = re.compile(r"^rank (\d+)\b")
_RANKS = re.compile(r"^rank\(s\) \[([\d, ]+)\]")


def failed_ranks(message: str) -> list[int]:
    """The ranks a group failure message names (``rank 1: ...``, ``rank(s) [0, 2] did not ...``); [] when none."""
    m = _RANK.match(message)
    if m:
        return [int(m.group(1))]
    m = _RANKS.match(message)
    if m:
        return [int(x) for x in m.group(1).replace(" ", "").split(",") if x]
    return []


def worker_failures(error: Exception) -> dict[int, Exception]:
    """Each failed rank to its exception, from a trial's error (``{}`` when no rank is named)."""
    return {rank: error for rank in failed_ranks(str(getattr(error, "args", [""])[0] if error.args else ""))}


def fit_error(error: Exception, preemption: bool = False) -> TrainingFailedError:
    """What ``Trainer.fit()`` raises for the run's ``error``: ranks named → :class:`WorkerGroupError`;
    preemptions over budget → :class:`PreemptionError`; else :class:`ControllerError`."""
    message = str(error.args[0]) if error.args else str(error)
    if preemption or (message.startswith("preempted ") and "max_preemption_failures" in message):
        from ._session import PreemptionInfo

        return PreemptionError(PreemptionInfo(None, {}, message))
    failures = worker_failures(error)
    if failures:
        return WorkerGroupError(str(error), failures)
    return ControllerError(error)
