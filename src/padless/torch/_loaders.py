"""DataLoader helpers: resumable loading, LM stream tensors, multi-corpus datasets."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from ..core._check import check_bool
from ..planners.packing import PieceDataset
from ..sampling.mixing import MixtureSampler, split_codes
from ..sampling.placed import refuse_placements
from ..streams.lm import LMStream

__all__ = ["MixtureDataset", "StatefulLoader", "lm_tensors", "mixture_dataset"]


# --------------------------------------------------------------------------- resumable loading


class StatefulLoader:
    """Wrap a DataLoader whose ``batch_sampler`` is a padless sampler, and count what the loop got.

    Or whose ``sampler`` is, with ``batch_size=None``, where each of the sampler's items is a
    whole batch (``padless.lhotse.CutSampler``'s CutSets). A DataLoader with workers pulls
    batches from the sampler ahead of the training loop, so the sampler's own count runs ahead. This wrapper counts the batches actually delivered and saves
    that position, so a resumed run continues with exactly the batches the uninterrupted run would
    have received next.

    >>> from torch.utils.data import DataLoader
    >>> from padless import TokenBudgetSampler
    >>> sampler = TokenBudgetSampler([3, 1, 2, 5], max_tokens=6, seed=0)
    >>> loader = StatefulLoader(DataLoader(range(4), batch_sampler=sampler))
    >>> first = next(iter(loader))
    >>> loader.state_dict()["position"]
    1
    """

    def __init__(self, loader: Any) -> None:
        sampler: Any = getattr(loader, "batch_sampler", None)
        where = "loader.batch_sampler"
        if sampler is None and getattr(loader, "batch_size", 1) is None:
            # DataLoader(dataset, sampler=..., batch_size=None): each of the sampler's items
            # is a whole batch (padless.lhotse.CutSampler's CutSets, as lhotse's samplers)
            sampler, where = getattr(loader, "sampler", None), "loader.sampler"
        refuse_placements(sampler, f"StatefulLoader's {where}")
        if not hasattr(sampler, "state_dict") or not hasattr(sampler, "load_state_dict"):
            raise TypeError(
                "loader.batch_sampler (or loader.sampler with batch_size=None) must be a "
                f"padless sampler (with state_dict), got {type(sampler).__name__}"
            )
        self.loader = loader
        self.sampler = sampler
        self.delivered = 0
        self._epoch = getattr(sampler, "epoch", None)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        self.delivered = 0
        self._epoch = getattr(self.sampler, "epoch", None)
        for batch in self.loader:
            self.delivered += 1
            yield batch

    def set_epoch(self, epoch: int) -> None:
        """Forward to the sampler's ``set_epoch``."""
        self.sampler.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Return the sampler state at the batches delivered to the loop.

        Also right after ``set_epoch`` (a start-of-epoch checkpoint): the new epoch has
        delivered nothing yet, so the state is that epoch's start.
        """
        if getattr(self.sampler, "epoch", None) != self._epoch:
            return dict(self.sampler.state_dict())  # no batch of this epoch delivered yet
        return dict(self.sampler.state_dict(consumed=self.delivered))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the sampler from ``state`` at the next iteration."""
        self.sampler.load_state_dict(state)
        self.delivered = 0
        self._epoch = getattr(self.sampler, "epoch", None)


# --------------------------------------------------------------------------- LM streams
_LM_TORCH_DTYPES = {"int64": torch.int64, "int32": torch.int32, "uint16": torch.uint16}


def lm_tensors(
    stream: Any, *, pin_memory: bool = False
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield the ``(x, y)`` batches of a :class:`padless.streams.lm.LMStream` as CPU tensors.

    Without pinning the tensors share the stream's fresh numpy arrays (``torch.from_numpy``, no
    copy). With ``pin_memory=True`` each batch is written by the compiled gather straight into
    page-locked tensors (one ``torch.empty((2, rows, cols), pin_memory=True)`` per batch, x and y
    its halves, recycled by torch's caching host allocator), so ``x.to("cuda",
    non_blocking=True)`` overlaps with compute and no extra copy is made. The stream's position
    advances as with plain iteration, so ``stream.state_dict()`` works unchanged.

    Args:
        stream: an ``LMStream``, or a ``MixtureSampler`` of LM streams.
        pin_memory: allocate outputs in pinned memory; needs CUDA or another accelerator.

    Cost: as iterating the stream; pinning adds the host allocator's bookkeeping per batch.

    >>> import numpy as np
    >>> from padless.streams.lm import LMStream
    >>> s = LMStream(np.arange(64), batch_size=2, num_steps=4)
    >>> x, y = next(lm_tensors(s))
    >>> x.dtype, tuple(x.shape), bool((y == x + 1).all())
    (torch.int64, (2, 4), True)
    """
    if not isinstance(stream, LMStream) and getattr(stream, "yields", None) != "tokens":
        raise TypeError(
            "stream must be a padless LMStream or a MixtureSampler of LM streams, got "
            f"{type(stream).__name__}"
        )
    pin = check_bool("pin_memory", pin_memory)
    if pin and not _pinned_memory_available():
        raise ValueError(
            "pin_memory=True needs CUDA or another accelerator backend, got pin_memory=True "
            "on a machine without one"
        )
    return _lm_batches(stream, pin)


def _lm_batches(stream: Any, pin: bool) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The generator behind :func:`lm_tensors`, given checked arguments."""
    return tensor_pairs(stream.batches, pin)


def tensor_pairs(
    produce: Callable[[Any], Iterator[tuple[np.ndarray, np.ndarray]]], pin: bool
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """An LM stream's ``(x, y)`` batches as tensors: ``produce(empty)`` iterates the stream's
    numpy pairs (``empty`` None: numpy allocates; else each pair is the two halves of
    ``empty(shape, dtype)``); with ``pin``, written by the compiled gather straight into one
    pinned ``(2, rows, columns)`` tensor per batch."""
    if not pin:
        for x, y in produce(None):
            yield torch.from_numpy(x), torch.from_numpy(y)
        return
    made: list[torch.Tensor] = []

    def pinned_empty(shape: tuple[int, int, int], dtype: np.dtype) -> np.ndarray:
        pair = torch.empty(shape, dtype=_LM_TORCH_DTYPES[dtype.name], pin_memory=True)
        made.append(pair)
        return pair.numpy()

    for _x, _y in produce(pinned_empty):
        pair = made.pop()
        yield pair[0], pair[1]


def _pinned_memory_available() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return True
    return bool(torch.cuda.is_available())


# --------------------------------------------------------------------------- multi-corpus mixtures


class MixtureDataset(torch.utils.data.ConcatDataset):  # type: ignore[type-arg]
    """The corpora's datasets served at a :class:`~padless.sampling.mixing.MixtureSampler`'s
    codes: a ``ConcatDataset`` (plain index ``offset_k + i`` is item ``i`` of corpus ``k``)
    that also serves the codes of corpora that warm up, split or decompose their sequences
    (each through its spec's ``pieces``, or a dataset that serves codes itself: a
    ``TokenDataset`` planned by that corpus's sampler). A batch of the mixture is of one
    corpus: ``__getitems__`` hands it whole to that corpus's dataset (a ``TokenDataset`` then
    builds the batch in one pass).
    """

    def __init__(self, served: list[Any], offsets: tuple[int, ...], sizes: tuple[int, ...],
                 coded: bool) -> None:  # fmt: skip
        super().__init__(served)
        self.served = served
        self.offsets, self.sizes, self.coded = offsets, sizes, coded

    def with_served(self, served: list[Any]) -> MixtureDataset:
        """The same mixture over other datasets of the corpora (the Trainer's checked ones)."""
        return MixtureDataset(served, self.offsets, self.sizes, self.coded)

    def _split(self, codes: Any) -> tuple[np.ndarray, np.ndarray]:
        return split_codes(codes, self.offsets, self.sizes, self.coded)

    def __getitem__(self, index: Any) -> Any:
        if not self.coded:  # plain indices: the ConcatDataset's own look-up, no array per item
            return super().__getitem__(index)
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"index must be an int, got {type(index).__name__} {index!r:.40}")
        k, local = self._split([int(index)])
        return self.served[int(k[0])][int(local[0])]

    def __getitems__(self, indices: Any) -> Any:
        k, local = self._split(indices)
        if k.size == 0:
            return []
        if not (k == k[0]).all():  # not one of the mixture's batches: item by item
            return [self.served[int(c)][int(i)] for c, i in zip(k, local, strict=True)]
        dataset = self.served[int(k[0])]
        many = getattr(dataset, "__getitems__", None)
        if many is not None:
            return many(local.tolist())
        return [dataset[i] for i in local.tolist()]


def mixture_dataset(
    datasets: Mapping[str, Any], sampler: Any = None
) -> torch.utils.data.ConcatDataset[Any]:
    """Build the ``ConcatDataset`` whose indices are a ``MixtureSampler``'s global indices.

    Corpora are concatenated in the sampler's order (its ``samplers`` dict's order), or in the
    dict's order without a sampler. With a sampler, each dataset's length must equal its corpus's
    size, so a mismatch fails here rather than as wrong examples later, and the result is a
    :class:`MixtureDataset`: it serves the mixture's codes too (corpora that warm up, split or
    decompose their sequences: each plain dataset of such a corpus is served through its
    spec's ``pieces``), and hands each batch whole to its corpus's dataset (a ``TokenDataset``
    per corpus, planned by that corpus's sampler, builds it in one pass).

    Args:
        datasets: dict corpus name → map-style dataset (``__getitem__`` and ``__len__``).
        sampler: an optional :class:`padless.sampling.mixing.MixtureSampler` to check names and
            sizes and to serve its codes.

    Cost: O(number of corpora); nothing is copied.

    >>> import torch
    >>> from padless.sampling.mixing import MixtureSampler
    >>> from padless.sampling.shortcuts import TokenBudgetSampler
    >>> mix = MixtureSampler({"a": TokenBudgetSampler([2, 3], max_tokens=8),
    ...                       "b": TokenBudgetSampler([4], max_tokens=8)})
    >>> ds = mixture_dataset({"b": ["b0"], "a": ["a0", "a1"]}, mix)
    >>> [ds[i] for i in range(3)]
    ['a0', 'a1', 'b0']
    """
    if not isinstance(datasets, Mapping):
        raise TypeError(
            f"datasets must be a dict corpus name -> dataset, got {type(datasets).__name__}"
        )
    if sampler is None:
        names = list(datasets)
        if not names:
            raise ValueError("datasets must hold at least one corpus, got an empty dict")
    else:
        if not isinstance(sampler, MixtureSampler):
            raise TypeError(
                "sampler must be a padless MixtureSampler or None, got "
                f"{type(sampler).__name__} {sampler!r:.60}"
            )
        names = list(sampler.names)
        missing = [n for n in names if n not in datasets]
        unknown = [n for n in datasets if n not in names]
        if missing or unknown:
            raise ValueError(
                f"datasets must have one entry per corpus of the sampler {names}; "
                f"missing {missing}, unknown {unknown}"
            )
        for name, size in zip(names, sampler.corpus_sizes, strict=True):
            if len(datasets[name]) != size:
                raise ValueError(
                    f"datasets[{name!r}] must have the {size} examples its sampler plans over, "
                    f"got {len(datasets[name])}"
                )
        served = [_served(n, datasets[n], sampler.samplers[n]) for n in names]
        coded = sampler.needs_pieces() is not None
        return MixtureDataset(served, sampler.corpus_offsets, sampler.corpus_sizes, coded)
    return torch.utils.data.ConcatDataset([datasets[n] for n in names])


def _served(name: str, dataset: Any, sub: Any) -> Any:
    """Corpus ``name``'s dataset as it serves its sampler's values: through the spec's pieces
    where the sampler yields codes (unless the dataset serves them itself)."""
    if sub.spec.needs_pieces(sub.sizes) is None or isinstance(dataset, PieceDataset):
        return dataset
    if getattr(dataset, "serves_codes", False):  # a TokenDataset: it reads its plan's codes
        if dataset.plan is not sub:
            raise ValueError(
                f"datasets[{name!r}] is a {type(dataset).__name__} planned by another sampler "
                f"than the mixture's corpus {name!r}: build it with "
                f"plan=mixture.samplers[{name!r}]"
            )
        return dataset
    return sub.spec.pieces(dataset, num_sequences=int(sub.sizes.shape[0]))
