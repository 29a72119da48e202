"""Ray's published examples, ported by changing imports only, run as a user would.

Each script is in tests/port/scripts/ (its header says which Ray example it is). They run in a temporary working
directory (results go to ./tuneplat_results, Ray's ~/ray_results). Where the subject is the API (schedulers,
searchers, callbacks, checkpoints, files), the default lane runs the script in-process on the virtual-time executor
(``time.sleep`` in virtual time, no MLflow mirror), and the slow lane runs the same script as a subprocess on the
embedded cluster, with the same assertions. Scripts whose subject is worker processes, torch.distributed groups,
placement or MLflow run only as subprocesses.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import re
import runpy
import subprocess
import sys
import time
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


def run_subprocess(name, cwd, *args, timeout=420):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, os.path.join(SCRIPTS, f"{name}.py"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(cwd))
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(params=["in_process", pytest.param("subprocess", marks=pytest.mark.slow)])
def run_example(request, monkeypatch, capsys):
    """``run_example(name, cwd, *args)``: the script's stdout/stderr, in-process (virtual time) or as a subprocess."""
    if request.param == "subprocess":
        return run_subprocess

    def in_process(name, cwd, *args):
        import tuneplat._tuner as tuner_module
        from tuneplat.testing import VirtualTimeExecutor, sleep

        monkeypatch.setattr(tuner_module, "DaskTrialExecutor", lambda *a, **k: VirtualTimeExecutor(num_slots=2))
        monkeypatch.setattr(tuner_module, "make_callbacks", lambda *a, **k: [])  # (the MLflow mirror: its own tests)
        monkeypatch.setattr(time, "sleep", sleep)  # the examples' time.sleep(...) per step, in virtual time
        monkeypatch.chdir(cwd)
        path = os.path.join(SCRIPTS, f"{name}.py")
        monkeypatch.setattr(sys, "argv", [path, *args])
        capsys.readouterr()
        runpy.run_path(path, run_name="__main__")
        out = capsys.readouterr()
        sys.stdout.write(out.out[-3000:])  # (shown if the test fails)
        return types.SimpleNamespace(stdout=out.out, stderr=out.err, returncode=0)

    return in_process


def line(proc, key):
    found = [ln for ln in proc.stdout.splitlines() if ln.startswith(key + " ")]
    assert found, f"no {key} line in:\n{proc.stdout[-3000:]}"
    return found[-1][len(key) + 1:]


def test_async_hyperband_example_stops_bad_trials_early(run_example, tmp_path):
    proc = run_example("async_hyperband_example", tmp_path)
    iterations = json.loads(line(proc, "ITERATIONS"))
    assert len(iterations) == 12 and max(iterations) == 100  # max_t=100 reached by the best trials
    assert min(iterations) < 100  # ASHA stopped some at a rung (grace period 5)


def test_hyperband_example_pauses_and_resumes_a_class_trainable(run_example, tmp_path):
    proc = run_example("hyperband_example", tmp_path)
    assert re.search(r"ERRORS 0 MAXITER \d+", proc.stdout)
    assert int(line(proc, "ERRORS 0 MAXITER")) <= 27  # HyperBand's max_t
    exp = tmp_path / "tuneplat_results" / "hyperband_test"
    journal = (exp / "journal.jsonl").read_text()
    assert '"decision": "PAUSE"' in journal  # brackets paused trials and resumed them from their checkpoints


def test_pbt_function_example_exploits(run_example, tmp_path):
    proc = run_example("pbt_function", tmp_path, "--smoke-test")
    assert "ERRORS 0" in proc.stdout
    journal = (tmp_path / "tuneplat_results" / "pbt_function_api_example" / "journal.jsonl").read_text()
    assert '"event": "exploit"' in journal or '"exploit"' in journal


def test_optuna_example_at_top_level_with_define_by_run(run_example, tmp_path):
    proc = run_example("optuna_example", tmp_path)
    assert "ERRORS 0" in proc.stdout and "N 10" in proc.stdout
    assert "ACTIVATIONS" in proc.stdout


def test_custom_checkpointing_with_callback_saves_where_the_callback_says(run_example, tmp_path):
    proc = run_example("custom_checkpointing_with_callback", tmp_path)
    steps = [json.loads(v) for v in re.findall(r"^CHECKPOINT_STEPS (.*)$", proc.stdout, re.M)]
    assert steps == [[3, 6, 9, 10], [3, 6, 9, 10]]  # every third iteration and the last, as the callback asked


def test_logging_example_custom_logger_names_and_ray_files(run_example, tmp_path):
    proc = run_example("logging_example", tmp_path)
    assert proc.stdout.count("TestLogger for trial easy_objective_") == 15  # 3 trials x 5 results
    paths = json.loads(line(proc, "PATHS").replace("'", '"'))
    assert all(p.startswith("easy_objective_") and p.endswith("_123") for p in paths)  # trial_dirname_creator
    for trial_dir in (tmp_path / "tuneplat_results" / "hyperband_test").glob("easy_objective_*_123"):
        with open(trial_dir / "progress.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert [int(r["training_iteration"]) for r in rows] == [1, 2, 3, 4, 5] and "mean_loss" in rows[0]
        assert len((trial_dir / "result.json").read_text().splitlines()) == 5
        assert glob.glob(str(trial_dir / "events.out.tfevents.*"))  # TensorBoard (tensorboardX is installed)


def test_tensorboard_files_hold_the_results(run_example, tmp_path):
    run_example("logging_example", tmp_path, "--smoke-test")
    from tensorboardX.proto import event_pb2
    from tensorboardX.record_writer import masked_crc32c  # an independent check of the TFRecord framing

    events = glob.glob(str(tmp_path / "tuneplat_results" / "hyperband_test" / "*" / "events.out.tfevents.*"))
    assert len(events) == 3
    tags = set()
    with open(events[0], "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):  # TFRecord framing: length (8), crc (4), payload, crc (4)
        n = int.from_bytes(data[pos:pos + 8], "little")
        assert int.from_bytes(data[pos + 8:pos + 12], "little") == masked_crc32c(data[pos:pos + 8])
        payload = data[pos + 12:pos + 12 + n]
        assert int.from_bytes(data[pos + 12 + n:pos + 16 + n], "little") == masked_crc32c(payload)
        ev = event_pb2.Event.FromString(payload)
        tags.update(v.tag for v in ev.summary.value)
        pos += 16 + n
    assert {"ray/tune/mean_loss", "ray/tune/training_iteration"} <= tags


def test_old_keyword_report_and_tune_run_at_top_level(tmp_path):
    proc = run_subprocess("tune_basic_example", tmp_path)
    assert "TRIALS 4" in proc.stdout
    assert proc.stdout.count("TOP LEVEL RAN") == 1
    assert "DeprecationWarning: tune.report(key=value, ...)" in proc.stderr
    assert "tune.report({'iterations': ..., 'mean_loss': ...})" in proc.stderr  # the new form, spelled out
    # once per worker process at most (two on this cluster), not once per report
    assert proc.stderr.count("DeprecationWarning: tune.report") <= os.cpu_count()


def test_train_tuner_guide_scaling_config_in_param_space(tmp_path):
    proc = run_subprocess("train_tuner_guide", tmp_path)
    # ScalingConfig(num_workers=tune.grid_search([1, 2])) in param_space: each trial ran with its own group size
    assert "WORLDS [(1, 1), (1, 1), (2, 2), (2, 2)]" in proc.stdout
    assert "BEST_LR 0.1" in proc.stdout


def test_with_resources_by_config_script(tmp_path):
    proc = run_subprocess("with_resources_by_config", tmp_path)
    if "GPU" in proc.stdout and "0 GPU(s)" not in proc.stdout:
        pytest.skip("this machine has a GPU: every trial runs")  # (the gpu-marked tests cover that case)
    # the use_gpu trials can never fit a machine without a GPU: ended at once, with the numbers
    assert "RAN [(False, True), (False, True), (True, False), (True, False)]" in proc.stdout, proc.stdout
    assert "GPU=1" in line(proc, "ERROR") and "0 GPU(s)" in line(proc, "ERROR")


@pytest.mark.slow  # long end-to-end (its subject runs in the default lane: train/, tracking/)
def test_torch_linear_ddp_example(tmp_path):
    proc = run_subprocess("torch_linear_example", tmp_path)
    loss, iteration = line(proc, "FINAL_LOSS").split(" ITER ")
    assert int(iteration) == 3 and float(loss) < 5.0


@pytest.mark.slow  # long end-to-end (its subject runs in the default lane: tests/train/test_data_files.py)
def test_torch_regression_example_tensor_column_split_and_whole_datasets(tmp_path):
    """Ray's torch_regression_example.py, data lines only changed: a CSV -> map_partitions building a column of
    100-float lists (Ray's tensor column, (B, 100) tensors in the ranks), split train, whole validation, 3 epochs."""
    proc = run_subprocess("torch_regression_example", tmp_path, "--smoke-test")
    loss, iteration = line(proc, "RESULT").split()
    assert int(iteration) == 3 and 0 <= float(loss) < 10  # (rank 0's validation L1 loss after 3 epochs)


@pytest.mark.slow  # long end-to-end (its subject runs in the default lane: train/, tracking/)
def test_mlflow_example_callback_and_setup(tmp_path):
    proc = run_subprocess("mlflow_example", tmp_path)
    callback_runs = line(proc, "RUNS mlflow_callback_example")
    # the mirror, aimed by MLflowLoggerCallback: one parent run and one run per trial, nothing twice
    assert callback_runs.count("FINISHED") == 3 and callback_runs.count("'train'") == 2
    setup_runs = line(proc, "RUNS setup_mlflow_example")
    # setup_mlflow with the user's own experiment: a run per trial there, holding what the trial logged
    assert setup_runs.count("True") == 2 and setup_runs.count("FINISHED") == 2
    assert not os.path.exists(tmp_path / "mlruns")


@pytest.mark.parametrize("name", ["torch_quickstart"])
def test_scripts_exist_for_the_main_guard_tests(name):
    assert os.path.isfile(os.path.join(SCRIPTS, f"{name}.py"))


@pytest.mark.slow  # long end-to-end (its subjects run in the default lane: tests/train/test_rank_process.py)
def test_lightning_mlflow_logger_example_logs_once_from_a_script(tmp_path):
    """Ray's "Lightning with MLflow logger": a module-level `import pytorch_lightning`, Lightning's own MLFlowLogger
    in a 2-rank TorchTrainer (one run, Ray: 1), a relative CSVLogger in the run folder, and a DataLoader with 2
    workers over a Dataset class defined in the script."""
    proc = run_subprocess("lightning_mlflow_logger", tmp_path)
    assert line(proc, "RUNS") == "['demo-run']"
    assert line(proc, "CSV_LOGS") == "True False"
