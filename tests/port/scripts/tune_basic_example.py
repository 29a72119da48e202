# Ray Tune's tune_basic_example.py as published for Ray 1.x: the keyword style tune.report(...) and tune.run at the
# top level of the script (no main guard), imports changed only.
import time

from tuneplat.tune.schedulers import AsyncHyperBandScheduler  # was: from ray.tune.schedulers import ...

from tuneplat import tune  # was: from ray import tune

print("TOP LEVEL RAN", flush=True)


def evaluation_fn(step, width, height):
    return (0.1 + width * step / 100) ** (-1) + height * 0.1


def easy_objective(config):
    # Hyperparameters
    width, height = config["width"], config["height"]

    for step in range(config["steps"]):
        # Iterative training function - can be any arbitrary training procedure
        intermediate_score = evaluation_fn(step, width, height)
        # Feed the score back back to Tune.
        tune.report(iterations=step, mean_loss=intermediate_score)
        time.sleep(0.01)


analysis = tune.run(
    easy_objective,
    metric="mean_loss",
    mode="min",
    scheduler=AsyncHyperBandScheduler(grace_period=2, max_t=10),
    num_samples=4,
    config={
        "steps": 10,
        "width": tune.uniform(0, 20),
        "height": tune.uniform(-100, 100),
        # This is an ignored parameter.
        "activation": tune.choice(["relu", "tanh"]),
    },
)

print("Best hyperparameters found were: ", analysis.best_config)
print("TRIALS", len(analysis.trials))
