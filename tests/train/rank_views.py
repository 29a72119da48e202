"""What ``tuneplat status --workers`` and ``tuneplat stacks`` show of a running trial's ranks, for any framework.

``look_at_parked_ranks(fit, exp, world)`` runs ``fit()`` in a thread whose training function parks every rank
inside its framework's group (each writes ``parked-<rank>`` into the trial folder, then waits for ``release``);
once every rank has parked (the files are the readiness probe) it reads both commands, then releases the ranks.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from tuneplat import cli


def _cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(list(args))
    return code, out.getvalue()


def _trial_dir(exp: str) -> str | None:
    try:
        with open(os.path.join(exp, "workers.json"), encoding="utf-8") as f:
            running = json.load(f)["running"]
        return next((os.path.join(exp, d) for d in os.listdir(exp) if os.path.isdir(os.path.join(exp, d))
                     and any(t in d for t in running)), None)
    except (OSError, ValueError, KeyError):
        return None


def look_at_parked_ranks(fit: Callable[[], Any], exp: str, world: int,
                         timeout: float = 600) -> tuple[tuple[int, str], tuple[int, str], dict[int, int], Any]:
    """``(status --workers --json, stacks, {rank: pid}, fit's result)`` while ``world`` ranks are parked."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fit()
        except BaseException as exc:  # noqa: BLE001 (reported below)
            box["error"] = exc

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    deadline = time.monotonic() + timeout  # a bound on the probe, not a timing assertion (imports are slow here)
    trial_dir = None
    try:
        while time.monotonic() < deadline and runner.is_alive():
            trial_dir = trial_dir or _trial_dir(exp)
            if trial_dir and all(os.path.exists(os.path.join(trial_dir, f"parked-{r}")) for r in range(world)):
                break
            time.sleep(0.1)  # (polling files the ranks write: a readiness probe)
        assert trial_dir is not None and runner.is_alive(), f"the ranks never parked: {box.get('error')!r}"
        status = (0, "")
        while time.monotonic() < deadline:  # the rows follow the ranks' heartbeats (every few s) and workers.json
            status = _cli("status", exp, "--workers", "--json")  # is rewritten every 2 s: wait for the parked state
            rows = json.loads(status[1])["running"] if status[0] == 0 else {}
            states = [(r.get("state"), bool(r.get("system"))) for v in rows.values() for r in v]
            if states == [("training", True)] * world:  # (system metrics: sampled every few s in each rank)
                break
            time.sleep(0.2)
        stacks = _cli("stacks", exp)
        pids = {}
        for r in range(world):
            with open(os.path.join(trial_dir, f"parked-{r}"), encoding="utf-8") as f:
                pids[r] = int(f.read())
    finally:
        if trial_dir is not None:
            open(os.path.join(trial_dir, "release"), "w").close()
        runner.join(timeout)
    if "error" in box:
        raise box["error"]
    return status, stacks, pids, box["result"]


def check_rank_views(status: tuple[int, str], stacks: tuple[int, str], pids: dict[int, int], parked_fn: str,
                     loops_file: str, marker: str) -> None:
    """Every rank is a row of ``status --workers`` (its own process, training, with its system metrics) and is
    named in ``stacks`` at the line where it parks."""
    code, text = status
    assert code == 0, text
    (trial_id, rows), = json.loads(text)["running"].items()
    assert sorted(r["rank"] for r in rows) == sorted(pids), rows
    for r in rows:
        assert r["pid"] == pids[r["rank"]], (r, "the row is not the rank's process")
        assert r["state"] == "training", r
        system = r["system"]  # the rank's own process sampled: CPU % and resident memory
        assert system["process_memory_rss_megabytes"] > 0 and system["cpu_utilization_percentage"] >= 0, r
    code, text = stacks
    assert code == 0, text
    with open(loops_file, encoding="utf-8") as f:
        line = next(i for i, ln in enumerate(f, 1) if marker in ln)
    for rank in pids:
        assert f"rank {rank} in {parked_fn} ({loops_file}:{line})" in text, text[-3000:]
