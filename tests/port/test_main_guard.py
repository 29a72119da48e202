"""Scripts that fit at their top level, with no main guard (as Ray's snippets do), run on the embedded cluster."""

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
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")

SCRIPT = """
import os
import tuneplat as tune

print("TOP LEVEL RAN IN", os.getpid(), flush=True)

class Scale:  # a class of __main__ inside the config: it reaches the workers by value
    def __init__(self, k):
        self.k = k

def objective(config):
    return {{"score": config["a"] ** 2 * config["s"].k}}

{guard}tuner = tune.Tuner(objective, param_space={{"a": tune.grid_search([1, 2, 3, 4]), "s": Scale(3)}},
{indent}                   run_config=tune.RunConfig(storage_path={storage!r}, verbose=0, mlflow=False))
{indent}grid = tuner.fit()
{indent}print("SCORES", sorted(r.metrics["score"] for r in grid))
"""


def run_script(path, cwd, timeout=300):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=str(cwd))


def _write(tmp_path, storage, guarded):
    src = SCRIPT.format(guard='if __name__ == "__main__":\n    ' if guarded else "", indent="    " if guarded else "",
                        storage=storage)
    path = tmp_path / ("guarded.py" if guarded else "flat.py")
    path.write_text(textwrap.dedent(src))
    return path


@pytest.mark.parametrize("guarded", [False, True])
def test_a_script_fits_with_or_without_a_main_guard(tmp_path, storage, guarded):
    proc = run_script(_write(tmp_path, storage, guarded), tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SCORES [3, 12, 27, 48]" in proc.stdout
    # the workers never ran the script: its top level ran once, in the driver
    assert proc.stdout.count("TOP LEVEL RAN IN") == 1, proc.stdout


@pytest.mark.slow
def test_torch_trainer_quickstart_at_top_level(tmp_path):
    """Ray Train's quickstart, imports changed only: TorchTrainer.fit() at the top level, 2 DDP ranks."""
    proc = run_script(os.path.join(SCRIPTS, "torch_quickstart.py"), tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("SCRIPT TOP LEVEL RAN") == 1
    assert "RESULT 2 ['1.bias', '1.weight', '3.bias', '3.weight']" in proc.stdout
    assert os.path.isdir(tmp_path / "tuneplat_results")  # Ray's default storage is ~/ray_results; ours is ./


def test_fit_inside_a_process_the_script_spawned_is_refused_naming_the_call(dask_client, storage, monkeypatch):
    check_main_guard(dask_client, None)  # the driver itself: nothing to refuse
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(RuntimeError, match=r"Tuner\.fit\(\) ran while a process spawned by the script"):
        tune.Tuner(lambda config: None, run_config=RunConfig(storage_path=storage, verbose=0, mlflow=False),
                   client=dask_client).fit()
    trainer = tune.TorchTrainer(lambda: None, run_config=RunConfig(storage_path=storage, verbose=0, mlflow=False),
                                client=dask_client)
    with pytest.raises(RuntimeError, match=r"TorchTrainer\.fit\(\) ran while"):
        trainer.fit()
