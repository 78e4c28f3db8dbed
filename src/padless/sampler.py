"""The one batch sampler: epochs, shuffled batch order, equal rank shards, O(1) exact resume.

:class:`PlanSampler` takes lengths and a planner spec (``TokenBudget``, ``ExactLength``,
``Buckets``, ``Packing``…). For an epoch it computes the global plan (identical on every rank,
no communication), orders its batches (shuffled from its own random stream, or grouped into
cost-balanced steps), and hands rank ``r`` the global slots ``p + s·world_size + r`` for steps
``s = 0, 1, …`` from the start position ``p``. The slot arithmetic and the balancing are pure
functions in :mod:`padless._schedule`; the loop and the state live in
:class:`padless._state.Resumable`.

Positions are **global**: the number of global batch slots consumed (steps × world_size). A state
saved at one world size can therefore be loaded at another (elastic resume); with
``balance=True`` the batches not yet delivered are re-balanced for the new world size.

Tail policy when the batches left do not fill the last step: ``drop_last=False`` completes it with
the epoch's first batches (counted in ``repeated``), ``drop_last=True`` drops the incomplete step
(counted in ``dropped``). Both counts are over all ranks, for the current epoch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from . import _rng
from ._check import check_bool, check_seed
from ._schedule import (
    balanced_order,
    check_ranks,
    elastic_order,
    padded_costs,
    step_imbalance,
)
from ._state import Resumable, fingerprint
from .lengths import lengths_of
from .plan import BatchPlan

if TYPE_CHECKING:
    from .planners.spec import Planner, Spec
    from .windows import WindowedSchedule

__all__ = ["PlanSampler", "SamplerOptions", "check_ranks", "padded_costs", "step_imbalance"]


class SamplerOptions(TypedDict, total=False):
    """Keywords every sampler takes (see :class:`PlanSampler`)."""

    shuffle: bool
    seed: int
    rank: int
    world_size: int
    drop_last: bool
    balance: bool
    window: int | None


class _Epoch:
    """One epoch's global schedule: the plan and the order of its batches."""

    __slots__ = ("key", "plan", "order", "costs", "values")

    def __init__(
        self,
        key: tuple[Any, ...],
        plan: BatchPlan,
        order: np.ndarray,
        costs: np.ndarray | None,
        values: np.ndarray,
    ) -> None:
        self.key = key
        self.plan = plan
        self.order = order
        self.costs = costs
        self.values = values


class PlanSampler(Resumable):
    """Batch sampler over any planner spec, for ``DataLoader(batch_sampler=...)``.

    Yields lists of Python ints (dataset indices; split packing pieces as codes, see
    :class:`padless.Packing`).

    Args:
        lengths: (N,) or (N, F) lengths.
        spec: a planner spec (``padless.TokenBudget(max_tokens=4096)``…), see
            :func:`padless.strategies`.
        shuffle: shuffle batch order each epoch, and let batch membership vary by epoch. With
            False, every epoch uses the epoch-0 plan in plan order.
        seed: non-negative int; all randomness derives from (seed, epoch, stream).
        rank, world_size: this process's shard; every rank yields the same number of batches.
        drop_last: drop the incomplete last step instead of completing it with repeats.
        balance: group batches into steps of similar cost to cut straggler wait.
        window: plan the epoch in windows of about this many items (see
            :mod:`padless.windows`): bounded memory for corpora of any size, e.g. a memory-mapped
            ``.npy`` of lengths; ``len()`` then costs one counting pass per epoch (cached).

    >>> from padless import TokenBudget
    >>> s = PlanSampler([3, 5, 2, 7, 4, 4], TokenBudget(max_tokens=10), seed=1, world_size=2)
    >>> len(s), sorted(i for b in s for i in b)
    (2, [1, 4, 5])
    """

    def __init__(
        self,
        lengths: Any,
        spec: Spec,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        balance: bool = False,
        window: int | None = None,
    ) -> None:
        from .planners.spec import Spec

        if not isinstance(spec, Spec):
            raise TypeError(
                f"spec must be a padless planner spec (e.g. padless.TokenBudget(max_tokens=4096)), "
                f"got {type(spec).__name__}"
            )
        self.shuffle = check_bool("shuffle", shuffle)
        self.seed = check_seed(seed, "seed")
        self.rank, self.world_size = check_ranks(rank, world_size)
        self.drop_last = check_bool("drop_last", drop_last)
        self.balance = check_bool("balance", balance)
        self.spec = spec
        self.window = window
        self._windowed: WindowedSchedule | None = None
        if window is None:
            self.planner: Planner = spec.bind(lengths_of(lengths))
        else:
            from .windows import WindowedPlanner, WindowedSchedule

            windowed = WindowedPlanner(spec, lengths, window)
            self.window = windowed.window
            self.planner = windowed  # type: ignore[assignment]
            self._windowed = WindowedSchedule(
                windowed, shuffle=self.shuffle, seed=self.seed, balance=self.balance
            )
        self.epoch = 0
        self._reset_position()
        self._cache: _Epoch | None = None
        self._fingerprint: str | None = None

    @property
    def lengths(self) -> np.ndarray:
        """The checked (N,) or (N, F) int64 lengths."""
        return self.planner.lengths

    @property
    def sizes(self) -> np.ndarray:
        """One size per sequence (the max over fields for (N, F) lengths)."""
        return self.planner.sizes

    def __getattr__(self, name: str) -> Any:
        # the spec's settings (sampler.max_tokens, sampler.capacity...) and what the planner
        # resolved from the lengths (sampler.boundaries...) read as attributes
        if name.startswith("_") or "planner" not in self.__dict__:
            raise AttributeError(name)
        for owner in (self.__dict__["planner"], self.__dict__["spec"]):
            if hasattr(owner, name):
                return getattr(owner, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ------------------------------------------------------------------ schedule
    def _schedule(self, epoch: int) -> _Epoch:
        history = self._history if epoch == self.epoch and self.balance else ()
        key = (epoch, history)
        if self._cache is not None and self._cache.key == key:
            return self._cache
        if self._cache is not None and self._cache.key[0] == epoch:
            plan, costs = self._cache.plan, self._cache.costs
        else:
            plan = self.planner.plan(self.seed, epoch if self.shuffle else 0)
            costs = None
        if self.balance and costs is None:
            costs = self.planner.costs(plan)
        gen = _rng.rng(self.seed, epoch, _rng.BATCH_ORDER) if self.shuffle else None
        if costs is not None and self.balance:
            first = history[0][0] if history else self.world_size
            order = balanced_order(costs, first, gen)
            if history:
                again = _rng.rng(self.seed, epoch, _rng.REBALANCE) if self.shuffle else None
                order = elastic_order(order, costs, history, self.world_size, again)
        elif gen is not None:
            order = gen.permutation(len(plan)).astype(np.int64)
        else:
            order = np.arange(len(plan), dtype=np.int64)
        self._cache = _Epoch(key, plan, order, costs, self.planner.values(plan))
        return self._cache

    def epoch_plan(self, epoch: int) -> tuple[BatchPlan, np.ndarray]:
        """Return an epoch's global plan and its batch order (all ranks, before sharding).

        Cost: one plan computation (cached for the latest epoch).
        """
        if self._windowed is not None:
            raise ValueError(
                "epoch_plan needs the whole epoch's plan in memory; a windowed sampler "
                f"(window={self.window}) plans one window at a time: use "
                "sampler.planner.plans(seed, epoch) for the window plans"
            )
        sched = self._schedule(check_seed(epoch, "epoch"))
        return sched.plan, sched.order

    # ------------------------------------------------------------------ Resumable hooks
    def _total(self) -> int:
        if self._windowed is not None:
            return self._windowed.total(self.epoch)
        return len(self._schedule(self.epoch).plan)

    def _batch_at(self, slot: int) -> list[int]:
        if self._windowed is not None:
            return self._windowed.batch_at(self.epoch, self._history, self.world_size, slot)
        sched = self._schedule(self.epoch)
        b = sched.order[slot]
        offsets = sched.plan.offsets
        out: list[int] = sched.values[offsets[b] : offsets[b + 1]].tolist()
        return out

    # ------------------------------------------------------------------ figures
    def stats(self) -> dict[str, Any]:
        """Figures of the current epoch's full schedule (from position 0).

        ``imbalance`` is the straggler figure: the mean over steps of max rank cost ÷ mean rank
        cost (1.0 is perfect), with the planner's cost per batch (padded tokens count × longest;
        real tokens for packing). ``repeated``/``dropped`` are the tail policy's batch counts;
        the plan's own figures follow, a plan figure of the same name prefixed ``plan_``.
        A windowed sampler adds ``window`` and ``windows`` (cost: one planning pass).
        """
        if self._windowed is not None:
            return self._windowed.stats(self)
        sched = self._schedule(self.epoch)
        if sched.costs is None:
            sched.costs = self.planner.costs(sched.plan)
        total = len(sched.plan)
        steps = self._steps(total, 0)
        out: dict[str, Any] = {
            "epoch": self.epoch,
            "strategy": self.spec.name,
            "batches": total,
            "steps": steps,
            "batches_per_rank": steps,
            "world_size": self.world_size,
            "repeated": self.repeated,
            "dropped": self.dropped,
            "imbalance": step_imbalance(sched.costs[sched.order], self.world_size, steps),
        }
        figures = {**sched.plan.stats(self.lengths).as_dict(), **sched.plan.info}
        figures["skipped"] = int(sched.plan.skipped.size)
        for k, v in figures.items():
            out[f"plan_{k}" if k in out else k] = v
        return out

    def collate(self, **options: Any) -> Any:
        """A collate function for this sampler's batches (``padless.torch``), settings filled in.

        Packing specs give ``collate_packed(capacity, max_per_row=...)`` (so capacity is typed
        once); the others give ``collate_padded``. ``options`` go to that function
        (``pad_id=``, ``flatten=``, ``multiple_of=``...).
        """
        from . import torch as pt

        make = getattr(self.planner, "collate", None)
        return make(**options) if make is not None else pt.collate_padded(**options)

    # ------------------------------------------------------------------ state
    def _fingerprint_now(self) -> str:
        if self._fingerprint is None:
            config = {
                "class": self.spec.sampler_name or type(self).__name__,
                "shuffle": self.shuffle,
                "balance": self.balance,
                **self.planner.config(),
            }
            from ._kernels import hash_ints

            data = {
                "lengths_shape": list(self.lengths.shape),
                "lengths_hash": int(hash_ints(self.lengths.reshape(-1), 0)),
            }
            self._fingerprint = fingerprint(config, data=data)
        return self._fingerprint

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.spec.describe()}, n={self.lengths.shape[0]}, "
            f"rank={self.rank}, world_size={self.world_size}, seed={self.seed}, "
            f"shuffle={self.shuffle}, drop_last={self.drop_last}, balance={self.balance}"
            + ("" if self.window is None else f", window={self.window}")
            + ")"
        )
