"""``padless report``: compare batching strategies on a corpus.

One row per registered strategy (:func:`padless.strategies`) besides two baselines; each spec
takes the shared options it has a field for (``--max-tokens``, ``--capacity``,
``--num-buckets``) and ``--set STRATEGY.KEY=VALUE`` on top. Lengths of two fields (e.g.
``--fields en,es``) get a 2-D bucket table too: padding per field of padless's 2-D boundaries
beside NeMo's estimate and 1-D buckets (:func:`padless.sampling.report.grid_padding`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import textwrap
from typing import Any

from .inputs import (
    add_input_arguments,
    check_output_paths,
    load_lengths,
    manifest_input,
    manifest_summary,
    shares_stdout,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``padless report``."""
    add_input_arguments(parser)
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="token budget per batch, e.g. 8192 (default: 4096, or the next power of two at "
        "least the longest sequence; it must hold the longest)",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="fixed batch size (default 64)")
    parser.add_argument(
        "--world-size", type=int, default=8, help="ranks for the imbalance figure (default 8)"
    )
    parser.add_argument(
        "--capacity", type=int, default=None, help="packing row capacity (default: --max-tokens)"
    )
    parser.add_argument("--num-buckets", type=int, default=8, help="buckets (default 8)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="STRATEGY.KEY=VALUE",
        help="a setting of one strategy's spec on top of the shared ones (replacing a shared "
        "one it conflicts with), e.g. --set packing.max_per_row=8 or --set "
        "buckets.boundaries=12,40,100",
    )
    parser.add_argument(
        "--cost",
        default=None,
        metavar="MODEL",
        help="plan, balance and measure in a cost model: JSON coefficients, e.g. "
        '\'{"linear": 1, "quadratic": 1e-4}\', or transformer:D_MODEL,N_LAYERS[,D_FF[,VOCAB]] '
        "for training FLOPs (default: padded tokens)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help="write a summary figure to exactly FILE (PNG; SVG or PDF by suffix); a device or "
        "pipe is written in place",
    )


MAX_WORLD_SIZE = 1 << 20  # ranks: the placement's most lanes; the imbalance costs O(ranks)


def _check_options(args: argparse.Namespace) -> None:
    from ..core._check import positive

    if args.world_size > MAX_WORLD_SIZE:
        raise ValueError(
            f"--world-size must be at most 2**20 ({MAX_WORLD_SIZE:,}) ranks, the most padless "
            f"places on (the imbalance figure takes time in proportion), got {args.world_size:,}"
        )
    for name in ("max_tokens", "batch_size", "world_size", "num_buckets", "capacity"):
        value = getattr(args, name)
        if value is not None:
            positive(f"--{name.replace('_', '-')}", value)


def parse_cost(text: str | None) -> Any:
    """``--cost``: JSON coefficients or ``transformer:D_MODEL,N_LAYERS[,D_FF[,VOCAB]]``.

    >>> parse_cost('{"quadratic": 0.5}')
    Cost(linear=1.0, quadratic=0.5, per_sequence=0.0)
    >>> parse_cost("transformer:64,2").quadratic
    768.0
    """
    from ..core.cost import Cost, as_cost

    if text is None:
        return None
    kind, colon, rest = text.partition(":")
    if colon and kind == "transformer":
        parts = rest.split(",")
        if not 2 <= len(parts) <= 4 or not all(p.strip().isdigit() for p in parts):
            raise ValueError(
                f"--cost transformer: takes D_MODEL,N_LAYERS[,D_FF[,VOCAB]] as ints, got {rest!r}"
            )
        shape = [int(p) for p in parts] + [0, 0]
        return Cost.transformer(shape[0], shape[1], shape[2] or None, shape[3] or None)
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(
            f"--cost JSON is nested too deeply to read (coefficients are one flat object), got "
            f"{text!r:.60}"
        ) from None
    except json.JSONDecodeError:
        raise ValueError(
            '--cost must be JSON coefficients such as \'{"linear": 1, "quadratic": 1e-4}\' or '
            f"transformer:D_MODEL,N_LAYERS[,D_FF[,VOCAB]], got {text!r}"
        ) from None
    return as_cost(value, "--cost")


def strategy_settings(assignments: list[str]) -> dict[str, dict[str, Any]]:
    """``["packing.max_per_row=8"]`` → ``{"packing": {"max_per_row": 8}}``, parsed by field type.

    >>> strategy_settings(["buckets.boundaries=12,40", "packing.oversize=drop"])
    {'buckets': {'boundaries': [12, 40]}, 'packing': {'oversize': 'drop'}}
    """
    from ..planners import strategies
    from .settings import merge_given, parse_value, setting_fields, split_assignment

    registry = strategies()
    per: dict[str, list[tuple[str, str, str]]] = {}
    for text in assignments:
        target, value = split_assignment(text)
        name, dot, key = target.partition(".")
        if not dot or not key:
            raise ValueError(f"--set takes STRATEGY.KEY=VALUE, got {text!r}")
        if name not in registry:
            raise ValueError(
                f"--set {text!r}: unknown strategy {name!r}; known: {', '.join(registry)}"
            )
        per.setdefault(name, []).append((key, "--set", value))
    out: dict[str, dict[str, Any]] = {}
    for name, sources in per.items():
        fields = {f.name: f for f in setting_fields(registry[name])}
        given = merge_given(sources)
        unknown = sorted(set(given) - set(fields))
        if unknown:
            raise ValueError(
                f"--set {name}.{unknown[0]}: unknown setting {unknown[0]!r} of {name}; known: "
                f"{', '.join(fields)}"
            )
        out[name] = {
            key: parse_value(key, text, fields[key], f"--set {name}.{key}")
            for key, (_option, text) in given.items()
        }
    return out


def _budget(args: argparse.Namespace, longest: int) -> bool:
    """Settle ``args.max_tokens`` on the data: given, it must hold the longest sequence (the
    report plans every sequence); left out, 4096 or the next power of two that holds the
    longest. True when chosen here."""
    if args.max_tokens is None:
        args.max_tokens = max(4096, 1 << max(longest - 1, 0).bit_length())
        return True
    if args.max_tokens < longest:
        raise ValueError(
            f"--max-tokens must be at least the longest sequence ({longest:,} tokens) for the "
            f"report to plan every sequence, got {args.max_tokens:,}: pass --max-tokens "
            f"{1 << (longest - 1).bit_length()} (or leave it out: the report picks it)"
        )
    return False


def run(args: argparse.Namespace) -> int:
    """Print the comparison table (or JSON), and write the plot if asked."""
    _check_options(args)
    settings = strategy_settings(args.set)
    cost = parse_cost(args.cost)
    if args.plot is not None:
        check_output_paths(args, [args.plot], "--plot")
    # the plot on standard output (--plot /dev/stdout): the report goes to standard error
    if args.plot is not None and shares_stdout([args.plot]):
        with contextlib.redirect_stdout(sys.stderr):
            return _report(args, settings, cost)
    return _report(args, settings, cost)


def _report(args: argparse.Namespace, settings: dict[str, dict[str, Any]], cost: Any) -> int:
    """Read the lengths, compare the strategies, write the plot and print the report."""
    from ..sampling.report import budget_sweep, compare_report, grid_padding, length_summary

    lengths, name = load_lengths(args)
    summary = length_summary(lengths)
    chosen = _budget(args, int(summary["max"]))
    rows, not_run = compare_report(
        lengths,
        max_tokens=args.max_tokens,
        batch_size=args.batch_size,
        world_size=args.world_size,
        capacity=args.capacity,
        num_buckets=args.num_buckets,
        settings=settings,
        cost=cost,
    )
    sweep = budget_sweep(lengths, sorted({1024, 2048, 4096, 8192, 16384, args.max_tokens}))
    grids = None
    if summary["fields"] == 2:  # 2-D buckets: at --num-buckets × 2, and NeMo's default 30 × 2
        grids = grid_padding(lengths, sorted({(args.num_buckets, 2), (30, 2)}))
    if args.plot is not None:
        from .plot import plot_report

        plot_report(
            lengths,
            rows,
            args.plot,
            title=name,
            world_size=args.world_size,
            max_tokens=args.max_tokens,
        )
    if args.json:
        json.dump(
            {
                "input": name,
                "lengths": summary,
                "strategies": [r.as_dict() for r in rows],
                "token_budget_sweep": sweep,
                "buckets_2d": grids,
                "world_size": args.world_size,
                "max_tokens": args.max_tokens,
                "max_tokens_chosen": chosen,
                "cost": None if cost is None else cost.as_dict(),
                "not_run": not_run,
            },
            sys.stdout,
            indent=2,
        )
        print()
        return 0
    _print_report(args, name, lengths, summary, chosen, rows, not_run, sweep, grids, cost)
    return 0


WIDTH = 80  # every line of the report fits a terminal of 80 columns


def _wrapped(text: str, indent: str = "  ") -> str:
    """``text`` as lines of at most :data:`WIDTH` columns, each after ``indent``."""
    return textwrap.fill(
        text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ", break_on_hyphens=False
    )


def _print_report(
    args: argparse.Namespace,
    name: str,
    lengths: Any,
    s: dict[str, Any],
    chosen: bool,
    rows: list[Any],
    not_run: list[dict[str, str]],
    sweep: list[dict[str, Any]],
    grids: Any,
    cost: Any,
) -> None:
    """The report as text, every line within :data:`WIDTH` columns: the strategies' padding
    (each with its setting and takeaway on the line below), their balance across ranks and
    length order, the budget sweep, the 2-D buckets, and what the columns mean."""
    print(_wrapped(f"padless report: {name}", ""))
    print(
        _wrapped(
            f"{s['count']:,} sequences, {s['tokens']:,} tokens; length min {s['min']}, "
            f"median {s['median']:g}, mean {s['mean']:.1f}, p95 {s['p95']:g}, "
            f"p99 {s['p99']:g}, max {s['max']}"
        )
    )
    if args.inputs and manifest_input(args):
        for line in manifest_summary(lengths):
            print(_wrapped(line.strip()))
    if chosen:
        print(
            _wrapped(
                f"max_tokens {args.max_tokens:,}: chosen to hold the longest sequence "
                f"({s['max']:,} tokens); --max-tokens sets it"
            )
        )
    print("\n  padding and work")
    print(
        f"  {'strategy':<16} {'batches':>9} {'sent/batch':>10} {'padding':>8} {'work':>7} {'plan':>10}"
    )
    for r in rows:
        work = f"{100 * r.real_work:.1f}%" if r.real_work is not None else "-"
        print(
            f"  {r.strategy:<16} {r.batches:>9,} {r.mean_sentences:>10.1f} "
            f"{r.padding_pct:>7.2f}% {work:>7} {r.plan_ms:>8.1f}ms"
        )
        print(_wrapped(f"{r.setting}" + (f"; {r.note}" if r.note else ""), "    "))
    for skipped in not_run:
        print(_wrapped(f"{skipped['strategy']}: not run: {skipped['reason']}"))
    print(f"\n  balance across {args.world_size} ranks, and length order")
    print(f"  {'strategy':<16} {'imbalance':>9} {'balanced':>9} {'trend':>7} {'lag1':>7}")
    for r in rows:
        bal = f"{r.imbalance_balanced:.3f}" if r.imbalance_balanced is not None else "-"
        imb = f"{r.imbalance:.3f}" if r.imbalance is not None else "-"
        trend = f"{r.length_trend:+.2f}" if r.length_trend is not None else "-"
        lag1 = f"{r.length_lag1:+.2f}" if r.length_lag1 is not None else "-"
        print(f"  {r.strategy:<16} {imb:>9} {bal:>9} {trend:>7} {lag1:>7}")
    print("\n  token budget at several budgets (fairseq semantics, sorted by length)")
    print(
        f"  {'max_tokens':>10} {'batches':>9} {'sent/batch':>10} {'padding':>8} {'plan':>10}"
        f"  {'left out':>10}"
    )
    for t in sweep:
        count = t["skipped"]
        out = f"{count:,} seq." if count else "-"
        print(
            f"  {t['max_tokens']:>10,} {t['batches']:>9,} {t['mean_sentences']:>10.1f} "
            f"{t['padding_pct']:>7.2f}% {t['plan_ms']:>8.1f}ms  {out:>10}"
        )
    if grids is not None:
        _print_grids(grids)
    units = "padded tokens" if cost is None else f"cost model {cost.as_dict()}"
    print()
    for line in (
        "padding: share of token slots that are padding (count x longest per batch; "
        "packing: rows x capacity); left out: sequences longer than the budget",
        f"costs in {units}; work: share of that cost spent on real tokens",
        "imbalance: mean over steps of the slowest rank's cost over the mean rank's, at "
        f"world size {args.world_size}; balanced: the same with balance=True",
        "trend, lag1: correlation of step index with the step's mean length, and its lag-1 "
        "autocorrelation (near 0: lengths well mixed; group_by_length is HF's megabatch "
        "order, a sawtooth: lag1 above 0)",
    ):
        print(_wrapped(line))
    if args.plot is not None:
        print(_wrapped(f"plot written to {args.plot}"))


def _print_grids(grids: list[dict[str, Any]]) -> None:
    """The 2-D bucketing table: padding per field, padless's DP beside NeMo's estimate."""
    print("\n  2-D buckets (field 0, then field 1 within each): padding per field")
    print(f"  {'grid':<7} {'method':<28} {'buckets':>7} {'field 0':>8} {'field 1':>8} {'both':>8}")
    for g in grids:
        k0, k1 = g["grid"]
        grid = f"{k0}x{k1}" if g["method"] != "1d_max" else f"{k0 * k1}"
        f0, f1 = g["padding_pct"]
        print(
            f"  {grid:<7} {g['label']:<28} {g['buckets']:>7} {f0:>7.2f}% {f1:>7.2f}% "
            f"{g['total_pct']:>7.2f}%"
        )
    print(
        "  padding of each bucket's bound (count x its longest, per field); NeMo/lhotse:\n"
        "  equal total length per bucket, then per sub-bucket (estimate_duration_bins_2d)"
    )
