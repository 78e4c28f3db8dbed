"""The step planner's placement: items, heaviest first, each into the least-cost bin with room
(or, where that fails, the tightest).

The kernel is C++ (``padless._core``, csrc/step.hpp); ``step_fit_reference`` is the spec.
"""

from __future__ import annotations

import numpy as np

from .. import _core


def step_fit(
    sizes: np.ndarray, costs: np.ndarray, bins: int, step: int, capacity: int
) -> tuple[np.ndarray, int]:
    """Place items (in the order given) into ``bins`` bins of ``capacity`` tokens.

    The least-cost rule: item i goes to the bin of least cost so far (ties: the lowest bin)
    among those with at least ``sizes[i]`` tokens of room; its cost ``costs[i]`` is added to
    the bin's. When an item fits nowhere, the tight rule tries the same bins again: each item
    to the bin of least room that holds it (ties: the lowest bin; rooms compared as float64,
    exact below 2**53), a best fit, which packs where the cap binds. When that fails too, both
    start again over ``bins + step`` bins, and so on (it ends: with a bin per item every item
    fits). Sizes lie in [0, capacity]; costs are finite, >= 0. Returns ``(bin_of, bins)``: the
    bin of each item and the number of bins of the try that placed them all. O(n log bins) per
    try.
    """
    return _core.step_fit(sizes, costs, bins, step, capacity)


def _try_reference(
    sizes: list[int], costs: list[float], bins: int, capacity: int, tight: bool
) -> list[int] | None:
    load = [0.0] * bins
    room = [capacity] * bins
    bin_of = []
    for s, c in zip(sizes, costs, strict=True):
        fits = [(float(room[b]) if tight else load[b], b) for b in range(bins) if room[b] >= s]
        if not fits:
            return None
        _, b = min(fits)
        bin_of.append(b)
        load[b] += c
        room[b] -= s
    return bin_of


def step_fit_reference(
    sizes: np.ndarray, costs: np.ndarray, bins: int, step: int, capacity: int
) -> tuple[np.ndarray, int]:
    """The same rules with a plain scan: every try looks at every bin for every item."""
    sizes_l = [int(s) for s in sizes]
    costs_l = [float(c) for c in costs]
    while True:
        for tight in (False, True):
            got = _try_reference(sizes_l, costs_l, bins, capacity, tight)
            if got is not None:
                return np.array(got, dtype=np.int64), bins
        bins += step
