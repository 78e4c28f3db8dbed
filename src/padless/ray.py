"""Past one machine: lengths, windowed plans and packed datasets on Ray Data.

When a corpus outgrows one machine the heavy work is reading (and tokenizing) every document to
learn its length, and moving packed rows to many training workers. This module runs that work
on Ray (``pip install 'padless[ray]'``); ``import padless`` never imports ray.

- :func:`lengths`: the lengths of a ``ray.data.Dataset``, in the dataset's row order, computed
  block by block on the cluster (from Arrow list offsets for a token column, by a tokenizer for a
  text column) and written as an int32 ``.npy`` that ``np.load(path, mmap_mode="r")`` opens.
- :func:`plan`: :func:`padless.plan_windows` as Ray tasks, one group of windows per task, written
  as a folder of ``.npy`` files that :class:`PlanFiles` maps lazily on every training rank.
- :func:`pack`: a ``ray.data.Dataset`` of packed rows (tokens back to back, ``cu_seqlens``,
  ``position_ids``, ``seq_idx``), best fit within windows of ``window`` consecutive documents.
- For Ray Train: each worker's ``ray.train.get_dataset_shard(...)`` iterator feeds a
  :class:`padless.StreamBatcher`; see ``docs/ray.md``.

**Row order.** Ray Data may finish blocks out of order. :func:`lengths` and :func:`pack` run on a
copy of the dataset whose ``DataContext.execution_options.preserve_order`` is True (the dataset
passed in, and its context, are left as they are), so lengths come out in the order
``ds.iter_rows()`` yields rows with ``preserve_order`` set, and windows are runs of consecutive
rows in that order whatever the block layout. Ray Train ingests with the driver's
``DataContext`` options unless ``DataConfig(execution_options=...)`` says otherwise: set
``preserve_order=True`` there for shards that come out the same in every epoch (which the
StreamBatcher's exact resume needs).

Example (a 2-CPU local Ray; on a cluster, ``ray.init(address="auto")``)::

    import ray, padless, padless.ray
    ds = ray.data.read_parquet("s3://corpus/")             # a column of token ids
    lengths = padless.ray.lengths(ds, column="input_ids", out="lengths.npy")
    files = padless.ray.plan("lengths.npy", padless.TokenBudget(max_tokens=16384),
                             window=1_000_000, seed=0, epoch=0, out="plan-e0")
    packed = padless.ray.pack(ds, padless.Packing(capacity=4096, oversize="split"),
                              column="input_ids", window=10_000, seed=0)
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numba
import numpy as np

from .readers import MissingDependency

try:
    import pyarrow as pa
    import pyarrow.compute as pc
    import ray
    import ray.data
except ImportError as _exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise MissingDependency(
        "padless.ray needs Ray Data: pip install 'padless[ray]' (or pip install 'ray[data]' "
        f"pyarrow); importing it failed: {_exc}"
    ) from _exc

from . import _rng
from ._check import check_seed, positive, positive_or_none
from ._output import check_output, write_exactly
from .lengths import MAX_LENGTH

if TYPE_CHECKING:
    from .plan import BatchPlan
    from .planners.packing import Packing
    from .planners.spec import Spec

__all__ = ["PlanFiles", "lengths", "pack", "pack_table", "plan"]

PLAN_FORMAT = "padless-ray-plan-1"
MANIFEST = "plan.json"
COUNTS = "counts.npy"
TEXT_BATCH = 4096  # texts per tokenizer call
_HEADER = 128  # bytes of a streamed .npy header (holds any 1-D or (N, F) shape)
_LENGTH = "length"


# --------------------------------------------------------------------------- helpers


def _dataset(ds: Any) -> ray.data.Dataset:
    if not isinstance(ds, ray.data.Dataset):
        raise TypeError(f"ds must be a ray.data.Dataset, got {type(ds).__name__}")
    return ds


def _ordered(ds: ray.data.Dataset) -> ray.data.Dataset:
    """A copy of ``ds`` (plan and context) whose execution preserves the row order."""
    out = ray.data.Dataset.copy(ds, _deep_copy=True)
    out.context.execution_options.preserve_order = True
    return out


def _schema_of(ds: ray.data.Dataset) -> tuple[list[str], list[Any]]:
    """The columns and types when Ray knows them without running anything (e.g. Parquet)."""
    schema = ds.schema(fetch_if_missing=False)
    if schema is None:
        return [], []
    return list(schema.names), list(schema.types)


def _pick(names: list[str], column: Any) -> str:
    if column is not None and not isinstance(column, str):
        raise TypeError(f"column must be a str, got {type(column).__name__} {column!r}")
    if column is None:
        if len(names) == 1:
            return names[0]
        if not names:
            raise ValueError(
                "the dataset's columns are not known before it runs (e.g. after map_batches); "
                "name the column with column="
            )
        raise ValueError(f"the dataset has columns {names}; choose one with column=")
    if names and column not in names:
        raise ValueError(f"column must be one of {names}, got {column!r}")
    return column


def _tensor_ndim(arrow_type: Any) -> int | None:
    """Dimensions of a Ray tensor extension type (what numpy batches of arrays become), or None."""
    if not isinstance(arrow_type, pa.ExtensionType):
        return None
    ndim = getattr(arrow_type, "ndim", None)
    if ndim is None:
        shape = getattr(arrow_type, "shape", None)
        ndim = None if shape is None else len(shape)
    return None if ndim is None else int(ndim)


def _as_lists(col: Any) -> Any:
    """A Ray tensor column of 1-D arrays as the Arrow list column it stores; others unchanged.

    Ray Data stores the arrays a numpy-format ``map_batches`` returns as tensor extension
    columns: fixed-shape ones over a list of the elements, variable-shaped ones over a struct
    whose ``data`` field lists the elements.
    """
    ndim = _tensor_ndim(col.type)
    if ndim is None:
        return col
    if ndim != 1:
        raise TypeError(
            f"column type {col.type} holds {ndim}-D arrays; lengths need 1-D token arrays"
        )
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    parts = []
    for chunk in chunks:
        storage = chunk.storage
        if pa.types.is_struct(storage.type):
            storage = storage.flatten()[storage.type.get_field_index("data")]
        parts.append(storage)
    return pa.chunked_array(parts, type=parts[0].type if parts else pa.list_(pa.int64()))


def _kind(arrow_type: Any) -> str | None:
    """'list', 'text', 'int', 'null', 'other', or None (not an Arrow type) for a column type."""
    if not isinstance(arrow_type, pa.DataType):
        return None
    ndim = _tensor_ndim(arrow_type)
    if ndim is not None:
        return "list" if ndim == 1 else "other"
    t = pa.types
    if t.is_null(arrow_type):
        return "null"
    if t.is_list(arrow_type) or t.is_large_list(arrow_type) or t.is_fixed_size_list(arrow_type):
        return "list"
    if t.is_string(arrow_type) or t.is_large_string(arrow_type):
        return "text"
    if t.is_integer(arrow_type):
        return "int"
    return "other"


def _token_type_error(column: str, arrow_type: Any) -> str | None:
    """Why a list column of this type holds no token ids (from the schema), or None if it may.

    Lists of integers hold token ids; lists of nulls (every list empty) may; any other element
    type (strings, floats, bools) cannot. Unknown types (not Arrow) are left to the rows.
    """
    value = getattr(arrow_type, "value_type", None)
    if not isinstance(value, pa.DataType):
        return None
    if pa.types.is_integer(value) or pa.types.is_null(value):
        return None
    return (
        f"column {column!r} must hold lists of integer token ids, got type {arrow_type} "
        f"(lists of {value}; tokenize first, or cast the ids to integers)"
    )


def _npy_header(dtype: np.dtype[Any], shape: tuple[int, ...]) -> bytes:
    """A version 1.0 ``.npy`` header of exactly :data:`_HEADER` bytes."""
    descr = np.lib.format.dtype_to_descr(dtype)
    dims = tuple(int(s) for s in shape)
    body = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {dims!r}, }}"
    raw = body.encode("latin1")
    pad = _HEADER - 10 - len(raw) - 1
    if pad < 0:  # pragma: no cover - 128 bytes hold shapes up to 2**62 rows
        raise ValueError(f"shape {shape} does not fit a {_HEADER}-byte .npy header")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", _HEADER - 10) + raw + b" " * pad + b"\n"


class _NpyStream:
    """Append arrays to a ``.npy`` file whose length is known only at the end.

    A placeholder header is written first and the real one (same size) when the stream closes,
    so nothing is held in memory; an unseekable target gets the pieces held and written at the
    end instead.
    """

    def __init__(self, fh: Any, dtype: Any, tail: tuple[int, ...] = ()) -> None:
        self.fh = fh
        self.dtype = np.dtype(dtype)
        self.tail = tail
        self.rows = 0
        self.seekable = bool(getattr(fh, "seekable", lambda: False)())
        self.held: list[bytes] = []
        if self.seekable:
            fh.write(b"\0" * _HEADER)

    def write(self, arr: np.ndarray) -> None:
        data = np.ascontiguousarray(arr, dtype=self.dtype)
        if data.shape[1:] != self.tail:
            raise ValueError(f"rows of shape {data.shape[1:]} in a stream of {self.tail}")
        self.rows += int(data.shape[0])
        if not data.size:
            return
        if self.seekable:
            self.fh.write(data.data)
        else:
            self.held.append(data.tobytes())

    def close(self) -> None:
        header = _npy_header(self.dtype, (self.rows, *self.tail))
        if self.seekable:
            self.fh.seek(0)
            self.fh.write(header)
            self.fh.seek(0, os.SEEK_END)
        else:
            self.fh.write(header)
            for piece in self.held:
                self.fh.write(piece)
            self.held = []


# --------------------------------------------------------------------------- lengths

_COUNTERS: dict[str, Callable[[list[str]], np.ndarray]] = {}


def _named_counter(name: str) -> Callable[[list[str]], np.ndarray]:
    """A loaded spm:/hf: tokenizer, kept for the life of the worker process."""
    from .readers import _tokenizer_counter

    counter = _COUNTERS.get(name)
    if counter is None:
        counter = _COUNTERS[name] = _tokenizer_counter(name)
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
    from .readers import _arrow_lengths

    if isinstance(tokenizer, str) and tokenizer in ("whitespace", "chars", "bytes"):
        return _arrow_lengths(col, tokenizer, "text column")
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
    kind = _kind(col.type)
    if kind == "null":  # a block whose every row is null
        return pa.nulls(len(col), pa.int64())
    col = _as_lists(col)
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
        from .readers import check_tokenizer

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
    order (the work runs on a copy of the dataset with ``preserve_order=True``: see the module
    docstring), and streams them to ``out``: a ``.npy`` written under a temporary name in the
    same folder and renamed into place when complete, so ``np.load(out, mmap_mode="r")`` opens
    it (no partial file ever has the name ``out``).

    Args:
        ds: the dataset (e.g. ``ray.data.read_parquet(...)``). It is not changed.
        column: the column to measure; may be left out when the dataset has one column.
        tokenizer: for a string column: ``"spm:MODEL"`` (sentencepiece), ``"hf:tokenizer.json"``
            (Hugging Face ``tokenizers``), ``"whitespace"``, ``"chars"``, ``"bytes"`` as in
            :func:`padless.readers.lengths_from_text` (a model path must be readable on every
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
    ds = _dataset(ds)
    target = check_output(out, "out")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable or None, got {type(progress).__name__}")
    names, types = _schema_of(ds)
    column = _pick(names, column)
    kind = _kind(types[names.index(column)]) if column in names else None
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
    work = _ordered(ds).select_columns([column])
    fn: Any = _measure  # a function of (table, **fn_kwargs), which Ray's hints do not spell
    measured = work.map_batches(
        fn,
        fn_kwargs={"column": column, "tokenizer": tokenizer},
        batch_size=None,
        batch_format="pyarrow",
        zero_copy_batch=True,
    )

    def write(fh: Any) -> None:
        stream = _NpyStream(fh, np.int32)
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


# --------------------------------------------------------------------------- windowed plans


def _detach(planner: Any) -> dict[str, Any]:
    """A :class:`padless.windows.WindowedPlanner`'s state without its mapped lengths."""
    state = {k: v for k, v in vars(planner).items() if k not in ("lengths", "_rows")}
    for k, v in state.items():
        if isinstance(v, np.ndarray) and v.size > 1 << 16:  # pragma: no cover - guards a change
            raise RuntimeError(f"WindowedPlanner.{k} holds {v.size} items; it cannot be shipped")
    return state


def _attach(state: dict[str, Any], path: str) -> Any:
    """The planner again, its lengths mapped from ``path`` (as WindowedPlanner maps them)."""
    from .windows import WindowedPlanner, source_lengths

    planner = WindowedPlanner.__new__(WindowedPlanner)
    vars(planner).update(state)
    src = source_lengths(Path(path))
    if int(src.shape[0]) != state["n"]:
        raise ValueError(
            f"{path} holds {src.shape[0]} lengths, but the plan was started over {state['n']}: "
            "the file changed while planning"
        )
    planner.lengths = src
    planner._rows = src.reshape(state["n"], state["fields"]) if src.ndim == 1 else src
    return planner


def _plan_part(
    state: dict[str, Any],
    path: str,
    seed: int,
    epoch: int,
    first: int,
    last: int,
    folder: str,
    part: int,
) -> list[int]:
    """Plan windows ``first..last-1`` into the files of part ``part`` (runs on the cluster).

    Each array a window's plan holds (``plan._arrays()``: indices, offsets, skipped, and for
    packing the row arrays) is appended to ``part-NNNNN.NAME.npy``; ``part-NNNNN.json`` says
    where each window's slice of each array starts and ends, and holds its scalars and info.
    Returns the windows' batch counts.
    """
    from .plan import json_default

    planner = _attach(state, path)
    member = planner.layout.membership(seed, epoch)
    stem = os.path.join(folder, f"part-{part:05d}")
    files: dict[str, Any] = {}
    streams: dict[str, _NpyStream] = {}
    records = []
    counts = []
    try:
        for w in range(first, last):
            plan = planner.plan_window(member, w, seed, epoch)
            counts.append(len(plan))
            ranges: dict[str, list[int]] = {}
            scalars: dict[str, Any] = {}
            for name, arr in plan._arrays().items():
                arr = np.asarray(arr)
                if arr.ndim == 0:
                    scalars[name] = arr.item()
                    continue
                if name not in streams:
                    files[name] = open(f"{stem}.{name}.npy", "wb")  # noqa: SIM115
                    streams[name] = _NpyStream(files[name], arr.dtype, arr.shape[1:])
                s = streams[name]
                ranges[name] = [s.rows, s.rows + int(arr.shape[0])]
                s.write(arr)
            kind = type(plan)
            records.append(
                {
                    "window": w,
                    "type": kind.__name__,
                    "module": kind.__module__,
                    "ranges": ranges,
                    "scalars": scalars,
                    "dtypes": {n: streams[n].dtype.str for n in ranges},
                    "info": json.loads(json.dumps(plan.info, default=json_default)),
                }
            )
        for s in streams.values():
            s.close()
    finally:
        for fh in files.values():
            fh.close()
    with open(f"{stem}.json", "w") as fh:
        json.dump({"first": first, "last": last, "windows": records}, fh)
    return counts


_plan_part_remote = ray.remote(num_cpus=1)(_plan_part)


def _plan_out(out: Any) -> Path:
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out must be a path to a folder, got {type(out).__name__} {out!r}")
    target = Path(out).absolute()  # tasks write there, from their own working folders
    if not target.parent.is_dir():
        raise FileNotFoundError(
            f"the folder of out {str(target)!r} does not exist: {target.parent}"
        )
    if target.exists():
        if not target.is_dir():
            raise ValueError(f"out {str(target)!r} exists and is not a folder")
        if any(target.iterdir()) and not (target / MANIFEST).is_file():
            raise ValueError(
                f"out {str(target)!r} is a folder holding other files: name a new or empty "
                "folder, or one a previous padless.ray.plan wrote (it is replaced)"
            )
    return target


def plan(
    lengths_path: str | os.PathLike[str],
    spec: Spec,
    *,
    window: int,
    seed: int = 0,
    epoch: int = 0,
    out: str | os.PathLike[str],
    tasks: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> PlanFiles:
    """Plan an epoch window by window as Ray tasks, and write it as files ranks map lazily.

    The plan is exactly :func:`padless.plan_windows` ``(lengths, spec, window=window,
    seed=seed, epoch=epoch)``: the driver checks the lengths and the spec once (one pass over
    the mapped file), then ``tasks`` Ray tasks each plan a run of consecutive windows, memory-map
    the lengths themselves (``lengths_path`` must be readable on every node: shared storage) and
    write their windows' arrays to ``out``; no window's plan depends on which task made it.

    ``out`` is a folder: ``plan.json`` (the spec, window, seed, epoch, parts), ``counts.npy``
    (batches per window) and per task ``part-NNNNN.json`` with one ``.npy`` per plan array. The
    folder is written under a temporary name beside ``out`` and renamed into place when every
    task has finished (a folder a previous call wrote is replaced; one holding other files is
    refused up front).

    Args:
        lengths_path: an int ``.npy`` of (N,) or (N, F) lengths, e.g. from :func:`lengths`.
        spec: any planner spec (``padless.TokenBudget(max_tokens=...)``, ``padless.Packing(...)``).
        window, seed, epoch: as :func:`padless.plan_windows`.
        out: the folder to write.
        tasks: how many tasks (default: 4 per CPU of the cluster, at most one per window).
        progress: called with the number of windows done after each task finishes.

    Returns:
        :class:`PlanFiles` over ``out``.

    Cost: the driver's checking pass (about 1 ns per length, in threads) and O(windows) of
    manifest; each task O(its windows × (window + longest length)), memory O(window). The
    cluster reads the lengths once more, window by window.

    >>> import os, tempfile, padless
    >>> d = tempfile.mkdtemp()
    >>> np.save(os.path.join(d, "l.npy"), (np.arange(1000) % 37 + 1).astype(np.int32))
    >>> spec = padless.TokenBudget(max_tokens=64)
    >>> files = plan(os.path.join(d, "l.npy"), spec, window=300, seed=1, out=os.path.join(d, "p"))
    >>> ref = padless.plan_windows(np.load(os.path.join(d, "l.npy")), spec, window=300, seed=1)
    >>> files.num_windows, all(a == b for a, b in zip(files, ref, strict=True))
    (4, True)
    """
    from .planners.spec import Spec, spec_to_dict
    from .readers import _load_npy
    from .windows import WindowedPlanner

    if not isinstance(lengths_path, (str, os.PathLike)):
        raise TypeError(
            f"lengths_path must be a path to a .npy file, got {type(lengths_path).__name__}"
        )
    src = Path(lengths_path)
    if src.suffix.lower() != ".npy":
        raise ValueError(
            f"lengths_path must name a .npy file (memory-mapped by every task), got {src}"
        )
    if not src.is_file():
        raise FileNotFoundError(f"no such file: {src}")
    mapped = _load_npy(src, mmap_mode="r")  # a file that is no .npy is named here
    if mapped.dtype.kind not in "iu":  # each task maps the file: a copy there would be O(N)
        raise TypeError(
            f"lengths_path must hold integer lengths (int32 or int64), got dtype {mapped.dtype} "
            f"in {src} (save them with np.save(path, lengths.astype(np.int32)))"
        )
    del mapped
    if not isinstance(spec, Spec):
        raise TypeError(
            f"spec must be a padless planner spec (e.g. padless.TokenBudget(max_tokens=4096)), "
            f"got {type(spec).__name__}"
        )
    seed = check_seed(seed, "seed")
    epoch = check_seed(epoch, "epoch")
    tasks = positive_or_none("tasks", tasks)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable or None, got {type(progress).__name__}")
    target = _plan_out(out)
    planner = WindowedPlanner(spec, src, window)
    num_windows = planner.num_windows
    state_ref = ray.put(_detach(planner))  # (starts a local Ray if none is running)
    if tasks is None:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        tasks = 4 * max(cpus, 1)
    parts = min(tasks, num_windows)
    cuts = [k * num_windows // parts for k in range(parts + 1)] if parts else [0]
    groups = list(zip(cuts[:-1], cuts[1:], strict=True))
    tmp = target.parent / f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.padless-tmp"
    tmp.mkdir()
    try:
        where = str(src.resolve())
        pending = {
            _plan_part_remote.remote(state_ref, where, seed, epoch, a, b, str(tmp), p): p
            for p, (a, b) in enumerate(groups)
        }
        results: dict[int, list[int]] = {}
        done_windows = 0
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                p = pending.pop(ref)
                results[p] = ray.get(ref)
                done_windows += len(results[p])
                if progress is not None:
                    progress(done_windows)
        counts = np.array(
            [c for p in range(len(groups)) for c in results[p]], dtype=np.int64
        ).reshape(-1)
        np.save(tmp / COUNTS, counts)
        manifest = {
            "format": PLAN_FORMAT,
            "spec": spec_to_dict(spec),
            "window": planner.window,
            "seed": seed,
            "epoch": epoch,
            "num_sequences": planner.n,
            "num_windows": num_windows,
            "num_batches": int(counts.sum()),
            "lengths": where,
            "parts": [{"first": a, "last": b} for a, b in groups],
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        _swap_in(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return PlanFiles(target)


def _swap_in(tmp: Path, target: Path) -> None:
    """Rename the finished folder ``tmp`` to ``target`` (an old plan there is removed)."""
    if not target.exists():
        os.replace(tmp, target)
        return
    old = target.parent / f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.padless-old"
    os.replace(target, old)
    os.replace(tmp, target)
    shutil.rmtree(old, ignore_errors=True)


class _Arrays(dict):  # type: ignore[type-arg]
    """Arrays by name with ``.files``, as ``BatchPlan._from_arrays`` reads an opened ``.npz``."""

    @property
    def files(self) -> list[str]:
        return list(self)


class PlanFiles:
    """A windowed plan written by :func:`plan`, read lazily (memory-mapped ``.npy`` files).

    ``files.window(w)`` is window ``w``'s plan (the plan :func:`padless.plan_windows` gives,
    its arrays mapped read-only, not read until used); iterating gives the windows in order;
    ``len(files)`` is the number of batches of the epoch and ``files.batch(i)`` the indices of
    batch ``i`` (windows one after the other, each window's batches in its plan's order), so a
    rank reads only the batches it takes, e.g. ``range(rank, len(files), world_size)``.

    Cost: opening reads ``plan.json`` and ``counts.npy`` (8 bytes per window); a window's first
    use reads its part's JSON and maps its files; ``batch(i)`` is a binary search plus a slice.

    >>> import os, tempfile, padless
    >>> d = tempfile.mkdtemp()
    >>> np.save(os.path.join(d, "l.npy"), np.array([3, 1, 2, 5, 4, 4, 2, 2], np.int32))
    >>> spec = padless.Packing(capacity=8)
    >>> _ = plan(os.path.join(d, "l.npy"), spec, window=4, out=os.path.join(d, "plan"))
    >>> files = PlanFiles(os.path.join(d, "plan"))
    >>> files.num_windows, len(files), sorted(int(i) for b in range(len(files)) for i in files.batch(b))
    (2, 4, [0, 1, 2, 3, 4, 5, 6, 7])
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(
                f"path must be a plan folder (a str or path), got {type(path).__name__} {path!r:.60}"
            )
        self.path = Path(path)
        manifest = self.path / MANIFEST
        if not manifest.is_file():
            raise ValueError(
                f"path {str(self.path)!r} is not a padless.ray plan folder (no {MANIFEST})"
            )
        try:
            meta = json.loads(manifest.read_text())
        except ValueError as exc:
            raise ValueError(f"{manifest} is not readable JSON ({exc})") from exc
        if not isinstance(meta, dict) or meta.get("format") != PLAN_FORMAT:
            raise ValueError(f"{manifest} is not a {PLAN_FORMAT} manifest")
        self.meta = meta
        self.counts = np.load(self.path / COUNTS, mmap_mode=None, allow_pickle=False)
        self.cumulative = np.zeros(self.counts.size + 1, np.int64)
        np.cumsum(self.counts, out=self.cumulative[1:])
        self._firsts = np.array([p["first"] for p in meta["parts"]], np.int64)
        self._parts: OrderedDict[int, tuple[dict[str, Any], dict[str, np.ndarray]]] = OrderedDict()
        self._last: tuple[int, BatchPlan] | None = None

    @property
    def spec(self) -> Spec:
        """The spec the plan was made with."""
        from .planners.spec import spec_from_dict

        return spec_from_dict(self.meta["spec"])

    @property
    def num_windows(self) -> int:
        return int(self.meta["num_windows"])

    @property
    def window_size(self) -> int:
        return int(self.meta["window"])

    @property
    def seed(self) -> int:
        return int(self.meta["seed"])

    @property
    def epoch(self) -> int:
        return int(self.meta["epoch"])

    def __len__(self) -> int:
        return int(self.cumulative[-1])

    def _part(self, p: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        hit = self._parts.get(p)
        if hit is not None:
            self._parts.move_to_end(p)
            return hit
        stem = self.path / f"part-{p:05d}"
        record = json.loads(Path(f"{stem}.json").read_text())
        names = {n for w in record["windows"] for n in w["ranges"]}
        arrays = {n: np.load(f"{stem}.{n}.npy", mmap_mode="r", allow_pickle=False) for n in names}
        self._parts[p] = (record, arrays)
        while len(self._parts) > 4:
            self._parts.popitem(last=False)
        return record, arrays

    def window(self, w: int) -> BatchPlan:
        """Window ``w``'s plan, with global indices (arrays mapped from the files)."""
        from .plan import saved_type

        if isinstance(w, bool) or not isinstance(w, (int, np.integer)):
            raise TypeError(f"window must be an int, got {type(w).__name__}")
        if not 0 <= w < self.num_windows:
            raise IndexError(f"window {w} out of range for a plan of {self.num_windows} windows")
        if self._last is not None and self._last[0] == w:
            return self._last[1]
        p = int(np.searchsorted(self._firsts, w, side="right")) - 1
        record, arrays = self._part(p)
        entry = record["windows"][int(w) - record["first"]]
        data = _Arrays({n: arrays[n][a:b] for n, (a, b) in entry["ranges"].items()})
        for n, v in entry["scalars"].items():
            data[n] = np.array(v)
        where = f"{self.path} window {w}"
        kind = saved_type({"type": entry["type"], "module": entry["module"]}, where)
        out = kind._from_arrays(data, {"info": entry["info"]}, where)
        out.info = dict(entry["info"])
        self._last = (int(w), out)
        return out

    def __iter__(self) -> Iterator[BatchPlan]:
        for w in range(self.num_windows):
            yield self.window(w)

    def batch(self, i: int) -> np.ndarray:
        """The indices of batch ``i`` of the epoch (windows in order)."""
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"batch index must be an int, got {type(i).__name__}")
        n = len(self)
        if not 0 <= i < n:
            raise IndexError(f"batch {i} out of range for a plan of {n} batches")
        w = int(np.searchsorted(self.cumulative, i, side="right")) - 1
        return self.window(w)[int(i - self.cumulative[w])]

    def __repr__(self) -> str:
        return (
            f"PlanFiles({str(self.path)!r}, windows={self.num_windows}, batches={len(self)}, "
            f"window={self.window_size}, seed={self.seed}, epoch={self.epoch})"
        )


# --------------------------------------------------------------------------- packed datasets


def _list_parts(col: Any, where: str, first_row: int = 0) -> tuple[np.ndarray, Any]:
    """(offsets into values, values) of a list column, offsets starting at 0.

    ``first_row`` is the dataset row of the column's row 0 (what messages count from).
    """
    col = _as_lists(col)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    null = f"{where}: row {{}} is null; every document needs its token list (drop such rows first)"
    if pa.types.is_null(col.type) and len(col):
        raise ValueError(null.format(first_row))
    if pa.types.is_fixed_size_list(col.type):
        col = col.cast(pa.list_(col.type.value_type))
    if _kind(col.type) != "list":
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


def _window_seed(seed: int, epoch: int, sizes: np.ndarray) -> int:
    """The seed a window of documents is packed with: from (seed, epoch) and its lengths."""
    digest = hashlib.blake2b(np.ascontiguousarray(sizes, np.int64).tobytes(), digest_size=8)
    parent = _rng.seed_sequence(seed, epoch, _rng.RAY_PACK)
    child = np.random.SeedSequence(
        parent.entropy, spawn_key=(int.from_bytes(digest.digest(), "little"),)
    )
    return int(child.generate_state(1, np.uint64)[0])


def pack_table(
    table: Any, spec: Packing, *, column: str, seed: int = 0, epoch: int = 0
) -> pa.Table:
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
    from .planners.packing import Packing

    if not isinstance(spec, Packing):
        raise TypeError(f"spec must be a padless.Packing(capacity=...), got {type(spec).__name__}")
    if not isinstance(column, str):
        raise TypeError(f"column must be a str, got {type(column).__name__} {column!r}")
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise TypeError(f"table must be a pyarrow.Table, got {type(table).__name__}")
    if column not in table.column_names:
        raise ValueError(f"column must be one of {table.column_names}, got {column!r}")
    seed = check_seed(seed, "seed")
    epoch = check_seed(epoch, "epoch")
    return _pack_window(table, spec, column, seed, epoch, 0)


def _pack_window(
    table: pa.Table, spec: Packing, column: str, seed: int, epoch: int, first_row: int
) -> pa.Table:
    """:func:`pack_table` of checked arguments; messages count rows from ``first_row``."""
    from .plan import PackedPlan
    from .windows import shift_index

    off, values = _list_parts(table.column(column), f"column {column!r}", first_row)
    sizes = np.diff(off)
    try:
        window_plan = spec.plan(sizes, seed=_window_seed(seed, epoch, sizes), epoch=0)
    except ValueError as exc:  # e.g. "index 1 has length 5, which exceeds capacity=4"
        raise ValueError(shift_index(str(exc), first_row)) from None
    if not isinstance(window_plan, PackedPlan):  # pragma: no cover - Packing plans are packed
        raise TypeError("a Packing spec must plan a PackedPlan")
    return _rows(window_plan, off, values, column)


@numba.njit(cache=True)
def row_columns(
    values: np.ndarray, src: np.ndarray, seg: np.ndarray, bounds: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Packed rows' columns, flat: (tokens, position_ids, seq_idx, cu_seqlens).

    Entry ``e`` is ``values[src[e] : src[e] + seg[e]]``; row ``r`` holds entries
    ``bounds[r]:bounds[r + 1]``, back to back. ``cu_seqlens`` holds ``k + 1`` values per row of
    ``k`` entries (from 0). One pass over the output tokens; :func:`row_columns_reference` is
    the same in numpy.
    """
    n = src.size
    total = 0
    for e in range(n):
        total += seg[e]
    tokens = np.empty(total, values.dtype)
    position = np.empty(total, np.int32)
    seq_idx = np.empty(total, np.int32)
    cu = np.empty(n + bounds.size - 1, np.int32)
    t = 0
    for r in range(bounds.size - 1):
        lo, hi = bounds[r], bounds[r + 1]
        base = t
        cu[lo + r] = 0
        for e in range(lo, hi):
            s, k, within = src[e], seg[e], e - lo
            for j in range(k):
                tokens[t + j] = values[s + j]
                position[t + j] = j
                seq_idx[t + j] = within
            t += k
            cu[e + r + 1] = t - base
    return tokens, position, seq_idx, cu


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


def _rows(p: Any, off: np.ndarray, values: Any, column: str) -> pa.Table:
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
    batch: pa.Table, spec: Packing, column: str, seed: int, epoch: int, window: int
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
    spec: Packing,
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
    from .planners.packing import Packing

    ds = _dataset(ds)
    if not isinstance(spec, Packing):
        raise TypeError(f"spec must be a padless.Packing(capacity=...), got {type(spec).__name__}")
    window = positive("window", window)
    seed = check_seed(seed, "seed")
    epoch = check_seed(epoch, "epoch")
    names, types = _schema_of(ds)
    column = _pick(names, column)
    if column in names:
        kind = _kind(types[names.index(column)])
        if kind not in (None, "list", "null"):
            raise TypeError(
                f"column {column!r} must hold lists of token ids, got type "
                f"{types[names.index(column)]} (measure text with padless.ray.lengths, or "
                "tokenize first)"
            )
        why = _token_type_error(column, types[names.index(column)]) if kind == "list" else None
        if why is not None:
            raise TypeError(why)
    work = _ordered(ds).select_columns([column])
    windows = work.repartition(target_num_rows_per_block=window, strict=True)
    fn: Any = _pack_batch  # a function of (table, **fn_kwargs)
    return windows.map_batches(
        fn,
        fn_kwargs={"spec": spec, "column": column, "seed": seed, "epoch": epoch, "window": window},
        batch_size=window,
        batch_format="pyarrow",
        zero_copy_batch=True,
    )
