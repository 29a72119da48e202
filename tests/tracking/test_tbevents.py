"""The TensorBoard writer's record checksum: the C path and the pure-Python fallback agree with the standard."""

from __future__ import annotations

import random

from tuneplat.tracking import _tbevents


def test_crc32c_matches_the_standard_check_value_on_both_paths():
    # CRC-32C's check value (the CRC of the ASCII digits 1-9), from the CRC catalogue
    assert _tbevents.crc32c_py(b"123456789") == 0xE3069283
    assert _tbevents.crc32c(b"123456789") == 0xE3069283
    assert _tbevents._crc32c_c is not None  # installed with tuneplat: the writer must not checksum in Python
    rng = random.Random(0)
    for n in (0, 1, 8, 300, 4096):
        data = bytes(rng.randrange(256) for _ in range(n))
        assert _tbevents.crc32c(data) == _tbevents.crc32c_py(data)


def test_supersede_keeps_steps_up_to_the_checkpoint_and_leaves_other_writers_files_alone(tmp_path):
    from tensorboardX import SummaryWriter
    from tensorboardX.proto import event_pb2

    ours = _tbevents.EventFile(str(tmp_path))
    for step in (1, 2, 3, 4, 5, 4, 5):  # a retry from the checkpoint of step 3 wrote 4 and 5 again
        ours.scalars([("ray/tune/loss", float(step))], step)
    ours.close()
    assert _tbevents.keep_steps_up_to(ours.path, 3)
    steps = []
    with open(ours.path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 8], "little")
        event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + n])
        steps += [event.step for _ in event.summary.value]
        pos += 16 + n
    assert steps == [1, 2, 3]
    users = tmp_path / "user"
    with SummaryWriter(str(users)) as w:  # the user's own writer in the trial folder: never rewritten
        for step in (1, 5):
            w.add_scalar("my/loss", 1.0, step)
    (theirs,) = list(users.iterdir())
    before = theirs.read_bytes()
    assert not _tbevents.keep_steps_up_to(str(theirs), 3)
    assert theirs.read_bytes() == before
