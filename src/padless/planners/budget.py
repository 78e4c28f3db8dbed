"""Token-budget batching with fairseq's ``batch_by_size`` semantics."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .. import _kernels as K
from .._kernels import cost as KC
from .._kernels import windows as KW
from ..core import _rng
from ..core._check import budget_or_none, check_choice, check_seed, positive
from ..core.cost import (
    Cost,
    check_max_cost,
    cost_settings,
    format_cost,
    model_of,
    padded_batch_costs,
)
from ..core.fields import check_field_budgets, check_resolution, field_scales, scaled_sizes
from ..core.lengths import MAX_LENGTH
from ..core.plan import BatchPlan
from ..io import lengths_of
from . import _rounds as R
from ._order import SORTS, group_keys, keys_order, length_order, run_sizes
from .spec import (
    QUIET_DEFAULTS,
    GroupedPlanner,
    Planner,
    Spec,
    WindowKernel,
    check_field_costs,
    check_field_count,
    check_pad_multiple,
    group_members,
    plain,
    round_up,
    setting,
    settle_field_budgets,
)

if TYPE_CHECKING:
    pass

OVERSIZE = ("error", "drop")
OVERSIZE_ALIASES = {"skip": "drop"}


def check_oversize(name: str, value: Any, choices: tuple[str, ...] = OVERSIZE) -> str:
    """Check an ``oversize`` policy; ``"skip"`` is accepted as another word for ``"drop"``."""
    if isinstance(value, str) and value in OVERSIZE_ALIASES:
        value = OVERSIZE_ALIASES[value]
    return check_choice(name, value, choices)


def check_sort(name: str, value: Any) -> str:
    """Check ``sort``: which field of 2-D lengths the length order sorts by first."""
    return check_choice(name, value, SORTS)


def _json_safe_setting(value: Any) -> Any:
    """A setting as a record shows it (a Cost as its dict)."""
    if isinstance(value, tuple):
        return [_json_safe_setting(v) for v in value]
    return value.as_dict() if isinstance(value, Cost) else value


def _order_array(order: Any) -> np.ndarray:
    """``order`` as a 1-D integer array (range and repeats are checked by the compiled pass)."""
    arr = np.asarray(order)
    if arr.ndim != 1:
        raise ValueError(f"order must be a 1-D array of indices, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"order must hold integer indices, got dtype {arr.dtype}")
    if arr.dtype not in (np.int64, np.int32):
        if arr.dtype == np.uint64 and int(arr.max()) > np.iinfo(np.int64).max:
            raise ValueError(f"order must hold indices in [0, n), got {int(arr.max())}")
        arr = arr.astype(np.int64)
    return np.ascontiguousarray(arr)


def oversize_filter(
    sizes: np.ndarray,
    limit: int,
    oversize: str,
    what: str = "max_tokens",
    top: int | None = None,
    multiple: int = 1,
) -> np.ndarray:
    """Indices whose size is over ``limit``; raise for ``oversize="error"``. ``top``: the largest
    size, if known. ``multiple``: the sizes are widths rounded up to it (named in the message)."""
    if sizes.size == 0 or (int(sizes.max()) if top is None else top) <= limit:
        return np.zeros(0, dtype=np.int64)
    too_long = np.flatnonzero(sizes > limit)
    if too_long.size and oversize == "error":
        i = int(too_long[0])
        size = f"length {int(sizes[i])}"
        if multiple != 1:
            size = f"padded width {int(sizes[i])} (its length rounded up to pad_to_multiple_of={multiple})"
        raise ValueError(
            f"index {i} has {size}, which exceeds {what}={limit} "
            f'(pass oversize="drop" to leave such items out)'
        )
    return too_long


def cost_filter(planner: Planner, units: np.ndarray, max_cost: float, oversize: str) -> np.ndarray:
    """Indices whose cost alone (``units``, one per sequence) passes ``max_cost``; raise for
    ``oversize="error"``."""
    over = np.flatnonzero(units > max_cost)
    if over.size and oversize == "error":
        i = int(over[0])
        size = f"length {int(planner.sizes[i])}"
        if planner.pad_to_multiple_of != 1:
            size = f"padded width {int(planner.widths[i])} (pad_to_multiple_of={planner.pad_to_multiple_of})"
        raise ValueError(
            f"index {i} has {size}, whose cost "
            f"{format_cost(float(units[i]))} exceeds max_cost={format_cost(max_cost)} "
            f'({over.size} sequences do; pass oversize="drop" to leave such items out)'
        )
    return over


def over_budget(planner: Planner, spec: Any, kept: np.ndarray | None = None) -> np.ndarray:
    """Sorted indices of the sequences one of which alone passes the spec's token budget (its
    width; per field, a field's width over that field's budget) or ``max_cost`` (its cost;
    per field, summed): the ``oversize`` policy's sequences ("error" raises, naming the first;
    "drop" leaves them out). ``kept``: a mask of the sequences to look at (the others are left
    out already)."""
    widths = planner.widths if kept is None else np.where(kept, planner.widths, 0)
    out = np.zeros(0, dtype=np.int64)
    budgets = getattr(spec, "field_budgets", None)
    limit = getattr(spec, "token_limit", spec.max_tokens)
    # a spec with settings per field binds a planner that keeps each field's widths
    fields: Any = getattr(planner, "field_widths", None)
    if budgets is not None:
        out = _field_oversize(fields, spec, budgets)
    elif limit is not None:
        multiple = planner.pad_to_multiple_of
        out = oversize_filter(widths, limit, spec.oversize, multiple=multiple)
    if spec.max_cost is not None:
        if isinstance(spec.cost, tuple):
            units = field_unit_sums(spec.cost, fields)
        else:
            units = model_of(spec.cost).of(widths)
        if kept is not None:
            units = np.where(kept, units, 0.0)
        out = np.union1d(out, cost_filter(planner, units, spec.max_cost, spec.oversize))
    return out.astype(np.int64)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenBudget(Spec):
    """Token-budget batching, batch for batch as fairseq's ``batch_by_size``.

    Walks the sequences in length order (ties broken at random per epoch) and closes a batch
    when one more would cost more than ``max_tokens`` padded tokens (count × longest) or hold
    more than ``max_sentences``; sizes are multiples of ``multiple_of`` except small batches and
    the last one. See :func:`plan_token_budget` for the full rule.

    ``multiple_of`` is about the batch *size* (fairseq's ``bsz_mult``); ``pad_to_multiple_of``
    is about its *width*: a collate that pads to a multiple of 8 (tensor cores, HF's
    ``pad_to_multiple_of``) makes a batch cost count × round_up(longest, 8), and the budget holds
    for that batch only when the plan knows it.

    Args:
        max_tokens: padded-token budget per batch (<= 2**62), or None for no budget.
        max_sentences: most sequences per batch, or None for no cap.
        multiple_of: preferred batch size multiple (fairseq's ``bsz_mult``).
        oversize: "error" raises for a sequence longer than max_tokens; "drop" (or its alias
            "skip") leaves it out and lists it in ``plan.skipped``.
        cost: a :class:`padless.Cost` model (or its dict) for ``max_cost`` and for balancing
            (``balance=True`` groups steps by ``count × cost(longest)``); None counts padded
            tokens, as before.
        max_cost: budget in cost units: a batch also closes when ``count × cost(longest)``
            would pass it (a sequence whose cost alone passes it is oversize). Without
            ``cost`` it counts padded tokens.
        pad_to_multiple_of: the padded width is rounded up to a multiple of this (1: none).
            The plan is the plan of the lengths rounded up to it (each field of (N, F)
            lengths), so every budget holds for the padded batch; ``collate_for(sampler)`` pads to
            exactly this multiple.
        resolution: the lengths are ticks of this many seconds (or any unit), e.g. from
            :func:`padless.durations`, and budgets are given in that unit
            (``max_tokens=200.0`` seconds): each becomes whole ticks, rounded down. For (N, F)
            lengths one per field (None for a field of whole tokens).
        sort: for (N, F) lengths, ``"target_first"`` (default) walks them by the last field,
            then the first; ``"source_first"`` by the first, then the last — the order of
            fairseq's ``LanguagePairDataset.ordered_indices`` (a stable sort by target length,
            then by source length), so a run planned with it makes fairseq's batches, the same
            count and the same lengths in each (ties at random, from ``(seed, epoch)``). For
            1-D lengths both are the same order.

    Per field: for (N, F) lengths, ``max_tokens`` may give one budget per field (a tuple; None
    for a field without one): then every batch has ``count × longest_f <= max_tokens[f]`` in
    each field, instead of one budget on the longest field (fairseq's max over fields). With
    two budgeted fields or more the walk keeps neighbours near in both: bins of equal counts
    along the first budgeted field (about 8 batches each), each walked along the second, up
    and down in turn; with one, along each sequence's share of its budget
    (:func:`padless.core.fields.field_scales`, which also makes the cut exact). ``cost`` may give a
    model per field too, summed: a batch costs ``count × Σ_f cost_f(longest_f)`` (an encoder
    over audio ticks plus a decoder over text tokens); with per-field budgets a cost model must
    be per field.

    >>> spec = TokenBudget(max_tokens=(8, 5))
    >>> [b.tolist() for b in spec.plan(np.array([[3, 1], [4, 2], [2, 5], [1, 1]]))]
    [[3, 0], [1], [2]]

    >>> spec = TokenBudget(max_tokens=9)
    >>> [b.tolist() for b in spec.plan([5, 3, 3, 8, 1])]
    [[4, 2, 1], [0], [3]]
    >>> [b.tolist() for b in TokenBudget(max_tokens=16, pad_to_multiple_of=4).plan([5, 3, 3, 8, 1])]
    [[2, 4, 1], [3, 0]]
    """

    max_tokens: int | float | tuple[Any, ...] | None = setting(check_field_budgets, default=None)
    max_sentences: int | None = setting(budget_or_none, default=None)
    multiple_of: int = setting(positive, default=1)
    oversize: str = setting(check_oversize, default="error")
    cost: Cost | tuple[Cost | None, ...] | None = setting(check_field_costs, default=None)
    max_cost: float | None = setting(check_max_cost, default=None)
    pad_to_multiple_of: int = setting(check_pad_multiple, default=1)
    resolution: float | tuple[float | None, ...] | None = setting(check_resolution, default=None)
    sort: str = setting(check_sort, default="target_first")
    # derived in _settle: the budget in whole ticks (per field: the shared limit of
    # field_scales), the per-field budgets in ticks and their scales (None: one budget)
    token_limit: int | None = dataclasses.field(init=False, default=None, repr=False)
    field_budgets: tuple[int | None, ...] | None = dataclasses.field(
        init=False, default=None, repr=False
    )
    scales: tuple[int, ...] | None = dataclasses.field(init=False, default=None, repr=False)

    name = "token_budget"
    state_tag = "TokenBudgetSampler"
    quiet = {**QUIET_DEFAULTS, "resolution": None, "sort": "target_first"}
    about = {
        **Spec.about,
        "max_sentences": "most sequences per batch (fairseq's name)",
        "sort": "2-D lengths by 'target_first' or 'source_first' (fairseq's order)",
    }

    def _settle(self) -> None:
        limit, ticks = settle_field_budgets(
            self.max_tokens, self.resolution, self.cost, self.max_cost
        )
        if ticks is not None and self.sort != "target_first":
            raise ValueError(
                f"sort={self.sort!r} orders one budget's walk, and max_tokens={self.max_tokens!r} "
                "budgets each field (its walk keeps neighbours near in every budgeted field): "
                "give one max_tokens, or leave sort at its default"
            )
        if ticks is None:
            self._set(token_limit=limit)
            return
        scales, shared = field_scales(ticks)
        self._set(token_limit=shared, field_budgets=ticks, scales=tuple(int(x) for x in scales))

    @property
    def per_field(self) -> bool:
        """Whether budgets or costs are per field (the plan needs (N, F) lengths)."""
        return self.field_budgets is not None or isinstance(self.cost, tuple)

    def stream_engine(self) -> R.StreamEngine:
        """The stream form: budget batches cut from each round's buffer."""
        if self.per_field:
            raise ValueError(
                f"{self.describe()} budgets per field, which StreamBatcher does not follow "
                "(its rounds budget one size per item); plan with PlanSampler instead"
            )
        known = ("max_tokens", "max_sentences", "multiple_of", "oversize", "resolution")
        R.check_streamable(self, known)
        return BudgetStream(self)

    def window_kernel(self, src: Any) -> WindowKernel | None:
        """The fused windowed token budget (settings beyond the budget's own go to the planner)."""
        known = ("max_tokens", "max_sentences", "multiple_of", "oversize", "resolution")
        fused = type(self) is TokenBudget and plain(self, known) and not self.per_field
        return BudgetWindows(self, src) if fused else None

    def histogram_form(self) -> tuple[str, tuple[int, int, int]] | None:
        """The histogram form (the budget kernel's limits), when no cost model is set: a
        batch's cost is then its count × its widest width, which the histogram tells."""
        if self.cost is not None or self.max_cost is not None or self.per_field:
            return None
        if self.sort != "target_first":  # the histogram's cells are in its own order
            return None
        return ("budget", (self.token_limit or 0, self.max_sentences or 0, self.multiple_of))

    def bind_groups(self, lengths: np.ndarray, groups: np.ndarray) -> GroupBudgetPlanner:
        """Padded batches of whole groups (:class:`GroupBudgetPlanner`), for a sampler given
        ``groups=``; the settings that would cut or reorder a group are refused by name."""
        why = {
            "max_tokens": (
                self.field_budgets is not None,
                "a group's batch is budgeted on its widest item, one budget for all fields; "
                "give one max_tokens",
            ),
            "cost": (
                isinstance(self.cost, tuple),
                "a group's batch is priced on its widest item; give one Cost model",
            ),
            "sort": (
                self.sort != "target_first",
                "groups are walked by their widest item, not by one field; leave sort at its "
                "default",
            ),
            "multiple_of": (
                self.multiple_of != 1,
                "a batch holds whole groups, so its size is not cut to a multiple; leave "
                "multiple_of=1",
            ),
        }
        for name, (bad, fix) in why.items():
            if bad:
                raise ValueError(
                    f"groups= cannot be honoured by TokenBudget with {name}="
                    f"{_json_safe_setting(getattr(self, name))!r}: {fix}"
                )
        return GroupBudgetPlanner(self, lengths, groups)

    def bind(self, lengths: np.ndarray) -> BudgetPlanner:
        if self.max_cost is not None:
            return CostBudgetPlanner(self, lengths)
        return BudgetPlanner(self, lengths)

    def as_dict(self) -> dict[str, Any]:
        return cost_settings(self, super().as_dict())

    def plan(self, lengths: Any, *, seed: int = 0, epoch: int = 0, order: Any = None) -> BatchPlan:
        """Plan ``lengths``; ``order`` (indices, each at most once) replaces the length order."""
        if order is None:
            return super().plan(lengths, seed=seed, epoch=epoch)
        check_seed("seed", seed)
        check_seed("epoch", epoch)
        walk = _order_array(order)
        if (
            self.max_cost is None
            and not self.per_field
            and self.pad_to_multiple_of == 1
            and isinstance(lengths, np.ndarray)
            and lengths.ndim == 1
            and lengths.dtype == np.int64
            and lengths.flags.c_contiguous
            and 4 * walk.shape[0] >= lengths.shape[0]
        ):
            # int64 lengths that the walk covers: one pass narrows the sizes for the gather and
            # yields what the checks of the lengths (range) and of the budget (oversize) need
            narrowed, bits, top = K.narrow_sizes(lengths)
            if 0 <= bits < MAX_LENGTH:
                planner = BudgetPlanner(self, lengths, top=top)
                return planner.plan_order(walk, narrowed)
        return self.bind(lengths_of(lengths)).plan_order(walk)


class BudgetPlanner(Planner):
    """:class:`TokenBudget` bound to lengths (sequences over the budget found once)."""

    spec: TokenBudget

    def __init__(self, spec: TokenBudget, lengths: np.ndarray, top: int | None = None) -> None:
        """``top``: the largest size, when the caller knows it (saves a pass over the sizes)."""
        super().__init__(spec, lengths)
        self.skipped = np.zeros(0, dtype=np.int64)
        # each field's widths (the collate pads each field to its longest)
        wide = self.padded_lengths
        self.field_widths = wide if wide.ndim == 2 else wide[:, None]
        if spec.per_field:
            check_field_count(spec, self.field_widths.shape[1], lengths.shape)
        # two budgeted fields or more: the walk goes through bins of the first, by the second
        budgeted = (
            []
            if spec.field_budgets is None
            else [f for f, b in enumerate(spec.field_budgets) if b is not None]
        )
        self.field_walk = budgeted[:2] if len(budgeted) > 1 else []
        if spec.field_budgets is not None and spec.scales is not None:
            self.skipped = _field_oversize(self.field_widths, spec, spec.field_budgets)
            # one size per sequence: its largest share of its field's budget (exact, see
            # padless.core.fields.field_scales); the walk and every kernel plan it
            sized = scaled_sizes(self.field_widths, np.array(spec.scales, np.int64))
            self.widths = self.padded_lengths = sized
        elif spec.token_limit is not None:
            if top is not None and self.pad_to_multiple_of != 1:
                top = int(round_up(np.array([top], np.int64), self.pad_to_multiple_of)[0])
            self.skipped = oversize_filter(
                self.widths,
                spec.token_limit,
                spec.oversize,
                top=top,
                multiple=self.pad_to_multiple_of,
            )

    def _limits(self) -> tuple[int, int, int]:
        s = self.spec
        return (s.token_limit or 0, s.max_sentences or 0, s.multiple_of)

    def plan(self, seed: int, epoch: int) -> BatchPlan:
        if self.field_walk:
            return self.plan_order(self._field_walk(seed, epoch))
        walk, starts = length_order(self.padded_lengths, seed, epoch, sort=self.spec.sort)
        values = run_sizes(self.padded_lengths, walk, starts)
        if values is None:
            return self.plan_order(walk)
        return self._runs_plan(walk, starts, values, self.skipped)

    def plan_named(self, seed: int, epoch: int, names: np.ndarray) -> BatchPlan | None:
        """The plan with its sequences named (see :meth:`Planner.plan_named`): for 1-D sizes
        that are their own sort keys, the counting sort writes the names and the batches are
        cut on its runs, as :meth:`plan` does."""
        if names.shape != self.sizes.shape:
            raise ValueError(f"names must have one entry per sequence, got shape {names.shape}")
        lengths = self.padded_lengths
        if self.field_walk or lengths.ndim != 1:
            return None
        keys, span = group_keys(lengths, self.spec.sort)
        if keys is not lengths:  # ranked: the runs are not the sizes
            return None
        walk, starts = keys_order(keys, span, seed, epoch, names=names)
        values = np.arange(starts.size - 1, dtype=np.int64)  # runs of the keys: the sizes
        return self._runs_plan(walk, starts, values, names[self.skipped])

    def _runs_plan(
        self, walk: np.ndarray, starts: np.ndarray, values: np.ndarray, skipped: np.ndarray
    ) -> BatchPlan:
        """The greedy batches of a length order cut on its runs (``values``: each run's size)."""
        limits = self._limits()
        # sorted 1-D lengths: runs give every size (no per-position array); too-long ones are
        # the last runs
        if self.skipped.size:
            runs = int(np.searchsorted(values, limits[0], side="right"))
            values, starts = values[:runs], starts[: runs + 1]
            walk = walk[: starts[-1]]
        ends = K.budget_ends_runs(values, starts, *limits)
        offsets = np.concatenate([np.zeros(1, np.int64), ends])
        return self.tagged(BatchPlan(walk, offsets, skipped=skipped))

    def _field_walk(self, seed: int, epoch: int) -> np.ndarray:
        """The walk of budgets per field: near in both budgeted fields from one sequence to the
        next. The sequences in order of the first budgeted field (ties at random from
        ``(seed, epoch)``) are cut into bins of equal counts, about :data:`BIN_BATCHES` batches
        each (estimated as the sizes' sum over the limit); each bin is walked by the second
        field, up in even bins and down in odd ones (no jump between bins), then by the first.
        The sequences over a budget are left out. Cost: O(N log N)."""
        first, second = self.field_walk
        wide = self.field_widths
        kept = np.ones(wide.shape[0], dtype=bool)
        if self.skipped.size:
            kept[self.skipped] = False
        items = np.flatnonzero(kept)
        order = items[length_order(np.ascontiguousarray(wide[items, first]), seed, epoch)[0]]
        n = int(order.size)
        limit = int(self.spec.token_limit or 1)
        batches = -(-int(self.widths[order].sum()) // limit) if n else 0
        bins = max(1, batches // BIN_BATCHES)
        which = np.arange(n, dtype=np.int64) * bins // max(n, 1)
        along = wide[order, second].astype(np.int64)
        snake = np.where(which % 2 == 0, along, -along)
        return order[np.lexsort((wide[order, first], snake, which))]

    def plan_order(self, order: np.ndarray, narrowed: np.ndarray | None = None) -> BatchPlan:
        """Plan a given walk: one compiled pass checks it (indices in range, each at most once),
        gathers the sizes, leaves out the sequences over the budget and cuts the batches.

        ``narrowed``: the sizes already in a narrower type (``K.narrow_sizes``), if at hand.
        """
        sizes = self.widths if narrowed is None else narrowed
        if narrowed is None and 4 * order.shape[0] >= sizes.shape[0]:  # narrowing pays for itself
            sizes = K.narrow_sizes(sizes)[0]
        status, walk, ends = K.budget_order(order, sizes, *self._limits(), self.skipped.size > 0)
        if status < 0:
            n = order.shape[0]
            k = -1 - status
            if k < n:
                raise ValueError(
                    f"order must hold indices in [0, {self.sizes.shape[0]}), "
                    f"got {int(order[k])} at position {k}"
                )
            k -= n
            raise ValueError(
                "order must hold each index at most once (so every index is planned once), "
                f"got index {int(order[k])} again at position {k}"
            )
        offsets = np.concatenate([np.zeros(1, np.int64), ends])
        return self.tagged(BatchPlan(walk, offsets, skipped=self.skipped))

    def costs(self, plan: BatchPlan) -> np.ndarray:
        """Cost of each batch: count × longest, or ``count × cost(longest)`` with a cost model
        (longest: the widest padded width)."""
        cost = self.spec.cost
        if isinstance(cost, tuple):
            return field_batch_costs(cost, plan, self.field_widths)
        if cost is None:
            return super().costs(plan)
        return padded_batch_costs(cost, plan, self.widths)

    def config(self) -> dict[str, Any]:
        # "skip" is the word states were fingerprinted with before "drop" became the one word
        cfg = self.spec.as_dict()
        if cfg["oversize"] == "drop":
            cfg["oversize"] = "skip"
        return cfg


class CostBudgetPlanner(BudgetPlanner):
    """:class:`TokenBudget` with ``max_cost``: the token plan's walk, cut again under both budgets.

    The walk is the one the token budget takes (length order, or the order given), less the
    sequences whose cost alone passes ``max_cost``; the greedy rule then closes a batch when
    either budget (or ``max_sentences``) would break (``padless._kernels.cost.budget_cost_ends``).
    """

    def __init__(self, spec: TokenBudget, lengths: np.ndarray) -> None:
        super().__init__(spec, lengths)
        self.field_units: np.ndarray | None = None
        if isinstance(spec.cost, tuple):
            self.field_units = field_units(spec.cost, self.field_widths)
            self.units = _row_sums(self.field_units)  # each sequence alone
        else:
            self.units = model_of(spec.cost).of(self.widths)
        over = cost_filter(self, self.units, float(spec.max_cost or 0.0), spec.oversize)
        self.cost_skipped = over
        # self.skipped stays the token budget's (the token walk leaves those out)
        self.all_skipped = np.union1d(self.skipped, over).astype(np.int64)

    def plan_named(self, seed: int, epoch: int, names: np.ndarray) -> BatchPlan | None:
        return None  # the token walk is cut again under the cost budget: plan, then gather

    def _recut(self, plan: BatchPlan) -> BatchPlan:
        walk = plan.indices
        if self.cost_skipped.size:
            walk = walk[self.units[walk] <= float(self.spec.max_cost or 0.0)]
        if self.field_units is not None:
            ends = KC.budget_field_cost_ends(
                np.ascontiguousarray(self.widths[walk]),
                np.ascontiguousarray(self.field_units[walk]),
                *self._limits(),
                float(self.spec.max_cost or 0.0),
            )
            offsets = np.concatenate([np.zeros(1, np.int64), ends])
            return self.tagged(BatchPlan(walk, offsets, skipped=self.all_skipped))
        ends = KC.budget_cost_ends(
            np.ascontiguousarray(self.widths[walk]),
            np.ascontiguousarray(self.units[walk]),
            *self._limits(),
            float(self.spec.max_cost or 0.0),
        )
        offsets = np.concatenate([np.zeros(1, np.int64), ends])
        return self.tagged(BatchPlan(walk, offsets, skipped=self.all_skipped))

    def plan(self, seed: int, epoch: int) -> BatchPlan:
        return self._recut(super().plan(seed, epoch))

    def plan_order(self, order: np.ndarray, narrowed: np.ndarray | None = None) -> BatchPlan:
        return self._recut(super().plan_order(order, narrowed))


class GroupBudgetPlanner(GroupedPlanner, BudgetPlanner):
    """:class:`TokenBudget` over whole groups (:meth:`TokenBudget.bind_groups`): sort, then cut.

    Each group (the items of one id: a DPO pair, a GRPO group) is one unit of ``count`` items
    whose longest padded width is ``longest``; the groups are walked by increasing ``longest``
    (ties in a random order from ``(seed, epoch)``, as the token budget's) and a batch closes
    when the next group would take it past a budget after the collate: ``count × longest`` over
    ``max_tokens``, ``count`` over ``max_sentences``, ``count × cost(longest)`` over
    ``max_cost``. A batch lists its groups one after the other, each group's items in
    increasing index order (a collate finds chosen and rejected as neighbours). A group over a
    budget alone is a ``ValueError`` naming it (``oversize="error"``), or left out
    (``"drop"``: its items in ``plan.skipped``).

    Cost: O(N log N) to find the groups once; per plan a counting sort of the groups by width,
    a galloping search per batch and a gather of the items (1e6 items in pairs: about 0.1 s).

    >>> from padless import TokenBudget
    >>> lens = np.array([1, 2, 2, 2, 4, 1])
    >>> planner = TokenBudget(max_tokens=8).bind_groups(lens, np.array([0, 0, 1, 1, 2, 2]))
    >>> [b.tolist() for b in planner.plan(0, 0)]  # 4 x 2 and 2 x 4 tokens
    [[2, 3, 0, 1], [4, 5]]
    """

    def __init__(self, spec: TokenBudget, lengths: np.ndarray, groups: np.ndarray) -> None:
        Planner.__init__(self, spec, lengths)  # a sequence over the budget: its group's error
        wide = self.padded_lengths
        self.field_widths = wide if wide.ndim == 2 else wide[:, None]
        self.field_walk: list[int] = []
        self.groups = groups
        ids, members, starts = group_members(groups)
        self.ids, self.members, self.starts = ids, members, starts
        self.counts = np.diff(starts)
        if members.size:
            self.longest = np.maximum.reduceat(self.widths[members], starts[:-1]).astype(np.int64)
        else:
            self.longest = np.zeros(0, dtype=np.int64)
        self.units: np.ndarray | None = None
        if spec.max_cost is not None:
            self.units = model_of(cast(Cost | None, spec.cost)).of(self.longest)
        over = self._over_budget()
        keep = np.ones(ids.size, dtype=bool)
        keep[over] = False
        self.kept = np.flatnonzero(keep).astype(np.int64)
        self.skipped = np.zeros(0, dtype=np.int64)
        if over.size:
            parts = [members[starts[g] : starts[g + 1]] for g in over.tolist()]
            self.skipped = np.sort(np.concatenate(parts)).astype(np.int64)

    def _over_budget(self) -> np.ndarray:
        """The groups (positions in :attr:`ids`) over a budget alone; with
        ``oversize="error"`` a ``ValueError`` naming the first, its items, longest and budget."""
        s = self.spec
        counts, longest = self.counts, self.longest
        width = "padded width" if self.pad_to_multiple_of != 1 else "longest"
        checks: list[tuple[np.ndarray, Callable[[int], str]]] = []
        if s.token_limit is not None:
            limit = s.token_limit

            def tokens(g: int) -> str:
                return (
                    f"padded it is {int(counts[g])} x {int(longest[g])} = "
                    f"{int(counts[g] * longest[g])} tokens, more than max_tokens={limit}"
                )

            checks.append((counts * longest > limit, tokens))
        if s.max_sentences is not None:
            most = s.max_sentences
            checks.append((counts > most, lambda g: f"more than max_sentences={most}"))
        if self.units is not None:
            units, top = self.units, float(s.max_cost or 0.0)

            def cost(g: int) -> str:
                paid = format_cost(float(counts[g] * units[g]))
                return f"padded it costs {paid}, more than max_cost={format_cost(top)}"

            checks.append((counts * units > top, cost))
        over = np.zeros(counts.size, dtype=bool)
        for bad, _ in checks:
            over |= bad
        found = np.flatnonzero(over).astype(np.int64)
        if found.size and s.oversize == "error":
            g = int(found[0])
            why = next(say(g) for bad, say in checks if bad[g])
            raise ValueError(
                f"group {int(self.ids[g])} has {int(counts[g])} items of {width} "
                f"{int(longest[g])}: {why}; a group is never split across batches: raise the "
                f'budget or pass oversize="drop" ({found.size} groups are over)'
            )
        return found

    def plan(self, seed: int, epoch: int) -> BatchPlan:
        kept = self.kept
        order = length_order(np.ascontiguousarray(self.longest[kept]), seed, epoch)[0]
        walk = kept[order]  # groups by increasing longest width, ties at random
        counts = self.counts[walk]
        cuts = self._cuts(
            counts, self.longest[walk], None if self.units is None else self.units[walk]
        )
        csum = np.zeros(walk.size + 1, dtype=np.int64)
        np.cumsum(counts, out=csum[1:])
        offsets = csum[cuts]
        firsts = np.repeat(self.starts[walk] - csum[:-1], counts)
        indices = self.members[firsts + np.arange(int(csum[-1]), dtype=np.int64)]
        plan = BatchPlan(indices, offsets, skipped=self.skipped)
        plan.info.update(groups=int(walk.size), group_policy="batch")
        return self.tagged(plan)

    def _cuts(
        self, counts: np.ndarray, longest: np.ndarray, units: np.ndarray | None
    ) -> np.ndarray:
        """Where the batches of the groups walked (``counts`` items each, ``longest`` widths
        nondecreasing; ``units``: the cost of each's longest) start, and the walk's end.

        The greedy rule closes a batch when the next group would pass a budget. Along a walk
        by increasing width a batch of groups ``s..e-1`` costs ``(items) × longest[e-1]`` (and
        ``× units[e-1]``: a cost model's coefficients are non-negative, so it grows with the
        width), which grows with ``e``: the greedy batch from ``s`` is the longest that fits,
        found by a galloping search. Cost: O(log(groups per batch)) steps per batch."""
        s = self.spec
        limit, most, top = s.token_limit or 0, s.max_sentences or 0, float(s.max_cost or 0.0)
        csum = [0, *np.cumsum(counts).tolist()]
        widths = longest.tolist()
        costs = None if units is None else units.tolist()
        total = len(widths)

        def fits(first: int, end: int) -> bool:  # groups first..end-1 in one batch
            n = csum[end] - csum[first]
            return (
                (not limit or n * widths[end - 1] <= limit)
                and (not most or n <= most)
                and (costs is None or n * costs[end - 1] <= top)
            )

        cuts = [0]
        first = 0
        while first < total:
            lo, step = first + 1, 1  # a group fits alone (checked when bound)
            while True:
                nxt = lo + step
                if nxt > total or not fits(first, nxt):
                    hi = min(nxt, total + 1)
                    break
                lo, step = nxt, step * 2
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if fits(first, mid):
                    lo = mid
                else:
                    hi = mid
            cuts.append(lo)
            first = lo
        return np.array(cuts, dtype=np.int64)


BIN_BATCHES = 8  # batches per bin of the walk of budgets per field


def _field_oversize(
    widths: np.ndarray, spec: TokenBudget, budgets: tuple[int | None, ...]
) -> np.ndarray:
    """Sorted indices of the sequences over a field's budget (``budgets``, in ticks) alone
    (``oversize="error"`` raises, naming the first and its field)."""
    over = np.zeros(widths.shape[0], dtype=bool)
    for f, b in enumerate(budgets):
        if b is not None:
            over |= widths[:, f] > b
    out = np.flatnonzero(over).astype(np.int64)
    if out.size and spec.oversize == "error":
        i = int(out[0])
        f = next(f for f, b in enumerate(budgets) if b is not None and widths[i, f] > b)
        res = _resolution_of(spec, f)
        unit = "" if res is None else " ticks"
        given = "" if res is None else f" ({budgets[f]} ticks of resolution={res!r})"
        raise ValueError(
            f"index {i} has field {f} length {int(widths[i, f])}{unit}, which exceeds "
            f"max_tokens[{f}]={cast(tuple, spec.max_tokens)[f]!r}{given}; "
            f'{out.size} sequences do (pass oversize="drop" to leave such items out)'
        )
    return out


def _resolution_of(spec: TokenBudget, field: int) -> float | None:
    res = spec.resolution
    return res[field] if isinstance(res, tuple) else res


def field_units(costs: tuple[Cost | None, ...], widths: np.ndarray) -> np.ndarray:
    """(N, F) float64: each field's cost of each sequence's width in it (0 where a field has no
    cost model)."""
    out = np.zeros(widths.shape, dtype=np.float64)
    for f, c in enumerate(costs):
        if c is not None:
            out[:, f] = c.of(widths[:, f])
    return out


def field_unit_sums(costs: tuple[Cost | None, ...], widths: np.ndarray) -> np.ndarray:
    """``Σ_f cost_f(width_f)`` of each row of (N, F) ``widths``: one sequence's cost alone."""
    return _row_sums(field_units(costs, widths))


def _row_sums(units: np.ndarray) -> np.ndarray:
    """Σ over fields, left to right from 0.0 (the order the kernels add in)."""
    total = np.zeros(units.shape[0], dtype=np.float64)
    for f in range(units.shape[1]):
        total = total + units[:, f]
    return total


def field_batch_costs(
    costs: tuple[Cost | None, ...], plan: BatchPlan, widths: np.ndarray
) -> np.ndarray:
    """``count × Σ_f cost_f(longest_f)`` of every batch (float64), fields added left to right."""
    total = np.zeros(len(plan), dtype=np.float64)
    for f, c in enumerate(costs):
        if c is not None:
            total = total + padded_batch_costs(c, plan, np.ascontiguousarray(widths[:, f]))
    return total


class BudgetWindows(WindowKernel):
    """Token-budget batches of a window straight from the (memory-mapped) lengths."""

    spec: TokenBudget

    def _limits(self) -> tuple[int, int, int, int]:
        s, span = self.spec, self.src.size_max + 1
        limit = min(span - 1, s.token_limit or span)
        return limit, s.token_limit or 0, s.max_sentences or 0, s.multiple_of

    def plan(self, member: Any, blocks: np.ndarray, sub: int) -> BatchPlan:
        lay, span = self.src.layout, self.src.size_max + 1
        key = _rng.key(sub, 0, _rng.TIE_BREAK)
        order, kept, ends = KW.budget_window(
            self.src.first_field, lay.n, lay.block, member.rotation, blocks, span, key,
            *self._limits(),
        )  # fmt: skip
        kept = int(kept)
        offsets = np.concatenate([np.zeros(1, np.int64), ends])
        return BatchPlan(order[:kept], offsets, skipped=np.sort(order[kept:]))

    def count(self, member: Any, blocks: np.ndarray) -> int:
        lay, span = self.src.layout, self.src.size_max + 1
        limit, *args = self._limits()
        return int(
            KW.budget_window_count(
                self.src.first_field,
                lay.n,
                lay.block,
                member.rotation,
                blocks,
                span,
                limit,
                *args,
            )  # fmt: skip
        )


# --------------------------------------------------------------------------- stream form


class BudgetStream(R.StreamEngine):
    """TokenBudget's stream form (see :mod:`padless.streams`)."""

    spec: TokenBudget

    @property
    def max_tokens(self) -> int:  # the kernels' form of the spec's limits (0: none)
        return self.spec.token_limit or 0

    @property
    def max_sentences(self) -> int:
        return self.spec.max_sentences or 0

    @property
    def multiple(self) -> int:
        return self.spec.multiple_of

    def admit(self, sizes: np.ndarray, where: Callable[[int], int]) -> np.ndarray | None:
        return R.within_budget(sizes, self.spec.token_limit, self.spec.oversize, where)

    def full(self, counts: np.ndarray, padded: np.ndarray) -> np.ndarray:
        """Batches one more item of their longest size (``multiple_of`` more once they hold
        that many) would push over a limit: the kernel's rule."""
        longest = padded // np.maximum(counts, 1)
        step = np.where(counts >= self.multiple, self.multiple, 1)
        if not self.max_tokens and not self.max_sentences:
            return np.ones(counts.size, np.bool_)
        full = np.zeros(counts.size, np.bool_)
        if self.max_tokens:
            full |= (counts + step) * longest > self.max_tokens
        if self.max_sentences:
            full |= counts + step > self.max_sentences
        return full

    def plan(self, buf: R.Buffer, forced: np.ndarray, final: bool, key: int, room: int) -> R.Round:
        keys, span = group_keys(buf.lens)
        order, ends, real, padded, leave = K.streams.budget_round(
            keys, span, buf.sizes, forced, self.max_tokens, self.max_sentences, self.multiple,
            final, R.PAD_TARGET,
        )  # fmt: skip
        offsets = np.zeros(ends.size + 1, np.int64)
        offsets[1:] = ends
        counts = np.diff(offsets)
        # under pressure full batches leave before others, the least padded first
        score = (padded - real) / np.maximum(padded, 1) + ~self.full(counts, padded)
        leave = R.release(counts, leave, score, room)
        return R.select(buf.lens, order, offsets, leave, len(buf), real, padded)
