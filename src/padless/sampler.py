"""Batch samplers: epochs, shuffled batch order, equal rank shards, and O(1) exact resume.

Every sampler is a thin wrapper around a pure planner. For an epoch it computes the global plan
(identical on every rank, no communication), orders its batches (shuffled from its own random
stream, or grouped into cost-balanced steps), and hands rank ``r`` the global slots
``p + s·world_size + r`` for steps ``s = 0, 1, …`` from the start position ``p``.

Positions are **global**: the number of global batch slots consumed (steps × world_size). A state
saved at one world size can therefore be loaded at another (elastic resume).

Tail policy when the batches left do not fill the last step: ``drop_last=False`` completes it with
the epoch's first batches (counted in ``repeated``), ``drop_last=True`` drops the incomplete step
(counted in ``dropped``). Both counts are over all ranks, for the current epoch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from . import _rng
from ._check import check_bool, check_seed, non_negative, positive
from ._state import Resumable, fingerprint
from .lengths import lengths_of, sizes_of
from .plan import BatchPlan


def check_ranks(rank: Any, world_size: Any) -> tuple[int, int]:
    """Check ``0 <= rank < world_size``."""
    world_size = positive("world_size", world_size)
    rank = non_negative("rank", rank)
    if rank >= world_size:
        raise ValueError(f"rank must be < world_size={world_size}, got {rank}")
    return rank, world_size


def padded_costs(plan: BatchPlan, sizes: np.ndarray) -> np.ndarray:
    """Padded cost of each batch: count × longest size."""
    from ._kernels import segment_max

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


class _Epoch:
    """One epoch's global schedule: the plan and the order of its batches."""

    __slots__ = ("epoch", "plan", "order", "costs")

    def __init__(
        self, epoch: int, plan: BatchPlan, order: np.ndarray, costs: np.ndarray | None
    ) -> None:
        self.epoch = epoch
        self.plan = plan
        self.order = order
        self.costs = costs


class PlanSampler(Resumable):
    """Base of every padless batch sampler (for ``DataLoader(batch_sampler=...)``).

    Subclasses implement :meth:`_plan` (a pure planner call for one epoch) and :meth:`_config`
    (their settings, JSON-safe, for the fingerprint); they may override :meth:`_costs`.

    Args:
        lengths: (N,) or (N, F) lengths.
        shuffle: shuffle batch order each epoch, and let batch membership vary by epoch. With
            False, every epoch uses the epoch-0 plan in plan order.
        seed: non-negative int; all randomness derives from (seed, epoch, stream).
        rank, world_size: this process's shard; every rank yields the same number of batches.
        drop_last: drop the incomplete last step instead of completing it with repeats.
        balance: group batches into steps of similar padded cost to cut straggler wait.
    """

    def __init__(
        self,
        lengths: Any,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        balance: bool = False,
    ) -> None:
        self.lengths = lengths_of(lengths)
        self.sizes = sizes_of(self.lengths)
        self.shuffle = check_bool("shuffle", shuffle)
        self.seed = check_seed(seed, "seed")
        self.rank, self.world_size = check_ranks(rank, world_size)
        self.drop_last = check_bool("drop_last", drop_last)
        self.balance = check_bool("balance", balance)
        self.epoch = 0
        self._reset_position()
        self._cache: _Epoch | None = None
        self._fingerprint: str | None = None

    # ------------------------------------------------------------------ for subclasses
    def _plan(self, epoch: int) -> BatchPlan:
        raise NotImplementedError

    def _config(self) -> dict[str, Any]:
        raise NotImplementedError

    def _costs(self, plan: BatchPlan) -> np.ndarray:
        return padded_costs(plan, self.sizes)

    def _values(self, plan: BatchPlan) -> np.ndarray:
        """What batches yield, parallel to ``plan.indices`` (the indices themselves by default)."""
        return plan.indices

    # ------------------------------------------------------------------ schedule
    def _schedule(self, epoch: int) -> _Epoch:
        if self._cache is not None and self._cache.epoch == epoch:
            return self._cache
        plan = self._plan(epoch if self.shuffle else 0)
        costs = self._costs(plan) if self.balance else None  # computed lazily otherwise
        gen = _rng.rng(self.seed, epoch, _rng.BATCH_ORDER) if self.shuffle else None
        if costs is not None:
            order = balanced_order(costs, self.world_size, gen)
        elif gen is not None:
            order = gen.permutation(len(plan)).astype(np.int64)
        else:
            order = np.arange(len(plan), dtype=np.int64)
        self._cache = _Epoch(epoch, plan, order, costs)
        return self._cache

    def epoch_plan(self, epoch: int) -> tuple[BatchPlan, np.ndarray]:
        """Return an epoch's global plan and its batch order (all ranks, before sharding).

        Cost: one plan computation (cached for the latest epoch).
        """
        sched = self._schedule(check_seed(epoch, "epoch"))
        return sched.plan, sched.order

    # ------------------------------------------------------------------ sampler protocol
    def __len__(self) -> int:
        """Batches this rank yields in the next iteration of the current epoch (exact)."""
        return self._steps(len(self._schedule(self.epoch).plan), self._next_start())

    def __iter__(self) -> Iterator[list[int]]:
        sched = self._schedule(self.epoch)
        start = self._begin_iteration()
        plan = sched.plan
        ids = sched.order[self._rank_slots(len(plan), start, self.rank)]
        offsets, indices = plan.offsets, self._values(plan)
        try:
            for b in ids.tolist():
                self._yielded += 1
                yield indices[offsets[b] : offsets[b + 1]].tolist()
        finally:
            self._iterating = False

    # ------------------------------------------------------------------ tail accounting
    @property
    def repeated(self) -> int:
        """Batch slots filled with repeats of the epoch's first batches (all ranks, this epoch)."""
        total = len(self._schedule(self.epoch).plan)
        if self.drop_last or total == 0:
            return 0
        return self._steps(total, 0) * self.world_size - total

    @property
    def dropped(self) -> int:
        """Batches left out by ``drop_last=True`` (all ranks, this epoch)."""
        total = len(self._schedule(self.epoch).plan)
        if not self.drop_last:
            return 0
        return total - self._steps(total, 0) * self.world_size

    def stats(self) -> dict[str, Any]:
        """Figures of the current epoch's full schedule (from position 0).

        ``imbalance`` is the straggler figure: the mean over steps of max rank cost ÷ mean rank
        cost (1.0 is perfect), with padded cost count × longest per batch.
        """
        sched = self._schedule(self.epoch)
        if sched.costs is None:
            sched.costs = self._costs(sched.plan)
        total = len(sched.plan)
        steps = self._steps(total, 0)
        out: dict[str, Any] = {
            "epoch": self.epoch,
            "batches": total,
            "steps": steps,
            "batches_per_rank": steps,
            "world_size": self.world_size,
            "repeated": self.repeated,
            "dropped": self.dropped,
            "imbalance": step_imbalance(sched.costs[sched.order], self.world_size, steps),
        }
        out.update(sched.plan.stats(self.lengths).as_dict())
        out.update(sched.plan.info)
        out["skipped"] = int(sched.plan.skipped.size)
        return out

    # ------------------------------------------------------------------ state
    def _fingerprint_now(self) -> str:
        if self._fingerprint is None:
            config = {
                "class": type(self).__name__,
                "shuffle": self.shuffle,
                "balance": self.balance,
                **self._config(),
            }
            from ._kernels import hash_ints

            data = {
                "lengths_shape": list(self.lengths.shape),
                "lengths_hash": int(hash_ints(self.lengths.reshape(-1), 0)),
            }
            self._fingerprint = fingerprint(config, data=data)
        return self._fingerprint

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` at the next iteration: O(1), no replay of batches.

        The state may come from another world size (elastic resume). The input is not modified.
        """
        super().load_state_dict(state)
