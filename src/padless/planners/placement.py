"""Placement of a global batch over a data × context × pipeline parallel mesh, and its simulation.

:func:`place` decides, for one global batch, each sequence's context-parallel degree, its ranks,
its micro-batch and its order; :func:`plan_placement` cuts an epoch into global batches (a pure
function of the lengths, the seed, the epoch and the step: resume is recomputation, and a new
mesh re-places the steps left, each sequence still once); :func:`simulate` predicts what the
step costs before any GPU runs it.

How :func:`place` decides (``L`` a length, ``k`` its CP degree, ``t(L, k)`` a
:class:`padless.MeshCost`'s forward + backward seconds of one shard):

1. **Degrees.** With a fixed ``cp`` every sequence takes its data-parallel group's ``cp`` ranks
   (the lanes are the ``dp`` groups). With ``dynamic=True`` the lanes are the ``dp·cp`` ranks
   and a sequence gets the smallest ``k`` whose shard fits ``max_tokens``, raised (up to ``cp``)
   while its shard still takes longer than a target, a multiple of a micro-batch's mean share of
   the work: long sequences spread so that short ones fill the slot beside them. ``k`` is any
   integer. Four targets are tried, and a fifth spread: each long sequence at the widest degree
   that costs no more than 2% over its fewest rank-seconds (the exchange still hidden). Two
   more candidates are built the way Megatron-LM's dev branch builds its schedule (one
   micro-batch at a time); the placement whose replayed step is shortest is kept.
2. **Micro-batches.** ``mesh.micro_batches``, or the fewest that hold the tokens (at least
   ``pp``), a multiple of ``vpp`` (and of ``pp`` interleaved); every rank runs them all.
3. **Slots.** Longest shard first, each sequence goes to the micro-batch where it would finish
   first, on the ``k`` ranks there that are free soonest and still have room for its tokens
   (compiled: ``padless._kernels.placement.place_items``). Where nothing fits, as many more
   micro-batches as the tokens left need, and again.
4. **Order.** Micro-batches run cheapest first, the next cheapest last, the rest longest first
   (a pipeline's warm-up and cool-down pay the ends).

Megatron-LM's dynamic CP (its dev branch) builds one packed micro-batch at a time with CP sizes
of powers of two; here the whole global batch is planned at once and any degree up to ``cp`` is
allowed (docs/placement.md compares them; benchmarks/bench_placement.py runs both).

>>> from padless import Cost
>>> mesh = Mesh(dp=2, cp=4, dynamic=True, max_tokens=4096)
>>> cost = MeshCost(forward=Cost(linear=1e-6, quadratic=1e-10),
...                 backward=Cost(linear=2e-6, quadratic=2e-10), kv_bytes=65536, bandwidth=5e10)
>>> p = place([12000, 3000, 2500, 900, 700, 16000, 5000, 400], mesh, cost)
>>> p.micro_batches, sorted(p.degrees.tolist())
(2, [1, 1, 1, 1, 1, 3, 4, 4])
>>> step = p.rank_step(0)
>>> len(step), int(step[0][0].cu_seqlens_padded[-1]) <= 4096 * step[0][0].cp
(2, True)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from .._kernels import placement as KP
from ..core import _rng
from ..core._check import check_bool, check_int, check_seed, positive, positive_or_none
from ..core.cost import _lengths_array
from ..core.memory import MemoryModel
from ..core.mesh import MAX_MICRO_BATCHES, Mesh, MeshCost, padded, rank_tokens
from ..core.plan import _as_int64_vector

__all__ = [
    "Placement",
    "PlacementPlan",
    "Segment",
    "Simulation",
    "place",
    "plan_placement",
    "simulate",
]

NO_BUDGET = 1 << 62
# multiples of a slot's mean share that a long shard is spread to fit, tried in this order
SPREADS = (1.0, 2.0, 0.5, 0.25)
# the free spread: each long sequence at the widest degree within this share over its least k·t
FREE_SLACK = 0.02
# with pipeline stages, up to this many micro-batches place also tries _even_fixed's path
FIXED_PATH = 24


class Segment(NamedTuple):
    """What one rank runs of one CP group in one micro-batch, in THD form.

    Attributes:
        group: the ranks of the CP group (stage-local ranks ``0..dp·cp−1``), ascending.
        cp_rank: this rank's place in ``group`` (it takes zigzag chunks ``cp_rank`` and
            ``2·cp − 1 − cp_rank`` of every sequence).
        cp: the group's CP degree (``len(group)``).
        indices: the sequences (dataset indices), in the order packed.
        cu_seqlens: bounds of the real tokens in the packed (whole, unsplit) row.
        cu_seqlens_padded: bounds with each sequence padded to a multiple of ``2·cp`` (of 1 when
            ``cp == 1``): what ``padless.torch.zigzag_indices`` cuts.
    """

    group: tuple[int, ...]
    cp_rank: int
    cp: int
    indices: np.ndarray
    cu_seqlens: np.ndarray
    cu_seqlens_padded: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class Placement:
    """One global batch placed on a mesh (made by :func:`place`).

    Items are the batch's sequences in the order they run: by micro-batch, then by predicted
    start. Attributes: ``indices`` (dataset index per item), ``lengths``, ``slots`` (micro-batch
    position, 0-based, in run order), ``degrees`` (CP degree), ``ranks`` ((N, max degree)
    stage-local ranks, −1 past the degree), ``times`` (predicted seconds of each shard),
    ``micro_batches``, ``mesh``, ``cost``, ``delayed`` (indices this step postponed).
    """

    mesh: Mesh
    cost: MeshCost
    indices: np.ndarray
    lengths: np.ndarray
    slots: np.ndarray
    degrees: np.ndarray
    ranks: np.ndarray
    times: np.ndarray
    micro_batches: int
    delayed: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))

    def __len__(self) -> int:
        return int(self.indices.size)

    def rank_tokens(self) -> np.ndarray:
        """Tokens each stage rank holds per micro-batch: an (micro-batches, dp·cp) int64 array
        (padded tokens, each sequence padded to ``2·k`` and divided by ``k``)."""
        out = np.zeros((self.micro_batches, self.mesh.ranks), dtype=np.int64)
        tau = rank_tokens(self.lengths, self.degrees)
        for j in range(self.ranks.shape[1]):
            on = self.ranks[:, j] >= 0
            np.add.at(out, (self.slots[on], self.ranks[on, j]), tau[on])
        return out

    def rank_step(self, rank: int) -> list[list[Segment]]:
        """What stage rank ``rank`` (``0 ≤ rank < dp·cp``) runs: per micro-batch, in order, its
        segments (consecutive sequences of the same CP group packed into one THD row).
        """
        r = check_int("rank", rank, minimum=0)
        if r is None or r >= self.mesh.ranks:
            raise ValueError(f"rank must be in [0, dp·cp) = [0, {self.mesh.ranks}), got {r}")
        out: list[list[Segment]] = [[] for _ in range(self.micro_batches)]
        mine = np.flatnonzero((self.ranks == r).any(axis=1))
        current: list[int] = []

        def close() -> None:
            if not current:
                return
            first = current[0]
            row = self.ranks[first]
            group = tuple(int(x) for x in row[row >= 0])
            k = int(self.degrees[first])
            lens = self.lengths[current]
            cu = np.zeros(lens.size + 1, dtype=np.int64)
            np.cumsum(lens, out=cu[1:])
            cup = np.zeros(lens.size + 1, dtype=np.int64)
            np.cumsum(padded(lens, k), out=cup[1:])
            seg = Segment(group, group.index(r), k, self.indices[current].copy(), cu, cup)
            out[int(self.slots[first])].append(seg)
            current.clear()

        for i in mine.tolist():
            if current and (
                self.slots[i] != self.slots[current[0]]
                or not np.array_equal(self.ranks[i], self.ranks[current[0]])
            ):
                close()
            current.append(i)
        close()
        return out


def fitted_degrees(lens: np.ndarray, mesh: Mesh) -> np.ndarray:
    """Each sequence's smallest CP degree whose shard fits ``mesh.max_tokens`` per rank (with
    dynamic CP: ``L ≤ cap`` at 1, else ``2·k·⌊cap/2⌋ ≥ L``, a shard being ``2·⌈L/2k⌉`` tokens;
    with a fixed ``cp``: ``cp`` itself). A ``ValueError`` names the first sequence no degree up
    to ``cp`` fits: what :func:`place`, :func:`plan_placement` and :class:`padless.Placer` refuse
    up front."""
    n = lens.size
    cap = mesh.max_tokens or NO_BUDGET
    if not mesh.dynamic:
        too = rank_tokens(lens, mesh.cp) > cap
        if too.any():
            i = int(np.flatnonzero(too)[0])
            raise ValueError(
                f"lengths must fit max_tokens={cap} per rank split over cp={mesh.cp} ranks, got "
                f"length {int(lens[i])} (sequence {i}); raise max_tokens or cp, or use "
                "dynamic=True with a larger cp"
            )
        return np.full(n, mesh.cp, dtype=np.int64)
    half = cap // 2
    if half == 0:  # a CP shard holds 2 tokens at least: at max_tokens=1 no sequence splits
        widths = np.where(lens <= cap, 1, mesh.cp + 1).astype(np.int64)
    else:
        widths = np.where(lens <= cap, 1, np.maximum(-(-lens // (2 * half)), 2)).astype(np.int64)
    if n and int(widths.max()) > mesh.cp:
        i = int(np.argmax(widths))
        raise ValueError(
            f"lengths must fit max_tokens={cap} per rank at the largest CP degree cp="
            f"{mesh.cp}, got length {int(lens[i])} (sequence {i}); raise max_tokens or cp"
            + (
                " (a sequence split over CP ranks puts 2 tokens at least on each)"
                if not half
                else ""
            )
        )
    return widths


def _degrees(
    lens: np.ndarray, mesh: Mesh, cost: MeshCost, lanes: int, slots: int | None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Smallest width (lanes taken) and its shard time of every sequence, and the micro-batch
    count."""
    cap = mesh.max_tokens or NO_BUDGET
    degrees = fitted_degrees(lens, mesh)
    if not mesh.dynamic:
        times = np.asarray(cost.time(lens, mesh.cp), dtype=np.float64)
        widths = np.ones(lens.size, dtype=np.int64)
        # lane-tokens: a lane is a DP group, each rank holding its share
        held = float(rank_tokens(lens, mesh.cp).sum())
    else:
        widths = degrees
        times = np.asarray(cost.time(lens, widths), dtype=np.float64)
        held = float((rank_tokens(lens, widths) * widths).sum())
    # micro-batches: the fewest that hold the tokens (with a tenth to spare), at least pp
    need = 1 if mesh.max_tokens is None else max(1, math.ceil(held / (0.9 * lanes * cap)))
    m = slots if slots is not None else max(need, mesh.pp)
    m = -(-m // mesh.multiple) * mesh.multiple
    return widths, times, m


def _coefs(cost: MeshCost) -> np.ndarray:
    """``cost`` as :func:`padless._kernels.placement.cost_table`'s 9 coefficients (the exchange
    seconds per token computed as :class:`MeshCost` computes them)."""
    out = []
    for pass_cost, bytes_factor in ((cost.forward, 1.0), (cost.backward, 2.0)):
        exchange = bytes_factor * cost.kv_bytes / cost.bandwidth
        out += [pass_cost.linear, pass_cost.quadratic, pass_cost.per_sequence, exchange]
    return np.array([*out, cost.latency], dtype=np.float64)


class _Table:
    """Shard times at every degree of the rows that may be spread, costed once for every
    candidate spread (rows outside it are costed when a spread needs them and appended: the
    table's rows are in the order costed, ``pos`` maps a row to its place)."""

    def __init__(self, lens: np.ndarray, cost: MeshCost, cp: int, kmin: np.ndarray) -> None:
        self.lens, self.cost, self.kmin = lens, cost, kmin
        self.ks = np.arange(1, cp + 1, dtype=np.int64)
        self.rows = np.zeros(0, dtype=np.int64)
        self.pos = np.full(lens.size, -1, dtype=np.int64)
        self._times = np.zeros((0, cp))  # capacity rows; the first rows.size hold the table
        self._fastest = np.zeros(0, dtype=np.int64)
        self._widest = np.zeros(0, dtype=np.int64)

    @property
    def table(self) -> np.ndarray:
        """The (rows, cp) table, inf below each row's smallest degree (a view)."""
        return self._times[: self.rows.size]

    def at(self, rows: np.ndarray) -> np.ndarray:
        """The places of ``rows`` (unique) in the table, costing the new ones."""
        if rows is self.rows:
            return np.arange(rows.size)
        at = self.pos[rows]
        missing = at < 0
        if missing.any():
            new = rows[missing]
            if new.size > 1 and not bool((new[1:] > new[:-1]).all()):  # ascending already: kept
                new = np.unique(new)
            have, count = self.rows.size, self.rows.size + new.size
            table, fastest, widest = KP.cost_table(
                _coefs(self.cost), self.lens[new], self.ks, self.kmin[new], FREE_SLACK
            )
            if have == 0:  # the kernel's arrays are the table
                self._times, self._fastest, self._widest = table, fastest, widest
            else:
                if count > self._times.shape[0]:  # room for a quarter more
                    size = min(self.lens.size, count + count // 4 + 16)
                    grown = np.empty((size, self.ks.size))
                    grown[:have] = self._times[:have]
                    self._times = grown
                    for name in ("_fastest", "_widest"):
                        grown_index = np.empty(size, dtype=np.int64)
                        grown_index[:have] = getattr(self, name)[:have]
                        setattr(self, name, grown_index)
                self._times[have:count] = table
                self._fastest[have:count] = fastest
                self._widest[have:count] = widest
            self.pos[new] = np.arange(have, count)
            self.rows = np.concatenate([self.rows, new])
            at = self.pos[rows]
        return at

    def of(self, rows: np.ndarray) -> np.ndarray:
        """The table's lines of ``rows`` (the table itself, not a copy, when ``rows`` is
        :attr:`rows`)."""
        at = self.at(rows)
        return self.table if rows is self.rows else self.table[at]

    def within(self, target: float) -> np.ndarray:
        """Per row (in table order): the first degree index whose time is at most ``target``
        (where the running minimum over the degrees first gets there), ``len(ks)`` where none is.
        """
        hit = self.table <= target
        first = np.argmax(hit, axis=1)
        return np.where(hit[np.arange(first.size), first], first, self.ks.size)

    def widest(self) -> np.ndarray:
        """Per row (in table order): the widest degree index whose ``k·t`` is within
        ``1 + FREE_SLACK`` of the row's least."""
        return self._widest[: self.rows.size]

    def fastest(self) -> np.ndarray:
        """Per row (in table order): the first degree index of its least time."""
        return self._fastest[: self.rows.size]


def _spread(table: _Table, share: float, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Degrees and times with the long spread: a shard longer than ``share × Σ k·t`` seconds (a
    multiple of a lane's mean share of one slot) takes the smallest degree that brings it within,
    else its fastest degree; the target is set again from the new times, once."""
    kmin = table.kmin
    widths, times = kmin, base
    for _ in range(2):
        target = share * float((widths * times).sum())
        long = np.flatnonzero(base > target)
        widths, times = kmin.copy(), base.copy()
        if long.size == 0:
            break
        at = table.at(long)
        # the first degree within the target (over the whole table, then picked), else fastest
        above = table.within(target)[at]
        k_idx = np.where(above < table.ks.size, above, table.fastest()[at])
        widths[long] = table.ks[k_idx]
        times[long] = table.table[at, k_idx]
    return widths, times


def _free_spread(
    table: _Table, base: np.ndarray, slack: float = FREE_SLACK
) -> tuple[np.ndarray, np.ndarray]:
    """Degrees and times with every costed row at the widest degree that costs no more than
    ``1 + slack`` times its fewest rank-seconds ``k·t``: a long sequence spread as far as the
    exchange stays hidden behind its attention, at (almost) no price in work."""
    widths, times = table.kmin.copy(), base.copy()
    rows = table.rows
    if rows.size == 0:
        return widths, times
    t = table.of(rows)
    if slack == FREE_SLACK:  # the table's (costed with it)
        k_idx = table.widest()
    else:
        area = t * table.ks[None, :]
        free = area <= (1.0 + slack) * area.min(axis=1, keepdims=True)
        k_idx = table.ks.size - 1 - np.argmax(free[:, ::-1], axis=1)  # the widest free degree
    widths[rows] = table.ks[k_idx]
    times[rows] = t[np.arange(rows.size), k_idx]
    return widths, times


def _stable_order(x: np.ndarray) -> np.ndarray:
    """``np.argsort(x, kind="stable")`` as one unstable sort of ``x`` (only its dense ranks kept,
    equal values one rank) and one of a unique integer key (rank, index): two fast sorts
    instead of a stable sort of floats (about 2× faster on thousands of values)."""
    n = x.size
    if n < 2:
        return np.arange(n)
    order = np.argsort(x)
    ordered = x[order]
    dense = np.empty(n, dtype=np.int64)
    dense[0] = 0
    np.cumsum(ordered[1:] != ordered[:-1], out=dense[1:])
    key = np.empty(n, dtype=np.int64)
    key[order] = dense
    key *= n
    key += np.arange(n)
    return np.argsort(key)


class _Longest:
    """Items longest first, ties by index (exactly ``np.argsort(-times, kind="stable")``), for
    many ``times`` that differ from ``base`` mostly at ``rows``: the others are sorted once, and
    each call sorts ``rows`` and merges them in (O(N + R log R) instead of a sort of all N).
    Items outside ``rows`` whose time differs from ``base`` (rows a spread costed after this was
    built) join ``rows`` for that call (one O(N) comparison finds them)."""

    def __init__(self, base: np.ndarray, rows: np.ndarray) -> None:
        keep = np.ones(base.size, dtype=bool)
        keep[rows] = False
        rest = np.flatnonzero(keep)
        self.rows = rows
        self.rest = rest[_stable_order(-base[rest])]
        self.rest_key = -base[self.rest]

    def __call__(self, times: np.ndarray) -> np.ndarray:
        rows, rest, rest_key = self.rows, self.rest, self.rest_key
        moved = -times[rest] != rest_key
        if moved.any():  # times changed outside rows: those items are sorted with rows
            rows = np.concatenate([rows, rest[moved]])
            rest, rest_key = rest[~moved], rest_key[~moved]
        if rows.size == 0:
            return rest
        if rows is self.rows:  # ascending: a stable sort keeps ties by index
            mine = rows[np.argsort(-times[rows], kind="stable")]
        else:  # no longer ascending: ties by index need the index as a key too
            mine = rows[np.lexsort((rows, -times[rows]))]
        key = -times[mine]
        # before each of mine: the others of smaller key, and of equal key and smaller index
        lo = np.searchsorted(rest_key, key, side="left")
        hi = np.searchsorted(rest_key, key, side="right")
        before = lo
        for j in np.flatnonzero(hi > lo).tolist():  # ties in time: rare
            before[j] += int(np.searchsorted(np.sort(rest[lo[j] : hi[j]]), mine[j]))
        at = before + np.arange(mine.size)
        out = np.empty(times.size, dtype=np.int64)
        placed = np.zeros(times.size, dtype=bool)
        placed[at] = True
        out[at] = mine
        out[~placed] = rest
        return out


def _by_tokens(widths: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Items by most tokens, then widest, ties by index: ``np.lexsort((-widths, -tokens))``,
    as one sort of a unique integer key where it cannot overflow (about 3× faster)."""
    n = widths.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    wmax, tmax = int(widths.max()) + 1, int(tokens.max()) + 1
    if int(widths.min()) < 0 or int(tokens.min()) < 0 or tmax * wmax >= (1 << 62) // n:
        return np.lexsort((-widths, -tokens))
    key = (tmax - tokens) * wmax + (wmax - widths)
    key *= n
    key += np.arange(n)
    return np.argsort(key)


def _fit(
    widths: np.ndarray,
    times: np.ndarray,
    tokens: np.ndarray,
    lanes: int,
    m: int,
    cap: int,
    aligned: bool,
    longest: _Longest | None = None,
    limit: float = np.inf,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | int | None:
    """place_items, longest shard first; where that strands tokens, most tokens per rank first
    (first-fit decreasing: a rank's budget in one micro-batch is the bin); else how many more
    micro-batches the tokens left need. ``None`` when the placement this returns without a
    ``limit`` fits and has a lane busier than ``limit`` (the kernel stops once it knows)."""
    by_time = np.argsort(-times, kind="stable") if longest is None else longest(times)
    got = KP.place_items(by_time, widths, times, tokens, lanes, m, cap, aligned, limit)
    if isinstance(got, int):
        by_tokens = _by_tokens(widths, tokens)  # per rank, as bins are (stable)
        got = KP.place_items(by_tokens, widths, times, tokens, lanes, m, cap, aligned, limit)
        if isinstance(got, int):
            rest = by_tokens[got:]
            return math.ceil(float((tokens[rest] * widths[rest]).sum()) / (lanes * cap))
    return got


def _rounds(
    lens: np.ndarray, kmin: np.ndarray, mesh: Mesh, cost: MeshCost, cap: int
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]]:
    """Candidates built the way Megatron-LM's dev-branch dynamic CP builds its schedule (its
    ``next_hdp_group_packing_aware``): one micro-batch at a time, longest first, each sequence
    at the group size among its smallest, 2×, 4×… (and ``cp``) that keeps the busiest rank
    lowest, each rank's work capped at 1.05× what the micro-batch's longest sequence allows.
    Two measures of work: Megatron's ``L²/k`` (its cap ``longest × max_tokens × 1.05``) and the
    cost model's seconds (the cap scaled alike). Budgets count padded tokens, so a candidate
    never exceeds ``max_tokens``. Each: ``(slot, start, first lane, degree, time)`` per
    sequence and the micro-batch count (a group's lanes are ``first .. first + degree − 1``)."""
    n = lens.size
    top = {1 << j for j in range(mesh.cp.bit_length()) if (1 << j) <= mesh.cp}
    ks = np.array(sorted(top | {mesh.cp}), dtype=np.int64)
    tokens, times, work_time, work_quad, limit_time, limit_quad = KP.rounds_tables(
        _coefs(cost), lens, ks, kmin, cap
    )
    # longest first, ties by index: with unique keys any sort gives the stable sort's order
    if n and int(lens.max()) < (1 << 62) // n:
        order = np.argsort(-lens * n + np.arange(n))
    else:
        order = np.argsort(-lens, kind="stable")
    row = np.arange(n)
    out = []
    for work, limits in ((work_time, limit_time), (work_quad, limit_quad)):
        got = KP.place_rounds(order, ks, work, tokens, limits, mesh.ranks, cap)
        if isinstance(got, int):  # cannot happen: every length fits at its smallest degree
            continue
        rnd, first, kidx, start = got
        m = int(rnd.max()) + 1 if n else 1
        out.append((rnd, start, first, ks[kidx], times[row, kidx], m))
    return out


def _blocks(first: np.ndarray, degrees: np.ndarray) -> np.ndarray:
    """The (N, max degree) lanes of items on blocks ``first .. first + degree − 1`` (−1 past)."""
    width = int(degrees.max()) if degrees.size else 1
    out = np.full((degrees.size, width), -1, dtype=np.int64)
    for k in np.unique(degrees).tolist():
        rows = np.flatnonzero(degrees == k)
        out[rows, :k] = first[rows, None] + np.arange(k)[None, :]
    return out


def _busiest_blocks(first: np.ndarray, degrees: np.ndarray, times: np.ndarray, lanes: int) -> float:
    """:func:`_busiest` of items on blocks of lanes (a difference array: O(N + lanes))."""
    diff = np.bincount(first, weights=times, minlength=lanes + 1)
    diff -= np.bincount(first + degrees, weights=times, minlength=lanes + 1)
    return float(np.cumsum(diff[:lanes]).max(initial=0.0))


def _busiest(
    got: tuple[np.ndarray, np.ndarray, np.ndarray], times: np.ndarray, lanes: int
) -> float:
    """The busiest lane's seconds over the step: no replay of the placement is shorter (with
    stages, each stage runs every micro-batch's slowest lane, one after another)."""
    lane_ids = got[2]
    busy = np.bincount(lane_ids[:, 0], weights=times, minlength=lanes)  # every item's first
    if lane_ids.shape[1] > 1:
        wide = np.flatnonzero(lane_ids[:, 1] >= 0)  # the items on more than one lane
        rest = lane_ids[wide, 1:]
        on = rest >= 0
        # an item's lanes come first in its row: its time once per further lane, row by row
        weights = np.repeat(times[wide], np.count_nonzero(on, axis=1))
        busy += np.bincount(rest[on], weights=weights, minlength=lanes)
    return float(busy.max(initial=0.0))


def _reorder(p: Placement, perm: np.ndarray, slots: np.ndarray) -> Placement:
    """``p`` with its items in order ``perm`` and their micro-batches ``slots`` (before perm)."""
    return dataclasses.replace(
        p,
        indices=p.indices[perm],
        lengths=p.lengths[perm],
        slots=slots[perm],
        degrees=p.degrees[perm],
        ranks=p.ranks[perm],
        times=p.times[perm],
    )


def _run_order(slot_time: np.ndarray) -> np.ndarray:
    """Micro-batch positions: cheapest first, the next cheapest last, the rest longest first."""
    m = slot_time.size
    by = np.argsort(slot_time, kind="stable")
    run = np.concatenate([by[:1], by[2:][::-1], by[1:2]]) if m >= 3 else by
    position = np.empty(m, dtype=np.int64)
    position[run] = np.arange(m)
    return position


def _evening(p: Placement, score: float) -> tuple[int, float, int, bool] | None:
    """What both ways of evening out micro-batches start from: ``None`` where there is nothing
    to even (no stages, one micro-batch or one sequence); else the tokens a rank may hold, the
    step (``score``, or replayed when 0), the most ranks a sequence may spread over (0: degrees
    stay, with fixed CP or groups aligned to blocks) and whether a sequence may move to any
    ranks with room (dynamic CP with free groups)."""
    mesh = p.mesh
    if mesh.pp == 1 or p.micro_batches < 2 or len(p) < 2:
        return None
    free_lanes = mesh.dynamic and not mesh.aligned_groups
    score = score if score > 0 else _makespan(p)
    return mesh.max_tokens or NO_BUDGET, score, mesh.cp if free_lanes else 0, free_lanes


def _even(p: Placement, score: float, rounds: int = 0) -> tuple[float, Placement]:
    """With pipeline stages: even out the micro-batches, each change kept only when the
    pipeline's step, in the run order kept so far, gets shorter (so the step never gets
    longer). A round weighs, from each of a few source micro-batches (the longest, and those at
    the ends of the run order) to every other micro-batch, moving one sequence of the source's
    busiest rank: on the same ranks, or (dynamic CP with free groups) on the ranks of the
    destination that are free soonest with room for its tokens; and, in the longest
    micro-batch, spreading its longest sequence there over more ranks. Each is scored by the
    step replayed with the two spans it changes (a few µs each, compiled); the three best are
    replayed exactly, and the first that shortens the step is kept. When no move helps, the
    run order is searched again (:func:`_sequence`, a small budget) and the moves go on in the
    new order. ``rounds`` bounds the moves (default ``max(6, 384 // micro-batches)``).
    Deterministic: no randomness."""
    m = p.micro_batches
    start = _evening(p, score)
    if start is None:
        return score, p
    cap, score, top, free_lanes = start
    rounds = rounds or max(6, 384 // m)
    reordered = False
    for _ in range(rounds):
        got = _even_moves(p, cap, top, free_lanes)
        kept = False
        for _, q in got[:3]:
            new = _makespan(q)
            if new < score:
                p, score, kept = q, new, True
                break
        if kept:
            reordered = False
            continue
        if reordered:
            break
        new, q = _sequence(p, score, budget=2e5)
        reordered = True
        if new >= score:
            break
        p, score = q, new
    return score, p


def _even_moves(
    p: Placement, cap: int, top: int, free_lanes: bool
) -> list[tuple[float, Placement]]:
    """:func:`_even`'s candidate moves of ``p`` that its estimate says shorten the step, each as
    (the estimated step, the placement after it), shortest first."""
    mesh = p.mesh
    m = p.micro_batches
    start, _ = KP.replay_lanes(p.ranks, p.times, mesh.ranks, p.slots)
    span = _slot_times(p.slots, start, p.times, m)
    fwd, bwd = _passes(p, span)
    share = np.where(span > 0, fwd / np.where(span > 0, span, 1.0), 1 / 3)
    now = KP.pipeline(fwd, bwd, mesh.pp, mesh.vpp)[0]
    first = np.full(m, np.inf)
    np.minimum.at(first, p.slots, start)
    first = np.where(np.isfinite(first), first, 0.0)
    tau = rank_tokens(p.lengths, p.degrees)
    busy = np.zeros((m, mesh.ranks))
    used = np.zeros((m, mesh.ranks), dtype=np.int64)
    end = np.zeros((m, mesh.ranks))  # each lane's last end in its micro-batch, from its start
    rel = start - first[p.slots] + p.times
    for j in range(p.ranks.shape[1]):
        on = p.ranks[:, j] >= 0
        np.add.at(busy, (p.slots[on], p.ranks[on, j]), p.times[on])
        np.add.at(used, (p.slots[on], p.ranks[on, j]), tau[on])
        np.maximum.at(end, (p.slots[on], p.ranks[on, j]), rel[on])

    def step_with(changes: list[tuple[int, float]]) -> float:
        s = span.copy()
        for slot, value in changes:
            s[slot] = value
        return float(KP.pipeline(s * share, s - s * share, mesh.pp, mesh.vpp)[0])

    out: list[tuple[float, Placement]] = []
    longest = np.argsort(-span, kind="stable")[:4].tolist()
    sources = list(dict.fromkeys(longest + [0, 1, m - 2, m - 1]))
    for a in sources:
        lane = int(np.argmax(busy[a]))
        here = np.flatnonzero((p.slots == a) & (p.ranks == lane).any(axis=1))
        if here.size == 0:
            continue
        rows = p.ranks[here]
        on = rows >= 0
        safe = np.where(on, rows, 0)
        # the source's span estimated without each item: its busiest lane less the item
        drop = np.zeros((here.size, mesh.ranks))
        drop[np.arange(here.size)[:, None].repeat(rows.shape[1], 1)[on], rows[on]] = p.times[
            here
        ].repeat(on.sum(axis=1))
        after_a = np.minimum((busy[a][None, :] - drop).max(axis=1), span[a])
        for b in range(m):
            if b == a:
                continue
            # on the same ranks
            fits = np.asarray(
                np.where(on, used[b][safe] + tau[here, None] <= cap, True).all(axis=1), dtype=bool
            )
            end_b = np.where(on, end[b][safe], 0.0).max(axis=1) + p.times[here]
            lanes_new: list[np.ndarray | None] = [None] * here.size
            if free_lanes:  # or the ranks of b free soonest with room
                order = np.argsort(end[b], kind="stable")
                for r, i in enumerate(here.tolist()):
                    room = order[used[b][order] + tau[i] <= cap][: int(p.degrees[i])]
                    if room.size < p.degrees[i]:
                        continue
                    e = float(end[b][room].max()) + float(p.times[i])
                    if not fits[r] or e < end_b[r]:
                        fits[r], end_b[r], lanes_new[r] = True, e, np.sort(room)
            after_b = np.maximum(span[b], end_b)
            worst = np.where(fits, np.maximum(after_a, after_b), np.inf)
            r = int(np.argmin(worst))
            if not np.isfinite(worst[r]) or worst[r] >= max(span[a], span[b]):
                continue
            est = step_with([(a, float(after_a[r])), (b, float(after_b[r]))])
            if est < now:
                row = lanes_new[r]
                moved = np.array([int(here[r])])
                lanes_b = None if row is None else [row]
                out.append((est, _relaid(p, moved, b, lanes_b, last=moved)))
    # move one sequence out of a long micro-batch and lay the rest out again over all its ranks
    for a in longest if free_lanes else []:
        items = np.flatnonzero(p.slots == a)
        if items.size > mesh.ranks // 2:
            continue
        for i in [-1, *items.tolist()]:
            rest = items[items != i]
            got = _repack(p, rest)
            if got is None:
                continue
            deg, t = got
            after_a = float(t.max(initial=0.0))
            if after_a >= span[a]:
                continue
            blocks = np.cumsum(deg) - deg
            lanes = [
                np.arange(s, s + d) for s, d in zip(blocks.tolist(), deg.tolist(), strict=True)
            ]
            if i < 0:
                est = step_with([(a, after_a)])
                if est < now:
                    out.append((est, _relaid(p, rest, a, lanes, t)))
                continue
            k = int(p.degrees[i])
            best_b, best_end, best_row = -1, np.inf, None
            for b in range(m):
                if b == a:
                    continue
                order = np.argsort(end[b], kind="stable")
                room = order[used[b][order] + tau[i] <= cap][:k]
                if room.size < k:
                    continue
                e = max(float(span[b]), float(end[b][room].max()) + float(p.times[i]))
                if e < best_end:
                    best_b, best_end, best_row = b, e, np.sort(room)
            if best_row is None or max(after_a, best_end) >= span[a]:
                continue
            est = step_with([(a, after_a), (best_b, best_end)])
            if est < now:
                q = _relaid(p, rest, a, lanes, t)
                moved_q = np.flatnonzero(q.indices == p.indices[i])[:1]
                out.append((est, _relaid(q, moved_q, best_b, [best_row], last=moved_q)))
    # spread the longest micro-batch's longest sequence on its busiest rank
    a = int(np.argmax(span))
    lane = int(np.argmax(busy[a]))
    here = np.flatnonzero((p.slots == a) & (p.ranks == lane).any(axis=1))
    if here.size and top:
        i = int(here[np.argmax(p.times[here])])
        k = int(p.degrees[i])
        row = p.ranks[i][p.ranks[i] >= 0]
        mine = np.zeros(mesh.ranks, dtype=bool)
        mine[row] = True
        base = end[a] - np.where(mine, p.times[i], 0.0)
        room = used[a] - np.where(mine, tau[i], 0)
        others = np.flatnonzero(~mine)
        others = others[np.argsort(base[others], kind="stable")]
        for kk in range(k + 1, top + 1):
            t2 = float(p.cost.time(np.array([p.lengths[i]]), np.array([kk]))[0])
            tk = int(rank_tokens(np.array([p.lengths[i]]), np.array([kk]))[0])
            extra = others[room[others] + tk <= cap][: kk - k]
            if extra.size < kk - k:
                continue
            wide = np.sort(np.concatenate([row, extra]))
            after = max(float(base[wide].max()) + t2, float(np.delete(base, wide).max(initial=0)))
            if after < span[a]:
                est = step_with([(a, after)])
                if est < now:
                    one = np.array([i])
                    out.append((est, _relaid(p, one, a, [wide], np.array([t2]), one)))
    out.sort(key=lambda x: x[0])
    return out


def _repack(p: Placement, items: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Items ``items`` of one micro-batch, each on lanes of its own (dynamic CP, free groups):
    the smallest degree whose shard fits the mesh's ``max_tokens`` each, then the slowest raised one rank at a time
    while ranks are left (a water-filling of the micro-batch's ranks). Returns (degrees, shard
    times), or None when their smallest degrees need more ranks than a stage has."""
    lanes = p.mesh.ranks
    lens = p.lengths[items]
    if lens.size == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    kmin = fitted_degrees(lens, p.mesh)  # placed already: they fit
    if int(kmin.sum()) > lanes:
        return None
    ks = np.arange(1, p.mesh.cp + 1)
    table = np.asarray(
        p.cost.time(np.repeat(lens, ks.size), np.tile(ks, lens.size)), dtype=np.float64
    ).reshape(lens.size, ks.size)
    deg = kmin.copy()
    t = table[np.arange(lens.size), deg - 1]
    left = lanes - int(deg.sum())
    while left > 0:
        j = int(np.argmax(np.where(deg < p.mesh.cp, t, -np.inf)))
        if deg[j] >= p.mesh.cp or table[j, deg[j]] >= t[j]:
            break
        deg[j] += 1
        t[j] = table[j, deg[j] - 1]
        left -= 1
    return deg, t


def _relaid(
    p: Placement,
    items: np.ndarray,
    slot: int,
    lanes: list[np.ndarray] | None = None,
    times: np.ndarray | None = None,
    last: np.ndarray | None = None,
) -> Placement:
    """``p`` with ``items`` in micro-batch ``slot`` (each on ``lanes[j]`` at shard time
    ``times[j]`` when given), the items ``last`` after the rest of their micro-batch; the items
    again by micro-batch, then replayed start."""
    slots = p.slots.copy()
    slots[items] = slot
    ranks, degrees, shard = p.ranks, p.degrees, p.times
    if lanes is not None:
        width = max(ranks.shape[1], max(x.size for x in lanes))
        ranks = np.full((len(p), width), -1, dtype=np.int64)
        ranks[:, : p.ranks.shape[1]] = p.ranks
        degrees = degrees.copy()
        for i, row in zip(items.tolist(), lanes, strict=True):
            ranks[i, :] = -1
            ranks[i, : row.size] = row
            degrees[i] = row.size
    if times is not None:
        shard = shard.copy()
        shard[items] = times
    q = dataclasses.replace(p, ranks=ranks, degrees=degrees, times=shard)
    key = np.arange(len(p), dtype=np.float64)
    if last is not None:
        key[last] = np.inf
    q = _reorder(q, np.lexsort((key, slots)), slots)
    start, _ = KP.replay_lanes(q.ranks, q.times, q.mesh.ranks, q.slots)
    return _reorder(q, np.lexsort((start, q.slots)), q.slots)


def _even_fixed(p: Placement, score: float, tries: int = 48) -> tuple[float, Placement]:
    """With pipeline stages (the moves before issue 43's second pass, kept as a second path for
    up to :data:`FIXED_PATH` micro-batches): even out the micro-batches, each move kept only when the
    pipeline's step gets shorter (so the step never gets longer). Two moves on the longest
    micro-batch's busiest rank: its longest sequence there spreads over more ranks of the same
    micro-batch (to the degree that ends that micro-batch soonest, ranks with room and the least
    work first); else a sequence there moves to the shortest micro-batch, on the same ranks,
    where its tokens fit and it ends before the longest did. After a move the micro-batches are
    put in run order again (cheapest first, the next cheapest last)."""
    mesh = p.mesh
    m = p.micro_batches
    start = _evening(p, score)
    if start is None:
        return score, p
    cap, score, top, _ = start

    def loads(q: Placement) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tok = rank_tokens(q.lengths, q.degrees)
        busy = np.zeros((m, mesh.ranks))
        used = np.zeros((m, mesh.ranks), dtype=np.int64)
        for j in range(q.ranks.shape[1]):
            on = q.ranks[:, j] >= 0
            np.add.at(busy, (q.slots[on], q.ranks[on, j]), q.times[on])
            np.add.at(used, (q.slots[on], q.ranks[on, j]), tok[on])
        return tok, busy, used

    def settle(q: Placement, key: np.ndarray) -> Placement:
        q = _reorder(q, np.lexsort((key, q.slots)), q.slots)
        start, _ = KP.replay_lanes(q.ranks, q.times, mesh.ranks, q.slots)
        position = _run_order(_slot_times(q.slots, start, q.times, m))
        return _reorder(q, np.lexsort((start, position[q.slots])), position[q.slots])

    tau, busy, used = loads(p)
    tried = np.zeros(len(p), dtype=bool)
    spread_tried = np.zeros(len(p), dtype=bool)
    for _ in range(tries):
        span = busy.max(axis=1)
        hi, lo = int(np.argmax(span)), int(np.argmin(span))
        lane = int(np.argmax(busy[hi]))
        here = np.flatnonzero((p.slots == hi) & (p.ranks == lane).any(axis=1))
        if here.size == 0:
            break
        key = np.arange(len(p), dtype=np.float64)
        moved = None
        i = int(here[np.argmax(p.times[here])])
        k = int(p.degrees[i])
        if not spread_tried[i] and k < top:
            spread_tried[i] = True
            row = p.ranks[i][p.ranks[i] >= 0]
            mine = np.zeros(mesh.ranks, dtype=bool)
            mine[row] = True
            ks = np.arange(k + 1, top + 1)
            t_new = np.asarray(p.cost.time(np.full(ks.size, p.lengths[i]), ks), dtype=np.float64)
            tau_new = rank_tokens(np.full(ks.size, p.lengths[i]), ks)
            base = busy[hi] - np.where(mine, p.times[i], 0.0)
            room = used[hi] - np.where(mine, tau[i], 0)
            others = np.flatnonzero(~mine)
            others = others[np.argsort(base[others], kind="stable")]
            best_end, pick = span[hi], None
            for kk, t2, tk in zip(ks.tolist(), t_new.tolist(), tau_new.tolist(), strict=True):
                extra = others[room[others] + tk <= cap][: kk - k]
                if extra.size < kk - k:
                    continue
                lanes_new = np.concatenate([row, extra])
                end = max(
                    float(base[lanes_new].max()) + t2,
                    float(np.delete(base, lanes_new).max(initial=0.0)),
                )
                if end < best_end:
                    best_end, pick = end, (np.sort(lanes_new), t2)
            if pick is not None:
                lanes_new, t2 = pick
                width = max(p.ranks.shape[1], lanes_new.size)
                ranks = np.full((len(p), width), -1, dtype=np.int64)
                ranks[:, : p.ranks.shape[1]] = p.ranks
                ranks[i, :] = -1
                ranks[i, : lanes_new.size] = lanes_new
                degrees, times = p.degrees.copy(), p.times.copy()
                degrees[i], times[i] = lanes_new.size, t2
                moved = dataclasses.replace(p, ranks=ranks, degrees=degrees, times=times)
        if moved is None:
            can = here[~tried[here]]
            if can.size == 0 or span[hi] <= span[lo]:
                break
            rows = p.ranks[can]
            on = rows >= 0
            safe = np.where(on, rows, 0)
            fits = np.where(on, used[lo][safe] + tau[can, None] <= cap, True).all(axis=1)
            there = np.where(on, busy[lo][safe], 0.0).max(axis=1) + p.times[can]
            fits &= there < span[hi]
            tried[can[~fits]] = True
            if not fits.any():
                continue
            gap = np.abs(there - (span[hi] - p.times[can]))  # the most even pair after
            i = int(can[np.flatnonzero(fits)[np.argmin(gap[fits])]])
            tried[i] = True
            slots = p.slots.copy()
            slots[i] = lo
            key[i] = np.inf  # last of its new micro-batch
            moved = dataclasses.replace(p, slots=slots)
        moved = settle(moved, key)
        new = _makespan(moved)
        if new < score:
            p, score = moved, new
            tau, busy, used = loads(p)
            tried = np.zeros(len(p), dtype=bool)  # the items are in a new order
            spread_tried = np.zeros(len(p), dtype=bool)
    return score, p


def _moves_at(m: int, i: int) -> np.ndarray:
    """The orders one move of the micro-batch at place ``i`` away from ``0..m−1``, as the place
    each place reads from: its ``m − 1`` moves to each other place ``j`` (the ones between shift
    by one), then its ``m − 1`` swaps with the one at place ``j``. (2(m − 1), m) int64."""
    pos = np.arange(m)
    j = np.delete(pos, i)[:, None]
    p = pos[None, :]
    shifted = p + ((p >= i) & (p < j)) - ((p > j) & (p <= i))
    inserts = np.where(p == j, i, shifted)
    swaps = np.where(p == i, j, np.where(p == j, i, p))
    return np.concatenate([inserts, swaps], axis=0).astype(np.int64)


def _moves(m: int) -> np.ndarray:
    """:func:`_moves_at` of every place: (m, 2(m − 1), m) (O(m³) memory: small ``m`` only)."""
    return np.stack([_moves_at(m, i) for i in range(m)]) if m else np.zeros((0, 0, 0), np.int64)


def _sequence(p: Placement, score: float, budget: float = 2e6) -> tuple[float, Placement]:
    """With pipeline stages: the micro-batches' run order improved by local search (a
    micro-batch's span does not depend on its place in the order). From two orders (the
    micro-batches by span, shortest first; then the order given), passes over the places:
    the micro-batch at each place is moved to, or swapped with, every other place (all
    replayed in one compiled call) and the shortest of those is kept if it is shorter than the
    best so far; until a pass helps nowhere, the step reaches its bound or ``budget`` pipeline
    ops (replays · micro-batches · stages · vpp, over both starts) are spent. The order kept is
    the shorter of the two ends; deterministic, and never longer than the order given.
    O(passes · m² · pipeline)."""
    mesh = p.mesh
    m = p.micro_batches
    if mesh.pp == 1 or m < 3:
        return score, p
    start, _ = KP.replay_lanes(p.ranks, p.times, mesh.ranks, p.slots)
    span = _slot_times(p.slots, start, p.times, m)
    bound = max(float(span.sum()) + (mesh.pp - 1) * float(span.min()), mesh.pp * float(span.max()))
    fwd, bwd = _passes(p, span)
    per_call = 2 * (m - 1) * m * mesh.pp * mesh.vpp  # the ops of one place's moves replayed
    left = budget
    best, kept = score, np.arange(m)
    by_span = np.argsort(span, kind="stable")
    first = KP.pipeline_orders(fwd, bwd, mesh.pp, mesh.vpp, by_span[None, :])
    for order, now in ((by_span, float(first[0])), (np.arange(m), score)):
        better = True
        while better and now > bound:
            better = False
            for i in range(m):
                if left < per_call:
                    break
                left -= per_call
                trials = order[_moves_at(m, i)]  # O(m²) memory, built per place
                got = KP.pipeline_orders(fwd, bwd, mesh.pp, mesh.vpp, trials)
                k = int(np.argmin(got))
                if got[k] < now:
                    order, now, better = trials[k], float(got[k]), True
        if now < best:
            best, kept = now, order
    if best >= score:
        return score, p
    position = np.empty(m, dtype=np.int64)
    position[kept] = np.arange(m)
    slots = position[p.slots]
    return best, _reorder(p, np.lexsort((start, slots)), slots)


def _slot_times(slots: np.ndarray, start: np.ndarray, times: np.ndarray, m: int) -> np.ndarray:
    """Each slot's span: its last shard's end less its first shard's start."""
    out = np.zeros(m)
    if slots.size:
        first = np.full(m, np.inf)
        np.minimum.at(first, slots, start)
        np.maximum.at(out, slots, start + times)
        out = out - np.where(np.isfinite(first), first, 0.0)
    return out


def _makespan(p: Placement) -> float:
    """The step's predicted seconds (what :func:`simulate` reports as ``makespan``)."""
    mesh = p.mesh
    if mesh.pp == 1:
        _, free = KP.replay_lanes(p.ranks, p.times, mesh.ranks)
        return float(free.max(initial=0.0))
    start, _ = KP.replay_lanes(p.ranks, p.times, mesh.ranks, p.slots)
    fwd, bwd = _passes(p, _slot_times(p.slots, start, p.times, p.micro_batches))
    return KP.pipeline(fwd, bwd, mesh.pp, mesh.vpp)[0]


def _passes(p: Placement, slot_time: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A slot's span split into forward and backward by its shards' share of forward time."""
    m = p.micro_batches
    fsum, tsum = np.zeros(m), np.zeros(m)
    np.add.at(fsum, p.slots, p.cost.forward_time(p.lengths, p.degrees))
    np.add.at(tsum, p.slots, p.times)
    share = np.where(tsum > 0, fsum / np.where(tsum > 0, tsum, 1.0), 1 / 3)
    fwd = slot_time * share
    return fwd, slot_time - fwd


def _by_slot_start(slot: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Items by slot, then start, ties by index: ``np.lexsort((start, slot))``, as one sort of
    the starts (unstable: only their ranks are kept, equal starts one rank) and one of a unique
    integer key (slot, rank of start, index): two fast sorts instead of two stable ones."""
    n = slot.size
    if n == 0 or int(slot.min()) < 0 or (int(slot.max()) + 1) * n >= (1 << 62) // n:
        return np.lexsort((start, slot))
    by_start = np.argsort(start)
    ordered = start[by_start]
    rank = np.empty(n, dtype=np.int64)
    dense = np.empty(n, dtype=np.int64)
    dense[0] = 0
    np.cumsum(ordered[1:] != ordered[:-1], out=dense[1:])
    rank[by_start] = dense
    key = slot * n
    key += rank
    key *= n
    key += np.arange(n)
    return np.argsort(key)


def _assemble(
    got: tuple[np.ndarray, np.ndarray, np.ndarray],
    mesh: Mesh,
    cost: MeshCost,
    idx: np.ndarray,
    lens: np.ndarray,
    degrees: np.ndarray,
    times: np.ndarray,
    m: int,
) -> Placement:
    """The placement of ``place_items``'s answer: micro-batches cheapest first, the next
    cheapest last, the rest longest first; items by micro-batch, then start."""
    slot, start, lane_ids = got
    ends = np.zeros(m)
    np.maximum.at(ends, slot, start + times)
    by = np.argsort(ends, kind="stable")
    run = np.concatenate([by[:1], by[2:][::-1], by[1:2]]) if m >= 3 else by
    position = np.empty(m, dtype=np.int64)
    position[run] = np.arange(m)
    slot = position[slot]
    perm = _by_slot_start(slot, start)
    if mesh.dynamic:
        ranks = lane_ids[perm]
    else:
        groups = lane_ids[perm, 0]
        ranks = groups[:, None] * mesh.cp + np.arange(mesh.cp)[None, :]
    return Placement(
        mesh=mesh,
        cost=cost,
        indices=idx[perm],
        lengths=lens[perm],
        slots=slot[perm],
        degrees=degrees[perm],
        ranks=ranks.astype(np.int64, copy=False),
        times=times[perm],
        micro_batches=m,
    )


def _sequence_lengths(lengths: Any) -> np.ndarray:
    """``lengths`` as an int64 vector of one length per sequence, or a named error (an array of
    another shape is refused, not flattened: its entries would be placed as sequences)."""
    lens = _lengths_array(lengths)
    if lens.ndim != 1:
        raise ValueError(
            f"lengths must be one length per sequence (a 1-D array), got shape {lens.shape}; "
            "give each sequence's total tokens"
        )
    return lens


def place(
    lengths: Any,
    mesh: Mesh,
    cost: MeshCost,
    *,
    indices: Any = None,
    micro_batches: int | None = None,
    search: bool = True,
) -> Placement:
    """Place one global batch of ``lengths`` on ``mesh`` (see the module's steps).

    ``indices`` names the sequences (dataset indices; default ``0..N−1``);
    ``micro_batches`` overrides ``mesh.micro_batches`` (a multiple of ``mesh.multiple``). With
    dynamic CP and ``search=True`` the candidates are the long sequences spread at four targets
    (1, 2, ½ and ¼ of a slot's mean share), spread as wide as costs at most 2% more
    rank-seconds than their cheapest degree, and two built the way Megatron-LM's dev branch builds
    its schedule (one micro-batch at a time, longest first, each sequence at the power-of-two
    group size that keeps the busiest rank lowest; its ``L²/k`` work, and the cost model's
    seconds), all within ``max_tokens`` padded; the placement whose replayed step is shortest
    is kept (the first on ties; a candidate whose work alone is no shorter than the best step
    found is not built). With pipeline stages the kept placement's micro-batches are then evened out and
    reordered, each change kept only when the pipeline's step gets shorter. ``search=False``
    places the first spread only (about a quarter of the time). A pure function of its
    arguments: no randomness.

    Cost: O(N log N + N · micro-batches · lanes) per target, O(rounds · N · (sizes + groups))
    per Megatron-like candidate.
    """
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a padless.Mesh, got {type(mesh).__name__}")
    if not isinstance(cost, MeshCost):
        raise TypeError(f"cost must be a padless.MeshCost, got {type(cost).__name__}")
    lens = _sequence_lengths(lengths)
    n = lens.size
    idx = np.arange(n, dtype=np.int64) if indices is None else _as_int64_vector("indices", indices)
    if idx.size and int(idx.min()) < 0:
        raise ValueError(f"indices must be dataset indices (>= 0), got {int(idx.min())}")
    if idx.size != n:
        raise ValueError(f"indices must hold one index per length ({n}), got {idx.size}")
    slots = positive_or_none("micro_batches", micro_batches)
    if slots is not None and slots > MAX_MICRO_BATCHES:
        raise ValueError(f"micro_batches must be <= 2**20 per step, got {slots}")
    slots = mesh.micro_batches if slots is None else slots
    if slots is not None and slots % mesh.multiple:
        raise ValueError(f"micro_batches must be a multiple of {mesh.multiple}, got {slots}")
    search = check_bool("search", search)
    best: tuple[float, Placement] | None = None
    shortest = [np.inf]  # the best step so far: what a candidate must beat to be built
    for floor, build in _candidates(lens, idx, mesh, cost, slots, search, shortest):
        if best is not None and floor >= best[0]:
            continue  # its busiest lane alone is no shorter than the best step
        p = build()
        score = _makespan(p) if search and mesh.dynamic else 0.0
        if best is None or score < best[0]:
            best = (score, p)
            shortest[0] = score
    if best is not None and search and mesh.pp > 1:
        # the run order searched first, then the moves judged in it (never longer); with few
        # micro-batches also the fixed-order moves then the order, the shorter kept
        kept = best
        best = _even(*_sequence(kept[1], kept[0])[::-1])
        if kept[1].micro_batches <= FIXED_PATH:
            other = _sequence(*_even_fixed(kept[1], kept[0])[::-1])
            best = other if other[0] < best[0] else best
    if best is None:
        cap = mesh.max_tokens or NO_BUDGET
        raise ValueError(
            f"micro_batches={slots} cannot hold this batch within max_tokens={cap} per rank "
            f"({n} sequences, {int(lens.sum())} tokens); raise micro_batches or leave it None"
        )
    return best[1]


def _candidates(
    lens: np.ndarray,
    idx: np.ndarray,
    mesh: Mesh,
    cost: MeshCost,
    slots: int | None,
    search: bool,
    shortest: list[float] | None = None,
) -> Iterator[tuple[float, Callable[[], Placement]]]:
    """The placements :func:`place` chooses among, each as (a floor of its step: its busiest
    lane's seconds, a function that builds it): the list scheduler at each spread, then (dynamic
    CP, with the search) the two built the way Megatron-LM's dev branch builds its schedule.
    ``shortest[0]``, when given, is the best step found so far: a spread whose work alone (its
    rank-seconds over the lanes, or its longest shard) is no shorter is not even scheduled."""
    n = lens.size
    lanes = mesh.ranks if mesh.dynamic else mesh.dp
    kmin, base, m = _degrees(lens, mesh, cost, lanes, slots)
    cap = mesh.max_tokens or NO_BUDGET
    found = False
    tried: list[np.ndarray] = []
    table = _Table(lens, cost, mesh.cp, kmin)
    longest = None
    least_tokens: np.ndarray | None = None
    if mesh.dynamic and n:  # the rows the smallest spread could move, costed once
        low = min(SPREADS) * float((kmin * base).sum()) / (lanes * m)
        table.of(np.flatnonzero(base > low))
        longest = _Longest(base, table.rows)  # the spreads change times only at those rows
    shares: tuple[float | None, ...] = (None,)
    if mesh.dynamic and n:
        shares = (*SPREADS, 0.0) if search else SPREADS[:1]
    for share in shares:
        if share is None:
            widths, times = kmin, base
        elif share == 0.0:  # the widest degrees at (almost) no extra work
            widths, times = _free_spread(table, base)
        else:
            widths, times = _spread(table, share / (lanes * m), base)
        if any(np.array_equal(widths, w) for w in tried):
            continue
        tried.append(widths)
        if found and shortest is not None:
            work = max(float((widths * times).sum()) / lanes, float(times.max(initial=0.0)))
            if work >= shortest[0]:
                continue
        degrees = widths if mesh.dynamic else np.full(n, mesh.cp, dtype=np.int64)
        if share is None:
            tokens = rank_tokens(lens, degrees)
        else:  # a spread differs from the smallest degrees at the table's rows only
            if least_tokens is None:
                least_tokens = rank_tokens(lens, kmin)
            tokens = least_tokens.copy()
            tokens[table.rows] = rank_tokens(lens[table.rows], degrees[table.rows])
        # once a step is found, a placement whose busiest lane passes it is not kept: the kernel
        # stops there (a hair above, so that rounding never stops one place() would keep)
        limit = shortest[0] * (1.0 + 1e-6) if found and shortest is not None else np.inf
        while True:
            got = _fit(widths, times, tokens, lanes, m, cap, mesh.aligned_groups, longest, limit)
            if not isinstance(got, int) or found or slots is not None:
                break
            # the tokens left over need this many more micro-batches, at the least
            m += -(-max(got, 1) // mesh.multiple) * mesh.multiple
        if got is None or isinstance(got, int):  # past the best, or does not fit the count
            continue
        found = True
        yield (
            _busiest(got, times, lanes),
            functools.partial(_assemble, got, mesh, cost, idx, lens, degrees, times, m),
        )
    if not (search and mesh.dynamic and n):
        return
    for rnd, start, first, degrees, times, count in _rounds(lens, kmin, mesh, cost, cap):
        if (slots is not None and count != slots) or count % mesh.multiple or count < mesh.pp:
            continue
        if mesh.aligned_groups and (first % degrees).any():
            continue  # a group off its block

        def build(
            rnd: np.ndarray = rnd,
            start: np.ndarray = start,
            first: np.ndarray = first,
            degrees: np.ndarray = degrees,
            times: np.ndarray = times,
            count: int = count,
        ) -> Placement:
            got = (rnd, start, _blocks(first, degrees))
            return _assemble(got, mesh, cost, idx, lens, degrees, times, count)

        yield _busiest_blocks(first, degrees, times, lanes), build


# ---------------------------------------------------------------------------------- epochs


@dataclasses.dataclass(frozen=True, eq=False)
class PlacementPlan:
    """An epoch cut into global batches, each placed on demand (:func:`plan_placement`).

    ``batch(step)`` and ``step(step)`` depend on (lengths, global_batch, seed, epoch, delays)
    only, never on earlier steps: resume at any step recomputes it, and :meth:`on` places the
    same steps on another mesh (elastic resume: each sequence still once per epoch).
    """

    lengths: np.ndarray
    mesh: Mesh
    cost: MeshCost
    global_batch: int
    seed: int
    epoch: int
    steps: np.ndarray  # step of each position of the epoch's order
    order: np.ndarray  # the epoch's order, grouped by step
    bounds: np.ndarray  # order[bounds[s]:bounds[s+1]] is step s
    delayed: np.ndarray  # per position of order: was it delayed

    def __len__(self) -> int:
        return int(self.bounds.size - 1)

    def batch(self, step: int) -> np.ndarray:
        """The dataset indices of global batch ``step``."""
        s = self._step(step)
        return self.order[self.bounds[s] : self.bounds[s + 1]].copy()

    def step(self, step: int) -> Placement:
        """Global batch ``step`` placed on the plan's mesh."""
        s = self._step(step)
        idx = self.order[self.bounds[s] : self.bounds[s + 1]]
        p = place(self.lengths[idx], self.mesh, self.cost, indices=idx)
        late = idx[self.delayed[self.bounds[s] : self.bounds[s + 1]]]
        return dataclasses.replace(p, delayed=late.copy())

    def on(self, mesh: Mesh, cost: MeshCost | None = None) -> PlacementPlan:
        """The same steps placed on ``mesh`` (and ``cost``): what an elastic resume runs."""
        return dataclasses.replace(self, mesh=mesh, cost=self.cost if cost is None else cost)

    def _step(self, step: int) -> int:
        s = check_int("step", step, minimum=0)
        if s is None or s >= len(self):
            raise ValueError(f"step must be in [0, {len(self)}), got {s}")
        return s


def plan_placement(
    lengths: Any,
    mesh: Mesh,
    cost: MeshCost,
    *,
    global_batch: int,
    seed: int = 0,
    epoch: int = 0,
    delay_longer_than: int | None = None,
    delay_steps: int = 1,
) -> PlacementPlan:
    """An epoch of ``lengths`` in global batches of ``global_batch`` sequences (the last may be
    short), shuffled by ``(seed, epoch)``, placed step by step on ``mesh``.

    ``delay_longer_than``: sequences longer than this many tokens move ``delay_steps`` steps
    later (at most to the last step), so that one step rarely meets several outliers (WLB-LLM's
    delay); the steps they leave are shorter, coverage is unchanged, and each step reports what
    it delayed (``Placement.delayed``). Membership does not depend on the mesh.

    >>> from padless import Cost
    >>> cost = MeshCost(forward=Cost(linear=1e-6), backward=Cost(linear=2e-6))
    >>> plan = plan_placement([5, 9, 3, 7, 1, 8], Mesh(dp=2), cost, global_batch=4, seed=1)
    >>> len(plan), sorted(np.concatenate([plan.batch(0), plan.batch(1)]).tolist())
    (2, [0, 1, 2, 3, 4, 5])
    """
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a padless.Mesh, got {type(mesh).__name__}")
    if not isinstance(cost, MeshCost):
        raise TypeError(f"cost must be a padless.MeshCost, got {type(cost).__name__}")
    lens = _sequence_lengths(lengths)
    batch = positive("global_batch", global_batch)
    seed = check_seed("seed", seed)
    epoch = check_seed("epoch", epoch)
    limit = positive_or_none("delay_longer_than", delay_longer_than)
    delay = check_int("delay_steps", delay_steps, minimum=1)
    assert delay is not None
    n = lens.size
    fitted_degrees(lens, mesh)  # every sequence fits: refused here, not at its step
    order = _rng.rng(seed, epoch, _rng.PLACEMENT).permutation(n).astype(np.int64)
    num = max(1, -(-n // batch))
    steps = np.arange(n, dtype=np.int64) // batch
    late = np.zeros(n, dtype=np.bool_)
    if limit is not None:
        late = lens[order] > limit
        late &= steps < num - 1
        steps = np.where(late, np.minimum(steps + delay, num - 1), steps)
    by = np.argsort(steps, kind="stable")
    counts = np.bincount(steps, minlength=num)
    bounds = np.zeros(num + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    return PlacementPlan(
        lens, mesh, cost, batch, seed, epoch, steps[by], order[by], bounds, late[by]
    )


# ---------------------------------------------------------------------------------- simulation


@dataclasses.dataclass(frozen=True, eq=False)
class Simulation:
    """What a placed step is predicted to cost (:func:`simulate`).

    Attributes:
        rank_time: seconds each stage rank is busy or waiting until its last shard ends
            (without pipeline stages), or the pipeline's makespan on every rank (with them).
        slot_time: seconds of each micro-batch (its slowest rank), in run order.
        slot_imbalance: slowest ÷ mean rank busy time per micro-batch (1.0: even).
        makespan: predicted seconds of the step.
        bound: a lower bound of the makespan (see :func:`simulate`).
        bubble: share of the pipeline's device time idle (0 without stages).
        tokens: tokens each stage rank holds over the step.
        memory: predicted peak bytes per micro-batch (its fullest rank), or None.
        peak_memory: the step's predicted peak bytes (in-flight micro-batches counted), or None.
    """

    placement: Placement
    rank_time: np.ndarray
    slot_time: np.ndarray
    slot_imbalance: np.ndarray
    makespan: float
    bound: float
    bubble: float
    tokens: np.ndarray
    memory: np.ndarray | None
    peak_memory: float | None

    def table(self, width: int = 80) -> str:
        """A plain-text summary that reads in ``width`` columns (80 by default)."""
        p = self.placement
        mesh = p.mesh
        w = max(int(width), 40)
        lines = [
            f"mesh dp={mesh.dp} cp={mesh.cp}{' dynamic' if mesh.dynamic else ''}"
            f"{' aligned' if mesh.aligned_groups else ''} pp={mesh.pp}"
            f" {mesh.schedule}{f' vpp={mesh.vpp}' if mesh.vpp > 1 else ''}"
            f" max_tokens={mesh.max_tokens or '-'}",
            f"{len(p)} sequences, {p.micro_batches} micro-batches, degrees "
            + ",".join(
                f"{k}:{c}" for k, c in zip(*np.unique(p.degrees, return_counts=True), strict=True)
            )[: w - 40],
            f"step {self.makespan * 1e3:.1f} ms, bound {self.bound * 1e3:.1f} ms "
            f"({self.makespan / self.bound if self.bound > 0 else 1.0:.3f}x), "
            f"bubble {self.bubble:.1%}",
        ]
        rt, tk = self.rank_time, self.tokens
        lines.append(
            f"rank time ms   min {rt.min() * 1e3:.1f}  mean {rt.mean() * 1e3:.1f}  "
            f"max {rt.max() * 1e3:.1f}"
        )
        lines.append(
            f"tokens/rank    min {int(tk.min())}  mean {tk.mean():.0f}  max {int(tk.max())}"
        )
        if self.peak_memory is not None:
            lines.append(f"peak memory    {self.peak_memory / 2**30:.2f} GiB (in-flight counted)")
        lines.append("")
        head = f"{'mb':>4} {'time ms':>10} {'imbal':>7} {'seqs':>6} {'max tok':>9}"
        if self.memory is not None:
            head += f" {'mem GiB':>9}"
        lines.append(head)
        toks = p.rank_tokens()
        counts = np.bincount(p.slots, minlength=p.micro_batches)
        for m in range(p.micro_batches):
            row = (
                f"{m:>4} {self.slot_time[m] * 1e3:>10.2f} {self.slot_imbalance[m]:>7.3f} "
                f"{int(counts[m]):>6} {int(toks[m].max()):>9}"
            )
            if self.memory is not None:
                row += f" {self.memory[m] / 2**30:>9.3f}"
            lines.append(row)
        return "\n".join(line[:w] for line in lines)


def simulate(placement: Placement, memory: MemoryModel | None = None) -> Simulation:
    """Predict a placed step: per rank, per micro-batch, the pipeline, and memory.

    Each rank runs its shards in the placement's order; a shard starts when every rank of its CP
    group is free. Without pipeline stages ranks go straight on to their next micro-batch; with
    them a micro-batch is a unit (its slowest rank), its forward and backward share per stage
    what the cost model gives, and a 1F1B or interleaved pipeline runs them
    (:func:`padless._kernels.placement.pipeline`).

    The bound: without stages ``max(Σ k·t / ranks, max t)`` over the placed shards at the
    degree each sequence would be cheapest in rank-seconds; with ``S`` stages and micro-batch
    times ``t_m`` of the placement, ``max(Σ t_m + (S−1)·min t_m, S·max t_m)``.

    Memory (``memory``, a :class:`padless.MemoryModel` fitted to a rank's packed micro-batch):
    a rank's micro-batch holds ``fixed + Σ cost(shard tokens)`` over its shards; the peak counts
    the micro-batches a 1F1B stage 0 holds in flight (``pp`` at most).
    """
    if not isinstance(placement, Placement):
        raise TypeError(f"placement must be a Placement, got {type(placement).__name__}")
    if memory is not None and not isinstance(memory, MemoryModel):
        raise TypeError(f"memory must be a padless.MemoryModel, got {type(memory).__name__}")
    p = placement
    mesh, cost = p.mesh, p.cost
    lanes = mesh.ranks
    m = p.micro_batches
    start, free = KP.replay_lanes(p.ranks, p.times, lanes, p.slots if mesh.pp > 1 else None)
    busy = np.zeros((m, lanes))
    for j in range(p.ranks.shape[1]):
        on = p.ranks[:, j] >= 0
        np.add.at(busy, (p.slots[on], p.ranks[on, j]), p.times[on])
    slot_time = _slot_times(p.slots, start, p.times, m)
    mean = busy.mean(axis=1)
    imbalance = np.where(mean > 0, busy.max(axis=1) / np.where(mean > 0, mean, 1.0), 1.0)
    tokens = p.rank_tokens()
    if mesh.pp == 1:
        rank_time = free
        makespan = float(free.max()) if lanes else 0.0
        bubble = 0.0
        ks = np.arange(1, mesh.cp + 1) if mesh.dynamic else np.array([mesh.cp])
        area = np.asarray(cost.time(p.lengths[:, None], ks[None, :])) * ks[None, :]
        if mesh.max_tokens is not None:
            area = np.where(
                rank_tokens(p.lengths[:, None], ks[None, :]) <= mesh.max_tokens, area, np.inf
            )
        if not mesh.dynamic:
            area = area / mesh.cp  # a DP group's lane holds the whole shard time
        per_lane = mesh.ranks if mesh.dynamic else mesh.dp
        cheapest = area.min(axis=1) if len(p) else np.zeros(0)
        longest = 0.0
        if len(p):
            tk = np.asarray(cost.time(p.lengths[:, None], ks[None, :]))
            if mesh.max_tokens is not None:
                tk = np.where(
                    rank_tokens(p.lengths[:, None], ks[None, :]) <= mesh.max_tokens, tk, np.inf
                )
            longest = float(tk.min(axis=1).max())
        bound = max(float(cheapest.sum()) / per_lane, longest)
    else:
        fwd, bwd = _passes(p, slot_time)
        makespan, dev_busy = KP.pipeline(fwd, bwd, mesh.pp, mesh.vpp)
        rank_time = np.full(lanes, makespan)
        bubble = 1.0 - float(dev_busy.sum()) / (mesh.pp * makespan) if makespan > 0 else 0.0
        s = mesh.pp
        bound = max(
            float(slot_time.sum()) + (s - 1) * float(slot_time.min()), s * float(slot_time.max())
        )
    mem = peak = None
    if memory is not None:
        c = memory.cost(0)
        act = np.zeros((m, lanes))
        tau = rank_tokens(p.lengths, p.degrees)
        for j in range(p.ranks.shape[1]):
            on = p.ranks[:, j] >= 0
            np.add.at(act, (p.slots[on], p.ranks[on, j]), c.of(tau[on]))
        mem = memory.fixed + act.max(axis=1)
        inflight = min(mesh.pp, m)
        window = np.array(
            [act[i : i + inflight].sum(axis=0).max() for i in range(m - inflight + 1)]
        )
        peak = float(memory.fixed + window.max())
    return Simulation(
        placement=p,
        rank_time=np.asarray(rank_time, dtype=np.float64),
        slot_time=slot_time,
        slot_imbalance=imbalance,
        makespan=makespan,
        bound=bound,
        bubble=bubble,
        tokens=tokens.sum(axis=0),
        memory=mem,
        peak_memory=peak,
    )
