# Ray Tune's mlflow_example.py: MLflowLoggerCallback and setup_mlflow, imports changed only (smaller sizes).
import os
import time

import mlflow

from tuneplat import tune  # was: from ray import tune
from tuneplat.air.integrations.mlflow import (  # was: from ray.air.integrations.mlflow import ...
    MLflowLoggerCallback,
    setup_mlflow,
)


def evaluation_fn(step, width, height):
    return (0.1 + width * step / 100) ** (-1) + height * 0.1


def train_function(config):
    width, height = config["width"], config["height"]

    for step in range(config.get("steps", 100)):
        # Iterative training function - can be any arbitrary training procedure
        intermediate_score = evaluation_fn(step, width, height)
        # Feed the score back to Tune.
        tune.report({"iterations": step, "mean_loss": intermediate_score})
        time.sleep(0.01)


def tune_with_callback(mlflow_tracking_uri, finish_fast=False):
    tuner = tune.Tuner(
        train_function,
        tune_config=tune.TuneConfig(num_samples=2),
        run_config=tune.RunConfig(
            name="mlflow",
            callbacks=[
                MLflowLoggerCallback(
                    tracking_uri=mlflow_tracking_uri,
                    experiment_name="mlflow_callback_example",
                    save_artifact=True,
                )
            ],
        ),
        param_space={
            "width": tune.randint(10, 100),
            "height": tune.randint(0, 100),
            "steps": 5 if finish_fast else 100,
        },
    )
    tuner.fit()


def train_function_mlflow(config):
    tracking_uri = config.pop("tracking_uri", None)
    setup_mlflow(
        config,
        experiment_name="setup_mlflow_example",
        tracking_uri=tracking_uri,
    )

    # Hyperparameters
    width, height = config["width"], config["height"]

    for step in range(config.get("steps", 100)):
        # Iterative training function - can be any arbitrary training procedure
        intermediate_score = evaluation_fn(step, width, height)
        # Log the metrics to mlflow
        mlflow.log_metrics(dict(mean_loss=intermediate_score), step=step)
        # Feed the score back to Tune.
        tune.report({"iterations": step, "mean_loss": intermediate_score})
        time.sleep(0.01)


def tune_with_setup(mlflow_tracking_uri, finish_fast=False):
    # Set the experiment, or create a new one if does not exist yet.
    mlflow.set_tracking_uri(mlflow_tracking_uri)
    mlflow.set_experiment(experiment_name="setup_mlflow_example")

    tuner = tune.Tuner(
        train_function_mlflow,
        tune_config=tune.TuneConfig(num_samples=2),
        run_config=tune.RunConfig(
            name="mlflow",
        ),
        param_space={
            "width": tune.randint(10, 100),
            "height": tune.randint(0, 100),
            "steps": 5 if finish_fast else 100,
            "tracking_uri": mlflow.get_tracking_uri(),
        },
    )
    tuner.fit()


if __name__ == "__main__":
    smoke_test = True
    if smoke_test:
        # the one change beyond imports: Ray's smoke test logs to <tempdir>/mlruns (MLflow's file store, in
        # maintenance mode in MLflow 3); a sqlite store in the working directory instead
        mlflow_tracking_uri = "sqlite:///" + os.path.join(os.getcwd(), "mlflow_example.db")
    else:
        mlflow_tracking_uri = "<MLFLOW_TRACKING_URI>"

    tune_with_callback(mlflow_tracking_uri, finish_fast=smoke_test)
    if not smoke_test:
        df = mlflow.search_runs([mlflow.get_experiment_by_name("mlflow_callback_example").experiment_id])
        print(df)

    tune_with_setup(mlflow_tracking_uri, finish_fast=smoke_test)
    for name in ("mlflow_callback_example", "setup_mlflow_example"):
        runs = mlflow.search_runs(experiment_names=[name], output_format="list")
        print("RUNS", name, sorted((r.info.run_name.split("_")[0], r.info.status, "mean_loss" in r.data.metrics)
                                   for r in runs))
