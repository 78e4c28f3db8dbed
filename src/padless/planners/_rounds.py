"""What the strategies' stream forms share: a round's plan over a buffer and its helpers.

A stream (:class:`padless.StreamBatcher`) plans its buffer round by round; each strategy
supplies a :class:`StreamEngine` (``spec.stream_engine()``) that admits items and plans a
round. A buffer is anything with ``lens`` (the entries' lengths, (M,) or (M, F)), ``sizes``
(one per entry: the max over fields), ``chunk`` and ``len()``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _kernels as K

#: ``TokenBudget``: a batch that pads at most this fraction of its slots may leave early.
PAD_TARGET = 0.005
#: ``Packing``: a row is emitted when its tokens fill at least this fraction of ``capacity``.
FILL_TARGET = 0.999
_MASK64 = (1 << 64) - 1
Buffer = Any


class Round:
    """One round's emitted batches over the buffer entries, and the entries that wait.

    Batch ``b`` is entries ``order[offsets[b]:offsets[b + 1]]``; for packing, batch ``b`` is
    rows ``row_offsets[b]:row_offsets[b + 1]`` and row ``k`` entries
    ``order[offsets[k]:offsets[k + 1]]``. ``real``/``padded`` are per-batch figures.
    """

    __slots__ = ("order", "offsets", "row_offsets", "carry", "dropped", "real", "padded")

    def __init__(
        self,
        order: np.ndarray,
        offsets: np.ndarray,
        carry: np.ndarray,
        real: np.ndarray,
        padded: np.ndarray,
        row_offsets: np.ndarray | None = None,
        dropped: int = 0,
    ) -> None:
        self.order = order
        self.offsets = offsets
        self.row_offsets = row_offsets
        self.carry = carry
        self.real = real
        self.padded = padded
        self.dropped = dropped

    @property
    def num_batches(self) -> int:
        bounds = self.offsets if self.row_offsets is None else self.row_offsets
        return int(bounds.size - 1)


def shuffled(n: int, key: int) -> np.ndarray:
    """A permutation of ``range(n)`` drawn from the 64-bit ``key`` (compiled Fisher-Yates)."""
    out = np.arange(n, dtype=np.int64)
    if n > 1:
        K.shuffle_runs(out, np.array([0, n], np.int64), np.uint64(key & _MASK64))
    return out


def csr(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def left_out(n: int, taken: np.ndarray) -> np.ndarray:
    """Sorted positions in ``[0, n)`` that are not in ``taken``."""
    keep = np.ones(n, np.bool_)
    keep[taken] = False
    return np.flatnonzero(keep)


def padding(lens: np.ndarray, order: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, ...]:
    """Real tokens and padded slots of each batch (2-D lengths: summed over fields)."""
    if offsets.size <= 1:
        z = np.zeros(0, np.int64)
        return z, z
    starts = offsets[:-1]
    counts = np.diff(offsets)
    picked = lens[order]
    if picked.ndim == 1:
        picked = picked[:, None]
    real = np.add.reduceat(picked.sum(axis=1), starts) if order.size else np.zeros(0, np.int64)
    padded = np.zeros(counts.size, np.int64)
    for f in range(picked.shape[1]):
        padded += counts * np.maximum.reduceat(picked[:, f], starts)
    return real.astype(np.int64), padded


class StreamEngine:
    """What a strategy does with a buffer: which items it admits and how a round is planned."""

    #: the buffer keeps only each item's size (the max over fields), not all its fields
    sizes_only = False

    def __init__(self, spec: Any) -> None:
        self.spec = spec

    @property
    def cut_above(self) -> int | None:
        """Items longer than this are handed to :meth:`cut` (None: no item is cut)."""
        return None

    def cut(self, size: int) -> list[tuple[int, int, int, int, int]]:
        """The entries an item of ``size > cut_above`` becomes: ``(k, count, start, stop,
        piece)`` each (tokens ``start:stop``, piece ``k`` of ``count``; ``piece`` -1 for an
        entry that stands for the whole item); none: the item is left out."""
        return []

    def admit(self, sizes: np.ndarray, where: Callable[[int], int]) -> np.ndarray | None:
        """Mask of items to keep (None: all); raise for items the spec refuses."""
        return None

    def plan(self, buf: Buffer, forced: np.ndarray, final: bool, key: int, room: int) -> Round:
        """The round's batches: every ``forced`` entry leaves (all with ``final``), and at most
        ``room`` entries wait."""
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        return {}

    def load(self, state: dict[str, Any]) -> None:
        pass


def within_budget(
    sizes: np.ndarray, limit: int | None, oversize: str, where: Callable[[int], int]
) -> np.ndarray | None:
    """Mask of the items no longer than ``limit`` (None: all are; so is a ``limit`` of None);
    with ``oversize="error"`` an item over it is a ValueError naming its stream position."""
    if limit is None or not sizes.size or int(sizes.max()) <= limit:
        return None
    if oversize == "error":
        i = int(np.flatnonzero(sizes > limit)[0])
        raise ValueError(
            f"the item at stream position {where(i)} has length {int(sizes[i])}, which exceeds "
            f'max_tokens={limit} (pass oversize="drop" to leave such items out)'
        )
    return sizes <= limit


def release(counts: np.ndarray, leave: np.ndarray, score: np.ndarray, room: int) -> np.ndarray:
    """Let go the waiting groups of lowest ``score`` too, until at most ``room`` entries wait.

    This is what keeps the buffer within its size: when too many entries would wait, the
    least padded (fullest) of the waiting batches leave, the worst keep waiting.
    """
    waiting = int(counts[~leave].sum())
    if waiting <= room:
        return leave
    cand = np.flatnonzero(~leave)
    cand = cand[np.argsort(score[cand], kind="stable")]
    k = int(np.searchsorted(np.cumsum(counts[cand]), waiting - room)) + 1
    leave = leave.copy()
    leave[cand[:k]] = True
    return leave


def select(
    lens: np.ndarray,
    order: np.ndarray,
    offsets: np.ndarray,
    emit: np.ndarray,
    n: int,
    real: np.ndarray | None = None,
    padded: np.ndarray | None = None,
) -> Round:
    """Keep the batches marked ``emit`` (in plan order); their entries leave, the rest wait.

    ``real``/``padded`` per batch of 1-D lengths may be given; 2-D lengths sum every field.
    """
    counts = np.diff(offsets)
    if emit.all():
        e_order, e_offsets = order, offsets
    else:
        e_order = order[np.repeat(emit, counts)]
        e_offsets = csr(counts[emit])
    if real is None or padded is None or lens.ndim == 2:
        real, padded = padding(lens, e_order, e_offsets)
    else:
        real, padded = real[emit], padded[emit]
    return Round(e_order, e_offsets, left_out(n, e_order), real, padded)


class GroupEngine(StreamEngine):
    """Fixed-size batches within groups (exact lengths or buckets): oldest first, remainders wait."""

    def groups(self, buf: Buffer) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(order, starts, batch size per group)."""
        raise NotImplementedError

    def expired(self, lens: np.ndarray, rest: np.ndarray, runs: np.ndarray) -> Round:
        raise NotImplementedError

    def plan(self, buf: Buffer, forced: np.ndarray, final: bool, key: int, room: int) -> Round:
        order, starts, run_size = self.groups(buf)
        kept, ends, rest, rest_run = K.exact_split(order, starts, run_size, 1)
        full_order = order[:kept]
        full_offsets = np.zeros(ends.size + 1, np.int64)
        full_offsets[1:] = ends
        runs = run_size.size
        if final:
            due = np.ones(runs, np.bool_)
        else:  # a remainder with a late entry leaves whole; so do the fullest under pressure
            due = np.bincount(rest_run, weights=forced[rest], minlength=runs) > 0
            counts = np.bincount(rest_run, minlength=runs)
            has = counts > 0
            score = 1.0 - counts / np.maximum(run_size, 1)
            due = release(counts[has], due[has], score[has], room)
            due = spread(has, due)
        late = due[rest_run]
        out = self.expired(buf.lens, rest[late], rest_run[late])
        e_order = np.concatenate([full_order, out.order])
        e_offsets = np.concatenate([full_offsets, kept + out.offsets[1:]])
        real, padded = padding(buf.lens, e_order, e_offsets)
        carry = np.sort(rest[~late])
        return Round(e_order, e_offsets, carry, real, padded, dropped=out.dropped)


def spread(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` put back at the True places of ``mask`` (False elsewhere)."""
    out = np.zeros(mask.size, np.bool_)
    out[mask] = values
    return out


def check_streamable(spec: Any, known: tuple[str, ...]) -> None:
    """Refuse a spec with a setting its stream form does not follow (one not in ``known``,
    away from its default), rather than ignoring it."""
    unsupported = [
        f.name
        for f in dataclasses.fields(spec)
        if f.init and f.name not in known and getattr(spec, f.name) != f.default
    ]
    if unsupported:
        raise ValueError(
            f"spec settings {unsupported} are not supported by StreamBatcher yet (its batches "
            f"follow token budgets of the lengths as given only), got {spec.describe()}; "
            "plan with PlanSampler instead"
        )
