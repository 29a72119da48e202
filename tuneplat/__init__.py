"""tuneplat: hyperparameter tuning on Dask, with Ray Tune's API.

Porting a Ray Tune script is mostly changing imports::

    import tuneplat as tune          # was: from ray import tune
    from tuneplat import train       # was: from ray import train
"""

from __future__ import annotations

from . import schedulers, search, stopper, train
from ._compat import CLIReporter, JupyterNotebookReporter, ProgressReporter, SyncConfig
from ._config import CheckpointConfig, FailureConfig, MLflowConfig, RunConfig, ScalingConfig, TuneConfig
from ._init import init, is_initialized, shutdown
from ._run import ExperimentAnalysis, run
from ._tuner import Tuner
from .core import TuneError
from .core._journal import read_journal
from .core._trial import TrialStatus
from .execution._errors import PlacementError
from .results._result import Result, ResultGrid, TrialError
from .search import (
    choice,
    grid_search,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from .search._space import SearchSpaceError
from .stopper import Stopper
from .storage._checkpoint import Checkpoint
from .tracking._user_callbacks import Callback
from .train import TorchTrainer, get_checkpoint, get_context, report
from .trainables._trainable import Trainable
from .trainables._wrappers import PlacementGroupFactory, with_parameters, with_resources

__version__ = "0.1.0"

#: submodules under Ray's names, imported when first used (``tune.logger.LoggerCallback``, ``tune.result.DONE``)
_LAZY = ("air", "experiment", "logger", "result", "tune", "utils")


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "CLIReporter",
    "Callback",
    "Checkpoint",
    "CheckpointConfig",
    "ExperimentAnalysis",
    "FailureConfig",
    "JupyterNotebookReporter",
    "MLflowConfig",
    "PlacementError",
    "PlacementGroupFactory",
    "ProgressReporter",
    "Result",
    "ResultGrid",
    "RunConfig",
    "ScalingConfig",
    "SearchSpaceError",
    "Stopper",
    "SyncConfig",
    "TorchTrainer",
    "Trainable",
    "TrialError",
    "TrialStatus",
    "TuneConfig",
    "TuneError",
    "Tuner",
    "__version__",
    "choice",
    "get_checkpoint",
    "get_context",
    "grid_search",
    "init",
    "is_initialized",
    "lograndint",
    "loguniform",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "read_journal",
    "report",
    "run",
    "sample_from",
    "schedulers",
    "search",
    "shutdown",
    "stopper",
    "train",
    "uniform",
    "with_parameters",
    "with_resources",
]
