"""Exact-length batching: every batch holds sequences of one length, so nothing is padded."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _kernels as K
from ..core import _rng
from ..core._check import (
    MAX_BUDGET,
    budget_or_none,
    check_bool,
    check_choice,
    positive,
    positive_or_none,
)
from ..core.cost import (
    Cost,
    check_max_cost,
    cost_settings,
    model_of,
    padded_batch_costs,
    unit_limit,
)
from ..core.plan import BatchPlan
from . import _rounds as R
from ._order import group_keys, length_order
from .budget import check_oversize, over_budget
from .spec import Planner, Spec, check_cost, check_pad_multiple, setting

if TYPE_CHECKING:
    pass

LEFTOVERS = ("partial", "drop", "merge")
_MODES = {"partial": 0, "drop": 1, "merge": 2}


def round_size(raw: np.ndarray, multiple_of: int) -> np.ndarray:
    """Round batch sizes down to a multiple of ``multiple_of``; sizes below it stay as they are.

    A raw size of 0 (a sequence longer than the token budget) becomes 1.
    """
    raw = np.maximum(np.asarray(raw, dtype=np.int64), 1)
    if multiple_of == 1:
        return raw
    return np.where(raw >= multiple_of, raw // multiple_of * multiple_of, raw)


class SizeRule:
    """Batch size as a function of sequence size: fixed, token budget, or a step schedule.

    Built by :func:`size_rule`, which checks the options; :meth:`sizes_for` maps sizes to batch
    sizes (already rounded to ``multiple_of``).
    """

    __slots__ = ("batch_size", "max_tokens", "keys", "values", "multiple_of", "cost", "max_cost")

    def __init__(
        self,
        batch_size: int | None,
        max_tokens: int | None,
        schedule: Sequence[tuple[int, int]] | None,
        multiple_of: int,
        cost: Cost | None = None,
        max_cost: float | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        pairs = schedule or []
        self.keys = np.array([k for k, _ in pairs], dtype=np.int64)
        self.values = np.array([v for _, v in pairs], dtype=np.int64)
        self.multiple_of = multiple_of
        self.cost = cost
        self.max_cost = max_cost

    @property
    def budgeted(self) -> bool:
        """Whether sizes come from a budget (``max_tokens`` and/or ``max_cost``)."""
        return self.max_tokens is not None or self.max_cost is not None

    def over(self, lengths: np.ndarray) -> np.ndarray:
        """Mask of the lengths one sequence of which already passes a budget."""
        lengths = np.asarray(lengths, dtype=np.int64)
        out = np.zeros(lengths.shape, dtype=np.bool_)
        if self.max_tokens is not None:
            out |= lengths > self.max_tokens
        if self.max_cost is not None:
            out |= model_of(self.cost).of(lengths) > self.max_cost
        return out

    @property
    def schedule(self) -> list[tuple[int, int]] | None:
        """The step schedule as sorted (length, size) pairs, or None."""
        if self.keys.size == 0:
            return None
        return [(int(k), int(v)) for k, v in zip(self.keys, self.values, strict=True)]

    def config(self) -> dict[str, Any]:
        """JSON-safe settings (for fingerprints; cost settings only when set)."""
        out: dict[str, Any] = {
            "batch_size": self.batch_size,
            "max_tokens": self.max_tokens,
            "batch_sizes": self.schedule,
            "multiple_of": self.multiple_of,
        }
        if self.cost is not None:
            out["cost"] = self.cost.as_dict()
        if self.max_cost is not None:
            out["max_cost"] = self.max_cost
        return out

    def sizes_for(self, lengths: np.ndarray) -> np.ndarray:
        """Batch size for each length (lengths must already pass :meth:`check_lengths`)."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if self.max_cost is not None:
            # a batch of one length costs count × cost(length): the most that fit max_cost
            raw = unit_limit(model_of(self.cost), lengths, self.max_cost)
            if self.max_tokens is not None:
                raw = np.minimum(raw, self.max_tokens // np.maximum(lengths, 1))
        elif self.max_tokens is not None:
            raw = self.max_tokens // np.maximum(lengths, 1)
        elif self.keys.size:
            step = np.searchsorted(self.keys, lengths, side="right") - 1
            below = self.batch_size if self.batch_size is not None else 1
            raw = np.where(step >= 0, self.values[np.maximum(step, 0)], below)
        else:
            raw = np.full(lengths.shape, self.batch_size, dtype=np.int64)
        return round_size(raw, self.multiple_of)

    def check_lengths(self, sizes: np.ndarray, kept: np.ndarray | None = None) -> None:
        """Raise for sizes the rule cannot batch (0 with max_tokens, below the schedule).

        ``kept`` optionally masks the sizes that will be batched (others are skipped anyway).
        """
        if sizes.size == 0:
            return
        if self.max_tokens is None and self.max_cost is not None:
            if model_of(self.cost).per_sequence > 0:
                return  # every sequence has a cost, empty ones included
            bad = sizes == 0
            if kept is not None:
                bad &= kept
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(
                    "lengths must be positive with max_cost when the cost model has no "
                    f"per_sequence cost (an empty sequence costs nothing), got length 0 at index "
                    f"{i}; drop empty sequences first, or give the cost a per_sequence term"
                )
        elif self.max_tokens is not None:
            bad = sizes == 0
            if kept is not None:
                bad &= kept
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(
                    "lengths must be positive with max_tokens (a batch of empty sequences has no "
                    f"token cost to budget), got length 0 at index {i}; drop empty sequences "
                    "first, or pass batch_size or batch_sizes instead"
                )
        elif self.keys.size and self.batch_size is None:
            smallest = int(self.keys[0])
            bad = sizes < smallest
            if kept is not None:
                bad &= kept
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(
                    f"batch_sizes must cover every length: index {i} has length {int(sizes[i])}, "
                    f"below the smallest key {smallest}; add a key <= {int(sizes[i])} or pass "
                    "batch_size for the lengths below the schedule"
                )


def check_schedule(name: str, batch_sizes: Any) -> tuple[tuple[int, int], ...] | None:
    """Check ``batch_sizes`` (None, a dict {length: size} or its pairs): sorted pairs or None."""
    if batch_sizes is None:
        return None
    if isinstance(batch_sizes, (list, tuple)) and all(
        isinstance(p, (list, tuple)) and len(p) == 2 for p in batch_sizes
    ):
        batch_sizes = dict(batch_sizes)  # [(length, size), ...], as as_dict() writes it
    if not isinstance(batch_sizes, Mapping):
        raise TypeError(
            f"{name} must be a dict {{length: batch size}}, "
            f"got {type(batch_sizes).__name__} {batch_sizes!r:.60}"
        )
    if not batch_sizes:
        raise ValueError(f"{name} must hold at least one {{length: batch size}} entry, got {{}}")
    pairs = []
    for key, value in batch_sizes.items():
        if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer)):
            raise TypeError(f"{name} keys must be int lengths, got {type(key).__name__} {key!r}")
        if key < 0 or key > MAX_BUDGET:
            raise ValueError(f"{name} keys must be lengths in [0, 2**62], got {key}")
        size = positive(f"{name}[{int(key)}]", value)
        pairs.append((int(key), size))
    return tuple(sorted(pairs))


def size_rule(spec: ExactLength) -> SizeRule:
    """Check that ``spec`` (its settings checked each) sizes batches one of the three ways, and
    return its rule.

    ``batch_size`` may accompany ``batch_sizes``: it is then the size below the smallest key.
    ``max_cost`` is a budget like ``max_tokens`` and may join it (a batch then keeps both).
    """
    batch_size, max_tokens, schedule = spec.batch_size, spec.max_tokens, spec.batch_sizes
    max_cost = spec.max_cost
    given = [
        name
        for name, value in (
            ("batch_size", batch_size),
            ("max_tokens", max_tokens),
            ("batch_sizes", schedule),
        )
        if value is not None
    ]
    if not given and max_cost is None:
        raise ValueError(
            "pass exactly one of batch_size, max_tokens or batch_sizes to size the batches, got none"
        )
    if max_cost is not None and (batch_size is not None or schedule is not None):
        fixed = [g for g in given if g != "max_tokens"]
        raise ValueError(
            "pass exactly one of batch_size, max_tokens or batch_sizes (max_cost is a budget "
            f"like max_tokens and may join it), got max_cost and {' and '.join(fixed)}"
        )
    if max_tokens is not None and len(given) > 1:
        raise ValueError(
            "pass exactly one of batch_size, max_tokens or batch_sizes "
            f"(batch_size may accompany batch_sizes), got {' and '.join(given)}"
        )
    return SizeRule(batch_size, max_tokens, schedule, spec.multiple_of, spec.cost, max_cost)


# pooled leftovers × largest batch size up to which "merge" runs the least-padding DP (~0.1 s)
_DP_WORK = 100_000_000


def _exact_plan(
    lens: np.ndarray,
    sizes: np.ndarray,
    rule: SizeRule,
    max_length: int | None,
    leftovers: str,
    include_partial: bool,
    seed: int,
    epoch: int,
) -> BatchPlan:
    """Plan over checked inputs (shared by the function and the sampler)."""
    order, starts = length_order(lens, seed, epoch, _rng.GROUP_SHUFFLE)
    counts = np.diff(starts)
    run_len = np.zeros(counts.size, dtype=np.int64)
    nonempty = np.flatnonzero(counts)
    run_len[nonempty] = sizes[order[starts[nonempty]]]
    live = nonempty if max_length is None else nonempty[run_len[nonempty] <= max_length]
    over_budget = 0
    if rule.budgeted:  # runs one sequence of which passes the budget (oversize="drop")
        over = rule.over(run_len[live])
        over_budget = int(counts[live][over].sum())
        live = live[~over]
    run_size = np.zeros(counts.size, dtype=np.int64)
    run_size[live] = rule.sizes_for(run_len[live])
    kept, ends, rest, rest_run = K.exact_split(order, starts, run_size, _MODES[leftovers])
    indices = order[:kept]
    out = run_size[rest_run] == 0
    too_long = np.sort(rest[out])
    leftover, leftover_run = rest[~out], rest_run[~out]
    info: dict[str, Any] = {
        "too_long": int(too_long.size) - over_budget,
        "leftover_items": 0,
        "dropped_leftovers": 0,
        "merged_batches": 0,
        "over_budget": over_budget,
    }
    skipped = too_long
    if leftovers == "partial":
        full = run_size[live]
        info["leftover_items"] = int((counts[live] % full).sum())
    elif leftovers == "drop":
        info["leftover_items"] = info["dropped_leftovers"] = int(leftover.size)
        skipped = np.sort(np.concatenate([too_long, leftover]))
    else:
        info["leftover_items"] = int(leftover.size)
        if lens.ndim == 2:
            # runs come by (last field, first field); pooling by size (max over fields) first
            # pads both fields less (3.8% against 6.2% on the built-in en+es pairs)
            by_size = np.argsort(run_len[leftover_run], kind="stable")
            leftover, leftover_run = leftover[by_size], leftover_run[by_size]
        pool_sizes, pool_caps = run_len[leftover_run], run_size[leftover_run]
        if include_partial and leftover.size * int(pool_caps.max(initial=0)) <= _DP_WORK:
            # fewest batches, then least padding: cuts move to length changes
            merged_ends = K.least_padding_ends(pool_sizes, pool_caps)
        else:
            # greedy: every pooled batch but the last is full (what include_partial=False needs)
            merged_ends = K.capped_ends(pool_sizes, pool_caps)
        if not include_partial and merged_ends.size:
            lo = int(merged_ends[-2]) if merged_ends.size > 1 else 0
            tail_run = leftover_run[lo:]
            if leftover.size - lo < int(run_size[tail_run[np.argmax(run_len[tail_run])]]):
                dropped = leftover[lo:]
                info["dropped_leftovers"] = int(dropped.size)
                skipped = np.sort(np.concatenate([too_long, dropped]))
                leftover, merged_ends = leftover[:lo], merged_ends[:-1]
        info["merged_batches"] = int(merged_ends.size)
        ends = np.concatenate([ends, kept + merged_ends])
        order[kept : kept + leftover.size] = leftover  # the room the left-out items freed
        indices = order[: kept + leftover.size]
    offsets = np.empty(ends.size + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1:] = ends
    return BatchPlan(indices, offsets, skipped=skipped, info=info)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExactLength(Spec):
    """Exact-length batching: every batch holds one length (one length tuple), so no padding.

    Settings as :func:`plan_exact_length`. ``batch_sizes`` is kept as sorted ``(length, size)``
    pairs (a dict is accepted), and ``include_partial=False`` with ``leftovers="partial"`` is
    kept as ``leftovers="drop"``, what it means.

    >>> ExactLength(batch_size=2).plan([3, 5, 3, 3, 5, 2]).sizes.tolist()
    [1, 2, 1, 2]
    """

    batch_size: int | None = setting(positive_or_none, default=None)
    max_tokens: int | None = setting(budget_or_none, default=None)
    batch_sizes: Any = setting(check_schedule, default=None)
    max_length: int | None = setting(positive_or_none, default=None)
    include_partial: bool = setting(check_bool, default=True)
    leftovers: str = setting(partial(check_choice, choices=LEFTOVERS), default="partial")
    multiple_of: int = setting(positive, default=1)
    cost: Cost | None = setting(check_cost, default=None)
    max_cost: float | None = setting(check_max_cost, default=None)
    pad_to_multiple_of: int = setting(check_pad_multiple, default=1)
    oversize: str = setting(check_oversize, default="error")
    _rule: SizeRule = dataclasses.field(init=False, repr=False, compare=False)

    name = "exact_length"
    state_tag = "ExactLengthSampler"
    quiet = {**Spec.quiet, "oversize": "error"}
    about = {
        **Spec.about,
        "max_tokens": "a token budget: length L gets max_tokens // L sequences",
        "batch_sizes": "a batch size per length, {length: size}",
        "max_length": "a length cut-off: longer sequences are left out",
        "include_partial": "keep each length's last, incomplete batch",
        "leftovers": "each length's last, incomplete batch: 'partial', 'drop' or 'merge'",
    }

    def _settle(self) -> None:
        if not self.include_partial and self.leftovers == "partial":
            self._set(leftovers="drop")  # what it means
        self._set(_rule=size_rule(self))

    def stream_engine(self) -> R.StreamEngine:
        """The stream form: full batches of one length leave, leftovers wait."""
        R.check_streamable(
            self,
            (
                "batch_size",
                "max_tokens",
                "batch_sizes",
                "max_length",
                "include_partial",
                "leftovers",
                "multiple_of",
                "oversize",
            ),
        )
        return ExactStream(self)

    def bind(self, lengths: np.ndarray) -> ExactPlanner:
        return ExactPlanner(self, lengths)

    def as_dict(self) -> dict[str, Any]:
        return cost_settings(self, super().as_dict())


class ExactPlanner(Planner):
    """:class:`ExactLength` bound to lengths (lengths the sizing cannot batch refused once).

    Plans the padded widths (the lengths rounded up to ``pad_to_multiple_of``).
    """

    spec: ExactLength

    def __init__(self, spec: ExactLength, lengths: np.ndarray) -> None:
        super().__init__(spec, lengths)
        kept = None if spec.max_length is None else self.widths <= spec.max_length
        spec._rule.check_lengths(self.widths, kept)
        # a sequence the budget cannot hold even alone: refused or dropped, never a batch over it
        # (oversize="drop" leaves them out in the plan itself, run by run)
        if spec._rule.budgeted and spec.oversize == "error":
            over_budget(self, spec, kept)

    def plan(self, seed: int, epoch: int) -> BatchPlan:
        s = self.spec
        return self.tagged(_exact_plan(
            self.padded_lengths,
            self.widths,
            s._rule,
            s.max_length,
            s.leftovers,
            s.include_partial,
            seed,
            epoch,
        ))  # fmt: skip

    def costs(self, plan: BatchPlan) -> np.ndarray:
        """Cost of each batch: count × longest, or ``count × cost(longest)`` with a cost model
        (longest: the widest padded width)."""
        if self.spec.cost is None:
            return super().costs(plan)

        return padded_batch_costs(self.spec.cost, plan, self.widths)

    def config(self) -> dict[str, Any]:
        s = self.spec
        out = {
            **s._rule.config(),
            "max_length": s.max_length,
            "leftovers": s.leftovers,
            "include_partial": s.include_partial,
        }
        if s.pad_to_multiple_of != 1:
            out["pad_to_multiple_of"] = s.pad_to_multiple_of
        return out


# --------------------------------------------------------------------------- stream form


class ExactStream(R.GroupEngine):
    """ExactLength's stream form (see :mod:`padless.streams`)."""

    def __init__(self, spec: Any) -> None:
        super().__init__(spec)
        self.rule = spec._rule

    def admit(self, sizes: np.ndarray, where: Callable[[int], int]) -> np.ndarray | None:
        keep = None
        if (
            self.spec.max_length is not None
            and sizes.size
            and int(sizes.max()) > self.spec.max_length
        ):
            keep = sizes <= self.spec.max_length
        rule = self.rule
        cut = sizes if keep is None else np.where(keep, sizes, 0)  # past max_length: left out
        fits = R.within_budget(cut, rule.max_tokens, self.spec.oversize, where)
        if fits is not None:
            keep = fits if keep is None else keep & fits
        kept = sizes if keep is None else sizes[keep]
        bad = np.zeros(0, np.int64)
        why = ""
        if rule.max_tokens is not None:
            bad, why = np.flatnonzero(kept == 0), "is 0, which max_tokens cannot budget (no cost)"
        elif rule.keys.size and rule.batch_size is None:
            low = int(rule.keys[0])
            bad = np.flatnonzero(kept < low)
            why = f"is below the smallest batch_sizes key {low} and batch_size is None"
        if bad.size:
            i = int(bad[0]) if keep is None else int(np.flatnonzero(keep)[bad[0]])
            raise ValueError(f"the length of the item at stream position {where(i)} {why}")
        return keep

    def groups(self, buf: R.Buffer) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        keys, span = group_keys(buf.lens)
        order, starts = K.counting_order(keys, span)
        counts = np.diff(starts)
        nonempty = np.flatnonzero(counts)
        run_size = np.zeros(counts.size, np.int64)
        run_size[nonempty] = self.rule.sizes_for(buf.sizes[order[starts[nonempty]]])
        return order, starts, run_size

    def expired(self, lens: np.ndarray, rest: np.ndarray, runs: np.ndarray) -> R.Round:
        if rest.size == 0:
            return R.Round(rest, np.zeros(1, np.int64), rest, rest, rest)
        plan = self.spec.bind(lens[rest]).plan(0, 0)  # the spec's own leftovers rule
        z = np.zeros(0, np.int64)
        return R.Round(rest[plan.indices], plan.offsets, z, z, z, dropped=int(plan.skipped.size))
