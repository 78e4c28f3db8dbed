"""Compare batching strategies on one set of lengths: padding, batch shape, imbalance, plan time."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..core import _rng
from ..core._schedule import length_mixing, step_mean_lengths
from ..core.cost import as_cost, padded_batch_costs, real_work
from ..core.lengths import sizes_of
from ..core.plan import BatchPlan
from ..core.plan import BatchPlan as _Plan
from ..io import lengths_of
from ..planners import strategies
from ..planners.buckets import boundary_costs, bucket_boundaries, bucket_boundaries_2d
from ..planners.budget import TokenBudget
from ..planners.shapes import FixedShapes, shape_set
from ..planners.spec import spec_to_dict
from .sampler import PlanSampler, padded_costs, step_imbalance


@dataclass
class StrategyRow:
    """One strategy's figures on a corpus."""

    strategy: str
    setting: str
    batches: int
    mean_sentences: float
    padding_pct: float
    imbalance: float | None
    imbalance_balanced: float | None
    plan_ms: float
    note: str = ""
    spec: dict[str, Any] | None = None  # spec_to_dict of a padless strategy; None for baselines
    real_work: float | None = None  # share of the cost (the cost model's) that is real tokens
    length_trend: float | None = None  # corr(step index, step mean length), dealt order
    length_lag1: float | None = None  # lag-1 autocorrelation of the step mean length

    def as_dict(self) -> dict[str, Any]:
        """Return the row as a JSON-safe dict."""
        return asdict(self)


def length_summary(lengths: Any) -> dict[str, Any]:
    """Count, tokens and percentiles of sequence sizes (max over fields for 2-D lengths).

    >>> length_summary([1, 2, 3, 10])["max"]
    10
    """
    lens = lengths_of(lengths)
    sizes = sizes_of(lens)
    if sizes.size == 0:
        raise ValueError("lengths are empty: nothing to report")
    q = np.percentile(sizes, [50, 95, 99])
    return {
        "count": int(sizes.size),
        "fields": 1 if lens.ndim == 1 else int(lens.shape[1]),
        "tokens": int(lens.sum()),
        "min": int(sizes.min()),
        "median": float(q[0]),
        "mean": float(sizes.mean()),
        "p95": float(q[1]),
        "p99": float(q[2]),
        "max": int(sizes.max()),
    }


def warm_up() -> None:
    """Load (or compile) the kernels once so plan times measure planning, not compilation."""
    TokenBudget(max_tokens=8, multiple_of=2).plan(np.array([2, 1, 3])).stats([2, 1, 3])


def budget_sweep(lengths: Any, budgets: list[int]) -> list[dict[str, Any]]:
    """Token-budget figures at several ``max_tokens`` values.

    >>> [r["max_tokens"] for r in budget_sweep([3, 4, 5], [8, 16])]
    [8, 16]
    """
    lens = lengths_of(lengths)
    warm_up()
    out = []
    for budget in budgets:
        plan, ms = _timed(
            lambda b=budget: TokenBudget(max_tokens=b, oversize="skip").plan(lens)  # type: ignore[misc]
        )
        st = plan.stats(lens)
        out.append(
            {
                "max_tokens": budget,
                "batches": st.batches,
                "mean_sentences": st.mean_sentences,
                "padding_pct": 100.0 * st.padding_fraction,
                "skipped": int(plan.skipped.size),
                "plan_ms": ms,
            }
        )
    return out


GRID_METHODS = (
    ("padless 2-D DP (joint)", "joint"),
    ("NeMo/lhotse equal totals", "equal"),
    ("padless 1-D, max of fields", None),
)


def grid_padding(lengths: Any, grids: Any = ((8, 2), (30, 2))) -> list[dict[str, Any]]:
    """Padding per field of 2-D buckets on (N, 2) lengths: padless's 2-D boundaries
    (:func:`padless.bucket_boundaries_2d`, method "joint") beside NeMo's estimate (lhotse's
    equal-total rule on each field, method "equal"; NeMo's default is 30 × 2) and 1-D buckets on
    the max over fields (:func:`padless.bucket_boundaries` with ``k0 · k1`` buckets), for each
    ``(k0, k1)`` of ``grids``.

    A bucket's padding is its bound, count × its longest in each field (what batches padded to
    their bucket's longest cost; a plan's batches pad to their own longest, at most that), so
    the figures do not depend on a budget. ``padding_pct`` has one entry per field, ``total_pct``
    counts both fields' slots together.

    Cost: per grid, the three fits and one bucket pass each.

    >>> rows = grid_padding(np.array([[3, 1], [4, 9], [8, 2], [9, 8]]), [(2, 2)])
    >>> [(r["method"], r["buckets"], [round(p, 1) for p in r["padding_pct"]]) for r in rows]
    [('joint', 4, [0.0, 0.0]), ('equal', 1, [33.3, 44.4]), ('1d_max', 3, [17.2, 4.8])]
    """
    lens = lengths_of(lengths)
    if lens.ndim != 2 or lens.shape[1] != 2:
        raise ValueError(f"lengths must be (N, 2) for 2-D buckets, got shape {lens.shape}")
    real = lens.sum(axis=0).astype(np.int64)
    out = []
    for k0, k1 in grids:
        for label, method in GRID_METHODS:
            if method is None:
                cuts: Any = bucket_boundaries(lens, k0 * k1)
                count = int(cuts.size) + 1
            else:
                cuts = bucket_boundaries_2d(lens, (k0, k1), method=method)
                count = sum(int(s.size) + 1 for s in cuts[1])
                cuts = (cuts[0].tolist(), [s.tolist() for s in cuts[1]])
            slots = np.array(boundary_costs(lens, cuts), dtype=np.int64)
            pct = [
                float(100.0 * (1.0 - r / p)) if p else 0.0 for r, p in zip(real, slots, strict=True)
            ]
            total = float(100.0 * (1.0 - real.sum() / slots.sum())) if slots.sum() else 0.0
            out.append(
                {
                    "grid": [int(k0), int(k1)],
                    "method": method or "1d_max",
                    "label": label,
                    "buckets": count,
                    "padded_slots": slots.tolist(),
                    "padding_pct": pct,
                    "total_pct": total,
                }
            )
    return out


def _timed(fn: Callable[[], BatchPlan]) -> tuple[BatchPlan, float]:
    t0 = time.perf_counter()
    plan = fn()
    return plan, (time.perf_counter() - t0) * 1e3


def random_batches(n: int, batch_size: int, seed: int = 0) -> BatchPlan:
    """Fixed-size batches of a uniform random permutation (the no-thought baseline)."""
    order = _rng.rng(seed, 0, _rng.BATCH_ORDER).permutation(n).astype(np.int64)
    offsets = np.append(np.arange(0, n, batch_size, dtype=np.int64), n)
    return BatchPlan(order, offsets)


def group_by_length_batches(sizes: np.ndarray, batch_size: int, seed: int = 0) -> BatchPlan:
    """HF ``group_by_length`` (transformers' ``get_length_grouped_indices``): a random
    permutation cut into megabatches of ``m × batch_size`` (``m`` = 50, or fewer so that there
    are 4 megabatches, at least 1), each sorted long → short, the longest item swapped to the
    front of the first; batches of ``batch_size`` cut inside each megabatch."""
    n = sizes.shape[0]
    order = _rng.rng(seed, 0, _rng.BATCH_ORDER).permutation(n).astype(np.int64)
    return grouped_by_length(order, sizes, batch_size)


def grouped_by_length(order: np.ndarray, sizes: np.ndarray, batch_size: int) -> BatchPlan:
    """:func:`group_by_length_batches` of a given random permutation ``order``."""
    n = sizes.shape[0]
    mega = max(min(n // (4 * batch_size), 50), 1) * batch_size
    parts = []
    for lo in range(0, n, mega):
        chunk = order[lo : lo + mega]
        parts.append(chunk[np.argsort(-sizes[chunk], kind="stable")])
    if len(parts) > 1:  # the longest item first (HF: an out-of-memory error comes early)
        top = int(np.argmax([sizes[p[0]] for p in parts]))
        parts[0][0], parts[top][0] = parts[top][0], parts[0][0]
    walked = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    # batches are cut inside each megabatch
    offsets = [0]
    for lo in range(0, n, mega):
        hi = min(lo + mega, n)
        offsets.extend(range(lo + batch_size, hi, batch_size))
        offsets.append(hi)
    return BatchPlan(walked, np.unique(np.array(offsets, dtype=np.int64)))


def _row(
    name: str,
    setting: str,
    plan: BatchPlan,
    ms: float,
    lens: np.ndarray,
    world_size: int,
    spec: Any = None,
    cost: Any = None,
) -> StrategyRow:
    """Figures of one plan; with a padless ``spec`` the imbalance comes from its sampler.

    Baselines (no spec) cost ``count × cost(longest)`` per batch (padded tokens without a
    ``cost`` model); their length mixing is that of their own batch order (HF's megabatches
    for ``group_by_length``).
    """
    st = plan.stats(lens)
    imbalance_bal: float | None = None
    note = ""
    if spec is not None:
        shuffled = PlanSampler(lens, spec, world_size=world_size, balance=False).stats()
        imbalance = float(shuffled["imbalance"])
        # a spec whose plan orders its batches (a curriculum) refuses balanced steps, which
        # would reorder them: its row has no balanced figure
        if getattr(spec, "orders_batches", False):
            note = "balance not applied (its plan orders the batches); "
        else:
            balanced = PlanSampler(lens, spec, world_size=world_size, balance=True).stats()
            imbalance_bal = float(balanced["imbalance"])
        work, mixing = shuffled["real_work"], (shuffled["length_trend"], shuffled["length_lag1"])
    else:
        sizes = sizes_of(lens)
        costs = padded_costs(plan, sizes) if cost is None else padded_batch_costs(cost, plan, sizes)
        order = _rng.rng(0, 0, _rng.BATCH_ORDER).permutation(len(plan))
        imbalance = step_imbalance(costs[order], world_size)
        work = real_work(cost, plan, sizes)
        csum = np.concatenate([[0], np.cumsum(sizes[plan.indices])])
        tokens = csum[plan.offsets[1:]] - csum[plan.offsets[:-1]]
        mixing = length_mixing(step_mean_lengths(tokens, plan.sizes, world_size))
    return StrategyRow(
        strategy=name,
        setting=setting,
        batches=st.batches,
        mean_sentences=st.mean_sentences,
        padding_pct=100.0 * st.padding_fraction,
        imbalance=imbalance,
        imbalance_balanced=imbalance_bal,
        plan_ms=ms,
        note=note,
        spec=None if spec is None else spec_to_dict(spec),
        real_work=float(work),
        length_trend=float(mixing[0]),
        length_lag1=float(mixing[1]),
    )


# shared settings of the report -> the settings of a spec that replace them where given
# (a spec takes one of boundaries or num_buckets; one of max_tokens, batch_size or batch_sizes)
SHARED_GIVES_WAY: dict[str, tuple[str, ...]] = {
    "num_buckets": ("boundaries",),
    "max_tokens": ("batch_size", "batch_sizes"),
}


def report_specs(
    *,
    max_tokens: int,
    capacity: int,
    num_buckets: int,
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    cost: Any = None,
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """One spec per registered strategy, for the report: ``(specs, not_run)``.

    Each spec takes the report's shared settings it has a field for (``max_tokens``,
    ``capacity``, ``num_buckets``), then ``settings[name]`` on top; a shared setting that
    ``settings[name]`` replaces is left out (:data:`SHARED_GIVES_WAY`: ``boundaries`` replaces
    ``num_buckets``, ``batch_size`` or ``batch_sizes`` replace ``max_tokens``). A strategy that cannot be
    built from these (a required setting not given) is listed in ``not_run`` with the reason,
    unless the caller gave settings for it, which must then be valid.

    >>> specs, _ = report_specs(max_tokens=4096, capacity=512, num_buckets=8)
    >>> specs["packing"].capacity, specs["buckets"].num_buckets
    (512, 8)
    """
    shared = {"max_tokens": max_tokens, "capacity": capacity, "num_buckets": num_buckets}
    if cost is not None:
        shared["cost"] = cost  # a padless.Cost: every spec with a cost setting takes it
    settings = dict(settings or {})
    registry = strategies()
    unknown = sorted(set(settings) - set(registry))
    if unknown:
        raise ValueError(
            f"settings name unknown strategies {unknown}; known: {', '.join(registry)}"
        )
    specs: dict[str, Any] = {}
    not_run: list[dict[str, str]] = []
    for name, cls in registry.items():
        fields = [f for f in dataclasses.fields(cls) if f.init]
        own = settings.get(name, {})
        # a shared setting gives way to the settings of a strategy that replace it
        kwargs = {
            f.name: shared[f.name]
            for f in fields
            if f.name in shared and not set(SHARED_GIVES_WAY.get(f.name, ())) & set(own)
        }
        kwargs.update(own)
        required = [
            f.name
            for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        missing = [k for k in required if k not in kwargs]
        if missing and name not in settings:
            reason = f"needs {', '.join(missing)} (e.g. --set {name}.{missing[0]}=VALUE)"
            not_run.append({"strategy": name, "reason": reason})
            continue
        try:
            specs[name] = cls(**kwargs)
        except (TypeError, ValueError) as exc:
            if name in settings:
                raise type(exc)(f"{name}: {exc}") from exc
            not_run.append({"strategy": name, "reason": str(exc)})
    return specs, not_run


def _setting(spec: Any, shared: Mapping[str, Any]) -> str:
    """The settings of ``spec`` that the report chose or the user changed, as ``k=v, ...``."""
    out = []
    for f in dataclasses.fields(spec):
        if not f.init:
            continue
        value = spec.as_dict().get(f.name, f.default)  # unset cost settings are left out
        if f.name == "cost" and value == shared.get("cost"):
            continue  # the report's own cost model, named once
        if value != f.default or (f.name in shared and value is not None):
            out.append(f"{f.name}={value}")
    return ", ".join(out)


def compare_strategies(
    lengths: Any,
    *,
    max_tokens: int = 4096,
    batch_size: int = 64,
    world_size: int = 8,
    capacity: int | None = None,
    num_buckets: int = 8,
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    cost: Any = None,
) -> list[StrategyRow]:
    """Plan one epoch with every strategy and return one row of figures each.

    Rows: random fixed-size batches and HF ``group_by_length`` (``batch_size`` each), then one
    row per registered strategy (:func:`padless.strategies`; token budget, exact length, optimal
    buckets, packing today) built by :func:`report_specs` from ``max_tokens``, ``capacity``
    (default ``max_tokens``), ``num_buckets`` (at most the number of distinct lengths) and
    ``settings`` (``{"packing": {"max_per_row": 8}}``). A strategy whose plan is refused for
    these lengths (e.g. a sequence longer than ``capacity``) gets no row; see
    :func:`compare_report` for the reasons. Imbalance is measured at ``world_size`` with a
    shuffled batch order, and with ``balance=True`` for the padless strategies. With a
    ``cost`` model (:class:`padless.Cost`) every strategy plans, balances and is measured in
    its units; each row also gives the share of the cost that is real work and how its
    batch order mixes lengths (``length_trend``, ``length_lag1``; see
    :meth:`padless.PlanSampler.stats`).

    Cost: one plan per strategy, plus two sampler schedules per padless strategy.
    """
    return compare_report(
        lengths,
        max_tokens=max_tokens,
        batch_size=batch_size,
        world_size=world_size,
        capacity=capacity,
        num_buckets=num_buckets,
        settings=settings,
        cost=cost,
    )[0]


def compare_report(
    lengths: Any,
    *,
    max_tokens: int = 4096,
    batch_size: int = 64,
    world_size: int = 8,
    capacity: int | None = None,
    num_buckets: int = 8,
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    cost: Any = None,
) -> tuple[list[StrategyRow], list[dict[str, str]]]:
    """:func:`compare_strategies` plus the strategies that got no row and why.

    Cost: as :func:`compare_strategies`.
    """
    lens = lengths_of(lengths)
    sizes = sizes_of(lens)
    if sizes.size == 0:
        raise ValueError("lengths are empty: nothing to report")
    longest = int(sizes.max())
    if longest > max_tokens:
        raise ValueError(
            f"max_tokens must be at least the longest sequence ({longest}), got {max_tokens}"
        )
    capacity = max_tokens if capacity is None else capacity
    k = min(num_buckets, int(np.unique(sizes).size))
    if cost is not None:
        cost = as_cost(cost)
    specs, not_run = report_specs(
        max_tokens=max_tokens, capacity=capacity, num_buckets=k, settings=settings, cost=cost
    )
    shared: dict[str, Any] = {"max_tokens": max_tokens, "capacity": capacity, "num_buckets": k}
    shared["cost"] = None if cost is None else cost.as_dict()
    warm_up()
    rows: list[StrategyRow] = []
    plan: _Plan
    plan, ms = _timed(lambda: random_batches(sizes.size, batch_size))
    rows.append(_row("random", f"batch_size={batch_size}", plan, ms, lens, world_size, cost=cost))
    plan, ms = _timed(lambda: group_by_length_batches(sizes, batch_size))
    rows.append(
        _row("group_by_length", f"batch_size={batch_size}", plan, ms, lens, world_size, cost=cost)
    )
    for name, spec in specs.items():
        try:
            plan, ms = _timed(lambda s=spec: s.plan(lens))  # type: ignore[misc]
            row = _row(name, _setting(spec, shared), plan, ms, lens, world_size, spec)
        except ValueError as exc:
            not_run.append({"strategy": name, "reason": str(exc)})
            continue
        if lens.ndim == 2 and type(plan) is not _Plan:
            row.note += "(on max over fields) "  # packed rows count tokens, not fields
        rows.append(row)
    if "fixed_shapes" not in specs and "fixed_shapes" not in (settings or {}):
        # static shapes need their shapes: the k of the buckets, chosen by shape_set

        t0 = time.perf_counter()
        try:
            shapes = shape_set(lens, k, max_tokens=max_tokens)
            spec = FixedShapes(shapes=shapes)
            plan, ms = _timed(lambda: spec.plan(lens))
        except ValueError as exc:  # listed in not_run already; add why shape_set could not help
            for entry in not_run:
                if entry["strategy"] == "fixed_shapes":
                    entry["reason"] += f"; shape_set: {exc}"
        else:
            ms = (time.perf_counter() - t0) * 1e3
            setting = f"shape_set k={k}, max_tokens={max_tokens}"
            rows.append(_row("fixed_shapes", setting, plan, ms, lens, world_size, spec))
            not_run[:] = [e for e in not_run if e["strategy"] != "fixed_shapes"]
    best = min(rows, key=lambda r: r.padding_pct)
    for r in rows:
        if r.padding_pct <= best.padding_pct:
            r.note += "least padding" if r is best else f"as little padding as {best.strategy}"
        else:
            if r.padding_pct >= 100.0:  # no real token (a corpus of empty sequences)
                r.note += f"more padding than {best.strategy}"
            else:
                extra = (100.0 - best.padding_pct) / (100.0 - r.padding_pct) - 1.0
                r.note += f"{100 * extra:.1f}% more token slots than {best.strategy}"
    return rows, not_run
