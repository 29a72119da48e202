"""Function trainables that return or yield their results, as Ray Tune's quickstart does (imported by workers)."""

from __future__ import annotations

import tuneplat as tune


def objective(config):
    """Ray's quickstart: the final metrics are the return value."""
    score = config["a"] ** 2 + config["b"]
    return {"score": score}


def returns_number(config):
    return config["a"] * 10.0


def yields_results(config):
    for step in range(3):
        yield {"loss": config["a"] / (step + 1)}


def reports_then_returns(config, offset=0.0):
    tune.report({"score": 100.0})
    return {"score": config["a"] + offset}


def returns_text(config):
    return "not a metric"
