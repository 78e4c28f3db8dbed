"""Packing efficiency and speed: plan_packing (best-fit decreasing over the whole dataset).

Efficiency (real tokens ÷ rows × capacity) on the built-in corpus, next to first-fit decreasing,
best-fit decreasing in windows of 1000 sequences (as TRL packs) and "concatenate and cut" (100%
full rows, but it cuts sequences: the count is reported). Speed: planning N lognormal lengths at
a capacity, as a ratio to ``np.argsort(kind="stable")`` of the same array (best of --repeat).
With TRL installed, its ``pack_dataset`` runs beside ``plan_packing`` on two corpora (rows, seconds).

Run: .venv/bin/python benchmarks/bench_packing.py [--n 10000000] [--capacity 4096] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
from _common import best_of, lognormal_lengths


def long_lengths(n: int, capacity: int, seed: int = 1) -> np.ndarray:
    """Document-like lengths: lognormal, median 256, σ 1.0, clipped [1, capacity]."""
    rs = np.random.default_rng(seed)
    raw = rs.lognormal(mean=np.log(256.0), sigma=1.0, size=n)
    return np.clip(np.round(raw), 1, capacity).astype(np.int64)


def first_fit_decreasing_rows(lengths: np.ndarray, capacity: int) -> int:
    """Rows used by first-fit decreasing (the lowest-numbered row with room), plain numpy."""
    remaining = np.empty(lengths.size, dtype=np.int64)
    rows = 0
    for size in np.sort(lengths)[::-1].tolist():
        fits = np.flatnonzero(remaining[:rows] >= size)
        if fits.size:
            remaining[fits[0]] -= size
        else:
            remaining[rows] = capacity - size
            rows += 1
    return rows


def concat_and_cut(lengths: np.ndarray, capacity: int) -> tuple[float, int]:
    """Efficiency and number of sequences cut when the corpus is concatenated and cut."""
    ends = np.cumsum(lengths)
    starts = ends - lengths
    total = int(ends[-1])
    rows = -(-total // capacity)
    # a sequence [a, b) is cut when a multiple of capacity falls strictly inside it
    cut = (ends - 1) // capacity > starts // capacity
    cut &= lengths > 0
    return total / (rows * capacity), int(cut.sum())


def windowed_bfd_rows(lengths: np.ndarray, capacity: int, window: int) -> int:
    """Rows used by best-fit decreasing run separately on windows of ``window`` sequences."""
    from padless.sampling.shortcuts import plan_packing

    return sum(
        plan_packing(lengths[i : i + window], capacity=capacity).num_rows
        for i in range(0, lengths.size, window)
    )


def trl_side_by_side(corpora: dict[str, tuple[np.ndarray, int]]) -> None:
    """TRL's own ``pack_dataset`` (best-fit decreasing) beside ``plan_packing``, in this process:
    rows and seconds, TRL as it packs by default (``datasets.map`` batches of 1,000 sequences)
    and over the whole dataset at once (``map_kwargs={"batch_size": len(ds)}``)."""
    try:
        import datasets
        import pyarrow as pa
        from trl import pack_dataset
    except ImportError:
        print("(TRL or datasets not installed: no side-by-side run)")
        return
    from padless.sampling.shortcuts import plan_packing

    datasets.disable_progress_bars()
    print("## Side by side: TRL's pack_dataset(strategy='bfd') and plan_packing")
    print()
    print("| corpus, capacity | what | rows | efficiency | seconds | ÷ padless |")
    print("|---|---|---:|---:|---:|---:|")
    for name, (lengths, capacity) in corpora.items():
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        ids = pa.array(np.ones(int(offsets[-1]), dtype=np.int32))
        column = pa.LargeListArray.from_arrays(pa.array(offsets), ids)
        ds = datasets.Dataset(pa.table({"input_ids": column}))
        total = int(lengths.sum())
        t_pad = best_of(lambda x=lengths, c=capacity: plan_packing(x, capacity=c), 3)
        rows = plan_packing(lengths, capacity=capacity).num_rows
        print(
            f"| {name}, {capacity} | plan_packing | {rows} | {total / (rows * capacity):.2%} "
            f"| {t_pad:.4f} | 1 |"
        )
        for what, kwargs in (("TRL, default", {}), ("TRL, one batch", {"batch_size": len(ds)})):
            t0 = time.perf_counter()
            packed = pack_dataset(ds, capacity, strategy="bfd", map_kwargs=kwargs)
            took = time.perf_counter() - t0
            print(
                f"| | {what} | {len(packed)} | {total / (len(packed) * capacity):.2%} "
                f"| {took:.2f} | {took / t_pad:.0f}× |"
            )
    print()


def machine() -> str:
    mem = ""
    if os.path.exists("/proc/meminfo"):
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs{mem}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--capacity", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import padless
    from padless.sampling.shortcuts import plan_packing

    print(f"machine: {machine()}; numpy {np.__version__}")
    print()
    lengths = padless.builtin_corpus("en")
    print(
        f"## Efficiency on the built-in corpus (en: {lengths.size} sequences, "
        f"{int(lengths.sum())} tokens, max {int(lengths.max())})"
    )
    print()
    print(
        "| capacity | lower bound rows | BFD rows | BFD efficiency | FFD rows | FFD efficiency "
        "| BFD per 1000 (TRL-style) rows | efficiency | concat+cut efficiency | sequences cut |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    total = int(lengths.sum())
    for capacity in (512, 1024, 2048):
        plan = plan_packing(lengths, capacity=capacity)
        ffd = first_fit_decreasing_rows(lengths, capacity)
        windowed = windowed_bfd_rows(lengths, capacity, 1000)
        cc_eff, cc_cut = concat_and_cut(lengths, capacity)
        print(
            f"| {capacity} | {-(-total // capacity)} | {plan.num_rows} | {plan.efficiency:.2%} "
            f"| {ffd} | {total / (ffd * capacity):.2%} | {windowed} "
            f"| {total / (windowed * capacity):.2%} | {cc_eff:.2%} "
            f"| {cc_cut} ({cc_cut / lengths.size:.1%}) |"
        )
    print()
    long_docs = np.random.default_rng(13).lognormal(5, 0.8, 200_000).astype(np.int64)
    trl_side_by_side({"en": (lengths, 1024), "lognormal 2e5": (long_docs.clip(1, 512), 512)})

    cap = args.capacity
    datasets = {
        "short (median 23, σ 0.55, clip [1, 1024])": lognormal_lengths(args.n),
        "long (median 256, σ 1.0, clip [1, capacity])": long_lengths(args.n, cap),
    }
    print(f"## Speed: {args.n:,} lognormal lengths, capacity {cap}, best of {args.repeat}")
    print()
    print("| lengths | what | seconds | ÷ stable argsort | rows | efficiency |")
    print("|---|---|---:|---:|---:|---:|")
    ratios = []
    for name, x in datasets.items():
        plan_packing(x[:1000], capacity=cap)  # load the compiled kernels
        plan_packing(x[:1000], capacity=cap, max_per_row=8)
        t_sort = best_of(lambda x=x: np.argsort(x, kind="stable"), args.repeat)
        t_pack = best_of(lambda x=x: plan_packing(x, capacity=cap), args.repeat)
        t_cap = best_of(lambda x=x: plan_packing(x, capacity=cap, max_per_row=32), args.repeat)
        t_sort = min(t_sort, best_of(lambda x=x: np.argsort(x, kind="stable"), args.repeat))
        plan = plan_packing(x, capacity=cap)
        capped = plan_packing(x, capacity=cap, max_per_row=32)
        label = f"{name}, mean {x.mean():.1f}"
        print(f"| {label} | np.argsort(kind='stable') | {t_sort:.3f} | 1.00 | | |")
        print(
            f"| | plan_packing | {t_pack:.3f} | {t_pack / t_sort:.2f} | {plan.num_rows} "
            f"| {plan.efficiency:.3%} |"
        )
        print(
            f"| | plan_packing, max_per_row=32 | {t_cap:.3f} | {t_cap / t_sort:.2f} "
            f"| {capped.num_rows} | {capped.efficiency:.3%} |"
        )
        ratios.append(t_pack / t_sort)
    print()
    verdict = "PASS" if max(ratios) <= 2 else "FAIL"
    shown = ", ".join(f"{r:.2f}x" for r in ratios)
    print(f"speed target (plan_packing <= 2x stable argsort): {verdict} ({shown})")


if __name__ == "__main__":
    main()
