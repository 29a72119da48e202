# Ray Tune's `tune.with_resources` docstring: resources as a function of the config (each trial its own).
# Imports changed only. On a machine without a GPU the use_gpu trials cannot ever be placed: tuneplat ends them
# as ERROR at once, saying what they asked for and what the cluster has (Ray would leave them pending).
from tuneplat import tune  # was: from ray import tune


def train_fn(config):
    for step in range(3):
        tune.report({"loss": config["x"] / (step + 1)})


tuner = tune.Tuner(
    tune.with_resources(train_fn, resources=lambda config: {"GPU": 1} if config["use_gpu"] else {"GPU": 0}),
    param_space={"use_gpu": tune.grid_search([False, True]), "x": tune.grid_search([1.0, 2.0])},
    tune_config=tune.TuneConfig(metric="loss", mode="min"),
)
results = tuner.fit()
rows = sorted((r.config["use_gpu"], r.error is None) for r in results)
print("RAN", rows)
errors = [str(r.error) for r in results if r.error is not None]
print("ERROR", errors[0] if errors else None)
