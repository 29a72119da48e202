"""One source of truth: the live loop's state is the journal's reducer applied to the journal, at every event.

Recorded experiments run on the virtual-time executor; after every event the loop applies, its state is compared,
field by field, with the reducer's fold of the journal's first k lines (what ``tuneplat status``, ``Result.from_path``
and ``Tuner.restore`` read). Then the two disagreements users saw before are pinned: a Ctrl-C mid-sweep, and a
callback that edits the result it is given.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from typing import Any

import pytest

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.core import _loop
from tuneplat.core._events import from_json
from tuneplat.core._journal import to_jsonable
from tuneplat.core._replay import replay
from tuneplat.core._state import ExperimentState, apply
from tuneplat.schedulers import (
    ASHAScheduler,
    DistributeResources,
    FIFOScheduler,
    HyperBandScheduler,
    PopulationBasedTraining,
    ResourceChangingScheduler,
)
from tuneplat.search import BasicVariantGenerator
from tuneplat.testing import HANG, LOSE_HOST, LOSE_WORKER, PREEMPT, VirtualTimeExecutor

# ---------------------------------------------------------------------------- trainables (learning curves)


def curve(config):
    for step in range(1, 9):
        yield {"loss": config["floor"] + 1.0 / step}


def pbt_curve(config):
    for step in range(1, 16):
        yield {"score": config["lr"] * step}


def fails_then_works(config):
    marker = config["marker"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        yield {"loss": 1.0}
        yield {"loss": 0.9}
        raise RuntimeError("first attempt crashes")
    yield from curve({"floor": config["floor"]})


def always_fails(config):
    yield {"loss": 1.0}
    raise ValueError("broken trainable")


def needs_memory(config):
    import torch

    for step in range(1, 5):
        if config["micro_batch"] > 8 and step == 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        yield {"loss": 1.0 / (step * config["micro_batch"])}


def faulty(config):
    """Meets the fault named in its config once (a marker file remembers), at its 3rd iteration."""
    marker = config["marker"]
    for step in range(1, 7):
        if step == 3 and config["fault"] is not None and not os.path.exists(marker):
            open(marker, "w").close()
            yield config["fault"]
        yield {"loss": 1.0 / step}


def _faulty(storage: str, tmp_path: Any, fault: Any, name: str, *, slots: int = 2, **executor: Any) -> tune.Tuner:
    space = {"fault": tune.grid_search([fault, None]), "marker": str(tmp_path / name)}
    return tune.Tuner(faulty, param_space=space, tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False,
                                                failure_config=tune.FailureConfig(max_failures=2)),
                      executor=VirtualTimeExecutor(num_slots=slots, **executor))


class _Interrupt(tune.Callback):
    """Ctrl-C mid-sweep: a callback raising KeyboardInterrupt (as Ray allows) at the 3rd result of a trial."""

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result["training_iteration"] == 3 and trial.config.get("floor") == 0.2:
            raise KeyboardInterrupt


def _tuner(storage: str, fn: Any, space: dict[str, Any], *, name: str, slots: int = 2,
           tc: tune.TuneConfig | None = None, scaling_config: tune.ScalingConfig | None = None,
           **rc: Any) -> tune.Tuner:
    return tune.Tuner(fn, param_space=space, tune_config=tc or tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False, **rc),
                      scaling_config=scaling_config, executor=VirtualTimeExecutor(num_slots=slots))


def _experiments(tmp_path: Any) -> dict[str, Any]:
    floors = tune.grid_search([0.0, 0.1, 0.2, 0.3, 0.4, 0.5])
    return {
        "asha": lambda s: _tuner(s, curve, {"floor": floors}, name="asha", tc=tune.TuneConfig(
            metric="loss", mode="min", scheduler=ASHAScheduler(max_t=8, grace_period=1, reduction_factor=2))),
        "hyperband": lambda s: _tuner(s, curve, {"floor": floors}, name="hyperband", tc=tune.TuneConfig(
            metric="loss", mode="min", scheduler=HyperBandScheduler(max_t=8, reduction_factor=2))),
        "pbt": lambda s: _tuner(s, pbt_curve, {"lr": tune.grid_search([0.1, 0.5, 1.0, 2.0])}, name="pbt", slots=4,
                                tc=tune.TuneConfig(metric="score", mode="max", scheduler=PopulationBasedTraining(
                                    time_attr="training_iteration", perturbation_interval=4, seed=1,
                                    hyperparam_mutations={"lr": [0.1, 0.5, 1.0, 2.0]}))),
        "retries": lambda s: _tuner(s, fails_then_works, {"floor": tune.grid_search([0.0, 0.3]),
                                                          "marker": str(tmp_path / "m")}, name="retries",
                                    failure_config=tune.FailureConfig(max_failures=1),
                                    checkpoint_config=tune.CheckpointConfig(num_to_keep=2)),
        "errors": lambda s: _tuner(s, always_fails, {"x": tune.grid_search([1, 2])}, name="errors",
                                   failure_config=tune.FailureConfig(max_failures=1)),
        "oom_retry": lambda s: _tuner(s, needs_memory, {"micro_batch": tune.grid_search([4, 32])}, name="oom",
                                      failure_config=tune.FailureConfig(oom_halve="micro_batch", max_oom_retries=3)),
        "ctrl_c": lambda s: _tuner(s, curve, {"floor": floors}, name="ctrl_c", callbacks=[_Interrupt()]),
        "lost_worker": lambda s: _faulty(s, tmp_path, LOSE_WORKER, "lost_worker"),
        "preemption": lambda s: _faulty(s, tmp_path, PREEMPT, "preemption"),
        "not_started": lambda s: _faulty(s, tmp_path, None, "not_started", lose_starts=1),
        "hung": lambda s: _faulty(s, tmp_path, HANG, "hung", hang_timeout_s=30),
        "starved": lambda s: _faulty(s, tmp_path, LOSE_HOST, "starved", slots=1),
        "resources": lambda s: _tuner(s, curve, {"floor": tune.grid_search([0.0, 0.1, 0.2])}, name="resources",
                                      slots=4, tc=tune.TuneConfig(metric="loss", mode="min",
                                                                  scheduler=ResourceChangingScheduler(
                                                                      FIFOScheduler(), DistributeResources()))),
        # groups of 2 ranks that the scheduler gives more ranks (one bundle per rank)
        "resources_ranks": lambda s: _tuner(s, curve, {"floor": tune.grid_search([0.0, 0.1])}, name="ranks",
                                            slots=6, scaling_config=tune.ScalingConfig(num_workers=2),
                                            tc=tune.TuneConfig(metric="loss", mode="min",
                                                               scheduler=ResourceChangingScheduler(
                                                                   FIFOScheduler(),
                                                                   DistributeResources(add_bundles=True)))),
    }


def _trial_fields(t: Any) -> dict[str, Any]:
    return {
        "trial_id": t.trial_id, "name": t.name, "path": t.path, "trainable_name": t.trainable_name,
        "status": t.status.value, "config": to_jsonable(t.config), "results": to_jsonable(t.results),
        "superseded": to_jsonable(t.superseded), "error": t.error, "error_traceback": t.error_traceback,
        "error_kind": t.error_kind, "num_failures": t.num_failures, "oom_retries": t.oom_retries,
        "attempts": t.attempts, "stop_reason": t.stop_reason, "pending_decision": t.pending_decision,
        "checkpoints": [(c.path, to_jsonable(m)) for c, m in t.checkpoints], "lineage": to_jsonable(t.lineage),
        "mlflow_run_id": t.mlflow_run_id, "time_total_s": t.time_total_s,
        "stopped_by_scheduler": t.stopped_by_scheduler, "restart_iteration": t.restart_iteration,
        "world_size": t.world_size, "world_sizes": list(t.world_sizes), "num_preemptions": t.num_preemptions,
        "resumable": t.resumable, "base_resources": t.base_resources, "resources": t.resources,
        "resource_changes": list(t.resource_changes), "configured_ranks": t.configured_ranks,
        "bundle_per_rank": t.bundle_per_rank, "placement_group_factory": repr(t.placement_group_factory),
    }


def _snapshot(state: ExperimentState) -> dict[str, Any]:
    """Every field of the state, as plain values (configs and results as their JSON form)."""
    return {
        "trials": [_trial_fields(t) for t in state.trials], "meta": to_jsonable(state.meta), "status": state.status,
        "mlflow_parent_run_id": state.mlflow_parent_run_id, "scheduler": state.scheduler,
        "start_time": state.start_time, "end_time": state.end_time, "peak_running": state.peak_running,
        "history": {tid: repr(h) for tid, h in state.history.items()}, "seq": state.seq,
        "running_since": dict(state.running_since), "paused_at": dict(state.paused_at),
    }


@pytest.mark.parametrize("experiment", ["asha", "hyperband", "pbt", "retries", "errors", "oom_retry", "ctrl_c",
                                        "lost_worker", "preemption", "not_started", "hung", "starved", "resources",
                                        "resources_ranks"])
def test_live_state_equals_the_reducer_over_the_journal_at_every_event(experiment, storage, tmp_path, monkeypatch):
    snapshots: list[dict[str, Any]] = []
    real_apply = _loop.apply

    def recording_apply(state: ExperimentState, event: Any) -> ExperimentState:
        real_apply(state, event)
        snapshots.append(_snapshot(state))
        return state

    monkeypatch.setattr(_loop, "apply", recording_apply)
    grid = _experiments(tmp_path)[experiment](storage).fit()
    lines = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    assert len(snapshots) == len(lines), "every journal line is applied live, once"
    kinds = {line["event"] for line in lines}
    expected = {"asha": {"decision"}, "hyperband": {"trial_paused", "trial_resume"}, "pbt": {"exploit"},
                "retries": {"trial_failure", "checkpoint_deleted"}, "errors": {"trial_failure"},
                "oom_retry": {"oom_retry"}, "ctrl_c": {"trial_requeued"}, "lost_worker": {"trial_failure"},
                "preemption": {"preempt_notice", "trial_preempted", "trial_requeued"},
                "not_started": {"trial_requeued"}, "hung": {"trial_failure"}, "starved": {"starved"},
                "resources": {"trial_resources", "trial_paused", "trial_resume"},
                "resources_ranks": {"trial_resources", "trial_paused", "trial_resume"}}[experiment]
    assert expected <= kinds, f"the recorded experiment reaches {expected - kinds}"
    folded = ExperimentState(trials=[], experiment_dir=grid.experiment_path, trusted=True)
    for k, line in enumerate(lines):
        apply(folded, from_json(line))
        want, got = _snapshot(folded), snapshots[k]
        if got != want:
            diff = {key: (got[key], want[key]) for key in want if got[key] != want[key]}
            pytest.fail(f"after journal line {k} ({line['event']}): live != replay: {diff}")


def test_ctrl_c_mid_sweep_gives_the_same_statuses_from_fit_status_and_restore(storage):
    grid = _experiments(None)["ctrl_c"](storage).fit()
    from_fit = {r.trial_id: r.status for r in grid}
    assert set(from_fit.values()) >= {"TERMINATED", "PENDING"}  # some ended, the running ones were interrupted

    from tuneplat.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["status", grid.experiment_path, "--json"]) == 0
    from_status = {t["trial_id"]: t["status"] for t in json.loads(out.getvalue())["trials"]}
    restored = tune.Tuner.restore(grid.experiment_path, curve, executor=VirtualTimeExecutor(num_slots=2))
    from_restore = {r.trial_id: r.status for r in restored.get_results()}
    assert from_fit == from_status == from_restore


class _Recording(FIFOScheduler):
    def __init__(self, calls: list[str], seen: list[float]) -> None:
        super().__init__()
        self.calls, self.seen = calls, seen

    def on_trial_result(self, trial_id, result):
        self.calls.append("scheduler")
        self.seen.append(result["loss"])
        return super().on_trial_result(trial_id, result)


class _RecordingSearcher(BasicVariantGenerator):
    def __init__(self, calls: list[str], **kw: Any) -> None:
        super().__init__(**kw)
        self.calls = calls

    def on_trial_result(self, trial_id, result):
        self.calls.append("searcher")
        super().on_trial_result(trial_id, result)


class _Editor(tune.Callback):
    """Edits every result it is given in place (Ray allows it: its scheduler has decided by then)."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.calls.append("callback")
        result["loss"] = -1000.0


def test_a_callback_editing_a_result_changes_neither_the_scheduler_the_journal_nor_the_best_trial(storage):
    calls: list[str] = []
    seen: list[float] = []
    tuner = _tuner(storage, curve, {"floor": tune.grid_search([0.1, 0.3])}, name="edit", callbacks=[_Editor(calls)],
                   tc=tune.TuneConfig(metric="loss", mode="min", scheduler=_Recording(calls, seen),
                                      search_alg=_RecordingSearcher(calls)))
    grid = tuner.fit()
    assert calls[:3] == ["scheduler", "searcher", "callback"]  # Ray's order, for every result
    assert calls == ["scheduler", "searcher", "callback"] * (len(calls) // 3)
    assert min(seen) > 0  # the scheduler saw the trials' own values
    journaled = [e["result"]["loss"] for e in read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
                 if e["event"] == "result"]
    assert journaled and min(journaled) > 0
    best = grid.get_best_result()
    assert best.config["floor"] == 0.1 and best.metrics["loss"] == pytest.approx(0.1 + 1 / 8)


def test_a_restored_run_continues_the_same_state_as_the_replay_of_both_runs(storage, tmp_path, monkeypatch):
    """Tuner.restore(resume_errored=True): the trials it reopens are what the resumed run's experiment event does to
    the replayed state, so live == fold(journal[:k]) holds through the second run too."""
    _tuner(storage, fails_then_works, {"floor": tune.grid_search([0.0, 0.3]), "marker": str(tmp_path / "m")},
           name="reopen", failure_config=tune.FailureConfig(max_failures=0)).fit()
    path = os.path.join(storage, "reopen")
    first = len(read_journal(os.path.join(path, "journal.jsonl")))
    snapshots: list[dict[str, Any]] = []
    real_apply = _loop.apply

    def recording_apply(state: ExperimentState, event: Any) -> ExperimentState:
        real_apply(state, event)
        snapshots.append(_snapshot(state))
        return state

    monkeypatch.setattr(_loop, "apply", recording_apply)
    grid = tune.Tuner.restore(path, fails_then_works, resume_errored=True,
                              executor=VirtualTimeExecutor(num_slots=2)).fit()
    assert {r.status for r in grid} == {"TERMINATED"} and not any(r.error for r in grid)
    lines = read_journal(os.path.join(path, "journal.jsonl"))
    assert lines[first]["event"] == "experiment" and lines[first]["resume_errored"] is True
    folded = replay(lines[:first], path, trusted=True)  # what the restore read (checkpoints missing on disk dropped)
    for k, line in enumerate(lines[first:]):
        apply(folded, from_json(line))
        want, got = _snapshot(folded), snapshots[k]
        want.pop("history"), got.pop("history")  # (the live run's history starts at the restore)
        want.pop("seq"), got.pop("seq")
        if got["trials"] != want["trials"]:
            diff = [{f: (g[f], w[f]) for f in w if g[f] != w[f]} for g, w in zip(got["trials"], want["trials"])]
            pytest.fail(f"after line {first + k} ({line['event']}): {diff}")


def test_an_invalid_status_move_raises_live_and_is_tolerated_on_replay(tmp_path):
    from tuneplat.core import _events as ev
    from tuneplat.core._phase import ExperimentPhase, InvalidTransition

    events = [ev.TrialAdd(trial_id="t", path=str(tmp_path), config={}),
              ev.TrialEnd(trial_id="t", status="TERMINATED"), ev.TrialStart(trial_id="t", attempt=1)]
    live = ExperimentState(trials=[], strict=True)
    apply(live, events[0])
    apply(live, events[1])
    with pytest.raises(InvalidTransition, match="trial t cannot go from TERMINATED to RUNNING"):
        apply(live, events[2])
    replayed = ExperimentState(trials=[])
    for e in events:
        apply(replayed, e)
    assert replayed.trials[0].status.value == "RUNNING"  # (a journal an older version wrote still reads)
    with pytest.raises(InvalidTransition, match="from errored to running"):
        ExperimentPhase.ERRORED.to(ExperimentPhase.RUNNING)
    assert ExperimentPhase.FAILING.to(ExperimentPhase.FAILING) is ExperimentPhase.FAILING
    assert [p.status for p in ExperimentPhase] == ["finished", "finished", "failed", "interrupted", "error"]


class _RecordingExecutor(VirtualTimeExecutor):
    """The virtual executor, keeping every event it hands the loop."""

    seen: list[Any] = []

    def poll(self, timeout):
        events = super().poll(timeout)
        _RecordingExecutor.seen.extend(events)
        return events


def test_every_outcome_and_failure_kind_is_reached_in_virtual_time(storage, tmp_path):
    from tuneplat.execution._executor import Ended, Outcome, Preempted, Starved
    from tuneplat.execution._failure import ERROR, HUNG, INVALID, LOST, OOM

    _RecordingExecutor.seen = []

    def fit(fn: Any, space: dict[str, Any], name: str, *, metric: str = "loss", slots: int = 2, **kw: Any) -> Any:
        return tune.Tuner(fn, param_space=space, tune_config=tune.TuneConfig(metric=metric, mode="min"),
                          run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False,
                                                    failure_config=tune.FailureConfig(max_failures=1)),
                          executor=_RecordingExecutor(num_slots=slots, **kw)).fit()

    for fault in (LOSE_WORKER, PREEMPT, HANG):
        fit(faulty, {"fault": fault, "marker": str(tmp_path / repr(fault))}, f"f{len(_RecordingExecutor.seen)}",
            hang_timeout_s=30)
    fit(faulty, {"fault": None, "marker": str(tmp_path / "ns")}, "not_started", lose_starts=1)
    fit(faulty, {"fault": LOSE_HOST, "marker": str(tmp_path / "lh")}, "starved", slots=1)
    fit(always_fails, {"x": 1}, "error")
    fit(needs_memory, {"micro_batch": 32}, "oom")
    fit(curve, {"floor": 0.0}, "invalid", metric="los")  # a misspelt metric: the loop fails the trial
    tune.Tuner(faulty, param_space={"fault": HANG, "marker": str(tmp_path / "ab2")},
               tune_config=tune.TuneConfig(metric="loss", mode="min", time_budget_s=100),
               run_config=tune.RunConfig(name="budget", storage_path=storage, verbose=0, mlflow=False),
               executor=_RecordingExecutor(num_slots=1)).fit()
    ended = [e for e in _RecordingExecutor.seen if isinstance(e, Ended)]
    assert {e.outcome for e in ended} == set(Outcome)
    kinds = {e.failure.kind for e in ended if e.outcome is Outcome.FAILED and e.failure is not None}
    assert kinds == {ERROR, OOM, LOST, HUNG, INVALID}
    assert all(e.failure is not None for e in ended if e.outcome is Outcome.FAILED)
    assert any(isinstance(e, Preempted) for e in _RecordingExecutor.seen)
    assert any(isinstance(e, Starved) for e in _RecordingExecutor.seen)
    assert any(e.preempted for e in ended if e.outcome is Outcome.RESIZED)


def test_a_callback_cannot_assign_a_trials_fields(storage):
    from tuneplat.core._trial import ReadOnlyTrial

    caught: list[BaseException] = []

    class Assigns(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            try:
                trial.config = {"floor": -1.0}
            except ReadOnlyTrial as exc:
                caught.append(exc)

    grid = _tuner(storage, curve, {"floor": tune.grid_search([0.1])}, name="assigns", callbacks=[Assigns()]).fit()
    assert len(caught) == 8 and "read-only" in str(caught[0])
    assert grid[0].config == {"floor": 0.1}


def test_the_preemption_budget_is_the_failure_policys(storage, tmp_path):
    """FailureConfig(max_preemption_failures=0): a preempted trial ends as an error; without a budget it starts
    again from its checkpoint without a failure counted."""
    def fit(budget: int, name: str) -> Any:
        return tune.Tuner(faulty, param_space={"fault": PREEMPT, "marker": str(tmp_path / name)},
                          tune_config=tune.TuneConfig(metric="loss", mode="min"),
                          run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False,
                                                    failure_config=tune.FailureConfig(max_preemption_failures=budget)),
                          executor=VirtualTimeExecutor(num_slots=1)).fit()

    (ended,) = fit(0, "no_budget")
    assert ended.status == "ERROR" and "preempted 1 times, more than FailureConfig(max_preemption_failures=0)" in str(
        ended.error)
    (resumed,) = fit(-1, "unlimited")
    assert resumed.status == "TERMINATED" and resumed.error is None
    assert resumed.metrics["training_iteration"] == 6
