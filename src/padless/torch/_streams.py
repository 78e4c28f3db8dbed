"""PyTorch glue for streams: :class:`StreamDataset`, :class:`StopTogether` and the stream collates.

Re-exported by :mod:`padless.torch`. This module imports torch; :mod:`padless.streams` does not.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import islice
from typing import Any, ClassVar, cast

import torch

from ..core._check import check_int, check_seed, positive
from ..core._keywords import check_keywords, checks_keywords, keyword_names
from ..core._schedule import check_ranks
from ..core._state import check_skip
from ..streams import Piece, StreamBatcher
from ..streams import check_epoch as _check_epoch
from ..streams import check_source as _check_source
from ..streams import state_position as _state_position
from ._collate import collate_packed, collate_padded, form_of
from ._dist import dist_kwargs

__all__ = ["StopTogether", "StreamDataset", "stop_together", "stream_collate"]


# --------------------------------------------------------------------------- collate


class StreamPackedCollate:
    """Collate for ``StreamBatcher`` packing batches: rows of items or pieces → varlen tensors.

    Flattens the rows (they come in the order they were opened, each longest first, so
    ``collate_packed``'s next-fit cut gives back exactly these rows), slices :class:`Piece`
    entries to their tokens, and returns ``collate_packed``'s dict (``input_ids``,
    ``cu_seqlens``, ``position_ids``, ``labels``...). Picklable, for DataLoader workers.
    """

    def __init__(self, inner: Any, key: str) -> None:
        self.inner = inner
        self.key = key

    def __call__(self, batch: list[list[Any]]) -> dict[str, Any]:
        if not isinstance(batch, list) or not all(isinstance(row, list) for row in batch):
            raise TypeError(
                "a packing batch must be a list of rows (lists of items), as StreamBatcher "
                f"yields it, got {type(batch).__name__}"
            )
        samples = []
        for row in batch:
            for x in row:
                samples.append(x.tokens(self.key) if isinstance(x, Piece) else x)
        out: dict[str, Any] = self.inner(samples)
        if not self.inner.flatten and out["input_ids"].shape[0] != len(batch):
            raise ValueError(
                f"the batch's {len(batch)} rows came back as {out['input_ids'].shape[0]}: were the "
                "items' token counts the lengths the batcher saw?"
            )
        return out

    def __repr__(self) -> str:
        return f"StreamPackedCollate({self.inner!r})"


def stream_collate(spec: Any, **options: Any) -> Callable[[Any], Any]:
    """The collate for a stream's batches: packed rows for ``Packing``, padded otherwise.

    ``Packing``: ``collate_packed(spec, **options)`` applied to the flattened rows (pieces
    sliced); other specs: ``collate_padded(**options)`` (``pad_id`` is required there).

    >>> from padless import Packing
    >>> out = stream_collate(Packing(capacity=4))([[[1, 2, 3], [4]], ])
    >>> out["input_ids"].tolist(), out["cu_seqlens"].tolist()
    ([[1, 2, 3, 4]], [0, 3, 4])
    """
    form = form_of(spec)
    packed = form is not None and form.packed
    takes = keyword_names(collate_packed)[1:] if packed else keyword_names(collate_padded)
    check_keywords("stream_collate", options, takes)  # [1:]: capacity, from the spec
    if packed:
        key = options.get("key", "input_ids")
        return StreamPackedCollate(collate_packed(spec, **options), key)
    multiple = options.get("multiple_of")
    if form is not None and multiple not in (None, form.multiple_of):
        raise ValueError(
            f"multiple_of={multiple!r:.40} is refused for a stream's batches: a StreamBatcher "
            f"budgets unrounded widths ({spec.describe()}), which rounding up can pass; leave "
            "multiple_of unset (a plan with pad_to_multiple_of: PlanSampler)"
        )
    return collate_padded(**options)


# --------------------------------------------------------------------------- source splits


def _is_hf_iterable(source: Any) -> bool:
    return type(source).__module__.startswith("datasets.") and hasattr(source, "n_shards")


class _Strided:
    """Items ``index, index + count, ...`` of a source (an iterable or a callable giving one).

    Every worker reads the whole source and keeps its share (like ``datasets`` does for a
    source with too few shards); ``set_epoch`` is forwarded.
    """

    def __init__(self, source: Any, index: int, count: int) -> None:
        self.source = source
        self.index = index
        self.count = count

    def set_epoch(self, epoch: int) -> None:
        set_epoch = getattr(self.source, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        src = self.source
        if callable(src) and not hasattr(src, "__iter__"):
            src = src()
        return islice(iter(src), self.index, None, self.count)


# --------------------------------------------------------------------------- dataset


class StreamDataset(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """A torch ``IterableDataset`` of :class:`padless.StreamBatcher` batches, split over workers and ranks.

    Use it with ``DataLoader(ds, batch_size=None, num_workers=k, collate_fn=collate_for(ds, ...))``.
    Each DataLoader worker of each rank batches its own share of the source:

    - a ``datasets.IterableDataset`` is split by its own sharding: ``split_dataset_by_node``
      over the ranks (whole shards when their number divides by the world size), then
      ``datasets`` hands each worker its shards (give it at least ``world_size × k`` shards to
      keep every worker busy); resume is O(buffer);
    - any other source (iterable, or a callable re-creating it) is read in full by every worker,
      each keeping every ``world_size × k``-th item; resume skips from the start (O(position)).

    Resume: ``state_dict()``/``load_state_dict()`` hold the batcher state of this process. With
    workers, use torchdata's ``StatefulDataLoader``: it saves each worker's state with the
    batches the loop received and restores them, so a resumed run gets exactly the batches the
    uninterrupted one would have. Call ``set_epoch(e)`` before each epoch (workers must not be
    persistent, as they take the epoch when they start), and save the epoch with the loader's
    state: a resumed loop starts from it (a state of another epoch than the one set is refused).

    Ranks see different numbers of batches (their shards differ): under ``torch.distributed``
    wrap the loader in :func:`stop_together` so every rank stops at the same step.

    Args:
        source, spec, buffer, length, seed, max_wait: see :class:`padless.StreamBatcher`.
        rank, world_size: this process's rank; by default from ``torch.distributed`` (0 and 1
            when it is not initialized).

    >>> from padless import TokenBudget
    >>> ds = StreamDataset(list(range(1, 9)), TokenBudget(max_tokens=8), buffer=4, length=int)
    >>> sorted(x for batch in torch.utils.data.DataLoader(ds, batch_size=None) for x in batch)
    [1, 2, 3, 4, 5, 6, 7, 8]
    """

    about: ClassVar[dict[str, str]] = {
        **StreamBatcher.about,
        "rank": "this process's rank: its share of the stream",
        "world_size": "how many ranks the stream is split over",
    }
    # a StreamBatcher's word on the samplers' settings, less rank and world_size (taken here)
    keyword_notes: ClassVar[dict[str, str]] = {
        k: note
        for k, note in StreamBatcher.keyword_notes.items()
        if k not in ("rank", "world_size")
    }

    @checks_keywords()
    def __init__(
        self,
        source: Iterable[Any] | Callable[[], Iterable[Any]],
        spec: Any,
        *,
        buffer: int = 10_000,
        length: Callable[[Any], Any] | None = None,
        seed: int = 0,
        max_wait: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        # the batcher's checks, once, in this process
        checked = StreamBatcher(
            [], spec, buffer=buffer, length=length, seed=seed, max_wait=max_wait
        )
        _check_source(source, length)
        auto = dist_kwargs()
        self.rank, self.world_size = check_ranks(
            auto["rank"] if rank is None else rank,
            auto["world_size"] if world_size is None else world_size,
        )
        self.source = source
        self.spec = spec
        self.buffer = buffer
        self.length = length
        self.seed = seed
        self.max_wait = checked.max_wait
        self.epoch = 0
        self._epoch_set = False  # set_epoch was called: a state of another epoch is refused
        self._pending: dict[str, Any] | None = None
        self._batcher: StreamBatcher | None = None
        self._worker: tuple[int, int] | None = None
        self._skips: tuple[tuple[int, int, int], ...] = ()  # (epoch, first, end) rank steps

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_batcher"] = None  # each process builds its own over its share
        state["_worker"] = None
        return state

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration yields (forwarded to the source's ``set_epoch``).

        A state is of one epoch: after ``load_state_dict`` only that epoch may be set until the
        next iteration uses the state, and after ``set_epoch`` only a state of that epoch may
        be loaded (what ``StatefulDataLoader`` does in each worker, after the loop's
        ``set_epoch``). Either mistake is a ``ValueError``: a resume loop must start from the
        epoch saved with the state.
        """
        epoch = check_seed("epoch", epoch)
        _check_epoch(self._pending, epoch, "StreamDataset")
        self.epoch = epoch
        self._epoch_set = True
        # here, in the main process, before DataLoader workers start: a datasets source keeps
        # its epoch in shared memory, which workers setting it at once could corrupt
        set_source_epoch = getattr(self.source, "set_epoch", None)
        if callable(set_source_epoch) and getattr(self.source, "epoch", None) != epoch:
            set_source_epoch(epoch)

    def skip(self, batches: int | None = None, *, steps: tuple[int, int] | None = None) -> None:
        """Leave this rank's loader steps out of training: ``steps=(a, b)`` (the loader's batches
        ``a`` to ``b - 1`` of the current epoch, counted from its start), or the next ``batches``.

        As :meth:`padless.StreamBatcher.skip`: the skipped batches are planned and consumed,
        only not yielded, and every other batch comes in its place; the skip is kept in the
        dataset (and in each worker's state, so a loader's checkpoint carries it). Call it on
        every rank alike (each rank's loader gives one batch per step), before the loader is
        iterated: DataLoader workers take the dataset when they start (each epoch; workers must
        not be persistent), so a skip made while they run reaches the next epoch's, not theirs.

        With ``W`` DataLoader workers the loader takes their batches in turn (torch's
        ``DataLoader`` and torchdata's ``StatefulDataLoader``, ``in_order=True``, the default):
        step ``g`` is worker ``g % W``'s batch ``g // W`` while every worker has batches; a
        worker that has run out is passed over from then on. Each worker leaves out its own
        batches of the range, so:

        - ``b - a`` must be a multiple of ``W`` (then every worker leaves out as many and the
          turns stay aligned): otherwise a ``ValueError`` (here when this process knows ``W``,
          else from the workers at the loader's first batch);
        - the range must end before the epoch's last rounds, where the first worker runs out
          (past that point a worker's end shifts the turns, and no worker knows the others'
          ends ahead): a worker that finds the skip reaching past its end raises a
          ``ValueError`` when it learns its end (when it plans its last round).

        ``batches=n`` needs the loader's position, which this process holds only when it
        iterates the stream itself (``num_workers=0``) or a state was loaded into the dataset
        with ``load_state_dict``: otherwise a ``ValueError`` (skip ``steps=(a, b)`` counted from
        the epoch's start, e.g. from the training loop's step counter). ``num_workers=0`` (or 1)
        has no restriction beyond the batcher's.

        >>> from padless import TokenBudget
        >>> lengths = [5, 3, 9, 3, 5, 1, 8, 9, 2, 5]
        >>> ds = StreamDataset(lengths, TokenBudget(max_tokens=10), buffer=4, length=int)
        >>> every = list(torch.utils.data.DataLoader(ds, batch_size=None))
        >>> ds.skip(steps=(1, 3))
        >>> list(torch.utils.data.DataLoader(ds, batch_size=None)) == [every[0], *every[3:]]
        True
        """
        n, pair = check_skip(batches, steps)
        workers = self._workers_known()
        if pair is None:
            first = self._here(n, workers)
            pair = (first, first + n)
        elif workers is not None and workers > 1 and (pair[1] - pair[0]) % workers:
            raise ValueError(self._unaligned(pair, workers))
        entry = (self.epoch, *pair)
        if entry not in self._skips:
            self._skips = (*self._skips, entry)
        batcher = self._batcher
        if batcher is not None and self._worker == (0, 1):  # this process iterates the stream
            self._apply_skips(batcher, strict=False)

    def _workers_known(self) -> int | None:
        """The DataLoader workers of this rank, where this process knows them (a worker
        process, a loaded state's shard), else None."""
        info = torch.utils.data.get_worker_info()
        if info is not None:
            return int(info.num_workers)
        shard = None if self._pending is None else self._pending.get("shard")
        if isinstance(shard, list) and len(shard) == 2 and isinstance(shard[1], int):
            return max(shard[1] // self.world_size, 1)
        return None

    def _here(self, n: int, workers: int | None) -> int:
        """The loader's position (its next step) for ``skip(batches=n)``."""
        why = None
        position: int | None = None
        batcher = self._batcher
        if workers not in (None, 1):
            why = f"this rank's stream is split over {workers} DataLoader workers, each with its own position"
        elif self._pending is not None:
            position = _state_position(self._pending)
        elif batcher is not None and self._worker == (0, 1) and batcher.epoch == self.epoch:
            live = batcher._live
            if live is not None and live.running:
                position = batcher._position()
        if why is None and position is None:
            why = (
                "this process does not hold the loader's position (with DataLoader workers it "
                "lives in the workers, and a StatefulDataLoader restores it there), or the "
                "state was saved by a padless that did not count the epoch's batches"
            )
        if why is None and position is not None and position < 0:
            why = f"the state loaded is at the end of epoch {self.epoch}"
        if why is not None:
            raise ValueError(
                f"skip(batches={n}) cannot tell where the loader stands: {why}; skip "
                "steps=(a, b) counted from the epoch's start instead (the training loop's step "
                "counter gives them)"
            )
        return int(cast(int, position))

    def _unaligned(self, pair: tuple[int, int], workers: int) -> str:
        a, b = pair
        return (
            f"skip(steps=({a}, {b})) leaves out {b - a} steps of a loader with {workers} "
            f"DataLoader workers: the loader takes the workers' batches in turn, so only a "
            f"multiple of {workers} steps can be left out with every other batch in its place; "
            f"skip steps=({a}, {a + -(-(b - a) // workers) * workers}), or use num_workers=0"
        )

    def _local_skips(self, workers: int, worker: int, epoch: int) -> list[tuple[int, int, int]]:
        """The dataset's skips of ``epoch`` as ``worker``'s batches: step ``g`` is its batch
        ``g // workers`` when ``g % workers == worker`` (refused where the steps are not a
        multiple of ``workers``)."""
        out = []
        for e, a, b in self._skips:
            if e != epoch:
                continue
            if workers > 1 and (b - a) % workers:
                raise ValueError(self._unaligned((a, b), workers))
            lo, hi = -(-(a - worker) // workers), -(-(b - worker) // workers)
            if hi > lo:
                out.append((e, lo, hi))
        return out

    def _apply_skips(self, batcher: StreamBatcher, strict: bool = True) -> None:
        worker, workers = self._worker or (0, 1)
        try:
            local = self._local_skips(workers, worker, batcher.epoch)
        except ValueError:
            if strict:
                raise
            return
        batcher._skips = (*batcher._skips, *(e for e in local if e not in batcher._skips))

    def _guarded(self, batcher: StreamBatcher, it: Iterator[Any]) -> Iterator[Any]:
        """``it``, refusing (when this worker learns where it ends) a skip that reaches past
        its end: from there the loader's turns pass over it, and the steps no longer map to
        ``g % W``, ``g // W``."""
        worker, workers = self._worker or (0, 1)
        epoch = batcher.epoch
        reach = max(  # the end of the rank's steps they skip (a state's are this worker's)
            [b for e, _, b in self._skips if e == epoch]
            + [(hi - 1) * workers + worker + 1 for e, _, hi in batcher._skips if e == epoch]
        )
        checked = False
        for batch in it:
            if not checked:
                checked = self._check_end(batcher, worker, workers, reach)
            yield batch
        if not checked:
            self._check_end(batcher, worker, workers, reach)

    def _check_end(self, batcher: StreamBatcher, worker: int, workers: int, reach: int) -> bool:
        live = batcher._live
        total = None if live is None else live.total
        if total is None:
            return False
        if reach > total * workers + worker:
            raise ValueError(
                f"a skip of rank {self.rank}'s loader steps reaches step {reach - 1}, past where "
                f"DataLoader worker {worker} (of {workers}) runs out: its {total} batches "
                f"end before step {total * workers + worker}, and from there the loader takes "
                "the other workers' batches in turn without it, so the steps the skip names "
                "are not the batches it would leave out; skip steps that end before the "
                "epoch's last rounds, or use num_workers=0"
            )
        return True

    def _shard(self) -> tuple[int, int, int]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return worker, workers, self.rank * workers + worker

    def _make(self) -> StreamBatcher:
        worker, workers, shard = self._shard()
        if self._batcher is not None and self._worker == (worker, workers):
            return self._batcher
        total = self.world_size * workers
        source: Any = self.source
        if _is_hf_iterable(source):
            if self.world_size > 1:
                from datasets.distributed import split_dataset_by_node

                source = split_dataset_by_node(source, rank=self.rank, world_size=self.world_size)
            # datasets gives each DataLoader worker its own shards when iterated in one
        elif total > 1:
            source = _Strided(source, shard, total)
        batcher = StreamBatcher(
            source,
            self.spec,
            buffer=self.buffer,
            length=self.length,
            seed=self.seed,
            max_wait=self.max_wait,
        )
        batcher._shard = (shard, total)
        self._batcher, self._worker = batcher, (worker, workers)
        return batcher

    def __iter__(self) -> Iterator[Any]:
        batcher = self._make()
        batcher.set_epoch(self.epoch)
        if self._pending is not None:
            batcher.load_state_dict(self._pending)
            self._pending = None
        self._apply_skips(batcher)  # refused here, before any batch, if unaligned
        it = iter(batcher)
        workers = (self._worker or (0, 1))[1]
        if workers > 1 and any(e == batcher.epoch for e, _, _ in batcher._skips):
            return self._guarded(batcher, it)
        return it

    def state_dict(self) -> dict[str, Any]:
        """The state of this process's batcher (a worker's, inside a DataLoader worker)."""
        if self._pending is not None:
            return copy.deepcopy(self._pending)
        batcher = self._make()
        if batcher.epoch != self.epoch:
            batcher.set_epoch(self.epoch)
        self._apply_skips(batcher, strict=False)
        return batcher.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state`` at the next iteration (checked then)."""
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        epoch = check_seed("state['epoch']", state.get("epoch"))
        shard = state.get("shard")
        if isinstance(shard, list) and len(shard) == 2 and all(isinstance(x, int) for x in shard):
            # shard = rank * workers + worker of world_size * workers: the rank and world size
            # it was saved at must be this dataset's (the workers are checked in each worker)
            per_rank, rest = divmod(shard[1], self.world_size)
            if rest or per_rank == 0 or shard[0] // per_rank != self.rank:
                raise ValueError(
                    f"state was saved by the stream reading shard {shard[0]} of {shard[1]} (one "
                    "per rank and DataLoader worker), which is not a shard of this StreamDataset "
                    f"(rank {self.rank} of world_size {self.world_size}): a stream resumes only "
                    "on the shard it read, at the same world size and number of workers; resume "
                    "at the world size it was saved at, or plan the corpus with a PlanSampler, "
                    "which resumes at any world size"
                )
        self._make()._check_settings(state)  # the settings here; the shard in each worker
        if self._epoch_set:
            _check_epoch(state, self.epoch, "StreamDataset", loading=True)
        self.epoch = epoch
        self._pending = copy.deepcopy(dict(state))


# --------------------------------------------------------------------------- distributed stop


class StopTogether:
    """Iterate ``loader`` so that every rank of ``torch.distributed`` stops at the same step.

    Every ``every`` steps the ranks agree, by one ``all_reduce`` of one int (MIN), on how many
    batches all of them still have: each rank pulls up to ``every`` batches ahead, and all
    deliver the smallest count; when a rank runs out, every rank stops after that many. Batches
    a rank pulled but could not deliver are counted in ``left_over``. Without an initialized
    process group (or with one process) it is ``loader`` itself.

    ``state_dict()``/``load_state_dict()`` forward to the loader (a ``StatefulDataLoader``),
    giving its state at the batches delivered so far: with ``every > 1`` the loader's state is
    saved before each batch pulled ahead (one ``loader.state_dict()`` per batch).

    Cost: one all_reduce of one int per ``every`` steps (benchmarks/bench_streams.py measures
    it), ``every`` batches held ahead.
    """

    def __init__(self, loader: Iterable[Any], *, every: int = 1, group: Any = None) -> None:
        if isinstance(loader, (str, bytes)) or not hasattr(loader, "__iter__"):
            raise TypeError(
                "loader must be an iterable of batches (a DataLoader, a StatefulDataLoader...), "
                f"got {type(loader).__name__} {loader!r:.60}"
            )
        self.loader = loader
        self.every = positive("every", every)
        self.group = group
        self.left_over = 0
        self.steps = 0
        self._states: list[Any] = []
        self._next = 0

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def _distributed(self) -> bool:
        dist = torch.distributed
        return bool(
            dist.is_available() and dist.is_initialized() and dist.get_world_size(self.group) > 1
        )

    def __iter__(self) -> Iterator[Any]:
        self.left_over = 0
        self.steps = 0
        if not self._distributed():
            for batch in self.loader:
                self.steps += 1
                yield batch
            return
        dist = torch.distributed
        device = torch.device("cpu")
        if dist.get_backend(self.group) == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        snapshot = self.every > 1 and callable(getattr(self.loader, "state_dict", None))
        it = iter(self.loader)
        ended = False
        while not ended:
            queue: list[Any] = []
            states: list[Any] = []
            while len(queue) < self.every:
                state = self.loader.state_dict() if snapshot else None  # type: ignore[attr-defined]
                try:
                    batch = next(it)
                except StopIteration:
                    ended = True
                    break
                queue.append(batch)
                states.append(state)
            count = torch.tensor([len(queue)], dtype=torch.int64, device=device)
            dist.all_reduce(count, op=dist.ReduceOp.MIN, group=self.group)
            agreed = int(count.item())
            self._states, self._next = states[:agreed], 0
            for batch in queue[:agreed]:
                self._next += 1
                self.steps += 1
                yield batch
            if agreed < self.every:
                self.left_over = len(queue) - agreed
                ended = True
        self._states, self._next = [], 0

    def state_dict(self) -> dict[str, Any]:
        """The loader's state at the batches delivered so far."""
        if self._next < len(self._states) and self._states[self._next] is not None:
            return copy.deepcopy(self._states[self._next])
        return self.loader.state_dict()  # type: ignore[attr-defined, no-any-return]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Forward to the loader."""
        self.loader.load_state_dict(state)  # type: ignore[attr-defined]


def stop_together(loader: Iterable[Any], *, every: int = 1, group: Any = None) -> StopTogether:
    """Wrap ``loader`` so every rank stops at the same step (see :class:`StopTogether`).

    >>> [b for b in stop_together([[1], [2]])]  # no process group: the loader as it is
    [[1], [2]]
    """
    every = check_int("every", every, minimum=1) or 1
    return StopTogether(loader, every=every, group=group)
