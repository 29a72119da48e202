"""Trainables written as a Ray Tune user writes them (workers import them by reference)."""

from __future__ import annotations

import os
import tempfile

import tuneplat as tune
from tuneplat import train
from tuneplat.train import Checkpoint


def objective(config):
    for step in range(config.get("steps", 4)):
        train.report({"loss": (config["x"] - 3) ** 2 + 1.0 / (step + 1), "step": step})


def with_data(config, data=None, scale=1.0):
    ctx = tune.get_context()
    for _step in range(3):
        tune.report({"loss": scale * sum(data) * config["x"], "n": len(data), "trial_id": ctx.get_trial_id(),
                     "trial_name": ctx.get_trial_name(), "trial_dir": ctx.get_trial_dir(),
                     "rank": ctx.get_world_rank()})


def mutates_data(config, data=None):
    tune.report({"loss": float(len(data))})
    data.append(1)  # must not leak into the next trial


def fails_once_then_checkpoints(config):
    """Checkpoints every step; fails at step 2 of its first attempt only."""
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d, open(os.path.join(d, "step")) as f:
            start = int(f.read()) + 1
    for step in range(start, 4):
        if step == 2 and not os.path.exists(os.path.join(config["marker_dir"], config["name"])):
            open(os.path.join(config["marker_dir"], config["name"]), "w").close()
            raise RuntimeError("boom once")
        if config.get("always_fail") and step == 1:
            raise ValueError("always fails")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step"), "w") as f:
                f.write(str(step))
            train.report({"loss": float(10 - step)}, checkpoint=Checkpoint.from_directory(d))


def flat_curve(config):
    for step in range(100):
        tune.report({"loss": config["x"] + (1.0 / (step + 1) if step < 3 else 0.0)})


def count(config):
    for step in range(config.get("steps", 50)):
        tune.report({"loss": float(step) * config.get("x", 1.0)})


def slow_count(config):
    import time

    for step in range(100):
        tune.report({"loss": float(step)})
        time.sleep(0.05)  # paces the reports: a whole trial takes ~5 s


def checkpointing(config):
    """Ray docs style: resume from train.get_checkpoint(), checkpoint every step."""
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d, open(os.path.join(d, "it")) as f:
            start = int(f.read())
    for i in range(start, config.get("steps", 6)):
        loss = (config["lr"] - 0.01) ** 2 + (1.0 if i == 2 else 1.0 / (i + 1))  # best checkpoint: not the last
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "it"), "w") as f:
                f.write(str(i + 1))
            train.report({"loss": loss, "acc": 1 - loss}, checkpoint=Checkpoint.from_directory(d))


def says_done(config):
    """Reports done=True at step `done_at` (Ray: the trial ends there); would go on to `steps`."""
    for step in range(1, config.get("steps", 6) + 1):
        tune.report({"loss": 1.0 / step, "done": step == config["done_at"]})


def writes_relative(config):
    """Writes a relative path and prints, as Ray's docs trainables do (each trial in its own folder)."""
    import sys

    if config.get("write", True):
        with open("out.txt", "w") as f:
            f.write(str(config["x"]))
    print(f"hello from trial x={config['x']}")
    print(f"a warning from x={config['x']}", file=sys.stderr)
    tune.report({"loss": float(config["x"]), "cwd": os.getcwd(), "orig": os.environ.get("TUNE_ORIG_WORKING_DIR")})


# -- Ray Train V2's Train-in-Tune (Ray 2.60's "Hyperparameter Tuning with Ray Tune" guide, imports changed) --------

def train_fn_per_worker(train_loop_config: dict):
    lr = train_loop_config["lr"]
    ctx = train.get_context()
    for epoch in range(2):
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            with open(os.path.join(temp_checkpoint_dir, "epoch"), "w") as f:
                f.write(str(epoch))
            train.report({"loss": lr * (2 - epoch), "world_size": ctx.get_world_size(), "rank_pid": os.getpid()},
                         checkpoint=Checkpoint.from_directory(temp_checkpoint_dir))


def train_driver_fn(config: dict):
    from tuneplat.tune.integration.ray_train import TuneReportCallback

    # (Ray's guide writes ray.train.torch.TorchTrainer: the same class; train.TorchTrainer spares the tests torch's import)
    trainer = train.TorchTrainer(
        train_fn_per_worker,
        train_loop_config=config["train_loop_config"],
        scaling_config=train.ScalingConfig(num_workers=config.get("num_workers", 1)),
        run_config=train.RunConfig(name=f"train-trial_id={tune.get_context().get_trial_id()}",
                                   callbacks=[TuneReportCallback()]),
    )
    result = trainer.fit()
    tune.report({"loss": result.metrics["loss"], "driver_pid": os.getpid(), "inner_path": result.path})


def ft_train_fn_per_worker(train_loop_config: dict):
    """Ray's fault-tolerance section: resumes from train.get_checkpoint(); fails once at epoch 1."""
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d, open(os.path.join(d, "epoch")) as f:
            start = int(f.read()) + 1
    for epoch in range(start, 3):
        if epoch == 1 and not os.path.exists(train_loop_config["marker"]):
            open(train_loop_config["marker"], "w").close()
            raise RuntimeError("a worker fails at epoch 1 (first run only)")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch"), "w") as f:
                f.write(str(epoch))
            train.report({"loss": 1.0 / (epoch + 1), "epoch": epoch, "start": start},
                         checkpoint=Checkpoint.from_directory(d))


def ft_driver_fn(config: dict):
    from tuneplat.tune.integration.ray_train import TuneReportCallback

    marker = os.path.join(tune.get_context().get_trial_dir(), "failed-once")
    trainer = train.TorchTrainer(
        ft_train_fn_per_worker, train_loop_config={"marker": marker},
        run_config=train.RunConfig(name=f"train-trial_id={tune.get_context().get_trial_id()}",
                                   callbacks=[TuneReportCallback()]),
    )
    trainer.fit()


BOOST_ROUNDS = 6


def boost_with_resources(config):
    """The shape of Ray's xgboost_dynamic_resources_example, small: nthread from get_trial_resources(), the
    booster resumed from the trial's checkpoint for the rounds left; each attempt notes what it was given."""
    import json

    import sklearn.datasets
    import xgboost as xgb
    from tuneplat.tune.integration.xgboost import TuneReportCheckpointCallback

    data, labels = sklearn.datasets.load_breast_cancer(return_X_y=True)
    train_set = xgb.DMatrix(data[:400], label=labels[:400])
    test_set = xgb.DMatrix(data[400:], label=labels[400:])
    model = None
    checkpoint = tune.get_checkpoint()
    if checkpoint:
        model = TuneReportCheckpointCallback.get_model(checkpoint, filename="booster.json")
    done = model.num_boosted_rounds() if model is not None else 0
    params = dict(config, nthread=int(tune.get_context().get_trial_resources().head_cpus))
    ctx = tune.get_context()
    with open(os.path.join(ctx.get_trial_dir(), f"attempt_{ctx.get_attempt()}.json"), "w") as f:
        json.dump({"nthread": params["nthread"], "omp": os.environ.get("OMP_NUM_THREADS"), "rounds_before": done}, f)
    xgb.train(params, train_set, num_boost_round=BOOST_ROUNDS - done, evals=[(test_set, "eval")],
              verbose_eval=False, xgb_model=model,
              callbacks=[TuneReportCheckpointCallback(frequency=1, filename="booster.json")])
