# Ray Tune's optuna_example.py, imports changed only (smoke-test sizes). No main guard.
import time
from typing import Any, Dict, Optional

from tuneplat.tune.search import ConcurrencyLimiter  # was: from ray.tune.search import ConcurrencyLimiter
from tuneplat.tune.search.optuna import OptunaSearch  # was: from ray.tune.search.optuna import OptunaSearch

from tuneplat import tune  # was: from ray import tune


def evaluation_fn(step, width, height, mult=1):
    return (0.1 + width * step / 100) ** (-1) + height * 0.1 * mult


def easy_objective(config):
    # Hyperparameters
    width, height = config["width"], config["height"]
    mult = config.get("mult", 1)
    print(config)

    for step in range(config["steps"]):
        # Iterative training function - can be any arbitrary training procedure
        intermediate_score = evaluation_fn(step, width, height, mult)
        # Feed the score back back to Tune.
        tune.report({"iterations": step, "mean_loss": intermediate_score})
        time.sleep(0.01)


def define_by_run_func(trial) -> Optional[Dict[str, Any]]:
    # This function is used to define the search space, dynamically.
    activation = trial.suggest_categorical("activation", ["relu", "tanh"])

    # Define-by-run allows for conditional search spaces.
    if activation == "relu":
        trial.suggest_float("width", 0, 20)
        trial.suggest_float("height", -100, 100)
    else:
        trial.suggest_float("width", -1, 21)
        trial.suggest_float("height", -101, 101)

    # Return all constants in a dictionary.
    return {"steps": 10}


searcher = OptunaSearch(space=define_by_run_func, metric="mean_loss", mode="min")
algo = ConcurrencyLimiter(searcher, max_concurrent=4)

tuner = tune.Tuner(
    easy_objective,
    tune_config=tune.TuneConfig(
        search_alg=algo,
        num_samples=10,
    ),
)
results = tuner.fit()
best = results.get_best_result(metric="mean_loss", mode="min")
print("Best hyperparameters found were: ", best.config)
print("ACTIVATIONS", sorted({r.config["activation"] for r in results}), "N", len(results), "ERRORS", results.num_errors)
