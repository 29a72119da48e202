"""``tuneplat status`` (a storage path, --csv, --trial), ``best --scope all``, the live view on a terminal,
and a misspelt metric ending a CLI run at once."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys

import pytest
from procs import terminal_sigint
from test_cli_run import ROOT, TRAINABLES, one_error_line, read_cmd, tuneplat, write

LONG_ERROR = ("this trial failed on purpose with a long message that a table column would cut: the full text must "
              "stay readable in the live view and in tuneplat status")


def _sweep(tmp_path, name: str = "dips", metric: str = "loss", extra: str = "") -> str:
    return write(tmp_path / f"{name}.yaml", f"""
name: {name}
trainable: {TRAINABLES}:dip
metric: {metric}
mode: min
param_space:
  x: {{grid_search: [1.0, 2.0]}}
  fail: {{grid_search: [false, true]}}
run: {{storage_path: {tmp_path / 'res'}, max_failures: 0}}
{extra}
""")


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    """One finished CLI run: 4 trials, the two with fail=true errored at step 1; MLflow on (default store)."""
    tmp = tmp_path_factory.mktemp("status")
    proc = tuneplat("run", _sweep(tmp), "--quiet")
    assert proc.returncode == 0, proc.stderr
    return tmp / "res", tmp / "res" / "dips"


def test_status_of_a_storage_path_lists_its_experiments(experiment, tmp_path):
    storage, exp = experiment
    second = tuneplat("run", _sweep(tmp_path, "other"), "--quiet", "--storage-path", str(storage))
    assert second.returncode == 0, second.stderr
    out = read_cmd("status", str(storage))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"== 2 experiment(s) in {storage} (newest first) =="
    assert lines[1].split() == ["experiment", "status", "trials", "best", "last", "change"]
    assert lines[2].split()[:2] == ["other", "finished"] and lines[3].split()[:2] == ["dips", "finished"]
    for line in lines[2:4]:
        assert "4 (2 ERROR, 2 TERMINATED)" in line and "loss=2.5 (" in line  # x=1.0's last value
    info = json.loads(read_cmd("status", str(storage), "--json").stdout)
    assert [e["name"] for e in info["experiments"]] == ["other", "dips"]
    assert info["experiments"][1]["counts"] == {"ERROR": 2, "TERMINATED": 2}
    bad = read_cmd("status", str(storage), "--csv")
    assert bad.returncode == 2 and "is a storage path holding 2 experiment(s)" in one_error_line(bad)


def test_status_csv_and_one_trial_in_full(experiment, tmp_path):
    _storage, exp = experiment
    target = tmp_path / "trials.csv"
    out = read_cmd("status", str(exp), "--csv", str(target))
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(open(target, encoding="utf-8")))
    assert len(rows) == 4
    assert {(r["config/x"], r["config/fail"], r["status"]) for r in rows} == {
        ("1.0", "False", "TERMINATED"), ("2.0", "False", "TERMINATED"), ("1.0", "True", "ERROR"),
        ("2.0", "True", "ERROR")}
    ok = [r for r in rows if r["status"] == "TERMINATED"]
    assert sorted(float(r["loss"]) for r in ok) == [2.5, 5.0] and {r["iteration"] for r in ok} == {"4"}
    assert all(LONG_ERROR in r["error"] for r in rows if r["status"] == "ERROR")
    stdout_csv = read_cmd("status", str(exp), "--csv")
    assert list(csv.DictReader(io.StringIO(stdout_csv.stdout))) == rows

    failed = next(r["trial_id"] for r in rows if r["status"] == "ERROR")
    one = read_cmd("status", str(exp), "--trial", failed)
    assert one.returncode == 0, one.stderr
    assert one.stdout.startswith(f"trial        {failed} (ERROR) of dips")
    assert LONG_ERROR in one.stdout and "Traceback" in one.stdout  # the whole error, with where it came from
    table = read_cmd("status", str(exp))
    assert LONG_ERROR in table.stdout  # the note column is the last one and is not cut
    missing = read_cmd("status", str(exp), "--trial", "nope")
    assert missing.returncode == 2 and "--trial nope: no such trial" in one_error_line(missing)


def test_best_scope_all_prints_the_best_value_not_the_last(experiment):
    _storage, exp = experiment
    b = json.loads(read_cmd("best", str(exp), "--scope", "all", "--json").stdout)
    assert b["config"] == {"x": 1.0, "fail": False}
    assert b["value"] == 1.0 and b["last_result"]["loss"] == 2.5  # best ever 1.0 (step 2), last 2.5
    text = read_cmd("best", str(exp), "--scope", "all").stdout
    assert "loss         1   (scope all; its last value: 2.5)" in text


def test_misspelt_metric_ends_the_run_at_the_first_result_without_retries(tmp_path):
    sweep = _sweep(tmp_path, "typo", metric="los", extra="mlflow: false")
    proc = tuneplat("run", sweep, "--set", "run.max_failures=3", "--quiet")
    assert proc.returncode == 1
    line = one_error_line(proc)
    assert "without the metric 'los' (did you mean 'loss'?)" in line, line
    journal = [json.loads(s) for s in (tmp_path / "res" / "typo" / "journal.jsonl").read_text().splitlines()]
    starts = [e for e in journal if e["event"] == "trial_start"]
    assert len({e["trial_id"] for e in starts}) == len(starts)  # no trial was retried
    assert "Traceback" not in proc.stderr


def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r", "", text)


@pytest.mark.slow
def test_live_view_on_a_terminal_shows_progress_best_full_errors_and_next_steps(tmp_path):
    """The CLI in a pseudo-terminal: the rich live view, then the summary with the commands to look further."""
    master, slave = os.openpty()
    env = {**os.environ, "COLUMNS": "120", "LINES": "60", "TERM": "xterm"}
    env.pop("TUNEPLAT_PLAIN_PROGRESS", None)
    proc = subprocess.Popen([sys.executable, "-m", "tuneplat.cli", "run", _sweep(tmp_path)], cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:  # read until the child closes the terminal
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=60) == 0
    out = _strip_ansi(b"".join(chunks).decode("utf-8", "replace"))
    assert "╭─ tuneplat: dips" in out  # the live panel
    assert "4/4 trials" in out and "━" in out  # trials done out of the total, with its bar
    assert "best loss=2.5 (trial" in out
    words = re.sub(r"[│╭╮╰╯─\s]+", " ", out)
    assert LONG_ERROR in words  # wrapped over lines, never cut
    exp = tmp_path / "res" / "dips"
    assert f"tuneplat status {exp}" in out
    assert f"mlflow ui --backend-store-uri sqlite:///{tmp_path / 'res'}/mlflow.db" in out
    assert "viewStateShareKey=tuneplat" in out
    assert "Traceback" not in out and "distributed.core" not in out


@pytest.mark.slow
def test_ctrl_c_in_the_terminal_gives_one_resume_hint_and_no_tracebacks(tmp_path):
    """SIGINT to the whole foreground process group, as a terminal's Ctrl-C does (tuner, Dask workers, MLflow
    uploader): the tuner ends the run; nobody prints a KeyboardInterrupt traceback; one line says how to resume."""
    import signal
    import time

    gate = tmp_path / "gate"
    sweep = write(tmp_path / "gated.yaml", f"""
name: gated
trainable: {TRAINABLES}:gated
metric: loss
mode: min
param_space:
  x: {{grid_search: [10, 20]}}
  gate_file: {gate}
run: {{storage_path: {tmp_path / 'res'}}}
""")
    exp = tmp_path / "res" / "gated"
    proc = subprocess.Popen([sys.executable, "-m", "tuneplat.cli", "run", sweep], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=terminal_sigint)
    try:
        deadline = time.monotonic() + 120
        while True:  # wait until both trials wait at the gate (the journal says so)
            journal = exp / "journal.jsonl"
            events = ([json.loads(s) for s in journal.read_text().splitlines() if s.strip()]
                      if journal.exists() else [])
            if len({e["trial_id"] for e in events if e.get("event") == "result" and e["result"].get("waiting")}) == 2:
                break
            assert time.monotonic() < deadline and proc.poll() is None, "the trials did not reach the gate"
            time.sleep(0.1)  # polling a file another process writes
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    both = out + err
    assert "Traceback" not in both and "KeyboardInterrupt" not in both, both
    assert [line for line in both.splitlines() if "resume" in line] == [
        f"tuneplat: error: interrupted; continue with: tuneplat resume {exp}"], both
    assert "distributed.core" not in both and "not logged" not in both, both
