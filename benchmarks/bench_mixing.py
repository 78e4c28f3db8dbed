"""Multi-corpus mixing: planning time for many corpora, and observed shares against p_k.

Run: .venv/bin/python benchmarks/bench_mixing.py [--corpora 30] [--size 1000000] [--batches 20000]
     [--repeat 3] [--seeds 5]

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
from padless.sampling.mixing import MixtureSampler
from padless.sampling.shortcuts import TokenBudgetSampler


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


def measure(corpora: list[np.ndarray], max_tokens: int, temperature: float) -> dict[str, Any]:
    """One round of every planning measurement (seconds, plus counts)."""
    out: dict[str, Any] = {}
    # the single-corpus cost: one epoch plan of each corpus, each sampler on its own; first with
    # memory recycled between corpora, then with every plan kept (as a mixture must keep them)
    singles = []
    for lens in corpora:
        s = TokenBudgetSampler(lens, max_tokens=max_tokens)
        t0 = time.perf_counter()
        s.epoch_plan(0)
        singles.append(time.perf_counter() - t0)
    out["one_each"] = sum(singles)
    out["one_median"] = float(np.median(singles))
    kept = [TokenBudgetSampler(lens, max_tokens=max_tokens) for lens in corpora]
    t0 = time.perf_counter()
    for s in kept:
        s.epoch_plan(0)
    out["one_each_kept"] = time.perf_counter() - t0
    del kept, s

    subs = {f"pair{k:02d}": TimedSampler(x, max_tokens=max_tokens) for k, x in enumerate(corpora)}
    reset_clock()
    t0 = time.perf_counter()
    mix = MixtureSampler(subs, temperature=temperature, seed=0)
    out["steps"] = len(mix)
    next(iter(mix))
    out["first"] = time.perf_counter() - t0
    out["first_plans_s"] = TimedSampler.clock["plan_s"]
    out["first_plans"] = TimedSampler.clock["plans"]

    reset_clock()
    t0 = time.perf_counter()
    sched = mix.epoch_schedule(0)
    out["sched"] = time.perf_counter() - t0
    out["sched_plans_s"] = TimedSampler.clock["plan_s"]
    out["sched_plans"] = TimedSampler.clock["plans"]
    cycles = [c["cycles"] for c in mix.stats()["corpora"].values()]
    out["max_cycles"], out["recycled"] = max(cycles), sum(c > 1 for c in cycles)

    # iteration speed over the epoch's first batches (plans are all in hand by now)
    reset_clock()
    out["count"] = count = min(20_000, len(sched))
    t0 = time.perf_counter()
    it = iter(mix)
    for _ in range(count):
        next(it)
    out["iter"] = time.perf_counter() - t0
    out["iter_plans_s"] = TimedSampler.clock["plan_s"]
    del mix, subs, sched, it

    big = TokenBudgetSampler(np.concatenate(corpora), max_tokens=max_tokens)
    t0 = time.perf_counter()
    big.epoch_plan(0)
    out["concat"] = time.perf_counter() - t0
    return out


def planning(num: int, size: int, max_tokens: int, temperature: float, repeat: int) -> None:
    base = builtin_corpus(["en", "es"])
    corpora = [resampled(base, size, seed) for seed in range(num)]
    TokenBudgetSampler(base[:100], max_tokens=max_tokens).epoch_plan(0)  # load cached kernels
    rounds = [measure(corpora, max_tokens, temperature) for _ in range(repeat)]
    m = {k: min(r[k] for r in rounds) for k in rounds[0]}  # best of the rounds, per figure
    print(
        f"## Planning: {num} corpora x {size:,} sentences (en/es lengths), max_tokens={max_tokens}"
    )
    print(
        f"T = {temperature}, num_batches = {m['steps']:,} (default: sum of the corpora's batch "
        f"counts); best of {repeat} rounds per figure"
    )
    print()
    print("| measure | seconds |")
    print("|---|---|")
    print(
        f"| one epoch plan of each corpus, memory recycled (sum of {num}) | {m['one_each']:.3f} |"
    )
    print(f"| one epoch plan of each corpus, all {num} plans kept | {m['one_each_kept']:.3f} |")
    print(f"| one corpus alone (median) | {m['one_median']:.4f} |")
    print(f"| one sampler over all {num * size:,} sentences concatenated | {m['concat']:.3f} |")
    print(
        f"| mixture: construct + len + first batch | {m['first']:.3f} "
        f"(in {m['first_plans']} sampler plans: {m['first_plans_s']:.3f}) |"
    )
    print(
        f"| — mixture overhead beyond those plans | "
        f"{min(r['first'] - r['first_plans_s'] for r in rounds):.3f} |"
    )
    print(
        f"| mixture: rest of the epoch schedule | {m['sched']:.3f} "
        f"(in {m['sched_plans']} next-epoch plans: {m['sched_plans_s']:.3f}) |"
    )
    print(
        f"| — mixture overhead beyond those plans | "
        f"{min(r['sched'] - r['sched_plans_s'] for r in rounds):.3f} |"
    )
    per_batch = min((r["iter"] - r["iter_plans_s"]) / r["count"] for r in rounds)
    print(
        f"| iterate {m['count']:,} batches | {m['iter']:.3f} ({per_batch * 1e6:.1f} us per batch) |"
    )
    print()
    print(
        f"corpora that started a second epoch of their own: {m['recycled']} "
        f"(most epochs started by one corpus: {m['max_cycles']})"
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
    ok = True
    for draw in ("stratified", "independent"):
        print(f"### draw={draw!r}, seed 0 (shares counted from the batches actually yielded)")
        print()
        print("| T | pair | p_k | observed share | abs diff | cycles | passes |")
        print("|---|---|---|---|---|---|---|")
        worst_all: dict[float, float] = {}
        for t in (1.0, 2.0, 5.0, math.inf):
            worst = 0.0
            for seed in range(seeds):
                subs = {k: TokenBudgetSampler(v, max_tokens=max_tokens) for k, v in pairs.items()}
                mix = MixtureSampler(
                    subs, temperature=t, num_batches=num_batches, seed=seed, draw=draw
                )
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
            if draw == "stratified":
                ok &= worst < 0.01
        print()
        print(f"largest abs(share - p_k) over seeds 0..{seeds - 1}, draw={draw!r}:")
        for t, w in worst_all.items():
            print(f"  T = {t:g}: {w:.5f}")
        print()
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
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    planning(args.corpora, args.size, args.max_tokens, args.temperature, args.repeat)
    ok = shares(args.batches, args.share_max_tokens, args.seeds)
    print("default (stratified) shares within 1% for every seed:", "yes" if ok else "NO")


if __name__ == "__main__":
    main()
