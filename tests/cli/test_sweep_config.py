"""tuneplat.config in-process: the sweep file ↔ Python API mapping, overrides, ${env:...}, TOML, W&B."""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import textwrap

import pytest

import tuneplat as tune
from tuneplat import schedulers
from tuneplat.config import DOMAINS, SCHEDULERS, SweepFileError, build_sweep, load_sweep, read_sweep_document
from tuneplat.search import BasicVariantGenerator, ConcurrencyLimiter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs", "sweep-files.md")


def sweep_from(tmp_path, text: str, name: str = "s.yaml", overrides=(), environ=None):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return build_sweep(read_sweep_document(str(path), overrides), base_dir=ROOT, environ=environ or {})


FULL = """
name: full
description: every section
trainable: examples.toy:learning_curve
metric: loss
mode: min
num_samples: 3
max_concurrent_trials: 2
time_budget_s: 600
seed: 7
reuse_actors: true
param_space:
  a: {uniform: [0, 1]}
  b: {quniform: [0, 1, 0.25]}
  c: {loguniform: [1.0e-4, 1]}
  c2: {loguniform: [1e-4, 1, 2]}
  d: {qloguniform: [1, 100, 1]}
  e: {randint: [1, 5]}
  f: {qrandint: [0, 10, 2]}
  g: {lograndint: [1, 100]}
  h: {qlograndint: [1, 64, 1]}
  i: {randn: [0, 2]}
  i0: {randn: []}
  j: {qrandn: [0, 1, 0.5]}
  k: {choice: [relu, tanh]}
  l: {grid_search: [1, 2]}
  m: {const: {choice: literal}}
  n: {sample_from: "examples.toy:learning_curve"}
  o: {loguniform: {lower: 0.001, upper: 0.1}}
  nested: {width: {choice: [1, 2]}, fixed: [1, 2, 3]}
search: {algorithm: random, seed: 3, points_to_evaluate: [{a: 0.5}], max_concurrent: 2}
scheduler: {type: asha, time_attr: training_iteration, max_t: 9, grace_period: 1, reduction_factor: 3, brackets: 1,
            stop_last_trials: false, seed: 1}
scaling: {num_workers: 2, use_gpu: false, resources_per_worker: {CPU: 1}, placement_strategy: SPREAD}
run:
  storage_path: /tmp/somewhere
  stop: {training_iteration: 9, loss: -1}
  failure: {max_failures: 2, fail_fast: false}
  checkpoint: {num_to_keep: 2, checkpoint_score_attribute: loss, checkpoint_score_order: min}
  verbose: 0
  address: tcp://127.0.0.1:8786
  progress_interval_s: 2
  log_to_file: true
mlflow: {tracking_uri: "sqlite:///x.db", experiment_name: exp, log_checkpoints: false, register_best_model: best,
         tags: {team: ml}}
"""


def test_full_file_builds_the_python_objects(tmp_path):
    s = sweep_from(tmp_path, FULL)
    ps = s.param_space
    assert repr(ps["a"]) == repr(tune.uniform(0, 1)) and repr(ps["b"]) == repr(tune.quniform(0, 1, 0.25))
    assert repr(ps["c"]) == repr(tune.loguniform(1e-4, 1)) and ps["c2"].base == 2
    assert repr(ps["d"]) == repr(tune.qloguniform(1, 100, 1))
    assert repr(ps["e"]) == repr(tune.randint(1, 5)) and repr(ps["f"]) == repr(tune.qrandint(0, 10, 2))
    assert repr(ps["g"]) == repr(tune.lograndint(1, 100)) and repr(ps["h"]) == repr(tune.qlograndint(1, 64, 1))
    assert repr(ps["i"]) == repr(tune.randn(0, 2)) and repr(ps["i0"]) == repr(tune.randn())
    assert repr(ps["j"]) == repr(tune.qrandn(0, 1, 0.5))
    assert ps["k"].categories == ["relu", "tanh"] and ps["l"] == tune.grid_search([1, 2])
    assert ps["m"] == {"choice": "literal"}  # const: a literal mapping
    assert ps["n"].func is __import__("examples.toy").toy.learning_curve
    assert repr(ps["o"]) == repr(tune.loguniform(0.001, 0.1))
    assert ps["nested"]["width"].categories == [1, 2] and ps["nested"]["fixed"] == [1, 2, 3]

    tc = s.tune_config
    assert (tc.metric, tc.mode, tc.num_samples, tc.max_concurrent_trials, tc.time_budget_s, tc.seed, tc.reuse_actors) == \
        ("loss", "min", 3, 2, 600, 7, True)
    assert isinstance(tc.search_alg, ConcurrencyLimiter) and tc.search_alg.max_concurrent == 2
    assert isinstance(tc.search_alg.searcher, BasicVariantGenerator)
    sch = tc.scheduler
    assert isinstance(sch, schedulers.ASHAScheduler)
    assert (sch.max_t, sch.grace_period, sch.reduction_factor, sch.stop_last_trials) == (9, 1, 3, False)

    rc = s.run_config
    assert rc.name == "full" and rc.storage_path == "/tmp/somewhere" and rc.stop == {"training_iteration": 9, "loss": -1}
    assert rc.failure_config == tune.FailureConfig(max_failures=2, fail_fast=False)
    assert rc.checkpoint_config == tune.CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="loss",
                                                         checkpoint_score_order="min")
    assert (rc.verbose, rc.address, rc.progress_interval_s, rc.log_to_file) == (0, "tcp://127.0.0.1:8786", 2, True)
    assert rc.mlflow == tune.MLflowConfig(tracking_uri="sqlite:///x.db", experiment_name="exp", log_checkpoints=False,
                                          register_best_model="best", tags={"team": "ml"})
    assert s.scaling_config == tune.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}, placement_strategy="SPREAD")


def _spelled(section: str) -> set[str]:
    """Keys documented for a section: ``| `key` |`` rows under its heading in docs/sweep-files.md."""
    import re

    text = open(DOCS, encoding="utf-8").read()
    m = re.search(rf"<!-- keys:{section} -->(.*?)<!-- /keys -->", text, re.S)
    assert m, f"docs/sweep-files.md has no key table for {section}"
    return set(re.findall(r"^\| `([a-z_]+)`", m.group(1), re.M))


@pytest.mark.parametrize("cls,section,exceptions", [
    (tune.TuneConfig, "top", {"search_alg": "search", "scheduler": "scheduler",
                              # Ray's deprecated option, refused in Python too
                              "chdir_to_trial_dir": "(python only)"}),
    (tune.RunConfig, "run", {"name": "(top) name", "failure_config": "failure", "checkpoint_config": "checkpoint",
                             "mlflow": "(top) mlflow", "storage_filesystem": "storage_options",
                             "security": "tls",
                             # a reporter's max_report_frequency is what progress_interval_s spells
                             "progress_reporter": "progress_interval_s",
                             # Ray's SyncConfig is accepted in Python and has no effect: nothing to spell
                             "sync_config": "(python only)",
                             # Ray's: a deprecated name refused with a pointer, an environment not ported, and
                             # Ray Train V2's logging level (Python's logging covers it in a sweep)
                             "local_dir": "(python only)", "worker_runtime_env": "(python only)",
                             "logging_config": "(python only)"}),
    (tune.FailureConfig, "failure", {
        # Ray Train V2's options, accepted and without effect here (docs/porting-from-ray.md)
        "controller_failure_limit": "(python only)", "relax_collectives_on_preemption": "(python only)",
        "preemption_grace_s": "(python only)"}),
    (tune.CheckpointConfig, "checkpoint", {}),
    (tune.MLflowConfig, "mlflow", {}),
    (tune.ScalingConfig, "scaling", {  # Ray's node labels and TPUs: not ported, refused when set
        "label_selector": "(python only)", "use_tpu": "(python only)", "topology": "(python only)"}),
])
def test_every_python_option_has_a_documented_spelling(cls, section, exceptions):
    documented = _spelled(section)
    for f in dataclasses.fields(cls):
        spelled = exceptions.get(f.name, f.name)
        if spelled == "(python only)":
            continue
        if spelled.startswith("(top) "):
            assert spelled[6:] in _spelled("top"), f"{cls.__name__}.{f.name}"
        else:
            assert spelled in documented, f"{cls.__name__}.{f.name} has no spelling in the {section} table"


@pytest.mark.parametrize("kind", sorted(SCHEDULERS))
def test_scheduler_keys_are_exactly_the_constructor_arguments(kind):
    cls_name, fields = SCHEDULERS[kind]
    if kind == "optuna_pruner":
        from tuneplat.search.optuna import OptunaPrunerScheduler as cls
        expected = set(inspect.signature(cls).parameters) - {"pruner"} | {"pruner", "pruner_args"}
    else:
        cls = getattr(schedulers, cls_name)
        expected = set(inspect.signature(cls).parameters)
    assert set(fields) == expected
    assert set(fields) <= _spelled(f"scheduler:{kind}") | {"metric", "mode", "time_attr"}


def test_every_domain_is_documented():
    assert set(DOMAINS) | {"grid_search", "sample_from", "const"} == _spelled("domains")


@pytest.mark.parametrize("kind,extra,cls", [
    ("hyperband", "max_t: 27, reduction_factor: 3", schedulers.HyperBandScheduler),
    ("median_stopping_rule", "grace_period: 2, min_samples_required: 2, time_attr: training_iteration",
     schedulers.MedianStoppingRule),
    ("async_hyperband", "max_t: 10", schedulers.AsyncHyperBandScheduler),
    ("fifo", "", schedulers.FIFOScheduler),
    ("pasha", "max_t: 27, reduction_factor: 3, epsilon: auto", schedulers.PASHAScheduler),
    ("asha", "max_t: 30, rung_levels: [1, 3, 10], cost_attr: time_total_s, metric: [a, b], mode: [min, max], "
             "mo_tiebreak: epsnet", schedulers.ASHAScheduler),
])
def test_scheduler_types(tmp_path, kind, extra, cls):
    s = sweep_from(tmp_path, f"trainable: examples.toy:learning_curve\nscheduler: {{type: {kind}{', ' + extra if extra else ''}}}\n")
    assert type(s.tune_config.scheduler) is cls


def test_mo_asha_and_oom_retry_from_a_sweep_file(tmp_path):
    s = sweep_from(tmp_path, "trainable: examples.toy:learning_curve\nmetric: [a, b]\nmode: [min, min]\n"
                             "scheduler: {type: asha, max_t: 9, rung_levels: [1, 3], mo_tiebreak: epsnet}\n"
                             "run: {failure: {oom_halve: train_loop_config.mb, oom_double: acc, max_oom_retries: 2}}\n")
    sch = s.tune_config.scheduler
    assert sch.rung_milestones() == [1, 3] and sch.mo_tiebreak == "epsnet"
    assert s.run_config.failure_config == tune.FailureConfig(oom_halve="train_loop_config.mb", oom_double="acc",
                                                             max_oom_retries=2)


def test_gpu_memory_amounts_and_auto_from_a_sweep_file(tmp_path):
    from tuneplat.execution._gpu_memory import is_auto

    s = sweep_from(tmp_path, "trainable: examples.toy:learning_curve\n"
                             "scaling: {resources_per_worker: {CPU: 1, GPU_memory: auto}}\n")
    assert is_auto(s.scaling_config.per_worker()["GPU_memory"])
    s = sweep_from(tmp_path, "trainable: examples.toy:learning_curve\n"
                             "scaling: {resources_per_worker: {CPU: 1, GPU_memory: 10GiB}}\n")
    assert s.scaling_config.per_worker()["GPU_memory"] == 10 * 2**30
    with pytest.raises(SweepFileError, match="GPU_memory may be an amount"):
        sweep_from(tmp_path, "trainable: examples.toy:learning_curve\n"
                             "scaling: {resources_per_worker: {CPU: 1, GPU_memory: lots}}\n")


def test_pbt_mutations_and_optuna_pruner(tmp_path):
    s = sweep_from(tmp_path, """
        trainable: examples.toy:pbt_toy
        scheduler:
          type: pbt
          perturbation_interval: 2
          perturbation_factors: [1.5, 0.5]
          hyperparam_mutations:
            lr: {loguniform: [1.0e-4, 1]}
            opt: [sgd, adam]
            nested: {m: {uniform: [0, 1]}}
        """)
    pbt = s.tune_config.scheduler
    assert isinstance(pbt, schedulers.PopulationBasedTraining)
    s = sweep_from(tmp_path, """
        trainable: examples.toy:learning_curve
        scheduler: {type: optuna_pruner, pruner: median, pruner_args: {n_startup_trials: 2}}
        """)
    import optuna

    assert isinstance(s.tune_config.scheduler.pruner, optuna.pruners.MedianPruner)


@pytest.mark.parametrize("algo,sampler", [("tpe", "TPESampler"), ("nsgaii", "NSGAIISampler"), ("qmc", "QMCSampler")])
def test_optuna_algorithms(tmp_path, algo, sampler):
    from tuneplat.search.optuna import OptunaSearch

    s = sweep_from(tmp_path, f"""
        trainable: examples.toy:learning_curve
        metric: loss
        mode: min
        param_space: {{lr: {{uniform: [0, 1]}}}}
        search: {{algorithm: {algo}, seed: 1, points_to_evaluate: [{{lr: 0.5}}]}}
        """)
    searcher = s.tune_config.search_alg
    assert isinstance(searcher, OptunaSearch)
    searcher.set_search_properties("loss", "min", s.param_space, num_samples=2, seed=None)
    assert searcher.suggest("t0") == {"lr": 0.5}  # points_to_evaluate first
    assert type(searcher._study.sampler).__name__ == sampler


def test_overrides_env_and_shorthands(tmp_path):
    text = """
        trainable: examples.toy:learning_curve
        name: "run-${env:USER_TAG}"
        num_samples: ${env:N}
        param_space: {lr: {uniform: [0, 1]}}
        run: {max_failures: 3, storage_path: "$${env:LITERAL}"}
        """
    s = sweep_from(tmp_path, text, overrides=["scheduler.type=asha", "scheduler.max_t=4", "param_space.lr.uniform=[0, 2]",
                                               "run.checkpoint.num_to_keep=1"],
                   environ={"N": "5", "USER_TAG": "alice"})
    assert s.tune_config.num_samples == 5 and s.run_config.name == "run-alice"
    assert s.run_config.storage_path == "${env:LITERAL}"
    assert s.tune_config.scheduler.max_t == 4 and s.param_space["lr"].upper == 2
    assert s.run_config.failure_config.max_failures == 3 and s.run_config.checkpoint_config.num_to_keep == 1
    assert "${env:N}" in str(s.data["num_samples"])  # the saved document keeps the reference, not the value
    with pytest.raises(SweepFileError, match=r"run.max_failures: given twice"):
        sweep_from(tmp_path, "trainable: examples.toy:learning_curve\nrun: {max_failures: 1, failure: {max_failures: 2}}\n")


def test_toml_matches_yaml(tmp_path):
    y = load_sweep(os.path.join(ROOT, "examples", "toy_asha.yaml"))
    t = load_sweep(os.path.join(ROOT, "examples", "toy_asha.toml"))
    assert {k: repr(v) for k, v in y.param_space.items()} == {k: repr(v) for k, v in t.param_space.items()}
    assert (t.tune_config.metric, t.tune_config.mode, t.run_config.stop) == ("loss", "min", {"training_iteration": 9})
    assert t.run_config.failure_config.max_failures == 1


def test_toml_positions_inside_inline_tables_and_arrays_of_tables(tmp_path):
    with pytest.raises(SweepFileError) as e:
        sweep_from(tmp_path, """\
            trainable = "examples.toy:learning_curve"
            [search]
            algorithm = "random"
            [[search.points_to_evaluate]]
            lr = 0.1
            [run]
            checkpoint = { num_to_keep = 0 }
            """, name="s.toml")
    assert str(e.value).endswith("s.toml:7:30: run.checkpoint.num_to_keep: got 0 (an int); expected an int >= 1 or null (keep all)")


def test_file_path_trainable_travels_by_value(tmp_path):
    import pickle

    (tmp_path / "mytrain.py").write_text("def train(config):\n    return config['x'] * 2\n")
    s = sweep_from(tmp_path, f"trainable: {tmp_path}/mytrain.py:train\n")
    blob = pickle.dumps(s.trainable)  # standard pickle, as Dask does first
    assert b"mytrain" not in blob.split(b"ShippedFunction")[0]
    assert pickle.loads(blob)({"x": 21}) == 42
    assert s.trainable.__name__ == "train"


# ---------------------------------------------------------------------------------------------- W&B

WANDB = """
program: train.py:ignored
trainable: examples.toy:learning_curve
method: {method}
name: from-wandb
project: proj
metric: {{name: val_loss, goal: maximize}}
run_cap: 6
parameters:
  lr: {{distribution: log_uniform_values, min: 0.0001, max: 0.1}}
  lr_exp: {{distribution: log_uniform, min: -9.21, max: -2.3}}
  drop: {{min: 0.0, max: 0.5}}
  layers: {{min: 1, max: 3}}
  q: {{distribution: q_uniform, min: 0, max: 10, q: 2}}
  n: {{distribution: normal, mu: 1, sigma: 2}}
  act: {{values: [relu, tanh]}}
  epochs: {{value: 5}}
  opt:
    parameters:
      momentum: {{values: [0.9, 0.99]}}
early_terminate: {{type: hyperband, min_iter: 2, eta: 3}}
"""


def test_wandb_translation(tmp_path):
    s = sweep_from(tmp_path, WANDB.format(method="random"))
    assert s.translated_from == "wandb"
    ps = s.param_space
    assert repr(ps["lr"]) == repr(tune.loguniform(0.0001, 0.1))
    assert math.isclose(ps["lr_exp"].lower, math.exp(-9.21)) and math.isclose(ps["lr_exp"].upper, math.exp(-2.3))
    assert repr(ps["drop"]) == repr(tune.uniform(0.0, 0.5))
    assert repr(ps["layers"]) == repr(tune.randint(1, 4))  # W&B's max is inclusive
    assert repr(ps["q"]) == repr(tune.quniform(0, 10, 2)) and repr(ps["n"]) == repr(tune.randn(1, 2))
    assert ps["act"].categories == ["relu", "tanh"] and ps["epochs"] == 5
    assert ps["opt"]["momentum"].categories == [0.9, 0.99]
    tc = s.tune_config
    assert (tc.metric, tc.mode, tc.num_samples) == ("val_loss", "max", 6)
    assert isinstance(tc.search_alg, BasicVariantGenerator)
    asha = tc.scheduler
    assert isinstance(asha, schedulers.ASHAScheduler) and (asha.grace_period, asha.reduction_factor) == (2, 3)
    assert s.run_config.name == "from-wandb" and s.run_config.mlflow.experiment_name == "proj"
    assert any("program" in n for n in s.notes)

    from tuneplat.search.optuna import OptunaSearch

    assert isinstance(sweep_from(tmp_path, WANDB.format(method="bayes")).tune_config.search_alg, OptunaSearch)


def test_wandb_grid(tmp_path):
    s = sweep_from(tmp_path, """
        trainable: examples.toy:learning_curve
        method: grid
        parameters:
          width: {values: [16, 64]}
          layers: {min: 1, max: 3}
          lr: {value: 0.01}
        """)
    assert s.param_space == {"width": {"grid_search": [16, 64]}, "layers": {"grid_search": [1, 2, 3]}, "lr": 0.01}
    assert s.tune_config.num_samples == 1


@pytest.mark.parametrize("params,expected", [
    ("lr: {distribution: beta, a: 1, b: 2}",
     "s.yaml:5:22: parameters.lr.distribution: distribution 'beta' is not supported: no tuneplat domain; use uniform "
     "or write a tuneplat sweep file with sample_from"),
    ("lr: {min: 0.1, max: 1, q: 2}",
     "s.yaml:5:26: parameters.lr.q: not used by distribution 'uniform'; expected only: distribution, max, min"),
    ("lr: {distribution: log_uniform_values, min: 1, max: 0.1}",
     "s.yaml:5:7: parameters.lr: bad domain: lower=1 must be < upper=0.1; expected {loguniform: [lower, upper]} or "
     "{loguniform: [lower, upper, base]}"),
    ("lr: {mu: 1}", "s.yaml:5:7: parameters.lr: no distribution; expected {values: [...]}, {value: x}, {min: a, max: b} "
                    "or a `distribution` key"),
])
def test_wandb_errors_point_into_the_wandb_file(tmp_path, params, expected):
    with pytest.raises(SweepFileError) as e:
        sweep_from(tmp_path, f"trainable: examples.toy:learning_curve\nmethod: random\nmetric: {{name: loss}}\nparameters:\n  {params}\n")
    assert str(e.value).endswith(expected), str(e.value)


def test_wandb_needs_a_function(tmp_path):
    with pytest.raises(SweepFileError) as e:
        sweep_from(tmp_path, "program: train.py\nmethod: random\nparameters: {lr: {values: [1]}}\n")
    assert str(e.value).endswith(
        "s.yaml:1:1: missing required key 'trainable'; program: 'train.py' is a script W&B runs as a process; "
        "expected trainable: 'module:function' or 'path/to/file.py:function' naming a function that calls tuneplat.report()")
    s = sweep_from(tmp_path, "program: examples.toy:learning_curve\nmethod: random\nparameters: {lr: {values: [1]}}\n")
    assert s.trainable.__name__ == "learning_curve"


def test_storage_options_build_the_remote_filesystem(tmp_path):
    sweep = sweep_from(tmp_path, """\
        trainable: examples.toy:learning_curve
        run:
          storage_path: s3://team-bucket/results
          storage_options: {endpoint_url: "http://127.0.0.1:9000", key: "${env:S3_KEY}", secret: s}
        """, environ={"S3_KEY": "k123"})
    fs = sweep.run_config.storage_filesystem
    assert type(fs).__name__ == "S3FileSystem" and fs.key == "k123" and fs.endpoint_url == "http://127.0.0.1:9000"
    with pytest.raises(SweepFileError) as e:
        sweep_from(tmp_path, """\
            trainable: examples.toy:learning_curve
            run: {storage_path: ./res, storage_options: {key: k}}
            """)
    assert "s.yaml:2" in str(e.value) and "run.storage_options" in str(e.value)
    assert "remote run.storage_path" in str(e.value)
    with pytest.raises(SweepFileError) as e:
        sweep_from(tmp_path, """\
            trainable: examples.toy:learning_curve
            run: {storage_path: "nosuchproto://b/r", storage_options: {key: k}}
            """)
    assert "fsspec could not make the nosuchproto:// filesystem" in str(e.value)


@pytest.mark.parametrize("value,expected", [("true", True), ("trial.log", "trial.log"), ("[out.log, err.log]", ["out.log", "err.log"])])
def test_log_to_file_takes_rays_three_forms(tmp_path, value, expected):
    s = sweep_from(tmp_path, f"trainable: examples.toy:learning_curve\nmetric: loss\nmode: min\nrun:\n  log_to_file: {value}\n")
    assert s.run_config.log_to_file == expected
    with pytest.raises(SweepFileError, match="log_to_file"):
        sweep_from(tmp_path, "trainable: examples.toy:learning_curve\nrun:\n  log_to_file: [only.log]\n")
