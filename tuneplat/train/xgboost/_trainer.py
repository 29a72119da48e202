"""``XGBoostTrainer`` in Ray Train V2's form: the user's function calls ``xgboost.train`` on every rank."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..._config import RunConfig, ScalingConfig
from .._boosting import BoostingTrainer
from ._config import XGBoostConfig

__all__ = ["XGBoostTrainer"]

class XGBoostTrainer(BoostingTrainer):
    """Distributed data-parallel XGBoost (``ray.train.xgboost.XGBoostTrainer``, Train V2).

    Each rank runs ``train_loop_per_worker``: it builds its ``DMatrix`` from
    ``train.get_dataset_shard(name)`` and calls ``xgboost.train`` itself. The
    trainer starts xgboost's collective for the group (:class:`XGBoostConfig`),
    so the ranks train ONE model on all their rows together.

    Args:
        train_loop_per_worker: the function each rank runs (no argument, or the config dict).
        train_loop_config: passed to it.
        xgboost_config: the collective's settings (default ``XGBoostConfig()``).
        scaling_config, run_config, datasets, dataset_config, metadata: as for
            :class:`~tuneplat.train.DataParallelTrainer`.
        resume_from_checkpoint: what ``train.get_checkpoint()`` returns while
            the run has no checkpoint of its own.
        label_column, params, num_boost_round: Ray's legacy form: refused.

    Example (Ray's docstring, data in pandas/Dask instead of Ray Data):
        >>> def train_fn_per_worker(config: dict):  # doctest: +SKIP
        ...     train_df = tuneplat.train.get_dataset_shard("train").materialize().to_pandas()
        ...     dtrain = xgboost.DMatrix(train_df.drop("y", axis=1), label=train_df["y"])
        ...     xgboost.train({"tree_method": "hist", "objective": "reg:squarederror"}, dtrain,
        ...                   num_boost_round=10, callbacks=[RayTrainReportCallback()])
        >>> trainer = XGBoostTrainer(train_fn_per_worker, datasets={"train": df},  # doctest: +SKIP
        ...                          scaling_config=ScalingConfig(num_workers=2))
        >>> booster = RayTrainReportCallback.get_model(trainer.fit().checkpoint)  # doctest: +SKIP
    """

    _name = "XGBoostTrainer"
    _config_type = XGBoostConfig
    _config_arg = "xgboost_config"
    _library = "xgboost"
    _data = "xgboost.DMatrix"
    _call = "xgboost.train(params, dtrain, ...)"

    def __init__(self, train_loop_per_worker: Callable[..., Any] | None = None, *,
                 train_loop_config: Mapping[str, Any] | None = None, xgboost_config: XGBoostConfig | None = None,
                 scaling_config: ScalingConfig | None = None, run_config: RunConfig | None = None,
                 datasets: Any = None, dataset_config: Any = None, metadata: Any = None,
                 resume_from_checkpoint: Any = None, label_column: str | None = None,
                 params: dict[str, Any] | None = None, num_boost_round: int | None = None, client: Any = None,
                 backend_config: Any = None) -> None:
        self._boosting_init(train_loop_per_worker, xgboost_config, backend_config, label_column=label_column,
                            params=params, num_boost_round=num_boost_round, train_loop_config=train_loop_config,
                            scaling_config=scaling_config, run_config=run_config, datasets=datasets,
                            dataset_config=dataset_config, client=client, metadata=metadata,
                            resume_from_checkpoint=resume_from_checkpoint)
