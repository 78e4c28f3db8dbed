"""``padless report``: compare batching strategies on a corpus."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``padless report``."""
    parser.add_argument(
        "inputs", nargs="*", metavar="INPUT", help="lengths file(s); none: the built-in corpus"
    )
    parser.add_argument("--max-tokens", type=int, default=4096, help="token budget (default 4096)")
    parser.add_argument("--batch-size", type=int, default=64, help="fixed batch size (default 64)")
    parser.add_argument(
        "--world-size", type=int, default=8, help="ranks for the imbalance figure (default 8)"
    )
    parser.add_argument("--capacity", type=int, default=None, help="packing row capacity")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _load(inputs: list[str]) -> tuple[Any, str]:
    import numpy as np

    from .lengths import builtin_corpus

    if not inputs:
        return builtin_corpus(), "built-in corpus (bible en, 29,814 verses, BPE 8k)"
    arrays = []
    for path in inputs:
        data = np.load(path)
        arrays.append(data if isinstance(data, np.ndarray) else data[data.files[0]])
    lengths = arrays[0] if len(arrays) == 1 else np.stack(arrays, axis=1)
    return lengths, ", ".join(inputs)


def run(args: argparse.Namespace) -> int:
    """Print the comparison table (or JSON)."""
    from .report import budget_sweep, compare_strategies, length_summary

    lengths, name = _load(args.inputs)
    summary = length_summary(lengths)
    rows = compare_strategies(
        lengths,
        max_tokens=args.max_tokens,
        batch_size=args.batch_size,
        world_size=args.world_size,
        capacity=args.capacity,
    )
    sweep = budget_sweep(lengths, [1024, 2048, 4096, 8192, 16384])
    if args.json:
        json.dump(
            {
                "input": name,
                "lengths": summary,
                "strategies": [r.as_dict() for r in rows],
                "token_budget_sweep": sweep,
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
        f"  {'strategy':<16} {'setting':<18} {'batches':>8} {'sent/batch':>10} "
        f"{'padding':>8} {'imbal.':>7} {'balanced':>8} {'plan':>9}  takeaway"
    )
    print(header)
    print("  " + "-" * (len(header) + 10))
    for r in rows:
        bal = f"{r.imbalance_balanced:.3f}" if r.imbalance_balanced is not None else "-"
        imb = f"{r.imbalance:.3f}" if r.imbalance is not None else "-"
        print(
            f"  {r.strategy:<16} {r.setting:<18} {r.batches:>8,} {r.mean_sentences:>10.1f} "
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
        f"\n  padding = padded slots wasted (count x longest per batch); imbalance = mean over "
        f"steps of slowest/mean rank cost at world size {args.world_size}"
    )
    return 0
