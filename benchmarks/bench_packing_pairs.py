"""Vector packing for encoder–decoder models: ``Packing(capacity=(C_src, C_tgt))``.

Rows against the per-field lower bound ``max_f ceil(Σ_i l_if / C_f)`` on the built-in en–es
corpus (``padless.builtin_corpus(["en", "es"])``) at capacities 512, 1024 and 2048, next to
packing under max over fields (``Packing(capacity=C)``: both fields in rows of C, each pair at
its longer field). Speed: planning N synthetic pairs (sources lognormal, median 23, σ 0.55;
targets the source times lognormal(ln 1.1, 0.15); both clipped to [1, 1024]) as a ratio to
``np.sort`` of the same N source lengths, timed in the same process (best of --repeat, the sort
before and after the planner).

Run: .venv/bin/python benchmarks/bench_packing_pairs.py [--n 1000000] [--capacity 1024] [--repeat 5]
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import best_of, lognormal_lengths
from bench_packing import machine


def lower_bound(lengths: np.ndarray, caps: tuple[int, int]) -> int:
    """The fewest rows any packing needs: each field's tokens over its capacity, rounded up."""
    return max(-(-int(lengths[:, f].sum()) // caps[f]) for f in range(2))


def synthetic_pairs(n: int, seed: int = 0) -> np.ndarray:
    """(n, 2) source and target lengths of a translation-like corpus."""
    src = lognormal_lengths(n, seed)
    ratio = np.random.default_rng(seed + 1).lognormal(np.log(1.1), 0.15, n)
    tgt = np.clip(np.round(src * ratio), 1, 1024).astype(np.int64)
    return np.stack([src, tgt], axis=1)


def gap(rows: int, bound: int) -> str:
    return f"{rows / bound - 1:+.2%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--capacity", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import padless

    print(f"machine: {machine()}; numpy {np.__version__}")
    print()
    pairs = padless.builtin_corpus(["en", "es"])
    totals = pairs.sum(axis=0).tolist()
    print(
        f"## Rows on the built-in en–es corpus ({pairs.shape[0]} pairs, {totals[0]} en and "
        f"{totals[1]} es tokens)"
    )
    print()
    print(
        "| capacity | lower bound rows | vector BFD rows | gap | en / es efficiency "
        "| max-over-fields rows | gap |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    verdicts = []
    for cap in (512, 1024, 2048):
        caps = (cap, cap)
        bound = lower_bound(pairs, caps)
        plan = padless.Packing(capacity=caps).plan(pairs)
        scalar = padless.Packing(capacity=cap).plan(pairs)
        eff = " / ".join(f"{e:.2%}" for e in plan.info["field_efficiency"])
        print(
            f"| {cap} | {bound} | {plan.num_rows} | {gap(plan.num_rows, bound)} | {eff} "
            f"| {scalar.num_rows} | {gap(scalar.num_rows, bound)} |"
        )
        verdicts.append(plan.num_rows <= bound * 1.005)
    print()
    verdict = "PASS" if all(verdicts) else "FAIL"
    print(f"target (vector BFD rows within 0.5% of the lower bound at every capacity): {verdict}")
    print()

    cap = args.capacity
    caps = (cap, cap)
    x = synthetic_pairs(args.n)
    src = np.ascontiguousarray(x[:, 0])
    vector = padless.Packing(capacity=caps)
    scalar = padless.Packing(capacity=cap)
    vector.plan(x[:1000])  # load the compiled kernels
    t_sort = best_of(lambda: np.sort(src), args.repeat)
    t_vec = best_of(lambda: vector.plan(x), args.repeat)
    t_max = best_of(lambda: scalar.plan(x), args.repeat)
    t_sort = min(t_sort, best_of(lambda: np.sort(src), args.repeat))
    plan, plain = vector.plan(x), scalar.plan(x)
    bound = lower_bound(x, caps)
    print(
        f"## Speed: {args.n:,} synthetic pairs (mean {x[:, 0].mean():.1f} / "
        f"{x[:, 1].mean():.1f} tokens), capacity {caps}, best of {args.repeat}"
    )
    print()
    print("| what | seconds | ÷ np.sort | rows | gap to the lower bound |")
    print("|---|---:|---:|---:|---:|")
    print(f"| np.sort of the {args.n:,} source lengths | {t_sort:.3f} | 1.00 | | |")
    print(
        f"| Packing(capacity={caps}).plan | {t_vec:.3f} | {t_vec / t_sort:.2f} "
        f"| {plan.num_rows} | {gap(plan.num_rows, bound)} |"
    )
    print(
        f"| Packing(capacity={cap}).plan (max over fields) | {t_max:.3f} | {t_max / t_sort:.2f} "
        f"| {plain.num_rows} | {gap(plain.num_rows, bound)} |"
    )
    print()
    print(f"lower bound: {bound} rows")


if __name__ == "__main__":
    main()
