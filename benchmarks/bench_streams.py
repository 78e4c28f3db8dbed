"""Streams of unknown lengths: padless.StreamBatcher next to lhotse's DynamicBucketingSampler.

Same stream order, buffer and budget for both (max_tokens = max_duration = 4096, lhotse with 30
buckets), on 1e6 lognormal lengths (mean about 27, in [1, 1024]) and the built-in corpus (en,
29,814 verses). Figures:

1. token-budget padding (1 − real ÷ count × longest) at buffers 1k / 10k / 100k, batches over
   the budget (count × longest > 4096), budget fill (real ÷ batches × 4096); next to sorting
   each buffer and emitting every batch ("naive") and one global sort (the offline optimum);
2. packing efficiency (real ÷ rows × capacity) at capacity 1024 / 4096;
3. throughput of a lengths-only stream (a list of ints, ``length=int``): items/s as a ratio to
   the bare loop ``for x in source: length(x)`` timed in the same process;
4. restore at 50% of a 1e6-item stream: ``load_state_dict`` + first batch, against a fresh
   batcher's first batch (which reads and plans one buffer);
5. the cost of ``padless.torch.stop_together``: two gloo processes, time per step.

lhotse is installed for this script only (``.venv/bin/pip install lhotse``); it is slow (about
2e4 cuts/s), so its figures on the lognormal stream use the first 2e5 lengths (padless is
shown on the same prefix); ``--skip-lhotse`` leaves it out. Times are best of --repeat on a
shared machine.

Run: .venv/bin/python benchmarks/bench_streams.py [--n 1000000] [--repeat 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from itertools import islice

import numpy as np
from _common import best_of, lognormal_lengths

from padless import Packing, StreamBatcher, TokenBudget, builtin_corpus, plan_packing

BUDGET = 4096
BUFFERS = (1_000, 10_000, 100_000)


class Resumable:
    """A lengths stream with the datasets.IterableDataset state protocol (position)."""

    def __init__(self, items: list[int]) -> None:
        self.items = items
        self.pos = 0
        self.start = 0

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.start = state["pos"]

    def __iter__(self):
        items = self.items
        for i in range(self.start, len(items)):  # starts in O(1), as a datasets stream seeks
            self.pos = i + 1
            yield items[i]


def figures(batches: list[list[int]]) -> dict[str, float]:
    real = padded = over = 0
    for b in batches:
        top = max(b)
        real += sum(b)
        padded += len(b) * top
        over += len(b) * top > BUDGET
    return {
        "padding": 1 - real / padded,
        "batches": len(batches),
        "over": over,
        "fill": real / (len(batches) * BUDGET),
    }


def naive(source, buffer: int):
    """Sort each buffer (greedy budget batches over the sorted buffer) and emit every batch."""
    spec = TokenBudget(max_tokens=BUDGET)
    it = iter(source)
    while True:
        items = list(islice(it, buffer))
        if not items:
            return
        plan = spec.plan(np.fromiter(items, np.int64, len(items)))
        for b in plan:
            yield [items[i] for i in b.tolist()]


def lhotse_batches(lengths: np.ndarray, buffer: int) -> tuple[list[list[int]], float]:
    from lhotse import CutSet, MonoCut
    from lhotse.dataset import DynamicBucketingSampler

    cuts = CutSet.from_cuts(
        MonoCut(id=str(i), start=0.0, duration=float(n), channel=0)
        for i, n in enumerate(lengths.tolist())
    )
    sampler = DynamicBucketingSampler(
        cuts, max_duration=BUDGET, num_buckets=30, buffer_size=buffer, shuffle=False, seed=0
    )
    t0 = time.perf_counter()
    out = [[int(c.duration) for c in batch] for batch in sampler]
    return out, time.perf_counter() - t0


def padding_table(name: str, lengths: np.ndarray, rows: list[str]) -> None:
    spec = TokenBudget(max_tokens=BUDGET)
    items = lengths.tolist()
    glob = spec.plan(lengths).stats(lengths)
    rows.append(
        f"\n**{name}** (N = {lengths.size:,}); one global sort: padding "
        f"{glob.padding_fraction:.3%}, {glob.batches:,} batches, fill "
        f"{glob.real_tokens / (glob.batches * BUDGET):.3f}\n"
    )
    rows.append("| buffer | padless padding | over budget | batches | fill | naive padding |")
    rows.append("|---:|---:|---:|---:|---:|---:|")
    for buffer in BUFFERS:
        ours = figures(list(StreamBatcher(items, spec, buffer=buffer, length=int)))
        base = figures(list(naive(items, buffer)))
        rows.append(
            f"| {buffer:,} | **{ours['padding']:.3%}** | {ours['over']} | {ours['batches']:,} | "
            f"{ours['fill']:.3f} | {base['padding']:.2%} |"
        )
        print(rows[-1], flush=True)


def lhotse_table(name: str, lengths: np.ndarray, rows: list[str]) -> None:
    spec = TokenBudget(max_tokens=BUDGET)
    rows.append(f"\n**{name}** (N = {lengths.size:,}), padless | lhotse\n")
    rows.append(
        "| buffer | padding | over budget (worst ×) | batches | fill | lhotse padding | "
        "lhotse over budget (worst ×) | lhotse batches | lhotse fill |"
    )
    rows.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for buffer in BUFFERS:
        ob = list(StreamBatcher(lengths.tolist(), spec, buffer=buffer, length=int))
        ours = figures(ob)
        worst = max(len(b) * max(b) for b in ob) / BUDGET
        try:
            lb, _ = lhotse_batches(lengths, buffer)
        except ImportError:
            rows.append(
                f"| {buffer:,} | {ours['padding']:.3%} | | | | lhotse not installed | | | |"
            )
            continue
        lh = figures(lb)
        lworst = max(len(b) * max(b) for b in lb) / BUDGET
        rows.append(
            f"| {buffer:,} | **{ours['padding']:.3%}** | {ours['over']} ({worst:.2f}×) | "
            f"{ours['batches']:,} | {ours['fill']:.3f} | {lh['padding']:.2%} | "
            f"{lh['over']} ({lworst:.2f}×) | {lh['batches']:,} | {lh['fill']:.3f} |"
        )
        print(rows[-1], flush=True)


def max_wait_table(lengths: np.ndarray, repeat: int, rows: list[str]) -> None:
    """Padding and restore time against ``max_wait`` at buffer 10k."""
    spec = TokenBudget(max_tokens=BUDGET)
    items = lengths.tolist()
    buffer = 10_000
    rows.append(
        "\n| max_wait | padding | restore + first batch ÷ fresh first batch (stateful source) |"
    )
    rows.append("|---:|---:|---:|")
    for max_wait in (1, 2, 4):
        b = StreamBatcher(items, spec, buffer=buffer, length=int, max_wait=max_wait)
        total = sum(1 for _ in b)
        pad = b.stats()["padding_fraction"]
        ratio = restore_ratio(items, spec, buffer, max_wait, total, repeat, Resumable)
        rows.append(f"| {max_wait} | {pad:.3%} | {ratio:.2f} |")
        print(rows[-1], flush=True)


def restore_ratio(items, spec, buffer, max_wait, total, repeat, make_source) -> float:
    b = StreamBatcher(make_source(items), spec, buffer=buffer, length=int, max_wait=max_wait)
    it = iter(b)
    for _ in range(total // 2):
        next(it)
    state = b.state_dict()

    def fresh() -> None:
        batcher = StreamBatcher(
            make_source(items), spec, buffer=buffer, length=int, max_wait=max_wait
        )
        next(iter(batcher))

    def resumed() -> None:
        r = StreamBatcher(make_source(items), spec, buffer=buffer, length=int, max_wait=max_wait)
        r.load_state_dict(state)
        next(iter(r))

    return best_of(resumed, repeat) / best_of(fresh, repeat)


def packing_table(name: str, lengths: np.ndarray, rows: list[str]) -> None:
    items = lengths.tolist()
    rows.append(f"\n**{name}**\n")
    rows.append("| capacity | buffer 1k | buffer 10k | buffer 100k | global best fit |")
    rows.append("|---:|---:|---:|---:|---:|")
    for cap in (1024, 4096):
        effs = []
        for buffer in BUFFERS:
            b = StreamBatcher(items, Packing(capacity=cap), buffer=buffer, length=int)
            for _ in b:
                pass
            effs.append(b.stats()["efficiency"])
        glob = plan_packing(lengths, capacity=cap).efficiency
        cells = " | ".join(f"{e:.5f}" for e in effs)
        rows.append(f"| {cap} | {cells} | {glob:.5f} |")
        print(rows[-1], flush=True)


def throughput(lengths: np.ndarray, repeat: int, rows: list[str]) -> None:
    items = lengths.tolist()
    n = len(items)
    spec = TokenBudget(max_tokens=BUDGET)

    def bare() -> None:
        length = int
        for x in items:
            length(x)

    def run(make) -> None:
        for _ in make():
            pass

    t_bare = best_of(bare, repeat)
    rows.append(
        f"\nLengths-only stream of {n:,} ints, `length=int`, `TokenBudget(max_tokens={BUDGET})`. "
        f"Bare loop `for x in source: length(x)`: {n / t_bare / 1e6:.2f} M items/s.\n"
    )
    rows.append("| batcher | M items/s | × slower than the bare loop |")
    rows.append("|---|---:|---:|")
    cases = [("naive sort-the-buffer, buffer 10k", lambda: naive(items, 10_000))]
    for buffer in BUFFERS:
        cases.append(
            (
                f"**padless StreamBatcher, buffer {buffer:,}**",
                lambda buffer=buffer: StreamBatcher(items, spec, buffer=buffer, length=int),
            )
        )
    for name, make in cases:
        t = best_of(lambda make=make: run(make), repeat)
        rows.append(f"| {name} | {n / t / 1e6:.2f} | {t / t_bare:.1f} |")
        print(rows[-1], flush=True)
    for buffer in (10_000,):
        try:
            head = lengths[:200_000]
            _, t = lhotse_batches(head, buffer)
            rate = head.size / t
            b = StreamBatcher(head.tolist(), spec, buffer=buffer, length=int)
            t_ours = best_of(lambda b=b: run(lambda: b), repeat)
            rows.append(
                f"| lhotse DynamicBucketingSampler, buffer {buffer:,} (cuts built beforehand, "
                f"first 2e5) | {rate / 1e6:.3f} | {head.size / rate / (t_bare * head.size / n):.0f} |"
            )
            rows.append(
                f"| padless / lhotse on the same 2e5 | {head.size / t_ours / rate:.0f}× faster | |"
            )
            print(rows[-2], rows[-1], sep="\n", flush=True)
        except ImportError:
            rows.append("| lhotse | not installed | |")


def restore(lengths: np.ndarray, repeat: int, rows: list[str]) -> None:
    items = lengths.tolist()
    spec = TokenBudget(max_tokens=BUDGET)
    rows.append(
        f"\nStream of {len(items):,} lognormal lengths, `TokenBudget(max_tokens={BUDGET})`, best of "
        f"{repeat}. The state is taken after half of the batches.\n"
    )
    rows.append(
        "| buffer | source | fresh first batch (refill one buffer) | restore + first batch | "
        "ratio | state size |"
    )
    rows.append("|---:|---|---:|---:|---:|---:|")
    import json

    for buffer in (10_000, 100_000):
        total = sum(1 for _ in StreamBatcher(items, spec, buffer=buffer, length=int))
        for kind in ("stateful (datasets protocol)", "plain list (skips from the start)"):

            def source(kind=kind):
                return Resumable(items) if kind.startswith("stateful") else items

            b = StreamBatcher(source(), spec, buffer=buffer, length=int)
            it = iter(b)
            for _ in range(total // 2):
                next(it)
            state = b.state_dict()

            def fresh(source=source, buffer=buffer) -> None:
                next(iter(StreamBatcher(source(), spec, buffer=buffer, length=int)))

            def resumed(source=source, state=state, buffer=buffer) -> None:
                r = StreamBatcher(source(), spec, buffer=buffer, length=int)
                r.load_state_dict(state)
                next(iter(r))

            t_fresh = best_of(fresh, repeat)
            t_restore = best_of(resumed, repeat)
            size = len(json.dumps(state))
            rows.append(
                f"| {buffer:,} | {kind} | {t_fresh * 1e3:.1f} ms | {t_restore * 1e3:.1f} ms | "
                f"**{t_restore / t_fresh:.2f}** | {size:,} B |"
            )
            print(rows[-1], flush=True)


def datasets_restore(repeat: int, rows: list[str]) -> None:
    """The same on a datasets.IterableDataset streamed from local Parquet files."""
    try:
        import datasets
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        rows.append("\n(datasets not installed: no Parquet figures)\n")
        return
    spec = TokenBudget(max_tokens=BUDGET)
    lengths = lognormal_lengths(200_000, seed=7)
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for k, part in enumerate(np.array_split(lengths, 4)):
            path = os.path.join(tmp, f"part{k}.parquet")
            pq.write_table(pa.table({"n": part}), path)
            files.append(path)

        def source():
            return datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)

        def size(row):
            return row["n"]

        buffer = 10_000
        total = sum(1 for _ in StreamBatcher(source(), spec, buffer=buffer, length=size))
        b = StreamBatcher(source(), spec, buffer=buffer, length=size)
        it = iter(b)
        for _ in range(total // 2):
            next(it)
        state = b.state_dict()

        def fresh() -> None:
            next(iter(StreamBatcher(source(), spec, buffer=buffer, length=size)))

        def resumed() -> None:
            r = StreamBatcher(source(), spec, buffer=buffer, length=size)
            r.load_state_dict(state)
            next(iter(r))

        t_fresh, t_restore = best_of(fresh, repeat), best_of(resumed, repeat)
        rows.append(
            f"| {buffer:,} | datasets Parquet stream (200k rows, 4 files) | "
            f"{t_fresh * 1e3:.0f} ms | {t_restore * 1e3:.0f} ms | **{t_restore / t_fresh:.2f}** | |"
        )
        print(rows[-1], flush=True)


def _sync_worker(rank: int, world: int, steps: int, init: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    from padless.torch import stop_together

    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    batches = [[i] for i in range(steps + rank)]  # unequal: rank 1 has one batch more
    times = {}
    for every in (0, 1, 8):
        dist.barrier()
        t0 = time.perf_counter()
        n = 0
        loader = batches[:steps] if every == 0 else stop_together(batches, every=every)
        for _ in loader:
            n += 1
        times[every] = (time.perf_counter() - t0) / n
    if rank == 0:
        with open(out, "w") as fh:
            fh.write(repr(times))
    dist.barrier()
    dist.destroy_process_group()


def sync_cost(rows: list[str]) -> None:
    try:
        import torch.multiprocessing as mp
    except ImportError:
        rows.append("\n(torch not installed: no stop_together figures)\n")
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times")
        steps = 2000
        mp.spawn(_sync_worker, args=(2, steps, os.path.join(tmp, "init"), out), nprocs=2, join=True)
        with open(out) as fh:
            times = eval(fh.read())  # noqa: S307 - our own repr of a dict of floats
    rows.append(
        "\n| loop over a list of batches, 2 ranks (gloo, CPU) | µs per step | extra per step |"
    )
    rows.append("|---|---:|---:|")
    for every, name in ((0, "plain loop"), (1, "stop_together(every=1)"), (8, "every=8")):
        extra = (times[every] - times[0]) * 1e6
        rows.append(f"| {name} | {times[every] * 1e6:.1f} | {extra:.1f} |")
        print(rows[-1], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=None, help="also write the markdown here")
    parser.add_argument("--skip-lhotse", action="store_true")
    args = parser.parse_args()
    if args.skip_lhotse:
        sys.modules["lhotse"] = None  # type: ignore[assignment]  # makes the import fail
    lengths = lognormal_lengths(args.n)
    en = builtin_corpus("en")
    rows = [
        "# Streams of unknown lengths (issue 15)",
        "",
        f"`{' '.join(['.venv/bin/python', *sys.argv])}` on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, numpy {np.__version__}.",
        "",
        f"## Token-budget padding (max_tokens = max_duration = {BUDGET})",
    ]
    padding_table("lognormal lengths", lengths, rows)
    padding_table("built-in corpus, en", en, rows)
    rows += [
        "",
        "Side by side with lhotse's DynamicBucketingSampler (30 buckets, same stream order, "
        "buffer and budget; lhotse's budget counts real tokens, so a batch may pad past it):",
    ]
    lhotse_table("lognormal lengths, the first 200,000", lengths[:200_000], rows)
    lhotse_table("built-in corpus, en", en, rows)
    rows += ["", "Padding against `max_wait` (buffer 10,000, the lognormal stream):"]
    max_wait_table(lengths, args.repeat, rows)
    rows += ["", "## Packing efficiency (real tokens ÷ rows × capacity)"]
    packing_table("lognormal lengths", lengths, rows)
    packing_table("built-in corpus, en", en, rows)
    rows += ["", "## Throughput"]
    throughput(lengths, args.repeat, rows)
    rows += ["", "## Restore at 50% of the stream"]
    restore(lengths, args.repeat, rows)
    datasets_restore(args.repeat, rows)
    rows += ["", "## stop_together: ranks stop at the same step"]
    sync_cost(rows)
    text = "\n".join(rows) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
