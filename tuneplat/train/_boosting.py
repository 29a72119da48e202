"""What the XGBoost and LightGBM report callbacks share: picking metrics, the checkpoint folder, the report.

Framework-free (no xgboost or lightgbm import): ``train/xgboost`` and
``train/lightgbm`` and the Tune integrations at Ray's paths build on it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..search._space import flatten_dict
from ..storage._checkpoint import Checkpoint

__all__ = ["MetricPicker", "check_callback_args", "model_checkpoint", "refuse_legacy"]

Metrics = str | list[str] | dict[str, str] | None


def check_callback_args(owner: str, metrics: Any, filename: Any, frequency: Any) -> list[str] | dict[str, str] | None:
    """Validate a report callback's arguments once; ``metrics`` as a list or dict (or None: every metric)."""
    if isinstance(metrics, str):
        metrics = [metrics]
    elif metrics is not None and not isinstance(metrics, (list, tuple, dict)):
        raise TypeError(f"{owner}(metrics=...) takes a str, a list of str or a dict {{reported name: library "
                        f"metric}}, got {type(metrics).__name__}: {metrics!r}")
    if isinstance(metrics, tuple):
        metrics = list(metrics)
    if not isinstance(filename, str) or not filename or os.sep in filename:
        raise ValueError(f"{owner}(filename={filename!r}): it must be a plain file name (e.g. 'model.ubj').")
    if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 0:
        raise ValueError(f"The value of `frequency` is {frequency!r}, but must be an int >= 0 (0: no checkpoint "
                         "during training).")
    return metrics


class MetricPicker:
    """The library's evaluation log (``{"eval": {"logloss": [...]}}``) → the dict reported (``{"eval-logloss": x}``)."""

    def __init__(self, owner: str, metrics: list[str] | dict[str, str] | None,
                 postprocess: Callable[[dict[str, Any]], dict[str, Any]] | None) -> None:
        self.owner = owner
        self.metrics = metrics
        self.postprocess = postprocess

    def pick(self, flat: dict[str, Any]) -> dict[str, Any]:
        """``flat`` is the flattened log of this round (last values); returns what is reported."""
        if not self.metrics:
            out = dict(flat)
        else:
            out = {}
            names = self.metrics.items() if isinstance(self.metrics, dict) else ((m, m) for m in self.metrics)
            for key, metric in names:
                if metric not in flat:
                    raise KeyError(f"{self.owner}: metric {metric!r} is not in the library's evaluation results this "
                                   f"round; it has {sorted(flat)} (names are '<eval set name>-<metric>', e.g. "
                                   "'eval-logloss').")
                out[key] = flat[metric]
        if self.postprocess is not None:
            out = self.postprocess(out)
        return out

    @staticmethod
    def last_values(evals_log: Mapping[str, Any]) -> dict[str, Any]:
        """``{"eval": {"logloss": [.., x]}}`` → ``{"eval-logloss": x}`` (Ray's '-' separator)."""
        flat = flatten_dict(evals_log, sep="-")
        out: dict[str, Any] = {}
        for key, value in flat.items():
            if isinstance(value, (list, tuple)) and value:
                value = value[-1]
            if isinstance(value, tuple):  # xgboost.cv: (mean, std) per round
                value = list(value)
            out[key] = value
        return out


@contextlib.contextmanager
def model_checkpoint(save: Callable[[str], Any], filename: str) -> Iterator[Checkpoint]:
    """A temporary folder holding the model file ``filename`` (written by ``save(path)``), as a Checkpoint.

    ``report()`` copies it into the trial folder before it returns; the folder
    is removed afterwards.
    """
    with tempfile.TemporaryDirectory(prefix="tuneplat-model-") as folder:
        save(os.path.join(folder, filename))
        yield Checkpoint(folder)


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
