"""PyTorch glue for LM streams: :class:`LMDataset`, an ``LMStream`` through a DataLoader with workers.

Re-exported by :mod:`padless.torch`. This module imports torch; :mod:`padless.streams` does not.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from ..core._check import check_bool
from ..sampling.mixing import MixtureSampler
from ..streams.lm import LMStream
from ._loaders import _pinned_memory_available, tensor_pairs

__all__ = ["LMDataset"]

#: The keys of an :class:`LMDataset` state besides the stream's own (``"stream"``).
SHARE_KEYS = ("worker", "workers", "next")


def _worker() -> tuple[int, int]:
    """``(worker id, number of workers)`` of this process's DataLoader (``(0, 1)`` outside one)."""
    info = torch.utils.data.get_worker_info()
    return (0, 1) if info is None else (int(info.id), int(info.num_workers))


def _int(state: Mapping[str, Any], key: str, least: int) -> int:
    value = state.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"state[{key!r}] must be an int >= {least}, got {value!r:.60}")
    return int(value)


class LMDataset(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """An :class:`padless.LMStream` as a torch ``IterableDataset`` of ``(x, y)`` tensors, for a
    DataLoader with or without workers, resumable by torchdata's ``StatefulDataLoader``.

    Use it as ``DataLoader(LMDataset(stream), batch_size=None, num_workers=k)`` (or
    ``StatefulDataLoader``): the loop receives exactly the batches ``padless.torch.lm_tensors``
    yields, in the same order, whatever ``k``. (Handing the stream itself to a DataLoader fails in
    a worker with ``'LMStream' object is not subscriptable``: torch takes it for a map-style
    dataset.)

    Workers: with ``k`` workers, worker ``w`` yields this rank's batches ``w, w + k, w + 2k, ...``
    of the iteration, gathering only those (the stream passes over the others in O(1)). Both
    loaders send task ``i`` of an iteration to worker ``i mod k`` and deliver results in task order
    (``in_order=True``, the default); a worker that has run out answers its next task with a stop
    that the loader passes over, so when the batch count is not a multiple of ``k`` the epoch
    still ends exactly after its last batch.

    Resume: ``state_dict()`` / ``load_state_dict()`` hold the stream's state (``"stream"``) at the
    last batch this process yielded, and its share: ``"worker"`` of ``"workers"``, and ``"next"``,
    the steps from that position to its next batch. ``StatefulDataLoader`` saves each worker's
    state with the batches the loop received and restores it in that worker: a fresh loader
    loading ``loader.state_dict()`` delivers exactly the rest of the epoch. A state of
    ``num_workers=0`` (``"workers": 1``) is the rank's position and loads at any number of
    workers; a worker's state loads only in that worker of a loader with as many (a
    ``ValueError`` otherwise): :meth:`rank_state` turns a loader's state into the rank's position,
    which loads anywhere. Workers must not be persistent: they take the epoch when they start.

    ``set_epoch(e)`` forwards to the stream (call it before each epoch, before iterating the
    loader); as for the stream, a resumed loop starts from the epoch saved with the state.

    Args:
        stream: an ``LMStream`` (its rank, world size, mode and tail policy as it has them), or
            a ``MixtureSampler`` of LM streams (its batches, each at the mixture's step).
        pin_memory: gather each batch straight into pinned memory, as ``lm_tensors`` does (needs
            CUDA or another accelerator; ``num_workers=0`` only: with workers pass
            ``pin_memory=True`` to the DataLoader, which pins in the main process).

    Cost: per batch as the stream's; a worker passes over the other workers' batches in O(1)
    each. A state is O(1); loading one is O(1), no replay.

    >>> import numpy as np
    >>> from padless import LMStream
    >>> ds = LMDataset(LMStream(np.arange(64), batch_size=2, num_steps=4, seed=0))
    >>> loader = torch.utils.data.DataLoader(ds, batch_size=None)
    >>> x, y = next(iter(loader))
    >>> x.dtype, tuple(x.shape), bool((y == x + 1).all())
    (torch.int64, (2, 4), True)
    """

    def __init__(self, stream: LMStream | MixtureSampler, *, pin_memory: bool = False) -> None:
        if not isinstance(stream, LMStream) and getattr(stream, "yields", None) != "tokens":
            raise TypeError(
                "stream must be a padless LMStream or a MixtureSampler of LM streams, got "
                f"{type(stream).__name__}"
            )
        self.pin_memory = check_bool("pin_memory", pin_memory)
        if self.pin_memory and not _pinned_memory_available():
            raise ValueError(
                "pin_memory=True needs CUDA or another accelerator backend, got pin_memory=True "
                "on a machine without one"
            )
        self.stream = stream
        self._share = (0, 1)  # (worker, workers) of the running or last iteration
        self._first = 0  # its first step (counted from its start)
        self._yielded = 0  # batches it yielded
        self._loaded: int | None = None  # a loaded state's first step for the next iteration

    @property
    def epoch(self) -> int:
        """The stream's epoch."""
        return self.stream.epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration yields (the stream's ``set_epoch``)."""
        self.stream.set_epoch(epoch)

    def __len__(self) -> int:
        """Batches this rank yields in the next iteration (over all workers): ``len(stream)``."""
        return len(self.stream)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        worker, workers = _worker()
        if self.pin_memory and torch.utils.data.get_worker_info() is not None:
            raise ValueError(
                "pin_memory=True pins in this process, but LMDataset is iterated in a DataLoader "
                "worker: pass pin_memory=True to the DataLoader instead (it pins in the main "
                "process), got LMDataset(pin_memory=True)"
            )
        first = worker if self._loaded is None else self._loaded
        self._loaded = None
        self._share, self._first, self._yielded = (worker, workers), first, 0
        return self._batches(first, workers)

    def _batches(self, first: int, every: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        def share(empty: Any) -> Iterator[tuple[np.ndarray, np.ndarray]]:
            return self.stream._share(first, every, empty)

        for pair in tensor_pairs(share, self.pin_memory):
            self._yielded += 1
            yield pair

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The stream's state at the last batch this process yielded, with its share."""
        worker, workers = self._share
        if self._loaded is not None:  # loaded, not yet iterated
            nxt = self._loaded
        else:
            nxt = workers - 1 if self._yielded else self._first
        return {
            "stream": self.stream.state_dict(),
            "worker": worker,
            "workers": workers,
            "next": nxt,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state`` at the next iteration (checked here; the input is not changed).

        A worker's state (``"workers"`` > 1) loads only in that worker of a loader with as many
        workers; a ``num_workers=0`` state loads anywhere.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        stream_state = state.get("stream")
        if not isinstance(stream_state, Mapping):
            raise ValueError(
                "state['stream'] must be the stream's state (a dict), got "
                f"{stream_state!r:.60}: was it saved by an LMDataset?"
            )
        workers = _int(state, "workers", 1)
        worker = _int(state, "worker", 0)
        nxt = _int(state, "next", 0)
        if worker >= workers or nxt >= workers:
            raise ValueError(
                f"state['worker'] and state['next'] must be < state['workers']={workers}, got "
                f"{worker} and {nxt}"
            )
        here = _worker()
        if workers > 1 and (worker, workers) != here:
            where = "the main process" if here[1] == 1 else f"worker {here[0]} of {here[1]}"
            raise ValueError(
                f"state was saved by DataLoader worker {worker} of num_workers={workers}, and is "
                f"loaded in {where}: a worker's state resumes only in its worker, with as many "
                "workers (StatefulDataLoader restores each one there). To resume with another "
                "number of workers, load LMDataset.rank_state(loader.state_dict()) (the rank's "
                "position) into the dataset before building the loader"
            )
        saved_world = stream_state.get("world_size")
        if workers > 1 and saved_world != self.stream.world_size:
            raise ValueError(
                f"state was saved by DataLoader worker {worker} of num_workers={workers} at "
                f"world_size={saved_world!r:.20}, and is loaded at world_size="
                f"{self.stream.world_size}: a worker's state is its own share's position, not the "
                "rank's, which is all another world size can resume from. Load "
                "LMDataset.rank_state(loader.state_dict()) (the rank's position) into the "
                "dataset before building the loader"
            )
        stream = self.stream
        before = dict(stream.__dict__)
        try:
            first = self._load_stream(dict(stream_state), nxt, workers)
        except BaseException:
            stream.__dict__.clear()
            stream.__dict__.update(before)
            raise
        self._loaded = first if workers > 1 else None

    def _load_stream(self, state: dict[str, Any], nxt: int, workers: int) -> int:
        """Load a (checked) share's stream state; return the share's first step from there.

        When ``set_epoch`` chose the next epoch before the load (what ``StatefulDataLoader``
        does in a worker), a worker whose share of the saved epoch is done goes on with the
        chosen epoch; the loader's worker cycle goes on from where the epoch ended, so the share
        is counted on from there. A share not done is the stream's refusal (the rest of its
        epoch would be skipped).
        """
        stream = self.stream
        given = stream._epoch_given
        if workers == 1 or given is None or given == state.get("epoch"):
            stream.load_state_dict(state)
            return nxt
        stream._epoch_given = None  # the share's rest of the saved epoch
        try:
            stream.load_state_dict(state)
            left, end = len(stream), stream._end_position()
        finally:
            stream._epoch_given = given
        if nxt < left:
            stream.load_state_dict(state)  # refused: the rest of the epoch would be skipped
            return nxt  # pragma: no cover - the stream refuses
        stream.load_state_dict({**state, "position": end})
        return (nxt - left) % workers

    @staticmethod
    def rank_state(loader_state: Mapping[str, Any]) -> dict[str, Any]:
        """The rank's position in a ``StatefulDataLoader``'s state over an :class:`LMDataset`,
        as a ``num_workers=0`` state: it loads into an ``LMDataset`` iterated with any number of
        workers (load it before building the loader).

        The loader delivers in order, so the state of the worker that delivered the last batch
        holds the rank's position: the furthest of the workers' states. Needs the loader's
        default ``snapshot_every_n_steps=1`` (a state that would replay steps is refused).

        >>> import numpy as np
        >>> from padless import LMStream
        >>> ds = LMDataset(LMStream(np.arange(64), batch_size=2, num_steps=4))
        >>> LMDataset.rank_state({"dataset_state": ds.state_dict()})["workers"]
        1
        """
        if not isinstance(loader_state, Mapping):
            raise TypeError(
                "loader_state must be a StatefulDataLoader's state_dict(), got "
                f"{type(loader_state).__name__}"
            )
        if "_snapshot" in loader_state:
            since = loader_state.get("_steps_since_snapshot", 0)
            if since:
                raise ValueError(
                    f"loader_state is {since} batches past its last snapshot (a "
                    "StatefulDataLoader with snapshot_every_n_steps > 1): its position cannot be "
                    "told without replaying them; save with snapshot_every_n_steps=1"
                )
            workers = loader_state["_snapshot"].get("_worker_snapshots", {})
            states = [w.get("dataset_state") for w in workers.values()]
        else:
            states = [loader_state.get("dataset_state")]
        shares = []
        for s in states:
            stream = s.get("stream") if isinstance(s, Mapping) else None
            if not isinstance(stream, Mapping) or not isinstance(stream.get("position"), int):
                raise ValueError(
                    "loader_state must be the state of a loader over an LMDataset, got a "
                    f"dataset state {s!r:.80}"
                )
            shares.append(stream)
        if not shares or len({(s.get("epoch"), s.get("fingerprint")) for s in shares}) != 1:
            raise ValueError(
                "loader_state's workers must hold states of one stream and epoch, got "
                f"{[(s.get('epoch'), s.get('fingerprint')) for s in shares]}"
            )
        furthest = max(shares, key=lambda s: int(s["position"]))
        return {"stream": dict(furthest), "worker": 0, "workers": 1, "next": 0}

    def __repr__(self) -> str:
        return f"LMDataset({self.stream!r}, pin_memory={self.pin_memory})"
