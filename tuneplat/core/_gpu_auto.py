"""``resources_per_worker={"GPU_memory": "auto"}``: each trial's GPU memory chosen from what its shape measured.

Trials of the same *shape* (their other resources and their number of ranks) are taken to need alike: the
first of a shape runs on a device of its own (``{"GPU": 1}``), or at the starting figure given as
``"auto:10GiB"``; once a trial of that shape reported ``gpu_memory_peak_bytes`` (and
``gpu_memory_process_bytes``, NVML's figure with the CUDA context, where present), its successors ask for

    figure = the largest peak seen for the shape x :data:`MARGIN` + :data:`HEADROOM`

and pack onto devices by it. An out-of-memory failure of a trial sized this way raises the shape's figure to at
least :data:`OOM_GROWTH` x what that trial had (a whole device at most). Each choice is journaled with the
trial's start (``trial_start.gpu_memory_auto``: bytes, ``"whole device"`` or the start figure, and why). After
``Tuner.restore`` the peaks in the restored trials' results teach their shapes again (an OOM's raise is not kept).

Pure: the loop calls :meth:`GpuMemoryAuto.resolve` before it reserves room for a trial,
:meth:`~GpuMemoryAuto.observe` with each result, and :meth:`~GpuMemoryAuto.on_oom` on an OOM failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..execution._gpu_memory import GPU_MEMORY, is_auto

__all__ = ["HEADROOM", "MARGIN", "OOM_GROWTH", "GpuMemoryAuto"]

#: a measured peak is multiplied by this (allocator fragmentation, peaks a later step reaches)
MARGIN = 1.25
#: and this much is added (the CUDA context and cuBLAS/cuDNN workspaces, outside torch's allocator peak)
HEADROOM = 512 * 2**20
#: an OOM of a trial sized automatically raises its shape's figure to at least this times what it had
OOM_GROWTH = 1.5


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


class GpuMemoryAuto:
    """The figures learned per shape, and the choice made for each trial (see the module docstring)."""

    def __init__(self) -> None:
        self.peak: dict[str, float] = {}  # shape key -> the largest peak reported by a trial of that shape
        self.floor: dict[str, float] = {}  # shape key -> the least figure after an OOM (OOM_GROWTH x what it had)
        self.chosen: dict[str, tuple[str, float | None, str]] = {}  # trial id -> (shape key, bytes|None, why)

    @staticmethod
    def wants(request: Mapping[str, float] | None) -> bool:
        """Whether ``request`` asks for ``GPU_memory="auto"``."""
        return request is not None and is_auto(request.get(GPU_MEMORY))

    @staticmethod
    def key(request: Mapping[str, float], world_size: int) -> str:
        rest = sorted((k, float(v)) for k, v in request.items() if k != GPU_MEMORY)
        return repr((rest, world_size))

    def resolve(self, trial_id: str, request: Mapping[str, float], world_size: int,
                device_bytes: float | None) -> dict[str, float]:
        """The request trial ``trial_id`` runs with now (``GPU_memory`` in bytes, or a whole device).

        Args:
            request: the trial's request per rank, ``GPU_memory`` automatic.
            world_size: its ranks.
            device_bytes: the memory of the executor's (smallest) GPU, None when unknown.
        """
        auto = request[GPU_MEMORY]
        key = self.key(request, world_size)
        rest = {k: v for k, v in request.items() if k != GPU_MEMORY}
        peak = self.peak.get(key)
        floor = self.floor.get(key)
        figure: float | None
        if peak is not None:
            figure = peak * MARGIN + HEADROOM
            why = f"the largest peak measured for this shape, {_gib(peak)}, x {MARGIN:g} + {_gib(HEADROOM)}"
            if floor is not None and floor > figure:
                figure = floor
                why = "raised after an out-of-memory failure of this shape (the peak-based figure was less)"
        elif floor is not None:
            figure, why = floor, "raised after an out-of-memory failure of this shape (nothing measured yet)"
        elif getattr(auto, "start", None):
            figure, why = float(auto.start), "the starting figure given ('auto:...'); nothing measured yet"  # type: ignore[attr-defined]
        else:
            figure, why = None, "the first trial of its shape: it runs on a device of its own to measure its peak"
        if figure is not None and device_bytes and figure >= device_bytes:
            why = f"{why}: {_gib(figure)} is a whole device ({_gib(device_bytes)}) or more"
            figure = None
        self.chosen[trial_id] = (key, figure, why)
        if figure is None:
            rest["GPU"] = max(float(rest.get("GPU", 0.0)), 1.0)
            return rest
        rest[GPU_MEMORY] = figure
        return rest

    def note(self, trial_id: str) -> dict[str, Any] | None:
        """What was chosen for the trial's latest start, for the journal (None: not sized automatically)."""
        got = self.chosen.get(trial_id)
        if got is None:
            return None
        _, figure, why = got
        return {"bytes": int(figure) if figure is not None else "whole device", "why": why}

    def observe(self, trial_id: str, result: Mapping[str, Any]) -> None:
        """A result of trial ``trial_id``: its reported peak teaches its shape."""
        got = self.chosen.get(trial_id)
        if got is not None:
            self._learn(got[0], result)

    def learn(self, request: Mapping[str, float], world_size: int, result: Mapping[str, Any]) -> None:
        """A result of an earlier run of the experiment (``Tuner.restore``) of a trial of this shape."""
        self._learn(self.key(request, world_size), result)

    def _learn(self, key: str, result: Mapping[str, Any]) -> None:
        values = [result.get("gpu_memory_peak_bytes"), result.get("gpu_memory_process_bytes")]
        figures = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
        if figures:
            self.peak[key] = max(self.peak.get(key, 0.0), max(figures))

    def on_oom(self, trial_id: str, device_bytes: float | None) -> str | None:
        """Trial ``trial_id`` ran out of memory: raise its shape's figure for successors; a line saying so."""
        got = self.chosen.get(trial_id)
        if got is None:
            return None
        key, figure, _ = got
        had = figure if figure is not None else device_bytes
        if not had:
            return None
        new = had * OOM_GROWTH
        self.floor[key] = max(self.floor.get(key, 0.0), new)
        if figure is None:
            return None  # (it had a whole device: successors cannot get more; a smaller config is the way)
        return (f"GPU_memory='auto': trial {trial_id} ran out of memory at {_gib(had)}; trials of its shape now ask "
                f"for at least {_gib(new)}")
