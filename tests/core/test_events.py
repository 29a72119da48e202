"""The journal's typed events: every kind round-trips through JSON and is checked against its schema."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.core import _events as ev
from tuneplat.core._journal import Journal, JournalError
from tuneplat.schedulers import PopulationBasedTraining
from tuneplat.testing import VirtualTimeExecutor


def _sample(cls: type[ev.Event]) -> ev.Event:
    """An event of ``cls`` with every field set to a value of its declared type."""
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in ("extra", "time"):
            continue
        if f.name in ("status",):
            values[f.name] = "TERMINATED"
            continue
        hint = str(f.type)
        values[f.name] = (True if hint.startswith("bool") else 3 if hint.startswith("int") else 1.5
                          if hint.startswith("float") else {"a": 1} if hint.startswith("dict") else ["x"]
                          if hint.startswith("list") else "x")
    return cls(**values, time=12.5)


@pytest.mark.parametrize("kind", sorted(ev.EVENT_TYPES))
def test_every_kind_round_trips_and_its_required_fields_are_checked(kind):
    cls = ev.EVENT_TYPES[kind]
    event = _sample(cls)
    data = json.loads(json.dumps(event.to_json()))
    assert data["event"] == kind and ev.schema_problem(data) is None
    assert ev.from_json(data) == event
    for f in dataclasses.fields(cls):
        key = f.metadata.get("json", f.name)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            problem = ev.schema_problem({k: v for k, v in data.items() if k != key})
            assert problem == f"a {kind!r} event without its {key!r}"
        if key in data and f.name != "time" and not isinstance(data[key], str):
            assert "is str, not" in (ev.schema_problem({**data, key: "wrong"}) or "")


def test_keys_a_kind_does_not_declare_and_unknown_kinds_are_kept():
    data = {"event": "trial_paused", "trial_id": "t1", "iteration": 2, "time": 1.0, "note": "newer tuneplat"}
    event = ev.from_json(data)
    assert isinstance(event, ev.TrialPaused) and event.extra == {"note": "newer tuneplat"}
    assert event.to_json() == data
    future = {"event": "from_the_future", "time": 2.0, "x": [1]}
    assert isinstance(ev.from_json(future), ev.UnknownEvent) and ev.from_json(future).to_json() == future


def test_a_journal_line_that_breaks_its_schema_is_named_with_file_and_line(tmp_path):
    path = str(tmp_path / "journal.jsonl")
    journal = Journal(path)
    journal.append(ev.TrialAdd(trial_id="t1", path="/x/t1", config={"a": 1}))
    journal.append({"event": "trial_end", "trial_id": "t1", "status": "DONE"})
    journal.append(ev.TrialPaused(trial_id="t1", iteration=1))
    journal.close()
    with pytest.raises(JournalError, match=r"journal.jsonl:2: .*'trial_end' event with status 'DONE'"):
        read_journal(path)


def test_every_event_the_loop_writes_fits_a_declared_kind(storage):
    def curve(config):
        for step in range(1, 9):
            yield {"loss": config["x"] / step, "should_checkpoint": True}

    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2,
                                  hyperparam_mutations={"x": tune.uniform(0.1, 1.0)}, seed=1)
    grid = tune.Tuner(curve, param_space={"x": tune.uniform(0.1, 1.0)},
                      tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=4, scheduler=pbt),
                      run_config=tune.RunConfig(name="pbt", storage_path=storage, verbose=0, mlflow=False,
                                                stop={"training_iteration": 8}),
                      executor=VirtualTimeExecutor(num_slots=2)).fit()
    events = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    typed = [ev.from_json(e) for e in events]
    assert not [e for e in typed if isinstance(e, ev.UnknownEvent)]
    def present(e):  # a field that is None is left out of the JSON
        return {k: v for k, v in e.items() if v is not None}

    assert [present(e.to_json()) for e in typed] == [present(e) for e in events]
    kinds = {e.kind for e in typed}
    assert {"experiment", "trial_add", "trial_start", "result", "trial_end", "experiment_end"} <= kinds


def test_replay_gives_the_trials_status_and_lineage_the_result_grid_shows(storage):
    from tuneplat.core._replay import load_state, replay

    def curve(config):
        for step in range(1, 5):
            yield {"loss": config["x"] / step}

    grid = tune.Tuner(curve, param_space={"x": tune.grid_search([1.0, 2.0, 3.0])},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name="replay", storage_path=storage, verbose=0, mlflow=False),
                      executor=VirtualTimeExecutor(num_slots=2)).fit()
    events = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    state = replay(events, grid.experiment_path)
    assert state.status == "finished" and state.meta["metric"] == "loss"
    assert [(t.trial_id, t.config, str(t.status), len(t.results)) for t in state.trials] == [
        (r.trial_id, r.config, r.status, len(r._history)) for r in grid]
    assert load_state(grid.experiment_path).status == "finished"
