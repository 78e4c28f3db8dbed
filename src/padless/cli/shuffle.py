"""``padless shuffle``: shuffle a file bigger than memory, uniformly and safely.

The kind of file is chosen by ``--record-size``, ``--lines`` or ``--indexed`` (a Megatron/fairseq
``.idx`` + ``.bin`` pair, whose documents are shuffled into a new pair); an SRC ending in ``.idx``
implies ``--indexed``.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from ._text import cut_left

# Memory of the command itself when it calls the shuffle: the interpreter, numpy, padless and
# argparse (about 40 MiB measured on Linux x86-64), with margin. ``--memory`` covers the whole
# process, so the shuffle gets ``--memory`` less this.
COMMAND_RESERVE = 48 << 20
COMMAND_MIN_MEMORY = 64 << 20
DEFAULT_MEMORY = "1G"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``shuffle`` options to ``parser``.

    >>> p = argparse.ArgumentParser()
    >>> add_arguments(p)
    >>> p.parse_args(["in.bin", "out.bin", "--record-size", "16"]).record_size
    16
    """
    parser.add_argument("src", metavar="SRC", help="file to shuffle, or - for standard input")
    parser.add_argument(
        "dst", metavar="DST", help="file to write, or - for standard output (--indexed: a prefix)"
    )
    # one kind is required; it is checked in run(), since an .idx SRC implies --indexed
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument(
        "--record-size", type=int, metavar="N", help="fixed-size binary records of N bytes"
    )
    kind.add_argument(
        "--lines",
        action="store_true",
        help="shuffle lines: any bytes up to and including a newline; a last line without a "
        "newline gets one (with a warning)",
    )
    kind.add_argument(
        "--indexed",
        action="store_true",
        help="SRC is a Megatron/fairseq indexed dataset (prefix, .idx or .bin): write its "
        "documents in a random order to DST.idx + DST.bin (implied by an .idx SRC)",
    )
    parser.add_argument(
        "--sequences",
        action="store_true",
        help="with --indexed: shuffle sequences (each its own document), not documents",
    )
    parser.add_argument(
        "--memory",
        default=None,  # DEFAULT_MEMORY; None tells an option given from none (--indexed)
        metavar="SIZE",
        help="memory budget of the whole command, e.g. 512M or 4G (binary units; at least 64M; "
        "default 1G): its peak resident memory stays within it, the interpreter included",
    )
    parser.add_argument(
        "--seed", type=int, default=None, metavar="S", help="seed (default: a fresh one, reported)"
    )
    parser.add_argument(
        "--tmp-dir",
        default=None,
        metavar="DIR",
        help="where temporary bucket files go (default: DST's directory); needs about the "
        "input's size free",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=1,
        metavar="N",
        help="write N files DST.00000-of-0000N ... whose concatenation is the shuffle",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="print nothing on success (no summary, no bar)"
    )


def run(args: argparse.Namespace) -> int:
    """Run ``padless shuffle`` with parsed ``args``; return the exit status.

    The shuffle gets ``--memory`` less ``COMMAND_RESERVE`` (the command's own memory), so
    ``padless shuffle --memory M`` writes what ``shuffle_file(..., memory=M - 48 MiB)`` writes.
    """
    from ..shuffle import parse_memory, shuffle_file
    from ..shuffle._safety import check_memory

    _check_options(args)
    indexed = bool(args.indexed) or (
        args.record_size is None and not args.lines and args.src.endswith(".idx")
    )
    if indexed:
        return _run_indexed(args)
    if args.record_size is None and not args.lines:
        raise ValueError(
            "one of the arguments --record-size --lines is required (or --indexed, which an "
            ".idx SRC implies)"
        )
    if args.sequences:
        raise ValueError("--sequences is for an indexed dataset (--indexed, or an .idx SRC)")

    memory = DEFAULT_MEMORY if args.memory is None else args.memory
    budget = parse_memory(memory, "--memory")
    check_memory(budget, memory, "--memory")
    if budget < COMMAND_MIN_MEMORY:
        raise ValueError(
            f"--memory must be at least 64M for the command (the interpreter, numpy and padless "
            f"take about 40 MiB of it), got {memory!r}"
        )
    _check_files(args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = shuffle_file(
            args.src,
            args.dst,
            record_size=args.record_size,
            lines=bool(args.lines),
            memory=budget - COMMAND_RESERVE,
            seed=args.seed,
            tmp_dir=args.tmp_dir,
            progress=not args.quiet,
            shards=args.shards,
        )
    for warning in caught:
        _say(f"padless shuffle: warning: {warning.message}")
    for path in result.stale_removed:
        _say(f"padless shuffle: removed {path}, left by an earlier shuffle whose process is gone")
    if not args.quiet:
        kind = "lines" if args.lines else "records"
        reuse = "" if args.seed is not None else f" (reproduce with --seed {result.seed})"
        where = "memory" if result.buckets == 0 else f"{result.buckets} bucket files"
        _say(
            f"padless shuffle: {result.records:,} {kind}, {result.bytes / 1e6:,.1f} MB in "
            f"{result.seconds:.2f} s ({result.mb_per_s:,.0f} MB/s)",
            f"via {where};",
            f"seed {result.seed}",
            reuse.strip(),
        )
        if len(result.outputs) > 1:
            room = _width() - 6  # a path on a line of its own, indented, with " ..."
            _say(
                f"padless shuffle: wrote {len(result.outputs)} shards:",
                f"{cut_left(str(result.outputs[0]), room)} ...",
                cut_left(str(result.outputs[-1]), room),
            )
    return 0


def _run_indexed(args: argparse.Namespace) -> int:
    """``padless shuffle --indexed``: a new pair with the documents (or sequences) shuffled."""
    from ..shuffle._indexed import shuffle_indexed

    for bad, why in ((args.src == "-", "SRC"), (args.dst == "-", "DST")):
        if bad:
            raise ValueError(f"--indexed needs files: {why} cannot be - (a pipe)")
    given = [
        option
        for option, value in (
            ("--shards", args.shards != 1),
            ("--tmp-dir", args.tmp_dir is not None),
            ("--memory", args.memory is not None),  # the indexed shuffle maps the pair
        )
        if value
    ]
    if given:
        raise ValueError(
            f"{' and '.join(given)} {'is' if len(given) == 1 else 'are'} for --record-size and "
            "--lines, not --indexed (an .idx SRC): the indexed shuffle writes one new pair, "
            "gathering tokens a few MB at a time (its memory is O(documents), not a budget)"
        )
    result = shuffle_indexed(args.src, args.dst, seed=args.seed, documents=not args.sequences)
    if not args.quiet:
        kind = "documents" if result.documents else "sequences"
        reuse = "" if args.seed is not None else f" (reproduce with --seed {result.seed})"
        _say(
            f"padless shuffle: {result.items:,} {kind}",
            f"({result.sequences:,} sequences, {result.bytes / 1e6:,.1f} MB, {result.format})",
            f"in {result.seconds:.2f} s ({result.mb_per_s:,.0f} MB/s)",
            f"to {cut_left(str(result.outputs[0]), _width() - 15)} + .bin;",
            f"seed {result.seed}",
            reuse.strip(),
        )
    return 0


def _check_options(args: argparse.Namespace) -> None:
    """Refuse bad numbers up front, naming the option."""
    from ..core._check import check_seed, positive

    if args.record_size is not None:
        positive("--record-size", args.record_size)
    positive("--shards", args.shards)
    if not args.indexed:
        from ..shuffle._safety import check_open_files

        check_open_files(args.shards, name="--shards")  # room for the shards' files, or refuse
    if args.seed is not None:
        check_seed("--seed", args.seed)


def _check_files(args: argparse.Namespace) -> None:
    """Refuse a SRC, DST or --tmp-dir of the wrong kind up front, naming the argument."""
    import os

    from ..shuffle import shard_paths

    if args.src != "-" and os.path.isdir(args.src):
        raise ValueError(f"SRC {args.src!r} is a directory: name the file to shuffle")
    if args.dst == "-":
        if args.shards != 1:
            raise ValueError(
                f"--shards must be 1 when DST is - (standard output), got {args.shards}"
            )
    else:
        for path in shard_paths(args.dst, args.shards):
            if os.path.isdir(path):
                raise ValueError(f"DST {path!r} is a directory: name a file to write")
    if args.tmp_dir is not None and not os.path.isdir(args.tmp_dir):
        raise ValueError(f"--tmp-dir must be an existing directory, got {args.tmp_dir!r}")


def _width() -> int:
    from ._text import terminal_width

    return terminal_width()


def _say(*parts: str) -> None:
    """A message on stderr in the terminal's width (80 columns in a pipe), its lines broken
    between ``parts`` (so a figure and its unit, or a path, stay on one line)."""
    from ._text import fit

    print(fit([p for p in parts if p], _width()), file=sys.stderr)
