"""Packed rows of a Ray dataset: best fit within windows of consecutive documents.

:func:`pack_table` packs one window (an Arrow table) into rows of tokens back to back with
``cu_seqlens``, ``position_ids`` and ``seq_idx``; :func:`pack` runs it on the cluster over windows
of ``window`` rows in the dataset's order. :func:`row_columns` is the compiled gather that builds
the rows' columns, :func:`row_columns_reference` its numpy twin.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray
import ray.data

from .. import _core, _rng
from .._check import check_seed, positive
from ..planners.spec import Spec
from ..windows import shift_index
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
    from ..plan import PackedPlan


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
    return spec


def _window_seed(seed: int, epoch: int, sizes: np.ndarray) -> int:
    """The seed a window of documents is packed with: from (seed, epoch) and its lengths."""
    digest = hashlib.blake2b(np.ascontiguousarray(sizes, np.int64).tobytes(), digest_size=8)
    parent = _rng.seed_sequence(seed, epoch, _rng.RAY_PACK)
    child = np.random.SeedSequence(
        parent.entropy, spawn_key=(int.from_bytes(digest.digest(), "little"),)
    )
    return int(child.generate_state(1, np.uint64)[0])


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
    off, values = _list_parts(table.column(column), f"column {column!r}", first_row)
    sizes = np.diff(off)
    try:
        window_plan = spec.plan(sizes, seed=_window_seed(seed, epoch, sizes), epoch=0)
    except ValueError as exc:  # e.g. "index 1 has length 5, which exceeds capacity=4"
        raise ValueError(shift_index(str(exc), first_row)) from None
    # a packs_rows spec plans a PackedPlan (rows of pieces)
    return _rows(cast("PackedPlan", window_plan), off, values, column)


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
    seg = p.piece_stop - p.piece_start  # tokens of every entry (document or piece)
    bounds = p.rows.offsets  # entries of every row
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
    src = off[p.indices] + p.piece_start
    tokens, position, seq_idx, cu = row_columns(flat, src, seg, bounds)
    ends = np.zeros(seg.size + 1, np.int64)
    np.cumsum(seg, out=ends[1:])
    offsets = pa.array(ends[bounds].astype(np.int32))
    cu_off = pa.array((bounds + np.arange(bounds.size)).astype(np.int32))
    return pa.table(
        {
            column: pa.ListArray.from_arrays(offsets, pa.array(tokens, type=values.type)),
            "cu_seqlens": pa.ListArray.from_arrays(cu_off, pa.array(cu)),
            "position_ids": pa.ListArray.from_arrays(offsets, pa.array(position)),
            "seq_idx": pa.ListArray.from_arrays(offsets, pa.array(seq_idx)),
        }
    )


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
    batch: pa.Table, spec: Spec, column: str, seed: int, epoch: int, window: int
) -> pa.Table:
    """One window's packed rows (runs on the cluster)."""
    if isinstance(batch, pa.RecordBatch):
        batch = pa.Table.from_batches([batch])
    start = _window_start(window)
    try:
        return _pack_window(batch, spec, column, seed, epoch, 0 if start is None else start)
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
) -> ray.data.Dataset:
    """A dataset of packed rows: best fit within windows of ``window`` consecutive documents.

    The documents (``column``: lists of token ids) are cut into windows of exactly ``window``
    rows in the dataset's order (the last window holds the rest), whatever Ray's block sizes:
    ``repartition(target_num_rows_per_block=window, strict=True)`` on a copy of the dataset with
    ``preserve_order=True``. Each window is packed by :func:`pack_table` on the cluster: rows of
    at most ``spec.capacity`` tokens holding the tokens back to back, with ``cu_seqlens``,
    ``position_ids`` and ``seq_idx`` (the values ``padless.torch.collate_packed`` gives). The
    rows of a window are in its plan's (shuffled) order, windows in the dataset's order.

    Deterministic for ``(seed, epoch)`` and the dataset's order: a window's randomness (the
    tie-break among equal lengths and its row order) comes from ``(seed, epoch)`` and its
    lengths. With ``oversize="split"`` no token is lost or repeated; ``"drop"`` and
    ``"truncate"`` lose what the spec says; ``"error"`` (the default) fails the job on a
    document longer than ``capacity``. Such a document, or a null one, is named by its row in
    the dataset's order; a column whose schema Ray knows without running anything (Parquet,
    ``from_items``) is checked up front: lists of anything but integers are a ``TypeError``.

    Args:
        ds: the documents; other columns are left out of the packed rows.
        spec: ``padless.Packing(capacity=..., max_per_row=..., oversize=...)``.
        column: the token-list column.
        window: documents per window; more documents per window fill rows better (the last row
            of each window is the one left part-full), at O(window) memory per task.
        seed, epoch: the windows' randomness.

    Returns:
        A lazy ``ray.data.Dataset`` (nothing runs until it is consumed) whose rows are packed
        rows with columns ``column``, ``cu_seqlens``, ``position_ids``, ``seq_idx``; consume it
        with ``preserve_order`` kept (e.g. Ray Train's ``DataConfig(execution_options=...)``
        with ``preserve_order=True``) to see the rows in the same order every time.

    Cost: one pass over the tokens on the cluster (a gather per window), plus Ray's
    re-bundling of blocks into windows; O(window) documents in memory per task.

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
    return windows.map_batches(
        fn,
        fn_kwargs={"spec": spec, "column": column, "seed": seed, "epoch": epoch, "window": window},
        batch_size=window,
        batch_format="pyarrow",
        zero_copy_batch=True,
    )
