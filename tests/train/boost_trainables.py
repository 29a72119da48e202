"""Data and training functions for the XGBoost/LightGBM tests (importable by the Dask workers)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tuneplat import train

FEATURES = 6
PARAMS = {"tree_method": "hist", "objective": "reg:squarederror", "max_depth": 4, "eta": 0.3, "seed": 0}


def make_frame(n: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Integer-valued features (16 distinct values each, fewer than the 256 hist bins): every rank's bins, the
    merged sketch of a distributed run and a single process's all come out the same, so the models can agree."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 16, size=(n, FEATURES)).astype(np.float64)
    y = 0.5 * x[:, 0] - 0.25 * x[:, 1] * (x[:, 2] > 7) + np.sin(x[:, 3]) + rng.normal(0, 0.1, n)
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(FEATURES)])
    frame["y"] = y
    return frame


class _FailAt:
    """An xgboost callback that fails rank 1 at a round, on the trial's first attempt only: it raises, or its
    process dies at once (``how="kill"``: no Python clean-up, its sockets closed by the kernel)."""

    def __new__(cls, round_: int, how: str = "raise"):  # (a TrainingCallback made here: xgboost is imported in the rank)
        import os

        import xgboost

        class FailAt(xgboost.callback.TrainingCallback):
            def after_iteration(self, model, epoch, evals_log):
                ctx = train.get_context()
                if ctx.get_attempt() == 0 and ctx.get_world_rank() == 1 and epoch == round_:
                    if how == "kill":
                        os._exit(1)
                    raise RuntimeError(f"rank 1 fails at round {epoch}")
                return False

        return FailAt()


def xgb_loop(config: dict) -> None:
    """Ray V2's XGBoostTrainer function: shard → DMatrix → xgboost.train, resuming from the booster checkpoint."""
    import xgboost

    from tuneplat.train.xgboost import RayTrainReportCallback

    frame = train.get_dataset_shard("train").materialize().to_pandas()
    dtrain = xgboost.DMatrix(frame.drop("y", axis=1), label=frame["y"])
    rounds = config.get("rounds", 10)
    start = None
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        start = RayTrainReportCallback.get_model(checkpoint)
        rounds -= start.num_boosted_rounds()
    callbacks = [RayTrainReportCallback(metrics={"rmse": "train-rmse"}, frequency=config.get("frequency", 1))]
    if config.get("fail_at") is not None:
        callbacks.insert(0, _FailAt(config["fail_at"], config.get("fail_how", "raise")))
    xgboost.train({**PARAMS, **config.get("params", {})}, dtrain, num_boost_round=rounds, evals=[(dtrain, "train")],
                  verbose_eval=False, xgb_model=start, callbacks=callbacks)
    train.report({"rows": len(frame), "rmse": -1.0, "rank_rows": len(frame)}) if config.get("rows_report") else None


LGB_PARAMS = {"objective": "regression", "num_leaves": 15, "learning_rate": 0.2, "min_data_in_leaf": 5,
              "deterministic": True, "force_row_wise": True, "verbose": -1, "seed": 0}


def lgb_loop(config: dict) -> None:
    """Ray V2's LightGBMTrainer function: shard → lightgbm.Dataset → lightgbm.train over LightGBM's network."""
    import lightgbm

    import tuneplat.train.lightgbm
    from tuneplat.train.lightgbm import RayTrainReportCallback, normalize_pandas_for_lightgbm

    frame = normalize_pandas_for_lightgbm(train.get_dataset_shard("train").materialize().to_pandas())
    train_set = lightgbm.Dataset(frame.drop("y", axis=1), label=frame["y"])
    params = {**LGB_PARAMS, "tree_learner": "data_parallel", "pre_partition": True,
              **tuneplat.train.lightgbm.get_network_params()}
    lightgbm.train(params, train_set, num_boost_round=config.get("rounds", 10), valid_sets=[train_set],
                   valid_names=["train"], callbacks=[RayTrainReportCallback(metrics={"l2": "train-l2"})])


def xgb_tune_fn(config: dict) -> None:
    """A plain Tune trial: one process, xgboost.train with Tune's callback (Ray's xgboost_example shape)."""
    import xgboost
    from tuneplat.tune.integration.xgboost import TuneReportCheckpointCallback

    frame = make_frame(1000, seed=5)
    d = xgboost.DMatrix(frame.drop("y", axis=1), label=frame["y"])
    xgboost.train({**PARAMS, "eta": config["eta"], "nthread": 1, **config.get("params", {})}, d, num_boost_round=10, evals=[(d, "train")],
                  verbose_eval=False, callbacks=[TuneReportCheckpointCallback(metrics={"rmse": "train-rmse"},
                                                                              frequency=1)])


def torch_probe_loop(config: dict) -> None:
    """``config["loop"]`` (:func:`xgb_loop` or :func:`lgb_loop`), then each rank writes which torch modules its
    process had imported when the loop started and when it ended (none, for a non-torch backend)."""
    import json
    import os
    import sys

    def torch_modules() -> list[str]:
        return sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))[:5]

    before = torch_modules()
    {"xgb_loop": xgb_loop, "lgb_loop": lgb_loop}[config["loop"]](config)
    rank = train.get_context().get_world_rank()
    with open(os.path.join(config["probe_dir"], f"{config['loop']}-rank{rank}.json"), "w", encoding="utf-8") as f:
        json.dump({"before": before, "after": torch_modules(), "pid": os.getpid()}, f)
