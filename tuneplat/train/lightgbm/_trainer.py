"""``LightGBMTrainer`` in Ray Train V2's form: the user's function calls ``xgboost.train`` on every rank."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..._config import RunConfig, ScalingConfig
from .._trainer import DataParallelTrainer
from ._config import LightGBMConfig

__all__ = ["LightGBMTrainer"]

_LEGACY = ("The legacy {name} API is deprecated. Please switch to passing in a custom `train_loop_per_worker` "
           "function instead: {name}(train_fn_per_worker, datasets={{'train': ...}}, scaling_config=ScalingConfig("
           "num_workers=2)), where train_fn_per_worker builds its {data} from "
           "tuneplat.train.get_dataset_shard('train') and calls {call} itself with "
           "callbacks=[RayTrainReportCallback()] (docs/boosting.md). "
           "See this issue for more context: https://github.com/ray-project/ray/issues/50042")


def refuse_legacy(name: str, data: str, call: str, label_column: Any, params: Any, num_boost_round: Any) -> None:
    """Ray 2.60's refusal of the legacy ``label_column=``/``params=``/``num_boost_round=`` form (a DeprecationWarning)."""
    if label_column is not None or params is not None or num_boost_round is not None:
        raise DeprecationWarning(_LEGACY.format(name=name, data=data, call=call))


class LightGBMTrainer(DataParallelTrainer):
    """Distributed data-parallel XGBoost (``ray.train.xgboost.LightGBMTrainer``, Train V2).

    Each rank runs ``train_loop_per_worker``: it builds its ``DMatrix`` from
    ``train.get_dataset_shard(name)`` and calls ``xgboost.train`` itself. The
    trainer starts xgboost's collective for the group (:class:`LightGBMConfig`),
    so the ranks train ONE model on all their rows together.

    Args:
        train_loop_per_worker: the function each rank runs (no argument, or the config dict).
        train_loop_config: passed to it.
        lightgbm_config: the collective's settings (default ``LightGBMConfig()``).
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
        >>> trainer = LightGBMTrainer(train_fn_per_worker, datasets={"train": df},  # doctest: +SKIP
        ...                          scaling_config=ScalingConfig(num_workers=2))
        >>> booster = RayTrainReportCallback.get_model(trainer.fit().checkpoint)  # doctest: +SKIP
    """

    _name = "LightGBMTrainer"

    def __init__(self, train_loop_per_worker: Callable[..., Any] | None = None, *,
                 train_loop_config: Mapping[str, Any] | None = None, lightgbm_config: LightGBMConfig | None = None,
                 scaling_config: ScalingConfig | None = None, run_config: RunConfig | None = None,
                 datasets: Any = None, dataset_config: Any = None, metadata: Any = None,
                 resume_from_checkpoint: Any = None, label_column: str | None = None,
                 params: dict[str, Any] | None = None, num_boost_round: int | None = None, client: Any = None,
                 backend_config: Any = None) -> None:
        refuse_legacy("LightGBMTrainer", "xgboost.DMatrix", "xgboost.train(params, dtrain, ...)", label_column,
                      params, num_boost_round)
        if train_loop_per_worker is None:
            raise TypeError("LightGBMTrainer() needs train_loop_per_worker: the function each rank runs "
                            "(it calls xgboost.train itself; docs/boosting.md).")
        config = lightgbm_config if lightgbm_config is not None else backend_config
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config, scaling_config=scaling_config,
                         run_config=run_config, datasets=datasets, dataset_config=dataset_config, client=client,
                         metadata=metadata, resume_from_checkpoint=resume_from_checkpoint,
                         backend_config=config if config is not None else LightGBMConfig())

    def _check_backend_config(self, config: Any) -> Any:
        if not isinstance(config, LightGBMConfig):
            raise TypeError(f"lightgbm_config must be a tuneplat.train.lightgbm.LightGBMConfig, got "
                            f"{type(config).__name__}")
        return config

    @classmethod
    def get_model(cls, checkpoint: Any) -> Any:
        """Deprecated in Ray: use ``RayTrainReportCallback.get_model``."""
        raise DeprecationWarning("`LightGBMTrainer.get_model` is deprecated. "
                                 "Use `RayTrainReportCallback.get_model` instead.")
