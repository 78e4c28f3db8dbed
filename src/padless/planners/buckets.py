"""Length buckets: batches form within a bucket and pad to its longest member.

Boundaries are sorted interior cut points ``b1 < … < b(k−1)``: bucket ``i`` holds sizes in
``(b(i−1), b(i)]``, the first bucket everything ``<= b1`` and the last everything ``> b(k−1)``.
A sequence's size is its length, or for (N, F) lengths its max over fields (fairseq).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _kernels as K
from .. import _rng
from .._check import budget_or_none, check_choice, positive, positive_or_none
from ..cost import Cost, check_max_cost, cost_settings, model_of, padded_batch_costs, unit_limit
from ..lengths import lengths_of, sizes_of
from ..plan import BatchPlan
from . import _rounds as R
from .budget import check_oversize, over_budget
from .exact import round_size
from .spec import Planner, Spec, check_cost, check_pad_multiple, moved_names, setting

if TYPE_CHECKING:
    pass

METHODS = ("optimal", "quantile")


def _histogram(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct sizes (ascending) and their counts: a bincount, or np.unique for sparse sizes."""
    n = sizes.shape[0]
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    top = int(sizes.max())
    if top <= 2 * n + (1 << 16):
        counts = np.bincount(sizes, minlength=top + 1)
        values = np.flatnonzero(counts).astype(np.int64)
        return values, counts[values].astype(np.int64)
    values, counts = np.unique(sizes, return_counts=True)
    return values.astype(np.int64), counts.astype(np.int64)


def _fit_chunks(chunks: Iterable[np.ndarray], k: int) -> np.ndarray:
    """``bucket_boundaries`` of the sizes given chunk by chunk, from their merged histogram."""
    values_parts, count_parts = [], []
    for sizes in chunks:
        v, c = _histogram(sizes)
        values_parts.append(v)
        count_parts.append(c)
    if not values_parts:
        return np.zeros(0, np.int64)
    values, inverse = np.unique(np.concatenate(values_parts), return_inverse=True)
    counts = np.bincount(inverse.ravel(), weights=np.concatenate(count_parts)).astype(np.int64)
    return _cuts_of(values.astype(np.int64), counts, k)


def _check_boundaries(boundaries: Any) -> np.ndarray:
    arr = np.asarray(boundaries)
    if arr.ndim != 1:
        raise ValueError(f"boundaries must be a 1-D sequence of lengths, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, np.int64)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"boundaries must hold int lengths, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr[0] < 0:
        raise ValueError(f"boundaries must be non-negative lengths, got {int(arr[0])}")
    steps = np.flatnonzero(np.diff(arr) <= 0)
    if steps.size:
        i = int(steps[0])
        raise ValueError(
            "boundaries must be strictly increasing cut points, "
            f"got {int(arr[i])} then {int(arr[i + 1])} at positions {i} and {i + 1}"
        )
    return arr


def bucket_boundaries(lengths: Any, k: int, *, method: str = "optimal") -> np.ndarray:
    """Choose bucket boundaries for ``k`` buckets that minimise total padded slots.

    The padded cost of a bucketing is Σ over buckets of count × the bucket's longest size (what
    batches padded to their bucket's longest member cost). ``method="optimal"`` minimises it
    exactly by dynamic programming over the histogram of sizes; ``"quantile"`` cuts at the
    i/k quantiles of the sizes (equal counts; what lhotse estimates), for comparison.

    Args:
        lengths: (N,) lengths or (N, F) per-field lengths (size = max over fields).
        k: the most buckets wanted.
        method: "optimal" or "quantile".

    Returns:
        Sorted int64 interior cut points ``b1 < … < b(m−1)``, all of them lengths that occur, with
        ``m <= k``: fewer when there are fewer than k distinct sizes (more buckets would stay
        empty) or, for quantiles, when quantiles coincide.

    Cost: O(N + max length) for the histogram (np.unique, O(N log N), when sizes are sparse
    and huge); then for "optimal" O(k · L · log L) time and O(k · L) memory over the L distinct
    sizes (divide-and-conquer DP, exact integers): a few ms for L = 5,000 and k = 16, about 1 s
    for L = 10^6.

    >>> bucket_boundaries([1, 1, 1, 2, 9, 10, 10], 3).tolist()
    [1, 2]
    >>> bucket_boundaries([1, 1, 1, 2, 9, 10, 10], 3, method="quantile").tolist()
    [1, 9]
    """
    k = positive("k", k)
    check_choice("method", method, METHODS)
    return _fit_boundaries(sizes_of(lengths_of(lengths)), k, method)


def _fit_boundaries(sizes: np.ndarray, k: int, method: str = "optimal") -> np.ndarray:
    """:func:`bucket_boundaries` of checked sizes (widths may pass the lengths' 2**31)."""
    return _cuts_of(*_histogram(sizes), k, method)


def _cuts_of(values: np.ndarray, counts: np.ndarray, k: int, method: str = "optimal") -> np.ndarray:
    """The boundaries of ``k`` buckets over a histogram (distinct sizes ascending, counts)."""
    if values.size <= 1 or k == 1:
        return np.zeros(0, np.int64)
    if method == "optimal":
        cuts = K.optimal_cuts(values, counts, k)
        return values[cuts]
    csum = np.cumsum(counts)
    n = int(csum[-1])
    # ceil(i·N/k) items fall in the first i buckets
    ranks = -(-np.arange(1, k, dtype=np.int64) * n // k)
    picked = np.unique(values[np.searchsorted(csum, ranks, side="left")])
    return picked[picked < values[-1]]


def boundary_cost(lengths: Any, boundaries: Any) -> int:
    """Return the padded slots Σ count × longest over the buckets that ``boundaries`` define.

    This is the objective :func:`bucket_boundaries` minimises. Cost: O(N + max length).

    >>> lens = [1, 1, 1, 2, 9, 10, 10]
    >>> boundary_cost(lens, [1, 2]), boundary_cost(lens, [1, 9]), boundary_cost(lens, [])
    (35, 41, 70)
    """
    cuts = _check_boundaries(boundaries)
    values, counts = _histogram(sizes_of(lengths_of(lengths)))
    count, longest = _bucket_figures(values, counts, cuts)
    return int((count * longest).sum())


def _bucket_figures(
    values: np.ndarray, counts: np.ndarray, cuts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Items and longest size per bucket (0 for an empty bucket)."""
    num = cuts.size + 1
    where = np.searchsorted(cuts, values, side="left")
    count = np.bincount(where, weights=counts, minlength=num).astype(np.int64)
    last = np.searchsorted(where, np.arange(num), side="right") - 1
    longest = np.where(count > 0, values[np.maximum(last, 0)] if values.size else 0, 0)
    return count, longest.astype(np.int64)


def _check_nonempty(
    sizes: np.ndarray, count: np.ndarray, longest: np.ndarray, what: str = "max_tokens"
) -> None:
    """Raise when a bucket holds only empty sequences (max_tokens cannot size its batches)."""
    empty = np.flatnonzero((count > 0) & (longest == 0))
    if empty.size:
        i = int(np.flatnonzero(sizes == 0)[0])
        raise ValueError(
            f"lengths must be positive with {what}: bucket {int(empty[0])} holds only "
            f"empty sequences (length 0 at index {i}), which have no token cost to budget; "
            "drop empty sequences first, or pass batch_size instead"
        )


def _zero_cost_budget(max_tokens: int | None, cost: Cost | None, max_cost: float | None) -> str:
    """The budget that cannot size a bucket of empty sequences ("" when none)."""
    if max_tokens is not None:
        return "max_tokens"
    if max_cost is not None and model_of(cost).per_sequence == 0:
        return "max_cost (a cost model without per_sequence cost)"
    return ""


def _bucket_plan(
    sizes: np.ndarray,
    cuts: np.ndarray,
    max_tokens: int | None,
    batch_size: int | None,
    multiple_of: int,
    seed: int,
    epoch: int,
    cost: Cost | None = None,
    max_cost: float | None = None,
) -> BatchPlan:
    """Plan over checked inputs (shared by the function and the sampler)."""
    n = sizes.shape[0]
    values, counts = _histogram(sizes)
    count, longest = _bucket_figures(values, counts, cuts)
    num = cuts.size + 1
    if max_cost is not None:
        what = _zero_cost_budget(max_tokens, cost, max_cost)
        if what:
            _check_nonempty(sizes, count, longest, what)
        # a batch pads to at most its bucket's longest: count × cost(longest) <= max_cost
        raw = unit_limit(model_of(cost), longest, max_cost)
        if max_tokens is not None:
            raw = np.minimum(raw, max_tokens // np.maximum(longest, 1))
        run_size = round_size(raw, multiple_of)
    elif max_tokens is not None:
        _check_nonempty(sizes, count, longest)
        run_size = round_size(max_tokens // np.maximum(longest, 1), multiple_of)
    else:
        run_size = round_size(np.full(num, batch_size, dtype=np.int64), multiple_of)
    if n and int(values[-1]) <= 2 * n + (1 << 16):
        table = np.searchsorted(cuts, np.arange(int(values[-1]) + 1), side="left")
        ids = table[sizes]
    else:
        ids = np.searchsorted(cuts, sizes, side="left")
    order, starts = K.counting_order(np.asarray(ids, dtype=np.int64), num)
    K.shuffle_runs(order, starts, _rng.key(seed, epoch, _rng.GROUP_SHUFFLE))
    _, ends, _, _ = K.exact_split(order, starts, run_size, 0)
    offsets = np.empty(ends.size + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1:] = ends
    info = {
        "boundaries": cuts.tolist(),
        "bucket_counts": count.tolist(),
        "bucket_longest": longest.tolist(),
        "bucket_batch_sizes": run_size.tolist(),
        "bucket_padded_slots": int((count * longest).sum()),
    }
    return BatchPlan(order, offsets, info=info)


def check_cuts(name: str, boundaries: Any) -> tuple[int, ...] | None:
    """Check ``boundaries`` (None or strictly increasing lengths): a tuple of ints or None."""
    return None if boundaries is None else tuple(int(c) for c in _check_boundaries(boundaries))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Buckets(Spec):
    """Length buckets: batches form within a bucket and pad to at most its longest member.

    Settings as :func:`plan_buckets`; ``boundaries`` are kept as a tuple of ints. With
    ``num_buckets`` the boundaries are fitted to the lengths when the spec is bound (exact
    dynamic programme, minimum padded slots) and kept by the planner (``sampler.boundaries``).

    >>> Buckets(boundaries=[3], batch_size=3).plan([2, 9, 3, 8, 2, 10]).sizes.tolist()
    [3, 3]
    """

    boundaries: Any = setting(check_cuts, default=None)
    num_buckets: int | None = setting(positive_or_none, default=None)
    max_tokens: int | None = setting(budget_or_none, default=None)
    batch_size: int | None = setting(positive_or_none, default=None)
    multiple_of: int = setting(positive, default=1)
    cost: Cost | None = setting(check_cost, default=None)
    max_cost: float | None = setting(check_max_cost, default=None)
    pad_to_multiple_of: int = setting(check_pad_multiple, default=1)
    oversize: str = setting(check_oversize, default="error")

    name = "buckets"
    state_tag = "BucketSampler"
    quiet = {**Spec.quiet, "oversize": "error"}

    def _settle(self) -> None:
        if (self.boundaries is None) == (self.num_buckets is None):
            got = "both" if self.boundaries is not None else "neither"
            raise ValueError(f"pass exactly one of boundaries or num_buckets, got {got}")
        if self.max_cost is not None and self.batch_size is not None:
            raise ValueError(
                "pass exactly one of max_tokens or batch_size (max_cost is a budget like "
                "max_tokens and may join it), got max_cost and batch_size"
            )
        if self.max_cost is None and (self.max_tokens is None) == (self.batch_size is None):
            got = "both" if self.max_tokens is not None else "neither"
            raise ValueError(f"pass exactly one of max_tokens or batch_size, got {got}")

    def stream_engine(self) -> R.StreamEngine:
        """The stream form: full batches per bucket leave, remainders wait (boundaries fitted on the first buffer)."""
        R.check_streamable(
            self,
            ("boundaries", "num_buckets", "max_tokens", "batch_size", "multiple_of", "oversize"),
        )
        return BucketStream(self)

    def bind(self, lengths: np.ndarray) -> BucketPlanner:
        return BucketPlanner(self, lengths)

    def _fits(self, widths: np.ndarray) -> np.ndarray:
        """Mask of the widths a batch of one holds within the budget."""
        ok = np.ones(widths.shape, dtype=np.bool_)
        if self.max_tokens is not None:
            ok &= widths <= self.max_tokens
        if self.max_cost is not None:
            ok &= model_of(self.cost).of(widths) <= self.max_cost
        return ok

    def for_windows(self, src: Any) -> Buckets:
        """With ``num_buckets``: the boundaries fitted once to the whole corpus' histogram of
        widths (built chunk by chunk), so that every window uses the same buckets. With
        ``max_tokens``, every length must be positive (a window whose bucket holds only empty
        sequences has no token cost to budget)."""
        spec = self
        if self.num_buckets is not None:
            chunks = src.size_chunks(self.pad_to_multiple_of)
            if self.oversize == "drop":  # fitted to the sequences that are planned
                chunks = (c[self._fits(c)] for c in chunks)
            cuts = _fit_chunks(chunks, self.num_buckets)
            spec = dataclasses.replace(self, boundaries=tuple(cuts.tolist()), num_buckets=None)
        if spec.max_tokens is not None and src.n and src.size_min == 0:
            raise ValueError(
                f"lengths must be positive for windowed buckets with max_tokens: index "
                f"{src.arg_min} has length 0, and a window whose bucket holds only empty "
                "sequences has no token cost to budget; drop empty sequences first, or pass "
                "batch_size instead"
            )
        return spec

    def as_dict(self) -> dict[str, Any]:
        return cost_settings(self, super().as_dict())


class BucketPlanner(Planner):
    """:class:`Buckets` bound to lengths: boundaries resolved (fitted) and checked once.

    Everything is planned on the padded widths (the sizes rounded up to ``pad_to_multiple_of``).
    """

    spec: Buckets

    def __init__(self, spec: Buckets, lengths: np.ndarray) -> None:
        super().__init__(spec, lengths)
        # a sequence the budget cannot hold even alone: refused or dropped, never a batch over it
        self.skipped = over_budget(self, spec)
        self.kept: np.ndarray | None = None  # oversize="drop": the sequences planned
        self.planned = self.widths  # their widths
        if self.skipped.size:
            self.kept = np.setdiff1d(np.arange(self.widths.shape[0]), self.skipped)
            self.planned = self.widths[self.kept]
        planned = self.planned
        if spec.boundaries is not None:
            cuts = np.array(spec.boundaries, dtype=np.int64)
        else:
            cuts = _fit_boundaries(planned, spec.num_buckets or 1)
        self.boundaries = cuts
        what = _zero_cost_budget(spec.max_tokens, spec.cost, spec.max_cost)
        if what:
            figures = _bucket_figures(*_histogram(planned), cuts)
            _check_nonempty(planned, *figures, what)

    def plan(self, seed: int, epoch: int) -> BatchPlan:
        s = self.spec
        kept = self.kept
        plan = _bucket_plan(
            self.planned,
            self.boundaries,
            s.max_tokens,
            s.batch_size,
            s.multiple_of,
            seed,
            epoch,
            s.cost,
            s.max_cost,
        )
        if kept is not None:  # oversize="drop": planned over the others
            plan = plan.with_indices(kept[plan.indices], self.widths.shape[0], self.skipped)
        return self.tagged(plan)

    def costs(self, plan: BatchPlan) -> np.ndarray:
        """Cost of each batch: count × longest, or ``count × cost(longest)`` with a cost model
        (longest: the widest padded width)."""
        if self.spec.cost is None:
            return super().costs(plan)

        return padded_batch_costs(self.spec.cost, plan, self.widths)

    def config(self) -> dict[str, Any]:
        return {**self.spec.as_dict(), "boundaries": self.boundaries.tolist()}


# --------------------------------------------------------------------------- stream form


class BucketStream(R.GroupEngine):
    """Buckets' stream form (see :mod:`padless.streams`)."""

    def __init__(self, spec: Any) -> None:
        super().__init__(spec)
        self.cuts: np.ndarray | None = (
            None if spec.boundaries is None else np.array(spec.boundaries, np.int64)
        )

    def admit(self, sizes: np.ndarray, where: Callable[[int], int]) -> np.ndarray | None:
        return R.within_budget(sizes, self.spec.max_tokens, self.spec.oversize, where)

    def groups(self, buf: R.Buffer) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s = self.spec
        if self.cuts is None:  # fitted once, on the first buffer planned
            self.cuts = bucket_boundaries(buf.sizes, s.num_buckets or 1)
        cuts = self.cuts
        k = cuts.size + 1
        ids = np.searchsorted(cuts, buf.sizes, side="left").astype(np.int64)
        order, starts = K.counting_order(ids, k)
        if s.max_tokens is not None:
            longest = np.empty(k, np.int64)
            longest[:-1] = cuts
            last = buf.sizes[ids == k - 1]
            longest[-1] = int(last.max()) if last.size else 1
            raw = s.max_tokens // np.maximum(longest, 1)
        else:
            raw = np.full(k, s.batch_size, np.int64)
        return order, starts, round_size(raw, s.multiple_of)

    def expired(self, lens: np.ndarray, rest: np.ndarray, runs: np.ndarray) -> R.Round:
        # rest is grouped by bucket: each bucket's remainder is one smaller batch
        if rest.size == 0:
            return R.Round(rest, np.zeros(1, np.int64), rest, rest, rest)
        change = np.flatnonzero(np.diff(runs)) + 1
        offsets = np.concatenate([[0], change, [rest.size]]).astype(np.int64)
        z = np.zeros(0, np.int64)
        return R.Round(rest, offsets, z, z, z)

    def state(self) -> dict[str, Any]:
        return {"boundaries": None if self.cuts is None else self.cuts.tolist()}

    def load(self, state: dict[str, Any]) -> None:
        cuts = state.get("boundaries")
        if cuts is not None:
            self.cuts = np.array(cuts, np.int64)


# the shortcuts that lived here until they moved to padless.shortcuts (deprecated paths)
__getattr__ = moved_names(
    __name__, {"plan_buckets": "padless.shortcuts", "BucketSampler": "padless.shortcuts"}
)
