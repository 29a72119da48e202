"""The MLflow UI (a real ``mlflow server`` on the experiment's embedded store) in real headless Chromium.

Runs where Chromium is installed (Debian: ``apt-get install -y chromium``); skipped where it is not,
unless ``TUNEPLAT_REQUIRE_BROWSER=1`` (set by ``.ci/run``), which makes a missing Chromium a failure.
Set ``TUNEPLAT_UI_SCREENSHOT=docs/img/mlflow-ui.png`` to refresh the screenshot in the docs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import mlflow_trainables as T
import pytest
from conftest import free_port, start_mlflow, stop_group
from mlflow import MlflowClient

import tuneplat as tune
from tuneplat.tracking._progress import mlflow_ui_hint

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
REQUIRED = os.environ.get("TUNEPLAT_REQUIRE_BROWSER") == "1"


@pytest.fixture
def chromium():
    if CHROMIUM is None:
        if REQUIRED:
            pytest.fail("TUNEPLAT_REQUIRE_BROWSER=1 but Chromium is not installed: apt-get install -y chromium")
        pytest.skip("Chromium is not installed (apt-get install -y chromium); the MLflow UI browser test needs it")
    return CHROMIUM


def _chromium(browser: str, tmp_path, url: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1600,1000",
           "--virtual-time-budget=20000", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=True,
                          env={**os.environ, "HOME": str(tmp_path)})


def _screenshot(browser: str, tmp_path, url: str, name: str) -> bytes:
    path = tmp_path / name
    _chromium(browser, tmp_path, url, f"--screenshot={path}")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return data


def _distinct_colours(png: bytes) -> int:
    """How many colours a screenshot has: a blank or error page has a handful, a rendered table hundreds."""
    import io

    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB").resize((400, 250))
    return len(set(img.getdata()))


@pytest.mark.slow
@pytest.mark.browser
def test_mlflow_ui_opens_the_sweep_right(chromium, dask_client, storage, tmp_path, monkeypatch):
    """Classic view, the saved view's metric and parameter columns (wide enough for whole values), the runs grouped
    under their sweep's run, a re-run's parent named after the folder its predecessor moved to, a trial's
    checkpoint artifacts, the parent's best values as tags and its plots: each checked in the page Chromium renders."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)

    def fit():
        return tune.Tuner(T.curve, param_space={"x": tune.grid_search([0.5, -1.0, 2.0]), "width": 64,
                                                "lr": tune.loguniform(1e-4, 1e-1)},
                          tune_config=tune.TuneConfig(metric="loss", mode="min"),
                          run_config=tune.RunConfig(name="ui-demo", storage_path=storage, verbose=0),
                          client=dask_client).fit()

    fit()
    results = fit()  # the same sweep again: the first run moves to ui-demo.<time>, its parent run is renamed so
    uri = f"sqlite:///{storage}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("ui-demo")  # named after the sweep
    assert exp is not None
    best = results.get_best_result()
    port = free_port()
    server = start_mlflow(["server", "--backend-store-uri", uri, "--artifacts-destination",
                           str(tmp_path / "served-artifacts")], port, str(tmp_path / "ui.log"))
    base = f"http://127.0.0.1:{port}/#/experiments/{exp.experiment_id}"
    try:
        # the runs table through the saved view tuneplat stores: metric and parameters as columns
        (runs_url,) = [line.split("open ", 1)[1] for line in mlflow_ui_hint(f"http://127.0.0.1:{port}", exp.experiment_id)]
        assert runs_url.startswith(f"{base}/runs?")  # the link the end of a run prints
        dom = _chromium(chromium, tmp_path, runs_url, "--dump-dom").stdout
        names = [os.path.basename(r.path) for r in results]
        missing = [n for n in names if n not in dom]
        assert not missing, f"the MLflow UI does not list {missing}"
        # the classic view ("Model training": Runs, Models, Traces), not the GenAI one (Evaluation runs, Judges...)
        assert "Evaluation runs" not in dom and "Judges" not in dom and ">Models<" in dom
        for column in ("loss", "width", "lr"):
            assert f">{column}<" in dom, f"no {column!r} column in the runs table"
        assert f"{best.metrics['loss']:.4g}"[:4] in dom  # the metric's values are shown
        # lr's values are whole: its column is as wide as the saved view says (not the narrow default)
        lr_header = re.search(r'col-id="params\.`lr`"[^>]*style="[^"]*width: (\d+)px', dom)
        assert lr_header and int(lr_header.group(1)) >= 170, "the lr column is cut off"
        # the trials are nested: grouped under their sweep's run (expanded), with the parent run in the group
        assert f"Group: {results.experiment_path}" in dom or "Group:" in dom
        group_at = dom.index("Group:")
        assert all(dom.index(n) > group_at for n in names)
        shot = _screenshot(chromium, tmp_path, runs_url, "runs.png")
        assert _distinct_colours(shot) > 50

        # a re-run of the sweep: the previous run's parent is named after the folder it moved to (no "#2")
        parents = client.search_runs([exp.experiment_id], "tags.`tuneplat.kind` = 'experiment'")
        (moved,) = [n for n in os.listdir(storage) if n.startswith("ui-demo.")]
        assert sorted(p.info.run_name for p in parents) == sorted(["ui-demo", moved])
        by_date = _chromium(chromium, tmp_path, f"{base}/runs?workflowType=machine_learning", "--dump-dom").stdout
        assert moved in by_date and "ui-demo #2" not in by_date
        assert ">width<" not in by_date  # (without the saved view, no parameter columns: the view brings them)

        # a trial's run: its checkpoints are artifacts the UI lists
        child = f"{base}/runs/{best.mlflow_run_id}/artifacts?workflowType=machine_learning"
        dom = _chromium(chromium, tmp_path, child, "--dump-dom").stdout
        assert "checkpoints" in dom
        assert _distinct_colours(_screenshot(chromium, tmp_path, child, "trial.png")) > 50

        # the parent run: the best trial's values as tags (no "best" metrics that would make an empty chart section)
        (parent,) = [p for p in parents if p.info.run_name == "ui-demo"]
        assert "tuneplat.best.loss" in parent.data.tags and not parent.data.metrics
        dom = _chromium(chromium, tmp_path, f"{base}/runs/{parent.info.run_id}?workflowType=machine_learning",
                        "--dump-dom").stdout
        assert "tuneplat.best.loss" in dom

        # the parent run's plots (logged at the end of the sweep): listed, and one drawn in the artifact viewer
        plots = [a.path for a in client.list_artifacts(parent.info.run_id, "plots") if a.path.endswith(".png")]
        assert plots, "no plots logged on the parent run"
        page = f"{base}/runs/{parent.info.run_id}/artifacts/{plots[0]}?workflowType=machine_learning"
        dom = _chromium(chromium, tmp_path, page, "--dump-dom").stdout
        assert os.path.basename(plots[0]) in dom and "<img" in dom
        assert _distinct_colours(_screenshot(chromium, tmp_path, page, "parent-plot.png")) > 50
        if os.environ.get("TUNEPLAT_UI_SCREENSHOT"):  # refresh the docs' screenshots
            shutil.copyfile(tmp_path / "runs.png", os.environ["TUNEPLAT_UI_SCREENSHOT"])
            stem = os.path.splitext(os.environ["TUNEPLAT_UI_SCREENSHOT"])[0]
            shutil.copyfile(tmp_path / "trial.png", stem + "-trial.png")
            shutil.copyfile(tmp_path / "parent-plot.png", stem + "-plots.png")
    finally:
        stop_group(server)
