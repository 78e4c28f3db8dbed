"""Sequence packing: best-fit decreasing over the whole dataset into rows of fixed capacity.

A packed plan has two levels. **Rows** hold whole sequences (or pieces of split ones) back to back,
at most ``capacity`` tokens each; **batches** are groups of ``rows_per_batch`` rows. Attention
kernels with variable-length support (``flash_attn_varlen_func``, or a block-diagonal mask) then
run on the rows with no padding between sequences.

How the pieces fit together:

- :func:`plan_packing` is the pure planner; it returns a :class:`PackedPlan`.
- :class:`PackingSampler` yields, per batch, a list of Python ints for
  ``DataLoader(batch_sampler=...)``: the batch's sequence indices, row after row, rows in the order
  they were opened and each row's sequences longest first. That order is *canonical*: cutting
  the list "next fit" (start a new row when the next sequence does not fit, or the row already
  holds ``max_per_row``) gives back exactly the planned rows (:func:`next_fit_rows`). So the
  collate function (``padless.torch.collate_packed``) needs only the items and ``capacity``: no
  side channel from sampler to worker processes, and nothing to keep in sync across epochs.
- With ``oversize="split"`` a piece is yielded as the code ``index + piece · N`` (N sequences),
  which :class:`PieceDataset` turns back into the piece's tokens; codes of whole sequences are the
  plain indices. Wrap your dataset with :meth:`PackingSampler.pieces` in that mode (and for
  ``"truncate"``, where it keeps the first ``capacity`` tokens).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .. import _kernels as K
from .._kernels import cost as KC
from .._kernels import windows as KW
from ..core import _rng
from ..core._check import check_bool, check_choice, check_seed, positive, positive_or_none
from ..core.cost import (
    Cost,
    check_max_cost,
    context_parallel_costs,
    cost_settings,
    cp_multiple,
    format_cost,
    model_of,
    packed_batch_costs,
)
from ..core.lengths import MAX_LENGTH, as_lengths
from ..core.plan import (  # the plan types live in padless.core.plan
    BatchPlan,
    PackedPlan,
    VectorPackedPlan,
)
from ..core.schedules import Schedule, change_points, divisor_schedule
from . import _rounds as R
from ._order import group_keys, length_order
from .budget import check_oversize
from .spec import (
    QUIET_DEFAULTS,
    CollateForm,
    GroupedPlanner,
    Planner,
    Spec,
    StepForm,
    WindowKernel,
    check_cost,
    group_members,
    item_ids,
    plain,
    plan_items,
    round_up,
    setting,
)

if TYPE_CHECKING:
    pass

OVERSIZE = ("error", "split", "truncate", "drop")
MAX_CAPACITY = 1 << 28  # the open-row table holds one int64 per unit of capacity (2 GiB here)


def check_capacity(name: str, value: Any) -> int:
    """Check a packing capacity: a positive int no larger than :data:`MAX_CAPACITY`."""
    capacity = positive(name, value)
    if capacity > MAX_CAPACITY:
        raise ValueError(
            f"{name} must be <= {MAX_CAPACITY} (planning keeps 8 bytes per unit of capacity), "
            f"got {capacity}"
        )
    return capacity


def check_capacities(name: str, value: Any) -> int | tuple[int, int] | Schedule:
    """Check ``Packing``'s capacity: an int (rows of one field, the max over fields), a
    pair ``(source, target)`` of them, one capacity per field of (N, 2) lengths (a list is
    taken as a tuple, so ``Packing(**spec.as_dict())`` is the spec again), or a
    :class:`padless.Schedule` of the optimizer step (:func:`check_capacity_schedule`; its
    ``as_dict()`` form too).

    >>> check_capacities("capacity", [512, 256])
    (512, 256)
    """
    if isinstance(value, Mapping) and "kind" in value:
        value = Schedule.from_dict(value, name=name)
    if isinstance(value, Schedule):
        return check_capacity_schedule(name, value)
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(
                f"{name} must be an int, or a pair (source, target) of ints: one capacity per "
                f"field of (N, 2) lengths, got {len(value)} entries {list(value)!r:.60}"
            )
        first, second = (check_capacity(f"{name}[{f}]", c) for f, c in enumerate(value))
        return first, second
    return check_capacity(name, value)


def check_capacity_schedule(name: str, schedule: Schedule) -> int | Schedule:
    """Check a capacity schedule (a sequence-length warm-up): an integer schedule whose every
    value is a capacity that divides its largest one (:func:`padless.core.schedules.divisor_schedule`);
    a constant one is its int.

    >>> check_capacity_schedule("capacity", Schedule.piecewise([0, 100], [1024, 4096]))
    Schedule.piecewise(steps=[0, 100], values=[1024, 4096])
    >>> check_capacity_schedule("capacity", Schedule.piecewise([0, 100], [1536, 4096]))
    Traceback (most recent call last):
    ...
    ValueError: capacity at step 0 is 1536, which does not divide the largest capacity 4096 of Schedule.piecewise(steps=[0, 100], values=[1536, 4096]) (a step at capacity C cuts each planned row of the largest capacity into rows of C; a power-of-two warm-up does)
    """
    if not schedule.integer:
        raise TypeError(f"{name} must be an integer schedule (tokens per row), got {schedule!r}")
    if schedule.is_constant:
        return check_capacity(name, schedule.value(0))
    largest = f"largest {name}"
    divisor_schedule(
        name, schedule, largest=largest, check=check_capacity,
        why=f"a step at {name} C cuts each planned row of the {largest} into rows of C",
    )  # fmt: skip
    return schedule


# ---------------------------------------------------------------------------------- a warm-up


class ScheduledPiece:
    """A sample served for a batch of a smaller capacity than planned (a capacity schedule's
    warm-up): ``item`` (the sample, as :class:`PieceDataset` serves it at the planned capacity),
    ``capacity`` (the batch's row length) and ``planned`` (the capacity the rows were planned
    at, a multiple of it). ``padless.torch.collate_packed`` and
    ``padless.hf.PaddingFreeCollator`` take a batch of them: each planned row (next fit at
    ``planned``) is laid out as ``planned / capacity`` rows of ``capacity`` (:func:`layout_row`).
    """

    __slots__ = ("item", "capacity", "planned")

    def __init__(self, item: Any, capacity: int, planned: int) -> None:
        self.item = item
        self.capacity = positive("capacity", capacity)
        self.planned = positive("planned", planned)
        if self.planned % self.capacity:
            raise ValueError(
                f"planned must be a multiple of capacity={self.capacity} (its rows are cut into "
                f"rows of capacity), got {self.planned}"
            )

    def __reduce__(self) -> tuple[Any, ...]:
        return (ScheduledPiece, (self.item, self.capacity, self.planned))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScheduledPiece):
            return NotImplemented
        same = (self.capacity, self.planned) == (other.capacity, other.planned)
        return bool(same and self.item == other.item)

    __hash__ = None  # type: ignore[assignment]

    def with_item(self, item: Any) -> ScheduledPiece:
        """The same capacities around another item (a field of this one)."""
        return ScheduledPiece(item, self.capacity, self.planned)

    def __repr__(self) -> str:
        return (
            f"ScheduledPiece({self.item!r:.60}, capacity={self.capacity}, planned={self.planned})"
        )


def unwrap_scheduled(samples: Sequence[Any]) -> tuple[list[Any], tuple[int, int] | None]:
    """``(items, (capacity, planned))`` of a batch: the samples with :class:`ScheduledPiece`
    wrappers taken off, and the row length they ask for with the planned one (None: plain
    samples). A batch mixing capacities, or wrapped and plain samples, is a ValueError.

    >>> unwrap_scheduled([ScheduledPiece([1, 2], 4, 8), ScheduledPiece([3], 4, 8)])
    ([[1, 2], [3]], (4, 8))
    """
    wrapped = [isinstance(s, ScheduledPiece) for s in samples]
    if not any(wrapped):
        return list(samples), None
    caps = {(s.capacity, s.planned) for s in samples if isinstance(s, ScheduledPiece)}
    if not all(wrapped) or len(caps) > 1:
        raise ValueError(
            "the samples of a batch must all be ScheduledPiece of one capacity (a batch is at "
            f"one step's capacity), got (capacity, planned) {sorted(caps)} and "
            f"{wrapped.count(False)} plain samples; serve them with sampler.pieces(dataset)"
        )
    return [s.item for s in samples], caps.pop()


def layout_row(sizes: Sequence[int], capacity: int, parts: int) -> list[list[tuple[int, int, int]]]:
    """Lay one planned row's sequences out as ``parts`` rows of ``capacity`` tokens: the rule a
    step of a capacity schedule delivers a row of ``capacity · parts`` planned tokens by.

    Sequences go longest first (ties in the row's order); each goes whole into the first row
    with room for it; one that no row has room for fills the row with the most room (the first
    of those), and its rest is placed by the same rule; its pieces then take its tokens in row
    order. So a sequence is cut only where it must be (longer than ``capacity``, or no row left
    with room for it), its pieces keep the document's order in the row order, and the
    ``parts`` rows hold every token. Returns, per
    row, its pieces as ``(sequence, start, stop)``: sequence ``i``'s tokens ``[start, stop)``.

    Cost: O(len(sizes) · parts) per row.

    >>> layout_row([5, 2, 1], capacity=4, parts=2)
    [[(0, 0, 4)], [(0, 4, 5), (1, 0, 2), (2, 0, 1)]]
    """
    capacity = positive("capacity", capacity)
    parts = positive("parts", parts)
    total = sum(int(n) for n in sizes)
    if total > capacity * parts:
        raise ValueError(
            f"a planned row holds {total} tokens, more than parts · capacity = {parts} · "
            f"{capacity}; were the sizes one planned row's?"
        )
    room = [capacity] * parts
    rows: list[list[tuple[int, int, int]]] = [[] for _ in range(parts)]
    for i in sorted(range(len(sizes)), key=lambda k: -int(sizes[k])):
        left = int(sizes[i])
        taken: list[tuple[int, int]] = []  # (row, tokens) of each piece
        while True:
            r = next((r for r in range(parts) if room[r] >= left), None)
            if r is not None:
                taken.append((r, left))
                room[r] -= left
                break
            r = max(range(parts), key=room.__getitem__)
            taken.append((r, room[r]))
            left -= room[r]
            room[r] = 0
        start = 0
        for r, n in sorted(taken):  # the document's tokens in row order
            rows[r].append((i, start, start + n))
            start += n
    return rows


def layout_rows(
    sizes: Sequence[int], row_of: Sequence[int], capacity: int, parts: int, num_rows: int = 0
) -> list[list[tuple[int, int, int]]]:
    """A batch's planned rows (sample ``i`` in row ``row_of[i]``, rows in order) each laid out
    as ``parts`` rows of ``capacity`` (:func:`layout_row`), ``(sample, start, stop)`` per piece
    with samples numbered in the batch. ``num_rows``: at least this many planned rows (the
    empty ones give empty rows), for a fixed shape.

    >>> layout_rows([5, 2, 3], [0, 0, 1], capacity=4, parts=2)
    [[(0, 0, 4)], [(0, 4, 5), (1, 0, 2)], [(2, 0, 3)], []]
    """
    members: list[list[int]] = [[] for _ in range(max(num_rows, row_of[-1] + 1 if row_of else 0))]
    for i, r in enumerate(row_of):
        members[r].append(i)
    out: list[list[tuple[int, int, int]]] = []
    for row in members:
        for sub in layout_row([sizes[i] for i in row], capacity, parts):
            out.append([(row[j], a, b) for j, a, b in sub])
    return out


def scheduled_stride(num_sequences: int, capacity: int) -> int:
    """The code stride of a capacity schedule: a batch at ``capacity / f`` yields each planned
    code plus ``(f - 1) · stride``; ``stride = N · ceil(2**31 / capacity)`` is past every
    piece code ``index + piece · N`` (a sequence holds fewer than 2**31 tokens).

    >>> scheduled_stride(10, 1 << 30)
    20
    """
    n, cap = positive("num_sequences", num_sequences), positive("capacity", capacity)
    return n * -(-MAX_LENGTH // cap)


def untag(codes: Any, stride: int) -> tuple[Any, Any]:
    """``(planned, f)`` of codes a capacity schedule's sampler yields (an int, or an int64 array
    element by element): code ``c + (f - 1) · stride`` is the planned code ``c`` (< ``stride``)
    served at ``C_max / f``; a plain code is its own planned code, ``f = 1``. The one reading of a
    tag, shared by :class:`PieceDataset` and ``padless.torch.TokenDataset``.

    >>> untag(7 + 2 * scheduled_stride(5, 1 << 30), scheduled_stride(5, 1 << 30))
    (7, 3)
    """
    tag, planned = divmod(codes, stride)
    return planned, tag + 1


class CapacitySteps(StepForm):
    """``Packing(capacity=Schedule)`` as the sampler delivers it. The plan is packed at the
    schedule's largest capacity ``C_max`` (every value divides it); a batch of optimizer step
    ``g`` at capacity ``C = C_max / f`` yields its planned codes plus ``(f - 1) · stride``
    (:func:`scheduled_stride`), which :class:`PieceDataset` (given ``scheduled=True``) serves
    as :class:`ScheduledPiece` of capacity ``C``, and ``collate_packed`` lays each planned row
    out as ``f`` rows of ``C`` (:func:`layout_row`). At ``C_max`` codes are the plan's own."""

    def __init__(self, spec: Packing, planner: Planner) -> None:
        schedule = spec.capacity_schedule
        if schedule is None:
            raise ValueError(f"{spec.describe()} has no capacity schedule")
        self.schedule = schedule
        steps, values = change_points(schedule)
        largest = spec.row_capacity
        self.capacity = largest
        self.max_per_row = spec.max_per_row
        self.stride = scheduled_stride(int(planner.sizes.shape[0]), largest)
        self._changes = steps
        self._factors = [largest // int(v) for v in values]
        most = max(self._factors)
        if self.stride * most >= 1 << 63:
            raise ValueError(
                f"capacity={schedule!r}: codes of {planner.sizes.shape[0]} sequences at a "
                f"{most}-fold smaller capacity pass int64 (use fewer sequences per sampler or a "
                "smaller range of capacities)"
            )

    def keys_at(self, steps: np.ndarray) -> list[Any]:
        """Each step's ``(f, tag)``: ``f = C_max / C`` (the value changes only at the
        schedule's ``changes()``) and ``tag = (f - 1) · stride``; None at ``f = 1`` (the plan's
        own codes)."""
        at = np.searchsorted(np.asarray(self._changes), steps, side="right") - 1
        factors = np.asarray(self._factors, dtype=np.int64)[at]
        keys = {f: (f, (f - 1) * self.stride) for f in self._factors}
        return [None if f == 1 else keys[f] for f in factors.tolist()]

    def settles_at(self) -> int:
        return int(self._changes[-1])

    def list_at(self, values: np.ndarray, lo: int, hi: int, key: Any) -> list[int]:
        return K.offset_list(values, lo, hi, key[1])  # tag and list, one pass

    def entry_lengths_at(self, lengths: np.ndarray, key: Any) -> np.ndarray:
        if key is None:
            return lengths
        sizes = np.asarray(lengths, dtype=np.int64).tolist()
        row_of = next_fit_rows(sizes, capacity=self.capacity, max_per_row=self.max_per_row)
        rows = layout_rows(sizes, row_of.tolist(), self.capacity // key[0], key[0])
        return np.array([b - a for row in rows for _, a, b in row], dtype=np.int64)


# ---------------------------------------------------------------------------------- planner


def oversize_error(sizes: np.ndarray, capacity: int) -> None:
    """Raise the ``oversize="error"`` error for the first sequence longer than ``capacity``."""
    too_long = np.flatnonzero(sizes > capacity)
    if too_long.size:
        i = int(too_long[0])
        raise ValueError(
            f"index {i} has length {int(sizes[i])}, which exceeds capacity={capacity} "
            f'({too_long.size} sequences do; pass oversize="split", "truncate" or "drop")'
        )


def _oversize_report(count: int) -> dict[str, int]:
    """The oversize figures of a packing plan's info, ``count`` sequences over capacity."""
    figures = ("split", "pieces", "truncated", "dropped", "tokens_lost")
    return {"oversize_count": count, **dict.fromkeys(figures, 0)}


def _items(
    sizes: np.ndarray, capacity: int, oversize: str
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray, np.ndarray, dict[str, int]]:
    """Items to place: (sequence of each item or None for identity, piece number or None, item sizes,
    skipped sequences, report)."""
    over = np.flatnonzero(sizes > capacity)
    report = _oversize_report(int(over.size))
    none = np.zeros(0, dtype=np.int64)
    if over.size == 0:
        return None, None, sizes, none, report
    if oversize == "error":
        oversize_error(sizes, capacity)
    long = sizes[over]
    if oversize == "truncate":
        report["truncated"] = int(over.size)
        report["tokens_lost"] = int((long - capacity).sum())
        return None, None, np.minimum(sizes, capacity), none, report
    keep = np.flatnonzero(sizes <= capacity)
    if oversize == "drop":
        report["dropped"] = int(over.size)
        report["tokens_lost"] = int(long.sum())
        return keep, None, np.ascontiguousarray(sizes[keep]), over, report
    # split: pieces of capacity tokens, the last one shorter
    counts = -(-long // capacity)
    piece_seq = np.repeat(over, counts)
    firsts = np.cumsum(counts) - counts
    piece_no = np.arange(piece_seq.size, dtype=np.int64) - np.repeat(firsts, counts)
    piece_size = np.minimum(capacity, sizes[piece_seq] - piece_no * capacity)
    report["split"] = int(over.size)
    report["pieces"] = int(piece_seq.size)
    item_seq = np.concatenate([keep, piece_seq])
    item_piece = np.concatenate([np.zeros(keep.size, dtype=np.int64), piece_no])
    item_size = np.concatenate([sizes[keep], piece_size])
    return item_seq, item_piece, item_size, none, report


def _descending_sizes(sizes: np.ndarray, order: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``sizes[order[::-1]]`` for an increasing order whose runs of equal size ``starts`` bounds.

    Built as the running sum of the size changes at run starts: two sequential passes instead of
    a random gather.
    """
    n = order.size
    counts = np.diff(starts)[::-1]
    nonempty = np.flatnonzero(counts)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    firsts = (n - starts[1:][::-1])[nonempty]  # walk position where each run begins
    run_values = sizes[order[n - 1 - firsts]]
    delta = np.zeros(n, dtype=np.int64)
    delta[firsts] = np.diff(run_values, prepend=0)
    return np.cumsum(delta, out=delta)


def _row_order(num_rows: int, *, seed: int, epoch: int) -> np.ndarray:
    """The epoch's shuffled row order (int64), before each batch's rows are sorted."""
    final = _rng.rng(seed, epoch, _rng.ROW_ORDER).permutation(num_rows)
    return final if final.dtype == np.int64 else final.astype(np.int64)


def row_layout(num_rows: int, rows_per_batch: int, seed: int, epoch: int) -> np.ndarray:
    """The rows in the plan's order: shuffled per epoch, then batches of ``rows_per_batch``
    rows, each batch's rows in the order they opened (``out[t]``: the row at place ``t``)."""
    final = _row_order(num_rows, seed=seed, epoch=epoch)
    if rows_per_batch > 1:
        full = num_rows // rows_per_batch * rows_per_batch
        final[:full].reshape(-1, rows_per_batch).sort(axis=1)
        final[full:].sort()
    return final


def _row_rank(num_rows: int, rows_per_batch: int, seed: int, epoch: int) -> np.ndarray:
    """Rank of every row in the plan: shuffled per epoch, a batch's rows in the order they opened."""
    final = row_layout(num_rows, rows_per_batch, seed, epoch)
    rank = np.empty(num_rows, dtype=np.int64)
    rank[final] = np.arange(num_rows, dtype=np.int64)
    return rank


def _pack(
    sizes: np.ndarray,
    capacity: int,
    max_per_row: int | None,
    rows_per_batch: int,
    oversize: str,
    seed: int,
    epoch: int,
    limit: int | None = None,
    row_fit: Callable[[np.ndarray], tuple[np.ndarray, int]] | None = None,
    names: np.ndarray | None = None,
) -> PackedPlan | None:
    """Best-fit decreasing over checked sizes (see :func:`plan_packing`).

    ``limit`` (<= capacity, for "error" and "drop") is the longest sequence a row takes;
    ``row_fit`` places the walk's sizes into rows instead of ``best_fit_rows``. ``names``:
    the plan's indices (skipped ones too) written as ``names[i]`` by the counting sort
    (:meth:`Planner.plan_named`), where whole sequences are placed by the fused kernel; None
    is returned where that does not apply.
    """
    n = int(sizes.shape[0])
    item_seq, item_piece, item_size, skipped, report = _items(
        sizes, capacity if limit is None else limit, oversize
    )

    m = int(item_size.shape[0])
    if names is not None and (row_fit is not None or item_piece is not None):
        return None
    if row_fit is None and item_size.ndim == 1:
        keys, span = group_keys(item_size)
        if names is not None and not (keys is item_size or m == 0):
            return None
        if keys is item_size or m == 0:
            if names is not None:  # the kernel writes the names: no item ids to map back
                item_names = names if item_seq is None else names[item_seq]
                item_seq, skipped = None, names[skipped]
            # the sizes are their own sort keys, so run r of length_order holds size r: one
            # kernel makes that order (the whole array as one window: the same counting sort
            # and tie shuffle), best fits it a run at a time (the same rows as best_fit_rows
            # item by item; padless._kernels.windows) and copies the rows out in the plan's
            # order, drawn meanwhile
            placed = K.windows.pack_rows(
                item_size, m, max(m, 1), 0, np.zeros(1, dtype=np.int64), span,
                _rng.key(seed, epoch, _rng.TIE_BREAK), capacity, max_per_row or 0,
                rows_per_batch, partial(_row_order, seed=seed, epoch=epoch),
                None if names is None else item_names,
            )  # fmt: skip
            return _placed_plan(
                placed, item_seq, item_piece, capacity, max_per_row, rows_per_batch, oversize,
                report, n, skipped,
            )  # fmt: skip

    # longest first, ties in random order (sizes too sparse to be their own keys: ranked)
    order, starts = length_order(item_size, seed, epoch)
    walk_sizes = _descending_sizes(item_size, order, starts)
    if row_fit is None:
        row_of, num_rows = K.best_fit_rows(walk_sizes, capacity, max_per_row or 0)
    else:
        row_of, num_rows = row_fit(walk_sizes)
    rank = _row_rank(num_rows, rows_per_batch, seed, epoch)
    items, piece_len, row_bounds = K.scatter_rows(row_of, rank, order[::-1], walk_sizes)
    del order, starts, walk_sizes, row_of
    indices = items if item_seq is None else item_seq[items]
    piece_start = None if item_piece is None else item_piece[items] * capacity  # None: all 0
    return _packed_plan(
        indices, row_bounds, piece_start, piece_len, capacity, max_per_row, rows_per_batch,
        oversize, report, n, skipped,
    )  # fmt: skip


def _placed_plan(
    placed: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int],
    item_seq: np.ndarray | None,
    item_piece: np.ndarray | None,
    capacity: int,
    max_per_row: int | None,
    rows_per_batch: int,
    oversize: str,
    report: dict[str, int],
    n: int,
    skipped: np.ndarray | None,
) -> PackedPlan:
    """The plan of :func:`padless._kernels.windows.pack_rows`' rows (items numbered as
    ``_items`` made them)."""
    items, row_bounds, piece_len, offsets, real = placed
    indices = items if item_seq is None else item_seq[items]
    piece_start = None if item_piece is None else item_piece[items] * capacity  # None: all 0
    return _packed_plan(
        indices, row_bounds, piece_start, piece_len, capacity, max_per_row, rows_per_batch,
        oversize, report, n, skipped, offsets=offsets, real=real,
    )  # fmt: skip


def _packed_plan(
    indices: np.ndarray,
    row_bounds: np.ndarray,
    piece_start: np.ndarray | None,
    piece_len: np.ndarray,
    capacity: int,
    max_per_row: int | None,
    rows_per_batch: int,
    oversize: str,
    report: dict[str, int],
    n: int,
    skipped: np.ndarray | None,
    offsets: np.ndarray | None = None,
    real: int | None = None,
) -> PackedPlan:
    """The plan of rows placed in their final order: batches of ``rows_per_batch`` rows, the
    figures in ``info``. ``offsets`` (the batches' bounds into the entries) and ``real`` (the
    tokens placed) are computed here unless the kernel gave them."""
    num_rows = int(row_bounds.size - 1)
    num_batches = -(-num_rows // rows_per_batch)
    row_offsets = np.minimum(np.arange(num_batches + 1, dtype=np.int64) * rows_per_batch, num_rows)
    piece_stop = piece_len if piece_start is None else piece_start + piece_len
    if offsets is None:
        offsets = row_bounds[row_offsets]
    if real is None:
        real = int(piece_len.sum())
    info: dict[str, Any] = {
        "capacity": capacity,
        "rows": num_rows,
        "rows_per_batch": rows_per_batch,
        "max_per_row": max_per_row,
        "real_tokens": real,
        "efficiency": real / (num_rows * capacity) if num_rows else 1.0,
        "oversize": oversize,
        **report,
    }
    # every array is padless's own, int64 and consistent: no checks (PackedPlan() makes them)
    return PackedPlan._built(
        indices,
        row_bounds,
        row_offsets,
        offsets,
        piece_start,
        piece_stop,
        capacity=capacity,
        num_sequences=n,
        skipped=skipped,
        info=info,
    )


def refuse_grouped_rows(source: Any, consumer: str) -> None:
    """Refuse ``source`` to ``consumer`` when it is a packing sampler given ``groups=``: its
    rows hold whole groups, and a consumer that cuts a batch's items back into rows
    (:func:`next_fit_rows`, by items: ``collate_packed``, ``TokenDataset``, the Grain collate)
    may split a group across rows, or need more rows than the plan's.
    ``padless.torch.collate_groups`` cuts them by groups."""
    spec = getattr(source, "spec", None)
    if getattr(source, "groups", None) is None or not isinstance(spec, Spec):
        return
    form = spec.collate_form()
    if not form.packed:
        return
    raise ValueError(
        f"{consumer} cannot serve a packed sampler with groups= ({spec.describe()}): its rows "
        "hold whole groups, which cutting the batch's items back into rows next fit by items "
        f"may split; use padless.torch.collate_groups({form.capacity}, prompt_key=None) over "
        'samples that carry their group id ({"group": id, "completion_ids": tokens})'
    )


def next_fit_rows(
    sizes: Any, *, capacity: int | tuple[int, ...], max_per_row: int | None = None
) -> np.ndarray:
    """Cut a batch's items into rows "next fit" and return the row number of every item.

    A new row starts when the next item does not fit in the current one, or the current one
    already holds ``max_per_row`` items. On the items of a :class:`PackingSampler` batch (or
    ``plan[b]`` with the piece lengths), with the plan's ``capacity`` and ``max_per_row``, this
    gives back exactly the planned rows: rows are listed in the order they were opened, and best
    fit only opens a row for an item that fits in no open row, so the first item of each row
    never fits in the rows listed before it. ``padless.torch.collate_packed`` relies on this.

    With one capacity per field (``capacity=(C_src, C_tgt)``), ``sizes`` is (items, F) and an
    item fits when it fits in every field (the rows of ``Packing(capacity=(C_src, C_tgt))``:
    ``padless.torch.collate_packed_pairs``).

    Cost: O(items · F) Python steps.

    >>> next_fit_rows([6, 2, 5, 3], capacity=8).tolist()
    [0, 0, 1, 1]
    >>> next_fit_rows([[6, 1], [1, 4], [1, 2]], capacity=(8, 6)).tolist()
    [0, 0, 1]
    """
    if isinstance(capacity, (tuple, list)):
        caps = [positive(f"capacity[{f}]", c) for f, c in enumerate(capacity)]
        cap = positive_or_none("max_per_row", max_per_row) or 0
        return _next_fit_fields(np.asarray(sizes), caps, cap)
    capacity = positive("capacity", capacity)
    cap = positive_or_none("max_per_row", max_per_row) or 0
    values = np.asarray(sizes)
    if values.ndim != 1:
        raise ValueError(f"sizes must be 1-D, got shape {values.shape}")
    out = np.empty(values.shape[0], dtype=np.int64)
    row = used = count = 0
    for i, s in enumerate(values.tolist()):
        if s < 0 or s > capacity:
            raise ValueError(
                f"item {i} has {s} tokens; items must hold between 0 and capacity={capacity}"
            )
        if count and (used + s > capacity or count == cap):
            row += 1
            used = count = 0
        out[i] = row
        used += s
        count += 1
    return out


def _next_fit_fields(values: np.ndarray, caps: list[int], cap: int) -> np.ndarray:
    """:func:`next_fit_rows` of (items, F) sizes, rows of ``caps[f]`` tokens in field f."""
    if values.ndim != 2 or values.shape[1] != len(caps):
        raise ValueError(
            f"sizes must be (items, {len(caps)}): one size per field of capacity={tuple(caps)}, "
            f"got shape {values.shape}"
        )
    if values.size and not np.issubdtype(values.dtype, np.integer):
        raise TypeError(f"sizes must hold integers, got dtype {values.dtype}")
    out = np.empty(values.shape[0], dtype=np.int64)
    row = count = 0
    used = [0] * len(caps)
    for i, item in enumerate(values.tolist()):
        if any(not 0 <= x <= c for x, c in zip(item, caps, strict=True)):
            raise ValueError(
                f"item {i} has {tuple(item)} tokens; items must hold between 0 and "
                f"capacity={tuple(caps)} in each field"
            )
        fits = all(u + x <= c for u, x, c in zip(used, item, caps, strict=True))
        if count and (not fits or count == cap):
            row += 1
            used = [0] * len(caps)
            count = 0
        out[i] = row
        used = [u + x for u, x in zip(used, item, strict=True)]
        count += 1
    return out


# ---------------------------------------------------------------------------------- pieces


def piece_of(code: int, num_sequences: int) -> tuple[int, int]:
    """Return ``(index, piece)`` for a code yielded by :class:`PackingSampler`.

    >>> piece_of(7, 5)
    (2, 1)
    """
    num_sequences = positive("num_sequences", num_sequences)
    if isinstance(code, bool) or not isinstance(code, (int, np.integer)):
        raise TypeError(f"code must be an int, got {type(code).__name__} {code!r}")
    if code < 0:
        raise ValueError(f"code must be a non-negative int, got {code}")
    piece, index = divmod(int(code), num_sequences)
    return index, piece


def _check_piece_source(dataset: Any) -> None:
    """Refuse what cannot be a dataset of token sequences: text, bytes, a flat list of ints."""
    if isinstance(dataset, (str, bytes, bytearray)):
        raise TypeError(
            f"dataset must be indexable by int with token sequences as items, got "
            f"{type(dataset).__name__} {dataset!r:.30} (text is not a dataset)"
        )
    flat = isinstance(dataset, np.ndarray) and dataset.ndim < 2 and dataset.dtype != object
    if isinstance(dataset, (list, tuple)) and dataset:
        flat = isinstance(dataset[0], (int, np.integer))
    if flat:
        raise TypeError(
            "dataset must hold token sequences (lists, arrays, mappings of them), got a flat "
            f"{type(dataset).__name__} of numbers; one sequence is [[...]], not [...]"
        )


class PieceDataset:
    """Serve the pieces a :class:`PackingSampler` yields codes for (split or truncated sequences).

    Item ``code`` is tokens ``[k · capacity, (k + 1) · capacity)`` of ``dataset[i]``, where
    ``(i, k) = piece_of(code, N)``; whole sequences (``k = 0``, no longer than capacity) come back
    unchanged in content. Items that are mappings (``{"input_ids": ...}``) have the values under
    ``keys`` sliced and the rest kept. Slicing is lazy: nothing is read until an item is asked for.

    Args:
        dataset: anything indexable by int whose items are token sequences (lists, numpy arrays,
            tensors) or mappings of them.
        capacity: the packing capacity (with a capacity schedule, its largest value).
        num_sequences: N; by default ``len(dataset)``.
        keys: mapping keys to slice.
        scheduled: serve the codes of a capacity schedule (``Packing(capacity=Schedule)``):
            code ``c + (f - 1) · stride`` (:func:`scheduled_stride`) is the planned code ``c``'s
            sample wrapped as :class:`ScheduledPiece` of capacity ``capacity / f``, for
            ``collate_packed``; plain codes (``f = 1``) come back unwrapped.

    >>> ds = PieceDataset([[1, 2, 3, 4, 5], [6]], capacity=2)
    >>> ds[0], ds[2], ds[4], ds[1]
    ([1, 2], [3, 4], [5], [6])
    """

    def __init__(
        self,
        dataset: Any,
        *,
        capacity: int,
        num_sequences: int | None = None,
        keys: Sequence[str] = ("input_ids",),
        scheduled: bool = False,
    ) -> None:
        _check_piece_source(dataset)
        self.dataset = dataset
        self.capacity = positive("capacity", capacity)
        self.scheduled = check_bool("scheduled", scheduled)
        known = len(dataset) if hasattr(dataset, "__len__") else None
        if num_sequences is None:
            if known is None:
                raise TypeError("num_sequences is required for a dataset without len()")
            if known == 0:
                raise ValueError("dataset must hold at least one sequence, got an empty one")
            num_sequences = known
        self.num_sequences = positive("num_sequences", num_sequences)
        if known is not None and known != self.num_sequences:
            raise ValueError(
                f"num_sequences must equal len(dataset)={known}, got {self.num_sequences}"
            )
        if not hasattr(dataset, "__getitem__"):
            raise TypeError(
                f"dataset must be indexable by int (a list, a map-style Dataset...), got "
                f"{type(dataset).__name__}"
            )
        if (
            isinstance(keys, (str, bytes))
            or not isinstance(keys, Iterable)
            or not all(isinstance(k, str) for k in keys)
        ):
            raise TypeError(f"keys must be a sequence of str, got {keys!r:.60}")
        self.keys = tuple(keys)
        if not self.keys:
            raise ValueError("keys must name at least one mapping key to slice, got none")
        self.stride = scheduled_stride(self.num_sequences, self.capacity) if scheduled else 0

    def __len__(self) -> int:
        return self.num_sequences

    def __getitem__(self, code: int) -> Any:
        index, piece = piece_of(code, self.num_sequences)
        if not self.stride:
            return self._planned(code, index, piece)
        planned, f = untag(int(code), self.stride)
        item = self._planned(code, *piece_of(planned, self.num_sequences))
        if f == 1:
            return item
        if self.capacity % f:
            raise IndexError(
                f"code {code} asks for rows of capacity / {f}, but {f} does not divide "
                f"capacity={self.capacity}; were capacity and num_sequences the sampler's?"
            )
        return ScheduledPiece(item, self.capacity // f, self.capacity)

    def _planned(self, code: int, index: int, piece: int) -> Any:
        """Piece ``piece`` (of capacity tokens) of sequence ``index`` (``code`` for errors)."""
        item = self.dataset[index]
        lo = piece * self.capacity
        hi = lo + self.capacity
        if isinstance(item, Mapping):
            if piece:
                for k in self.keys:
                    if k in item:
                        self._check_piece(code, item[k], lo)
            return {k: (v[lo:hi] if k in self.keys else v) for k, v in item.items()}
        if piece:
            self._check_piece(code, item, lo)
        return item[lo:hi]

    @staticmethod
    def _check_piece(code: int, tokens: Any, lo: int) -> None:
        if len(tokens) <= lo:
            raise IndexError(
                f"code {code} asks for tokens from {lo}, but the sequence holds {len(tokens)}; "
                "were the sampler's lengths computed from this dataset?"
            )


# ---------------------------------------------------------------------------------- sampler


@dataclasses.dataclass(frozen=True, kw_only=True)
class Packing(Spec):
    """Sequence packing: best-fit decreasing into rows of ``capacity`` tokens, batches of rows.

    Settings as :func:`plan_packing`. A sampler over this spec yields each batch's items row
    after row in canonical order (see the module docstring), split pieces as codes
    ``index + piece · N``; ``collate_for(sampler)`` builds the matching
    ``padless.torch.collate_packed`` with this spec's ``capacity`` and ``max_per_row``.

    ``context_parallel=cp`` (default 1: none) plans rows that ``cp`` context-parallel ranks
    share, each taking a zigzag share of every document (Transformer Engine's THD layout,
    ``padless.torch.collate_packed(..., cp_rank=r)``; see docs/context_parallel.md): every
    document is planned at its length rounded up to a multiple of ``2·cp`` (the padding it gets),
    ``capacity`` must be a multiple of ``2·cp`` (so split pieces, cut at ``capacity``, stay
    multiples too), and the plan's pieces, ``real_tokens`` and ``efficiency`` count real tokens
    only, the rounding as padding. With ``balance=True`` a batch costs what its slowest CP rank
    does (:func:`padless.core.cost.context_parallel_costs`). ``max_row_cost`` bounds a whole row (all
    its CP ranks together) at the padded lengths. The stream form refuses ``cp > 1``.

    ``capacity=Schedule`` (a sequence-length warm-up, :class:`padless.Schedule` of the global
    optimizer step; every value divides the largest, ``C_max``): the plan is ``capacity=C_max``'s,
    and a batch of a step at capacity ``C`` delivers each planned row as ``C_max / C`` rows of
    ``C`` (:class:`CapacitySteps`, :func:`layout_row`): documents whole where a row has room,
    cut only where they must be; ``pieces()`` and ``collate_for(sampler)`` serve and lay them out
    (docs/schedules.md). Not with ``context_parallel > 1``, windows, histograms or streams.

    ``capacity=(C_src, C_tgt)``, one capacity per field of (N, 2) lengths (encoder–decoder
    models: sources and targets packed together), packs by vector best fit
    (:class:`PackFieldsPlanner`): a row's pairs sum to at most ``C_src`` source and ``C_tgt``
    target tokens, where an int capacity bounds every field by the pair's longer one. The plan
    is a :class:`padless.core.plan.VectorPackedPlan` (``field_stats`` per field, ``info``'s
    ``field_efficiency`` and ``rows_lower_bound``), its batches collated by
    ``padless.torch.collate_packed_pairs`` (``collate_for(sampler)``). Pairs are placed whole:
    ``oversize`` is ``"error"`` or ``"drop"`` (a pair over its capacity in either field), and
    ``cost``, ``max_row_cost`` and ``context_parallel`` are refused, as are the stream and
    histogram forms (windows plan each window's pairs with this planner).

    >>> Packing(capacity=8, rows_per_batch=2).plan([6, 2, 5, 3, 7, 1]).num_rows
    3
    >>> plan = Packing(capacity=8, context_parallel=2).plan([5, 3, 1])
    >>> plan.num_rows, plan.real_tokens, plan.info["context_parallel"]
    (2, 9, 2)
    >>> pairs = np.array([[6, 2], [2, 6], [5, 5], [3, 3]])
    >>> Packing(capacity=8).plan(pairs).num_rows, Packing(capacity=(8, 8)).plan(pairs).num_rows
    (3, 2)
    """

    capacity: int | tuple[int, int] | Schedule = setting(check_capacities)
    max_per_row: int | None = setting(positive_or_none, default=None)
    rows_per_batch: int = setting(positive, default=1)
    oversize: str = setting(partial(check_oversize, choices=OVERSIZE), default="error")
    cost: Cost | None = setting(check_cost, default=None)
    max_row_cost: float | None = setting(check_max_cost, default=None)
    context_parallel: int = setting(positive, default=1)

    name = "packing"
    state_tag = "PackingSampler"
    packs_rows = True
    # context_parallel came later: at 1 it stays out of as_dict (records made before it hold)
    quiet = {**QUIET_DEFAULTS, "context_parallel": 1}
    about = {
        **Spec.about,
        "capacity": "tokens per packed row",
        "max_per_row": "most sequences per packed row",
        "rows_per_batch": "packed rows per batch",
        "oversize": "a sequence longer than capacity: 'error', 'split', 'truncate' or 'drop'",
        "cost": "a padless.Cost model a row's cost counts in",
        "max_row_cost": "cost per packed row, in a Cost model's units",
        "context_parallel": "packed rows split across that many context-parallel ranks",
    }

    @property
    def row_capacity(self) -> int:
        """Tokens per row of one field: ``capacity`` when it is an int. Rows of a capacity
        per field have none (a ValueError: what asks supports one capacity only)."""
        cap = self.capacity
        if isinstance(cap, tuple):
            raise ValueError(
                f"capacity={list(cap)} gives one capacity per field: this form packs rows of "
                "one field (give an int capacity)"
            )
        if isinstance(cap, Schedule):
            return int(max(change_points(cap)[1]))  # the plan's rows: the largest capacity
        return cap

    @property
    def capacity_schedule(self) -> Schedule | None:
        """The capacity as a schedule of the optimizer step (a sequence-length warm-up), or
        None for a fixed capacity."""
        return self.capacity if isinstance(self.capacity, Schedule) else None

    @property
    def per_field(self) -> bool:
        """Whether ``capacity`` gives one capacity per field (vector packing)."""
        return isinstance(self.capacity, tuple)

    def _settle(self) -> None:
        if self.per_field:
            self._settle_fields()
            return
        if self.capacity_schedule is not None and self.context_parallel != 1:
            raise ValueError(
                f"context_parallel must be 1 with a capacity schedule (capacity="
                f"{self.capacity!r}): a warm-up's rows are cut from the planned rows, which "
                f"context-parallel shares are not; got context_parallel={self.context_parallel}"
            )
        multiple = cp_multiple(self.context_parallel)
        if self.row_capacity % multiple:
            raise ValueError(
                f"capacity must be a multiple of 2 * context_parallel = {multiple} (every "
                f"document is padded to a multiple of it and cut into {multiple} chunks), got "
                f"capacity={self.capacity} with context_parallel={self.context_parallel}"
            )
        cap = self.max_row_cost
        if cap is not None:
            model = model_of(self.cost)
            empty = model.linear * self.row_capacity
            if empty > cap:
                raise ValueError(
                    f"max_row_cost must be at least the cost of a row of padding, "
                    f"cost.linear × capacity = {format_cost(empty)}, got {format_cost(cap)}"
                )
            full = model.packed([self.row_capacity], capacity=self.row_capacity)
            if self.oversize in ("split", "truncate") and full > cap:
                raise ValueError(
                    f"max_row_cost must be at least {format_cost(full)} (a row holding one "
                    f'sequence of capacity={self.capacity} tokens) with oversize="{self.oversize}", '
                    f'whose pieces fill whole rows, got {format_cost(cap)}; use oversize="drop" '
                    'or "error" for a tighter cap'
                )

    def _settle_fields(self) -> None:
        """The vector form (a capacity per field) places whole pairs by tokens: the settings
        that cut, price or pad sequences are refused by name."""
        refused = {
            "oversize": self.oversize in ("split", "truncate"),
            "cost": self.cost is not None,
            "max_row_cost": self.max_row_cost is not None,
            "context_parallel": self.context_parallel != 1,
        }
        why = {
            "oversize": 'a pair is placed whole or not at all: use "error" or "drop"',
            "cost": "cost models price rows of one field",
            "max_row_cost": "cost models price rows of one field",
            "context_parallel": "context-parallel rows are rows of one field",
        }
        for name, bad in refused.items():
            if bad:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is not supported with one capacity per "
                    f"field (capacity={list(cast(tuple, self.capacity))}): {why[name]}"
                )

    def bind(self, lengths: np.ndarray) -> Planner:
        if self.per_field:
            return PackFieldsPlanner(self, lengths)
        return PackPlanner(self, lengths)

    def stream_engine(self) -> R.StreamEngine:
        """The stream form: best-fit rows over each round's buffer; well-filled rows leave.
        Rows of one field only (a capacity per field is a ValueError)."""
        R.check_streamable(self, ("capacity", "max_per_row", "rows_per_batch", "oversize"))
        if self.capacity_schedule is not None:
            raise ValueError(
                f"capacity={self.capacity!r} (a schedule) has no stream form: a stream's rows "
                "are not planned by step; plan with PlanSampler"
            )
        if self.per_field:
            raise ValueError(
                f"capacity={list(cast(tuple, self.capacity))} (one capacity per field) has no "
                "stream form yet: StreamBatcher packs rows of one field; plan with PlanSampler"
            )
        return PackStream(self)

    def window_kernel(self, src: Any) -> WindowKernel | None:
        """The fused windowed packing, when every sequence fits a row of one field as it is."""
        known = ("capacity", "max_per_row", "rows_per_batch", "oversize")
        if self.per_field or type(self) is not Packing or not plain(self, known):
            return None
        return PackWindows(self, src) if src.size_max <= self.row_capacity else None

    def histogram_form(self) -> tuple[str, tuple[int, int, int]] | None:
        """Best-fit rows from the histogram (``best_fit_visits``), for whole sequences: no
        split or truncated pieces, no cost model, no context parallelism, one field."""
        plain_rows = self.oversize in ("error", "drop") and self.cost is None
        if not plain_rows or self.max_row_cost is not None or self.context_parallel != 1:
            return None
        if self.capacity_schedule is not None:  # its batches follow the step: whole plans only
            return None
        if self.per_field:  # rows of one field only
            return None
        return ("rows", (self.row_capacity, self.max_per_row or 0, self.rows_per_batch))

    def collate_form(self) -> CollateForm:
        """Rows of packed pieces: ``collate_packed(capacity, max_per_row=...,
        context_parallel=...)``; with a capacity per field, rows of each field
        (``collate_packed_pairs(capacities, max_per_row=...)``, ``capacity`` 0)."""
        if self.per_field:
            return CollateForm(
                packed=True,
                max_per_row=self.max_per_row,
                capacities=cast(tuple, self.capacity),
            )
        return CollateForm(
            packed=True,
            capacity=self.row_capacity,
            max_per_row=self.max_per_row,
            context_parallel=self.context_parallel,
        )

    def for_windows(self, src: Any) -> Spec:
        if self.capacity_schedule is not None:
            raise ValueError(
                f"window must be None with capacity={self.capacity!r} (a schedule): its batches "
                "follow the optimizer step, which windowed plans do not track"
            )
        return self

    def needs_pieces(self, sizes: np.ndarray) -> str | None:
        if self.capacity_schedule is not None:
            return f"capacity={self.capacity!r:.60} (a warm-up) yields codes tagged per step"
        longest = int(sizes.max()) if sizes.size else 0
        if self.oversize in ("split", "truncate") and longest > self.row_capacity:
            return (
                f'oversize="{self.oversize}" cuts sequences longer than capacity='
                f"{self.row_capacity} (the longest here has {longest} tokens) into pieces"
            )
        return None

    def step_form(self, planner: Planner) -> StepForm | None:
        """With a capacity schedule, :class:`CapacitySteps`: each batch at its step's capacity."""
        if self.capacity_schedule is None:
            return None
        return CapacitySteps(self, planner)

    def pieces(
        self,
        dataset: Any,
        *,
        num_sequences: int | None = None,
        keys: Sequence[str] = ("input_ids",),
    ) -> PieceDataset:
        """Wrap ``dataset`` so the codes a sampler of this spec yields give back the pieces
        (split, truncated, or a capacity schedule's: :class:`PieceDataset`).

        >>> spec = Packing(capacity=Schedule.piecewise([0, 5], [2, 4]))
        >>> spec.pieces([[1, 2, 3], [4]])[1 + scheduled_stride(2, 4)]  # f = 2: rows of 2
        ScheduledPiece([4], capacity=2, planned=4)
        """
        return PieceDataset(
            dataset,
            capacity=self.row_capacity,
            num_sequences=num_sequences,
            keys=keys,
            scheduled=self.capacity_schedule is not None,
        )

    def as_dict(self) -> dict[str, Any]:
        return cost_settings(self, super().as_dict())

    def longest_in_row(self) -> int:
        """The longest sequence a row takes: ``capacity``, or less where ``max_row_cost``
        cannot pay for a row of one longer sequence (with ``context_parallel``, a multiple of
        ``2·cp``: the padded length is what the row holds)."""
        if self.max_row_cost is None:
            return self.row_capacity
        model = model_of(self.cost)
        base, cap = model.linear * self.row_capacity, self.max_row_cost
        lo, hi = 0, self.row_capacity  # fits(lo) holds (a row of padding fits, checked above)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if base + float(model.extra([mid])[0]) > cap:
                hi = mid - 1
            else:
                lo = mid
        multiple = cp_multiple(self.context_parallel)  # documents are planned padded to it
        return lo // multiple * multiple

    def plan_groups(
        self, lengths: Any, groups: Any, *, prefix: Any = None, seed: int = 0, epoch: int = 0
    ) -> PackedPlan:
        """This spec's rows with ``groups`` kept whole (:func:`plan_groups`: ``capacity``,
        ``rows_per_batch`` and ``oversize`` are this spec's). The settings that would cut or
        price a group differently are refused, naming both parts.

        >>> Packing(capacity=8).plan_groups([3, 4, 5, 2], [1, 1, 2, 2]).num_rows
        2
        >>> Packing(capacity=8, oversize="split").plan_groups([3, 4], [1, 1])
        Traceback (most recent call last):
        ValueError: groups= cannot be honoured with oversize='split': ...
        """
        self._refuse_groups()
        return plan_groups(
            lengths, groups, capacity=self.row_capacity, prefix=prefix,
            rows_per_batch=self.rows_per_batch, oversize=self.oversize, seed=seed, epoch=epoch,
        )  # fmt: skip

    def bind_groups(self, lengths: np.ndarray, groups: np.ndarray) -> GroupPackPlanner:
        """Rows of whole groups (:func:`plan_groups` with this spec's capacity,
        ``rows_per_batch`` and ``oversize``), for a sampler given ``groups=``; the settings
        that would cut or price a group differently are refused, naming both parts."""
        self._refuse_groups()
        return GroupPackPlanner(self, lengths, groups)

    def _refuse_groups(self) -> None:
        """A ``ValueError`` for a setting under which groups cannot be kept whole in rows."""
        why = {
            "oversize": (
                self.oversize in ("split", "truncate"),
                'a group is placed whole or not at all; use oversize="error" or "drop"',
            ),
            "capacity": (
                self.per_field or self.capacity_schedule is not None,
                "groups are packed into rows of one fixed capacity; give an int capacity",
            ),
            "max_per_row": (
                self.max_per_row is not None,
                "a row is filled by whole groups, not counted in items; leave max_per_row=None",
            ),
            "cost": (self.cost is not None, "groups are placed by tokens; leave cost=None"),
            "max_row_cost": (
                self.max_row_cost is not None,
                "groups are placed by tokens; leave max_row_cost=None",
            ),
            "context_parallel": (
                self.context_parallel != 1,
                "a shared prompt cannot be cut into context-parallel shares; use 1",
            ),
        }
        for name, (bad, fix) in why.items():
            if bad:
                raise ValueError(
                    f"groups= cannot be honoured with {name}={getattr(self, name)!r}: {fix}"
                )


class PackPlanner(Planner):
    """:class:`Packing` bound to lengths (a sequence over capacity refused once, if asked)."""

    spec: Packing

    def __init__(self, spec: Packing, lengths: np.ndarray) -> None:
        super().__init__(spec, lengths)
        self.capacity = spec.row_capacity
        # the sizes rows are planned at: each rounded up to a multiple of 2·context_parallel
        self.multiple = cp_multiple(spec.context_parallel)
        self.planned = round_up(self.sizes, self.multiple)
        if spec.oversize == "error":
            oversize_error(self.sizes, self.capacity)
        self.limit = spec.longest_in_row()
        if spec.oversize == "error" and self.limit < self.capacity:
            over = np.flatnonzero(self.sizes > self.limit)
            if over.size:
                i = int(over[0])
                row = model_of(spec.cost).packed([int(self.sizes[i])], capacity=self.capacity)
                raise ValueError(
                    f"index {i} has length {int(self.sizes[i])}: a row holding it costs "
                    f"{format_cost(row)}, which exceeds max_row_cost="
                    f"{format_cost(float(spec.max_row_cost or 0.0))} ({over.size} sequences "
                    f'are longer than {self.limit}; pass oversize="drop" to leave them out)'
                )

    def plan(self, seed: int, epoch: int) -> PackedPlan:
        plan = self._plan(seed, epoch)
        return plan if self.multiple == 1 else self._unpadded(plan)

    def _unpadded(self, plan: PackedPlan) -> PackedPlan:
        """A plan of the padded sizes with its pieces cut back to the real tokens: each piece
        ends at its sequence's end at the latest (the rounding is padding), and the figures
        count real tokens (capacity is a multiple of the padding's, so a piece starts at a
        multiple of capacity as before and the same sequences are over capacity)."""
        s = self.spec
        own = np.asarray(self.sizes, dtype=np.int64)
        plan.piece_stop = np.minimum(plan.piece_stop, own[plan.indices])
        real = int(plan.piece_lengths.sum())
        slots = plan.num_rows * plan.capacity
        limit = self.limit if s.max_row_cost is not None and s.oversize == "drop" else self.capacity
        over = own[own > limit]
        lost = {"truncate": int((over - limit).sum()), "drop": int(over.sum())}
        plan.info.update(
            real_tokens=real,
            efficiency=real / slots if slots else 1.0,
            tokens_lost=lost.get(s.oversize, 0),
            context_parallel=s.context_parallel,
        )
        return plan

    def plan_named(self, seed: int, epoch: int, names: np.ndarray) -> PackedPlan | None:
        """The plan with its sequences named (see :meth:`Planner.plan_named`): whole sequences
        (no split pieces) of sizes that are their own sort keys, no row cost cap, no context
        parallelism; None otherwise."""
        if names.shape != self.sizes.shape:
            raise ValueError(f"names must have one entry per sequence, got shape {names.shape}")
        s = self.spec
        if s.max_row_cost is not None or self.multiple != 1:
            return None
        return _pack(
            self.planned, self.capacity, s.max_per_row, s.rows_per_batch, s.oversize, seed,
            epoch, names=names,
        )  # fmt: skip

    def _plan(self, seed: int, epoch: int) -> PackedPlan:
        s = self.spec
        if s.max_row_cost is None:
            plain = _pack(
                self.planned,
                self.capacity,
                s.max_per_row,
                s.rows_per_batch,
                s.oversize,
                seed,
                epoch,
            )
            return cast(PackedPlan, plain)  # without names, always a plan

        model = model_of(s.cost)
        base, cap = model.linear * self.capacity, float(s.max_row_cost)

        def fit(walk_sizes: np.ndarray) -> tuple[np.ndarray, int]:
            extras = model.extra(walk_sizes)
            row_of, rows = KC.best_fit_rows_cost(
                walk_sizes, extras, self.capacity, s.max_per_row or 0, base, cap
            )
            return row_of, int(rows)

        limit = self.limit if s.oversize in ("error", "drop") else None
        capped = _pack(
            self.planned,
            self.capacity,
            s.max_per_row,
            s.rows_per_batch,
            s.oversize,
            seed,
            epoch,
            limit=limit,
            row_fit=fit,
        )
        return cast(PackedPlan, capped)

    def costs(self, plan: BatchPlan) -> np.ndarray:
        """Packed cost of each batch: the real tokens it holds; with a cost model, its rows'
        cost (``Σ cost(lᵢ)`` plus padding at the linear rate, per row). With
        ``context_parallel=cp > 1``, what its slowest CP rank's zigzag share costs
        (:func:`padless.core.cost.context_parallel_costs`: real tokens, or the rank's linear slots,
        per-sequence costs and part of the attention), so a balanced step is balanced over
        every (data-parallel, context-parallel) rank."""
        if not isinstance(plan, PackedPlan):
            raise TypeError(f"packing plans must be PackedPlan, got {type(plan).__name__}")
        if self.spec.context_parallel > 1:
            per_rank = context_parallel_costs(self.spec.cost, plan, self.spec.context_parallel)
            return per_rank.max(axis=1) if per_rank.size else per_rank.reshape(-1)
        if self.spec.cost is not None:
            return packed_batch_costs(self.spec.cost, plan)
        return _batch_tokens(plan)

    def values(self, plan: BatchPlan) -> np.ndarray:
        # split pieces are yielded as codes (index + piece · N); otherwise codes == indices
        if isinstance(plan, PackedPlan) and plan.info.get("split"):
            return plan.codes
        return plan.indices

    def config(self) -> dict[str, Any]:
        return self.spec.as_dict()

    def plan_rest(
        self, done: Any, before: Planner, seed: int, epoch: int
    ) -> tuple[BatchPlan, np.ndarray]:
        """What ``done`` (codes of ``before``: this strategy under the epoch's earlier settings)
        left, packed with these settings: every sequence with nothing yielded, and the pieces
        not yet yielded of a sequence split at ``before``'s capacity (rows of their own kind:
        each piece fits a row). Those pieces need the same capacity and ``oversize="split"``
        (their codes number pieces of that capacity): another is a ``ValueError``."""
        n = int(self.sizes.size)
        if getattr(before.spec, "oversize", "") != "split":  # whole sequences were yielded
            return super().plan_rest(done, before, seed, epoch)
        done = np.asarray(done, dtype=np.int64)
        progress = _split_progress(self.sizes, done, before)
        assert progress is not None
        old_cap, pieces, given, partial = progress
        if not partial.size:
            return plan_items(self, np.flatnonzero(given == 0).astype(np.int64), seed, epoch)
        cap = self.capacity
        if cap != old_cap or self.spec.oversize != "split":
            _refuse_pieces_left(old_cap, self.spec, partial)
        # the partial sequences' pieces not yet yielded, then the untouched sequences whole
        counts = pieces[partial]
        doc = np.repeat(partial, counts)
        number = np.arange(doc.size, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        left = ~np.isin(doc + number * n, done)
        whole = np.flatnonzero(given == 0).astype(np.int64)
        doc = np.concatenate([doc[left], whole])
        start = np.concatenate([number[left] * cap, np.zeros(whole.size, dtype=np.int64)])
        own = np.asarray(self.sizes, dtype=np.int64)[doc] - start
        piece = np.arange(doc.size) < int(left.sum())
        lengths = np.where(piece, np.minimum(own, cap), own)
        return plan_items(self, doc, seed, epoch, lengths=lengths, starts=start, unit=cap)

    def yielded_lengths(self, values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Tokens of the pieces the yielded codes name (``index + piece · N``): the sequence's
        size (max over fields) past the piece's start, at most ``capacity``."""
        n = int(lengths.shape[0])
        index = values % n if n else values
        rows = np.asarray(lengths[index], dtype=np.int64)
        size = rows if rows.ndim == 1 else rows.max(axis=1)
        cap = self.capacity
        piece = values // n if n else values
        return np.minimum(size - piece * cap, cap)


class GroupPackPlanner(GroupedPlanner, PackPlanner):
    """:class:`Packing` bound to lengths and group ids (:meth:`Packing.bind_groups`): every
    plan is :func:`plan_groups`' (whole groups in rows, a group's items next to each other), a
    group over capacity refused once, naming it (``oversize="error"``)."""

    def __init__(self, spec: Packing, lengths: np.ndarray, groups: np.ndarray) -> None:
        Planner.__init__(self, spec, lengths)  # a sequence over capacity: its group's error
        if self.lengths.ndim != 1:
            raise ValueError(
                f"groups= cannot be honoured with (N, F) lengths (shape {self.lengths.shape}) "
                "by Packing: a row of whole groups counts one length per item; give (N,) lengths"
            )
        self.groups = groups
        self.capacity = spec.row_capacity
        self.multiple, self.planned, self.limit = 1, self.sizes, self.capacity
        if spec.oversize == "error" and self.sizes.size:
            ids, _, starts, sizes = group_sizes(self.lengths, groups)
            over = np.flatnonzero(sizes > self.capacity)
            if over.size:
                g = int(over[0])
                raise ValueError(
                    f"group {int(ids[g])} has {int(sizes[g])} tokens "
                    f"({int(starts[g + 1] - starts[g])} items), more than capacity="
                    f"{self.capacity}: a group is never split across rows; raise capacity or "
                    f'pass oversize="drop" ({over.size} groups are over)'
                )

    def plan_named(self, seed: int, epoch: int, names: np.ndarray) -> PackedPlan | None:
        return None  # planned, then gathered

    def plan(self, seed: int, epoch: int) -> PackedPlan:
        s = self.spec
        return plan_groups(
            self.lengths, self.groups, capacity=self.capacity, rows_per_batch=s.rows_per_batch,
            oversize=s.oversize, seed=seed, epoch=epoch,
        )  # fmt: skip


def _batch_tokens(plan: BatchPlan) -> np.ndarray:
    """The real tokens of every batch of a packing plan (its pieces' lengths summed)."""
    if not isinstance(plan, PackedPlan):
        raise TypeError(f"packing plans must be PackedPlan, got {type(plan).__name__}")
    csum = np.zeros(plan.indices.size + 1, dtype=np.int64)
    np.cumsum(plan.piece_lengths, out=csum[1:])
    return csum[plan.offsets[1:]] - csum[plan.offsets[:-1]]


def _split_progress(
    sizes: np.ndarray, done: np.ndarray, before: Planner
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray] | None:
    """Where an epoch that ``before`` (split packing) yielded the codes ``done`` of stands:
    ``(its capacity, pieces of every sequence, pieces yielded, sequences partly yielded)``;
    None when ``before`` yielded whole sequences."""
    if getattr(before.spec, "oversize", "") != "split":
        return None
    n = int(sizes.size)
    old_cap = int(before.spec.row_capacity)  # type: ignore[attr-defined]
    pieces = np.maximum(-(-sizes.astype(np.int64) // old_cap), 1)
    given = np.bincount(done % max(n, 1), minlength=n)
    return old_cap, pieces, given, np.flatnonzero((given > 0) & (given < pieces))


def _refuse_pieces_left(old_cap: int, spec: Packing, partial: np.ndarray) -> None:
    raise ValueError(
        f"Packing changed from capacity={old_cap}, oversize='split' to capacity={spec.capacity}, "
        f"oversize={spec.oversize!r} while {partial.size} sequences (e.g. index "
        f"{int(partial[0])}) had only some of their pieces yielded: the pieces left are "
        "cut at the old capacity; change these settings at an epoch's start"
    )


class PackFieldsPlanner(Planner):
    """:class:`Packing` with one capacity per field, bound to (N, 2) lengths: vector best-fit
    decreasing (a pair over its capacity in some field refused once, or dropped).

    The rule (``padless._kernels.best_fit_pairs``): pairs in decreasing order of their largest
    share of a capacity, ``max(l_src / C_src, l_tgt / C_tgt)`` (compared exactly, in integers),
    ties in a random order drawn from (seed, epoch); each goes to the open row it fits in
    both fields with the least room left in the first field, then in the second, then the row
    opened last; else it opens a row. Rows are shuffled and cut into batches as with one field.
    """

    spec: Packing

    def __init__(self, spec: Packing, lengths: np.ndarray) -> None:
        super().__init__(spec, lengths)
        caps = cast(tuple, spec.capacity)
        self.capacities: tuple[int, int] = caps
        if lengths.ndim != 2 or lengths.shape[1] != 2:
            raise ValueError(
                f"capacity={list(caps)} gives one capacity per field (source, target): lengths "
                f"must be (N, 2), got shape {lengths.shape}"
            )
        self.first = np.ascontiguousarray(lengths[:, 0])
        self.second = np.ascontiguousarray(lengths[:, 1])
        over = (self.first > caps[0]) | (self.second > caps[1])
        self.over = np.flatnonzero(over)
        if spec.oversize == "error" and self.over.size:
            i = int(self.over[0])
            pair = (int(self.first[i]), int(self.second[i]))
            f = 0 if pair[0] > caps[0] else 1
            raise ValueError(
                f"index {i} has lengths {pair}, whose field {f} exceeds capacity={list(caps)} "
                f'({self.over.size} sequences do; pass oversize="drop")'
            )

    def plan(self, seed: int, epoch: int) -> VectorPackedPlan:
        s = self.spec
        c0, c1 = self.capacities
        n = int(self.first.size)
        keep: np.ndarray | None = None
        first, second = self.first, self.second
        if self.over.size:
            keep = np.flatnonzero((first <= c0) & (second <= c1))
            first, second = first[keep], second[keep]
        # longest first by the largest share of a capacity: max(a·C1, b·C0) / gcd, exact
        g = math.gcd(c0, c1)
        key = np.maximum(first.astype(np.int64) * (c1 // g), second.astype(np.int64) * (c0 // g))
        order, _ = length_order(key, seed, epoch)
        del key
        walk = np.ascontiguousarray(order[::-1])
        walk_first, walk_second = first[walk], second[walk]
        row_of, num_rows = K.best_fit_pairs(walk_first, walk_second, c0, c1, s.max_per_row or 0)
        rank = _row_rank(num_rows, s.rows_per_batch, seed, epoch)
        walk_sizes = walk_first.astype(np.int64) + walk_second
        items, piece_len, row_bounds = K.scatter_rows(row_of, rank, walk, walk_sizes)
        del walk, walk_sizes, row_of
        indices = items if keep is None else keep[items]
        num_batches = -(-num_rows // s.rows_per_batch)
        row_offsets = np.minimum(
            np.arange(num_batches + 1, dtype=np.int64) * s.rows_per_batch, num_rows
        )
        real = [int(first.sum(dtype=np.int64)), int(second.sum(dtype=np.int64))]
        dropped = self.over
        report = _oversize_report(int(dropped.size))
        lost = self.first[dropped].sum(dtype=np.int64) + self.second[dropped].sum(dtype=np.int64)
        report.update(dropped=int(dropped.size), tokens_lost=int(lost))
        info: dict[str, Any] = {
            "capacity": [c0, c1],
            "rows": num_rows,
            "rows_per_batch": s.rows_per_batch,
            "max_per_row": s.max_per_row,
            "real_tokens": sum(real),
            "efficiency": sum(real) / (num_rows * (c0 + c1)) if num_rows else 1.0,
            "field_real_tokens": real,
            "field_efficiency": [
                r / (num_rows * c) if num_rows else 1.0 for r, c in zip(real, (c0, c1), strict=True)
            ],
            "rows_lower_bound": max(-(-real[0] // c0), -(-real[1] // c1)),
            "oversize": s.oversize,
            **report,
        }
        return VectorPackedPlan._built_fields(
            indices, row_bounds, row_offsets, row_bounds[row_offsets], piece_len,
            capacities=(c0, c1), num_sequences=n, skipped=dropped if dropped.size else None,
            info=info,
        )  # fmt: skip

    def costs(self, plan: BatchPlan) -> np.ndarray:
        """Cost of each batch: the real tokens it holds, both fields together."""
        return _batch_tokens(plan)

    def plan_rest(
        self, done: Any, before: Planner, seed: int, epoch: int
    ) -> tuple[BatchPlan, np.ndarray]:
        """The pairs ``done`` left, packed with these settings (:meth:`Planner.plan_rest`);
        after split packing, only once no sequence has just some of its pieces yielded (a
        ``ValueError`` otherwise: a pair is placed whole)."""
        if getattr(before.spec, "oversize", "") == "split":
            progress = _split_progress(self.sizes, np.asarray(done, dtype=np.int64), before)
            if progress is not None and progress[3].size:
                _refuse_pieces_left(progress[0], self.spec, progress[3])
        return super().plan_rest(done, before, seed, epoch)


class PackWindows(WindowKernel):
    """Packed rows of a window straight from the (memory-mapped) lengths, in the packing
    planner's row order (rows shuffled, a batch's rows in the order they opened)."""

    spec: Packing

    def plan(self, member: Any, blocks: np.ndarray, sub: int) -> BatchPlan:
        s, src = self.spec, self.src
        capacity, max_per_row, per = s.row_capacity, s.max_per_row, s.rows_per_batch
        lay, span = src.layout, src.size_max + 1
        key = _rng.key(sub, 0, _rng.TIE_BREAK)
        placed = KW.pack_rows(
            src.first_field, lay.n, lay.block, member.rotation, blocks, span, key, capacity,
            max_per_row or 0, per, partial(_row_order, seed=sub, epoch=0),
        )  # fmt: skip
        # in the planner's row order
        return _placed_plan(
            placed, None, None, capacity, max_per_row, per, s.oversize, _oversize_report(0),
            src.n, None,
        )  # fmt: skip

    def count(self, member: Any, blocks: np.ndarray) -> int:
        s, src = self.spec, self.src
        lay, span = src.layout, src.size_max + 1
        rows = KW.pack_window_count(
            src.first_field, lay.n, lay.block, member.rotation, blocks, span,
            s.row_capacity, s.max_per_row or 0,
        )  # fmt: skip
        return int(-(-int(rows) // s.rows_per_batch))


# --------------------------------------------------------------------------- stream form


class PackStream(R.StreamEngine):
    """Packing's stream form (see :mod:`padless.streams`)."""

    sizes_only = True

    spec: Packing

    @property
    def capacity(self) -> int:
        return self.spec.row_capacity

    @property
    def cut_above(self) -> int:  # longer items become pieces
        return self.spec.row_capacity

    @property
    def need(self) -> int:
        """Tokens a row holds before it may leave early (FILL_TARGET of capacity)."""
        return int(np.ceil(R.FILL_TARGET * self.spec.row_capacity))

    def admit(self, sizes: np.ndarray, where: Callable[[int], int]) -> np.ndarray | None:
        cap = self.capacity
        if not sizes.size or int(sizes.max()) <= cap:
            return None
        if self.spec.oversize == "error":
            i = int(np.flatnonzero(sizes > cap)[0])
            raise ValueError(
                f"the item at stream position {where(i)} has length {int(sizes[i])}, which "
                f'exceeds capacity={cap} (pass oversize="split", "truncate" or "drop")'
            )
        if self.spec.oversize == "drop":
            return sizes <= cap
        return None  # split / truncate: expanded into pieces

    def cut(self, size: int) -> list[tuple[int, int, int, int, int]]:
        """``oversize``: "drop" leaves the item out, "truncate" keeps its first ``capacity``
        tokens, "split" cuts it into pieces of ``capacity`` tokens (the last one shorter)."""
        cap, mode = self.capacity, self.spec.oversize
        if mode == "drop":
            return []
        if mode == "truncate":
            return [(0, 1, 0, cap, -1)]
        count = -(-size // cap)
        return [(k, count, k * cap, min(size, (k + 1) * cap), k) for k in range(count)]

    def plan(self, buf: R.Buffer, forced: np.ndarray, final: bool, key: int, room: int) -> R.Round:
        cap = self.capacity
        spec = self.spec
        n = len(buf)
        sizes = buf.sizes
        # items that must leave are placed first (so they share full rows with others and
        # the rows left under-filled hold items that may still wait), then longest first;
        # oldest first among equals
        keys = (cap - sizes) + np.where(forced, 0, cap + 1)
        if 2 * (cap + 1) <= 2 * n + (1 << 16):
            order, _ = K.counting_order(keys, 2 * (cap + 1))
        else:
            order = np.argsort(keys, kind="stable").astype(np.int64)
        walk = np.ascontiguousarray(sizes[order])
        row_of, num_rows = K.best_fit_rows(walk, cap, spec.max_per_row or 0)
        used = np.bincount(row_of, weights=walk, minlength=num_rows).astype(np.int64)
        count = np.bincount(row_of, minlength=num_rows)
        if final:
            must = np.ones(num_rows, np.bool_)
            good = must
        else:
            must = np.bincount(row_of, weights=forced[order], minlength=num_rows) > 0
            good = used >= self.need
            if spec.max_per_row:
                good |= count >= spec.max_per_row
            # under pressure the fullest waiting rows leave too (even in a short batch)
            leave = R.release(count, must | good, 1.0 - used / cap, room)
            must = must | (leave & ~good)
        per = spec.rows_per_batch
        rows = np.flatnonzero(must | good)
        if per > 1 and not final:
            others = int(count.sum() - count[rows].sum())
            rows = _whole_batches(rows, must[rows], used[rows], count[rows], per, room - others)
        picked = rows[R.shuffled(rows.size, key)]
        num_batches = -(-picked.size // per)
        row_offsets = np.minimum(np.arange(num_batches + 1, dtype=np.int64) * per, picked.size)
        if per > 1:  # a batch lists its rows in the order they opened (what collate_packed needs)
            for a, b in zip(row_offsets[:-1].tolist(), row_offsets[1:].tolist(), strict=True):
                picked[a:b].sort()
        rank = np.full(num_rows, picked.size, np.int64)
        rank[picked] = np.arange(picked.size, dtype=np.int64)
        rank[rank == picked.size] = picked.size + np.arange(num_rows - picked.size)
        values, _, bounds = K.scatter_rows(row_of, rank, order, walk)
        placed = int(bounds[picked.size])
        e_order = values[:placed]
        offsets = bounds[: picked.size + 1].copy()
        carry = np.sort(values[placed:])
        real = np.zeros(num_batches, np.int64)
        if picked.size:
            real = np.add.reduceat(used[picked], row_offsets[:-1]).astype(np.int64)
        padded = np.diff(row_offsets) * cap
        return R.Round(e_order, offsets, carry, real, padded, row_offsets)


def _whole_batches(
    rows: np.ndarray, must: np.ndarray, used: np.ndarray, count: np.ndarray, per: int, room: int
) -> np.ndarray:
    """Rows to emit as whole batches of ``per`` rows: every row that must leave, then the
    fullest others; the rows not taken wait (their items are placed again).

    A short batch is made only for rows that must leave and do not fill a whole batch with the
    others, or when the rows not taken would hold more than ``room`` entries.
    """
    num = max(rows.size // per, -(-int(must.sum()) // per))
    rank = np.lexsort((-used, ~must))  # must first, then fullest
    left = np.cumsum(count[rank][::-1])[::-1]  # entries from rank position i on
    take = min(rows.size, num * per)
    while take < rows.size and left[take] > room:
        num += 1
        take = min(rows.size, num * per)
    return np.sort(rows[rank[:take]])


# --- groups that stay together (DPO pairs, GRPO groups), a shared prompt once per row ---------


def group_sizes(
    lengths: Any, groups: Any, prefix: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The tokens each group takes in a row: ``(ids, members, starts, sizes)`` as
    :func:`group_members`, ``sizes[g]`` = the group's lengths summed, plus its prompt once
    when ``prefix`` (the prompt length of every item, equal within a group) is given.

    >>> group_sizes([3, 4, 5], [0, 0, 1], prefix=[10, 10, 2])[3].tolist()
    [17, 7]
    """
    lengths = np.asarray(lengths)
    if lengths.ndim != 1:
        raise ValueError(
            f"lengths must be 1-D with groups (one length per item), got shape {lengths.shape}"
        )
    sizes = as_lengths(lengths)
    n = int(sizes.shape[0])
    gid = item_ids("groups", groups, n)
    ids, members, starts = group_members(gid)
    counts = np.diff(starts)
    total = np.add.reduceat(sizes[members], starts[:-1]) if n else np.zeros(0, np.int64)
    if prefix is not None:
        pre = item_ids("prefix", prefix, n)
        # what the shared-prompt collates lay out (collate_groups, PreferenceCollator): a
        # completion's first token is predicted by its prompt's last one, and bears loss
        if pre.size and int(pre.min()) < 1:
            i = int(np.argmin(pre))
            raise ValueError(
                f"prefix must be >= 1 (a prompt length: a completion's first token is predicted "
                f"by its prompt's last one), got {int(pre[i])} at item {i}"
            )
        if n and int(sizes.min()) < 1:
            i = int(np.argmin(sizes))
            raise ValueError(
                f"lengths must be >= 1 with prefix (a completion bears loss on its tokens), got "
                f"an empty completion at item {i}"
            )
        first = pre[members[starts[:-1]]]
        differs = np.flatnonzero(pre[members] != np.repeat(first, counts))
        if differs.size:
            i = int(members[differs[0]])
            g = int(np.searchsorted(starts, differs[0], side="right") - 1)
            raise ValueError(
                f"prefix must be equal within a group (the group's shared prompt): group "
                f"{int(ids[g])} has prefix {int(first[g])} at item {int(members[starts[g]])} "
                f"and {int(pre[i])} at item {i}"
            )
        total = total + first
    return ids, members, starts, total.astype(np.int64)


def plan_groups(
    lengths: Any,
    groups: Any,
    *,
    capacity: int,
    prefix: Any = None,
    rows_per_batch: int = 1,
    oversize: str = "error",
    search: bool = True,
    seed: int = 0,
    epoch: int = 0,
) -> PackedPlan:
    """Pack items into rows of ``capacity`` tokens so that a group never splits across rows.

    ``groups`` gives each item a group id (a DPO pair: chosen and rejected share one; a GRPO
    group: the G completions of one prompt). Groups are placed whole by best-fit decreasing on
    their sizes (ties in a random order from (seed, epoch)), rows shuffled per epoch and batched
    ``rows_per_batch`` at a time, as :func:`padless.plan_packing` does with sequences. A row
    lists its groups one after the other, largest first, each group's items in increasing index
    order (so ``padless.torch.collate_groups`` finds the groups again as runs of equal ids, and
    cuts a batch's rows back next fit).

    Groups are large items (a GRPO group of 8 is often a quarter of a row), where best fit
    leaves a gap in most rows that no whole group fills. With ``search=True`` (default), where
    best fit's rows exceed the token bound by over 0.5%, rows are also built one at a time by a
    short subset search (:func:`fill_rows`) and kept when fewer; a batch's rows are then
    ordered by their free space, kept only where that order lets next fit find the rows again
    (:func:`_slack_layout` checks; best fit's rows otherwise).

    With ``prefix`` (the prompt length of every item, equal within a group) the items'
    ``lengths`` are their completions' and a group takes ``prefix + Σ lengths`` tokens: its
    prompt once, then its completions (shared-prefix packing). ``plan.info`` reports
    ``groups``, ``logical_tokens`` (every completion with its own prompt copy),
    ``executed_tokens`` (the rows' tokens: prompts once), ``loss_tokens`` (completion tokens
    with a prefix, else each item's length - 1: the tokens a causal LM predicts) and
    ``efficiency`` = executed ÷ (rows × capacity), the rows' fill; ``real_tokens`` (and the
    plan's ``real_tokens`` and ``efficiency`` properties) count the items' own tokens, without
    the prompts. :func:`batch_loss_tokens` gives the count per
    batch.

    Args:
        lengths: (N,) item lengths (completion lengths with ``prefix``: 1 at least).
        groups: (N,) int group id per item (any ints; equal ids form one group).
        capacity: tokens per row.
        prefix: (N,) prompt length per item (1 at least), or None (items are whole
            sequences).
        rows_per_batch: rows per batch.
        oversize: a group over ``capacity``: ``"error"`` (a ValueError naming the group, its
            tokens and the capacity) or ``"drop"`` (its items in ``plan.skipped``).
        search: where best fit needs 0.5% more rows than the tokens do, build rows with
            :func:`fill_rows` and keep them if fewer (above).
        seed, epoch: the tie-break and row-order streams (as ``plan_packing``).

    >>> plan = plan_groups([4, 3, 5, 2, 6, 6], [0, 0, 1, 1, 2, 2], capacity=14)
    >>> sorted(sorted(r.tolist()) for r in plan.rows)
    [[0, 1, 2, 3], [4, 5]]
    >>> plan_groups([2, 3, 2, 3], [0, 0, 1, 1], capacity=16, prefix=[5, 5, 6, 6]).info["executed_tokens"]
    21
    """
    cap = check_capacity("capacity", capacity)
    per = positive("rows_per_batch", rows_per_batch)
    mode = check_choice("oversize", oversize, ("error", "drop"))
    search = check_bool("search", search)
    seed, epoch = check_seed("seed", seed), check_seed("epoch", epoch)
    ids, members, starts, sizes = group_sizes(lengths, groups, prefix)
    own = as_lengths(np.asarray(lengths))
    n = int(own.shape[0])
    counts = np.diff(starts)
    over = np.flatnonzero(sizes > cap)
    skipped = np.zeros(0, dtype=np.int64)
    if over.size and mode == "error":
        g = int(over[0])
        raise ValueError(
            f"group {int(ids[g])} has {int(sizes[g])} tokens ({int(counts[g])} items"
            + (", its prompt once" if prefix is not None else "")
            + f"), more than capacity={cap}: a group is never split across rows; raise "
            f'capacity or pass oversize="drop" ({over.size} groups are over)'
        )
    keep = np.flatnonzero(sizes <= cap)
    if over.size:
        skipped = np.sort(np.concatenate([members[starts[g] : starts[g + 1]] for g in over]))
    ksizes = np.ascontiguousarray(sizes[keep])
    order, run_starts = length_order(ksizes, seed, epoch)
    walk = order[::-1]
    walk_sizes = np.ascontiguousarray(ksizes[walk])
    row_of, num_rows = K.best_fit_rows(walk_sizes, cap, 0)
    final = None
    bound = -(-int(walk_sizes.sum()) // cap)
    if search and num_rows > bound * 1.005 + 1:  # best fit is not near the bound: search
        built, built_rows = fill_rows(walk_sizes, cap)
        if built_rows < num_rows:
            final = _slack_layout(built, walk_sizes, cap, built_rows, per, seed, epoch)
            if final is not None:
                row_of, num_rows = built, built_rows
    if final is None:  # best fit's rows, a batch's rows in the order they opened
        final = _row_rank(int(num_rows), per, seed, epoch)[row_of]
    by_row = np.argsort(final, kind="stable")  # a row's groups in the order they were placed
    placed = keep[walk[by_row]]  # group numbers, row after row
    placed_rows = final[by_row]
    m = counts[placed]
    firsts = np.repeat(starts[placed] - (np.cumsum(m) - m), m)
    indices = members[firsts + np.arange(int(m.sum()), dtype=np.int64)]
    row_bounds = np.zeros(int(num_rows) + 1, dtype=np.int64)
    np.cumsum(np.bincount(placed_rows, weights=m, minlength=int(num_rows)), out=row_bounds[1:])
    executed = int(ksizes.sum())
    plan = _packed_plan(
        indices, row_bounds, None, own[indices], cap, None, per, mode,
        _oversize_report(int(over.size)), n, skipped,
    )  # fmt: skip
    kept_items = own[indices]
    if prefix is None:
        logical, loss = executed, int(kept_items.sum()) - int(indices.size)
    else:
        prompts = sizes[placed] - np.add.reduceat(kept_items, np.cumsum(m) - m) if m.size else m
        logical = int(kept_items.sum()) + int((prompts * m).sum())
        loss = int(kept_items.sum())
    slots = int(num_rows) * cap
    plan.info.update(
        efficiency=executed / slots if slots else 1.0,
        groups=int(keep.size),
        dropped=int(over.size),
        tokens_lost=int(sizes[over].sum()),
        group_policy="row",
        shared_prefix=prefix is not None,
        logical_tokens=logical,
        executed_tokens=executed,
        loss_tokens=loss,
    )
    return plan


def _largest_alive(left: list[int], i: int) -> int:
    """The last alive position <= ``i`` (-1: none), ``left`` a union-find of dead positions
    pointing left (path halving)."""
    while i >= 0 and left[i] != i:
        left[i] = left[left[i]] if left[i] >= 0 else -1
        i = left[i]
    return i


def fill_rows(sizes: np.ndarray, capacity: int, candidates: int = 64) -> tuple[np.ndarray, int]:
    """Rows built one at a time, each as full as a short search makes it; returns
    ``(row_of, num_rows)`` for ``sizes`` (each <= capacity), rows numbered as built.

    A row takes the largest item left, then (while even three of the largest items that fit
    could not fill it) the largest item that fits, then the best completion by at most three
    more items: every single, every pair, and triples whose two smaller members come from
    ``candidates`` sizes spread over the sizes left (the third found by binary search). For
    large items (a GRPO group of a quarter row), where best fit leaves a gap in most rows that
    no whole item fills, this finds rows that add up. Deterministic: ties by position.
    Cost: O(N) per row for the sizes left, O(candidates²) per row for the search.

    >>> fill_rows(np.array([7, 6, 5, 4, 3, 3]), 14)
    (array([0, 1, 1, 0, 1, 0]), 2)
    """
    n = int(sizes.size)
    order = np.argsort(sizes, kind="stable")  # ascending
    vals = sizes[order].astype(np.int64)
    alive = np.ones(n, dtype=bool)
    left = list(range(n))
    row_of = np.full(n, -1, dtype=np.int64)
    rows = 0
    top = n - 1

    def take(pos: int) -> None:
        alive[pos] = False
        left[pos] = pos - 1
        row_of[order[pos]] = rows

    def pick(value: int) -> None:  # the last alive position holding value
        pos = _largest_alive(left, int(np.searchsorted(vals, value, side="right")) - 1)
        take(pos)

    while True:
        top = _largest_alive(left, top)
        if top < 0:
            break
        take(top)
        room = capacity - int(vals[top])
        while True:  # greedy while three items cannot fill the room
            pos = _largest_alive(left, int(np.searchsorted(vals, room, side="right")) - 1)
            if pos < 0 or 3 * int(vals[pos]) >= room:
                break
            take(pos)
            room -= int(vals[pos])
        rest = vals[alive]
        rest = rest[: int(np.searchsorted(rest, room, side="right"))]
        if rest.size:
            best, chosen = int(rest[-1]), [int(rest[-1])]
            starts = np.flatnonzero(np.diff(rest, prepend=-1))
            uniq = rest[starts]
            counts = np.diff(np.append(starts, rest.size))
            if rest.size >= 2:  # pairs: each value with the largest partner that fits
                j = np.searchsorted(uniq, room - uniq, side="right") - 1
                own = np.arange(uniq.size)
                j = np.where((j == own) & (counts < 2), j - 1, j)
                ok = j >= 0
                if ok.any():
                    tot = np.where(ok, uniq + uniq[np.maximum(j, 0)], -1)
                    k = int(np.argmax(tot))
                    if int(tot[k]) > best:
                        best, chosen = int(tot[k]), [int(uniq[k]), int(uniq[j[k]])]
            if rest.size >= 3 and best < room:
                pick_idx = np.linspace(0, uniq.size - 1, min(candidates, uniq.size))
                idx = np.unique(pick_idx.astype(np.int64))
                ia = np.repeat(idx, idx.size)  # every (a, b) pair of candidates
                ib = np.tile(idx, idx.size)
                a, b_ = uniq[ia], uniq[ib]
                keep = (ia <= ib) & (a + b_ <= room) & ((ia != ib) | (counts[ia] >= 2))
                ia, ib, a, b_ = ia[keep], ib[keep], a[keep], b_[keep]
                ci = np.searchsorted(uniq, room - a - b_, side="right") - 1
                for _ in range(3):  # step down while the counts cannot give a third item
                    c0 = np.maximum(ci, 0)
                    need = 1 + (c0 == ia) + (c0 == ib)
                    bad = (ci >= 0) & (counts[c0] < need)
                    if not bad.any():
                        break
                    ci = np.where(bad, ci - 1, ci)
                c0 = np.maximum(ci, 0)
                ok = (ci >= 0) & (counts[c0] >= 1 + (c0 == ia) + (c0 == ib))
                if ok.any():
                    tot = np.where(ok, a + b_ + uniq[c0], -1)
                    k = int(np.argmax(tot))
                    if int(tot[k]) > best:
                        best, chosen = int(tot[k]), [int(a[k]), int(b_[k]), int(uniq[c0[k]])]
            for value in chosen:
                pick(value)
        rows += 1
    return row_of, rows


def _slack_layout(
    row_of: np.ndarray,
    sizes: np.ndarray,
    capacity: int,
    num_rows: int,
    per: int,
    seed: int,
    epoch: int,
) -> np.ndarray | None:
    """The final place of every item's row: rows shuffled per epoch, batches of ``per`` rows,
    a batch's rows by increasing free space; None where next fit would not find those rows
    again (a row's largest item, listed first, fitting in the free space of the row before it).
    """  # fmt: skip
    free = capacity - np.bincount(row_of, weights=sizes, minlength=num_rows).astype(np.int64)
    largest = np.zeros(num_rows, dtype=np.int64)
    np.maximum.at(largest, row_of, sizes)
    order = _row_order(num_rows, seed=seed, epoch=epoch)
    for lo in range(0, num_rows, per):
        chunk = order[lo : lo + per]
        chunk = chunk[np.lexsort((chunk, free[chunk]))]
        if np.any(largest[chunk[1:]] <= free[chunk[:-1]]):
            return None
        order[lo : lo + per] = chunk
    rank = np.empty(num_rows, dtype=np.int64)
    rank[order] = np.arange(num_rows, dtype=np.int64)
    return rank[row_of]


def batch_loss_tokens(plan: PackedPlan, lengths: Any, *, prefix: bool = False) -> np.ndarray:
    """The loss-bearing tokens of every batch of a :func:`plan_groups` plan (int64, one per
    batch): its items' lengths summed (completions, ``prefix=True``), or each item's length
    - 1 (whole sequences: a causal LM predicts all tokens but the first). The sum over the
    batches of an optimizer step (all ranks, all accumulation micro-batches) is the step's
    normaliser, known to every rank from the plan alone: no all-reduce.

    >>> plan = plan_groups([4, 3, 6, 2], [0, 0, 1, 1], capacity=8)
    >>> sorted(batch_loss_tokens(plan, [4, 3, 6, 2]).tolist())
    [5, 6]
    """
    own = as_lengths(np.asarray(lengths))
    if own.ndim != 1 or own.shape[0] != plan.num_sequences:
        raise ValueError(
            f"lengths must be the plan's {plan.num_sequences} item lengths, got shape {own.shape}"
        )
    per_item = own[plan.indices] - (0 if check_bool("prefix", prefix) else 1)
    out = np.zeros(len(plan), dtype=np.int64)
    counts = np.diff(plan.offsets)
    nonempty = np.flatnonzero(counts)
    if per_item.size:
        out[nonempty] = np.add.reduceat(per_item, plan.offsets[:-1][nonempty])
    return out
