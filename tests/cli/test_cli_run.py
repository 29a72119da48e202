"""The ``tuneplat`` console script, driven as a subprocess: run, --set, --dry-run, resume, status, best.

Every sweep here starts its own embedded LocalCluster (one worker per core),
so they are few and short. The commands that only read an experiment folder
(``status``, ``best``) after a sweep run through ``tuneplat.cli.main`` in this
process (:func:`read_cmd`): the same code and output, without a new interpreter each.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tuneplat.execution._cluster import scheduler_workers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
TRAINABLES = os.path.join(HERE, "cli_trainables.py")


def tuneplat(*args: str, cwd: str = ROOT, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tuneplat.cli", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def read_cmd(*args: str, cwd: str = ROOT) -> subprocess.CompletedProcess:
    """``tuneplat <args>`` for a command that only reads (status, best), through ``tuneplat.cli.main`` in-process."""
    import contextlib
    import io

    from tuneplat.cli import main

    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's own errors
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("tuneplat: error:")]
    assert len(lines) == 1, proc.stderr
    return lines[0][len("tuneplat: error: "):]


def test_console_script_is_installed_and_helps():
    script = shutil.which("tuneplat")
    cmd = [script] if script else [sys.executable, "-m", "tuneplat.cli"]
    out = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for word in ("run", "resume", "status", "best", "examples:", "--set"):
        assert word in out.stdout
    run_help = subprocess.run([*cmd, "run", "--help"], capture_output=True, text=True, timeout=60)
    assert run_help.returncode == 0
    for word in ("--dry-run", "--address", "--storage-path", "--name", "${env:VAR}", "examples:"):
        assert word in run_help.stdout


def test_dry_run_validates_prints_configs_and_runs_nothing(tmp_path):
    proc = tuneplat("run", "examples/toy_asha.yaml", "--dry-run", "--show", "3", "--set", "num_samples=2",
                    "--set", "scheduler.max_t=5", "--storage-path", str(tmp_path / "res"))
    assert proc.returncode == 0, proc.stderr
    assert "nothing was started" in proc.stdout
    assert "max_t=5" in proc.stdout
    configs = [json.loads(line.split(None, 1)[1]) for line in proc.stdout.splitlines()
               if line.strip()[:1].isdigit() and "{" in line]
    assert len(configs) == 2  # num_samples=2 caps the random search
    for c in configs:
        assert 1e-4 <= c["lr"] < 1e-1 and c["width"] in (16, 64, 256) and c["epochs"] == 9
    assert not (tmp_path / "res").exists()


def test_full_sweep_with_overrides_then_status_and_best(tmp_path):
    storage = tmp_path / "res"
    proc = tuneplat("run", "examples/toy_asha.yaml", "--set", "num_samples=4", "--set", "scheduler.max_t=3",
                    "--set", "run.stop.training_iteration=3", "--set", "param_space.epochs=3",
                    "--storage-path", str(storage), "--name", "quick")
    assert proc.returncode == 0, proc.stderr
    exp = storage / "quick"
    # off a terminal, plain progress lines (the same display as Tuner.fit()), then the summary and where to look
    assert "4/4 trials done" in proc.stdout and "best loss=" in proc.stdout
    assert "tuneplat: finished after " in proc.stdout and ": 4 trials (4 TERMINATED)" in proc.stdout
    assert f"tuneplat status {exp}" in proc.stdout and "mlflow ui --backend-store-uri sqlite:///" in proc.stdout
    assert "distributed.core" not in proc.stderr + proc.stdout
    saved = (exp / "sweep.yaml").read_text()
    assert "num_samples: 4" in saved and "max_t: 3" in saved  # the effective sweep, overrides applied

    st = read_cmd("status", str(exp), "--json")
    assert st.returncode == 0, st.stderr
    info = json.loads(st.stdout)
    assert info["name"] == "quick" and info["status"] == "finished" and info["num_trials"] == 4
    assert info["counts"] == {"TERMINATED": 4}
    assert all(t["iteration"] <= 3 for t in info["trials"])
    assert max(t["iteration"] for t in info["trials"]) == 3

    text = read_cmd("status", str(exp))
    assert text.returncode == 0
    assert text.stdout.splitlines()[0].startswith("== quick: 4 trials | 4 TERMINATED | finished ==")
    assert all(t["trial_id"] in text.stdout for t in info["trials"])

    best = read_cmd("best", str(exp), "--json")
    assert best.returncode == 0, best.stderr
    b = json.loads(best.stdout)
    losses = {t["trial_id"]: t["last_result"]["loss"] for t in info["trials"]}
    assert b["trial_id"] == min(losses, key=losses.get) and b["value"] == min(losses.values())
    assert b["metric"] == "loss" and b["mode"] == "min"
    assert set(b) >= {"config", "last_result", "checkpoint", "mlflow_run_id", "path"}
    assert b["checkpoint"] is None  # learning_curve keeps no checkpoint (see the resume test for one)
    assert isinstance(b["mlflow_run_id"], str) and b["mlflow_run_id"]  # MLflow is on by default
    text = read_cmd("best", str(exp))
    assert text.returncode == 0
    assert text.stdout.startswith(f"best trial   {b['trial_id']} (TERMINATED) by loss (min, scope last)")
    assert f"mlflow run   {b['mlflow_run_id']}" in text.stdout


def write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.slow
def test_failed_experiment_exits_nonzero_then_resume_errored_succeeds(tmp_path):
    ok_file = tmp_path / "ok"
    sweep = write(tmp_path / "fail.yaml", f"""
name: failing
trainable: {TRAINABLES}:fail_unless_file
metric: loss
mode: min
param_space:
  x: {{grid_search: [1.0, 2.0]}}
  ok_file: {ok_file}
run: {{storage_path: {tmp_path / 'res'}, verbose: 0}}
mlflow: false
""")
    proc = tuneplat("run", sweep)
    assert proc.returncode == 1
    reason = one_error_line(proc)
    assert reason.startswith("experiment failed: all 2 trials errored; first error: ")
    assert f"ok file {ok_file} is missing" in reason
    exp = tmp_path / "res" / "failing"

    st = json.loads(tuneplat("status", str(exp), "--json").stdout)
    assert st["counts"] == {"ERROR": 2}
    assert all(f"ok file {ok_file} is missing" in t["error"] for t in st["trials"])

    ok_file.write_text("")
    # resume needs only the folder: sweep.yaml inside it names the trainable (by absolute file path)
    again = tuneplat("resume", str(exp), "--resume-errored", "--quiet", cwd=str(tmp_path))
    assert again.returncode == 0, again.stderr
    st = json.loads(tuneplat("status", str(exp), "--json").stdout)
    assert st["counts"] == {"TERMINATED": 2}
    assert sorted(t["last_result"]["loss"] for t in st["trials"]) == [1.0 + 1 / 3, 2.0 + 1 / 3]


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.slow
def test_interrupted_run_resumes_from_checkpoints(tmp_path):
    gate = tmp_path / "gate"
    sweep = write(tmp_path / "gated.yaml", f"""
name: gated
trainable: {TRAINABLES}:gated
metric: loss
mode: min
param_space:
  x: {{grid_search: [10, 20]}}
  gate_file: {gate}
run: {{storage_path: {tmp_path / 'res'}, checkpoint: {{num_to_keep: 2}}}}
mlflow: false
""")
    exp = tmp_path / "res" / "gated"
    proc = subprocess.Popen([sys.executable, "-m", "tuneplat.cli", "run", sweep, "--quiet"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def both_waiting() -> bool:
            journal = exp / "journal.jsonl"
            if not journal.exists():
                return False
            events = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
            waiting = {e["trial_id"] for e in events if e.get("event") == "result" and e["result"].get("waiting")}
            return len(waiting) == 2

        _wait_for(both_waiting, 120, "both trials to reach the gate")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert one_error_line(subprocess.CompletedProcess([], 130, out, err)) == \
        f"interrupted; continue with: tuneplat resume {exp}"

    gate.write_text("")
    again = tuneplat("resume", str(exp), "--quiet", cwd=str(tmp_path))
    assert again.returncode == 0, again.stderr
    st = json.loads(tuneplat("status", str(exp), "--json").stdout)
    assert st["counts"] == {"TERMINATED": 2} and st["status"] == "finished"
    for t in st["trials"]:
        assert t["last_result"]["step"] == 6
        assert t["last_result"]["loss"] == t["config"]["x"] - 6
        # continued from the step-2 checkpoint, not from scratch
        assert t["last_result"]["iterations_since_restore"] < t["last_result"]["training_iteration"]
    best = json.loads(tuneplat("best", str(exp), "--json").stdout)
    assert best["config"]["x"] == 10 and os.path.isdir(best["checkpoint"])
    assert os.path.basename(best["checkpoint"]).startswith("checkpoint_")


def test_run_on_an_existing_cluster_with_address(tmp_path, dask_client):
    address = dask_client.scheduler.address
    proc = tuneplat("run", "examples/toy_asha.yaml", "--address", address, "--set", "num_samples=2",
                    "--set", "param_space.epochs=2", "--set", "mlflow=false", "--storage-path", str(tmp_path), "--quiet")
    assert proc.returncode == 0, proc.stderr
    st = json.loads(read_cmd("status", str(tmp_path / "toy-asha"), "--json").stdout)
    assert st["counts"] == {"TERMINATED": 2}
    workers = set(scheduler_workers(dask_client))
    journal = [json.loads(line) for line in (tmp_path / "toy-asha" / "journal.jsonl").read_text().splitlines()]
    used = {w for e in journal if e.get("event") == "trial_start" for w in e.get("workers", [])}
    assert used and used <= workers  # the trials ran on the given cluster, not an embedded one
    assert f"address: {address}" in (tmp_path / "toy-asha" / "sweep.yaml").read_text()


@pytest.mark.slow
def test_sweep_on_s3_then_status_best_and_resume_by_url(tmp_path, s3, s3_endpoint):
    """storage_path on S3 from a sweep file: fsspec builds the filesystem from AWS_* variables (tuner and workers)."""
    _fs, url = s3
    ok_file = tmp_path / "ok"
    sweep = write(tmp_path / "s3.yaml", f"""
name: on-s3
trainable: {TRAINABLES}:fail_unless_file
metric: loss
mode: min
param_space:
  x: {{grid_search: [1.0, 2.0]}}
  ok_file: {ok_file}
run: {{storage_path: "{url}/results", verbose: 0}}
mlflow: false
""")
    env = {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "eu-west-1", "TUNEPLAT_CACHE_DIR": str(tmp_path / "cache")}
    proc = tuneplat("run", sweep, env=env)
    assert proc.returncode == 1, proc.stderr
    exp = f"{url}/results/on-s3"
    env["TUNEPLAT_CACHE_DIR"] = str(tmp_path / "other-machine")  # status/resume need only the S3 copy
    st = tuneplat("status", exp, "--json", env=env)
    assert st.returncode == 0, st.stderr
    assert json.loads(st.stdout)["counts"] == {"ERROR": 2}
    ok_file.write_text("")
    again = tuneplat("resume", exp, "--resume-errored", "--quiet", cwd=str(tmp_path), env=env)
    assert again.returncode == 0, again.stderr
    st = json.loads(tuneplat("status", exp, "--json", env=env).stdout)
    assert st["counts"] == {"TERMINATED": 2}
    best = tuneplat("best", exp, "--json", env=env)
    assert best.returncode == 0, best.stderr
    b = json.loads(best.stdout)
    assert b["last_result"]["loss"] == 1.0 + 1 / 3 and b["path"].startswith(f"{exp}/")
    missing = tuneplat("status", f"{url}/results/nothing", env=env)
    assert missing.returncode != 0 and "no journal.jsonl" in one_error_line(missing)
