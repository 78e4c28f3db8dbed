"""Token-budget batching with fairseq's ``batch_by_size`` semantics."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _kernels as K
from .._check import check_choice, check_seed, positive, positive_or_none
from ..lengths import lengths_of, sizes_of
from ..plan import BatchPlan
from ..sampler import PlanSampler
from ._order import length_order, run_sizes


def _check_order(order: Any, n: int) -> np.ndarray:
    arr = np.asarray(order)
    if arr.ndim != 1:
        raise ValueError(f"order must be a 1-D array of indices, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"order must hold integer indices, got dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= n:
        bad = lo if lo < 0 else hi
        raise ValueError(f"order must hold indices in [0, {n}), got {bad}")
    return arr


def oversize_filter(
    sizes: np.ndarray, limit: int, oversize: str, what: str = "max_tokens"
) -> np.ndarray:
    """Indices whose size is over ``limit``; raise for ``oversize="error"``."""
    if sizes.size == 0 or int(sizes.max()) <= limit:
        return np.zeros(0, dtype=np.int64)
    too_long = np.flatnonzero(sizes > limit)
    if too_long.size and oversize == "error":
        i = int(too_long[0])
        raise ValueError(
            f"index {i} has length {int(sizes[i])}, which exceeds {what}={limit} "
            f'(pass oversize="skip" to leave such items out)'
        )
    return too_long


def plan_token_budget(
    lengths: Any,
    *,
    max_tokens: int | None = None,
    max_sentences: int | None = None,
    multiple_of: int = 1,
    order: Any = None,
    oversize: str = "error",
    seed: int = 0,
    epoch: int = 0,
) -> BatchPlan:
    """Batch sequences greedily under a padded-token budget, exactly as fairseq's ``batch_by_size``.

    Walks ``order``; a batch costs count × longest. Batches hold at most ``max_sentences`` items
    and cost at most ``max_tokens``; sizes are multiples of ``multiple_of`` except small batches
    and the last one. Unlike fairseq, the last batch is never dropped.

    Args:
        lengths: (N,) lengths or (N, F) per-field lengths (a sequence's size is its max over fields).
        max_tokens: padded-token budget per batch, or None for no budget.
        max_sentences: most sequences per batch, or None for no cap.
        multiple_of: preferred batch size multiple (fairseq's ``bsz_mult``).
        order: indices to walk; None sorts by length (2-D: last field, then the first) with ties
            broken at random from (seed, epoch), so batch membership changes between epochs.
        oversize: "error" raises for a sequence longer than max_tokens; "skip" leaves it out and
            records it in ``plan.skipped``.
        seed, epoch: pick the tie-break stream when ``order`` is None.

    Cost: O(N + max length) time (counting sort + one compiled pass), O(N) memory.

    >>> plan = plan_token_budget([5, 3, 3, 8, 1], max_tokens=9)
    >>> [b.tolist() for b in plan]
    [[4, 2, 1], [0], [3]]
    """
    lens = lengths_of(lengths)
    max_tokens = positive_or_none("max_tokens", max_tokens)
    max_sentences = positive_or_none("max_sentences", max_sentences)
    multiple_of = positive("multiple_of", multiple_of)
    check_choice("oversize", oversize, ("error", "skip"))
    check_seed(seed, "seed")
    check_seed(epoch, "epoch")
    sizes = sizes_of(lens)
    walk = None if order is None else _check_order(order, sizes.shape[0])
    skipped = np.zeros(0, dtype=np.int64)
    if max_tokens is not None:
        skipped = oversize_filter(sizes, max_tokens, oversize)
    return _budget_plan(
        lens, sizes, skipped, max_tokens, max_sentences, multiple_of, walk, seed, epoch
    )


def _budget_plan(
    lens: np.ndarray,
    sizes: np.ndarray,
    skipped: np.ndarray,
    max_tokens: int | None,
    max_sentences: int | None,
    multiple_of: int,
    walk: np.ndarray | None,
    seed: int,
    epoch: int,
) -> BatchPlan:
    """The plan from checked arguments (samplers call this once per epoch, checks done once)."""
    limits = (max_tokens or 0, max_sentences or 0, multiple_of)
    values = None
    if walk is None:
        walk, starts = length_order(lens, seed, epoch)
        values = run_sizes(lens, walk, starts)
    if values is not None:
        # sorted 1-D lengths: runs give every size (no per-position array); too-long ones are
        # the last runs
        if skipped.size:
            runs = int(np.searchsorted(values, limits[0], side="right"))
            values, starts = values[:runs], starts[: runs + 1]
            walk = walk[: starts[-1]]
        ends = K.budget_ends_runs(values, starts, *limits)
    else:
        walk_sizes = np.ascontiguousarray(sizes[walk])
        if skipped.size:
            keep = walk_sizes <= limits[0]
            walk, walk_sizes = walk[keep], walk_sizes[keep]
        ends = K.budget_ends(walk_sizes, *limits)
    return BatchPlan(walk, np.concatenate([np.zeros(1, np.int64), ends]), skipped=skipped)


class TokenBudgetSampler(PlanSampler):
    """Batch sampler over :func:`plan_token_budget` batches (fairseq semantics, never drops data).

    Batch membership changes with the epoch (random tie-break among equal lengths) and the batch
    order is shuffled per epoch; see :class:`padless.sampler.PlanSampler` for ranks, tail policy,
    balance and resume.

    >>> s = TokenBudgetSampler([3, 5, 2, 7, 4, 4], max_tokens=10, seed=1)
    >>> sorted(i for batch in s for i in batch)
    [0, 1, 2, 3, 4, 5]
    """

    def __init__(
        self,
        lengths: Any,
        *,
        max_tokens: int | None,
        max_sentences: int | None = None,
        multiple_of: int = 1,
        oversize: str = "error",
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        balance: bool = False,
    ) -> None:
        super().__init__(
            lengths,
            shuffle=shuffle,
            seed=seed,
            rank=rank,
            world_size=world_size,
            drop_last=drop_last,
            balance=balance,
        )
        self.max_tokens = positive_or_none("max_tokens", max_tokens)
        self.max_sentences = positive_or_none("max_sentences", max_sentences)
        self.multiple_of = positive("multiple_of", multiple_of)
        self.oversize = check_choice("oversize", oversize, ("error", "skip"))
        self._skipped = np.zeros(0, dtype=np.int64)
        if self.max_tokens is not None:
            self._skipped = oversize_filter(self.sizes, self.max_tokens, self.oversize)

    def _config(self) -> dict[str, Any]:
        return {
            "max_tokens": self.max_tokens,
            "max_sentences": self.max_sentences,
            "multiple_of": self.multiple_of,
            "oversize": self.oversize,
        }

    def _plan(self, epoch: int) -> BatchPlan:
        return _budget_plan(
            self.lengths,
            self.sizes,
            self._skipped,
            self.max_tokens,
            self.max_sentences,
            self.multiple_of,
            None,
            self.seed,
            epoch,
        )
