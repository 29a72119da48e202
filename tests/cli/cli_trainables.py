"""Trainables for the CLI tests, referenced by *file path* from sweep files (shipped to workers by value)."""

from __future__ import annotations

import json
import os
import tempfile
import time

import tuneplat as tune


def fail_unless_file(config: dict) -> None:
    """Raises unless ``config["ok_file"]`` exists; else reports ``loss`` for 3 steps."""
    if not os.path.exists(config["ok_file"]):
        raise RuntimeError(f"ok file {config['ok_file']} is missing")
    for step in range(3):
        tune.report({"loss": config["x"] + 1.0 / (step + 1)})


def gated(config: dict) -> None:
    """Counts steps with a checkpoint each; after step 2 it keeps reporting until ``gate_file`` exists.

    So a test can interrupt the experiment while every trial is mid-run
    (the journal shows results), then open the gate and resume.
    """
    step = 0
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d, open(os.path.join(d, "state.json"), encoding="utf-8") as f:
            step = json.load(f)["step"]
    while step < 6:
        if step >= 2 and not os.path.exists(config["gate_file"]):
            time.sleep(0.05)  # the workload waits for the test; reporting keeps it interruptible
            tune.report({"waiting": 1.0, "loss": float(config["x"]), "step": step})
            continue
        step += 1
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w", encoding="utf-8") as f:
                json.dump({"step": step}, f)
            tune.report({"loss": float(config["x"]) - step, "step": step}, checkpoint=tune.Checkpoint.from_directory(d))


def dip(config: dict) -> None:
    """``loss`` dips at step 2 then rises (best ever != last); ``fail=True`` raises a long error at step 1."""
    for step, factor in enumerate([3.0, 1.0, 2.0, 2.5]):
        if config.get("fail") and step == 1:
            raise RuntimeError("this trial failed on purpose with a long message that a table column would cut: "
                               "the full text must stay readable in the live view and in tuneplat status")
        tune.report({"loss": factor * config["x"]})
