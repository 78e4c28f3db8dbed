"""Whole-corpus epochs: the global plan of every sequence, and the order of its batches.

An epoch's plan is ``planner.plan(seed, epoch)`` (epoch 0's for every epoch without
``shuffle``), its order shuffled from ``(seed, epoch, BATCH_ORDER)`` or grouped into balanced
steps (re-balanced after the elastic parts of the epoch). After a change of settings within the
epoch (a resume across a change), the epoch's first slots are the batches the earlier settings
delivered (its *head*: one part per change) and the plan is the rest of the epoch under the
current settings, seeded from ``(seed, epoch, CHANGES, k)``: nothing is repeated or lost.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..core import _rng
from ..core._schedule import length_mixing, step_imbalance, step_mean_lengths, steps_left
from ..core.cost import real_work, real_work_fields
from ..core.plan import BatchPlan
from ..planners.spec import Delivered, Planner, Spec
from .base import Epochs, Figures, History, batch_order

__all__ = ["WholeEpoch", "WholeEpochs", "field_figures"]


class _Part:
    """A part of an epoch run under earlier settings: its plan's ``offsets`` and ``values``,
    the ``order`` of the batches it delivered (its first global slot ``start``), and its
    ``planner`` (which tells the target-side tokens of its values)."""

    __slots__ = ("start", "offsets", "values", "order", "planner", "_targets")

    def __init__(
        self, start: int, offsets: np.ndarray, values: np.ndarray, order: np.ndarray, planner: Any
    ) -> None:
        self.start, self.offsets, self.values, self.order = start, offsets, values, order
        self.planner = planner
        self._targets: np.ndarray | None = None

    def entries(self, slot: int) -> tuple[int, int]:
        b = int(self.order[slot - self.start])
        return int(self.offsets[b]), int(self.offsets[b + 1])

    def targets(self, lengths: np.ndarray) -> np.ndarray:
        if self._targets is None:
            self._targets = self.planner.yielded_lengths(self.values, lengths)
        return self._targets


class _Head:
    """The batches an epoch delivered before its last change of settings: its ``parts``,
    ``batches`` slots in all, the planner of the last (``before``) and the seed of what follows
    (``sub``)."""

    __slots__ = ("parts", "starts", "batches", "before", "sub")

    def __init__(self, parts: list[_Part], batches: int, before: Any, sub: int) -> None:
        self.parts, self.batches, self.before, self.sub = parts, batches, before, sub
        self.starts = np.array([p.start for p in parts], dtype=np.int64)

    def part(self, slot: int) -> _Part:
        return self.parts[int(self.starts.searchsorted(slot, side="right")) - 1]


class WholeEpoch:
    """One epoch of a whole-corpus plan: its ``plan``, the ``order`` of its batches (``values``
    what a sampler yields for it, ``costs`` its balancing costs once known) and, after changes
    of settings, the ``head`` of batches delivered before them; ``sub`` is the seed the plan's
    order was drawn from. Global slot ``s`` is the head's below ``head.batches``, else batch
    ``order[s - head.batches]`` of the plan."""

    __slots__ = (
        "epochs",
        "epoch",
        "world",
        "changes",
        "plan",
        "order",
        "costs",
        "values",
        "head",
        "sub",
        "total",
        "_entries",
    )

    def __init__(
        self,
        epochs: WholeEpochs,
        epoch: int,
        world: int,
        changes: tuple[Any, ...],
        plan: BatchPlan,
        order: np.ndarray,
        costs: np.ndarray | None,
        values: np.ndarray,
        head: _Head | None,
        sub: int,
    ) -> None:
        self.epochs, self.epoch, self.world, self.changes = epochs, epoch, world, changes
        self.plan, self.order, self.costs, self.values = plan, order, costs, values
        self.head, self.sub = head, sub
        self.total = len(plan) + (0 if head is None else head.batches)
        self._entries: np.ndarray | None = None

    def batch_at(self, slot: int) -> tuple[np.ndarray, int, int]:
        head = self.head
        if head is not None:
            if slot < head.batches:
                part = head.part(slot)
                lo, hi = part.entries(slot)
                return part.values, lo, hi
            slot -= head.batches
        b = self.order[slot]
        offsets = self.plan.offsets
        return self.values, int(offsets[b]), int(offsets[b + 1])

    def slot_ids(self, positions: np.ndarray, history: History, world: int) -> np.ndarray:
        start = 0 if self.head is None else self.head.batches
        local = tuple((w, p - start) for w, p in history)
        order = self.epochs.order(self.plan, self.costs, True, world, local, self.sub, self.epoch)
        # positions past a loaded state's are past the epoch's last change (its head)
        return order[np.asarray(positions, dtype=np.int64) - start]

    def entry_lengths(self, slot: int) -> np.ndarray:
        head = self.head
        if head is not None:
            if slot < head.batches:
                part = head.part(slot)
                lo, hi = part.entries(slot)
                return part.targets(self.epochs.planner.lengths)[lo:hi]
            slot -= head.batches
        if self._entries is None:  # every entry's, once (pieces for packing)
            lens = self.epochs.planner.lengths
            self._entries = self.plan.entry_lengths(lens if lens.ndim == 1 else lens[:, -1])
        b = int(self.order[slot])
        return self._entries[int(self.plan.offsets[b]) : int(self.plan.offsets[b + 1])]

    def stats(self, drop_last: bool) -> Figures:
        """The plan's figures (the rest of the epoch's after a change: ``changes`` and
        ``delivered_before_change`` say so), its costs, the spec's cost model and how the order
        mixes lengths (``length_trend``, ``length_lag1``)."""
        epochs, plan = self.epochs, self.plan
        if self.costs is None:
            self.costs = epochs.planner.costs(plan)
        total = len(plan)
        steps = steps_left(total, 0, self.world, drop_last)
        imbalance = step_imbalance(self.costs[self.order], self.world, steps)
        lengths = epochs.planner.lengths
        figures = {**plan.stats(lengths).as_dict(), **plan.info}
        own = self._cost_figures(steps, float(figures["padding_fraction"]))
        figures["skipped"] = int(plan.skipped.size)
        more: dict[str, Any] = {}
        fields = 1 if lengths.ndim == 1 else int(lengths.shape[1])
        units = epochs.spec.units(fields)
        if fields > 1 or units[0] is not None:
            more["fields"] = field_figures(plan, lengths, units)
        if self.head is not None:  # the plan above is the rest of the epoch after a change
            more["changes"] = len(self.changes)
            more["delivered_before_change"] = self.head.batches
        return Figures(total, steps, imbalance, own, figures, more)

    def _cost_figures(self, steps: int, padding: float) -> dict[str, Any]:
        plan, planner = self.plan, self.epochs.planner
        cost = getattr(self.epochs.spec, "cost", None)
        entry = plan.entry_lengths(planner.sizes)
        csum = np.zeros(entry.size + 1, dtype=np.int64)
        np.cumsum(entry, out=csum[1:])
        tokens = csum[plan.offsets[1:]] - csum[plan.offsets[:-1]]
        means = step_mean_lengths(tokens[self.order], plan.sizes[self.order], self.world, steps)
        trend, lag1 = length_mixing(means)
        if isinstance(cost, tuple):  # a model per field
            record: Any = [None if c is None else c.as_dict() for c in cost]
            work = real_work_fields(cost, plan, planner.lengths)
        else:
            record = None if cost is None else cost.as_dict()
            work = 1.0 - padding if cost is None else real_work(cost, plan, planner.sizes)
        return {"cost": record, "real_work": work, "length_trend": trend, "length_lag1": lag1}

    def global_plan(self) -> tuple[BatchPlan, np.ndarray]:
        return self.plan, self.order


class WholeEpochs(Epochs):
    """The epochs of a spec's plan of the whole corpus (``planner``: the spec bound to the
    lengths); they can resume across a change of settings (:meth:`planner_of` rebuilds the
    planner of a part run under other settings).

    Cost: an epoch is one plan (and one per change of settings within it, of what is left);
    the last one asked is kept, and an elastic resume re-orders it without planning again.
    """

    def __init__(
        self, spec: Spec, planner: Planner, *, shuffle: bool, seed: int, balance: bool
    ) -> None:
        super().__init__(shuffle=shuffle, seed=seed, balance=balance)
        self.spec, self.planner = spec, planner
        # how batches follow the optimizer step (a capacity schedule), asked of the strategy
        self.step_form = spec.step_form(planner)
        self._planners: dict[str, tuple[Planner, bool]] = {}

    def _make(
        self, epoch: int, history: History, world: int, changes: tuple[Any, ...]
    ) -> WholeEpoch:
        planner = self.planner
        shuffled = epoch if self.shuffle else 0
        last: WholeEpoch | None = None if self._last is None else self._last[1]
        if last is not None and last.epoch == epoch and last.changes == changes:
            # another elastic history of the epoch asked last: its plan ordered again
            plan, costs, values, head, sub = last.plan, last.costs, last.values, last.head, last.sub
        elif changes:
            head, done = self._head(epoch, changes)
            sub = head.sub
            plan, values = planner.plan_rest(done, head.before, sub, shuffled)
            costs = None
        else:
            head, sub = None, self.seed
            plan = planner.plan(self.seed, shuffled)
            costs, values = None, planner.values(plan)
        if self.balance and costs is None:
            costs = planner.costs(plan)
        start = 0 if head is None else head.batches
        local = tuple((w, p - start) for w, p in history)
        order = self.order(plan, costs, self.balance, world, local, sub, epoch)
        return WholeEpoch(self, epoch, world, changes, plan, order, costs, values, head, sub)

    def count(self, epoch: int) -> int:
        return len(self.planner.plan(self.seed, epoch if self.shuffle else 0))

    def order(
        self,
        plan: BatchPlan,
        costs: np.ndarray | None,
        balance: bool,
        world: int,
        history: History,
        sub: int,
        epoch: int,
    ) -> np.ndarray:
        """The order of a plan's batches (of an epoch, or of its part after a change: drawn
        from ``sub``, the seed, or the part's child seed); ``history`` the part's elastic parts."""
        draw = None
        if self.shuffle:

            def draw(stream: int) -> np.random.Generator:
                return _rng.rng(sub, epoch, stream)

        permute = not self.spec.orders_batches
        return batch_order(len(plan), costs if balance else None, world, history, draw, permute)

    def _head(self, epoch: int, changes: tuple[Any, ...]) -> tuple[_Head, Delivered]:
        """What ``epoch`` delivered before each of its ``changes`` of settings (each a
        ``(position, settings, world_size, elastic, skips)`` record of the part before it), and
        the values delivered (:class:`~padless.planners.spec.Delivered`).

        Part 0 is the epoch's plan under its first settings; part ``k`` the rest left by the
        parts before it, under part ``k``'s settings, seeded from ``(seed, epoch, CHANGES,
        k)``. A part delivered its ordered batches up to the change's global position.

        Cost: one plan per part (the first of the whole corpus, the others of what is left).
        """
        shuffled = epoch if self.shuffle else 0
        parts: list[_Part] = []
        done: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        count, sub = 0, self.seed
        before: Planner | None = None
        for k, (position, settings, world, elastic, skips) in enumerate(changes):
            planner, balance = self.planner_of(settings)
            if before is None:
                plan = planner.plan(self.seed, shuffled)
                given = planner.values(plan)
            else:
                plan, given = planner.plan_rest(Delivered(done), before, sub, shuffled)
            costs = planner.costs(plan) if balance else None
            local = tuple((w, p - count) for w, p in elastic)
            order = self.order(plan, costs, balance, world, local, sub, epoch)
            take = order[: max(0, min(position - count, len(plan)))]
            done.append((given, plan.offsets, take))  # what it delivered: batches take
            # batches of this part that a skip ahead of the change left out: never trained,
            # so the rest leaves their sequences out too
            skipped = [np.arange(lo, min(hi, count + len(plan))) - count for lo, hi in skips]
            left_out = np.unique(np.concatenate([np.zeros(0, np.int64), *skipped]))
            if left_out.size:
                done.append((given, plan.offsets, order[left_out]))
            parts.append(_Part(count, plan.offsets, given, take, planner))
            count += int(take.size)
            before = planner
            sub = _rng.child_seed(self.seed, shuffled, _rng.CHANGES, k + 1)
        assert before is not None
        return _Head(parts, count, before, sub), Delivered(done)

    def planner_of(self, settings: str) -> tuple[Planner, bool]:
        """The planner and ``balance`` of a recorded part's settings (a state's ``settings``
        entry as canonical JSON), rebuilt as this strategy over these lengths."""
        if settings not in self._planners:
            record = json.loads(settings)
            spec = type(self.spec)(**record["spec"])
            balance = bool(record["config"]["balance"])
            self._planners[settings] = (self.planner.rebind(spec), balance)
        return self._planners[settings]


def field_figures(
    plan: BatchPlan, lengths: np.ndarray, units: tuple[float | None, ...]
) -> list[dict[str, Any]]:
    """Padding figures per length field (``real``, ``padded``, ``padding_fraction``), in seconds
    too (``real_seconds``, ``padded_seconds``) for a field of ticks (its unit not None).

    >>> row = field_figures(BatchPlan([0, 1], [0, 2]), np.array([[300, 2], [100, 5]]), (0.01, None))
    >>> row[0]["padded"], row[0]["padded_seconds"], row[1]["padded"]
    (600, 6.0, 10)
    """
    out = []
    for stats, unit in zip(plan.field_stats(lengths), units, strict=True):
        row: dict[str, Any] = {
            "real": stats.real_tokens,
            "padded": stats.padded_slots,
            "padding_fraction": stats.padding_fraction,
        }
        if unit is not None:
            row["real_seconds"] = round(stats.real_tokens * unit, 6)
            row["padded_seconds"] = round(stats.padded_slots * unit, 6)
        out.append(row)
    return out
