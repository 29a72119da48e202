"""``tuneplat plot``: PNG files of a real experiment, their paths printed; bad input named with exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tuneplat.cli import main

PNG = b"\x89PNG\r\n\x1a\n"


def _is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == PNG


def test_plot_writes_every_plot_that_applies_and_prints_the_paths(asha_grid, tmp_path, capsys):
    out = tmp_path / "plots"
    assert main(["plot", asha_grid.experiment_path, "--out", str(out)]) == 0
    captured = capsys.readouterr()
    printed = captured.out.split()
    assert sorted(printed) == sorted(str(p) for p in out.iterdir())
    assert {os.path.basename(p) for p in printed} == {
        "learning_curves.png", "optimization_history.png", "param_importances.png", "parallel_coordinates.png",
        "intermediate_values.png", "timeline.png"}
    assert all(_is_png(p) for p in printed)
    assert "pbt_lineage not drawn: no PBT exploit in this experiment" in captured.err


def test_plot_kinds_metric_and_json(pbt_grid, tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["plot", pbt_grid.experiment_path, "--kind", "lineage", "--kind", "curves,history",
                 "--metric", "score", "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report["files"]) == ["pbt_lineage", "learning_curves", "optimization_history"]
    assert all(_is_png(p) for p in report["files"].values())


def test_plot_defaults_to_the_experiment_folder_and_runs_as_a_command(pareto_grid):
    # the console script, as a user types it
    proc = subprocess.run([sys.executable, "-m", "tuneplat.cli", "plot", pareto_grid.experiment_path,
                           "--kind", "pareto"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    path = os.path.join(pareto_grid.experiment_path, "plots", "pareto_front.png")
    assert proc.stdout.split() == [path] and _is_png(path)


def test_plot_errors_are_one_line_with_status_2(asha_grid, plot_storage, tmp_path, capsys):
    cases = [
        (["--metric", "los"], "did you mean 'loss'?"),
        (["--kind", "curvs"], "unknown plot kind 'curvs' (did you mean 'curves'?)"),
        (["--kind", "lineage"], "no PBT exploit in this experiment"),
        (["--kind", "pareto"], "a Pareto front needs two or more metrics"),
    ]
    for extra, message in cases:
        assert main(["plot", asha_grid.experiment_path, "--out", str(tmp_path / "x"), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("tuneplat: error: ") and message in err and err.count("\n") == 1, err
    assert main(["plot", plot_storage]) == 2
    assert "is a storage path holding" in capsys.readouterr().err
