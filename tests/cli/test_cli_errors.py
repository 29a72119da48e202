"""Bad sweep files through the console script's ``main()``: exact one-line messages, exit 2, nothing executed.

The cases run ``tuneplat.cli.main`` in-process (what the console script calls; its exit status and output); one
case per kind also runs the real console script as a subprocess (test_the_console_script_refuses_alike).
"""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T = "trainable: examples.toy:learning_curve\n"

EXPECTED_TOP_KEYS = ("description, max_concurrent_trials, metric, mlflow, mode, name, num_samples, param_space, "
                     "reuse_actors, run, scaling, scheduler, search, seed, time_budget_s, trainable, "
                     "trial_dirname_creator, trial_name_creator")

# (id, file name, content, expected message after "tuneplat: error: ")
CASES = [
    ("yaml-syntax", "s.yaml", T + "param_space:\n  lr: {loguniform: [1e-4, 1e-1]\nmetric: loss\n",
     "s.yaml:4:1: YAML syntax error: expected ',' or '}', but got '<scalar>' (while parsing a flow mapping)"),
    ("toml-syntax", "s.toml", 'trainable = "examples.toy:learning_curve"\nnum_samples = = 3\n',
     "s.toml:2:15: TOML syntax error: Invalid value"),
    ("unknown-key", "s.yaml", T + "schedular: {type: asha}\n",
     f"s.yaml:2:1: schedular: unknown key (did you mean 'scheduler'?); expected one of: {EXPECTED_TOP_KEYS}"),
    ("unknown-nested-key", "s.yaml", T + "scheduler:\n  type: asha\n  max_tt: 3\n",
     "s.yaml:4:3: scheduler.max_tt: unknown key (did you mean 'max_t'?); expected one of: brackets, cost_attr, "
     "grace_period, max_t, metric, mo_tiebreak, mode, reduction_factor, rung_levels, seed, stop_last_trials, "
     "time_attr, type"),
    ("unknown-key-toml", "s.toml", 'trainable = "examples.toy:learning_curve"\n[run]\nstorage = "x"\n',
     "s.toml:3:1: run.storage: unknown key (did you mean 'storage_path'?); expected one of: address, callbacks, "
     "checkpoint, fail_fast, failure, log_to_file, max_failures, progress_interval_s, stop, storage_options, storage_path, tls, tuner_host, "
     "tuner_port, verbose"),
    ("wrong-type", "s.yaml", T + "num_samples: many\n",
     "s.yaml:2:14: num_samples: got 'many' (a string); expected an int >= 1 (or -1 with time_budget_s)"),
    ("wrong-type-nested", "s.yaml", T + "scheduler:\n  type: asha\n  max_t: ten\n",
     "s.yaml:4:10: scheduler.max_t: got 'ten' (a string); expected a number > 0"),
    ("wrong-type-toml", "s.toml", 'trainable = "examples.toy:learning_curve"\n[scaling]\nnum_workers = "2"\n',
     "s.toml:3:15: scaling.num_workers: got '2' (a string); expected an int >= 1, or [min_workers, max_workers] "
     "(an elastic group, min <= max)"),
    ("bad-domain-bounds", "s.yaml", T + "param_space:\n  lr: {loguniform: [0.1, 0.001]}\n",
     "s.yaml:3:20: param_space.lr.loguniform: bad domain: lower=0.1 must be < upper=0.001; expected "
     "{loguniform: [lower, upper]} or {loguniform: [lower, upper, base]}"),
    ("bad-domain-arity", "s.yaml", T + "param_space:\n  model:\n    dropout: {uniform: [0.5]}\n",
     "s.yaml:4:24: param_space.model.dropout.uniform: got 1 argument(s) [0.5]; expected {uniform: [lower, upper]}"),
    ("bad-domain-int", "s.yaml", T + "param_space:\n  layers: {randint: [1, 4.5]}\n",
     "s.yaml:3:25: param_space.layers.randint[1]: got 4.5 (a number); expected an int for upper in {randint: [lower, upper]}"),
    ("misspelt-domain", "s.yaml", T + "param_space:\n  lr: {loguniforn: [0.1, 1]}\n",
     "s.yaml:3:8: param_space.lr.loguniforn: unknown domain 'loguniforn' (did you mean 'loguniform'?); expected one "
     "of: choice, const, grid_search, lograndint, loguniform, qlograndint, qloguniform, qrandint, qrandn, quniform, "
     "randint, randn, sample_from, uniform (write {const: {...}} for a literal mapping)"),
    ("bad-domain-toml", "s.toml", 'trainable = "examples.toy:learning_curve"\n[param_space]\nlr = { loguniform = [1, 0.1] }\n',
     "s.toml:3:21: param_space.lr.loguniform: bad domain: lower=1 must be < upper=0.1; expected "
     "{loguniform: [lower, upper]} or {loguniform: [lower, upper, base]}"),
    ("unknown-scheduler", "s.yaml", T + "scheduler: {type: ashaa, max_t: 3}\n",
     "s.yaml:2:19: scheduler.type: unknown scheduler 'ashaa' (did you mean 'asha'?); expected one of: fifo, asha, "
     "async_hyperband, hyperband, pasha, median_stopping_rule, pbt, optuna_pruner"),
    ("scheduler-rule", "s.yaml", T + "scheduler: {type: asha, max_t: 3, grace_period: 5}\n",
     "s.yaml:2:49: scheduler.grace_period: The value of `grace_period` is 5, but must be `grace_period <= max_t (= 3)`"),
    ("unknown-search", "s.yaml", T + "search: {algorithm: hyperopt}\n",
     "s.yaml:2:21: search.algorithm: unknown search algorithm 'hyperopt'; expected one of: random, grid, basic, "
     "optuna, tpe, cmaes, gp, qmc, nsgaii, or 'module:Class' of a Searcher"),
    ("missing-trainable", "s.yaml", "metric: loss\nmode: min\n",
     "s.yaml:1:1: missing required key 'trainable'; expected trainable: 'module:function' or 'path/to/file.py:function'"),
    ("trainable-module-missing", "s.yaml", "trainable: examples.nope:train\n",
     "s.yaml:1:12: trainable: cannot import module 'examples.nope' (No module named 'examples.nope'); expected an "
     "installed module or one importable from the current directory"),
    ("trainable-function-missing", "s.yaml", "trainable: examples.toy:nope\n",
     "s.yaml:1:12: trainable: module 'examples.toy' has no attribute 'nope'"),
    ("trainable-not-a-ref", "s.yaml", "trainable: print('hi')\n",
     "s.yaml:1:12: trainable: got \"print('hi')\" (a string); expected 'module:function' or 'path/to/file.py:function'"),
    ("mode", "s.yaml", T + "metric: loss\nmode: minimize\n", "s.yaml:3:7: mode: got 'minimize' (a string); expected 'min' or 'max'"),
    ("duplicate-key", "s.yaml", T + "num_samples: 2\nnum_samples: 3\n",
     "s.yaml:3:1: num_samples: duplicate key (first written at line 2); write each key once"),
    ("env-missing", "s.yaml", T + "num_samples: ${env:TUNEPLAT_TEST_UNSET_VAR}\n",
     "s.yaml:2:14: num_samples: environment variable TUNEPLAT_TEST_UNSET_VAR is not set (written as "
     "${env:TUNEPLAT_TEST_UNSET_VAR}); expected it to be exported, e.g. `export TUNEPLAT_TEST_UNSET_VAR=...`"),
]


@pytest.fixture
def cli(monkeypatch, capsys):
    """``cli(*args)``: ``tuneplat <args>`` in-process from the checkout; its exit status, stdout and stderr.

    Should validation ever let a bad sweep through, it would run on the virtual-time executor (no cluster starts
    in the test process), and the test sees the results folder.
    """
    import tuneplat._tuner as tuner_module
    from tuneplat import cli as cli_module
    from tuneplat.testing import VirtualTimeExecutor

    monkeypatch.setattr(tuner_module, "DaskTrialExecutor", lambda *a, **k: VirtualTimeExecutor(num_slots=2))
    monkeypatch.chdir(ROOT)

    def run(*args: str) -> types.SimpleNamespace:
        capsys.readouterr()
        try:
            code = cli_module.main(list(args))
        except SystemExit as exc:  # argparse's own errors
            code = exc.code if isinstance(exc.code, int) else 2
        out = capsys.readouterr()
        return types.SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)

    return run


@pytest.fixture
def run_cli(cli):
    def run(tmp_path, name: str, content: str, *extra: str) -> types.SimpleNamespace:
        (tmp_path / name).write_text(content)
        return cli("run", str(tmp_path / name), *extra, "--storage-path", str(tmp_path / "res"))

    return run


def run_console_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuneplat.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def error_line(proc, tmp_path) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr  # one line, no traceback
    assert lines[0].startswith("tuneplat: error: ")
    return lines[0][len("tuneplat: error: "):].replace(str(tmp_path) + os.sep, "")


@pytest.mark.parametrize("name,content,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_sweep_file(run_cli, tmp_path, name, content, expected):
    proc = run_cli(tmp_path, name, content)  # a real run, not --dry-run: validation must stop it
    assert proc.returncode == 2
    assert error_line(proc, tmp_path) == expected
    assert proc.stdout == ""
    assert not (tmp_path / "res").exists()  # nothing started


@pytest.mark.parametrize("yaml_text", [
    'trainable: examples.toy:learning_curve\nparam_space: !!python/object/apply:os.system ["touch {marker}"]\n',
    'trainable: examples.toy:learning_curve\nparam_space:\n  x: !!python/object/apply:subprocess.call [["touch", "{marker}"]]\n',
    'trainable: !!python/name:os.system\nparam_space: {{x: "touch {marker}"}}\n',
    'trainable: examples.toy:learning_curve\nparam_space: !!python/object/new:os.system ["touch {marker}"]\n',
], ids=["object-apply", "nested-apply", "python-name", "object-new"])
def test_yaml_tags_that_construct_objects_are_refused_and_nothing_runs(run_cli, tmp_path, yaml_text):
    marker = tmp_path / "pwned"
    proc = run_cli(tmp_path, "evil.yaml", yaml_text.format(marker=marker))
    assert proc.returncode == 2
    msg = error_line(proc, tmp_path)
    assert msg.startswith("evil.yaml:")
    assert "would construct a Python object; sweep files hold plain data only" in msg
    assert not marker.exists()


def test_tag_message_names_line_column_and_tag(run_cli, tmp_path):
    proc = run_cli(tmp_path, "evil.yaml", 'trainable: examples.toy:learning_curve\n'
                                          'param_space: !!python/object/apply:os.system ["true"]\n')
    assert error_line(proc, tmp_path) == (
        "evil.yaml:2:14: YAML tag '!!python/object/apply:os.system' would construct a Python object; sweep files "
        "hold plain data only (strings, numbers, booleans, null, lists, mappings): remove the tag")
    proc = run_cli(tmp_path, "custom.yaml", "trainable: !include other.yaml\n")
    assert error_line(proc, tmp_path) == (
        "custom.yaml:1:12: YAML tag '!include' is not allowed; sweep files hold plain data only "
        "(strings, numbers, booleans, null, lists, mappings): remove the tag")


@pytest.mark.parametrize("override,expected", [
    ("scheduler.max_t=-3", "--set scheduler.max_t=-3:1:17: scheduler.max_t: got -3 (an int); expected a number > 0"),
    ("scheduler.bogus=1", "--set scheduler.bogus=1:1:1: scheduler.bogus: unknown key; expected one of: brackets, "
                          "cost_attr, grace_period, max_t, metric, mo_tiebreak, mode, reduction_factor, rung_levels, "
                          "seed, stop_last_trials, time_attr, type"),
    ("param_space.lr={uniform: [1, 0]}", "--set param_space.lr={uniform: [1, 0]}:1:26: param_space.lr.uniform: "
                                         "bad domain: lower=1 must be < upper=0; expected {uniform: [lower, upper]}"),
    ("num_samples", "--set num_samples:1:1: expected key.path=value, e.g. --set scheduler.max_t=50"),
    ("num_samples=!!python/object/apply:os.getpid []", "--set num_samples=!!python/object/apply:os.getpid []:1:13: "
     "YAML tag '!!python/object/apply:os.getpid' would construct a Python object; sweep files hold plain data only "
     "(strings, numbers, booleans, null, lists, mappings): remove the tag"),
], ids=["bad-value", "unknown-key", "bad-domain", "no-equals", "tag"])
def test_bad_set_override(cli, tmp_path, override, expected):
    proc = cli("run", "examples/toy_asha.yaml", "--set", override, "--storage-path", str(tmp_path / "res"))
    assert proc.returncode == 2
    assert error_line(proc, tmp_path) == expected
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("args,expected", [
    (["status", "{tmp}/nowhere"], "{tmp}/nowhere: no such folder; pass an experiment folder (<storage_path>/<name>) "
     "or a storage folder holding experiments (e.g. tuneplat status ./tuneplat_results lists them)"),
    (["best", "{tmp}/nowhere"], "{tmp}/nowhere: no such folder; pass an experiment folder (<storage_path>/<name>), "
     "e.g. one that tuneplat status ./tuneplat_results lists"),
    (["resume", "{tmp}/nowhere"], "{tmp}/nowhere: no such folder; pass an experiment folder (<storage_path>/<name>), "
     "e.g. one that tuneplat status ./tuneplat_results lists"),
    (["best", "{tmp}"], "{tmp}: not a tuneplat experiment folder (no journal.jsonl); expected <storage_path>/<name>"),
    (["run", "{tmp}/missing.yaml"], "{tmp}/missing.yaml: no such sweep file (looked in " + ROOT + ")"),
])
def test_bad_paths(cli, tmp_path, args, expected):
    proc = cli(*[a.format(tmp=tmp_path) for a in args])
    assert proc.returncode == 2
    assert proc.stderr.strip() == "tuneplat: error: " + expected.format(tmp=tmp_path)


def test_the_console_script_refuses_alike(tmp_path):
    """The real console script (a new process): a constructing YAML tag, a bad --set and a bad path, refused with
    the same one line and exit 2, and nothing run."""
    marker = tmp_path / "pwned"
    (tmp_path / "evil.yaml").write_text(f'trainable: examples.toy:learning_curve\n'
                                        f'param_space: !!python/object/apply:os.system ["touch {marker}"]\n')
    proc = run_console_script("run", str(tmp_path / "evil.yaml"), "--storage-path", str(tmp_path / "res"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert "would construct a Python object; sweep files hold plain data only" in error_line(proc, tmp_path)
    assert not marker.exists() and not (tmp_path / "res").exists()
    proc = run_console_script("run", "examples/toy_asha.yaml", "--set", "num_samples",
                              "--storage-path", str(tmp_path / "res"))
    assert proc.returncode == 2
    assert error_line(proc, tmp_path) == "--set num_samples:1:1: expected key.path=value, e.g. --set scheduler.max_t=50"
    proc = run_console_script("best", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"tuneplat: error: {tmp_path}/nowhere: no such folder; pass an experiment folder (<storage_path>/<name>), "
        "e.g. one that tuneplat status ./tuneplat_results lists")
