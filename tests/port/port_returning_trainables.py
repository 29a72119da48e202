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


def reproducible(config):
    """ray.train.torch.enable_reproducibility at the top of a training function."""
    import torch

    from tuneplat.train.torch import enable_reproducibility

    enable_reproducibility(seed=config["seed"])
    try:
        tune.report({"draw": float(torch.rand(1)), "deterministic": torch.are_deterministic_algorithms_enabled()})
    finally:  # the Dask worker process runs other tests' trials next
        torch.use_deterministic_algorithms(False)
