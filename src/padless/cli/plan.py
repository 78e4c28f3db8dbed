"""``padless plan``: compute one epoch's plan (or several) and save it as an ``.npz`` archive.

Driven by the registry: ``--strategy NAME`` picks a spec from :func:`padless.strategies`, and
every setting of every spec is an option (``--max-tokens``, ``--capacity``, ``--boundaries``...)
as well as ``--set key=value``; values are read by the spec field's type (see
:mod:`padless.cli.settings`). The spec is recorded in the saved plan. It prints a table of the
epochs planned, in 80 columns (wider only in a wider terminal); ``--json`` prints one JSON
record per epoch instead (input, strategy, epoch, path, batches, sentences, padding_pct,
skipped, seed, spec).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ._text import cut_left, terminal_width, wrap
from .inputs import add_input_arguments, check_output_paths, load_lengths, shares_stdout
from .settings import (
    build_spec,
    describe_kinds,
    field_kinds,
    merge_given,
    setting_fields,
    split_assignment,
)

MIN_PATH = 12  # columns of path a table row keeps; narrower, the path gets a line of its own
_PREFIX = "setting_"  # argparse dest of a spec setting given as its own option

# defaults the command line adds where a spec has none, unless one of the listed keys is given
CLI_DEFAULTS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "buckets": ({"num_buckets": 8}, ("boundaries", "num_buckets")),
}


def _registry() -> dict[str, type]:
    from ..planners import strategies

    return dict(strategies())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``padless plan`` (one per setting of the registered specs)."""
    registry = _registry()
    add_input_arguments(parser)
    parser.add_argument(
        "--strategy",
        choices=list(registry),
        default="token_budget",
        metavar="NAME",
        help=f"the planner: {', '.join(registry)} (default token_budget)",
    )
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        help="output file, written at exactly this name (an .npz archive that "
        "padless.BatchPlan.load reads); a device or pipe is written in place",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the strategy's spec, e.g. --set oversize=drop, --set "
        "boundaries=12,40,100 (ints, none, true/false, comma lists or JSON)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON record per epoch (input, strategy, epoch, path, batches, "
        "sentences, padding_pct, skipped, seed, spec) instead of a table",
    )
    parser.add_argument("--epoch", type=int, default=0, help="first epoch (default 0)")
    parser.add_argument(
        "--epochs",
        type=int,
        default=1,
        help="epochs to plan; >1 writes OUTPUT-epochE files (OUTPUT's suffix kept)",
    )
    owners: dict[str, list[str]] = {}
    rules: dict[str, str] = {}
    meanings: dict[str, str] = {}
    for name, cls in registry.items():
        for f in setting_fields(cls):
            owners.setdefault(f.name, []).append(name)
            rules.setdefault(f.name, describe_kinds(field_kinds(f)))
            meaning = getattr(cls, "about", {}).get(f.name)  # what the setting is, in words
            if meaning:
                meanings.setdefault(f.name, meaning)
    group = parser.add_argument_group(
        "strategy settings",
        "each also as --set KEY=VALUE; the strategies that take it in brackets",
    )
    for key, names in owners.items():
        option = "--" + key.replace("_", "-")
        try:
            group.add_argument(
                option,
                dest=_PREFIX + key,
                default=argparse.SUPPRESS,
                metavar="VALUE",
                help=f"{meanings.get(key, key.replace('_', ' '))}: {rules[key]} "
                f"[{', '.join(names)}]",
            )
        except argparse.ArgumentError:  # a setting named like a command option: --set only
            continue


def _given(args: argparse.Namespace) -> dict[str, tuple[str, str]]:
    sources = [
        (key[len(_PREFIX) :], "--" + key[len(_PREFIX) :].replace("_", "-"), str(value))
        for key, value in vars(args).items()
        if key.startswith(_PREFIX)
    ]
    for text in args.set:
        key, value = split_assignment(text)
        sources.append((key, "--set", value))
    return merge_given(sources)


def make_spec(args: argparse.Namespace) -> Any:
    """The spec the command line describes (validated by the spec itself)."""
    name = args.strategy
    cls = _registry()[name]
    given = _given(args)
    known = [f.name for f in setting_fields(cls)]
    where = f"--strategy {name}"
    if not given:
        defaults = CLI_DEFAULTS.get(name, ({}, ()))[0]
        spec = build_spec(name, cls, {}, defaults=defaults, where=where)
        # no setting at all: refuse a spec that would batch without any limit
        if not defaults:
            others = ", ".join(f"--{k.replace('_', '-')}" for k in known[1:])
            raise ValueError(
                f"{name} needs --{known[0].replace('_', '-')} or another of its settings "
                f"({others}), or --set KEY=VALUE"
            )
        return spec
    defaults, unless = CLI_DEFAULTS.get(name, ({}, ()))
    if any(k in given for k in unless):
        defaults = {}
    return build_spec(name, cls, given, defaults=defaults, where=where)


def _targets(output: str, first: int, epochs: int) -> list[str]:
    if epochs == 1:
        return [output]
    from ..core._output import is_device

    if is_device(output):
        raise ValueError(
            f"-o/--output {output!r} is a device or pipe, and --epochs {epochs} writes one file "
            "per epoch beside the name given (NAME-epochE): name a file, or plan one epoch "
            "(--epochs 1) into the device"
        )
    folder, base = os.path.split(output)
    stem, suffix = os.path.splitext(base)
    return [os.path.join(folder, f"{stem}-epoch{e}{suffix}") for e in range(first, first + epochs)]


def run(args: argparse.Namespace) -> int:
    """Plan the requested epochs and save each at exactly its path; print one JSON line each."""
    from ..core._check import check_seed, positive
    from ..io import lengths_of
    from ..planners.spec import spec_to_dict

    positive("--epochs", args.epochs)
    check_seed("--seed", args.seed)
    check_seed("--epoch", args.epoch)
    spec = make_spec(args)
    targets = _targets(args.output, args.epoch, args.epochs)
    check_output_paths(args, targets, "-o/--output")
    # the plan itself on standard output (-o /dev/stdout): the summary goes to standard error
    summary = sys.stderr if shares_stdout(targets) else sys.stdout
    lengths, name = load_lengths(args)
    lens = lengths_of(lengths)
    try:
        planner = spec.bind(lens)
        first = planner.plan(args.seed, args.epoch)
    except ValueError:
        better = _oversize_error(args, spec, lens)
        if better is None:
            raise
        raise better from None
    record = spec_to_dict(spec)
    lines = []
    for e, target in zip(range(args.epoch, args.epoch + args.epochs), targets, strict=True):
        plan = first if e == args.epoch else planner.plan(args.seed, e)
        plan.save(target, spec=spec)
        st = plan.stats(lens)
        line = {
            "input": name,
            "strategy": spec.name,
            "epoch": e,
            "path": target,
            "batches": st.batches,
            "sentences": st.sentences,
            "padding_pct": round(100 * st.padding_fraction, 4),
            "skipped": int(plan.skipped.size),
            "seed": args.seed,
            "spec": record,
        }
        if args.json:
            print(json.dumps(line), file=summary, flush=True)
        lines.append(line)
    if not args.json:
        print(table(lines, terminal_width()), file=summary)
    return 0


def _oversize_error(args: argparse.Namespace, spec: Any, lens: Any) -> ValueError | None:
    """The error of a plan refused for sequences longer than the spec holds, in the command
    line's words (``--oversize drop``), or None when that is not why: the spec is planned again
    with ``oversize="drop"`` and must then leave sequences out."""
    import dataclasses

    from ..core.lengths import sizes_of

    if getattr(spec, "oversize", None) != "error":
        return None
    try:
        dropped = dataclasses.replace(spec, oversize="drop").bind(lens).plan(args.seed, args.epoch)
    except (ValueError, TypeError):
        return None
    count = int(dropped.skipped.size)
    if count == 0:
        return None
    others = []
    for choice in ("split", "truncate"):  # the other ways the spec may take, if any
        try:
            dataclasses.replace(spec, oversize=choice)
        except (ValueError, TypeError):
            continue
        others.append(choice)
    settings = [
        f"--set {key}={text}" if option == "--set" else f"{option} {text}"
        for key, (option, text) in _given(args).items()
    ]
    sizes = sizes_of(lens)
    return ValueError(
        f"--strategy {spec.name}: {count:,} of {sizes.size:,} sequences are longer than "
        f"{', '.join(settings) or 'its settings'} allow{'s' if len(settings) == 1 else ''} "
        "(the longest: "
        f"{int(sizes.max()):,} tokens): pass --oversize drop to leave them out"
        + (f" (or --oversize {' or '.join(others)})" if others else "")
        + ", or raise the limit"
    )


def table(lines: list[dict[str, Any]], width: int) -> str:
    """The records of the epochs planned as text of at most ``width`` columns: the input,
    strategy and settings (wrapped), then a row per epoch, its path cut at the left to fit."""
    first = lines[0]
    settings = ", ".join(f"{k}={v}" for k, v in first["spec"].items() if k != "strategy")
    out = [
        wrap(f"padless plan: {first['input']}, {first['strategy']}, seed {first['seed']}", width),
        wrap(f"  settings: {settings}", width, indent="    "),
    ]
    head = f"{'epoch':>5} {'batches':>9} {'sequences':>11} {'padding':>8} {'skipped':>8}  "
    rows = [
        f"{line['epoch']:>5} {line['batches']:>9,} {line['sentences']:>11,} "
        f"{line['padding_pct']:>7.2f}% {line['skipped']:>8,}  "
        for line in lines
    ]
    if width - max(len(r) for r in rows + [head]) >= MIN_PATH:
        out.append(head + "path")
        for row, line in zip(rows, lines, strict=True):
            out.append(row + cut_left(line["path"], width - len(row)))
        return "\n".join(out)
    # too narrow for the columns and a path: each epoch in words, its path on the next line
    for line in lines:
        out.append(
            wrap(
                f"epoch {line['epoch']}: {line['batches']:,} batches, {line['sentences']:,} "
                f"sequences, {line['padding_pct']:.2f}% padding, {line['skipped']:,} skipped",
                width,
            )
        )
        out.append("  path: " + cut_left(line["path"], width - 8))
    return "\n".join(out)
