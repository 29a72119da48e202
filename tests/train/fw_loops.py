"""Training loops for the framework tests (FSDP2, DeepSpeed, Accelerate), importable by Dask workers.

Each loop is written as a user writes it for Ray Train: it runs inside a ``TorchTrainer`` (tuneplat joined the
process group and set the environment) and, unchanged, under the library's own launcher (``torchrun``,
``tests/train/fw_launch.py``). Inside a trial it reports through ``tuneplat.train.report``; outside one it appends
the same metrics to ``<config["out"]>/rank<R>.jsonl``, so the two launches can be compared step by step.

The data are generated from a fixed seed: every step draws one global batch of ``global_batch`` rows, and rank
``r`` of ``w`` trains on rows ``r::w`` of it. The same global batch on 1 rank is the same optimisation problem
(the gradient is averaged over the ranks), up to floating-point summation order.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import torch
import torch.distributed as dist

import tuneplat as tune
from tuneplat import train

FEATURES = 8


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _in_trial() -> bool:
    return train.get_context().get_trial_id() is not None


def _batch(step: int, global_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``rank::world`` of step ``step``'s global batch (the same on every launch)."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(global_batch, FEATURES, generator=g)
    y = (x * torch.linspace(-1.0, 1.0, FEATURES)).sum(1, keepdim=True) + 0.1 * torch.randn(global_batch, 1, generator=g)
    rank, world = _world()
    return x[rank::world], y[rank::world]


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 1))


def _emit(config: dict[str, Any], metrics: dict[str, Any], ckpt_dir: str | None) -> None:
    """Report (in a trial) or record (under the library's own launcher) one step's metrics."""
    if _in_trial():
        train.report(metrics, checkpoint=tune.Checkpoint.from_directory(ckpt_dir) if ckpt_dir else None)
        return
    rank, _ = _world()
    with open(os.path.join(config["out"], f"rank{rank}.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(metrics) + "\n")


def _maybe_crash(config: dict[str, Any], step: int) -> None:
    """The first attempt of a trial crashes (rank 0) after ``crash_after`` steps: the retry restores the checkpoint."""
    if config.get("crash_after") == step and _in_trial() and train.get_context().get_attempt() == 0:
        if train.get_context().get_world_rank() == 0:
            raise RuntimeError(f"crash after step {step}, on purpose")


# ------------------------------------------------------------------ FSDP2 + torch.distributed.checkpoint
def fsdp2(config: dict[str, Any]) -> None:
    """A model sharded with ``fully_shard`` (FSDP2), saved and restored with torch.distributed.checkpoint."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_state_dict,
        set_state_dict,
    )
    from torch.distributed.fsdp import fully_shard

    from tuneplat.train.torch import get_device

    device = get_device()
    if config.get("own_group") and not dist.is_initialized():  # 1 rank with sharding on (the GPU test)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)
    model = _net().to(device)
    if dist.is_initialized():
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=config.get("lr", 0.01))
    start = 0
    ckpt = train.get_checkpoint() if _in_trial() else None
    if ckpt is not None:
        with ckpt.as_directory() as d:
            msd, osd = get_state_dict(model, opt)
            state = {"model": msd, "optim": osd}
            dcp.load(state, checkpoint_id=d)  # every rank reads the shards it owns
            set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
            with open(os.path.join(d, "step.json"), encoding="utf-8") as f:
                start = json.load(f)["step"] + 1
    for step in range(start, config["steps"]):
        x, y = (t.to(device) for t in _batch(step, config["global_batch"]))
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        local = loss.detach().clone()
        if dist.is_initialized():
            dist.all_reduce(local)
            local /= dist.get_world_size()
        with tempfile.TemporaryDirectory(prefix="fsdp-ckpt-") as d:
            msd, osd = get_state_dict(model, opt)
            dcp.save({"model": msd, "optim": osd}, checkpoint_id=d)  # a shard file per rank, .metadata on rank 0
            if _world()[0] == 0:
                with open(os.path.join(d, "step.json"), "w", encoding="utf-8") as f:
                    json.dump({"step": step}, f)
            _emit(config, {"step": step, "loss": float(local), "files": sorted(os.listdir(d))}, d)
        _maybe_crash(config, step)
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    _save_final(config, full)
    if config.get("own_group"):
        dist.destroy_process_group()


def _save_final(config: dict[str, Any], state: dict[str, torch.Tensor]) -> None:
    """Rank 0 writes the final full weights where the test reads them (the trial folder, or ``out``)."""
    if _world()[0] != 0:
        return
    folder = train.get_context().get_trial_dir() if _in_trial() else config["out"]
    torch.save({k: v.detach().cpu() for k, v in state.items()}, os.path.join(folder, "final.pt"))


def _mean_loss(loss: torch.Tensor) -> float:
    """The step's loss averaged over the ranks (what one process with the global batch computes)."""
    local = loss.detach().clone().float()
    if dist.is_initialized():
        dist.all_reduce(local)
        local /= dist.get_world_size()
    return float(local)


# ------------------------------------------------------------------ DeepSpeed ZeRO (CPU: gloo)
def deepspeed_zero(config: dict[str, Any]) -> None:
    """``deepspeed.initialize`` as in DeepSpeed's own examples; ZeRO shards saved by every rank, then restored."""
    import deepspeed

    _, world = _world() if dist.is_initialized() else (0, int(os.environ.get("WORLD_SIZE", "1")))
    model = _net()
    opt = torch.optim.Adam(model.parameters(), lr=config.get("lr", 0.01))
    ds_config = {"train_micro_batch_size_per_gpu": config["global_batch"] // world, "gradient_accumulation_steps": 1,
                 "zero_optimization": {"stage": config.get("stage", 2)}, "steps_per_print": 10**9,
                 **({"fp16": {"enabled": True}} if config.get("half") else {})}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds_config)
    start = 0
    ckpt = train.get_checkpoint() if _in_trial() else None
    if ckpt is not None:
        with ckpt.as_directory() as d:
            _, client_state = engine.load_checkpoint(d, tag="step")  # every rank loads its own ZeRO partition
            start = client_state["step"] + 1
    for step in range(start, config["steps"]):
        x, y = (t.to(engine.device) for t in _batch(step, config["global_batch"]))
        if config.get("half"):
            x, y = x.half(), y.half()
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        with tempfile.TemporaryDirectory(prefix="ds-ckpt-") as d:
            engine.save_checkpoint(d, tag="step", client_state={"step": step})  # ZeRO: one optimizer file per rank
            files = sorted(os.listdir(os.path.join(d, "step")))
            _emit(config, {"step": step, "loss": _mean_loss(loss), "files": files}, d)
        _maybe_crash(config, step)
    _save_final(config, {k: v for k, v in engine.module.state_dict().items()})


# ------------------------------------------------------------------ Hugging Face Accelerate
def accelerate_loop(config: dict[str, Any]) -> None:
    """Ray's "Accelerate in TorchTrainer" shape: an ``Accelerator()`` built inside the loop finds the group."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = _net()
    opt = torch.optim.Adam(model.parameters(), lr=config.get("lr", 0.01))
    model, opt = accelerator.prepare(model, opt)
    start = 0
    ckpt = train.get_checkpoint() if _in_trial() else None
    if ckpt is not None:
        with ckpt.as_directory() as d:
            accelerator.load_state(d)
            with open(os.path.join(d, "step.json"), encoding="utf-8") as f:
                start = json.load(f)["step"] + 1
    for step in range(start, config["steps"]):
        x, y = _batch(step, config["global_batch"])
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        accelerator.backward(loss)
        opt.step()
        with tempfile.TemporaryDirectory(prefix="acc-ckpt-") as d:
            accelerator.save_state(d)  # the main process writes; save_state waits for every process
            if accelerator.is_main_process:
                with open(os.path.join(d, "step.json"), "w", encoding="utf-8") as f:
                    json.dump({"step": step}, f)
            _emit(config, {"step": step, "loss": _mean_loss(loss), "processes": accelerator.num_processes,
                           "distributed_type": str(accelerator.distributed_type)}, d)
        _maybe_crash(config, step)
    _save_final(config, accelerator.unwrap_model(model).state_dict())


def accelerate_probe(config: dict[str, Any]) -> None:
    """What a plain ``Accelerator()`` (Ray's examples: no ``cpu=True``) makes of this rank, reported by every rank."""
    from accelerate import Accelerator

    accelerator = Accelerator()
    model = accelerator.prepare(_net())
    loader = accelerator.prepare(torch.utils.data.DataLoader(list(range(8)), batch_size=2))
    train.report({"processes": accelerator.num_processes, "index": accelerator.process_index,
                  "distributed_type": str(accelerator.distributed_type), "device": str(accelerator.device),
                  "ddp": isinstance(model, torch.nn.parallel.DistributedDataParallel),
                  "rows": [int(x) for batch in loader for x in batch],
                  "use_cpu": os.environ.get("ACCELERATE_USE_CPU")})


# ------------------------------------------------------------------ Lightning: RayFSDPStrategy / RayDeepSpeedStrategy
def lightning_strategy(config: dict[str, Any]) -> None:
    """The ported Lightning guide's module trained with the strategy named in ``config["strategy"]``.

    Rank 0 saves the final full parameters as ``final.pt`` in the trial folder (FSDP gathers them).
    """
    import pytorch_lightning as pl  # (the ported guide's LightningModule is a pytorch_lightning one)
    from torch.utils.data import DataLoader

    import tuneplat.train.lightning as tl
    from examples.lightning_getting_started import ImageClassifier, generated_fashion

    strategies = {"ddp": tl.RayDDPStrategy, "fsdp": tl.RayFSDPStrategy, "deepspeed": tl.RayDeepSpeedStrategy}
    kwargs = dict(config.get("strategy_kwargs", {}))
    trainer = pl.Trainer(max_epochs=config.get("max_epochs", 2), devices="auto", accelerator="auto",
                         strategy=strategies[config["strategy"]](**kwargs), plugins=[tl.RayLightningEnvironment()],
                         callbacks=[tl.RayTrainReportCallback()], enable_progress_bar=False, logger=False,
                         enable_checkpointing=False, deterministic=True)
    trainer = tl.prepare_trainer(trainer)
    model = ImageClassifier(lr=config.get("lr", 0.01))
    trainer.fit(model, train_dataloaders=DataLoader(generated_fashion(config.get("rows", 128)), batch_size=16))
    if config["strategy"] == "fsdp":
        from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel, StateDictType

        # (offload_to_cpu=True fails on CPU ranks: the parameters are there already)
        with FullyShardedDataParallel.state_dict_type(trainer.strategy.model, StateDictType.FULL_STATE_DICT,
                                                      FullStateDictConfig(offload_to_cpu=False, rank0_only=False)):
            state = trainer.strategy.model.state_dict()
        state = {k.removeprefix("_forward_module."): v for k, v in state.items()}
    else:
        state = model.state_dict()
    _save_final(config, state)
