"""Rebuilding an experiment from its folder: the journal is the source of truth."""

from __future__ import annotations

import logging
import os
import pickletools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from .._signing import SignatureError, check_field, check_file, key_path, sign_file
from ..storage._checkpoint import Checkpoint
from ..storage._storage import fs_for_url, is_remote, remote_is_committed
from ._journal import JournalError, read_journal
from ._trial import Trial, TrialStatus

__all__ = ["DecisionMade", "ExperimentState", "ExploitMade", "FailureSeen", "Moment", "ResultsSuperseded", "Span",
           "TrialEnded", "TrialHistory", "TunerStateError", "load_state", "load_trials", "load_tuner_state", "prepare_resume", "replay", "restore_problem", "save_tuner_state",
           "tuner_state_problem"]

logger = logging.getLogger("tuneplat")

STATE_FILE = "tuner.pkl"


def _without_secrets(state: dict[str, Any]) -> dict[str, Any]:
    """The Tuner's arguments minus what holds credentials: they are given again to :meth:`Tuner.restore`.

    ``RunConfig.storage_filesystem`` (an fsspec filesystem with its keys) and
    TLS settings holding private keys in memory are left out; a tracking URI
    loses its ``user:password@`` part (MLflow also reads
    ``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD``).
    """
    import dataclasses

    from .._redact import has_credentials, strip_credentials

    rc = state.get("run_config")
    if rc is None or not dataclasses.is_dataclass(rc):
        return state
    dropped = []
    changes: dict[str, Any] = {}
    if getattr(rc, "storage_filesystem", None) is not None:
        changes["storage_filesystem"] = None
        dropped.append("run_config.storage_filesystem")
    sec = getattr(rc, "security", None)
    if sec is not None:
        keys = sec.values() if isinstance(sec, dict) else vars(sec).values() if hasattr(sec, "__dict__") else ()
        if any(isinstance(v, str) and "PRIVATE KEY" in v for v in keys):
            changes["security"] = None
            dropped.append("run_config.security")
    mlflow = getattr(rc, "mlflow", None)
    uri = getattr(mlflow, "tracking_uri", None)
    if uri and has_credentials(uri):
        changes["mlflow"] = dataclasses.replace(mlflow, tracking_uri=strip_credentials(uri))  # type: ignore[type-var]
        dropped.append("run_config.mlflow.tracking_uri's credentials")
    if not changes:
        return state
    return {**state, "run_config": dataclasses.replace(rc, **changes),  # type: ignore[type-var]
            "not_saved": dropped}


def save_tuner_state(experiment_dir: str, state: dict[str, Any]) -> None:
    """Pickle the Tuner's arguments (atomically, readable by the owner only) so restore needs only the trainable.

    Credentials are not saved (see :func:`_without_secrets`): restore says which to give again.
    """
    os.makedirs(experiment_dir, exist_ok=True)
    tmp = os.path.join(experiment_dir, f".{STATE_FILE}.tmp")
    try:
        data = cloudpickle.dumps(_without_secrets(state))
    except Exception as exc:  # noqa: BLE001
        logger.warning("tuneplat: cannot save the Tuner's settings for restore (%s); pass them to "
                       "Tuner.restore(...) again", exc)
        return
    if os.path.exists(tmp):
        os.unlink(tmp)
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(sign_file(data))  # restore checks the signature before unpickling (tuneplat/_signing.py)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(experiment_dir, STATE_FILE))


class TunerStateError(RuntimeError):
    """``tuner.pkl`` is damaged (it holds the Tuner's settings for restore)."""


def _state_problem(data: bytes) -> str | None:
    """Why ``data`` is not a whole pickle, found by reading its opcodes (nothing is executed)."""
    if not data:
        return "it is empty"
    try:
        ops = [op for op, _arg, _pos in pickletools.genops(data)]
        last = ops[-1] if ops else None
    except Exception as exc:  # noqa: BLE001 - any parse error means damage
        return f"it is not a whole pickle ({exc})"
    if last is None or last.name != "STOP":
        return "it is cut short"
    return None


def tuner_state_problem(experiment_dir: str) -> str | None:
    """What is wrong with the folder's ``tuner.pkl`` (None: absent or whole); it is not unpickled."""
    path = os.path.join(experiment_dir, STATE_FILE)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be read: {exc}"
    if not data:
        return f"{path} is damaged: it is empty"
    try:
        data = check_file(path, data)
    except SignatureError as exc:
        return str(exc)
    problem = _state_problem(data)
    return f"{path} is damaged: {problem}" if problem else None


def restore_problem(experiment_dir: str) -> str | None:
    """Why :meth:`Tuner.restore` could not read this folder (None: it can)."""
    journal = os.path.join(experiment_dir, "journal.jsonl")
    if not os.path.isfile(journal):
        return f"{experiment_dir} has no journal.jsonl: not a tuneplat experiment folder (pass the folder storage_path/name)"
    try:
        read_journal(journal)
    except (JournalError, OSError, UnicodeDecodeError) as exc:
        return str(exc)
    return tuner_state_problem(experiment_dir)


def load_tuner_state(experiment_dir: str) -> dict[str, Any]:
    """The Tuner's saved settings ({} if none were saved).

    Raises:
        TunerStateError: naming the file, when it is damaged.
    """
    path = os.path.join(experiment_dir, STATE_FILE)
    if not os.path.exists(path):
        return {}
    problem = tuner_state_problem(experiment_dir)
    hint = ("It holds the Tuner's settings: pass param_space=, tune_config= and run_config= to Tuner.restore(...) "
            "instead (then it is not read, and configs come from the journal's JSON copies), or remove the file "
            "if you do.")
    if problem:
        raise TunerStateError(f"{problem}. {hint}")
    with open(path, "rb") as f:
        data = check_file(path, f.read())  # (checked above; the file is read again as it is now)
    try:
        state = cloudpickle.loads(data)  # noqa: S301 - our own file, in the user's experiment folder
    except Exception as exc:  # noqa: BLE001 - e.g. a class that no longer imports
        raise TunerStateError(f"{path} cannot be loaded ({type(exc).__name__}: {exc}). {hint}") from None
    if not isinstance(state, dict):
        raise TunerStateError(f"{path} holds a {type(state).__name__}, not the Tuner's settings. {hint}")
    if state.get("not_saved"):
        logger.warning("tuneplat: %s does not hold credentials (%s): give them again, e.g. "
                       "Tuner.restore(path, trainable, storage_filesystem=...) or run_config=..., or set "
                       "MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD", path, ", ".join(state["not_saved"]))
    return state


def _config(event: dict[str, Any], key: str = "config", trusted: bool = False) -> dict[str, Any]:
    """A trial's config from a journal event: the JSON copy, or (``trusted`` only) the exact pickled one.

    Configs that JSON cannot hold exactly (objects, tuples) are also journaled
    pickled; only a restore, which runs the user's own code anyway, unpickles them.
    """
    blob = event.get("config_pickle")
    if blob and trusted:
        data = check_field(blob)
        if data is None:  # not signed with this user's key: never unpickled
            _warn_unsigned(event)
        else:
            try:
                import cloudpickle

                return cloudpickle.loads(data)
            except Exception:  # noqa: BLE001 - fall back to the JSON copy
                pass
    return dict(event.get(key) or {})


_warned_unsigned: set[str] = set()


def _warn_unsigned(event: dict[str, Any]) -> None:
    trial = str(event.get("trial_id"))
    if trial not in _warned_unsigned:
        _warned_unsigned.add(trial)
        logger.warning("tuneplat: the journal's pickled config of trial %s is not signed with your key (%s): it was "
                       "changed, or written by someone else or an older tuneplat; it is not unpickled, the journal's "
                       "JSON copy of the config is used", trial, key_path())


@dataclass(frozen=True, kw_only=True)
class Moment:
    """Something that happened to a trial, and where it was then on its learning curve.

    Attributes:
        seq: the position of its line in the journal (orders moments of different kinds).
        time: the event's wall-clock time (seconds since the epoch), if recorded.
        iteration: the trial's ``training_iteration`` then (the event's own where it names one).
        results: how many results the trial had then (its last one is ``results[results - 1]``).
    """

    seq: int
    time: float | None
    iteration: int
    results: int


@dataclass(frozen=True, kw_only=True)
class DecisionMade(Moment):
    """A ``STOP`` or ``PAUSE`` answered to a result (``pruned``: cut short by the scheduler; None in old journals)."""

    decision: str
    reason: str = ""
    pruned: bool | None = None


@dataclass(frozen=True, kw_only=True)
class FailureSeen(Moment):
    """An attempt failed (``retry``: the trial was put back in the queue)."""

    message: str
    retry: bool


@dataclass(frozen=True, kw_only=True)
class ExploitMade(Moment):
    """PBT's exploit: the trial took ``from_trial``'s checkpoint (of ``from_iteration``) and ``new_config``."""

    from_trial: str | None
    from_iteration: int | None
    old_config: dict[str, Any]
    new_config: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class TrialEnded(Moment):
    """The trial reached a final state (``paused_iteration``: it ended while paused there, e.g. HyperBand's drop)."""

    status: str
    stop_reason: str | None = None
    paused_iteration: int | None = None


@dataclass(frozen=True, kw_only=True)
class ResultsSuperseded(Moment):
    """Results after ``iteration`` were superseded (a retry from an earlier checkpoint); ``results`` were kept."""


@dataclass(frozen=True)
class Span:
    """When an attempt of a trial ran: ``end`` None while it still runs; ``how`` it ended (``"failed"``,
    ``"paused"``, ``"terminated"``, ``"error"``, ``"interrupted"``, ``"running"``)."""

    start: float
    end: float | None
    how: str


@dataclass
class TrialHistory:
    """What happened to one trial, in journal order (what plots mark on its curve and simulations compare).

    Moments that concerned results later superseded are kept: compare their ``seq`` and ``results`` with
    :attr:`superseded` to leave them out.
    """

    first_config: dict[str, Any]
    spans: list[Span] = field(default_factory=list)
    decisions: list[DecisionMade] = field(default_factory=list)
    failures: list[FailureSeen] = field(default_factory=list)
    exploits: list[ExploitMade] = field(default_factory=list)
    ends: list[TrialEnded] = field(default_factory=list)
    superseded: list[ResultsSuperseded] = field(default_factory=list)


@dataclass
class ExperimentState:
    """An experiment as its journal tells it (:func:`replay`).

    Attributes:
        trials: every trial, in creation order, with its status, results, checkpoints and lineage as last recorded.
        meta: the experiment's settings (``name``, ``metric``, ``mode``, ``num_samples``, ``scaling``) and the
            elastic trials' ``resizes``.
        status: how the last run of the loop ended (``experiment_end``): None while it runs, or after a crash.
        mlflow_parent_run_id: the experiment's MLflow parent run, if MLflow mirrored it.
        scheduler: the scheduler's name as the experiment recorded it (``"asha"``...), if known.
        start_time, end_time: wall-clock times of the first ``experiment`` and the last ``experiment_end`` event.
        peak_running: the most trials that ran at once.
        history: each trial's decisions, failures, exploits, ends and attempt spans, by trial id.
    """

    trials: list[Trial]
    meta: dict[str, Any] = field(default_factory=dict)
    status: str | None = None
    mlflow_parent_run_id: str | None = None
    scheduler: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    peak_running: int = 1
    history: dict[str, TrialHistory] = field(default_factory=dict)


def replay(events: Iterable[dict[str, Any]], experiment_dir: str, *, storage_fs: Any = None,
           trusted: bool = False, check_files: bool = True) -> ExperimentState:
    """The experiment that ``events`` (a journal's, :func:`tuneplat.read_journal`) describe.

    The one reader of the journal's meaning: restore, ``tuneplat status``/``best``, scikit-learn's
    search and the MLflow mirror use it. ``experiment_dir`` is where the trial folders are (a folder
    recorded elsewhere, before the experiment moved, is looked for there); ``storage_fs`` is the
    filesystem of checkpoints recorded as URLs (remote storage; default: fsspec's for the URL).
    Nothing is unpickled unless ``trusted`` (a restore of the user's own experiment): read-only views
    use the journal's JSON copy of each config. With ``check_files`` a checkpoint recorded but missing
    on disk is dropped (with a warning).
    """
    trials: dict[str, Trial] = {}
    meta: dict[str, Any] = {}
    state = ExperimentState(trials=[], meta=meta)
    history = state.history
    running: dict[str, float | None] = {}  # trial id -> start time of its attempt that runs
    paused_at: dict[str, int] = {}  # trial id -> the iteration where it sits paused

    def close_span(tid: str, when: float | None, how: str) -> None:
        if tid in running:
            start = running.pop(tid)
            if start is not None:
                history[tid].spans.append(Span(start, when if when is not None else start, how))

    for seq, ev in enumerate(events):
        kind = ev.get("event")
        tid = str(ev.get("trial_id") or "")
        t = trials.get(tid) if tid else None
        when = ev.get("time")
        when = float(when) if isinstance(when, (int, float)) and not isinstance(when, bool) else None
        if kind == "experiment":
            meta = {k: ev.get(k) for k in ("name", "metric", "mode", "num_samples", "scaling")}
            sched = ev.get("scheduler")
            state.scheduler = str(sched["scheduler"]) if isinstance(sched, dict) and sched.get("scheduler") else None
            if state.start_time is None:
                state.start_time = when
        elif kind == "experiment_end":
            state.status = ev.get("status")
            state.end_time = when
            for running_id in list(running):
                close_span(running_id, when, "interrupted")
        elif kind == "mlflow_parent_run":
            state.mlflow_parent_run_id = ev.get("run_id")
        elif kind == "trial_add":
            path = ev["path"]
            if not os.path.isdir(path):  # the folder moved: trial folders sit beside the journal
                path = os.path.join(experiment_dir, os.path.basename(path))
            trials[tid] = Trial(trial_id=tid, config=_config(ev, trusted=trusted), path=path, name=str(ev.get("name") or tid))
            history[tid] = TrialHistory(first_config=dict(ev.get("config") or {}))
        elif t is None:
            continue
        elif kind == "trial_start":
            t.attempts = max(t.attempts, int(ev.get("attempt", 0)) + 1)
            t.status = TrialStatus.RUNNING
            t.world_size = len(ev.get("workers") or ()) or t.world_size
            if not t.world_sizes and t.world_size:
                t.world_sizes.append((int(ev.get("start_iteration") or 0), t.world_size))
            if when is not None:
                running[tid] = when
            else:
                running.setdefault(tid, None)
            state.peak_running = max(state.peak_running, len(running))
            paused_at.pop(tid, None)
        elif kind == "resize":  # an elastic group started again at another size: what `tuneplat status` shows
            t.world_sizes.append((int(ev.get("iteration") or 0), int(ev.get("to_world_size") or 0)))
            meta.setdefault("resizes", {}).setdefault(tid, []).append(
                {k: ev.get(k) for k in ("iteration", "from_world_size", "to_world_size", "reason", "message")})
        elif kind == "result":
            t.results.append(ev["result"])
        elif kind == "superseded":
            t.supersede_after(int(ev["after_iteration"]))
            history[tid].superseded.append(ResultsSuperseded(
                seq=seq, time=when, iteration=int(ev["after_iteration"]), results=len(t.results)))
        elif kind == "checkpoint":
            path = ev["path"]
            if is_remote(path):
                ckpt = Checkpoint(path, storage_fs if storage_fs is not None else fs_for_url(path)[0])
            else:
                if not os.path.isdir(path):
                    path = os.path.join(t.path, os.path.basename(path))
                ckpt = Checkpoint(path)
            # a PBT clone replaces the trial's own checkpoint of the same iteration (same folder)
            t.checkpoints = [p for p in t.checkpoints if os.path.basename(p[0].path) != os.path.basename(path)]
            t.checkpoints.append((ckpt, ev.get("metrics") or {}))
        elif kind == "checkpoint_deleted":
            t.checkpoints = [p for p in t.checkpoints if os.path.basename(p[0].path) != os.path.basename(ev["path"])]
        elif kind == "decision":
            t.stop_reason = ev.get("reason") or t.stop_reason
            pruned = ev.get("pruned")
            history[tid].decisions.append(DecisionMade(
                seq=seq, time=when, iteration=int(ev.get("iteration") or _iteration(t)), results=len(t.results),
                decision=str(ev.get("decision")), reason=str(ev.get("reason") or ""),
                pruned=pruned if isinstance(pruned, bool) else None))
        elif kind == "trial_paused":
            t.status = TrialStatus.PAUSED
            paused_at[tid] = int(ev.get("iteration") or _iteration(t))
            close_span(tid, when, "paused")
        elif kind == "trial_failure":
            t.num_failures += 1
            close_span(tid, when, "failed")
            history[tid].failures.append(FailureSeen(
                seq=seq, time=when, iteration=_iteration(t), results=len(t.results),
                message=str(ev.get("message") or ""), retry=bool(ev.get("retry"))))
        elif kind == "trial_requeued":
            running.pop(tid, None)
        elif kind == "oom_retry":  # FailureConfig(oom_halve=...): the trial runs on with a smaller config
            t.config = _config(ev, "new_config", trusted)
            t.oom_retries += 1
            t.num_failures -= 1  # (its trial_failure line counted it; OOM retries have their own budget)
        elif kind == "exploit":
            history[tid].exploits.append(ExploitMade(
                seq=seq, time=when, iteration=int(ev.get("iteration") or _iteration(t)), results=len(t.results),
                from_trial=ev.get("from_trial"), from_iteration=ev.get("from_iteration"),
                old_config=dict(ev.get("old_config") or {}), new_config=dict(ev.get("new_config") or {})))
            t.config = _config(ev, "new_config", trusted)
            t.lineage.append({k: v for k, v in ev.items() if k not in ("event", "config_pickle")})
        elif kind == "mlflow_run":
            t.mlflow_run_id = ev.get("run_id")
        elif kind == "trial_end":
            t.status = TrialStatus(ev["status"])
            t.error = ev.get("error")
            t.error_traceback = ev.get("traceback")
            t.error_kind = ev.get("error_kind")
            t.stop_reason = ev.get("stop_reason")
            t.resumable = bool(ev.get("resumable"))
            history[tid].ends.append(TrialEnded(
                seq=seq, time=when, iteration=_iteration(t), results=len(t.results), status=t.status.value,
                stop_reason=t.stop_reason, paused_iteration=paused_at.pop(tid, None)))
            close_span(tid, when, t.status.value.lower())
    for running_id, start in running.items():  # still running (a live experiment, or the tuner died)
        if start is not None:
            history[running_id].spans.append(Span(start, None, "running"))
    for t in trials.values():
        if check_files:
            _drop_missing_checkpoints(t)
        _recover_result_of_last_checkpoint(t)
    state.trials, state.meta = list(trials.values()), meta
    return state




def _iteration(t: Trial) -> int:
    """The trial's ``training_iteration`` as of its last result (0 before any)."""
    return int(t.results[-1].get("training_iteration", 0) or 0) if t.results else 0


def load_state(experiment_dir: str, storage_fs: Any = None, trusted: bool = False, *,
               check_files: bool = True) -> ExperimentState:
    """:func:`replay` of the experiment's ``journal.jsonl``."""
    events = read_journal(os.path.join(experiment_dir, "journal.jsonl"))
    return replay(events, experiment_dir, storage_fs=storage_fs, trusted=trusted, check_files=check_files)


def load_trials(experiment_dir: str, storage_fs: Any = None, trusted: bool = False
                ) -> tuple[list[Trial], dict[str, Any]]:
    """The trials (status as last recorded) and experiment metadata of :func:`load_state`."""
    state = load_state(experiment_dir, storage_fs, trusted)
    return state.trials, state.meta


def _recover_result_of_last_checkpoint(trial: Trial) -> None:
    """The tuner commits a checkpoint (and journals it, with its metrics) just before the result of the same
    report; a crash between the two must not lose that result, since the trial resumes after that checkpoint."""
    if not trial.checkpoints:
        return
    metrics = trial.checkpoints[-1][1]
    it = metrics.get("training_iteration")
    if isinstance(it, int) and it > trial.iteration and metrics.get("trial_id", trial.trial_id) == trial.trial_id:
        trial.results.append(dict(metrics))
        trial.recovered_result = True


def _drop_missing_checkpoints(trial: Trial) -> None:
    kept = []
    for ckpt, metrics in trial.checkpoints:
        fs = ckpt.filesystem
        if (remote_is_committed(fs, ckpt.path) if fs is not None else os.path.isdir(ckpt.path)):
            kept.append((ckpt, metrics))
        else:
            logger.warning("tuneplat: trial %s: checkpoint %s is recorded in the journal but missing on disk; "
                           "falling back to the previous one", trial.trial_id, ckpt.path)
    trial.checkpoints = kept


def prepare_resume(experiment_dir: str, *, resume_errored: bool = False, restart_errored: bool = False,
                   storage_fs: Any = None) -> list[Trial]:
    """Trials ready for a resumed run: unfinished ones PENDING (they resume from their checkpoint)."""
    trials, _ = load_trials(experiment_dir, storage_fs, trusted=True)  # a restore: the user's own folder
    for t in trials:
        if t.status in (TrialStatus.RUNNING, TrialStatus.PAUSED, TrialStatus.PENDING) or t.resumable:
            t.status = TrialStatus.PENDING
            t.resumable = False
            t.stop_reason = None
        elif t.status == TrialStatus.ERROR and (resume_errored or restart_errored):
            t.status = TrialStatus.PENDING
            t.num_failures = 0
            t.error = t.error_traceback = None
            if restart_errored:
                t.checkpoints = []
    return trials

