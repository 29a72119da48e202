"""The experiment reducer's cost per checkpoint event over a long trial (``tuneplat/core/_state.py``).

One trial receives N checkpoint events (a long run without ``CheckpointConfig(num_to_keep=...)``: every
checkpoint is kept, as Ray keeps them), each applied with the reducer that both the live loop and a replay
(``Tuner.restore``, ``tuneplat status``, ``Result.from_path``) use; one event in 100 saves a folder the trial
already has (a retry reaching an iteration again). Reports the seconds for all N and the microseconds per
event: flat in N when an event costs O(1), growing with N when each scans the trial's list.

Usage:
  python benchmarks/checkpoint_events.py                         # this checkout, N = 1,000 3,000 10,000
  python benchmarks/checkpoint_events.py --trees BEFORE AFTER --rounds 5   # two checkouts, interleaved

With ``--trees`` each round runs BEFORE then AFTER (the other way round on odd rounds, so that a machine getting
busier or quieter favours neither), each in a fresh interpreter importing that tree. Prints one JSON object:
every run's figures, the medians per N and build, and AFTER's speed-up over BEFORE.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def one_run(n: int) -> dict[str, Any]:
    """N checkpoint events folded into one trial by the tree on ``sys.path``."""
    from tuneplat.core import _events as ev
    from tuneplat.core._state import ExperimentState, apply

    state = ExperimentState(trials=[], experiment_dir="/nonexistent")
    apply(state, ev.TrialAdd(trial_id="t_00000", path="/nonexistent/t0", config={"x": 1}))
    events = []
    for i in range(1, n + 1):
        k = i - 1 if i % 100 == 0 else i  # one in 100: the previous folder again
        events.append(ev.CheckpointSaved(trial_id="t_00000", path=f"/nonexistent/t0/checkpoint_{k:06d}",
                                         iteration=k, metrics={"loss": 1.0 / i, "training_iteration": k}))
    start = time.perf_counter()
    for e in events:
        apply(state, e)
    took = time.perf_counter() - start
    import tuneplat

    kept = len(state.trials[0].checkpoints)
    return {"n": n, "seconds": round(took, 6), "us_per_event": round(took / n * 1e6, 3), "kept": kept,
            "tree": os.path.dirname(os.path.dirname(os.path.abspath(tuneplat.__file__)))}


def _in_tree(tree: str, n: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--inner", str(n)], env=env,
                         capture_output=True, text=True, check=True, cwd=os.path.abspath(tree))
    got = dict(json.loads(out.stdout))
    if os.path.realpath(got["tree"]) != os.path.realpath(tree):
        raise RuntimeError(f"{tree}: the run imported tuneplat from {got['tree']}")
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 3000, 10000])
    parser.add_argument("--trees", nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--inner", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        # (this folder holds a schedulers.py that would shadow the schedulers package the tree under test imports)
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
        print(json.dumps(one_run(args.inner)))
        return
    load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else None
    if not args.trees:
        sys.path[:] = [os.path.dirname(HERE)] + [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
        print(json.dumps({"load_before": load, "runs": [one_run(n) for n in args.n]}, indent=1))
        return
    runs: dict[str, dict[int, list[dict[str, float]]]] = {"before": {}, "after": {}}
    for r in range(args.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for n in args.n:
            for which in order:
                tree = args.trees[0] if which == "before" else args.trees[1]
                runs[which].setdefault(n, []).append(_in_tree(tree, n))
    summary = {}
    for n in args.n:
        med = {w: statistics.median(x["seconds"] for x in runs[w][n]) for w in runs}
        summary[str(n)] = {"before_s": round(med["before"], 5), "after_s": round(med["after"], 5),
                           "before_us_per_event": round(med["before"] / n * 1e6, 2),
                           "after_us_per_event": round(med["after"] / n * 1e6, 2),
                           "speedup": round(med["before"] / med["after"], 2) if med["after"] else None}
    load_after = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else None
    print(json.dumps({"trees": args.trees, "rounds": args.rounds, "load_before": load, "load_after": load_after,
                      "median": summary,
                      "runs": {w: {str(n): [x["seconds"] for x in v] for n, v in d.items()} for w, d in runs.items()}},
                     indent=1))


if __name__ == "__main__":
    main()
