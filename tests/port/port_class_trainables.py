"""Class trainables written as a Ray Tune user writes them (workers import them by reference)."""

from __future__ import annotations

import json
import os

import tuneplat as tune


class Accumulator(tune.Trainable):
    """Adds ``x`` per step; checkpoints its total as a dict (``ckpt="dict"``) or a file (``ckpt="dir"``).

    ``steps`` (optional): the step that says ``done``. ``fail_at`` with ``marker_dir``: raises once at that iteration.
    """

    def setup(self, config):
        self.x = config.get("x", 1.0)
        self.total = 0.0
        self.loaded = None  # (owner trial, total) of the checkpoint loaded, if any
        self.loads = 0

    def step(self):
        fail_at = self.config.get("fail_at")
        if fail_at is not None and self.iteration + 1 == fail_at:
            marker = os.path.join(self.config["marker_dir"], self.trial_id)
            if not os.path.exists(marker):
                open(marker, "w").close()
                raise RuntimeError("boom once")
        self.total += self.x
        steps = self.config.get("steps")
        return {
            "loss": -self.total, "total": self.total, "before_step": self.iteration, "loads": self.loads,
            "loaded_owner": self.loaded[0] if self.loaded else "", "loaded_total": self.loaded[1] if self.loaded else -1.0,
            "logdir": self.logdir, "trial_name": self.trial_name, "x": self.x,
            "done": steps is not None and self.iteration + 1 >= steps,
            "should_checkpoint": self.iteration + 1 == self.config.get("checkpoint_at"),
        }

    def save_checkpoint(self, checkpoint_dir):
        state = {"total": self.total, "owner": self.trial_id, "iteration": self.iteration}
        if self.config.get("ckpt", "dict") == "dict":
            return state
        with open(os.path.join(checkpoint_dir, "state.json"), "w") as f:
            json.dump(state, f)
        return checkpoint_dir

    def load_checkpoint(self, checkpoint):
        if isinstance(checkpoint, dict):
            state = checkpoint
        else:
            with open(os.path.join(checkpoint, "state.json")) as f:
                state = json.load(f)
        self.total = state["total"]
        self.loaded = (state["owner"], state["total"])
        self.loads += 1

    def cleanup(self):
        with open(os.path.join(self.logdir, f"cleanup_{self.iteration}"), "w") as f:
            f.write("ok")


class NoCheckpoints(tune.Trainable):
    """Never implements save_checkpoint: under HyperBand it restarts from scratch."""

    def setup(self, config):
        self.floor = config["floor"]

    def step(self):
        return {"loss": self.floor + 1.0 / (self.iteration + 1)}


class Curve(tune.Trainable):
    """A learning curve that flattens at ``floor`` (lower is better); its own step count lives in its checkpoints."""

    def setup(self, config, scale=1.0):
        self.floor = config["floor"]
        self.scale = scale
        self.own_step = 0

    def step(self):
        self.own_step += 1
        return {"loss": self.scale * (self.floor + 1.0 / self.own_step), "own_step": self.own_step}

    def save_checkpoint(self, checkpoint_dir):
        return {"own_step": self.own_step}

    def load_checkpoint(self, checkpoint):
        self.own_step = checkpoint["own_step"]
