"""Packing for context parallelism (issue 30): zigzag shares against a contiguous split.

Run: .venv/bin/python benchmarks/bench_context_parallel.py [--docs 300000] [--seeds 3]
     [--repeat 5]

Web-like lengths (lognormal, median 600 tokens, sigma 1.3: a heavy tail, in [16, 200k]) packed
into rows of 32k and 128k tokens (``oversize="split"``) with ``Packing(context_parallel=cp)``:
every document padded to a multiple of ``2·cp``, and each CP rank holding chunks ``r`` and
``2·cp − 1 − r`` of every document (zigzag, Transformer Engine's THD layout). Against it, the
naive split of the same rows: rank ``r`` holds the ``r``-th contiguous ``capacity / cp`` tokens.

1. Per row, max ÷ mean over the CP ranks of the causal-attention work (keys attended: ``Σ
   (p + 1)`` over a rank's real tokens at document positions ``p``), for cp in {2, 4, 8}: the
   mean over rows, the 99th percentile, the worst row, and the work-weighted figure (Σ max ÷
   Σ mean over rows: what the attention's time loses in all). The same for the whole step cost
   of a 7B-like model (``Cost.transformer``: linear layers on every rank's ``capacity / cp``
   tokens plus the rank's attention): the figure a CP group's step time follows.
2. Steps of 8 data-parallel × 4 context-parallel ranks at 32k and 128k (one row per DP rank and
   step): the mean over steps of the slowest of the 32 ranks ÷ their mean, in the 7B model's
   FLOPs, for batches dealt at random (``balance=False``) and balanced (``balance=True``, which
   costs a batch at its slowest CP rank), each with zigzag and with the naive split. Goal:
   <= 1.01 balanced with zigzag.
3. Cost of the feature, as ratios to ``context_parallel=1`` timed in the same process (best of
   ``--repeat``): planning, the balancing costs, and collating one CP rank's share of a 32k
   row (torch).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import best_in_rounds  # noqa: E402

from padless import Cost, Packing, PlanSampler  # noqa: E402
from padless.core.cost import context_parallel_costs, cp_multiple, zigzag_work  # noqa: E402

SEVEN_B = Cost.transformer(4096, 32, d_ff=int(1.5 * 11008), vocab=32000)
DP, CP = 8, 4


def web_like(n: int, seed: int = 0) -> np.ndarray:
    raw = np.random.default_rng(seed).lognormal(np.log(600.0), 1.3, n)
    return np.clip(np.round(raw), 16, 200_000).astype(np.int64)


def _by_row(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Sums of (entries, k) ``values`` over the rows whose entry bounds are ``bounds``."""
    csum = np.zeros((values.shape[0] + 1, values.shape[1]), dtype=np.float64)
    np.cumsum(values, axis=0, out=csum[1:])
    return csum[bounds[1:]] - csum[bounds[:-1]]


def naive_keys(plan, cp: int) -> np.ndarray:
    """(entries, cp) keys attended per rank when each row is cut into cp contiguous parts (the
    documents laid out as in the zigzag rows: padded, in the row's order)."""
    lens = plan.piece_lengths
    m = cp_multiple(cp)
    padded = -(-lens // m) * m
    bounds = plan.rows.offsets
    csum = np.concatenate([[0], np.cumsum(padded)])
    row_of = np.repeat(np.arange(plan.num_rows), np.diff(bounds))
    start = csum[:-1] - csum[bounds[:-1]][row_of]  # the document's offset in its row
    width = plan.capacity // cp
    out = np.empty((lens.size, cp), dtype=np.float64)
    for r in range(cp):
        lo = np.clip(r * width - start, 0, lens)
        hi = np.clip((r + 1) * width - start, 0, lens)
        out[:, r] = (hi * (hi + 1) - lo * (lo + 1)) / 2  # Σ (p + 1) for p in [lo, hi)
    return out


def step_costs(keys: np.ndarray, plan, cp: int) -> np.ndarray:
    """(rows, cp) 7B-model cost of each rank's share of each row, from its keys."""
    lens = plan.piece_lengths.astype(np.float64)
    whole = lens * (lens + 1) / 2
    attention = SEVEN_B.quadratic * (lens * lens)[:, None] * keys / np.maximum(whole, 1)[:, None]
    return _by_row(attention, plan.rows.offsets) + SEVEN_B.linear * plan.capacity / cp


def spread(per_rank: np.ndarray) -> dict[str, float]:
    mean = per_rank.mean(axis=1)
    ok = mean > 0
    ratio = per_rank.max(axis=1)[ok] / mean[ok]
    return {
        "mean": float(ratio.mean()),
        "p99": float(np.quantile(ratio, 0.99)),
        "max": float(ratio.max()),
        "weighted": float(per_rank.max(axis=1).sum() / mean.sum()),
    }


def part1(lengths: np.ndarray) -> None:
    print("1. per row, max / mean over CP ranks (zigzag | naive contiguous)")
    head = "attention keys: mean  p99  max  weighted"
    print(f"{'capacity':>9} {'cp':>3} {'eff':>7}  {head:<44}  7B step cost: mean  p99  max")
    for capacity in (32_768, 131_072):
        for cp in (2, 4, 8):
            plan = Packing(capacity=capacity, context_parallel=cp, oversize="split").plan(lengths)
            zig = zigzag_work(plan.piece_lengths, cp)[1].astype(np.float64)
            nai = naive_keys(plan, cp)
            bounds = plan.rows.offsets
            a, b = spread(_by_row(zig, bounds)), spread(_by_row(nai, bounds))
            sa, sb = spread(step_costs(zig, plan, cp)), spread(step_costs(nai, plan, cp))

            def fmt(d: dict[str, float], keys: tuple[str, ...]) -> str:
                return " ".join(f"{d[k]:.4f}" for k in keys)

            four, three = ("mean", "p99", "max", "weighted"), ("mean", "p99", "max")
            print(
                f"{capacity:>9} {cp:>3} {plan.efficiency:7.4f}  {fmt(a, four)} | {fmt(b, four)}"
                f"  {fmt(sa, three)} | {fmt(sb, three)}"
            )


def dp_cp_imbalance(per_rank: np.ndarray, order: np.ndarray) -> tuple[float, float]:
    """Steps of DP batches (in ``order``), each batch its CP ranks' costs: mean over steps of
    max ÷ mean over the DP·CP ranks, and Σ max ÷ Σ mean."""
    steps = order.size // DP
    table = per_rank[order[: steps * DP]].reshape(steps, DP * per_rank.shape[1])
    top, mean = table.max(axis=1), table.mean(axis=1)
    return float((top / mean).mean()), float(top.sum() / mean.sum())


def part2(lengths: np.ndarray, seeds: int) -> None:
    print(f"\n2. steps of {DP} DP x {CP} CP ranks, 7B FLOPs: slowest of {DP * CP} / mean")
    print(f"{'capacity':>9} {'order':>9}  zigzag: mean-of-steps  total | naive: same")
    for capacity in (32_768, 131_072):
        spec = Packing(capacity=capacity, context_parallel=CP, oversize="split", cost=SEVEN_B)
        for balance in (False, True):
            got = np.zeros(4)
            for seed in range(seeds):
                s = PlanSampler(lengths, spec, world_size=DP, seed=seed, balance=balance)
                plan, order = s.epoch_plan(0)
                zig = context_parallel_costs(SEVEN_B, plan, CP)
                nai = step_costs(naive_keys(plan, CP), plan, CP)  # rows_per_batch=1: a row
                got += [*dp_cp_imbalance(zig, order), *dp_cp_imbalance(nai, order)]
            got /= seeds
            name = "balanced" if balance else "random"
            print(
                f"{capacity:>9} {name:>9}  {got[0]:.4f} {got[1]:.4f}        | "
                f"{got[2]:.4f} {got[3]:.4f}"
            )


def part3(lengths: np.ndarray, repeat: int) -> None:
    import torch

    from padless.torch import collate_packed

    print(f"\n3. cost, ratio to context_parallel=1 (best of {repeat}; 32k rows)")
    one = Packing(capacity=32_768, oversize="split", cost=SEVEN_B)
    four = Packing(capacity=32_768, oversize="split", cost=SEVEN_B, context_parallel=CP)
    b1, b4 = one.bind(lengths), four.bind(lengths)
    p1, p4 = b1.plan(0, 0), b4.plan(0, 0)
    t = best_in_rounds(
        {
            "plan1": lambda: b1.plan(0, 0),
            "plan4": lambda: b4.plan(0, 0),
            "costs1": lambda: b1.costs(p1),
            "costs4": lambda: b4.costs(p4),
        },
        repeat,
    )
    print(f"   planning {t['plan4'] / t['plan1']:.2f}x ({t['plan1'] * 1e3:.0f} ms at cp=1)")
    print(f"   balancing costs {t['costs4'] / t['costs1']:.2f}x ({t['costs1'] * 1e3:.1f} ms)")
    gen = torch.Generator().manual_seed(0)
    pieces = p4.piece_lengths
    samples = [
        [torch.randint(0, 32000, (n,), generator=gen) for n in pieces[lo:hi].tolist()]
        for lo, hi in zip(p4.offsets[:8].tolist(), p4.offsets[1:9].tolist(), strict=True)
    ]  # the pieces of the first 8 batches (a row each), in the sampler's order
    c1, c4 = collate_packed(32_768), collate_packed(four, cp_rank=1)
    full = collate_packed(four)
    t = best_in_rounds(
        {
            "cp1": lambda: [c1(s) for s in samples],
            "rank": lambda: [c4(s) for s in samples],
            "full": lambda: [full(s) for s in samples],
        },
        repeat,
    )
    per = t["cp1"] / len(samples) * 1e3
    print(f"   collate one rank's share {t['rank'] / t['cp1']:.2f}x ({per:.2f} ms a row at cp=1)")
    print(f"   collate the whole padded rows {t['full'] / t['cp1']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=300_000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    lengths = web_like(args.docs)
    print(f"{args.docs} web-like documents, {int(lengths.sum())} tokens")
    part1(lengths)
    part2(lengths, args.seeds)
    part3(lengths, args.repeat)


if __name__ == "__main__":
    main()
