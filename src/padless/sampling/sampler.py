"""The one batch sampler: epochs, shuffled batch order, equal rank shards, O(1) exact resume.

:class:`PlanSampler` takes lengths and a planner spec (``TokenBudget``, ``ExactLength``,
``Buckets``, ``Packing``…). An epoch's batches are a value it asks (:mod:`padless.epochs`: the
global plan, identical on every rank with no communication, or its windowed or histogram form,
each with its batches ordered: shuffled from their own random stream, or grouped into
cost-balanced steps), and it hands rank ``r`` the global slots ``p + s·world_size + r`` for steps
``s = 0, 1, …`` from the start position ``p``. The slot arithmetic and the balancing are pure
functions in :mod:`padless.core._schedule`; the loop and the state live in
:class:`padless.core._state.Resumable`; what is left here (optimizer steps, loss normalisation,
figures, fingerprints, resume across a change of settings) asks the epoch, never its form.

Positions are **global**: the number of global batch slots consumed (steps × world_size). A state
saved at one world size can therefore be loaded at another (elastic resume); with
``balance=True`` the batches not yet delivered are re-balanced for the new world size.

Tail policy when the batches left do not fill the last step: ``drop_last=False`` completes it with
the epoch's first batches (counted in ``repeated``), ``drop_last=True`` drops the incomplete step
(counted in ``dropped``). Both counts are over all ranks, for the current epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict, cast

import numpy as np

from ..core._check import check_bool, check_seed, non_negative, positive
from ..core._keywords import checks_keywords
from ..core._schedule import check_ranks, padded_costs, step_imbalance
from ..core._state import Resumable, change_record, fingerprint
from ..core.plan import BatchPlan
from ..core.schedules import Schedule
from ..epochs import Epoch, epochs_for
from ..io.checked import CheckedDataset
from ..planners.spec import Spec, StepForm, strategies

if TYPE_CHECKING:
    from ..planners.histogram import HistogramPlanner
    from ..planners.spec import Planner
    from ..planners.windows import WindowedPlanner

__all__ = ["PlanSampler", "SamplerOptions", "check_ranks", "padded_costs", "step_imbalance"]


class SamplerOptions(TypedDict, total=False):
    """Keywords every sampler takes (see :class:`PlanSampler`)."""

    shuffle: bool
    seed: int
    rank: int
    world_size: int
    drop_last: bool
    balance: bool
    window: int | str | None
    batches_per_step: Any
    tokens_per_step: Any
    groups: Any


# the sampler's own settings in a state's config (the rest are the planner's)
_SAMPLER_KEYS = ("class", "shuffle", "balance", "batches_per_step")


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
            :mod:`padless.planners.windows`): bounded memory for corpora of any size, e.g. a memory-mapped
            ``.npy`` of lengths; ``len()`` then costs one counting pass per epoch (cached).
            ``"histogram"``: the global plan's batches (the same shapes and padding) cut on the
            lengths' histogram, each batch's sequences computed when it is asked for (see
            :mod:`padless.planners.histogram`): global quality in memory O(distinct lengths + batches)
            plus an index of the sequences by length (a temporary file past 2**26 of them);
            token budgets without a cost model.
        batches_per_step: global micro-batches (the plan's batches, over all ranks) per
            optimizer step: an int or a schedule of the global optimizer step (an object with
            ``value(step)``, ``values(steps)`` and ``as_dict()``, e.g. ``padless.Schedule``), a
            batch-size ramp. Every value must be a positive multiple of ``world_size``
            (checked where it is first evaluated). The plan does not change: the ramp only cuts
            the stream of micro-batches into optimizer steps, so resume stays O(1) in the plan.
            See :meth:`step_sizes`, :meth:`steps`, :meth:`loss_tokens`.
        tokens_per_step: instead of ``batches_per_step``, tokens per optimizer step (an int or
            a schedule) for a spec with a token budget (``max_tokens``): ``ceil(tokens /
            max_tokens)`` batches, rounded up to a multiple of ``world_size``.
        groups: one int id per sequence (a DPO pair's chosen and rejected share one, a GRPO
            group's completions share one; a group's items need not be adjacent), or None.
            Every batch holds whole groups, a group's items next to each other in increasing
            index order: ``TokenBudget`` walks the groups by their longest item and cuts padded
            batches under its budgets (a group over a budget alone is a ``ValueError`` naming
            it), ``Packing`` packs whole groups into rows (:func:`padless.plan_groups`). The
            groups change only how an epoch's plan is made: shuffle, ranks, ``balance``, steps,
            skip and resume work as without. A spec or ``window=`` that cannot keep groups whole
            refuses them here, naming both.

    Optimizer steps (with ``batches_per_step``), the rules:

    - the steps cut the batches the ranks yield in an epoch, in their order: optimizer step
      ``g`` (global, counted from 0 at epoch 0's start) takes the next ``batches_per_step(g)``
      global batches, ``batches_per_step(g) / world_size`` on every rank (so every rank has the
      same steps, balanced or not); skipped batches (:meth:`skip`) are not yielded and not
      counted;
    - the epoch's last optimizer step may be short: it takes what is left, and the next epoch
      starts a new step; the global step continues across epochs (:meth:`first_step`; earlier
      epochs are counted at the current world size and skips);
    - a state saved mid optimizer step resumes inside it: the step continues with its
      remaining micro-batches, then the cut goes on as uninterrupted (at another world size,
      a micro-batch step belongs to the optimizer step its first global batch falls in).

    >>> from padless import TokenBudget
    >>> s = PlanSampler([3, 5, 2, 7, 4, 4], TokenBudget(max_tokens=10), seed=1, world_size=2)
    >>> len(s), sorted(i for b in s for i in b)
    (2, [1, 4, 5])
    """

    _fixed_settings = ("class", "shuffle")
    _skips_cross_changes = True
    _changeable_text = (
        "its budget, capacity, schedules, balance and world size, not its strategy or shuffle"
    )

    # a few words on each setting, for a wrong keyword given to another component
    about: ClassVar[dict[str, str]] = {
        "shuffle": "shuffle the batch order and membership each epoch",
        "seed": "the seed all randomness derives from",
        "rank": "this process's shard of the batches",
        "world_size": "how many ranks the batches are split over",
        "drop_last": "drop the incomplete last step instead of completing it with repeats",
        "balance": "steps of batches of similar cost",
        "window": "items per window of a windowed plan",
        "batches_per_step": "global micro-batches per optimizer step",
        "tokens_per_step": "tokens per optimizer step",
        "groups": "one id per sequence; a group's items stay in one batch",
    }
    # what it says of a keyword it does not take: a strategy's settings go in its spec
    keyword_notes: ClassVar[dict[str, str]] = {
        k: f"give a strategy's settings in its spec, PlanSampler(lengths, {spec}({k}=...)), "
        f"or to its keyword sampler, {sampler}(lengths, {k}=...)"
        for k, spec, sampler in (
            ("max_tokens", "TokenBudget", "TokenBudgetSampler"),
            ("max_sentences", "TokenBudget", "TokenBudgetSampler"),
            ("batch_size", "ExactLength", "ExactLengthSampler"),
            ("boundaries", "Buckets", "BucketSampler"),
            ("num_buckets", "Buckets", "BucketSampler"),
            ("capacity", "Packing", "PackingSampler"),
            ("rows_per_batch", "Packing", "PackingSampler"),
        )
    }

    @checks_keywords()
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
        window: int | str | None = None,
        batches_per_step: Any = None,
        tokens_per_step: Any = None,
        groups: Any = None,
    ) -> None:
        if not isinstance(spec, Spec):
            raise TypeError(
                f"spec must be a padless planner spec (e.g. padless.TokenBudget(max_tokens=4096)), "
                f"got {type(spec).__name__}"
            )
        self.shuffle = check_bool("shuffle", shuffle)
        self.seed = check_seed("seed", seed)
        self.rank, self.world_size = check_ranks(rank, world_size)
        self.drop_last = check_bool("drop_last", drop_last)
        self.balance = check_bool("balance", balance)
        if self.balance and spec.orders_batches:
            raise ValueError(
                f"balance must be False with {spec.describe()}: its plan orders the batches "
                "(a curriculum), which balanced steps would reorder"
            )
        self.spec = spec
        # the batches of each epoch, in the form ``window`` says (padless.epochs)
        self._epochs = epochs_for(
            spec,
            lengths,
            window,
            shuffle=self.shuffle,
            seed=self.seed,
            balance=self.balance,
            groups=groups,
        )
        self.window = self._epochs.window
        self.planner: Planner | WindowedPlanner | HistogramPlanner = self._epochs.planner
        self._step_form: StepForm | None = self._epochs.step_form
        self.epoch = 0
        self._reset_position()
        self._fingerprint: str | None = None
        self.batches_per_step = _steps_schedule(self, batches_per_step, tokens_per_step)
        self._totals: dict[int, int] = {}  # batches of each plan epoch, for first_step
        self._firsts: tuple[Any, dict[int, int]] = ((), {0: 0})  # (skips, epoch -> first step)
        self._cuts: dict[Any, tuple[int, np.ndarray]] = {}
        if self.batches_per_step is not None:
            self._batches_per_step(np.zeros(1, dtype=np.int64))  # step 0 checked at once

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

    # ------------------------------------------------------------------ epochs
    def _epoch_of(self, epoch: int, changes: tuple[Any, ...] | None = None) -> Epoch:
        """The batches of ``epoch`` (the current one's after its elastic parts and changes)."""
        now = epoch == self.epoch
        if changes is None:
            changes = self._changes if now else ()
        return self._epochs.at(epoch, self._history if now else (), self.world_size, changes)

    def _epoch_now(self) -> Epoch:
        """The batches of the current epoch."""
        return self._epochs.at(self.epoch, self._history, self.world_size, self._changes)

    def epoch_plan(self, epoch: int) -> tuple[BatchPlan, np.ndarray]:
        """Return an epoch's global plan and its batch order (all ranks, before sharding).

        Cost: one plan computation (cached for the latest epoch).
        """
        return self._epoch_of(check_seed("epoch", epoch)).global_plan()

    def checked(self, dataset: Any, *, field: Any = None) -> Any:
        """``dataset`` bound to this sampler's lengths: :class:`padless.io.checked.CheckedDataset`.

        A dataset of another size is a ``ValueError`` now; an item whose length is not the
        planned one is a ``ValueError`` when it is loaded. ``field`` says what to measure
        (None, a key such as ``"input_ids"``, a tuple of keys, or a function).
        Cost: O(1) per item (an Arrow ``datasets.Dataset`` is checked whole, vectorised).

        >>> from padless import TokenBudget
        >>> s = PlanSampler([3, 1], TokenBudget(max_tokens=4))
        >>> s.checked([[5, 6, 7], [8]])[0]
        [5, 6, 7]
        """
        return CheckedDataset(dataset, self.lengths, field=field)

    # ------------------------------------------------------------------ Resumable hooks
    def _total(self) -> int:
        return self._epoch_now().total

    def _batch_at(self, slot: int) -> list[int]:
        # the per-batch path: the epoch asked as _epoch_now asks it, one call fewer
        epoch = self._epochs.at(self.epoch, self._history, self.world_size, self._changes)
        source, lo, hi = epoch.batch_at(slot)
        out: list[int] = source[lo:hi].tolist()
        return out

    def _slot_ids(
        self, positions: np.ndarray, history: tuple[tuple[int, int], ...], world: int
    ) -> np.ndarray | None:
        # only balanced steps order the batches by the world size
        return self._epoch_now().slot_ids(positions, history, world) if self.balance else None

    def __iter__(self) -> Iterator[list[int]]:
        form = self._step_form
        if form is None:
            return self._run(self._batch_at)
        table: list[Any] = [None, None]  # (the skips it was made under, the steps' keys)
        epochs, list_at = self._epochs, form.list_at

        def batch_at(slot: int, micro: int) -> list[int]:
            # the batch at ``slot`` in the form of its optimizer step (``micro``: the epoch's
            # micro-batch step it is dealt in); the steps and their forms' keys are cut once
            # per iteration and skip
            if table[0] is not self._skips:
                table[:] = [self._skips, self._micro_keys(form)]
            epoch = epochs.at(self.epoch, self._history, self.world_size, self._changes)
            source, lo, hi = epoch.batch_at(slot)
            key = table[1][micro]
            if key is None:
                out: list[int] = source[lo:hi].tolist()
                return out
            return list_at(source, lo, hi, key)

        return self._run(batch_at, stepped=True)

    def global_step(self, micro: int) -> int:
        """The global optimizer step of the current epoch's micro-batch step ``micro`` (the
        ``micro``-th batch every rank yields in the epoch, counted from its start, skipped
        batches not counted): with ``batches_per_step``, the optimizer step its first global
        batch falls in; without, each micro-batch step is one optimizer step, counted across
        epochs (earlier epochs at the current world size, tail policy and skips).

        Cost: the first call of an epoch counts the earlier epochs' batches (as
        :meth:`first_step`) and cuts this one's steps; cached.

        >>> from padless import TokenBudget
        >>> s = PlanSampler([4] * 10, TokenBudget(max_tokens=4), world_size=2, shuffle=False)
        >>> s.set_epoch(1)
        >>> s.global_step(0), s.global_step(4)
        (5, 9)
        """
        micro = non_negative("micro", micro)
        steps = self._micro_steps()
        if micro >= steps.size:
            raise ValueError(
                f"micro must be < {steps.size}, the micro-batch steps of epoch {self.epoch}, "
                f"got {micro}"
            )
        return int(steps[micro])

    def _micro_keys(self, form: StepForm) -> list[Any]:
        """The form's key of every micro-batch step of the current epoch. Without
        ``batches_per_step``, earlier epochs are counted only until their steps pass the form's
        :meth:`~padless.planners.spec.StepForm.settles_at` (then every step has its key)."""
        settle = form.settles_at()
        if self.batches_per_step is None and self.epoch > 0:
            world, first = self.world_size, 0
            for e in range(self.epoch):
                first += self._epoch_batches(e, self._total_of(e)) // world
                if first >= settle:
                    micro = self._epoch_batches(self.epoch, self._total()) // world
                    return form.keys_at(np.array([settle], dtype=np.int64)) * micro
        return form.keys_at(self._micro_steps())

    def _micro_steps(self) -> np.ndarray:
        """The global optimizer step of every micro-batch step of the current epoch (cached)."""
        total = self._total()
        world = self.world_size
        key = (self.epoch, total, self._skips, world, self.drop_last, self._changes)
        cached = self.__dict__.get("_micro_cache")
        if cached is not None and cached[0] == key:
            return cast(np.ndarray, cached[1])
        micro = self._epoch_batches(self.epoch, total) // world
        if self.batches_per_step is None:
            first = sum(
                self._epoch_batches(e, self._total_of(e)) // world for e in range(self.epoch)
            )
            out = first + np.arange(micro, dtype=np.int64)
        else:
            first = self.first_step()
            bounds = self._bounds(first, micro * world)
            pos = np.arange(micro, dtype=np.int64) * world
            out = first + np.searchsorted(bounds, pos, side="right") - 1
        self.__dict__["_micro_cache"] = (key, out)
        return out

    # ------------------------------------------------------------------ figures
    def stats(self) -> dict[str, Any]:
        """Figures of the current epoch's full schedule (from position 0).

        ``imbalance`` is the straggler figure: the mean over steps of max rank cost ÷ mean rank
        cost (1.0 is perfect), with the planner's cost per batch (padded tokens count × longest;
        real tokens for packing; in the spec's ``cost`` model when it has one, named in
        ``cost``). ``real_work`` is the share of that cost spent on real tokens, not padding
        (in padded tokens without a model: 1 − padding fraction). ``length_trend`` and
        ``length_lag1`` say how the schedule mixes lengths: the correlation between the step
        index and the step's mean sequence length, and that mean's lag-1 autocorrelation (both
        near 0 for a shuffled order; HF's ``group_by_length`` megabatches, sorted inside, make a
        sawtooth with lag1 well above 0).
        ``repeated``/``dropped`` are the tail policy's batch counts;
        the plan's own figures follow, a plan figure of the same name prefixed ``plan_``.
        A windowed sampler adds ``window`` and ``windows`` (cost: one planning pass). With
        ``batches_per_step``: ``optimizer_steps`` (the epoch's, from its start), ``first_step``
        and ``batches_per_step`` (the schedule's ``as_dict()``). After a change of settings
        within the epoch (see :meth:`load_state_dict`) the plan's figures are the rest of the
        epoch's, under the current settings, and ``changes`` and ``delivered_before_change``
        (batches) say so.
        """
        fig = self._epoch_now().stats(self.drop_last)
        out = {**self._schedule_figures(fig.batches, fig.steps, fig.imbalance), **fig.own}
        for k, v in fig.plan.items():
            out[f"plan_{k}" if k in out else k] = v
        out.update(fig.more)
        if self.batches_per_step is not None:
            out["optimizer_steps"] = int(self.step_sizes().size)
            out["first_step"] = self.first_step()
            out["batches_per_step"] = self.batches_per_step.as_dict()
        return out

    def _schedule_figures(self, total: int, steps: int, imbalance: float) -> dict[str, Any]:
        """The figures of :meth:`stats` every plan form reports first: the epoch, the strategy,
        ``total`` batches in ``steps`` steps per rank, the tail policy's counts, ``imbalance``."""
        return {
            "epoch": self.epoch,
            "strategy": self.spec.name,
            "batches": total,
            "steps": steps,
            "batches_per_rank": steps,
            "world_size": self.world_size,
            "repeated": self.repeated,
            "dropped": self.dropped,
            "imbalance": imbalance,
        }

    # ------------------------------------------------------------------ optimizer steps
    def _batches_per_step(self, steps: np.ndarray, need: int | None = None) -> np.ndarray:
        """``batches_per_step`` at global optimizer ``steps``, each checked (a positive multiple
        of ``world_size``; the first bad one is a ``ValueError`` naming its step and value).
        With ``need``, only the steps up to the first whose running sum reaches ``need``."""
        assert self.batches_per_step is not None
        values = np.asarray(self.batches_per_step.values(steps))
        if values.shape != steps.shape or not np.issubdtype(values.dtype, np.number):
            raise ValueError(
                f"batches_per_step.values(steps) must return one number per step (shape "
                f"{steps.shape}), got {values.dtype} of shape {values.shape}"
            )
        out = values.astype(np.int64)
        world = self.world_size
        bad = (out != values) | (out <= 0) | (out % world != 0)
        if need is not None:
            good = out[: int(np.argmax(bad))] if bad.any() else out
            end = int(np.searchsorted(np.cumsum(good), need)) + 1
            out, bad = out[:end], bad[:end]
        if bad.any():
            i = int(np.argmax(bad))
            v = values[i].item()
            rule = (
                "a positive int" if out[i] != v or v <= 0 else f"a multiple of world_size={world}"
            )
            raise ValueError(f"batches_per_step at step {int(steps[i])} is {v}, not {rule}")
        return out

    def _bounds(self, first: int, count: int) -> np.ndarray:
        """The optimizer steps from global step ``first`` that cut ``count`` global batches:
        ``bounds[k]`` global batches come before step ``first + k``, ``bounds[-1] == count``
        (the last step takes what is left).

        Cost: O(steps) values of the schedule, in doubling chunks (the steps used are checked).
        """
        parts = [np.zeros(1, dtype=np.int64)]
        covered = done = 0
        n = 1024
        while covered < count:
            steps = first + done + np.arange(n, dtype=np.int64)
            cum = covered + np.cumsum(self._batches_per_step(steps, count - covered))
            parts.append(cum)
            done += cum.size
            covered = int(cum[-1])
            n *= 2
        out = np.concatenate(parts)
        out[-1] = count
        return out

    def _total_of(self, epoch: int) -> int:
        """Batch slots of ``epoch``'s plan (cached; the current epoch's from its schedule)."""
        if epoch == self.epoch:
            return self._total()
        key = epoch if self.shuffle else 0
        if key not in self._totals:
            self._totals[key] = self._epochs.count(key)
        return self._totals[key]

    def _require_steps(self, what: str) -> None:
        if self.batches_per_step is None:
            raise ValueError(
                f"{what} needs optimizer steps: pass batches_per_step= (or tokens_per_step=) to "
                f"{type(self).__name__}"
            )

    def first_step(self, epoch: int | None = None) -> int:
        """The global optimizer step ``epoch`` (default: the current one) starts at: the sum of
        the earlier epochs' optimizer steps (their batches cut by ``batches_per_step``, each at
        the current world size, tail policy and recorded skips).

        Cost: the first call plans each earlier epoch once (to count its batches; once in all
        with ``shuffle=False``) and evaluates the schedule for its steps; cached.

        >>> from padless import TokenBudget
        >>> s = PlanSampler([4] * 10, TokenBudget(max_tokens=4), batches_per_step=4, shuffle=False)
        >>> s.step_sizes().tolist(), s.first_step(1), s.first_step(2)
        ([4, 4, 2], 3, 6)
        """
        self._require_steps("first_step")
        epoch = self.epoch if epoch is None else check_seed("epoch", epoch)
        if self._firsts[0] != self._skips:  # a skip changes the counts of later epochs
            self._firsts = (self._skips, {0: 0})
        firsts = self._firsts[1]
        known = max(e for e in firsts if e <= epoch)
        for e in range(known, epoch):
            count = self._epoch_batches(e, self._total_of(e))
            firsts[e + 1] = firsts[e] + int(self._bounds(firsts[e], count).size) - 1
        return firsts[epoch]

    def _iteration_start(self) -> int:
        """The global position the current iteration started at (a loaded state's before it
        starts): where :meth:`loss_tokens`, :meth:`steps` and :meth:`optimizer_steps` count."""
        return self._pending if self._pending is not None else self._start

    def _cut(self, start: int) -> tuple[int, np.ndarray]:
        """``(global step, sizes)``: the optimizer steps of an iteration of the current epoch
        from global position ``start``: the first one's global step and the micro-batches per
        rank of each (the first one's rest when ``start`` is inside it)."""
        key = (self.epoch, start, self._skips)
        if key in self._cuts:
            return self._cuts[key]
        total = self._total()
        world = self.world_size
        micro = self._positions(total, start)[1]
        before = self._counted(total, start)
        first = self.first_step()
        bounds = self._bounds(first, before + micro * world)
        # micro-batch step i (global batches before + i·world onwards) is in the step its
        # first global batch falls in
        reached = np.clip(-(-(bounds - before) // world), 0, micro)
        sizes = np.diff(reached)
        k0 = int(np.searchsorted(bounds, before, side="right")) - 1 if micro else sizes.size
        sizes = sizes[k0:]
        sizes = sizes[: int(np.flatnonzero(sizes)[-1]) + 1] if sizes.any() else sizes[:0]
        if len(self._cuts) > 8:
            self._cuts.clear()
        self._cuts[key] = (first + k0, sizes)
        return first + k0, sizes

    def step_sizes(self) -> np.ndarray:
        """Micro-batches per rank of each optimizer step of the current epoch, from its start
        (int64; they sum to the epoch's ``len()`` from position 0; the last may be short).

        Cost: O(optimizer steps), vectorised (cached).

        >>> from padless import TokenBudget
        >>> s = PlanSampler([4] * 10, TokenBudget(max_tokens=4), batches_per_step=4,
        ...                 world_size=2)
        >>> s.step_sizes().tolist(), len(s)
        ([2, 2, 1], 5)
        """
        self._require_steps("step_sizes")
        return self._cut(0)[1].copy()

    def optimizer_steps(self) -> int:
        """Optimizer steps of the current iteration (the next one before it starts), from its
        start position: a state saved mid optimizer step resumes inside it, so its first step
        is that step's rest (:meth:`steps` and :meth:`loss_tokens` count the same steps)."""
        self._require_steps("optimizer_steps")
        return int(self._cut(self._iteration_start())[1].size)

    def steps(self, batches: Iterable[Any]) -> Iterator[list[Any]]:
        """Group this rank's ``batches`` (this sampler's, e.g. a DataLoader over it) into lists,
        one per optimizer step of the iteration, following the cut from where it started.

        The cut is read at the first batch (once the iteration has started); an iterable that
        ends early ends with the short group it has. More batches than the iteration's are a
        ``ValueError``.

        >>> from padless import TokenBudget
        >>> s = PlanSampler([4] * 10, TokenBudget(max_tokens=4), batches_per_step=4,
        ...                 shuffle=False, world_size=2)
        >>> [len(group) for group in s.steps(s)]
        [2, 2, 1]
        """
        self._require_steps("steps")
        return self._grouped(iter(batches))

    def _grouped(self, it: Iterator[Any]) -> Iterator[list[Any]]:
        try:
            head = next(it)
        except StopIteration:
            return
        sizes = self._cut(self._iteration_start())[1].tolist()
        group: list[Any] = [head]
        for size in sizes:
            while len(group) < size:
                try:
                    group.append(next(it))
                except StopIteration:
                    yield group
                    return
            yield group
            group = []
            try:
                group.append(next(it))
            except StopIteration:
                return
        raise ValueError(
            f"steps() got more than the {sum(sizes)} batches of this iteration's "
            f"{len(sizes)} optimizer steps: pass this sampler's batches (one iteration)"
        )

    # ------------------------------------------------------------------ loss normalisation
    def loss_tokens(
        self,
        step: int,
        *,
        accumulation: int | None = None,
        targets: str | Callable[[np.ndarray], Any] = "shifted",
    ) -> tuple[int, list[int]]:
        """Target tokens of optimizer step ``step``: ``(step_total, per_micro_batch)``.

        Every rank knows the global plan, so each can count every rank's targets with no
        collective. Optimizer step ``k`` is, on each rank, its ``accumulation`` consecutive
        batches ``k·accumulation …`` of the current iteration (the last step may hold fewer).
        ``step_total`` counts the targets of the whole step (all ranks × all micro-batches),
        ``per_micro_batch`` this rank's count for each of its micro-batches in that step.
        Divide each micro-batch's *summed* loss by ``step_total`` (times the world size when
        the gradient reduction averages, as DDP does: ``padless.torch.scale_loss``), and the
        accumulated gradient is that of the mean loss over every real target of the step.

        With ``batches_per_step``, the optimizer steps are the sampler's (:meth:`steps`): step
        ``k`` is the ``k``-th optimizer step of the iteration (the rest of a step a state was
        saved inside, first) and its micro-batches are that step's.

        Args:
            step: optimizer step within the iteration (steps count from where the current
                iteration started, or a loaded state's position before it starts).
            accumulation: micro-batches per optimizer step on each rank (default 1). With
                ``batches_per_step`` it is the step's (``batches_per_step / world_size``); one
                given too must match it.
            targets: targets of a sequence of length l: ``"shifted"`` l − 1 (next-token
                prediction, labels masked at each sequence's first token, as
                ``collate_packed`` does), ``"all"`` l, or a function mapping an int64 array
                of lengths to the target count of each. (N, F) lengths count their last field
                (the target side); packed pieces count as sequences of their own.

        Cost: O(world_size × accumulation) batch look-ups; the first call of an epoch makes
        one O(N) pass for ``"shifted"``/``"all"`` (cached), a function is called once per
        batch of the step.

        >>> from padless import TokenBudget
        >>> lengths = [3, 5, 2, 7, 4, 4]
        >>> s = PlanSampler(lengths, TokenBudget(max_tokens=10), world_size=2, rank=1)
        >>> [[lengths[i] for i in batch] for batch in s]  # rank 0 gets [7] then [5]
        [[4, 4], [2, 3]]
        >>> s.loss_tokens(0, accumulation=2)  # (6 + 4) on rank 0, (3+3) + (1+2) here
        (19, [6, 3])
        """
        step = non_negative("step", step)
        if accumulation is not None:
            accumulation = positive("accumulation", accumulation)
        count = _target_rule(targets)
        total = self._total()
        start = self._iteration_start()
        table_slots = self._step_slots(total, start)  # each step's slots (skips left out)
        steps = int(table_slots.shape[0])
        if self.batches_per_step is not None:
            lo, hi = self._step_range(step, start, accumulation)
        else:
            accumulation = accumulation or 1
            optimizer_steps = -(-steps // accumulation)
            if step >= optimizer_steps:
                raise ValueError(
                    f"step must be < {optimizer_steps}, the optimizer steps left in this "
                    f"iteration ({steps} batches per rank from position {start}, accumulation="
                    f"{accumulation}), got {step}"
                )
            lo, hi = step * accumulation, min((step + 1) * accumulation, steps)
        micro = table_slots[lo:hi]
        table = np.zeros((self.world_size, micro.shape[0]), dtype=np.int64)
        form = self._step_form
        keys: list[Any] = []
        if form is not None:  # the sequences each step's form delivers (a warm-up's pieces)
            base = self._counted(total, start) // self.world_size + lo
            keys = self._micro_keys(form)[base : base + micro.shape[0]]
        for r in range(self.world_size):
            for k, slot in enumerate(micro[:, r].tolist()):
                if form is None or keys[k] is None:
                    table[r, k] = count(self._epoch_now().entry_lengths(slot))
                else:
                    source, a, b = self._epoch_now().batch_at(slot)
                    entries = self.planner.yielded_lengths(source[a:b], self.lengths)
                    table[r, k] = count(form.entry_lengths_at(entries, keys[k]))
        return int(table.sum()), table[self.rank].tolist()

    def _step_range(self, step: int, start: int, accumulation: int | None) -> tuple[int, int]:
        """The micro-batch steps ``[lo, hi)`` of the iteration from ``start`` that optimizer
        step ``step`` of it takes (``accumulation``, if given, checked against the schedule)."""
        first, sizes = self._cut(start)
        if step >= sizes.size:
            raise ValueError(
                f"step must be < {sizes.size}, the optimizer steps left in this iteration "
                f"(from position {start}, global optimizer step {first}), got {step}"
            )
        if accumulation is not None:
            per_rank = int(self._batches_per_step(np.array([first + step]))[0]) // self.world_size
            if accumulation != per_rank:
                raise ValueError(
                    f"accumulation={accumulation} does not match batches_per_step: optimizer "
                    f"step {first + step} takes {per_rank} micro-batches per rank (leave "
                    "accumulation out)"
                )
        lo = int(sizes[:step].sum())
        return lo, lo + int(sizes[step])

    # ------------------------------------------------------------------ state
    def _fingerprint_now(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = self._fingerprint_of(self._lengths_hash())
        return self._fingerprint

    def _lengths_hash(self) -> int:
        from .._kernels import hash_ints

        return int(hash_ints(self.lengths.reshape(-1), 0))

    def _config(self) -> dict[str, Any]:
        """The settings a state's fingerprint covers (JSON-safe)."""
        config = {
            "class": self.spec.state_tag or type(self).__name__,
            "shuffle": self.shuffle,
            "balance": self.balance,
            **self.planner.config(),
        }
        if self.batches_per_step is not None:
            config["batches_per_step"] = self.batches_per_step.as_dict()
        return config

    @property
    def groups(self) -> np.ndarray | None:
        """The group id of every sequence (int64), or None: a sampler without groups."""
        ids: np.ndarray | None = getattr(self.planner, "groups", None)
        return ids

    def _fingerprint_of(self, lengths_hash: int) -> str:
        data: dict[str, Any] = {
            "lengths_shape": list(self.lengths.shape),
            "lengths_hash": lengths_hash,
        }
        groups = self.groups
        if groups is not None:  # per-item data like the lengths (absent: states as before)
            from .._kernels import hash_ints

            data["groups_hash"] = int(hash_ints(np.ascontiguousarray(groups), 0))
        return fingerprint(self._config(), data=data)

    def _settings_record(self) -> dict[str, Any] | None:
        """What a state records of the settings it was saved under: the spec's settings (to
        rebuild its planner) and the fingerprint's config (to check them)."""
        if self._epochs.refuses_changes is not None:
            return None
        return {"spec": self.spec.as_dict(), "config": self._config()}

    def _changeable(self) -> None:
        why = self._epochs.refuses_changes
        if why is not None:
            raise ValueError(
                f"state does not fit: the settings differ, and {why}: load it with the settings "
                "it was saved under"
            )

    def _checked_settings(self, record: Any) -> str:
        """A recorded part's settings, checked (they rebuild a planner of this strategy over
        these lengths whose config is the recorded one), as canonical JSON."""
        import json

        if not isinstance(record, dict) or not {"spec", "config"} <= set(record):
            raise ValueError(
                f"a change's settings must hold 'spec' and 'config', got {record!r:.80}"
            )
        settings = json.dumps(
            {"spec": record["spec"], "config": record["config"]}, sort_keys=True, default=str
        )
        try:
            planner, _ = self._epochs.planner_of(settings)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"state's settings {record['spec']!r:.120} do not make a {self.spec.name} "
                f"spec for these lengths: {err}"
            ) from err
        config = record["config"]
        own = {k: v for k, v in config.items() if k not in _SAMPLER_KEYS}
        if (
            json.dumps(own, sort_keys=True, default=str)
            != json.dumps(planner.config(), sort_keys=True, default=str)
            or config.get("class") != self._config()["class"]
            or not isinstance(config.get("balance"), bool)
        ):
            raise ValueError(
                "state's settings do not agree with its config (edited, or from another padless)"
            )
        return settings

    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        state = super().state_dict(consumed)
        state.update(self._epochs.state_record())  # the form, so another form can name it
        return state

    state_dict.__doc__ = Resumable.state_dict.__doc__

    def _shown(self, name: str, value: Any) -> Any:
        """The strategy as the user built it (``ExactLength``): a record's ``class`` is the
        state tag of its spec (``ExactLengthSampler``, the keyword sampler's name)."""
        if name == "class":
            for spec in strategies().values():
                if spec.state_tag and spec.state_tag == value:
                    return spec.__name__
        return value

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` at the next iteration; ``state`` is unchanged.

        The state may come from another world size (elastic resume): O(1), no replay. A
        restore needs the lengths' hash (to check the state fits these lengths) and the epoch's
        plan (to check the position and to go on): the hash runs on a second thread (a compiled
        pass that releases the GIL) while the plan is computed, so on two cores a restore
        costs about one plan.

        **Resume across a change.** A state saved under other settings that may change during a
        run (the spec's settings: budget, capacity, curriculum...; ``balance``;
        ``batches_per_step``; and the world size) continues the epoch with this sampler's: what
        the old settings delivered up to the state's position is recomputed from the state
        (it records the settings it was saved under), and the rest of the epoch (every item,
        or piece, not yet delivered) is planned with the new settings, seeded from ``(seed,
        epoch, change)``: nothing is repeated or lost. The state keeps the epoch's changes
        (``"changes"``) so that later resumes within it are exact too; the next epoch is
        planned with the current settings from its start. Rules:

        - the strategy, ``shuffle``, ``seed``, ``drop_last`` and the lengths cannot change
          (a ``ValueError`` names what differs), nor a windowed sampler's settings;
        - a packing of split sequences keeps its capacity while some sequence has only some of
          its pieces delivered (likewise Decomposition's ``max_length``): a ``ValueError``;
        - optimizer steps are counted under the current ``batches_per_step`` from the run's
          start (the schedule is a function of the step, so the change cuts the micro-batches
          of the rest differently; none is added or lost);
        - the tail policy's repeats (``drop_last=False``) are the epoch's first batches, as
          delivered under the first settings.

        Cost: one plan per part of the epoch (the first of the whole corpus, each later one of
        what is left) and O(N) masks: for a change at half an epoch, about 1.5 plans.
        """
        self._epochs.refuse_other_form(state, type(self).__name__)
        change = self._change_in(state)
        if change is not None:
            changes, resumed = change
        else:
            changes, resumed = self._changes_of(state), state
        epoch = resumed.get("epoch") if isinstance(resumed, dict) else None
        plain = self._fingerprint is None
        previous = self._changes
        self._changes = changes
        try:
            if plain and isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0:
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(1) as pool:
                    lengths_hash = pool.submit(self._lengths_hash)
                    self._epoch_of(epoch, changes)  # the plan the restore needs anyway, cached
                    self._fingerprint = self._fingerprint_of(lengths_hash.result())
            if change is not None and isinstance(epoch, int):
                total = self._epoch_of(epoch, changes).total
                if int(resumed["position"]) > total:  # the tail's repeats ran past the end
                    changes = _changes_within(changes, total)
                    self._changes = changes
                    resumed = {**resumed, "changes": [change_record(c) for c in changes]}
            super().load_state_dict(resumed)
        except Exception:
            self._changes = previous
            raise

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.spec.describe()}, n={self.lengths.shape[0]}, "
            f"rank={self.rank}, world_size={self.world_size}, seed={self.seed}, "
            f"shuffle={self.shuffle}, drop_last={self.drop_last}, balance={self.balance}"
            + ("" if self.window is None else f", window={self.window}")
            + ("" if self.groups is None else f", groups={np.unique(self.groups).size}")
            + (
                ""
                if self.batches_per_step is None
                else f", batches_per_step={self.batches_per_step.as_dict()}"
            )
            + ")"
        )


class _TokensPerStep:
    """Batches per step from tokens per step: ``ceil(tokens / budget)`` rounded up to a
    multiple of ``world_size``."""

    def __init__(self, tokens: Any, budget: int, world_size: int) -> None:
        self.tokens, self.budget, self.world_size = tokens, budget, world_size

    def value(self, step: int) -> int:
        return int(self.values(np.array([step], dtype=np.int64))[0])

    def values(self, steps: np.ndarray) -> np.ndarray:
        tokens = np.asarray(self.tokens.values(steps))
        if tokens.shape != steps.shape or not np.issubdtype(tokens.dtype, np.number):
            raise ValueError(
                f"tokens_per_step.values(steps) must return one number per step (shape "
                f"{steps.shape}), got {tokens.dtype} of shape {tokens.shape}"
            )
        bad = tokens <= 0
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"tokens_per_step at step {int(steps[i])} is {tokens[i].item()}, not positive"
            )
        batches = np.ceil(tokens / self.budget).astype(np.int64)
        return -(-batches // self.world_size) * self.world_size

    def as_dict(self) -> dict[str, Any]:
        return {"tokens_per_step": self.tokens.as_dict(), "per_batch": self.budget}

    def __repr__(self) -> str:
        return f"tokens_per_step={self.tokens!r} over budgets of {self.budget}"


def _schedule_of(name: str, value: Any) -> Schedule:
    """``value`` as an integer :class:`padless.Schedule` (a plain int is a constant)."""
    schedule = Schedule.of(value, name=name)
    if not schedule.integer:
        raise TypeError(f"{name} must be an integer schedule (a count per step), got {schedule!r}")
    return schedule


def _steps_schedule(sampler: PlanSampler, batches: Any, tokens: Any) -> Any:
    """The sampler's batches-per-step schedule (None without one), from either keyword."""
    if batches is not None and tokens is not None:
        raise TypeError("pass batches_per_step or tokens_per_step, not both")
    if tokens is None:
        return None if batches is None else _schedule_of("batches_per_step", batches)
    budget = getattr(sampler.spec, "max_tokens", None)
    if budget is None:
        raise ValueError(
            f"tokens_per_step needs a spec with a token budget per batch (max_tokens); "
            f"{sampler.spec.describe()} has none: pass batches_per_step="
        )
    if not isinstance(budget, int) or getattr(sampler.spec, "resolution", None) is not None:
        raise ValueError(
            f"tokens_per_step counts whole tokens of one budget per batch; {sampler.spec.describe()} "
            "budgets per field or in another unit: pass batches_per_step="
        )
    return _TokensPerStep(_schedule_of("tokens_per_step", tokens), budget, sampler.world_size)


def _shifted(lengths: np.ndarray) -> np.ndarray:
    return np.maximum(lengths - 1, 0)


def _all(lengths: np.ndarray) -> np.ndarray:
    return np.asarray(lengths, dtype=np.int64)


_TARGETS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"shifted": _shifted, "all": _all}


def _target_rule(targets: Any) -> Callable[[np.ndarray], int]:
    """Check ``targets`` and return a function: entry lengths -> their total target count."""
    if isinstance(targets, str):
        if targets not in _TARGETS:
            raise ValueError(f"targets must be 'shifted', 'all' or a function, got {targets!r}")
        rule = _TARGETS[targets]
        return lambda lengths: int(rule(lengths).sum())
    if not callable(targets):
        raise TypeError(
            f"targets must be 'shifted', 'all' or a function, got {type(targets).__name__}"
        )

    def counted(lengths: np.ndarray) -> int:
        out = np.asarray(targets(lengths.copy()))
        if out.shape != lengths.shape:
            raise ValueError(
                f"targets function must return one count per length (shape {lengths.shape}), "
                f"got shape {out.shape}"
            )
        if out.size and (
            out.dtype == np.bool_ or not np.issubdtype(out.dtype, np.integer) or int(out.min()) < 0
        ):
            raise ValueError(
                f"targets function must return non-negative int counts, got {out[:5].tolist()}"
            )
        return int(out.sum())

    return counted


def _changes_within(changes: tuple[Any, ...], end: int) -> tuple[Any, ...]:
    """``changes`` with every position past ``end`` (the epoch's batch count, which the tail's
    repeats had run past) brought back to it: a change records where the rest of the epoch
    begins, and a state never records one past its own position."""
    return tuple(c if c[0] <= end else (end, *c[1:]) for c in changes)
