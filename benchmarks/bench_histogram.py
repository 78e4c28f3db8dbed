"""Histogram plans: global quality for any corpus size (issue 30).

Run: .venv/bin/python benchmarks/bench_histogram.py [--size 10000000] [--big 1000000000]
     [--rounds 3]

Part 1 (``--size`` lognormal lengths in memory, ``max_tokens=4096``): padding of the global plan
(``window=None``), of windowed plans (windows of 1e6) and of the histogram plan
(``window="histogram"``), which must equal the global plan's; and the time of one global plan
against the histogram planner's build (the histogram and the by-width index, once) and an
epoch's order (best of ``--rounds``).

Part 2 (``--big`` int32 lengths memory-mapped from a ``.npy`` in a temporary folder, written
first): the histogram planner's build (items per second), an epoch's order and 1,000 batches
served; anonymous resident memory (``RssAnon``) at its peak over the run, sampled every 50 ms
(the file's pages are the page cache's, not the process's). ``--big 0`` skips it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _common import lognormal_lengths

import padless
from padless.epochs.histogram import HistogramEpochs
from padless.planners.histogram import HistogramPlanner


def _anon_kb() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


class PeakAnon:
    """The peak of ``RssAnon`` while the block runs, sampled every 50 ms."""

    def __enter__(self) -> PeakAnon:
        self.peak = _anon_kb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, _anon_kb())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _anon_kb())


def quality(size: int, rounds: int) -> None:
    lengths = lognormal_lengths(size, seed=3)
    spec = padless.TokenBudget(max_tokens=4096)
    whole = padless.PlanSampler(lengths, spec, seed=1)
    windowed = padless.PlanSampler(lengths, spec, seed=1, window=1_000_000)
    t_plan = t_build = t_epoch = float("inf")
    for r in range(rounds):
        t0 = time.perf_counter()
        whole.planner.plan(1, r)
        t_plan = min(t_plan, time.perf_counter() - t0)
        t0 = time.perf_counter()
        planner = HistogramPlanner(spec, lengths)
        t_build = min(t_build, time.perf_counter() - t0)
        epochs = HistogramEpochs(planner, shuffle=True, seed=1, balance=False)
        t0 = time.perf_counter()
        epochs.at(r, (), 1, ()).batch_at(0)
        t_epoch = min(t_epoch, time.perf_counter() - t0)
    hist = padless.PlanSampler(lengths, spec, seed=1, window="histogram")
    rows = [
        ("global (window=None)", whole.stats()),
        ("windows of 1e6", windowed.stats()),
        ('window="histogram"', hist.stats()),
    ]
    print(f"padding at max_tokens=4096, {size:,} lognormal lengths")
    for name, figures in rows:
        print(
            f"  {name:24s} {figures['padding_fraction'] * 100:.5f} %  {figures['batches']:,} batches"
        )
    same = rows[0][1]["padding_fraction"] == rows[2][1]["padding_fraction"]
    print(f"  histogram == global: {same}")
    print(
        f"time: one global plan {t_plan * 1e3:.1f} ms; histogram build (once) {t_build * 1e3:.1f} ms "
        f"(x{t_build / t_plan:.2f}); an epoch's order + first batch {t_epoch * 1e3:.1f} ms "
        f"(x{t_epoch / t_plan:.3f})"
    )


def big(n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="padless-bench-") as tmp:
        path = Path(tmp) / "lengths.npy"
        t0 = time.perf_counter()
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int32, shape=(n,))
        step = 1 << 24
        for lo in range(0, n, step):
            hi = min(lo + step, n)
            out[lo:hi] = lognormal_lengths(hi - lo, seed=lo // step)
        out.flush()
        del out
        print(
            f"\n{n:,} int32 lengths memory-mapped ({os.path.getsize(path) / 2**30:.1f} GiB, "
            f"written in {time.perf_counter() - t0:.0f} s)"
        )
        spec = padless.TokenBudget(max_tokens=4096)
        base = _anon_kb()
        with PeakAnon() as peak:
            t0 = time.perf_counter()
            sampler = padless.PlanSampler(path, spec, seed=1, window="histogram")
            t_build = time.perf_counter() - t0
            t0 = time.perf_counter()
            it = iter(sampler)
            count = 0
            for _ in range(1000):
                count += len(next(it))
            t_serve = time.perf_counter() - t0
            t0 = time.perf_counter()
            sampler.set_epoch(1)
            next(iter(sampler))
            t_epoch = time.perf_counter() - t0
            figures = sampler.stats()
        print(
            f"  build {t_build:.1f} s ({n / t_build / 1e6:.1f} M items/s, one pass for the "
            f"histogram, one for the index in a temporary file of {n * 4 / 2**30:.1f} GiB)"
        )
        print(f"  next epoch's order + first batch {t_epoch * 1e3:.0f} ms")
        print(f"  1,000 batches served ({count:,} items) in {t_serve * 1e3:.0f} ms")
        print(
            f"  padding {figures['padding_fraction'] * 100:.5f} %, {figures['batches']:,} "
            f"batches; anonymous memory peak {(peak.peak - base) / 2**20:.2f} GiB above the "
            f"start ({peak.peak / 2**20:.2f} GiB in all)"
        )
        sampler.planner.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=10_000_000)
    ap.add_argument("--big", type=int, default=1_000_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    quality(args.size, args.rounds)
    if args.big:
        big(args.big)


if __name__ == "__main__":
    main()
