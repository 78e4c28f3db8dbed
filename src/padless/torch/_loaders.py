"""DataLoader helpers: resumable loading, LM stream tensors, multi-corpus datasets."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from ..core._check import check_bool
from ..sampling.mixing import MixtureSampler
from ..streams.lm import LMStream

__all__ = ["StatefulLoader", "lm_tensors", "mixture_dataset"]


# --------------------------------------------------------------------------- resumable loading


class StatefulLoader:
    """Wrap a DataLoader whose ``batch_sampler`` is a padless sampler, and count what the loop got.

    A DataLoader with workers pulls batches from the sampler ahead of the training loop, so the
    sampler's own count runs ahead. This wrapper counts the batches actually delivered and saves
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
        if not hasattr(sampler, "state_dict") or not hasattr(sampler, "load_state_dict"):
            raise TypeError(
                "loader.batch_sampler must be a padless sampler (with state_dict), got "
                f"{type(sampler).__name__}"
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
        stream: an ``LMStream``.
        pin_memory: allocate outputs in pinned memory; needs CUDA or another accelerator.

    Cost: as iterating the stream; pinning adds the host allocator's bookkeeping per batch.

    >>> import numpy as np
    >>> from padless.streams.lm import LMStream
    >>> s = LMStream(np.arange(64), batch_size=2, num_steps=4)
    >>> x, y = next(lm_tensors(s))
    >>> x.dtype, tuple(x.shape), bool((y == x + 1).all())
    (torch.int64, (2, 4), True)
    """
    if not isinstance(stream, LMStream):
        raise TypeError(f"stream must be a padless LMStream, got {type(stream).__name__}")
    pin = check_bool("pin_memory", pin_memory)
    if pin and not _pinned_memory_available():
        raise ValueError(
            "pin_memory=True needs CUDA or another accelerator backend, got pin_memory=True "
            "on a machine without one"
        )
    return _lm_batches(stream, pin)


def _lm_batches(stream: Any, pin: bool) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The generator behind :func:`lm_tensors`, given checked arguments."""
    if not pin:
        for x, y in stream:
            yield torch.from_numpy(x), torch.from_numpy(y)
        return
    made: list[torch.Tensor] = []

    def pinned_empty(shape: tuple[int, int, int], dtype: np.dtype) -> np.ndarray:
        pair = torch.empty(shape, dtype=_LM_TORCH_DTYPES[dtype.name], pin_memory=True)
        made.append(pair)
        return pair.numpy()

    for _x, _y in stream.batches(pinned_empty):
        pair = made.pop()
        yield pair[0], pair[1]


def _pinned_memory_available() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return True
    return bool(torch.cuda.is_available())


# --------------------------------------------------------------------------- multi-corpus mixtures


def mixture_dataset(
    datasets: Mapping[str, Any], sampler: Any = None
) -> torch.utils.data.ConcatDataset[Any]:
    """Build the ``ConcatDataset`` whose indices are a ``MixtureSampler``'s global indices.

    Corpora are concatenated in the sampler's order (its ``samplers`` dict's order), or in the
    dict's order without a sampler. With a sampler, each dataset's length must equal its corpus's
    size, so a mismatch fails here rather than as wrong examples later.

    Args:
        datasets: dict corpus name → map-style dataset (``__getitem__`` and ``__len__``).
        sampler: an optional :class:`padless.sampling.mixing.MixtureSampler` to check names and sizes.

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
    return torch.utils.data.ConcatDataset([datasets[n] for n in names])
