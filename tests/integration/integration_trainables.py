"""Module-level trainables for the scheduler / Optuna end-to-end tests (workers import them by name)."""

from __future__ import annotations

import json
import math
import os
import tempfile

import tuneplat as tune
from tuneplat import Checkpoint


def _load_state() -> dict | None:
    ckpt = tune.get_checkpoint()
    if ckpt is None:
        return None
    with open(os.path.join(ckpt.path, "state.json"), encoding="utf-8") as f:
        return json.load(f)


def _report(metrics: dict, state: dict) -> None:
    """report() with a checkpoint holding ``state``; the scratch folder is gone once report() has stored it."""
    with tempfile.TemporaryDirectory(prefix="tp-int-") as folder:
        with open(os.path.join(folder, "state.json"), "w", encoding="utf-8") as f:
            json.dump(state, f)
        tune.report(metrics, checkpoint=Checkpoint.from_directory(folder))


def learning_curve(config):
    """loss(step) = floor + scale * exp(-rate * step): same shape, ordered by ``floor``.

    Checkpoints every step (its own step counter and trial id), resumes from
    ``get_checkpoint()`` and reports ``step`` (its own count) and
    ``resumed_at`` (the step it restarted from, 0 for a fresh start), so a
    test can check that a resumed trial neither lost nor repeated a step.
    """
    me = tune.get_context().get_trial_id()
    state = _load_state()
    step = state["step"] if state else 0
    resumed_at = step
    while step < config.get("max_steps", 100):
        step += 1
        loss = config["floor"] + config.get("scale", 1.0) * math.exp(-config.get("rate", 0.2) * step)
        _report({"loss": loss, "step": step, "resumed_at": resumed_at}, {"step": step, "trial_id": me})


def curve_no_checkpoint(config):
    """The same curve without checkpoints (ASHA / median stopping need none)."""
    for step in range(1, config.get("max_steps", 100) + 1):
        tune.report({"loss": config["floor"] + math.exp(-0.2 * step)})


def bad_values(config):
    """A curve whose metric is NaN / inf / -inf per ``config["bad"]`` ("ok0", "ok3": finite, floors 0 and 0.3)."""
    kind = config.get("bad")
    floor = {"ok0": 0.0, "ok3": 0.3}.get(kind, 0.5)
    for step in range(1, config.get("max_steps", 9) + 1):
        loss = floor + math.exp(-0.2 * step)
        if kind == "nan":
            loss = math.nan
        elif kind == "inf":
            loss = math.inf
        elif kind == "-inf":
            loss = -math.inf
        elif kind == "nan_late" and step >= 3:
            loss = math.nan
        _report({"loss": loss}, {"step": step, "trial_id": "x"})


def pbt_quadratic(config):
    """Jaderberg et al.'s toy: ascend Q(theta) = 1.2 - |theta|^2 with the surrogate's gradient.

    The surrogate is 1.2 - (h0 theta0^2 + h1 theta1^2); h = (config["h0"],
    config["h1"]) are the hyperparameters PBT tunes. The checkpoint holds
    theta, the trainable's own step and the id of the trial that wrote it,
    which each result reports (``ckpt_trial``, ``ckpt_step``) so a test sees
    where a restarted trial's state came from.
    """
    me = tune.get_context().get_trial_id()
    state = _load_state()
    if state is None:
        theta, step, ckpt_trial, ckpt_step = [0.9, 0.9], 0, None, 0
    else:
        theta, step, ckpt_trial, ckpt_step = state["theta"], state["step"], state["trial_id"], state["step"]
    while step < config.get("steps", 30):
        step += 1
        theta = [theta[0] - config.get("lr", 0.05) * 2 * config["h0"] * theta[0],
                 theta[1] - config.get("lr", 0.05) * 2 * config["h1"] * theta[1]]
        q = 1.2 - (theta[0] ** 2 + theta[1] ** 2)
        _report({"Q": q, "own_step": step, "ckpt_trial": ckpt_trial, "ckpt_step": ckpt_step},
                {"theta": theta, "step": step, "trial_id": me})


def quadratic_curve(config):
    """loss(x, step) = (x - 1)^2 + exp(-step/2); raises for x < -4 (an erroring trial)."""
    if config["x"] < -4:
        raise ValueError(f"x={config['x']} is out of the model's range")
    for step in range(1, config.get("steps", 5) + 1):
        tune.report({"loss": (config["x"] - 1.0) ** 2 + math.exp(-step / 2)})


def two_objectives(config):
    """Conflicting objectives: loss = (x - 1)^2 + y, latency = x^2 + y (the front has y = 0, 0 <= x <= 1)."""
    x, y = config["x"], config["y"]
    tune.report({"loss": (x - 1.0) ** 2 + y, "latency": x ** 2 + y})
