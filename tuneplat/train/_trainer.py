"""``TorchTrainer``: one distributed training run through the tuner's machinery."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

from .._config import RunConfig, ScalingConfig
from .._signing import SignatureError, check_file, sign_file
from ..execution._errors import PlacementError
from ..trainables._base import ConvertibleTrainer, TrainerParts
from ._errors import ControllerError, TrainingFailedError, fit_error
from ._session import current_session

logger = logging.getLogger("tuneplat")

__all__ = ["DataParallelTrainer", "TorchTrainer", "TrainingFailedError"]


def _with_loop_config(fn: Callable[..., Any], backend_config: Any = None, resume_from_checkpoint: Any = None
                      ) -> Callable[..., Any]:
    @functools.wraps(fn)
    def loop(config: dict[str, Any]) -> Any:
        import inspect

        if resume_from_checkpoint is not None:  # Ray V2: what get_checkpoint() gives a run that has none of its own
            session = current_session()
            if session is not None and session.checkpoint is None:
                session.checkpoint = resume_from_checkpoint
        cfg = config.get("train_loop_config", {})
        if len(inspect.signature(fn).parameters) == 0:
            return fn()
        return fn(cfg)

    del loop.__wrapped__  # type: ignore[attr-defined]  # (its signature is loop(config), whatever fn takes)
    if backend_config is not None:  # its Backend runs in every rank around fn (execution/_runner.py, train/_backend.py)
        loop._tuneplat_backend_config = backend_config  # type: ignore[attr-defined]
    return loop


def _is_torch_config(config: Any) -> bool:
    return hasattr(config, "backend") and hasattr(config, "timeout_s")


_TRAINER_FILE = "trainer.pkl"


def _nested_run(run_config: RunConfig | None) -> RunConfig:
    """A Trainer fitted inside a Tune trial: the trial is what MLflow and the status table show.

    Unless the run config says otherwise, its own run logs nothing to MLflow
    and prints no status table (its results reach the trial through
    ``TuneReportCallback``); its groups are placed beside the trial by the
    trial's tuner (``execution/_dask_executor.py``, ``_LeasedLedger``).
    """
    import dataclasses

    rc = run_config or RunConfig()
    changes: dict[str, Any] = {}
    if rc.mlflow is None:
        changes["mlflow"] = False
    if rc.verbose == 1:
        changes["verbose"] = 0
    return dataclasses.replace(rc, **changes) if changes else rc


def _journal_of(run_config: RunConfig) -> tuple[str, Any, str] | None:
    """``(folder or URL, remote fsspec filesystem or None, journal text)`` of ``storage_path/name``; None without one."""
    import os

    from ..storage._storage import resolve_storage, rjoin

    if not run_config.name:
        return None
    try:
        storage = resolve_storage(run_config.storage_path, run_config.storage_filesystem)
    except ValueError:
        return None
    if storage.fs is not None:
        url = storage.remote_experiment(run_config.name)
        assert url is not None
        try:
            text = storage.fs.cat_file(rjoin(url, "journal.jsonl")).decode("utf-8", errors="replace")
        except (FileNotFoundError, OSError):
            return None
        return url, storage.fs, text
    folder = os.path.join(storage.local_root, run_config.name)
    try:
        with open(os.path.join(folder, "journal.jsonl"), encoding="utf-8", errors="replace") as f:
            return folder, None, f.read()
    except OSError:
        return None


def _earlier_run(run_config: RunConfig) -> str | None:
    """Ray Train V2 inside a retried Tune trial: the run of the same ``storage_path`` and ``name`` continues.

    The folder (or remote URL) of an earlier run with that name that recorded a trial, else None (a new run).
    """
    found = _journal_of(run_config)
    if found is None or '"trial_add"' not in found[2]:
        return None
    from .._tuner import Tuner

    return found[0] if Tuner.can_restore(found[0], storage_filesystem=found[1]) else None


class _PlacementFailed(ControllerError, PlacementError):
    """``fit()`` of a group that can never be placed: a ``ControllerError`` (Ray V2) that is a ``PlacementError``."""


def _unfinished_run(run_config: RunConfig) -> str | None:
    """The folder (or remote URL) of a run with this ``storage_path``/``name`` that did not finish.

    None when there is none, or when every trial of it ended TERMINATED (then ``fit()`` starts afresh and the
    old run moves aside, as a Tuner's rerun does). Read from the run's journal: each trial's last ``trial_end``.
    """
    import json

    folder = _earlier_run(run_config)
    if folder is None:
        return None
    found = _journal_of(run_config)
    assert found is not None
    added: set[str] = set()
    last: dict[str, str] = {}
    for line in found[2].splitlines():
        if '"trial_add"' not in line and '"trial_end"' not in line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line torn by the crash
        if event.get("event") == "trial_add":
            added.add(str(event.get("trial_id")))
        elif event.get("event") == "trial_end":
            last[str(event.get("trial_id"))] = str(event.get("status"))
    if added and all(last.get(t) == "TERMINATED" for t in added):
        return None
    return folder


class DataParallelTrainer(ConvertibleTrainer):
    """Runs ``train_loop_per_worker(config)`` on ``scaling_config.num_workers`` ranks (``ray.train.DataParallelTrainer``).

    ``backend_config`` (a :class:`tuneplat.train.backend.BackendConfig`) names
    what every rank sets up around the function: its ``Backend``'s
    ``on_start`` runs in each rank before it, ``on_shutdown`` after it, on every
    attempt (``tuneplat/train/_backend.py``). Without one, several ranks join a
    torch.distributed process group (gloo on CPUs, nccl on GPUs), as
    :class:`TorchTrainer` does. Framework trainers (:class:`TorchTrainer`,
    ``XGBoostTrainer``, ``LightGBMTrainer``) are this class with their own
    config.

    Example:
        >>> trainer = DataParallelTrainer(train_loop, train_loop_config={"lr": 0.1},  # doctest: +SKIP
        ...                               scaling_config=ScalingConfig(num_workers=2))
        >>> result = trainer.fit()  # doctest: +SKIP
    """

    _name = "DataParallelTrainer"

    def __init__(self, train_loop_per_worker: Callable[..., Any], *, train_loop_config: Mapping[str, Any] | None = None,
                 scaling_config: ScalingConfig | None = None, run_config: RunConfig | None = None,
                 torch_config: Any = None, datasets: Any = None, client: Any = None, metadata: Any = None,
                 resume_from_checkpoint: Any = None, backend_config: Any = None, dataset_config: Any = None,
                 validation_config: Any = None) -> None:
        if not callable(train_loop_per_worker):
            raise TypeError(f"train_loop_per_worker must be a function, got {type(train_loop_per_worker).__name__}")
        if validation_config is not None:
            raise NotImplementedError(f"{self._name}(validation_config=...) (Ray Train V2's checkpoint validation "
                                      "tasks) is not ported: validate inside train_loop_per_worker and report the "
                                      "result with the checkpoint's metrics.")
        if resume_from_checkpoint is not None:
            from ..storage._checkpoint import Checkpoint

            if not isinstance(resume_from_checkpoint, Checkpoint):
                raise TypeError(f"{self._name}(resume_from_checkpoint=...) takes a tuneplat Checkpoint, got "
                                f"{type(resume_from_checkpoint).__name__}")
        self.resume_from_checkpoint = resume_from_checkpoint
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = dict(train_loop_config or {})
        self.scaling_config = scaling_config or ScalingConfig()
        self.run_config = run_config
        self.client = client
        self.metadata = metadata
        self.backend_config = self._check_backend_config(torch_config if torch_config is not None else backend_config)
        self._restore_path: str | None = None
        self.datasets: dict[str, Any] | None = None
        self.dataset_config: Any = dataset_config
        self._sources: dict[str, Any] | None = None
        self._dataset_names: list[str] = []
        if datasets is not None and self.scaling_config.num_workers == 0:
            raise NotImplementedError(
                f"{self._name}(datasets=...) with ScalingConfig(num_workers=0) (local mode): datasets are sharded "
                "through the Dask cluster, which local mode does not start. Use num_workers=1, or read the data "
                "inside the training function.")
        if datasets is not None or dataset_config is not None:
            from .data._config import DataConfig
            from .data._source import as_sources

            if dataset_config is None:
                dataset_config = DataConfig()
            if not isinstance(dataset_config, DataConfig):
                raise TypeError(f"dataset_config must be a tuneplat.train.DataConfig(...), got "
                                f"{type(dataset_config).__name__}")
            self.dataset_config = dataset_config
            if datasets is not None:
                from .data._parquet import read_timeout_s

                self._sources = as_sources(datasets, self.scaling_config.max_workers,
                                           read_timeout_s(dataset_config.read_timeout_s))
                self.datasets = dict(datasets)
                self._dataset_names = list(self._sources)
                dataset_config.check_names(self._dataset_names)

    def _check_backend_config(self, config: Any) -> Any:
        """``config`` if this trainer can run with it (a BackendConfig, or torch's), else a TypeError."""
        from ._backend import BackendConfig

        if config is None or isinstance(config, BackendConfig) or _is_torch_config(config):
            return config
        raise TypeError(f"backend_config must be a tuneplat.train.backend.BackendConfig (e.g. "
                        f"tuneplat.train.torch.TorchConfig(...)), got {type(config).__name__}")

    @property
    def torch_config(self) -> Any:
        """The backend config (the name ``TorchTrainer(torch_config=...)`` gives it)."""
        return self.__dict__.get("backend_config", self.__dict__.get("torch_config"))

    def as_trainable(self) -> TrainerParts:
        """This trainer as the function each rank runs (with its datasets), its config, resources and run config."""
        fn = _with_loop_config(self.train_loop_per_worker, self.torch_config, self.__dict__.get("resume_from_checkpoint"))
        if self._sources:
            from .data._loop import DatasetLoop

            fn = DatasetLoop(fn, self._sources, self.dataset_config)
        return TrainerParts(
            fn=fn,
            train_loop_config=dict(self.train_loop_config or {}), scaling_config=self.scaling_config,
            run_config=self.run_config)

    def fit(self) -> Any:
        """Run once (or continue the run :meth:`restore` found); return its :class:`tuneplat.Result`.

        Raises:
            TrainingFailedError: when the run failed (after FailureConfig's retries).
        """
        import os

        import cloudpickle

        from .._tuner import Tuner

        if self.scaling_config.num_workers == 0:  # Ray Train V2's local mode
            from ._local import run_local

            return run_local(self, _with_loop_config(self.train_loop_per_worker))
        run_config = self.run_config
        logging_config: Any = getattr(run_config, "logging_config", None)
        if logging_config is not None and hasattr(logging_config, "apply"):  # Ray Train V2's LoggingConfig
            logging_config.apply()
        restore_path = self._restore_path
        if current_session() is not None:  # inside a Tune trial (Ray Train V2's Train-in-Tune): see _nested_run
            run_config = _nested_run(run_config)
            restore_path = restore_path or _earlier_run(run_config)
        elif restore_path is None and run_config is not None:
            # Ray Train V2's job-level fault tolerance: the script run again with the same RunConfig(storage_path=,
            # name=) continues a run that did not finish; a finished one moves aside (the Tuner's rerun note)
            restore_path = _unfinished_run(run_config)
            if restore_path is not None:
                logger.warning("tuneplat: %s: %s holds a run of the same name that did not finish; it resumes "
                               "(each rank's train.get_checkpoint() is its latest checkpoint). To start afresh "
                               "instead, give RunConfig(name=...) another name.", f"{self._name}.fit()",
                               restore_path)
        if restore_path is not None:
            from ..storage._storage import is_remote

            fs = run_config.storage_filesystem if run_config is not None and is_remote(restore_path) else None
            tuner = Tuner.restore(restore_path, self, resume_errored=True, client=self.client,
                                  run_config=run_config if run_config is not self.run_config or fs is not None
                                  else None,  # (a remote filesystem's credentials are not saved with the run)
                                  storage_filesystem=fs)
        else:
            tuner = Tuner(self, run_config=run_config, client=self.client)
            try:  # what restore() needs when it is not given the training function again (Ray's trainer.pkl)
                os.makedirs(tuner.experiment_dir, exist_ok=True)
                path = os.path.join(tuner.experiment_dir, _TRAINER_FILE)  # its run_config may hold credentials
                blob = sign_file(cloudpickle.dumps(self))  # restore checks the signature before unpickling
                with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
                    f.write(blob)
            except Exception:  # noqa: BLE001 - restore then needs train_loop_per_worker=
                pass
        tuner._caller = f"{self._name}.fit()"
        tuner._auto_file_loggers = current_session() is None  # inside a trial: the trial's files are the record
        try:
            result = tuner.fit()[0]
        except PlacementError as exc:  # the group can never be placed: Ray V2's ControllerError (still a PlacementError)
            raise _PlacementFailed(exc) from exc
        if result.error is not None:
            raise fit_error(result.error) from result.error
        status = getattr(result, "status", "TERMINATED")
        if status != "TERMINATED":  # ended before it finished (interrupted, or no worker could take it)
            raise TrainingFailedError(f"Training did not finish: the run is {status} (the log above says why; "
                                      f"{self._name}.restore(<experiment folder>) continues it)")
        return result

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["client"] = None  # a live Dask client is not part of the trainer's definition
        state["datasets"] = None  # data is given again to restore() (as in Ray); only the names are kept
        state["_sources"] = None
        return state

    @classmethod
    def can_restore(cls, path: str) -> bool:
        """Whether ``path`` (``storage_path/name`` of an earlier ``fit()``) holds a run :meth:`restore` can continue."""
        from .._tuner import Tuner

        return Tuner.can_restore(path)

    @classmethod
    def restore(cls, path: str, train_loop_per_worker: Callable[..., Any] | None = None,
                train_loop_config: Mapping[str, Any] | None = None, **kwargs: Any) -> DataParallelTrainer:
        """A trainer that continues the interrupted run in ``path`` from its latest checkpoint (``Trainer.restore``).

        Args:
            path: the run's folder (``storage_path/name``).
            train_loop_per_worker, train_loop_config: needed only when they changed
                (or could not be saved with the run); by default the trainer saved
                by the first ``fit()`` (``trainer.pkl``) is used.
            **kwargs: ``scaling_config``, ``run_config``, ``client``... to change.

        Example:
            >>> if TorchTrainer.can_restore(path):  # doctest: +SKIP
            ...     result = TorchTrainer.restore(path).fit()
        """
        import os

        import cloudpickle

        from ..storage._storage import resolve_storage_path

        folder = resolve_storage_path(path)
        saved: DataParallelTrainer | None = None
        pkl = os.path.join(folder, _TRAINER_FILE)
        if os.path.isfile(pkl):
            with open(pkl, "rb") as f:
                data = f.read()
            try:
                data = check_file(pkl, data)  # never unpickled unless this user's own fit() wrote it
            except SignatureError as exc:
                if train_loop_per_worker is None:
                    raise SignatureError(
                        f"{exc}. It holds the trainer of the first fit(): pass its settings again instead, "
                        f"{cls.__name__}.restore({path!r}, train_loop_per_worker=..., train_loop_config=..., "
                        "scaling_config=..., run_config=...); then the file is not read") from None
                logger.warning("tuneplat: %s; restoring with the training function given to restore()", exc)
            else:
                saved = cloudpickle.loads(data)
        if saved is None and train_loop_per_worker is None:
            raise ValueError(f"{path} has no {_TRAINER_FILE}: pass the training function again, "
                             f"{cls.__name__}.restore({path!r}, train_loop_per_worker=...).")
        if not cls.can_restore(folder):
            from ..core._replay import restore_problem

            raise FileNotFoundError(f"{path} is not a run that can be restored: "
                                    f"{restore_problem(folder) or 'no readable journal.jsonl'}")
        fn = train_loop_per_worker or saved.train_loop_per_worker  # type: ignore[union-attr]
        names = list(getattr(saved, "_dataset_names", None) or [])
        if names and kwargs.get("datasets") is None:
            raise ValueError(f"The run in {path} was given datasets {names}: pass them again, "
                             f"{cls.__name__}.restore({path!r}, datasets={{...}}) (they are not saved with the run).")
        if names and "dataset_config" not in kwargs and saved is not None:
            kwargs["dataset_config"] = saved.dataset_config
        trainer = cls(fn, train_loop_config=train_loop_config if train_loop_config is not None else
                      (saved.train_loop_config if saved else None),
                      scaling_config=kwargs.pop("scaling_config", saved.scaling_config if saved else None),
                      run_config=kwargs.pop("run_config", saved.run_config if saved else None),
                      backend_config=kwargs.pop("backend_config", kwargs.pop("torch_config", saved.torch_config if saved
                                                                              else None)), **kwargs)
        trainer._restore_path = folder
        return trainer


class TorchTrainer(DataParallelTrainer):
    """Runs ``train_loop_per_worker(config)`` on ``scaling_config.num_workers`` ranks joined by DDP.

    Example:
        >>> trainer = TorchTrainer(train_loop, train_loop_config={"lr": 0.1},  # doctest: +SKIP
        ...                        scaling_config=ScalingConfig(num_workers=2))
        >>> result = trainer.fit()  # doctest: +SKIP
    """

    _name = "TorchTrainer"

    def __init__(self, train_loop_per_worker: Callable[..., Any], *, train_loop_config: Mapping[str, Any] | None = None,
                 torch_config: Any = None, scaling_config: ScalingConfig | None = None,
                 run_config: RunConfig | None = None, datasets: Any = None, dataset_config: Any = None,
                 metadata: Any = None, resume_from_checkpoint: Any = None, client: Any = None,
                 backend_config: Any = None, validation_config: Any = None) -> None:
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config, scaling_config=scaling_config,
                         run_config=run_config, torch_config=torch_config, datasets=datasets, client=client,
                         metadata=metadata, resume_from_checkpoint=resume_from_checkpoint,
                         backend_config=backend_config, dataset_config=dataset_config,
                         validation_config=validation_config)

    def _check_backend_config(self, config: Any) -> Any:
        if config is not None and not _is_torch_config(config):
            raise TypeError("torch_config must be a tuneplat.train.torch.TorchConfig(backend=..., timeout_s=...), "
                            f"got {type(config).__name__}")
        return config
