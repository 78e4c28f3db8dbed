"""Samplers over pairs and groups, and the flex-attention mask (issue 42).

1. Padded DPO pairs through ``TokenBudgetSampler(groups=)`` on preference-like lengths (each
   item is prompt + chosen or prompt + rejected; the pair shares an id): fill (real tokens ÷
   rows × longest per batch), batches, pairs split across batches, the fill's ceiling (every
   pair padded only to its own longer item) — against the same sampler without groups, which
   fills better by splitting nearly every pair.
2. Planning time of an epoch, grouped ÷ ungrouped, on 10⁶ items in pairs (same process).
3. The shared-prefix mask of one packed row of GRPO groups: bytes and build time of
   ``flex_block_mask`` against the dense 4-D ``block_causal_mask`` (same batch, same process).

Run: .venv/bin/python benchmarks/bench_groups_sampler.py [--pairs 50000] [--capacity 16384]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from padless import PlanSampler, TokenBudget


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def pair_lengths(n: int, seed: int = 0) -> np.ndarray:
    """2n sequence lengths, items 2i and 2i + 1 being pair i: one prompt (lognormal, median
    ~245) followed by the chosen or the rejected answer (lognormal around one per-pair scale)."""
    rng = np.random.default_rng(seed)
    prompt = np.clip(rng.lognormal(5.5, 0.9, n), 8, 6000).astype(np.int64)
    base = rng.lognormal(5.8, 0.7, n)
    chosen = np.clip(base * rng.lognormal(0, 0.2, n), 4, 4000).astype(np.int64)
    rejected = np.clip(base * rng.lognormal(0, 0.2, n), 4, 4000).astype(np.int64)
    return np.stack([prompt + chosen, prompt + rejected], 1).reshape(-1)


def padded_fill(
    sampler: PlanSampler, lengths: np.ndarray, pairs: np.ndarray
) -> tuple[float, int, int]:
    real = padded = split = batches = 0
    for batch in sampler:
        b = np.asarray(batch)
        real += int(lengths[b].sum())
        padded += b.size * int(lengths[b].max())
        _, counts = np.unique(pairs[b], return_counts=True)
        split += int((counts == 1).sum())  # items whose pair's other half is elsewhere
        batches += 1
    return real / padded, batches, split // 2


def dpo(n: int, budget: int) -> None:
    lengths = pair_lengths(n)
    pairs = np.repeat(np.arange(n), 2)
    ceiling = lengths.sum() / (2 * np.maximum(lengths[0::2], lengths[1::2])).sum()
    print(f"1. padded DPO pairs: {n:,} pairs, max_tokens={budget:,}, seed 0")
    print(f"   {'sampler':<16}{'batches':>9}{'fill':>9}{'pairs split':>13}")
    for name, groups in (("groups=pairs", pairs), ("no groups", None)):
        s = PlanSampler(lengths, TokenBudget(max_tokens=budget), groups=groups, seed=0)
        fill, batches, split = padded_fill(s, lengths, pairs)
        print(f"   {name:<16}{batches:>9,}{fill:>9.4f}{split:>13,}")
    print(f"   ceiling (each pair padded to its own longer item): {ceiling:.4f}")


def planning(n: int, budget: int, repeat: int) -> None:
    rng = np.random.default_rng(1)
    lengths = np.clip(rng.lognormal(5, 0.8, n), 1, 4000).astype(np.int64)
    groups = rng.permutation(n) // 2
    spec = TokenBudget(max_tokens=budget)
    plain = spec.bind(lengths)
    grouped = spec.bind_groups(lengths, groups)
    t_plain = best_of(lambda: plain.plan(0, 0), repeat)
    t_group = best_of(lambda: grouped.plan(0, 0), repeat)
    t_bind = best_of(lambda: spec.bind_groups(lengths, groups), repeat)
    print(f"2. planning {n:,} items in pairs (scattered ids), best of {repeat}")
    print(f"   plan without groups {t_plain * 1e3:8.1f} ms")
    print(f"   plan with groups    {t_group * 1e3:8.1f} ms  ({t_group / t_plain:.1f}x)")
    print(f"   bind with groups    {t_bind * 1e3:8.1f} ms  (checks, sorts the groups once)")


def flex(capacity: int, repeat: int) -> None:
    import torch

    from padless.torch import block_mask_nbytes, flex_block_mask
    from padless.torch._packed_check import block_causal_mask

    rng = np.random.default_rng(2)
    seq, prompt_of, at, segment = [], [], 0, 0
    while True:  # GRPO-like groups of 8: one prompt, then its completions
        p, rs = int(rng.integers(64, 512)), rng.integers(32, 400, 8).tolist()
        if at + p + sum(rs) > capacity:
            break
        seq += [segment] * p
        prompt_of += [-1] * p
        first = segment
        for r in rs:
            segment += 1
            seq += [segment] * r
            prompt_of += [first] * r
        segment += 1
        at += p + sum(rs)
    pad = capacity - at
    seq += [segment] * pad
    prompt_of += [-1] * pad
    seq_idx = torch.tensor([seq])
    prompt = torch.tensor([prompt_of])
    t_flex = best_of(lambda: flex_block_mask(seq_idx, prompt_of=prompt), repeat)
    t_dense = best_of(lambda: block_causal_mask(seq_idx, prompt_of=prompt), max(1, repeat // 3))
    nbytes = block_mask_nbytes(flex_block_mask(seq_idx, prompt_of=prompt))
    dense = capacity * capacity * 4
    print(f"3. shared-prefix mask, one row of {capacity:,} tokens ({segment} segments)")
    print(f"   flex BlockMask {nbytes:>15,} bytes  {t_flex * 1e3:8.1f} ms")
    print(f"   4-D float mask {dense:>15,} bytes  {t_dense * 1e3:8.1f} ms")
    print(f"   bytes ÷ {dense / nbytes:,.0f}, time ÷ {t_dense / t_flex:.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=50_000)
    ap.add_argument("--budget", type=int, default=16_384)
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--capacity", type=int, default=16_384)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    dpo(args.pairs, args.budget)
    planning(args.items, args.budget, args.repeat)
    flex(args.capacity, args.repeat)


if __name__ == "__main__":
    main()
