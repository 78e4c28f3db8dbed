"""Slot arithmetic, tail policy and balancing: pure functions shared by every sampler and stream.

An epoch's schedule is a sequence of ``total`` global batch slots. Rank ``r`` of ``world_size``
takes slots ``start + s·world_size + r`` for steps ``s = 0, 1, …`` from a global ``start``
position. When the slots left do not fill the last step, ``drop_last=False`` completes it with
the epoch's first slots (repeats) and ``drop_last=True`` drops it.

Balanced orders group batches of similar cost into the same step. The grouping depends on the
world size, so a job resumed at another world size re-balances only the batches it has not
delivered yet (:func:`elastic_order`): the union of what every rank delivers before and after
any number of world-size changes is the epoch's batches, each once (plus the tail repeats).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._check import non_negative, positive

__all__ = [
    "check_ranks",
    "steps_left",
    "rank_slots",
    "tail_counts",
    "position_limit",
    "padded_costs",
    "step_imbalance",
    "balanced_order",
    "elastic_order",
    "step_mean_lengths",
    "length_mixing",
]


def check_ranks(rank: Any, world_size: Any) -> tuple[int, int]:
    """Check ``0 <= rank < world_size`` and return both as ints.

    >>> check_ranks(1, 4)
    (1, 4)
    """
    world_size = positive("world_size", world_size)
    rank = non_negative("rank", rank)
    if rank >= world_size:
        raise ValueError(f"rank must be < world_size={world_size}, got {rank}")
    return rank, world_size


def steps_left(total: int, start: int, world_size: int, drop_last: bool) -> int:
    """Steps (batches per rank) left from global position ``start`` of ``total`` slots.

    >>> steps_left(10, 0, 4, False), steps_left(10, 0, 4, True), steps_left(10, 8, 4, False)
    (3, 2, 1)
    """
    left = max(total - start, 0)
    return left // world_size if drop_last else -(-left // world_size)


def rank_slots(total: int, start: int, rank: int, world_size: int, drop_last: bool) -> np.ndarray:
    """Global slots of ``rank`` from ``start``; slots past the end wrap to the epoch's first.

    >>> rank_slots(5, 0, 1, 2, False).tolist(), rank_slots(5, 0, 0, 2, False).tolist()
    ([1, 3, 0], [0, 2, 4])
    """
    steps = steps_left(total, start, world_size, drop_last)
    slots = start + rank + np.arange(steps, dtype=np.int64) * world_size
    return np.where(slots < total, slots, (slots - total) % max(total, 1))


def tail_counts(total: int, world_size: int, drop_last: bool) -> tuple[int, int]:
    """``(repeated, dropped)`` batch slots of a whole epoch under the tail policy (all ranks).

    >>> tail_counts(10, 4, False), tail_counts(10, 4, True)
    ((2, 0), (0, 2))
    """
    if total == 0:
        return 0, 0
    steps = steps_left(total, 0, world_size, drop_last)
    if drop_last:
        return 0, total - steps * world_size
    return steps * world_size - total, 0


def position_limit(total: int, world_size: int, drop_last: bool) -> int:
    """The largest global position an iteration at ``world_size`` can end at.

    A completed last step may run past ``total`` by less than ``world_size`` (the repeats; an
    iteration resumed at another world size may start anywhere, so the bound is
    ``total + world_size - 1``).

    >>> position_limit(10, 4, False), position_limit(10, 4, True)
    (13, 10)
    """
    if drop_last or total == 0:
        return total
    return total + world_size - 1


def padded_costs(plan: Any, sizes: np.ndarray) -> np.ndarray:
    """Padded cost of each batch of a :class:`~padless.core.plan.BatchPlan`: count × longest size.

    >>> from padless.core.plan import BatchPlan
    >>> padded_costs(BatchPlan([0, 1, 2], [0, 2, 3]), np.array([3, 5, 2])).tolist()
    [10, 2]
    """
    from .._kernels import segment_max

    if len(plan) == 0:
        return np.zeros(0, dtype=np.int64)
    longest = segment_max(np.ascontiguousarray(sizes[plan.indices]), plan.offsets)
    return longest * plan.sizes


def step_imbalance(costs: np.ndarray, world_size: int, steps: int | None = None) -> float:
    """Mean over steps of (max rank cost ÷ mean rank cost) for batches dealt out in order.

    Global batch j goes to rank j mod world_size at step j div world_size. ``steps`` defaults to
    enough steps for every batch; slots past the end wrap to the first batches (the default tail
    policy), fewer steps drop the tail. 1.0 means no rank ever waits.

    >>> step_imbalance(np.array([4, 4, 2, 6]), 2)
    1.25
    """
    b = costs.shape[0]
    if steps is None:
        steps = -(-b // world_size)
    if b == 0 or steps == 0:
        return 1.0
    slots = np.arange(steps * world_size) % b
    table = costs[slots].reshape(steps, world_size).astype(np.float64)
    means = table.mean(axis=1)
    ok = means > 0
    return float((table.max(axis=1)[ok] / means[ok]).mean()) if ok.any() else 1.0


def balanced_order(
    costs: np.ndarray, world_size: int, gen: np.random.Generator | None
) -> np.ndarray:
    """Order batches so each step of ``world_size`` holds batches of similar cost.

    Batches are sorted by cost (ties in random order), cut into steps of ``world_size``; complete
    steps are shuffled (when ``gen`` is given) and the incomplete step, the cheapest, goes last.

    >>> balanced_order(np.array([5, 1, 6, 2]), 2, None).tolist()
    [2, 0, 3, 1]
    """
    b = costs.shape[0]
    pre = gen.permutation(b) if gen is not None else np.arange(b)
    by_cost = pre[np.argsort(-costs[pre], kind="stable")]
    full = b // world_size
    steps = by_cost[: full * world_size].reshape(full, world_size)
    if gen is not None and full > 1:
        steps = steps[gen.permutation(full)]
        steps = gen.permuted(steps, axis=1)
    return np.concatenate([steps.ravel(), by_cost[full * world_size :]]).astype(np.int64)


def elastic_order(
    order: np.ndarray,
    costs: np.ndarray,
    history: Sequence[tuple[int, int]],
    world_size: int,
    gen: np.random.Generator | None,
) -> np.ndarray:
    """A balanced ``order`` after world-size changes: each change re-balances what is left.

    ``history`` lists ``(world_size, position)`` of each earlier part of the epoch, oldest
    first: the part ran at that world size until that global position (batch slots). The
    batches delivered by then keep their slots; the rest are re-balanced for the next world
    size (the next entry's, or ``world_size`` for the last part). So every batch still has
    exactly one slot, whatever sequence of world sizes the epoch ran at.

    >>> costs = np.array([8, 7, 6, 5, 4, 3])
    >>> first = balanced_order(costs, 2, None)
    >>> first.tolist(), elastic_order(first, costs, [(2, 2)], 3, None).tolist()
    ([0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5])
    """
    out = np.array(order, dtype=np.int64, copy=True)
    total = out.size
    sizes = [w for w, _ in history[1:]] + [world_size]
    for (_, position), width in zip(history, sizes, strict=True):
        done = min(position, total)
        rest = out[done:]
        if rest.size:
            out[done:] = rest[balanced_order(costs[rest], width, gen)]
    return out


def step_mean_lengths(
    tokens: np.ndarray, counts: np.ndarray, world_size: int, steps: int | None = None
) -> np.ndarray:
    """Mean sequence length of each step, for batches dealt out in order.

    ``tokens`` and ``counts`` are each batch's tokens and sequences, in dealing order: global
    batch j goes to step j div world_size, the tail wrapping to the first batches as in
    :func:`step_imbalance`. A step's mean is its tokens ÷ its sequences (0.0 for none).

    >>> step_mean_lengths(np.array([10, 2, 30, 6]), np.array([2, 2, 2, 2]), 2).tolist()
    [3.0, 9.0]
    """
    b = tokens.shape[0]
    if steps is None:
        steps = -(-b // world_size)
    if b == 0 or steps == 0:
        return np.zeros(0, dtype=np.float64)
    slots = np.arange(steps * world_size) % b
    tok = tokens[slots].reshape(steps, world_size).sum(axis=1).astype(np.float64)
    cnt = counts[slots].reshape(steps, world_size).sum(axis=1).astype(np.float64)
    return np.divide(tok, cnt, out=np.zeros_like(tok), where=cnt > 0)


def length_mixing(means: np.ndarray) -> tuple[float, float]:
    """``(trend, lag1)`` of a series of step mean lengths: how the batch order mixes lengths.

    ``trend`` is the Pearson correlation between the step index and the step's mean length (a
    length-sorted order gives ±1); ``lag1`` is the series' autocorrelation at lag 1 (HF's
    ``group_by_length`` megabatches, sorted inside, give a sawtooth near 1). A well-mixed order
    has both near 0. Fewer than 3 steps, or a constant series, give ``(0.0, 0.0)``.

    >>> length_mixing(np.array([1.0, 2.0, 3.0, 4.0]))[0]
    1.0
    >>> round(length_mixing(np.array([5.0, 1.0, 5.0, 1.0, 5.0, 1.0]))[1], 3)
    -0.833
    """
    x = np.asarray(means, dtype=np.float64)
    if x.size < 3:
        return 0.0, 0.0
    dev = x - x.mean()
    var = float(dev @ dev)
    if var <= 0.0:
        return 0.0, 0.0
    idx = np.arange(x.size, dtype=np.float64)
    idev = idx - idx.mean()
    trend = float((idev @ dev) / np.sqrt(float(idev @ idev) * var))
    lag1 = float((dev[:-1] @ dev[1:]) / var)
    return trend, lag1
