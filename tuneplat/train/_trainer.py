"""``TorchTrainer``: one distributed training run through the tuner's machinery."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from .._config import RunConfig, ScalingConfig

__all__ = ["TorchTrainer", "TrainingFailedError"]


class TrainingFailedError(RuntimeError):
    """``TorchTrainer.fit()`` failed; the cause holds the rank's traceback."""


def _with_loop_config(fn: Callable[..., Any], torch_config: Any = None) -> Callable[..., Any]:
    @functools.wraps(fn)
    def loop(config: dict[str, Any]) -> Any:
        import inspect

        cfg = config.get("train_loop_config", {})
        if len(inspect.signature(fn).parameters) == 0:
            return fn()
        return fn(cfg)

    if torch_config is not None:  # read by the rank before it joins the process group (execution/_runner.py)
        loop._tuneplat_torch_config = torch_config  # type: ignore[attr-defined]
    return loop


class TorchTrainer:
    """Runs ``train_loop_per_worker(config)`` on ``scaling_config.num_workers`` ranks joined by DDP.

    Example:
        >>> trainer = TorchTrainer(train_loop, train_loop_config={"lr": 0.1},  # doctest: +SKIP
        ...                        scaling_config=ScalingConfig(num_workers=2))
        >>> result = trainer.fit()  # doctest: +SKIP
    """

    def __init__(self, train_loop_per_worker: Callable[..., Any], *, train_loop_config: Mapping[str, Any] | None = None,
                 scaling_config: ScalingConfig | None = None, run_config: RunConfig | None = None,
                 torch_config: Any = None, datasets: Any = None, client: Any = None, metadata: Any = None,
                 resume_from_checkpoint: Any = None) -> None:
        if not callable(train_loop_per_worker):
            raise TypeError(f"train_loop_per_worker must be a function, got {type(train_loop_per_worker).__name__}")
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = dict(train_loop_config or {})
        self.scaling_config = scaling_config or ScalingConfig()
        self.run_config = run_config
        self.client = client
        if torch_config is not None and not (hasattr(torch_config, "backend") and hasattr(torch_config, "timeout_s")):
            raise TypeError("torch_config must be a tuneplat.train.torch.TorchConfig(backend=..., timeout_s=...), "
                            f"got {type(torch_config).__name__}")
        self.torch_config = torch_config

    def fit(self) -> Any:
        """Run once; return its :class:`tuneplat.Result`.

        Raises:
            TrainingFailedError: when the run failed (after FailureConfig's retries).
        """
        from .._tuner import Tuner

        tuner = Tuner(self, run_config=self.run_config, client=self.client)
        result = tuner.fit()[0]
        if result.error is not None:
            raise TrainingFailedError(f"Training failed: {result.error}") from result.error
        status = getattr(result, "status", "TERMINATED")
        if status != "TERMINATED":  # ended before it finished (interrupted, or no worker could take it)
            raise TrainingFailedError(f"Training did not finish: the run is {status} (the log above says why; "
                                      "Tuner.restore(<experiment folder>, trainer) continues it)")
        return result
