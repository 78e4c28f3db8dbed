"""Histogram epochs: the global plan's batches cut on the lengths' histogram, each batch's
sequences computed when it is asked for.

The batch order is drawn as a whole-corpus plan's is (shuffled from ``(seed, epoch,
BATCH_ORDER)``, or balanced steps, re-balanced after an elastic resume); batch ``b``'s
sequences are :meth:`padless.planners.histogram.HistogramPlanner.batch` of the epoch. Memory is
O(distinct widths + batches) plus the planner's index, and a restore is O(1): nothing is
replayed. See :mod:`padless.planners.histogram` for the plan.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import _rng
from ..core._schedule import step_imbalance, steps_left
from ..core.plan import BatchPlan
from ..planners.histogram import HistogramPlanner
from .base import Epochs, Figures, History, batch_order
from .windows import one_window_at_a_time

__all__ = ["HistogramEpoch", "HistogramEpochs"]


class HistogramEpoch:
    """One epoch of a histogram plan (its ``history`` of elastic parts, going on at
    ``world``): the batch order (drawn when first asked) and the batch at a slot."""

    __slots__ = ("epochs", "epoch", "history", "world", "_order")

    def __init__(self, epochs: HistogramEpochs, epoch: int, history: History, world: int) -> None:
        self.epochs, self.epoch, self.history, self.world = epochs, epoch, history, world
        self._order: np.ndarray | None = None

    @property
    def total(self) -> int:
        return int(self.epochs.planner.num_batches)

    @property
    def order(self) -> np.ndarray:
        if self._order is None:
            self._order = self.epochs.order(self.epoch, self.history, self.world)
        return self._order

    def batch_at(self, slot: int) -> tuple[np.ndarray, int, int]:
        epochs, order = self.epochs, self._order
        b = int((self.order if order is None else order)[slot])
        batch = epochs.planner.batch(b, epochs.seed, self.epoch if epochs.shuffle else 0)
        return batch, 0, int(batch.size)

    def slot_ids(self, positions: np.ndarray, history: History, world: int) -> np.ndarray:
        """The batch (its index in the plan) at each of ``positions``."""
        return self.epochs.order(self.epoch, history, world)[positions]

    def entry_lengths(self, slot: int) -> np.ndarray:
        values, lo, hi = self.batch_at(slot)
        planner = self.epochs.planner
        return planner.yielded_lengths(values[lo:hi], planner.lengths)

    def stats(self, drop_last: bool) -> Figures:
        """``window`` ("histogram") and ``widths``, and the plan's figures (no pass over the
        lengths)."""
        epochs, world = self.epochs, self.world
        planner = epochs.planner
        total = planner.num_batches
        steps = steps_left(total, 0, world, drop_last)
        epoch = self.epoch if epochs.shuffle else 0
        imbalance = step_imbalance(planner.costs(epochs.seed, epoch)[self.order], world, steps)
        own = {
            "window": "histogram",
            "widths": int(np.count_nonzero(planner.counts[: planner.planned_widths])),
        }
        return Figures(total, steps, imbalance, own, planner.figures(epochs.seed, epoch), {})

    def global_plan(self) -> tuple[BatchPlan, np.ndarray]:
        raise ValueError(one_window_at_a_time(self.epochs.window)[0])


class HistogramEpochs(Epochs):
    """The epochs of a :class:`padless.planners.histogram.HistogramPlanner` (the last epoch asked kept,
    with its order). They cannot resume across a change of settings."""

    window = "histogram"

    def __init__(
        self, planner: HistogramPlanner, *, shuffle: bool, seed: int, balance: bool
    ) -> None:
        super().__init__(shuffle=shuffle, seed=seed, balance=balance)
        self.planner = planner
        self.refuses_changes = one_window_at_a_time(self.window)[1]

    def _make(
        self, epoch: int, history: History, world: int, changes: tuple[Any, ...]
    ) -> HistogramEpoch:
        return HistogramEpoch(self, epoch, history, world)  # no changes: they are refused

    def count(self, epoch: int) -> int:
        return int(self.planner.num_batches)

    def order(self, epoch: int, history: History, world: int) -> np.ndarray:
        """The epoch's batch order, as a global plan's (shuffled, or balanced and re-balanced
        after elastic parts)."""
        draw = None
        if self.shuffle:

            def draw(stream: int) -> np.random.Generator:
                return _rng.rng(self.seed, epoch, stream)

        planner = self.planner
        costs = planner.costs(self.seed, epoch if self.shuffle else 0) if self.balance else None
        return batch_order(planner.num_batches, costs, world, history, draw)
