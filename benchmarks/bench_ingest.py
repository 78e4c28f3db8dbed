"""Data where it already is: opening indexed datasets, lengths of in-memory HF datasets, document
offsets of raw token files, and planned batches served from a memory-mapped ``.bin``.

Four measures, each beside a reference timed in the same process:

1. **Open an indexed dataset** of ``--sequences`` (1e8) sequences (a Megatron ``.idx`` written
   here with numpy, about 2 GB): ``padless.io.indexed.IndexedDataset`` (memory maps, no pass) and
   ``padless.lengths_of(Path(idx))`` (the same maps, and one chunked pass that checks each length
   and pointer), against reading the index's lengths and pointers into memory (``np.fromfile``,
   what a reader that loads its index does). Best of 5 opens (3 for ``lengths_of``); the memory
   added is measured too (RSS).
2. **Lengths of an in-memory ``datasets.Dataset``** of ``--rows`` (1e7) rows of token lists
   (built from an Arrow table): ``lengths_of(ds, column="input_ids")`` against the Python pass
   ``lengths_of(ds["input_ids"])`` did before (timed on ``--python-rows`` rows, scaled).
3. **Document offsets of a raw token file** of ``--tokens`` (1e9) uint16 tokens with an eos
   between documents (2 GB): the compiled pass of ``RawTokens`` (cache disabled), in GB/s,
   against ``np.flatnonzero(tokens == eos)`` on the same mapped file.
4. **Batches served** from that file: padded (8 × 4096 tokens budget, ``TokenBudget``) and
   packed (8 rows × 4096, ``Packing``) batches of its documents, tokens per second in one process
   (a DataLoader worker's view): ``TokenDataset.__getitems__`` against (a) the same batch built
   as recipes do today (items loaded one by one as tensors, then ``collate_padded`` /
   ``collate_packed``), (b) Hugging Face ``datasets`` (``__getitems__`` of an in-memory Arrow
   dataset of the same documents, sharing the mapped tokens, then ``DataCollatorWithFlattening``
   for the packed batches — a flat row, the lighter layout — and ``collate_padded`` for the padded
   ones), and (c) the memory bound, two ways: ``np.copyto`` of the batch's tokens document by
   document from the same mapped file into a buffer of the file's dtype (what any gather must
   read), and ``np.copyto`` of as many bytes as the batch padless returns holds (all its
   tensors), from the mapped file at the batch's first document (what any batch of that size
   must write). Best of ``--rounds`` rounds over the same ``--batches``
   batches.

Files go to ``--dir`` (default a temporary folder) and are deleted at the end.

Run: ``python benchmarks/bench_ingest.py [--sequences 100000000] [--rows 10000000]
[--tokens 1000000000] [--median 600] [--batches 64] [--rounds 5] [--only open,hf,eos,serve]``
(``--median``: the raw corpus' documents' median length, lognormal with sigma 1).
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
from padless.io.tokens import RawTokens  # noqa: E402

EOS = 0


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _write_megatron_index(path: Path, sequences: int) -> None:
    """A Megatron .idx of ``sequences`` uint16 sequences (one per document), written in pieces,
    and its .bin as a sparse file of the right size (an open reads none of it)."""
    step = 1 << 24
    rng = np.random.default_rng(0)
    lengths = [rng.integers(1, 2048, min(step, sequences - lo), dtype=np.int32)
               for lo in range(0, sequences, step)]  # fmt: skip
    with open(path, "wb") as fh:
        fh.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, sequences, sequences + 1))
        for part in lengths:
            fh.write(part.tobytes())
        end = 0
        for part in lengths:
            ptr = np.empty(part.size, dtype=np.int64)
            ptr[0] = end
            np.cumsum(part[:-1].astype(np.int64) * 2, out=ptr[1:])
            ptr[1:] += end
            end = int(ptr[-1]) + 2 * int(part[-1])
            fh.write(ptr.tobytes())
        for lo in range(0, sequences + 1, step):
            fh.write(np.arange(lo, min(lo + step, sequences + 1), dtype=np.int64).tobytes())
    with open(path.with_suffix(".bin"), "wb") as fh:
        fh.truncate(end)


def bench_open(root: Path, sequences: int) -> None:
    idx = root / "big_text_document.idx"
    _write_megatron_index(idx, sequences)
    size = idx.stat().st_size

    def load_index() -> None:
        with open(idx, "rb") as fh:
            fh.seek(34)
            np.fromfile(fh, dtype=np.int32, count=sequences)
            np.fromfile(fh, dtype=np.int64, count=sequences)

    from padless.io.indexed import IndexedDataset

    before = _rss()
    t_open = best_of(lambda: IndexedDataset(idx), 5)
    t_checked = best_of(lambda: padless.lengths_of(idx), 3)
    kept = padless.lengths_of(idx)
    added = _rss() - before
    t_load = best_of(load_index, 2)
    print(
        f"open  {sequences:.0e}-sequence .idx ({size / 2**30:.1f} GiB): IndexedDataset "
        f"{t_open * 1e3:.2f} ms; lengths_of(Path), checked, {t_checked:.2f} s "
        f"({type(kept).__name__} {kept.dtype}, RSS +{added / 2**20:.1f} MiB)"
        f"; np.fromfile of lengths+pointers {t_load:.2f} s ({t_load / t_open:,.0f}x the open, "
        f"{t_load / t_checked:.2f}x lengths_of)"
    )
    del kept
    idx.unlink()
    idx.with_suffix(".bin").unlink()


def bench_hf(rows: int, python_rows: int) -> None:
    import datasets
    import pyarrow as pa

    rng = np.random.default_rng(1)
    sizes = rng.integers(1, 64, rows).astype(np.int32)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    values = pa.array(np.zeros(int(offsets[-1]), dtype=np.int32))
    column = pa.ListArray.from_arrays(pa.array(offsets), values)
    ds = datasets.Dataset(pa.table({"input_ids": column}))
    t_new = best_of(lambda: padless.lengths_of(ds, column="input_ids"), 5)
    assert np.array_equal(padless.lengths_of(ds, column="input_ids"), sizes)
    small = ds.select(range(python_rows)).flatten_indices()
    t0 = time.perf_counter()
    padless.lengths_of(list(small["input_ids"]))
    t_old = (time.perf_counter() - t0) * rows / python_rows
    t_col = best_of(lambda: padless.lengths_of(ds["input_ids"]), 3)
    print(
        f"hf    {rows:.0e}-row datasets.Dataset: lengths_of(ds, column=) {t_new * 1e3:.1f} ms, "
        f"lengths_of(ds['input_ids']) {t_col * 1e3:.1f} ms; the Python pass over the lists "
        f"{t_old:.0f} s (scaled from {python_rows:,} rows; {t_old / t_new:,.0f}x)"
    )


def _raw_corpus(path: Path, tokens: int, median: int) -> None:
    rng = np.random.default_rng(2)
    step = 1 << 26
    with open(path, "wb") as fh:
        for lo in range(0, tokens, step):
            n = min(step, tokens - lo)
            part = rng.integers(1, 50_000, n, dtype=np.uint16)
            # documents of lognormal length (sigma 1, `median` tokens): an eos after each
            count = n // max(median // 3, 1) + 1
            gaps = np.clip(rng.lognormal(np.log(median), 1.0, count), 2, 32_000)
            ends = np.cumsum(gaps.astype(np.int64))
            part[ends[ends < n]] = EOS
            fh.write(part.tobytes())


def bench_offsets(path: Path, tokens: int) -> RawTokens:
    t0 = time.perf_counter()
    store = RawTokens(path, dtype=np.uint16, eos=EOS, cache=False)
    np.asarray(store.lengths[:1])
    t_ours = time.perf_counter() - t0
    data = np.memmap(path, dtype=np.uint16, mode="r")
    t_np = best_of(lambda: np.flatnonzero(data == EOS), 1)
    nbytes = tokens * 2
    print(
        f"eos   {tokens:.0e} uint16 tokens ({nbytes / 2**30:.1f} GiB, page cache warm): "
        f"RawTokens {t_ours:.2f} s = {nbytes / t_ours / 1e9:.1f} GB/s ({len(store):,} documents)"
        f"; np.flatnonzero(tokens == eos) {t_np:.2f} s = {nbytes / t_np / 1e9:.1f} GB/s"
    )
    return RawTokens(path, dtype=np.uint16, eos=EOS)


def _serve_one(kind: str, store: RawTokens, hf: object, batches: int, rounds: int) -> None:
    import torch
    from transformers import DataCollatorWithFlattening

    from padless import PieceDataset
    from padless.torch import TokenDataset, collate_packed, collate_padded

    lengths = np.asarray(store.lengths)
    if kind == "packed":
        spec: padless.Spec = padless.Packing(capacity=4096, rows_per_batch=8, oversize="split")
    else:
        spec = padless.TokenBudget(max_tokens=8 * 4096)
    sampler = padless.PlanSampler(lengths, spec, seed=0)
    chosen = [list(b) for _, b in zip(range(batches), sampler, strict=False)]
    dataset = TokenDataset(store, plan=sampler)
    collate = collate_packed(sampler) if kind == "packed" else collate_padded(0, plan=sampler)
    items = PieceDataset(store, capacity=4096) if kind == "packed" else store
    flattening = DataCollatorWithFlattening(return_tensors="pt")
    count = len(store)
    # each batch's token spans in the file (pieces of split documents: their slice)
    spans = []
    for b in chosen:
        codes = np.asarray(b, dtype=np.int64)
        piece, index = np.divmod(codes, count)
        cut = 4096 * piece if kind == "packed" else np.zeros_like(piece)
        whole = lengths[index]
        size = np.minimum(whole - cut, 4096) if kind == "packed" else whole
        spans.append((store.starts(index) + cut, size))
    payload = sum(int(n.sum()) for _, n in spans)
    most = max(int(n.sum()) for _, n in spans)
    buffer = np.empty(most, dtype=store.dtype)
    tokens = store.tokens
    # the bytes padless hands out per batch (every tensor of it), copied from the mapped file
    # at the batch's first document: the memory bound of making that batch
    out_bytes = [
        sum(v.nbytes for v in dataset.__getitems__(b).values() if isinstance(v, torch.Tensor))
        for b in chosen
    ]
    raw = tokens.view(np.uint8)
    sink = np.empty(max(out_bytes), dtype=np.uint8)
    blocks = [
        (min(int(s[0]) * tokens.itemsize, raw.size - k), k)
        for (s, _), k in zip(spans, out_bytes, strict=True)
    ]

    def ours() -> None:
        for b in chosen:
            dataset.__getitems__(b)

    def per_item() -> None:
        for b in chosen:
            collate([torch.from_numpy(np.asarray(items[c], dtype=np.int64)) for c in b])

    def hugging_face() -> None:
        for b in chosen:
            rows = hf.__getitems__([c % count for c in b])  # type: ignore[attr-defined]
            if kind == "packed":
                flattening(rows)
            else:
                collate([r["input_ids"] for r in rows])

    def copy() -> None:
        for starts, sizes in spans:
            at = 0
            for lo, k in zip(starts.tolist(), sizes.tolist(), strict=True):
                np.copyto(buffer[at : at + k], tokens[lo : lo + k])
                at += k

    def block() -> None:
        for lo, k in blocks:
            np.copyto(sink[:k], raw[lo : lo + k])

    times = best_in_rounds(
        {
            "padless": ours,
            "per item": per_item,
            "datasets": hugging_face,
            "copyto per doc": copy,
            "copyto bytes": block,
        },
        rounds,
    )
    rate = {k: payload / t for k, t in times.items()}
    print(
        f"serve {kind}: {len(chosen)} batches of {payload // len(chosen):,} tokens, "
        f"{sum(out_bytes) // len(chosen) / 2**10:,.0f} KiB out each (M tok/s)"
    )
    print("      " + ", ".join(f"{k} {v / 1e6:,.0f}" for k, v in rate.items()))
    print(
        f"      padless = {rate['padless'] / rate['copyto per doc']:.2f}x copyto per doc, "
        f"{rate['padless'] / rate['copyto bytes']:.2f}x copyto of its bytes, "
        f"{rate['padless'] / rate['per item']:.0f}x per item, "
        f"{rate['padless'] / rate['datasets']:.0f}x datasets"
    )


def bench_serve(store: RawTokens, batches: int, rounds: int) -> None:
    import datasets
    import pyarrow as pa

    # the same documents as an in-memory Arrow dataset (the tokens' buffer shared, not copied)
    offsets = np.zeros(len(store) + 1, dtype=np.int64)
    np.cumsum(store.lengths, out=offsets[1:])
    column = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(np.asarray(store.tokens)))
    hf = datasets.Dataset(pa.table({"input_ids": column}))
    for kind in ("padded", "packed"):
        _serve_one(kind, store, hf, batches, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=100_000_000)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--python-rows", type=int, default=100_000)
    parser.add_argument("--tokens", type=int, default=1_000_000_000)
    parser.add_argument("--batches", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--median", type=int, default=600, help="documents' median length")
    parser.add_argument("--only", default="open,hf,eos,serve", help="parts to run")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    parts = set(args.only.split(","))
    root = Path(tempfile.mkdtemp(prefix="padless-ingest-", dir=args.dir))
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
    try:
        if "open" in parts:
            bench_open(root, args.sequences)
        if "hf" in parts:
            bench_hf(args.rows, args.python_rows)
        if parts & {"eos", "serve"}:
            raw = root / "corpus.bin"
            _raw_corpus(raw, args.tokens, args.median)
            store = bench_offsets(raw, args.tokens)
            if "serve" in parts:
                bench_serve(store, args.batches, args.rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
