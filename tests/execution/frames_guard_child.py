"""Run by tests/execution/test_frames_guard.py in a fresh interpreter: a collection inside sys._current_frames().

``python frames_guard_child.py guard|no-guard OFFSET``: a second thread waits (so that the call makes frame objects),
a ``threading.local`` sits in a reference cycle (only the collector frees it, and freeing it takes the thread-state
lock), and the collector's threshold is set so that it runs OFFSET allocations after the call starts: on CPython 3.11
some offsets fall inside the lock (the process then never returns). Prints ``returned`` when the call returned.
"""

from __future__ import annotations

import gc
import sys
import threading

from tuneplat.execution import _frames_guard

if sys.argv[1] == "guard":
    assert _frames_guard.install(), "the guard is not installed on this Python"
offset = int(sys.argv[2])
parked = threading.Event()
threading.Thread(target=parked.wait, daemon=True).start()


def _garbage() -> None:
    local = threading.local()
    local.me = local


gc.disable()
gc.collect()
_garbage()
gc.set_threshold(gc.get_count()[0] + offset)
gc.enable()
frames = sys._current_frames()
gc.set_threshold(700)
print("returned", len(frames), flush=True)
