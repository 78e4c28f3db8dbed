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


def step_imbalance(costs: np.ndarray, world_size: int) -> float:
    """Mean over steps of (max rank cost ÷ mean rank cost) for batches dealt in the given order.

    The last, incomplete step is completed with the first batches (padless's default tail).
    """
    b = costs.shape[0]
    if b == 0:
        return 1.0
    steps = -(-b // world_size)
    slots = np.arange(steps * world_size) % b
    table = costs[slots].reshape(steps, world_size).astype(np.float64)
    means = table.mean(axis=1)
    ok = means > 0
    return float((table.max(axis=1)[ok] / means[ok]).mean()) if ok.any() else 1.0


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
        plan, ms = _timed(lambda b=budget: plan_token_budget(lens, max_tokens=b, oversize="skip"))
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
    balanced: float | None,
    costs: np.ndarray | None = None,
) -> StrategyRow:
    from .sampler import padded_costs

    st = plan.stats(lens)
    if costs is None:
        costs = padded_costs(plan, sizes_of(lens))
    order = _rng.rng(0, 0, _rng.BATCH_ORDER).permutation(len(plan))
    return StrategyRow(
        strategy=name,
        setting=setting,
        batches=st.batches,
        mean_sentences=st.mean_sentences,
        padding_pct=100.0 * st.padding_fraction,
        imbalance=step_imbalance(costs[order], world_size),
        imbalance_balanced=balanced,
        plan_ms=ms,
    )


def compare_strategies(
    lengths: Any,
    *,
    max_tokens: int = 4096,
    batch_size: int = 64,
    world_size: int = 8,
    capacity: int | None = None,
) -> list[StrategyRow]:
    """Plan one epoch with every strategy and return one row of figures each.

    Cost: one plan per strategy (plus one balanced schedule per strategy with a sampler).
    """
    from .planners.budget import TokenBudgetSampler, plan_token_budget

    lens = lengths_of(lengths)
    sizes = sizes_of(lens)
    warm_up()
    rows: list[StrategyRow] = []
    plan, ms = _timed(lambda: random_batches(sizes.size, batch_size))
    rows.append(_row("random", f"batch_size={batch_size}", plan, ms, lens, world_size, None))
    plan, ms = _timed(lambda: group_by_length_batches(sizes, batch_size))
    rows.append(
        _row("group_by_length", f"batch_size={batch_size}", plan, ms, lens, world_size, None)
    )
    if int(sizes.max()) <= max_tokens:
        plan, ms = _timed(lambda: plan_token_budget(lens, max_tokens=max_tokens))
        bal = TokenBudgetSampler(lens, max_tokens=max_tokens, world_size=world_size, balance=True)
        rows.append(
            _row(
                "token_budget",
                f"max_tokens={max_tokens}",
                plan,
                ms,
                lens,
                world_size,
                bal.stats()["imbalance"],
            )
        )
    best = min(rows, key=lambda r: r.padding_pct)
    for r in rows:
        if r is best:
            r.note = "least padding"
        elif best.padding_pct > 0:
            r.note = f"{r.padding_pct / best.padding_pct:.0f}x the padding of {best.strategy}"
        else:
            r.note = f"{r.padding_pct:.1f} points more padding than {best.strategy}"
    return rows
