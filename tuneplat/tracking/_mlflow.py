"""MLflow tracking: one parent run per ``fit()``, one nested child run per trial.

The callback's hooks run on the tuner's loop thread and only append small
events to a queue. A writer thread ships them to a child process
(:func:`_child_main`, the uploader) that folds them into per-run buffers and
sends them with ``MlflowClient.log_batch`` (one call for many values). MLflow
runs in its own process so that its CPU work (SQLAlchemy, HTTP) never
competes with the tuner's loop for the GIL: the trial's ``report()`` path
never waits on MLflow. The uploader process outlives one ``fit()``
(:class:`_Pool`): it is started when the callback is made, imports MLflow
while the cluster starts, and serves the next ``fit()`` of the same Python
process as well. When the tracking server is down, the buffers stay and
are retried with backoff; at the end of the experiment the backlog is flushed
with a bounded wait and whatever could not be logged is reported in a warning
(and in ``<experiment>/mlflow_unlogged.json``).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import pickle
import queue
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._config import MLflowConfig
from .._redact import redact
from .._settings import env_seconds
from ..core import _events as ev
from ..core._callbacks import Callback

if TYPE_CHECKING:
    from ..core._view import TunerView

__all__ = ["MLflowCallback", "default_tracking_uri", "experiment_tags"]

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
_SKIP_METRICS = frozenset({"timestamp", "pid", "trial_id", "hostname", "done", "iterations_since_restore"})
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


@dataclass
class _RunState:
    """What one MLflow run still needs (filled by the loop thread's events, drained by the uploader)."""

    key: str
    name: str
    parent: bool = False
    run_id: str | None = None
    resume_id: str | None = None
    create_tags: dict[str, str] = field(default_factory=dict)
    created: bool = False
    set_running: bool = False
    reconcile: str | None = None  # terminal status to set if the run was left RUNNING by a crash
    history: list[tuple[str, float, int, int]] = field(default_factory=list)  # metrics to log only on a new run
    metrics: list[tuple[str, float, int, int]] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    tag_runs: dict[str, str] = field(default_factory=dict)  # tag -> key of another run whose id is the value
    artifacts: list[tuple[str, Any, str]] = field(default_factory=list)  # ("dir"|"text", payload, artifact path)
    register: list[str] = field(default_factory=list)
    end: str | None = None
    end_time: int | None = None
    ended: bool = False
    start_time: int | None = None

    def backlog(self) -> dict[str, int]:
        return {"metric values": len(self.metrics) + len(self.history), "params": len(self.params),
                "tags": len(self.tags) + len(self.tag_runs), "artifacts": len(self.artifacts),
                "registrations": len(self.register), "run end": int(self.end is not None and not self.ended),
                "run creation": int(not self.created)}


class _Uploader:
    """Runs in the uploader process: the only code that talks to MLflow."""

    def __init__(self, tracking_uri: str, experiment_name: str, artifact_location: str | None,
                 experiment_tags: dict[str, str], send: Callable[[tuple[Any, ...]], None], *,
                 inbox: queue.Queue[tuple[Any, ...]] | None = None, flush_timeout: float | None = None) -> None:
        self.send = send
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.artifact_location = artifact_location
        self.experiment_tags = experiment_tags
        self.inbox: queue.Queue[tuple[Any, ...]] = inbox if inbox is not None else queue.Queue()
        self.flush_timeout = _flush_timeout() if flush_timeout is None else flush_timeout
        self.exiting = False  # the tuner closed the pipe: leave the process after this session
        self.runs: dict[str, _RunState] = {}
        self.experiment_id: str | None = None
        self.dropped: list[str] = []
        self.last_error: str | None = None
        self.progress_at = time.monotonic()
        self.closing = False
        self.closed_at = 0.0
        self._client: Any = None
        self._plots_drawn: dict[tuple[str, str], str] = {}  # drawn, not yet logged: retried as they are

    # ---------------------------------------------------------------- thread
    def run(self) -> None:
        backoff: float | None = None  # None: wait for the next event; else seconds until a retry
        while True:
            items = []
            try:
                items.append(self.inbox.get(timeout=backoff))
            except queue.Empty:
                pass
            # take everything queued for a short window: one sync pass (a few log_batch calls,
            # one sqlite transaction each) then serves many results
            window_end = time.monotonic() + (0.0 if self.closing else BATCH_WINDOW_S)
            while not items or items[-1][0] not in ("close", "exit"):  # the end's flush starts at once
                try:
                    items.append(self.inbox.get(timeout=max(0.0, window_end - time.monotonic())))
                except queue.Empty:
                    break
            for it in items:
                self._apply(it)
            before = self.progress_at
            if self._sync():
                backoff = None
                if self.progress_at != before:
                    self.send(("progress",))
                if self.closing:
                    break
            elif self.closing:
                if time.monotonic() - max(self.progress_at, self.closed_at) > self.flush_timeout:
                    break
                backoff = 1.0
            else:
                backoff = min(30.0, max(1.0, (backoff or 0.5) * 2))
        _checkpoint_wal()
        self.send(("done", self.report()))

    def report(self) -> dict[str, Any]:
        """What is still not logged (counts per kind, run names), what MLflow rejected, the last error."""
        left: dict[str, int] = {}
        runs = []
        for st in self.runs.values():
            b = {k: v for k, v in st.backlog().items() if v}
            if b:
                runs.append(st.name)
                for k, v in b.items():
                    left[k] = left.get(k, 0) + v
        return {"not_logged": left, "runs": runs, "rejected": list(self.dropped), "last_error": self.last_error}

    def _apply(self, item: tuple[Any, ...]) -> None:
        op = item[0]
        if op in ("close", "exit"):
            self.closing = True
            self.closed_at = time.monotonic()
            self.exiting = self.exiting or op == "exit"
            return
        if op == "session":  # cannot happen: the tuner starts a session only after the last one's report
            return
        key = item[1]
        if op == "run":
            spec = item[2]
            if key not in self.runs:
                self.runs[key] = _RunState(key=key, name=spec["name"], parent=key == PARENT)
            st = self.runs[key]
            st.resume_id = spec.get("resume_id")
            st.create_tags.update(spec.get("tags", {}))
            st.params.update(spec.get("params", {}))
            st.history.extend(spec.get("history", []))
            st.reconcile = spec.get("reconcile")
            st.start_time = spec.get("start_time")
            return
        target = self.runs.get(key)
        if target is None:
            return
        st = target
        if op == "metrics":
            st.metrics.extend(item[2])
        elif op == "params":
            st.params.update(item[2])
        elif op == "tags":
            st.tags.update(item[2])
        elif op == "tag_run":
            st.tag_runs.update(item[2])
        elif op == "artifact":
            st.artifacts.append(item[2])
        elif op == "register":
            st.register.append(item[2])
        elif op == "running":
            st.set_running = True
            st.end, st.ended = None, False
        elif op == "end":
            st.end, st.ended = item[2], False
            st.end_time = item[3] if len(item) > 3 else None

    # ---------------------------------------------------------------- MLflow calls
    def _get_client(self) -> Any:
        if self._client is None:
            from mlflow import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)
        return self._client

    def _sync(self) -> bool:
        """One pass over every buffer; False when MLflow is unreachable (retry later)."""
        try:
            client = self._get_client()
            if self.experiment_id is None:
                self.experiment_id = self._ensure_experiment(client)
                self._progress()
            parent = self.runs.get(PARENT)
            order = ([parent] if parent else []) + [st for k, st in self.runs.items() if k != PARENT]
            for st in order:
                self._sync_run(client, st)
            for st in order:  # tags naming another run's id, now that every run exists
                if st.tag_runs:
                    for tag, other in list(st.tag_runs.items()):
                        o = self.runs.get(other)
                        if o is not None and o.run_id:
                            st.tags[tag] = o.run_id
                        del st.tag_runs[tag]
                    self._log_tags(client, st)
            return True
        except Exception as exc:  # noqa: BLE001 - anything here means "MLflow did not take it"
            msg = f"{type(exc).__name__}: {exc}"
            if msg != self.last_error:
                logger.warning("tuneplat: MLflow at %s is not reachable (%s); training goes on, logging is "
                               "retried in the background", redact(self.tracking_uri),
                               redact(msg.splitlines()[0][:300]))
            self.last_error = msg
            return False

    def _progress(self) -> None:
        self.progress_at = time.monotonic()

    def _permanent(self, exc: BaseException) -> bool:
        code = getattr(exc, "error_code", None)
        return code in _PERMANENT or isinstance(exc, (OSError, ValueError, TypeError)) and not _is_network(exc)

    def _drop(self, what: str, exc: BaseException) -> None:
        msg = f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        logger.warning("tuneplat: MLflow rejected %s", redact(msg))
        self.dropped.append(msg)

    def _ensure_experiment(self, client: Any) -> str:
        exp = client.get_experiment_by_name(self.experiment_name)
        if exp is None:
            try:
                return client.create_experiment(self.experiment_name, artifact_location=self.artifact_location,
                                                tags=self.experiment_tags or None)
            except Exception as exc:
                exp = client.get_experiment_by_name(self.experiment_name)
                if exp is None:
                    raise exc from None
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(exp.experiment_id)
        for key, value in self.experiment_tags.items():
            if key == EXPERIMENT_KIND_TAG and key in exp.tags:
                continue  # the experiment's owner chose its kind
            if exp.tags.get(key) != value:
                client.set_experiment_tag(exp.experiment_id, key, value)
        return exp.experiment_id

    def _run_name(self, client: Any, st: _RunState) -> str:
        """A new parent run of a sweep that already has one in this MLflow experiment is named ``<name> #N``.

        A re-run in the same folder (the previous run moved to ``<name>.<time>``)
        keeps the plain name: the previous run's parent is renamed after its new
        folder, so names match folders.
        """
        if not st.parent or "'" in st.name:
            return st.name
        previous = st.create_tags.get("tuneplat.previous_run_dir")
        if previous and "'" not in previous:
            self._rename_previous(client, st, previous)
        try:
            runs = client.search_runs([self.experiment_id], filter_string="tags.`tuneplat.kind` = 'experiment' and "
                                      f"tags.`tuneplat.experiment` = '{st.create_tags.get('tuneplat.experiment')}'",
                                      max_results=1000)
        except Exception as exc:  # noqa: BLE001 - a name only
            if self._permanent(exc):
                return st.name
            raise
        pattern = re.compile(re.escape(st.name) + r"(?: #(\d+))?")
        numbers = [int(m.group(1) or 1) for r in runs
                   if (m := pattern.fullmatch(r.data.tags.get("mlflow.runName", r.info.run_name or "")))]
        return f"{st.name} #{max(numbers) + 1}" if numbers else st.name

    def _rename_previous(self, client: Any, st: _RunState, previous: str) -> None:
        """The parent runs of this folder's earlier run take the name and path of the folder it moved to."""
        here = st.create_tags.get("tuneplat.experiment_dir", "")
        if "'" in here:
            return
        try:
            runs = client.search_runs([self.experiment_id], filter_string="tags.`tuneplat.kind` = 'experiment' and "
                                      f"tags.`tuneplat.experiment_dir` = '{here}'", max_results=1000)
            for r in runs:
                client.set_tag(r.info.run_id, "mlflow.runName", os.path.basename(previous))
                client.set_tag(r.info.run_id, GROUP_TAG, previous)
                children = client.search_runs([self.experiment_id], max_results=5000,
                                              filter_string=f"tags.`mlflow.parentRunId` = '{r.info.run_id}'")
                for child in children:  # they stay in their run's group
                    client.set_tag(child.info.run_id, GROUP_TAG, previous)
        except Exception as exc:  # noqa: BLE001 - a name only
            if not self._permanent(exc):
                raise

    def _create(self, client: Any, st: _RunState) -> None:
        if st.resume_id:
            try:
                run = client.get_run(st.resume_id)
            except Exception as exc:
                if getattr(exc, "error_code", None) != "RESOURCE_DOES_NOT_EXIST":
                    raise
                logger.warning("tuneplat: MLflow run %s of %s is gone from %s; starting a new run",
                               st.resume_id, st.name, redact(self.tracking_uri))
                run = None
            if run is not None:
                st.run_id = run.info.run_id
                st.history.clear()
                st.params.clear()  # logged by the first session (MLflow refuses to change a param)
                if st.reconcile and run.info.status == "RUNNING":  # left RUNNING by a crash
                    client.set_terminated(st.run_id, st.reconcile)
                st.created = True
                if st.parent:
                    self._reconcile_orphans(client, st.run_id)
                self._announce(st)
                return
        tags = dict(st.create_tags)
        if not st.parent:
            parent = self.runs.get(PARENT)
            if parent is not None and parent.run_id:
                tags["mlflow.parentRunId"] = parent.run_id
        run = client.create_run(self.experiment_id, run_name=self._run_name(client, st), tags=tags,
                                start_time=st.start_time)
        st.run_id = run.info.run_id
        st.created = True
        st.metrics[:0] = st.history  # a new run for a resumed trial: log what it reported before
        st.history = []
        if st.reconcile:
            st.end = st.end or st.reconcile
        self._announce(st)

    def _announce(self, st: _RunState) -> None:
        self.send(("created", st.key, st.run_id, self.experiment_id))
        self._progress()

    def _reconcile_orphans(self, client: Any, parent_id: str) -> None:
        """Children left RUNNING by a crash whose ids never reached the journal: mark them KILLED."""
        known = {st.resume_id for st in self.runs.values() if st.resume_id}
        try:
            runs = client.search_runs([self.experiment_id],
                                      filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}' "
                                                    "and attributes.status = 'RUNNING'", max_results=1000)
        except Exception as exc:
            if self._permanent(exc):
                return
            raise
        for run in runs:
            if run.info.run_id not in known:
                client.set_terminated(run.info.run_id, "KILLED")

    def _sync_run(self, client: Any, st: _RunState) -> None:
        from mlflow.entities import Metric, Param

        if not st.created:
            self._create(client, st)
        rid = st.run_id
        assert rid is not None
        if st.set_running:
            client.update_run(rid, status="RUNNING")
            st.set_running = False
            self._progress()
        while st.params:
            chunk = dict(list(st.params.items())[:100])
            try:
                client.log_batch(rid, params=[Param(k, v) for k, v in chunk.items()])
            except Exception as exc:
                if not self._permanent(exc):
                    raise
                self._drop(f"params {sorted(chunk)} of run {st.name}", exc)
            for k in chunk:
                st.params.pop(k, None)
            self._progress()
        self._log_tags(client, st)
        while st.metrics:
            rows = st.metrics[:1000]
            try:
                client.log_batch(rid, metrics=[Metric(k, v, ts, step) for k, v, ts, step in rows])
            except Exception as exc:
                if not self._permanent(exc):
                    raise
                self._drop(f"{len(rows)} metric values of run {st.name}", exc)
            del st.metrics[:len(rows)]
            self._progress()
        while st.artifacts:
            kind, payload, path = st.artifacts[0]
            try:
                if kind == "plots":
                    self._log_plots(client, rid, payload, path)
                elif kind == "dir" and not isinstance(payload, str):  # a checkpoint on remote storage
                    with payload.as_directory() as local:
                        client.log_artifacts(rid, local, artifact_path=path)
                elif kind == "dir":
                    client.log_artifacts(rid, payload, artifact_path=path)
                else:
                    client.log_text(rid, payload, path)
            except Exception as exc:
                if not self._permanent(exc):
                    raise
                self._drop(f"artifact {path} of run {st.name}", exc)
            st.artifacts.pop(0)
            self._progress()
        while st.register:
            name = st.register[0]
            try:
                self._register(client, st, name)
            except Exception as exc:
                if not self._permanent(exc):
                    raise
                self._drop(f"registering model {name!r} from run {st.name}", exc)
            st.register.pop(0)
            self._progress()
        if st.end is not None and not st.ended:
            client.set_terminated(rid, st.end, end_time=st.end_time)
            st.ended = True
            self._progress()

    def _log_plots(self, client: Any, rid: str, spec: dict[str, Any], path: str) -> None:
        """Draw the experiment's plots from its journal (here, off the tuner's process) and log them."""
        import tempfile

        key = (rid, path)
        folder = self._plots_drawn.get(key)
        if folder is None:
            from ..plot import PlotError, save_plots

            folder = tempfile.mkdtemp(prefix="tuneplat-plots-")
            try:
                saved = save_plots(spec["experiment_dir"], folder, metric=spec.get("metric"), mode=spec.get("mode"))
            except PlotError:  # nothing to draw (no results): nothing to log
                shutil.rmtree(folder, ignore_errors=True)
                return
            except Exception as exc:  # noqa: BLE001 - a plot that cannot be drawn must not lose the rest
                shutil.rmtree(folder, ignore_errors=True)
                self.dropped.append(f"plots of the experiment (could not be drawn: {type(exc).__name__}: {exc})")
                return
            self.dropped.extend(f"plot {kind} ({why})" for kind, why in saved.skipped.items()
                                if why.startswith("could not be drawn"))
            if not saved.files:
                shutil.rmtree(folder, ignore_errors=True)
                return
            self._plots_drawn[key] = folder
        try:
            client.log_artifacts(rid, folder, artifact_path=path)
        except Exception as exc:
            if not self._permanent(exc):
                raise  # retried with the same files
        self._plots_drawn.pop(key, None)
        shutil.rmtree(folder, ignore_errors=True)

    def _log_tags(self, client: Any, st: _RunState) -> None:
        from mlflow.entities import RunTag

        while st.tags:
            chunk = dict(list(st.tags.items())[:100])
            try:
                client.log_batch(st.run_id, tags=[RunTag(_key(k), str(v)[:_MAX_TAG_LEN]) for k, v in chunk.items()])
            except Exception as exc:
                if not self._permanent(exc):
                    raise
                self._drop(f"tags {sorted(chunk)} of run {st.name}", exc)
            for k in chunk:
                st.tags.pop(k, None)
            self._progress()

    def _register(self, client: Any, st: _RunState, name: str) -> None:
        try:
            client.create_registered_model(name, description="Registered by tuneplat: the best trial's checkpoint.")
        except Exception as exc:
            if getattr(exc, "error_code", None) != "RESOURCE_ALREADY_EXISTS":
                raise
        run = client.get_run(st.run_id)
        source = f"{run.info.artifact_uri.rstrip('/')}/model"
        link = f"runs:/{st.run_id}/model"
        mv = client.create_model_version(name, source=source, run_id=st.run_id, run_link=link,
                                         tags={"tuneplat.trial": st.name, "tuneplat.source_run": link},
                                         description=f"Checkpoint of trial {st.name} (run {st.run_id}).",
                                         await_creation_for=0)
        logger.info("tuneplat: registered %s version %s from run %s", name, mv.version, st.run_id)


#: filesystems on which sqlite's WAL mode is safe (one host, real shared memory); anything else
#: (NFS, SMB, Lustre, FUSE mounts, or no /proc/mounts to tell) keeps sqlite's default rollback journal
_LOCAL_FS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "tmpfs", "overlay", "f2fs", "jfs", "bcachefs"})
#: sqlite files the uploader put in WAL mode (checkpointed at the end of every session)
_WAL_FILES: set[str] = set()


def _on_local_disk(path: str) -> bool:
    """Whether ``path`` lies on a local filesystem (by the longest matching mount point in /proc/mounts)."""
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return False
    real = os.path.realpath(path)
    best, fstype = "", None
    for parts in mounts:
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, fstype = mnt, parts[2]
    return fstype in _LOCAL_FS


def _tune_sqlite(dbapi_conn: Any, _record: Any) -> None:
    """SQLAlchemy "connect" listener of the uploader process: WAL + synchronous=NORMAL for a local sqlite store.

    MLflow's sqlite store commits several transactions per ``log_batch``; in
    sqlite's default mode each costs a few fsyncs. In WAL mode with
    ``synchronous=NORMAL`` a commit is an append to the ``-wal`` file (durable
    at the next checkpoint; the database stays consistent on power loss).
    Readers such as ``mlflow ui`` on the same host read concurrently with the
    writer. WAL needs shared memory, so network filesystems are left alone.
    """
    import sqlite3

    if not isinstance(dbapi_conn, sqlite3.Connection):
        return
    try:
        rows = dbapi_conn.execute("PRAGMA database_list").fetchall()
        path = next((r[2] for r in rows if r[1] == "main"), "")
        if not path or not (path in _WAL_FILES or _on_local_disk(path)):
            return
        if dbapi_conn.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() == "wal":
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")
            _WAL_FILES.add(path)
    except sqlite3.Error:
        pass  # e.g. locked by another writer for now: this connection keeps the defaults


def _checkpoint_wal() -> None:
    """Move what the ``-wal`` files hold into the database files, so that a copy of ``mlflow.db`` is complete.

    The uploader keeps its connections (and so the ``-wal`` file) between
    fits; this runs at the end of each one. A checkpoint writes no new data.
    """
    import sqlite3

    for path in list(_WAL_FILES):
        try:
            conn = sqlite3.connect(path, timeout=5)
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                conn.close()
        except sqlite3.Error as exc:
            logger.debug("tuneplat: WAL checkpoint of %s: %s", path, exc)


def _is_network(exc: BaseException) -> bool:
    return isinstance(exc, (ConnectionError, TimeoutError)) or "connection" in type(exc).__name__.lower()


# ---------------------------------------------------------------- the uploader process
_LEN = struct.Struct("!I")


def _write_frame(f: Any, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(_LEN.pack(len(data)) + data)
    f.flush()


def _read_frame(f: Any) -> Any:
    head = f.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError
    (n,) = _LEN.unpack(head)
    data = f.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)


def _child_main() -> None:
    """Entry point of the uploader process: frames of events on stdin, replies on (the original) stdout.

    The process outlives one ``fit()``: it imports MLflow at once (while the tuner
    starts its cluster), then serves one session after another — a
    ``("session", init)`` item, that session's events, its ``("close",)`` — until
    stdin ends. At the end of stdin it flushes what it has and leaves.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the tuner decides when logging ends (it closes our stdin)
    try:
        os.nice(10)  # the tuner's loop and the trials come first; logging catches up in idle time
    except OSError:
        pass
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # MLflow's own prints must not corrupt the reply frames
    sys.stdout = sys.stderr
    inp = os.fdopen(os.dup(0), "rb")
    lock = threading.Lock()

    def send(msg: tuple[Any, ...]) -> None:
        with lock:
            try:
                _write_frame(out, msg)
            except (BrokenPipeError, OSError):
                pass

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    inbox: queue.Queue[tuple[Any, ...]] = queue.Queue()

    def pump() -> None:
        try:
            while True:
                for item in _read_frame(inp):
                    inbox.put(item)
        except (EOFError, OSError, pickle.UnpicklingError):
            inbox.put(("exit",))  # the tuner is gone or done: flush what we have and leave

    threading.Thread(target=pump, name="tuneplat-mlflow-in", daemon=True).start()
    # the imports that the first session would otherwise wait for (~2-3 s)
    import mlflow
    import mlflow.entities
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    event.listen(Engine, "connect", _tune_sqlite)
    send(("ready",))
    # what drawing the plots at the end needs (~1-2 s of imports), loaded while the experiment runs
    threading.Thread(target=_preimport_plots, name="tuneplat-plots-import", daemon=True).start()
    while True:
        item = inbox.get()
        if item[0] == "exit":
            return
        if item[0] != "session":
            continue  # a stray item of a session the tuner gave up on
        init = item[1]
        up = _Uploader(init["tracking_uri"], init["experiment_name"], init["artifact_location"],
                       init.get("experiment_tags") or {}, send,
                       inbox=inbox, flush_timeout=init["flush_timeout"])
        up.run()
        if up.exiting:
            return


def _preimport_plots() -> None:
    try:
        import matplotlib.backends.backend_agg  # noqa: F401
        import optuna.importance  # noqa: F401
        import sklearn.ensemble  # noqa: F401

        from ..plot import _plots  # noqa: F401
    except Exception:  # noqa: BLE001 - only a head start: drawing imports them again and reports errors
        pass


def _uploader_env() -> dict[str, str]:
    """The environment the uploader process runs with: this process's, plus MLflow settings of its own.

    An uploader is reused only by a ``fit()`` that would give it the same
    environment (credentials, proxies and ``MLFLOW_*`` settings are read from it).
    """
    env = dict(os.environ)
    # MLflow's defaults retry one request for ~4 minutes; the uploader retries the whole
    # backlog itself, so keep each attempt short (in the uploader process only).
    env.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    env.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    env.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    # set_terminated would print two links and fetch the run again for every trial
    env.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    env.setdefault("MLFLOW_CONFIGURE_LOGGING", "false")  # no INFO chatter (DB migrations) on the terminal
    return env


class _UploaderProcess:
    """The tuner's handle on one uploader process; it serves one :class:`_Session` at a time."""

    def __init__(self, env: dict[str, str]) -> None:
        root = os.path.abspath(__file__)
        for _ in range(__name__.count(".") + 1):  # up to the folder holding the tuneplat package
            root = os.path.dirname(root)
        full = dict(env, PYTHONPATH=os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p))
        self.env = env
        self.owner = os.getpid()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from tuneplat.tracking._mlflow import _child_main; _child_main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=full,
            # its own session: a Ctrl-C (or a notebook kernel's interrupt/shutdown signal to the process group)
            # reaches the tuner only; the uploader flushes and leaves when the tuner closes its stdin or dies
            start_new_session=True)
        self.outq: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
        self.ready = threading.Event()
        self.session: _Session | None = None
        self.broken: str | None = None
        self.last_heard = time.monotonic()
        threading.Thread(target=self._writer, name="tuneplat-mlflow-out", daemon=True).start()
        threading.Thread(target=self._reader, name="tuneplat-mlflow-in", daemon=True).start()

    def usable(self) -> bool:
        """Alive, not in use by a session that went wrong, and started by this process (not a fork's parent)."""
        return self.broken is None and self.proc.poll() is None and self.owner == os.getpid()

    def start(self, init: dict[str, Any], ids_file: str | None) -> _Session:
        session = _Session(self, ids_file)
        self.session = session
        self.put(("session", init))
        return session

    def put(self, item: tuple[Any, ...] | None) -> None:
        self.outq.put(item)

    def _writer(self) -> None:
        stop = False
        while not stop:
            items = [self.outq.get()]
            window_end = time.monotonic() + BATCH_WINDOW_S / 2  # fewer, bigger frames: less GIL churn
            while items[-1] is not None and items[-1][0] != "close":  # a close is sent at once
                try:
                    items.append(self.outq.get(timeout=max(0.0, window_end - time.monotonic())))
                except queue.Empty:
                    break
            if None in items:
                stop = True
                items = [i for i in items if i is not None]
            try:
                if items:
                    _write_frame(self.proc.stdin, items)
            except (BrokenPipeError, OSError) as exc:
                self.broken = self.broken or f"the MLflow uploader process ended early ({exc})"
                return
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass

    def _reader(self) -> None:
        try:
            while True:
                msg = _read_frame(self.proc.stdout)
                self.last_heard = time.monotonic()
                session = self.session
                if msg[0] == "ready":
                    self.ready.set()
                elif session is None:
                    continue
                elif msg[0] == "created":
                    with session.created_lock:
                        session.created.append(msg[1:])
                    session.record(msg[1], msg[2])
                elif msg[0] == "done":
                    session.report = msg[1]
                    self.session = None
                    session.done.set()
        except (EOFError, OSError, pickle.UnpicklingError):
            self.broken = self.broken or f"the MLflow uploader process exited with code {self.proc.poll()}"
            session = self.session
            if session is not None:
                session.done.set()

    def kill(self) -> None:
        self.broken = self.broken or "stopped"
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop(self) -> bool:
        """Ask the uploader to end (without waiting); True if it is idle, so that waiting for it is cheap.

        The writer closes the uploader's stdin: an idle uploader leaves at once;
        a busy one finishes its backlog first (bounded by its flush timeout).
        """
        if self.owner != os.getpid() or self.proc.poll() is not None:
            return False
        self.put(None)
        if self.session is not None:
            return False
        if not self.ready.is_set():
            self.proc.terminate()  # still importing MLflow: nothing to lose
        return True

    def wait_end(self, deadline: float) -> None:
        try:
            self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class _Session:
    """One ``fit()``'s use of an uploader process: non-blocking ``put``, bounded ``close``."""

    def __init__(self, proc: _UploaderProcess, ids_file: str | None) -> None:
        self.proc = proc
        self.pid = proc.proc.pid
        self.created: list[tuple[str, str, str]] = []
        self.created_lock = threading.Lock()
        self.report: dict[str, Any] | None = None
        self.done = threading.Event()
        self.ids_file = ids_file

    @property
    def broken(self) -> str | None:
        return self.proc.broken

    def put(self, item: tuple[Any, ...]) -> None:
        self.proc.put(item)

    def record(self, key: str, run_id: str) -> None:
        """Run ids reach the journal on the loop thread, at its next hook; this file has them at once."""
        if self.ids_file is None:
            return
        try:
            with open(self.ids_file, "a", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "run_id": run_id}) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            logger.warning("tuneplat: cannot record MLflow run ids in %s: %s", self.ids_file, exc)

    def take_created(self) -> list[tuple[str, str, str]]:
        if not self.created:
            return []
        with self.created_lock:
            created, self.created = self.created, []
        return created

    def close(self, idle_timeout: float) -> None:
        """Ask for the final flush and wait for the uploader's report; then give the process back to the pool.

        The uploader itself gives up after ``idle_timeout`` seconds without
        progress and reports what is left. This side only guards against an
        uploader stuck inside one MLflow call (bounded by the HTTP timeouts it
        runs with) or still starting up: ``idle_timeout + STUCK_GRACE_S``
        without hearing from it. Such an uploader is killed, not reused.
        """
        proc = self.proc
        self.put(("close",))
        closed_at = time.monotonic()
        finished = False
        try:
            while not self.done.wait(timeout=0.5):
                if time.monotonic() - max(proc.last_heard, closed_at) > idle_timeout + STUCK_GRACE_S:
                    proc.broken = (f"the MLflow uploader sent nothing for {idle_timeout + STUCK_GRACE_S:.0f}s "
                                   "(stuck in a request to the tracking server?)")
                    proc.kill()
                    return
            finished = self.report is not None
        finally:
            if finished and proc.usable():
                _POOL.release(proc)
            elif proc.session is self:
                proc.put(None)  # interrupted while flushing: let it finish on its own, never reuse it
                proc.broken = proc.broken or "left while flushing"


class _Pool:
    """Idle uploader processes of this Python process, by their environment.

    Starting one costs ~3 s (Python and ``import mlflow``), so one is started
    when an :class:`MLflowCallback` is made (at ``fit()`` start, while the
    cluster starts) and kept for the next ``fit()``. A dead one is replaced.
    All are ended at interpreter exit.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: dict[tuple[tuple[str, str], ...], list[_UploaderProcess]] = {}
        self.every: list[_UploaderProcess] = []
        self.hooked = False

    def warm(self, env: dict[str, str]) -> None:
        """Make sure an idle uploader for ``env`` exists (start one if not)."""
        self.release(self.acquire(env))

    @staticmethod
    def _key(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
        # names starting with "_" are process-internal and change under us (importing mlflow in
        # the tuner sets _MLFLOW_TELEMETRY_SESSION_ID): they do not make another uploader necessary
        return tuple(sorted((k, v) for k, v in env.items() if not k.startswith("_")))

    def acquire(self, env: dict[str, str]) -> _UploaderProcess:
        key = self._key(env)
        with self.lock:
            idle = self.idle.get(key, [])
            while idle:
                proc = idle.pop()
                if proc.usable():
                    return proc
            # the environment changed: idle uploaders of another one are unlikely to serve again
            stale = [p for k, procs in self.idle.items() if k != key for p in procs]
            self.idle = {k: v for k, v in self.idle.items() if k == key}
            proc = _UploaderProcess(env)
            self.every = [p for p in self.every if p.proc.poll() is None] + [proc]
            if not self.hooked:
                atexit.register(self.shutdown)
                self.hooked = True
        for p in stale:
            p.stop()  # reaped by a later acquire() or at exit
        return proc

    def release(self, proc: _UploaderProcess) -> None:
        if not proc.usable():
            return
        with self.lock:
            idle = self.idle.setdefault(self._key(proc.env), [])
            if proc not in idle:
                idle.append(proc)

    def shutdown(self) -> None:
        """At interpreter exit: end the idle uploaders (waiting at most ~2 s); busy ones end on their own."""
        with self.lock:
            procs, self.every, self.idle = self.every, [], {}
        idle = [p for p in procs if p.stop()]
        deadline = time.monotonic() + 2.0
        for p in idle:
            p.wait_end(deadline)


_POOL = _Pool()


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


#: the order of the kinds of things in the "not logged" line
_KIND_ORDER = {"run creation": 0, "metric values": 1, "params": 2, "tags": 3, "artifacts": 4, "registrations": 5,
               "run end": 6}


def _status_for(trial: Any) -> str:
    s = str(trial.status)
    return {"TERMINATED": "FINISHED", "ERROR": "FAILED"}.get(s, "KILLED")


def _artifact_source(ckpt: Any) -> Any:
    """A local checkpoint's folder; a remote one travels whole (the uploader downloads it)."""
    return ckpt.path if ckpt.filesystem is None else ckpt


class MLflowCallback(Callback):
    """Logs the experiment to MLflow (built by :func:`tuneplat.tracking.make_callbacks`).

    Args:
        config: the :class:`tuneplat.MLflowConfig`.
        experiment_name: the tuneplat experiment name (MLflow experiment name by default).

    Example:
        >>> import tuneplat as tune
        >>> rc = tune.RunConfig(mlflow=tune.MLflowConfig(tracking_uri="http://127.0.0.1:5000",
        ...                                              register_best_model="my-model"))
    """

    def __init__(self, config: MLflowConfig, experiment_name: str) -> None:
        self.config = config
        self.experiment_name = experiment_name
        self.tracking_uri: str | None = None
        self.uploader: _Session | None = None
        self.parent_run_id: str | None = None
        self.experiment_id: str | None = None  # the MLflow experiment's id, once the uploader made or found it
        self.unlogged: dict[str, int] = {}
        self._superseded: set[str] = set()
        self._system_steps: dict[tuple[str, int], int] = {}  # (trial, rank) -> last system-metrics step
        self._added = 0  # trials sent to the uploader, and runs it confirmed: the mirror's backlog
        self._created = 0
        self._first_add: float | None = None
        # start (or find) the uploader process now: its ~3 s of start-up overlap the cluster's
        _POOL.warm(_uploader_env())

    # ---------------------------------------------------------------- helpers
    def _put(self, *item: Any) -> None:
        if self.uploader is not None:
            self.uploader.put(item)

    def _drain_created(self, ctrl: TunerView) -> list[ev.Event]:
        """The runs the uploader created since last asked, as events for the loop to record (it alone
        writes the journal and sets ``trial.mlflow_run_id``)."""
        up = self.uploader
        if up is None:
            return []
        out: list[ev.Event] = []
        for key, run_id, experiment_id in up.take_created():
            new = key != PARENT and key not in self.run_ids
            self.run_ids[key] = run_id
            self.experiment_id = experiment_id
            self._created += new
            if key == PARENT:
                out.append(ev.MlflowParentRun(run_id=run_id, experiment_id=experiment_id,
                                              tracking_uri=self.tracking_uri))
                self.parent_run_id = run_id
                continue
            if self._journaled.get(key) != run_id:  # (a restored trial's run is in the journal already)
                self._journaled[key] = run_id
                out.append(ev.MlflowRun(trial_id=key, run_id=run_id))
        return out

    def _trial_spec(self, ctrl: TunerView, trial: Any, *, resume: bool = False, run_id: str | None = None) -> dict[str, Any]:
        params = {_key(k): _param_value(v) for k, v in _flatten(trial.config).items()}
        spec: dict[str, Any] = {
            "name": trial.name,
            "start_time": int(time.time() * 1000),
            "params": params,
            "tags": {"tuneplat.kind": "trial", "tuneplat.trial_id": trial.trial_id, "tuneplat.trial_dir": trial.path,
                     "tuneplat.experiment": ctrl.experiment_name, "tuneplat.status": str(trial.status),
                     GROUP_TAG: ctrl.experiment_dir},
        }
        if resume:
            spec["resume_id"] = run_id
            spec["history"] = [m for r in trial.results for m in self._metric_rows(r)]
            if trial.status.is_finished():
                spec["reconcile"] = _status_for(trial)
        return spec

    @staticmethod
    def _metric_rows(result: dict[str, Any]) -> list[tuple[str, float, int, int]]:
        step = int(result.get("training_iteration", 0) or 0)
        ts = int(float(result.get("timestamp", time.time())) * 1000)
        return [(k, v, ts, step) for k, v in _metrics_of(result).items()]

    # ---------------------------------------------------------------- hooks
    def on_experiment_start(self, ctrl: TunerView) -> list[ev.Event]:
        from ..core._journal import read_journal
        from ..core._replay import replay

        cfg = self.config
        storage_path = os.path.dirname(ctrl.experiment_dir)
        artifact_location = None
        if cfg.tracking_uri:
            self.tracking_uri = cfg.tracking_uri
            artifact_location = _sqlite_artifact_root(cfg.tracking_uri)
        else:
            self.tracking_uri, artifact_location = default_tracking_uri(storage_path)
        self.mlflow_experiment = cfg.experiment_name or ctrl.experiment_name
        if artifact_location is not None:  # one artifact folder per MLflow experiment
            artifact_location = f"{artifact_location}/{_key(self.mlflow_experiment).replace('/', '_')}"
        self._journaled: dict[str, str] = {}
        found: list[ev.Event] = []
        self.parent_run_id = None
        parent_resume = None
        if ctrl.resume:
            known: dict[str, str] = {}
            for line in _read_lines(os.path.join(ctrl.experiment_dir, IDS_FILE)):
                known[line["key"]] = line["run_id"]
            # what the journal holds wins over the uploader's file
            state = replay(read_journal(os.path.join(ctrl.experiment_dir, "journal.jsonl")), ctrl.experiment_dir,
                           check_files=False)
            for t in state.trials:
                if t.mlflow_run_id:
                    known[t.trial_id] = self._journaled[t.trial_id] = t.mlflow_run_id
            if state.mlflow_parent_run_id:
                known[PARENT] = state.mlflow_parent_run_id
            parent_resume = known.pop(PARENT, None)
            for t in ctrl.trials:  # runs the uploader made but the last tuner did not journal: for the loop to record
                if t.mlflow_run_id is None and t.trial_id in known:
                    self._journaled[t.trial_id] = known[t.trial_id]
                    found.append(ev.MlflowRun(trial_id=t.trial_id, run_id=known[t.trial_id]))
        self.run_ids: dict[str, str] = {}
        self.uploader = _POOL.acquire(_uploader_env()).start(
            {"tracking_uri": self.tracking_uri, "experiment_name": self.mlflow_experiment,
             "artifact_location": artifact_location, "flush_timeout": _flush_timeout(),
             "experiment_tags": experiment_tags(ctrl.metric, ctrl.mode, dict(ctrl.param_space))},
            os.path.join(ctrl.experiment_dir, IDS_FILE))
        sched: dict[str, Any] = getattr(ctrl.scheduler, "describe", dict)()
        params = {
            "metric": _param_value(ctrl.metric), "mode": _param_value(ctrl.mode),
            "num_samples": str(ctrl.tc.num_samples), "searcher": type(ctrl.searcher).__name__,
            "scheduler": type(ctrl.scheduler).__name__,
            "scaling/num_workers": (str(ctrl.world_size) if getattr(ctrl, "min_world_size", None) is None
                                    else f"({ctrl.min_world_size}, {ctrl.world_size})"),
            "scaling/resources_per_worker": _param_value(dict(ctrl.request)),
            "max_concurrent_trials": str(ctrl.tc.max_concurrent_trials),
        }
        params.update({_key(f"scheduler/{k}"): _param_value(v) for k, v in _flatten(dict(sched)).items()})
        params.update({_key(f"space/{k}"): _param_value(v) for k, v in _flatten(ctrl.param_space).items()})
        tags = {"tuneplat.kind": "experiment", "tuneplat.experiment_dir": ctrl.experiment_dir,
                "tuneplat.experiment": ctrl.experiment_name}
        previous = getattr(ctrl, "previous_run_dir", None)
        if previous:  # a re-run: the previous run's parent is renamed after the folder it moved to
            tags["tuneplat.previous_run_dir"] = previous
        tags.update({str(k): str(v) for k, v in (cfg.tags or {}).items()})
        self._put("run", PARENT, {"name": ctrl.experiment_name, "params": params, "tags": tags,
                                  "resume_id": parent_resume, "start_time": int(time.time() * 1000)})
        if parent_resume:
            self._put("running", PARENT)
        for t in ctrl.trials:  # restored trials: continue their runs
            self._put("run", t.trial_id, self._trial_spec(ctrl, t, resume=True,
                                                          run_id=t.mlflow_run_id or self._journaled.get(t.trial_id)))
        return found

    def backlog_s(self) -> float:
        """About how long the uploader needs to write the trials it has not created yet (0 when unknown).

        The tuner stops starting trials when this would carry the end of the
        experiment past its time budget (the end waits for the mirror).
        """
        pending = self._added - self._created
        if pending <= 0 or self._first_add is None:
            return 0.0
        if self._created < 3:  # the uploader is starting (not the trials' time): a typical pace
            return pending * _TYPICAL_RUN_S
        return pending * (time.monotonic() - self._first_add) / self._created

    def on_trial_add(self, ctrl: TunerView, trial: Any) -> list[ev.Event]:
        created = self._drain_created(ctrl)
        self._added += 1
        if self._first_add is None:
            self._first_add = time.monotonic()
        self._put("run", trial.trial_id, self._trial_spec(ctrl, trial))
        return created

    def on_trial_start(self, ctrl: TunerView, trial: Any) -> list[ev.Event]:
        created = self._drain_created(ctrl)
        if trial.attempts > 1 or ctrl.resume:
            self._put("running", trial.trial_id)
        self._put("tags", trial.trial_id, {"tuneplat.status": "RUNNING", "tuneplat.attempt": str(trial.attempts - 1)})
        if getattr(ctrl, "min_world_size", None) is not None and trial.world_size:  # an elastic group: size over time
            step = trial.world_sizes[-1][0] if trial.world_sizes else trial.iteration
            self._put("metrics", trial.trial_id, [("tuneplat/world_size", float(trial.world_size), int(time.time() * 1000),
                                                   int(step))])
            self._put("tags", trial.trial_id, {"tuneplat.world_size": str(trial.world_size)})

        return created

    def on_trial_resize(self, ctrl: TunerView, trial: Any, old: int, new: int, reason: str) -> None:
        self._put("tags", trial.trial_id, {"tuneplat.resizes": str(len(trial.world_sizes) - 1),
                                           "tuneplat.last_resize": f"from {old} to {new} ranks: {reason}"[:5000]})

    def on_trial_result(self, ctrl: TunerView, trial: Any, result: dict[str, Any]) -> list[ev.Event]:
        created = self._drain_created(ctrl)
        self._put("metrics", trial.trial_id, self._metric_rows(result))
        return created

    def on_checkpoint(self, ctrl: TunerView, trial: Any, checkpoint: Any, metrics: dict[str, Any]) -> None:
        self._put("tags", trial.trial_id, {"tuneplat.latest_checkpoint": checkpoint.path})

    def on_trial_superseded(self, ctrl: TunerView, trial: Any, after_iteration: int) -> None:
        self._superseded.add(trial.trial_id)
        self._put("tags", trial.trial_id, {
            "tuneplat.superseded_after_iteration": str(after_iteration),
            "tuneplat.note": (f"A retry resumed from iteration {after_iteration}: metric values logged at later steps "
                              "before the retry are superseded; the retry's values at the same steps are newer."),
        })

    def on_trial_failure(self, ctrl: TunerView, trial: Any, message: str, will_retry: bool) -> None:
        self._put("tags", trial.trial_id, {"tuneplat.num_failures": str(trial.num_failures),
                                           "tuneplat.last_failure": message})
        if will_retry:
            self._put("artifact", trial.trial_id, ("text", message, f"failures/attempt_{trial.attempts - 1}.txt"))

    def on_trial_exploit(self, ctrl: TunerView, trial: Any, event: dict[str, Any]) -> None:
        src = event.get("from_trial")
        self._put("tags", trial.trial_id, {"tuneplat.pbt_parent": str(src),
                                           "tuneplat.pbt_exploits": str(len(trial.lineage))})
        if src in ctrl.by_id:
            self._put("tag_run", trial.trial_id, {"tuneplat.pbt_parent_run_id": src})
        payload = {k: v for k, v in event.items() if k not in ("event", "config_pickle")}
        self._put("artifact", trial.trial_id,
                  ("text", json.dumps(payload, indent=2, default=repr), f"pbt/exploit_{event.get('iteration', 0):06d}.json"))

    def on_trial_complete(self, ctrl: TunerView, trial: Any) -> list[ev.Event]:
        created = self._drain_created(ctrl)
        tid = trial.trial_id
        tags = {"tuneplat.status": str(trial.status)}
        if trial.stop_reason:
            tags["tuneplat.stop_reason"] = trial.stop_reason
        if trial.error:
            tags["tuneplat.error"] = trial.error
        self._put("tags", tid, tags)
        if tid in self._superseded and trial.results:
            self._relog_last(trial)
        if trial.error_traceback or trial.error:
            self._put("artifact", tid, ("text", trial.error_traceback or trial.error, "error.txt"))
        if self.config.log_checkpoints:
            for ckpt, _metrics in trial.checkpoints:
                self._put("artifact", tid, ("dir", _artifact_source(ckpt), f"checkpoints/{os.path.basename(ckpt.path)}"))
        self._put("end", tid, _status_for(trial), int(time.time() * 1000))
        return created

    def on_system_metrics(self, ctrl: TunerView, trial: Any, ranks: dict[int, dict[str, float]], timestamp: float) -> None:
        """Each rank's CPU, memory and GPU samples as MLflow system metrics (``system/rank_<r>/<name>``)."""
        rows: list[tuple[str, float, int, int]] = []
        for rank, metrics in ranks.items():
            step = self._system_steps[(trial.trial_id, rank)] = self._system_steps.get((trial.trial_id, rank), -1) + 1
            rows.extend((f"system/rank_{rank}/{k}", float(v), int(timestamp * 1000), step)
                        for k, v in metrics.items() if isinstance(v, (int, float)))
        if rows:
            self._put("metrics", trial.trial_id, rows)

    def on_stacks(self, ctrl: TunerView, trial: Any, path: str | None, summary: str, reason: str) -> None:
        """Captured stacks of the trial's ranks: an artifact under ``stacks/`` and a tag with the summary."""
        self._put("tags", trial.trial_id, {"tuneplat.last_stacks": f"{reason}: {summary}"[:4000]})
        if path:
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except OSError:
                return
            self._put("artifact", trial.trial_id, ("text", text, f"stacks/{os.path.basename(path)}"))

    def _relog_last(self, trial: Any) -> None:
        """After a retry, make the run's latest metric values those of the trial's last result."""
        last = trial.last_result
        top = max([int(r.get("training_iteration", 0) or 0) for r in trial.superseded] + [0])
        if top > int(last.get("training_iteration", 0) or 0):
            rows = [(k, v, int(time.time() * 1000), top) for k, v, _ts, _s in self._metric_rows(last)]
            self._put("metrics", trial.trial_id, rows)
            self._put("tags", trial.trial_id, {"tuneplat.final_metrics_relogged_at_step": str(top)})

    def on_experiment_end(self, ctrl: TunerView, status: str) -> list[ev.Event]:
        up = self.uploader
        if up is None:
            return []
        for t in ctrl.trials:
            if not t.status.is_finished():
                self._put("tags", t.trial_id, {"tuneplat.status": str(t.status)})
                self._put("end", t.trial_id, "KILLED", int(time.time() * 1000))
        best = self._best(ctrl)
        if best is not None:
            # tags, not metrics: a parent's "best/..." metrics would make an empty chart section in the UI
            values = {f"tuneplat.best.{k}": _param_value(v) for k, v in _metrics_of(best.last_result).items()}
            self._put("tags", PARENT, {"tuneplat.best_trial_id": best.trial_id, "tuneplat.best_trial": best.name,
                                       **values})
            self._put("tag_run", PARENT, {"tuneplat.best_run_id": best.trial_id})
            self._put("artifact", PARENT, ("text", json.dumps(best.config, indent=2, default=repr), "best_config.json"))
            name = self.config.register_best_model
            if name:
                if best.checkpoint is None:
                    logger.warning("tuneplat: register_best_model=%r: the best trial %s has no checkpoint; nothing "
                                   "registered (report a checkpoint to register a model)", name, best.trial_id)
                else:
                    self._put("artifact", best.trial_id, ("dir", _artifact_source(best.checkpoint), "model"))
                    self._put("register", best.trial_id, name)
        # the uploader process draws them from the journal: make everything so far readable there
        if self.config.log_plots and any(t.results for t in ctrl.trials) and ctrl.sync_journal():
            self._put("artifact", PARENT, ("plots", {"experiment_dir": ctrl.experiment_dir, "metric": None,
                                                     "mode": None}, "plots"))
        self._put("end", PARENT, {"finished": "FINISHED", "interrupted": "KILLED"}.get(status, "FAILED"),
                  int(time.time() * 1000))
        up.close(_flush_timeout())
        created = self._drain_created(ctrl)
        self._report_backlog(ctrl, up)
        return created

    def _best(self, ctrl: TunerView) -> Any:
        if not isinstance(ctrl.metric, str) or ctrl.mode not in ("min", "max"):
            return None
        from ..results._result import ResultGrid

        grid = ResultGrid.from_trials(ctrl.trials, ctrl.metric, ctrl.mode, ctrl.experiment_dir)
        try:
            best = grid.get_best_result()
        except ValueError:
            return None
        return ctrl.by_id.get(best.trial_id)

    def _report_backlog(self, ctrl: TunerView, up: _Session) -> None:
        if up.report is not None:
            report = {**up.report, "tracking_uri": redact(self.tracking_uri)}
        else:  # the uploader died or hung: we cannot know exactly what it had sent
            report = {"tracking_uri": redact(self.tracking_uri), "not_logged": {}, "runs": [], "rejected": [],
                      "last_error": up.broken, "unconfirmed": True}
        report["last_error"] = redact(report["last_error"]) if report.get("last_error") else report.get("last_error")
        report["rejected"] = [redact(r) for r in report.get("rejected") or []]
        left = report["not_logged"]
        self.unlogged = dict(left)
        if not left and not report["rejected"] and not report.get("unconfirmed"):
            return
        path = os.path.join(ctrl.experiment_dir, "mlflow_unlogged.json")
        try:
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
                json.dump(report, f, indent=2)
        except OSError:
            path = "(could not write the report file)"
        if report.get("unconfirmed"):
            self.unlogged = {"unconfirmed": 1}
            logger.warning("tuneplat: the MLflow uploader stopped before confirming that everything reached %s (%s); "
                           "the experiment's results are complete in %s.", redact(self.tracking_uri),
                           (report["last_error"] or "no reason given").splitlines()[0][:300], ctrl.experiment_dir)
        elif left:
            n_runs = len(report["runs"])
            last_error = report["last_error"]
            logger.warning(
                "tuneplat: MLflow at %s did not take everything: not logged %s for %d run%s%s. The experiment's "
                "results are complete in %s; details in %s.", redact(self.tracking_uri),
                ", ".join(f"{left[k]} {k}" for k in sorted(left, key=lambda k: (_KIND_ORDER.get(k, 99), k))), n_runs,
                "" if n_runs == 1 else "s", f" (last error: {last_error.splitlines()[0][:300]})" if last_error else "",
                ctrl.experiment_dir, path)
        if report["rejected"]:
            logger.warning("tuneplat: MLflow rejected %d items (see %s): %s", len(report["rejected"]), path,
                           "; ".join(report["rejected"][:3]))

