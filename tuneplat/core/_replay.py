"""Rebuilding an experiment from its folder: the journal is the source of truth."""

from __future__ import annotations

import logging
import os
import pickletools
from collections.abc import Iterable
from typing import Any

import cloudpickle

from .._signing import SignatureError, check_file, sign_file
from ..storage._storage import remote_is_committed
from ._events import from_json
from ._journal import JournalError, read_journal
from ._state import (
    DecisionMade,
    ExperimentState,
    ExploitMade,
    FailureSeen,
    Moment,
    ResultsSuperseded,
    Span,
    TrialEnded,
    TrialHistory,
    apply,
    reopen_trials,
)
from ._trial import Trial, state_writer

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


def replay(events: Iterable[dict[str, Any]], experiment_dir: str, *, storage_fs: Any = None,
           trusted: bool = False, check_files: bool = True) -> ExperimentState:
    """The experiment that ``events`` (a journal's, :func:`tuneplat.read_journal`) describe.

    The one reader of the journal's meaning: restore, ``tuneplat status``/``best``, scikit-learn's
    search and the MLflow mirror use it. Each line is read as its typed event (:func:`~tuneplat.core._events.from_json`)
    and applied with :func:`~tuneplat.core._state.apply`, the function the live loop applies its events
    with. ``experiment_dir`` is where the trial folders are (a folder recorded elsewhere, before the
    experiment moved, is looked for there); ``storage_fs`` is the filesystem of checkpoints recorded as
    URLs (remote storage; default: fsspec's for the URL). Nothing is unpickled unless ``trusted`` (a
    restore of the user's own experiment): read-only views use the journal's JSON copy of each config.
    With ``check_files`` a checkpoint recorded but missing on disk is dropped (with a warning).
    """
    state = ExperimentState(trials=[], experiment_dir=experiment_dir, storage_fs=storage_fs, trusted=trusted)
    for line in events:
        apply(state, from_json(line))
    for running_id, start in state.running_since.items():  # still running (a live experiment, or the tuner died)
        if start is not None:
            state.history[running_id].spans.append(Span(start, None, "running"))
    with state_writer():  # (what the files say: not events)
        for t in state.trials:
            if check_files:
                _drop_missing_checkpoints(t)
            _recover_result_of_last_checkpoint(t)
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
    state = load_state(experiment_dir, storage_fs, trusted=True)  # a restore: the user's own folder
    # (what the resumed run's "experiment" event does to the state when it is applied: the same function)
    reopen_trials(state, resume_errored=resume_errored, restart_errored=restart_errored)
    return state.trials

