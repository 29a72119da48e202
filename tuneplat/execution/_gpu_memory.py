"""GPU memory as a resource: ``resources_per_worker={"GPU_memory": "10GiB"}`` packs trials onto devices by memory.

``{"GPU_memory": "auto"}`` (or ``"auto:10GiB"``) lets the tuner choose the figure from what trials of the same
shape measured (``core/_gpu_auto.py``); until one measured, a rank takes a whole device (or the starting figure).

``{"GPU": 0.25}`` keeps its meaning (a quarter of a device, whatever its size). ``GPU_memory`` asks for an
amount of device memory instead: the executor turns it into the fraction of a device it is, using the memory of
the cluster's GPUs (the smallest, when they differ), and places it with the fraction machinery (a rank holds one
device; memory on several devices is not combined). Given with ``GPU`` as well, a rank takes the larger share.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

__all__ = ["GPU_MEMORY", "AutoGpuMemory", "as_gpu_share", "device_memory_bytes", "is_auto", "parse_memory"]

#: the resource name
GPU_MEMORY = "GPU_memory"

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
          "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}


class AutoGpuMemory(float):
    """``GPU_memory="auto"`` / ``"auto:10GiB"``: the tuner sizes each trial from measured peaks (``core/_gpu_auto.py``).

    A float (so requests stay ``{name: number}``) whose value is the starting figure in bytes, or 1.0 when none was
    given; :attr:`start` is the starting figure or None.
    """

    start: float | None

    def __new__(cls, start: float | None = None) -> AutoGpuMemory:
        obj = super().__new__(cls, start if start else 1.0)
        obj.start = start
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        return (AutoGpuMemory, (self.start,))

    def __repr__(self) -> str:
        return "'auto'" if self.start is None else f"'auto:{self.start / 2**30:.4g}GiB'"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AutoGpuMemory) and other.start == self.start

    def __hash__(self) -> int:
        return hash(("auto", self.start))


def is_auto(value: Any) -> bool:
    """Whether a ``GPU_memory`` value is the automatic mode."""
    return isinstance(value, AutoGpuMemory)


def parse_memory(value: Any, where: str = "GPU_memory") -> float:
    """Bytes from ``10GiB``, ``"512 MiB"``, ``"8GB"`` or a number of bytes; ``"auto"``/``"auto:10GiB"``: automatic.

    Raises:
        ValueError: naming ``where``, the value and the accepted forms.

    Example:
        >>> parse_memory("10GiB"), parse_memory("1.5 GB"), parse_memory(2048)
        (10737418240.0, 1500000000.0, 2048.0)
    """
    if isinstance(value, AutoGpuMemory):
        return value
    if isinstance(value, str) and value.strip().lower().split(":", 1)[0] == "auto":
        _, sep, start = value.strip().partition(":")
        if sep and not start.strip():
            raise ValueError(f"The value of `{where}` is {value!r}, but must be 'auto' or 'auto:' followed by a "
                             "starting figure, e.g. 'auto:10GiB'.")
        return AutoGpuMemory(parse_memory(start, where) if sep else None)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(value))
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS:
            raise ValueError(f"The value of `{where}` is {value!r}, but must be a number of bytes, an amount "
                             "like '10GiB', '512MiB' or '8GB', or 'auto' (sized from measured peaks).")
        number = float(m.group(1)) * _UNITS[unit]
    if not number > 0:
        raise ValueError(f"The value of `{where}` is {value!r}, but must be more than 0 bytes.")
    return number


def device_memory_bytes() -> float | None:
    """The memory of the smallest local GPU (``nvidia-smi``), or None without one."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    sizes = [float(line.strip()) * 1024**2 for line in out.splitlines() if line.strip().replace(".", "").isdigit()]
    return min(sizes) if sizes else None


def as_gpu_share(request: Mapping[str, float], device_bytes: float | None) -> dict[str, float]:
    """``request`` with ``GPU_memory`` (bytes) turned into the share of one device it needs.

    Raises:
        ValueError: ``GPU_memory`` is asked but the cluster's GPU memory is unknown (no GPU), or it is more
            than one device holds (the numbers are in the message).

    Example:
        >>> as_gpu_share({"CPU": 1, "GPU_memory": 20 * 2**30}, 80 * 2**30)
        {'CPU': 1, 'GPU': 0.25}
    """
    if GPU_MEMORY not in request:
        return dict(request)
    out = {k: v for k, v in request.items() if k != GPU_MEMORY}
    auto = request[GPU_MEMORY]
    if is_auto(auto) and getattr(auto, "start", None) is None:  # (until a trial measured: a whole device)
        if not device_bytes:
            raise ValueError("A trial asks for GPU_memory='auto', but the cluster has no GPU whose memory is known "
                             "(nvidia-smi found none): use {'GPU': fraction} on a cluster with GPUs, or drop "
                             "GPU_memory.")
        out["GPU"] = max(float(out.get("GPU", 0.0)), 1.0)
        return out
    wanted = float(request[GPU_MEMORY])
    if not device_bytes:
        raise ValueError(f"A trial asks for GPU_memory={wanted / 2**30:.3g} GiB per rank, but the cluster has no "
                         "GPU whose memory is known (nvidia-smi found none): use {'GPU': fraction} on a cluster "
                         "with GPUs, or drop GPU_memory.")
    if wanted > device_bytes:
        raise ValueError(f"A trial asks for GPU_memory={wanted / 2**30:.3g} GiB per rank, but a GPU of this cluster "
                         f"has {device_bytes / 2**30:.3g} GiB; a rank uses one device. Lower it, or use more ranks.")
    share = wanted / device_bytes
    out["GPU"] = max(float(out.get("GPU", 0.0)), share)
    return out
