"""A pairwise covering array of the matrix: a small set of cells in which every pair of factor
values (of two different factors) that some cell holds meets at least once.

Greedy and deterministic: repeatedly take the cell that covers the most pairs not yet covered,
cheaper cells first among equals (an HF Trainer cell costs seconds), then in factor order. No
randomness, so ``make test`` runs the same sample every time.

>>> rows = covering([("a", "b"), ("x", "y"), ("1", "2")])
>>> len(rows)
4
>>> sorted({p for r in rows for p in pairs_of(r)}) == sorted(all_pairs([("a", "b"), ("x", "y"), ("1", "2")]))
True
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

Row = tuple[str, ...]
Pair = tuple[int, str, int, str]


def pairs_of(row: Row) -> list[Pair]:
    """The pairs of factor values a row holds: ``(factor i, value, factor j, value)``, i < j."""
    return [(i, row[i], j, row[j]) for i, j in itertools.combinations(range(len(row)), 2)]


def all_pairs(
    factors: Sequence[Sequence[str]], valid: Callable[[Row], bool] | None = None
) -> set[Pair]:
    """Every pair some valid row holds."""
    rows = [r for r in itertools.product(*factors) if valid is None or valid(r)]
    return {p for r in rows for p in pairs_of(r)}


def covering(
    factors: Sequence[Sequence[str]],
    valid: Callable[[Row], bool] | None = None,
    cost: Callable[[Row], float] | None = None,
) -> list[Row]:
    """The rows, in the order they were chosen."""
    candidates = [r for r in itertools.product(*factors) if valid is None or valid(r)]
    holds = {r: set(pairs_of(r)) for r in candidates}
    todo = {p for r in candidates for p in holds[r]}
    chosen: list[Row] = []
    while todo:
        best = max(
            candidates,
            key=lambda r: (len(holds[r] & todo), -(cost(r) if cost else 0.0)),
        )
        gained = holds[best] & todo
        if not gained:  # pragma: no cover - every pair left is held by some candidate
            break
        chosen.append(best)
        todo -= gained
    return chosen
