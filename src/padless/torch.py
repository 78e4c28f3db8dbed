"""PyTorch glue: collate functions and DataLoader helpers. The only padless module that imports torch."""

from __future__ import annotations

import torch

__all__: list[str] = []
_TORCH_VERSION = torch.__version__


# --------------------------------------------------------------------------- LM streams
# Self-contained imports so this section does not depend on edits at the top of the file.
from collections.abc import Iterator as _Iterator  # noqa: E402
from typing import Any as _Any  # noqa: E402

import numpy as _np  # noqa: E402

_LM_TORCH_DTYPES = {"int64": torch.int64, "int32": torch.int32, "uint16": torch.uint16}


def lm_tensors(
    stream: _Any, *, pin_memory: bool = False
) -> _Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield the ``(x, y)`` batches of a :class:`padless.stream.LMStream` as CPU tensors.

    Without pinning the tensors share the stream's fresh numpy arrays (``torch.from_numpy``, no
    copy). With ``pin_memory=True`` each batch is written by the compiled gather straight into
    page-locked tensors (``torch.empty(..., pin_memory=True)``, recycled by torch's caching host
    allocator), so ``x.to("cuda", non_blocking=True)`` overlaps with compute and no extra copy is
    made. The stream's position advances as with plain iteration, so ``stream.state_dict()``
    works unchanged.

    Args:
        stream: an ``LMStream``.
        pin_memory: allocate outputs in pinned memory; needs CUDA or another accelerator.

    Cost: as iterating the stream; pinning adds the host allocator's bookkeeping per batch.

    >>> import numpy as np
    >>> from padless.stream import LMStream
    >>> s = LMStream(np.arange(64), batch_size=2, num_steps=4)
    >>> x, y = next(lm_tensors(s))
    >>> x.dtype, tuple(x.shape), bool((y == x + 1).all())
    (torch.int64, (2, 4), True)
    """
    from ._check import check_bool as _check_bool
    from .stream import LMStream

    if not isinstance(stream, LMStream):
        raise TypeError(f"stream must be a padless LMStream, got {type(stream).__name__}")
    pin = _check_bool("pin_memory", pin_memory)
    if pin and not _pinned_memory_available():
        raise ValueError(
            "pin_memory=True needs CUDA or another accelerator backend, got pin_memory=True "
            "on a machine without one"
        )
    if not pin:
        for x, y in stream:
            yield torch.from_numpy(x), torch.from_numpy(y)
        return
    made: list[torch.Tensor] = []

    def pinned_empty(shape: tuple[int, int], dtype: _np.dtype) -> _np.ndarray:
        tensor = torch.empty(shape, dtype=_LM_TORCH_DTYPES[dtype.name], pin_memory=True)
        made.append(tensor)
        return tensor.numpy()

    for _x, _y in stream._iter_with(pinned_empty):
        tx, ty = made
        made.clear()
        yield tx, ty


def _pinned_memory_available() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return True
    return bool(torch.cuda.is_available())


# --------------------------------------------------------------------------- multi-corpus mixtures
# Self-contained imports so this section does not depend on edits at the top of the file.
from collections.abc import Mapping as _Mapping  # noqa: E402


def mixture_dataset(
    datasets: _Mapping[str, _Any], sampler: _Any = None
) -> torch.utils.data.ConcatDataset[_Any]:
    """Build the ``ConcatDataset`` whose indices are a ``MixtureSampler``'s global indices.

    Corpora are concatenated in the sampler's order (its ``samplers`` dict's order), or in the
    dict's order without a sampler. With a sampler, each dataset's length must equal its corpus's
    size, so a mismatch fails here rather than as wrong examples later.

    Args:
        datasets: dict corpus name → map-style dataset (``__getitem__`` and ``__len__``).
        sampler: an optional :class:`padless.mixing.MixtureSampler` to check names and sizes.

    Cost: O(number of corpora); nothing is copied.

    >>> import torch
    >>> from padless.mixing import MixtureSampler
    >>> from padless.planners.budget import TokenBudgetSampler
    >>> mix = MixtureSampler({"a": TokenBudgetSampler([2, 3], max_tokens=8),
    ...                       "b": TokenBudgetSampler([4], max_tokens=8)})
    >>> ds = mixture_dataset({"b": ["b0"], "a": ["a0", "a1"]}, mix)
    >>> [ds[i] for i in range(3)]
    ['a0', 'a1', 'b0']
    """
    if not isinstance(datasets, _Mapping):
        raise TypeError(
            f"datasets must be a dict corpus name -> dataset, got {type(datasets).__name__}"
        )
    if sampler is None:
        names = list(datasets)
        if not names:
            raise ValueError("datasets must hold at least one corpus, got an empty dict")
    else:
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
