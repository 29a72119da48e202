"""Turning tuneplat's results into MLflow's names and values: keys, params, metrics, tags, statuses."""

from __future__ import annotations

import json
import logging
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._settings import env_seconds

if TYPE_CHECKING:
    pass


__all__ = ["BATCH_WINDOW_S", "EXPERIMENT_KIND", "EXPERIMENT_KIND_TAG", "GROUP_TAG", "IDS_FILE", "PARENT", "STUCK_GRACE_S", "VIEW_KEY", "VIEW_TAG_PREFIX", "_BAD_KEY_CHARS", "_MAX_KEY_LEN", "_MAX_PARAM_LEN", "_MAX_TAG_LEN", "_METRIC_KEYS", "_PERMANENT", "_SKIP_METRICS", "_TYPICAL_RUN_S", "_flatten", "_flush_timeout", "_key", "_metrics_of", "_param_value", "_read_lines", "_sqlite_artifact_root", "default_tracking_uri", "experiment_tags"]

logger = logging.getLogger("tuneplat")


def _flush_timeout() -> float:
    """Seconds the end-of-experiment flush waits without any progress before giving up."""
    return env_seconds("TUNEPLAT_MLFLOW_FLUSH_TIMEOUT_S", 30)

#: seconds the uploader typically takes per trial run (create, params, metrics, end) on a local store
_TYPICAL_RUN_S = 0.03
#: extra seconds the tuner waits for an uploader stuck in one request (2 retries x 20 s timeout + backoff)
STUCK_GRACE_S = 90.0
#: seconds the uploader gathers events before one round of log_batch calls
BATCH_WINDOW_S = 0.5
_MAX_PARAM_LEN = 6000
_MAX_TAG_LEN = 8000
_MAX_KEY_LEN = 250
_SKIP_METRICS = frozenset({"timestamp", "pid", "trial_id", "hostname", "done", "iterations_since_restore",
                           "time_since_restore", "date", "node_ip", "config", "checkpoint_dir_name"})
_BAD_KEY_CHARS = re.compile(r"[^\w\-./ :]")
#: MLflow error codes that retrying cannot fix
_PERMANENT = frozenset({"INVALID_PARAMETER_VALUE", "RESOURCE_ALREADY_EXISTS", "RESOURCE_DOES_NOT_EXIST",
                        "BAD_REQUEST", "INVALID_STATE", "PERMISSION_DENIED", "UNAUTHENTICATED"})
PARENT = "__parent__"
#: the experiment tag MLflow 3's UI reads to open an experiment in the classic (model training) view rather than
#: the GenAI one; "custom_model_development" is its value for model training (mlflow/server/js ExperimentKind)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
#: experiment tags holding the UI's saved views of the runs table (the UI's "saved views" menu and its
#: ``?viewStateShareKey=<key>`` links); tuneplat stores one that shows the metric and the searched parameters
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
VIEW_KEY = "tuneplat"
#: the tag the saved view groups runs by: a run of the sweep (its folder), on the parent run and on each trial's run
GROUP_TAG = "tuneplat.experiment_dir"
#: run ids as soon as they exist (the journal gets them at the loop's next hook)
IDS_FILE = "mlflow_runs.jsonl"


def _read_lines(path: str) -> list[dict[str, Any]]:
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line torn by a crash
    except OSError:
        pass
    return out


def default_tracking_uri(storage_path: str) -> tuple[str, str | None]:
    """The tracking URI (and artifact root) used when ``MLflowConfig.tracking_uri`` is None.

    ``$MLFLOW_TRACKING_URI`` when set (artifact root: the server's choice; for a
    sqlite URI, ``mlartifacts`` beside the database file),
    else an embedded sqlite store ``<storage_path>/mlflow.db`` with artifacts
    under ``<storage_path>/mlartifacts``.

    Example:
        >>> default_tracking_uri("/tmp/results")  # doctest: +SKIP
        ('sqlite:////tmp/results/mlflow.db', 'file:///tmp/results/mlartifacts')
    """
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env, _sqlite_artifact_root(env)
    return f"sqlite:///{os.path.abspath(storage_path)}/mlflow.db", Path(storage_path, "mlartifacts").resolve().as_uri()


def _sqlite_artifact_root(tracking_uri: str) -> str | None:
    """Artifacts of a new experiment in a sqlite store: ``mlartifacts`` beside the database file.

    (MLflow's own default is ``./mlruns`` in whatever folder the process runs in.)
    """
    if not tracking_uri.startswith("sqlite:///"):
        return None
    db = tracking_uri[len("sqlite:///"):].split("?", 1)[0]
    if not db or db == ":memory:":
        return None
    return Path(os.path.dirname(db) or ".", "mlartifacts").resolve().as_uri()


def _key(name: str) -> str:
    return _BAD_KEY_CHARS.sub("_", str(name))[:_MAX_KEY_LEN]


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            name = f"{prefix}/{k}" if prefix else str(k)
            if isinstance(v, dict) and v and list(v) != ["grid_search"]:
                out.update(_flatten(v, name))
            else:
                out[name] = v
    return out


def _param_value(v: Any) -> str:
    if isinstance(v, str):
        text = v
    elif v is None or isinstance(v, (bool, int, float)):
        text = str(v)
    else:
        text = repr(v)
    return text[:_MAX_PARAM_LEN]


#: sanitized metric names (a sweep reports the same few names again and again)
_METRIC_KEYS: dict[str, str] = {}


def _metrics_of(result: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric values of a result, nested dicts flattened with ``/`` (on the tuner's loop: kept cheap)."""
    out = {}
    for k, v in result.items():
        name = f"{prefix}/{k}" if prefix else str(k)
        if isinstance(v, dict):
            if v and list(v) != ["grid_search"]:
                out.update(_metrics_of(v, name))
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or name in _SKIP_METRICS:
            continue
        key = _METRIC_KEYS.get(name)
        if key is None:
            if len(_METRIC_KEYS) > 100_000:
                _METRIC_KEYS.clear()
            key = _METRIC_KEYS[name] = _key(name)
        out[key] = float(v)
    return out


def experiment_tags(metric: Any, mode: Any, param_space: dict[str, Any]) -> dict[str, str]:
    """The MLflow experiment's tags: its kind (classic view) and a saved view of the runs table.

    The saved view shows the metric(s) and the searched parameters as columns,
    with the runs grouped by the sweep's run (its folder): one expanded group per
    run of the sweep holding the parent run and its trials, the group's row showing
    the best value of the (first) metric. Open it with ``?viewStateShareKey=tuneplat``
    or from the UI's saved views menu. (Not sorted by the metric: MLflow nests
    child runs only in its date order, and a sort would scatter the groups' rows.)

    Example:
        >>> sorted(experiment_tags("loss", "min", {"lr": 0.1}))
        ['mlflow.experimentKind', 'mlflow.sharedViewState.tuneplat']
    """
    metrics = [m for m in (metric if isinstance(metric, list) else [metric]) if isinstance(m, str)]
    modes = mode if isinstance(mode, list) else [mode]
    columns = [f"metrics.`{_key(m)}`" for m in metrics]
    columns += [f"params.`{_key(k)}`" for k in list(_flatten(param_space))[:20]]
    columns += ["tags.`tuneplat.status`"]
    # widths for whole values (MLflow applies widths only to the columns listed in columnOrder)
    widths = {c: 170 for c in columns if c.startswith("metrics.")}
    flat = _flatten(param_space)
    for key, value in list(flat.items())[:20]:
        widths[f"params.`{_key(key)}`"] = 110 if isinstance(value, (bool, int, str)) and len(str(value)) < 10 else 170
    state: dict[str, Any] = {
        "selectedColumns": columns, "hideEmptyCharts": True,
        "groupBy": {"aggregateFunction": "max" if modes and modes[0] == "max" else "min",
                    "groupByKeys": [{"mode": "tag", "groupByData": GROUP_TAG}]},
        "columnOrder": ["attributes.`Run Name`", "runDateAndNestInfo", "duration", *columns],
        "columnWidths": widths,
    }
    now = int(time.time() * 1000)
    view = {"name": "tuneplat: metric and parameters", "createdAt": now, "updatedAt": now,
            "state": json.dumps(state)}
    return {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND, VIEW_TAG_PREFIX + VIEW_KEY: json.dumps(view)}
