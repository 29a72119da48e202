"""Module-level trainables for the MLflow tests (workers import them by reference)."""

from __future__ import annotations

import json
import os
import tempfile

import tuneplat as tune
from tuneplat import train


def curve(config):
    """loss falls with the step; trials with fail=True raise at step 3; a checkpoint every step."""
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            start = json.load(open(os.path.join(d, "state.json")))["step"]
    for step in range(start + 1, config.get("steps", 4) + 1):
        if config.get("fail") and step == 3:
            raise ValueError("planned failure at step 3")
        if config.get("fail_once") and step == 3 and train.get_context().get_attempt() == 0:
            raise ValueError("planned one-time failure at step 3")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            tune.report({"loss": config["x"] ** 2 + 1.0 / step, "acc": step / 10, "nested": {"m": step}},
                        checkpoint=tune.Checkpoint.from_directory(d))


def many_reports(config):
    for step in range(config.get("steps", 100)):
        tune.report({"loss": config["x"] / (step + 1), "a": step, "b": step * 2.0})


def slow_reports(config):
    """Hangs at step 10 until the experiment folder holds a file named ``restoring`` (so a test can kill the tuner
    mid-sweep, then restore it); runs through after. (Not ``get_attempt() == 0``: a trial that never started
    before the crash runs its attempt 0 after the restore.)"""
    import time

    start = 0
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            start = json.load(open(os.path.join(d, "state.json")))["step"]
    for step in range(start + 1, config.get("steps", 30) + 1):
        restoring = os.path.join(os.path.dirname(train.get_context().get_trial_dir()), "restoring")
        if step == 10 and not os.path.exists(restoring):
            time.sleep(600)  # the first run hangs here until the test kills the tuner
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            tune.report({"loss": config["x"] + 1.0 / step}, checkpoint=tune.Checkpoint.from_directory(d))
