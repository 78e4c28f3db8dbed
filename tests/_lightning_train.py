"""Train a tiny LightningModule with dropout on padless batches (``LightningBatches``); resume.

Imported by tests/test_lightning.py (one process, in the test's process) and launched by it
under torchrun with 2 processes (``Trainer(accelerator="cpu", devices=2, strategy="ddp")``,
gloo): each rank writes OUT_DIR/rank<r>.json with the batches and losses of an uninterrupted
run, of runs resumed from checkpoints (an epoch's last batch and mid-epoch; torchdata's
``StatefulDataLoader``, ``ExactResume`` on), and of the bare sampler. Under torchrun the loaders
have no workers: forking DataLoader workers from a process whose gloo threads hold Python thread
states can deadlock the child in CPython's after-fork (seen once in a clean-clone run); the
workers' prefetch is tested in one process (tests/test_lightning.py, tests/test_integrity.py).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torchdata.stateful_dataloader import StatefulDataLoader

from padless import TokenBudgetSampler
from padless.lightning import ExactResume, LightningBatches
from padless.torch import StatefulLoader

N = 160
LENGTHS = np.random.default_rng(0).integers(1, 50, N)
SETTINGS = {"max_tokens": 300, "seed": 4}


class Tiny(pl.LightningModule):
    """A 25-weight model with dropout that records the batches it trains on and its losses."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(1, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1)
        )
        self.record: list[dict[str, Any]] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss = self.net(batch.float()[:, None] / N).pow(2).mean()
        self.record.append(
            {
                "step": self.global_step,
                "epoch": self.current_epoch,
                "index": batch.tolist(),
                "loss": loss.item(),
            }
        )
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Data(pl.LightningDataModule):
    """The recipe: the sampler is built once the Trainer knows this process's rank."""

    def __init__(
        self, loader: str = "torchdata", workers: int = 2, settings: dict | None = None
    ) -> None:
        super().__init__()
        self.loader, self.workers = loader, workers
        self.settings = SETTINGS if settings is None else settings

    def train_dataloader(self) -> Any:
        sampler = TokenBudgetSampler(
            LENGTHS,
            rank=self.trainer.global_rank,
            world_size=self.trainer.world_size,
            **self.settings,
        )
        batches = LightningBatches(sampler)
        if self.loader == "torchdata":
            return StatefulDataLoader(
                torch.arange(N), batch_sampler=batches, num_workers=self.workers,
                collate_fn=torch.stack,
            )  # fmt: skip
        return StatefulLoader(
            torch.utils.data.DataLoader(
                torch.arange(N), batch_sampler=batches, num_workers=self.workers,
                collate_fn=torch.stack,
            )
        )  # fmt: skip


def fit(
    out: str,
    *,
    ckpt: str | None = None,
    every: int = 0,
    epoch_ends: bool = False,
    devices: int = 1,
    max_steps: int = -1,
    exact: bool = True,
    **kw: Any,
) -> list[dict[str, Any]]:
    """Train (resume from ``ckpt``), checkpoint every ``every`` steps (and, with
    ``epoch_ends``, at each epoch's end: ``epoch=<e>.ckpt``); the model's record."""
    model = Tiny()
    callbacks: list[Any] = [ExactResume()] if exact else []
    if every:
        callbacks.append(
            ModelCheckpoint(
                dirpath=out, every_n_train_steps=every, save_top_k=-1, filename="{step}"
            )
        )
    if epoch_ends:
        callbacks.append(ModelCheckpoint(dirpath=out, save_top_k=-1, filename="{epoch}"))
    trainer = pl.Trainer(
        default_root_dir=out,
        max_epochs=2,
        max_steps=max_steps,
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        use_distributed_sampler=False,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=bool(every) or epoch_ends,
        callbacks=callbacks,
    )
    trainer.fit(model, datamodule=Data(**kw), ckpt_path=ckpt)
    return model.record


def per_epoch(world: int) -> int:
    """Batches per process in an epoch."""
    return len(TokenBudgetSampler(LENGTHS, world_size=world, **SETTINGS))


def bare(rank: int, world: int, epochs: int) -> list[list[int]]:
    sampler = TokenBudgetSampler(LENGTHS, rank=rank, world_size=world, **SETTINGS)
    out = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        out.extend(list(b) for b in sampler)
    return out


def quiet() -> None:
    torch.set_num_threads(1)  # a tiny model: more threads only contend
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")


def main(out: str) -> None:
    quiet()
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    steps = per_epoch(world)
    result: dict[str, Any] = {"rank": rank, "world": world, "per_epoch": steps, "n": N}
    result["repeated"] = TokenBudgetSampler(LENGTHS, world_size=world, **SETTINGS).repeated
    result["bare"] = bare(rank, world, 2)
    full_dir = os.path.join(out, "full")
    result["full"] = fit(full_dir, every=steps // 2, devices=world, workers=0)
    result["resumed"] = {}
    for step in (steps, steps + steps // 2):  # an epoch's last batch; mid-epoch 1
        torch.manual_seed(1000 + step)  # a fresh process's random state: must not matter
        ckpt = os.path.join(full_dir, f"step={step}.ckpt")
        resumed = fit(os.path.join(out, f"r{step}"), ckpt=ckpt, devices=world, workers=0)
        result["resumed"][str(step)] = resumed
    # a plain DataLoader in padless.torch.StatefulLoader, stopped mid-epoch 0
    kw: dict[str, Any] = {"devices": world, "loader": "torch", "workers": 0}
    step = steps // 2
    torch_dir = os.path.join(out, "torch")
    result["torch_first"] = fit(torch_dir, every=step, max_steps=step, **kw)
    ckpt = os.path.join(torch_dir, f"step={step}.ckpt")
    result["torch_resumed"] = {str(step): fit(os.path.join(out, "tr"), ckpt=ckpt, **kw)}
    with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
        json.dump(result, fh)
    # leave without the interpreter's teardown (as tests/_ddp_train.py does): a thread torn down
    # at exit can abort a process after its results are written ("terminate called without an
    # active exception", seen under a loaded machine); the test checks the results
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
