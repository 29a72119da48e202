"""The Lightning strategies, cluster environment, report callback and ``prepare_trainer``.

Two packages ship the same Lightning: ``lightning`` (``lightning.pytorch``) and
``pytorch_lightning``. Their classes are distinct, and a Trainer of one rejects
a strategy of the other. Ray's guide imports ``pytorch_lightning``; newer code
imports ``lightning.pytorch``; where both are installed, each public class
here builds the object of the package the calling code uses (found among the
caller's names, else the one already imported), so a ported script runs with
either.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import tempfile
import types
from typing import Any

import torch

from ...storage._checkpoint import Checkpoint
from .. import _session as _sessions
from .._extras import require

__all__ = ["RayDDPStrategy", "RayDeepSpeedStrategy", "RayFSDPStrategy", "RayLightningEnvironment",
           "RayTrainReportCallback", "prepare_trainer"]

logger = logging.getLogger("tuneplat")

_LIGHTNING = "lightning.pytorch"
_PL = "pytorch_lightning"


def _import_lightning() -> Any:
    """``lightning.pytorch``, or ``pytorch_lightning`` where only that is installed (Ray's order)."""
    try:
        return require(_LIGHTNING, "lightning", "tuneplat.train.lightning")
    except ImportError as first:
        try:
            return importlib.import_module(_PL)
        except ImportError:
            raise first from None


pl = _import_lightning()
_environments = importlib.import_module(f"{pl.__name__}.plugins.environments")


def _context() -> Any:
    return _sessions.get_context()


def _device() -> torch.device:
    from ..torch import get_device

    return get_device()


class _StrategyMixin:
    world_size: int
    global_rank: int

    @property
    def root_device(self) -> torch.device:
        """The rank's device (its GPU, or the CPU)."""
        return _device()

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        """How Lightning's DistributedSampler shards data: one shard per rank of the trial."""
        return {"num_replicas": self.world_size, "rank": self.global_rank}


class _ShardedSaveMixin(_StrategyMixin):
    """Every rank saves its shard under the path it was given (Lightning sends rank 0's path to every rank).

    ``RayTrainReportCallback`` gives each rank a folder of its own and reports
    it: with rank 0's path everywhere, a rank on another host would write its
    shard where no report picks it up. Under its own path every shard reaches
    the same tuneplat checkpoint (``docs/frameworks.md``).
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        self.broadcast = _own_value  # type: ignore[method-assign]
        try:
            super().save_checkpoint(checkpoint, filepath, storage_options)  # type: ignore[misc]
        finally:
            del self.broadcast


def _own_value(obj: Any, src: int = 0) -> Any:
    return obj


class _FSDPMixin(_ShardedSaveMixin):
    kwargs: dict[str, Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._state_dict_type_given = "state_dict_type" in kwargs
        super().__init__(*args, **kwargs)

    def _setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Wrap in FSDP; on a CPU rank with ``device_id=cpu``, which FSDP accepts (Lightning passes None there,
        which FSDP refuses with "FSDP needs a non-CPU accelerator device")."""
        from torch.distributed.fsdp import FullyShardedDataParallel

        setup = super()._setup_model  # type: ignore[misc]
        if self.root_device.type != "cpu" or any(isinstance(m, FullyShardedDataParallel) for m in model.modules()):
            return setup(model)  # type: ignore[no-any-return]
        if not self._state_dict_type_given:
            # Lightning's "full" checkpoint gathers with offload_to_cpu=True, which torch's FSDP cannot do on CPU
            # ranks (the process dies); the sharded checkpoint (torch.distributed.checkpoint, a file per rank) works
            self._state_dict_type = "sharded"
        wrapped = FullyShardedDataParallel(
            module=model, cpu_offload=self.cpu_offload, mixed_precision=self.mixed_precision_config,  # type: ignore[attr-defined]
            sharding_strategy=self.sharding_strategy, device_id=torch.device("cpu"), **self.kwargs)  # type: ignore[attr-defined]
        saved = self.kwargs
        self.kwargs = {k: v for k, v in saved.items() if k != "auto_wrap_policy"}  # applied above
        try:
            return setup(wrapped)  # type: ignore[no-any-return]  # (Lightning's own steps for a wrapped model)
        finally:
            self.kwargs = saved


class _EnvironmentMixin:
    def world_size(self) -> int:
        return int(_context().get_world_size())

    def global_rank(self) -> int:
        return int(_context().get_world_rank())

    def local_rank(self) -> int:
        return int(_context().get_local_rank())

    def node_rank(self) -> int:
        return int(_context().get_node_rank())

    def set_world_size(self, size: int) -> None:
        """Ignored: the trial's context says the world size."""

    def set_global_rank(self, rank: int) -> None:
        """Ignored: the trial's context says the rank."""

    def teardown(self) -> None:
        """Nothing to undo: tuneplat owns the process group and the environment variables."""


def _scalar(value: Any) -> Any:
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (RuntimeError, ValueError):  # not a one-element tensor
            return value
    return value


class _ReportMixin:
    CHECKPOINT_NAME = "checkpoint.ckpt"

    def __init__(self, checkpoint_upload_mode: Any = None, validation: bool = False) -> None:
        if validation:
            raise NotImplementedError("RayTrainReportCallback(validation=True) (Ray Train V2's checkpoint validation "
                                      "tasks) is not ported: validate in the LightningModule (validation_step) and "
                                      "its logged metrics are reported with the checkpoint.")
        if checkpoint_upload_mode is not None and not isinstance(checkpoint_upload_mode,
                                                                 _sessions.CheckpointUploadMode):
            checkpoint_upload_mode = _sessions.CheckpointUploadMode(str(checkpoint_upload_mode).upper())
        super().__init__()
        self.checkpoint_upload_mode = checkpoint_upload_mode
        self.validation = validation

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Count the step for the rank's steps/s and samples/s (``tuneplat status --workers``)."""
        session = _sessions.current_session()
        if session is not None:
            from ..torch._torch import _batch_len

            session.monitor.on_batch(_batch_len(batch))

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Save a checkpoint and report it with the epoch's metrics (every rank: a collective)."""
        metrics = {k: _scalar(v) for k, v in trainer.callback_metrics.items()}
        metrics["epoch"] = trainer.current_epoch
        metrics["step"] = trainer.global_step
        with tempfile.TemporaryDirectory(prefix="tuneplat-lightning-") as tmp:
            # collective: Lightning writes the file on global rank 0 only
            trainer.save_checkpoint(os.path.join(tmp, self.CHECKPOINT_NAME), weights_only=False)
            _sessions.report(metrics, checkpoint=Checkpoint.from_directory(tmp),
                             checkpoint_upload_mode=self.checkpoint_upload_mode)
        trainer.strategy.barrier()


def _caller_package(frame: types.FrameType | None) -> str | None:
    """The Lightning package the calling code uses: among its names, else the only one imported."""
    found = set()
    if frame is not None:
        for space in (frame.f_locals, frame.f_globals):
            for value in list(space.values()):
                if isinstance(value, types.ModuleType):
                    name = value.__name__
                elif isinstance(value, type):
                    name = value.__module__
                else:
                    continue
                if name == _PL or name.startswith(_PL + "."):
                    found.add(_PL)
                elif name == "lightning" or name.startswith("lightning."):
                    found.add(_LIGHTNING)
    if len(found) == 1:
        return found.pop()
    imported = {p for p in (_LIGHTNING, _PL) if p in sys.modules}
    return imported.pop() if len(imported) == 1 else None


_FAMILIES: dict[str, dict[str, type]] = {}


def _family(package: str) -> dict[str, type]:
    """The four classes built on ``package``'s Lightning classes."""
    if package not in _FAMILIES:
        mod = importlib.import_module(package)
        env = importlib.import_module(f"{package}.plugins.environments")
        _FAMILIES[package] = {
            "RayDDPStrategy": type("RayDDPStrategy", (_StrategyMixin, mod.strategies.DDPStrategy), {"__module__": __name__}),
            "RayFSDPStrategy": type("RayFSDPStrategy", (_FSDPMixin, mod.strategies.FSDPStrategy),
                                    {"__module__": __name__}),
            "RayDeepSpeedStrategy": type("RayDeepSpeedStrategy", (_ShardedSaveMixin, mod.strategies.DeepSpeedStrategy),
                                         {"__module__": __name__}),
            "RayLightningEnvironment": type("RayLightningEnvironment", (_EnvironmentMixin, env.LightningEnvironment),
                                            {"__module__": __name__}),
            "RayTrainReportCallback": type("RayTrainReportCallback", (_ReportMixin, mod.callbacks.Callback),
                                           {"__module__": __name__}),
        }
    return _FAMILIES[package]


class _Dispatch:
    """Builds the twin class of the other Lightning package when the caller uses that one."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        package = _caller_package(sys._getframe(1))
        if package is not None and package != pl.__name__ and cls.__name__ in _PUBLIC:
            try:
                twin = _family(package)[cls.__name__]
            except ImportError:
                twin = None
            if twin is not None:
                return twin(*args, **kwargs)
        return super().__new__(cls)


class RayDDPStrategy(_Dispatch, _StrategyMixin, pl.strategies.DDPStrategy):  # type: ignore[misc,name-defined]
    """Lightning's ``DDPStrategy`` on the process group tuneplat set up for the trial.

    Takes ``DDPStrategy``'s arguments. ``process_group_backend`` and
    ``timeout`` have no effect (the group exists before Lightning starts): set
    them with :class:`tuneplat.train.torch.TorchConfig`.

    Example:
        >>> pl.Trainer(strategy=RayDDPStrategy(), plugins=[RayLightningEnvironment()])  # doctest: +SKIP
    """


class RayFSDPStrategy(_Dispatch, _FSDPMixin, pl.strategies.FSDPStrategy):  # type: ignore[misc,name-defined]
    """Lightning's ``FSDPStrategy`` on the process group tuneplat set up for the trial.

    Takes ``FSDPStrategy``'s arguments. It trains on CPU ranks too (gloo):
    Lightning refuses ``strategy="fsdp"`` without a GPU (a check on its own
    class) and wraps with ``device_id=None``, which torch's FSDP refuses on a
    CPU; on a CPU rank this strategy wraps with ``device_id=cpu``, which FSDP
    accepts, and saves sharded checkpoints unless ``state_dict_type`` is given
    (Lightning's full checkpoint offloads to the CPU, which FSDP cannot do on a
    CPU rank). Every rank
    saves its shard into the folder it reports (``docs/frameworks.md``).

    Example:
        >>> pl.Trainer(strategy=RayFSDPStrategy(), plugins=[RayLightningEnvironment()])  # doctest: +SKIP
    """


class RayDeepSpeedStrategy(_Dispatch, _ShardedSaveMixin, pl.strategies.DeepSpeedStrategy):  # type: ignore[misc,name-defined]
    """Lightning's ``DeepSpeedStrategy`` on the process group tuneplat set up for the trial (Ray's signature).

    Takes ``DeepSpeedStrategy``'s arguments (``stage``, ``offload_optimizer``,
    ``config``...). DeepSpeed finds the group and the environment it reads
    (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``).
    Lightning runs this strategy on CUDA GPUs only (its ``setup_environment``
    raises on a CPU accelerator); on CPUs call ``deepspeed.initialize`` in a
    :class:`~tuneplat.train.torch.TorchTrainer` loop instead (``docs/frameworks.md``).

    Example:
        >>> pl.Trainer(strategy=RayDeepSpeedStrategy(stage=2), plugins=[RayLightningEnvironment()])  # doctest: +SKIP
    """


class RayLightningEnvironment(_Dispatch, _EnvironmentMixin, _environments.LightningEnvironment):  # type: ignore[misc,name-defined]
    """Lightning's cluster environment answered from the trial's context (ranks and sizes set by tuneplat).

    Lightning's own attempts to set the world size or rank are ignored, and
    its teardown leaves the process group to tuneplat.

    Example:
        >>> pl.Trainer(plugins=[RayLightningEnvironment()], strategy=RayDDPStrategy())  # doctest: +SKIP
    """


class RayTrainReportCallback(_Dispatch, _ReportMixin, pl.callbacks.Callback):  # type: ignore[misc,name-defined]
    """Reports ``trainer.callback_metrics`` and a checkpoint at the end of every training epoch.

    Metrics are the values logged with ``self.log(...)`` (as plain numbers),
    plus ``epoch`` and ``step``. The checkpoint holds Lightning's own file::

        checkpoint_00000N/        tuneplat's checkpoint
        └─ checkpoint.ckpt        what trainer.save_checkpoint() wrote (rank 0)

    Reporting is a collective: every rank reports at the same epoch, and when
    the tuner decides STOP (a scheduler such as ASHA), ``trainer.fit()`` ends on
    every rank.

    Args:
        checkpoint_upload_mode: a :class:`~tuneplat.train.CheckpointUploadMode` (Ray
            Train V2's; every mode persists before ``report`` returns here).
        validation: Ray Train V2's asynchronous checkpoint validation: not ported (True raises).

    Example:
        >>> pl.Trainer(callbacks=[RayTrainReportCallback()], ...)  # doctest: +SKIP
    """

    def __init__(self, checkpoint_upload_mode: Any = None, validation: bool = False) -> None:
        super().__init__(checkpoint_upload_mode=checkpoint_upload_mode, validation=validation)


_PUBLIC = {"RayDDPStrategy", "RayDeepSpeedStrategy", "RayFSDPStrategy", "RayLightningEnvironment",
           "RayTrainReportCallback"}
_FAMILIES[pl.__name__] = {"RayDDPStrategy": RayDDPStrategy, "RayFSDPStrategy": RayFSDPStrategy,
                          "RayDeepSpeedStrategy": RayDeepSpeedStrategy,
                          "RayLightningEnvironment": RayLightningEnvironment,
                          "RayTrainReportCallback": RayTrainReportCallback}


def _all(name: str) -> tuple[type, ...]:
    return tuple(f[name] for f in _FAMILIES.values())


def prepare_trainer(trainer: Any) -> Any:
    """Check that a Lightning ``Trainer`` is set up to train on the trial's ranks; return it.

    Raises:
        RuntimeError: its strategy is not :class:`RayDDPStrategy`/:class:`RayFSDPStrategy`/:class:`RayDeepSpeedStrategy`
            (or a subclass), or its cluster environment is not :class:`RayLightningEnvironment`.

    Example:
        >>> trainer = prepare_trainer(pl.Trainer(strategy=RayDDPStrategy(),  # doctest: +SKIP
        ...                                      plugins=[RayLightningEnvironment()]))
    """
    strategy = getattr(trainer, "strategy", None)
    if not isinstance(strategy, _all("RayDDPStrategy") + _all("RayFSDPStrategy") + _all("RayDeepSpeedStrategy")):
        raise RuntimeError(
            f"Invalid strategy class: {type(strategy).__name__}. To train with Lightning on tuneplat's ranks, pass "
            "strategy=RayDDPStrategy(), RayFSDPStrategy() or RayDeepSpeedStrategy() (from "
            "tuneplat.train.lightning) to the Trainer.")
    environment = getattr(strategy, "cluster_environment", None)
    if environment is not None and not isinstance(environment, _all("RayLightningEnvironment")):
        raise RuntimeError(
            f"Invalid cluster environment plugin: {type(environment).__name__}. Pass "
            "plugins=[RayLightningEnvironment()] (from tuneplat.train.lightning) to the Trainer.")
    _logs_in_trial_dir(trainer)
    return trainer


def _logs_in_trial_dir(trainer: Any) -> None:
    """A Trainer left at its default root (the current directory) logs and saves inside the trial's folder.

    Ranks run in their trial folder already (unless ``TUNEPLAT_CHDIR_TO_TRIAL_DIR=0``):
    then the default ``lightning_logs/`` (and the checkpoints Lightning saves
    there) still goes to the trial folder instead of the working directory.
    """
    session = _sessions.current_session()
    cwd = os.getcwd()
    if session is None or os.path.abspath(str(getattr(trainer, "_default_root_dir", ""))) != cwd:
        return
    trial_dir = session.spec.trial_dir
    trainer._default_root_dir = trial_dir
    for lg in getattr(trainer, "loggers", []):
        for attr in ("_root_dir", "_save_dir"):  # TensorBoardLogger / CSVLogger (Lightning 2.x)
            root = getattr(lg, attr, None)
            if root is not None and os.path.abspath(str(root)) == cwd:
                setattr(lg, attr, trial_dir)
