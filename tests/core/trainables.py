"""Module-level trainables for the core tests (workers import them by reference)."""

from __future__ import annotations

import os
import threading

import tuneplat as tune


def quadratic(config):
    for step in range(config.get("steps", 5)):
        tune.report({"loss": (config["x"] - 3) ** 2 + 1.0 / (step + 1), "step": step})


def count_to(config):
    """Reports forever-ish; writes one marker file per report that returned."""
    marker_dir = config["marker_dir"]
    for i in range(1000):
        tune.report({"loss": float(i)})
        open(os.path.join(marker_dir, f"{tune.get_context().get_trial_id()}_{i + 1}"), "w").close()


def fails_if_negative(config):
    tune.report({"loss": 1.0})
    if config["x"] < 0:
        raise ValueError(f"x={config['x']} is negative")
    tune.report({"loss": 0.5})


def forgets_metric(config):
    tune.report({"accuracy": 0.5})


def reports_nan(config):
    tune.report({"loss": float("nan")})
    tune.report({"loss": 1.0})


def one_report(config):
    tune.report({"loss": config["x"]})


def sleeps_forever(config):
    """Reports, then blocks on an event that never fires (until the time budget stops it at its next report)."""
    ev = threading.Event()
    for _ in range(1000):
        tune.report({"loss": 1.0})
        ev.wait(0.05)


def kills_cluster_worker(config):
    ev = threading.Event()
    tune.report({"loss": 1.0})
    ev.wait(5)  # the worker is closed under it
    tune.report({"loss": 0.5})


def one_long_epoch(config):
    """Reports once, then computes for far longer than any budget without reporting (one long epoch)."""
    tune.report({"loss": 1.0})
    threading.Event().wait(600)  # the workload: the tuner must end it, it never returns by itself
    tune.report({"loss": 0.5})


def _helper_main(ready_path):  # a data-prep helper process that outlives nothing on its own: waits to be ended
    open(ready_path, "w").close()
    threading.Event().wait()


def with_spawned_helper(config):
    """Starts a non-daemonic helper through multiprocessing's spawn context (as a spawn DataLoader or a data-prep
    pool does; its command line is `python -c from multiprocessing.spawn import spawn_main ...`), reports its pid,
    then reports steadily; the helper is never joined."""
    import multiprocessing

    ready = os.path.join(config["marker_dir"], f"helper-{tune.get_context().get_trial_id()}")
    helper = multiprocessing.get_context("spawn").Process(target=_helper_main, args=(ready,))
    helper.start()
    while not os.path.exists(ready):
        threading.Event().wait(0.01)  # the helper has started (file written by it)
    for step in range(config.get("steps", 200)):
        tune.report({"loss": 1.0 / (step + 1), "helper_pid": helper.pid})


def reports_phase(config):
    """Reports a loss and a ``phase`` that is a word for trial ``x=0`` (a str time_attr) and a number otherwise."""
    for step in range(1, 4):
        tune.report({"loss": float(step + config["x"]), "phase": "warmup" if config["x"] == 0 else step})
