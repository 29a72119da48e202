"""Each plot drawn from a real experiment, and its content checked against the experiment's journal."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.figure import Figure

import tuneplat as tune
from tuneplat import plot, read_journal


def _journal(grid):
    return read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))


def _artist(fig, gid, kind=None):
    found = [a for ax in fig.axes for a in ax.get_children() if a.get_gid() == gid]
    assert len(found) <= 1, gid
    if not found:
        return None
    if kind is not None:
        assert isinstance(found[0], kind)
    return found[0]


def _points(fig, gid):
    art = _artist(fig, gid, PathCollection)
    return [] if art is None else [tuple(p) for p in art.get_offsets()]


def _value_at(grid, trial_id, iteration, metric):
    r = next(r for r in grid if r.trial_id == trial_id)
    df = r.metrics_dataframe
    return float(df.loc[df["training_iteration"] == iteration, metric].iloc[-1])


def _is_budget(reason):
    return "reached max_t" in reason or "stop criteria met" in reason


# ---------------------------------------------------------------------- learning curves


def test_learning_curves_draw_one_line_per_trial_and_mark_every_stop_of_the_journal(asha_grid):
    fig = plot.plot_learning_curves(asha_grid)
    assert isinstance(fig, Figure)
    curves = _artist(fig, "curves", LineCollection)
    segs = curves.get_segments()
    assert len(segs) == len(asha_grid) == 12
    assert sorted(curves.trial_ids) == sorted(r.trial_id for r in asha_grid)
    for tid, seg in zip(curves.trial_ids, segs):  # each line is the trial's reported (iteration, loss)
        df = next(r for r in asha_grid if r.trial_id == tid).metrics_dataframe
        np.testing.assert_allclose(seg, df[["training_iteration", "loss"]].to_numpy())

    stops = [e for e in _journal(asha_grid) if e["event"] == "decision" and e["decision"] == "STOP"]
    pruned = [e for e in stops if not _is_budget(e["reason"])]
    budget = [e for e in stops if _is_budget(e["reason"])]
    assert pruned and budget  # ASHA stopped some early and let some reach max_t
    expected = sorted((float(e["iteration"]), _value_at(asha_grid, e["trial_id"], e["iteration"], "loss"))
                      for e in pruned)
    got = sorted(_points(fig, "marks:stopped"))
    assert [c for p in got for c in p] == pytest.approx([c for p in expected for c in p])  # (flat: pytest 9.2)
    assert len(_points(fig, "marks:budget")) == len(budget)
    assert _points(fig, "marks:paused") == [] and _points(fig, "marks:cloned") == []
    assert f"{len(pruned)} stopped early" in fig.axes[0].get_title()
    best = _artist(fig, "best_curve")  # more than 10 trials: the best one is drawn on top
    np.testing.assert_allclose(best.get_ydata(), asha_grid.get_best_result().metrics_dataframe["loss"].to_numpy())


def test_a_figure_pickled_here_unpickles_in_a_fresh_process(asha_grid, tmp_path):
    """A figure pickles by reference to its class, ``tuneplat.plot._plots.PlotFigure``, which a process that has
    drawn nothing yet makes when the pickle asks for it (matplotlib is imported on first use)."""
    path = tmp_path / "curves.pkl"
    path.write_bytes(pickle.dumps(plot.plot_learning_curves(asha_grid)))
    code = "import pickle, sys; fig = pickle.loads(open(sys.argv[1], 'rb').read()); print(type(fig).__name__, len(fig.axes))"
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["PlotFigure", "1"]


def test_hyperband_pauses_and_stops_of_paused_trials_are_marked(hyperband_grid):
    events = _journal(hyperband_grid)
    pauses = [e for e in events if e["event"] == "decision" and e["decision"] == "PAUSE"]
    assert pauses, "HyperBand paused nothing"
    fig = hyperband_grid.plot_learning_curves("loss")
    assert len(_points(fig, "marks:paused")) == len(pauses)
    # a trial is stopped either at a report (a STOP decision) or while it waited paused (trial_end after a pause)
    last_event: dict[str, str] = {}
    ended_paused = 0
    for e in events:
        if e.get("trial_id") and e["event"] in ("trial_paused", "trial_start", "decision", "trial_end"):
            if e["event"] == "trial_end" and last_event.get(e["trial_id"]) == "trial_paused" and e["stop_reason"]:
                ended_paused += 1
            last_event[e["trial_id"]] = e["event"]
    stops = [e for e in events if e["event"] == "decision" and e["decision"] == "STOP"
             and not _is_budget(e["reason"])]
    assert ended_paused > 0
    assert len(_points(fig, "marks:stopped")) == len(stops) + ended_paused
    # its timeline has one bar per attempt: every start of a trial
    timeline = hyperband_grid.plot_timeline()
    starts = [e for e in events if e["event"] == "trial_start"]
    assert len(_artist(timeline, "spans", LineCollection).get_segments()) == len(starts)
    assert len(_points(timeline, "marks:paused")) == len(pauses)


def test_learning_curves_over_time_and_for_chosen_trials(asha_grid):
    ids = [r.trial_id for r in asha_grid][:3]
    fig = plot.plot_learning_curves(asha_grid.experiment_path, "loss", x="time", trials=ids)
    curves = _artist(fig, "curves", LineCollection)
    assert curves.trial_ids == ids
    df = asha_grid[0].metrics_dataframe
    np.testing.assert_allclose(curves.get_segments()[0][:, 0], df["time_total_s"].to_numpy())
    assert len(fig.axes[0].get_legend().get_texts()) >= 3  # few trials: one legend entry each


# ---------------------------------------------------------------------- PBT


def test_pbt_lineage_draws_one_edge_per_exploit_from_donor_to_recipient(pbt_grid):
    exploits = [e for e in _journal(pbt_grid) if e["event"] == "exploit"]
    assert exploits, "PBT never exploited"
    fig = pbt_grid.plot_pbt_lineage()
    edges = _artist(fig, "edges", LineCollection).get_segments()
    assert len(edges) == len(exploits)
    rows = {r.trial_id: n for n, r in enumerate(pbt_grid)}
    drawn = sorted((float(s[0][1]), float(s[1][1]), float(s[0][0])) for s in edges)
    expected = sorted((float(rows[e["from_trial"]]), float(rows[e["trial_id"]]), float(e["from_iteration"]))
                      for e in exploits)
    assert drawn == expected
    # the learning curves show where each clone happened, and break the line there
    curves = plot.plot_learning_curves(pbt_grid)
    assert len(_points(curves, "marks:cloned")) == len(exploits)
    # a clone with results after it starts a new piece of line (one at the very end has nothing to draw)
    seen: dict[str, int] = {}
    cut_at = []
    for e in _journal(pbt_grid):
        if e["event"] == "result":
            seen[e["trial_id"]] = seen.get(e["trial_id"], 0) + 1
        elif e["event"] == "exploit":
            cut_at.append((e["trial_id"], seen.get(e["trial_id"], 0)))
    pieces = {(tid, n) for tid, n in cut_at if 0 < n < seen[tid]}
    assert len(_artist(curves, "curves", LineCollection).get_segments()) == len(pbt_grid) + len(pieces)


def test_lineage_of_an_experiment_without_pbt_says_why(asha_grid):
    with pytest.raises(plot.PlotError, match="no PBT exploit in this experiment.*PopulationBasedTraining"):
        asha_grid.plot_pbt_lineage()


# ---------------------------------------------------------------------- optimization history, importances


def test_optimization_history_is_the_running_best_of_the_last_values(quadratic_grid):
    fig = quadratic_grid.plot_optimization_history()
    values = [float(r.metrics["loss"]) for r in quadratic_grid]
    best_line = _artist(fig, "best")
    np.testing.assert_allclose(best_line.get_ydata(), np.minimum.accumulate(values))
    best = quadratic_grid.get_best_result()
    star = _points(fig, "best_trial")
    assert star == [(float([r.trial_id for r in quadratic_grid].index(best.trial_id)), best.metrics["loss"])]


def test_param_importance_ranks_the_parameter_that_matters_above_noise(quadratic_grid):
    imp, note = plot.param_importances(quadratic_grid)
    assert list(imp) == ["x", "noise"] and imp["x"] > 0.8, imp
    assert note.startswith("fANOVA on 40 trials")
    fig = quadratic_grid.plot_param_importances()
    bars = [a for a in fig.axes[0].patches if a.get_gid() == "importances"]
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[-1] == "x" and bars[-1].get_width() == pytest.approx(imp["x"])  # the top bar
    from optuna.importance import MeanDecreaseImpurityImportanceEvaluator

    other, note = plot.param_importances(quadratic_grid, evaluator=MeanDecreaseImpurityImportanceEvaluator(seed=0))
    assert list(other)[0] == "x" and note.startswith("MeanDecreaseImpurity")


def test_importances_under_asha_compare_configs_where_all_are_still_running(asha_grid):
    imp, note = plot.param_importances(asha_grid)
    assert note == "fANOVA on 12 trials at training_iteration 1"
    assert list(imp) == ["floor"]
    imp, note = plot.param_importances(asha_grid, at="last")
    assert "last values of all 12 trials" in note or "trials that ran to their end" in note
    with pytest.raises(plot.PlotError, match="`at` is 'first'"):
        plot.param_importances(asha_grid, at="first")


def test_parallel_coordinates_draw_one_polyline_per_trial_through_its_config(quadratic_grid):
    fig = quadratic_grid.plot_parallel_coordinates()
    lines = _artist(fig, "lines", LineCollection).get_segments()
    assert len(lines) == len(quadratic_grid)
    xs = [r.config["x"] for r in quadratic_grid]
    lo, hi = min(xs), max(xs)
    best = quadratic_grid.get_best_result()
    top = lines[-1]  # the best trial is drawn last, on top
    assert top[0][1] == pytest.approx((best.config["x"] - lo) / (hi - lo))
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["x", "noise", "loss"]


def test_intermediate_values_color_trials_by_outcome(asha_grid):
    fig = asha_grid.plot_intermediate_values()
    pruned = _artist(fig, "intermediate:pruned", LineCollection).get_segments()
    complete = _artist(fig, "intermediate:complete", LineCollection).get_segments()
    n_pruned = sum(1 for r in asha_grid if r.stop_reason and "at rung" in r.stop_reason)
    assert len(pruned) == n_pruned and len(pruned) + len(complete) == len(asha_grid)


def test_pareto_front_highlights_the_non_dominated_trials(pareto_grid):
    fig = pareto_grid.plot_pareto_front()
    front = sorted(_points(fig, "front"))
    expected = sorted((r.metrics["error"], r.metrics["cost"]) for r in pareto_grid.get_best_results())
    assert [c for p in front for c in p] == pytest.approx([c for p in expected for c in p])  # (flat: pytest 9.2)
    assert len(_points(fig, "trials")) == len(pareto_grid)
    with pytest.raises(plot.PlotError, match="Pareto front needs two or more metrics"):
        plot.plot_pareto_front(pareto_grid, ["error"], ["min"])


def test_optuna_study_of_an_experiment_maps_pruned_and_complete_trials(asha_grid):
    from optuna.trial import TrialState

    study = plot.to_optuna_study(asha_grid)
    states = [t.state for t in study.trials]
    n_pruned = sum(1 for r in asha_grid if r.stop_reason and "at rung" in r.stop_reason)
    assert states.count(TrialState.PRUNED) == n_pruned
    assert states.count(TrialState.COMPLETE) == len(asha_grid) - n_pruned
    assert study.best_value == pytest.approx(asha_grid.get_best_result().metrics["loss"])


# ---------------------------------------------------------------------- inputs and errors


def test_a_misspelt_metric_gets_a_did_you_mean(asha_grid):
    with pytest.raises(plot.PlotError, match=r"no trial reported a numeric 'los'.*did you mean 'loss'\?"):
        asha_grid.plot_learning_curves("los")
    with pytest.raises(plot.PlotError, match="pass mode='min' or mode='max'"):
        plot.plot_optimization_history(asha_grid, "acc")


def test_an_experiment_without_results_says_there_is_nothing_to_plot(dask_client, plot_storage):
    import plot_trainables as T

    grid = tune.Tuner(T.fails_at_once, param_space={"a": tune.grid_search([1, 2])},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name="empty", storage_path=plot_storage, verbose=0, mlflow=False),
                      client=dask_client).fit()
    assert grid.num_errors == 2
    with pytest.raises(plot.PlotError, match=r"nothing to plot yet: 2 trial\(s\), none has reported a result"):
        grid.plot_learning_curves()
    with pytest.raises(plot.PlotError, match="nothing to plot yet"):
        plot.save_plots(grid.experiment_path, os.path.join(plot_storage, "empty_plots"))


def test_a_storage_path_or_a_missing_folder_is_named(asha_grid, plot_storage, tmp_path):
    with pytest.raises(plot.PlotError, match="is a storage path holding .*asha.*pass one of them"):
        plot.load_experiment(plot_storage)
    with pytest.raises(plot.PlotError, match="no such folder"):
        plot.load_experiment(str(tmp_path / "nope"))
    with pytest.raises(plot.PlotError, match="cannot plot a dict"):
        plot.load_experiment({})


def test_a_damaged_journal_is_reported_with_its_line(asha_grid, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(asha_grid.experiment_path, copy)
    lines = (copy / "journal.jsonl").read_text().splitlines()
    lines[3] = "{not json"
    (copy / "journal.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(plot.PlotError, match=r"journal.jsonl:4: damaged journal line"):
        plot.plot_learning_curves(str(copy))


def test_save_plots_draws_what_applies_and_says_why_the_rest_is_left_out(asha_grid, pbt_grid, tmp_path):
    saved = asha_grid.save_plots(str(tmp_path / "asha"))
    assert set(saved.files) == {"learning_curves", "optimization_history", "param_importances",
                                "parallel_coordinates", "intermediate_values", "timeline"}
    assert saved.skipped == {"pbt_lineage": "no PBT exploit in this experiment",
                             "pareto_front": "not a multi-objective experiment"}
    for path in saved.files.values():
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    saved = plot.save_plots(pbt_grid.experiment_path, str(tmp_path / "pbt"), "lineage,curves")
    assert list(saved.files) == ["pbt_lineage", "learning_curves"]  # in the order asked
    with pytest.raises(plot.PlotError, match="unknown plot kind 'curvs' \\(did you mean 'curves'\\?\\)"):
        plot.save_plots(pbt_grid, str(tmp_path / "x"), ["curvs"])


# ---------------------------------------------------------------------- other sources


def test_a_grid_without_its_journal_is_drawn_from_its_results(asha_grid):
    from tuneplat import ResultGrid

    bare = ResultGrid(list(asha_grid), "loss", "min", experiment_path=None)
    fig = bare.plot_learning_curves()
    assert len(_artist(fig, "curves", LineCollection).get_segments()) == len(asha_grid)
    pruned = [r for r in asha_grid if r.stop_reason and "at rung" in r.stop_reason]
    assert len(_points(fig, "marks:stopped")) == len(pruned)


def test_an_experiment_on_s3_is_drawn_from_its_url(dask_client, s3, cache_dir, monkeypatch, s3_endpoint, tmp_path):
    import plot_trainables as T

    fs, url = s3
    grid = tune.Tuner(T.curve, param_space={"floor": tune.grid_search([0.0, 0.5, 1.0]), "steps": 3},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name="remote", storage_path=f"{url}/results", storage_filesystem=fs,
                                                verbose=0, mlflow=False), client=dask_client).fit()
    assert grid.experiment_path.startswith("s3://")
    fig = grid.plot_learning_curves()  # through the grid's filesystem
    assert len(_artist(fig, "curves", LineCollection).get_segments()) == 3
    # from the URL alone, on a machine without the local cache: fsspec's configuration finds the server
    import shutil

    import s3fs

    shutil.rmtree(cache_dir)
    s3fs.S3FileSystem.clear_instance_cache()  # an instance an earlier test configured would answer for the URL
    with pytest.raises(plot.PlotError, match=f"{url}/results/remote: cannot read the experiment: "):
        plot.load_experiment(f"{url}/results/remote")  # no credentials, no endpoint: said plainly
    for k, v in {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "eu-west-1"}.items():
        monkeypatch.setenv(k, v)
    s3fs.S3FileSystem.clear_instance_cache()  # the instance above was made without them
    saved = plot.save_plots(f"{url}/results/remote", str(tmp_path / "p"), "curves,history")
    assert sorted(saved.files) == ["learning_curves", "optimization_history"]
    s3fs.S3FileSystem.clear_instance_cache()


def _fails_once(config):
    marker = config["marker"]
    for step in range(1, 6):
        if step == 3 and not os.path.exists(marker) and config["kind"] != "always":
            open(marker, "w").close()
            raise RuntimeError("first attempt crashes")
        if step == 3 and config["kind"] == "always":
            raise RuntimeError("always crashes")
        yield {"loss": 1.0 / step}


def test_retries_and_errors_on_the_timeline_and_the_curves(tmp_path):
    from tuneplat.testing import VirtualTimeExecutor

    grid = tune.Tuner(_fails_once, param_space={"kind": tune.grid_search(["once", "always"]),
                                                 "marker": str(tmp_path / "m")},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name="retry", storage_path=str(tmp_path / "r"), verbose=0,
                                                mlflow=False, failure_config=tune.FailureConfig(max_failures=1)),
                      executor=VirtualTimeExecutor(num_slots=2)).fit()
    assert [r.status for r in grid] == ["TERMINATED", "ERROR"]
    events = _journal(grid)
    failures = [e for e in events if e["event"] == "trial_failure"]
    assert [e["retry"] for e in failures] == [True, True, False]
    fig = grid.plot_learning_curves()
    assert _points(fig, "marks:error") == [(2.0, 0.5)]  # the trial that gave up, at its last report
    segs = _artist(fig, "curves", LineCollection).get_segments()
    assert [len(s) for s in segs] == [5, 2]  # the retried trial's iterations once each
    timeline = grid.plot_timeline()
    colors = _artist(timeline, "spans", LineCollection).get_colors()
    assert len(colors) == len([e for e in events if e["event"] == "trial_start"]) == 4


def test_the_public_surface_is_sorted_and_complete():
    import types

    assert plot.__all__ == sorted(plot.__all__)
    public = {n for n in dir(plot) if not n.startswith("_") and not isinstance(getattr(plot, n), types.ModuleType)}
    assert public - {"annotations", "os", "Any", "Callable", "Sequence", "dataclass", "field",
                     "resolve_kinds"} == set(plot.__all__)


def test_a_live_experiment_shows_its_running_trials(hyperband_grid):
    events = _journal(hyperband_grid)
    cut = next(i for i, e in enumerate(events) if e["event"] == "decision" and e["decision"] == "PAUSE") + 1
    live = plot.experiment_from_events(events[:cut], hyperband_grid.experiment_path)  # as read mid-run
    running = [t.trial_id for t in live.trials if t.spans and t.spans[-1][1] is None]
    started = {e["trial_id"] for e in events[:cut] if e["event"] == "trial_start"}
    assert running and set(running) <= started
    fig = plot.plot_timeline(live)
    assert len(_artist(fig, "spans", LineCollection).get_segments()) == len(
        [e for e in events[:cut] if e["event"] == "trial_start"])
    assert len(_points(plot.plot_learning_curves(live), "marks:paused")) == 1
