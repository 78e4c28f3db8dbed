"""Benchmark padless.ray on a local Ray: lengths, windowed plans and packed datasets.

Writes two Parquet corpora to a temporary folder (``--dir`` to keep them):

- ``tokens``: ``--rows`` (1e7) rows of short token lists (1–40 int32 ids, 20.5 on average), in
  20 files: lengths with 1 and 2 Ray workers (``ray.init(num_cpus=k)``) against
  ``ds.map(lambda r: {"n": len(r["input_ids"])})`` (Python per row, on the first ``--map-rows``
  rows, 1e6) and against pyarrow reading the same column in one process;
  ``padless.ray.plan`` of those lengths against ``padless.plan_windows`` in this process;
- ``docs``: ``--pack-docs`` (1e6) documents of lognormal lengths (median 200 tokens, capped at
  16384): ``padless.ray.pack`` at capacity 4096 with windows of 10,000 documents and TRL-style
  windows of 1,000 (packing efficiency and time), with carry-over (the default) and without
  (``carry=False``), and the same windows packed in this process by ``padless.ray.pack_table``;
- ``carry-*``: ``--carry-docs`` (60,000) long-tailed documents of three kinds (see
  :func:`carry_corpora`; token ids unique, each its position in the corpus) for carry-over at
  capacity 2048, windows of 1,000 and 10,000: efficiency before (each window on its own) and
  after, the share of tokens carried, tokens conserved (their count and two sums of the ids mod
  2**64, taken on the cluster), and the time against ``carry=False`` in the same process.
  ``--carry-only`` runs this part alone.

Every Ray figure is a warm run (best of ``--repeat``; the first job of a fresh Ray, which starts
its worker processes, is timed apart as "cold"). The last part turns the measured per-core rates
into an estimate for ``--docs-total`` (1e10) documents on ``--nodes`` (16) nodes of
``--cores`` (32) cores.

Run: ``python benchmarks/bench_ray.py [--rows N] [--pack-docs N] [--carry-docs N] [--carry-only]
[--repeat R] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import padless
import padless.ray as pray

VOCAB = 50257
CAPACITY = 4096


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def write_lists(
    folder: Path, lengths: np.ndarray, files: int, seed: int, unique: bool = False
) -> None:
    """Parquet files of token lists of the given lengths, ``files`` of them: random ids, or
    (``unique``) every id its position in the corpus."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    cuts = np.linspace(0, lengths.size, files + 1).astype(np.int64)
    first = 0
    for f in range(files):
        part = lengths[cuts[f] : cuts[f + 1]]
        off = np.zeros(part.size + 1, np.int64)
        np.cumsum(part, out=off[1:])
        if unique:
            values = pa.array(np.arange(first, first + int(off[-1]), dtype=np.int32))
            first += int(off[-1])
        else:
            values = pa.array(rng.integers(0, VOCAB, int(off[-1]), dtype=np.int32))
        column = pa.ListArray.from_arrays(pa.array(off.astype(np.int32)), values)
        pq.write_table(pa.table({"input_ids": column}), folder / f"part-{f:03d}.parquet")


def best(fn, repeat: int) -> tuple[float, object]:
    out, t_best = None, float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        t_best = min(t_best, time.perf_counter() - t0)
    return t_best, out


def pyarrow_lengths(files: list[Path], threads: bool = True) -> np.ndarray:
    parts = []
    for f in files:
        col = pq.read_table(f, columns=["input_ids"], use_threads=threads).column(0)
        parts.append(pc.list_value_length(col).to_numpy().astype(np.int32))
    return np.concatenate(parts)


def read_only(ray, folder: Path) -> int:
    """Rows Ray reads from the Parquet files, with a map that keeps nothing of them."""

    def count(t: pa.Table) -> pa.Table:
        return pa.table({"n": [t.num_rows]})

    ds = ray.data.read_parquet(str(folder)).map_batches(count, batch_size=None,
                                                         batch_format="pyarrow")  # fmt: skip
    return sum(int(b["n"].sum()) for b in ds.iter_batches(batch_size=None, batch_format="numpy"))


def map_per_row(ray, files: list[Path]) -> int:
    ds = ray.data.read_parquet([str(f) for f in files])
    counted = ds.map(lambda r: {"n": len(r["input_ids"])})
    return sum(
        int(b["n"].size) for b in counted.iter_batches(batch_size=None, batch_format="numpy")
    )


def pack_figures(
    ray, folder: Path, window: int, seed: int, *, capacity: int = CAPACITY, carry: bool = True
) -> tuple[int, int, int, int]:
    """(rows, tokens, Σ ids, Σ ids²) of padless.ray.pack, counted on the cluster (nothing large
    to the driver); the sums are mod 2**64, a check that no token id is lost or repeated."""
    spec = padless.Packing(capacity=capacity, oversize="split")
    packed = pray.pack(ray.data.read_parquet(str(folder)), spec, column="input_ids",
                       window=window, seed=seed, carry=carry)  # fmt: skip

    def count(t: pa.Table) -> pa.Table:
        col = t.column("input_ids").combine_chunks()
        ids = col.values.to_numpy(zero_copy_only=False).astype(np.uint64)
        lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
        assert lengths.size == 0 or int(lengths.max()) <= capacity
        with np.errstate(over="ignore"):
            sums = [int(ids.sum(dtype=np.uint64)), int((ids * ids).sum(dtype=np.uint64))]
        return pa.table({"rows": [t.num_rows], "tokens": [int(ids.size)],
                         "s1": pa.array([sums[0]], pa.uint64()),
                         "s2": pa.array([sums[1]], pa.uint64())})  # fmt: skip

    sums = packed.map_batches(count, batch_size=None, batch_format="pyarrow")
    rows = tokens = s1 = s2 = 0
    for b in sums.iter_batches(batch_size=None, batch_format="numpy"):
        rows += int(b["rows"].sum())
        tokens += int(b["tokens"].sum())
        s1 = (s1 + sum(int(x) for x in b["s1"])) % (1 << 64)
        s2 = (s2 + sum(int(x) for x in b["s2"])) % (1 << 64)
    return rows, tokens, s1, s2


def id_sums(total: int) -> tuple[int, int]:
    """(Σ ids, Σ ids²) mod 2**64 of the token ids 0 … total - 1."""
    ids = np.arange(total, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return int(ids.sum(dtype=np.uint64)), int((ids * ids).sum(dtype=np.uint64))


def pack_memory(folder: Path, window: int) -> tuple[int, int, int]:
    """(input bytes, peak numpy bytes allocated, output bytes) of pack_table on one window."""
    import tracemalloc

    spec = padless.Packing(capacity=CAPACITY, oversize="split")
    part = pq.read_table(sorted(folder.glob("*.parquet"))[0], columns=["input_ids"])
    part = part.slice(0, window).combine_chunks()
    pray.pack_table(part, spec, column="input_ids")  # compile first
    tracemalloc.start()
    out = pray.pack_table(part, spec, column="input_ids")
    numpy_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return part.nbytes, numpy_peak, out.nbytes


def in_process_pack(
    folder: Path, window: int, seed: int, capacity: int = CAPACITY
) -> tuple[int, int, float]:
    """(rows, tokens, seconds of pack_table alone) over windows of consecutive documents: each
    window on its own, as padless.ray.pack did before carry-over (``carry=False``)."""
    spec = padless.Packing(capacity=capacity, oversize="split")
    table = pq.read_table(folder, columns=["input_ids"])
    rows = tokens = 0
    spent = 0.0
    for lo in range(0, table.num_rows, window):
        part = table.slice(lo, window)
        t0 = time.perf_counter()
        out = pray.pack_table(part, spec, column="input_ids", seed=seed)
        spent += time.perf_counter() - t0
        rows += out.num_rows
        tokens += int(pc.sum(pc.list_value_length(out.column("input_ids"))).as_py() or 0)
    return rows, tokens, spent


CARRY_CAPACITY = 2048


def carry_corpora(n: int) -> dict[str, np.ndarray]:
    """Long-tailed document lengths, ``n`` of each kind, made deterministically:

    - ``lognormal``: lognormal lengths, median 600 tokens, sigma 1.0, capped at 8192 (a heavy
      tail: mean ≈ 970, 0.4 % at the cap);
    - ``bible``: documents of k consecutive verses of the built-in corpus (the ``en``, ``es``
      and ``en_web`` SentencePiece lengths of /work/shared/data/bible-en-es.lengths.npz, one
      after the other, repeated as needed), k = ⌈lognormal(median 12, sigma 1.3)⌉, each
      document the sum of its verses' real lengths, cut at 8192;
    - ``lognormal, no short documents``: the lognormal lengths raised to at least 100 (a corpus
      filtered of short documents: little to close rows' last gaps with, so even one plan of
      all the lengths leaves 0.07 % empty).
    """
    rng = np.random.default_rng(30)
    lognormal = np.minimum(rng.lognormal(np.log(600.0), 1.0, n).astype(np.int64) + 1, 8192)
    out = {"lognormal": lognormal}
    path = Path(padless.__file__).parent / "data" / "bible-en-es.lengths.npz"
    if not path.exists():
        path = Path("/work/shared/data/bible-en-es.lengths.npz")
    if path.exists():
        with np.load(path) as z:
            verses = np.concatenate([z["en"], z["es"], z["en_web"]]).astype(np.int64)
        k = np.ceil(np.random.default_rng(31).lognormal(np.log(12.0), 1.3, n)).astype(np.int64)
        reps = int(k.sum()) // verses.size + 1
        ends = np.zeros(verses.size * reps + 1, np.int64)
        np.cumsum(np.tile(verses, reps), out=ends[1:])
        stop = np.cumsum(k)
        out["bible"] = np.minimum(ends[stop] - ends[stop - k], 8192)
    out["lognormal, no short documents"] = np.maximum(lognormal, 100)
    return out


def carry_section(ray, root: Path, docs: int, repeat: int) -> None:
    """padless.ray.pack with carry-over against each window on its own (before), at capacity
    2048, windows of 1,000 and 10,000 documents, on the long-tailed corpora above."""
    cap = CARRY_CAPACITY
    print(f"\ncarry-over: padless.ray.pack of {docs:,} long-tailed documents, capacity {cap}, "
          f'oversize="split" (2 Ray workers, load average {load()}); before = each window on '
          "its own (pack_table per window, what pack did before; carry=False), after = the "
          "under-filled rows' entries repacked in blocks (carry=True):\n")  # fmt: skip
    print(
        "| corpus | windows | one plan of all | before: efficiency | after: efficiency | "
        "carried tokens | tokens conserved | after, s | carry=False, s | time ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for name, lengths in carry_corpora(docs).items():
        folder = root / ("carry-" + name.replace(",", "").replace(" ", "-"))
        if not folder.exists():
            write_lists(folder, lengths, 10, seed=5, unique=True)
        total = int(lengths.sum())
        want = id_sums(total)
        one = padless.plan_packing(lengths, capacity=cap, oversize="split").num_rows
        for window in (1_000, 10_000):
            rows_b, tok_b, _ = in_process_pack(folder, window, 0, capacity=cap)
            t_new, (rows, tok, s1, s2) = best(
                lambda w=window, f=folder: pack_figures(ray, f, w, 0, capacity=cap), repeat
            )
            t_old, (rows_o, tok_o, *_) = best(
                lambda w=window, f=folder: pack_figures(ray, f, w, 0, capacity=cap, carry=False),
                repeat,
            )
            assert rows_o == rows_b and tok_o == tok_b == total
            conserved = tok == total and (s1, s2) == want
            assert conserved, (name, window, tok, total)
            carried = carried_share(folder, window, cap)
            print(f"| {name} | {window:,} | {total / (one * cap):.5f} | "
                  f"{total / (rows_b * cap):.5f} | **{total / (rows * cap):.5f}** | "
                  f"{carried:.1%} | {conserved} ({tok:,}) | {t_new:.1f} | {t_old:.1f} | "
                  f"{t_new / t_old:.2f} |")  # fmt: skip


def carried_share(folder: Path, window: int, capacity: int) -> float:
    """The share of the tokens carry-over moves out of their windows (the rule, in process)."""
    from padless.ray._pack import CARRY_SLACK

    spec = padless.Packing(capacity=capacity, oversize="split")
    table = pq.read_table(folder, columns=["input_ids"])
    moved = 0
    for lo in range(0, table.num_rows, window):
        rows = pray.pack_table(table.slice(lo, window), spec, column="input_ids")
        n = pc.list_value_length(rows.column("input_ids")).to_numpy(zero_copy_only=False)
        moved += int(n[capacity - n > capacity // CARRY_SLACK].sum())
    return moved / max(1, int(pc.sum(pc.list_value_length(table.column(0))).as_py() or 0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--map-rows", type=int, default=1_000_000)
    ap.add_argument("--pack-docs", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--docs-total", type=float, default=1e10)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--cores", type=int, default=32)
    ap.add_argument("--carry-docs", type=int, default=60_000)
    ap.add_argument("--carry-only", action="store_true", help="run the carry-over part alone")
    args = ap.parse_args()

    import ray

    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench_ray_"))
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; ray {ray.__version__}, "
          f"pyarrow {pa.__version__}; load average {load()}")  # fmt: skip
    if args.carry_only:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        ray.data.DataContext.get_current().enable_progress_bars = False
        carry_section(ray, root, args.carry_docs, args.repeat)
        ray.shutdown()
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
        return

    # ------------------------------------------------------------------ corpora
    tokens_dir, docs_dir = root / "tokens", root / "docs"
    files = 20
    lengths = np.random.default_rng(1).integers(1, 41, args.rows).astype(np.int32)
    t0 = time.perf_counter()
    if not tokens_dir.exists():
        write_lists(tokens_dir, lengths, files, seed=2)
    doc_lengths = (
        np.minimum(
            np.random.default_rng(3).lognormal(np.log(200.0), 1.0, args.pack_docs), 16384
        ).astype(np.int64)
        + 1
    )
    if not docs_dir.exists():
        write_lists(docs_dir, doc_lengths, 10, seed=4)
    paths = sorted(tokens_dir.glob("*.parquet"))
    size = sum(p.stat().st_size for p in paths)
    print(f"tokens corpus: {args.rows:,} rows, {int(lengths.sum()):,} tokens, {files} files, "
          f"{size / 1e6:,.0f} MB; docs corpus: {args.pack_docs:,} documents, "
          f"{int(doc_lengths.sum()):,} tokens (mean {doc_lengths.mean():.0f}); written in "
          f"{time.perf_counter() - t0:.1f} s")  # fmt: skip

    # ------------------------------------------------------------------ pyarrow, one process
    c0 = cpu_seconds()
    t_pa, got = best(lambda: pyarrow_lengths(paths), args.repeat)
    assert np.array_equal(got, lengths)
    print(f"\npyarrow in one process (read_table + list_value_length, pyarrow's threads): "
          f"{t_pa:.2f} s = {args.rows / t_pa / 1e6:.2f} M rows/s "
          f"(CPU {(cpu_seconds() - c0) / args.repeat:.2f} s per run)")  # fmt: skip
    t_pa1, _ = best(lambda: pyarrow_lengths(paths, threads=False), args.repeat)
    print(f"pyarrow in one process, one thread: {t_pa1:.2f} s = "
          f"{args.rows / t_pa1 / 1e6:.2f} M rows/s")  # fmt: skip
    map_files = paths[: max(1, round(files * args.map_rows / args.rows))]
    map_rows = int(sum(pq.read_metadata(p).num_rows for p in map_files))

    rates: dict[str, float] = {}
    lines = []
    for workers in (1, 2):
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                 logging_level="ERROR")  # fmt: skip
        ray.data.DataContext.get_current().enable_progress_bars = False
        out = root / "lengths.npy"

        def run(out: Path = out) -> np.ndarray:
            return pray.lengths(ray.data.read_parquet(str(tokens_dir)), column="input_ids", out=out)

        t0 = time.perf_counter()
        run()
        cold = time.perf_counter() - t0
        t_pl, got = best(run, args.repeat)
        assert np.array_equal(got, lengths)
        t_map, n = best(lambda: map_per_row(ray, map_files), 1)
        assert n == map_rows
        t_read, n = best(lambda: read_only(ray, tokens_dir), args.repeat)
        assert n == args.rows
        r_pl, r_map = args.rows / t_pl, map_rows / t_map
        rates[f"lengths{workers}"] = r_pl
        lines.append(
            f"| {workers} | {cold:.1f} | {t_pl:.2f} | {r_pl / 1e6:.2f} M | {r_map / 1e3:.1f} k "
            f"| **{r_pl / r_map:.0f}×** | {r_pl / (args.rows / t_pa):.2f} | {t_read:.2f} |"
        )
        if workers == 2:
            break
        ray.shutdown()
    print(f"\nlengths of {args.rows:,} token-list rows (ds.map per row on the first "
          f"{map_rows:,}; load average now {load()}):\n")  # fmt: skip
    print(
        "| Ray workers | cold first run, s | padless.ray.lengths, s | rows/s | ds.map per row, "
        "rows/s | ratio to ds.map | ratio to pyarrow in one process | Ray reading the column "
        "alone (no-op map_batches), s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(lines))

    # ------------------------------------------------------------------ windowed plans
    lengths_path = root / "lengths.npy"
    print(f"\nwindowed plans of the {args.rows:,} lengths, window 1e6 (2 Ray workers, "
          f"load average {load()}):\n")  # fmt: skip
    print(
        "| spec | padless.ray.plan (2 tasks/CPU), s | plan_windows in this process, "
        "2 threads, s | identical |"
    )
    print("|---|---:|---:|---|")
    for name, spec in (("token budget 4096", padless.TokenBudget(max_tokens=4096)),
                       ("packing 4096", padless.Packing(capacity=4096))):  # fmt: skip
        mapped = np.load(lengths_path, mmap_mode="r")
        t_local, ref = best(
            lambda spec=spec, mapped=mapped: list(
                padless.plan_windows(mapped, spec, window=1_000_000, seed=1, threads=2)
            ),
            args.repeat,
        )
        t_ray, files_ = best(
            lambda spec=spec: pray.plan(
                lengths_path, spec, window=1_000_000, seed=1, out=root / "plan", tasks=4
            ),  # fmt: skip
            args.repeat,
        )
        same = all(a == b for a, b in zip(files_, ref, strict=True))
        rates[f"plan {name}"] = args.rows / t_ray
        print(f"| {name} | {t_ray:.2f} ({args.rows / t_ray / 1e6:.1f} M items/s) | "
              f"{t_local:.2f} ({args.rows / t_local / 1e6:.1f} M items/s) | {same} |")  # fmt: skip
    t0 = time.perf_counter()
    from padless.planners.windows import WindowedPlanner

    WindowedPlanner(padless.TokenBudget(max_tokens=4096), lengths_path, 1_000_000)
    check = time.perf_counter() - t0
    rates["check"] = args.rows / check
    print(
        f"\ndriver's checking pass over the mapped lengths: {check:.2f} s "
        f"({args.rows / check / 1e6:.0f} M lengths/s)"
    )

    # ------------------------------------------------------------------ packed datasets
    total = int(doc_lengths.sum())
    best_rows = padless.plan_packing(doc_lengths, capacity=CAPACITY, oversize="split").num_rows
    print(
        f"\npack of {args.pack_docs:,} documents ({total:,} tokens), capacity {CAPACITY}, "
        f'oversize="split" (2 Ray workers, load average {load()}); one global plan of all '
        f"the lengths: efficiency {total / (best_rows * CAPACITY):.5f}\n"
    )
    print(
        "| windows | padless.ray.pack, s | docs/s | tokens/s | rows | efficiency | "
        "carry=False (each window on its own), s | its efficiency | pack_table in this process "
        "(packing alone, each window on its own), s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for window, label in ((10_000, "10,000 documents"), (1_000, "1,000 (TRL-style)")):
        t_pack, (rows, tok, *_) = best(
            lambda window=window: pack_figures(ray, docs_dir, window, 0), args.repeat
        )
        t_old, (rows_o, tok_o, *_) = best(
            lambda window=window: pack_figures(ray, docs_dir, window, 0, carry=False), args.repeat
        )
        rows_l, tok_l, spent = in_process_pack(docs_dir, window, 0)
        assert tok == tok_o == tok_l == total and rows_o == rows_l
        rates[f"pack{window}"] = args.pack_docs / t_pack
        rates[f"pack_tokens{window}"] = total / t_pack
        print(f"| {label} | {t_pack:.1f} | {args.pack_docs / t_pack / 1e3:.0f} k | "
              f"{total / t_pack / 1e6:.1f} M | {rows:,} | **{tok / (rows * CAPACITY):.5f}** | "
              f"{t_old:.1f} | {tok / (rows_o * CAPACITY):.5f} | {spent:.1f} |")  # fmt: skip
    carry_section(ray, root, args.carry_docs, args.repeat)
    ray.shutdown()

    # ------------------------------------------------------------------ on paper
    in_bytes, numpy_peak, out_bytes = pack_memory(docs_dir, 10_000)
    print(f"\npack_table of one window of 10,000 documents: input {in_bytes / 1e6:.0f} MB, "
          f"output {out_bytes / 1e6:.0f} MB, numpy peak {numpy_peak / 1e6:.0f} MB (the output's "
          "arrays, which Arrow wraps)")  # fmt: skip
    cores = args.nodes * args.cores
    n = args.docs_total
    mean_tokens = total / args.pack_docs
    tokens = n * mean_tokens
    row_tokens = float(lengths.mean())
    # per core and per token: the 2-worker runs ÷ 2 (lengths read every token id of the column)
    lengths_tok = rates["lengths2"] * row_tokens / 2
    pack_tok = rates["pack_tokens10000"] / 2
    plan_items = rates["plan packing 4096"] / 2
    print(f"\non paper: {n:.0e} documents of {mean_tokens:.0f} tokens on average "
          f"({tokens:.1e} tokens, {tokens * 4 / 1e12:,.0f} TB of int32 ids) on {args.nodes} nodes "
          f"× {args.cores} cores = {cores} cores, from the per-core rates above (2-worker runs ÷ "
          "2), scaling linearly, storage keeping up:\n")  # fmt: skip
    print("| step | per-core rate (measured here) | cluster wall time | read per node |")
    print("|---|---:|---:|---:|")
    per_node_tb = tokens * 4 / args.nodes / 1e12
    print(f"| lengths (token column, Arrow offsets) | {lengths_tok / 1e6:.0f} M tokens/s | "
          f"{tokens / (lengths_tok * cores) / 60:.0f} min | {per_node_tb:.2f} TB |")  # fmt: skip
    print(f"| plan, packing 4096, window 1e6 | {plan_items / 1e6:.0f} M lengths/s | "
          f"{n / (plan_items * cores):.0f} s (+ driver's check, {n / rates['check']:.0f} s) | "
          f"{n * 4 / args.nodes / 1e9:.1f} GB |")  # fmt: skip
    print(f"| pack, windows of 10,000 | {pack_tok / 1e6:.0f} M tokens/s | "
          f"{tokens / (pack_tok * cores) / 60:.0f} min | {per_node_tb:.2f} TB |")  # fmt: skip
    print(
        f"\ndriver of lengths: {n * 8 / 1e9:,.0f} GB in (8 B/row), {n * 4 / 1e9:,.0f} GB "
        "written (4 B/row), O(block) memory"
    )
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
