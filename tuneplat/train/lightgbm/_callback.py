"""LightGBM callbacks that report each boosting round (``ray.train.lightgbm.RayTrainReportCallback``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lightgbm.basic import Booster

from ...storage._checkpoint import Checkpoint
from .._boosting import ReportCallbackCore, rank0_model_checkpoint

__all__ = ["RayReportCallback", "RayTrainReportCallback", "normalize_pandas_for_lightgbm"]


def normalize_pandas_for_lightgbm(df: Any) -> Any:
    """Arrow-backed numeric and boolean columns as NumPy-nullable ones, which LightGBM accepts.

    LightGBM's pandas check refuses dtypes such as ``int64[pyarrow]``, which
    Parquet reads and Dask's ``to_pandas`` paths may give; only those columns
    are converted (others keep their buffers). Ray's
    ``normalize_pandas_for_lightgbm``.

    Example:
        >>> import pandas as pd, pyarrow as pa
        >>> df = pd.DataFrame({"x": pd.array([1, 2], dtype=pd.ArrowDtype(pa.int64()))})
        >>> str(normalize_pandas_for_lightgbm(df)["x"].dtype)
        'Int64'
    """
    import pandas as pd

    mapping: dict[Any, str] = {}
    for column, dtype in df.dtypes.items():
        if not isinstance(dtype, pd.ArrowDtype):
            continue
        kind = getattr(dtype.numpy_dtype, "kind", "O")
        bits = dtype.numpy_dtype.itemsize * 8 if kind in "iufb" else 0
        if kind == "i":
            mapping[column] = f"Int{bits}"
        elif kind == "u":
            mapping[column] = f"UInt{bits}"
        elif kind == "f":
            mapping[column] = f"Float{bits}"
        elif kind == "b":
            mapping[column] = "boolean"
    return df.astype(mapping, copy=False) if mapping else df


class RayReportCallback(ReportCallbackCore):
    """What Train's and Tune's LightGBM callbacks share (Ray's ``RayReportCallback``)."""

    CHECKPOINT_NAME = "model.txt"

    def __init__(self, metrics: str | list[str] | dict[str, str] | None = None, filename: str = CHECKPOINT_NAME,
                 frequency: int = 0, checkpoint_at_end: bool = True,
                 results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        self._setup(metrics, filename, frequency, checkpoint_at_end, results_postprocessing_fn)

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME) -> Booster:
        """The booster saved in ``checkpoint`` by this callback (LightGBM's text model).

        Example:
            >>> booster = RayTrainReportCallback.get_model(result.checkpoint)  # doctest: +SKIP
        """
        with checkpoint.as_directory() as folder:
            return Booster(model_file=Path(folder, filename).as_posix())

    @staticmethod
    def _get_eval_result(env: Any) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for entry in env.evaluation_result_list:
            data_name, eval_name, value = entry[0:3]
            if len(entry) > 4:  # lightgbm.cv: mean and standard deviation over the folds
                out.setdefault(data_name, {})[eval_name + "-mean"] = value
                out[data_name][eval_name + "-stdv"] = entry[4]
            else:
                out.setdefault(data_name, {})[eval_name] = value
        return out

    def __call__(self, env: Any) -> None:
        """Report this round; with the model every ``frequency`` rounds and at the last round (``checkpoint_at_end``)."""
        report_dict = self._get_report_dict(self._get_eval_result(env))
        last = env.iteration == env.end_iteration - 1
        if (last and self._checkpoint_at_end) or (self._frequency and (env.iteration + 1) % self._frequency == 0):
            self._save_and_report_checkpoint(report_dict, env.model)
        else:
            self._report_metrics(report_dict)


class RayTrainReportCallback(RayReportCallback):
    """Reports each LightGBM round's metrics to Train/Tune and saves the booster (``model.txt``) as checkpoints.

    Args:
        metrics: a metric name (``"eval-binary_logloss"``), a list, or a dict
            ``{reported name: lightgbm metric}``; None reports every metric.
        filename: the model file in the checkpoint.
        frequency: checkpoint every ``frequency`` rounds (0: only at the end).
        checkpoint_at_end: report the model of the last round as a checkpoint.
        results_postprocessing_fn: turns the reported dict into another.

    Rank 0 saves the model (every rank of a data-parallel group holds the same one).

    Example:
        >>> lightgbm.train(params, train_set, valid_sets=[eval_set], valid_names=["eval"],  # doctest: +SKIP
        ...                callbacks=[RayTrainReportCallback(metrics={"loss": "eval-binary_logloss"})])
    """

    @contextlib.contextmanager
    def _get_checkpoint(self, model: Booster) -> Iterator[Checkpoint | None]:
        with rank0_model_checkpoint(model.save_model, self._filename) as checkpoint:
            yield checkpoint
