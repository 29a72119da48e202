"""``LightGBMTrainer`` in Ray Train V2's form: the user's function calls ``lightgbm.train`` on every rank."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..._config import RunConfig, ScalingConfig
from .._boosting import BoostingTrainer
from ._config import LightGBMConfig

__all__ = ["LightGBMTrainer"]


class LightGBMTrainer(BoostingTrainer):
    """Distributed data-parallel LightGBM (``ray.train.lightgbm.LightGBMTrainer``, Train V2).

    Each rank runs ``train_loop_per_worker``: it builds its ``lightgbm.Dataset``
    from ``train.get_dataset_shard(name)`` and calls ``lightgbm.train`` with
    ``"tree_learner": "data_parallel"``, ``"pre_partition": True`` and
    :func:`~tuneplat.train.lightgbm.get_network_params` in its params, so the
    ranks train ONE model through LightGBM's own network (:class:`LightGBMConfig`).

    Args:
        train_loop_per_worker: the function each rank runs (no argument, or the config dict).
        train_loop_config: passed to it.
        lightgbm_config: the network's settings (default ``LightGBMConfig()``).
        scaling_config, run_config, datasets, dataset_config, metadata: as for
            :class:`~tuneplat.train.DataParallelTrainer`.
        resume_from_checkpoint: what ``train.get_checkpoint()`` returns while
            the run has no checkpoint of its own.
        label_column, params, num_boost_round: Ray's legacy form: refused.

    Example (Ray's docstring, data in pandas/Dask instead of Ray Data):
        >>> def train_fn_per_worker(config: dict):  # doctest: +SKIP
        ...     df = normalize_pandas_for_lightgbm(tuneplat.train.get_dataset_shard("train").materialize().to_pandas())
        ...     params = {"objective": "regression", "tree_learner": "data_parallel", "pre_partition": True,
        ...               **tuneplat.train.lightgbm.get_network_params()}
        ...     lightgbm.train(params, lightgbm.Dataset(df.drop("y", axis=1), label=df["y"]),
        ...                    num_boost_round=10, callbacks=[RayTrainReportCallback()])
        >>> trainer = LightGBMTrainer(train_fn_per_worker, datasets={"train": df},  # doctest: +SKIP
        ...                           scaling_config=ScalingConfig(num_workers=2))
    """

    _name = "LightGBMTrainer"
    _config_type = LightGBMConfig
    _config_arg = "lightgbm_config"
    _library = "lightgbm"
    _data = "lightgbm.Dataset"
    _call = "lightgbm.train(params, train_set, ...)"

    def __init__(self, train_loop_per_worker: Callable[..., Any] | None = None, *,
                 train_loop_config: Mapping[str, Any] | None = None, lightgbm_config: LightGBMConfig | None = None,
                 scaling_config: ScalingConfig | None = None, run_config: RunConfig | None = None,
                 datasets: Any = None, dataset_config: Any = None, metadata: Any = None,
                 resume_from_checkpoint: Any = None, label_column: str | None = None,
                 params: dict[str, Any] | None = None, num_boost_round: int | None = None, client: Any = None,
                 backend_config: Any = None) -> None:
        self._boosting_init(train_loop_per_worker, lightgbm_config, backend_config, label_column=label_column,
                            params=params, num_boost_round=num_boost_round, train_loop_config=train_loop_config,
                            scaling_config=scaling_config, run_config=run_config, datasets=datasets,
                            dataset_config=dataset_config, client=client, metadata=metadata,
                            resume_from_checkpoint=resume_from_checkpoint)
