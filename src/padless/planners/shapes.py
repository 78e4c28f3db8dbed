"""Static shapes: every batch in one of a few fixed (batch size, length) shapes.

Compiled training (``torch.compile``, CUDA graphs, XLA) recompiles, or refuses, on each new input
shape. :class:`FixedShapes` batches sequences into shapes the user lists, so a model compiles
once per shape; :func:`shape_set` picks the shapes that waste the fewest slots.

The rules, in one place:

- **Batching** (fairseq's ``batch_fixed_shapes_fast`` rule): walk the sequences in order (by
  default by length, ties broken at random per epoch); the next sequence joins the open batch
  when some shape holds one more sequence at the batch's new longest length, else the batch
  closes and the sequence opens the next one.
- **The batch's shape** is a function of the batch alone, its count ``c`` and its longest
  sequence ``m`` (the longest over fields for (N, F) lengths): among the shapes with
  ``length >= m`` and ``batch_size >= c``, the one with the fewest padded slots, ``batch_size ×
  length`` with ``pad_batches=True`` (else ``length``); ties go to the shorter, then to the
  smaller batch size. The planner tags each batch with it (:attr:`ShapedPlan.shape_of`), and the
  collate (``padless.torch.collate_padded(pad_id, shapes=...)`` or ``collate_for(sampler, ...)``)
  finds the same shape from the samples it receives, with no channel from sampler to workers.
- **Padding**: a batch pads every sequence to its shape's length and, with ``pad_batches=True``,
  adds dummy rows up to the shape's batch size; :meth:`ShapedPlan.stats` counts those slots
  (dummy rows included) as padding.

Where this differs from fairseq: fairseq forgets the length of the sequence that opens a batch
(the sequence that fit no shape with the previous batch), and puts a sequence longer than every
shape into a batch (after closing an empty one when it comes first). Its batches can then break
every shape given. padless counts that length, and refuses a too-long sequence (or drops it with
``oversize="drop"``). Wherever fairseq's batches all fit a shape, the batches are the same.
(fairseq also sorts its shapes by ``argsort`` positions rather than values; that changes which
shape its search finds first, never whether one fits, so it changes no batch.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from .. import _kernels as K
from ..core._check import budget, check_bool, check_seed, positive
from ..core.lengths import sizes_of
from ..core.plan import (
    MAX_SHAPE_SIDE as MAX_SHAPE_SIDE,  # moved to padless.core.plan; importable here too
)
from ..core.plan import BatchPlan, ShapedPlan, check_shapes  # ShapedPlan, check_shapes: likewise
from ..io import lengths_of
from ._order import length_order
from .buckets import _histogram
from .budget import check_oversize, oversize_filter
from .exact import round_size
from .spec import CollateForm, Planner, Spec, setting

OVERSIZE = ("error", "drop")
MAX_SHAPE_SET_TOKENS = 1 << 40  # shape_set's budget: k batches' worth of slots stay in int64
MAX_DP_CELLS = 1 << 26  # the per-group DP's table: (shapes + 1) × (distinct lengths + 1) int32
MAX_CARRY_CELLS = 1 << 22  # the exact DP's table: (shapes + 1) × carry states, 16 bytes each
MAX_CARRY_WORK = 4e8  # the exact DP's steps (about half a second); beyond, the static DP


def _check_walk(order: Any, n: int) -> np.ndarray:
    """``order`` as int64 indices in [0, n), each at most once (else a ValueError naming it)."""
    arr = np.asarray(order)
    if arr.ndim != 1:
        raise ValueError(f"order must be a 1-D array of indices, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"order must hold integer indices, got dtype {arr.dtype}")
    bad = np.flatnonzero((arr < 0) | (arr >= n))
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"order must hold indices in [0, {n}), got {int(arr[k])} at position {k}")
    arr = arr.astype(np.int64)
    seen = np.zeros(n, dtype=np.bool_)
    seen[arr] = True
    if int(seen.sum()) != arr.size:
        first = np.zeros(n, dtype=np.bool_)
        for k, i in enumerate(arr.tolist()):
            if first[i]:
                raise ValueError(
                    "order must hold each index at most once (so every index is planned once), "
                    f"got index {i} again at position {k}"
                )
            first[i] = True
    return arr


def shape_for(
    shapes: Sequence[tuple[int, int]], count: int, longest: int, pad_batches: bool = True
) -> int:
    """Index of the shape a batch of ``count`` sequences, the longest ``longest``, takes (-1: none).

    ``shapes`` as :func:`check_shapes` returns them. The rule (see the module docstring): the
    fewest padded slots among the shapes that hold the batch, ``batch_size × length`` with
    ``pad_batches`` (else ``length``), ties to the shorter then the smaller batch size.
    Cost: O(number of shapes).

    >>> shapes = check_shapes([(16, 32), (8, 64), (2, 128)])
    >>> shape_for(shapes, 5, 40), shape_for(shapes, 9, 40), shape_for(shapes, 1, 200)
    (1, -1, -1)
    """
    best, at = 0, -1
    for s, (rows, length) in enumerate(shapes):
        if rows >= count and length >= longest:
            cost = rows * length if pad_batches else length
            if at < 0 or cost < best:
                best, at = cost, s
    return at


def check_shape_table(name: str, value: Any) -> tuple[tuple[int, int], ...]:
    """:func:`padless.core.plan.check_shapes` as a setting's check."""
    return check_shapes(value, name)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FixedShapes(Spec):
    """Static-shape batching: every batch fits one of ``shapes`` and is tagged with it.

    See the module docstring for the batching rule (fairseq's, with its two faults mended), the
    rule that picks a batch's shape and what counts as padding.

    Args:
        shapes: ``(batch_size, length)`` pairs: a batch holds at most ``batch_size`` sequences
            no longer than ``length`` (the longest over fields for (N, F) lengths). Kept sorted
            by length; e.g. from :func:`shape_set`.
        pad_batches: a batch short of its shape's batch size is padded with dummy rows (the
            collate adds them, with an all-zero attention mask, and :meth:`ShapedPlan.stats`
            counts them as padding); False pads the length only.
        oversize: "error" raises for a sequence longer than every shape; "drop" leaves it out
            and lists it in ``plan.skipped``.

    ``plan(lengths, seed=, epoch=, order=)`` walks ``order`` (indices, each at most once) when
    given, else the length order (2-D: last field, then the first) with ties broken at random
    per (seed, epoch). Samplers, ranks, balance and resume: ``PlanSampler(lengths,
    FixedShapes(...))``; ``collate_for(sampler, pad_id=0)`` pads each batch to its shape.

    Cost: O(N + max length) time and O(N) memory (counting sort, one compiled greedy pass, one
    O(shapes) look-up per batch).

    >>> spec = FixedShapes(shapes=[(4, 8), (2, 16)])
    >>> plan = spec.plan([5, 12, 3, 7, 16, 2])
    >>> [b.tolist() for b in plan], plan.batch_shapes.tolist()
    ([[5, 2, 0, 3], [1, 4]], [[4, 8], [2, 16]])
    """

    shapes: Any = setting(check_shape_table)
    pad_batches: bool = setting(check_bool, default=True)
    oversize: str = setting(partial(check_oversize, choices=OVERSIZE), default="error")

    name = "fixed_shapes"
    state_tag = "FixedShapes"
    about = {
        **Spec.about,
        "shapes": "the static (batch size, length) shapes batches are padded to",
        "pad_batches": "pad a short batch with dummy rows up to its shape's batch size",
    }

    def bind(self, lengths: np.ndarray) -> ShapesPlanner:
        return ShapesPlanner(self, lengths)

    def collate_form(self) -> CollateForm:
        """Padded to the static shapes (dummy rows with ``pad_batches``)."""
        return CollateForm(shapes=self.shapes, pad_batches=self.pad_batches)

    def plan(self, lengths: Any, *, seed: int = 0, epoch: int = 0, order: Any = None) -> ShapedPlan:
        """Plan ``lengths``; ``order`` (indices, each at most once) replaces the length order."""
        lens = lengths_of(lengths)
        check_seed("seed", seed)
        check_seed("epoch", epoch)
        planner = self.bind(lens)
        if order is None:
            return planner.plan(seed, epoch)
        return planner.plan_order(_check_walk(order, lens.shape[0]))

    def shape_of(self, count: int, longest: int) -> tuple[int, int] | None:
        """The ``(batch_size, length)`` a batch of ``count`` sequences, the longest ``longest``,
        pads to; None when no shape holds it.

        >>> FixedShapes(shapes=[(4, 8), (2, 16)]).shape_of(3, 10) is None
        True
        >>> FixedShapes(shapes=[(4, 8), (2, 16)]).shape_of(2, 10)
        (2, 16)
        """
        at = shape_for(self.shapes, count, longest, self.pad_batches)
        return None if at < 0 else self.shapes[at]


class ShapesPlanner(Planner):
    """:class:`FixedShapes` bound to lengths (sequences longer than every shape found once)."""

    spec: FixedShapes

    def __init__(self, spec: FixedShapes, lengths: np.ndarray) -> None:
        super().__init__(spec, lengths)
        table = np.array(spec.shapes, dtype=np.int64)
        self.shape_rows = np.ascontiguousarray(table[:, 0])
        self.shape_lengths = np.ascontiguousarray(table[:, 1])
        # distinct lengths, and the most rows of any shape at least that long
        self.tiers = np.unique(self.shape_lengths)
        first = np.searchsorted(self.shape_lengths, self.tiers, side="left")
        per_tier = np.maximum.reduceat(self.shape_rows, first)
        self.caps = np.ascontiguousarray(np.maximum.accumulate(per_tier[::-1])[::-1])
        top = int(self.tiers[-1])
        self.skipped = oversize_filter(self.sizes, top, spec.oversize, "the longest shape length")

    def plan(self, seed: int, epoch: int) -> ShapedPlan:
        walk, _ = length_order(self.lengths, seed, epoch)
        return self.plan_order(walk)

    def plan_order(self, walk: np.ndarray) -> ShapedPlan:
        """Plan a given walk (checked indices), leaving out the sequences longer than every shape."""
        sizes = np.ascontiguousarray(self.sizes[walk])
        if self.skipped.size:
            keep = sizes <= self.tiers[-1]
            walk, sizes = walk[keep], sizes[keep]
        ends, longest = K.shape_ends(sizes, self.tiers, self.caps)
        offsets = np.concatenate([np.zeros(1, np.int64), ends])
        counts = np.diff(offsets)
        pad = self.spec.pad_batches
        shape_of = K.pick_shapes(counts, longest, self.shape_rows, self.shape_lengths, pad)
        used = np.bincount(shape_of, minlength=self.shape_rows.size)
        rows = self.shape_rows[shape_of]
        info = {
            "shapes": [list(s) for s in self.spec.shapes],
            "pad_batches": pad,
            "shape_batches": used.tolist(),
            "dummy_rows": int((rows - counts).sum()) if pad else 0,
        }
        return ShapedPlan(
            walk,
            offsets,
            shapes=self.spec.shapes,
            shape_of=shape_of,
            pad_batches=pad,
            skipped=self.skipped,
            info=info,
        )

    def costs(self, plan: BatchPlan) -> np.ndarray:
        """Padded slots of each batch at its shape (rows × shape length)."""
        if isinstance(plan, ShapedPlan):
            return (plan.rows * plan.shapes[plan.shape_of, 1]).astype(np.int64)
        return super().costs(plan)


# --------------------------------------------------------------------------- shape sets


def _histogram_for_shapes(
    lengths: Any, max_tokens: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sizes' histogram for shape planning (empty sequences count as length 1), and real tokens."""
    lens = lengths_of(lengths)
    sizes = sizes_of(lens)
    if sizes.size == 0:
        raise ValueError("lengths must hold at least one sequence to choose shapes for")
    over = np.flatnonzero(sizes > max_tokens)
    if over.size:
        i = int(over[0])
        raise ValueError(
            f"index {i} has length {int(sizes[i])}, which exceeds max_tokens={max_tokens}: "
            "no shape of at least one row can hold it"
        )
    values, counts = _histogram(np.maximum(sizes, 1))
    return values, counts, lens


def _carry_affordable(counts: np.ndarray, rows: np.ndarray, groups: int) -> bool:
    """Whether the exact carry DP fits its table and work budgets (else the static DP runs)."""
    if groups <= 1:
        return True
    caps = np.minimum(rows, np.cumsum(counts))  # carry states per group end
    states = int(caps.sum())
    work = groups * float((caps * np.arange(caps.size)).sum())
    return (groups + 1) * states <= MAX_CARRY_CELLS and work <= MAX_CARRY_WORK


def _quick_starts(values: np.ndarray, counts: np.ndarray, groups: int) -> list[np.ndarray]:
    """Group ends of the free-shape DP and of the quantiles: quick, good starting points."""
    last = np.array([values.size - 1], dtype=np.int64)
    if groups <= 1:
        return [last]
    csum = np.cumsum(counts)
    ranks = -(-np.arange(1, groups, dtype=np.int64) * int(csum[-1]) // groups)
    picked = np.unique(np.searchsorted(csum, ranks, side="left"))
    return [
        np.append(K.optimal_cuts(values, counts, groups), last),
        np.append(picked[picked < values.size - 1], last).astype(np.int64),
    ]


def shape_set(
    lengths: Any, k: int, *, max_tokens: int, multiple_of: int = 1
) -> list[tuple[int, int]]:
    """Choose at most ``k`` static ``(batch_size, length)`` shapes that pad the fewest slots.

    Shape lengths are sizes that occur; a shape of length ``L`` has ``batch_size = max_tokens //
    L`` rounded down to a multiple of ``multiple_of`` (a size below ``multiple_of`` stays as it
    is, at least 1, as :class:`padless.Buckets` does). The cost minimised is the padded slots,
    dummy rows included, of the :class:`FixedShapes` plan of the lengths over those shapes:
    each group of sizes between two shape lengths is cut into batches of its shape, and the
    batch left open at a group's end either goes on into the next group (when one more row fits
    there) or closes with dummy rows (exactly what ``FixedShapes`` does on its length-sorted
    walk, so the figure is the plan's own).

    The choice is exact: a dynamic programme over (shapes used, group end, rows left open)
    (:func:`padless._kernels.carry_cuts`), pruned by the cost of the free-shape DP's and the
    quantiles' cuts. When its table would pass 2**22 cells or its work 4e8 steps (k × Σ batch
    sizes × distinct sizes), it falls back to the per-group DP (each group rounded up to whole
    batches on its own, :func:`padless._kernels.static_cuts`), whichever of it, the free-shape
    DP's and the quantiles' cuts plans with fewer slots, improved by local moves against the
    plan's cost: never worse than any of them, not proven optimal. Fewer shapes win ties.

    Args:
        lengths: (N,) lengths or (N, F) per-field lengths (size = max over fields); empty
            sequences count as length 1. (For (N, F) lengths FixedShapes walks by the last
            field, then the first, so its plan may pad somewhat differently.)
        k: the most shapes (compiled graphs) wanted.
        max_tokens: token budget per batch, <= 2**40; every size must be <= max_tokens.
        multiple_of: batch sizes are rounded down to a multiple of this.

    Returns:
        The shapes as ``(batch_size, length)`` tuples, by increasing length (batch sizes then
        do not increase). Fewer than ``k`` when there are fewer distinct sizes or when fewer
        shapes pad less. The last length is the longest size, so every sequence fits.

    Raises:
        TypeError, ValueError: non-positive ``k``/``multiple_of``, ``max_tokens`` out of range
            or so large that k batches of it pass 2**62 slots, empty lengths, a size over
            ``max_tokens``.

    Cost: O(N + max length) for the histogram; then, over the L distinct sizes, the exact DP in
    O(k · Σ batch sizes) memory and at most O(k · Σ_j batch size_j · j) time, most of it pruned
    (3 to 45 ms on the built-in corpus and on 1e6 lognormal lengths, L = 99 and 228, k <= 16;
    up to about 1 s for L = 3,889, see benchmarks/bench_shapes.py).

    >>> shape_set([3, 3, 3, 4, 9, 10, 10, 12], 2, max_tokens=24)
    [(6, 4), (2, 12)]
    >>> shape_set([3, 3, 3, 4, 9, 10, 10, 12], 2, max_tokens=24, multiple_of=4)
    [(4, 4), (2, 12)]
    """
    k = positive("k", k)
    max_tokens = budget("max_tokens", max_tokens)
    if max_tokens > MAX_SHAPE_SET_TOKENS:
        raise ValueError(f"max_tokens must be <= 2**40 for shape_set, got {max_tokens}")
    multiple_of = positive("multiple_of", multiple_of)
    values, counts, _ = _histogram_for_shapes(lengths, max_tokens)
    groups = min(k, values.size)
    if groups * max_tokens + 2 * int((counts * values).sum()) >= 1 << 62:
        raise ValueError(
            f"max_tokens must keep {groups} batches of it plus the tokens below 2**62 slots, "
            f"got {max_tokens}"
        )
    rows = round_size(max_tokens // values, multiple_of)
    starts = _quick_starts(values, counts, groups)
    costs = [int(K.shaped_cost(values, counts, rows, e)) for e in starts]
    if _carry_affordable(counts, rows, groups):
        ends = K.carry_cuts(values, counts, rows, groups, min(costs))
    else:
        if (groups + 1) * (values.size + 1) <= MAX_DP_CELLS:
            static = np.append(K.static_cuts(values, counts, rows, groups), values.size - 1)
            starts.append(static)
            costs.append(int(K.shaped_cost(values, counts, rows, static)))
        ends, _ = K.polish_ends(values, counts, rows, starts[int(np.argmin(costs))])
    return [(int(rows[e]), int(values[e])) for e in ends]


def shape_curve(
    lengths: Any, ks: Sequence[int], *, max_tokens: int, multiple_of: int = 1
) -> list[dict[str, Any]]:
    """Padding of :func:`shape_set` shapes against the number of shapes ``k`` (compile count).

    For each ``k`` the shapes are chosen and the lengths planned with ``FixedShapes(shapes)``
    (seed 0, epoch 0; the figures do not depend on the seed): ``padded_slots`` includes the
    dummy rows. Meant for ``padless report`` (a "static shapes (k)" row) and its plot.

    Returns:
        One dict per ``k``: ``k``, ``shapes`` (the list), ``batches``, ``real_tokens``,
        ``padded_slots``, ``padding_fraction``, ``dummy_rows``.

    Cost: :func:`shape_set` plus one O(N + max length) plan per ``k``.

    >>> [(r["k"], len(r["shapes"])) for r in shape_curve([3, 3, 4, 9, 12], [1, 2], max_tokens=24)]
    [(1, 1), (2, 2)]
    """
    if isinstance(ks, (str, bytes)) or not isinstance(ks, Sequence):
        raise TypeError(f"ks must be a list of ints, got {type(ks).__name__}")
    ks = [positive(f"ks[{i}]", k) for i, k in enumerate(ks)]
    lens = lengths_of(lengths)
    out = []
    for k in ks:
        shapes = shape_set(lens, k, max_tokens=max_tokens, multiple_of=multiple_of)
        plan = FixedShapes(shapes=shapes).plan(lens)
        st = plan.stats(lens)
        out.append(
            {
                "k": k,
                "shapes": [list(s) for s in shapes],
                "batches": st.batches,
                "real_tokens": st.real_tokens,
                "padded_slots": st.padded_slots,
                "padding_fraction": st.padding_fraction,
                "dummy_rows": plan.dummy_rows,
            }
        )
    return out
