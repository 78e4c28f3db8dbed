"""Static shapes: padding of shape_set's shapes against k, against the alternatives; planning time.

For each corpus and k, every static plan is a ``FixedShapes`` plan (dummy rows counted as
padding) over one shape set:

- ``shape_set``: padless's static-cost DP (this issue);
- ``DP bounds``: padless's bucket boundaries (``bucket_boundaries``, free-shape cost) reused as
  static shapes;
- ``quantile``: boundaries at the i/k quantiles of the lengths (equal counts) as static shapes;

and, not static, ``Buckets(num_buckets=k, max_tokens)`` (DP buckets, each batch padded to its own
longest: free batch shapes) and the token budget (``TokenBudget(max_tokens)``, any shape).
Padding is padded slots minus real tokens. Times are the best of ``--repeat`` runs, in the same
process, as ratios to the token-budget plan of the same lengths.

Run: .venv/bin/python benchmarks/bench_shapes.py [--n 1000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import best_of, lognormal_lengths

KS = (2, 4, 8, 16)
MAX_TOKENS = 4096


def long_tail_lengths(n: int, seed: int = 0) -> np.ndarray:
    """lognormal(ln 200, 1.0) in [1, 4096]: about 4,000 distinct lengths, a hard case for the DP."""
    rs = np.random.default_rng(seed)
    raw = rs.lognormal(mean=np.log(200.0), sigma=1.0, size=n)
    return np.clip(np.round(raw), 1, MAX_TOKENS).astype(np.int64)


def shapes_from_cuts(lengths: np.ndarray, cuts: np.ndarray) -> list[tuple[int, int]]:
    """Static shapes whose lengths are the cut points plus the longest length."""
    from padless.planners.exact import round_size

    ends = sorted({*(int(c) for c in cuts if c > 0), int(lengths.max())})
    return [(int(round_size(np.array(MAX_TOKENS // v), 1)), v) for v in ends]


def corpus(name: str, lengths: np.ndarray, repeat: int) -> None:
    import padless
    from padless.planners.buckets import bucket_boundaries
    from padless.planners.shapes import FixedShapes, shape_set

    real = int(lengths.sum())
    distinct = int(np.unique(lengths).size)

    def padding(plan) -> int:
        return plan.stats(lengths).padded_slots - real

    budget = padless.TokenBudget(max_tokens=MAX_TOKENS)
    t_budget = best_of(lambda: budget.plan(lengths), repeat)
    pad_budget = padding(budget.plan(lengths))
    print(
        f"\n### {name}: N = {lengths.size:,}, {distinct:,} distinct lengths, "
        f"{real:,} tokens, max_tokens {MAX_TOKENS}\n"
    )
    print(
        f"Token budget, no static shapes: padding {pad_budget:,} "
        f"({100 * pad_budget / (real + pad_budget):.2f}%), plan {t_budget * 1e3:.1f} ms\n"
    )
    print(
        "| k | shape_set | DP bounds | quantile | Buckets (free shapes) | shape_set ÷ Buckets "
        "| shape_set ÷ quantile | shape_set time | FixedShapes plan |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for k in KS:
        t_set = best_of(lambda k=k: shape_set(lengths, k, max_tokens=MAX_TOKENS), repeat)
        shapes = shape_set(lengths, k, max_tokens=MAX_TOKENS)
        spec = FixedShapes(shapes=shapes)
        t_plan = best_of(lambda spec=spec: spec.plan(lengths), repeat)
        ours = padding(spec.plan(lengths))
        dp_shapes = shapes_from_cuts(lengths, bucket_boundaries(lengths, k))
        dp_static = padding(FixedShapes(shapes=dp_shapes).plan(lengths))
        q_shapes = shapes_from_cuts(lengths, bucket_boundaries(lengths, k, method="quantile"))
        quant = padding(FixedShapes(shapes=q_shapes).plan(lengths))
        free = padding(padless.Buckets(num_buckets=k, max_tokens=MAX_TOKENS).plan(lengths))

        def pct(p: int) -> str:
            return f"{p:,} ({100 * p / (real + p):.2f}%)"

        print(
            f"| {k} ({len(shapes)} used) | {pct(ours)} | {pct(dp_static)} | {pct(quant)} "
            f"| {pct(free)} | **{ours / free:.3f}** | {ours / quant:.3f} "
            f"| {t_set * 1e3:.1f} ms = {t_set / t_budget:.2f}x budget "
            f"| {t_plan * 1e3:.1f} ms = {t_plan / t_budget:.2f}x budget |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    t0 = time.perf_counter()
    import padless
    from padless.planners.shapes import FixedShapes, shape_set

    warm = np.array([3, 1, 2, 5, 5])
    FixedShapes(shapes=shape_set(warm, 2, max_tokens=16)).plan(warm).stats(warm)
    padless.TokenBudget(max_tokens=16).plan(warm)
    print(f"import + kernel load/compile: {time.perf_counter() - t0:.2f} s (not in the figures)")
    corpus("built-in corpus (en)", padless.builtin_corpus(), args.repeat)
    corpus("lognormal (benchmarks/_common.py)", lognormal_lengths(args.n), args.repeat)
    corpus("long tail: lognormal(ln 200, 1.0) in [1, 4096]", long_tail_lengths(args.n), args.repeat)


if __name__ == "__main__":
    main()
