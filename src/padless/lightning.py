"""Lightning glue: a padless sampler as the batch sampler of a Lightning ``Trainer``'s train loader.

Lightning has four traps for a batch sampler that shards itself and resumes mid-epoch:

1. On several devices with ``use_distributed_sampler=True`` (the default) it tries to put a
   ``DistributedSampler`` into the batch sampler and stops with a ``TypeError``. Pass
   ``use_distributed_sampler=False``: the padless sampler already gives each process its own
   batches.
2. It calls ``set_epoch`` on ``loader.sampler`` and ``loader.batch_sampler.sampler``, never on
   the batch sampler itself, so a bare padless sampler would repeat epoch 0's order forever.
3. It sizes every epoch with ``len(loader)`` and counts the batches already trained itself, so
   after a mid-epoch resume the loader must still report the *whole* epoch.
4. Its own resume bookkeeping (2.6) changes the batches: at an epoch boundary it makes the
   loader's iterator (whose workers fetch at once) before it selects the epoch, and after a
   resume at an epoch's last batch it writes checkpoints that it later reads as the epoch's
   start (it skips the loader's state and trains the epoch again).

:class:`LightningBatches` fixes 2 and 3, goes on with the next epoch from a state saved at an
epoch's last batch, and reports a saved state that does not fit as padless's own error; the
callback :class:`ExactResume` fixes 4 and makes the resumed losses bitwise (dropout). Put
``LightningBatches`` in a loader whose state Lightning saves in its checkpoints — torchdata's
``StatefulDataLoader`` (recommended; exact with workers) — add ``ExactResume``, and resume with
``trainer.fit(..., ckpt_path=...)``::

    import lightning as L
    from torchdata.stateful_dataloader import StatefulDataLoader
    from padless import TokenBudgetSampler
    from padless.lightning import ExactResume, LightningBatches

    class Data(L.LightningDataModule):
        def train_dataloader(self):
            sampler = TokenBudgetSampler(lengths, max_tokens=16384, seed=0,
                                         rank=self.trainer.global_rank,
                                         world_size=self.trainer.world_size)
            return StatefulDataLoader(sampler.checked(dataset),
                                      batch_sampler=LightningBatches(sampler),
                                      num_workers=4, collate_fn=collate)

    trainer = L.Trainer(strategy="ddp", devices=8, use_distributed_sampler=False,
                        callbacks=[ExactResume()])
    trainer.fit(model, datamodule=Data(), ckpt_path="last")

With a packing collate, add :class:`CheckPacked` too: it refuses, before the first step, a model
whose packed documents attend to each other (Lightning keeps the config's ``use_cache=True``).

``import padless.lightning`` does not import Lightning or torch; ``ExactResume`` and
``CheckPacked`` do, when first used.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

_SAMPLER_API = ("__iter__", "__len__", "set_epoch", "state_dict", "load_state_dict", "epoch")
RNG_STATE_VERSION = 1


class LightningBatches:
    """A padless sampler as a Lightning train loader's ``batch_sampler`` (see the module doc).

    It yields the sampler's batches unchanged; ``len()`` is always the whole current epoch's
    batches on this process (Lightning counts the trained ones itself); ``set_epoch`` reaches the
    sampler through ``batch_sampler.sampler`` (where Lightning and accelerate look for it);
    ``state_dict`` / ``load_state_dict`` are the sampler's, so torchdata's ``StatefulDataLoader``
    saves and restores it with the batches the loop received.

    A state saved after an epoch's last batch (``position`` at the epoch's end) continues with
    the next epoch from its first batch, as Lightning does: the loader's iterator (and its
    workers' prefetch) is made before Lightning calls ``set_epoch`` on a resume. Resume with
    :class:`ExactResume` among the callbacks: Lightning's own bookkeeping changes the batches
    of some resumes (an end-of-epoch checkpoint with workers; a checkpoint in the epoch after a
    resume at an epoch's last batch), and the callback mends it.

    A state that does not fit the sampler (other lengths, settings, seed...) is refused with a
    ``ValueError`` carrying the sampler's message at the next ``len()`` — Lightning asks right
    after it creates the loader's iterator, before the first step — and by any later
    ``iter()``, ``set_epoch`` or ``state_dict``; meanwhile it yields nothing. (Raised inside
    the loader's iterator, Lightning would replace it by its own ``RuntimeError: Please call
    iter(combined_loader) first``.)

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
    >>> batches.load_state_dict({**state, "position": 5})    # the epoch's last batch trained
    >>> batches.padless_sampler.epoch, len(list(batches))
    (1, 5)
    """

    def __init__(self, sampler: Any) -> None:
        from .sampling.placed import refuse_placements  # kernels: not at `import padless.lightning`

        refuse_placements(sampler, "padless.lightning")
        missing = [name for name in _SAMPLER_API if not hasattr(sampler, name)]
        if missing:
            raise TypeError(
                "sampler must be a padless sampler (TokenBudgetSampler, PackingSampler, "
                f"MixtureSampler...); {type(sampler).__name__} lacks {missing}"
            )
        self.padless_sampler = sampler
        self._length = len(sampler)
        self._refused: Exception | None = None  # a loaded state that does not fit
        self._reported = False  # raised once by len(): Lightning's teardown may ask again
        self._loader_iter = False  # the loader's own iter() right after the load
        self._advanced = False  # the state loaded was at its epoch's end: at the next one now

    @property
    def sampler(self) -> LightningBatches:
        """This object: Lightning calls ``set_epoch`` on ``loader.batch_sampler.sampler``."""
        return self

    def __iter__(self) -> Iterator[Any]:
        if self._refused is not None:
            if self._loader_iter:  # the loader's iterator (and its prefetch) is being made
                self._loader_iter = False
                return iter(())
            raise self._refusal(self._refused)
        return iter(self.padless_sampler)

    def __len__(self) -> int:
        if self._refused is not None:
            if not self._reported:
                self._reported = True
                raise self._refusal(self._refused)
            return 0
        return self._length

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (a loaded position survives only for its own epoch)."""
        if self._refused is not None:
            raise self._refusal(self._refused)
        sampler = self.padless_sampler
        if epoch != sampler.epoch:
            sampler.set_epoch(epoch)
            self._length = len(sampler)

    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        """The sampler's state (see ``state_dict`` of the padless sampler)."""
        if self._refused is not None:
            raise self._refusal(self._refused)
        return dict(self.padless_sampler.state_dict(consumed=consumed))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` at the next iteration; ``len()`` stays the whole epoch.

        ``state`` must be a dict from ``state_dict()`` (else a ``TypeError`` now). At its
        epoch's end it continues with the next epoch. A state that does not fit is refused
        as the class doc says.
        """
        if not isinstance(state, Mapping):
            raise TypeError(
                "state must be a dict from LightningBatches.state_dict() (a padless sampler "
                f"state), got {type(state).__name__} {state!r:.80}"
            )
        sampler = self.padless_sampler
        self._refused, self._reported, self._loader_iter = None, False, False
        try:
            sampler.load_state_dict({**state, "position": 0})  # checks it; the whole epoch's length
            whole = len(sampler)
            sampler.load_state_dict(state)
            _check_world(state, sampler, whole)
        except (TypeError, ValueError) as err:
            self._refused, self._loader_iter = err, True
            return
        self._advanced = False
        if whole and len(sampler) == 0:  # its epoch's end: Lightning goes on with the next one
            sampler.set_epoch(sampler.epoch + 1)
            whole = len(sampler)
            self._advanced = True
        self._length = whole

    def _refusal(self, err: Exception) -> ValueError:
        # a ValueError even for the sampler's TypeError: Lightning's sized_len swallows those
        name = type(self.padless_sampler).__name__
        return ValueError(f"cannot resume {name} from the loader's state: {err}")


def _check_world(state: Mapping[str, Any], sampler: Any, whole: int) -> None:
    """Refuse a mid-epoch state of another world size (Lightning counts batches per process)."""
    saved, world = state.get("world_size"), getattr(sampler, "world_size", None)
    if saved != world and state.get("position") and whole and len(sampler):
        raise ValueError(
            f"the state was written by {saved} processes, this run has {world}: "
            "Lightning counts an epoch's trained batches per process, so a mid-epoch state "
            "resumes exactly only at its own world size (a state at an epoch's start or end "
            "at any)"
        )


def _gather(obj: Any) -> list[Any]:
    """``obj`` of every process (a collective under ``torch.distributed``), or ``[obj]``."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def _exact_resume_class() -> type:
    import lightning.pytorch as pl

    from .torch._dist import dist_kwargs
    from .torch._rng import StepRng

    class ExactResume(pl.Callback):
        """A Lightning callback that makes a resume exact: the batches, and the losses bitwise.

        Each training step starts from the random state (torch CPU and CUDA, numpy, python) that
        the previous step ended with, saved in every checkpoint for every process and restored on
        ``trainer.fit(..., ckpt_path=...)``: the resumed run draws the dropout masks of the
        uninterrupted one, mid-epoch and from an epoch's end alike
        (:class:`padless.torch.StepRng` does the work; see it for what is covered). With
        :class:`LightningBatches` in a ``StatefulDataLoader`` the batches are the same too, so
        the losses are bitwise. Resumed by another number of processes than wrote it, the
        batches still resume exactly and the random state starts afresh (a warning says so).

        It also mends three faults of Lightning's own resume (2.6) that change the batches:

        * Resumed from a step checkpoint at an epoch's last batch, Lightning never counts the
          next epoch as started, so every checkpoint of that epoch reads as "epoch not begun":
          resumed from one, Lightning skips the loader's state and trains the epoch again from
          its first batch. The callback counts the epoch when its first batch starts, and
          mends such a count in a checkpoint written without it when it is loaded.
        * Resumed from a step checkpoint at an epoch's last batch, Lightning takes the saved
          epoch as ended only if it trained as many batches as the loader's length now, the
          next epoch's: where that one is longer (resumed by fewer processes, say),
          Lightning took it as the saved epoch half done and trained only its last part. The
          callback lets Lightning see the saved epoch's end.
        * Resumed at an epoch boundary (an end-of-epoch checkpoint), Lightning makes the
          loader's iterator, whose workers fetch batches at once, before it selects the epoch:
          those batches are the previous epoch's. The callback selects the epoch of every
          :class:`LightningBatches` loader and makes its iterator again before the first step.

        Cost: 0.1–0.2 ms per step (``StepRng``) and, at each checkpoint, one gather of the
        processes' random states (about 14 KB each); a resume at an epoch boundary starts the
        loader's workers twice.
        """

        def __init__(self) -> None:
            self.rng = StepRng()
            self._first_batch = True

        def on_load_checkpoint(
            self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]
        ) -> None:
            _repair_loop_state(checkpoint)  # before Lightning restores its loops from it

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self._first_batch = True
            _end_the_finished_epoch(trainer)
            _start_at_the_loops_epoch(trainer)

        def on_train_batch_start(
            self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
        ) -> None:
            if self._first_batch:
                self._first_batch = False
                _count_the_running_epoch(trainer.fit_loop.epoch_progress)
            self.rng.begin()

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            self.rng.end()

        def state_dict(self) -> dict[str, Any]:
            # Lightning builds a checkpoint's contents on every process, so all of them gather
            return {"version": RNG_STATE_VERSION, "ranks": _gather(self.rng.state_dict())}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            ranks = state_dict.get("ranks") if isinstance(state_dict, Mapping) else None
            if not isinstance(ranks, list) or state_dict.get("version") != RNG_STATE_VERSION:
                raise ValueError(
                    f"ExactResume's checkpoint state must be a dict with version "
                    f"{RNG_STATE_VERSION} and 'ranks' (written by ExactResume), got "
                    f"{state_dict!r:.80}"
                )
            where = dist_kwargs()
            rank, world = where["rank"], where["world_size"]
            if len(ranks) != world:  # the batches still resume exactly; the dropout cannot
                warnings.warn(
                    f"ExactResume: the checkpoint holds the random state of {len(ranks)} "
                    f"processes, this run has {world}: the batches resume exactly, the random "
                    "state starts afresh (bitwise losses need the same world size)",
                    stacklevel=2,
                )
                return
            self.rng.load_state_dict(ranks[rank])

    ExactResume.__module__ = __name__
    ExactResume.__qualname__ = "ExactResume"
    return ExactResume


def _batches_of(loader: Any) -> LightningBatches | None:
    """The :class:`LightningBatches` of a train loader (a DataLoader's, or a wrapper's), if any."""
    for name in ("batch_sampler", "sampler"):
        found = getattr(loader, name, None)
        if isinstance(found, LightningBatches):
            return found
    return None


def _count_the_running_epoch(progress: Any) -> None:
    """Count an epoch whose batches run as started (Lightning 2.6 forgets it after a resume).

    Resumed at an epoch's last batch, Lightning closes that epoch and runs the next without
    counting it as ready and started: a checkpoint of it then reads as an epoch boundary.
    """
    current = progress.current
    if current.started == current.processed:
        if current.ready == current.processed:
            progress.increment_ready()
        progress.increment_started()


def _repair_loop_state(checkpoint: Any) -> None:
    """Mend a checkpoint written inside an epoch that Lightning did not count as started.

    A checkpoint written at a training batch's end (a batch processed, not yet completed)
    lies inside an epoch, so that epoch was started; Lightning 2.6 writes it with ready =
    started = processed after a resume at an epoch's last batch (see
    :func:`_count_the_running_epoch`), and a resume from it skips the loader's state.
    """
    try:
        loop: Any = checkpoint["loops"]["fit_loop"]
        batches = loop["epoch_loop.batch_progress"]["current"]
        inside = batches["processed"] > batches["completed"]
        counts = [loop["epoch_progress"][part] for part in ("current", "total")]
        begun = [c["ready"] == c["started"] == c["processed"] for c in counts]
    except (KeyError, TypeError):
        return  # another layout: leave it to Lightning
    if inside and all(begun):
        for c in counts:
            c["ready"] += 1
            c["started"] += 1


def _end_the_finished_epoch(trainer: Any) -> None:
    """Let Lightning see the end of an epoch whose last batch a step checkpoint was saved at,
    resumed by fewer processes.

    Lightning decides that such a checkpoint closed its epoch by comparing the batches this
    process trained in it with ``num_training_batches``, the loader's length *now*: resumed by
    fewer processes the next epoch is longer than the one finished, so Lightning took the next
    epoch as the old one half done and trained only its last part. When a padless loader
    moved on to the next epoch on load (its state was at its epoch's end), the epoch's batch
    count is brought to its end, as it is at the same number of processes.
    """
    loop = trainer.fit_loop.epoch_loop
    if not getattr(loop, "restarted_on_train_batch_end", False):
        return
    advanced = [
        b
        for b in map(_batches_of, _flat_loaders(trainer.train_dataloader))
        if b is not None and b._refused is None and b._advanced
    ]
    total = trainer.num_training_batches
    current = loop.batch_progress.current
    if advanced and isinstance(total, int) and current.completed + 1 < total:
        # Lightning adds the batch the checkpoint was saved at the end of, then resets
        current.ready = current.started = current.processed = current.completed = total - 1


def _start_at_the_loops_epoch(trainer: Any) -> None:
    """Select Lightning's epoch in every padless loader, and remake the iterator if it was made
    (with its workers' prefetch) at another epoch: on a resume at an epoch boundary Lightning
    makes the iterator before it calls ``set_epoch``."""
    loop = trainer.fit_loop
    epoch = loop.epoch_progress.current.processed  # what Lightning passes to set_epoch next
    stale, made_at = [], None
    for loader in _flat_loaders(trainer.train_dataloader):
        batches = _batches_of(loader)
        if batches is not None and batches._refused is None:
            if batches.padless_sampler.epoch != epoch:
                stale.append(batches)
                made_at = batches.padless_sampler.epoch
    if not stale:
        return
    for batches in stale:
        batches.set_epoch(epoch)
    fetcher = getattr(loop, "_data_fetcher", None)
    if fetcher is None:
        raise RuntimeError(
            f"ExactResume: the train loader's iterator was made at epoch {made_at}, Lightning "
            f"resumes epoch {epoch}, and this Lightning version does not let padless make it "
            "again (no fit_loop._data_fetcher)"
        )
    iter(fetcher)  # a new iterator of the loaders, whose workers fetch the right epoch


def _flat_loaders(loaders: Any) -> list[Any]:
    """The loaders of ``trainer.train_dataloader`` (one, a list, a dict, or nested)."""
    if isinstance(loaders, Mapping):
        return [inner for value in loaders.values() for inner in _flat_loaders(value)]
    if isinstance(loaders, (list, tuple)):
        return [inner for value in loaders for inner in _flat_loaders(value)]
    return [] if loaders is None else [loaders]


def _check_packed_class() -> type:
    import lightning.pytorch as pl

    from .torch._packed_check import check_packed, packs

    class CheckPacked(pl.Callback):
        """A Lightning callback that refuses a model whose packed documents see each other.

        When training starts, every train loader whose ``collate_fn`` packs several sequences
        into a row (``collate_packed``, ``collate_for(sampler)`` of a ``PackingSampler``,
        ``PaddingFreeCollator``; whatever its batch sampler) has its collate
        run through :func:`padless.torch.check_packed` on the model: a leak is a ``ValueError``
        before the first step, naming the fix. Lightning modules keep the config's
        ``use_cache=True``, under which transformers lets packed documents attend across.

        Args:
            model: the attribute of the LightningModule that holds the model the batches go to
                (default ``"model"``; the module itself when it has no such attribute), or a
                function ``module -> model``.

        Cost: one check per packing loader, a few forwards of a few dozen tokens.
        """

        def __init__(self, model: str | Callable[[Any], Any] = "model") -> None:
            if not (isinstance(model, str) or callable(model)):
                raise TypeError(
                    "model must be an attribute name or a function module -> model, got "
                    f"{type(model).__name__} {model!r:.60}"
                )
            self.model = model

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            if isinstance(self.model, str):
                model = getattr(pl_module, self.model, pl_module)
            else:
                model = self.model(pl_module)
            for loader in _flat_loaders(trainer.train_dataloader):
                collate = getattr(loader, "collate_fn", None)  # whatever its sampler
                if collate is None or not packs(collate):
                    continue
                try:
                    check_packed(model, collate=collate)
                except TypeError as err:
                    if model is not pl_module:
                        raise
                    raise TypeError(
                        f"{err}: CheckPacked({self.model!r}) found no attribute "
                        f"{self.model!r} on the LightningModule and took the module itself; "
                        "name the attribute that holds the model, e.g. CheckPacked('net')"
                    ) from None

    CheckPacked.__module__ = __name__
    CheckPacked.__qualname__ = "CheckPacked"
    return CheckPacked


_LAZY = {"ExactResume": _exact_resume_class, "CheckPacked": _check_packed_class}


def __getattr__(name: str) -> Any:
    make = _LAZY.get(name)  # made on first use: importing Lightning takes seconds
    if make is not None:
        cls = make()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CheckPacked", "ExactResume", "LightningBatches"]  # noqa: F822 (module __getattr__)
