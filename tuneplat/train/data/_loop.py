"""The trainer's loop with its datasets: what the tuner ships to every rank when ``datasets=`` is given."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._session import _get_session
from ._config import DataConfig
from ._iterator import install, uninstall
from ._source import Source

__all__ = ["DatasetLoop"]


class DatasetLoop:
    """``fn(config)`` run with ``train.get_dataset_shard()`` answering from ``sources``.

    The tuner's Dask executor calls :meth:`_tuneplat_bind` once per experiment
    (in-memory data persisted on the cluster, row counts taken); every trial's
    ranks then get the bound copy.
    """

    def __init__(self, fn: Callable[..., Any], sources: Mapping[str, Source], config: DataConfig) -> None:
        self._fn = fn
        self._sources = dict(sources)
        self._config = config
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)

    @property
    def _tuneplat_backend_config(self) -> Any:
        return getattr(self._fn, "_tuneplat_backend_config", None)

    def _tuneplat_bind(self, client: Any) -> tuple[DatasetLoop, tuple[Any, ...]]:
        bound: dict[str, Source] = {}
        try:
            for name, src in self._sources.items():
                bound[name] = src.bind(client)
        except BaseException:
            for src in bound.values():
                src.release()
            raise
        return DatasetLoop(self._fn, bound, self._config), ()

    def _tuneplat_release(self) -> None:
        """Forget on the cluster what :meth:`_tuneplat_bind` put there (the executor calls it when ``fit()`` ends)."""
        for src in self._sources.values():
            src.release()

    def __call__(self, config: dict[str, Any]) -> Any:
        session = _get_session("train.get_dataset_shard")
        install(session, self._sources, self._config)
        try:
            return self._fn(config)
        finally:
            uninstall(session)

    def __repr__(self) -> str:
        return f"DatasetLoop({self.__qualname__}, datasets={sorted(self._sources)})"
