"""The fixed sample ``make test`` runs: a pairwise covering array of the matrix's cells."""

from __future__ import annotations

from .factors import FACTORS, Cell, not_a_cell
from .pairwise import covering

COST = {"hf": 10.0, "torchdata": 3.0}  # seconds a cell of the consumer costs, about


def _valid(row: tuple[str, ...]) -> bool:
    return not_a_cell(*row) is None


def _cost(row: tuple[str, ...]) -> float:
    return COST.get(row[3], 1.0)


SAMPLE: list[Cell] = [
    Cell(*row) for row in covering(list(FACTORS.values()), valid=_valid, cost=_cost)
]
