"""Corners of Ray 2.60's Tune/Train API that its docs use, with only the imports changed (issue 25)."""

from __future__ import annotations

import logging
import random

import port_trainables as P
import pytest

import tuneplat as tune
from tuneplat import train
from tuneplat.train import FailureConfig, RunConfig


def _run(dask_client, storage, trainable, space, **rc):
    rc.setdefault("verbose", 0)
    return tune.Tuner(trainable, param_space=space, tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=RunConfig(storage_path=storage, mlflow=False, **rc), client=dask_client).fit()


# -- search spaces -------------------------------------------------------------------------------------------------

def test_sample_from_reads_the_config_as_a_dict_and_as_spec_config():
    from tuneplat.search._space import resolve

    space = {"alpha": tune.uniform(1, 2),
             "beta": tune.sample_from(lambda config: config["alpha"] * 0.01),  # Ray 2.x's API page
             "gamma": tune.sample_from(lambda spec: spec.config.alpha * 2),  # the older guides
             "delta": tune.sample_from(lambda spec: spec["config"]["alpha"] + 1),
             "eps": tune.sample_from(lambda _: 7)}
    config = resolve(space, {}, random.Random(0))
    assert config["beta"] == pytest.approx(config["alpha"] * 0.01)
    assert config["gamma"] == pytest.approx(config["alpha"] * 2)
    assert config["delta"] == pytest.approx(config["alpha"] + 1) and config["eps"] == 7


def test_sample_from_failure_names_its_key():
    from tuneplat.search._space import resolve

    with pytest.raises(tune.SearchSpaceError, match=r"param_space\['b'\].*KeyError: 'nope'"):
        resolve({"b": tune.sample_from(lambda config: config["nope"])}, {}, random.Random(0))


def test_randn_with_a_list_is_refused_at_definition_naming_the_key():
    # the mistake in Ray's own search-space guide: tune.randn([0, 1, 2])
    with pytest.raises(tune.SearchSpaceError, match=r"param_space\['y'\].*mean=\[0, 1, 2\] must be a finite number"):
        tune.Tuner(P.objective, param_space={"x": tune.choice([0, 1, 2]), "y": tune.randn([0, 1, 2])})


# -- names -------------------------------------------------------------------------------------------------------

def test_optuna_search_save_restore_and_restore_from_dir_warm_start(tmp_path):
    from tuneplat.tune.search.optuna import OptunaSearch

    first = OptunaSearch(metric="loss", mode="min", seed=0)
    first.set_search_properties(None, None, {"x": tune.uniform(0, 1)}, experiment_dir=str(tmp_path / "exp"))
    for i in range(3):
        first.on_trial_complete(str(i), {"loss": first.suggest(str(i))["x"]})
    first.save(str(tmp_path / "state.json"))
    for warm in (lambda s: s.restore(str(tmp_path / "state.json")), lambda s: s.restore_from_dir(str(tmp_path / "exp"))):
        second = OptunaSearch(metric="loss", mode="min", seed=1)
        warm(second)
        second.set_search_properties(None, None, {"x": tune.uniform(0, 1)})
        assert len(second.study.trials) == 3 and second.study.best_value == first.study.best_value
    (tmp_path / "bad.pkl").write_bytes(b"\x80\x04not json")
    with pytest.raises(ValueError, match="not a file written by OptunaSearch.save"):
        OptunaSearch().restore(str(tmp_path / "bad.pkl"))
    with pytest.raises(FileNotFoundError, match="optuna_journal.log"):
        OptunaSearch().restore_from_dir(str(tmp_path))


def test_repeater_repeats_each_config_and_tells_the_searcher_the_mean():
    from tuneplat.tune.search import BasicVariantGenerator, Repeater, Searcher

    told = []

    class Spy(BasicVariantGenerator):
        def on_trial_complete(self, trial_id, result=None, error=False, **info):
            told.append((trial_id, result, error))

    rep = Repeater(Spy(random_state=0), repeat=3)
    assert isinstance(rep, Searcher)
    rep.set_search_properties("loss", "min", {"x": tune.uniform(0, 1)}, num_samples=6)
    configs = [rep.suggest(f"t{i}") for i in range(6)]
    assert [c["__trial_index__"] for c in configs] == [0, 1, 2, 0, 1, 2]
    assert configs[0]["x"] == configs[2]["x"] != configs[3]["x"]
    for i, loss in enumerate([1.0, 2.0, 6.0]):
        rep.on_trial_complete(f"t{i}", {"loss": loss})
    rep.on_trial_complete("t3", None, error=True)
    rep.on_trial_complete("t4", {"loss": 1.0})
    rep.on_trial_complete("t5", {"loss": 3.0})
    assert told == [("t0", {"loss": 3.0}, False), ("t3", {"loss": 2.0}, False)]
    assert rep.suggest("t6") == Searcher.FINISHED
    with pytest.raises(ValueError, match="`repeat` is 0"):
        Repeater(BasicVariantGenerator(), repeat=0)


def test_validate_save_restore_checks_a_trainable_class():
    from tuneplat.tune.utils import validate_save_restore

    class Counter(tune.Trainable):
        def setup(self, config):
            self.n = 0

        def step(self):
            self.n += 1
            return {"n": self.n}

        def save_checkpoint(self, checkpoint_dir):
            return {"n": self.n}

        def load_checkpoint(self, checkpoint):
            self.n = checkpoint["n"]

    assert validate_save_restore(Counter) is True
    with pytest.raises(TypeError, match="Trainable subclass"):
        validate_save_restore(P.objective)


def test_reporter_names_and_module_paths():
    from tuneplat.tune.experiment.trial import Trial

    from tuneplat.tune import CLIReporter, ProgressReporter

    reporter = CLIReporter(metric_columns=["loss"])
    reporter.add_metric_column("acc")
    reporter.add_metric_column("f1", "F1 score")
    reporter.add_parameter_column("lr")
    assert reporter.metric_columns == {"loss": "loss", "acc": "acc", "f1": "F1 score"}
    assert reporter.parameter_columns == ["lr"] and isinstance(reporter, ProgressReporter)
    with pytest.raises(ValueError, match="already shown"):
        reporter.add_metric_column("acc")
    assert Trial is tune.experiment.Trial


def test_ray_train_v2_failure_preemption_and_upload_mode_names():
    assert FailureConfig().max_preemption_failures == -1  # Ray V2's default: preemptions retry without limit
    assert FailureConfig(max_preemption_failures=2).max_preemption_failures == 2
    with pytest.raises(ValueError, match="max_preemption_failures"):
        FailureConfig(max_preemption_failures=-2)
    assert train.get_preemption_info() is None  # outside a trial, and no notice
    assert {m.name for m in train.CheckpointUploadMode} == {"SYNC", "ASYNC", "NO_UPLOAD"}
    with pytest.raises(ValueError, match="checkpoint_upload_mode"):
        train.report({"a": 1}, checkpoint_upload_mode="LATER")


def test_get_context_outside_a_trial_has_no_trial_id():
    ctx = tune.get_context()
    assert ctx.get_trial_id() is None and ctx.get_trial_dir() is None
    assert (ctx.get_world_rank(), ctx.get_world_size()) == (0, 1)


# -- Trial objects, reporters ------------------------------------------------------------------------------------

class KeyedByTrial(tune.Callback):
    """Ray's LoggerCallback docs example keys a dict by trial."""

    def __init__(self):
        self.seen = {}

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.seen.setdefault(trial, []).append(result["loss"])


class CountingReporter(tune.ProgressReporter):
    def __init__(self):
        self.calls = []

    def should_report(self, trials, done=False):
        return True

    def report(self, trials, done, *sys_info):
        self.calls.append((len(trials), done))


def test_trials_key_dicts_and_a_custom_progress_reporter_is_called(dask_client, storage):
    keyed, reporter = KeyedByTrial(), CountingReporter()
    results = _run(dask_client, storage, P.objective, {"x": tune.grid_search([1, 2])}, callbacks=[keyed],
                   progress_reporter=reporter)
    assert results.num_errors == 0
    assert sorted(t.trial_id for t in keyed.seen) == sorted(r.trial_id for r in results)
    assert all(len(v) == 4 for v in keyed.seen.values())
    assert reporter.calls[-1] == (2, True) and len(reporter.calls) > 2


# -- sizing and attaching ----------------------------------------------------------------------------------------

def test_num_cpus_environment_overrides_init(monkeypatch):
    from tuneplat._init import local_cpus

    tune.init(num_cpus=2)
    try:
        assert local_cpus() == 2
        monkeypatch.setenv("TUNEPLAT_NUM_CPUS", "12")
        assert local_cpus() == 12
        monkeypatch.setenv("TUNEPLAT_NUM_CPUS", "many")
        with pytest.raises(ValueError, match="TUNEPLAT_NUM_CPUS='many'"):
            local_cpus()
    finally:
        tune.shutdown()


def test_init_auto_attaches_to_the_dask_scheduler_address_or_says_it_starts_one(monkeypatch, caplog):
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:8786")
    try:
        assert tune.init(address="auto")["address"] == "tcp://127.0.0.1:8786"
    finally:
        tune.shutdown()
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS")
    with caplog.at_level(logging.WARNING, logger="tuneplat"):
        try:
            assert tune.init(address="auto")["address"] is None
        finally:
            tune.shutdown()
    assert "starts a local cluster" in caplog.text


def test_trainer_search_space_at_the_top_level_is_refused_with_the_fix():
    trainer = tune.TorchTrainer(P.objective, train_loop_config={"steps": 2})
    with pytest.raises(ValueError, match=r"under 'train_loop_config': param_space=\{'train_loop_config': "
                                         r"\{'lr': loguniform\(0.0001, 0.1\)"):
        tune.Tuner(trainer, param_space={"lr": tune.loguniform(1e-4, 1e-1)})


# -- each trial's working directory and output files -------------------------------------------------------------

def test_trials_run_in_their_folder_and_log_to_file_captures_their_output(dask_client, storage):
    import os

    results = _run(dask_client, storage, P.writes_relative, {"x": tune.grid_search([1, 2])}, log_to_file=True)
    assert results.num_errors == 0
    for r in results:
        assert os.path.samefile(r.metrics["cwd"], r.path) and r.metrics["orig"] == os.getcwd()
        with open(os.path.join(r.path, "out.txt")) as f:  # no collision: each trial wrote its own
            assert f.read() == str(r.config["x"])
        with open(os.path.join(r.path, "stdout")) as f:
            assert f"hello from trial x={r.config['x']}" in f.read()
        with open(os.path.join(r.path, "stderr")) as f:
            assert f"a warning from x={r.config['x']}" in f.read()


def test_ray_chdir_variable_turns_it_off_and_log_to_file_takes_a_pair(dask_client, storage, monkeypatch):
    import os

    monkeypatch.setenv("RAY_CHDIR_TO_TRIAL_DIR", "0")
    results = _run(dask_client, storage, P.writes_relative, {"x": 3, "write": False}, log_to_file=("out.log", "err.log"))
    r = results[0]
    assert not os.path.samefile(r.metrics["cwd"], r.path) and r.metrics["orig"] is None
    assert "hello from trial x=3" in open(os.path.join(r.path, "out.log")).read()
    assert "a warning from x=3" in open(os.path.join(r.path, "err.log")).read()


def test_log_to_file_forms():
    from tuneplat.execution._trial_io import log_files

    assert log_files(True) == ("stdout", "stderr") and log_files(False) == (None, None)
    assert log_files("all.log") == ("all.log", "all.log") and log_files(["o", "e"]) == ("o", "e")
    with pytest.raises(ValueError, match="log_to_file"):
        tune.Tuner(P.objective, run_config=RunConfig(log_to_file=("only-one",)))


# -- Ray Train V2: a TorchTrainer fitted inside each Tune trial --------------------------------------------------

def test_train_v2_driver_function_fits_a_trainer_per_trial_beside_it(dask_client, storage):
    """Two trials on two worker slots: each driver holds one and its ranks need another, so one trial goes
    back to the queue until the other's group has run (no deadlock, no failure)."""
    import os

    results = _run(dask_client, storage, P.train_driver_fn,
                   {"train_loop_config": {"lr": tune.grid_search([1e-3, 3e-4])}}, verbose=1)
    assert results.num_errors == 0 and results.num_terminated == 2
    for r in results:
        history = r.metrics_dataframe
        reported = history.dropna(subset=["checkpoint_path"])  # what TuneReportCallback passed on
        assert list(reported["loss"]) == pytest.approx([2 * r.config["train_loop_config"]["lr"],
                                                         r.config["train_loop_config"]["lr"]])
        assert all(os.path.isdir(p) for p in reported["checkpoint_path"])  # the Trainer's checkpoints
        assert (reported["rank_pid"] != r.metrics["driver_pid"]).all()  # ranks ran beside the driver
        inner_run = os.path.dirname(r.metrics["inner_path"])  # the Trainer's run (RunConfig(name=...)) ...
        assert os.path.basename(inner_run) == f"train-trial_id={r.trial_id}"
        assert inner_run.startswith(r.path)  # ... in the trial's folder (its working directory)


def test_train_v2_trainer_that_cannot_fit_beside_its_trial_says_how_to_size(dask_client, storage):
    results = _run(dask_client, storage, P.train_driver_fn, {"num_workers": 2, "train_loop_config": {"lr": 0.1}})
    assert results.num_errors == 1
    assert "TUNEPLAT_NUM_CPUS=3" in str(results[0].error) and "needs 2 rank(s)" in str(results[0].error)


def test_train_v2_retried_trial_continues_its_trainer_run_from_its_checkpoint(dask_client, storage):
    """Ray's guide: trial-level FailureConfig re-launches the driver; the Train run of the same name continues."""
    results = _run(dask_client, storage, P.ft_driver_fn, {}, failure_config=FailureConfig(max_failures=1))
    r = results[0]
    assert results.num_errors == 0 and r.metrics["epoch"] == 2
    # the retried driver's Trainer resumed after epoch 0 (its checkpoint), not from scratch
    assert list(r.metrics_dataframe["epoch"]) == [1, 2] and r.metrics["start"] == 1
