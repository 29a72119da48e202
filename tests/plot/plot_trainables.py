"""Trainables of the plot tests: small learning curves run by real Dask worker processes."""

from __future__ import annotations

import json
import math
import os
import tempfile

import tuneplat as tune


def curve(config: dict) -> None:
    """loss falls from 1 + floor towards floor over ``steps`` iterations (ASHA's test curve)."""
    for step in range(1, int(config.get("steps", 9)) + 1):
        tune.report({"loss": config["floor"] + 1.0 / step, "acc": 1.0 - config["floor"]})


def checkpointed_curve(config: dict) -> None:
    """The same curve, checkpointed every step, so HyperBand can pause and resume it."""
    step = 0
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d, open(os.path.join(d, "s.json"), encoding="utf-8") as f:
            step = json.load(f)["step"]
    while step < int(config.get("steps", 9)):
        step += 1
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "s.json"), "w", encoding="utf-8") as f:
                json.dump({"step": step}, f)
            tune.report({"loss": config["floor"] + 1.0 / step}, checkpoint=tune.Checkpoint.from_directory(d))


def quadratic(config: dict) -> None:
    """loss = 10 x^2: ``x`` matters, ``noise`` does not (it is only reported back)."""
    for step in range(1, 4):
        tune.report({"loss": 10.0 * config["x"] ** 2 + 1.0 / step, "noise_seen": config["noise"]})


def two_objectives(config: dict) -> None:
    """error falls and cost rises with width: a trade-off with a Pareto front."""
    width = config["width"]
    tune.report({"error": 1.0 / math.sqrt(width) + 0.01 * config["jitter"], "cost": width / 100.0})


def fails_at_once(config: dict) -> None:
    raise RuntimeError("fails before reporting anything")
