"""The example sweeps in examples/ run through the console script (small --set overrides for speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tuneplat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuneplat.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def run_example(tmp_path, name: str, *sets: str) -> str:
    args = ["run", f"examples/{name}", "--storage-path", str(tmp_path), "--name", "exp", "--quiet", "--set", "mlflow=false"]
    for s in sets:
        args += ["--set", s]
    proc = tuneplat(*args)
    assert proc.returncode == 0, proc.stderr
    return str(tmp_path / "exp")


def status(exp: str) -> dict:
    proc = tuneplat("status", exp, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_pbt_toy_example(tmp_path):
    # synchronous PBT: the population waits at each perturbation point, so exploits do not depend on whether two
    # millisecond-long trials happened to overlap on the 2 slots (with async PBT a trial that ran alone is never
    # compared with anyone)
    exp = run_example(tmp_path, "pbt_toy.yaml", "param_space.steps=12", "scheduler.synch=true")
    st = status(exp)
    assert st["counts"] == {"TERMINATED": 4}
    assert all(t["last_result"]["step"] == 12 for t in st["trials"])
    exploited = [t for t in st["trials"] if t["lineage"]]
    assert exploited, "PBT should have exploited at least one trial"
    for t in exploited:  # an exploited trial continued from its donor's checkpoint with a perturbed lr
        if t["lineage"][-1]["iteration"] < 12:  # (cloned at its very last step, it had nothing left to run)
            assert t["config"]["lr"] == t["last_result"]["lr"]
    assert any(t["lineage"][-1]["iteration"] < 12 for t in exploited)
    best = json.loads(tuneplat("best", exp, "--json").stdout)
    assert best["value"] == max(t["last_result"]["score"] for t in st["trials"])
    assert os.path.isdir(best["checkpoint"])


@pytest.mark.slow
def test_multi_objective_example_prints_the_pareto_front(tmp_path):
    exp = run_example(tmp_path, "multi_objective.yaml", "num_samples=6")
    st = status(exp)
    assert st["counts"] == {"TERMINATED": 6} and st["metric"] == ["error", "cost"]
    front = json.loads(tuneplat("best", exp, "--json").stdout)["pareto_front"]
    points = {t["trial_id"]: (t["last_result"]["error"], t["last_result"]["cost"]) for t in st["trials"]}
    on_front = {t["trial_id"] for t in front}
    assert on_front

    def dominates(a, b):
        return all(x <= y for x, y in zip(a, b)) and a != b

    for tid, p in points.items():
        dominated = any(dominates(q, p) for q in points.values())
        assert (tid in on_front) == (not dominated)
    text = tuneplat("best", exp)
    assert text.stdout.startswith(f"Pareto front of error (min), cost (min): {len(front)} trial(s)")


@pytest.mark.slow
def test_wandb_sweep_example_runs_unchanged(tmp_path):
    exp = run_example(tmp_path, "wandb_sweep.yaml", "run_cap=3", "parameters.epochs.value=3")
    st = status(exp)
    assert st["counts"] == {"TERMINATED": 3} and (st["metric"], st["mode"]) == ("loss", "min")
    assert all(t["config"]["width"] in (16, 64, 256) and 1e-4 <= t["config"]["lr"] <= 0.1 for t in st["trials"])


@pytest.mark.slow
def test_toml_example(tmp_path):
    exp = run_example(tmp_path, "toy_asha.toml", "num_samples=3", "param_space.epochs=3")
    st = status(exp)
    assert st["num_trials"] == 3 and st["counts"] == {"TERMINATED": 3}
    saved = open(os.path.join(exp, "sweep.yaml"), encoding="utf-8").read()
    assert "algorithm: tpe" in saved and "num_samples: 3" in saved


@pytest.mark.slow
def test_digits_asha_example(tmp_path):
    exp = run_example(tmp_path, "digits_asha.yaml", "num_samples=3", "param_space.epochs=2", "scheduler.max_t=2",
                      "run.stop.training_iteration=2")
    st = status(exp)
    assert st["counts"] == {"TERMINATED": 3}
    best = json.loads(tuneplat("best", exp, "--json").stdout)
    assert best["metric"] == "val_loss" and best["value"] == min(t["last_result"]["val_loss"] for t in st["trials"])
    assert os.path.isfile(os.path.join(best["checkpoint"], "model.pt"))
