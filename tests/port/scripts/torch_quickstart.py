# Ray Train's PyTorch quickstart ("Getting started with PyTorch"), ported by changing imports only.
# No main guard: trainer.fit() runs at the top level, as in Ray's docs. (Ray's version trains a ResNet-18 on
# FashionMNIST; here the data is generated and the model is small, so that the test needs no download.)
import os
import tempfile

import torch
from torch.nn import CrossEntropyLoss
from torch.optim import Adam
from torch.utils.data import DataLoader, TensorDataset

import tuneplat.train.torch  # was: import ray.train.torch
from tuneplat import train  # was: from ray import train

print("SCRIPT TOP LEVEL RAN", flush=True)


def train_func():
    # Model, Loss, Optimizer
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 10))
    # [1] Prepare model.
    model = tuneplat.train.torch.prepare_model(model)
    criterion = CrossEntropyLoss()
    optimizer = Adam(model.parameters(), lr=0.001)

    # Data
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(256, 1, 28, 28, generator=gen)
    labels = (images.mean(dim=(1, 2, 3)) > 0).long()
    train_data = TensorDataset(images, labels)
    train_loader = DataLoader(train_data, batch_size=32, shuffle=True)
    # [2] Prepare dataloader.
    train_loader = tuneplat.train.torch.prepare_data_loader(train_loader)

    # Training
    for epoch in range(3):
        if train.get_context().get_world_size() > 1:
            train_loader.sampler.set_epoch(epoch)

        for images, labels in train_loader:
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        # [3] Report metrics and checkpoint.
        metrics = {"loss": loss.item(), "epoch": epoch}
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            torch.save(model.module.state_dict(), os.path.join(temp_checkpoint_dir, "model.pt"))
            train.report(metrics, checkpoint=train.Checkpoint.from_directory(temp_checkpoint_dir))
        if train.get_context().get_world_rank() == 0:
            print(metrics)


# [4] Configure scaling and resource requirements.
scaling_config = train.ScalingConfig(num_workers=2, use_gpu=False)

# [5] Launch distributed training job.
trainer = tuneplat.train.torch.TorchTrainer(
    train_func,
    scaling_config=scaling_config,
    # [5a] If running in a multi-node cluster, this is where you
    # should configure the run's persistent storage that is accessible
    # across all worker nodes.
    # run_config=train.RunConfig(storage_path="s3://..."),
)
result = trainer.fit()

# [6] Load the trained model.
with result.checkpoint.as_directory() as checkpoint_dir:
    model_state_dict = torch.load(os.path.join(checkpoint_dir, "model.pt"))
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 10))
    model.load_state_dict(model_state_dict)

print("RESULT", result.metrics["epoch"], sorted(model_state_dict))
