"""``tuneplat stacks``: the Python stacks of a running experiment's ranks, asked of its tuner."""

from __future__ import annotations

import argparse
import json
import os

from ._common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, _Fail, _is_running, _out


def _cmd_stacks(args: argparse.Namespace) -> int:
    """``tuneplat stacks EXP [--trial ID]``: stacks of the running ranks, captured by the running tuner."""
    from ..execution._observe import request_stacks

    target = args.experiment_dir
    if not os.path.isfile(os.path.join(target, "journal.jsonl")):
        raise _Fail(f"{target} is not an experiment folder (no journal.jsonl)")
    if not _is_running(target):
        raise _Fail(f"{target} is not running (no tuner holds it): stacks are read from running ranks. The stacks "
                    "captured when a rank hung are in its trial folder (stacks/) and named in the trial's error.")
    answer = request_stacks(target, args.trial, args.timeout)
    if answer is None:
        raise _Fail(f"the tuner running {target} did not answer within {args.timeout:g}s (--timeout)", EXIT_FAILED)
    trials = answer.get("trials") or {}
    if args.json:
        _out(json.dumps(answer, indent=2))
        return EXIT_OK
    if not trials:
        running = answer.get("running") or []
        which = f"trial {args.trial} is not running" if args.trial else "no trial is running"
        _out(f"{which} (running: {', '.join(running) or 'none'})")
        return EXIT_OK if not args.trial else EXIT_BAD_INPUT
    for tid, got in trials.items():
        _out(f"== trial {tid}: {got.get('summary', '').lstrip('. ')}")
        _out(got.get("text") or "(no stacks could be read)")
    return EXIT_OK
