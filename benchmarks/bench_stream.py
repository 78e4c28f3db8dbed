"""Benchmark LMStream: output bandwidth against memcpy, out_dtype, resident memory, lists-of-lists.

Generates a uint16 token file (1e9 tokens = 2 GB; ``--quick``: 2e7) in a temporary directory and
runs full passes with B=32, T=1024 in both modes. Figures:

- output bytes/s (x and y, 2·B·T·itemsize per batch) as a ratio to ``np.copyto`` of a 1 GiB int64
  array (``--quick``: 128 MiB), best of several runs, on the same machine. Two consumers: "hot"
  drops each batch before the next (malloc hands the same cache-resident buffers back, as in a
  training loop that copies each batch to the GPU), "cold" keeps the last 128 batches alive
  (64 MB at int64) so that every batch is written to fresh memory (DRAM-bound, like memcpy);
- the same for ``out_dtype`` int32 and uint16;
- the first pass over a fresh mapping with and without ``MAP_POPULATE``, page cache warm (minor
  faults only) and cold (this file's pages evicted with ``posix_fadvise(DONTNEED)``);
- anonymous resident memory growth (RssAnon) over a full pass, and the file pages mapped (RssFile);
- throughput against a straightforward lists-of-lists implementation of both schemes on a 1e7-token
  corpus (``--quick``: 1e6).

Run: ``python benchmarks/bench_stream.py [--quick] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator

import numpy as np

from padless import _kernels as K
from padless.streams.lm import LMStream

B, T = 32, 1024


# --------------------------------------------------------------------------- helpers


def proc_status() -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of this process in bytes (Linux)."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    return out


def write_corpus(path: str, n_tokens: int, vocab: int = 50257, chunk: int = 50_000_000) -> None:
    rng = np.random.default_rng(0)
    with open(path, "wb") as fh:
        for start in range(0, n_tokens, chunk):
            size = min(chunk, n_tokens - start)
            rng.integers(0, vocab, size, dtype=np.uint16).tofile(fh)


def evict(path: str) -> None:
    """Drop this file's pages from the page cache (only this file; needs no privileges)."""
    gc.collect()  # unmap arrays of streams that were deleted
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def memcpy_bandwidth(nbytes: int, repeats: int = 5) -> float:
    """Best bytes/s of np.copyto over an int64 array of ``nbytes`` (bytes written per second)."""
    src = np.ones(nbytes // 8, dtype=np.int64)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best


def full_pass(stream: LMStream, keep: int = 0, sample_rss: bool = False) -> dict[str, float]:
    """Time one full pass; ``keep`` batches stay alive (cold consumer)."""
    kept: deque = deque(maxlen=keep) if keep else deque(maxlen=1)
    nbytes = 0
    batches = 0
    peak_anon = proc_status()["RssAnon"] if sample_rss else 0
    t0 = time.perf_counter()
    for x, y in stream:
        nbytes += x.nbytes + y.nbytes
        batches += 1
        if keep:
            kept.append((x, y))
        if sample_rss and batches % 512 == 0:
            peak_anon = max(peak_anon, proc_status()["RssAnon"])
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "bytes": nbytes, "batches": batches, "peak_anon": peak_anon}


# --------------------------------------------------------------------------- baseline


def lists_random(corpus: list[int], batch_size: int, num_steps: int, seed: int) -> Iterator:
    """Random-offset scheme with Python lists: shuffle start positions, slice lists per row."""
    rnd = random.Random(seed)
    offset = rnd.randrange(num_steps)
    count = (len(corpus) - 1 - offset) // num_steps
    starts = [offset + i * num_steps for i in range(count)]
    rnd.shuffle(starts)
    for first in range(0, (count // batch_size) * batch_size, batch_size):
        rows = starts[first : first + batch_size]
        xs = [corpus[s : s + num_steps] for s in rows]
        ys = [corpus[s + 1 : s + 1 + num_steps] for s in rows]
        yield np.array(xs, dtype=np.int64), np.array(ys, dtype=np.int64)


def lists_sequential(corpus: list[int], batch_size: int, num_steps: int, seed: int) -> Iterator:
    """Sequential-partition scheme with Python lists: one list per stream, sliced per step."""
    rnd = random.Random(seed)
    offset = rnd.randrange(num_steps)
    length = (len(corpus) - 1 - offset) // batch_size
    xs_streams = [
        corpus[offset + i * length : offset + (i + 1) * length] for i in range(batch_size)
    ]
    ys_streams = [
        corpus[offset + 1 + i * length : offset + 1 + (i + 1) * length] for i in range(batch_size)
    ]
    for col in range(0, (length // num_steps) * num_steps, num_steps):
        xs = [row[col : col + num_steps] for row in xs_streams]
        ys = [row[col : col + num_steps] for row in ys_streams]
        yield np.array(xs, dtype=np.int64), np.array(ys, dtype=np.int64)


def tokens_per_second(make: Callable[[], Iterator], repeats: int = 3) -> tuple[float, int]:
    """Best tokens/s over ``repeats`` full passes of ``make()``."""
    best, tokens = 0.0, 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        tokens = 0
        for x, _ in make():
            tokens += x.size
        best = max(best, tokens / (time.perf_counter() - t0))
    return best, tokens


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument("--dir", default=None, help="where to write the token file")
    parser.add_argument("--repeat", type=int, default=3, help="full passes per row (best kept)")
    args = parser.parse_args()
    n_tokens = 20_000_000 if args.quick else 1_000_000_000
    n_small = 1_000_000 if args.quick else 10_000_000
    copy_bytes = (128 if args.quick else 1024) << 20

    print(f"# LMStream benchmark ({'quick' if args.quick else 'full'})")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = os.path.join(tmp, "tokens.u16")
        t0 = time.perf_counter()
        write_corpus(path, n_tokens)
        print(
            f"corpus: {n_tokens:.0e} uint16 tokens ({n_tokens * 2 / 1e9:.2f} GB), written in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        copy_start = memcpy_bandwidth(copy_bytes)

        # warm the kernels (compile or load from cache) on a tiny corpus
        for mode in ("random", "sequential"):
            for out in ("int64", "int32", "uint16"):
                warm = LMStream(
                    path,
                    dtype=np.uint16,
                    batch_size=2,
                    num_steps=4,
                    mode=mode,
                    out_dtype=out,
                    populate=False,
                )
                next(iter(warm))

        # cold page cache: evict this file's pages (posix_fadvise DONTNEED, nothing else touched),
        # then open + first pass, with and without MAP_POPULATE
        cold_cache = []  # (mode, populate, open seconds, pass seconds)
        for mode in ("sequential", "random"):
            for populate in (False, True):
                evict(path)
                t0 = time.perf_counter()
                fresh = LMStream(
                    path, dtype=np.uint16, batch_size=B, num_steps=T, mode=mode, populate=populate
                )
                opened = time.perf_counter() - t0
                res = full_pass(fresh)
                cold_cache.append((mode, populate, opened, res["seconds"]))
                del fresh

        rows = []  # (mode, out, consumer, batches, best seconds, bytes)
        rss_rows = []
        first_touch = []  # (mode, populate, seconds, bytes)
        for mode in ("sequential", "random"):
            for populate in (False, True):  # first pass of a fresh mapping, page cache warm
                fresh = LMStream(
                    path, dtype=np.uint16, batch_size=B, num_steps=T, mode=mode, populate=populate
                )
                res = full_pass(fresh)
                first_touch.append((mode, populate, res["seconds"], res["bytes"]))
                del fresh
            t0 = time.perf_counter()
            before_open = proc_status()
            stream = LMStream(path, dtype=np.uint16, batch_size=B, num_steps=T, mode=mode)
            opened = time.perf_counter() - t0
            after_open = proc_status()
            for out in ("int64", "int32", "uint16"):
                stream.out_dtype = np.dtype(out)
                for consumer, keep in (("hot", 0), ("cold", 128)):
                    best = float("inf")
                    for rep in range(args.repeat):
                        sample = out == "int64" and consumer == "hot" and rep == 0
                        before = proc_status()
                        res = full_pass(stream, keep=keep, sample_rss=sample)
                        best = min(best, res["seconds"])
                        if sample:
                            rss_rows.append((mode, opened, before_open, after_open, before, res))
                    rows.append((mode, out, consumer, res["batches"], best, res["bytes"]))
            del stream
        copy_end = memcpy_bandwidth(copy_bytes)
        copy = max(copy_start, copy_end)
        print(
            f"np.copyto of a {copy_bytes >> 20} MiB int64 array: {copy_start / 1e9:.2f} GB/s "
            f"before, {copy_end / 1e9:.2f} GB/s after; ratios use the faster, {copy / 1e9:.2f}\n"
        )
        print(f"best of {args.repeat} full passes per row:\n")
        print("| mode | out_dtype | consumer | batches | seconds | output GB/s | ratio to copyto |")
        print("|---|---|---|---:|---:|---:|---:|")
        for mode, out, consumer, batches, seconds, nbytes in rows:
            rate = nbytes / seconds
            print(
                f"| {mode} | {out} | {consumer} | {batches} | {seconds:.2f} | "
                f"{rate / 1e9:.2f} | {rate / copy:.2f} |"
            )
        print("\nfirst pass over a fresh mapping (int64, hot consumer):\n")
        print("| mode | populate | seconds | output GB/s | ratio to copyto |")
        print("|---|---|---:|---:|---:|")
        for mode, populate, seconds, nbytes in first_touch:
            rate = nbytes / seconds
            print(f"| {mode} | {populate} | {seconds:.2f} | {rate / 1e9:.2f} | {rate / copy:.2f} |")

        print("\ncold page cache (this file's pages evicted first): open + first pass, int64:\n")
        print("| mode | populate | open s | first pass s | total s |")
        print("|---|---|---:|---:|---:|")
        for mode, populate, opened, seconds in cold_cache:
            print(
                f"| {mode} | {populate} | {opened:.2f} | {seconds:.2f} | {opened + seconds:.2f} |"
            )

        print(
            "\n| mode | open (MAP_POPULATE) ms | RssFile after open | RssAnon growth over "
            "a full pass (peak - before) |"
        )
        print("|---|---:|---:|---:|")
        for mode, opened, before_open, after_open, before, res in rss_rows:
            mapped = after_open["RssFile"] - before_open["RssFile"]
            growth = res["peak_anon"] - before["RssAnon"]
            print(
                f"| {mode} | {opened * 1e3:.1f} | {mapped / 1e6:.0f} MB | {growth / 1e6:.1f} MB |"
            )

        # permutation cost
        keys = K.feistel_round_keys(1)
        n = n_tokens // T
        ids = np.arange(n, dtype=np.int64)
        K.feistel_permute(ids[:10], n, keys)
        t0 = time.perf_counter()
        K.feistel_permute(ids, n, keys)
        per = (time.perf_counter() - t0) / n
        print(f"\nFeistel permutation over n={n}: {per * 1e9:.0f} ns per index")

        # lists-of-lists baseline
        small_path = os.path.join(tmp, "small.u16")
        write_corpus(small_path, n_small)
        corpus = np.fromfile(small_path, dtype=np.uint16).tolist()
        print(
            f"\nlists-of-lists baseline on {n_small:.0e} tokens, B={B}, T={T} "
            "(best of 3 full passes each; the corpus is already a Python list, not timed):\n"
        )
        print("| mode | lists tokens/s | padless tokens/s | speed-up |")
        print("|---|---:|---:|---:|")
        for mode, fn in (("random", lists_random), ("sequential", lists_sequential)):
            base, base_tokens = tokens_per_second(lambda fn=fn: fn(corpus, B, T, 0))
            stream = LMStream(small_path, dtype=np.uint16, batch_size=B, num_steps=T, mode=mode)
            ours, ours_tokens = tokens_per_second(lambda stream=stream: iter(stream))
            assert abs(ours_tokens - base_tokens) <= B * T, (ours_tokens, base_tokens)
            print(f"| {mode} | {base / 1e6:.1f} M | {ours / 1e6:.1f} M | {ours / base:.0f}x |")


if __name__ == "__main__":
    main()
