"""Elastic group sizing as one policy: what a group of ``ScalingConfig(num_workers=(min, max))`` does.

The decision used to be spread over the loop (how many trials wait), the seam
(``set_waiting``) and the Dask executor (how many ranks a start takes, whether a
group restarts at a checkpoint). It is made here, from plain inputs, and carried
out by the executor:

* at a start, :meth:`ScalingPolicy.start_bounds` gives the fewest and the most
  ranks to place (only the minimum while other trials wait for room: they start
  first);
* at each answered report, :meth:`ScalingPolicy.at_checkpoint` returns
  :class:`Noop` or :class:`Resize` (the group ends at the checkpoint just
  committed and starts again with about ``n`` ranks: placement takes what fits
  within the bounds). A preemption notice resizes at the next checkpoint; free
  workers grow a group at a checkpoint when nobody waits for room and the
  group is older than ``elastic_resize_monitor_interval_s``.

Nothing here touches an executor, a socket or a clock: the inputs say what is
true now (``free`` is asked only when growing is possible, since looking the
cluster's free workers up is a scheduler round trip on Dask).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["GroupSize", "Noop", "Resize", "ScalingDecision", "ScalingPolicy"]


@dataclass(frozen=True)
class Noop:
    """The group goes on as it is."""


@dataclass(frozen=True)
class Resize:
    """End the group at the checkpoint just committed; start it again from it with ``n`` ranks.

    Attributes:
        n: the ranks the policy expects the new group to have (placement decides within the group's bounds).
        reason: why, as journaled and shown to the user.
    """

    n: int
    reason: str


ScalingDecision = Noop | Resize

#: the one :class:`Noop`
NOOP = Noop()


@dataclass(frozen=True)
class GroupSize:
    """What a running group looks like when its report is answered.

    Attributes:
        size: its ranks now.
        checkpointed: the report being answered committed a checkpoint (a resize restarts from it: none is lost).
        preempted: the preemption notice of one of its workers (its reason); None when none came.
        preempted_ranks: how many of its ranks are on workers that are leaving.
        age_s: seconds since the group started.
    """

    size: int
    checkpointed: bool
    preempted: str | None = None
    preempted_ranks: int = 0
    age_s: float = 0.0


class ScalingPolicy:
    """How big a trial's worker group is: ``Noop | Resize(n)`` from free slots, waiting trials, bounds, notices.

    Args:
        min_workers: the group's fewest ranks (``ScalingConfig(num_workers=(min, max))``).
        max_workers: its most ranks.
        elastic: whether the group may change size at all (a fixed-size group only restarts when preempted).
        grow_interval_s: a group grows no sooner than this many seconds after it started (Ray's
            ``elastic_resize_monitor_interval_s``); None: at any checkpoint.

    Example:
        >>> policy = ScalingPolicy(2, 4)
        >>> policy.start_bounds(waiting=0), policy.start_bounds(waiting=3)
        ((2, 4), (2, 2))
        >>> policy.at_checkpoint(GroupSize(size=2, checkpointed=True), waiting=0, free=lambda limit: 1)
        Resize(n=3, reason='1 more worker(s) free')
    """

    def __init__(self, min_workers: int, max_workers: int, *, elastic: bool = True,
                 grow_interval_s: float | None = None) -> None:
        if not 1 <= min_workers <= max_workers:
            raise ValueError(f"ScalingPolicy(min_workers={min_workers!r}, max_workers={max_workers!r}): must be "
                             "1 <= min_workers <= max_workers")
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.elastic = elastic
        self.grow_interval_s = grow_interval_s

    @classmethod
    def of(cls, world_size: int, min_world_size: int | None, grow_interval_s: float | None = None) -> ScalingPolicy:
        """The policy of an experiment: elastic when ``min_world_size`` is given (``ExecutorContext``'s fields)."""
        if min_world_size is None:
            return cls(world_size, world_size, elastic=False)
        return cls(min_world_size, world_size, grow_interval_s=grow_interval_s)

    def start_bounds(self, waiting: int) -> tuple[int, int]:
        """``(fewest, most)`` ranks to place a group with; ``waiting``: other trials that wait for room.

        An elastic group takes as many ranks as fit up to its maximum, but only its minimum while others wait
        (they start first; spare workers grow running groups at their checkpoints once nobody waits).
        """
        if not self.elastic:
            return self.max_workers, self.max_workers
        return self.min_workers, self.min_workers if waiting > 0 else self.max_workers

    def at_checkpoint(self, group: GroupSize, waiting: int, free: Callable[[int], int]) -> ScalingDecision:
        """What ``group`` does at the report being answered (a CONTINUE): :class:`Noop` or :class:`Resize`.

        Args:
            group: the group now.
            waiting: other trials that wait for room.
            free: ``free(limit)`` -> how many more ranks of the group's shape fit now (at most ``limit``);
                called at most once, only when the group could grow.
        """
        if not group.checkpointed:
            return NOOP  # (a resize restarts from the checkpoint of this step: without one a step would be lost)
        if group.preempted is not None:
            return Resize(max(self.min_workers, group.size - group.preempted_ranks), group.preempted)
        if not self.elastic or group.size >= self.max_workers or waiting > 0:
            return NOOP
        if self.grow_interval_s is not None and group.age_s < self.grow_interval_s:
            return NOOP
        more = free(self.max_workers - group.size)
        if more <= 0:
            return NOOP
        return Resize(group.size + more, f"{more} more worker(s) free")

    def wants_waiting(self) -> bool:
        """Whether the executor needs to know how many trials wait for room (elastic groups only)."""
        return self.elastic

    def __repr__(self) -> str:
        kind = "elastic" if self.elastic else "fixed"
        return f"ScalingPolicy({self.min_workers}, {self.max_workers}, {kind}, grow_interval_s={self.grow_interval_s})"
