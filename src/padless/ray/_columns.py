"""Ray datasets and their Arrow columns: which column, what it holds, its lists as offsets.

Shared by :mod:`padless.ray._lengths` (which measures a column) and :mod:`padless.ray._pack`
(which packs one): the dataset check, the order-preserving copy, the column choice and the
column's kind, read from the schema when Ray knows it and from the rows otherwise.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import ray
import ray.data


def check_dataset(ds: Any) -> ray.data.Dataset:
    """``ds``, refused with a TypeError unless it is a ``ray.data.Dataset``."""
    if not isinstance(ds, ray.data.Dataset):
        raise TypeError(f"ds must be a ray.data.Dataset, got {type(ds).__name__}")
    return ds


def ordered(ds: ray.data.Dataset) -> ray.data.Dataset:
    """A copy of ``ds`` (plan and context) whose execution preserves the row order."""
    out = ray.data.Dataset.copy(ds, _deep_copy=True)
    out.context.execution_options.preserve_order = True
    return out


def schema_of(ds: ray.data.Dataset) -> tuple[list[str], list[Any]]:
    """The columns and types when Ray knows them without running anything (e.g. Parquet)."""
    schema = ds.schema(fetch_if_missing=False)
    if schema is None:
        return [], []
    return list(schema.names), list(schema.types)


def pick_column(names: list[str], column: Any) -> str:
    """The column to work on: ``column``, checked against ``names``, or the only one there is."""
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


def tensor_ndim(arrow_type: Any) -> int | None:
    """Dimensions of a Ray tensor extension type (what numpy batches of arrays become), or None."""
    if not isinstance(arrow_type, pa.ExtensionType):
        return None
    ndim = getattr(arrow_type, "ndim", None)
    if ndim is None:
        shape = getattr(arrow_type, "shape", None)
        ndim = None if shape is None else len(shape)
    return None if ndim is None else int(ndim)


def as_lists(col: Any) -> Any:
    """A Ray tensor column of 1-D arrays as the Arrow list column it stores; others unchanged.

    Ray Data stores the arrays a numpy-format ``map_batches`` returns as tensor extension
    columns: fixed-shape ones over a list of the elements, variable-shaped ones over a struct
    whose ``data`` field lists the elements.
    """
    ndim = tensor_ndim(col.type)
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


def column_kind(arrow_type: Any) -> str | None:
    """'list', 'text', 'int', 'null', 'other', or None (not an Arrow type) for a column type."""
    if not isinstance(arrow_type, pa.DataType):
        return None
    ndim = tensor_ndim(arrow_type)
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


def token_type_error(column: str, arrow_type: Any) -> str | None:
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
