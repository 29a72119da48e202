"""Writes checkpoints to S3 in a loop through tuneplat's remote staging/commit protocol (killed by test_crash.py).

Like crash_writer.py: on start it cleans what a crash left and loads the latest committed
checkpoint, re-writes that iteration (the replace path), then writes the next ones.
"""

from __future__ import annotations

import json
import sys

import crash_writer
import s3fs
from crash_writer import write_forever

from tuneplat.storage._storage import (
    MANIFEST,
    PREFIX,
    remote_clean_staging,
    remote_commit_checkpoint,
    remote_stage_checkpoint,
)

crash_writer.SIZE = 1 << 20  # 3 x 1 MiB per checkpoint: several commits per second against the local S3 server


def filesystem(endpoint: str) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing",
                             client_kwargs={"region_name": "eu-west-1"})


def committed(fs: s3fs.S3FileSystem, trial_url: str) -> list[str]:
    """What a restarting trial sees: the committed checkpoints, oldest first, after cleaning."""
    remote_clean_staging(fs, trial_url)
    try:
        entries = fs.ls(trial_url, detail=False)
    except FileNotFoundError:
        return []
    return sorted(e for e in entries if e.rsplit("/", 1)[-1].startswith(PREFIX) and fs.exists(f"{e}/{MANIFEST}"))


def main(endpoint: str, trial_url: str) -> None:
    fs = filesystem(endpoint)
    existing = committed(fs, trial_url)
    latest = generation = 0
    if existing:
        m = json.loads(fs.cat_file(f"{existing[-1]}/manifest.json"))
        latest, generation = m["iteration"], m["generation"] + 1
    def publish(src: str, name: str) -> None:
        remote_stage_checkpoint(fs, src, trial_url, name)
        remote_commit_checkpoint(fs, trial_url, name)

    write_forever(latest, generation, publish)

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
