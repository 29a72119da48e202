"""Before/after figures for a core change: ``overhead.py`` run alternately on two checkouts, interleaved.

Usage:
  python benchmarks/compare_builds.py BEFORE_TREE AFTER_TREE [--rounds 3] [-- overhead.py options]
  python benchmarks/compare_builds.py . . --env-before TUNEPLAT_LOCAL_TLS=0 TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1 \
      --rounds 5 -- --embedded --only bc      # what the defaults cost on one build

Each round runs this checkout's ``overhead.py`` (copied into neither tree: it
is run with ``PYTHONPATH`` and ``TUNEPLAT_BENCH_ROOT`` pointing at the tree
under test, so both builds run the same workload code), first BEFORE then
AFTER on even rounds and the other way round on odd ones, so that a machine
getting busier or quieter does not favour either. Prints one JSON object: every
run's figures and the medians of (a) seconds, (b) results/s and (c) efficiency.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_one(tree: str, extra: list[str], settings: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": tree, "TUNEPLAT_BENCH_ROOT": tree}
    env.update(dict(kv.split("=", 1) for kv in settings))
    out = subprocess.run([sys.executable, os.path.join(HERE, "overhead.py"), "--no-ray", *extra],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["tuneplat"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--env-before", nargs="*", default=[], metavar="K=V",
                        help="environment settings for BEFORE's runs (e.g. the same tree with a feature off)")
    parser.add_argument("--env-after", nargs="*", default=[], metavar="K=V", help="likewise for AFTER's runs")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for i in range(args.rounds):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        for which in order:
            runs[which].append(run_one(os.path.abspath(getattr(args, which)), extra,
                                       args.env_before if which == "before" else args.env_after))

    def med(which: str, key: str) -> float | None:
        vals = [r[key] if key != "c" else r["c"]["efficiency"] for r in runs[which]]
        vals = [v for v in vals if v == v]  # a workload left out (--only) is NaN
        return round(statistics.median(vals), 4) if vals else None

    summary: dict = {w: {"a_fit_s": med(w, "a_fit_s"), "b_results_per_s": med(w, "b_results_per_s"),
                   "c_efficiency": med(w, "c")} for w in runs}
    b_before, b_after = summary["before"]["b_results_per_s"], summary["after"]["b_results_per_s"]
    if b_before and b_after:
        summary["b_change_pct"] = round(100 * (b_after / b_before - 1), 1)
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    print(json.dumps({"options": extra, "env_before": args.env_before, "env_after": args.env_after,
                      "rounds": args.rounds, "load_avg": load, "runs": runs,
                      "median": summary}, indent=2))


if __name__ == "__main__":
    main()
