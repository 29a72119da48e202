"""The virtual-time executor runs real trainables: function trainables calling report()/get_checkpoint()/
get_context(), Trainable classes, with_parameters, a one-rank TorchTrainer; time is virtual (``testing.sleep``)."""

from __future__ import annotations

import os
import tempfile
import threading

import pytest

import tuneplat as tune
from tuneplat import read_journal, train
from tuneplat.testing import VirtualTimeExecutor, now, sleep


def _rc(storage, **kw):
    return tune.RunConfig(name="v", storage_path=storage, verbose=0, mlflow=False, **kw)


def _fit(storage, fn, space, *, slots=2, tc=None, executor=None, **rc):
    return tune.Tuner(fn, param_space=space, tune_config=tc or tune.TuneConfig(metric="loss", mode="min"),
                      run_config=_rc(storage, **rc), executor=executor or VirtualTimeExecutor(num_slots=slots)).fit()


def test_a_function_trainable_sees_its_context_and_reports(storage):
    def fn(config):
        ctx = train.get_context()
        assert os.path.isdir(ctx.get_trial_dir())
        tune.report({"loss": config["x"], "rank": ctx.get_world_rank(), "size": ctx.get_world_size(),
                     "name": ctx.get_trial_name(), "attempt": ctx.get_attempt(), "env_rank": os.environ["RANK"]})

    before = os.environ.get("RANK")
    grid = _fit(storage, fn, {"x": tune.grid_search([1.0, 2.0])})
    assert grid.num_errors == 0 and grid.get_best_result().config == {"x": 1.0}
    for r in grid:
        m = r.metrics
        assert (m["rank"], m["size"], m["attempt"], m["env_rank"]) == (0, 1, 0, "0")
        assert m["name"] == os.path.basename(r.path) and m["time_this_iter_s"] == 1.0
    assert os.environ.get("RANK") == before  # what the executor set for its trials is put back


def test_virtual_sleep_sets_the_iteration_time_and_interleaves_trials(storage):
    seen = []

    def fn(config):
        for _ in range(3):
            t0 = now()
            sleep(config["dt"])
            seen.append((config["dt"], now()))
            tune.report({"loss": config["dt"], "slept": now() - t0})

    grid = _fit(storage, fn, {"dt": tune.grid_search([10.0, 25.0])})
    for r in grid:
        df = r.metrics_dataframe
        assert list(df["time_this_iter_s"]) == [r.config["dt"]] * 3 and list(df["slept"]) == [r.config["dt"]] * 3
        assert r.metrics["time_total_s"] == 3 * r.config["dt"]
    # one virtual clock: the 10-s trial's three wake-ups come before the 25-s trial's second
    assert [dt for dt, _ in seen] == [10.0, 10.0, 25.0, 10.0, 25.0, 25.0]
    assert [t for _, t in seen] == sorted(t for _, t in seen)


def test_outside_a_virtual_trial_sleep_and_now_are_real():
    import time

    assert abs(now() - time.time()) < 5
    sleep(0)  # real (and immediate)
    with pytest.raises(ValueError, match="must be >= 0"):
        sleep(-1)


def test_time_budget_ends_a_trial_sleeping_in_virtual_time_and_its_finally_runs(storage):
    cleaned = []

    def fn(config):
        try:
            tune.report({"loss": 1.0})
            sleep(10_000)  # one very long epoch
            tune.report({"loss": 0.5})
        finally:
            cleaned.append(config["x"])

    grid = _fit(storage, fn, {"x": tune.grid_search([1, 2])}, tc=tune.TuneConfig(metric="loss", mode="min",
                                                                                   time_budget_s=100))
    assert sorted(cleaned) == [1, 2]
    assert all(r.metrics["training_iteration"] == 1 for r in grid)
    assert not [t for t in threading.enumerate() if t.name.startswith("tuneplat-virtual-")]


def test_class_trainable_checkpoints_and_restores_after_a_failure(storage, tmp_path):
    marker = str(tmp_path / "failed")

    class Counter(tune.Trainable):
        def setup(self, config):
            self.x = 0

        def step(self):
            self.x += 1
            if self.x == 3 and not os.path.exists(marker):
                open(marker, "w").close()
                raise RuntimeError("crash at 3")
            return {"loss": 1.0 / self.x, "x": self.x, "done": self.x >= 5}

        def save_checkpoint(self, checkpoint_dir):
            return {"x": self.x}

        def load_checkpoint(self, checkpoint):
            self.x = checkpoint["x"]

    grid = _fit(storage, Counter, {"lr": 0.1}, failure_config=tune.FailureConfig(max_failures=1),
                checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1))
    (r,) = grid
    assert r.status == "TERMINATED" and r.metrics["x"] == 5
    assert list(r.metrics_dataframe["x"]) == [1, 2, 3, 4, 5]  # went on from checkpoint 2
    events = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    (failure,) = [e for e in events if e["event"] == "trial_failure"]
    assert failure["message"] == "rank 0: RuntimeError: crash at 3" and "step" in failure["traceback"]


def test_should_checkpoint_in_a_class_trainables_result_is_saved_after_the_answer(storage):
    class Marks(tune.Trainable):
        def setup(self, config):
            self.n = 0

        def step(self):
            self.n += 1
            return {"loss": 1.0, "should_checkpoint": self.n == 2, "done": self.n >= 3}

        def save_checkpoint(self, checkpoint_dir):
            return {"n": self.n}

        def load_checkpoint(self, checkpoint):
            self.n = checkpoint["n"]

    (r,) = _fit(storage, Marks, {})
    assert r.checkpoint is not None and r.checkpoint.path.endswith("checkpoint_000002")


def test_with_parameters_objects_reach_each_trial(storage):
    def fn(config, data=None):
        tune.report({"loss": config["x"] * len(data)})

    grid = _fit(storage, tune.with_parameters(fn, data=list(range(10))), {"x": tune.grid_search([1, 2])})
    assert sorted(r.metrics["loss"] for r in grid) == [10, 20]


def test_a_one_rank_torch_trainer_runs_in_virtual_time(storage):
    import torch

    from tuneplat.train.torch import TorchTrainer, prepare_model

    def loop(config):
        model = prepare_model(torch.nn.Linear(2, 1))
        opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
        x, y = torch.ones(8, 2), torch.zeros(8, 1)
        for _ in range(3):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            with tempfile.TemporaryDirectory() as d:
                torch.save(model.state_dict(), os.path.join(d, "model.pt"))
                train.report({"loss": loss.item()}, checkpoint=train.Checkpoint.from_directory(d))

    trainer = TorchTrainer(loop, scaling_config=tune.ScalingConfig(num_workers=1))
    grid = _fit(storage, trainer, {"train_loop_config": {"lr": tune.grid_search([0.01, 0.1])}})
    assert grid.num_errors == 0 and all(r.metrics["training_iteration"] == 3 for r in grid)
    state = torch.load(os.path.join(grid[0].checkpoint.path, "model.pt"), weights_only=True)
    assert set(state) == {"weight", "bias"}


def test_more_than_one_rank_is_refused_with_a_clear_error(storage):
    from tuneplat.train.torch import TorchTrainer

    def loop(config):
        train.report({"loss": 1.0})

    trainer = TorchTrainer(loop, scaling_config=tune.ScalingConfig(num_workers=2))
    with pytest.raises(ValueError, match=r"one rank.*num_workers=2"):
        _fit(storage, trainer, {}, slots=4)


def test_a_trainable_that_swallows_the_abort_still_ends(storage):
    def stubborn(config):
        for _ in range(3):
            try:
                tune.report({"loss": 1.0})
                sleep(1_000)
            except BaseException:  # noqa: BLE001 - what a careless trainable does
                pass

    grid = _fit(storage, stubborn, {"x": 1}, tc=tune.TuneConfig(metric="loss", mode="min", time_budget_s=50))
    (r,) = grid
    assert r.metrics["training_iteration"] == 1
    assert not [t for t in threading.enumerate() if t.name.startswith("tuneplat-virtual-")]


def test_generator_trainables_stay_learning_curves(storage):
    from tuneplat.testing import HANG

    def curve(config):
        yield {"loss": 1.0, "time_this_iter_s": 7.0}
        yield HANG

    grid = _fit(storage, curve, {"x": 1}, tc=tune.TuneConfig(metric="loss", mode="min", time_budget_s=30))
    (r,) = grid
    assert r.metrics["time_this_iter_s"] == 7.0 and r.metrics["training_iteration"] == 1
