"""2-D buckets (issue 29): padding per field of padless's 2-D DP against NeMo's estimate.

Run: .venv/bin/python benchmarks/bench_buckets2d.py [--speech 1000000] [--repeat 3] [--two-level]

Corpora: the built-in English–Spanish verses (``padless.builtin_corpus(["en", "es"])``: two
token fields of one scale) and a synthetic speech-like corpus (field 0: durations
lognormal(ln 6 s, 0.6) in [0.5, 30] s as 10 ms ticks by ``padless.durations``; field 1: tokens,
about 3 per second times lognormal(0, 0.35) noise), where the max over fields is the duration.

1. Padding per field of each bucketing's bound (count × the bucket's longest in each field,
   :func:`padless.planners.buckets.boundary_costs`) at k0 × 2 buckets:

   - ``2-D joint``: ``bucket_boundaries_2d(method="joint")``, the ``Buckets(num_buckets=(k0, k1))``
     default (first field by the 1-D DP, then each bucket's second field minimising both fields'
     padded slots);
   - ``2-D sequential``: the second field by its own 1-D DP within each bucket;
   - ``NeMo equal``: NeMo's ``estimate_duration_bins_2d`` rule (lhotse's equal total length per
     bucket, then per sub-bucket; NeMo's outlier filter left out);
   - ``1-D max``: ``bucket_boundaries`` with k0 × 2 buckets on the max over fields (fairseq);
   - ``1-D field 0``: the same on field 0 alone (lhotse's/NeMo's 1-D duration buckets).

2. Plans: ``Buckets`` with a budget per field, with the 2-D DP's boundaries and with NeMo's
   (given as ``boundaries=``): batches, and padding per field of the plan's own batches
   (``BatchPlan.field_stats``).

3. Fit time of each 2-D method as a ratio to the 1-D DP on field 0 (best of ``--repeat``, same
   process).

``--two-level``: the exact optimum over every 2-D bucketing of this form (first-field cuts chosen
for the sub-bucketing that follows: a DP over first-field runs each costed by its best joint
sub-bucketing; O(L0² · k1 · L1²), seconds in Python for en–es's 99 × 111 distinct lengths), on
en–es only, for the headroom the default leaves.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import best_of  # noqa: E402

import padless  # noqa: E402
from padless import Buckets, bucket_boundaries, bucket_boundaries_2d  # noqa: E402
from padless.planners.buckets import _joint_cuts, boundary_costs  # noqa: E402

GRIDS = ((4, 2), (8, 2), (16, 2), (30, 2))
METHODS = ("joint", "sequential", "equal")


def speech_like(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    seconds = np.clip(rng.lognormal(np.log(6.0), 0.6, n), 0.5, 30.0)
    tokens = np.maximum(1, np.round(3.0 * seconds * rng.lognormal(0.0, 0.35, n)))
    return np.stack([padless.durations(seconds, resolution=0.01), tokens.astype(np.int64)], 1)


def pct(lengths: np.ndarray, slots: tuple[int, ...]) -> list[float]:
    real = lengths.sum(axis=0)
    return [100.0 * (1 - r / s) for r, s in zip(real, slots, strict=True)]


def fits(lengths: np.ndarray, k0: int, k1: int) -> dict[str, tuple[object, int]]:
    """Boundaries of every bucketing compared, and their bucket counts."""
    out: dict[str, tuple[object, int]] = {}
    for m in METHODS:
        cuts, subs = bucket_boundaries_2d(lengths, (k0, k1), method=m)
        grid = (cuts.tolist(), [s.tolist() for s in subs])
        out[f"2-D {m}" if m != "equal" else "NeMo equal"] = (grid, sum(s.size + 1 for s in subs))
    one = bucket_boundaries(lengths, k0 * k1)
    out["1-D max"] = (one.tolist(), one.size + 1)
    first = bucket_boundaries(lengths[:, 0], k0 * k1)
    out["1-D field 0"] = (("field0", first), first.size + 1)
    return out


def field0_costs(lengths: np.ndarray, cuts: np.ndarray) -> tuple[int, ...]:
    """Padded slots per field of 1-D buckets on field 0 (one bucket per field-0 interval)."""
    ids = np.searchsorted(cuts, lengths[:, 0], side="left")
    out = []
    for f in range(lengths.shape[1]):
        top = np.zeros(cuts.size + 1, np.int64)
        np.maximum.at(top, ids, lengths[:, f])
        out.append(int((np.bincount(ids, minlength=cuts.size + 1) * top).sum()))
    return tuple(out)


def padding_table(name: str, lengths: np.ndarray) -> None:
    print(f"\n{name}: padding per field of the bucket bound (field 0 / field 1 / both)")
    print(
        f"  {'grid':<6} {'bucketing':<15} {'buckets':>7} {'field 0':>8} {'field 1':>8} {'both':>8}"
    )
    real = lengths.sum()
    for k0, k1 in GRIDS:
        for label, (cuts, count) in fits(lengths, k0, k1).items():
            if isinstance(cuts, tuple) and cuts[0] == "field0":
                slots = field0_costs(lengths, cuts[1])
            else:
                slots = boundary_costs(lengths, cuts)
            f0, f1 = pct(lengths, slots)
            both = 100.0 * (1 - real / sum(slots))
            grid = f"{k0}x{k1}"
            print(f"  {grid:<6} {label:<15} {count:>7} {f0:>7.2f}% {f1:>7.2f}% {both:>7.2f}%")


def plan_table(name: str, lengths: np.ndarray, budgets: tuple[int, int]) -> None:
    print(f"\n{name}: plans with max_tokens={budgets} (padding of the plan's own batches)")
    print(f"  {'grid':<6} {'boundaries':<15} {'batches':>8} {'field 0':>8} {'field 1':>8}")
    for k0, k1 in ((8, 2), (30, 2)):
        for label, method in (("2-D joint", "joint"), ("NeMo equal", "equal")):
            cuts, subs = bucket_boundaries_2d(lengths, (k0, k1), method=method)
            grid = (cuts.tolist(), [s.tolist() for s in subs])
            plan = Buckets(boundaries=grid, max_tokens=budgets).plan(lengths)
            st = plan.field_stats(lengths)
            grid = f"{k0}x{k1}"
            print(
                f"  {grid:<6} {label:<15} {len(plan):>8,} "
                f"{100 * st[0].padding_fraction:>7.2f}% {100 * st[1].padding_fraction:>7.2f}%"
            )


def fit_times(name: str, lengths: np.ndarray, repeat: int) -> None:
    base = best_of(lambda: bucket_boundaries(lengths[:, 0], 30), repeat)
    parts = [f"1-D DP on field 0 {1e3 * base:.1f} ms"]
    for m in METHODS:
        t = best_of(lambda m=m: bucket_boundaries_2d(lengths, (30, 2), method=m), repeat)
        parts.append(f"{m} {t / base:.1f}x")
    print(f"\n{name}: fit time at 30x2: " + ", ".join(parts))


def segment_costs(lengths: np.ndarray, k1: int) -> np.ndarray:
    """Both fields' padded slots of every run of first-field values ``a..b`` as one bucket,
    split by the joint DP into at most ``k1`` sub-buckets (inf where ``b < a``)."""
    v0, i0 = np.unique(lengths[:, 0], return_inverse=True)
    v1, i1 = np.unique(lengths[:, 1], return_inverse=True)
    hist = np.zeros((v0.size, v1.size), np.int64)
    np.add.at(hist, (i0, i1), 1)
    seg = np.full((v0.size, v0.size), np.inf)
    for a in range(v0.size):
        count = np.zeros(v1.size, np.int64)
        other = np.zeros(v1.size, np.int64)
        for b in range(a, v0.size):
            count += hist[b]
            other = np.where(hist[b] > 0, v0[b], other)
            nz = np.flatnonzero(count)
            vals, cnts, oth = v1[nz], count[nz], other[nz]
            ends = [*_joint_cuts(vals, cnts, oth, k1).tolist(), vals.size - 1]
            lo, total = 0, 0
            for hi in ends:
                total += int(cnts[lo : hi + 1].sum()) * int(vals[hi] + oth[lo : hi + 1].max())
                lo = hi + 1
            seg[a, b] = total
    return seg


def two_level(lengths: np.ndarray, seg: np.ndarray, k0: int) -> float:
    """Total padding (both fields) of the best split of the first-field values into at most
    ``k0`` runs, each costed by ``seg``."""
    n = seg.shape[0]
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    for _ in range(k0):  # one more bucket per round
        nxt = best.copy()
        for b in range(1, n + 1):
            nxt[b] = min(nxt[b], float(np.min(best[:b] + seg[np.arange(b), b - 1])))
        best = nxt
    return 100.0 * (1 - lengths.sum() / best[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--speech", type=int, default=1_000_000, help="speech-like sequences")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--two-level", action="store_true", help="the exact optimum on en-es")
    args = ap.parse_args()
    en_es = padless.builtin_corpus(["en", "es"])
    speech = speech_like(args.speech)
    padding_table("en-es (29,814 verse pairs, tokens)", en_es)
    padding_table(f"speech-like ({args.speech:,}: 10 ms ticks, tokens)", speech)
    plan_table("en-es", en_es, (4096, 4096))
    plan_table("speech-like", speech, (60_000, 4096))
    fit_times("en-es", en_es, args.repeat)
    fit_times("speech-like", speech, args.repeat)
    if args.two_level:
        print("\nen-es: total padding of the exact two-level optimum vs the default (joint)")
        seg = segment_costs(en_es, 2)
        for k0 in GRIDS:
            cuts = bucket_boundaries_2d(en_es, k0)
            slots = boundary_costs(en_es, (cuts[0].tolist(), [s.tolist() for s in cuts[1]]))
            ours = 100.0 * (1 - en_es.sum() / sum(slots))
            exact = two_level(en_es, seg, k0[0])
            print(f"  {k0[0]}x2: exact {exact:.2f}%, joint {ours:.2f}%")


if __name__ == "__main__":
    main()
