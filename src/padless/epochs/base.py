"""The batches of one epoch, as a value: the protocol every plan form answers.

A sampler's epoch is a sequence of ``total`` global batch slots; everything a sampler does with
it (deal the slots to ranks, complete the last step, skip, resume, count targets, report) asks
the epoch, never how it was planned. An :class:`Epoch` is computed from its context, given
explicitly:

- ``epoch``: the epoch number (its plan and order are pure functions of ``(seed, epoch)``);
- ``history``: the ``(world_size, position)`` parts of the epoch run at other world sizes
  (balanced steps re-balance what each part left, :func:`padless.core._schedule.elastic_order`);
- ``world``: the world size the epoch goes on at;
- ``changes``: the changes of settings within the epoch (a resume across a change; see
  :meth:`padless.PlanSampler.load_state_dict`), each ``(position, settings, world_size,
  elastic, skips)``.

An :class:`Epochs` makes them for one corpus under one sampler's settings, one form each: the
whole-corpus plan (:mod:`padless.epochs.whole`), the windowed plan
(:mod:`padless.epochs.windows`) and the histogram plan (:mod:`padless.epochs.histogram`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from ..core import _rng
from ..core._schedule import balanced_order, elastic_order

if TYPE_CHECKING:
    from ..core.plan import BatchPlan
    from ..planners.spec import Planner, StepForm

__all__ = ["Epoch", "Epochs", "Figures", "History", "batch_order"]

History = tuple[tuple[int, int], ...]


class Figures(NamedTuple):
    """What an epoch says of itself for :meth:`padless.PlanSampler.stats`: ``batches`` in
    ``steps`` steps per rank, their ``imbalance``; then ``own`` figures of the form, the
    ``plan``'s figures (named ``plan_<name>`` where a name is taken) and ``more`` after them."""

    batches: int
    steps: int
    imbalance: float
    own: dict[str, Any]
    plan: dict[str, Any]
    more: dict[str, Any]


class Epoch(Protocol):
    """The batches of one epoch (all ranks, before the tail policy), in their order."""

    @property
    def total(self) -> int:
        """Batch slots of the epoch."""
        ...

    def batch_at(self, slot: int) -> tuple[np.ndarray, int, int]:
        """``(values, lo, hi)``: the batch at global ``slot`` (``0 <= slot < total``) is
        ``values[lo:hi]`` (dataset indices; a packing's split pieces as codes)."""
        ...

    def slot_ids(self, positions: np.ndarray, history: History, world: int) -> np.ndarray:
        """Ids naming the batch at each of ``positions`` (ascending, below :attr:`total`,
        int64) whatever its position, had the epoch run the elastic parts ``history`` and gone
        on at ``world`` (balanced steps order the batches by the world size)."""
        ...

    def entry_lengths(self, slot: int) -> np.ndarray:
        """The target-side lengths of the batch's entries (the last field of (N, F) lengths;
        a packing's pieces each on its own)."""
        ...

    def stats(self, drop_last: bool) -> Figures:
        """The epoch's figures under the tail policy ``drop_last``."""
        ...

    def global_plan(self) -> tuple[BatchPlan, np.ndarray]:
        """The epoch's global plan and its batch order (all ranks, before sharding); a
        ``ValueError`` for a form that never holds the whole epoch's plan."""
        ...


class Epochs:
    """The epochs of one corpus under one sampler's settings (``shuffle``, ``seed``,
    ``balance``): :meth:`at` gives the epoch of a context.

    ``planner`` is the form's planner (the sampler's ``planner``), ``window`` the form's
    ``window=`` setting, ``step_form`` how its batches follow the optimizer step (None: as
    planned). ``refuses_changes`` says why it cannot resume across a change of settings
    (None: it can, and :meth:`planner_of` rebuilds a recorded part's planner).
    """

    planner: Any
    window: int | str | None = None
    step_form: StepForm | None = None
    refuses_changes: str | None = None

    def __init__(self, *, shuffle: bool, seed: int, balance: bool) -> None:
        self.shuffle, self.seed, self.balance = shuffle, seed, balance
        self._last: Any = None  # the last epoch asked, and its key

    def at(self, epoch: int, history: History, world: int, changes: tuple[Any, ...]) -> Epoch:
        """The epoch ``epoch`` after its elastic parts ``history``, going on at ``world``,
        after its ``changes`` of settings (cached: the last one asked).

        Cost: on the per-batch path, a tuple and a comparison when it is the last one asked.
        """
        if not self.balance:
            history = ()  # only balanced steps order the batches by the world size
        key = (epoch, history, world, changes)
        last = self._last
        if last is None or last[0] != key:
            self._last = last = (key, self._make(epoch, history, world, changes))
        out: Epoch = last[1]
        return out

    def _make(self, epoch: int, history: History, world: int, changes: tuple[Any, ...]) -> Epoch:
        """The epoch of a context not asked last (:meth:`at` keeps it)."""
        raise NotImplementedError

    def count(self, epoch: int) -> int:
        """Batches of ``epoch`` planned from its start under these settings."""
        raise NotImplementedError

    def planner_of(self, settings: str) -> tuple[Planner, bool]:
        """The planner and ``balance`` of a recorded part's settings (canonical JSON)."""
        raise ValueError(self.refuses_changes)

    def state_record(self) -> dict[str, Any]:
        """What a sampler's state records of this form: ``{"window": ...}`` for the windowed
        and histogram forms, so that a sampler of another form can name it; nothing for the
        whole-corpus form (its states record their settings)."""
        return {} if self.window is None else {"window": self.window}

    def refuse_other_form(self, state: Any, owner: str) -> None:
        """Refuse a state of another form (``window=``), naming both: a windowed state records
        its ``window`` (:meth:`state_record`), a whole epoch's its settings (older windowed
        states record neither, and the fingerprint refuses them)."""
        if not isinstance(state, dict):
            return
        if "window" in state:
            saved = state["window"]
        elif "settings" in state:
            saved = None
        else:
            return
        if saved != self.window:
            raise ValueError(
                f"state does not fit: it was saved by a sampler with window={saved!r:.40}, this "
                f"{owner} has window={self.window!r} (each form plans and orders the epoch its "
                f"own way, so a run cannot change window=): load it with window={saved!r:.40}"
            )


def batch_order(
    count: int,
    costs: np.ndarray | None,
    world: int,
    history: History,
    draw: Callable[[int], np.random.Generator] | None,
    permute: bool = True,
) -> np.ndarray:
    """The order of ``count`` batches in an epoch's slots: balanced steps of ``world`` when
    ``costs`` are given (re-balanced after the elastic parts ``history``, positions local to
    these batches), else shuffled (with ``permute``) or as planned.

    ``draw(stream)`` is the generator of a random stream (``BATCH_ORDER``, ``REBALANCE``);
    None for no shuffle.

    >>> batch_order(4, np.array([5, 1, 6, 2]), 2, (), None).tolist()
    [2, 0, 3, 1]
    """
    gen = None if draw is None else draw(_rng.BATCH_ORDER)
    if costs is not None:
        order = balanced_order(costs, history[0][0] if history else world, gen)
        if history:
            again = None if draw is None else draw(_rng.REBALANCE)
            order = elastic_order(order, costs, history, world, again)
        return order
    if gen is not None and permute:
        return gen.permutation(count).astype(np.int64)
    return np.arange(count, dtype=np.int64)
