"""Crash safety: SIGKILL a process in the middle of writing large checkpoints, many times.

Every restart must find only whole checkpoints (files exactly as written, per the
manifest written with them) and load the latest. The seed is logged; rerun one with
TUNEPLAT_CRASH_SEED=<seed>.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tuneplat.storage._storage import list_checkpoints

HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS = int(os.environ.get("TUNEPLAT_CRASH_ROUNDS", "25"))
log = logging.getLogger(__name__)


def _is_whole(folder: str) -> bool:
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    names = sorted(os.listdir(folder))
    if names != sorted([*manifest["files"], "manifest.json"]):
        return False
    for name, digest in manifest["files"].items():
        with open(os.path.join(folder, name), "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != digest:
                return False
    return os.path.basename(folder) == f"checkpoint_{manifest['iteration']:06d}"


@pytest.mark.slow
def test_sigkill_during_checkpoint_writes_never_leaves_a_partial_checkpoint(tmp_path):
    seed = int(os.environ.get("TUNEPLAT_CRASH_SEED", random.SystemRandom().randrange(2**32)))
    print(f"crash test seed: {seed} (rerun with TUNEPLAT_CRASH_SEED={seed})")
    log.warning("crash test seed: %s", seed)
    rng = random.Random(seed)
    trial = str(tmp_path / "trial")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(HERE)), HERE]),
               TMPDIR=str(tmp_path))  # a SIGKILLed writer leaves its scratch folder: in the test's folder
    progress = []
    killed_mid_write = 0
    for round_ in range(ROUNDS):
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "crash_writer.py"), trial],
                                stdout=subprocess.PIPE, text=True, env=env)
        line = proc.stdout.readline().split()  # the writer loaded its latest checkpoint and is about to write
        assert line and line[0] == "ready", f"seed {seed} round {round_}: writer did not start: {line}"
        progress.append(int(line[1]))
        time.sleep(rng.uniform(0.0, 0.6))  # the kill moment (seeded), not a synchronisation
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        leftovers = [e for e in os.listdir(trial) if e.startswith((".staging_", ".trash_"))]
        killed_mid_write += bool(leftovers)
        ckpts = list_checkpoints(trial)  # what a restart sees
        for c in ckpts:
            assert _is_whole(c), f"seed {seed} round {round_}: partial checkpoint {c}"
        assert not [e for e in os.listdir(trial) if e.startswith((".staging_", ".trash_"))]
    # the writer made progress across restarts and the kills did land in the middle of writes
    assert progress[-1] > progress[0], f"seed {seed}: no progress {progress}"
    assert killed_mid_write > 0, f"seed {seed}: no kill landed while a checkpoint was being written"


def _is_whole_remote(fs, folder: str) -> bool:
    manifest = json.loads(fs.cat_file(f"{folder}/manifest.json"))
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.find(folder))
    if names != sorted([*manifest["files"], "manifest.json", ".tuneplat_manifest.json"]):
        return False
    for name, digest in manifest["files"].items():
        if hashlib.sha256(fs.cat_file(f"{folder}/{name}")).hexdigest() != digest:
            return False
    return folder.rsplit("/", 1)[-1] == f"checkpoint_{manifest['iteration']:06d}"


@pytest.mark.slow
def test_sigkill_during_remote_checkpoint_writes_never_exposes_a_partial_checkpoint(s3, s3_endpoint, tmp_path):
    """The same on S3, where "rename" is a copy: only manifest-committed folders count, and they are whole."""
    from remote_crash_writer import committed

    seed = int(os.environ.get("TUNEPLAT_CRASH_SEED", random.SystemRandom().randrange(2**32)))
    print(f"remote crash test seed: {seed} (rerun with TUNEPLAT_CRASH_SEED={seed})")
    log.warning("remote crash test seed: %s", seed)
    rng = random.Random(seed)
    fs, url = s3
    trial = f"{url}/exp/trial"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(HERE)), HERE]),
               TMPDIR=str(tmp_path))  # a SIGKILLed writer leaves its scratch folder: in the test's folder
    progress = []
    killed_mid_write = 0
    for round_ in range(max(ROUNDS // 2, 4)):
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "remote_crash_writer.py"), s3_endpoint, trial],
                                stdout=subprocess.PIPE, text=True, env=env)
        line = proc.stdout.readline().split()
        assert line and line[0] == "ready", f"seed {seed} round {round_}: writer did not start: {line}"
        progress.append(int(line[1]))
        time.sleep(rng.uniform(0.2, 1.5))  # the kill moment (seeded), not a synchronisation
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        fs.invalidate_cache()
        names = [p.rsplit("/", 1)[-1] for p in fs.ls(trial, detail=False)] if fs.exists(trial) else []
        killed_mid_write += any(n.startswith(".staging_") or not fs.exists(f"{trial}/{n}/.tuneplat_manifest.json")
                                for n in names)
        for c in committed(fs, trial):  # what a restart sees
            assert _is_whole_remote(fs, c), f"seed {seed} round {round_}: partial checkpoint {c}"
    assert progress[-1] > progress[0], f"seed {seed}: no progress {progress}"
    assert killed_mid_write > 0, f"seed {seed}: no kill landed while a checkpoint was being written"
