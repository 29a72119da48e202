"""PyTorch Lightning inside tuneplat's worker groups (``tuneplat.train.lightning``, like ``ray.train.lightning``).

Build a Lightning ``Trainer`` inside a :class:`~tuneplat.train.torch.TorchTrainer`'s
training function with :class:`RayDDPStrategy` (or :class:`RayFSDPStrategy`, :class:`RayDeepSpeedStrategy`),
:class:`RayLightningEnvironment` and :class:`RayTrainReportCallback`, then pass it
through :func:`prepare_trainer`. The process group tuneplat set up for the trial is
the one Lightning trains on; metrics and a checkpoint are reported at the end of
every training epoch, so schedulers (ASHA...) can stop the run.

Example (Ray's "Get started with PyTorch Lightning", imports changed):
    >>> import lightning.pytorch as pl  # doctest: +SKIP
    >>> from tuneplat.train.lightning import (RayDDPStrategy, RayLightningEnvironment,
    ...                                       RayTrainReportCallback, prepare_trainer)
    >>> def train_func():
    ...     trainer = pl.Trainer(devices="auto", accelerator="auto", strategy=RayDDPStrategy(),
    ...                          plugins=[RayLightningEnvironment()], callbacks=[RayTrainReportCallback()],
    ...                          enable_progress_bar=False)
    ...     trainer = prepare_trainer(trainer)
    ...     trainer.fit(model, train_dataloaders=loader)

Needs the ``lightning`` extra (``pip install 'tuneplat[lightning]'``); ``lightning.pytorch``
is used, or ``pytorch_lightning`` where only that is installed.
"""

from __future__ import annotations

from ._lightning import (
    RayDDPStrategy,
    RayDeepSpeedStrategy,
    RayFSDPStrategy,
    RayLightningEnvironment,
    RayTrainReportCallback,
    prepare_trainer,
)

__all__ = ["RayDDPStrategy", "RayDeepSpeedStrategy", "RayFSDPStrategy", "RayLightningEnvironment",
           "RayTrainReportCallback", "prepare_trainer"]
