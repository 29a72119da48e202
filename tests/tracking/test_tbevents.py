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
