"""A Ray script that fits its Tuner at the top level (no main guard) gets one clear error, not Dask's tracebacks."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap

import pytest

import tuneplat as tune
from tuneplat._mainguard import check_main_guard
from tuneplat.train import RunConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
import tuneplat as tune

def objective(config):
    return {{"score": config["a"] ** 2}}

{guard}tuner = tune.Tuner(objective, param_space={{"a": tune.grid_search([1, 2])}},
{indent}                   run_config=tune.RunConfig(storage_path={storage!r}, verbose=0, mlflow=False))
{indent}print("BEST", tuner.fit().get_best_result(metric="score", mode="min").config)
"""


def _run_script(tmp_path, storage, guarded):
    src = SCRIPT.format(guard='if __name__ == "__main__":\n    ' if guarded else "", indent="    " if guarded else "",
                        storage=storage)
    path = tmp_path / ("guarded.py" if guarded else "flat.py")
    path.write_text(textwrap.dedent(src))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=240, env=env,
                          cwd=str(tmp_path))


def test_unguarded_script_fails_at_once_with_the_fix_in_the_message(tmp_path, storage):
    proc = _run_script(tmp_path, storage, guarded=False)
    assert proc.returncode != 0
    assert 'outside an `if __name__ == "__main__":` block' in proc.stderr and "flat.py (line 9)" in proc.stderr  # the line of fit()
    assert "Nanny failed" not in proc.stderr  # no worker process was started
    assert not os.path.exists(os.path.join(storage, "mlflow.db"))


def test_guarded_script_runs_on_the_embedded_cluster(tmp_path, storage):
    proc = _run_script(tmp_path, storage, guarded=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "BEST {'a': 1}" in proc.stdout


def test_a_given_cluster_or_a_worker_being_started(dask_client, storage, monkeypatch):
    check_main_guard(dask_client, None)  # a client of ours: nothing is spawned, nothing to check
    check_main_guard(None, "tcp://127.0.0.1:8786")
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(RuntimeError, match="while a worker process was starting"):
        tune.Tuner(lambda config: None, run_config=RunConfig(storage_path=storage, verbose=0, mlflow=False),
                   client=dask_client).fit()
