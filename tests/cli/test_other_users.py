"""Another local user (uid 65534) asking about a running experiment (issue 33): told permission is denied, whose
experiment it is and what to do, never that it "is not running"."""

from __future__ import annotations

import os
import shutil
import tempfile

import harden_trainables as H
import other_user
import pytest

import tuneplat as tune
from tuneplat.core._callbacks import ControllerCallback


def _cli(stop_fd: int, argv: list[str]) -> dict:
    """As the other user: ``tuneplat ARGV`` in this (forked) process; its exit status and what it printed."""
    import contextlib
    import io

    from tuneplat.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return {"rc": rc, "out": out.getvalue(), "err": err.getvalue()}


class _AskWhileRunning(ControllerCallback):
    """At the trial's first result (the experiment is running, its lock held), runs the CLI as uid 65534."""

    def __init__(self, commands: list[list[str]]) -> None:
        self.commands = commands
        self.answers: list[dict] = []

    def on_trial_result(self, ctrl, trial, result):
        if result["i"] == 1:
            for argv in self.commands:
                self.answers.append(other_user.start_as_nobody(_cli, argv).finish(timeout=120))


@pytest.mark.timeout(600)
def test_another_users_stacks_and_status_of_a_running_experiment_say_permission_denied(dask_client):
    reason = other_user.why_not()
    if reason:
        pytest.skip(reason)
    # a folder the other user can look into (the session's temporary folder is private to this user)
    storage = tempfile.mkdtemp(prefix="tuneplat-other-user-", dir="/tmp")
    try:
        os.chmod(storage, 0o755)
        exp = os.path.join(storage, "theirs")
        cb = _AskWhileRunning([["stacks", exp], ["status", exp]])
        results = tune.Tuner(
            H.counts, param_space={"x": 0.0, "n": 3},
            tune_config=tune.TuneConfig(metric="loss", mode="min"),
            run_config=tune.RunConfig(storage_path=storage, name="theirs", verbose=0, mlflow=False, callbacks=[cb]),
            client=dask_client,
        ).fit()
        assert results[0].error is None
        assert len(cb.answers) == 2, cb.answers
        for answer in cb.answers:
            assert answer and "error" not in answer, answer
            assert answer["rc"] != 0
            assert "permission denied" in answer["err"] and "not running" not in answer["err"], answer
            assert "belongs to user root (uid 0)" in answer["err"] and "you are uid 65534" in answer["err"], answer
    finally:
        shutil.rmtree(storage, ignore_errors=True)
