"""``tune.Trainable``: Ray Tune's class API, run as a function trainable.

A :class:`Trainable` subclass implements ``setup``/``step``/``save_checkpoint``/
``load_checkpoint``/``cleanup``. The :class:`tuneplat.Tuner` wraps the class in
a :class:`TrainableFunction`, an ordinary function trainable that the existing
machinery runs on a Dask worker: it builds the object, restores it from the
trial's latest checkpoint (a retry, a restore, a PBT exploit, a HyperBand
resume), then loops ``train()`` → ``tune.report(result, checkpoint=...)`` until
the tuner stops or pauses the trial (``report`` raises and the loop unwinds;
``cleanup`` runs either way). A result with ``done=True`` is such a stop: the
tuner checks ``done`` before it asks the scheduler, as Ray does.

When a checkpoint is taken follows Ray Tune: every ``checkpoint_frequency``
iterations, on a result with ``should_checkpoint=True``, and at the end with
``checkpoint_at_end``. Ray also saves a checkpoint when its scheduler pauses a
trial; here the decision comes back from the very ``report`` that carries the
step's checkpoint, so under a scheduler that can pause (PBT, HyperBand,
``MedianStoppingRule(hard_stop=False)``, any custom one) every step is
checkpointed.
"""

from __future__ import annotations

import copy
import inspect
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from ..storage._checkpoint import Checkpoint

__all__ = ["Trainable", "TrainableFunction"]

logger = logging.getLogger("tuneplat")

#: where a dict returned by ``save_checkpoint`` is stored inside the checkpoint folder (Ray's name)
_DICT_CHECKPOINT_FILE = "_dict_checkpoint.pkl"
#: the key of the trainable's own record in the checkpoint metadata
_META_KEY = "trainable"


def _current_session() -> Any:
    from ..train._session import _get_session

    try:
        return _get_session("Trainable")
    except RuntimeError:
        return None


class Trainable:
    """Ray Tune's class API (``ray.tune.Trainable``): subclass it, pass the class to :class:`tuneplat.Tuner`.

    Override ``setup(config)``, ``step() -> dict`` and, to checkpoint,
    ``save_checkpoint(checkpoint_dir) -> dict | None`` and
    ``load_checkpoint(checkpoint)``; ``cleanup()`` runs when the trial ends,
    is stopped or paused. A result with ``done=True`` ends the trial. When
    checkpoints are taken is set by
    ``CheckpointConfig(checkpoint_frequency=N, checkpoint_at_end=True)``.

    Attributes:
        config: the trial's config (``setup`` gets a deep copy).
        iteration / training_iteration: steps completed (restored with a checkpoint).
        trial_id, trial_name: the trial's (``"default"`` outside a Tuner).
        logdir / trial_dir: the trial's folder (a temporary folder outside a Tuner).

    Example:
        >>> import tuneplat as tune
        >>> class Quadratic(tune.Trainable):
        ...     def setup(self, config):
        ...         self.x = config["x"]
        ...     def step(self):
        ...         self.x -= 0.1 * 2 * (self.x - 3)
        ...         return {"loss": (self.x - 3) ** 2, "done": self.iteration >= 9}
        ...     def save_checkpoint(self, checkpoint_dir):
        ...         return {"x": self.x}
        ...     def load_checkpoint(self, checkpoint):
        ...         self.x = checkpoint["x"]
        >>> t = Quadratic({"x": 0.0})
        >>> round(t.train()["loss"], 2), t.training_iteration
        (5.76, 1)
        >>> tuner = tune.Tuner(Quadratic, param_space={"x": tune.uniform(-5, 5)})  # doctest: +SKIP
    """

    def __init__(self, config: dict[str, Any] | None = None, logger_creator: Any = None, storage: Any = None) -> None:
        self.config: dict[str, Any] = config if config is not None else {}
        session = _current_session()
        if session is not None:
            self._trial_id: str = session.spec.trial_id
            self._trial_name: str = session.spec.trial_name
            self._logdir: str = session.spec.trial_dir
            self._iteration: int = session.iteration
            self._time_total: float = float(session.spec.time_offset)
        else:
            self._trial_id = self._trial_name = "default"
            self._logdir = ""  # made when first asked for (a temporary folder, removed by stop())
            self._iteration = 0
            self._time_total = 0.0
        self._iterations_since_restore = 0
        self._time_since_restore = 0.0
        self._last_result: dict[str, Any] | None = None
        self._restored = False
        self.setup(copy.deepcopy(self.config))

    # -- what subclasses override --------------------------------------
    def setup(self, config: dict[str, Any]) -> None:
        """Build the model, data, optimiser from ``config`` (called once per run of the trial)."""

    def step(self) -> dict[str, Any]:
        """One iteration of training; returns its metrics (``done=True`` ends the trial)."""
        raise NotImplementedError(f"{type(self).__name__} must implement step() -> dict of metrics")

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any] | str | None:
        """Write the state into ``checkpoint_dir`` (return None or that folder), or return a dict to be stored."""
        raise NotImplementedError(f"{type(self).__name__} must implement save_checkpoint(checkpoint_dir) to "
                                  "checkpoint (CheckpointConfig(checkpoint_frequency=..., checkpoint_at_end=...))")

    def load_checkpoint(self, checkpoint: dict[str, Any] | str) -> None:
        """Restore the state: gets the dict ``save_checkpoint`` returned, or the folder it wrote into."""
        raise NotImplementedError(f"{type(self).__name__} must implement load_checkpoint(checkpoint) to resume "
                                  "from its checkpoints")

    def cleanup(self) -> None:
        """Release resources; called when the trial ends, is stopped or paused."""

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Take a new config without a restart. tuneplat always restarts (``setup`` + ``load_checkpoint``)."""
        return False

    def log_result(self, result: dict[str, Any]) -> None:
        """Called with every result :meth:`train` returns."""

    # -- attributes ------------------------------------------------------
    @property
    def iteration(self) -> int:
        """Training iterations completed (``training_iteration`` of the last result)."""
        return self._iteration

    @property
    def training_iteration(self) -> int:
        """The same as :attr:`iteration`."""
        return self._iteration

    @property
    def trial_id(self) -> str:
        return self._trial_id

    @property
    def trial_name(self) -> str:
        return self._trial_name

    @property
    def logdir(self) -> str:
        """The trial's folder (outside a tuner: a temporary folder that :meth:`stop` removes)."""
        if not self._logdir:
            self._logdir = tempfile.mkdtemp(prefix=f"{type(self).__name__}_")
            self._own_logdir = True
        return self._logdir

    @property
    def trial_dir(self) -> str:
        """The trial's folder (the same as :attr:`logdir`)."""
        return self.logdir

    @property
    def trial_resources(self) -> Any:
        """The trial's resources (Ray's ``Trainable.trial_resources``): a ``PlacementGroupFactory``, what a
        ``ResourceChangingScheduler`` gave it last (``head_cpus``: its CPUs now)."""
        from ..train._session import get_context

        return get_context().get_trial_resources()

    def get_config(self) -> dict[str, Any]:
        return self.config

    # -- what the runner calls (Ray's public methods) ------------------
    def train(self) -> dict[str, Any]:
        """Run one :meth:`step`; return its result with ``done``, ``training_iteration`` and times filled in."""
        start = time.time()
        result = self.step()
        if not isinstance(result, dict):
            raise TypeError(f"{type(self).__name__}.step() must return a dict of metrics, got "
                            f"{type(result).__name__}: {result!r}")
        result = dict(result)
        self._iteration += 1
        self._iterations_since_restore += 1
        took = result.get("time_this_iter_s")
        took = float(took) if isinstance(took, (int, float)) and not isinstance(took, bool) else time.time() - start
        self._time_total += took
        self._time_since_restore += took
        result.setdefault("done", False)
        result.setdefault("training_iteration", self._iteration)
        result.setdefault("time_this_iter_s", took)
        result.setdefault("time_total_s", self._time_total)
        result.setdefault("iterations_since_restore", self._iterations_since_restore)
        self.log_result(result)
        self._last_result = result
        return result

    def save(self, checkpoint_dir: str | None = None) -> str:
        """Call :meth:`save_checkpoint` into ``checkpoint_dir`` (a new temporary folder when None); return the folder.

        A dict returned by ``save_checkpoint`` is pickled into the folder (as
        Ray does); a returned path must lie inside the folder.
        """
        folder = checkpoint_dir if checkpoint_dir is not None else tempfile.mkdtemp(prefix="tuneplat_trainable_")
        os.makedirs(folder, exist_ok=True)
        returned = self.save_checkpoint(folder)
        record: dict[str, Any] = {"iteration": self._iteration}
        if isinstance(returned, dict):
            import cloudpickle

            with open(os.path.join(folder, _DICT_CHECKPOINT_FILE), "wb") as f:
                cloudpickle.dump(returned, f)
        elif isinstance(returned, (str, os.PathLike)):
            rel = os.path.relpath(os.path.abspath(os.fspath(returned)), os.path.abspath(folder))
            if rel == os.pardir or rel.startswith(os.pardir + os.sep):
                raise ValueError(f"{type(self).__name__}.save_checkpoint({folder!r}) returned {os.fspath(returned)!r}, "
                                 "but must return None, a dict, or a path inside the folder it was given.")
            if rel != os.curdir:
                record["relative_checkpoint_path"] = rel
        elif returned is not None:
            raise TypeError(f"{type(self).__name__}.save_checkpoint() must return None, a dict or the checkpoint "
                            f"folder, got {type(returned).__name__}")
        Checkpoint(folder).update_metadata({_META_KEY: record})
        return folder

    def restore(self, checkpoint: Checkpoint | str | os.PathLike[str]) -> None:
        """Call :meth:`load_checkpoint` with what :meth:`save` stored (the dict, or the folder)."""
        ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint.from_directory(checkpoint)
        record = ckpt.get_metadata().get(_META_KEY, {})
        with ckpt.as_directory() as folder:
            pickled = os.path.join(folder, _DICT_CHECKPOINT_FILE)
            if os.path.isfile(pickled):
                import cloudpickle

                with open(pickled, "rb") as f:
                    self.load_checkpoint(cloudpickle.load(f))
            else:
                rel = record.get("relative_checkpoint_path")
                self.load_checkpoint(os.path.join(folder, rel) if rel else folder)
        if isinstance(record.get("iteration"), int):
            self._iteration = record["iteration"]
        self._iterations_since_restore = 0
        self._time_since_restore = 0.0
        self._restored = True

    def stop(self) -> None:
        """End the trainable: calls :meth:`cleanup`."""
        try:
            self.cleanup()
        finally:
            if getattr(self, "_own_logdir", False):
                shutil.rmtree(self._logdir, ignore_errors=True)

    def reset(self, new_config: dict[str, Any], logger_creator: Any = None, storage: Any = None) -> bool:
        """Ray's actor reuse: :meth:`reset_config`, and on success start counting anew."""
        if not self.reset_config(new_config):
            return False
        self.config = new_config
        self._iteration = 0
        self._time_total = self._time_since_restore = 0.0
        self._iterations_since_restore = 0
        self._restored = False
        return True


def _overrides(cls: type, name: str) -> bool:
    return getattr(cls, name) is not getattr(Trainable, name)


class TrainableFunction:
    """A :class:`Trainable` subclass as a function trainable ``fn(config, **parameters)``.

    ``parameters`` (from ``tune.with_parameters``) go to ``setup(config,
    **parameters)``, as in Ray. Built by the :class:`tuneplat.Tuner`; the
    checkpoint policy is set by :func:`tuneplat.trainables._adapt.for_run`.
    """

    def __init__(self, cls: type[Trainable], *, checkpoint_frequency: int = 0, checkpoint_at_end: bool = False,
                 checkpoint_every_step: bool = False, stop_at: Mapping[str, float] | None = None) -> None:
        self.cls = cls
        self.checkpoint_frequency = checkpoint_frequency
        self.checkpoint_at_end = checkpoint_at_end
        self.checkpoint_every_step = checkpoint_every_step
        self.stop_at = dict(stop_at or {})
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__
        self.__module__ = cls.__module__
        self.__doc__ = cls.__doc__

    def setup_signature(self) -> inspect.Signature:
        """``setup``'s signature without ``self`` (what ``with_parameters`` checks its names against)."""
        sig = inspect.signature(self.cls.setup)
        return sig.replace(parameters=list(sig.parameters.values())[1:])

    def _reaches_end(self, result: Mapping[str, Any]) -> bool:
        """Whether the tuner will stop the trial on ``result`` by a criterion known in advance (``stop`` dict, max_t)."""
        for key, threshold in self.stop_at.items():
            value = result.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= threshold:
                return True
        return False

    def _wants_checkpoint(self, trainable: Trainable, result: Mapping[str, Any]) -> bool:
        if result.get("should_checkpoint"):
            return True
        freq = self.checkpoint_frequency
        if freq and trainable.iteration % freq == 0:
            return True
        if self.checkpoint_at_end and (result.get("done") or self._reaches_end(result)):
            return True
        # a scheduler that may PAUSE (or PBT clone) this trial needs the state of this very step;
        # a class without save_checkpoint restarts from scratch, as a function trainable without checkpoints
        return self.checkpoint_every_step and _overrides(type(trainable), "save_checkpoint")

    def __call__(self, config: dict[str, Any], **parameters: Any) -> None:
        from ..train._session import _get_session

        session = _get_session("Trainable")
        cls = self.cls
        if parameters:
            base = cls

            def setup(self: Trainable, config: dict[str, Any]) -> None:
                base.setup(self, config, **parameters)

            cls = type(base.__name__, (base,), {"setup": setup, "__qualname__": base.__qualname__,
                                                "__module__": base.__module__})
        trainable = cls(config)
        try:
            self._run(trainable, session)
        except BaseException:  # a failure, or the tuner stopping/pausing the trial: clean up, keep the reason
            try:
                trainable.stop()
            except Exception:
                logger.warning("tuneplat: %s.cleanup() failed while the trial was ending", self.__qualname__,
                               exc_info=True)
            raise
        trainable.stop()

    def _run(self, trainable: Trainable, session: Any) -> None:
        if session.checkpoint is not None:
            trainable.restore(session.checkpoint)
            # training_iteration counts the trial's own reports (a PBT clone's metadata has the source's)
            trainable._iteration = session.iteration
        from ..train._session import StopTrial

        while True:
            result = trainable.train()
            if self._wants_checkpoint(trainable, result):
                folder = tempfile.mkdtemp(prefix="tuneplat_trainable_")
                try:
                    trainable.save(folder)
                    session.report(result, Checkpoint.from_directory(folder))  # copied before it returns
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
            else:
                try:
                    session.report(result)
                except StopTrial:
                    self._save_if_asked(trainable, session)  # the last step, marked by a callback: keep it
                    raise
                self._save_if_asked(trainable, session)
            if result.get("done"):
                return

    @staticmethod
    def _save_if_asked(trainable: Trainable, session: Any) -> None:
        """The tuner's answer asked for a checkpoint of this step (a callback set ``should_checkpoint``, as in
        Ray's custom_checkpointing_with_callback example): save it now, after the report."""
        if not session.save_requested:
            return
        folder = tempfile.mkdtemp(prefix="tuneplat_trainable_")
        try:
            trainable.save(folder)
            session.save_late(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def __repr__(self) -> str:
        return f"TrainableFunction({self.__qualname__})"

