"""A rollout batch → this rank's planned packed micro-batches (:func:`padless.plan_step`).

Plain PyTorch: no model, no framework. A rollout comes as a dict of tensors, either padded
(``(B, S)`` tensors beside an ``attention_mask`` that marks each row's tokens, left or right
padding alike) or as lists of B 1-D tensors (one per sequence); per-sequence values (advantages,
rewards: a tensor whose first dimension is B) ride along.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ..planners.step import StepPlan

__all__ = ["split_rollout"]


def split_rollout(
    batch: Mapping[str, Any], plan: StepPlan, rank: int, *, mask_key: str = "attention_mask"
) -> list[dict[str, Any]]:
    """Rank ``rank``'s micro-batches of ``batch``, packed, in the order all ranks run them.

    ``batch`` maps names to tensors: with ``batch[mask_key]`` (B, S), every other (B, S, ...)
    tensor is a token field and is packed by the mask (row i's tokens where the mask is
    nonzero, in order); without it, token fields are lists of B 1-D tensors. A tensor whose
    first dimension is B and which is not a token field holds one value per sequence and is
    gathered. Sequence i must hold ``plan``'s length i (``ValueError`` otherwise).

    Each micro-batch is a dict: every token field as ``(1, T)`` (one packed row; T ≤
    ``plan.max_tokens``), per-sequence fields gathered (first dimension: the micro-batch's
    sequences), ``position_ids`` (1, T) restarting at 0 for every sequence (a given
    ``position_ids`` is replaced), ``cu_seqlens`` (int32, n + 1), ``max_seqlen`` (int),
    ``indices`` (int64: the sequences, as indices into the batch), ``loss_tokens`` (this
    micro-batch's loss-bearing tokens) and ``step_loss_tokens`` (the whole step's, over every
    rank: divide a token-summed loss by it and no all-reduce of counts is needed). An empty
    micro-batch has T = 0.

    >>> import torch, padless
    >>> ids = [torch.arange(n) for n in (5, 3, 4)]
    >>> plan = padless.plan_step([5, 3, 4], world_size=1, max_tokens=8)
    >>> [mb["input_ids"].shape[1] for mb in split_rollout({"input_ids": ids}, plan, 0)]
    [7, 5]
    """
    if not isinstance(plan, StepPlan):
        raise TypeError(f"plan must be a padless.StepPlan, got {type(plan).__name__}")
    if not isinstance(batch, Mapping) or not batch:
        raise TypeError(f"batch must be a non-empty dict of tensors, got {type(batch).__name__}")
    if not isinstance(mask_key, str):
        raise TypeError(f"mask_key must be a str, got {type(mask_key).__name__} {mask_key!r:.40}")
    micro = plan.micro_batches(rank)  # checks rank
    n = int(plan.indices.size)
    planned = np.empty(n, dtype=np.int64)
    planned[plan.indices] = plan.lengths

    mask = batch.get(mask_key)
    tokens: dict[str, Any] = {}
    per_seq: dict[str, torch.Tensor] = {}
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or mask.shape[0] != n:
            raise ValueError(
                f"batch[{mask_key!r}] must be a (B, S) tensor with B = {n} (the planned "
                f"sequences), got {getattr(mask, 'shape', type(mask).__name__)}"
            )
        mask = mask.bool()
        counts = mask.sum(dim=1).cpu().numpy()
        _check_lengths(counts, planned, f"batch[{mask_key!r}] row")
    for key, value in batch.items():
        if key in (mask_key, "position_ids"):
            continue
        if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == n:
            if mask is not None and value.dim() >= 2 and value.shape[:2] == mask.shape:
                tokens[key] = value
            else:
                per_seq[key] = value
        elif isinstance(value, (list, tuple)) and mask is None:
            if len(value) != n or not all(
                isinstance(t, torch.Tensor) and t.dim() >= 1 for t in value
            ):
                raise ValueError(
                    f"batch[{key!r}] must be a list of {n} tensors (one per sequence, tokens "
                    f"first), got {len(value)} entries"
                )
            counts = np.array([t.shape[0] for t in value], dtype=np.int64)
            _check_lengths(counts, planned, f"batch[{key!r}] entry")
            tokens[key] = value
        else:
            raise ValueError(
                f"batch[{key!r}] must be a tensor whose first dimension is the {n} sequences"
                + (
                    f" (a token field: shape {tuple(mask.shape)} + ...)"
                    if mask is not None
                    else ", or a list of their 1-D token tensors"
                )
                + f", got {getattr(value, 'shape', type(value).__name__)}"
            )
    if not tokens:
        raise ValueError(
            f"batch has no token field: give {mask_key!r} and (B, S) tensors, or lists of 1-D "
            "tensors"
        )

    out = []
    step_loss = plan.total_loss_tokens
    for k, idx in enumerate(micro):
        lens = planned[idx]
        cu = np.zeros(idx.size + 1, dtype=np.int32)
        np.cumsum(lens, out=cu[1:])
        index = torch.from_numpy(idx.astype(np.int64))
        mb: dict[str, Any] = {}
        for key, value in tokens.items():
            if mask is not None:
                rows = mask[index.to(mask.device)]
                mb[key] = value[index.to(value.device)][rows].unsqueeze(0)
            elif idx.size:
                mb[key] = torch.cat([value[i] for i in idx.tolist()]).unsqueeze(0)
            else:
                first = value[0] if len(value) else torch.zeros(0)
                mb[key] = first.new_empty((1, 0, *first.shape[1:]))
        for key, value in per_seq.items():
            mb[key] = value[index.to(value.device)]
        total = int(cu[-1])
        starts = torch.from_numpy(np.repeat(cu[:-1].astype(np.int64), lens))
        mb["position_ids"] = (torch.arange(total, dtype=torch.int64) - starts).unsqueeze(0)
        mb["cu_seqlens"] = torch.from_numpy(cu)
        mb["max_seqlen"] = int(lens.max()) if lens.size else 0
        mb["indices"] = index
        mb["loss_tokens"] = int(plan.loss_tokens[rank, k])
        mb["step_loss_tokens"] = step_loss
        out.append(mb)
    return out


def _check_lengths(counts: np.ndarray, planned: np.ndarray, what: str) -> None:
    bad = counts != planned
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"{what} {i} holds {int(counts[i])} tokens but the plan's lengths[{i}] = "
            f"{int(planned[i])}: plan the step with this batch's lengths"
        )
