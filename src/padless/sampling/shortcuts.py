"""The shortcuts: one ``plan_*`` function and one keyword sampler per strategy.

Each is its strategy's spec with the settings given as keywords:
``plan_token_budget(L, max_tokens=4096)`` is ``TokenBudget(max_tokens=4096).plan(L)`` and
``TokenBudgetSampler(L, max_tokens=4096)`` is ``PlanSampler(L, TokenBudget(max_tokens=4096))``
(same batches, same states: their fingerprints are the spec's). The keywords are typed by one
``TypedDict`` of the spec's settings per strategy (``TokenBudgetSettings``...), which the tests
hold equal to the spec's fields; defaults and checks live in the spec alone. Nothing else lives
here; the strategies (``padless.planners``) and :class:`padless.PlanSampler` know nothing of
this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict, TypeVar, cast

from ..core._keywords import checks_keywords
from ..core.cost import Cost
from ..core.plan import BatchPlan, PackedPlan
from ..planners.buckets import Buckets
from ..planners.budget import TokenBudget
from ..planners.exact import ExactLength
from ..planners.packing import Packing
from ..planners.spec import Spec
from .sampler import PlanSampler, SamplerOptions

if TYPE_CHECKING:  # names for annotations only (Python 3.10 has neither in typing)
    from typing_extensions import Required, Unpack

__all__ = [
    "BucketSampler",
    "ExactLengthSampler",
    "PackingSampler",
    "TokenBudgetSampler",
    "plan_buckets",
    "plan_exact_length",
    "plan_packing",
    "plan_token_budget",
]

S = TypeVar("S", bound=Spec)


class TokenBudgetSettings(TypedDict, total=False):
    """The settings of :class:`padless.TokenBudget` (defaults and checks: there)."""

    max_tokens: int | float | tuple[int | float | None, ...] | None
    max_sentences: int | None
    multiple_of: int
    oversize: str
    cost: Cost | tuple[Cost | None, ...] | None
    max_cost: float | None
    pad_to_multiple_of: int
    resolution: float | tuple[float | None, ...] | None
    sort: str


class ExactLengthSettings(TypedDict, total=False):
    """The settings of :class:`padless.ExactLength` (defaults and checks: there)."""

    batch_size: int | None
    max_tokens: int | None
    batch_sizes: Mapping[int, int] | Sequence[tuple[int, int]] | None
    max_length: int | None
    include_partial: bool
    leftovers: str
    multiple_of: int
    cost: Cost | None
    max_cost: float | None
    pad_to_multiple_of: int
    oversize: str


class BucketsSettings(TypedDict, total=False):
    """The settings of :class:`padless.Buckets` (defaults and checks: there)."""

    boundaries: Sequence[int] | Sequence[Any] | None
    num_buckets: int | tuple[int, int] | None
    max_tokens: int | float | tuple[int | float | None, ...] | None
    batch_size: int | None
    batch_sizes: Sequence[int] | None
    multiple_of: int
    cost: Cost | tuple[Cost | None, ...] | None
    max_cost: float | None
    pad_to_multiple_of: int
    oversize: str
    resolution: float | tuple[float | None, ...] | None


class PackingSettings(TypedDict, total=False):
    """The settings of :class:`padless.Packing` (defaults and checks: there)."""

    capacity: Required[int | tuple[int, int]]
    max_per_row: int | None
    rows_per_batch: int
    oversize: str
    cost: Cost | None
    max_row_cost: float | None
    context_parallel: int


class TokenBudgetSamplerKeywords(TokenBudgetSettings, SamplerOptions, total=False):
    """:class:`TokenBudgetSampler`'s keywords: the spec's settings and the sampler's options."""


class ExactLengthSamplerKeywords(ExactLengthSettings, SamplerOptions, total=False):
    """:class:`ExactLengthSampler`'s keywords: the spec's settings and the sampler's options."""


class BucketSamplerKeywords(BucketsSettings, SamplerOptions, total=False):
    """:class:`BucketSampler`'s keywords: the spec's settings and the sampler's options."""


class PackingSamplerKeywords(PackingSettings, SamplerOptions, total=False):
    """:class:`PackingSampler`'s keywords: the spec's settings and the sampler's options."""


def split(cls: type[S], keywords: Mapping[str, Any]) -> tuple[S, dict[str, Any]]:
    """``cls`` built from the keywords that are its settings, and the others (the sampler's)."""
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    spec = cls(**{k: v for k, v in keywords.items() if k in names})
    return spec, {k: v for k, v in keywords.items() if k not in names}


@checks_keywords(TokenBudget)
def plan_token_budget(
    lengths: Any,
    *,
    seed: int = 0,
    epoch: int = 0,
    order: Any = None,
    **settings: Unpack[TokenBudgetSettings],
) -> BatchPlan:
    """Batch sequences greedily under a padded-token budget, exactly as fairseq's ``batch_by_size``.

    Walks ``order``; a batch costs count × longest. Batches hold at most ``max_sentences`` items
    and cost at most ``max_tokens``; sizes are multiples of ``multiple_of`` except small batches
    and the last one. Unlike fairseq, the last batch is never dropped.

    Args:
        lengths: (N,) lengths or (N, F) per-field lengths (a sequence's size is its max over fields).
        max_tokens: padded-token budget per batch, or None for no budget; one per field for
            (N, F) lengths (see :class:`TokenBudget`); in seconds with ``resolution``.
        max_sentences: most sequences per batch, or None for no cap.
        multiple_of: preferred batch size multiple (fairseq's ``bsz_mult``).
        resolution: seconds per tick of lengths made by :func:`padless.durations` (budgets
            then in seconds), or one per field.
        order: indices to walk, each at most once; None sorts by length (2-D: last field, then the first) with ties
            broken at random from (seed, epoch), so batch membership changes between epochs.
        oversize: "error" raises for a sequence longer than max_tokens; "drop" (or "skip")
            leaves it out and records it in ``plan.skipped``.
        seed, epoch: pick the tie-break stream when ``order`` is None.
        cost, max_cost: a budget in cost units beside max_tokens (see :class:`TokenBudget`).
        pad_to_multiple_of: the width the collate rounds each batch up to: the plan is that of
            the rounded lengths, so a batch costs count × round_up(longest, pad_to_multiple_of)
            (see :class:`TokenBudget`).

    Cost: O(N + max length) time (counting sort + one compiled pass), O(N) memory (with
    ``pad_to_multiple_of`` > 1, one more pass makes the rounded copy of the lengths); with
    ``max_cost`` one more compiled pass and N float64 costs. With ``order``: one pass narrows the
    sizes (to uint16 or uint32) and checks the lengths, then the walk is checked and its sizes
    gathered on one thread per core (at most four), and the greedy rule runs; about 1.6-1.8
    times ``np.sort`` of the lengths for 1e7 of them on two cores (2.4-2.9 for a random walk).

    >>> plan = plan_token_budget([5, 3, 3, 8, 1], max_tokens=9)
    >>> [b.tolist() for b in plan]
    [[4, 2, 1], [0], [3]]
    """
    return TokenBudget(**settings).plan(lengths, seed=seed, epoch=epoch, order=order)


class TokenBudgetSampler(PlanSampler):
    """Batch sampler over :class:`TokenBudget` batches (fairseq semantics, never drops data).

    ``PlanSampler(lengths, TokenBudget(...), ...)`` with today's keywords. Batch membership
    changes with the epoch (random tie-break among equal lengths) and the batch order is
    shuffled per epoch; see :class:`padless.PlanSampler` for ranks, tail policy, balance and
    resume.

    >>> s = TokenBudgetSampler([3, 5, 2, 7, 4, 4], max_tokens=10, seed=1)
    >>> sorted(i for batch in s for i in batch)
    [0, 1, 2, 3, 4, 5]
    """

    keyword_notes: ClassVar[dict[str, str]] = {}  # its spec's settings are its own

    @checks_keywords(TokenBudget, PlanSampler, but=("spec",))
    def __init__(self, lengths: Any, **keywords: Unpack[TokenBudgetSamplerKeywords]) -> None:
        spec, options = split(TokenBudget, keywords)
        super().__init__(lengths, spec, **options)


@checks_keywords(ExactLength)
def plan_exact_length(
    lengths: Any,
    *,
    seed: int = 0,
    epoch: int = 0,
    **settings: Unpack[ExactLengthSettings],
) -> BatchPlan:
    """Batch sequences of exactly equal length together, so no batch needs padding.

    Sequences are grouped by length ((N, F) lengths: by the tuple of field lengths, so every field
    is unpadded); each group is shuffled from (seed, epoch) and cut into batches. Batches come in
    length order (2-D: last field, then the first), a group's full batches before its leftover.

    Args:
        lengths: (N,) lengths or (N, F) per-field lengths.
        batch_size: the same batch size for every length.
        max_tokens: token budget: length L gets ``max_tokens // L`` sequences (2-D: L is the max
            over fields), at least 1, so a sequence longer than the budget gets a batch of its own
            (counted in ``info["over_budget"]``; pass ``max_length`` to skip such sequences).
            Lengths of 0 are an error here (an empty batch has no cost to budget).
        batch_sizes: step schedule ``{length: size}``: length L gets the value at the largest key
            <= L, and ``batch_size`` below the smallest key (an error if batch_size is None).
            Exactly one of batch_size, max_tokens and batch_sizes sizes the batches.
        max_length: sequences longer than this (2-D: max over fields) are left out and listed
            in ``plan.skipped``.
        include_partial: False keeps no incomplete batch: leftovers "partial" becomes "drop",
            and with "merge" the last pooled batch is dropped (and reported) when it holds
            fewer items than its longest member's size allows. (Every other pooled batch was
            closed because the next leftover did not fit.)
        leftovers: what to do with each group's last, incomplete batch. "partial" keeps it as a
            smaller batch (nothing lost), "drop" leaves its items out (listed in
            ``plan.skipped``), "merge" pools the leftovers of all lengths, in length order (2-D:
            by size, the max over fields), into batches that hold at most the batch size of their
            longest member: as few batches as the greedy fill makes, with the cuts placed where
            they pad least (a dynamic programme, O(pooled items × largest batch size), up to
            1e8 steps; beyond that, or with include_partial=False, the greedy fill). A little
            padding, nearly full batches; they come after the exact batches.
        multiple_of: batch sizes are rounded down to a multiple of this; sizes below it stay.
        seed, epoch: the within-length shuffle, so batch membership changes between epochs.
        cost: a :class:`padless.Cost` model (or its dict) for ``max_cost`` and for balancing
            (``count × cost(L)`` per batch); None counts padded tokens.
        max_cost: budget in cost units: length L gets ``floor(max_cost / cost(L))`` sequences
            (at least 1, as with max_tokens; the smaller of the two when both are given).
        pad_to_multiple_of: the width the collate rounds each batch up to. The plan is that of
            the lengths rounded up to it: a batch holds one padded width (lengths 1-8 share a
            batch with 8), and ``max_tokens``, ``max_length`` and ``batch_sizes`` keys are
            compared with that width, so the budget holds for the padded batch.
        oversize: a sequence that passes the budget alone (width over ``max_tokens``, cost
            over ``max_cost``): "error" raises, naming the first; "drop" leaves it out
            (``plan.skipped``, counted in ``plan.info["over_budget"]``). No batch is ever over
            the budget. (``max_length`` is a cut-off, not a budget: longer sequences are left
            out, counted in ``too_long``.)

    Returns:
        A :class:`BatchPlan`; ``plan.info`` holds ``too_long``, ``leftover_items`` (items in
        incomplete last batches, whatever became of them), ``dropped_leftovers``,
        ``merged_batches`` and ``over_budget``.

    Raises:
        TypeError, ValueError: conflicting or missing size options, non-positive sizes, a
            malformed schedule, lengths of 0 with max_tokens, lengths below a schedule without
            batch_size, an unknown ``leftovers``.

    Cost: O(N + distinct lengths) time and O(N) memory: a counting sort by length, a Fisher-Yates
    pass per length and one compiled pass that cuts the runs; no comparison sort (planning 1e7
    lengths takes about a fifth of ``np.argsort(kind="stable")``, see benchmarks/bench_exact.py).

    >>> import numpy as np
    >>> lens = np.array([3, 5, 3, 3, 5, 2])
    >>> plan = plan_exact_length(lens, batch_size=2)
    >>> [lens[b].tolist() for b in plan]
    [[2], [3, 3], [3], [5, 5]]
    >>> drop = plan_exact_length(lens, batch_size=2, leftovers="drop")
    >>> [lens[b].tolist() for b in drop], drop.info["dropped_leftovers"]
    ([[3, 3], [5, 5]], 2)
    """
    return ExactLength(**settings).plan(lengths, seed=seed, epoch=epoch)


class ExactLengthSampler(PlanSampler):
    """Batch sampler over :class:`ExactLength` batches: no padding at all.

    ``PlanSampler(lengths, ExactLength(...), ...)`` with today's keywords. Batch membership
    changes with the epoch (each length group is reshuffled) and the batch order is shuffled
    per epoch; see :class:`padless.PlanSampler` for ranks, tail policy, balance and resume.
    Sizing options are checked against the lengths here, up front.

    >>> s = ExactLengthSampler([4, 2, 4, 2, 4, 7], batch_size=2, seed=3)
    >>> sorted(len(set([4, 2, 4, 2, 4, 7][i] for i in b)) for b in s)
    [1, 1, 1, 1]
    >>> sorted(i for b in s for i in b)
    [0, 1, 2, 3, 4, 5]
    """

    keyword_notes: ClassVar[dict[str, str]] = {}  # its spec's settings are its own

    @checks_keywords(ExactLength, PlanSampler, but=("spec",))
    def __init__(self, lengths: Any, **keywords: Unpack[ExactLengthSamplerKeywords]) -> None:
        spec, options = split(ExactLength, keywords)
        super().__init__(lengths, spec, **options)


@checks_keywords(Buckets)
def plan_buckets(
    lengths: Any,
    *,
    seed: int = 0,
    epoch: int = 0,
    **settings: Unpack[BucketsSettings],
) -> BatchPlan:
    """Batch sequences within length buckets, each batch padded to at most its bucket's longest.

    Each bucket is shuffled from (seed, epoch) and cut into batches of one size per bucket: a
    fixed ``batch_size``, or ``max_tokens // (bucket's longest size)`` rounded down to
    ``multiple_of``, so no batch costs more than max_tokens even padded to the bucket's longest
    member (a sequence longer than max_tokens gets a batch of its own). A bucket's last batch may
    be smaller (nothing is dropped). Batches come bucket by bucket, shortest bucket first.

    Args:
        lengths: (N,) lengths or (N, F) per-field lengths (size = max over fields).
        boundaries: sorted interior cut points ``b1 < … < b(k−1)`` (see the module docstring);
            for 2-D buckets on (N, 2) lengths ``(cuts, subs)``: the first field's cuts and one
            list of second-field cuts per first-field bucket.
        num_buckets: choose the boundaries with :func:`bucket_boundaries` (minimum padded
            slots) instead; a pair ``(k0, k1)`` for 2-D buckets
            (:func:`padless.bucket_boundaries_2d`). Exactly one of boundaries and num_buckets.
        max_tokens: token budget per batch, or one per field of (N, F) lengths (each field's
            padded batch within its own; in seconds with ``resolution``); or
        batch_size: sequences per batch; or
        batch_sizes: one batch size per bucket (with ``boundaries``; 2-D buckets in row
            order). Exactly one of the three.
        multiple_of: batch sizes are rounded down to a multiple of this; sizes below it stay.
        seed, epoch: the within-bucket shuffle, so batch membership changes between epochs.
        cost: a :class:`padless.Cost` model (or its dict) for ``max_cost`` and for balancing
            (``count × cost(longest)`` per batch); None counts padded tokens. Boundaries from
            ``num_buckets`` still minimise padded tokens.
        max_cost: budget in cost units: a bucket's batches hold
            ``floor(max_cost / cost(bucket's longest))`` sequences (at least 1; the smaller
            size when max_tokens is given too). Instead of, or beside, max_tokens.
        pad_to_multiple_of: the width the collate rounds each batch up to. The plan is that of
            the lengths rounded up to it: buckets, boundaries (given or fitted) and budgets
            all see each sequence at its padded width, so ``max_tokens`` holds for the padded
            batch.
        oversize: a sequence that passes the budget alone (width over ``max_tokens``, cost
            over ``max_cost``): "error" raises, naming the first; "drop" leaves it out
            (``plan.skipped``; fitted boundaries ignore it). No batch is ever over the budget.
        resolution: seconds per tick of lengths made by :func:`padless.durations` (budgets
            then in seconds), or one per field.

    Returns:
        A :class:`BatchPlan` whose ``info`` lists the boundaries and, per bucket, its count,
        longest size and batch size, and the padded-slot bound Σ count × longest.

    Raises:
        TypeError, ValueError: both or neither of boundaries/num_buckets or of
            max_tokens/batch_size, non-positive sizes, unsorted boundaries, and a bucket of
            only empty sequences with max_tokens.

    Cost: O(N + max length) time and O(N) memory (histogram, counting sort by bucket, one
    Fisher-Yates pass; one more pass rounds the lengths when ``pad_to_multiple_of`` > 1), plus
    :func:`bucket_boundaries` when ``num_buckets`` is given.

    >>> import numpy as np
    >>> lens = np.array([2, 9, 3, 8, 2, 10])
    >>> plan = plan_buckets(lens, boundaries=[3], batch_size=3)
    >>> [sorted(lens[b].tolist()) for b in plan]
    [[2, 2, 3], [8, 9, 10]]
    """
    return Buckets(**settings).plan(lengths, seed=seed, epoch=epoch)


class BucketSampler(PlanSampler):
    """Batch sampler over :class:`Buckets` batches.

    ``PlanSampler(lengths, Buckets(...), ...)`` with today's keywords. With ``num_buckets`` the
    boundaries are chosen once, here (minimum padded slots), and kept in ``self.boundaries``.
    Batch membership changes with the epoch (each bucket is reshuffled) and the batch order is
    shuffled per epoch; see :class:`padless.PlanSampler` for ranks, tail policy, balance and
    resume.

    >>> s = BucketSampler([5, 1, 2, 9, 8, 1, 2, 7], num_buckets=2, batch_size=4, seed=1)
    >>> s.boundaries.tolist(), sorted(i for b in s for i in b)
    ([2], [0, 1, 2, 3, 4, 5, 6, 7])
    """

    keyword_notes: ClassVar[dict[str, str]] = {}  # its spec's settings are its own

    @checks_keywords(Buckets, PlanSampler, but=("spec",))
    def __init__(self, lengths: Any, **keywords: Unpack[BucketSamplerKeywords]) -> None:
        spec, options = split(Buckets, keywords)
        super().__init__(lengths, spec, **options)


@checks_keywords(Packing)
def plan_packing(
    lengths: Any,
    *,
    seed: int = 0,
    epoch: int = 0,
    **settings: Unpack[PackingSettings],
) -> PackedPlan:
    """Pack sequences into rows of ``capacity`` tokens by best-fit decreasing over all of them.

    Sequences are taken longest first (ties in a random order drawn from (seed, epoch)); each goes
    into the open row whose remaining space is the smallest that still fits it, else opens a new
    row. A row closes when it holds ``max_per_row`` sequences. Rows are then shuffled (per epoch)
    and grouped into batches of ``rows_per_batch`` rows; the last batch may hold fewer. Inside a
    batch, rows are listed in the order they were opened and each row's sequences longest first.

    Args:
        lengths: (N,) lengths or (N, F) per-field lengths (a sequence's size is its max over
            fields, so every field of a row fits in ``capacity``).
        capacity: tokens per row; or ``(C_src, C_tgt)``, one capacity per field of (N, 2)
            lengths: vector best fit, a row's pairs within both (see :class:`padless.Packing`).
        max_per_row: most sequences (or pieces) per row, or None for no cap.
        rows_per_batch: rows per batch.
        oversize: what to do with a sequence longer than ``capacity``: ``"error"`` raises (naming
            the first such index and its length); ``"split"`` cuts it into pieces of
            ``capacity`` tokens (the last one shorter) placed as separate items, each recorded as
            a ``(piece_start, piece_stop)`` range; ``"truncate"`` keeps its first ``capacity``
            tokens; ``"drop"`` leaves it out (``plan.skipped``). ``plan.info`` reports
            ``split``/``pieces``, ``truncated``, ``dropped`` and ``tokens_lost``.
        seed, epoch: the tie-break stream and the row order.
        cost: a :class:`padless.Cost` model (or its dict) for ``max_row_cost`` and for
            balancing: a row costs ``Σ cost(lᵢ)`` plus its padding at the linear rate, a batch
            the sum of its rows. None: a batch costs its real tokens, as before.
        max_row_cost: most cost per row (padding included). A sequence goes to the best-fitting
            row (by tokens) among those it keeps within the cap; a sequence whose row alone
            would pass it is oversize ("error" or "drop"; "split" and "truncate" need a row of
            ``capacity`` tokens of one sequence to fit the cap).
        context_parallel: rows for that many context-parallel ranks: every sequence planned
            at its length rounded up to a multiple of ``2·context_parallel``, the rounding
            counted as padding (see :class:`padless.Packing`); 1 (default): none.

    Returns:
        A :class:`PackedPlan`; ``plan.info`` holds ``efficiency`` = real tokens ÷ (rows ×
        capacity), ``rows``, ``real_tokens`` and the oversize report.

    Cost: O(N + max length) for the counting sort, then O(log_64 capacity) per placement (a
    64-ary bit tree over remaining spaces, with a stack of open rows per remaining space), then
    one scatter of the entries into their rows: within 2× of ``np.argsort(kind="stable")`` of
    the lengths at N = 10^7 (``benchmarks/bench_packing.py``). Memory: about 8 int64 words per
    sequence plus 8 bytes per unit of capacity (capacity is limited to 2^28).

    >>> plan = plan_packing([6, 2, 5, 3, 7, 1], capacity=8, rows_per_batch=2)
    >>> [[r.tolist() for r in plan.batch_rows(b)] for b in range(len(plan))]
    [[[4, 5], [0, 1]], [[2, 3]]]
    >>> plan.efficiency
    1.0
    """
    return cast(PackedPlan, Packing(**settings).plan(lengths, seed=seed, epoch=epoch))


class PackingSampler(PlanSampler):
    """Batch sampler over :func:`plan_packing` batches of packed rows.

    ``PlanSampler(lengths, Packing(...), ...)`` with today's keywords. Each batch is a list of
    Python ints: the batch's rows one after the other, rows in the order they were opened, each
    row's sequences longest first. Feed the items to ``collate_for(sampler)`` (that is
    ``padless.torch.collate_packed`` with this sampler's ``capacity`` and ``max_per_row``): it cuts the
    list back into the planned rows next fit (see :func:`next_fit_rows`) and builds ``input_ids``,
    ``cu_seqlens``, ``position_ids``, labels... With ``oversize="split"`` (or ``"truncate"``)
    wrap the dataset with :meth:`pieces`, since pieces are yielded as codes
    ``index + piece · N``::

        sampler = PackingSampler(lengths, capacity=4096, rows_per_batch=8)
        loader = DataLoader(dataset, batch_sampler=sampler,
                            collate_fn=collate_for(sampler, flatten=True))
        for batch in loader:  # batch["cu_seqlens"], batch["max_seqlen"] -> flash_attn_varlen_func
            ...

        # sequences longer than capacity, cut into pieces:
        sampler = PackingSampler(lengths, capacity=4096, oversize="split")
        loader = DataLoader(sampler.pieces(dataset), batch_sampler=sampler,
                            collate_fn=collate_for(sampler))

    Rows change with the epoch (random tie-break among equal lengths, shuffled row order) and
    the batch order is shuffled per epoch; see :class:`padless.sampling.sampler.PlanSampler` for ranks,
    tail policy, balance and resume. With ``balance=True`` the cost of a batch is its real tokens
    (with ``cost=``, its rows' cost in that model).

    Args:
        lengths: (N,) or (N, F) lengths, exactly the token counts of the dataset items.
        capacity, max_per_row, rows_per_batch, oversize, cost, max_row_cost: see
            :func:`plan_packing`.
        shuffle, seed, rank, world_size, drop_last, balance: see the sampler base.

    >>> s = PackingSampler([6, 2, 5, 3, 7, 1], capacity=8, seed=1)
    >>> sorted(i for batch in s for i in batch), len(s)
    ([0, 1, 2, 3, 4, 5], 3)
    """

    keyword_notes: ClassVar[dict[str, str]] = {}  # its spec's settings are its own

    @checks_keywords(Packing, PlanSampler, but=("spec",))
    def __init__(self, lengths: Any, **keywords: Unpack[PackingSamplerKeywords]) -> None:
        spec, options = split(Packing, keywords)
        super().__init__(lengths, spec, **options)
        self.spec: Packing = spec

    def pieces(self, dataset: Any, *, keys: Sequence[str] = ("input_ids",)) -> Any:
        """Wrap ``dataset`` so the codes this sampler yields give back pieces: a
        :class:`padless.planners.packing.PieceDataset` (typed ``Any``, as ``checked()``, so
        that ``DataLoader(...)`` of it type-checks: torch's ``Dataset`` is a class, not a
        protocol).

        >>> s = PackingSampler([5, 1], capacity=2, oversize="split")
        >>> ds = s.pieces([[1, 2, 3, 4, 5], [6]])
        >>> sorted(tuple(ds[c]) for batch in s for c in batch)
        [(1, 2), (3, 4), (5,), (6,)]
        """
        return self.spec.pieces(dataset, num_sequences=int(self.sizes.shape[0]), keys=keys)
