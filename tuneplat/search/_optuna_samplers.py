"""Optuna samplers by short name, their seeds on resume, and the out-of-memory constraint."""

from __future__ import annotations

import optuna

__all__ = ["OOM_ATTR", "make_sampler", "oom_constraints"]

_SAMPLER_NAMES = ("tpe", "cmaes", "gp", "qmc", "random", "nsgaii")


def _require(module: str, sampler: str, pip: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ImportError(f'sampler="{sampler}" needs the {module!r} package: pip install {pip}')


#: user attribute set on an Optuna trial whose tuneplat trial ran out of memory (1.0)
OOM_ATTR = "tuneplat_oom"


def oom_constraints(trial: optuna.trial.FrozenTrial) -> list[float]:
    """A ``constraints_func`` for Optuna's samplers before 5.0: a trial that ran out of memory is infeasible.

    With Optuna >= 5 nothing is needed: an out-of-memory trial gets ``trial.set_constraint("oom", 1.0)``
    (any sampler that handles constraints reads it). On older Optuna, pass this to the sampler you give
    :class:`OptunaSearch`, e.g.
    ``OptunaSearch(sampler=optuna.samplers.NSGAIISampler(constraints_func=oom_constraints))`` (TPE, NSGA-II,
    NSGA-III and GP samplers take one). Optuna reads values ``<= 0`` as feasible: 1.0 for an out-of-memory
    trial, 0.0 otherwise.
    """
    return [float(trial.user_attrs.get(OOM_ATTR, 0.0))]


def make_sampler(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    """An Optuna sampler from its short name, seeded with ``seed``."""
    key = name.lower()
    if key == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if key == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if key == "nsgaii":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if key == "cmaes":
        _require("cmaes", "cmaes", "cmaes")
        return optuna.samplers.CmaEsSampler(seed=seed)
    if key == "qmc":
        _require("scipy", "qmc", "scipy")
        return optuna.samplers.QMCSampler(seed=seed)
    if key == "gp":
        _require("scipy", "gp", "scipy torch")
        _require("torch", "gp", "scipy torch")
        return optuna.samplers.GPSampler(seed=seed)
    raise ValueError(
        f"The value of `sampler` is {name!r}, but must be an optuna.samplers.BaseSampler "
        f"or one of {', '.join(repr(n) for n in _SAMPLER_NAMES)}."
    )


def _resume_seed(seed: int | None, n_trials: int) -> int | None:
    """Seed for a sampler continuing a study that already has ``n_trials`` trials.

    Re-using ``seed`` would replay the random start-up draws of the first
    trials; mixing in the trial count keeps resumed runs deterministic
    without repeating configs.
    """
    if seed is None or n_trials == 0:
        return seed
    return (int(seed) * 1_000_003 + n_trials) % (2**32)
