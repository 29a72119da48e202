"""A checkpoint event costs O(1) in the reducer (core/_state.py), with the behaviour of the scan it replaced.

The reference below is the reducer's former code for the two checkpoint events (a scan of the trial's list for the
folder, a filter for a deletion). Long runs of events are folded both ways and must give the same lists; a PBT
experiment with thousands of checkpoints (clones replacing checkpoints of the same folder) replays to the live
state.
"""

from __future__ import annotations

import os
import random
from typing import Any

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.core import _events as ev
from tuneplat.core import _loop
from tuneplat.core._events import from_json
from tuneplat.core._journal import to_jsonable
from tuneplat.core._state import ExperimentState, apply, reopen_trials
from tuneplat.core._trial import TrialStatus, state_writer
from tuneplat.schedulers import PopulationBasedTraining
from tuneplat.storage._checkpoint import Checkpoint
from tuneplat.testing import VirtualTimeExecutor


def _reference(lists: dict[str, list[tuple[str, dict[str, Any]]]], trial_path: str, event: Any) -> None:
    """The former reducer, on plain ``(path, metrics)`` lists (local paths only)."""
    lst = lists.setdefault(event.trial_id, [])
    if isinstance(event, ev.CheckpointSaved):
        path = event.path
        if not os.path.isdir(path):
            path = os.path.join(trial_path, os.path.basename(path))
        if any(p[0] == path for p in lst):
            lst[:] = [p for p in lst if p[0] != path]
        lst.append((path, dict(event.metrics or {})))
    elif isinstance(event, ev.CheckpointDeleted):
        name = os.path.basename(event.path)
        lst[:] = [p for p in lst if os.path.basename(p[0]) != name]


def _paths(t: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(c.path, m) for c, m in t.checkpoints]


def test_random_checkpoint_events_fold_as_the_former_scan_did(tmp_path):
    rng = random.Random(0)  # (seeded: the same sequence every run)
    trial_path = str(tmp_path / "t0")
    os.makedirs(trial_path)
    elsewhere = tmp_path / "elsewhere"  # a recorded folder that exists keeps its path (another basename's twin)
    os.makedirs(elsewhere / "checkpoint_000003")
    state = ExperimentState(trials=[], experiment_dir=str(tmp_path))
    apply(state, ev.TrialAdd(trial_id="a_00000", path=trial_path, config={}))
    trial = state.by_id["a_00000"]
    reference: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    saved = 0
    for step in range(4000):
        roll = rng.random()
        if roll < 0.70 or saved == 0:  # a new checkpoint
            saved += 1
            event: Any = ev.CheckpointSaved(trial_id="a_00000", path=f"/gone/checkpoint_{saved:06d}",
                                            iteration=saved, metrics={"i": saved, "step": step})
        elif roll < 0.80:  # the same folder again (a retry, a PBT clone): near the end, or anywhere
            k = saved if rng.random() < 0.5 else rng.randint(1, saved)
            event = ev.CheckpointSaved(trial_id="a_00000", path=f"/gone/checkpoint_{k:06d}", iteration=k,
                                       metrics={"again": step})
        elif roll < 0.82:  # a folder that exists where it was recorded: kept as it is
            event = ev.CheckpointSaved(trial_id="a_00000", path=str(elsewhere / "checkpoint_000003"),
                                       iteration=3, metrics={"elsewhere": step})
        elif roll < 0.97:  # retention deleting one (present or long gone)
            event = ev.CheckpointDeleted(trial_id="a_00000", path=f"/x/checkpoint_{rng.randint(1, saved):06d}")
        elif roll < 0.99:  # the list set outside the reducer (a restore dropping missing checkpoints)
            keep = rng.randint(0, len(trial.checkpoints))
            with state_writer():
                trial.checkpoints = trial.checkpoints[:keep]
            reference["a_00000"] = reference.get("a_00000", [])[:keep]
            continue
        else:  # ... or changed in place there
            if trial.checkpoints:
                trial.checkpoints.pop(0)
                reference["a_00000"].pop(0)
            continue
        apply(state, event)
        _reference(reference, trial_path, event)
        assert _paths(trial) == reference["a_00000"], f"after event {step}: {event}"
    assert saved > 2000 and len(trial.checkpoints) > 10  # (the sequence reached a long list)


def test_a_list_holding_a_folder_twice_is_folded_as_before(tmp_path):
    """Never written so by the reducer: a list set elsewhere with one folder twice loses both at the next save of
    that folder, as the scan did."""
    trial_path = str(tmp_path / "t0")
    state = ExperimentState(trials=[], experiment_dir=str(tmp_path))
    apply(state, ev.TrialAdd(trial_id="a_00000", path=trial_path, config={}))
    trial = state.by_id["a_00000"]
    twice = os.path.join(trial_path, "checkpoint_000001")
    with state_writer():
        trial.checkpoints = [(Checkpoint(twice), {"n": 1}), (Checkpoint(twice), {"n": 2})]
    apply(state, ev.CheckpointSaved(trial_id="a_00000", path=twice, iteration=1, metrics={"n": 3}))
    assert _paths(trial) == [(twice, {"n": 3})]
    apply(state, ev.CheckpointSaved(trial_id="a_00000", path="/gone/checkpoint_000002", iteration=2, metrics={}))
    apply(state, ev.CheckpointDeleted(trial_id="a_00000", path="/x/checkpoint_000001"))
    assert _paths(trial) == [(os.path.join(trial_path, "checkpoint_000002"), {})]
    # a restart of errored trials forgets their checkpoints: the next one is alone
    with state_writer():
        trial.status = TrialStatus.ERROR
    reopen_trials(state, restart_errored=True)
    apply(state, ev.CheckpointSaved(trial_id="a_00000", path="/gone/checkpoint_000002", iteration=2, metrics={}))
    assert _paths(trial) == [(os.path.join(trial_path, "checkpoint_000002"), {})]


def long_pbt_curve(config):
    for step in range(1, 601):
        yield {"score": config["lr"] * step}


def test_a_trial_with_thousands_of_checkpoints_replays_to_the_live_state(storage, monkeypatch):
    live: list[ExperimentState] = []
    real_apply = _loop.apply

    def keep_state(state: ExperimentState, event: Any) -> ExperimentState:
        if not live:
            live.append(state)
        return real_apply(state, event)

    monkeypatch.setattr(_loop, "apply", keep_state)
    # every report of a learning curve is checkpointed: 4 trials x 600 checkpoints, and PBT's clones copy a
    # source's checkpoint into a folder the trial already has (a checkpoint replaced, not added)
    grid = tune.Tuner(long_pbt_curve, param_space={"lr": tune.grid_search([0.1, 0.5, 1.0, 2.0])},
                      tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=PopulationBasedTraining(
                          time_attr="training_iteration", perturbation_interval=50, seed=1,
                          hyperparam_mutations={"lr": [0.1, 0.5, 1.0, 2.0]})),
                      run_config=tune.RunConfig(name="long", storage_path=storage, verbose=0, mlflow=False),
                      executor=VirtualTimeExecutor(num_slots=4)).fit()
    lines = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    saves = [e for e in lines if e["event"] == "checkpoint"]
    assert len(saves) > 2400 and any(e.get("cloned_from") for e in saves)
    folded = ExperimentState(trials=[], experiment_dir=grid.experiment_path, trusted=True)
    reference: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for line in lines:
        event = from_json(line)
        apply(folded, event)
        if isinstance(event, (ev.CheckpointSaved, ev.CheckpointDeleted)):
            _reference(reference, folded.by_id[event.trial_id].path, event)
    replaced = sum(1 for t in folded.trials for _ in t.checkpoints) < len(saves)
    assert replaced, "no clone replaced a checkpoint: the experiment does not test replacement"
    (state,) = live
    for t_live, t_replay in zip(state.trials, folded.trials, strict=True):
        assert _paths(t_live) == _paths(t_replay) == [(p, to_jsonable(m)) for p, m in reference[t_live.trial_id]]
        assert t_live.results == t_replay.results and t_live.status == t_replay.status
        assert t_live.restart_iteration == t_replay.restart_iteration
