"""Compare batching strategies on one set of lengths: padding, batch shape, imbalance, plan time."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from . import _rng
from .lengths import lengths_of, sizes_of
from .plan import BatchPlan
from .sampler import step_imbalance


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
    from .planners.budget import plan_token_budget

    plan_token_budget(np.array([2, 1, 3]), max_tokens=8, multiple_of=2).stats([2, 1, 3])


def budget_sweep(lengths: Any, budgets: list[int]) -> list[dict[str, Any]]:
    """Token-budget figures at several ``max_tokens`` values.

    >>> [r["max_tokens"] for r in budget_sweep([3, 4, 5], [8, 16])]
    [8, 16]
    """
    from .planners.budget import plan_token_budget

    lens = lengths_of(lengths)
    warm_up()
    out = []
    for budget in budgets:
        plan, ms = _timed(
            lambda b=budget: plan_token_budget(lens, max_tokens=b, oversize="skip")  # type: ignore[misc]
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
    """HF ``group_by_length``: random megabatches of 50 × batch_size, each sorted long → short."""
    n = sizes.shape[0]
    order = _rng.rng(seed, 0, _rng.BATCH_ORDER).permutation(n).astype(np.int64)
    mega = 50 * batch_size
    parts = []
    for lo in range(0, n, mega):
        chunk = order[lo : lo + mega]
        parts.append(chunk[np.argsort(-sizes[chunk], kind="stable")])
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
    sampler: tuple[Any, dict[str, Any]] | None = None,
) -> StrategyRow:
    """Figures of one plan; ``sampler`` is (sampler class, its keyword arguments) or None."""
    from .sampler import padded_costs

    st = plan.stats(lens)
    if sampler is not None:
        cls, kwargs = sampler
        imbalance = float(cls(lens, balance=False, **kwargs).stats()["imbalance"])
        imbalance_bal: float | None = float(cls(lens, balance=True, **kwargs).stats()["imbalance"])
    else:
        costs = padded_costs(plan, sizes_of(lens))
        order = _rng.rng(0, 0, _rng.BATCH_ORDER).permutation(len(plan))
        imbalance = step_imbalance(costs[order], world_size)
        imbalance_bal = None
    return StrategyRow(
        strategy=name,
        setting=setting,
        batches=st.batches,
        mean_sentences=st.mean_sentences,
        padding_pct=100.0 * st.padding_fraction,
        imbalance=imbalance,
        imbalance_balanced=imbalance_bal,
        plan_ms=ms,
    )


def compare_strategies(
    lengths: Any,
    *,
    max_tokens: int = 4096,
    batch_size: int = 64,
    world_size: int = 8,
    capacity: int | None = None,
    num_buckets: int = 8,
) -> list[StrategyRow]:
    """Plan one epoch with every strategy and return one row of figures each.

    Strategies: random fixed-size batches, HF ``group_by_length``, token budget (fairseq order),
    exact length (``max_tokens // L`` per length, partial leftovers kept), optimal buckets
    (``num_buckets``, token budget inside each) and packing (rows of ``capacity`` tokens, default
    ``max_tokens``). Imbalance is measured at ``world_size`` with a shuffled batch order, and with
    ``balance=True`` for the padless samplers.

    Cost: one plan per strategy, plus two sampler schedules per padless strategy.
    """
    from .planners.buckets import BucketSampler, plan_buckets
    from .planners.budget import TokenBudgetSampler, plan_token_budget
    from .planners.exact import ExactLengthSampler, plan_exact_length
    from .planners.packing import PackingSampler, plan_packing

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
    warm_up()
    rows: list[StrategyRow] = []
    ws: dict[str, Any] = {"world_size": world_size}
    plan, ms = _timed(lambda: random_batches(sizes.size, batch_size))
    rows.append(_row("random", f"batch_size={batch_size}", plan, ms, lens, world_size))
    plan, ms = _timed(lambda: group_by_length_batches(sizes, batch_size))
    rows.append(_row("group_by_length", f"batch_size={batch_size}", plan, ms, lens, world_size))
    budget: dict[str, Any] = {"max_tokens": max_tokens}
    plan, ms = _timed(lambda: plan_token_budget(lens, **budget))
    bal: tuple[Any, dict[str, Any]] = (TokenBudgetSampler, {**budget, **ws})
    rows.append(_row("token_budget", f"max_tokens={max_tokens}", plan, ms, lens, world_size, bal))
    plan, ms = _timed(lambda: plan_exact_length(lens, **budget))
    bal = (ExactLengthSampler, {**budget, **ws})
    rows.append(_row("exact_length", f"max_tokens={max_tokens}", plan, ms, lens, world_size, bal))
    k = min(num_buckets, int(np.unique(sizes).size))
    plan, ms = _timed(lambda: plan_buckets(lens, num_buckets=k, **budget))
    bal = (BucketSampler, {"num_buckets": k, **budget, **ws})
    rows.append(_row("buckets", f"k={k}, max_tokens={max_tokens}", plan, ms, lens, world_size, bal))
    if longest <= capacity:
        pack_lens = sizes if lens.ndim == 2 else lens
        plan, ms = _timed(lambda: plan_packing(pack_lens, capacity=capacity))
        bal = (PackingSampler, {"capacity": capacity, **ws})
        row = _row("packing", f"capacity={capacity}", plan, ms, pack_lens, world_size, bal)
        if lens.ndim == 2:
            row.note = "(on max over fields) "
        rows.append(row)
    best = min(rows, key=lambda r: r.padding_pct)
    for r in rows:
        if r.padding_pct <= best.padding_pct:
            r.note += "least padding" if r is best else f"as little padding as {best.strategy}"
        else:
            extra = (100.0 - best.padding_pct) / max(100.0 - r.padding_pct, 1e-9) - 1.0
            r.note += f"{100 * extra:.1f}% more token slots than {best.strategy}"
    return rows
