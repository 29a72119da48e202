"""The torch helpers of :mod:`tuneplat.train.torch` (a rank's device, DDP/FSDP model, sharded loaders)."""

from __future__ import annotations

import collections.abc
import dataclasses
import logging
import multiprocessing
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler, SequentialSampler
from torch.utils.data.distributed import DistributedSampler

from ...storage._checkpoint import load_torch
from .. import _session as _sessions
from .._backend import Backend, BackendConfig

__all__ = ["TorchConfig", "enable_reproducibility", "get_device", "get_devices", "load_torch",
           "prepare_data_loader", "prepare_model"]

logger = logging.getLogger("tuneplat")

_STRATEGIES = ("ddp", "fsdp", None)


@dataclasses.dataclass
class TorchConfig(BackendConfig):
    """How the ranks of a :class:`TorchTrainer` run join their process group.

    Args:
        backend: ``"gloo"``, ``"nccl"`` (or another torch.distributed backend);
            None: nccl when the ranks have GPUs, else gloo.
        init_method: Ray's ``"env"`` (the default) or ``"tcp"``: how ranks find rank 0. Both are accepted; the
            ranks always rendezvous on rank 0's ``TCPStore`` (``MASTER_ADDR``/``MASTER_PORT`` set, as ``"env"``).
        timeout_s: process-group timeout: how long a collective waits for a
            missing peer before it raises (torch's own default is 30 minutes; Ray's 1800 s; here 60 s,
            so a rank stuck on a lost peer fails, and is retried, within a minute).

    Example:
        >>> TorchConfig(timeout_s=120).timeout_s
        120
    """

    backend: str | None = None
    init_method: str = "env"
    timeout_s: float = 60

    def __post_init__(self) -> None:
        if self.backend is not None and not (isinstance(self.backend, str) and self.backend):
            raise ValueError(f"The value of `TorchConfig.backend` is {self.backend!r}, but must be None, 'gloo' or 'nccl'.")
        if self.init_method not in ("env", "tcp"):
            raise ValueError(f"The value of `TorchConfig.init_method` is {self.init_method!r}, but must be 'env' or "
                             "'tcp'.")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or not self.timeout_s > 0:
            raise ValueError(f"The value of `TorchConfig.timeout_s` is {self.timeout_s!r}, but must be a number of "
                             "seconds > 0.")

    @property
    def backend_cls(self) -> type[Backend]:
        """torch's backend: the ranks join one process group (``execution/_runner.py``)."""
        from ...execution._rank_group import TorchBackend

        return TorchBackend


def _session() -> Any:
    return getattr(_sessions._local, "session", None) or _sessions._process_session


def _world() -> tuple[int, int]:
    """(rank, world size) of the calling rank; (0, 1) outside a trial or without a process group."""
    session = _session()
    if session is not None:
        return session.spec.rank, session.spec.world_size
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def get_devices() -> list[torch.device]:
    """Every device given to the calling rank (several when a rank asks for more than one GPU).

    Returns ``[cpu]`` for CPU ranks, even on a machine with GPUs. Outside a
    trial: the current CUDA device if CUDA is available, else the CPU.

    Example:
        >>> get_devices()  # doctest: +SKIP
        [device(type='cpu')]
    """
    session = _session()
    if session is not None:
        ids = list(session.spec.gpu_ids)
        if ids and torch.cuda.is_available():
            return [torch.device("cuda", i) for i in ids]
        return [torch.device("cpu")]
    if torch.cuda.is_available():
        return [torch.device("cuda", torch.cuda.current_device())]
    return [torch.device("cpu")]


def enable_reproducibility(seed: int = 0) -> None:
    """Seed torch, numpy and ``random`` and make torch deterministic (``ray.train.torch.enable_reproducibility``).

    Call it at the top of the training function, on every rank. It sets
    ``torch.use_deterministic_algorithms(True)`` (an operation without a
    deterministic implementation then raises), turns off cuDNN benchmarking
    and sets ``CUBLAS_WORKSPACE_CONFIG`` for deterministic cuBLAS. Worker
    processes are reused between trials: these settings stay on for the later
    trials of that process, as they would in a reused Ray actor.
    """
    import os
    import random

    import numpy as np

    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"


def get_device() -> torch.device:
    """The device the calling rank trains on (its first GPU, or the CPU).

    Example:
        >>> x = torch.zeros(3, device=get_device())  # doctest: +SKIP
    """
    return get_devices()[0]


def prepare_model(model: torch.nn.Module, move_to_device: bool | torch.device = True,
                  parallel_strategy: str | None = "ddp",
                  parallel_strategy_kwargs: dict[str, Any] | None = None) -> torch.nn.Module:
    """Put ``model`` on the rank's device and wrap it for data-parallel training.

    Args:
        model: the module to train.
        move_to_device: move the model to :func:`get_device` (or to the device
            given here); False leaves it where it is.
        parallel_strategy: ``"ddp"`` (DistributedDataParallel), ``"fsdp"``
            (FullyShardedDataParallel) or None (no wrapper). Only applied when
            the trial has more than one rank.
        parallel_strategy_kwargs: extra keyword arguments for the wrapper
            (e.g. ``{"find_unused_parameters": True}``).

    Returns:
        The module to train (the wrapper when one was applied).

    Example:
        >>> model = prepare_model(torch.nn.Linear(4, 2))  # doctest: +SKIP
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"prepare_model() takes a torch.nn.Module, got {type(model).__name__}")
    if parallel_strategy not in _STRATEGIES:
        raise ValueError(f"The value of `parallel_strategy` is {parallel_strategy!r}, but must be 'ddp', 'fsdp' or None.")
    device = move_to_device if isinstance(move_to_device, torch.device) else get_device()
    if move_to_device is not False:
        model = model.to(device)
    _rank, world_size = _world()
    if world_size <= 1 or parallel_strategy is None:
        return model
    if not torch.distributed.is_initialized():
        raise RuntimeError("prepare_model(): this trial has several ranks but no process group; call it from the "
                           "function that tuneplat runs (Tuner/TorchTrainer with ScalingConfig(num_workers>1)).")
    kwargs = dict(parallel_strategy_kwargs or {})
    if parallel_strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        if device.type == "cuda":
            kwargs.setdefault("device_ids", [device.index])
            kwargs.setdefault("output_device", device.index)
        return DistributedDataParallel(model, **kwargs)
    from torch.distributed.fsdp import FullyShardedDataParallel

    if device.type == "cuda":
        kwargs.setdefault("device_id", device)
    return FullyShardedDataParallel(model, **kwargs)


def _move(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(_move(b, device, non_blocking) for b in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_move(b, device, non_blocking) for b in batch)
    if isinstance(batch, collections.abc.Mapping):
        try:
            return type(batch)({k: _move(v, device, non_blocking) for k, v in batch.items()})  # type: ignore[call-arg]
        except TypeError:
            return {k: _move(v, device, non_blocking) for k, v in batch.items()}
    return batch


def _batch_len(batch: Any) -> int:
    """How many samples a batch holds (the first dimension of its first tensor; 0 when unknown)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, collections.abc.Mapping):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for b in batch:
            n = _batch_len(b)
            if n:
                return n
    return 0


class _PreparedLoader:
    """Iterates the (re-sharded) loader: advances the sampler's epoch per pass, moves batches."""

    def __init__(self, loader: DataLoader, device: torch.device | None) -> None:
        self._loader = loader
        self._device = device
        self._non_blocking = bool(device is not None and device.type == "cuda" and loader.pin_memory)
        self._passes = 0
        sampler = loader.sampler
        self._last_epoch = getattr(sampler, "epoch", 0)

    def __iter__(self) -> Any:
        sampler = self._loader.sampler
        if isinstance(sampler, DistributedSampler):
            if sampler.epoch == self._last_epoch:  # the user did not set it since the last pass
                sampler.set_epoch(self._passes)
            self._last_epoch = sampler.epoch
        self._passes += 1
        monitor = getattr(_session(), "monitor", None)
        if monitor is None:  # outside a trial: nothing to count
            if self._device is None:
                yield from self._loader
                return
            for batch in self._loader:
                yield _move(batch, self._device, self._non_blocking)
            return
        it = iter(self._loader)
        clock = time.perf_counter
        while True:  # time spent waiting for each batch vs in the training step (the rank's per-worker view)
            t0 = clock()
            try:
                batch = next(it)
            except StopIteration:
                return
            monitor.on_batch(_batch_len(batch), clock() - t0)
            yield batch if self._device is None else _move(batch, self._device, self._non_blocking)

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:  # sampler, dataset, batch_size...
        return getattr(self._loader, name)


def _check_can_fork(num_workers: int) -> None:
    if num_workers > 0 and multiprocessing.current_process().daemon:
        raise RuntimeError(
            f"DataLoader(num_workers={num_workers}) cannot start its worker processes inside this Dask worker: it is "
            "a daemonic process. Start Dask workers with DASK_DISTRIBUTED__WORKER__DAEMON=False (or "
            "dask.config.set({'distributed.worker.daemon': False}) before LocalCluster(...)), or use num_workers=0."
        )


def prepare_data_loader(data_loader: DataLoader, add_dist_sampler: bool = True,
                        move_to_device: bool = True, auto_transfer: bool = True) -> Any:
    """Shard ``data_loader`` across the trial's ranks and move its batches to the rank's device.

    With more than one rank, the loader is rebuilt with a ``DistributedSampler``
    (each rank sees a disjoint ``1/world_size`` of the data, reshuffled every
    pass when the original loader shuffled). Everything else the loader was
    built with is kept: batch size, collate function, ``num_workers``,
    ``drop_last``, ``pin_memory``, worker init function, generator...
    ``sampler.set_epoch`` is called on every new pass, so the shuffle differs
    per epoch (calling it yourself is fine too).

    Args:
        data_loader: a ``torch.utils.data.DataLoader``.
        add_dist_sampler: shard with a DistributedSampler (when world size > 1).
        move_to_device: move every batch (tensors inside tuples, lists, dicts)
            to :func:`get_device`.
        auto_transfer: accepted for Ray compatibility (same as move_to_device).

    Returns:
        An iterable with ``len()``, ``.sampler``, ``.dataset``, ``.batch_size``.

    Example:
        >>> loader = prepare_data_loader(DataLoader(ds, batch_size=32, shuffle=True))  # doctest: +SKIP
    """
    if not isinstance(data_loader, DataLoader):
        raise TypeError(f"prepare_data_loader() takes a torch.utils.data.DataLoader, got {type(data_loader).__name__}")
    _check_can_fork(data_loader.num_workers)
    rank, world_size = _world()
    loader = data_loader
    if add_dist_sampler and world_size > 1 and not isinstance(data_loader.sampler, DistributedSampler):
        loader = _with_dist_sampler(data_loader, rank, world_size)
    device = get_device() if (move_to_device and auto_transfer) else None
    if device is not None and device.type == "cpu":
        device = None  # batches from a DataLoader are on the CPU already
    return _PreparedLoader(loader, device)


def _with_dist_sampler(loader: DataLoader, rank: int, world_size: int) -> DataLoader:
    if isinstance(loader.dataset, IterableDataset):
        logger.warning("tuneplat: prepare_data_loader(): an IterableDataset cannot take a DistributedSampler; "
                       "shard it yourself with train.get_context().get_world_rank()/get_world_size().")
        return loader
    if loader.batch_size is None:
        raise ValueError(
            "prepare_data_loader(): this DataLoader was built with a custom batch_sampler (or batch_size=None), "
            "which cannot be sharded automatically. Pass add_dist_sampler=False and build it with "
            "torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=world_size, rank=rank) yourself.")
    sampler = loader.sampler
    if not isinstance(sampler, (RandomSampler, SequentialSampler)):
        raise TypeError(
            f"prepare_data_loader(): this DataLoader uses a custom sampler ({type(sampler).__name__}), which cannot be "
            "sharded automatically. Pass add_dist_sampler=False and shard it yourself (see DistributedSampler).")
    shuffle = isinstance(sampler, RandomSampler)
    seed = 0
    if shuffle and loader.generator is not None:
        seed = int(loader.generator.initial_seed()) % (2**63)
    dist_sampler: DistributedSampler[Any] = DistributedSampler(loader.dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                                      drop_last=loader.drop_last)
    kwargs: dict[str, Any] = {
        "batch_size": loader.batch_size, "shuffle": False, "sampler": dist_sampler,
        "num_workers": loader.num_workers, "collate_fn": loader.collate_fn, "pin_memory": loader.pin_memory,
        "drop_last": loader.drop_last, "timeout": loader.timeout, "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context, "generator": loader.generator,
        "persistent_workers": loader.persistent_workers, "pin_memory_device": loader.pin_memory_device,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    for optional in ("in_order",):
        if hasattr(loader, optional):
            kwargs[optional] = getattr(loader, optional)
    return DataLoader(loader.dataset, **kwargs)


def prepare_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer, unchanged (``ray.train.torch.prepare_optimizer``, for Ray's deprecated AMP helpers).

    Use ``torch.autocast`` and ``torch.amp.GradScaler`` in the training loop for mixed precision.
    """
    return optimizer


def backward(tensor: torch.Tensor) -> None:
    """``tensor.backward()`` (``ray.train.torch.backward``, Ray's deprecated AMP helper)."""
    tensor.backward()


def accelerate(amp: bool = False) -> None:
    """Ray's deprecated AMP switch (``ray.train.torch.accelerate``): ``amp=False`` does nothing.

    Raises:
        NotImplementedError: ``amp=True``: use ``torch.autocast`` / ``torch.amp.GradScaler`` in the loop.
    """
    if amp:
        raise NotImplementedError("train.torch.accelerate(amp=True) is Ray's deprecated AMP switch: use "
                                  "torch.autocast(...) and torch.amp.GradScaler in the training loop instead.")
