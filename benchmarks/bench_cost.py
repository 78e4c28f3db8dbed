"""Cost models (issue 16): FLOP balance across ranks, budgets in FLOPs, length mixing.

Run: .venv/bin/python benchmarks/bench_cost.py [--web 300000] [--sft 400000] [--seeds 3]
     [--repeat 5]

A 7B-like cost model (``Cost.transformer(4096, 32, d_ff=1.5·11008, vocab=32000)``, causal: about
4e10 training FLOPs per token plus 786k·l² per sequence) on two synthetic corpora:

- web-like: lognormal lengths, median 600 tokens, sigma 1.3 (a long tail), in [16, 200k];
- SFT-like: lognormal, median 350, sigma 0.9, in [8, 8192].

1. Packing at 8k and 32k (``oversize="split"``), 8 ranks: the mean step FLOP imbalance (slowest
   rank ÷ mean rank, averaged over steps) when rows are dealt at random, when balanced by
   tokens (``balance=True`` without a cost model: what padless did before), and when balanced by
   FLOPs (``balance=True, cost=...``). Goal: <= 1.01 at 32k.
2. Token-budget batches: ``max_tokens`` against ``max_cost`` (FLOPs) tuned to the same mean
   batch cost: the spread of per-batch FLOPs (max ÷ median). Goal <= 1.1.
3. Length mixing at 1 and 8 ranks: correlation of the step index with the step's mean length,
   and its lag-1 autocorrelation, for padless's shuffled and balanced orders and for HF's
   megabatch order (``transformers.trainer_pt_utils.get_length_grouped_indices``; a step is
   ``ranks`` consecutive batches, as accelerate shards them).
4. Planning time with the cost budgets, as ratios to the token-only plans timed in the same
   process (best of ``--repeat``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import best_of  # noqa: E402

import padless  # noqa: E402
from padless import Cost, Packing, PlanSampler, TokenBudget  # noqa: E402
from padless.core._schedule import length_mixing, step_imbalance, step_mean_lengths  # noqa: E402
from padless.core.cost import packed_batch_costs, padded_batch_costs  # noqa: E402

SEVEN_B = Cost.transformer(4096, 32, d_ff=int(1.5 * 11008), vocab=32000)
WORLD = 8


def web_like(n: int, seed: int = 0) -> np.ndarray:
    raw = np.random.default_rng(seed).lognormal(np.log(600.0), 1.3, n)
    return np.clip(np.round(raw), 16, 200_000).astype(np.int64)


def sft_like(n: int, seed: int = 0) -> np.ndarray:
    raw = np.random.default_rng(seed).lognormal(np.log(350.0), 0.9, n)
    return np.clip(np.round(raw), 8, 8192).astype(np.int64)


def packing_imbalance(lengths: np.ndarray, capacity: int, seeds: int) -> dict[str, float]:
    out = {"random": 0.0, "by_tokens": 0.0, "by_flops": 0.0}
    for seed in range(seeds):
        spec = Packing(capacity=capacity, oversize="split", cost=SEVEN_B)
        plain = PlanSampler(lengths, spec, world_size=WORLD, seed=seed)
        st = plain.stats()
        out["random"] += st["imbalance"]
        out["by_flops"] += PlanSampler(
            lengths, spec, world_size=WORLD, seed=seed, balance=True
        ).stats()["imbalance"]
        # balanced by tokens (no cost model), measured in FLOPs
        tokens = PlanSampler(
            lengths, Packing(capacity=capacity, oversize="split"), world_size=WORLD, seed=seed,
            balance=True,
        )  # fmt: skip
        plan, order = tokens.epoch_plan(0)
        flops = packed_batch_costs(SEVEN_B, plan)
        out["by_tokens"] += step_imbalance(flops[order], WORLD, tokens.stats()["steps"])
        out.setdefault("rows", len(plan))
        out.setdefault("efficiency", plan.efficiency)
        out.setdefault("real_work", st["real_work"])
        out.setdefault("attention_share", attention_share(plan.piece_lengths))
    for k in ("random", "by_tokens", "by_flops"):
        out[k] /= seeds
    return out


def attention_share(lengths: np.ndarray) -> float:
    """Share of the real FLOPs spent in attention (the quadratic term)."""
    lf = lengths.astype(np.float64)
    return float((SEVEN_B.quadratic * lf * lf).sum() / SEVEN_B.of(lengths).sum())


def spread(costs: np.ndarray) -> float:
    return float(costs.max() / np.median(costs))


def budget_spread(lengths: np.ndarray, max_tokens: int) -> dict[str, float]:
    by_tokens = TokenBudget(max_tokens=max_tokens).plan(lengths)
    t_costs = padded_batch_costs(SEVEN_B, by_tokens, lengths)
    target = float(t_costs.mean())
    lo, hi = target * 0.5, target * 2.0  # max_cost with the same mean batch cost, by bisection
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        plan = TokenBudget(cost=SEVEN_B, max_cost=mid, oversize="drop").plan(lengths)
        if padded_batch_costs(SEVEN_B, plan, lengths).mean() < target:
            lo = mid
        else:
            hi = mid
    plan = TokenBudget(cost=SEVEN_B, max_cost=hi, oversize="drop").plan(lengths)
    c_costs = padded_batch_costs(SEVEN_B, plan, lengths)
    return {
        "max_tokens": max_tokens,
        "max_cost": hi,
        "tokens_batches": len(by_tokens),
        "cost_batches": len(plan),
        "tokens_mean": target,
        "cost_mean": float(c_costs.mean()),
        "tokens_spread": spread(t_costs),
        "cost_spread": spread(c_costs),
        "tokens_spread_p99": float(np.percentile(t_costs, 99) / np.median(t_costs)),
        "cost_spread_p99": float(np.percentile(c_costs, 99) / np.median(c_costs)),
        "cost_dropped": int(plan.skipped.size),
    }


def hf_mixing(
    lengths: np.ndarray, batch_size: int, world: int, seed: int = 0
) -> tuple[float, float]:
    import torch
    from transformers.trainer_pt_utils import get_length_grouped_indices

    gen = torch.Generator().manual_seed(seed)
    order = np.asarray(get_length_grouped_indices(lengths.tolist(), batch_size, generator=gen))
    n = order.size // batch_size * batch_size
    batches = lengths[order[:n]].reshape(-1, batch_size)
    tokens, counts = batches.sum(axis=1), np.full(batches.shape[0], batch_size)
    return length_mixing(step_mean_lengths(tokens, counts, world))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--web", type=int, default=300_000)
    ap.add_argument("--sft", type=int, default=400_000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    corpora = {"web": web_like(args.web), "sft": sft_like(args.sft)}
    print(f"cost model: {SEVEN_B.as_dict()}")
    for name, lens in corpora.items():
        print(
            f"{name}: {lens.size:,} sequences, {int(lens.sum()):,} tokens, median "
            f"{int(np.median(lens))}, mean {lens.mean():.0f}, p99 {int(np.percentile(lens, 99))}, "
            f"max {int(lens.max())}"
        )

    print(
        f"\n1. packed rows dealt to {WORLD} ranks: mean step FLOP imbalance (mean of {args.seeds} seeds)"
    )
    print(
        "| corpus | capacity | rows | efficiency | attention share | random | balance by tokens | balance by FLOPs |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, lens in corpora.items():
        for capacity in (8192, 32768):
            r = packing_imbalance(lens, capacity, args.seeds)
            print(
                f"| {name} | {capacity} | {int(r['rows']):,} | {100 * r['efficiency']:.2f}% | "
                f"{100 * r['attention_share']:.1f}% | {r['random']:.4f} | {r['by_tokens']:.4f} | "
                f"**{r['by_flops']:.4f}** |"
            )

    print("\n2. token-budget batches, per-batch FLOPs: max_tokens vs max_cost at the same mean")
    print(
        "| corpus | max_tokens | batches | spread max/median | p99/median | max_cost (FLOPs) | batches | spread max/median | p99/median |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    cases = [("sft", corpora["sft"], 32768), ("web ≤32k", np.minimum(corpora["web"], 32768), 65536)]
    for name, lens, budget in cases:
        r = budget_spread(lens, budget)
        print(
            f"| {name} | {budget} | {r['tokens_batches']:,} | {r['tokens_spread']:.3f} | "
            f"{r['tokens_spread_p99']:.3f} | {r['max_cost']:.4g} | {r['cost_batches']:,} | "
            f"**{r['cost_spread']:.3f}** | {r['cost_spread_p99']:.3f} |"
        )
        assert r["cost_dropped"] == 0

    print(
        "\n3. length mixing (trend = corr(step index, step mean length); lag1 = its lag-1 autocorrelation)"
    )
    print("| corpus | ranks | order | steps | trend | lag1 |")
    print("|---|---:|---|---:|---:|---:|")
    for name, lens in corpora.items():
        capped = np.minimum(lens, 32768)
        for world in (1, WORLD):
            orders = [("padless token budget 64k, shuffled", False)]
            if world > 1:
                orders.append(("padless token budget 64k, balance=True", True))
            for label, balance in orders:
                spec = TokenBudget(max_tokens=65536, cost=SEVEN_B)
                st = PlanSampler(capped, spec, world_size=world, balance=balance).stats()
                print(
                    f"| {name} | {world} | {label} | {st['steps']:,} | {st['length_trend']:+.3f} "
                    f"| {st['length_lag1']:+.3f} |"
                )
            if world > 1:
                spec = Packing(capacity=32768, oversize="split", cost=SEVEN_B)
                st = PlanSampler(lens, spec, world_size=world, balance=True).stats()
                print(
                    f"| {name} | {world} | padless packing 32k, balance=True | {st['steps']:,} | "
                    f"{st['length_trend']:+.3f} | {st['length_lag1']:+.3f} |"
                )
            for bs in (8, 32):
                trend, lag1 = hf_mixing(capped, bs, world)
                steps = capped.size // bs // world
                print(
                    f"| {name} | {world} | HF get_length_grouped_indices, batch_size={bs} "
                    f"(reference) | {steps:,} | {trend:+.3f} | {lag1:+.3f} |"
                )

    print(
        f"\n4. planning time, best of {args.repeat} (ratio to the token-only plan in this process)"
    )
    sft = corpora["sft"]
    padless.plan_token_budget(sft[:100], max_tokens=32768, cost=SEVEN_B, max_cost=1e15)  # compile
    t_tok = best_of(lambda: TokenBudget(max_tokens=32768).plan(sft), args.repeat)
    t_cost = best_of(
        lambda: TokenBudget(max_tokens=32768, cost=SEVEN_B, max_cost=1.4e15).plan(sft), args.repeat
    )
    print(
        f"token budget, {sft.size:,} SFT lengths: max_tokens {1e3 * t_tok:.1f} ms; + max_cost "
        f"{1e3 * t_cost:.1f} ms ({t_cost / t_tok:.2f}x)"
    )
    row = SEVEN_B.packed([8192], capacity=8192)
    Packing(capacity=8192, cost=SEVEN_B, max_row_cost=row).plan(sft[:100])  # compile
    t_pack = best_of(lambda: Packing(capacity=8192).plan(sft), args.repeat)
    t_cap = best_of(
        lambda: Packing(capacity=8192, cost=SEVEN_B, max_row_cost=row).plan(sft), args.repeat
    )
    print(
        f"packing at 8k: plain {1e3 * t_pack:.1f} ms; max_row_cost (a full row's cost) "
        f"{1e3 * t_cap:.1f} ms ({t_cap / t_pack:.2f}x)"
    )
    tight = SEVEN_B.linear * 8192 + float(SEVEN_B.extra([4096])[0])
    t_tight = best_of(
        lambda: Packing(capacity=8192, cost=SEVEN_B, max_row_cost=tight, oversize="drop").plan(sft),
        args.repeat,
    )
    p = Packing(capacity=8192, cost=SEVEN_B, max_row_cost=tight, oversize="drop").plan(sft)
    print(
        f"packing at 8k, max_row_cost = a row holding one 4096-token sequence: {1e3 * t_tight:.1f} ms "
        f"({t_tight / t_pack:.2f}x), efficiency {100 * p.efficiency:.2f}%, dropped {p.skipped.size:,}"
    )
    stats_t = best_of(
        lambda: PlanSampler(
            sft, Packing(capacity=8192, cost=SEVEN_B), world_size=8, balance=True
        ).stats(),
        args.repeat,
    )
    stats_0 = best_of(
        lambda: PlanSampler(sft, Packing(capacity=8192), world_size=8, balance=True).stats(),
        args.repeat,
    )
    print(
        f"sampler + stats, packing 8k balanced: by tokens {1e3 * stats_0:.1f} ms, by FLOPs "
        f"{1e3 * stats_t:.1f} ms ({stats_t / stats_0:.2f}x)"
    )


if __name__ == "__main__":
    main()
