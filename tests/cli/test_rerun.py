"""Running the same experiment twice: the new run gets a clean folder, the old one moves aside whole (readable and
restorable), plots are redrawn without stale files, and MLflow's parent runs are named after their folders."""

from __future__ import annotations

import os

import tuneplat as tune
from tuneplat.cli import main
from tuneplat.plot import save_plots
from tuneplat.testing import VirtualTimeExecutor


def curve(config):
    for step in range(1, 4):
        yield {"loss": config["x"] + 1.0 / step}


def _fit(storage, xs, mlflow=False):
    return tune.Tuner(curve, param_space={"x": tune.grid_search(xs)},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name="again", storage_path=storage, verbose=0, mlflow=mlflow),
                      executor=VirtualTimeExecutor(num_slots=2)).fit()


def _trial_dirs(path):
    return sorted(n for n in os.listdir(path) if os.path.isdir(os.path.join(path, n)) and n.startswith("curve_"))


def test_a_rerun_moves_the_previous_run_aside_whole_and_starts_clean(storage, capsys):
    first = _fit(storage, [1.0, 2.0, 3.0])
    os.makedirs(os.path.join(first.experiment_path, "plots"))
    open(os.path.join(first.experiment_path, "plots", "learning_curves.png"), "wb").close()
    second = _fit(storage, [5.0, 6.0])
    path = second.experiment_path
    assert path == first.experiment_path
    assert len(_trial_dirs(path)) == 2 and not os.path.exists(os.path.join(path, "plots"))
    assert not [n for n in os.listdir(path) if n.endswith(".old")]
    moved = [n for n in os.listdir(storage) if n.startswith("again.")]
    assert len(moved) == 1
    old = os.path.join(storage, moved[0])
    assert len(_trial_dirs(old)) == 3 and os.path.isfile(os.path.join(old, "plots", "learning_curves.png"))
    # the old run is an experiment folder of its own: status reads it, restore would too
    assert main(["status", old]) == 0
    out = capsys.readouterr().out
    assert "3 trials" in out and "finished" in out
    assert tune.Tuner.can_restore(old)
    assert main(["status", storage]) == 0
    listing = capsys.readouterr().out
    assert "2 experiment(s)" in listing and moved[0] in listing  # each listed by its folder's name


def test_plots_drawn_again_leave_no_file_of_a_kind_that_no_longer_applies(storage):
    grid = _fit(storage, [1.0, 2.0])
    out = os.path.join(grid.experiment_path, "plots")
    os.makedirs(out)
    stale = os.path.join(out, "pbt_lineage.png")  # e.g. from an earlier PBT run of this name
    open(stale, "wb").close()
    saved = save_plots(grid.experiment_path, out)
    assert "pbt_lineage" in saved.skipped and not os.path.exists(stale)
    assert os.path.isfile(saved.files["learning_curves"])


def test_mlflow_names_the_previous_parent_after_its_new_folder(storage, tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = tune.MLflowConfig(tracking_uri=uri, log_plots=False)
    _fit(storage, [1.0], mlflow=cfg)
    _fit(storage, [2.0], mlflow=cfg)
    moved = [n for n in os.listdir(storage) if n.startswith("again.")]
    client = mlflow.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("again")
    parents = client.search_runs([exp.experiment_id], filter_string="tags.`tuneplat.kind` = 'experiment'")
    names = sorted(r.data.tags["mlflow.runName"] for r in parents)
    assert names == sorted(["again", moved[0]])  # no "again #2"
    dirs = {r.data.tags["mlflow.runName"]: r.data.tags["tuneplat.experiment_dir"] for r in parents}
    assert dirs[moved[0]] == os.path.join(storage, moved[0])
