"""Packed rows of a Ray dataset: best fit within windows of consecutive documents.

:func:`pack_table` packs one window (an Arrow table) into rows of tokens back to back with
``cu_seqlens``, ``position_ids`` and ``seq_idx``; :func:`pack` runs it on the cluster over windows
of ``window`` rows in the dataset's order, and packs the entries of the rows windows fill poorly
again in blocks spanning many windows (carry-over). :func:`row_columns` is the compiled gather that builds the rows'
columns, :func:`row_columns_reference` its numpy twin.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray
import ray.data

from .. import _core
from ..core import _rng
from ..core._check import check_bool, check_seed, positive
from ..planners.spec import Spec
from ..planners.windows import shift_index
from ._columns import (
    as_lists,
    check_dataset,
    column_kind,
    ordered,
    pick_column,
    schema_of,
    token_type_error,
)

if TYPE_CHECKING:
    from ..core.plan import PackedPlan


def _list_parts(col: Any, where: str, first_row: int = 0) -> tuple[np.ndarray, Any]:
    """(offsets into values, values) of a list column, offsets starting at 0.

    ``first_row`` is the dataset row of the column's row 0 (what messages count from).
    """
    col = as_lists(col)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    null = f"{where}: row {{}} is null; every document needs its token list (drop such rows first)"
    if pa.types.is_null(col.type) and len(col):
        raise ValueError(null.format(first_row))
    if pa.types.is_fixed_size_list(col.type):
        col = col.cast(pa.list_(col.type.value_type))
    if column_kind(col.type) != "list":
        raise TypeError(f"{where} must hold lists of token ids, got type {col.type}")
    if col.null_count:
        first = int(pc.index(pc.is_null(col), True).as_py())
        raise ValueError(null.format(first_row + first))
    off = np.asarray(col.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    base, end = int(off[0]), int(off[-1])
    values = col.values.slice(base, end - base)
    if values.null_count:
        raise ValueError(f"{where}: a token list holds a null token id")
    return off - base, values


def _packing_spec(spec: Any) -> Spec:
    """``spec``, refused unless its batches are packed rows (``Spec.packs_rows``)."""
    if not (isinstance(spec, Spec) and spec.packs_rows):
        raise TypeError(f"spec must be a padless.Packing(capacity=...), got {type(spec).__name__}")
    capacities = spec.collate_form().capacities
    if capacities is not None:
        raise ValueError(
            f"spec must pack rows of one field: padless.ray.pack packs one token column, got "
            f"capacity={capacities} (one capacity per field)"
        )
    return spec


def _window_seed(seed: int, epoch: int, sizes: np.ndarray, part: int = 0) -> int:
    """The seed a set of documents is packed with: from (seed, epoch) and its lengths.

    ``part`` 0 is a window (the key :func:`pack_table` has always used), 1 a block's carried
    entries (:func:`pack`), so a block never shares a window's stream by having its lengths.
    """
    digest = hashlib.blake2b(np.ascontiguousarray(sizes, np.int64).tobytes(), digest_size=8)
    parent = _rng.seed_sequence(seed, epoch, _rng.RAY_PACK)
    key = int.from_bytes(digest.digest(), "little")
    child = np.random.SeedSequence(parent.entropy, spawn_key=(key,) if part == 0 else (key, part))
    return int(child.generate_state(1, np.uint64)[0])


CARRY_SLACK = 1024
"""A window's row is carried (see :func:`pack`) when more than ``capacity // CARRY_SLACK`` of
its token slots are empty (more than 2 at capacity 2048): a kept row is at least 99.9 % full."""

BLOCK_TOKENS = 1 << 25
"""Items per carry-over block (see :func:`pack`): ``BLOCK_TOKENS // capacity`` (16,384 at
capacity 2048), so a block holds at most 2**25 tokens (128 MiB of int32 ids)."""

CARRIED = "_padless_carried"
"""The column that marks a carried entry among a window's items (between :func:`pack`'s steps)."""


def pack_table(table: Any, spec: Spec, *, column: str, seed: int = 0, epoch: int = 0) -> pa.Table:
    """Pack one window of documents (an Arrow table) into rows: what :func:`pack` does per window.

    The window's documents are planned by ``spec.plan(lengths, seed=s)`` (best-fit decreasing,
    :class:`padless.Packing`), ``s`` drawn from ``(seed, epoch)`` and the window's lengths, and
    each planned row becomes one output row, rows in the plan's order:

    - ``column``: the row's tokens back to back (no padding), the input's value type;
    - ``cu_seqlens``: int32 bounds of the row's documents (or pieces) in those tokens, from 0;
    - ``position_ids``: int32, restarting at 0 at every document;
    - ``seq_idx``: int32, the document's number within the row, per token.

    These are the values ``padless.torch.collate_packed(capacity, flatten=True)`` gives for the
    row's documents (there as int64 tensors, here int32). With ``oversize="split"`` a document
    longer than ``capacity`` is cut into pieces of ``capacity`` tokens, each its own segment, so
    every token of the window appears exactly once.

    Cost: the plan (O(documents + capacity)) and a few vectorised gathers over the tokens.

    >>> import padless
    >>> docs = pa.table({"ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9, 10, 11], [12]]})
    >>> rows = pack_table(docs, padless.Packing(capacity=6), column="ids").to_pydict()
    >>> sorted(rows["ids"])
    [[1, 2, 3, 4, 5, 12], [6, 7, 8, 9, 10, 11]]
    >>> i = rows["ids"].index([1, 2, 3, 4, 5, 12])
    >>> rows["cu_seqlens"][i], rows["position_ids"][i], rows["seq_idx"][i]
    ([0, 3, 5, 6], [0, 1, 2, 0, 1, 0], [0, 0, 0, 1, 1, 2])
    """
    spec = _packing_spec(spec)
    if not isinstance(column, str):
        raise TypeError(f"column must be a str, got {type(column).__name__} {column!r}")
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise TypeError(f"table must be a pyarrow.Table, got {type(table).__name__}")
    if column not in table.column_names:
        raise ValueError(f"column must be one of {table.column_names}, got {column!r}")
    seed = check_seed("seed", seed)
    epoch = check_seed("epoch", epoch)
    return _pack_window(table, spec, column, seed, epoch, 0)


def _pack_window(
    table: pa.Table, spec: Spec, column: str, seed: int, epoch: int, first_row: int
) -> pa.Table:
    """:func:`pack_table` of checked arguments; messages count rows from ``first_row``."""
    window_plan, off, values = _plan_window(table, spec, column, seed, epoch, first_row)
    return _rows(window_plan, off, values, column)


def _plan_window(
    table: pa.Table, spec: Spec, column: str, seed: int, epoch: int, first_row: int, part: int = 0
) -> tuple[PackedPlan, np.ndarray, Any]:
    """(plan, offsets, values) of a window's documents (``part``: see :func:`_window_seed`)."""
    off, values = _list_parts(table.column(column), f"column {column!r}", first_row)
    sizes = np.diff(off)
    try:
        window_plan = spec.plan(sizes, seed=_window_seed(seed, epoch, sizes, part), epoch=0)
    except ValueError as exc:  # e.g. "index 1 has length 5, which exceeds capacity=4"
        raise ValueError(shift_index(str(exc), first_row)) from None
    # a packs_rows spec plans a PackedPlan (rows of pieces)
    return cast("PackedPlan", window_plan), off, values


def _block_size(capacity: int) -> int:
    """Items per carry-over block: ``BLOCK_TOKENS // capacity`` (at least 1)."""
    return max(1, BLOCK_TOKENS // max(1, capacity))


def _carried(p: PackedPlan) -> np.ndarray:
    """Which rows of a window's plan :func:`pack` carries: those with more than
    ``capacity // CARRY_SLACK`` empty slots (a bool per row)."""
    ends = np.zeros(p.piece_stop.size + 1, np.int64)
    np.cumsum(p.piece_stop - p.piece_start, out=ends[1:])
    bounds = p.rows.offsets
    fill = ends[bounds[1:]] - ends[bounds[:-1]]
    return np.asarray(p.capacity - fill > p.capacity // CARRY_SLACK)


def row_columns(
    values: np.ndarray, src: np.ndarray, seg: np.ndarray, bounds: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Packed rows' columns, flat: (tokens, position_ids, seq_idx, cu_seqlens).

    Entry ``e`` is ``values[src[e] : src[e] + seg[e]]``; row ``r`` holds entries
    ``bounds[r]:bounds[r + 1]``, back to back. ``cu_seqlens`` holds ``k + 1`` values per row of
    ``k`` entries (from 0). One pass over the output tokens; :func:`row_columns_reference` is
    the same in numpy.
    """
    return _core.row_columns(values, src, seg, bounds)


def row_columns_reference(
    values: np.ndarray, src: np.ndarray, seg: np.ndarray, bounds: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`row_columns` in vectorised numpy (repeat and cumulative sums)."""
    n, num_rows = src.size, bounds.size - 1
    ends = np.cumsum(seg)
    starts = ends - seg  # entry start in the output tokens
    total = int(ends[-1]) if n else 0
    gather = np.repeat(src - starts, seg) + np.arange(total, dtype=np.int64)
    tok_off = np.concatenate([[0], ends])[bounds].astype(np.int64)
    row_of = np.repeat(np.arange(num_rows, dtype=np.int64), np.diff(bounds))
    cu = np.zeros(n + num_rows, np.int32)
    cu[np.arange(n) + row_of + 1] = ends - tok_off[row_of]
    position = np.arange(total, dtype=np.int64) - np.repeat(starts, seg)
    seq_idx = np.repeat(np.arange(n, dtype=np.int64) - bounds[row_of], seg)
    return values[gather], position.astype(np.int32), seq_idx.astype(np.int32), cu


def _rows(p: PackedPlan, off: np.ndarray, values: Any, column: str) -> pa.Table:
    """The packed rows of a window's plan, as an Arrow table (see :func:`pack_table`)."""
    src = off[p.indices] + p.piece_start  # where every entry (document or piece) starts
    return _table(values, src, p.piece_stop - p.piece_start, p.rows.offsets, column)


def _table(
    values: Any,
    src: np.ndarray,
    seg: np.ndarray,
    bounds: np.ndarray,
    column: str,
    ids: bool = True,
) -> pa.Table:
    """Rows of entries as an Arrow table: entry ``e`` is ``values[src[e] : src[e] + seg[e]]``,
    row ``r`` entries ``bounds[r]:bounds[r + 1]``; columns ``column`` and ``cu_seqlens``, and
    (``ids``) ``position_ids`` and ``seq_idx``."""
    total = int(seg.sum())
    if total >= 1 << 31:
        raise ValueError(
            f"a window holds {total} tokens, more than a list column of int32 offsets takes; "
            "use a smaller window"
        )
    if pa.types.is_null(values.type) and len(values) == 0:  # every document empty
        values = pa.array([], pa.int64())
    if not pa.types.is_integer(values.type):
        raise TypeError(f"token ids must be integers, got lists of {values.type}")
    flat = values.to_numpy(zero_copy_only=False)
    tokens, position, seq_idx, cu = row_columns(flat, src, seg, bounds)
    ends = np.zeros(seg.size + 1, np.int64)
    np.cumsum(seg, out=ends[1:])
    offsets = pa.array(ends[bounds].astype(np.int32))
    cu_off = pa.array((bounds + np.arange(bounds.size)).astype(np.int32))
    out = {
        column: pa.ListArray.from_arrays(offsets, pa.array(tokens, type=values.type)),
        "cu_seqlens": pa.ListArray.from_arrays(cu_off, pa.array(cu)),
    }
    if ids:
        out["position_ids"] = pa.ListArray.from_arrays(offsets, pa.array(position))
        out["seq_idx"] = pa.ListArray.from_arrays(offsets, pa.array(seq_idx))
    return pa.table(out)


def _window_items(p: PackedPlan, off: np.ndarray, values: Any, column: str) -> pa.Table:
    """A window's items for carry-over: its kept rows (tokens and ``cu_seqlens``), in the
    plan's order, then the entries of its carried rows, one per item (rows in the plan's order,
    entries in each row's order); column :data:`CARRIED` tells which."""
    carried = _carried(p)
    seg = p.piece_stop - p.piece_start
    src = off[p.indices] + p.piece_start
    counts = np.diff(p.rows.offsets)
    moved = np.repeat(carried, counts)  # per entry: its row is carried
    kept_bounds = np.zeros(int((~carried).sum()) + 1, np.int64)
    np.cumsum(counts[~carried], out=kept_bounds[1:])
    n_moved = int(moved.sum())
    bounds = np.concatenate([kept_bounds, kept_bounds[-1] + np.arange(1, n_moved + 1)])
    order = np.concatenate([np.flatnonzero(~moved), np.flatnonzero(moved)])
    items = _table(values, src[order], seg[order], bounds, column, ids=False)
    flags = np.zeros(items.num_rows, bool)
    flags[items.num_rows - n_moved :] = True
    return items.append_column(CARRIED, pa.array(flags))


def _pack_block(batch: pa.Table, spec: Spec, column: str, seed: int, epoch: int) -> pa.Table:
    """One block of items (runs on the cluster): its kept rows as they are, then its carried
    entries packed together by ``spec``; the rows with all four columns."""
    if isinstance(batch, pa.RecordBatch):
        batch = pa.Table.from_batches([batch])
    off, values = _list_parts(batch.column(column), f"column {column!r}")
    cu_off, cu_values = _list_parts(batch.column("cu_seqlens"), "column 'cu_seqlens'")
    cu = np.asarray(cu_values.to_numpy(zero_copy_only=False), np.int64)
    carried = np.asarray(batch.column(CARRIED).to_numpy(zero_copy_only=False), bool)
    # every item's entries: its cu_seqlens but the last value
    first = np.ones(cu.size, bool)
    first[cu_off[1:] - 1] = False
    at = np.flatnonzero(first)
    item = np.repeat(np.arange(batch.num_rows, dtype=np.int64), np.diff(cu_off))[at]
    seg = cu[at + 1] - cu[at]
    src = off[item] + cu[at]
    kept = ~carried[item]
    counts = np.diff(cu_off) - 1
    bounds = np.zeros(int((~carried).sum()) + 1, np.int64)
    np.cumsum(counts[~carried], out=bounds[1:])
    c_src, c_seg = src[~kept], seg[~kept]  # one entry per carried item
    if c_seg.size:
        group = cast(
            "PackedPlan",
            spec.plan(c_seg, seed=_window_seed(seed, epoch, c_seg, part=1), epoch=0),
        )
        src = np.concatenate([src[kept], c_src[group.indices] + group.piece_start])
        seg = np.concatenate([seg[kept], group.piece_stop - group.piece_start])
        bounds = np.concatenate([bounds, bounds[-1] + group.rows.offsets[1:]])
    return _table(values, src, seg, bounds, column)


def _window_start(window: int) -> int | None:
    """The dataset row of this task's first row, when Ray's task context tells it.

    :func:`pack` feeds one block of exactly ``window`` rows (the last: the rest) to each task of
    its ``map_batches``, in the dataset's order, so task ``t`` packs window ``t``, rows
    ``t·window …``. A task given more than one batch cannot tell where its later batches start
    (None then, as without a task context: messages count rows within the window).
    """
    try:
        from ray.data._internal.execution.interfaces.task_context import TaskContext
    except ImportError:  # pragma: no cover - a Ray without it
        return None
    ctx = TaskContext.get_current()
    task = getattr(ctx, "task_idx", None)
    scratch = getattr(ctx, "kwargs", None)
    if not isinstance(task, int) or not isinstance(scratch, dict):
        return None
    seen = scratch.get("padless_pack_batches", 0)  # the task's own scratch space
    scratch["padless_pack_batches"] = seen + 1
    return task * window if seen == 0 else None


def _pack_batch(
    batch: pa.Table,
    spec: Spec,
    column: str,
    seed: int,
    epoch: int,
    window: int,
    part: str = "all",
) -> pa.Table:
    """One window's output (runs on the cluster): its packed rows (``part="all"``), or its
    items for carry-over (``"items"``: see :func:`_window_items`)."""
    if isinstance(batch, pa.RecordBatch):
        batch = pa.Table.from_batches([batch])
    start = _window_start(window)
    try:
        p, off, values = _plan_window(batch, spec, column, seed, epoch, start or 0)
        if part == "all":
            return _rows(p, off, values, column)
        return _window_items(p, off, values, column)
    except ValueError as exc:
        where = (
            "rows numbered in the dataset's order"
            if start is not None
            else f"rows numbered within a window of {window} rows: Ray did not say which"
        )
        raise ValueError(f"padless.ray.pack: {exc} ({where})") from None


def pack(
    ds: ray.data.Dataset,
    spec: Spec,
    *,
    column: str,
    window: int = 10_000,
    seed: int = 0,
    epoch: int = 0,
    carry: bool = True,
) -> ray.data.Dataset:
    """A dataset of packed rows: best fit within windows of ``window`` consecutive documents,
    the rows a window fills poorly packed again together.

    The documents (``column``: lists of token ids) are cut into windows of exactly ``window``
    rows in the dataset's order (the last window holds the rest), whatever Ray's block sizes:
    ``repartition(target_num_rows_per_block=window, strict=True)`` on a copy of the dataset with
    ``preserve_order=True``. Each window is planned by :func:`pack_table` on the cluster: rows of
    at most ``spec.capacity`` tokens holding the tokens back to back, with ``cu_seqlens``,
    ``position_ids`` and ``seq_idx`` (the values ``padless.torch.collate_packed`` gives).

    **Carry-over** (``carry=True``, the default). A window packed on its own ends in a few
    part-full rows, and a small window has few short documents to close its rows' last gaps. A
    row of a window's plan with more than ``capacity // 1024`` empty slots (more than 2 at
    capacity 2048) is *carried*: its entries (documents, or pieces of a split one) leave the
    window's rows. Each window hands on its *items*: its kept rows (each at least 99.9 % full)
    in its plan's order, then its carried entries (rows in plan order, entries in row order).
    The items of all windows, in the windows' order, are cut into blocks of exactly
    ``2**25 // capacity`` items (16,384 at capacity 2048; the last block: the rest) by a strict
    repartition, and each block yields its kept rows as they are, then its carried entries
    packed together by ``spec`` (best fit decreasing, seeded by ``(seed, epoch)`` and their
    lengths, in a stream apart from the windows'). So a carried entry is packed with those of
    the neighbouring windows in its block, every entry lands in exactly one row, and part-full
    rows are left at the ends of blocks (a block spans many windows) instead of windows. The
    rule reads a window's own plan alone and blocks are cut by counting items, so the rows do
    not depend on Ray's block sizes or on which task ran first. Bounds: a window carries fewer
    than ``capacity`` tokens per carried row; a block holds at most ``2**25`` tokens (128 MiB of
    int32 ids). On long-tailed corpora at capacity 2048 the windows carry 2-6 % of the tokens at
    windows of 10,000 documents and 13-20 % at 1,000.

    Why the carried entries of a block, not a carry into the next window: a window that packs
    the previous window's carry with its own documents is again a set packed on its own, with
    its own part-full tail, unless each window waits for the previous one's carry (one window
    at a time, no parallelism). Packing the carried entries of many windows together pays for
    one tail per block, and every task still works on its own data.

    Rows come in this order: block after block, each block's kept rows (windows in the
    dataset's order, each window's rows in its plan's shuffled order), then the block's rows of
    carried entries in their plan's order. ``carry=False``: each window's rows as they are,
    windows in the dataset's order (:func:`pack_table` per window).

    Deterministic for ``(seed, epoch)`` and the dataset's order: a window's randomness (the
    tie-break among equal lengths and its row order) comes from ``(seed, epoch)`` and its
    lengths, a block's repack from ``(seed, epoch)`` and its carried entries' lengths. With
    ``oversize="split"`` no token is lost or repeated; ``"drop"`` and ``"truncate"`` lose what
    the spec says; ``"error"`` (the default) fails the job on a document longer than
    ``capacity``. Such a document, or a null one, is named by its row in the dataset's order; a
    column whose schema Ray knows without running anything (Parquet, ``from_items``) is checked
    up front: lists of anything but integers are a ``TypeError``.

    Args:
        ds: the documents; other columns are left out of the packed rows.
        spec: ``padless.Packing(capacity=..., max_per_row=..., oversize=...)``.
        column: the token-list column.
        window: documents per window; more fill rows better, at O(window) memory per task.
        seed, epoch: the windows' and blocks' randomness.
        carry: repack the under-filled rows' entries together (True), or leave every window's
            rows as they are (False).

    Returns:
        A lazy ``ray.data.Dataset`` (nothing runs until it is consumed) whose rows are packed
        rows with columns ``column``, ``cu_seqlens``, ``position_ids``, ``seq_idx``; consume it
        with ``preserve_order`` kept (e.g. Ray Train's ``DataConfig(execution_options=...)``
        with ``preserve_order=True``) to see the rows in the same order every time.

    Cost: one pass over the tokens on the cluster (a gather per window), plus Ray's
    re-bundling of blocks into windows; with ``carry``, a second re-bundling of the windows'
    items (tokens and ``cu_seqlens``) into blocks and a gather per block that builds the rows'
    four columns. Memory per task: O(window) documents, or one block.

    >>> import padless
    >>> docs = ray.data.from_items([{"ids": list(range(k, k + k % 5))} for k in range(20)])
    >>> rows = pack(docs, padless.Packing(capacity=8), column="ids", window=10).take_all()
    >>> sorted(t for r in rows for t in r["ids"]) == sorted(t for k in range(20) for t in range(k, k + k % 5))
    True
    """
    ds = check_dataset(ds)
    spec = _packing_spec(spec)
    window = positive("window", window)
    seed = check_seed("seed", seed)
    epoch = check_seed("epoch", epoch)
    carry = check_bool("carry", carry)
    names, types = schema_of(ds)
    column = pick_column(names, column)
    if column in names:
        kind = column_kind(types[names.index(column)])
        if kind not in (None, "list", "null"):
            raise TypeError(
                f"column {column!r} must hold lists of token ids, got type "
                f"{types[names.index(column)]} (measure text with padless.ray.lengths, or "
                "tokenize first)"
            )
        why = token_type_error(column, types[names.index(column)]) if kind == "list" else None
        if why is not None:
            raise TypeError(why)
    work = ordered(ds).select_columns([column])
    windows = work.repartition(target_num_rows_per_block=window, strict=True)
    fn: Any = _pack_batch  # a function of (table, **fn_kwargs)
    args = {"spec": spec, "column": column, "seed": seed, "epoch": epoch, "window": window}
    options: dict[str, Any] = {"batch_format": "pyarrow", "zero_copy_batch": True}
    if not carry:
        return windows.map_batches(fn, fn_kwargs=args, batch_size=window, **options)
    # batch_size=None: each window (one block) is a batch, and Ray does not fuse this map with
    # the strict repartition below (Ray 2.60 fuses a map whose batch_size is a multiple of the
    # repartition's rows into it, cutting each map's output alone: blocks no longer exact)
    items = windows.map_batches(fn, fn_kwargs={**args, "part": "items"}, batch_size=None, **options)
    block = _block_size(spec.collate_form().capacity)
    block_fn: Any = _pack_block
    return items.repartition(target_num_rows_per_block=block, strict=True).map_batches(
        block_fn,
        fn_kwargs={"spec": spec, "column": column, "seed": seed, "epoch": epoch},
        batch_size=block,
        **options,
    )
