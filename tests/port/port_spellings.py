"""Trainables using Ray's older spellings (workers import them by reference)."""

from __future__ import annotations

import os
import tempfile

from tuneplat import train, tune
from tuneplat.air import session


def keyword_report(config):
    for step in range(3):
        tune.report(loss=config["x"] * (3 - step), iterations=step)


def number_report(config):
    tune.report(config["x"] * 2.0)


def air_session(config):
    ckpt = session.get_checkpoint()
    start = 0
    if ckpt:
        with ckpt.as_directory() as d, open(os.path.join(d, "n")) as f:
            start = int(f.read())
    for n in range(start, 2):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "n"), "w") as f:
                f.write(str(n + 1))
            session.report({"n": n, "trial": session.get_trial_id(), "rank": session.get_world_rank(),
                            "size": session.get_world_size()}, checkpoint=train.Checkpoint.from_directory(d))


def lazy_torch_attribute(config):
    import torch

    model = train.torch.prepare_model(torch.nn.Linear(2, 1))  # `from tuneplat import train`, no submodule import
    tune.report({"params": sum(p.numel() for p in model.parameters())})


def trainer_loop(config):
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d, open(os.path.join(d, "epoch")) as f:
            start = int(f.read()) + 1
    for epoch in range(start, config.get("epochs", 2)):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch"), "w") as f:
                f.write(str(epoch))
            train.report({"epoch": epoch}, checkpoint=train.Checkpoint.from_directory(d))
        if config.get("fail_at") == epoch and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            raise RuntimeError("first attempt fails")
