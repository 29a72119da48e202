"""The process that writes ``progress.csv`` and TensorBoard files for :class:`~tuneplat.tracking._files.FileLoggers`.

Run as a script (``python _writer_proc.py CSV TB``) with the standard library only, so
that it starts in milliseconds. It reads JSON lines on stdin from the tuner:
``["result", trial_id, trial_dir, result]``, ``["end", trial_id]`` and, when an
experiment ends, ``["sync", token, trial_ids]`` (closes those trials' files, then
writes ``token`` and a newline on stdout); at end of input it closes every file and
exits. One such process serves every experiment a tuner process runs. Keeping this work out of the tuner's process keeps
it off the tuner's GIL (the loop answers every report in a round trip).
"""

from __future__ import annotations

import csv
import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tbevents import EventFile, keep_steps_up_to  # noqa: E402  (this folder, standard library only)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "/"))
        else:
            out[key] = v
    return out


class TrialFiles:
    def __init__(self, path: str, want_csv: bool, want_tb: bool) -> None:
        self.path = path
        self.want_csv, self.want_tb = want_csv, want_tb
        self.csv_file: Any = None
        self.csv: Any = None
        self.columns: list[str] = []
        self.tb: EventFile | None = None

    def write(self, result: dict[str, Any]) -> None:
        flat = flatten(result)
        if self.want_csv:
            if self.csv is None:
                name = os.path.join(self.path, "progress.csv")
                header = None
                if os.path.isfile(name) and os.path.getsize(name) > 0:  # a restored trial keeps its columns
                    with open(name, newline="", encoding="utf-8") as f:
                        header = next(csv.reader(f), None)
                self.csv_file = open(name, "a", newline="", encoding="utf-8")  # noqa: SIM115
                self.csv = csv.writer(self.csv_file)
                self.columns = header or list(flat)
                if not header:
                    self.csv.writerow(self.columns)
            self.csv.writerow([flat.get(k, "") for k in self.columns])  # later keys are not columns (as Ray)
        if self.want_tb:
            if self.tb is None:
                self.tb = EventFile(self.path)
            raw = flat.get("training_iteration")
            step = int(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None
            stamp = flat.get("timestamp")
            self.tb.scalars(((f"ray/tune/{k}", float(v)) for k, v in flat.items()
                             if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "pid"), step,
                            float(stamp) if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) else None)

    def flush(self) -> None:
        if self.csv_file is not None:
            self.csv_file.flush()
        if self.tb is not None:
            self.tb.flush()

    def close(self) -> None:
        if self.csv_file is not None:
            self.csv_file.close()
            self.csv_file = self.csv = None
        if self.tb is not None:
            self.tb.close()
            self.tb = None


def _keep_csv_rows(name: str, after: int) -> None:
    """Drop the rows of ``progress.csv`` whose ``training_iteration`` is above ``after``."""
    with open(name, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows or "training_iteration" not in rows[0]:
        return
    col = rows[0].index("training_iteration")

    def iteration(row: list[str]) -> float:
        try:
            return float(row[col])
        except (IndexError, ValueError):
            return 0.0

    kept = [rows[0]] + [r for r in rows[1:] if iteration(r) <= after]
    if len(kept) == len(rows):
        return
    with open(name + ".tmp", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(kept)
    os.replace(name + ".tmp", name)


def supersede(path: str, after: int, want_csv: bool, want_tb: bool) -> None:
    """A retry continues from the checkpoint of iteration ``after``: the trial's files keep what came before."""
    name = os.path.join(path, "progress.csv")
    if want_csv and os.path.isfile(name):
        _keep_csv_rows(name, after)
    if want_tb and os.path.isdir(path):
        for entry in sorted(os.listdir(path)):
            if entry.startswith("events.out.tfevents."):
                keep_steps_up_to(os.path.join(path, entry), after)


def main() -> None:
    want_csv, want_tb = sys.argv[1] == "1", sys.argv[2] == "1"

    files: dict[str, TrialFiles] = {}
    fd = sys.stdin.fileno()
    out = sys.stdout.buffer
    pending = b""
    failed = False
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            try:
                msg = json.loads(line)
                if msg[0] == "result":
                    tf = files.get(msg[1])
                    if tf is None:
                        tf = files[msg[1]] = TrialFiles(msg[2], want_csv, want_tb)
                    tf.write(msg[3])
                elif msg[0] == "supersede":  # ["supersede", trial_id, trial_dir, after_iteration]
                    tf = files.pop(msg[1], None)
                    if tf is not None:
                        tf.close()
                    supersede(msg[2], int(msg[3]), want_csv, want_tb)
                elif msg[0] == "end" and msg[1] in files:
                    files.pop(msg[1]).close()
                elif msg[0] == "sync":  # ["sync", token, trial_ids]: the experiment ends; answer once closed
                    for trial_id in msg[2]:
                        tf = files.pop(trial_id, None)
                        if tf is not None:
                            tf.close()
                    for tf in files.values():
                        tf.flush()
                    out.write(msg[1].encode() + b"\n")
                    out.flush()
            except Exception as exc:  # noqa: BLE001 - these files are a convenience; say it once, go on
                if not failed:
                    failed = True
                    print(f"tuneplat: could not write progress.csv / TensorBoard files: {exc}", file=sys.stderr)
        for tf in files.values():  # what arrived so far reaches the files (once per chunk, not per result)
            tf.flush()
    for tf in files.values():
        tf.close()


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the tuner owns Ctrl-C; this process ends when its input ends
    main()
