"""Ray Tune objects that tuneplat accepts so that ported scripts run, and what they map to.

``CLIReporter``/``JupyterNotebookReporter`` (``RunConfig(progress_reporter=...)``):
tuneplat prints its own status table; ``max_report_frequency`` sets
``RunConfig.progress_interval_s``, the other arguments are kept and unused.
A :class:`ProgressReporter` subclass of the user's own (Ray's interface:
``should_report(trials, done)`` / ``report(trials, done, *sys_info)``) is called
as results arrive and once at the end, beside tuneplat's table.
``SyncConfig`` (``RunConfig(sync_config=...)``): storage is written directly
(a shared folder or an fsspec URL), so there is nothing to sync.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core._view import TunerView

__all__ = ["CLIReporter", "JupyterNotebookReporter", "ProgressReporter", "SyncConfig", "reporter_callbacks"]


class ProgressReporter:
    """Ray Tune's reporter interface (``ray.tune.ProgressReporter``): subclass it to print progress your way.

    Pass an instance as ``RunConfig(progress_reporter=...)``: after each result
    (and each trial's end) :meth:`should_report` is asked, and when it says yes
    :meth:`report` gets every trial; at the end ``report(trials, done=True)``
    runs once. Hooks run on the tuner's loop: keep them fast.

    Example:
        >>> import tuneplat as tune
        >>> class Count(tune.ProgressReporter):
        ...     def report(self, trials, done, *sys_info):
        ...         print(len(trials), "trials", "(done)" if done else "")
        >>> rc = tune.RunConfig(progress_reporter=Count())
    """

    def setup(self, start_time: float | None = None, total_samples: int | None = None, metric: str | None = None,
              mode: str | None = None, **kwargs: Any) -> None:
        """Called once before the first trial."""

    def should_report(self, trials: list[Any], done: bool = False) -> bool:
        """Whether to call :meth:`report` now (default: always)."""
        return True

    def report(self, trials: list[Any], done: bool, *sys_info: Any) -> None:
        """Show progress; ``trials`` are the experiment's trials (Ray's attributes)."""


class CLIReporter(ProgressReporter):
    """Accepted for Ray compatibility; only ``max_report_frequency`` (seconds) is used.

    Example:
        >>> import tuneplat as tune
        >>> rc = tune.RunConfig(progress_reporter=tune.CLIReporter(metric_columns=["loss"], max_report_frequency=10))
        >>> rc.progress_interval_s
        10.0
    """

    def __init__(self, *, metric_columns: Sequence[str] | Mapping[str, str] | None = None,
                 parameter_columns: Sequence[str] | Mapping[str, str] | None = None,
                 total_samples: int | None = None, max_progress_rows: int = 20, max_error_rows: int = 20,
                 max_column_length: int = 20, max_report_frequency: float = 5, infer_limit: int = 3,
                 print_intermediate_tables: bool | None = None, metric: str | None = None, mode: str | None = None,
                 sort_by_metric: bool = False) -> None:
        if isinstance(max_report_frequency, bool) or not isinstance(max_report_frequency, (int, float)) \
                or max_report_frequency <= 0:
            raise ValueError(f"The value of `max_report_frequency` is {max_report_frequency!r}, but must be a "
                             "number of seconds > 0.")
        self.metric_columns = metric_columns
        self.parameter_columns = parameter_columns
        self.max_report_frequency = float(max_report_frequency)
        self.metric, self.mode = metric, mode

    @staticmethod
    def _add(columns: Sequence[str] | Mapping[str, str] | None, name: str, representation: str | None,
             kind: str) -> Sequence[str] | Mapping[str, str]:
        cols: Any = columns if columns is not None else []
        if name in cols:
            raise ValueError(f"{kind} column {name!r} is already shown")
        if isinstance(cols, Mapping):
            return {**cols, name: representation or name}
        if representation is not None and representation != name:
            return {**{c: c for c in cols}, name: representation}
        return [*cols, name]

    def add_metric_column(self, metric: str, representation: str | None = None) -> None:
        """Show ``metric`` too (Ray's method; tuneplat's table shows every reported metric already)."""
        self.metric_columns = self._add(self.metric_columns, metric, representation, "metric")

    def add_parameter_column(self, parameter: str, representation: str | None = None) -> None:
        """Show ``parameter`` too (Ray's method)."""
        self.parameter_columns = self._add(self.parameter_columns, parameter, representation, "parameter")

    def report(self, trials: list[Any], done: bool, *sys_info: Any) -> None:
        """Nothing: tuneplat's own status table is the CLI report."""


class JupyterNotebookReporter(CLIReporter):
    """Accepted for Ray compatibility (see :class:`CLIReporter`)."""

    def __init__(self, *, overwrite: bool = True, metric_columns: Sequence[str] | Mapping[str, str] | None = None,
                 parameter_columns: Sequence[str] | Mapping[str, str] | None = None,
                 total_samples: int | None = None, max_progress_rows: int = 20, max_error_rows: int = 20,
                 max_column_length: int = 20, max_report_frequency: float = 5, infer_limit: int = 3,
                 print_intermediate_tables: bool | None = None, metric: str | None = None, mode: str | None = None,
                 sort_by_metric: bool = False) -> None:
        super().__init__(metric_columns=metric_columns, parameter_columns=parameter_columns,
                         total_samples=total_samples, max_progress_rows=max_progress_rows,
                         max_error_rows=max_error_rows, max_column_length=max_column_length,
                         max_report_frequency=max_report_frequency, infer_limit=infer_limit,
                         print_intermediate_tables=print_intermediate_tables, metric=metric, mode=mode,
                         sort_by_metric=sort_by_metric)
        self.overwrite = overwrite


@dataclass
class SyncConfig:
    """Accepted for Ray compatibility: tuneplat writes results to ``storage_path`` directly."""

    sync_period: int = 300
    sync_timeout: int = 1800
    sync_artifacts: bool = False
    sync_artifacts_on_checkpoint: bool = True
    upload_dir: Any = None
    syncer: Any = None
    sync_on_checkpoint: Any = None


def reporter_callbacks(progress_reporter: Any) -> list[Any]:
    """A user's own :class:`ProgressReporter` (one that overrides ``report``), as a controller callback."""
    if progress_reporter is None or isinstance(progress_reporter, CLIReporter):
        return []
    if not callable(getattr(progress_reporter, "report", None)):
        raise TypeError(f"RunConfig(progress_reporter=...) must be a tune.ProgressReporter (or CLIReporter), got "
                        f"{type(progress_reporter).__name__}")
    from .core._callbacks import ControllerCallback

    class _Reporting(ControllerCallback):
        def on_experiment_start(self, ctrl: TunerView) -> None:
            import time

            setup = getattr(progress_reporter, "setup", None)
            if callable(setup):
                setup(start_time=time.time(), total_samples=getattr(ctrl.searcher, "total", None) or None,
                      metric=ctrl.metric, mode=ctrl.mode)

        def _maybe(self, ctrl: TunerView) -> None:
            trials = list(ctrl.trials)
            ask = getattr(progress_reporter, "should_report", None)
            if not callable(ask) or ask(trials, done=False):
                progress_reporter.report(trials, False)

        def on_trial_result(self, ctrl: TunerView, trial: Any, result: dict[str, Any]) -> None:
            self._maybe(ctrl)

        def on_trial_complete(self, ctrl: TunerView, trial: Any) -> None:
            self._maybe(ctrl)

        def on_experiment_end(self, ctrl: TunerView, status: str) -> None:
            progress_reporter.report(list(ctrl.trials), True)

    return [_Reporting()]
