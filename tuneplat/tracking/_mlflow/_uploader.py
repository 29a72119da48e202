"""The uploader: folds the tuner's events into per-run buffers and sends them with ``MlflowClient.log_batch``."""

from __future__ import annotations

import logging
import os
import queue
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..._redact import redact

if TYPE_CHECKING:
    pass
from ._format import (
    _MAX_TAG_LEN,
    _PERMANENT,
    BATCH_WINDOW_S,
    EXPERIMENT_KIND_TAG,
    GROUP_TAG,
    PARENT,
    _flush_timeout,
    _key,
)
from ._sqlite import _checkpoint_wal, _is_network

__all__ = ["_RunState", "_Uploader"]

logger = logging.getLogger("tuneplat")


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
            from ...plot import PlotError, save_plots

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
