"""The step planner: one global batch that exists now (an RL rollout) → every rank's micro-batches.

:func:`plan_step` is a pure function of ``(lengths, settings, seed, step)``: every rank calls it
on the same lengths and gets the same :class:`StepPlan` without communication. Every rank runs
the same number of micro-batches (gradient-accumulation slots; all ranks run slot ``k``
together), each under a strict token cap after the collate, balanced by cost within each slot.

How (packed form). Items (or groups, as one unit each) are placed heaviest first into
``world_size × m`` bins of ``max_tokens``: each into the bin of least cost that has room (the
cap is a hard constraint). ``m`` starts at what the tokens need, ``ceil(Σ tokens /
(world_size · max_tokens))``, and at least one bin per unit over half the cap. Where something
fits nowhere (the cap binds), ``m`` first rises to Martello and Toth's lower bound L2 on the
bins (a count below it cannot hold the items), then the same bins are tried with a best fit
(each item into the bin with the least room that holds it: it packs where the cap binds), and
only then ``m`` grows by one (or by ``micro_batch_multiple``). The bins are then sorted by
cost: slot 0 holds the ``world_size`` heaviest, slot 1 the next ones, and so on, so the bins of
one slot cost about the same; a slot whose bins still differ by more than 0.5% has its items
placed again over its own bins. All of it is one call of the compiled kernel
(:func:`padless._kernels.step.step_fit`, with its plain-Python reference beside it). Within a
slot, which rank runs which bin is drawn from ``(seed, step)``.

How (padded form). Units sorted by length (longest first) are cut into consecutive
micro-batches, each ``rows × longest ≤ max_tokens``: the fewest such cuts decide ``m``, then
the largest cost a micro-batch may have is lowered (bisection) as far as ``world_size × m``
micro-batches still hold everything, and the micro-batches are sorted into slots as above.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .. import _kernels as K
from ..core._check import check_choice, check_seed, positive
from ..core._rng import STEP_PLAN, key
from ..core.cost import Cost, as_cost

__all__ = ["StepPlan", "plan_step"]

FORMS = ("packed", "padded")
POLISH = 5e-3  # a slot whose bins differ more than this in cost is placed again
MAX_MICRO_BATCHES = 1 << 22  # world_size × micro-batches per rank, in one step
_COUNTING_LIMIT = 1 << 22  # longest length a counting sort orders (its table: 8 bytes a key)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class StepPlan:
    """Every rank's micro-batches for one step: ``world_size × num_micro_batches`` of them.

    Micro-batch ``k`` of rank ``r`` holds ``indices[offsets[r·m + k] : offsets[r·m + k + 1]]``
    (indices into the planned lengths; ``m = num_micro_batches``), read with
    :meth:`micro_batches` or :meth:`micro_batch`. A micro-batch may be empty (fewer items, or
    groups, than ``world_size × m`` slots): a rank still runs the slot (a forward with nothing
    in it, or a skipped one whose gradient is zero) so that every rank runs the same number.

    Figures, each a ``(world_size, m)`` array: ``tokens`` after the collate (packed: Σ lengths;
    padded: rows × longest), ``costs`` (what balancing used: Σ cost(l) packed, rows ×
    cost(longest) padded) and ``loss_tokens`` (loss-bearing tokens). ``total_loss_tokens`` is the
    step's global count, known on every rank without an all-reduce.

    >>> plan = plan_step([900, 40, 700, 300, 260, 120], world_size=2, max_tokens=1024)
    >>> plan.num_micro_batches, [b.tolist() for b in plan.micro_batches(0)]
    (2, [[0], [1, 3]])
    >>> plan.tokens.tolist(), plan.total_loss_tokens
    ([[900, 340], [700, 380]], 2320)
    """

    world_size: int
    num_micro_batches: int
    max_tokens: int
    form: str
    seed: int
    step: int
    indices: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    tokens: np.ndarray
    costs: np.ndarray
    loss_tokens: np.ndarray

    def _at(self, rank: int, k: int) -> int:
        rank = _index("rank", rank, self.world_size)
        k = _index("k", k, self.num_micro_batches)
        return rank * self.num_micro_batches + k

    def micro_batch(self, rank: int, k: int) -> np.ndarray:
        """The indices of micro-batch ``k`` of ``rank`` (int64; may be empty)."""
        at = self._at(rank, k)
        return self.indices[self.offsets[at] : self.offsets[at + 1]]

    def micro_batches(self, rank: int) -> list[np.ndarray]:
        """Rank ``rank``'s micro-batches, in the order all ranks run them."""
        rank = _index("rank", rank, self.world_size)
        m = self.num_micro_batches
        bounds = self.offsets[rank * m : rank * m + m + 1].tolist()
        return [self.indices[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def cu_seqlens(self, rank: int, k: int) -> np.ndarray:
        """Cumulative sequence lengths of packed micro-batch ``k`` of ``rank``: int32, from 0 to
        its tokens (``[0]`` for an empty one), as varlen attention takes them.

        >>> plan_step([5, 3, 2], world_size=1, max_tokens=10).cu_seqlens(0, 0).tolist()
        [0, 5, 8, 10]
        """
        at = self._at(rank, k)
        lens = self.lengths[self.offsets[at] : self.offsets[at + 1]]
        out = np.zeros(lens.size + 1, dtype=np.int32)
        np.cumsum(lens, out=out[1:])
        return out

    @property
    def total_loss_tokens(self) -> int:
        """Loss-bearing tokens of the whole step, over every rank and micro-batch."""
        return int(self.loss_tokens.sum())

    @property
    def slot_loss_tokens(self) -> np.ndarray:
        """Loss-bearing tokens of each slot over all ranks (``num_micro_batches`` ints)."""
        return self.loss_tokens.sum(axis=0)

    @property
    def slot_balance(self) -> float:
        """``Σ_k max_r cost[r, k] / Σ_k mean_r cost[r, k]``: the step's time when every slot
        waits for its slowest rank, over the time of a perfect split (1.0 is perfect)."""
        mean = float(self.costs.mean(axis=0).sum())
        return float(self.costs.max(axis=0).sum()) / mean if mean > 0 else 1.0

    @property
    def num_empty(self) -> int:
        """Micro-batches that hold nothing."""
        return int((np.diff(self.offsets) == 0).sum())

    def __repr__(self) -> str:
        return (
            f"StepPlan(world_size={self.world_size}, num_micro_batches={self.num_micro_batches},"
            f" max_tokens={self.max_tokens}, form={self.form!r}, items={self.indices.size}, "
            f"most_tokens={int(self.tokens.max()) if self.tokens.size else 0}, "
            f"slot_balance={self.slot_balance:.4f}, empty={self.num_empty})"
        )


def plan_step(
    lengths: Any,
    *,
    world_size: int,
    max_tokens: int,
    cost: Cost | dict[str, float] | None = None,
    groups: Any = None,
    loss_tokens: Any = None,
    form: str = "packed",
    min_micro_batches: int = 1,
    micro_batch_multiple: int = 1,
    seed: int = 0,
    step: int = 0,
) -> StepPlan:
    """Split one global batch into ``world_size`` ranks' micro-batches under a strict token cap.

    - ``lengths``: tokens of each sequence of the batch (ints >= 1).
    - ``max_tokens``: the cap of a micro-batch after the collate, never exceeded. ``form=
      "packed"`` (the default: varlen attention, one row) counts Σ lengths; ``"padded"`` counts
      rows × longest. A sequence (or group) over the cap is a ``ValueError`` naming it.
    - ``cost``: what balancing equalises: ``None`` counts tokens; a :class:`padless.Cost`
      weighs long sequences more (``Cost(linear=coeff, quadratic=1.0)`` is slime's
      ``coeff·L + L²``; ``Cost.transformer(...)`` FLOPs).
    - ``groups``: an id per sequence (ints or strings); a group (a GRPO group, a DPO pair)
      always lands whole in one micro-batch.
    - ``loss_tokens``: loss-bearing tokens per sequence (default: its length), counted per
      micro-batch and per step in the plan.
    - ``min_micro_batches`` / ``micro_batch_multiple``: at least that many micro-batches per
      rank, and a multiple of that (pipeline schedules).
    - ``seed`` and ``step`` pick which rank runs which micro-batch of a slot; the rest is
      deterministic from the lengths.

    >>> plan = plan_step([3000, 200, 1800, 900, 4000, 50, 600, 2500], world_size=2,
    ...                  max_tokens=4096)
    >>> plan.num_micro_batches, plan.tokens.tolist()
    (2, [[4000, 2950], [3100, 3000]])

    Cost: O(n + longest) to order the items (a counting sort), then per try of the placement
    (packed: one try on most batches, two or three where the cap is about the longest
    sequence) O(n) where the cost is the tokens (a queue of bins per room) and O(n log(world_size
    ·m)) for another cost (a heap); padded, O(n + m·world_size) per bisection step (to 0.01%:
    about 20). 8,192 sequences over 64 ranks, packed: 0.3-0.55 ms counting tokens, 0.5-0.9 ms
    with a model-shaped cost, at every cap down to the longest sequence (BENCHMARKS.md).
    """
    lens = _lengths(lengths)
    n = lens.size
    world = positive("world_size", world_size)
    cap = positive("max_tokens", max_tokens)
    model = as_cost(cost)
    form = check_choice("form", form, FORMS)
    least = positive("min_micro_batches", min_micro_batches)
    multiple = positive("micro_batch_multiple", micro_batch_multiple)
    seed = check_seed("seed", seed)
    step = check_seed("step", step)
    if world * _rounded(1, least, multiple) > MAX_MICRO_BATCHES:
        raise ValueError(
            f"world_size × micro-batches per rank must be at most 2**22 micro-batches in one "
            f"step, got world_size={world} with min_micro_batches={least} and "
            f"micro_batch_multiple={multiple}"
        )
    loss = _loss_tokens(loss_tokens, lens)
    unit_of, order, num_units = _units(groups, n)

    units = None if unit_of is None else _unit_figures(unit_of, num_units, lens, model, form)
    _check_fit(lens, cap, form, unit_of, order, units, groups)

    if form == "packed":
        bin_of_item, bins, bin_cost, bin_tokens = _packed_bins(
            lens, model, world, cap, least, multiple, units, unit_of
        )
    else:
        bin_of_item, bins, bin_cost, bin_tokens = _padded_bins(
            lens, model, world, cap, least, multiple, units, unit_of
        )
    m = bins // world
    # bin k·world + r is place r of slot k (slots by cost, the heaviest first); which rank runs
    # which place of a slot is drawn from (seed, step): a shuffle of each slot's ranks
    ranks = np.tile(np.arange(world, dtype=np.int64), m)
    K.shuffle_runs(ranks, np.arange(0, bins + 1, world, dtype=np.int64), key(seed, step, STEP_PLAN))
    position = ranks * m + np.repeat(np.arange(m, dtype=np.int64), world)  # bin -> rank·m + slot

    items = np.arange(n, dtype=np.int64) if order is None else order
    values, sizes, offsets = K.scatter_rows(
        bin_of_item if order is None else np.ascontiguousarray(bin_of_item[items]),
        position,
        items,
        lens if order is None else np.ascontiguousarray(lens[items]),
    )

    def grid(per_bin: np.ndarray) -> np.ndarray:
        out = np.empty_like(per_bin)
        out[position] = per_bin
        out = out.reshape(world, m)
        out.setflags(write=False)
        return out

    tokens = grid(bin_tokens)
    if loss_tokens is None and form == "packed":
        loss_grid = tokens  # every token bears the loss
    else:
        per_bin = np.bincount(bin_of_item, weights=loss, minlength=bins)
        loss_grid = grid(np.rint(per_bin).astype(np.int64))
    for array in (values, sizes, offsets):
        array.setflags(write=False)
    return StepPlan(
        world_size=world,
        num_micro_batches=m,
        max_tokens=cap,
        form=form,
        seed=seed,
        step=step,
        indices=values,
        offsets=offsets,
        lengths=sizes,
        tokens=tokens,
        costs=grid(bin_cost),
        loss_tokens=loss_grid,
    )


# ---------------------------------------------------------------------------------- inputs


def _index(name: str, value: Any, size: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if not 0 <= int(value) < size:
        raise ValueError(f"{name} must be in [0, {size}), got {int(value)}")
    return int(value)


def _ints(name: str, values: Any) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of ints, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be ints, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and int(arr.max()) >= 1 << 62:
        raise ValueError(f"{name} must be < 2**62, got {int(arr.max())}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _lengths(lengths: Any) -> np.ndarray:
    lens = _ints("lengths", lengths)
    if lens.size:
        low, high = int(lens.min()), int(lens.max())
        if low < 1:
            i = int(np.argmax(lens < 1))
            raise ValueError(
                f"lengths must be positive (a sequence has a token), got "
                f"lengths[{i}] = {int(lens[i])}"
            )
        if high > 1 << 62:
            raise ValueError(f"lengths must be at most 2**62, got {high}")
    return lens


def _loss_tokens(loss_tokens: Any, lens: np.ndarray) -> np.ndarray:
    if loss_tokens is None:
        return lens
    loss = _ints("loss_tokens", loss_tokens)
    if loss.size != lens.size:
        raise ValueError(
            f"loss_tokens must have one count per sequence ({lens.size}), got {loss.size}"
        )
    bad = (loss < 0) | (loss > lens)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"loss_tokens[{i}] = {int(loss[i])} must be in [0, lengths[{i}] = {int(lens[i])}]"
        )
    return loss


def _units(groups: Any, n: int) -> tuple[np.ndarray | None, np.ndarray | None, int]:
    """``(unit_of, order, units)``: each item's group (0..units-1, by sorted id) and the items
    ordered by group (stable), or ``(None, None, n)`` without groups."""
    if groups is None:
        return None, None, n
    ids = np.asarray(groups)
    if ids.ndim != 1 or ids.size != n:
        raise ValueError(
            f"groups must be 1-D with one id per sequence ({n}), got shape {ids.shape}"
        )
    if n == 0:  # an empty rollout: [] is float to numpy, and names no group
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 0
    if ids.dtype == np.bool_ or ids.dtype.kind not in "iuUS":
        raise TypeError(
            f"groups must be ints or strings (one id per sequence), got dtype {ids.dtype}"
        )
    _, unit_of = np.unique(ids, return_inverse=True)
    unit_of = unit_of.astype(np.int64).reshape(-1)
    order = np.argsort(unit_of, kind="stable")
    return unit_of, order, int(unit_of.max()) + 1


def _item_costs(lens: np.ndarray, model: Cost | None) -> np.ndarray:
    return lens.astype(np.float64) if model is None else model.of(lens)


def _unit_figures(
    unit_of: np.ndarray, units: int, lens: np.ndarray, model: Cost | None, form: str
) -> dict[str, np.ndarray]:
    rows = np.bincount(unit_of, minlength=units)
    widest = np.zeros(units, dtype=np.int64)
    np.maximum.at(widest, unit_of, lens)
    tokens = np.bincount(unit_of, weights=lens, minlength=units).astype(np.int64)
    costs = np.bincount(unit_of, weights=_item_costs(lens, model), minlength=units)
    if form == "padded":
        tokens = rows * widest
    return {"rows": rows, "widest": widest, "tokens": tokens, "costs": costs}


def _check_fit(
    lens: np.ndarray,
    cap: int,
    form: str,
    unit_of: np.ndarray | None,
    order: np.ndarray | None,
    units: dict[str, np.ndarray] | None,
    groups: Any,
) -> None:
    if lens.size and int(lens.max()) > cap:
        i = int(np.argmax(lens > cap))
        raise ValueError(
            f"lengths[{i}] = {int(lens[i])} is over max_tokens={cap}: a micro-batch holds at "
            f"most {cap} tokens (raise max_tokens, or truncate or drop sequence {i})"
        )
    if units is None or unit_of is None or order is None:
        return
    over = units["tokens"] > cap
    if over.any():
        u = int(np.argmax(over))
        members = np.flatnonzero(unit_of == u)
        gid = np.asarray(groups)[members[0]].item()
        what = (
            f"{int(units['rows'][u])} rows × {int(units['widest'][u])} tokens"
            if form == "padded"
            else f"{int(units['tokens'][u])} tokens"
        )
        raise ValueError(
            f"group {gid!r} (sequences {members[:8].tolist()}"
            f"{'…' if members.size > 8 else ''}) holds {what}, over max_tokens={cap}: a group "
            f"stays whole in one micro-batch (raise max_tokens, or split the group)"
        )


# ---------------------------------------------------------------------------------- packed


def _length_order(lens: np.ndarray) -> np.ndarray:
    """Items by length, longest first (ties: index order)."""
    high = int(lens.max()) if lens.size else 0
    if high < _COUNTING_LIMIT:
        order, _ = K.counting_order(high - lens, high + 1)
        return order
    return np.argsort(-lens, kind="stable")


def _rounded(m: int, least: int, multiple: int) -> int:
    m = max(m, least)
    return -(-m // multiple) * multiple


def _packed_bins(
    lens: np.ndarray,
    model: Cost | None,
    world: int,
    cap: int,
    least: int,
    multiple: int,
    units: dict[str, np.ndarray] | None,
    unit_of: np.ndarray | None,
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """Each item's bin, the bins (a multiple of ``world``, numbered by cost: bin ``k·world + r``
    is place r of slot k, the most costly slot first), each bin's cost and tokens: one call of
    the kernel (the tries, the best-fit retry and the slot polish)."""
    if units is None:
        order = _length_order(lens)  # cost grows with length: heaviest first
        sizes = lens[order]
        costs = _item_costs(sizes, model)
    else:
        order = np.argsort(-units["costs"], kind="stable")
        sizes = np.ascontiguousarray(units["tokens"][order])
        costs = np.ascontiguousarray(units["costs"][order])
    # the fewest micro-batches the tokens allow (the kernel raises it to what the items over
    # half the cap need, and where the cap binds to Martello and Toth's bound L2)
    m = _rounded(-(-int(sizes.sum()) // (world * cap)), least, multiple)
    bin_sorted, bins, load, tokens = K.step.step_fit(
        sizes, costs, world * m, world * multiple, cap, world, POLISH
    )
    bin_of = np.empty(order.size, dtype=np.int64)
    bin_of[order] = bin_sorted
    return (bin_of if unit_of is None else bin_of[unit_of]), bins, load, tokens


# ---------------------------------------------------------------------------------- padded


def _padded_bins(
    lens: np.ndarray,
    model: Cost | None,
    world: int,
    cap: int,
    least: int,
    multiple: int,
    units: dict[str, np.ndarray] | None,
    unit_of: np.ndarray | None,
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """Consecutive cuts of the units by width (widest first), the fewest that fit, then the
    least largest cost that fits ``world × m`` micro-batches. Returns each item's bin, the
    bins, their costs and tokens, numbered by cost as :func:`_packed_bins` does."""
    if units is None:
        order = _length_order(lens)
        widths = lens[order]
        rows = np.ones(order.size, dtype=np.int64)
    else:
        order = np.lexsort((np.arange(units["widest"].size), -units["widest"]))
        widths = units["widest"][order]
        rows = units["rows"][order]
    count = widths.size
    cum = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(rows, out=cum[1:])
    row_cost = _item_costs(widths, model)  # what a row costs in a micro-batch this unit opens
    by_cap = cap // widths

    def ends(limit: np.ndarray) -> np.ndarray:
        return np.searchsorted(cum, cum[:-1] + limit, side="right") - 1

    def cuts(nxt: np.ndarray, most: int) -> list[int] | None:
        starts: list[int] = []
        i = 0
        while i < count:
            if len(starts) == most or nxt[i] <= i:
                return None
            starts.append(i)
            i = int(nxt[i])
        return starts

    loose = cuts(ends(by_cap), count + 1) or []  # every unit fits alone (checked): never None
    m = _rounded(-(-len(loose) // world), least, multiple)
    bins = world * m
    best = loose
    if count:
        # bisect the largest cost a micro-batch may have: fewest micro-batches <= bins
        lo = float((rows * row_cost).max())  # every unit's own micro-batch
        hi = float(cum[-1] * row_cost.max())
        for _ in range(48):
            if hi - lo <= 1e-4 * hi:  # 0.01%: finer changes no cut that matters
                break
            mid = 0.5 * (lo + hi)
            with np.errstate(divide="ignore", invalid="ignore"):
                by_cost = np.where(row_cost > 0, np.floor(mid / row_cost), float(1 << 62))
            limit = np.minimum(by_cap, by_cost.astype(np.int64))
            got = cuts(ends(limit), bins)
            if got is None:
                lo = mid
            else:
                hi, best = mid, got
    bin_sorted = np.zeros(count, dtype=np.int64)
    if best:
        marks = np.zeros(count, dtype=np.int64)
        marks[np.array(best[1:], dtype=np.int64)] = 1
        bin_sorted = np.cumsum(marks)
    bin_of = np.empty(count, dtype=np.int64)
    bin_of[order] = bin_sorted
    bin_of = bin_of if unit_of is None else bin_of[unit_of]
    # each micro-batch's figures, then the bins numbered by cost (the most costly first)
    rows_in = np.bincount(bin_of, minlength=bins)
    longest = np.zeros(bins, dtype=np.int64)
    np.maximum.at(longest, bin_of, lens)
    bin_tokens = rows_in * longest
    bin_cost = rows_in * _item_costs(longest, model)
    bin_cost[rows_in == 0] = 0.0
    by_cost = np.argsort(-bin_cost, kind="stable")
    rank = np.empty(bins, dtype=np.int64)
    rank[by_cost] = np.arange(bins)
    return rank[bin_of], bins, bin_cost[by_cost], bin_tokens[by_cost]
