"""A placed step's tensors: what one rank of the mesh runs, segment by segment, in THD form.

:func:`collate_segment` turns one :class:`padless.Segment` (a CP group's sequences that a rank
runs back to back) into the rank's zigzag share of the packed row, in the keys
:func:`padless.torch.collate_packed` gives with ``context_parallel`` (``input_ids``, ``labels``,
``shift_labels``, ``position_ids``, ``seq_idx``, ``cu_seqlens``, ``cu_seqlens_padded``,
``max_seqlen``) and the group it belongs to (``group``, ``cp``, ``cp_rank``, ``indices``).
:func:`rank_batches` does it for every micro-batch of a rank's step. Every sample must have the
length the placement planned (a ``ValueError`` naming it otherwise): the model receives exactly
the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..planners.placement import Placement, Segment
from ._collate import _as_ids, collate_packed

__all__ = ["collate_segment", "rank_batches"]


def collate_segment(
    segment: Segment,
    samples: Sequence[Any],
    *,
    pad_id: int = 0,
    ignore_index: int = -100,
    key: str = "input_ids",
    position_start: int = 0,
) -> dict[str, Any]:
    """Rank ``segment.cp_rank``'s share of one placed segment.

    ``samples`` are the segment's sequences (``dataset[i] for i in segment.indices``): token
    id sequences, or mappings holding them under ``key``. Returns a dict of (1, T / cp)
    tensors — ``input_ids`` (the rank's chunks ``cp_rank`` and ``2·cp − 1 − cp_rank`` of every
    sequence, padded to ``2·cp``), ``labels`` (``ignore_index`` at each sequence's first token
    and on padding), ``shift_labels`` (the labels one token on, for a loss that does not shift),
    ``position_ids``, ``seq_idx`` — and ``cu_seqlens``, ``cu_seqlens_padded`` (int32, over the
    whole row: every rank of the group gets the same), ``max_seqlen``; and ``group`` (the CP
    group's ranks), ``cp``, ``cp_rank``, ``indices``. At ``cp == 1`` the row is the rank's
    whole, ``cu_seqlens_padded`` equal to ``cu_seqlens``.
    """
    if not isinstance(segment, Segment):
        raise TypeError(f"segment must be a padless Segment, got {type(segment).__name__}")
    if isinstance(samples, (str, bytes)) or not hasattr(samples, "__len__"):
        raise TypeError(f"samples must be a sequence of samples, got {type(samples).__name__}")
    if len(samples) != segment.indices.size:
        raise ValueError(
            f"samples must hold the segment's {segment.indices.size} sequences, got {len(samples)}"
        )
    want = np.diff(segment.cu_seqlens)
    for j, sample in enumerate(samples):
        got = int(
            _as_ids(sample[key] if isinstance(sample, Mapping) else sample, f"samples[{j}]").numel()
        )
        if got != int(want[j]):
            raise ValueError(
                f"sample {int(segment.indices[j])} has {got} tokens, but the placement planned "
                f"{int(want[j])}: place the lengths of the dataset the samples come from"
            )
    total = int(segment.cu_seqlens_padded[-1])
    if total == 0:
        raise ValueError(f"segment of sequences {segment.indices.tolist()} holds no tokens")
    cp = int(segment.cp)
    collate = collate_packed(
        total,
        pad_id=pad_id,
        ignore_index=ignore_index,
        key=key,
        position_start=position_start,
        context_parallel=cp,
        cp_rank=int(segment.cp_rank) if cp > 1 else None,
    )
    out: dict[str, Any] = dict(collate(list(samples)))
    if cp == 1:
        out["cu_seqlens_padded"] = out["cu_seqlens"].clone()
        labels = out["labels"]
        tail = torch.full_like(labels[:, :1], ignore_index)
        out["shift_labels"] = torch.cat([labels[:, 1:], tail], dim=1)
    out["group"] = segment.group
    out["cp"] = cp
    out["cp_rank"] = int(segment.cp_rank)
    out["indices"] = segment.indices.copy()
    return out


def rank_batches(
    placement: Placement, rank: int, dataset: Any, **options: Any
) -> list[list[dict[str, Any]]]:
    """What stage rank ``rank`` runs of ``placement``, as tensors: per micro-batch in run order,
    one :func:`collate_segment` dict per segment (``options`` go to it). ``dataset[i]`` is the
    sequence of dataset index ``i``.

    >>> import padless
    >>> from padless import Cost, Mesh, MeshCost
    >>> cost = MeshCost(forward=Cost(linear=1e-6, per_sequence=1e-4), kv_bytes=65536,
    ...                 backward=Cost(linear=2e-6, per_sequence=2e-4), bandwidth=5e10)
    >>> docs = [list(range(1, n + 1)) for n in (300, 40, 120, 16)]
    >>> p = padless.place([len(d) for d in docs], Mesh(dp=1, cp=2, dynamic=True, max_tokens=160),
    ...                   cost)
    >>> [[(s["indices"].tolist(), s["cp"], tuple(s["input_ids"].shape)) for s in micro]
    ...  for micro in rank_batches(p, 1, docs)]
    [[([1, 3], 1, (1, 56))], [([0], 2, (1, 150))]]
    """
    if not isinstance(placement, Placement):
        raise TypeError(f"placement must be a padless Placement, got {type(placement).__name__}")
    step = placement.rank_step(rank)  # checks the rank
    if isinstance(dataset, (str, bytes)) or not (
        hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")
    ):
        raise TypeError(
            f"dataset must be indexable by dataset index (dataset[i] -> a sequence), got "
            f"{type(dataset).__name__}"
        )
    need = int(placement.indices.max(initial=-1)) + 1
    if len(dataset) < need:
        raise ValueError(
            f"dataset must hold the placement's sequences (indices up to {need - 1}), got "
            f"len(dataset) = {len(dataset)}"
        )
    return [
        [collate_segment(seg, [dataset[int(i)] for i in seg.indices], **options) for seg in m]
        for m in step
    ]
