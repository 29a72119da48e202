"""The status table printed while an experiment runs."""

from __future__ import annotations

import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, TextIO

from ._trial import Trial, TrialStatus
from .search._space import flatten_dict

__all__ = ["ProgressReporter"]

_ORDER = {TrialStatus.RUNNING: 0, TrialStatus.PAUSED: 1, TrialStatus.PENDING: 2, TrialStatus.ERROR: 3, TrialStatus.TERMINATED: 4}


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.5g}"
    text = str(v)
    return text if len(text) <= 16 else text[:15] + "…"


class ProgressReporter:
    """A compact table: counts by status, then at most ``max_rows`` trials.

    Running trials come first, then the best finished ones by the metric, then
    errors; the rest are summarised as "... N more", so the table stays
    readable at 1,000 trials.
    """

    def __init__(self, metric: Any, mode: Any, verbose: int = 1, interval_s: float = 5.0, max_rows: int = 20,
                 stream: TextIO | None = None) -> None:
        self.metric = metric[0] if isinstance(metric, list) else metric
        self.mode = mode[0] if isinstance(mode, list) else mode
        self.verbose = verbose
        self.interval_s = interval_s
        self.max_rows = max_rows
        self.stream = stream or sys.stdout
        self._last = 0.0
        self.start = time.monotonic()

    def say(self, text: str) -> None:
        if self.verbose >= 1:
            print(text, file=self.stream, flush=True)

    def event(self, text: str) -> None:
        if self.verbose >= 2:
            print(text, file=self.stream, flush=True)

    def due(self) -> float:
        return self._last + self.interval_s

    def maybe_report(self, trials: Sequence[Trial], force: bool = False) -> None:
        if self.verbose < 1:
            return
        now = time.monotonic()
        if not force and now < self._last + self.interval_s:
            return
        self._last = now
        print(self.table(trials), file=self.stream, flush=True)

    def _key(self, t: Trial) -> tuple[Any, ...]:
        v = t.last_result.get(self.metric) if self.metric else None
        try:
            f = float(v)
        except (TypeError, ValueError):
            f = math.nan
        score = math.inf if not math.isfinite(f) else (f if self.mode != "max" else -f)
        return (_ORDER[t.status], score, t.trial_id)

    def table(self, trials: Sequence[Trial]) -> str:
        counts = Counter(str(t.status) for t in trials)
        elapsed = time.monotonic() - self.start
        head = f"== Status: {len(trials)} trials | " + " | ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        head += f" | {elapsed:.1f}s elapsed =="
        shown = sorted(trials, key=self._key)[: self.max_rows]
        keys: list[str] = []
        for t in shown:
            for k in flatten_dict(t.config):
                if k not in keys:
                    keys.append(k)
        keys = keys[:5]
        cols = ["trial", "status", "iter"] + ([self.metric] if self.metric else []) + keys
        rows = []
        for t in shown:
            flat = flatten_dict(t.config)
            # a trial_name_creator's name (Ray shows names); the default name is the trainable's + the id
            custom = t.name != f"{t.trainable_name}_{t.trial_id}" and t.name != t.trial_id
            row = [t.name if custom else t.trial_id, str(t.status), str(t.iteration)]
            if self.metric:
                row.append(_fmt(t.last_result.get(self.metric, "")))
            row += [_fmt(flat.get(k, "")) for k in keys]
            rows.append(row)
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
        lines = [head, "  ".join(c.ljust(w) for c, w in zip(cols, widths))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
        if len(trials) > len(shown):
            lines.append(f"... {len(trials) - len(shown)} more trials")
        return "\n".join(lines)
