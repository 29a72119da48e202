"""Ray's "Get started with PyTorch Lightning" guide, ported to tuneplat by changing imports.

So that it runs anywhere without downloads, the guide's ResNet-18 on FashionMNIST
(torchvision, a download) is a small convolutional classifier on generated
1×28×28 images with 10 classes; the Lightning module, the Trainer and everything
tuneplat-related are the guide's code with ``ray`` replaced by ``tuneplat``.

Run it: ``python examples/lightning_getting_started.py`` (2 CPU ranks).
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

import tuneplat.train.lightning
from tuneplat.train import ScalingConfig
from tuneplat.train.torch import TorchTrainer


def small_cnn() -> torch.nn.Module:
    """Stands in for ``resnet18(num_classes=10)`` with a 1-channel ``conv1``."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False),  # the guide's conv1
        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(8 * 16, 10))


def generated_fashion(n: int = 256, seed: int = 0) -> TensorDataset:
    """1×28×28 images in 10 classes (the class sets the mean brightness of a quadrant)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.randn(n, 1, 28, 28, generator=g) * 0.5
    for c in range(10):
        x[y == c, :, (c // 5) * 14:(c // 5) * 14 + 14, :] += (c % 5) * 0.5
    return TensorDataset(x, y)


# Model, Loss, Optimizer
class ImageClassifier(pl.LightningModule):
    def __init__(self, lr=0.001):
        super(ImageClassifier, self).__init__()
        torch.manual_seed(0)
        self.model = small_cnn()
        self.criterion = torch.nn.CrossEntropyLoss()
        self.lr = lr

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        outputs = self.forward(x)
        loss = self.criterion(outputs, y)
        self.log("loss", loss, on_step=True, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.model.parameters(), lr=self.lr)


def train_func(config):
    config = config or {}
    # Data
    train_data = generated_fashion(config.get("rows", 256))
    train_dataloader = DataLoader(train_data, batch_size=32, shuffle=True)

    # Training
    model = ImageClassifier(lr=config.get("lr", 0.001))
    # [1] Configure PyTorch Lightning Trainer.
    trainer = pl.Trainer(
        max_epochs=config.get("max_epochs", 10),
        devices="auto",
        accelerator="auto",
        strategy=tuneplat.train.lightning.RayDDPStrategy(),
        plugins=[tuneplat.train.lightning.RayLightningEnvironment()],
        callbacks=[tuneplat.train.lightning.RayTrainReportCallback()],
        enable_progress_bar=False,
    )
    trainer = tuneplat.train.lightning.prepare_trainer(trainer)
    trainer.fit(model, train_dataloaders=train_dataloader)


if __name__ == "__main__":
    # [2] Configure scaling and resource requirements.
    scaling_config = ScalingConfig(num_workers=2, use_gpu=False)

    # [3] Launch distributed training job.
    trainer = TorchTrainer(train_func, train_loop_config={"max_epochs": 3}, scaling_config=scaling_config)
    result = trainer.fit()
    print(result.metrics)
    print(result.checkpoint)
