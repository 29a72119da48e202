"""The progress view's numbers and text (``tuneplat.tracking._progress``), on a loop's state made by hand: no cluster."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

from tuneplat.core._trial import Trial, TrialStatus
from tuneplat.tracking._progress import ProgressReporter

LONG = "RuntimeError: " + "a long explanation of what went wrong " * 4


def _trial(i: int, status: TrialStatus, loss: float | None = None, error: str | None = None,
           stop: str | None = None) -> Trial:
    t = Trial(trial_id=f"abc_{i:05d}", config={"lr": 0.1 * (i + 1), "opt": {"name": "sgd"}}, path=f"/x/t{i}",
              name=f"t{i}", status=status, error=error, stop_reason=stop)
    if loss is not None:
        t.results.append({"loss": loss, "training_iteration": 3})
    return t


def _loop(trials, *, num_samples=10, budget=None, running=1, slots=4, tracking=("sqlite:////r/mlflow.db", "7")):
    cb = SimpleNamespace(tracking_uri=tracking[0], experiment_id=tracking[1])
    return SimpleNamespace(
        trials=trials, running={f"r{i}": None for i in range(running)}, world_size=2,
        searcher=SimpleNamespace(total=num_samples), tc=SimpleNamespace(num_samples=num_samples, time_budget_s=budget),
        executor=SimpleNamespace(num_slots=slots), callbacks=[cb], experiment_dir="/r/exp", experiment_name="exp")


def _reporter(trials, verbose=1, **kw):
    out = io.StringIO()  # not a terminal: plain lines
    rep = ProgressReporter("loss", "min", verbose=verbose, interval_s=5.0, stream=out)
    rep.attach(_loop(trials, **kw))
    return rep, out


TRIALS = [_trial(0, TrialStatus.TERMINATED, 0.5), _trial(1, TrialStatus.TERMINATED, 0.2, stop="ASHA: below cutoff"),
          _trial(2, TrialStatus.ERROR, 0.01, error=LONG), _trial(3, TrialStatus.RUNNING, 0.3),
          _trial(4, TrialStatus.PENDING)]


def test_status_line_counts_eta_best_and_slots():
    rep, _ = _reporter(TRIALS)
    rep.start = time.monotonic() - 30  # 30 s in, 3 of 10 trials done: ~70 s left at that pace
    line = rep.status_line(TRIALS)
    assert line.startswith("tuneplat [0:00:30] 3/10 trials done, 1 running, 1 pending, 1 error | ETA ~0:01:")
    # as Ray's "current best trial" and get_best_result(): an errored trial with a finite value is a candidate
    assert "best loss=0.01 (trial abc_00002, iter 3, errored; lr=0.3, opt/name=sgd)" in line
    assert line.endswith("slots 2/4 busy")  # one running trial of 2 ranks


def test_time_budget_caps_the_estimate_and_a_done_sweep_has_none():
    rep, _ = _reporter(TRIALS, budget=40)
    rep.start = time.monotonic() - 30
    assert "ETA ~0:00:10" in rep.status_line(TRIALS)
    finished = [_trial(i, TrialStatus.TERMINATED, 1.0) for i in range(10)]
    rep, _ = _reporter(finished)
    assert "ETA" not in rep.status_line(finished) and "10/10 trials done" in rep.status_line(finished)


def test_table_keeps_errors_and_stop_reasons_whole():
    rep, _ = _reporter(TRIALS)
    table = rep.table(TRIALS)
    assert LONG.strip() in table and "ASHA: below cutoff" in table
    assert table.splitlines()[1].split() == ["trial", "status", "iter", "loss", "lr", "opt/name", "note"]


def test_verbosity_silent_plain_and_table():
    rep, out = _reporter(TRIALS, verbose=0)
    rep.maybe_report(TRIALS, force=True)
    rep.event("trial abc_00003 started")
    rep.finish(TRIALS, "finished")
    assert out.getvalue() == ""
    rep, out = _reporter(TRIALS, verbose=1)
    rep.maybe_report(TRIALS, force=True)
    rep.event("trial abc_00003 started")
    assert "3/10 trials done" in out.getvalue() and "== Status" not in out.getvalue() and "started" not in out.getvalue()
    rep, out = _reporter(TRIALS, verbose=2)
    rep.maybe_report(TRIALS, force=True)
    rep.event("trial abc_00003 started")
    assert "== Status: 5 trials" in out.getvalue() and "trial abc_00003 started" in out.getvalue()


def test_summary_says_where_to_look_next():
    rep, out = _reporter(TRIALS)
    rep.finish(TRIALS, "finished")
    text = out.getvalue()
    assert "tuneplat: finished after " in text and "5 trials (1 ERROR, 1 PENDING, 1 RUNNING, 2 TERMINATED)" in text
    assert "tuneplat: best trial abc_00002: loss=0.01 at iteration 3 (the trial errored later)" in text
    assert "  tuneplat status /r/exp " in text
    assert "  mlflow ui --backend-store-uri sqlite:////r/mlflow.db --port 5000" in text
    assert "http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning&viewStateShareKey=tuneplat" in text
    rep, out = _reporter(TRIALS, tracking=("http://mlflow.example:5000", "3"))
    rep.finish(TRIALS, "finished")
    assert "open http://mlflow.example:5000/#/experiments/3/runs?" in out.getvalue()
    assert "mlflow ui" not in out.getvalue()  # a server: nothing to start


def test_the_embedded_clusters_dashboard_link_works_and_its_workers_ignore_ctrl_c():
    """The link printed at start serves Dask's dashboard (bokeh is a dependency), on 127.0.0.1; the worker
    processes ignore SIGINT (the tuner ends them), through the embedded cluster's worker preload."""
    import signal
    import urllib.request
    from urllib.parse import urlparse

    from tuneplat.execution._cluster import Cluster

    cluster = Cluster()
    try:
        link = cluster.dashboard_link
        assert urlparse(link).hostname == "127.0.0.1"
        with urllib.request.urlopen(link, timeout=60) as page:
            body = page.read().decode("utf-8", "replace")
        assert page.status == 200 and "bokeh" in body.lower() and "requires bokeh" not in body.lower()
        handlers = cluster.client.run(lambda: signal.getsignal(signal.SIGINT) == signal.SIG_IGN)
        assert handlers and all(handlers.values())
    finally:
        cluster.close()
