# Ray Tune's custom_checkpointing_with_callback.py, imports changed only: a callback decides, from each result,
# when a class trainable saves a checkpoint (result[SHOULD_CHECKPOINT] = True).
import argparse
import os
import time

from tuneplat.tune.experiment import Trial  # was: from ray.tune.experiment import Trial
from tuneplat.tune.result import SHOULD_CHECKPOINT  # was: from ray.tune.result import SHOULD_CHECKPOINT

from tuneplat import tune  # was: from ray import tune


def evaluation_fn(step, width, height):
    time.sleep(0.01)
    return (0.1 + width * step / 100) ** (-1) + height * 0.1


class MyTrainableClass(tune.Trainable):
    def setup(self, config):
        self.width = config["width"]
        self.height = config["height"]
        self.step_count = 0

    def step(self):
        self.step_count += 1
        score = evaluation_fn(self.step_count, self.width, self.height)
        return {"iterations": self.step_count, "mean_loss": score}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "step"), "w") as f:
            f.write(str(self.step_count))

    def load_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "step")) as f:
            self.step_count = int(f.read())


class CustomCheckpointCallback(tune.Callback):
    """Custom callback that triggers checkpointing by updating the result dict.

    This callback demonstrates checkpointing logic beyond the simple
    frequency-based checkpointing (checkpoint_frequency)."""

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict, **info):
        # Save a checkpoint every third iteration, and on the last one
        if result["training_iteration"] % 3 == 0 or result["training_iteration"] == 10:
            result[SHOULD_CHECKPOINT] = True


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke-test", action="store_true", help="Finish quickly for testing")
    args, _ = parser.parse_known_args()

    tuner = tune.Tuner(
        MyTrainableClass,
        run_config=tune.RunConfig(
            name="hyperband_test",
            stop={"training_iteration": 10},
            callbacks=[CustomCheckpointCallback()],
        ),
        tune_config=tune.TuneConfig(metric="mean_loss", mode="min", num_samples=2),
        param_space={
            "width": tune.uniform(10, 100),
            "height": tune.uniform(0, 100),
        },
    )
    results = tuner.fit()
    best = results.get_best_result()
    print("Best hyperparameters found were: ", best.config)
    for r in results:
        steps = sorted(int(open(os.path.join(c.path, "step")).read()) for c, _ in r.best_checkpoints)
        print("CHECKPOINT_STEPS", steps)
