"""Looking at an experiment folder never runs code from it: read-only commands unpickle nothing."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import tuneplat
from tuneplat import RunConfig, TuneConfig, Tuner


def tuple_config(config):
    tuneplat.report({"loss": float(sum(config["pair"]))})


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_status_and_best_do_not_unpickle_a_crafted_journal(tmp_path):
    grid = Tuner(tuple_config, param_space={"pair": (1, 2)}, tune_config=TuneConfig(metric="loss", mode="min"),
                 run_config=RunConfig(storage_path=str(tmp_path), name="exp", mlflow=False, verbose=0)).fit()
    assert grid[0].config["pair"] == (1, 2)  # a tuple survives in the journal's pickled copy (the user's own run)
    folder = tmp_path / "exp"
    journal = folder / "journal.jsonl"
    marker = str(tmp_path / "code-ran")
    lines = []
    crafted = 0
    for line in journal.read_text().splitlines():
        event = json.loads(line)
        if event.get("config_pickle"):
            event["config_pickle"] = pickle.dumps(_Evil(marker)).hex()
            crafted += 1
        lines.append(json.dumps(event))
    assert crafted == 1
    journal.write_text("\n".join(lines) + "\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.path.dirname(__file__)]))
    for cmd in (["status", str(folder), "--json"], ["best", str(folder)]):
        out = subprocess.run([sys.executable, "-m", "tuneplat.cli", *cmd], capture_output=True, text=True, env=env,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        assert not os.path.exists(marker), f"tuneplat {cmd[0]} unpickled the journal"
    status = json.loads(subprocess.run([sys.executable, "-m", "tuneplat.cli", "status", str(folder), "--json"],
                                       capture_output=True, text=True, env=env, timeout=120).stdout)
    assert status["trials"][0]["config"] == {"pair": [1, 2]}  # the journal's JSON copy


def test_json_configs_are_not_pickled_into_the_journal(tmp_path):
    Tuner(tuple_config, param_space={"pair": [1, 2]}, tune_config=TuneConfig(metric="loss", mode="min"),
          run_config=RunConfig(storage_path=str(tmp_path), name="exp", mlflow=False, verbose=0)).fit()
    events = [json.loads(x) for x in (tmp_path / "exp" / "journal.jsonl").read_text().splitlines()]
    adds = [e for e in events if e.get("event") == "trial_add"]
    assert len(adds) == 1 and adds[0]["config"] == {"pair": [1, 2]} and not adds[0].get("config_pickle")
