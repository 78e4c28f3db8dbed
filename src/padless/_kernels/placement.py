"""Placement loops: shards of sequences onto (micro-batch, lanes), and pipeline schedules.

:func:`place_items` is a list scheduler over micro-batch slots (compiled, with
:func:`place_items_reference` beside it); :func:`cost_table` costs every length at every CP
degree (compiled, :func:`cost_table_reference` beside it); :func:`replay_lanes` replays a placement on its lanes
(compiled, :func:`replay_lanes_reference` beside it) and :func:`pipeline` runs a 1F1B or
interleaved pipeline over micro-batch times (compiled, :func:`pipeline_reference` beside it;
:func:`pipeline_orders` replays many run orders in one call).
The tests hold a brute-force reference of each replay.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _core

__all__ = [
    "cost_table",
    "cost_table_reference",
    "pipeline",
    "pipeline_orders",
    "pipeline_reference",
    "place_items",
    "place_items_reference",
    "place_rounds",
    "place_rounds_reference",
    "replay_lanes",
    "replay_lanes_reference",
    "rounds_tables",
    "rounds_tables_reference",
]


def _cost_inputs(
    lengths: Any, ks: Any, kmin: Any, coefs: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The arguments the compiled cost tables share, as the contiguous arrays they take."""
    return (
        np.ascontiguousarray(lengths, dtype=np.int64),
        np.ascontiguousarray(ks, dtype=np.int64),
        np.ascontiguousarray(kmin, dtype=np.int64),
        np.ascontiguousarray(coefs, dtype=np.float64),
    )


def cost_table(
    coefs: np.ndarray, lengths: np.ndarray, ks: np.ndarray, kmin: np.ndarray, slack: float = 0.02
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The seconds of a shard of every length (rows) at every degree of ``ks`` (columns), ``inf``
    where ``ks[j] < kmin[i]``; and per row the first column of the minimum, and the widest
    column whose rank-seconds ``k·t`` are within ``1 + slack`` of the row's least (the last
    where all are inf).

    ``coefs`` (9 floats): forward linear, quadratic, per_sequence and exchange seconds per
    shard token, the same four of the backward, and the latency of one exchange. A shard of
    ``L`` at degree ``k`` holds ``s = ⌈L / m⌉·m / k`` tokens (``m = 2k``, 1 at ``k = 1``) and a
    pass takes ``linear·s + per_sequence + step + (k − 1)·max(step, exchange·s + latency)``
    with ``step = quadratic·s²`` (:class:`padless.MeshCost`'s forward + backward). Compiled
    (csrc/placement.hpp), the same numbers bit for bit as :func:`cost_table_reference` (the
    same operations in the same order) in one pass instead of numpy's two dozen. O(rows · ks).
    """
    lens, ks, kmin, coefs = _cost_inputs(lengths, ks, kmin, coefs)
    table, fastest, widest = _core.cost_table(lens, ks, kmin, coefs, float(slack))
    shape = (lens.size, ks.size)
    return table.reshape(shape), fastest, widest


def cost_table_reference(
    coefs: np.ndarray, lengths: np.ndarray, ks: np.ndarray, kmin: np.ndarray, slack: float = 0.02
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`cost_table` in numpy, over the whole (rows, ks) table at once."""
    c = [float(x) for x in coefs]
    lens = np.asarray(lengths, dtype=np.int64)
    kk = np.asarray(ks, dtype=np.int64)[None, :]
    kf = kk.astype(np.float64)
    mult = np.where(kk > 1, 2.0 * kk, 1.0)
    shard = np.ceil(lens[:, None] / mult) * mult / kk
    table = np.zeros(shard.shape)
    for linear, quadratic, per_sequence, exchange in (c[0:4], c[4:8]):
        step = quadratic * shard * shard
        out = linear * shard + per_sequence + step
        out += (kf - 1.0) * np.maximum(step, exchange * shard + c[8])
        table = table + out
    table = np.where(kk >= np.asarray(kmin, dtype=np.int64)[:, None], table, np.inf)
    fastest = np.argmin(table, axis=1) if kk.size else np.zeros(lens.size, dtype=np.int64)
    widest = np.zeros(lens.size, dtype=np.int64)
    if kk.size:
        area = table * kk
        free = area <= (1.0 + slack) * area.min(axis=1, keepdims=True)
        widest = kk.size - 1 - np.argmax(free[:, ::-1], axis=1)
    return table, np.asarray(fastest, dtype=np.int64), widest.astype(np.int64)


def place_items(
    order: np.ndarray,
    widths: np.ndarray,
    times: np.ndarray,
    tokens: np.ndarray,
    lanes: int,
    slots: int,
    max_tokens: int,
    aligned: bool = False,
    limit: float = np.inf,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | int | None:
    """Place items, in ``order``, on ``widths[i]`` lanes of one of ``slots`` micro-batches.

    In a slot, the lanes with room for ``tokens[i]`` more tokens (at most ``max_tokens`` per
    lane and slot) are ranked by (free time, lane); the item takes the first ``widths[i]``,
    starts when the last of them is free and holds them all for ``times[i]``. The slot chosen is
    the one where it finishes first (then the lowest slot): longest first, this is LPT over the
    (slot, lane) pairs, which evens out the micro-batches and the lanes' sums alike. Returns
    ``(slot, start, lanes)`` (``lanes`` an (N, max width) int64 array, −1 past an item's width,
    ascending), or, when an item fits no slot, its position in ``order`` (an int), or ``None``:
    a lane's busy time (the times placed on it so far) passed ``limit`` and the items left
    provably fit, so the placement stopped (not aligned only; checked where the limit is passed,
    then 16, 32, 64… items later; see :func:`_rest_fits`). A caller that
    keeps only placements whose busiest lane is under a bound need not finish the others; a
    placement that would not fit still fails as without a limit.

    With ``aligned`` an item of width ``w`` takes a block of ``w`` consecutive lanes starting at
    a multiple of ``w``: in each slot, the block (all its lanes with room) where it starts first,
    ties to the lowest block.

    Compiled (csrc/placement.hpp: each slot keeps its lanes sorted, and a scan stops once a
    lane cannot beat the best finish). Cost: O(N · (slots · scanned + lanes)), ``scanned``
    usually the width.
    """
    failed, slot, start, flat, wmax = _core.place_items(
        np.ascontiguousarray(order, dtype=np.int64),
        np.ascontiguousarray(widths, dtype=np.int64),
        np.ascontiguousarray(times, dtype=np.float64),
        np.ascontiguousarray(tokens, dtype=np.int64),
        int(lanes),
        int(slots),
        int(max_tokens),
        bool(aligned),
        float(limit),
    )
    if failed == -2:
        return None
    if failed >= 0:
        return int(failed)
    return slot, start, flat.reshape(-1, wmax)


def place_items_reference(
    order: np.ndarray,
    widths: np.ndarray,
    times: np.ndarray,
    tokens: np.ndarray,
    lanes: int,
    slots: int,
    max_tokens: int,
    aligned: bool = False,
    limit: float = np.inf,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | int | None:
    """:func:`place_items` in plain numpy: every slot ranked in full (every block, aligned) for
    every item."""
    n = int(order.size)
    wmax = int(widths.max()) if n else 1
    free = np.zeros((slots, lanes), dtype=np.float64)
    used = np.zeros((slots, lanes), dtype=np.int64)
    slot = np.zeros(n, dtype=np.int64)
    start = np.zeros(n, dtype=np.float64)
    chosen = np.full((n, wmax), -1, dtype=np.int64)
    lane_ids = np.arange(lanes)
    busy = [0.0] * lanes
    crossed, next_check, stride = False, 0, 16
    for pos, i in enumerate(order.tolist()):
        w, t, tau = int(widths[i]), float(times[i]), int(tokens[i])
        best, best_m, best_pick, best_at = np.inf, -1, lane_ids[:0], 0.0
        for m in range(slots):
            if aligned:
                for b in range(0, lanes - w + 1, w):
                    block = lane_ids[b : b + w]
                    if (used[m, block] + tau <= max_tokens).all():
                        at = float(free[m, block].max())
                        if at + t < best:
                            best, best_m, best_pick, best_at = at + t, m, block, at
                continue
            room = np.flatnonzero(used[m] + tau <= max_tokens)
            if room.size < w:
                continue
            ranked = room[np.lexsort((lane_ids[room], free[m, room]))][:w]
            at = float(free[m, ranked[-1]])
            if at + t < best:
                best, best_m, best_pick, best_at = at + t, m, ranked, at
        if best_m < 0:
            return pos
        pick = np.sort(best_pick)
        free[best_m, pick] = best_at + t
        used[best_m, pick] += tau
        slot[i], start[i] = best_m, best_at
        chosen[i, :w] = pick
        for lane in pick.tolist():
            busy[lane] += t
            crossed = crossed or busy[lane] > limit
        if crossed and not aligned and pos >= next_check:
            rest = order[pos + 1 :]
            if _rest_fits(widths[rest], tokens[rest], used, max_tokens):
                return None
            next_check, stride = pos + stride, stride * 2
    return slot, start, chosen


def _rest_fits(widths: np.ndarray, tokens: np.ndarray, used: np.ndarray, max_tokens: int) -> bool:
    """Do items of ``widths`` and ``tokens`` fit (slots, lanes) holding ``used`` tokens, whatever
    lanes a placement picks? With ``T`` their most tokens, ``W`` the widest and ``N`` their lanes
    in all: a lane with ``c = room // T >= 1`` takes ``c`` more at least, ``N`` placements end
    at most the ``k`` live lanes of least ``c`` whose ``c`` sum to ``<= N``, and more than
    ``slots · (W − 1)`` live lanes left put ``W`` of them in one slot before every item."""
    if widths.size == 0:
        return True
    most, widest, need = int(tokens.max()), int(widths.max()), int(widths.sum())
    if most == 0:
        return True
    caps = (max_tokens - used).reshape(-1) // most
    caps = np.sort(np.minimum(caps[caps >= 1], need + 1))
    killed = int(np.searchsorted(np.cumsum(caps), need, side="right"))
    return caps.size - killed > used.shape[0] * (widest - 1)


def place_rounds(
    order: np.ndarray,
    sizes: np.ndarray,
    times: np.ndarray,
    tokens: np.ndarray,
    limits: np.ndarray,
    lanes: int,
    max_tokens: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | int:
    """:func:`place_rounds_reference` compiled (csrc/placement.hpp); ``times`` and ``tokens``
    are (N, len(sizes)). Cost: O(rounds · N · (sizes + groups per round))."""
    failed, rnd, first, kidx, start = _core.place_rounds(
        np.ascontiguousarray(order, dtype=np.int64),
        np.ascontiguousarray(sizes, dtype=np.int64),
        np.ascontiguousarray(times, dtype=np.float64).reshape(-1),
        np.ascontiguousarray(tokens, dtype=np.int64).reshape(-1),
        np.ascontiguousarray(limits, dtype=np.float64),
        int(lanes),
        int(max_tokens),
    )
    if failed >= 0:
        return int(failed)
    return rnd, first, kidx, start


def replay_lanes(
    lanes_of: np.ndarray, times: np.ndarray, lanes: int, slots: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Replay items in the order given on their lanes: each starts when all its lanes are free.

    ``lanes_of`` is (N, width) with −1 padding; with ``slots`` (the slot of each item), the first
    item of a new slot first waits for every lane (a pipeline stage sends whole micro-batches).
    Returns ``(start, end per lane)``. Compiled (csrc/placement.hpp); O(N · width).
    """
    rows = np.ascontiguousarray(lanes_of, dtype=np.int64)
    width = rows.shape[1] if rows.ndim == 2 and rows.shape[1] else 1
    barrier = slots is not None
    slot_ids = np.zeros(times.size, np.int64) if slots is None else slots
    start, free = _core.replay_lanes(
        rows.reshape(-1) if rows.size else np.zeros(0, np.int64),
        int(width),
        np.ascontiguousarray(times, dtype=np.float64),
        np.ascontiguousarray(slot_ids, dtype=np.int64),
        int(lanes),
        barrier,
    )
    return start, free


def replay_lanes_reference(
    lanes_of: np.ndarray, times: np.ndarray, lanes: int, slots: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`replay_lanes` in plain Python."""
    free = np.zeros(lanes, dtype=np.float64)
    start = np.zeros(times.size, dtype=np.float64)
    for i in range(times.size):
        if slots is not None and i > 0 and slots[i] != slots[i - 1]:
            free[:] = free.max()
        row = lanes_of[i]
        row = row[row >= 0]
        s = float(free[row].max())
        free[row] = s + float(times[i])
        start[i] = s
    return start, free


def rounds_tables(
    coefs: np.ndarray, lengths: np.ndarray, ks: np.ndarray, kmin: np.ndarray, cap: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The tables of the two :func:`place_rounds` calls of the Megatron-like candidates:
    ``(tokens, times, work_time, work_quad, limit_time, limit_quad)``.

    Per length (rows) and group size ``ks`` (columns): the tokens a rank holds (the length
    padded to ``2k``, 1 at ``k = 1``, over ``k``), the shard's seconds (:func:`cost_table`'s),
    and two work measures, ``inf`` where ``ks[s] < kmin[i]``: the seconds, and ``L²/k``; per
    length the cap of a round it opens, ``1.05`` × its work at its smallest allowed size ``k0``
    × ``max(1, k0·cap / L)``, in each measure. Compiled (csrc/placement.hpp), the same numbers
    bit for bit as :func:`rounds_tables_reference` in one pass instead of numpy's dozen.
    O(N · len(ks)).
    """
    lens, ks, kmin, coefs = _cost_inputs(lengths, ks, kmin, coefs)
    tables = _core.rounds_tables(lens, ks, kmin, coefs, int(cap))
    tokens, times, work_time, work_quad, limit_time, limit_quad = tables
    shape = (lens.size, ks.size)
    return (
        tokens.reshape(shape),
        times.reshape(shape),
        work_time.reshape(shape),
        work_quad.reshape(shape),
        limit_time,
        limit_quad,
    )


def rounds_tables_reference(
    coefs: np.ndarray, lengths: np.ndarray, ks: np.ndarray, kmin: np.ndarray, cap: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`rounds_tables` in numpy."""
    lens = np.asarray(lengths, dtype=np.int64)
    ks = np.asarray(ks, dtype=np.int64)
    n = lens.size
    allowed = ks[None, :] >= np.asarray(kmin, dtype=np.int64)[:, None]
    # a rank's tokens: each length padded to 2·k (1 at k = 1), over k (in floats, exact)
    mult = np.where(ks > 1, 2.0 * ks, 1.0)[None, :]
    shard = np.ceil(lens[:, None] / mult) * mult / ks[None, :]
    tokens = shard.astype(np.int64)
    times = cost_table(coefs, lens, ks, np.ones(n, dtype=np.int64))[0]
    row = np.arange(n)
    k0 = np.argmax(allowed, axis=1)
    lf = lens.astype(np.float64)
    fill = np.maximum(1.0, ks[k0] * np.int64(cap) / np.maximum(lf, 1.0))
    quad = lf[:, None] * lf[:, None] / ks[None, :]
    return (
        tokens,
        times,
        np.where(allowed, times, np.inf),
        np.where(allowed, quad, np.inf),
        1.05 * times[row, k0] * fill,
        1.05 * quad[row, k0] * fill,
    )


def _orders(stages: int, vpp: int, micro: int) -> list[list[tuple[str, int, int]]]:
    """Each device's ops in order: ``(kind, micro-batch, virtual stage)`` (Megatron's 1F1B and
    interleaved orders)."""
    out = []
    total = micro * vpp
    for d in range(stages):

        def f_op(k: int, d: int = d) -> tuple[str, int, int]:
            chunk = (k // stages) % vpp
            mb = (k // (stages * vpp)) * stages + k % stages
            return ("F", mb, chunk * stages + d)

        def b_op(k: int, d: int = d) -> tuple[str, int, int]:
            chunk = vpp - 1 - (k // stages) % vpp
            mb = (k // (stages * vpp)) * stages + k % stages
            return ("B", mb, chunk * stages + d)

        if vpp == 1:
            warm = min(stages - d - 1, micro)
            f = [("F", m, d) for m in range(micro)]
            b = [("B", m, d) for m in range(micro)]
        else:
            warm = min((stages - d - 1) * 2 + (vpp - 1) * stages, total)
            f = [f_op(k) for k in range(total)]
            b = [b_op(k) for k in range(total)]
        ops = f[:warm]
        fi, bi = warm, 0
        while fi < total:
            ops.append(f[fi])
            ops.append(b[bi])
            fi, bi = fi + 1, bi + 1
        ops.extend(b[bi:])
        out.append(ops)
    return out


def pipeline(
    forward: np.ndarray, backward: np.ndarray, stages: int, vpp: int = 1
) -> tuple[float, np.ndarray]:
    """Run a 1F1B (``vpp=1``) or interleaved pipeline of ``stages`` devices over micro-batches
    whose forward and backward take ``forward[m]``, ``backward[m]`` per device (split evenly over
    its ``vpp`` virtual stages). Returns ``(makespan, busy seconds per device)``.

    An op starts when its device is free and what it needs is done: the forward of the virtual
    stage before, the backward of the stage after (and its own forward). Transfers take no time.
    Interleaved (``vpp > 1``) needs a micro-batch count that is a multiple of ``stages``.

    Compiled (csrc/placement.hpp), the same floats as :func:`pipeline_reference`.
    Cost: O(stages · micro-batches · vpp) ops.
    """
    fwd = np.ascontiguousarray(forward, dtype=np.float64)
    bwd = np.ascontiguousarray(backward, dtype=np.float64)
    got = _core.pipeline(fwd, bwd, int(stages), int(vpp), np.arange(fwd.size, dtype=np.int64), 1)
    busy = np.full(int(stages), float((fwd / vpp).sum() + (bwd / vpp).sum()) * vpp)
    return float(got[0]), busy


def pipeline_orders(
    forward: np.ndarray, backward: np.ndarray, stages: int, vpp: int, orders: np.ndarray
) -> np.ndarray:
    """The makespan of :func:`pipeline` for each row of ``orders`` (K, M): row ``r`` runs
    micro-batch ``orders[r, j]`` in place ``j`` (each row a permutation of ``0..M−1``), i.e.
    ``pipeline(forward[orders[r]], backward[orders[r]], stages, vpp)[0]``, in one call.
    Compiled; O(K · stages · M · vpp)."""
    fwd = np.ascontiguousarray(forward, dtype=np.float64)
    rows = np.ascontiguousarray(orders, dtype=np.int64).reshape(-1, fwd.size) if fwd.size else None
    count = 0 if rows is None else rows.shape[0]
    return _core.pipeline(
        fwd,
        np.ascontiguousarray(backward, dtype=np.float64),
        int(stages),
        int(vpp),
        np.zeros(0, np.int64) if rows is None else rows.reshape(-1),
        int(count),
    )


def pipeline_reference(
    forward: np.ndarray, backward: np.ndarray, stages: int, vpp: int = 1
) -> tuple[float, np.ndarray]:
    """:func:`pipeline` in plain Python: a dict of the ops done, devices visited in turn, each
    as far as it can go. With ``vpp > 1`` and a micro-batch count that is not a multiple of
    ``stages`` the orders name micro-batches that do not exist (an ``IndexError``)."""
    micro = int(forward.size)
    v_total = stages * vpp
    fwd = np.asarray(forward, dtype=np.float64) / vpp
    bwd = np.asarray(backward, dtype=np.float64) / vpp
    orders = _orders(stages, vpp, micro)
    done: dict[tuple[str, int, int], float] = {}
    free = np.zeros(stages)
    pos = [0] * stages
    left = sum(len(o) for o in orders)
    while left:
        moved = False
        for d in range(stages):
            while pos[d] < len(orders[d]):
                kind, m, v = orders[d][pos[d]]
                if kind == "F":
                    need = [("F", m, v - 1)] if v > 0 else []
                else:
                    need = [("F", m, v)] + ([("B", m, v + 1)] if v < v_total - 1 else [])
                if any(x not in done for x in need):
                    break
                s = max([free[d]] + [done[x] for x in need])
                free[d] = s + (fwd[m] if kind == "F" else bwd[m])
                done[(kind, m, v)] = free[d]
                pos[d] += 1
                left -= 1
                moved = True
        if not moved:  # pragma: no cover - the orders above never deadlock
            raise RuntimeError("pipeline schedule deadlocked")
    busy = np.full(stages, float(fwd.sum() + bwd.sum()) * vpp)
    return float(free.max()), busy


def place_rounds_reference(
    order: np.ndarray,
    sizes: np.ndarray,
    times: np.ndarray,
    tokens: np.ndarray,
    limits: np.ndarray,
    lanes: int,
    max_tokens: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | int:
    """Micro-batches built one at a time, the way Megatron-LM's dev-branch dynamic CP does
    (``next_hdp_group_packing_aware``), in plain Python (:func:`place_rounds` is compiled).

    ``sizes`` (S,) are the group sizes a sequence may take, ascending; ``times`` (N, S) the
    seconds of one shard at each size (``inf``: not allowed), ``tokens`` (N, S) the tokens a rank
    holds of it. A round opens with the first item left (in ``order``) on lanes ``0..k−1``, k its
    smallest allowed size, and caps every lane's busy time at ``limits`` of that item. Each later
    item left, in order, tries every allowed size: joining the least busy group of that size with
    room for its tokens, or opening a group of that size on the lowest free lanes; it keeps the
    choice with the lowest busiest lane over the round (the first on ties) within the cap, else
    waits for a later round. Then, while lanes are free, the first group of the smallest size
    grows to the next size (the groups after it shift along); lanes no size can take stay idle.

    Returns ``(round, first lane, size index, start)`` per item (``start``: the work before it
    in its group, which runs its items one after another), or, when the item opening a round fits
    no group (no allowed size within ``lanes`` and ``max_tokens``), that item (an int).
    """
    n = int(order.size)
    n_sizes = int(sizes.size)
    rnd = np.full(n, -1, dtype=np.int64)
    first = np.zeros(n, dtype=np.int64)
    kidx = np.zeros(n, dtype=np.int64)
    start = np.zeros(n, dtype=np.float64)
    left = [int(i) for i in order.tolist()]
    r = 0
    while left:
        # a group: [first lane, size index, busy seconds, tokens per lane, items]
        groups: list[list] = []
        head = left[0]
        finite = np.flatnonzero(np.isfinite(times[head]))
        k0 = int(finite[0]) if finite.size else n_sizes
        if k0 == n_sizes or int(sizes[k0]) > lanes or tokens[head, k0] > max_tokens:
            return head
        groups.append([0, k0, float(times[head, k0]), int(tokens[head, k0]), [head]])
        used = int(sizes[k0])
        cap = float(limits[head])
        top = float(times[head, k0])  # the busiest lane
        later = []
        for i in left[1:]:
            best: tuple[float, int, int] | None = None  # (busiest after, size index, group or -1)
            for s in range(n_sizes):
                t = float(times[i, s])
                if not np.isfinite(t):
                    continue
                tau = int(tokens[i, s])
                pick, low = -1, np.inf
                for g, grp in enumerate(groups):
                    if grp[1] == s and grp[3] + tau <= max_tokens and grp[2] < low:
                        pick, low = g, grp[2]
                if pick >= 0:
                    after = max(low + t, top)
                    if after <= cap and (best is None or after < best[0]):
                        best = (after, s, pick)
                if lanes - used >= int(sizes[s]) and tau <= max_tokens:
                    after = max(t, top)
                    if after <= cap and (best is None or after < best[0]):
                        best = (after, s, -1)
            if best is None:
                later.append(i)
                continue
            after, s, g = best
            if g < 0:
                groups.append([used, s, 0.0, 0, []])
                used += int(sizes[s])
                g = len(groups) - 1
            grp = groups[g]
            grp[2] += float(times[i, s])
            grp[3] += int(tokens[i, s])
            grp[4].append(i)
            top = after
        while used < lanes:
            small = min(grp[1] for grp in groups)
            if small + 1 >= n_sizes:
                break
            step = int(sizes[small + 1] - sizes[small])
            if used + step > lanes:
                break
            at = next(g for g, grp in enumerate(groups) if grp[1] == small)
            groups[at][1] = small + 1
            for grp in groups[at + 1 :]:
                grp[0] += step
            used += step
        for grp in groups:
            clock = 0.0
            for i in grp[4]:
                rnd[i], first[i], kidx[i], start[i] = r, grp[0], grp[1], clock
                clock += float(times[i, grp[1]])
        left = later
        r += 1
    return rnd, first, kidx, start
