"""``tuneplat simulate`` on an experiment recorded on a real Dask cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import trainables as T

import tuneplat as tune
from tuneplat.schedulers import ASHAScheduler
from tuneplat.testing import simulate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ASHA = {"max_t": 8, "grace_period": 1, "reduction_factor": 2}


def test_replaying_asha_under_the_same_asha_reproduces_its_stop_decisions(dask_client, storage):
    tuner = tune.Tuner(T.quadratic, param_space={"x": tune.grid_search([0, 1, 2, 3, 4, 5, 6, 7]), "steps": 8},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1,
                                                   scheduler=ASHAScheduler(**ASHA)),
                       run_config=tune.RunConfig(name="asha", storage_path=storage, verbose=0, mlflow=False),
                       client=dask_client)
    grid = tuner.fit()
    report = simulate(grid.experiment_path, "asha", ASHA)
    assert report.recorded_stops and report.stops == report.recorded_stops
    assert report.simulated.iterations == report.recorded.iterations
    assert report.simulated.best_trial == report.recorded.best_trial
    # a harsher ASHA spends fewer iterations on the same curves, and says so
    harsh = simulate(grid.experiment_path, "asha", {**ASHA, "reduction_factor": 4})
    assert harsh.simulated.iterations < report.recorded.iterations

    out = subprocess.run([sys.executable, "-m", "tuneplat.cli", "simulate", grid.experiment_path, "--scheduler", "asha",
                          "--set", "max_t=8", "--set", "grace_period=1", "--set", "reduction_factor=2", "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["stops"] == report.recorded_stops and data["simulated"]["iterations"] == report.recorded.iterations
    table = subprocess.run([sys.executable, "-m", "tuneplat.cli", "simulate", grid.experiment_path, "--scheduler",
                            "hyperbnd"], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert table.returncode == 2 and "unknown scheduler 'hyperbnd' (did you mean 'hyperband'?)" in table.stderr
