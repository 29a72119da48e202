"""A damaged OptunaSearch state file is an error naming the file (issue 33), never a bare KeyError/JSONDecodeError."""

from __future__ import annotations

import json
import re

import optuna
import pytest

from tuneplat.search.optuna import JOURNAL_FILE, STUDY_NAME, OptunaSearch


def test_a_damaged_save_file_names_its_path(tmp_path):
    path = tmp_path / "optuna-state.json"
    path.write_text(json.dumps({"format": "tuneplat-optuna-search/1", "metric": "loss", "mode": "min",
                                "trials": [{"state": "PWNED", "values": [1.0], "params": {}, "distributions": {}}]}))
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*damaged.*PWNED"):  # before: KeyError: 'PWNED'
        OptunaSearch(metric="loss", mode="min").restore(str(path))


def test_a_damaged_optuna_journal_names_its_path(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    journal = tmp_path / JOURNAL_FILE
    study = optuna.create_study(study_name=STUDY_NAME, storage=JournalStorage(JournalFileBackend(str(journal))))
    study.optimize(lambda t: t.suggest_float("a", 0, 1), n_trials=3)
    lines = journal.read_text().splitlines()
    lines[2] = '{"op_code": 5, "worker_id": "x", "PWNED'  # a line cut and edited (not the last one)
    journal.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=re.escape(str(journal)) + ".*damaged.*JSONDecodeError"):
        OptunaSearch(metric="a", mode="min").restore_from_dir(str(tmp_path))
