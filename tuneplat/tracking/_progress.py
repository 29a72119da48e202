"""What the terminal shows while an experiment runs, and what it says at the end.

On a terminal, a live view (``rich``) refreshed in place about once a second: a
progress bar of trials done out of the total, elapsed time and an estimate of
what is left, the current best trial, how many worker slots are busy, the
trials table, and the last trial events in full (errors and stop reasons are
wrapped, never cut). Anywhere else (a pipe, a log file, a notebook), plain
lines appended every ``progress_interval_s``.

Verbosity (``RunConfig.verbose``, as in Ray Tune): 0 silent; 1 the progress
lines and the summary at the end; 2 (and 3) also the trials table and every
trial event. At the end (verbosity >= 1): a summary with the best trial and
the commands to look further (``tuneplat status``, ``mlflow ui``).

The tuner's loop drives it: :meth:`ProgressReporter.attach` once the search is
set up, :meth:`maybe_report` from the loop (the loop wakes at :meth:`due`),
:meth:`say` / :meth:`event` for messages, :meth:`finish` when it ends. The
reporter only reads the loop's state.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, TextIO

from .._redact import redact, strip_credentials
from .._settings import env_str
from ..core._trial import Trial, TrialStatus
from ..search._space import flatten_dict

__all__ = ["ProgressReporter", "mlflow_ui_hint", "resume_hint", "status_words"]

logger = logging.getLogger("tuneplat")

_ORDER = {TrialStatus.RUNNING: 0, TrialStatus.PAUSED: 1, TrialStatus.PENDING: 2, TrialStatus.ERROR: 3,
          TrialStatus.TERMINATED: 4}
_STYLE = {"RUNNING": "cyan", "PAUSED": "yellow", "PENDING": "dim", "ERROR": "red", "TERMINATED": "green"}
#: the saved view of the MLflow runs table that tuneplat stores on the experiment (see tracking/_mlflow/)
MLFLOW_VIEW_KEY = "tuneplat"
_LIVE_REFRESH_S = 1.0


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.5g}"
    text = str(v)
    return text if len(text) <= 16 else text[:15] + "…"


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


def _note(t: Trial) -> str:
    """The trial's error (first line) or stop reason, whole."""
    if t.error:
        return str(t.error).strip().splitlines()[0] if str(t.error).strip() else "error"
    return t.stop_reason or ""


def status_words(status: str, counts: Counter[str] | dict[str, int], total: int) -> str:
    """How an experiment ended, in words: ``finished``, or ``finished with all 4 trials errored``."""
    if status == "finished" and total and counts.get("ERROR", 0) == total:
        return f"finished with all {total} trials errored"
    return status


def resume_hint(experiment_dir: str) -> str:
    """How to continue an interrupted experiment: the CLI's command for a folder ``tuneplat run`` started."""
    if os.path.isfile(os.path.join(experiment_dir, "sweep.yaml")):
        return f"tuneplat resume {experiment_dir}"
    return f"Tuner.restore({experiment_dir!r}, trainable).fit()"


def mlflow_ui_hint(tracking_uri: str | None, experiment_id: str | None) -> list[str]:
    """Lines telling how to open the experiment in the MLflow UI (the runs table with tuneplat's saved view)."""
    if not tracking_uri:
        return []
    # workflowType: MLflow 3.17's UI switch between its GenAI and "Model training" views (remembered per browser,
    # GenAI by default); viewStateShareKey: the saved runs-table view tuneplat stores on the experiment
    query = (f"/#/experiments/{experiment_id}/runs?workflowType=machine_learning&viewStateShareKey={MLFLOW_VIEW_KEY}"
             if experiment_id else "/#/experiments?workflowType=machine_learning")
    # Credentials never reach the console, wherever the URI came from (RunConfig or $MLFLOW_TRACKING_URI): the
    # browser asks for them, and a backend-store URI is shown with ``***`` for the password the user already has.
    if tracking_uri.startswith(("http://", "https://")):
        return [f"open {strip_credentials(tracking_uri).rstrip('/')}{query}"]
    if tracking_uri.startswith("databricks"):
        return []
    return [f"mlflow ui --backend-store-uri {redact(tracking_uri)} --port 5000",
            f"  then open http://127.0.0.1:5000{query}"]



def _shown_name(t: Trial) -> str:
    """A ``trial_name_creator``'s name (Ray shows names); the id when the name is the default (trainable + id)."""
    return t.name if t.name not in (f"{t.trainable_name}_{t.trial_id}", t.trial_id) else t.trial_id

class ProgressReporter:
    """The live view of one experiment (see the module docstring).

    Args:
        metric: the experiment's metric (the first of a list is shown as "best").
        mode: "min" or "max" (likewise).
        verbose: 0, 1, 2 or 3 (``RunConfig.verbose``).
        interval_s: seconds between two plain progress lines (``RunConfig.progress_interval_s``).
        max_rows: most trials shown in the table.
        stream: where to write (standard output by default).
    """

    def __init__(self, metric: Any, mode: Any, verbose: int = 1, interval_s: float = 5.0, max_rows: int = 20,
                 stream: TextIO | None = None) -> None:
        self.metric = metric[0] if isinstance(metric, list) else metric
        self.mode = mode[0] if isinstance(mode, list) else mode
        self.verbose = verbose
        self.max_rows = max_rows
        self.stream = stream or sys.stdout
        self.live_capable = self._is_terminal(self.stream)
        self.interval_s = min(interval_s, _LIVE_REFRESH_S) if self.live_capable else interval_s
        self._last = 0.0
        self.start = time.monotonic()
        self._started = False
        self._loop: Any = None
        self._live: Any = None
        self._console: Any = None
        self._swapped: list[tuple[logging.StreamHandler[Any], Any]] = []
        self.events: collections.deque[str] = collections.deque(maxlen=6)
        self.finished = False

    # ---------------------------------------------------------------- wiring
    @staticmethod
    def _is_terminal(stream: Any) -> bool:
        if env_str("TUNEPLAT_PLAIN_PROGRESS"):
            return False
        try:
            if not stream.isatty():
                return False
        except (AttributeError, ValueError):
            return False
        return "ipykernel" not in sys.modules or stream is sys.__stdout__

    def attach(self, loop: Any) -> None:
        """Read what the view needs from the tuner's loop (read-only): totals, budget, folder, callbacks."""
        self._loop = loop

    def _total(self) -> int | None:
        loop = self._loop
        if loop is None:
            return None
        searcher = loop.searcher
        for s in (searcher, getattr(searcher, "searcher", None)):
            total = getattr(s, "total", None)
            if isinstance(total, int) and total > 0:
                return max(total, len(loop.trials))
        n = getattr(loop.tc, "num_samples", None)
        if isinstance(n, int) and n > 0:
            return max(n, len(loop.trials))
        return None

    def _budget(self) -> float | None:
        loop = self._loop
        budget = getattr(loop.tc, "time_budget_s", None) if loop is not None else None
        try:
            return float(budget) if budget else None
        except (TypeError, ValueError):  # a timedelta
            seconds = getattr(budget, "total_seconds", None)
            return float(seconds()) if seconds else None

    def _slots(self) -> tuple[int, int | None]:
        """Worker slots busy (ranks of running trials) and how many the cluster has, when known."""
        loop = self._loop
        if loop is None:
            return 0, None
        if getattr(loop, "min_world_size", None) is not None:  # elastic groups: the ranks each one has now
            busy = sum(int(loop.by_id[tid].world_size or 0) for tid in loop.running if tid in loop.by_id)
        else:
            busy = len(loop.running) * max(1, int(getattr(loop, "world_size", 1) or 1))
        ex = loop.executor
        ledger = getattr(ex, "ledger", None)
        total = len(ledger.slots) if ledger is not None and hasattr(ledger, "slots") else None
        if not total:
            total = getattr(ex, "num_slots", None) or getattr(ex, "max_slots", None) or None
        return busy, total

    def _tracking(self) -> tuple[str | None, str | None]:
        loop = self._loop
        for cb in (getattr(loop, "callbacks", None) or []):
            uri = getattr(cb, "tracking_uri", None)
            if uri:
                return uri, getattr(cb, "experiment_id", None)
        return None, None

    # ---------------------------------------------------------------- messages
    def say(self, text: str) -> None:
        """A message for the user (verbosity >= 1)."""
        if self.verbose >= 1:
            self._print(text)

    def event(self, text: str) -> None:
        """A trial event: in the live view's last-events panel; printed at verbosity >= 2."""
        self.events.append(f"{time.strftime('%H:%M:%S')} {text}")
        if self.verbose >= 2:
            self._print(text)

    def trial_error(self, trial: Trial, error_file: str | None = None) -> None:
        """A trial ended in ERROR: its error's first line and where the traceback is.

        In the live view it joins the last-events panel; in plain lines (a pipe,
        a log file) it is printed at verbosity >= 1, as the live view shows it.
        """
        first = _note(trial) or "error"
        self.events.append(f"{time.strftime('%H:%M:%S')} trial {trial.trial_id} ERROR: {first}")
        if self.verbose < 1 or (self.live_capable and self.verbose < 2):
            return
        where = ["results.errors"]
        exp_dir = getattr(self._loop, "experiment_dir", None)
        if exp_dir:
            where.append(f"tuneplat status {exp_dir} --trial {trial.trial_id}")
        if error_file:
            where.append(error_file)
        self._print(f"tuneplat: trial {trial.trial_id} ERROR: {first}\n  traceback: {'; '.join(where)}")

    def _print(self, text: str) -> None:
        if self._console is not None:
            self._console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            print(text, file=self.stream, flush=True)

    def elapsed_text(self) -> str:
        """Time since the run started, as the summary shows it (h:mm:ss)."""
        return _clock(time.monotonic() - self.start)

    # ---------------------------------------------------------------- the view
    def due(self) -> float:
        """When (time.monotonic) the view wants to be refreshed next."""
        return self._last + self.interval_s

    def maybe_report(self, trials: Sequence[Trial], force: bool = False) -> None:
        """Refresh the view if it is due (or ``force``)."""
        if self.verbose < 1 or self.finished:
            return
        now = time.monotonic()
        if not self._started:
            self._started = True
            self.start = now  # the clock of the run, not of the set-up
        if not force and now < self._last + self.interval_s:
            return
        self._last = now
        if self.live_capable:
            try:
                self._refresh_live(trials)
                return
            except Exception:  # noqa: BLE001 - the view must never end the experiment
                logger.debug("tuneplat: live view failed; plain progress lines from now on", exc_info=True)
                self._stop_live()
                self.live_capable = False
        self._print(self.status_line(trials))
        if self.verbose >= 2:
            self._print(self.table(trials))

    # ---- numbers shared by both views
    def _counts(self, trials: Sequence[Trial]) -> Counter[str]:
        return Counter(str(t.status) for t in trials)

    def _value(self, t: Trial) -> float:
        v = t.last_result.get(self.metric) if self.metric else None
        try:
            f = float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return math.nan
        return f

    def best(self, trials: Sequence[Trial]) -> Trial | None:
        """The trial whose last result is best by the metric (as Ray's "current best trial")."""
        if not self.metric or self.mode not in ("min", "max"):
            return None
        # as Ray (and get_best_result()): an errored trial with a finite value is a candidate, one without is not
        scored = [(self._value(t), t) for t in trials]
        scored = [(v, t) for v, t in scored if math.isfinite(v)]
        if not scored:
            return None
        pick = min if self.mode == "min" else max
        return pick(scored, key=lambda vt: vt[0])[1]

    def _eta(self, done: int, total: int | None, elapsed: float) -> float | None:
        budget = self._budget()
        by_trials = None
        if total and 0 < done < total:
            by_trials = elapsed / done * (total - done)
        elif total and done >= total:
            return None  # nothing left to estimate
        if budget is not None:
            left = max(0.0, budget - elapsed)
            return left if by_trials is None else min(left, by_trials)
        return by_trials

    def _numbers(self, trials: Sequence[Trial]) -> dict[str, Any]:
        counts = self._counts(trials)
        done = counts.get("TERMINATED", 0) + counts.get("ERROR", 0)
        total = self._total()
        elapsed = time.monotonic() - self.start
        busy, slots = self._slots()
        return {"counts": counts, "done": done, "total": total, "elapsed": elapsed,
                "eta": self._eta(done, total, elapsed), "busy": busy, "slots": slots, "best": self.best(trials)}

    def _starting_text(self, trials: Sequence[Trial]) -> str:
        """While trials run but none has reported yet: what the wait is (worker processes importing, data loading)."""
        executor = getattr(self._loop, "executor", None)
        workers = getattr(executor, "workers_ready", None)  # (up, asked for) while the embedded cluster starts
        up = f"{workers[0]} of {workers[1]} worker processes ready" if workers else ""
        if not trials or any(t.results for t in trials) or not any(t.status == TrialStatus.RUNNING for t in trials):
            return f"starting the cluster: {up}" if up and not any(t.results for t in trials) else ""
        heavy = getattr(executor, "heavy_imports", None) or []
        what = f"importing {', '.join(heavy)}" if heavy else "imports"
        return f"first trials starting ({what}, data loading) — no report yet" + (f"; {up}" if up else "")

    def _best_text(self, best: Trial | None) -> str:
        if best is None:
            return f"best {self.metric}: -" if self.metric else ""
        cfg = ", ".join(f"{k}={_fmt(v)}" for k, v in list(flatten_dict(best.config).items())[:6])
        errored = ", errored" if best.status == TrialStatus.ERROR else ""
        return (f"best {self.metric}={_fmt(self._value(best))} (trial {best.trial_id}, iter {best.iteration}{errored}"
                + (f"; {cfg})" if cfg else ")"))

    def status_line(self, trials: Sequence[Trial]) -> str:
        """One plain line: progress, time, best trial, slots."""
        n = self._numbers(trials)
        c = n["counts"]
        parts = [f"{n['done']}/{n['total'] if n['total'] else '?'} trials done"]
        parts += [f"{c[s]} {s.lower()}" for s in ("RUNNING", "PAUSED", "PENDING", "ERROR") if c.get(s)]
        line = f"tuneplat [{_clock(n['elapsed'])}] " + ", ".join(parts)
        if n["eta"] is not None:
            line += f" | ETA ~{_clock(n['eta'])}"
        starting = self._starting_text(trials)
        if starting:
            line += f" | {starting}"
        best = self._best_text(n["best"])
        if best:
            line += f" | {best}"
        if n["slots"]:
            line += f" | slots {n['busy']}/{n['slots']} busy"
        return line

    def _columns(self, shown: Sequence[Trial]) -> list[str]:
        keys: list[str] = []
        for t in shown:
            for k in flatten_dict(t.config):
                if k not in keys:
                    keys.append(k)
        return keys[:5]

    def _shown(self, trials: Sequence[Trial]) -> list[Trial]:
        return sorted(trials, key=self._key)[: self.max_rows]

    def _key(self, t: Trial) -> tuple[Any, ...]:
        f = self._value(t)
        score = math.inf if not math.isfinite(f) else (f if self.mode != "max" else -f)
        return (_ORDER[t.status], score, t.trial_id)

    def _elastic(self) -> bool:
        return getattr(self._loop, "min_world_size", None) is not None

    def table(self, trials: Sequence[Trial]) -> str:
        """The plain trials table (notes whole, as the last column)."""
        counts = self._counts(trials)
        elapsed = time.monotonic() - self.start
        head = f"== Status: {len(trials)} trials | " + " | ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        head += f" | {elapsed:.1f}s elapsed =="
        shown = self._shown(trials)
        keys = self._columns(shown)
        elastic = self._elastic()
        cols = (["trial", "status", "iter"] + (["ranks"] if elastic else []) + ([self.metric] if self.metric else [])
                + keys + ["note"])
        rows = []
        for t in shown:
            flat = flatten_dict(t.config)
            row = [_shown_name(t), str(t.status), str(t.iteration)] + ([str(t.world_size or "-")] if elastic else [])
            if self.metric:
                row.append(_fmt(t.last_result.get(self.metric, "")))
            row += [_fmt(flat.get(k, "")) for k in keys]
            row.append(_note(t))
            rows.append(row)
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
        widths[-1] = 0  # the note is never padded nor cut
        lines = [head, "  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip()]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
        if len(trials) > len(shown):
            lines.append(f"... {len(trials) - len(shown)} more trials (tuneplat status lists them all)")
        return "\n".join(lines)

    # ---- the live view (rich)
    def _renderable(self, trials: Sequence[Trial]) -> Any:
        from rich.console import Group
        from rich.panel import Panel
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        n = self._numbers(trials)
        c = n["counts"]
        total = n["total"]
        head = Table.grid(padding=(0, 1))
        head.add_column()
        head.add_column()
        head.add_column()
        bar = ProgressBar(total=float(total or max(1, len(trials))), completed=float(n["done"]), width=30,
                          pulse=not total)
        counts = ", ".join(f"{c[s]} {s.lower()}" for s in ("RUNNING", "PAUSED", "PENDING", "ERROR") if c.get(s))
        timing = f"elapsed {_clock(n['elapsed'])}" + (f", ETA ~{_clock(n['eta'])}" if n["eta"] is not None else "")
        head.add_row(Text(f"{n['done']}/{total if total else '?'} trials", style="bold"), bar,
                     Text(f"{counts}  {timing}" if counts else timing))
        lines: list[Any] = [head]
        starting = self._starting_text(trials)
        if starting:
            lines.append(Text(starting, style="yellow"))
        best = self._best_text(n["best"])
        if best:
            lines.append(Text(best, style="bold green" if n["best"] is not None else "dim"))
        if n["slots"]:
            lines.append(Text(f"slots: {n['busy']}/{n['slots']} busy", style="dim"))
        shown = self._shown(trials) if self.verbose >= 2 else [t for t in self._shown(trials)][:10]
        if shown:
            keys = self._columns(shown)
            table = Table(box=None, pad_edge=False, header_style="bold", expand=False)
            table.add_column("trial", no_wrap=True)
            table.add_column("status", no_wrap=True)
            table.add_column("iter", justify="right", no_wrap=True)
            elastic = self._elastic()
            if elastic:  # elastic groups: the ranks each trial has now (resizes show in the events below)
                table.add_column("ranks", justify="right", no_wrap=True)
            if self.metric:
                table.add_column(str(self.metric), justify="right", no_wrap=True)
            for k in keys:
                table.add_column(k, no_wrap=True, max_width=16, overflow="ellipsis")
            table.add_column("note", overflow="fold", ratio=1, min_width=20)
            for t in shown:
                flat = flatten_dict(t.config)
                row: list[Any] = [_shown_name(t), Text(str(t.status), style=_STYLE.get(str(t.status), "")),
                                  str(t.iteration)]
                if elastic:
                    row.append(str(t.world_size or "-"))
                if self.metric:
                    row.append(_fmt(t.last_result.get(self.metric, "")))
                row += [_fmt(flat.get(k, "")) for k in keys]
                row.append(Text(_note(t), style="red" if t.error else ""))
                table.add_row(*row)
            lines.append(table)
            if len(trials) > len(shown):
                lines.append(Text(f"... {len(trials) - len(shown)} more trials (tuneplat status lists them all)",
                                  style="dim"))
        ranks = self._rank_rows()
        if ranks:
            from ..execution._observe import WORKER_COLUMNS

            rt = Table(box=None, pad_edge=False, header_style="bold dim", expand=False, title="ranks",
                       title_justify="left", title_style="bold")
            for col in WORKER_COLUMNS:
                rt.add_column(col, no_wrap=True)
            for r in ranks[:16]:
                rt.add_row(*r)
            lines.append(rt)
            if len(ranks) > 16:
                lines.append(Text(f"... {len(ranks) - 16} more ranks (tuneplat status EXP --workers)", style="dim"))
        if self.events:
            lines.append(Panel(Text("\n".join(self.events)), title="last events", title_align="left",
                               border_style="dim", expand=True))
        name = getattr(self._loop, "experiment_name", None)
        return Panel(Group(*lines), title=f"tuneplat: {name}" if name else "tuneplat", title_align="left",
                     border_style="blue")

    def _rank_rows(self) -> list[list[str]]:
        """One row per rank of the running trials (the executor's per-rank view; none in virtual time)."""
        rows_of = getattr(getattr(self._loop, "executor", None), "running_rows", None)
        if rows_of is None:
            return []
        try:
            from ..execution._observe import worker_rows

            return worker_rows({"running": rows_of()}, finished=False)
        except Exception:  # noqa: BLE001 - the view must never end the experiment
            logger.debug("tuneplat: rank rows failed", exc_info=True)
            return []

    def _refresh_live(self, trials: Sequence[Trial]) -> None:
        if self._live is None:
            self._start_live()
        assert self._live is not None
        self._live.update(self._renderable(trials), refresh=True)

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self._console = Console(file=self.stream)
        self._live = Live(console=self._console, auto_refresh=False, transient=False, redirect_stdout=True,
                          redirect_stderr=True)
        self._live.start()
        # log records would be written past the live area and garble it: send them through the live console
        for name in ("tuneplat", ""):
            for h in logging.getLogger(name).handlers:
                if isinstance(h, logging.StreamHandler) and h.stream in (sys.__stderr__, sys.__stdout__):
                    self._swapped.append((h, h.stream))
                    h.setStream(sys.stderr)

    def _stop_live(self) -> None:
        live, self._live = self._live, None
        for h, stream in self._swapped:
            h.setStream(stream)
        self._swapped = []
        if live is not None:
            try:
                live.stop()
            except Exception:  # noqa: BLE001
                pass

    # ---------------------------------------------------------------- the end
    def finish(self, trials: Sequence[Trial], status: str) -> None:
        """The last refresh, a summary and what to look at next (verbosity >= 1)."""
        if self.finished:
            return
        if self.verbose >= 1:
            try:
                if self._live is not None:
                    self._live.update(self._renderable(trials), refresh=True)
                else:
                    self._print(self.status_line(trials))
                    if self.verbose >= 2 and trials:
                        self._print(self.table(trials))
            except Exception:  # noqa: BLE001
                logger.debug("tuneplat: final refresh failed", exc_info=True)
        self._stop_live()
        self.finished = True
        exp_dir = getattr(self._loop, "experiment_dir", None)
        if status == "interrupted" and exp_dir and not os.path.isfile(os.path.join(exp_dir, "sweep.yaml")):
            # (a folder `tuneplat run` started: the command line prints its own `tuneplat resume` line)
            logger.warning("tuneplat: interrupted; continue with %s", resume_hint(exp_dir))
        if self.verbose < 1:
            return
        for line in self.summary(trials, status):
            self._print(line)

    def summary(self, trials: Sequence[Trial], status: str) -> list[str]:
        """The end-of-run lines: counts, best trial, where to look next."""
        counts = self._counts(trials)
        elapsed = time.monotonic() - self.start
        exp_dir = getattr(self._loop, "experiment_dir", None)
        what = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no trials"
        lines = [f"tuneplat: {status_words(status, counts, len(trials))} after {_clock(elapsed)}: "
                 f"{len(trials)} trials ({what})"]
        best = self.best(trials)
        if best is not None:
            errored = " (the trial errored later)" if best.status == TrialStatus.ERROR else ""
            lines.append(f"tuneplat: best trial {best.trial_id}: {self.metric}={_fmt(self._value(best))} at iteration "
                         f"{best.iteration}{errored}, config {best.config}")
        elif trials and counts.get("ERROR", 0) == len(trials):
            lines.append("tuneplat: no best trial: no trial reported a finite "
                         f"{self.metric or 'metric'} (each trial's error: results.errors)")
        if exp_dir:
            uri, exp_id = self._tracking()
            lines.append("tuneplat: look further:")
            lines.append(f"  tuneplat status {exp_dir}      (--trial ID for one trial, --csv FILE for the table)")
            lines += [f"  {line}" for line in mlflow_ui_hint(uri, exp_id)]
        return lines
