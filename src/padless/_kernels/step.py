"""The step planner's placement: items, heaviest first, each into the least-cost bin with room
(or, where that fails, the tightest), then each uneven slot placed again over its own bins.

The kernel is C++ (``padless._core``, csrc/step.hpp); ``step_fit_reference`` is the spec.
"""

from __future__ import annotations

import numpy as np

from .. import _core


def step_fit(
    sizes: np.ndarray,
    costs: np.ndarray,
    bins: int,
    step: int,
    capacity: int,
    world: int,
    polish: float,
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """Place items (in the order given) into bins of ``capacity`` tokens, in one call.

    The tries. The least-cost rule: item i goes to the bin of least cost so far among those with
    at least ``sizes[i]`` tokens of room; its cost ``costs[i]`` is added to the bin's. When an
    item fits nowhere, the tight rule tries the same bins again: each item to the bin of least
    room that holds it, a best fit, which packs where the cap binds. Ties, both rules: the bin
    that came to that cost and room first (untouched bins the lowest first; a bin comes to them
    when item i goes in, stamped ``bins + i``). When that fails too, both start again over ``bins + step`` bins, and so
    on (it ends: with a bin per item every item fits). Counts below a lower bound on the bins
    any placement needs are skipped (they would fail: the result is the same).

    The slots. ``bins`` and ``step`` are multiples of ``world``. The bins by cost (the most
    costly first; ties: the lowest bin), ``world`` at a time, are the slots. A slot whose most
    costly bin costs more than ``(1 + polish) ×`` its mean has its items (in their order) placed
    again over its own ``world`` bins by the least-cost rule (failing that, the tight rule), kept
    where all fit and its most costly bin costs less than before (``polish=inf``: never).

    Sizes lie in [0, capacity]; costs are finite, >= 0. Returns ``(bin_of, bins, load,
    tokens)``: the bins numbered by cost (bin ``k·world + r`` is place r of slot k, the most
    costly first), the bin of each item, how many bins, and each bin's cost and tokens.
    O(n log bins) a try for items in non-increasing size (any order: the same result).
    """
    return _core.step_fit(sizes, costs, bins, step, capacity, world, polish)


def _try_reference(
    sizes: list[int], costs: list[float], bins: int, capacity: int, tight: bool
) -> list[int] | None:
    load = [0.0] * bins
    room = [capacity] * bins
    stamp = list(range(bins))  # when each bin came to its cost and room (the tie-break)
    bin_of = []
    for i, (s, c) in enumerate(zip(sizes, costs, strict=True)):
        fits = [
            ((room[b], stamp[b]) if tight else (load[b], stamp[b]))
            for b in range(bins)
            if room[b] >= s
        ]
        if not fits:
            return None
        b = stamp.index(min(fits)[1])
        bin_of.append(b)
        load[b] += c
        room[b] -= s
        stamp[b] = bins + i
    return bin_of


def _fit_reference(
    sizes: list[int], costs: list[float], bins: int, capacity: int
) -> list[int] | None:
    for tight in (False, True):
        got = _try_reference(sizes, costs, bins, capacity, tight)
        if got is not None:
            return got
    return None


def _loads(bin_of: list[int], costs: list[float], bins: int) -> list[float]:
    load = [0.0] * bins
    for b, c in zip(bin_of, costs, strict=True):
        load[b] += c
    return load


def step_fit_reference(
    sizes: np.ndarray,
    costs: np.ndarray,
    bins: int,
    step: int,
    capacity: int,
    world: int,
    polish: float,
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """The same rules with a plain scan: every try looks at every bin for every item, from
    ``bins`` up (no bound skips a count)."""
    sizes_l = [int(s) for s in sizes]
    costs_l = [float(c) for c in costs]
    n = len(sizes_l)
    while True:
        got = _fit_reference(sizes_l, costs_l, bins, capacity)
        if got is not None:
            bin_of = got
            break
        bins += step
    load = _loads(bin_of, costs_l, bins)
    order = sorted(range(bins), key=lambda b: (-load[b], b))
    moved = False
    for k in range(bins // world):
        group = order[k * world : (k + 1) * world]
        worst, total = 0.0, 0.0
        for b in group:
            worst = max(worst, load[b])
            total += load[b]
        if not worst > total / world * (1.0 + polish):
            continue
        members = set(group)
        pick = [i for i in range(n) if bin_of[i] in members]
        sub = _fit_reference(
            [sizes_l[i] for i in pick], [costs_l[i] for i in pick], world, capacity
        )
        if sub is None or not max(_loads(sub, [costs_l[i] for i in pick], world)) < worst:
            continue
        for i, b in zip(pick, sub, strict=True):
            bin_of[i] = group[b]
        moved = True
    if moved:
        load = _loads(bin_of, costs_l, bins)
        order = sorted(range(bins), key=lambda b: (-load[b], b))
    rank = [0] * bins
    for r, b in enumerate(order):
        rank[b] = r
    numbered = [rank[b] for b in bin_of]
    tokens = [0] * bins
    for b, s in zip(numbered, sizes_l, strict=True):
        tokens[b] += s
    return (
        np.array(numbered, dtype=np.int64),
        bins,
        np.array([load[b] for b in order], dtype=np.float64),
        np.array(tokens, dtype=np.int64),
    )
