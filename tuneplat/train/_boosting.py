"""What XGBoost and LightGBM share: the trainer's checks, the report callbacks' core, the checkpoint class's core.

Framework-free (no xgboost or lightgbm import): ``train/xgboost`` and
``train/lightgbm`` and the Tune integrations at Ray's paths build on it. Each
library's public classes keep Ray's per-class names and keywords
(``xgboost_config=`` / ``lightgbm_config=``); their bodies live here.
"""

from __future__ import annotations

import abc
import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..search._space import flatten_dict
from ..storage._checkpoint import Checkpoint
from . import _session
from ._trainer import DataParallelTrainer

__all__ = ["BoosterCheckpoint", "BoostingTrainer", "MetricPicker", "ReportCallbackCore", "check_callback_args",
           "model_checkpoint", "rank0_model_checkpoint", "refuse_legacy"]

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


@contextlib.contextmanager
def rank0_model_checkpoint(save: Callable[[str], Any], filename: str) -> Iterator[Checkpoint | None]:
    """:func:`model_checkpoint` on rank 0 (or outside a group); None on the other ranks, which hold the same model."""
    if _session.get_context().get_world_rank() in (0, None):
        with model_checkpoint(save, filename) as checkpoint:
            yield checkpoint
    else:
        yield None


class ReportCallbackCore(abc.ABC):
    """The part of Ray's ``RayReportCallback`` that does not depend on the library: arguments, report, checkpoint.

    Subclasses (one per library, keeping Ray's class names) hook into the
    library's callback protocol and say how a round's evaluation log reads.
    """

    CHECKPOINT_NAME: ClassVar[str]

    def _setup(self, metrics: str | list[str] | dict[str, str] | None, filename: str, frequency: int,
               checkpoint_at_end: bool, results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None,
               ) -> None:
        owner = type(self).__name__
        self._metrics = check_callback_args(owner, metrics, filename, frequency)
        self._picker = MetricPicker(owner, self._metrics, results_postprocessing_fn)
        self._filename = filename
        self._frequency = frequency
        self._checkpoint_at_end = bool(checkpoint_at_end)
        self._results_postprocessing_fn = results_postprocessing_fn

    def _get_report_dict(self, evals_log: Any) -> dict[str, Any]:
        return self._picker.pick(MetricPicker.last_values(evals_log or {}))

    @abc.abstractmethod
    def _get_checkpoint(self, model: Any) -> contextlib.AbstractContextManager[Checkpoint | None]:
        """The model as a checkpoint (None on ranks that do not save)."""

    def _save_and_report_checkpoint(self, report_dict: dict[str, Any], model: Any) -> None:
        with self._get_checkpoint(model) as checkpoint:
            _session.report(report_dict, checkpoint=checkpoint)

    def _report_metrics(self, report_dict: dict[str, Any]) -> None:
        _session.report(report_dict)


class BoosterCheckpoint(Checkpoint):
    """A checkpoint folder holding one model file (``XGBoostCheckpoint`` / ``LightGBMCheckpoint``)."""

    MODEL_FILENAME: ClassVar[str]
    _prefix: ClassVar[str]

    @classmethod
    def _from_model(cls, booster: Any, preprocessor: Any, path: str | None) -> Any:
        if preprocessor is not None:
            raise NotImplementedError(f"{cls.__name__}.from_model(preprocessor=...): Ray Data preprocessors are not "
                                      "ported; save what you need beside the model in the checkpoint folder.")
        folder = Path(path or tempfile.mkdtemp(prefix=cls._prefix))
        if not folder.is_dir():
            raise ValueError(f"`path` must be a directory, but got: {folder}")
        booster.save_model(folder.joinpath(cls.MODEL_FILENAME).as_posix())
        return cls(os.path.abspath(folder))


class BoostingTrainer(DataParallelTrainer):
    """``XGBoostTrainer`` / ``LightGBMTrainer``'s shared body (Ray Train V2's form; the legacy form refused).

    Subclasses keep Ray's signature (``xgboost_config=`` / ``lightgbm_config=``)
    and pass it to :meth:`_boosting_init` with what names the library.
    """

    _config_type: ClassVar[type]
    _config_arg: ClassVar[str]
    _library: ClassVar[str]
    _data: ClassVar[str]
    _call: ClassVar[str]

    def _boosting_init(self, train_loop_per_worker: Callable[..., Any] | None, config: Any, backend_config: Any, *,
                       label_column: Any, params: Any, num_boost_round: Any, **kwargs: Any) -> None:
        refuse_legacy(self._name, self._data, self._call, label_column, params, num_boost_round)
        if train_loop_per_worker is None:
            raise TypeError(f"{self._name}() needs train_loop_per_worker: the function each rank runs "
                            f"(it calls {self._library}.train itself; docs/boosting.md).")
        config = config if config is not None else backend_config
        super().__init__(train_loop_per_worker, backend_config=config if config is not None else self._config_type(),
                         **kwargs)

    def _check_backend_config(self, config: Any) -> Any:
        if not isinstance(config, self._config_type):
            raise TypeError(f"{self._config_arg} must be a tuneplat.train.{self._library}."
                            f"{self._config_type.__name__}, got {type(config).__name__}")
        return config

    @classmethod
    def get_model(cls, checkpoint: Any) -> Any:
        """Deprecated in Ray: use ``RayTrainReportCallback.get_model``."""
        raise DeprecationWarning(f"`{cls._name}.get_model` is deprecated. "
                                 "Use `RayTrainReportCallback.get_model` instead.")
