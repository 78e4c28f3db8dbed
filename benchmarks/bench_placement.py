"""Placement across the mesh (issue 43): padless.place against ports of Megatron-LM's dynamic CP.

Run: .venv/bin/python benchmarks/bench_placement.py [--quick] [--repeat 5]

Every schedule is replayed by one simulator (``padless.simulate``) with one communication-aware
cost (``COST`` below: a 7B-like transformer, d_model 4096 × 32 layers, at 40% of 400 TFLOP/s,
bf16 keys and values of the 32 layers exchanged over 50 GB/s links with 20 µs latency, 0.3 ms per
shard of launch overhead). A schedule is **valid** when every sequence is placed once, no rank
holds more than ``max_tokens`` (padded, per micro-batch), and no rank is idle for the whole step.

Schedulers (all see the same lengths and the same pool of ``R = dp·cp`` ranks, CP degree up to R):

- ``padless``: ``padless.place(lengths, Mesh(dp=1, cp=R, dynamic=True, max_tokens=T), COST)``
  (its search includes two candidates built the Megatron-dev way, written in
  ``padless.planners.placement``, not taken from the port below);
  ``aligned``: the same with ``aligned_groups=True`` (a group of k ranks is a block of k
  consecutive ranks starting at a multiple of k, as Megatron's pre-created groups are).
- ``megatron-main``: a PORT of Megatron-LM's ``BalancedCPScheduler``
  (``megatron/core/pipeline_parallel/hybrid_cp_schedule.py``, main branch, read from the source):
  workload ``L²/cp``, CP = next power of two of ``L / T``, buckets by CP size, each sequence to
  an existing group of its size or a new group of free GPUs (the lower load), balance check
  with 5% slack, trim of the last sequence of the most loaded group, empty GPUs filled by
  doubling the smallest group. Simplified: an expanded group takes any empty GPUs (Megatron
  shifts later groups to keep members consecutive; the replay does not care which ranks).
- ``megatron-dev``: a PORT of Megatron-LM's dev-branch ``next_hdp_group_packing_aware``
  (``megatron/core/datasets/data_schedule_utils.py``; not in the fetched snapshot, read from the
  code index), called on the leftovers until none are left (see :func:`megatron_dev`). CP sizes:
  the powers of two up to R, and R.

The lower bound: ``max(Σ_i min_k k·t(L_i, k) / R, max_i min_k t(L_i, k))`` over feasible degrees.

Cases: heavy-tailed lengths to 128k and to 256k (Pareto α = 1.1 from 1k) and a long-context SFT
mix (80% lognormal around 2k, 20% uniform 16k–128k); global batches of 256 / 1,024 / 4,096;
DP×CP 8×4, 16×8, 32×8; 8k / 16k / 32k tokens per rank (``--quick``: a subset, see below).
Lengths are capped at ``R·T`` (what the pool can hold at all).

Also: planning time of 4,096 sequences over 128 ranks (best of ``--repeat``), 1F1B with 4 stages
and 8–16 micro-batches against ``max(Σt + (S−1)·min t, S·max t)``, and the calibration fit on a
tiny CPU transformer (held-out error).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import deque

import numpy as np

import padless
from padless import Cost, Mesh, MeshCost
from padless.planners.placement import Placement, place, simulate

FLOPS = Cost.transformer(4096, 32)
RATE = 0.4 * 400e12
COST = MeshCost(
    forward=Cost(
        linear=FLOPS.linear / 3 / RATE, quadratic=FLOPS.quadratic / 3 / RATE, per_sequence=1e-4
    ),
    backward=Cost(
        linear=FLOPS.linear * 2 / 3 / RATE,
        quadratic=FLOPS.quadratic * 2 / 3 / RATE,
        per_sequence=2e-4,
    ),
    kv_bytes=2 * 2 * 4096 * 32,
    bandwidth=5e10,
    latency=2e-5,
)


# ---------------------------------------------------------------------------------- lengths


def lengths_of(kind: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "tail128k":
        out = 1024 * (1 + rng.pareto(1.1, n))
        return np.minimum(out, 131072).astype(np.int64)
    if kind == "tail256k":
        out = 1024 * (1 + rng.pareto(1.1, n))
        return np.minimum(out, 262144).astype(np.int64)
    short = np.clip(rng.lognormal(np.log(2048), 0.7, n), 64, 16384)
    long = rng.uniform(16384, 131072, n)
    return np.where(rng.random(n) < 0.8, short, long).astype(np.int64)


# ---------------------------------------------------------------------------------- ports


def gpus_needed(length: int, cap: int) -> int:
    return max(1, 2 ** math.ceil(math.log2(length / cap)))


def megatron_main(
    lens: np.ndarray, ranks: int, cap: int
) -> list[list[tuple[list[int], list[int]]]]:
    """PORT of Megatron-LM's BalancedCPScheduler.get_groups_and_subsamples (main branch):
    micro-batches, each a list of (members, sequence ids) groups."""

    def work(length: int, cp: int | None = None) -> float:
        return length * length / (gpus_needed(length, cap) if cp is None else cp)

    todo = sorted(((i, int(lens[i])) for i in range(lens.size)), key=lambda x: -x[1])
    out = []
    while todo:
        # make_buckets_equal
        k = len({gpus_needed(L, cap) for _, L in todo})
        target = sum(work(L) for _, L in todo) / k
        buckets: list[deque] = []
        cur: list = []
        cur_work = 0.0
        for j, (sid, L) in enumerate(todo):
            w = work(L)
            if cur and (cur_work + w > target * 1.1 or len(todo) - j <= k - len(buckets)):
                buckets.append(deque(cur))
                cur, cur_work = [], 0.0
            cur.append((sid, L))
            cur_work += w
        if cur:
            buckets.append(deque(cur))
        # next_hdp_group
        seqs: list[list[int]] = [[] for _ in range(ranks)]
        times = [0.0] * ranks
        gid_of: list[int | None] = [None] * ranks
        members: dict[int, list[int]] = {}
        size: dict[int, int] = {}
        prev = None
        check = False
        while buckets:
            pick = None
            for b_idx, b in enumerate(buckets):
                if not b:
                    continue
                need = gpus_needed(b[0][1], cap)
                free = [r for r in range(ranks) if gid_of[r] is None]
                if any(s == need for s in size.values()) or len(free) >= need:
                    pick = b_idx
                    break
            if pick is None:
                break
            sid, L = buckets[pick][0]
            need = gpus_needed(L, cap)
            prev = need if prev is None else prev
            cands = [g for g, s in size.items() if s == need]
            best, best_load = None, math.inf
            if cands:
                best, best_load = min(
                    ((g, max(times[r] for r in members[g])) for g in cands), key=lambda t: t[1]
                )
            free = [r for r in range(ranks) if gid_of[r] is None]
            chosen = members[best] if best is not None else None
            if len(free) >= need:
                new = sorted(free, key=lambda r: times[r])[:need]
                if times[new[-1]] < best_load:
                    best, chosen = None, new
            if best is None:
                best = len(members)
                members[best], size[best] = chosen, need
                for r in chosen:
                    gid_of[r] = best
            for r in members[best]:
                seqs[r].append(sid)
                times[r] += work(L)
            buckets[pick].popleft()
            while buckets and not buckets[0]:
                buckets.pop(0)
            if need < prev:
                check = True
            if check and buckets and max(times) - min(times) <= 0.05 * max(times):
                break
        left = [x for b in buckets for x in b]
        # trim_overload
        while True:
            hi, lo = max(times), min(times)
            if hi - lo <= 0.05 * hi or lo == 0:
                break
            r = times.index(hi)
            g = gid_of[r]
            if len(seqs[r]) <= 1:
                break
            sid = seqs[r][-1]
            w = work(int(lens[sid]))
            proj = times[:]
            for m in members[g]:
                proj[m] -= w
            if max(proj) - min(proj) < hi - lo:
                for m in members[g]:
                    seqs[m].pop()
                    times[m] -= w
                left.append((sid, int(lens[sid])))
            else:
                break
        # fill_empty_gpus (simplified: any empty GPUs join the smallest group)
        while any(not s for s in seqs):
            empty = [r for r in range(ranks) if not seqs[r]]
            g = min((g for g in size if seqs[members[g][0]]), key=lambda g: (size[g], g))
            grow = min(size[g], len(empty))
            for r in empty[:grow]:
                seqs[r] = list(seqs[members[g][0]])
                gid_of[r] = g
            members[g] = sorted(members[g] + empty[:grow])
            size[g] = len(members[g])
        groups = [(members[g], seqs[members[g][0]]) for g in members if seqs[members[g][0]]]
        out.append(groups)
        todo = sorted(left, key=lambda x: -x[1])
    return out


def megatron_dev(lens: np.ndarray, ranks: int, cap: int) -> list[list[tuple[list[int], int]]]:
    """PORT of Megatron-LM's dev-branch ``next_hdp_group_packing_aware``
    (``megatron/core/datasets/data_schedule_utils.py``, read from the source), called on the
    leftovers until none are left: micro-batches, each a list of (ranks, sequence id).

    Per micro-batch: the longest sequence opens a group of its minimum CP size (the smallest
    power of two, or the whole pool, holding it at ``cap`` tokens per rank); every other
    sequence, longest first, tries each CP size from its minimum up, joining an existing group
    of that size (if the group's packed per-rank length stays within ``cap``) or opening one
    on the free ranks, and keeps the placement with the lowest projected slowest rank (work
    ``L²/cp``, first found on ties), within ``longest × cap × 1.05``; what fits nowhere waits.
    Empty ranks: the smallest group grows to the next size (later groups shift along), else
    the whole pool becomes one group of as many sequences as fit.

    Re-read against the source (issue 43's 1.45× was not reproduced): the cap is
    ``float(local_tall) * float(max_seq_len_per_rank) * (1.0 + _DYNAMIC_CP_WORKLOAD_CAP_DELTA)``
    with ``_DYNAMIC_CP_WORKLOAD_CAP_DELTA = 0.05``; the candidates are ``enabled_cp_sizes`` (from
    ``get_valid_dynamic_context_parallel_group_sizes``: powers of two and the whole pool) at or
    above ``dcp_gpus_needed``; a new group takes the free ranks with the least work, which are
    the lowest free ranks (every free rank holds none); ``DefaultDynamicCPScheduler.
    get_groups_and_subsamples`` closes micro-batches by calling it on the leftovers until none
    are left. One simplification: Megatron's fill step skips a group when
    ``group_end_rank + needed_count >= total_gpus``; here a group grows while the ranks used
    stay within the pool (the same for the power-of-two pools benchmarked)."""
    sizes = sorted({2**i for i in range(int(math.log2(ranks)) + 1)} | {ranks})

    def need(length: int) -> int:
        want = max(1, math.ceil(length / cap))
        return next((s for s in sizes if s >= want), want)

    def work(length: int, cp: int) -> float:
        return length * length / cp

    todo = sorted(((i, int(lens[i])) for i in range(lens.size)), key=lambda x: -x[1])
    out = []
    while todo:
        tall = todo[0][1]
        wcap = tall * cap * 1.05
        # groups: [first rank, size, packed per-rank length, sequence ids]; contiguous, in order
        groups: list[list] = []
        times = [0.0] * ranks
        used = 0  # ranks taken, from 0 up
        sid, length = todo[0]
        k = need(length)
        groups.append([0, k, length / k, [sid]])
        for r in range(k):
            times[r] += work(length, k)
        used = k
        left = []
        for sid, length in todo[1:]:
            best = None
            for k in sizes:
                if k < need(length):
                    continue
                w = work(length, k)
                for g in groups:
                    if g[1] != k or g[2] + length / k > cap:
                        continue
                    proj = max(max(times[g[0] : g[0] + k]) + w, max(times))
                    if proj <= wcap and (best is None or proj < best[0]):
                        best = (proj, k, g)
                if ranks - used >= k:
                    proj = max(w, max(times))  # free ranks hold no work yet
                    if proj <= wcap and (best is None or proj < best[0]):
                        best = (proj, k, None)
            if best is None:
                left.append((sid, length))
                continue
            _, k, g = best
            if g is None:
                g = [used, k, 0.0, []]
                groups.append(g)
                used += k
            g[2] += length / k
            g[3].append(sid)
            for r in range(g[0], g[0] + k):
                times[r] += work(length, k)
        # fill the empty ranks
        while used < ranks:
            small = min(g[1] for g in groups)
            bigger = [s for s in sizes if s > small]
            grown = False
            if bigger:
                step = bigger[0] - small
                for j, g in enumerate(groups):
                    if g[1] == small and used + step <= ranks:
                        g[1] = bigger[0]
                        for later in groups[j + 1 :]:
                            later[0] += step
                        used += step
                        grown = True
                        break
            if not grown:  # the whole pool as one group
                chosen, left, packed = [], [], 0.0
                for sid, length in todo:
                    if packed + length / ranks <= cap:
                        chosen.append(sid)
                        packed += length / ranks
                    else:
                        left.append((sid, length))
                groups = [[0, ranks, packed, chosen]]
                used = ranks
        out.append([(list(range(g[0], g[0] + g[1])), s) for g in groups for s in g[3]])
        todo = left
    return out


def as_placement(
    lens: np.ndarray, mesh: Mesh, items: list[tuple[int, int, list[int]]]
) -> Placement:
    """A Placement of (micro-batch, sequence id, ranks) items, run in the order given."""
    width = max(len(r) for _, _, r in items)
    ranks = np.full((len(items), width), -1, dtype=np.int64)
    for j, (_, _, rs) in enumerate(items):
        ranks[j, : len(rs)] = rs
    idx = np.array([s for _, s, _ in items], dtype=np.int64)
    deg = np.array([len(r) for _, _, r in items], dtype=np.int64)
    slots = np.array([m for m, _, _ in items], dtype=np.int64)
    return Placement(
        mesh=mesh,
        cost=COST,
        indices=idx,
        lengths=lens[idx],
        slots=slots,
        degrees=deg,
        ranks=ranks,
        times=np.asarray(COST.time(lens[idx], deg)),
        micro_batches=int(slots.max()) + 1,
    )


def main_items(mbs):
    return [(m, sid, mem) for m, groups in enumerate(mbs) for mem, sids in groups for sid in sids]


def dev_items(mbs):
    return [(m, sid, rs) for m, placed in enumerate(mbs) for rs, sid in placed]


def validity(p: Placement, n: int, cap: int) -> tuple[bool, int]:
    once = sorted(p.indices.tolist()) == list(range(n))
    toks = p.rank_tokens()
    busy = np.zeros(p.mesh.ranks, dtype=bool)
    for j in range(p.ranks.shape[1]):
        busy[p.ranks[:, j][p.ranks[:, j] >= 0]] = True
    return bool(once and toks.max() <= cap and busy.all()), int(toks.max())


# ---------------------------------------------------------------------------------- runs


def run_case(kind, batch, dp, cp, cap, seed):
    ranks = dp * cp
    lens = np.minimum(lengths_of(kind, batch, seed), ranks * cap - 2 * ranks)
    mesh = Mesh(dp=1, cp=ranks, dynamic=True, max_tokens=cap)
    t0 = time.perf_counter()
    ours = place(lens, mesh, COST)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    dev = as_placement(lens, mesh, dev_items(megatron_dev(lens, ranks, cap)))
    t_dev = time.perf_counter() - t0
    main = as_placement(lens, mesh, main_items(megatron_main(lens, ranks, cap)))
    aligned = place(
        lens, Mesh(dp=1, cp=ranks, dynamic=True, max_tokens=cap, aligned_groups=True), COST
    )
    row = {
        "kind": kind,
        "batch": batch,
        "mesh": f"{dp}x{cp}",
        "cap": cap,
        "per_rank": batch / ranks,
    }
    runs = (("padless", ours), ("dev", dev), ("main", main), ("aligned", aligned))
    for name, p in runs:  # one simulator for all
        sim = simulate(p)
        ok, top = validity(p, batch, cap)
        row[name] = sim.makespan
        row[name + "_ok"] = ok
        row[name + "_tok"] = top
        row["bound"] = sim.bound if name == "padless" else row["bound"]
    row["t_ours"], row["t_dev"] = t_ours, t_dev
    return row


def planning_time(repeat: int) -> dict[str, tuple[float, float]]:
    """Best of ``repeat`` (CPU seconds, wall seconds) of placing 4,096 sequences over 128 ranks:
    dynamic CP with the search, without it, and a fixed cp = 8 × dp = 16; then dynamic CP with
    the search on each distribution, seeds 0-2 (issue 43's figure: ≤ 10 ms on every one)."""
    lens = np.minimum(lengths_of("tail128k", 4096, 0), 128 * 32768 - 256)
    dynamic = Mesh(dp=1, cp=128, dynamic=True, max_tokens=32768)
    runs = {
        "dynamic, search": (lens, Mesh(dp=1, cp=128, dynamic=True, max_tokens=32768), True),
        "dynamic, one target": (lens, Mesh(dp=1, cp=128, dynamic=True, max_tokens=32768), False),
        "fixed cp=8 x dp=16": (
            np.minimum(lens, 8 * 32768 - 16),
            Mesh(dp=16, cp=8, max_tokens=32768),
            True,
        ),
    }
    for kind in ("tail128k", "tail256k", "sft"):
        for seed in range(3):
            ls = np.minimum(lengths_of(kind, 4096, seed), 128 * 32768 - 256)
            runs[f"dynamic, search, {kind} seed {seed}"] = (ls, dynamic, True)
    out = {}
    for name, (ls, mesh, search) in runs.items():
        cpu = wall = math.inf
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            place(ls, mesh, COST, search=search)
            cpu = min(cpu, time.process_time() - c0)
            wall = min(wall, time.perf_counter() - t0)
        out[name] = (cpu, wall)
    return out


def pipeline_cases(quick: bool) -> list[tuple[str, int, float, float, float]]:
    """1F1B, 4 stages, 32 ranks per stage at 16k tokens: a global batch that fills 60% of 8, 12
    or 16 micro-batches. Per case: the kept placement's makespan over its own bound
    max(Σt + 3·min t, 4·max t); the evenest of ``place``'s candidates (the lowest such ratio,
    before the kept one is evened out and reordered); and that candidate's makespan over the
    kept one's."""
    import padless.planners.placement as PL

    out = []
    for kind in ("sft", "tail128k"):
        for micro in (8, 12, 16):
            for seed in range(1 if quick else 3):
                pool = np.minimum(lengths_of(kind, 8192, 100 + seed), 32 * 16384 - 64)
                lens = pool[np.cumsum(pool) <= 0.6 * micro * 32 * 16384]
                mesh = Mesh(dp=1, cp=32, pp=4, dynamic=True, max_tokens=16384, micro_batches=micro)
                kept = simulate(place(lens, mesh, COST))
                best = (math.inf, math.inf)
                idx = np.arange(lens.size)
                for _, build in PL._candidates(lens, idx, mesh, COST, micro, True):
                    sim = simulate(build())
                    best = min(best, (sim.makespan / sim.bound, sim.makespan))
                out.append(
                    (kind, micro, kept.makespan / kept.bound, best[0], best[1] / kept.makespan)
                )
    return out


def calibration():
    """The fit on a tiny CPU transformer layer (dropout 0: attention takes the fused path, no
    L×L scores through the caches, quadratic as on an accelerator): at least 10 rounds, more
    until each length's two fastest runs agree within 3% (up to 40)."""
    try:
        import torch
    except ImportError:
        return None
    from padless.torch import calibrate_cost

    torch.manual_seed(0)
    torch.set_num_threads(1)
    layer = torch.nn.TransformerEncoderLayer(
        d_model=64, nhead=4, dim_feedforward=128, batch_first=True, dropout=0.0
    )

    def forward(x):
        layer.zero_grad(set_to_none=True)
        return layer(x).square().mean()

    cal = calibrate_cost(
        forward,
        lambda n: torch.randn(1, n, 64),
        [64, 256, 512, 1024, 1536],
        holdout=[384, 768, 1280],
        repeats=10,
    )
    return cal


def plan_digest() -> str:
    """A SHA-256 over every placement the benchmark makes (indices, slots, degrees, ranks, times,
    lengths, micro-batch count): the 81 cases and their ``aligned_groups=True`` twins, the 18
    pipeline cases, and the planning-time cases (with and without the search, also aligned).
    Equal digests before and after a change: the same plans, bit for bit."""
    import hashlib

    acc = hashlib.sha256()

    def add(p: Placement) -> None:
        for x in (p.indices, p.slots, p.degrees, p.ranks, p.times, p.lengths):
            acc.update(np.ascontiguousarray(x).tobytes())
        acc.update(str(p.micro_batches).encode())

    seed = 0
    for kind in ("tail128k", "tail256k", "sft"):
        for dp, cp in ((8, 4), (16, 8), (32, 8)):
            for cap in (8192, 16384, 32768):
                for batch in (256, 1024, 4096):
                    seed += 1
                    ranks = dp * cp
                    lens = np.minimum(lengths_of(kind, batch, seed), ranks * cap - 2 * ranks)
                    for aligned in (False, True):
                        mesh = Mesh(
                            dp=1, cp=ranks, dynamic=True, max_tokens=cap, aligned_groups=aligned
                        )
                        add(place(lens, mesh, COST))
    for kind in ("sft", "tail128k"):
        for micro in (8, 12, 16):
            for s in range(3):
                pool = np.minimum(lengths_of(kind, 8192, 100 + s), 32 * 16384 - 64)
                lens = pool[np.cumsum(pool) <= 0.6 * micro * 32 * 16384]
                mesh = Mesh(dp=1, cp=32, pp=4, dynamic=True, max_tokens=16384, micro_batches=micro)
                add(place(lens, mesh, COST))
    for kind in ("tail128k", "tail256k", "sft"):
        for s in range(3):
            lens = np.minimum(lengths_of(kind, 4096, s), 128 * 32768 - 256)
            for search in (True, False):
                for aligned in (False, True):
                    mesh = Mesh(
                        dp=1, cp=128, dynamic=True, max_tokens=32768, aligned_groups=aligned
                    )
                    add(place(lens, mesh, COST, search=search))
    lens = np.minimum(lengths_of("tail128k", 4096, 0), 8 * 32768 - 16)
    add(place(lens, Mesh(dp=16, cp=8, max_tokens=32768), COST))
    return acc.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="27 cases (one per kind × mesh × cap)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--planning-only", action="store_true", help="only the planning times (best of --repeat)"
    )
    ap.add_argument(
        "--digest", action="store_true", help="only a SHA-256 of every placement (same plans?)"
    )
    args = ap.parse_args()
    if args.digest:
        print(plan_digest())
        return
    if args.planning_only:
        for name, (cpu, wall) in planning_time(args.repeat).items():
            print(f"{name:40} {cpu * 1e3:6.2f} ms CPU {wall * 1e3:6.2f} ms wall")
        return
    rows = []
    kinds = ("tail128k", "tail256k", "sft")
    meshes = ((8, 4), (16, 8), (32, 8))
    caps = (8192, 16384, 32768)
    batches = (256, 1024, 4096)
    seed = case = 0
    for kind in kinds:
        for dp, cp in meshes:
            for cap in caps:
                case += 1
                for batch in batches:
                    seed += 1
                    if args.quick and batch != batches[case % 3]:
                        continue
                    rows.append(run_case(kind, batch, dp, cp, cap, seed))
                    r = rows[-1]
                    print(
                        f"{kind:9} b={batch:5} {r['mesh']:5} T={cap:6} "
                        f"padless/bound {r['padless'] / r['bound']:.3f} "
                        f"dev/bound {r['dev'] / r['bound']:.3f} main/bound {r['main'] / r['bound']:.3f} "
                        f"valid {int(r['padless_ok'])}{int(r['dev_ok'])}{int(r['main_ok'])} "
                        f"plan {r['t_ours'] * 1e3:.0f}/{r['t_dev'] * 1e3:.0f} ms",
                        flush=True,
                    )
    med = statistics.median
    print(f"\n{len(rows)} cases")
    print(
        f"valid: padless {sum(r['padless_ok'] for r in rows)}, megatron-dev "
        f"{sum(r['dev_ok'] for r in rows)}, megatron-main {sum(r['main_ok'] for r in rows)}"
    )
    for name in ("padless", "dev", "main"):
        over = [r[name + "_tok"] / r["cap"] for r in rows]
        print(
            f"  {name}: most tokens on a rank in one micro-batch / max_tokens: median "
            f"{med(over):.3f}, worst {max(over):.3f}"
        )
    print(
        f"padless / bound: median {med(r['padless'] / r['bound'] for r in rows):.3f}, worst "
        f"{max(r['padless'] / r['bound'] for r in rows):.3f}"
    )
    many = [r for r in rows if r["per_rank"] >= 16]
    if many:
        print(
            f"  with >= 16 sequences per rank ({len(many)} cases): median "
            f"{med(r['padless'] / r['bound'] for r in many):.3f}"
        )
    print(
        f"megatron-dev / bound: median {med(r['dev'] / r['bound'] for r in rows):.3f}; "
        f"megatron-main / bound: median {med(r['main'] / r['bound'] for r in rows):.3f}"
    )
    ratio = [r["padless"] / r["dev"] for r in rows]
    slower = [r for r in rows if r["padless"] > r["dev"]]
    print(
        f"padless / megatron-dev makespan: median {med(ratio):.3f}, worst {max(ratio):.3f}, "
        f"slower in {len(slower)} cases ({sum(r['dev_ok'] for r in slower)} of them where "
        "megatron-dev's schedule is valid)"
    )
    floor = [r["bound"] / r["dev"] for r in rows]
    print(
        f"  the floor: bound / megatron-dev median {med(floor):.3f} (min {min(floor):.3f}); no "
        "schedule is shorter than the bound, so no valid schedule's median ratio to megatron-dev "
        f"is below {med(floor):.3f} on these cases"
    )
    ratio = [r["aligned"] / r["bound"] for r in rows]
    print(
        f"padless with aligned_groups=True / bound: median {med(ratio):.3f}, worst "
        f"{max(ratio):.3f}; valid {sum(r['aligned_ok'] for r in rows)}; / megatron-dev median "
        f"{med(r['aligned'] / r['dev'] for r in rows):.3f}, slower in "
        f"{sum(r['aligned'] > r['dev'] for r in rows)} cases"
    )
    ratio = [r["padless"] / r["main"] for r in rows]
    print(f"padless / megatron-main makespan: median {med(ratio):.3f}, worst {max(ratio):.3f}")
    print(
        f"planning (python, this machine): padless median {med(r['t_ours'] for r in rows) * 1e3:.1f} ms, "
        f"megatron-dev port median {med(r['t_dev'] for r in rows) * 1e3:.1f} ms"
    )
    for name, (cpu, wall) in planning_time(args.repeat).items():
        print(
            f"planning 4,096 sequences over 128 ranks, {name}: {cpu * 1e3:.1f} ms CPU, "
            f"{wall * 1e3:.1f} ms wall (best of {args.repeat})"
        )
    pipe = pipeline_cases(args.quick)
    print(
        f"1F1B, 4 stages, 8-16 micro-batches ({len(pipe)} cases): kept placement / its bound "
        f"median {med(x[2] for x in pipe):.3f}, worst {max(x[2] for x in pipe):.3f}; evenest "
        f"candidate / its bound median {med(x[3] for x in pipe):.3f}, worst "
        f"{max(x[3] for x in pipe):.3f}, its makespan / the kept one's median "
        f"{med(x[4] for x in pipe):.3f}"
    )
    cal = calibration()
    if cal is not None:
        each = ", ".join(f"{n}: {(p - m) / m:+.1%}" for n, m, p in cal.heldout)
        print(
            f"calibration (CPU, tiny transformer layer): held-out error {cal.error:.1%} "
            f"(predicted vs measured per length: {each})"
        )
    print(f"padless {padless.__version__}")


if __name__ == "__main__":
    main()
