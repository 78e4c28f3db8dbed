"""Windowed plans at scale: memory, speed and padding of plan_windows against global plans.

1. A memory-mapped .npy of N int32 lognormal lengths (lognormal(ln 23, 0.55) rounded, clipped to
   [1, 1024]; N = 1e9 is 4 GB), written in chunks of 1e7 if it is not there yet. For token budget
   4096 and packing at capacity 4096, windows of W items: the checking pass, the epoch's plan pass
   (every window planned, in threads) and the sampler's counting pass (``len()``), with the
   anonymous memory (RssAnon from /proc/self/status, sampled every 10 ms) above the baseline
   taken after the imports and a warm-up. Speed as items/s and as a ratio to ``np.sort`` of a
   1e7 int32 slice scaled to N (×N/1e7), timed in the same process.
2. Quality: padding of windowed token budget and packing efficiency at W = 1e6, 1e5, 1e4 against
   the global plan, on 1e7 lognormal lengths and on the built-in corpus (29,814 verses, smaller
   windows).
3. Global (non-windowed) planning memory on --global-n in-memory int32 lengths: peak resident
   memory above the loaded input (VmHWM after resetting it through /proc/self/clear_refs, each
   planner in a fresh process), as bytes per item.

Run: .venv/bin/python benchmarks/bench_windows.py [--n 1000000000] [--window 1000000]
     [--data /work/tmp_win/lengths_1e9.npy] [--threads 2] [--global-n 100000000] [--skip ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
from _common import best_of, lognormal_lengths

CHUNK = 10_000_000


def status_kib(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


class PeakAnon:
    """Highest RssAnon seen by a thread sampling /proc/self/status every 10 ms."""

    def __init__(self) -> None:
        self.base = status_kib("RssAnon")
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, status_kib("RssAnon"))
            time.sleep(0.01)

    def __enter__(self) -> PeakAnon:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, status_kib("RssAnon"))

    @property
    def above_mib(self) -> float:
        return (self.peak - self.base) / 1024


def cpu_best_of(fn: object, repeat: int) -> float:
    """Best CPU time (this thread) of ``repeat`` calls, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.thread_time()
        fn()  # type: ignore[operator]
        best = min(best, time.thread_time() - t0)
    return best


def make_data(path: str, n: int) -> None:
    """Write N int32 lognormal lengths to ``path`` in chunks (under a temporary name first)."""
    need = n * 4 + 4096
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
    if free < need * 1.1:
        raise SystemExit(
            f"{path}: {need / 1e9:.1f} GB needed, {free / 1e9:.1f} GB free; pass a smaller --n"
        )
    tmp = path + ".tmp.npy"
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.int32, shape=(n,))
    gen = np.random.default_rng(0)
    t0 = time.perf_counter()
    for lo in range(0, n, CHUNK):
        raw = gen.lognormal(np.log(23.0), 0.55, min(CHUNK, n - lo))
        out[lo : lo + raw.size] = np.clip(np.round(raw), 1, 1024)
    out.flush()
    del out
    os.replace(tmp, path)
    print(f"wrote {path}: {n:,} int32 lengths in {time.perf_counter() - t0:.0f} s")


def scale(args: argparse.Namespace) -> None:
    import padless
    from padless.planners.windows import WindowedPlanner

    if not os.path.exists(args.data):
        make_data(args.data, args.n)
    lengths = np.load(args.data, mmap_mode="r")
    n = lengths.shape[0]
    if n != args.n:
        print(f"note: {args.data} holds {n:,} lengths (not --n {args.n:,}); using them all")
    # reference: np.sort of a 1e7 int32 slice, best of 5, scaled to N
    part = np.array(lengths[: min(n, 10_000_000)])
    t_sort = best_of(lambda p=part: np.sort(p), 5) * n / part.size
    cpu_sort = cpu_best_of(lambda p=part: np.sort(p), 5) * n / part.size
    # warm-up: compiled kernels loaded from the cache (or compiled) before the baseline
    tiny = np.array(lengths[:50_000])
    specs = [padless.TokenBudget(max_tokens=4096), padless.Packing(capacity=4096)]
    for spec in specs:
        for _ in padless.plan_windows(tiny, spec, window=20_000, threads=args.threads):
            pass
        WindowedPlanner(spec, tiny, 20_000).counts(0, 0)
    del tiny, part
    print(
        f"\nN = {n:,} int32 lengths memory-mapped from {args.data} "
        f"({os.path.getsize(args.data) / 1e9:.1f} GB), window {args.window:,}, "
        f"threads {args.threads}, load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"np.sort of a 1e7 int32 slice x {n / 1e7:g}: {t_sort:.2f} s wall, {cpu_sort:.2f} s CPU "
        "(best of 5)"
    )
    for spec in specs:
        with PeakAnon() as mem:
            t0 = time.perf_counter()
            planner = WindowedPlanner(spec, lengths, args.window, threads=args.threads)
            t_check = time.perf_counter() - t0
            t0, c0 = time.perf_counter(), time.process_time()
            batches = planned = windows = 0
            for plan in planner.plans(0, 0):
                batches += len(plan)
                planned += plan.indices.size
                windows += 1
            t_plan, c_plan = time.perf_counter() - t0, time.process_time() - c0
            t0 = time.perf_counter()
            counted = int(planner.counts(0, 0).sum())
            t_count = time.perf_counter() - t0
        assert counted == batches and planned == n, (counted, batches, planned)
        print(
            f"  {spec.name:12s} check {t_check:5.1f} s | plan pass {t_plan:6.1f} s wall = "
            f"{n / t_plan / 1e6:5.1f} M items/s = {t_plan / t_sort:5.2f} x np.sort; "
            f"{c_plan:6.1f} s CPU (both threads) = {c_plan / cpu_sort:5.2f} x np.sort CPU | "
            f"count (len) {t_count:5.1f} s | RssAnon peak +{mem.above_mib:4.0f} MiB | "
            f"{windows} windows, {batches:,} batches"
        )
    restore(lengths, args)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def restore(lengths: np.ndarray, args: argparse.Namespace) -> None:
    """A windowed sampler (world size 8, rank 3) restored half way through the epoch."""
    import padless

    def make() -> padless.PlanSampler:
        spec = padless.TokenBudget(max_tokens=4096)
        return padless.PlanSampler(lengths, spec, window=args.window, world_size=8, rank=3)

    with PeakAnon() as mem:
        t0 = time.perf_counter()
        first = make()
        t_make = time.perf_counter() - t0
        t0 = time.perf_counter()
        steps = len(first)
        t_len = time.perf_counter() - t0
        t0 = time.perf_counter()
        state = first.state_dict()
        t_state = time.perf_counter() - t0
        state["position"] = steps // 2 * 8
        t0 = time.perf_counter()
        again = make()
        again.load_state_dict(state)
        left = len(again)
        batch = next(iter(again))
        t_restore = time.perf_counter() - t0
    assert left == steps - steps // 2 and batch
    print(
        f"  sampler (token budget, world 8): build {t_make:.1f} s (checking pass), len() "
        f"{t_len:.1f} s ({steps:,} steps; counting pass), first state_dict {t_state:.1f} s "
        f"(fingerprint: hash of the lengths) | restore at step {steps // 2:,} (50%) + first "
        f"batch: {t_restore:.1f} s, {len(json.dumps(state))} bytes of state | RssAnon peak "
        f"+{mem.above_mib:.0f} MiB"
    )


def quality(args: argparse.Namespace) -> None:
    import padless
    from padless.planners.windows import plan_windows

    def budget_padding(lengths: np.ndarray, plans: list) -> float:
        real = padded = 0
        for plan in plans:
            st = plan.stats(lengths)
            real += st.real_tokens
            padded += st.padded_slots
        return 1 - real / padded

    def efficiency(plans: list) -> float:
        real = sum(p.real_tokens for p in plans)
        slots = sum(p.num_rows * p.capacity for p in plans)
        return real / slots

    sets = [
        (
            "lognormal 1e7",
            lognormal_lengths(args.quality_n).astype(np.int32),
            [10**6, 10**5, 10**4],
        ),
        ("built-in en", padless.builtin_corpus("en"), [10**4, 3000, 1000]),
    ]
    budget = padless.TokenBudget(max_tokens=4096)
    packing = padless.Packing(capacity=4096)
    for name, lengths, windows in sets:
        g_pad = budget_padding(lengths, [budget.plan(lengths)])
        g_eff = packing.plan(lengths).efficiency
        print(
            f"\n{name} ({lengths.shape[0]:,} lengths): token budget 4096 padding, packing 4096 efficiency"
        )
        print(f"  global           padding {100 * g_pad:7.3f} %   efficiency {100 * g_eff:8.4f} %")
        for w in windows:
            pads = budget_padding(lengths, list(plan_windows(lengths, budget, window=w)))
            effs = efficiency(list(plan_windows(lengths, packing, window=w)))
            print(
                f"  window {w:>9,} padding {100 * pads:7.3f} % ({100 * (pads - g_pad):+.3f} pt)   "
                f"efficiency {100 * effs:8.4f} % ({100 * (effs - g_eff):+.4f} pt)"
            )


_CHILD = """
import json, sys, numpy as np, padless
def kib(k):
    for line in open('/proc/self/status'):
        if line.startswith(k + ':'):
            return int(line.split()[1])
path, n, which = sys.argv[1], int(sys.argv[2]), sys.argv[3]
plan = {'budget': lambda l: padless.plan_token_budget(l, max_tokens=4096),
        'packing': lambda l: padless.plan_packing(l, capacity=4096)}[which]
plan(np.load(path, mmap_mode='r')[:10000].astype(np.int32))  # kernels loaded
lengths = np.array(np.load(path, mmap_mode='r')[:n])  # int32 in memory
assert lengths.dtype == np.int32
base = kib('VmRSS')
open('/proc/self/clear_refs', 'w').write('5')
result = plan(lengths)
print(json.dumps({'above_kib': kib('VmHWM') - base, 'input_kib': lengths.nbytes // 1024}))
"""


def global_memory(args: argparse.Namespace) -> None:
    n = args.global_n
    if not os.path.exists(args.data):
        make_data(args.data, max(args.n, n))
    print(f"\nglobal plans of {n:,} in-memory int32 lengths: peak resident memory above the input")
    for which in ("budget", "packing"):
        t0 = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, args.data, str(n), which],
            capture_output=True,
            text=True,
            check=True,
        )
        got = json.loads(out.stdout.strip().splitlines()[-1])
        per_item = got["above_kib"] * 1024 / n
        print(
            f"  {which:8s} +{got['above_kib'] / 1024:7.0f} MiB = {per_item:5.1f} B/item "
            f"({time.perf_counter() - t0:.0f} s in a fresh process)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000_000)
    ap.add_argument("--window", type=int, default=1_000_000)
    ap.add_argument("--data", default="/work/tmp_win/lengths_1e9.npy")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quality-n", type=int, default=10_000_000)
    ap.add_argument("--global-n", type=int, default=100_000_000)
    ap.add_argument("--skip", nargs="*", default=[], choices=["scale", "quality", "global"])
    args = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.data)), exist_ok=True)
    print(f"numpy {np.__version__}, nproc {os.cpu_count()}")
    if "scale" not in args.skip:
        scale(args)
    if "quality" not in args.skip:
        quality(args)
    if "global" not in args.skip:
        global_memory(args)


if __name__ == "__main__":
    main()
