"""The rank-tuner messages, typed on both ends (``tuneplat/execution/_protocol.py``): every kind round-trips through
the real frames, a malformed message is refused with a message that says what is wrong, and on a real cluster a rank
that sends one fails its own trial only."""

from __future__ import annotations

import socket

import pytest

from schedulers import Decision
from tuneplat import RunConfig, TuneConfig, Tuner, grid_search, report
from tuneplat.execution import _protocol as proto
from tuneplat.execution._cluster import Assignment
from tuneplat.execution._dask_executor import DaskTrialExecutor
from tuneplat.execution._wire import recv_msg, send_msg
from tuneplat.train._session import RankSpec, _current_session


def _spec() -> RankSpec:
    return RankSpec(trial_id="t_00000", trial_name="f_t_00000", experiment_name="exp", trial_dir="/tmp/exp/t",
                    attempt=0, rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0,
                    tuner_addr=("127.0.0.1", 1), token=b"0" * 16, config={"lr": 0.1})


#: one message of every kind (rank to tuner, then tuner to rank), with its optional fields set where it has any
EXAMPLES: list[proto.Message] = [
    proto.Hello(1, 4242, "host-a", {"oom_kill": 0}),
    proto.Ping({"cpu": [12.5], "rss": 1 << 20}),
    proto.Running({"oom_kill": 3}),
    proto.Rendezvous("127.0.0.1", 29500),
    proto.Gather(2, '["127.0.0.1", 41234]'),
    proto.Report(3, {"loss": 0.25, "training_iteration": 3}, True),
    proto.Saved(3),
    proto.Preempting("Dask worker tcp://127.0.0.1:4000 is closing_gracefully"),
    proto.Lease({"CPU": 1.0}, 2, "PACK"),
    proto.Unlease("tcp://127.0.0.1:4001"),
    proto.Requeue("every worker slot waits for a group"),
    proto.Done(True),
    proto.Error("ValueError: bad lr", "Traceback (most recent call last): ...", True),
    proto.Go(),
    proto.Answer(Decision.PAUSE, True, {"ranks": [1], "reason": "closing_gracefully"}),
    proto.Abort("the time budget is spent"),
    proto.Gathered(2, ['["127.0.0.1", 41234]', '["127.0.0.1", 41235]']),
    proto.Next(_spec()),
    proto.Bye(),
    proto.Leased([Assignment("tcp://127.0.0.1:4001", "127.0.0.1")]),
    proto.Refused("needs 4 slots beside the trial"),
]


def _decode(wire):
    kind = wire[0]
    return proto.from_rank(wire) if kind in proto.RANK_MESSAGES else proto.from_tuner(wire)


def test_the_examples_cover_every_kind():
    kinds = {type(m) for m in EXAMPLES}
    assert kinds == {*proto.RANK_MESSAGES.values(), *proto.TUNER_MESSAGES.values()}


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: m.KIND)
def test_every_kind_round_trips_through_the_frames(message):
    a, b = socket.socketpair()
    with a, b:
        proto.send(a, message)
        wire = recv_msg(b)
    assert wire == message.to_wire()
    got = _decode(wire)
    assert type(got) is type(message)
    if isinstance(message, proto.Next):
        assert got.spec.trial_id == message.spec.trial_id
    else:
        assert got == message


@pytest.mark.parametrize("message, wire", [
    (proto.Ping(), ("ping",)),
    (proto.Done(), ("done",)),
    (proto.Answer(Decision.CONTINUE), ("decision", Decision.CONTINUE)),
    (proto.Answer(Decision.STOP, save=True), ("decision", Decision.STOP, True)),
    (proto.Hello(0, 1, "h"), ("hello", 0, 1, "h")),
    (proto.Report(1, None, False), ("report", 1, None, False)),
], ids=lambda v: v.KIND if isinstance(v, proto.Message) else "")
def test_fields_at_their_default_are_left_off_the_end(message, wire):
    assert message.to_wire() == wire
    assert _decode(wire) == message


def test_a_decision_sent_as_its_value_is_read_as_the_enum():
    got = proto.from_tuner(("decision", "STOP"))
    assert got == proto.Answer(Decision.STOP)
    assert got.decision is Decision.STOP


@pytest.mark.parametrize("decode, wire, says", [
    (proto.from_rank, ("report", "3", {"loss": 1.0}, False), "a 'report' message whose 'iteration' is str, not int"),
    (proto.from_rank, ("report", 3, {"loss": 1.0}), "a 'report' message has 2 field(s), expected ('report', "
                                                    "iteration: int, result: dict[str, Any] | None, staged: bool)"),
    (proto.from_rank, ("report", 3, [1.0], False), "'result' is list, not dict or None"),
    (proto.from_rank, ("done", 1), "a 'done' message whose 'chainable' is int, not bool"),
    (proto.from_rank, ("hello", True, 1, "h"), "'rank' is bool, not int"),
    (proto.from_rank, ("go",), "('go',) is not one of its messages"),
    (proto.from_rank, ["report", 3, None, False], "is not one of its messages"),
    (proto.from_rank, b"\x80report", "is not one of its messages"),
    (proto.from_tuner, ("decision", "MAYBE"), "'MAYBE' is not a valid Decision"),
    (proto.from_tuner, ("report", 3, None, False), "malformed message from the tuner"),
    (proto.from_tuner, ("next", {"trial_id": "x"}), "'spec' is a dict, not a rank's spec"),
    (proto.from_tuner, ("leased", ["tcp://127.0.0.1:1"]), "'assignments' holds str, not a slot's Assignment"),
    (proto.from_rank, ("gather", 1, {"host": "h"}), "a 'gather' message whose 'payload' is dict, not str"),
    (proto.from_tuner, ("gathered", 1, ["1", 2]), "'payloads' holds int, not JSON text"),
    (proto.from_tuner, ("abort",), "a 'abort' message has 0 field(s)"),
    (proto.from_tuner, ("bye", "now"), "a 'bye' message has 1 field(s)"),
])
def test_a_malformed_message_is_refused_saying_what_is_wrong(decode, wire, says):
    with pytest.raises(proto.ProtocolError) as info:
        decode(wire)
    text = str(info.value)
    assert text.startswith("malformed message from ")
    assert says in text


# ---------------------------------------------------------------------- on a real cluster
def malformed_first_report(config):
    if config["malformed"]:
        session = _current_session()
        assert session is not None
        with session.send_lock:  # what a rank of another version (or a bug) might send: iteration as a string
            send_msg(session.sock, ("report", "one", {"loss": 1.0}, False))
    for i in range(3):
        report({"loss": 1.0 / (i + 1)})


def test_a_rank_that_sends_a_malformed_message_fails_its_own_trial_only(dask_client, tmp_path):
    grid = Tuner(malformed_first_report, param_space={"malformed": grid_search([True, False])},
                 tune_config=TuneConfig(metric="loss", mode="min"),
                 run_config=RunConfig(name="protocol", storage_path=str(tmp_path), verbose=0, mlflow=False),
                 executor=DaskTrialExecutor(dask_client)).fit()
    by_case = {r.config["malformed"]: r for r in grid}
    bad, good = by_case[True], by_case[False]
    assert bad.error is not None
    message = str(bad.error)
    assert "rank 0: malformed message from a rank: a 'report' message whose 'iteration' is str, not int" in message
    assert bad.metrics_dataframe is None or len(bad.metrics_dataframe) == 0
    assert good.error is None and good.metrics["training_iteration"] == 3
