"""Where the Optuna searcher's study is kept, and the files it reads and writes.

The study lives in Optuna's own journal (``JournalStorage``) inside the
experiment folder, so ``Tuner.restore`` continues it; ``OptunaSearch.save()``
writes the finished trials as JSON (a file a user hands back is never
unpickled). A damaged file is named in a plain ``ValueError``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

import optuna
from optuna.trial import TrialState

__all__ = [
    "JOURNAL_FILE",
    "STUDY_NAME",
    "TRIAL_ID_ATTR",
    "journal_storage",
    "journal_trials",
    "read_saved",
    "saved_trials",
    "write_saved",
]

#: File name of the Optuna journal inside the experiment folder.
JOURNAL_FILE = "optuna_journal.log"
#: Name of the study in the journal.
STUDY_NAME = "tuneplat"
#: what OptunaSearch.save() writes (JSON: a file a user hands back is never unpickled)
_SAVE_FORMAT = "tuneplat-optuna-search/1"
#: User attribute of each Optuna trial holding the tuneplat trial id.
TRIAL_ID_ATTR = "tuneplat_trial_id"

_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


@contextlib.contextmanager
def _names_damaged(path: str, what: str) -> Iterator[None]:
    """Errors reading ``path`` (damaged, truncated, edited) become a ValueError naming the file and what it is."""
    try:
        yield
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, AssertionError) as exc:
        if isinstance(exc, OSError) and not isinstance(exc, (UnicodeError,)) and exc.filename:
            raise  # (an OSError already names its file)
        raise ValueError(f"{path}: cannot read {what}: it is damaged ({type(exc).__name__}: {exc}). Restore it "
                         "from a backup, or move it aside (the search then starts without that state)") from exc


def journal_storage(experiment_dir: str | os.PathLike[str]) -> tuple[Any, str]:
    """The Optuna ``JournalStorage`` of ``experiment_dir`` (created) and its journal file's path."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    os.makedirs(experiment_dir, exist_ok=True)
    journal = os.path.join(os.fspath(experiment_dir), JOURNAL_FILE)
    with _names_damaged(journal, "Optuna's journal of this experiment's study"):
        return JournalStorage(JournalFileBackend(journal)), journal


def write_saved(study: optuna.Study, metric: Any, mode: Any, checkpoint_path: str) -> None:
    """Write ``study``'s finished trials, with the objective, to ``checkpoint_path`` (JSON, atomically)."""
    from optuna.distributions import distribution_to_json

    trials = []
    for t in study.get_trials(deepcopy=False, states=_FINISHED):
        trials.append({"state": t.state.name, "values": t.values, "params": t.params,
                       "distributions": {k: distribution_to_json(d) for k, d in t.distributions.items()},
                       "intermediate_values": {str(k): v for k, v in t.intermediate_values.items()},
                       "user_attrs": {k: v for k, v in t.user_attrs.items() if k != TRIAL_ID_ATTR}})
    state = {"format": _SAVE_FORMAT, "metric": metric, "mode": mode, "trials": trials}
    path = os.fspath(checkpoint_path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)


def read_saved(path: str) -> dict[str, Any]:
    """What :func:`write_saved` wrote to ``path``; a ValueError for any other file (a pickle included)."""
    try:
        with open(path) as f:
            state = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not a file written by OptunaSearch.save() (not JSON: {exc}); Ray's "
                         "pickled searcher-state files cannot be read here: run the search again, or "
                         "restore_from_dir() a tuneplat experiment folder") from None
    if not isinstance(state, dict) or state.get("format") != _SAVE_FORMAT:
        raise ValueError(f"{path} is not a file written by OptunaSearch.save() (format {_SAVE_FORMAT!r})")
    return state


def saved_trials(path: str, state: dict[str, Any]) -> list[optuna.trial.FrozenTrial]:
    """The trials of a :func:`read_saved` state, ready for ``study.add_trial``."""
    from optuna.distributions import json_to_distribution

    frozen = []
    with _names_damaged(path, "a file written by OptunaSearch.save()"):
        for t in state.get("trials", []):
            frozen.append(optuna.trial.create_trial(
                state=TrialState[t["state"]], values=t.get("values"), params=t["params"],
                distributions={k: json_to_distribution(d) for k, d in t["distributions"].items()},
                intermediate_values={int(k): v for k, v in (t.get("intermediate_values") or {}).items()},
                user_attrs=t.get("user_attrs") or {}))
    return frozen


def journal_trials(folder: str) -> list[optuna.trial.FrozenTrial]:
    """The finished trials of the study in experiment folder ``folder``'s journal, without their tuneplat ids.

    Raises:
        FileNotFoundError: ``folder`` has no Optuna journal.
        ValueError: the journal is damaged.
    """
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    journal = os.path.join(folder, JOURNAL_FILE)
    if not os.path.isfile(journal):
        raise FileNotFoundError(f"{folder} has no {JOURNAL_FILE}: give the folder of an experiment that ran "
                                "OptunaSearch (storage_path/name), or a file written by OptunaSearch.save() "
                                "to restore()")
    with _names_damaged(journal, "Optuna's journal of that experiment's study"):
        old = optuna.load_study(study_name=STUDY_NAME, storage=JournalStorage(JournalFileBackend(journal)))
        done = old.get_trials(deepcopy=True, states=_FINISHED)
    trials = []
    for t in done:
        attrs = {k: v for k, v in t.user_attrs.items() if k != TRIAL_ID_ATTR}
        trials.append(optuna.trial.create_trial(
            state=t.state, values=t.values, params=t.params, distributions=t.distributions,
            intermediate_values=t.intermediate_values, user_attrs=attrs))
    return trials
