"""``padless plan``: compute one epoch's plan (or several) and save it as .npz."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ._cli_report import INPUT_HELP, add_input_arguments, load_lengths

STRATEGIES = ("token_budget", "exact_length", "buckets", "packing")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``padless plan``."""
    parser.add_argument("inputs", nargs="*", metavar="INPUT", help=INPUT_HELP)
    add_input_arguments(parser)
    parser.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="token_budget",
        help="planner (default token_budget)",
    )
    parser.add_argument(
        "-o", "--output", required=True, help="output .npz (BatchPlan.load reads it)"
    )
    parser.add_argument("--max-tokens", type=int, help="token budget per batch")
    parser.add_argument("--max-sentences", type=int, help="most sequences per batch (token_budget)")
    parser.add_argument("--batch-size", type=int, help="fixed batch size (exact_length, buckets)")
    parser.add_argument("--multiple-of", type=int, default=1, help="batch size multiple")
    parser.add_argument("--num-buckets", type=int, default=8, help="buckets (default 8)")
    parser.add_argument("--capacity", type=int, help="row capacity (packing)")
    parser.add_argument("--rows-per-batch", type=int, default=1, help="rows per batch (packing)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    parser.add_argument("--epoch", type=int, default=0, help="first epoch (default 0)")
    parser.add_argument(
        "--epochs", type=int, default=1, help="epochs to plan; >1 writes OUTPUT-epochE.npz files"
    )


def _planner(args: argparse.Namespace) -> Any:
    from .planners.buckets import plan_buckets
    from .planners.budget import plan_token_budget
    from .planners.exact import plan_exact_length
    from .planners.packing import plan_packing

    common = {"seed": args.seed}
    if args.strategy == "token_budget":
        if args.max_tokens is None and args.max_sentences is None:
            raise ValueError("token_budget needs --max-tokens and/or --max-sentences")
        return lambda lens, e: plan_token_budget(
            lens,
            max_tokens=args.max_tokens,
            max_sentences=args.max_sentences,
            multiple_of=args.multiple_of,
            epoch=e,
            **common,
        )
    sizing = {"max_tokens": args.max_tokens, "batch_size": args.batch_size}
    if args.strategy == "exact_length":
        return lambda lens, e: plan_exact_length(
            lens, multiple_of=args.multiple_of, epoch=e, **sizing, **common
        )
    if args.strategy == "buckets":
        return lambda lens, e: plan_buckets(
            lens,
            num_buckets=args.num_buckets,
            multiple_of=args.multiple_of,
            epoch=e,
            **sizing,
            **common,
        )
    if args.capacity is None:
        raise ValueError("packing needs --capacity")
    return lambda lens, e: plan_packing(
        lens, capacity=args.capacity, rows_per_batch=args.rows_per_batch, epoch=e, **common
    )


def run(args: argparse.Namespace) -> int:
    """Plan the requested epochs and save each."""
    if args.epochs < 1:
        raise ValueError(f"--epochs must be a positive int, got {args.epochs}")
    out = Path(args.output)
    if not out.parent.is_dir():
        raise FileNotFoundError(f"output folder does not exist: {out.parent}")
    planner = _planner(args)
    lengths, name = load_lengths(args)
    written = []
    for e in range(args.epoch, args.epoch + args.epochs):
        plan = planner(lengths, e)
        target = out if args.epochs == 1 else out.with_name(f"{out.stem}-epoch{e}{out.suffix}")
        if target.suffix != ".npz":
            target = target.with_name(target.name + ".npz")
        plan.save(target)
        st = plan.stats(lengths)
        written.append(
            {
                "epoch": e,
                "path": str(target),
                "batches": st.batches,
                "sentences": st.sentences,
                "padding_pct": round(100 * st.padding_fraction, 4),
                "skipped": int(plan.skipped.size),
            }
        )
        print(json.dumps({"input": name, "strategy": args.strategy, **written[-1]}))
    return 0
