"""The tuner's per-rank view of running trials: ``<experiment>/workers.json`` and on-demand stack requests.

The Dask executor keeps, for every rank, what its heartbeats last said
(``train/_telemetry.py``): state, device, throughput, data wait, system
metrics. :class:`WorkerBoard` writes that table to ``workers.json`` in the
experiment folder (atomically, at most every ``TUNEPLAT_WORKERS_FILE_S``
seconds, 2 by default, and only when something changed), where
``tuneplat status EXP --workers`` and the live view read it.

``tuneplat stacks EXP`` asks the running tuner for stacks by dropping a request
file in ``<experiment>/.requests/``; the executor looks there once a second
while trials run (a directory listing) and answers with a ``.done.json`` file.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from typing import Any

from .._settings import env_seconds

__all__ = ["REQUESTS", "WORKERS_FILE", "WorkerBoard", "rank_row", "read_workers", "request_stacks"]

logger = logging.getLogger("tuneplat")

WORKERS_FILE = "workers.json"
REQUESTS = ".requests"
_KEEP_FINISHED = 64


def rank_row(trial_id: str, rank: Any, state: str | None = None) -> dict[str, Any]:
    """One rank's row (plain values) from the executor's record of it."""
    stats = rank.stats or {}
    row: dict[str, Any] = {
        "trial_id": trial_id, "rank": rank.index, "host": rank.hostname or rank.assignment.host,
        "worker": rank.assignment.address, "pid": rank.pid, "device": stats.get("device"),
        "state": state or (rank.finished or stats.get("state") or ("starting" if rank.conn is None else "running")),
        "last_report_at": stats.get("last_report_at"), "steps": stats.get("steps"),
        "steps_per_s": stats.get("steps_per_s"), "samples_per_s": stats.get("samples_per_s"),
        "data_wait_fraction": stats.get("data_wait_fraction"), "data_wait_s": stats.get("data_wait_s"),
    }
    system = stats.get("system")
    if system:
        row["system"] = system
    lock = stats.get("stale_lock")
    if isinstance(lock, dict) and state is None and not rank.finished:  # (train/_lock_wait.py)
        row["state"] = "stale lock"
        row["stale_lock"] = lock.get("path")
    return row


class WorkerBoard:
    """Writes the per-rank table and reads stack requests for one experiment folder."""

    def __init__(self, experiment_dir: str) -> None:
        self.dir = experiment_dir
        self.path = os.path.join(experiment_dir, WORKERS_FILE)
        self.requests_dir = os.path.join(experiment_dir, REQUESTS)
        self.interval_s = env_seconds("TUNEPLAT_WORKERS_FILE_S", 2)
        self.dirty = False
        self.next_write = 0.0
        self.next_request_check = 0.0
        self.finished: dict[str, list[dict[str, Any]]] = {}

    def ended(self, trial_id: str, rows: list[dict[str, Any]]) -> None:
        self.finished.pop(trial_id, None)
        self.finished[trial_id] = rows
        while len(self.finished) > _KEEP_FINISHED:
            self.finished.pop(next(iter(self.finished)))
        self.dirty = True

    def next_deadline(self, running: bool) -> float | None:
        deadlines = []
        if self.dirty:
            deadlines.append(self.next_write)
        if running:
            deadlines.append(self.next_request_check)
        return min(deadlines) if deadlines else None

    def maybe_write(self, running_rows: dict[str, list[dict[str, Any]]], now: float) -> None:
        if not self.dirty or now < self.next_write:
            return
        self.dirty = False
        self.next_write = now + self.interval_s
        doc = {"updated_at": time.time(), "running": running_rows, "finished": self.finished}
        tmp = f"{self.path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(doc, f, default=repr)
            os.replace(tmp, self.path)
        except OSError:
            logger.debug("tuneplat: could not write %s", self.path, exc_info=True)

    def take_requests(self, now: float) -> list[tuple[str, dict[str, Any]]]:
        """Stack requests waiting in ``.requests/`` (each taken once)."""
        if now < self.next_request_check:
            return []
        self.next_request_check = now + 1.0
        try:
            names = os.listdir(self.requests_dir)
        except OSError:
            return []
        out = []
        for name in names:
            if not name.endswith(".request.json"):
                continue
            path = os.path.join(self.requests_dir, name)
            try:
                with open(path, encoding="utf-8") as f:
                    body = json.load(f)
                os.unlink(path)
            except (OSError, ValueError):
                continue
            if isinstance(body, dict):
                out.append((name[: -len(".request.json")], body))
        return out

    def answer(self, nonce: str, body: dict[str, Any]) -> None:
        path = os.path.join(self.requests_dir, f"{nonce}.done.json")
        tmp = f"{path}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(body, f)
            os.replace(tmp, path)
        except OSError:
            logger.warning("tuneplat: could not answer the stacks request %s", nonce, exc_info=True)


def read_workers(experiment_dir: str) -> dict[str, Any] | None:
    """``workers.json`` of an experiment folder (None when there is none)."""
    try:
        with open(os.path.join(experiment_dir, WORKERS_FILE), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def request_stacks(experiment_dir: str, trial_id: str | None, timeout: float) -> dict[str, Any] | None:
    """Ask the tuner running ``experiment_dir`` for its ranks' stacks; its answer, or None after ``timeout``."""
    folder = os.path.join(experiment_dir, REQUESTS)
    os.makedirs(folder, exist_ok=True)
    nonce = secrets.token_hex(8)
    path = os.path.join(folder, f"{nonce}.request.json")
    with open(f"{path}.tmp", "w", encoding="utf-8") as f:
        json.dump({"trial_id": trial_id}, f)
    os.replace(f"{path}.tmp", path)
    done = os.path.join(folder, f"{nonce}.done.json")
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if os.path.exists(done):
                with open(done, encoding="utf-8") as f:
                    return json.load(f)  # type: ignore[no-any-return]
            time.sleep(0.1)  # another process answers: nothing to block on
        return None
    finally:
        for p in (path, done):
            try:
                os.unlink(p)
            except OSError:
                pass
        try:
            os.rmdir(folder)
        except OSError:
            pass


WORKER_COLUMNS = ["trial", "rank", "host", "pid", "device", "state", "since_report_s", "steps/s", "samples/s",
                  "data_wait", "cpu%", "rss_mb", "gpu%", "gpu_mb"]


def _num(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def worker_rows(doc: dict[str, Any], now: float | None = None, finished: bool = True) -> list[list[str]]:
    """``workers.json`` as table rows (:data:`WORKER_COLUMNS`): running trials first, then finished ones."""
    now = time.time() if now is None else now
    out: list[list[str]] = []
    groups = [(rows, True) for rows in (doc.get("running") or {}).values()]
    if finished:
        groups += [(rows, False) for rows in (doc.get("finished") or {}).values()]
    for rows, running in groups:
        for row in rows:
            system = row.get("system") or {}
            gpu_util = [v for k, v in system.items() if k.endswith("_utilization_percentage") and k.startswith("gpu")]
            gpu_mem = [v for k, v in system.items() if k.endswith("_memory_usage_megabytes") and k.startswith("gpu")]
            last = row.get("last_report_at")
            since = (now - last) if running and isinstance(last, (int, float)) else None
            wait = row.get("data_wait_fraction")
            out.append([
                str(row.get("trial_id", "")), str(row.get("rank", "")), str(row.get("host") or "-"),
                str(row.get("pid") or "-"), str(row.get("device") or "-"), str(row.get("state") or "-"),
                _num(since, ".1f"), _num(row.get("steps_per_s"), ".2f"), _num(row.get("samples_per_s"), ".1f"),
                f"{wait * 100:.0f}%" if isinstance(wait, (int, float)) else "-",
                _num(system.get("cpu_utilization_percentage"), ".0f"),
                _num(system.get("process_memory_rss_megabytes"), ".0f"),
                "/".join(f"{v:.0f}" for v in gpu_util) or "-", "/".join(f"{v:.0f}" for v in gpu_mem) or "-",
            ])
    return out
