"""Post-training (issue 42): the step planner against verl's run-time micro-batching.

Run: .venv/bin/python benchmarks/bench_posttraining.py [--n 8192] [--world 64] [--repeat 7]
[--best] [--pieces] [--no-verl]

One global batch of ``--n`` rollout-like lengths over ``--world`` data-parallel ranks, split into
every rank's micro-batches under a token cap (16,384, 6,000, 4,500 and the longest item), two
length mixes:

- ``lognormal``: prompt lognormal(ln 200, 0.6) in [16, 1024] + response lognormal(ln 500, 1.0)
  in [1, 3072] tokens (longest 4,096);
- ``short+max``: 75% short answers (prompt as above + lognormal(ln 60, 0.8) in [1, 512]) and 25%
  that ran to the response limit (prompt + 3,072).

Side by side, in one process, on the same lengths:

- ``padless``: ``padless.plan_step(lengths, world_size=, max_tokens=cap)`` (packed form; cost
  = tokens), and ``padless+w``: the same with ``cost=Cost(linear=24576, quadratic=1)`` (verl's
  ``calculate_workload``, slime's ``coeff·L + L²``).
- ``verl``: a PORT of verl's balancing (``verl/utils/seqlen_balancing.py`` and the trainer's
  ``_balance_batch``, volcengine/verl, read from its source and rewritten here for this
  benchmark only): Karmarkar–Karp over the workloads ``24576·L + L²`` into ``world`` equal-size
  parts (the DP split), then per rank ``rearrange_micro_batches``: ``m = ceil(tokens / cap)``
  all-reduced to the max over ranks, KK (any size) over the workloads into ``m`` micro-batches,
  sorted by workload and interleaved (small ones at both ends). verl's KK also stands for slime's
  ``--balance-by-flops`` (KK over ``coeff·L + L²`` for DP ranks and micro-batches).

Printed per planner: planning time (median of ``--repeat``, and with ``--best`` the best of
them; verl: of fewer, it takes ~0.3 s; one process, one core), micro-batches per rank, per-slot
max/mean (``Σ_k max_r c[r,k] / Σ_k mean_r c[r,k]``, every rank runs slot k together) in tokens
and in workload, micro-batches over the cap and the most tokens in a micro-batch.

``--pieces``: also where ``plan_step``'s time goes (best of ``--repeat``): the length sort, the
compiled placement (``padless._kernels.step.step_fit``: every try, the best-fit retry and the slot
polish in one call) and the rest (argument checks, the ranks of each slot, the scatter into
micro-batches and the plan's figures).
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import time
from typing import Any

import numpy as np

import padless
from padless.planners.step import plan_step

WORKLOAD = padless.Cost(linear=24576.0, quadratic=1.0)


# ------------------------------------------------------------------ lengths


def rollout_lengths(kind: str, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    prompt = np.clip(rng.lognormal(np.log(200), 0.6, n), 16, 1024).astype(np.int64)
    if kind == "lognormal":
        response = np.clip(rng.lognormal(np.log(500), 1.0, n), 1, 3072).astype(np.int64)
    else:
        short = np.clip(rng.lognormal(np.log(60), 0.8, n), 1, 512).astype(np.int64)
        response = np.where(rng.random(n) < 0.25, 3072, short)
    return prompt + response


# ------------------------------------------------------------------ verl, ported (benchmark only)
# A port of volcengine/verl verl/utils/seqlen_balancing.py (karmarkar_karp,
# get_seqlen_balanced_partitions, rearrange_micro_batches) and the trainer's _balance_batch,
# rewritten for this benchmark: same rule, same tie-breaks, no torch, no distributed (the
# all-reduce of the micro-batch count is a max over the ranks here).


class _Part:
    __slots__ = ("items", "total")

    def __init__(self) -> None:
        self.total = 0
        self.items: list[tuple[int, int]] = []

    def __lt__(self, other: _Part) -> bool:
        if self.total != other.total:
            return self.total < other.total
        if len(self.items) != len(other.items):
            return len(self.items) < len(other.items)
        return self.items < other.items


class _State:
    __slots__ = ("k", "parts")

    def __init__(self, items: list[tuple[int, int]], k: int) -> None:
        self.k = k
        self.parts = [_Part() for _ in range(k)]
        for part, (idx, value) in zip(self.parts, items, strict=False):
            part.items.append((idx, value))
            part.total += value
        self.parts.sort(reverse=True)

    def merge(self, other: _State) -> None:
        for i in range(self.k):
            mine, theirs = self.parts[i], other.parts[self.k - 1 - i]
            mine.items.extend(theirs.items)
            mine.total += theirs.total
        self.parts.sort(reverse=True)

    def spread(self) -> int:
        return self.parts[0].total - self.parts[-1].total

    def __lt__(self, other: _State) -> bool:  # the largest spread pops first
        a, b = self.spread(), other.spread()
        if a != b:
            return a > b
        return self.parts[0] > other.parts[0]


def verl_kk(values: list[int], k: int, equal_size: bool) -> list[list[int]]:
    ordered = sorted((v, i) for i, v in enumerate(values))
    heap: list[_State] = []
    if equal_size:
        for at in range(0, len(ordered), k):
            heapq.heappush(heap, _State([(i, v) for v, i in ordered[at : at + k]], k))
    else:
        for v, i in ordered:
            heapq.heappush(heap, _State([(i, v)], k))
    while len(heap) > 1:
        first, second = heapq.heappop(heap), heapq.heappop(heap)
        first.merge(second)
        heapq.heappush(heap, first)
    return [sorted(i for i, _ in part.items) for part in heap[0].parts]


def verl_step(lengths: np.ndarray, world: int, cap: int) -> list[list[list[int]]]:
    """verl's micro-batches: [rank][slot] -> indices into lengths."""
    seqlens = [int(x) for x in lengths]
    workload = [24576 * s + s * s for s in seqlens]
    ranks = verl_kk(workload, world, equal_size=True)
    counts = [min(len(p), -(-sum(seqlens[i] for i in p) // cap)) for p in ranks]
    m = max(counts)  # all-reduce(MAX) over the DP group
    out = []
    for part in ranks:
        local = [workload[i] for i in part]
        micro = verl_kk(local, m, equal_size=False)
        micro.sort(key=lambda p: (sum(local[j] for j in p), p[0] if p else 0), reverse=True)
        micro = micro[::2][::-1] + micro[1::2]
        out.append([[part[j] for j in p] for p in micro])
    return out


# ------------------------------------------------------------------ figures


def per_slot(costs: np.ndarray) -> float:
    mean = float(costs.mean(axis=0).sum())
    return float(costs.max(axis=0).sum()) / mean if mean else 1.0


def grids(lengths: np.ndarray, batches: list[list[np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    tokens = np.array([[int(lengths[b].sum()) for b in rank] for rank in batches])
    work = np.array([[float(WORKLOAD.of(lengths[b]).sum()) for b in rank] for rank in batches])
    return tokens, work


BEST = False  # --best: report the best of the repeats, not the median


def median_time(repeat: int, fn, *args, **kwargs) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return (min(times) if BEST else statistics.median(times)), out


def pieces(lengths: np.ndarray, world: int, cap: int, cost, repeat: int) -> None:
    """Where plan_step's time goes: the length sort, the compiled placement, the rest."""
    from padless import _kernels as K
    from padless.planners import step as S

    def best(fn) -> float:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    order = S._length_order(lengths)
    sizes = np.ascontiguousarray(lengths[order])
    costs = np.ascontiguousarray(S._item_costs(sizes, cost))
    m = -(-int(sizes.sum()) // (world * cap))
    t_order = best(lambda: S._length_order(lengths))
    t_fit = best(lambda: K.step.step_fit(sizes, costs, world * m, world, cap, world, S.POLISH))
    t_all = best(lambda: plan_step(lengths, world_size=world, max_tokens=cap, cost=cost))
    rest = t_all - t_order - t_fit
    print(
        f"    pieces: sort {t_order * 1e3:.3f} ms, step_fit {t_fit * 1e3:.3f} ms, "
        f"rest {rest * 1e3:.3f} ms, plan_step {t_all * 1e3:.3f} ms"
    )


def row(name: str, seconds: float, lengths: np.ndarray, batches, cap: int) -> None:
    tokens, work = grids(lengths, batches)
    m = tokens.shape[1]
    print(
        f"  {name:<10} {seconds * 1e3:9.2f} ms  {m:4d} x {tokens.shape[0]:<3d} "
        f"{per_slot(tokens):8.4f} {per_slot(work):8.4f}  {int((tokens > cap).sum()):6d} "
        f"{int(tokens.max()):7d}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--world", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--verl-repeat", type=int, default=3)
    parser.add_argument("--best", action="store_true", help="best of the repeats, not median")
    parser.add_argument("--pieces", action="store_true", help="where plan_step's time goes")
    parser.add_argument("--no-verl", action="store_true", help="leave verl's port out")
    args = parser.parse_args()
    global BEST
    BEST = args.best
    plan_step([1, 2, 3], world_size=1, max_tokens=8)  # load the kernels
    for kind in ("lognormal", "short+max"):
        lengths = rollout_lengths(kind, args.n)
        longest = int(lengths.max())
        print(
            f"\n{kind}: {args.n} sequences, {int(lengths.sum()):,} tokens, mean "
            f"{lengths.mean():.0f}, longest {longest}, over {args.world} ranks"
        )
        for cap in (16384, 6000, 4500, longest):
            print(f" cap {cap}:  planner        time  mb x ranks  slot/tok slot/work  over  most")
            for name, cost in (("padless", None), ("padless+w", WORKLOAD)):
                sec, plan = median_time(
                    args.repeat,
                    plan_step,
                    lengths,
                    world_size=args.world,
                    max_tokens=cap,
                    cost=cost,
                )
                batches = [plan.micro_batches(r) for r in range(args.world)]
                row(name, sec, lengths, batches, cap)
                if args.pieces:
                    pieces(lengths, args.world, cap, cost, args.repeat)
            if args.no_verl:
                continue
            sec, verl = median_time(args.verl_repeat, verl_step, lengths, args.world, cap)
            batches = [[np.array(b, dtype=np.int64) for b in rank] for rank in verl]
            row("verl", sec, lengths, batches, cap)


if __name__ == "__main__":
    main()
