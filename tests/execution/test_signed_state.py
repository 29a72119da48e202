"""Restore refuses tampered state (issue 33): ``tuner.pkl``, ``trainer.pkl`` and the journal's pickled configs carry
an HMAC with the user's key, checked before anything is unpickled; a planted pickle never runs, and restore goes on
with the settings passed again."""

from __future__ import annotations

import json
import logging
import os
import pickle
import stat

import pytest

import tuneplat as tune
from tuneplat import RunConfig, TuneConfig, Tuner
from tuneplat.testing import VirtualTimeExecutor


def tuple_config(config):
    tune.report({"loss": float(sum(config["pair"]))})


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _fit(storage: str, space=None):
    return Tuner(tuple_config, param_space=space or {"pair": (1, 2)}, tune_config=TuneConfig(metric="loss", mode="min"),
                 run_config=RunConfig(storage_path=storage, name="exp", mlflow=False, verbose=0),
                 executor=VirtualTimeExecutor()).fit()


def test_the_key_is_the_users_own_and_private(tmp_path, monkeypatch):
    from tuneplat import _signing

    monkeypatch.setenv("TUNEPLAT_KEY_DIR", str(tmp_path / "keys"))
    signed = _signing.sign_file(b"data")
    key = _signing.key_path()
    assert os.path.dirname(key) == str(tmp_path / "keys")
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600 and stat.S_IMODE(os.stat(tmp_path / "keys").st_mode) == 0o700
    assert _signing.check_file("f", signed) == b"data"
    with pytest.raises(_signing.SignatureError, match="f is refused: its signature does not match"):
        _signing.check_file("f", signed[:-1] + b"x")


@pytest.mark.parametrize("forged_header", [False, True])
def test_a_planted_tuner_pkl_is_refused_before_unpickling_and_restore_goes_on_without_it(tmp_path, forged_header):
    from tuneplat import _signing

    grid = _fit(str(tmp_path))
    marker = tmp_path / "code-ran"
    planted = pickle.dumps(_Evil(str(marker)))
    if forged_header:  # the right shape, a guessed signature
        planted = _signing.MAGIC + b"0" * 64 + b"\n" + planted
    pkl = os.path.join(grid.experiment_path, "tuner.pkl")
    with open(pkl, "wb") as f:
        f.write(planted)
    assert not Tuner.can_restore(grid.experiment_path)
    with pytest.raises(RuntimeError, match=r"tuner.pkl is refused: .*not unpickled.*pass param_space=, tune_config= "
                                           r"and run_config= to Tuner.restore"):
        Tuner.restore(grid.experiment_path, tuple_config)
    assert not marker.exists()  # (before: restore ran the planted pickle)
    restored = Tuner.restore(grid.experiment_path, tuple_config, param_space={"pair": (1, 2)},
                             tune_config=TuneConfig(metric="loss", mode="min"),
                             run_config=RunConfig(storage_path=str(tmp_path), name="exp", mlflow=False, verbose=0),
                             executor=VirtualTimeExecutor(), resume_errored=True)
    assert restored.fit()[0].config["pair"] == (1, 2)
    assert not marker.exists()


def test_a_planted_config_pickle_in_the_journal_never_runs(tmp_path, caplog):
    grid = _fit(str(tmp_path), {"pair": tune.grid_search([(1, 2), (3, 4)])})
    folder = tmp_path / "exp"
    journal = folder / "journal.jsonl"
    marker = tmp_path / "code-ran"
    evil = pickle.dumps(_Evil(str(marker)))
    lines, planted = [], 0
    for line in journal.read_text().splitlines():
        event = json.loads(line)
        if event.get("config_pickle"):
            assert event["config_pickle"].startswith("h1:")  # the user's own run: signed
            # one as older tuneplat wrote them (bare hex), one with a signature that does not match
            event["config_pickle"] = evil.hex() if planted == 0 else "h1:" + "ab" * 32 + ":" + evil.hex()
            planted += 1
        elif event.get("event") == "trial_end":
            event["status"] = "ERROR"  # so that restore starts them again (and so reads their configs)
        lines.append(json.dumps(event))
    assert planted == 2
    journal.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="tuneplat"):
        restored = Tuner.restore(str(folder), tuple_config, restart_errored=True,
                                 executor=VirtualTimeExecutor()).fit()
    assert not marker.exists()  # (before: restore unpickled the journal's config_pickle)
    assert sorted(r.config["pair"] for r in restored) == [[1, 2], [3, 4]]  # the journal's JSON copies
    assert "not signed with your key" in caplog.text
    assert len(grid) == 2


def test_a_planted_trainer_pkl_is_refused_and_the_message_says_how_to_go_on(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    marker = tmp_path / "code-ran"
    (folder / "trainer.pkl").write_bytes(pickle.dumps(_Evil(str(marker))))
    with pytest.raises(ValueError, match=r"trainer.pkl is refused: .*train_loop_per_worker=\.\.\."):
        tune.TorchTrainer.restore(str(folder))
    assert not marker.exists()  # (before: restore unpickled it first)


def test_the_cli_names_a_refused_tuner_pkl_and_status_still_reads_the_journal(tmp_path, capsys):
    from tuneplat.cli import main

    grid = _fit(str(tmp_path))
    marker = tmp_path / "code-ran"
    with open(os.path.join(grid.experiment_path, "tuner.pkl"), "wb") as f:
        f.write(pickle.dumps(_Evil(str(marker))))
    assert main(["status", grid.experiment_path]) == 0  # looking needs no tuner.pkl (before: "not an experiment")
    assert "TERMINATED" in capsys.readouterr().out
    assert main(["resume", grid.experiment_path, "--trainable", f"{__name__}:tuple_config"]) != 0
    err = capsys.readouterr().err
    assert "tuner.pkl is refused" in err and "not unpickled" in err, err  # (before: "not a tuneplat experiment")
    assert not marker.exists()
