"""Ray's shipped XGBoost and LightGBM Tune examples, copied from the installed Ray with only the imports changed.

The example text comes from ``ray/tune/examples`` of the installed ``ray`` at test time (so it is Ray's current
file, not a copy kept here); ``ray`` → ``tuneplat`` in its import lines is the only change. Each runs as a user
would run it (a subprocess in a temporary working directory, the embedded cluster), and the test reads what it
printed and the experiment folder it left.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _ray_examples() -> str:
    spec = importlib.util.find_spec("ray")
    if spec is None or spec.origin is None:
        pytest.skip("ray is not installed: the examples are read from its package (pip install 'tuneplat[bench]')")
    return os.path.join(os.path.dirname(spec.origin), "tune", "examples")


def ported(name: str) -> str:
    """Ray's example ``name`` with ``ray`` imports pointed at tuneplat, and nothing else changed."""
    with open(os.path.join(_ray_examples(), f"{name}.py"), encoding="utf-8") as f:
        text = f.read()
    return ported_imports(text)


def ported_imports(text: str) -> str:
    """``text`` with its ``ray`` import lines (top-level or indented) pointed at tuneplat, and nothing else changed."""
    text = re.sub(r"^(\s*)import ray$", r"\1import tuneplat as ray", text, flags=re.M)
    text = re.sub(r"^(\s*)from ray(\.[\w.]+)? import", lambda m: f"{m.group(1)}from tuneplat{m.group(2) or ''} import",
                  text, flags=re.M)
    assert not re.search(r"^\s*(import|from)\s+ray\b", text, flags=re.M), "an import of ray was left"
    return text


def run_ported(name: str, cwd, *args: str, timeout: int = 600, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess:
    script = cwd / f"{name}.py"
    script.write_text(ported(name), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]), **(env or {})}
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=str(cwd))
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


def trial_results(cwd) -> dict[str, list[dict]]:
    """Every trial's reported results (its result.json lines), by trial folder."""
    out: dict[str, list[dict]] = {}
    for top, _dirs, files in os.walk(cwd / "tuneplat_results"):
        if "result.json" in files:
            with open(os.path.join(top, "result.json"), encoding="utf-8") as f:
                out[os.path.basename(top)] = [json.loads(line) for line in f if line.strip()]
    return out


def trial_configs(cwd) -> dict[str, dict]:
    """Every trial's config (its params.json), by trial folder."""
    out: dict[str, dict] = {}
    for top, _dirs, files in os.walk(cwd / "tuneplat_results"):
        if "params.json" in files:
            with open(os.path.join(top, "params.json"), encoding="utf-8") as f:
                out[os.path.basename(top)] = json.load(f)
    return out


def test_xgboost_example_asha_stops_trials_and_the_best_booster_loads(tmp_path):
    pytest.importorskip("xgboost", reason="the xgboost extra is not installed")
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    proc = run_ported("xgboost_example", tmp_path)
    accuracy = float(re.search(r"Best model total accuracy: ([0-9.]+)", proc.stdout).group(1))
    trials = trial_results(tmp_path)
    assert len(trials) == 10
    configs = trial_configs(tmp_path)
    # eta is drawn from loguniform(1e-4, 1e-1), unseeded in Ray's script: below ~0.02, 10 rounds leave the model at
    # the class prior (63 % accuracy) whatever the platform does. Where the draw lets a trial learn (eta >= 0.05 and
    # ASHA let it run 10 rounds) it beats the prior clearly; the printed best is the best trial's last result.
    for name, rs in trials.items():
        if configs[name]["eta"] >= 0.05 and len(rs) == 10:
            assert 1.0 - rs[-1]["test-error"] > 0.85, (configs[name], rs[-1])
    best = min(trials.values(), key=lambda rs: rs[-1]["test-logloss"])
    assert abs(accuracy - (1.0 - best[-1]["test-error"])) < 1e-4, (accuracy, best[-1])
    assert accuracy > 0.55, accuracy
    rounds = sorted(max(r["training_iteration"] for r in rs) for rs in trials.values())
    assert rounds[-1] == 10 and rounds[0] < 10, rounds  # ASHA (max_t=10, grace 1) stopped trials early
    stopped = sum(1 for n in rounds if n < 10)
    assert stopped >= 3, f"ASHA stopped {stopped} of 10 trials: {rounds}"  # (async: the count varies run to run)
    for rs in trials.values():  # every round reports test-logloss and test-error (the callback's default: all)
        assert {"test-logloss", "test-error"} <= set(rs[-1])


@pytest.mark.slow  # the same example without --use-cv runs in the default lane
def test_xgboost_example_with_cv(tmp_path):
    pytest.importorskip("xgboost", reason="the xgboost extra is not installed")
    run_ported("xgboost_example", tmp_path, "--use-cv")
    trials = trial_results(tmp_path)
    assert len(trials) == 10
    for rs in trials.values():  # average_cv_folds turned each [mean, std] into one number
        assert isinstance(rs[-1]["test-logloss"], float)


def test_lightgbm_example_reaches_rays_figure(tmp_path):
    pytest.importorskip("lightgbm", reason="the lightgbm extra is not installed")
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    proc = run_ported("lightgbm_example", tmp_path)
    assert "Best hyperparameters found were: " in proc.stdout
    trials = trial_results(tmp_path)
    assert len(trials) == 4  # grid gbdt/dart x num_samples=2
    # Ray's script draws learning_rate from loguniform(1e-8, 1e-1), unseeded: a draw below ~1e-3 leaves the model at
    # the class prior (binary_error ~0.3-0.4, as for the majority class) whatever the platform does, and all four
    # draws land there about a third of the time. So "it learned" is asserted where the draw lets it learn: a trial
    # with learning_rate >= 0.02 that ASHA let run 16 rounds is below Ray's figure; every trial reports every round.
    learners = 0
    configs = trial_configs(tmp_path)
    for name, rs in trials.items():
        assert [r["training_iteration"] for r in rs] == list(range(1, len(rs) + 1))
        assert all(0.0 <= r["binary_error"] <= 0.6 for r in rs), [r["binary_error"] for r in rs]
        if configs[name]["learning_rate"] >= 0.02 and len(rs) >= 16:
            learners += 1
            assert min(r["binary_error"] for r in rs) < 0.1, rs[-1]  # Ray's figure: ~0.03-0.06 binary error
    print(f"{learners} of 4 trials could learn")
    errors = sorted((rs[-1]["binary_error"], name) for name, rs in trials.items())  # best: the last result, scope "last"
    if errors[0][0] < errors[1][0]:  # (a tie may pick either)
        printed = proc.stdout.split("Best hyperparameters found were: ", 1)[1].strip()
        assert ast.literal_eval(printed) == configs[errors[0][1]], (printed, errors)
    assert all("binary_logloss" in rs[-1] for rs in trials.values())


@pytest.mark.slow  # the same example without --use-cv runs in the default lane
def test_lightgbm_example_with_cv(tmp_path):
    pytest.importorskip("lightgbm", reason="the lightgbm extra is not installed")
    run_ported("lightgbm_example", tmp_path, "--use-cv")
    trials = trial_results(tmp_path)
    assert len(trials) == 4
    assert all({"binary_error", "binary_error_stdv"} <= set(rs[-1]) for rs in trials.values())


def _journal(cwd) -> list[dict]:
    (path,) = [os.path.join(top, "journal.jsonl") for top, _d, files in os.walk(cwd / "tuneplat_results")
               if "journal.jsonl" in files]
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_a_boosting_trial_resized_on_a_dask_cluster_goes_on_with_the_new_threads(dask_client, storage):
    """ResourceChangingScheduler on the 2-worker cluster: Ray's DistributeResources gives the one live trial the
    cluster's 2 CPUs at its first result (1 free CPU, an even share of 1 more); it restarts from that round's
    checkpoint with nthread=2 and boosts the rounds left, none lost or repeated."""
    pytest.importorskip("xgboost", reason="the xgboost extra is not installed")
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    import port_trainables as P
    from tuneplat.tune.execution.placement_groups import PlacementGroupFactory
    from tuneplat.tune.integration.xgboost import TuneReportCheckpointCallback
    from tuneplat.tune.schedulers import FIFOScheduler, ResourceChangingScheduler

    import tuneplat as tune

    # the session's shared cluster: an earlier test may have killed a worker whose restart is still under way, and
    # DistributeResources divides the cluster's CPUs as the scheduler knows them
    dask_client.wait_for_workers(2, timeout=300)
    grid = tune.Tuner(
        tune.with_resources(P.boost_with_resources, PlacementGroupFactory([{"CPU": 1, "GPU": 0}])),
        param_space={"objective": "binary:logistic", "eval_metric": ["logloss"], "max_depth": 3, "seed": 1},
        tune_config=tune.TuneConfig(metric="eval-logloss", mode="min",
                                    scheduler=ResourceChangingScheduler(FIFOScheduler())),
        run_config=tune.RunConfig(storage_path=storage, name="rcs", mlflow=False, verbose=0),
        client=dask_client).fit()
    (result,) = list(grid)
    assert result.error is None
    rows = result.metrics_dataframe.to_dict("records")
    assert [r["training_iteration"] for r in rows] == list(range(1, P.BOOST_ROUNDS + 1))
    with open(os.path.join(storage, "rcs", "journal.jsonl"), encoding="utf-8") as f:
        events = [json.loads(line) for line in f]
    (change,) = [e for e in events if e["event"] == "trial_resources"]
    assert change["previous"] == {"CPU": 1.0} and change["request"] == {"CPU": 2.0} and change["iteration"] == 1
    starts = [e for e in events if e["event"] == "trial_start"]
    assert [s["start_iteration"] for s in starts] == [0, 1]
    assert starts[1]["checkpoint"].endswith("checkpoint_000001")
    assert starts[1]["resources"]["resources_per_worker"] == {"CPU": 2.0}
    attempts = []
    for a in (0, 1):
        with open(os.path.join(result.path, f"attempt_{a}.json"), encoding="utf-8") as f:
            attempts.append(json.load(f))
    # inside the trial: get_trial_resources().head_cpus -> nthread, and the rank's OpenMP threads, are its CPUs
    assert attempts == [{"nthread": 1, "omp": "1", "rounds_before": 0}, {"nthread": 2, "omp": "2", "rounds_before": 1}]
    booster = TuneReportCheckpointCallback.get_model(result.checkpoint, filename="booster.json")
    assert booster.num_boosted_rounds() == P.BOOST_ROUNDS


@pytest.mark.slow  # ~1-3 min here (8 trials of 2,000-tree rounds on 8 one-CPU workers of a 2-core machine)
@pytest.mark.timeout(1200)  # (its script's own limit below is 900 s: 6+ min were seen at load 13-28)
def test_xgboost_dynamic_resources_example_resizes_as_its_function_says(tmp_path):
    """Ray's example as shipped: ray.init(num_cpus=8), 8 grid trials, ASHA, and its own allocation function
    max(1, cpus // live trials). Every result the scheduler let continue is checked against that rule (from the
    journal's state just before the decision); a resized trial restarts from the checkpoint of the paused round
    with nthread = its new CPUs; the best model it prints is the best trial's."""
    pytest.importorskip("xgboost", reason="the xgboost extra is not installed")
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    from tuneplat.core import _events as ev
    from tuneplat.core._state import ExperimentState, apply

    # (unbuffered: the worker processes' prints reach the script's stdout as they happen, not when a buffer fills)
    proc = run_ported("xgboost_dynamic_resources_example", tmp_path, timeout=900, env={"PYTHONUNBUFFERED": "1"})
    events = _journal(tmp_path)
    state = ExperimentState(trials=[])
    checked = resized = 0
    for i, e in enumerate(events):
        if e["event"] == "result":
            # this result's decision: journaled before the next result (the loop decides on one result at a time),
            # though not always on the next line (the MLflow uploader creates a trial's run in the background, and
            # its mlflow_run event is journaled whenever the loop hears of it, under load after a later result)
            nxt = {}
            for later in events[i + 1:]:
                if later["event"] == "result":
                    break
                if later["event"] == "decision" and later["trial_id"] == e["trial_id"]:
                    nxt = later
                    break
            stopped = nxt.get("decision") == "STOP"
            if e["result"]["training_iteration"] >= 1 and not stopped:
                live = [t for t in state.trials if not t.status.is_finished()]
                want = max(1, 8 // len(live))  # the example's rule on this 8-CPU cluster
                have = state.by_id[e["trial_id"]].placement_group_factory.required_resources["CPU"]
                paused = nxt.get("decision") == "PAUSE"
                assert paused == (want != have), (e, want, have, len(live))
                if paused:
                    j = i + 1  # (its trial_resources line follows once its group has left its worker)
                    while events[j]["event"] != "trial_resources" or events[j]["trial_id"] != e["trial_id"]:
                        j += 1
                    change = events[j]
                    assert change["request"] == {"CPU": float(want)}, change
                    resized += 1
                checked += 1
        apply(state, ev.from_json(e))
    assert checked >= 8
    starts = [e for e in events if e["event"] == "trial_start"]
    for change in (e for e in events if e["event"] == "trial_resources"):
        after = [s for s in starts if s["trial_id"] == change["trial_id"] and events.index(s) > events.index(change)]
        assert after and after[0]["start_iteration"] == change["iteration"]
        assert after[0]["checkpoint"].endswith(f"checkpoint_{change['iteration']:06d}")
        assert after[0]["resources"]["resources_per_worker"] == change["request"]
    # the trials print "nthreads: N xgb_model: ..." at each start: N is 1 at first starts, and each restart from a
    # checkpoint (a Booster) prints the CPUs its resize gave
    lines = re.findall(r"nthreads: (\d+) xgb_model: (None|<xgboost)", proc.stdout)
    assert sorted(int(n) for n, m in lines if m == "None") == [1] * 8
    given = sorted(int(c["request"]["CPU"]) for c in events if c["event"] == "trial_resources")
    assert sorted(int(n) for n, m in lines if m != "None") == given and len(given) == resized
    trials = trial_results(tmp_path)
    assert len(trials) == 8
    for rs in trials.values():  # no round lost nor repeated across the restarts
        assert [r["training_iteration"] for r in rs] == list(range(1, len(rs) + 1))
    best = min(trials.values(), key=lambda rs: rs[-1]["eval-logloss"])
    accuracy = float(re.search(r"Best model total accuracy: ([0-9.-]+)", proc.stdout).group(1))
    assert abs(accuracy - (1.0 - best[-1]["eval-logloss"])) < 1e-4  # (Ray's example prints 1 - logloss)
    printed = ast.literal_eval(proc.stdout.split("Best model parameters: ", 1)[1].splitlines()[0])
    assert printed == best[-1]["config"]


def docstring_example(cls: type) -> str:
    """The ``testcode`` block of a Ray class's docstring; its Ray imports pointed at tuneplat, Ray Data → pandas."""
    import textwrap

    doc = cls.__doc__ or ""
    block = doc.split(".. testcode::", 1)[1].split("\n    Args:", 1)[0]
    lines = [ln for ln in block.splitlines() if not ln.strip().startswith(":skipif:")]
    code = textwrap.dedent("\n".join(lines)).strip() + "\n"
    code = code.replace("import ray.data\n", "import pandas as pd  # Ray Data -> pandas (docs/data-ingest.md)\n")
    code = code.replace("import ray.train\n", "import tuneplat as ray  # ray.train -> tuneplat.train\n")
    code = re.sub(r"^from ray\.", "from tuneplat.", code, flags=re.M)
    code = code.replace("ray.data.from_items(", "pd.DataFrame(")  # the data lines
    assert not re.search(r"^\s*(import|from)\s+ray\b", code, flags=re.M), code
    return code


@pytest.mark.parametrize("framework", ["xgboost", "lightgbm"])
def test_ray_trainer_docstring_examples(tmp_path, framework):
    pytest.importorskip(framework, reason=f"the {framework} extra is not installed")
    _ray_examples()  # (skips without ray)
    if framework == "xgboost":
        from ray.train.v2.xgboost.xgboost_trainer import XGBoostTrainer as RayTrainer

        check = "print('ROUNDS', booster.num_boosted_rounds())\n"
    else:
        from ray.train.v2.lightgbm.lightgbm_trainer import LightGBMTrainer as RayTrainer

        check = "print('ROUNDS', booster.current_iteration())\n"
    script = tmp_path / "docstring_example.py"
    script.write_text(docstring_example(RayTrainer) + check, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env,
                          cwd=str(tmp_path))
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    assert "ROUNDS 1" in proc.stdout  # the example's num_boost_round=1, trained by its 2 ranks


@pytest.mark.parametrize("ray_module, ours", [
    ("ray.train.xgboost", "tuneplat.train.xgboost"),
    ("ray.train.lightgbm", "tuneplat.train.lightgbm"),
    ("ray.tune.integration.xgboost", "tuneplat.tune.integration.xgboost"),
    ("ray.tune.integration.lightgbm", "tuneplat.tune.integration.lightgbm"),
])
def test_every_public_name_of_rays_module_is_here(ray_module, ours):
    import importlib

    pytest.importorskip(ray_module.rsplit(".", 1)[1], reason="the extra is not installed")
    _ray_examples()  # (skips without ray)
    theirs = importlib.import_module(ray_module)
    names = getattr(theirs, "__all__", None) or [n for n in ("TuneReportCheckpointCallback", "TuneReportCallback")
                                                  if hasattr(theirs, n)]
    mine = importlib.import_module(ours)
    assert names and [n for n in names if not hasattr(mine, n)] == []
    for n in names:  # the same constructor arguments
        a, b = getattr(theirs, n), getattr(mine, n)
        if isinstance(a, type) and n != "TuneReportCallback":
            import inspect

            want = [p for p in inspect.signature(a.__init__).parameters if p not in ("self", "validation_config", "args", "kwargs")]
            have = list(inspect.signature(b.__init__).parameters)
            assert [p for p in want if p not in have] == [], n
