"""Turn what users have (arrays, token lists, per-field lengths) into an int64 length array."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

_SEQUENCE_TYPES = (list, tuple, np.ndarray, range)


def _first_bad(mask: np.ndarray) -> tuple[int, ...]:
    pos = np.argwhere(mask)[0]
    return tuple(int(p) for p in pos)


def _where(pos: tuple[int, ...]) -> str:
    return f"[{pos[0]}]" if len(pos) == 1 else f"[{pos[0]}, {pos[1]}]"


def _from_array(arr: np.ndarray) -> np.ndarray:
    if arr.ndim == 0:
        raise ValueError(f"lengths must be 1-D (N,) or 2-D (N, F), got a scalar {arr!r}")
    if arr.ndim > 2:
        raise ValueError(
            f"lengths must be 1-D (N,) or 2-D (N, F), got {arr.ndim}-D shape {arr.shape}"
        )
    if arr.ndim == 2 and arr.shape[1] == 0 and arr.shape[0] > 0:
        raise ValueError(f"lengths of shape {arr.shape} have no fields")
    if arr.dtype == np.bool_:
        raise TypeError("lengths must be integers, got booleans")
    if arr.dtype.kind in "iu":
        if arr.dtype.kind == "i" and arr.size:
            negative = arr < 0
            if negative.any():
                pos = _first_bad(negative)
                raise ValueError(
                    f"lengths must be non-negative, got {arr[pos].item()} at position {_where(pos)}"
                )
        if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
            raise ValueError("lengths do not fit in int64")
        return np.ascontiguousarray(arr, dtype=np.int64)
    if arr.dtype.kind == "f":
        if arr.size:
            bad = ~np.isfinite(arr) | (arr < 0) | (arr != np.floor(arr))
            if bad.any():
                pos = _first_bad(bad)
                raise ValueError(
                    "lengths must be non-negative whole numbers, "
                    f"got {arr[pos].item()!r} at position {_where(pos)}"
                )
        return np.ascontiguousarray(arr, dtype=np.int64)
    if arr.dtype == object:
        return _from_list(list(arr))
    raise TypeError(f"lengths must be integers, got dtype {arr.dtype}")


def _is_scalar_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _token_count(item: Any, where: str) -> int:
    """Length of one token sequence whose elements must all be scalars."""
    if isinstance(item, np.ndarray):
        if item.ndim != 1:
            raise ValueError(f"ragged nesting: sequence at {where} has shape {item.shape}, not 1-D")
        return int(item.shape[0])
    for j, tok in enumerate(item):
        if isinstance(tok, (*_SEQUENCE_TYPES, str, bytes)):
            raise ValueError(
                f"ragged nesting: item {j} of the sequence at {where} is itself a sequence"
            )
    return len(item)


def _from_list(items: Sequence[Any]) -> np.ndarray:
    n = len(items)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    first = items[0]
    if isinstance(first, (str, bytes)):
        raise TypeError(
            "lengths_of got text; tokenize it first or use padless.lengths_from_text "
            f"(item [0] is {type(first).__name__})"
        )
    if not isinstance(first, _SEQUENCE_TYPES):
        # a list of counts
        for i, x in enumerate(items):
            if isinstance(x, (bool, np.bool_)):
                raise TypeError(f"lengths must be integers, got bool {x!r} at position [{i}]")
            if isinstance(x, _SEQUENCE_TYPES):
                raise ValueError(f"ragged nesting: position [{i}] is a sequence among counts")
            if not _is_scalar_int(x):
                if isinstance(x, (float, np.floating)):
                    break  # handled by the array path, which names the position
                raise TypeError(
                    f"lengths must be integers, got {type(x).__name__} {x!r} at position [{i}]"
                )
        return _from_array(np.asarray(items))
    # a list of sequences: token lists, or tuples of token lists (multi-field)
    multi = (
        len(first) > 0
        and all(isinstance(x, _SEQUENCE_TYPES) for x in first)
        and not (isinstance(first, np.ndarray) and first.ndim == 1)
    )
    if multi:
        fields = len(first)
        out = np.empty((n, fields), dtype=np.int64)
        for i, item in enumerate(items):
            if not isinstance(item, _SEQUENCE_TYPES) or len(item) != fields:
                raise ValueError(
                    f"ragged nesting: item [{i}] should hold {fields} field sequences, got {item!r:.60}"
                )
            for f, seq in enumerate(item):
                if not isinstance(seq, _SEQUENCE_TYPES):
                    raise ValueError(f"ragged nesting: field {f} of item [{i}] is not a sequence")
                out[i, f] = _token_count(seq, f"[{i}][{f}]")
        return out
    out1 = np.empty(n, dtype=np.int64)
    for i, item in enumerate(items):
        if not isinstance(item, _SEQUENCE_TYPES):
            raise ValueError(
                f"ragged nesting: item [{i}] is {type(item).__name__} {item!r}, expected a sequence"
            )
        out1[i] = _token_count(item, f"[{i}]")
    return out1


def lengths_of(x: Any) -> np.ndarray:
    """Return lengths as an int64 array of shape (N,) or (N, F).

    Accepts a numpy array of lengths ((N,) or (N, F) per-field lengths), a list of ints, a list of
    token sequences (lists or arrays), a list of tuples of token sequences (one per field, e.g.
    source and target), or a ``pathlib.Path`` to a file that :func:`padless.readers.lengths_from_file`
    reads (.npy, .npz, text, Arrow/Parquet, a saved ``datasets`` folder). Lengths must be
    non-negative whole numbers (0 is allowed).

    Raises:
        TypeError: booleans, text or non-numeric values.
        ValueError: negatives, NaN, fractions, ragged nesting or >2-D input; the message names the
            first bad position and value.

    >>> lengths_of([[1, 2, 3], [4]]).tolist()
    [3, 1]
    >>> lengths_of(np.array([[3, 4], [5, 6]])).shape
    (2, 2)
    """
    if isinstance(x, np.ndarray):
        return _from_array(x)
    if isinstance(x, os.PathLike):
        from .readers import lengths_from_file

        return lengths_from_file(x)
    if isinstance(x, (list, tuple)):
        return _from_list(x)
    if hasattr(x, "__array__"):
        return _from_array(np.asarray(x))
    if isinstance(x, (str, bytes)) or not hasattr(x, "__len__"):
        raise TypeError(
            f"lengths_of expects an array or a list of sequences, got {type(x).__name__}"
        )
    return _from_list(list(x))


def sizes_of(lengths: np.ndarray) -> np.ndarray:
    """One size per sequence: its length, or for (N, F) lengths the max over fields (fairseq)."""
    if lengths.ndim == 1:
        return lengths
    if lengths.shape[1] == 1:
        return np.ascontiguousarray(lengths[:, 0])
    return lengths.max(axis=1) if lengths.shape[0] else np.zeros(0, np.int64)


def builtin_corpus(fields: str | Sequence[str] = "en") -> np.ndarray:
    """Return the built-in demo corpus: token lengths of 29,814 aligned English–Spanish verses.

    ``fields`` picks arrays of the bundled ``bible-en-es.lengths.npz`` (``en``, ``es``, ``en_web``);
    several fields give (N, F) lengths.

    >>> builtin_corpus().shape, builtin_corpus(["en", "es"]).shape
    ((29814,), (29814, 2))
    """
    from importlib.resources import files

    names = [fields] if isinstance(fields, str) else list(fields)
    path = files("padless").joinpath("data/bible-en-es.lengths.npz")
    with path.open("rb") as fh, np.load(fh) as data:
        unknown = [f for f in names if f not in data.files]
        if unknown or not names:
            raise ValueError(f"fields must be among {sorted(data.files)}, got {names}")
        cols = [np.asarray(data[f], dtype=np.int64) for f in names]
    return cols[0] if len(cols) == 1 else np.stack(cols, axis=1)
