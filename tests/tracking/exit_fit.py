"""One small sweep with the embedded MLflow store, then a normal interpreter exit (run by test_mlflow.py).

Prints the pids of the MLflow uploader processes this process started, so the test can check
that none outlives the interpreter.
"""

from __future__ import annotations

import sys

import mlflow_trainables as T
import psutil

import tuneplat as tune

if __name__ == "__main__":
    tune.Tuner(T.curve, param_space={"x": 1.0}, tune_config=tune.TuneConfig(metric="loss", mode="min"),
               run_config=tune.RunConfig(name="exits", storage_path=sys.argv[1], verbose=0)).fit()
    me = psutil.Process()

    def cmdline(p: psutil.Process) -> str:
        try:
            return " ".join(p.cmdline())
        except psutil.Error:  # a child that already ended (a zombie until it is reaped) is not an uploader
            return ""

    print(" ".join(str(p.pid) for p in me.children() if "_child_main" in cmdline(p)), flush=True)
