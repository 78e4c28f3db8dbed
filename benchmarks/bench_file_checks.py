"""What the token stores' file checks cost (issue 39): the shrink check per item and per batch,
the identity an offsets cache is keyed on, and the passes that tell an index's format and check
the lengths ``lengths_of`` returns.

1. **Shrink check**: ``Watch.check()`` alone (an ``os.lseek``; ``os.fstat`` beside it), then
   ``IndexedDataset[i]``, ``RawTokens[i]``, ``TokenDataset[i]`` and
   ``TokenDataset.__getitems__`` of a padded batch of ``--batch`` items, each with its check and with the check switched off on the same object (its watches'
   ``check`` replaced by a no-op), best of ``--rounds`` rounds of ``--calls`` calls; the
   overhead is the difference per call (on a busy machine, within its noise: the first line is
   the figure to trust).
2. **Cache identity**: ``padless.io._files.identity_of`` of a ``--tokens``-token uint16 file (an
   fstat and 16 blocks of 64 KiB hashed) against a whole ``RawTokens`` open that reuses the
   cache, and against the same open without cache (the compiled eos pass).
3. **Index passes**: a Megatron index of ``--sequences`` sequences (sparse ``.bin``): the open
   (O(1)) against ``lengths_of(Path(idx))`` (the open and one chunked pass over lengths and
   pointers); a fairseq index of as many sequences, whose open is that pass (its format is told
   by its pointers).

Run: ``python benchmarks/bench_file_checks.py [--sequences 10000000] [--tokens 100000000]
[--calls 20000] [--batch 32] [--rounds 5]``. Files go to a temporary folder, deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import best_in_rounds, best_of  # noqa: E402

import padless  # noqa: E402
from padless.io import _files  # noqa: E402
from padless.io.indexed import IndexedDataset, write_indexed  # noqa: E402
from padless.io.tokens import RawTokens  # noqa: E402
from padless.torch import TokenDataset  # noqa: E402


def _switch(watches: list[_files.Watch], on: bool) -> None:
    """Turn the watches' check on (the class's) or off (a no-op on the instance)."""
    for watch in watches:
        if on:
            watch.__dict__.pop("check", None)
        else:
            watch.check = lambda: None  # type: ignore[method-assign]


def bench_shrink(root: Path, calls: int, batch: int, rounds: int) -> None:
    rng = np.random.default_rng(0)
    docs = [rng.integers(1, 50_000, int(k), dtype=np.uint16) for k in rng.integers(1, 600, 2000)]
    for d in docs:
        d[-1] = 0
    write_indexed(docs, root / "c", dtype="uint16")
    np.concatenate(docs).tofile(root / "raw.bin")
    items = rng.integers(0, len(docs), (calls, batch))
    ds = IndexedDataset(root / "c")
    raw = RawTokens(root / "raw.bin", dtype="uint16", eos=0, cache=False)
    token = TokenDataset(IndexedDataset(root / "c"))
    served = {
        "IndexedDataset[i]": (ds.__getitem__, [ds._idx, ds._bin], False),
        "RawTokens[i]": (raw.__getitem__, [raw._watch], False),
        "TokenDataset[i] (raw)": (TokenDataset(raw).__getitem__, [raw._watch], False),
        f"TokenDataset batch of {batch}": (
            token.__getitems__,
            [token.store._idx, token.store._bin],
            True,
        ),
    }

    def loop(name: str, on: bool) -> None:
        fn, watches, batched = served[name]
        _switch(watches, on)
        for row in items:
            fn(row if batched else int(row[0]))

    fd = os.open(root / "c.bin", os.O_RDONLY)

    def fstats() -> None:
        for _ in range(calls):
            os.fstat(fd)

    def checks() -> None:
        _switch([ds._bin], True)
        for _ in range(calls):
            ds._bin.check()

    fns = {"fstat": fstats, "check": checks}
    for name in served:
        fns[name] = lambda n=name: loop(n, True)
        fns[name + " (unchecked)"] = lambda n=name: loop(n, False)
    best = best_in_rounds(fns, rounds)
    os.close(fd)
    print(
        f"Watch.check(): {best['check'] / calls * 1e6:.2f} µs per call "
        f"(os.fstat: {best['fstat'] / calls * 1e6:.2f} µs)"
    )
    for name in served:
        on, off = best[name] / calls * 1e6, best[name + " (unchecked)"] / calls * 1e6
        print(
            f"{name}: {on:.2f} µs per call checked, {off:.2f} µs unchecked: "
            f"+{on - off:.2f} µs ({(on - off) / off:+.1%})"
        )


def bench_identity(root: Path, tokens: int) -> None:
    path = root / "tokens.bin"
    rng = np.random.default_rng(1)
    with open(path, "wb") as fh:
        for lo in range(0, tokens, 1 << 24):
            part = rng.integers(1, 50_000, min(1 << 24, tokens - lo), dtype=np.uint16)
            part[::600] = 0
            fh.write(part.tobytes())
    RawTokens(path, dtype="uint16", eos=0)  # writes the cache
    fd = os.open(path, os.O_RDONLY)
    t_id = best_of(lambda: _files.identity_of(fd), 5)
    os.close(fd)
    t_cached = best_of(lambda: RawTokens(path, dtype="uint16", eos=0), 5)
    t_pass = best_of(lambda: RawTokens(path, dtype="uint16", eos=0, cache=False), 3)
    print(
        f"identity of a {tokens:.0e}-token file ({path.stat().st_size / 2**20:.0f} MiB): "
        f"{t_id * 1e3:.2f} ms; RawTokens open reusing its cache {t_cached * 1e3:.2f} ms; "
        f"without cache (eos pass) {t_pass * 1e3:.1f} ms"
    )


def _write_index(path: Path, n: int, fmt: str) -> None:
    lengths = np.random.default_rng(2).integers(1, 2048, n, dtype=np.int32)
    ptr = np.zeros(n, np.int64)
    np.cumsum(lengths[:-1].astype(np.int64) * 2, out=ptr[1:])
    end = int(ptr[-1]) + 2 * int(lengths[-1])
    with open(path, "wb") as fh:
        fh.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQ", 1, 8, n))
        if fmt == "megatron":
            fh.write(struct.pack("<Q", n + 1))
        fh.write(lengths.tobytes())
        fh.write(ptr.tobytes())
        if fmt == "megatron":
            fh.write(np.arange(n + 1, dtype=np.int64).tobytes())
    with open(path.with_suffix(".bin"), "wb") as fh:
        fh.truncate(end)


def bench_index(root: Path, n: int) -> None:
    meg, fair = root / "m.idx", root / "f.idx"
    _write_index(meg, n, "megatron")
    _write_index(fair, n, "fairseq")
    t_open = best_of(lambda: IndexedDataset(meg), 5)
    t_lengths = best_of(lambda: padless.lengths_of(meg), 3)
    t_fair = best_of(lambda: IndexedDataset(fair), 3)
    print(
        f"{n:.0e} sequences: Megatron open {t_open * 1e3:.2f} ms, lengths_of(Path(idx)) "
        f"{t_lengths * 1e3:.0f} ms ({n / t_lengths / 1e6:.0f} M sequences/s checked); "
        f"fairseq open {t_fair * 1e3:.0f} ms ({n / t_fair / 1e6:.0f} M sequences/s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequences", type=int, default=10_000_000)
    parser.add_argument("--tokens", type=int, default=100_000_000)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="padless-bench-checks-"))
    try:
        t0 = time.perf_counter()
        bench_shrink(root, args.calls, args.batch, args.rounds)
        bench_identity(root, args.tokens)
        bench_index(root, args.sequences)
        print(f"({time.perf_counter() - t0:.0f} s in all)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
