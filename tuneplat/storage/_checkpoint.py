"""Checkpoints: a directory of files, persisted atomically into the trial folder.

``report(metrics, checkpoint=Checkpoint.from_directory(d))`` copies ``d``'s
files into the trial folder before ``report`` returns (see
:mod:`tuneplat.storage._storage` for the crash-safety protocol).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._storage import fs_for_url, is_remote, remote_download, remote_is_committed

__all__ = ["Checkpoint", "load_torch"]

_METADATA = ".metadata.json"


class Checkpoint:
    """A directory of files that a trial can resume from.

    Attributes:
        path: the directory holding the files: a local folder, or a URL
            (``s3://bucket/results/exp/trial/checkpoint_000003``) when the
            experiment's ``storage_path`` is on a remote filesystem.
        filesystem: the fsspec filesystem of a remote checkpoint, else None.

    Example:
        >>> import tempfile, pathlib
        >>> d = tempfile.mkdtemp(); _ = pathlib.Path(d, "w.txt").write_text("1")
        >>> ckpt = Checkpoint.from_directory(d)
        >>> with ckpt.as_directory() as path:
        ...     pathlib.Path(path, "w.txt").read_text()
        '1'
    """

    def __init__(self, path: str | os.PathLike[str], filesystem: Any = None) -> None:
        self.path = os.fspath(path)
        self._fs = filesystem

    @classmethod
    def from_directory(cls, path: str | os.PathLike[str]) -> Checkpoint:
        """A checkpoint of the files in ``path`` (copied into the trial folder when reported).

        ``path`` may also be the URL of a checkpoint on a remote filesystem
        (e.g. ``result.checkpoint.path`` of an experiment stored on S3).

        Raises:
            FileNotFoundError: ``path`` is not an existing directory.
        """
        p = os.fspath(path)
        if is_remote(p):
            fs, root = fs_for_url(p)
            if not fs.isdir(root):
                raise FileNotFoundError(f"Checkpoint.from_directory({p!r}): no such folder on {fs.protocol}")
            return cls(fs.unstrip_protocol(root.rstrip("/")), fs)
        if not os.path.isdir(p):
            what = "a file" if os.path.exists(p) else "missing"
            raise FileNotFoundError(
                f"Checkpoint.from_directory({p!r}): the path is {what}; pass the folder that holds the "
                "checkpoint's files (e.g. save model.pt into a tempfile.mkdtemp() folder and pass that folder)."
            )
        return cls(os.path.abspath(p))

    @property
    def filesystem(self) -> Any:
        """The fsspec filesystem of a remote checkpoint; None for a local folder."""
        return self._fs

    def _missing(self) -> FileNotFoundError:
        return FileNotFoundError(f"checkpoint folder {self.path!r} no longer exists (deleted by "
                                 "CheckpointConfig(num_to_keep=...) retention, or moved)")

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """Yield a local directory with the checkpoint's files (read them, don't modify).

        A remote checkpoint is downloaded into a temporary folder, removed afterwards.
        """
        if self._fs is None:
            if not os.path.isdir(self.path):
                raise self._missing()
            yield self.path
            return
        tmp = tempfile.mkdtemp(prefix="tuneplat_ckpt_")
        try:
            yield self.to_directory(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def to_directory(self, path: str | os.PathLike[str] | None = None) -> str:
        """Copy the files into ``path`` (a new temporary folder when None); return it."""
        dest = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="tuneplat_ckpt_")
        if self._fs is None:
            shutil.copytree(self.path, dest, dirs_exist_ok=True)
            return dest
        if not remote_is_committed(self._fs, self.path):
            raise self._missing()
        return remote_download(self._fs, self.path, dest)

    def get_metadata(self) -> dict[str, Any]:
        """The metadata dict stored with the checkpoint (``{}`` when none)."""
        if self._fs is not None:
            where = f"{self.path}/{_METADATA}"
            try:
                text = self._fs.cat_file(where)
            except FileNotFoundError:
                return {}
        else:
            meta = Path(self.path, _METADATA)
            if not meta.exists():
                return {}
            where, text = str(meta), meta.read_text(encoding="utf-8", errors="replace")
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{where} is damaged (not JSON: {exc}): the checkpoint's metadata cannot be read; "
                             "restore it from a backup or remove it") from None
        if not isinstance(value, dict):
            raise ValueError(f"{where} is damaged: it holds a {type(value).__name__}, not the checkpoint's metadata")
        return value

    def set_metadata(self, metadata: dict[str, Any]) -> None:
        """Replace the checkpoint's metadata (a JSON-serialisable dict), atomically."""
        if not isinstance(metadata, dict):
            raise TypeError(f"Checkpoint.set_metadata takes a dict, got {type(metadata).__name__}")
        text = json.dumps(metadata)
        if self._fs is not None:
            self._fs.pipe_file(f"{self.path}/{_METADATA}", text.encode())
            return
        tmp = os.path.join(self.path, f"{_METADATA}.tmp-{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.path, _METADATA))

    def update_metadata(self, metadata: dict[str, Any]) -> None:
        """Merge ``metadata`` into the checkpoint's metadata."""
        self.set_metadata({**self.get_metadata(), **metadata})

    def __repr__(self) -> str:
        return f"Checkpoint(path={self.path!r})"

    def _key(self) -> str:
        return self.path.rstrip("/") if self._fs is not None else os.path.abspath(self.path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> tuple[Any, ...]:
        return (Checkpoint, (self.path, self._fs))


def load_torch(checkpoint: Checkpoint | str | os.PathLike[str], filename: str = "model.pt", *,
               weights_only: bool = True, map_location: Any = "cpu") -> Any:
    """Load ``filename`` from a checkpoint with ``torch.load``, safely by default.

    Args:
        checkpoint: a :class:`Checkpoint`, a checkpoint folder, or its URL on remote storage.
        filename: the file inside the checkpoint.
        weights_only: passed to ``torch.load``; True (the default) unpickles only
            tensors and plain containers. Set False only for files you trust.
        map_location: where tensors go (default "cpu").

    Raises:
        FileNotFoundError: the file is not in the checkpoint (the message lists what is).

    Example:
        >>> ckpt = tuneplat.get_checkpoint()  # doctest: +SKIP
        >>> state = load_torch(ckpt, "model.pt")  # doctest: +SKIP
        >>> model.load_state_dict(state["model"])  # doctest: +SKIP
    """
    import torch

    if not isinstance(checkpoint, Checkpoint) and is_remote(os.fspath(checkpoint)):
        checkpoint = Checkpoint.from_directory(checkpoint)
    if isinstance(checkpoint, Checkpoint) and checkpoint.filesystem is not None:
        with checkpoint.as_directory() as local:
            return load_torch(local, filename, weights_only=weights_only, map_location=map_location)
    folder = checkpoint.path if isinstance(checkpoint, Checkpoint) else os.fspath(checkpoint)
    path = os.path.join(folder, filename)
    if not os.path.isfile(path):
        have = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
        raise FileNotFoundError(f"load_torch: {filename!r} is not in checkpoint {folder!r} (it holds {have}); "
                                "pass filename= to pick the file you saved.")
    return torch.load(path, weights_only=weights_only, map_location=map_location)
