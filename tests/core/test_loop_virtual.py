"""The tuner's loop through the virtual-time executor: every failure path, in milliseconds, without Dask."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.core import ExperimentLock, ExperimentLockedError
from tuneplat.core._journal import JournalError
from tuneplat.schedulers import ASHAScheduler, FIFOScheduler, PopulationBasedTraining
from tuneplat.testing import HANG, VirtualTimeExecutor


def curve(config):
    """loss falls towards config["floor"]; 10 iterations of 1 virtual second each."""
    for step in range(1, 11):
        yield {"loss": config["floor"] + 1.0 / step}


def hangs_after_two(config):
    yield {"loss": 1.0}
    yield {"loss": 0.5}
    yield HANG  # one long epoch, or a loop that heartbeats but never reports


def fails_once_then_works(config):
    marker = config["marker"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        yield {"loss": 1.0}
        raise RuntimeError("first attempt crashes")
    yield from curve({"floor": 0.0})


def _tuner(storage, fn, space, *, slots=2, name="exp", tc=None, **rc):
    return tune.Tuner(fn, param_space=space,
                      tune_config=tc or tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False, **rc),
                      executor=VirtualTimeExecutor(num_slots=slots))


def _events(grid):
    return read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))


def test_a_whole_sweep_runs_in_virtual_time_with_searcher_scheduler_and_journal(storage):
    asha = ASHAScheduler(max_t=10, grace_period=1, reduction_factor=2)
    grid = _tuner(storage, curve, {"floor": tune.grid_search([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])},
                  tc=tune.TuneConfig(metric="loss", mode="min", scheduler=asha)).fit()
    assert len(grid) == 8 and grid.num_errors == 0
    assert grid.get_best_result().config["floor"] == 0.0
    iterations = [r.metrics["training_iteration"] for r in grid]
    assert max(iterations) == 10 and min(iterations) < 10  # ASHA stopped some early
    events = _events(grid)
    stops = [e for e in events if e["event"] == "decision" and e["decision"] == "STOP"]
    assert stops and events[-1] == {**events[-1], "event": "experiment_end", "status": "finished"}


def test_an_exception_in_the_loop_ends_the_experiment_as_errored_and_restorable(storage):
    class Boom(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            if result["training_iteration"] == 3:
                raise ValueError("a user callback is broken")

    tuner = _tuner(storage, curve, {"floor": tune.grid_search([0.0, 0.5, 1.0])}, callbacks=[Boom()])
    with pytest.raises(tune.TuneError, match="ValueError: a user callback is broken") as info:
        tuner.fit()
    assert "Tuner.restore" in str(info.value)
    path = os.path.join(storage, "exp")
    end = read_journal(os.path.join(path, "journal.jsonl"))[-1]
    assert end["event"] == "experiment_end" and end["status"] == "error"
    assert "a user callback is broken" in end["error"] and "Traceback" in end["traceback"]
    # nothing was recorded as finished: the unfinished trials resume
    restored = tune.Tuner.restore(path, curve, executor=VirtualTimeExecutor(num_slots=2),
                                  run_config=tune.RunConfig(name="exp", storage_path=storage, verbose=0, mlflow=False))
    grid = restored.fit()
    assert grid.num_terminated == 3 and all(r.metrics["training_iteration"] == 10 for r in grid)


def test_a_scheduler_that_raises_ends_the_experiment_as_errored(storage):
    class Broken(FIFOScheduler):
        def on_trial_result(self, trial_id, result):
            raise ValueError("bad scheduler state")

    tuner = _tuner(storage, curve, {"floor": 0.0}, tc=tune.TuneConfig(metric="loss", mode="min", scheduler=Broken()))
    with pytest.raises(tune.TuneError, match="bad scheduler state"):
        tuner.fit()
    assert read_journal(os.path.join(storage, "exp", "journal.jsonl"))[-1]["status"] == "error"


def test_a_full_disk_while_the_journal_writes_ends_cleanly(storage, monkeypatch):
    from tuneplat.core._journal import Journal

    real_append, real_sync = Journal.append_line, Journal.sync
    calls = {"n": 0}

    def failing_append(self, line):
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(28, "No space left on device")
        return real_append(self, line)

    def failing_sync(self, force=False):  # the disk is still full at the end: closing must not raise again
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Journal, "append_line", failing_append)
    executor = VirtualTimeExecutor(num_slots=2)
    tuner = tune.Tuner(curve, param_space={"floor": tune.grid_search([0.0, 0.5])},
                       tune_config=tune.TuneConfig(metric="loss", mode="min"),
                       run_config=tune.RunConfig(name="exp", storage_path=storage, verbose=0, mlflow=False),
                       executor=executor)
    monkeypatch.setattr(Journal, "close", lambda self: (failing_sync(self), real_sync(self)))
    with pytest.raises(tune.TuneError, match="No space left on device"):
        tuner.fit()
    assert executor.running() == 0  # every trial was ended, and close() ran after the error


def test_time_budget_ends_a_trial_that_never_reports_again(storage, monkeypatch):
    monkeypatch.setenv("TUNEPLAT_STOP_GRACE_S", "2")
    tuner = _tuner(storage, hangs_after_two, {"x": tune.grid_search([1, 2])},
                   tc=tune.TuneConfig(metric="loss", mode="min", time_budget_s=10))
    grid = tuner.fit()
    assert [r.status for r in grid] == ["TERMINATED", "TERMINATED"]
    assert all("time budget" in (r.stop_reason or "") for r in grid)
    assert all(r.metrics["training_iteration"] == 2 for r in grid)
    events = _events(grid)
    assert any(e["event"] == "time_budget_reached" for e in events)


def test_a_retried_trial_goes_on_from_its_checkpoint(storage, tmp_path):
    grid = _tuner(storage, fails_once_then_works, {"marker": str(tmp_path / "m")},
                  failure_config=tune.FailureConfig(max_failures=1)).fit()
    (r,) = grid
    assert r.status == "TERMINATED" and r.error is None
    events = _events(grid)
    assert [e["retry"] for e in events if e["event"] == "trial_failure"] == [True]
    starts = [e for e in events if e["event"] == "trial_start"]
    assert [s["attempt"] for s in starts] == [0, 1] and starts[1]["start_iteration"] == 1


def test_a_misspelt_metric_fails_fast_with_a_did_you_mean_and_no_retries(storage):
    tuner = _tuner(storage, curve, {"floor": tune.grid_search([0.0, 0.1, 0.2, 0.3])}, slots=1,
                   tc=tune.TuneConfig(metric="los", mode="min"), failure_config=tune.FailureConfig(max_failures=3))
    grid = tuner.fit()
    errors = [r for r in grid if r.error is not None]
    assert len(errors) == 1 and "did you mean 'loss'" in str(errors[0].error)
    events = _events(grid)
    assert [e["retry"] for e in events if e["event"] == "trial_failure"] == [False]
    assert sum(e["event"] == "trial_start" for e in events) == 1  # nothing else started
    assert events[-1]["status"] == "failed"


def test_pbt_clones_go_on_from_the_source_checkpoints_iteration(storage):
    def pbt_curve(config):
        for step in range(1, 31):
            yield {"score": config["lr"] * step}

    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=5,
                                  hyperparam_mutations={"lr": [0.1, 0.5, 1.0, 2.0]}, seed=1)
    grid = _tuner(storage, pbt_curve, {"lr": tune.grid_search([0.1, 0.5, 1.0, 2.0])}, slots=4,
                  tc=tune.TuneConfig(metric="score", mode="max", scheduler=pbt)).fit()
    exploits = [e for e in _events(grid) if e["event"] == "exploit"]
    assert exploits
    for r in grid:
        its = list(r.metrics_dataframe["training_iteration"])
        for ev in r.lineage:
            # the result after the exploit continues the source's clock
            assert ev["from_iteration"] + 1 in its
    # the scheduler and the results agree: exploits happen once per perturbation interval of a trial's clock
    per_trial: dict[str, list[int]] = {}
    for ev in exploits:
        per_trial.setdefault(ev["trial_id"], []).append(ev["iteration"])
    for marks in per_trial.values():
        assert all(b - a >= 1 for a, b in zip(marks, marks[1:]))
        assert len(marks) <= 30 // 5


def test_a_second_tuner_on_a_live_experiment_is_refused(storage):
    path = os.path.join(storage, "exp")
    os.makedirs(path)
    with ExperimentLock(path):
        with pytest.raises(ExperimentLockedError, match=r"in use by process \d+ on .*RunConfig\(name=\.\.\.\)"):
            _tuner(storage, curve, {"floor": 0.0}).fit()
    assert not os.path.exists(os.path.join(path, "journal.jsonl"))  # the live experiment's files were not touched
    assert _tuner(storage, curve, {"floor": 0.0}).fit().num_terminated == 1  # free again once the owner is gone


def test_a_crashed_owner_does_not_leave_the_lock_stuck(storage):
    path = os.path.join(storage, "exp")
    os.makedirs(path)
    code = ("import sys; from tuneplat.core import ExperimentLock; l = ExperimentLock(sys.argv[1]); l.acquire(); "
            "print('locked', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=os.getcwd(), env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(ExperimentLockedError, match=f"process {proc.pid}"):
            ExperimentLock(path).acquire()
    finally:
        proc.kill()
        proc.wait()
    lock = ExperimentLock(path)
    lock.acquire()  # the kernel dropped the dead owner's lock
    lock.release()


@pytest.mark.parametrize("line, problem", [
    ("[1, 2, 3]", "a JSON list where an event object was expected"),
    ('{"event": "result", "trial_id": "x_00000"}', "a 'result' event without its 'result'"),
    ('{"event": "trial_end", "trial_id": "x_00000", "status": "DONE"}', "status 'DONE'"),
    ('{"no_event": 1}', 'without its "event" name'),
])
def test_damaged_but_parseable_journal_lines_are_named(storage, line, problem):
    grid = _tuner(storage, curve, {"floor": 0.0}).fit()
    journal = os.path.join(grid.experiment_path, "journal.jsonl")
    lines = open(journal).read().splitlines()
    lines.insert(3, line)
    with open(journal, "w") as f:
        f.write("\n".join(lines) + "\n")
    assert not tune.Tuner.can_restore(grid.experiment_path)
    with pytest.raises(JournalError, match=f"journal.jsonl:4: damaged journal line: .*{re.escape(problem)}"):
        tune.Tuner.restore(grid.experiment_path, curve)


@pytest.mark.parametrize("content", [b"", b"garbage, not a pickle", b"\x80\x05\x95\x10\x00\x00"])
def test_a_damaged_tuner_pkl_is_named_and_restore_can_go_on_without_it(storage, content):
    grid = _tuner(storage, curve, {"floor": 0.0}).fit()
    with open(os.path.join(grid.experiment_path, "tuner.pkl"), "wb") as f:
        f.write(content)
    assert not tune.Tuner.can_restore(grid.experiment_path)
    with pytest.raises(RuntimeError, match=r"tuner.pkl is (damaged|refused): .*pass param_space=, tune_config= and run_config="):
        tune.Tuner.restore(grid.experiment_path, curve)
    restored = tune.Tuner.restore(grid.experiment_path, curve, param_space={"floor": 0.0},
                                  tune_config=tune.TuneConfig(metric="loss", mode="min"),
                                  run_config=tune.RunConfig(name="exp", storage_path=storage, verbose=0, mlflow=False),
                                  executor=VirtualTimeExecutor())
    assert restored.fit().num_terminated == 1


def test_simulate_replays_a_virtual_experiment_and_reports_figures(storage):
    asha = dict(max_t=10, grace_period=1, reduction_factor=3)
    space = {"floor": tune.grid_search([round(0.1 * i, 1) for i in range(9)])}
    grid = _tuner(storage, curve, space, slots=1,
                  tc=tune.TuneConfig(metric="loss", mode="min", scheduler=ASHAScheduler(**asha))).fit()
    from tuneplat.testing import simulate

    same = simulate(grid.experiment_path, "asha", asha)
    assert same.stops == same.recorded_stops and same.stops
    assert same.simulated.iterations == same.recorded.iterations
    fifo = simulate(grid.experiment_path, "fifo")
    assert fifo.simulated.iterations == same.recorded.iterations  # FIFO cannot go past the recorded curves
    # every curve ASHA cut short ends there (a lower bound); the one that reached max_t=10 is whole
    cut = [tid for tid, it in same.recorded_stops.items() if it < 10]
    assert fifo.truncated == len(cut) == len(same.recorded_stops) - 1
    assert json.loads(json.dumps(same.to_dict(), default=str))["scheduler"] == "asha"


def test_a_slow_remote_commit_never_delays_another_trials_decisions(storage):
    """Remote stores commit on I/O threads: while one trial's commit hangs, the other trial's results are decided;
    the slow trial's own results wait behind its commit and are recorded in order, none lost or doubled."""
    import threading

    from tuneplat.testing._virtual import VirtualCheckpointStore

    gate = threading.Event()
    blocked: list[str] = []

    class SlowStore(VirtualCheckpointStore):
        slow = True

        def commit(self, trial_path, name):
            if not blocked:
                blocked.append(trial_path)
                assert gate.wait(60), "the loop waited on this commit instead of deciding the other trial's results"
            return super().commit(trial_path, name)

    class OpensGate(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result):
            if blocked and os.path.basename(blocked[0]) != os.path.basename(trial.path) \
                    and result["training_iteration"] >= 3:
                gate.set()

    ex = VirtualTimeExecutor(num_slots=2)
    ex.store = SlowStore()
    grid = tune.Tuner(curve, param_space={"floor": tune.grid_search([0.0, 0.5])},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name="slow", storage_path=storage, verbose=0, mlflow=False,
                                                callbacks=[OpensGate()]),
                      executor=ex).fit()
    assert gate.is_set() and grid.num_errors == 0
    events = _events(grid)
    for r in grid:
        its = [e["result"]["training_iteration"] for e in events
               if e["event"] == "result" and e["trial_id"] == r.trial_id]
        assert its == list(range(1, 11))
        ckpts = [e["iteration"] for e in events if e["event"] == "checkpoint" and e["trial_id"] == r.trial_id]
        assert ckpts == list(range(1, 11))
    slow_id = next(r.trial_id for r in grid if os.path.basename(r.path) == os.path.basename(blocked[0]))
    order = [(e["trial_id"], e["result"]["training_iteration"]) for e in events if e["event"] == "result"]
    # the other trial's third result was recorded before the slow trial's first
    other = next(r.trial_id for r in grid if r.trial_id != slow_id)
    assert order.index((other, 3)) < order.index((slow_id, 1))


def test_a_result_recovered_from_its_checkpoint_survives_a_second_restore(storage):
    """The tuner died after journaling checkpoint 3 (with its metrics) but before the result line of iteration 3.
    Restore takes that result from the checkpoint; the resumed run must journal it, or a later restore of the same
    folder (after the trial moved on to checkpoint 10) would show iterations 1, 2, 4, ... (a lost result)."""
    from tuneplat.core._replay import load_trials

    grid = _tuner(storage, curve, {"floor": 0.0}, slots=1).fit()
    path = grid.experiment_path
    journal = os.path.join(path, "journal.jsonl")
    kept, ckpt3 = [], None
    for line in open(journal, encoding="utf-8"):
        e = json.loads(line)
        it = e.get("iteration") or (e.get("result") or {}).get("training_iteration")
        if e["event"] == "checkpoint" and e["iteration"] == 3:
            ckpt3 = e["path"]
            kept.append(line)
        elif e["event"] in ("result", "checkpoint", "decision") and it >= 3:
            continue  # (the crash came before these)
        elif e["event"] in ("trial_end", "experiment_end", "checkpoint_deleted"):
            continue
        else:
            kept.append(line)
    assert ckpt3 is not None
    with open(journal, "w", encoding="utf-8") as f:
        f.writelines(kept)
    os.makedirs(ckpt3, exist_ok=True)  # (virtual checkpoints are empty folders)
    rc = tune.RunConfig(name="exp", storage_path=storage, verbose=0, mlflow=False)
    tune.Tuner.restore(path, curve, executor=VirtualTimeExecutor(num_slots=1), run_config=rc).fit()
    (trial,), _ = load_trials(path)  # what the next restore (or tuneplat status) sees
    assert [r["training_iteration"] for r in trial.results] == list(range(1, 11))


class _CountingExecutor(VirtualTimeExecutor):
    """Counts the room the loop reserves and gives back unused (room asked for a trial that never came)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.unused = 0

    def unreserve(self, reservation):
        self.unused += 1
        super().unreserve(reservation)


@pytest.mark.parametrize("searcher", ["grid", "optuna"])
def test_no_room_is_waited_for_once_the_searcher_has_suggested_everything(storage, searcher):
    """When every configuration has been suggested (Ray's BasicVariantGenerator.is_finished(), or num_samples
    reached), the loop asks for no more room: a cluster that lost the room for the experiment's shape after the
    last trial cannot starve a finished experiment (the loop used to reserve, then ask the searcher, then give the
    room back; without room it waited TUNEPLAT_WORKER_WAIT_S and ended "failed")."""
    from tuneplat.search.optuna import OptunaSearch

    executor = _CountingExecutor(num_slots=2)
    space = ({"floor": tune.grid_search([0.1, 0.2, 0.3])} if searcher == "grid" else {"floor": tune.uniform(0, 1)})
    tc = (tune.TuneConfig(metric="loss", mode="min") if searcher == "grid" else
          tune.TuneConfig(metric="loss", mode="min", num_samples=3, search_alg=OptunaSearch(seed=0)))
    grid = tune.Tuner(curve, param_space=space, tune_config=tc,
                      run_config=tune.RunConfig(name="exhausted", storage_path=storage, verbose=0, mlflow=False),
                      executor=executor).fit()
    assert len(grid) == 3 and grid.num_errors == 0
    assert executor.unused == 0
    assert _events(grid)[-1]["status"] == "finished"
