"""The census of the composition matrix: run every cell (or the pairwise sample) and count.

    .venv/bin/python -m tests.matrix.census             # every cell (about 1,400)
    .venv/bin/python -m tests.matrix.census --pairs     # the pairwise sample make test runs
    .venv/bin/python -m tests.matrix.census --only packing,hf --jobs 2
    .venv/bin/python -m tests.matrix.census --write-known tests/matrix/known.py

Prints the counts per outcome, the refusals by reason, then the cells that do not work grouped
by reason (a reason's numbers blanked, so cells failing alike are listed together), in at most
80 columns.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import textwrap
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from .build import Env
from .cells import BROKEN, OUTCOMES, Outcome, run_cell
from .factors import Cell, all_cells
from .sample import SAMPLE

WIDTH = 80


def _run_many(args: tuple[list[str], str]) -> list[tuple[str, Outcome, float]]:
    ids, folder = args
    env = Env(Path(folder))
    out = []
    for cid in ids:
        start = time.perf_counter()
        outcome = run_cell(Cell.parse(cid), env)
        out.append((cid, outcome, time.perf_counter() - start))
    return out


def run(cells: list[Cell], jobs: int, folder: str) -> dict[str, tuple[Outcome, float]]:
    ids = [c.id for c in cells]
    if jobs <= 1:
        done = _run_many((ids, folder))
    else:
        chunks = [(ids[i::jobs], f"{folder}/job{i}") for i in range(jobs)]
        with ProcessPoolExecutor(jobs) as pool:
            done = [r for part in pool.map(_run_many, chunks) for r in part]
    return {cid: (outcome, seconds) for cid, outcome, seconds in done}


def pattern(reason: str) -> str:
    """A reason with its numbers and quoted values blanked (cells failing alike group)."""
    text = re.sub(r"'[^']*'", "'…'", reason)
    text = re.sub(r"\d+", "#", text)
    return text


def report(
    results: dict[str, tuple[Outcome, float]], out: list[str], verbose: bool = False
) -> None:
    """Counts, then the cells by outcome and reason (the refused ones' cells with verbose)."""
    counts = Counter(o.kind for o, _ in results.values())
    total = len(results)
    out.append(f"{total} cells: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in OUTCOMES))
    for kind in OUTCOMES[1:]:
        groups: dict[str, list[str]] = defaultdict(list)
        for cid, (o, _) in results.items():
            if o.kind == kind:
                groups[pattern(o.reason)[:72]].append(cid)
        if not groups:
            continue
        out.append("")
        out.append(f"== {kind} ({counts[kind]})")
        for reason, cids in sorted(groups.items(), key=lambda g: (-len(g[1]), g[0])):
            out.append(textwrap.shorten(f"- [{len(cids)}] {reason}", WIDTH, placeholder="…"))
            if kind == "refused" and not verbose:
                continue  # refused when built: what the docs' table lists, not a defect
            out.extend(
                textwrap.wrap(
                    " ".join(sorted(cids)), WIDTH, initial_indent="    ", subsequent_indent="    "
                )
            )


KNOWN_HEADER = '''"""The matrix's cells as they stand: the ones refused when built (with a fragment of the
message), and the ones broken (late, silent, crash, refused unhelpfully), each with its reason.

Written by ``python -m tests.matrix.census --write-known tests/matrix/known.py`` from a census
of every cell at the fixed positions; ``test_matrix.py`` holds the sampled cells to it (a broken
cell is an xfail(strict=True): fixing it fails the test until its entry leaves KNOWN_BROKEN).
"""

# fmt: off
'''


def render_known(results: dict[str, tuple[Outcome, float]]) -> str:
    """tests/matrix/known.py for these results."""
    out = [KNOWN_HEADER.rstrip("\n"), "KNOWN_BROKEN: dict[str, str] = {"]
    for cid, (o, _) in sorted(results.items()):
        if o.kind in BROKEN:
            out.append(f"    {cid!r}: {(o.kind + ': ' + o.reason)[:120]!r},")
    out.append("}")
    out.append("REFUSED: dict[str, str] = {")
    for cid, (o, _) in sorted(results.items()):
        if o.kind == "refused":
            out.append(f"    {cid!r}: {fragment(o.message)!r},")
    out.append("}")
    out.append("# fmt: on")
    return "\n".join(out) + "\n"


def fragment(message: str) -> str:
    """The part of a refusal's message a test expects: its first words after the type."""
    text = message.split(": ", 1)[-1].split(" /")[0]  # no paths: they differ run to run
    return text[:60].rstrip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.matrix.census")
    parser.add_argument("--pairs", action="store_true", help="the pairwise sample only")
    parser.add_argument("--only", default="", help="cells holding all these values (a,b)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--write-known", default="", help="write known.py (every cell run)")
    parser.add_argument("--slowest", type=int, default=0, help="list the N slowest cells")
    parser.add_argument("--verbose", action="store_true", help="list the refused cells too")
    args = parser.parse_args(argv)
    cells = list(SAMPLE) if args.pairs else all_cells()
    if args.only:
        wanted = args.only.split(",")
        cells = [c for c in cells if all(w in c.values() for w in wanted)]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        results = run(cells, args.jobs, folder)
    out: list[str] = []
    report(results, out, args.verbose)
    out.append("")
    out.append(f"{len(results)} cells in {time.perf_counter() - start:.0f} s")
    if args.slowest:
        for cid, (_, sec) in sorted(results.items(), key=lambda r: -r[1][1])[: args.slowest]:
            out.append(f"{sec:6.1f} s  {cid}")
    if args.write_known:
        Path(args.write_known).write_text(render_known(results))
    print("\n".join(out))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
