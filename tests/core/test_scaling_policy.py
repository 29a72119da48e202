"""The elastic ScalingPolicy as a table: inputs (bounds, group, waiting trials, free workers) -> decision."""

from __future__ import annotations

import pytest

from tuneplat.core._scaling import GroupSize, Noop, Resize, ScalingPolicy


def _free(n: int):
    """``free(limit)`` of a cluster with ``n`` free workers; records each call's limit."""
    calls: list[int] = []

    def free(limit: int) -> int:
        calls.append(limit)
        return min(n, limit)

    free.calls = calls  # type: ignore[attr-defined]
    return free


# (policy, group, waiting, free workers) -> decision, whether the cluster was asked
TABLE = [
    # no checkpoint at this step: never resized (a step would be lost), not even when preempted
    ("2-4", GroupSize(2, checkpointed=False), 0, 2, Noop(), False),
    ("2-4", GroupSize(2, checkpointed=False, preempted="host h preempted (x)", preempted_ranks=1), 0, 2, Noop(), False),
    # a preemption notice resizes at the checkpoint, whatever waits or is free; n: the ranks that stay (>= min)
    ("2-4", GroupSize(3, True, "host h preempted (x)", 1), 5, 0, Resize(2, "host h preempted (x)"), False),
    ("2-4", GroupSize(2, True, "host h preempted (x)", 1), 0, 0, Resize(2, "host h preempted (x)"), False),
    # a fixed-size group (num_workers=n) restarts when preempted, and never grows
    ("4", GroupSize(4, True, "host h preempted (x)", 2), 0, 0, Resize(4, "host h preempted (x)"), False),
    ("4", GroupSize(3, True), 0, 8, Noop(), False),
    # growth: free workers, nobody waits, below the maximum
    ("2-4", GroupSize(2, True), 0, 1, Resize(3, "1 more worker(s) free"), True),
    ("2-4", GroupSize(2, True), 0, 5, Resize(4, "2 more worker(s) free"), True),
    ("2-4", GroupSize(2, True), 0, 0, Noop(), True),
    # others wait for room: they start first, the group does not grow
    ("2-4", GroupSize(2, True), 1, 4, Noop(), False),
    # at its maximum already
    ("2-4", GroupSize(4, True), 0, 4, Noop(), False),
    # elastic_resize_monitor_interval_s: too young to grow, then old enough
    ("2-4/60", GroupSize(2, True, age_s=59.0), 0, 2, Noop(), False),
    ("2-4/60", GroupSize(2, True, age_s=60.0), 0, 2, Resize(4, "2 more worker(s) free"), True),
]


def _policy(spec: str) -> ScalingPolicy:
    bounds, _, interval = spec.partition("/")
    lo, _, hi = bounds.partition("-")
    if not hi:
        return ScalingPolicy.of(int(lo), None)
    return ScalingPolicy.of(int(hi), int(lo), float(interval) if interval else None)


@pytest.mark.parametrize(("spec", "group", "waiting", "free", "decision", "asked"), TABLE)
def test_decision_table(spec, group, waiting, free, decision, asked):
    policy = _policy(spec)
    cluster = _free(free)
    assert policy.at_checkpoint(group, waiting, cluster) == decision
    # the cluster's free workers (a scheduler round trip on Dask) are looked up only when the group could grow,
    # and then for at most the ranks it may still add
    assert cluster.calls == ([policy.max_workers - group.size] if asked else [])


@pytest.mark.parametrize(("spec", "waiting", "bounds"), [
    ("2-4", 0, (2, 4)),  # nobody waits: as many as fit, up to the maximum
    ("2-4", 1, (2, 2)),  # others wait for room: only the minimum (they start first)
    ("3", 0, (3, 3)),  # a fixed-size group: its size
    ("3", 2, (3, 3)),
])
def test_start_bounds(spec, waiting, bounds):
    assert _policy(spec).start_bounds(waiting) == bounds


def test_only_elastic_groups_need_the_waiting_count_and_bounds_are_checked():
    assert _policy("2-4").wants_waiting() and not _policy("4").wants_waiting()
    with pytest.raises(ValueError, match="1 <= min_workers <= max_workers"):
        ScalingPolicy(3, 2)
