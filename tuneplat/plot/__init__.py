"""Plots of an experiment, drawn with matplotlib from its journal.

Every function takes an experiment folder (``<storage_path>/<name>``, local or
a remote URL), a :class:`~tuneplat.ResultGrid` or an :class:`Experiment` read
once with :func:`load_experiment`, and returns a :class:`matplotlib.figure.Figure`.
The same plots are ``ResultGrid`` methods, the ``tuneplat plot`` command, and
artifacts of the MLflow parent run (``plots/*.png``).

==========================  ================================================================
``plot_learning_curves``    every trial's metric over iterations (or time), with the points
                            where the scheduler stopped, paused or cloned it
``plot_intermediate_values``Optuna's view: reports colored by outcome (complete/pruned/failed)
``plot_optimization_history`` trial values in creation order and the best so far
``plot_param_importances``  fANOVA (Optuna's evaluators) on any experiment's results
``plot_parallel_coordinates`` config values and final metric, one polyline per trial
``plot_pbt_lineage``        which trial cloned which, at which iteration, into which config
``plot_timeline``           when each trial ran, and the scheduler's decisions
``plot_pareto_front``       multi-objective sweeps: the non-dominated trials
==========================  ================================================================

Example:
    >>> from tuneplat import plot
    >>> fig = plot.plot_learning_curves("./tuneplat_results/digits-asha")  # doctest: +SKIP
    >>> plot.save_plots("./tuneplat_results/digits-asha", "plots/")  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._curves import plot_intermediate_values, plot_learning_curves
from ._data import Experiment, Mark, PlotError, TrialRecord, experiment_from_events, load_experiment
from ._history import plot_optimization_history, plot_pareto_front
from ._lineage import plot_pbt_lineage, plot_timeline
from ._optuna import infer_distributions, to_optuna_study
from ._params import param_importances, plot_parallel_coordinates, plot_param_importances

__all__ = [
    "Experiment",
    "KINDS",
    "Mark",
    "PlotError",
    "SavedPlots",
    "TrialRecord",
    "experiment_from_events",
    "infer_distributions",
    "load_experiment",
    "param_importances",
    "plot_intermediate_values",
    "plot_learning_curves",
    "plot_optimization_history",
    "plot_parallel_coordinates",
    "plot_param_importances",
    "plot_pareto_front",
    "plot_pbt_lineage",
    "plot_timeline",
    "save_plots",
    "to_optuna_study",
]

#: the kinds of plot :func:`save_plots` and ``tuneplat plot --kind`` know, in the order they are drawn
KINDS: tuple[str, ...] = ("learning_curves", "optimization_history", "param_importances", "parallel_coordinates",
                          "intermediate_values", "pbt_lineage", "timeline", "pareto_front")
_ALIASES = {"curves": "learning_curves", "history": "optimization_history", "importance": "param_importances",
            "importances": "param_importances", "parallel": "parallel_coordinates",
            "intermediate": "intermediate_values", "lineage": "pbt_lineage", "pbt": "pbt_lineage",
            "pareto": "pareto_front", "decisions": "timeline"}


@dataclass
class SavedPlots:
    """What :func:`save_plots` wrote (kind -> file) and what it left out (kind -> why)."""

    files: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def resolve_kinds(kinds: Sequence[str] | str | None) -> list[str] | None:
    """Canonical kind names (aliases such as ``curves`` accepted); None means every kind that applies."""
    if kinds is None:
        return None
    if isinstance(kinds, str):
        kinds = [k for k in kinds.split(",") if k.strip()]
    out = []
    for k in kinds:
        name = _ALIASES.get(k.strip(), k.strip())
        if name == "all":
            return None
        if name not in KINDS:
            import difflib

            close = difflib.get_close_matches(name, list(KINDS) + list(_ALIASES), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise PlotError(f"unknown plot kind {k!r}{hint}; the kinds are: {', '.join(KINDS)}, or 'all'.")
        if name not in out:
            out.append(name)
    return out


def _applies(exp: Experiment, kind: str) -> str | None:
    """Why ``kind`` does not apply to ``exp`` by default (None: it does)."""
    multi = isinstance(exp.metric, list)
    if kind == "pbt_lineage" and not any(t.exploits for t in exp.trials):
        return "no PBT exploit in this experiment"
    if kind == "pareto_front" and not multi:
        return "not a multi-objective experiment"
    if kind in ("param_importances", "parallel_coordinates") and not exp.param_table()[0]:
        return "no config key varies between trials"
    return None


def _remove_stale(out_dir: str, kind: str, fmt: str) -> None:
    """A kind not drawn this time: its file from an earlier drawing would pass for a current one."""
    path = os.path.join(out_dir, f"{kind}.{fmt}")
    if os.path.isfile(path):
        os.remove(path)


def save_plots(source: Any, out_dir: str, kinds: Sequence[str] | str | None = None, *, metric: str | None = None,
               mode: str | None = None, dpi: int = 110, fmt: str = "png") -> SavedPlots:
    """Draw plots of an experiment into ``out_dir`` (``<kind>.png``); return what was written.

    With ``kinds=None`` every kind that applies is drawn (the PBT lineage only
    for PBT experiments, the Pareto front only for multi-objective ones), and a
    plot that cannot be drawn (e.g. importances with a single finished trial) is
    left out with its reason in :attr:`SavedPlots.skipped`. Kinds asked for by
    name must all be drawn, else :class:`PlotError`.

    Args:
        source: an experiment folder, a ResultGrid or an :class:`Experiment`.
        out_dir: folder to write into (created).
        kinds: names from :data:`KINDS` (or aliases: curves, history, importance, parallel,
            intermediate, lineage, timeline, pareto), a comma-separated string, or None for all.
        metric, mode: the objective (default: the experiment's).

    Raises:
        PlotError: the experiment has no results, an unknown kind or metric, or a kind asked by name failed.

    Example:
        >>> saved = save_plots("./tuneplat_results/digits-asha", "plots")  # doctest: +SKIP
        >>> saved.files["learning_curves"]  # doctest: +SKIP
        'plots/learning_curves.png'
    """
    exp = load_experiment(source)
    exp.require_results()
    chosen = resolve_kinds(kinds)
    explicit = chosen is not None
    if metric is not None:
        exp.resolve_metric(metric)  # a misspelt metric is an error whatever the kinds
    saved = SavedPlots()
    draw: dict[str, Callable[[], Any]] = {
        "learning_curves": lambda: plot_learning_curves(exp, metric, mode=mode),
        "optimization_history": lambda: plot_optimization_history(exp, metric, mode),
        "param_importances": lambda: plot_param_importances(exp, metric, mode),
        "parallel_coordinates": lambda: plot_parallel_coordinates(exp, metric, mode),
        "intermediate_values": lambda: plot_intermediate_values(exp, metric),
        "pbt_lineage": lambda: plot_pbt_lineage(exp, metric),
        "timeline": lambda: plot_timeline(exp),
        "pareto_front": lambda: plot_pareto_front(exp),
    }
    os.makedirs(out_dir, exist_ok=True)
    for kind in chosen or list(KINDS):
        if not explicit:
            why = _applies(exp, kind)
            if why:
                saved.skipped[kind] = why
                _remove_stale(out_dir, kind, fmt)
                continue
        try:
            fig = draw[kind]()
        except PlotError as exc:
            if explicit:
                raise
            saved.skipped[kind] = str(exc)
            _remove_stale(out_dir, kind, fmt)
            continue
        except Exception as exc:  # noqa: BLE001 - drawing every kind: one that breaks must not cost the others
            if explicit:
                raise
            saved.skipped[kind] = f"could not be drawn: {type(exc).__name__}: {exc}"
            logging.getLogger("tuneplat").warning("tuneplat: the %s plot of %s could not be drawn", kind,
                                                  exp.path, exc_info=True)
            continue
        path = os.path.join(out_dir, f"{kind}.{fmt}")
        fig.savefig(path, dpi=dpi)
        saved.files[kind] = path
    return saved
