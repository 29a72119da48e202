"""A Dask worker group's end, decided by one pure function of the group (no cluster needed): every branch."""

from __future__ import annotations

import pytest

from tuneplat.execution._dask_state import RankEnd, _Group, _Rank, outcome
from tuneplat.execution._executor import Outcome
from tuneplat.execution._failure import ERROR, LOST, Failure
from tuneplat.execution._placement import Assignment


def _group(*ends: RankEnd, connected: bool = True, **flags) -> _Group:
    ranks = [_Rank(i, Assignment(f"tcp://10.0.0.{i}:1", f"h{i}"), finished=end, ever_connected=connected)
             for i, end in enumerate(ends)]
    group = _Group("t", 0, b"token", ranks)
    for k, v in flags.items():
        setattr(group, k, v)
    return group


@pytest.mark.parametrize(("group", "expected"), [
    (_group(RankEnd.DONE, RankEnd.DONE), (Outcome.FINISHED, None)),
    (_group(RankEnd.ABORTED, aborted=True, abort_reason="stopped"), (Outcome.ABORTED, "stopped")),
    (_group(RankEnd.LOST, lost_before_start=True, aborted=True), (Outcome.NOT_STARTED,
                                                                  "a worker was lost before the trial started")),
    (_group(RankEnd.DONE, lost_before_start=True, requeued="nested fit waits"), (Outcome.NOT_STARTED,
                                                                                 "nested fit waits")),
    (_group(RankEnd.ABORTED, resize_reason="2 more worker(s) free", aborted=True), (Outcome.RESIZED,
                                                                                   "2 more worker(s) free")),
    (_group(RankEnd.ERROR, failure=("rank 0: ValueError: x", "tb")), (Outcome.FAILED, "rank 0: ValueError: x")),
])
def test_each_end_of_a_group(group, expected):
    how, message, _tb, failure = outcome(group)
    assert (how, message) == expected
    assert (failure is not None) == (how is Outcome.FAILED)


def test_a_failure_keeps_its_type_and_a_preempted_group_that_lost_a_rank_resizes():
    typed = Failure(LOST, (), 1, "h1", "rank 1 lost its connection")
    failed = _group(RankEnd.DEAD, failure=("rank 1 lost its connection", None), failure_info=typed)
    assert outcome(failed)[3] is typed
    untyped = _group(RankEnd.ERROR, failure=("boom", None))
    assert outcome(untyped)[3] == Failure(ERROR, message="boom")
    preempted = _group(RankEnd.DEAD, failure=("rank 0 lost", None), preempted="host h0 preempted (SIGTERM)")
    how, message, _tb, failure = outcome(preempted)
    assert how is Outcome.RESIZED and failure is None and "left before a checkpoint was committed" in message


def test_a_group_whose_ranks_never_connected_failed_as_lost():
    how, message, _tb, failure = outcome(_group(RankEnd.DONE, RankEnd.DONE, connected=False))
    assert how is Outcome.FAILED and "never connected" in message
    assert failure is not None and failure.kind == LOST and failure.rank == 0


def test_a_rank_end_reads_as_its_value():
    assert RankEnd.DEAD == "dead" and f"{RankEnd.LOST.value}" == "lost" and RankEnd("aborted") is RankEnd.ABORTED
