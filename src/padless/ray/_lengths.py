"""The length of every row of a Ray dataset, measured on the cluster: :func:`lengths`.

A token column is measured from its Arrow list offsets, a text column by a tokenizer, an integer
column is read as the lengths; the driver streams the lengths, in the dataset's row order, to an
int32 ``.npy``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray
import ray.data

from ..core._output import check_output, write_exactly
from ..core.lengths import MAX_LENGTH
from ..io.readers import arrow_lengths, check_tokenizer, tokenizer_counter
from ._columns import as_lists, check_dataset, column_kind, ordered, pick_column, schema_of
from ._npy import NpyStream

TEXT_BATCH = 4096  # texts per tokenizer call
_LENGTH = "length"
_COUNTERS: dict[str, Callable[[list[str]], np.ndarray]] = {}  # loaded tokenizers, per process


def _named_counter(name: str) -> Callable[[list[str]], np.ndarray]:
    """A loaded spm:/hf: tokenizer, kept for the life of the worker process."""
    counter = _COUNTERS.get(name)
    if counter is None:
        counter = _COUNTERS[name] = tokenizer_counter(name)
    return counter


def _call_tokenizer(fn: Callable[[list[str]], Any], texts: list[str]) -> np.ndarray:
    """Token counts of ``texts`` from a user callable (see :func:`lengths`)."""
    got = fn(texts)
    if isinstance(got, Mapping) or hasattr(got, "keys"):
        if "input_ids" not in got:
            raise TypeError(
                "tokenizer returned a mapping without 'input_ids'; return one count or one token "
                "list per text"
            )
        got = got["input_ids"]
    if isinstance(got, np.ndarray) and got.ndim == 1 and got.dtype.kind in "iu":
        counts = got.astype(np.int64)
    else:
        try:
            items = list(got)
        except TypeError:
            raise TypeError(
                f"tokenizer must return one count or one token list per text, got "
                f"{type(got).__name__}"
            ) from None
        counts = np.empty(len(items), np.int64)
        for i, v in enumerate(items):
            if isinstance(v, (bool, np.bool_)):
                raise TypeError(f"tokenizer returned {v!r} for text {i}; want an int or tokens")
            if isinstance(v, (int, np.integer)):
                counts[i] = int(v)
            elif hasattr(v, "__len__"):
                counts[i] = len(v)
            else:
                raise TypeError(
                    f"tokenizer returned {type(v).__name__} {v!r:.40} for text {i}; want an int "
                    "(the count) or a sequence of tokens"
                )
    if counts.shape[0] != len(texts):
        raise TypeError(
            f"tokenizer returned {counts.shape[0]} results for a batch of {len(texts)} texts; "
            "it must return one per text"
        )
    return counts


def _text_counts(col: Any, tokenizer: Any) -> np.ndarray:
    if isinstance(tokenizer, str) and tokenizer in ("whitespace", "chars", "bytes"):
        return arrow_lengths(col, tokenizer, "text column")
    count = (
        _named_counter(tokenizer)
        if isinstance(tokenizer, str)
        else (lambda texts: _call_tokenizer(tokenizer, texts))
    )
    parts = []
    for lo in range(0, len(col), TEXT_BATCH):
        texts = col.slice(lo, TEXT_BATCH).to_pylist()
        parts.append(np.asarray(count(texts), dtype=np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def column_lengths(col: Any, tokenizer: Any = None) -> pa.Array:
    """Lengths of the rows of one Arrow column: int64, null where the row is null.

    List columns: their list lengths, from the offsets; string columns: the tokenizer's counts
    (``"whitespace"``, ``"chars"``, ``"bytes"``, ``"spm:MODEL"``, ``"hf:tokenizer.json"`` or a
    callable on a list of texts); integer columns: the values. What each block of
    :func:`lengths` runs (out-of-range values are reported by the caller, which knows the
    rows' positions).

    Cost: O(rows) vectorised for lists and integers; the tokenizer's time for text.

    >>> column_lengths(pa.chunked_array([[[1, 2, 3], None, []]])).to_pylist()
    [3, None, 0]
    >>> column_lengths(pa.array(["a b", "c"]), "whitespace").to_pylist()
    [2, 1]
    """
    kind = column_kind(col.type)
    if kind == "null":  # a block whose every row is null
        return pa.nulls(len(col), pa.int64())
    col = as_lists(col)
    valid = None
    if col.null_count:
        valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
    if kind == "list":
        if tokenizer is not None:
            raise ValueError("the column holds token lists (already tokenized): drop tokenizer")
        out = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False)
        values = out.astype(np.int64)
    elif kind == "text":
        if tokenizer is None:
            raise ValueError(_NEED_TOKENIZER)
        filled = col.fill_null("") if valid is not None else col
        if isinstance(filled, pa.ChunkedArray):
            filled = filled.combine_chunks()
        values = _text_counts(filled, tokenizer)
    elif kind == "int":
        if tokenizer is not None:
            raise ValueError("the column holds lengths (integers): drop tokenizer")
        raw = col.fill_null(0).to_numpy(zero_copy_only=False)
        values = raw.astype(np.int64)
        if raw.dtype == np.uint64:  # values past int64 must still read as out of range
            values[raw > np.uint64(MAX_LENGTH)] = MAX_LENGTH
    else:
        raise TypeError(
            f"column type {col.type} holds no lengths (need a list of token ids, a string column "
            "with tokenizer=, or an integer column of lengths)"
        )
    mask = None if valid is None else ~valid
    return pa.array(values, type=pa.int64(), mask=mask)


_NEED_TOKENIZER = (
    "the column holds text: pass tokenizer= ('spm:MODEL', 'hf:tokenizer.json', 'whitespace', "
    "'chars', 'bytes', or a function from a list of texts to their token counts or token lists)"
)


def _measure(batch: pa.Table, column: str, tokenizer: Any) -> pa.Table:
    """One block's lengths (runs on the cluster)."""
    return pa.table({_LENGTH: column_lengths(batch.column(column), tokenizer)})


def _check_tokenizer(tokenizer: Any) -> Any:
    if tokenizer is None:
        return None
    if isinstance(tokenizer, str):
        name = check_tokenizer(tokenizer)
        if name not in ("whitespace", "chars", "bytes"):
            kind, _, model = name.partition(":")
            if model:  # workers run in their own folders: name the model absolutely
                name = f"{kind}:{os.path.abspath(model)}"
            _named_counter(name)  # load it here once: a bad model path fails before any work
        return name
    if callable(tokenizer):
        _call_tokenizer(tokenizer, ["a probe text"])  # its output shape, checked up front
        return tokenizer
    raise TypeError(
        "tokenizer must be a name ('spm:MODEL', 'hf:tokenizer.json', 'whitespace', 'chars', "
        f"'bytes') or a callable on a list of texts, got {type(tokenizer).__name__}"
    )


def lengths(
    ds: ray.data.Dataset,
    *,
    column: str | None = None,
    tokenizer: str | Callable[[list[str]], Any] | None = None,
    out: str | os.PathLike[str],
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """The length of every row of a Ray dataset, in row order, written as an int32 ``.npy``.

    Each block is measured on the cluster, in parallel (``ds.map_batches``, whole blocks as Arrow
    tables): a list column (token ids) by its list lengths, read from the Arrow offsets with no
    Python step per row; a string column by ``tokenizer``; an integer column is taken as the
    lengths. The driver receives one int64 length per row, block after block in the dataset's
    order (the work runs on a copy of the dataset with ``preserve_order=True``: see
    :mod:`padless.ray`), and streams them to ``out``: a ``.npy`` written under a temporary name in the
    same folder and renamed into place when complete, so ``np.load(out, mmap_mode="r")`` opens
    it (no partial file ever has the name ``out``).

    Args:
        ds: the dataset (e.g. ``ray.data.read_parquet(...)``). It is not changed.
        column: the column to measure; may be left out when the dataset has one column.
        tokenizer: for a string column: ``"spm:MODEL"`` (sentencepiece), ``"hf:tokenizer.json"``
            (Hugging Face ``tokenizers``), ``"whitespace"``, ``"chars"``, ``"bytes"`` as in
            :func:`padless.io.readers.lengths_from_text` (a model path must be readable on every
            node: shared storage), or a picklable callable taking a list of texts and returning
            one token count, or one token list, per text (a mapping with ``"input_ids"``, as a
            Hugging Face tokenizer returns, is read too). Must be None for list and integer
            columns.
        out: the ``.npy`` file to write.
        progress: called with the number of rows written so far after each block (Ray Data's
            own progress bars show the blocks in flight).

    Returns:
        The lengths, ``np.load(out, mmap_mode="r")`` (int32, read-only, mapped).

    Raises:
        TypeError, ValueError: up front for a bad ``ds``, ``column``, ``tokenizer`` or ``out``;
            ``ValueError`` naming the row (its position in the dataset's order) for a null row or
            a length outside [0, 2**31), after which no file is left at ``out``.

    Cost: the cluster reads the column once (for Parquet only that column: the measurement runs
    on ``ds.select_columns([column])``); 8 bytes per row travel to the driver, which writes 4
    bytes per row; driver memory O(block).

    >>> import os, tempfile
    >>> ds = ray.data.from_items([{"ids": [1, 2, 3]}, {"ids": [4]}, {"ids": []}])
    >>> path = os.path.join(tempfile.mkdtemp(), "lengths.npy")
    >>> lengths(ds, column="ids", out=path).tolist()
    [3, 1, 0]
    """
    ds = check_dataset(ds)
    target = check_output(out, "out")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable or None, got {type(progress).__name__}")
    names, types = schema_of(ds)
    column = pick_column(names, column)
    kind = column_kind(types[names.index(column)]) if column in names else None
    kind = None if kind == "null" else kind
    tokenizer = _check_tokenizer(tokenizer)
    if kind == "list" and tokenizer is not None:
        raise ValueError(f"column {column!r} holds token lists (already tokenized): drop tokenizer")
    if kind == "text" and tokenizer is None:
        raise ValueError(f"column {column!r}: {_NEED_TOKENIZER}")
    if kind == "int" and tokenizer is not None:
        raise ValueError(f"column {column!r} holds integers (lengths): drop tokenizer")
    if kind == "other":
        raise TypeError(
            f"column {column!r} has type {types[names.index(column)]}, which holds no lengths "
            "(need a list of token ids, a string column with tokenizer=, or an integer column)"
        )
    work = ordered(ds).select_columns([column])
    fn: Any = _measure  # a function of (table, **fn_kwargs), which Ray's hints do not spell
    measured = work.map_batches(
        fn,
        fn_kwargs={"column": column, "tokenizer": tokenizer},
        batch_size=None,
        batch_format="pyarrow",
        zero_copy_batch=True,
    )

    def write(fh: Any) -> None:
        stream = NpyStream(fh, np.int32)
        rows = 0
        for table in measured.iter_batches(batch_size=None, batch_format="pyarrow"):
            col = cast(pa.Table, table).column(_LENGTH)
            if col.null_count:
                first = int(pc.index(pc.is_null(col), True).as_py())
                raise ValueError(
                    f"row {rows + first} of the dataset has no value in column {column!r} "
                    "(null); every row needs one (drop such rows first, e.g. with ds.filter)"
                )
            values = col.to_numpy(zero_copy_only=False)
            bad = np.flatnonzero((values < 0) | (values >= MAX_LENGTH))
            if bad.size:
                i = int(bad[0])
                raise ValueError(
                    f"row {rows + i} of the dataset has length {int(values[i])} in column "
                    f"{column!r}; lengths must lie in [0, 2**31)"
                )
            stream.write(values.astype(np.int32))
            rows += int(values.shape[0])
            if progress is not None:
                progress(rows)
        stream.close()

    write_exactly(target, write, what="out")
    return np.load(target, mmap_mode="r", allow_pickle=False)
