"""Lightning glue: a padless sampler as the batch sampler of a Lightning ``Trainer``'s train loader.

Lightning has three traps for a batch sampler that shards itself and resumes mid-epoch:

1. On several devices with ``use_distributed_sampler=True`` (the default) it tries to put a
   ``DistributedSampler`` into the batch sampler and stops with a ``TypeError``. Pass
   ``use_distributed_sampler=False``: the padless sampler already gives each process its own
   batches.
2. It calls ``set_epoch`` on ``loader.sampler`` and ``loader.batch_sampler.sampler``, never on
   the batch sampler itself, so a bare padless sampler would repeat epoch 0's order forever.
3. It sizes every epoch with ``len(loader)`` and counts the batches already trained itself, so
   after a mid-epoch resume the loader must still report the *whole* epoch.

:class:`LightningBatches` fixes 2 and 3. Put it in a loader whose state Lightning saves in its
checkpoints — torchdata's ``StatefulDataLoader`` (recommended; exact with workers) — and resume
with ``trainer.fit(..., ckpt_path=...)``::

    import lightning as L
    from torchdata.stateful_dataloader import StatefulDataLoader
    from padless import TokenBudgetSampler
    from padless.lightning import LightningBatches

    class Data(L.LightningDataModule):
        def train_dataloader(self):
            sampler = TokenBudgetSampler(lengths, max_tokens=16384, seed=0,
                                         rank=self.trainer.global_rank,
                                         world_size=self.trainer.world_size)
            return StatefulDataLoader(dataset, batch_sampler=LightningBatches(sampler),
                                      num_workers=4, collate_fn=collate)

    trainer = L.Trainer(strategy="ddp", devices=8, use_distributed_sampler=False)
    trainer.fit(model, datamodule=Data(), ckpt_path="last")
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_SAMPLER_API = ("__iter__", "__len__", "set_epoch", "state_dict", "load_state_dict", "epoch")


class LightningBatches:
    """A padless sampler as a Lightning train loader's ``batch_sampler`` (see the module doc).

    It yields the sampler's batches unchanged; ``len()`` is always the whole current epoch's
    batches on this process (Lightning counts the trained ones itself); ``set_epoch`` reaches the
    sampler through ``batch_sampler.sampler`` (where Lightning and accelerate look for it);
    ``state_dict`` / ``load_state_dict`` are the sampler's, so torchdata's ``StatefulDataLoader``
    saves and restores it with the batches the loop received.

    Args:
        sampler: a padless sampler (``TokenBudgetSampler``, ``PackingSampler``,
            ``MixtureSampler``...), built with this process's ``rank`` and ``world_size``.

    Cost: one plan computation per epoch, and one when a state is loaded.

    >>> from padless import TokenBudgetSampler
    >>> batches = LightningBatches(TokenBudgetSampler([3, 1, 2, 5, 4, 4], max_tokens=6, seed=0))
    >>> state = {**batches.state_dict(), "position": 2}      # two batches trained
    >>> batches.load_state_dict(state)
    >>> len(batches), len(list(batches))
    (5, 3)
    """

    def __init__(self, sampler: Any) -> None:
        missing = [name for name in _SAMPLER_API if not hasattr(sampler, name)]
        if missing:
            raise TypeError(
                "sampler must be a padless sampler (TokenBudgetSampler, PackingSampler, "
                f"MixtureSampler...); {type(sampler).__name__} lacks {missing}"
            )
        self.padless_sampler = sampler
        self._length = len(sampler)

    @property
    def sampler(self) -> LightningBatches:
        """This object: Lightning calls ``set_epoch`` on ``loader.batch_sampler.sampler``."""
        return self

    def __iter__(self) -> Iterator[Any]:
        return iter(self.padless_sampler)

    def __len__(self) -> int:
        return self._length

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (a loaded position survives only for its own epoch)."""
        sampler = self.padless_sampler
        if epoch != sampler.epoch:
            sampler.set_epoch(epoch)
            self._length = len(sampler)

    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        """The sampler's state (see ``state_dict`` of the padless sampler)."""
        return dict(self.padless_sampler.state_dict(consumed=consumed))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` at the next iteration; ``len()`` stays the whole epoch."""
        sampler = self.padless_sampler
        sampler.load_state_dict({**state, "position": 0})  # checks it; the whole epoch's length
        self._length = len(sampler)
        sampler.load_state_dict(state)


__all__ = ["LightningBatches"]
