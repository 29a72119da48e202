"""Ray Tune objects that tuneplat accepts so that ported scripts run, and what they map to.

``CLIReporter``/``JupyterNotebookReporter`` (``RunConfig(progress_reporter=...)``):
tuneplat prints its own status table; ``max_report_frequency`` sets
``RunConfig.progress_interval_s``, the other arguments are kept and unused.
``SyncConfig`` (``RunConfig(sync_config=...)``): storage is written directly
(a shared folder or an fsspec URL), so there is nothing to sync.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CLIReporter", "JupyterNotebookReporter", "SyncConfig"]


class CLIReporter:
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


class JupyterNotebookReporter(CLIReporter):
    """Accepted for Ray compatibility (see :class:`CLIReporter`)."""

    def __init__(self, *, overwrite: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
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
