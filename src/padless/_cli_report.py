"""``padless report``: compare batching strategies on a corpus."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

INPUT_HELP = (
    "lengths .npy/.npz, a token .npy with --offsets, text files (one sequence per line; .gz/.zst), "
    "Arrow/Parquet files or a saved datasets folder; several files side by side give (N, F) "
    "lengths (e.g. train.en train.es). None: the built-in corpus"
)


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by the subcommands that read lengths."""
    parser.add_argument("--fields", help="npz arrays to use, comma-separated (e.g. en,es)")
    parser.add_argument(
        "--tokenizer",
        default="whitespace",
        help="for text: whitespace (default), chars, bytes, spm:MODEL or hf:tokenizer.json",
    )
    parser.add_argument("--column", help="Arrow/Parquet/datasets column (e.g. input_ids)")
    parser.add_argument("--split", help="split of a saved DatasetDict (default train)")
    parser.add_argument("--offsets", help="document offsets .npy for a token-id .npy corpus")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``padless report``."""
    parser.add_argument("inputs", nargs="*", metavar="INPUT", help=INPUT_HELP)
    add_input_arguments(parser)
    parser.add_argument("--max-tokens", type=int, default=4096, help="token budget (default 4096)")
    parser.add_argument("--batch-size", type=int, default=64, help="fixed batch size (default 64)")
    parser.add_argument(
        "--world-size", type=int, default=8, help="ranks for the imbalance figure (default 8)"
    )
    parser.add_argument(
        "--capacity", type=int, default=None, help="packing row capacity (default: --max-tokens)"
    )
    parser.add_argument("--num-buckets", type=int, default=8, help="buckets (default 8)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--plot", metavar="FILE.png", help="write a PNG summary to FILE.png")


def load_lengths(args: argparse.Namespace) -> tuple[Any, str]:
    """Lengths from the command line's inputs (or the built-in corpus) and a display name."""
    from .lengths import builtin_corpus

    if not args.inputs:
        if args.fields:
            return builtin_corpus(args.fields.split(",")), f"built-in corpus ({args.fields})"
        return builtin_corpus(), "built-in corpus (bible en, 29,814 verses, BPE 8k)"
    from ._progress import Progress
    from .readers import lengths_from_files

    total = 0
    for path in map(Path, args.inputs):
        if path.is_file():
            packed = path.suffix.lower() in (".gz", ".zst", ".zstd")
            total += path.stat().st_size * (4 if packed else 1)  # text size, roughly
    bar = Progress(total, label="reading", enabled=total > (4 << 20))
    lines = 0

    def progress(nbytes: int, nlines: int) -> None:
        nonlocal lines
        lines += nlines
        bar.label = f"reading {lines:,} lines"
        bar.update(nbytes)

    try:
        lengths = lengths_from_files(
            args.inputs,
            tokenizer=args.tokenizer,
            fields=args.fields.split(",") if args.fields else None,
            column=args.column,
            offsets=args.offsets,
            split=args.split,
            progress=progress,
        )
    finally:
        bar.close()
    if lengths.shape[0] == 0:
        raise ValueError(f"no sequences in {', '.join(args.inputs)}")
    return lengths, ", ".join(args.inputs)


def _check_options(args: argparse.Namespace) -> None:
    for name in ("max_tokens", "batch_size", "world_size", "num_buckets", "capacity"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive int, got {value}")


def run(args: argparse.Namespace) -> int:
    """Print the comparison table (or JSON), and write the plot if asked."""
    from .report import budget_sweep, compare_strategies, length_summary

    _check_options(args)
    lengths, name = load_lengths(args)
    summary = length_summary(lengths)
    rows = compare_strategies(
        lengths,
        max_tokens=args.max_tokens,
        batch_size=args.batch_size,
        world_size=args.world_size,
        capacity=args.capacity,
        num_buckets=args.num_buckets,
    )
    sweep = budget_sweep(lengths, [1024, 2048, 4096, 8192, 16384])
    if args.plot:
        from .plot import plot_report

        plot_report(lengths, rows, args.plot, title=name, world_size=args.world_size)
    if args.json:
        json.dump(
            {
                "input": name,
                "lengths": summary,
                "strategies": [r.as_dict() for r in rows],
                "token_budget_sweep": sweep,
                "world_size": args.world_size,
            },
            sys.stdout,
            indent=2,
        )
        print()
        return 0
    s = summary
    print(f"padless report: {name}")
    print(
        f"  {s['count']:,} sequences, {s['tokens']:,} tokens; length min {s['min']}, "
        f"median {s['median']:g}, mean {s['mean']:.1f}, p95 {s['p95']:g}, p99 {s['p99']:g}, "
        f"max {s['max']}"
    )
    print()
    header = (
        f"  {'strategy':<16} {'setting':<22} {'batches':>8} {'sent/batch':>10} "
        f"{'padding':>8} {'imbal.':>7} {'balanced':>8} {'plan':>9}  takeaway"
    )
    print(header)
    print("  " + "-" * (len(header) + 30))
    for r in rows:
        bal = f"{r.imbalance_balanced:.3f}" if r.imbalance_balanced is not None else "-"
        imb = f"{r.imbalance:.3f}" if r.imbalance is not None else "-"
        print(
            f"  {r.strategy:<16} {r.setting:<22} {r.batches:>8,} {r.mean_sentences:>10.1f} "
            f"{r.padding_pct:>7.2f}% {imb:>7} {bal:>8} {r.plan_ms:>7.1f}ms  {r.note}"
        )
    print("\n  token budget at several budgets (fairseq semantics, sorted by length):")
    print(f"  {'max_tokens':>10} {'batches':>8} {'sent/batch':>10} {'padding':>8} {'plan':>9}")
    for t in sweep:
        print(
            f"  {t['max_tokens']:>10,} {t['batches']:>8,} {t['mean_sentences']:>10.1f} "
            f"{t['padding_pct']:>7.2f}% {t['plan_ms']:>7.1f}ms"
        )
    print(
        "\n  padding: share of token slots that are padding (count x longest per batch; packing: "
        "rows x capacity)\n  imbal.: mean over steps of slowest/mean rank cost at world size "
        f"{args.world_size}; balanced: the same with balance=True"
    )
    if args.plot:
        print(f"\n  plot written to {args.plot}")
    return 0
