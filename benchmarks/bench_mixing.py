"""Multi-corpus mixing: planning time for many corpora, and observed shares against p_k.

Run: .venv/bin/python benchmarks/bench_mixing.py [--corpora 30] [--size 1000000] [--batches 20000]

Part 1 times a MixtureSampler over ``--corpora`` corpora of ``--size`` sentences (lengths resampled
from the built-in en/es corpus, token budget 4096) and splits the time into the corpora's own
planning (every sampler epoch the mixture touches, timed inside ``epoch_plan``) and the mixture's
overhead beyond it. Part 2 splits the built-in corpus into synthetic pairs of 100%, 10% and 1% of
it and compares each pair's observed share of an epoch's batches, counted from the batches
actually yielded, with p_k for T = 1, 2, 5 and inf.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np

from padless import builtin_corpus
from padless.mixing import MixtureSampler
from padless.planners.budget import TokenBudgetSampler


class TimedSampler(TokenBudgetSampler):
    """TokenBudgetSampler that adds the time spent in ``epoch_plan`` to a shared counter."""

    clock: dict[str, float] = {"plan_s": 0.0, "plans": 0}

    def epoch_plan(self, epoch: int) -> Any:
        t0 = time.perf_counter()
        cached = self._cache is not None and self._cache.epoch == epoch
        out = super().epoch_plan(epoch)
        self.clock["plan_s"] += time.perf_counter() - t0
        self.clock["plans"] += 0 if cached else 1
        return out


def resampled(base: np.ndarray, n: int, seed: int) -> np.ndarray:
    return base[np.random.default_rng(seed).integers(0, base.shape[0], n)]


def reset_clock() -> None:
    TimedSampler.clock["plan_s"] = 0.0
    TimedSampler.clock["plans"] = 0


def planning(num: int, size: int, max_tokens: int, temperature: float) -> None:
    base = builtin_corpus(["en", "es"])
    corpora = [resampled(base, size, seed) for seed in range(num)]
    TokenBudgetSampler(base[:100], max_tokens=max_tokens).epoch_plan(0)  # load cached kernels

    # the single-corpus cost: one epoch plan of each corpus, each sampler on its own
    singles = []
    for lens in corpora:
        s = TokenBudgetSampler(lens, max_tokens=max_tokens)
        t0 = time.perf_counter()
        s.epoch_plan(0)
        singles.append(time.perf_counter() - t0)
    one_each = sum(singles)

    subs = {f"pair{k:02d}": TimedSampler(x, max_tokens=max_tokens) for k, x in enumerate(corpora)}
    reset_clock()
    t0 = time.perf_counter()
    mix = MixtureSampler(subs, temperature=temperature, seed=0)
    steps = len(mix)
    first = next(iter(mix))
    t_first = time.perf_counter() - t0
    plan_first, plans_first = TimedSampler.clock["plan_s"], TimedSampler.clock["plans"]

    reset_clock()
    t0 = time.perf_counter()
    sched = mix.epoch_schedule(0)
    t_sched = time.perf_counter() - t0
    plan_sched, plans_sched = TimedSampler.clock["plan_s"], TimedSampler.clock["plans"]
    stats = mix.stats()
    cycles = [c["cycles"] for c in stats["corpora"].values()]

    # iteration speed over the first 20,000 batches (includes lazily planned second cycles)
    reset_clock()
    count = min(20_000, len(sched))
    t0 = time.perf_counter()
    it = iter(mix)
    for _ in range(count):
        next(it)
    t_iter = time.perf_counter() - t0
    plan_iter = TimedSampler.clock["plan_s"]

    concat = np.concatenate(corpora)
    big = TokenBudgetSampler(concat, max_tokens=max_tokens)
    t0 = time.perf_counter()
    big.epoch_plan(0)
    t_concat = time.perf_counter() - t0

    print(
        f"## Planning: {num} corpora x {size:,} sentences (en/es lengths), max_tokens={max_tokens}"
    )
    print(
        f"T = {temperature}, num_batches = {steps:,} (default: sum of the corpora's batch counts)"
    )
    print("first batch:", len(first), "sentences")
    print()
    print("| measure | seconds |")
    print("|---|---|")
    print(f"| one epoch plan of each corpus, alone (sum of {num}) | {one_each:.3f} |")
    print(f"| one corpus alone (median) | {np.median(singles):.4f} |")
    print(f"| one sampler over all {num * size:,} sentences concatenated | {t_concat:.3f} |")
    print(
        f"| mixture, construct + len + first batch | {t_first:.3f} "
        f"({plans_first} sampler plans: {plan_first:.3f}) |"
    )
    print(f"| — of which mixture overhead beyond those plans | {t_first - plan_first:.3f} |")
    print(
        f"| mixture, full epoch schedule after that | {t_sched:.3f} "
        f"({plans_sched} more sampler plans: {plan_sched:.3f}) |"
    )
    print(f"| — of which mixture overhead beyond those plans | {t_sched - plan_sched:.3f} |")
    print(
        f"| iterate {count:,} batches (incl. {plan_iter:.3f} s of sampler plans) | {t_iter:.3f} "
        f"({(t_iter - plan_iter) / count * 1e6:.1f} us/batch beyond planning) |"
    )
    print()
    print(
        f"cycles per corpus this epoch: min {min(cycles)}, max {max(cycles)}; "
        f"corpora needing a second epoch of their own: {sum(c > 1 for c in cycles)}"
    )
    print()


def shares(num_batches: int, max_tokens: int, seeds: int) -> bool:
    base = builtin_corpus(["en", "es"])
    n = base.shape[0]
    perm = np.random.default_rng(0).permutation(n)
    pairs = {
        "100%": base,
        "10%": base[np.sort(perm[: n // 10])],
        "1%": base[np.sort(perm[n // 10 : n // 10 + n // 100])],
    }
    print(f"## Shares: built-in corpus split into pairs of {', '.join(pairs)} of its {n:,} verses")
    sizes = ", ".join(f"{k}: {v.shape[0]:,}" for k, v in pairs.items())
    print(f"sizes {sizes}; max_tokens={max_tokens}; epoch of {num_batches:,} batches")
    print()
    print("| T | pair | p_k | observed share (seed 0, counted from yielded batches) | |diff| |")
    print("| cycles | passes |")
    print("|---|---|---|---|---|---|---|")
    ok = True
    worst_all: dict[float, float] = {}
    for t in (1.0, 2.0, 5.0, math.inf):
        worst = 0.0
        for seed in range(seeds):
            subs = {k: TokenBudgetSampler(v, max_tokens=max_tokens) for k, v in pairs.items()}
            mix = MixtureSampler(subs, temperature=t, num_batches=num_batches, seed=seed)
            if seed == 0:
                seen = np.zeros(len(pairs), dtype=np.int64)
                for batch in mix:
                    corpus, _ = mix.corpus_of(batch[:1])
                    seen[corpus[0]] += 1
                observed = seen / seen.sum()
                stats = mix.stats()["corpora"]
                for k, name in enumerate(pairs):
                    diff = abs(observed[k] - mix.p[k])
                    print(
                        f"| {t:g} | {name} | {mix.p[k]:.4f} | {observed[k]:.4f} | {diff:.4f} "
                        f"| {stats[name]['cycles']} | {stats[name]['passes']:.2f} |"
                    )
            counts = np.array(list(mix.corpus_counts().values()))
            worst = max(worst, float(np.abs(counts / counts.sum() - mix.p).max()))
        worst_all[t] = worst
        ok &= worst < 0.01
    print()
    print(f"largest |share - p_k| over seeds 0..{seeds - 1} (target < 0.01):")
    for t, w in worst_all.items():
        print(f"  T = {t:g}: {w:.4f}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpora", type=int, default=30)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--share-max-tokens", type=int, default=1024)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    planning(args.corpora, args.size, args.max_tokens, args.temperature)
    ok = shares(args.batches, args.share_max_tokens, args.seeds)
    print("\nshares within 1%:", "yes" if ok else "NO")


if __name__ == "__main__":
    main()
