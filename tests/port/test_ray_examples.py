"""Ray's published examples, ported by changing imports only, run as scripts (subprocesses), as a user would.

Each script is in tests/port/scripts/ (its header says which Ray example it is). They run on the embedded
cluster in a temporary working directory (results go to ./tuneplat_results, Ray's ~/ray_results).
"""

from __future__ import annotations

import csv
import glob
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


def run_example(name, cwd, *args, timeout=420):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, os.path.join(SCRIPTS, f"{name}.py"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(cwd))
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


def line(proc, key):
    found = [ln for ln in proc.stdout.splitlines() if ln.startswith(key + " ")]
    assert found, f"no {key} line in:\n{proc.stdout[-3000:]}"
    return found[-1][len(key) + 1:]


def test_async_hyperband_example_stops_bad_trials_early(tmp_path):
    proc = run_example("async_hyperband_example", tmp_path)
    iterations = json.loads(line(proc, "ITERATIONS"))
    assert len(iterations) == 12 and max(iterations) == 100  # max_t=100 reached by the best trials
    assert min(iterations) < 100  # ASHA stopped some at a rung (grace period 5)


def test_hyperband_example_pauses_and_resumes_a_class_trainable(tmp_path):
    proc = run_example("hyperband_example", tmp_path)
    assert re.search(r"ERRORS 0 MAXITER \d+", proc.stdout)
    assert int(line(proc, "ERRORS 0 MAXITER")) <= 27  # HyperBand's max_t
    exp = tmp_path / "tuneplat_results" / "hyperband_test"
    journal = (exp / "journal.jsonl").read_text()
    assert '"decision": "PAUSE"' in journal  # brackets paused trials and resumed them from their checkpoints


def test_pbt_function_example_exploits(tmp_path):
    proc = run_example("pbt_function", tmp_path, "--smoke-test")
    assert "ERRORS 0" in proc.stdout
    journal = (tmp_path / "tuneplat_results" / "pbt_function_api_example" / "journal.jsonl").read_text()
    assert '"event": "exploit"' in journal or '"exploit"' in journal


def test_optuna_example_at_top_level_with_define_by_run(tmp_path):
    proc = run_example("optuna_example", tmp_path)
    assert "ERRORS 0" in proc.stdout and "N 10" in proc.stdout
    assert "ACTIVATIONS" in proc.stdout


def test_custom_checkpointing_with_callback_saves_where_the_callback_says(tmp_path):
    proc = run_example("custom_checkpointing_with_callback", tmp_path)
    steps = [json.loads(v) for v in re.findall(r"^CHECKPOINT_STEPS (.*)$", proc.stdout, re.M)]
    assert steps == [[3, 6, 9, 10], [3, 6, 9, 10]]  # every third iteration and the last, as the callback asked


def test_logging_example_custom_logger_names_and_ray_files(tmp_path):
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


def test_tensorboard_files_hold_the_results(tmp_path):
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
    proc = run_example("tune_basic_example", tmp_path)
    assert "TRIALS 4" in proc.stdout
    assert proc.stdout.count("TOP LEVEL RAN") == 1
    assert "DeprecationWarning: tune.report(key=value, ...)" in proc.stderr
    assert "tune.report({'iterations': ..., 'mean_loss': ...})" in proc.stderr  # the new form, spelled out
    # once per worker process at most (two on this cluster), not once per report
    assert proc.stderr.count("DeprecationWarning: tune.report") <= os.cpu_count()


def test_train_tuner_guide_scaling_config_in_param_space(tmp_path):
    proc = run_example("train_tuner_guide", tmp_path)
    # ScalingConfig(num_workers=tune.grid_search([1, 2])) in param_space: each trial ran with its own group size
    assert "WORLDS [(1, 1), (1, 1), (2, 2), (2, 2)]" in proc.stdout
    assert "BEST_LR 0.1" in proc.stdout


def test_with_resources_by_config_script(tmp_path):
    proc = run_example("with_resources_by_config", tmp_path)
    if "GPU" in proc.stdout and "0 GPU(s)" not in proc.stdout:
        pytest.skip("this machine has a GPU: every trial runs")  # (the gpu-marked tests cover that case)
    # the use_gpu trials can never fit a machine without a GPU: ended at once, with the numbers
    assert "RAN [(False, True), (False, True), (True, False), (True, False)]" in proc.stdout, proc.stdout
    assert "GPU=1" in line(proc, "ERROR") and "0 GPU(s)" in line(proc, "ERROR")


def test_torch_linear_ddp_example(tmp_path):
    proc = run_example("torch_linear_example", tmp_path)
    loss, iteration = line(proc, "FINAL_LOSS").split(" ITER ")
    assert int(iteration) == 3 and float(loss) < 5.0


def test_mlflow_example_callback_and_setup(tmp_path):
    proc = run_example("mlflow_example", tmp_path)
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
