"""The ``padless`` command. Subcommands load their modules lazily so ``padless --help`` is fast.

Layout: ``inputs`` (options and reading shared by the subcommands that read lengths),
``settings`` (``--set key=value`` parsed by a spec's field types), ``report``, ``plot``,
``plan``, ``shuffle`` and ``simulate``; each subcommand module has ``add_arguments(parser)`` and ``run(args)``.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from importlib import import_module
from typing import NoReturn

# name -> (module with add_arguments(parser) and run(args) -> int, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "report": (
        "padless.cli.report",
        "compare batching strategies on a corpus (default: built-in)",
    ),
    "plan": ("padless.cli.plan", "compute and save the batch plan of one or more epochs"),
    "shuffle": ("padless.cli.shuffle", "shuffle a file bigger than memory, uniformly and safely"),
    "simulate": ("padless.cli.simulate", "place global batches on a DP x CP x PP mesh and predict"),
}

# exit status when standard output is closed early (``padless report --json | head``): what a
# tool killed by SIGPIPE reports, with no message
BROKEN_PIPE_STATUS = 141


def build_parser(load: str | None = None) -> argparse.ArgumentParser:
    """Build the parser; only the chosen subcommand's module is imported."""
    parser = argparse.ArgumentParser(
        prog="padless",
        description="Plan training batches for variable-length sequences with as little padding "
        "as possible.",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"padless {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == load:
            import_module(module).add_arguments(p)
    return parser


def _silence_stdout() -> None:
    """Point standard output at the null device so the interpreter's final flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # pragma: no cover - no real stdout
        pass


def _stdout_gone() -> bool:
    """Whether standard output is a pipe whose reader has gone (``| head`` that has exited):
    poll reports an error on the write end of a pipe with no reader."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _fd, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no poll (Windows) or no real stdout
        return False


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``padless`` console script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(chosen if chosen in SUBCOMMANDS else None)
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help()
        return 0
    module = import_module(SUBCOMMANDS[args.command][0])
    try:
        status = int(module.run(args) or 0)
        sys.stdout.flush()  # inside the try: a closed pipe is met here, not at exit
        return status
    except KeyboardInterrupt:
        print("padless: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of standard output went away (| head): stop quietly, as cat or grep do
        _silence_stdout()
        return BROKEN_PIPE_STATUS
    except RecursionError as exc:  # a value nested deeper than Python's recursion limit
        print(
            f"padless {args.command}: error: input nested too deeply to read ({exc})",
            file=sys.stderr,
        )
        return 2
    except (ValueError, TypeError, OSError, ImportError) as exc:
        if isinstance(exc, OSError) and exc.errno == errno.EPIPE and _stdout_gone():
            # a closed standard output reported as another OSError (the shuffle's writer
            # thread re-raises it with what it was writing): as quiet as BrokenPipeError
            _silence_stdout()
            return BROKEN_PIPE_STATUS
        print(f"padless {args.command}: error: {exc}", file=sys.stderr)
        return 2


def command() -> NoReturn:
    """The ``padless`` program: :func:`main`, its status the process's."""
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    command()
