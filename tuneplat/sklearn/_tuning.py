"""What a scikit-learn search hands the Tuner and reads back from it: the candidates, the stop on a raised
error, the check that every candidate ran, and the exception a fold raised."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Mapping
from typing import Any

from ..search._searcher import Searcher
from ..stopper import Stopper
from ._trial import CANDIDATE_KEY, EXCEPTION_KEY

__all__ = ["Candidates", "StopOnRaise", "accepts_sample_weight", "check_finished", "unpickle_exception"]

logger = logging.getLogger("tuneplat")


class Candidates(Searcher):
    """Suggests a fixed list of candidates in order (a grid, or random draws made before the first trial)."""

    def __init__(self, shown: list[dict[str, Any]]) -> None:
        super().__init__()
        self.shown = shown
        self.next = 0

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self.next >= len(self.shown):
            return Searcher.FINISHED
        config = {CANDIDATE_KEY: self.next, **self.shown[self.next]}
        self.next += 1
        return config


class StopOnRaise(Stopper):
    """``error_score="raise"``: the first trial that reports an exception ends the search."""

    def __init__(self) -> None:
        self.raised = False

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        if EXCEPTION_KEY in result:
            self.raised = True
        return self.raised

    def stop_all(self) -> bool:
        return self.raised


def check_finished(grid: Any, results: list[Any], n_candidates: int | None, time_budget_s: Any) -> None:
    """An interrupted search raises (as scikit-learn's does on Ctrl-C), instead of scoring what it missed as failures."""

    from ..core._replay import load_state

    status = None
    try:
        status = load_state(grid.experiment_path).status
    except Exception:  # noqa: BLE001 - remote storage or a damaged journal: judge by the trials alone
        logger.debug("tuneplat: cannot read the search's journal", exc_info=True)
    unfinished = [r for r in results if r.status not in ("TERMINATED", "ERROR")]
    where = f"The experiment folder {grid.experiment_path} holds the trials that ran."
    if status == "interrupted":
        raise KeyboardInterrupt(f"The search was interrupted with {len(unfinished)} candidate(s) unfinished. {where}")
    missing = n_candidates - len(results) if n_candidates is not None else 0
    if unfinished or (missing > 0 and time_budget_s is None):
        raise RuntimeError(
            f"The search ended ({status or 'unknown status'}) before every candidate was cross-validated: "
            f"{len(unfinished)} trial(s) unfinished, {max(missing, 0)} never started (a cluster without a free worker "
            f"for TUNEPLAT_WORKER_WAIT_S, or an error in the tuner: see the log above). {where}")


def accepts_sample_weight(scorers: Any) -> bool:
    import inspect

    if hasattr(scorers, "_accept_sample_weight"):
        return bool(scorers._accept_sample_weight())
    try:
        return "sample_weight" in inspect.signature(scorers).parameters
    except (TypeError, ValueError):
        return False


def unpickle_exception(blob: Any, tb: str | None) -> BaseException:
    """The exception a fold raised with ``error_score="raise"`` (it came over the trial's authenticated channel)."""
    try:
        exc = pickle.loads(blob)
    except Exception:  # noqa: BLE001 - its class is not importable here: its text
        return RuntimeError(f"a fit failed with error_score='raise':\n{tb}")
    if isinstance(exc, BaseException):
        if tb:
            exc.add_note(f"Raised on a Dask worker while cross-validating a candidate:\n{tb}")
        return exc
    return RuntimeError(f"a fit failed with error_score='raise':\n{tb}")
