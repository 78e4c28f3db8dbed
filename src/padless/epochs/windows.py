"""Windowed epochs: an epoch planned one window at a time, in bounded memory.

Global slot ``s`` of an epoch is batch ``s − cum[w]`` of window ``w`` (``cum`` the running
total of the windows' batch counts, one counting pass over the lengths per epoch), in that
window's order: shuffled from the window's own stream, or balanced within the window (elastic
re-balancing of each window's batches not yet delivered). A window's batches keep to its slots,
so an epoch holds the counts (one int per window) and the last two windows' plans; a restore
counts the windows' batches and plans one window. See :mod:`padless.planners.windows` for which items
share a window.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from ..core._schedule import steps_left
from ..core.plan import BatchPlan, PlanStats
from ..planners.windows import WindowedPlanner, child_sequence
from .base import Epochs, Figures, History, batch_order

__all__ = ["WindowedEpoch", "WindowedEpochs", "one_window_at_a_time"]


def one_window_at_a_time(window: int | str | None) -> tuple[str, str]:
    """What a windowed sampler (``window``) answers when asked for what only a whole-corpus
    plan has: ``(the epoch's global plan, a resume across a change of settings)``."""
    return (
        "epoch_plan needs the whole epoch's plan in memory; a windowed sampler "
        f"(window={window}) plans one window at a time: use "
        "sampler.planner.plans(seed, epoch) for the window plans",
        f"a windowed sampler (window={window}) cannot resume across a change of settings (it "
        "plans one window at a time)",
    )


class WindowedEpoch:
    """One epoch of a windowed plan (its ``history`` of elastic parts, going on at ``world``):
    its slots ask the windows' counts and plans that :class:`WindowedEpochs` keeps."""

    __slots__ = ("epochs", "epoch", "history", "world", "_cum")

    def __init__(self, epochs: WindowedEpochs, epoch: int, history: History, world: int) -> None:
        self.epochs, self.epoch, self.history, self.world = epochs, epoch, history, world
        self._cum: np.ndarray | None = None

    @property
    def cum(self) -> np.ndarray:
        """``cum[w]``: the first global slot of window ``w`` (``cum[-1]`` the epoch's batches)."""
        if self._cum is None:
            self._cum = self.epochs.cumulative(self.epoch)
        return self._cum

    @property
    def total(self) -> int:
        return int(self.cum[-1])

    def batch_at(self, slot: int) -> tuple[np.ndarray, int, int]:
        cum = self.cum
        w = int(cum.searchsorted(slot, side="right")) - 1
        values, offsets, order = self.epochs.window_plan(self.epoch, w, self.history, self.world)
        b = order[slot - int(cum[w])]
        return values, int(offsets[b]), int(offsets[b + 1])

    def slot_ids(self, positions: np.ndarray, history: History, world: int) -> np.ndarray:
        """The batch at each of ``positions`` (ascending) as its window's first slot plus its
        index in the window's plan.

        Cost: plans each window the positions fall in.
        """
        epochs = self.epochs
        cum = self.cum
        out = np.empty(len(positions), dtype=np.int64)
        windows = np.searchsorted(cum, positions, side="right") - 1
        for w in np.unique(windows).tolist():
            at = windows == w
            order = epochs.window_plan(self.epoch, w, history, world)[2]
            out[at] = int(cum[w]) + order[positions[at] - int(cum[w])]
        return out

    def entry_lengths(self, slot: int) -> np.ndarray:
        values, lo, hi = self.batch_at(slot)
        planner = self.epochs.planner
        return planner.yielded_lengths(values[lo:hi], planner.lengths)

    def stats(self, drop_last: bool) -> Figures:
        """``window`` and ``windows``, and the plan's figures summed over the windows.

        Cost: one planning pass over the windows.
        """
        epochs, epoch, world = self.epochs, self.epoch, self.world
        planner = epochs.planner
        cum = self.cum
        total = int(cum[-1])
        steps = steps_left(total, 0, world, drop_last)
        sizes_hist = np.zeros(1, dtype=np.int64)
        entries = real = padded = skipped = 0
        head = np.zeros(0, dtype=np.int64)
        ratio_sum, ok_steps = 0.0, 0
        carry = np.zeros(0, dtype=np.int64)
        for w, plan in enumerate(planner.plans(epochs.seed, epochs.plan_epoch(epoch))):
            fig = planner.window_stats(plan)
            entries += fig.sentences
            real += fig.real_tokens
            padded += fig.padded_slots
            skipped += int(plan.skipped.size)
            counts = np.bincount(plan.sizes)
            if counts.size > sizes_hist.size:
                counts[: sizes_hist.size] += sizes_hist
                sizes_hist = counts
            else:
                sizes_hist[: counts.size] += counts
            costs = planner.costs(plan)
            order = epochs.window_order(plan, w, epoch, self.history, world, int(cum[w]), costs)
            slot_costs = np.concatenate([carry, costs[order]])
            if head.size < world:
                head = np.concatenate([head, slot_costs[: world - head.size]])
            full = slot_costs.size // world * world
            if full:
                part = _step_ratio_sum(slot_costs[:full], world)
                ratio_sum += part[0]
                ok_steps += part[1]
            carry = slot_costs[full:]
        done = total // world
        if steps > done and carry.size:  # the last step, completed with the epoch's first batches
            last = np.concatenate([carry, head[np.arange(world - carry.size) % total]])
            part = _step_ratio_sum(last, world)
            ratio_sum += part[0]
            ok_steps += part[1]
        imbalance = ratio_sum / ok_steps if ok_steps else 1.0
        batches = int(sizes_hist.sum())
        figures = PlanStats(
            batches=batches,
            sentences=int(entries),
            real_tokens=int(real),
            padded_slots=int(padded),
            padding_fraction=(1.0 - real / padded) if padded else 0.0,
            min_sentences=int(np.flatnonzero(sizes_hist)[0]) if batches else 0,
            median_sentences=_hist_median(sizes_hist),
            max_sentences=int(np.flatnonzero(sizes_hist)[-1]) if batches else 0,
            mean_sentences=float(entries / batches) if batches else 0.0,
        ).as_dict()
        figures["skipped"] = skipped
        own = {"window": planner.window, "windows": planner.num_windows}
        return Figures(total, steps, imbalance, own, figures, {})

    def global_plan(self) -> tuple[BatchPlan, np.ndarray]:
        raise ValueError(one_window_at_a_time(self.epochs.window)[0])


class WindowedEpochs(Epochs):
    """The epochs of a :class:`padless.planners.windows.WindowedPlanner`: the windows' counts of the
    last epoch asked, the last two windows' plans and orders. They cannot resume across a
    change of settings (nothing holds what earlier settings delivered)."""

    def __init__(
        self, planner: WindowedPlanner, *, shuffle: bool, seed: int, balance: bool
    ) -> None:
        super().__init__(shuffle=shuffle, seed=seed, balance=balance)
        self.planner = planner
        self.window = planner.window
        self.refuses_changes = one_window_at_a_time(planner.window)[1]
        self._cum: tuple[int, np.ndarray] | None = None
        self._windows: OrderedDict[Any, tuple[np.ndarray, np.ndarray, np.ndarray]] = OrderedDict()

    def _make(
        self, epoch: int, history: History, world: int, changes: tuple[Any, ...]
    ) -> WindowedEpoch:
        return WindowedEpoch(self, epoch, history, world)  # no changes: they are refused

    def count(self, epoch: int) -> int:
        return int(self.cumulative(epoch)[-1])

    def plan_epoch(self, epoch: int) -> int:
        """The epoch whose windows ``epoch`` plans (epoch 0's for every epoch without shuffle)."""
        return epoch if self.shuffle else 0

    def cumulative(self, epoch: int) -> np.ndarray:
        """``cum[w]``: the first global slot of window ``w`` (``cum[-1]`` the epoch's batches)."""
        pe = self.plan_epoch(epoch)
        if self._cum is None or self._cum[0] != pe:
            counts = self.planner.counts(self.seed, pe)
            cum = np.zeros(counts.size + 1, dtype=np.int64)
            np.cumsum(counts, out=cum[1:])
            self._cum = (pe, cum)
        return self._cum[1]

    def window_order(
        self,
        plan: BatchPlan,
        w: int,
        epoch: int,
        history: History,
        world: int,
        first_slot: int,
        costs: np.ndarray | None = None,
    ) -> np.ndarray:
        """The order of window ``w``'s batches in the epoch's slots (as a whole-corpus plan's
        are ordered, from the window's own streams, with the history's positions made local to
        the window)."""
        b = len(plan)
        draw = None
        if self.shuffle:

            def draw(stream: int) -> np.random.Generator:
                return np.random.default_rng(child_sequence(self.seed, epoch, stream, w))

        if self.balance and costs is None:
            costs = self.planner.costs(plan)
        local = tuple((ws, min(max(p - first_slot, 0), b)) for ws, p in history)
        return batch_order(b, costs if self.balance else None, world, local, draw)

    def window_plan(
        self, epoch: int, w: int, history: History, world: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Window ``w``'s ``(values, offsets, order)`` (the last two asked are kept)."""
        key = (epoch, w, history if self.balance else (), world if self.balance else 0)
        hit = self._windows.get(key)
        if hit is not None:
            self._windows.move_to_end(key)
            return hit
        pe = self.plan_epoch(epoch)
        cum = self.cumulative(epoch)
        member = self.planner.layout.membership(self.seed, pe)
        plan = self.planner.plan_window(member, w, self.seed, pe)
        order = self.window_order(plan, w, epoch, history, world, int(cum[w]))
        entry = (self.planner.values(plan), plan.offsets, order)
        self._windows[key] = entry
        while len(self._windows) > 2:
            self._windows.popitem(last=False)
        return entry


def _step_ratio_sum(costs: np.ndarray, world: int) -> tuple[float, int]:
    """Σ over full steps of max ÷ mean rank cost (steps of zero cost left out), and their count."""
    table = costs.reshape(-1, world).astype(np.float64)
    means = table.mean(axis=1)
    ok = means > 0
    return float((table.max(axis=1)[ok] / means[ok]).sum()), int(ok.sum())


def _hist_median(hist: np.ndarray) -> float:
    total = int(hist.sum())
    if total == 0:
        return 0.0
    csum = np.cumsum(hist)
    lo = int(np.searchsorted(csum, (total - 1) // 2, side="right"))
    hi = int(np.searchsorted(csum, total // 2, side="right"))
    return (lo + hi) / 2
