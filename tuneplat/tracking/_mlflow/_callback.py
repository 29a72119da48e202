"""The :class:`MLflowCallback`: the tuner's hooks, turned into small events for the uploader process."""

from __future__ import annotations

import json
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from ..._config import MLflowConfig
from ..._redact import redact
from ...core import _events as ev
from ...core._callbacks import Callback

if TYPE_CHECKING:
    from ...core._view import TunerView
from ._format import (
    _TYPICAL_RUN_S,
    GROUP_TAG,
    IDS_FILE,
    PARENT,
    _flatten,
    _flush_timeout,
    _key,
    _metrics_of,
    _param_value,
    _read_lines,
    _sqlite_artifact_root,
    default_tracking_uri,
    experiment_tags,
)
from ._process import _POOL, _Session, _uploader_env

__all__ = ["MLflowCallback", "_KIND_ORDER", "_artifact_source", "_status_for"]

logger = logging.getLogger("tuneplat")


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
        from ...core._journal import read_journal
        from ...core._replay import replay

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
        from ...results._result import ResultGrid

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
