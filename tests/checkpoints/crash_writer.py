"""Writes large checkpoints in a loop through tuneplat's staging/commit protocol (killed by test_crash.py).

On start it loads the latest whole checkpoint (as a restarting trial does), re-writes that
iteration once (a retry re-reporting it: the replace path), then writes the next ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sys
import tempfile

from tuneplat.storage._storage import checkpoint_name, commit_checkpoint, list_checkpoints, stage_checkpoint

FILES = 3
SIZE = 4 << 20


def write_source(folder: str, iteration: int, generation: int) -> None:
    rng = random.Random(iteration * 1000 + generation)
    manifest = {"iteration": iteration, "generation": generation, "files": {}}
    for i in range(FILES):
        data = rng.randbytes(SIZE)
        with open(os.path.join(folder, f"data_{i}.bin"), "wb") as f:
            f.write(data)
        manifest["files"][f"data_{i}.bin"] = hashlib.sha256(data).hexdigest()
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(manifest, f)


def main(trial_dir: str) -> None:
    os.makedirs(trial_dir, exist_ok=True)
    existing = list_checkpoints(trial_dir)
    latest = 0
    generation = 0
    if existing:
        with open(os.path.join(existing[-1], "manifest.json")) as f:
            m = json.load(f)
        latest, generation = m["iteration"], m["generation"] + 1
    def publish(src: str, name: str) -> None:
        stage_checkpoint(src, trial_dir, name)
        commit_checkpoint(trial_dir, name)

    write_forever(latest, generation, publish)


def write_forever(latest: int, generation: int, publish) -> None:
    """Say "ready", then re-write checkpoint ``latest`` (the replace path) and the next ones until killed."""
    print("ready", latest, flush=True)
    src = tempfile.mkdtemp(prefix="crash_src_")
    try:
        it = max(latest, 1)
        while True:
            for name in os.listdir(src):
                os.unlink(os.path.join(src, name))
            write_source(src, it, generation)
            publish(src, checkpoint_name(it))
            it += 1
    finally:
        shutil.rmtree(src, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1])
