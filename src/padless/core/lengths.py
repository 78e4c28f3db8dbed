"""Turn what users have (arrays, token lists, per-field lengths) into an int64 length array."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

_SEQUENCE_TYPES = (list, tuple, np.ndarray, range)
_ARROW_MODULES = ("pyarrow", "datasets")  # objects read from their Arrow data (padless.io)

MAX_LENGTH = 1 << 31  # lengths are whole numbers in [0, 2**31): 2**32 of them sum within int64
_RULE = "whole numbers in [0, 2**31)"
_TEXT_HINT = (
    "for a text file pass a pathlib.Path or call padless.io.readers.lengths_from_text(path); "
    "for text in memory, tokenize it first"
)


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
        # one pass: a value outside [0, 2**31) sets bit 31 or above (a negative one, the sign bit)
        if arr.size and not 0 <= int(np.bitwise_or.reduce(arr, axis=None)) < MAX_LENGTH:
            _raise_first_bad((arr < 0) | (arr >= MAX_LENGTH), arr)
        return np.ascontiguousarray(arr, dtype=np.int64)
    if arr.dtype.kind == "f":
        arr = arr.astype(np.float64, copy=False)  # float16 cannot hold the bound 2**31
        if arr.size:
            # NaN fails every comparison, so it lands in `bad` too
            bad = ~((arr >= 0) & (arr < MAX_LENGTH) & (arr == np.floor(arr)))
            if bad.any():
                _raise_first_bad(bad, arr)
        return np.ascontiguousarray(arr, dtype=np.int64)
    if arr.dtype == object:
        if arr.ndim != 1:
            raise TypeError(
                f"lengths must be a numeric array, got a {arr.ndim}-D array of Python objects"
            )
        return _from_list(list(arr))
    if arr.dtype.kind in "SU":
        raise TypeError(f"lengths_of got text (dtype {arr.dtype}); {_TEXT_HINT}")
    raise TypeError(f"lengths must be integers, got dtype {arr.dtype}")


def _raise_first_bad(mask: np.ndarray, arr: np.ndarray) -> None:
    pos = _first_bad(mask)
    value = arr[pos].item()
    raise ValueError(
        f"lengths must be {_RULE}, got {value!r} at position {_where(pos)}{_unit_hint(value)}"
    )


UNIT_HINT = (
    "for durations in seconds, convert them once with padless.durations(seconds, "
    "resolution=0.01) and give budgets in seconds with resolution=0.01 "
    "(e.g. TokenBudget(max_tokens=200.0, resolution=0.01))"
)


def _unit_hint(value: Any) -> str:
    """The way to give durations, after a fractional length's error."""
    if isinstance(value, float) and math.isfinite(value) and value >= 0 and value != int(value):
        return f"; {UNIT_HINT}"
    return ""


def _check_count(x: Any, i: int) -> None:
    """Check one count of a list of counts (any Python or numpy int or float)."""
    if isinstance(x, np.ndarray) and x.ndim == 0:  # np.array(3): the count it holds
        x = x[()]
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"lengths must be integers, got bool {x!r} at position [{i}]")
    if isinstance(x, (int, np.integer)):
        if 0 <= x < MAX_LENGTH:
            return
    elif isinstance(x, (float, np.floating)):
        if 0 <= x < MAX_LENGTH and math.floor(x) == x:
            return
    elif isinstance(x, _SEQUENCE_TYPES):
        raise ValueError(f"ragged nesting: position [{i}] is a sequence among counts")
    elif isinstance(x, (str, bytes)):
        raise TypeError(f"lengths must be integers, got text {x!r:.60} at position [{i}]")
    else:
        raise TypeError(
            f"lengths must be integers, got {type(x).__name__} {x!r:.60} at position [{i}]"
        )
    shown = x.item() if isinstance(x, np.generic) else x
    raise ValueError(f"lengths must be {_RULE}, got {shown!r} at position [{i}]{_unit_hint(shown)}")


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
            f"lengths_of got text (item [0] is {type(first).__name__} {first!r:.40}); {_TEXT_HINT}"
        )
    if not isinstance(first, _SEQUENCE_TYPES) or (
        isinstance(first, np.ndarray) and first.ndim == 0
    ):
        # a list of counts: each is checked here, so the conversion below cannot fail or wrap
        for i, x in enumerate(items):
            _check_count(x, i)
        return np.asarray(items, dtype=np.int64)
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


class MappedFile(NamedTuple):
    """Where a read-only memory map's array lies in its file, to map it again elsewhere (a
    pickle carries this instead of the array: a DataLoader worker or a Ray task maps the
    file itself)."""

    path: str
    offset: int
    dtype: str
    shape: tuple[int, ...]

    @classmethod
    def of(cls, x: Any) -> MappedFile | None:
        """The file region of a read-only memory map over a whole C-ordered region, or None."""
        if not isinstance(x, np.memmap) or getattr(x, "filename", None) is None:
            return None
        if not x.flags.c_contiguous or x.base is None or x.flags.writeable:
            return None
        return cls(str(x.filename), int(x.offset), x.dtype.str, tuple(int(n) for n in x.shape))

    def open(self) -> np.ndarray:
        """The array, mapped read-only again; ValueError when the file no longer holds it."""
        need = (
            self.offset + int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize
        )
        try:
            size = os.path.getsize(self.path)
        except OSError as exc:
            raise ValueError(
                f"{self.path} changed: the lengths mapped from it are gone ({exc})"
            ) from None
        if size < need:
            raise ValueError(
                f"{self.path} changed: it holds {size} bytes, fewer than the {need} the lengths "
                "mapped from it need"
            )
        return np.memmap(
            self.path, dtype=self.dtype, mode="r", offset=self.offset, shape=self.shape
        )


def arrow_like(x: Any) -> bool:
    """Whether ``x`` is a pyarrow or HF ``datasets`` object (by its types' modules: no import)."""
    return any(
        (getattr(t, "__module__", None) or "").partition(".")[0] in _ARROW_MODULES
        for t in type(x).__mro__
    )


def as_lengths(x: Any) -> np.ndarray:
    """:func:`padless.lengths_of` of values in memory: an int64 array of shape (N,) or (N, F).

    The same checks and messages for arrays, lists of ints and lists of token sequences; a path
    or Arrow data (which :func:`padless.lengths_of` reads) is a TypeError here: this module reads
    no files.

    Cost: O(N) vectorised for arrays; one Python pass over the items for lists.

    >>> as_lengths([[1, 2, 3], [4]]).tolist()
    [3, 1]
    """
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(
            "lengths must be a plain array, got a masked array; pass arr.compressed() or "
            "arr.filled(value)"
        )
    if isinstance(x, np.matrix):
        raise TypeError("lengths must be a plain array, got an np.matrix; pass np.asarray(m)")
    if isinstance(x, np.ndarray):
        return _from_array(x)
    if isinstance(x, (set, frozenset)):
        raise TypeError(
            f"lengths must be in the order of the dataset (a list or an array), got a "
            f"{type(x).__name__}, which keeps no order and drops repeated lengths"
        )
    if isinstance(x, os.PathLike) or arrow_like(x):
        raise TypeError(
            f"lengths in memory are an array or a list here, got a {type(x).__name__}: read a "
            "file or Arrow data with padless.lengths_of(x)"
        )
    if isinstance(x, (list, tuple)):
        return _from_list(x)
    if isinstance(x, str):
        raise TypeError(_str_message(x))
    if isinstance(x, (bytes, bytearray, memoryview)):
        raise TypeError(f"lengths_of got {type(x).__name__}; {_TEXT_HINT}")
    if isinstance(x, Mapping):
        keys = list(x.keys())
        first = f"d[{keys[0]!r}]" if keys else "d[KEY]"
        raise TypeError(
            f"lengths_of got a {type(x).__name__} with keys {keys[:6]!r:.80}; pass one field's "
            f"lengths (lengths_of({first})) or stack fields into an (N, F) array"
        )
    if hasattr(x, "__array__"):
        return _from_array(np.asarray(x))
    if not hasattr(x, "__len__"):
        raise TypeError(
            f"lengths_of expects an array or a list of sequences, got {type(x).__name__}"
        )
    return _from_list(list(x))


def _str_message(x: str) -> str:
    shown = f"{x!r:.80}"
    try:
        is_dir = os.path.isdir(x)
        is_file = not is_dir and os.path.isfile(x)
    except (OSError, ValueError):  # not a path at all (NUL bytes, too long)
        is_dir = is_file = False
    if is_dir:
        return (
            f"lengths_of got a str naming the folder {shown}; a saved datasets folder is read "
            f"with lengths_of(pathlib.Path({shown})) or padless.io.readers.lengths_from_arrow(path, "
            "column=...); a folder of text files is read file by file"
        )
    kind = "naming a file " if is_file else ""
    return (
        f"lengths_of got a str {kind}{shown}; to read a file pass a pathlib.Path "
        f"(lengths_of(pathlib.Path({shown}))) or call padless.io.lengths_from_file(path) "
        "(text: padless.io.readers.lengths_from_text(path, tokenizer=...))"
    )


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

    if isinstance(fields, str):
        names = [fields]
    elif isinstance(fields, (list, tuple)) and all(isinstance(f, str) for f in fields):
        names = list(fields)
    else:
        raise TypeError(
            "fields must be a str or a list of str (en, es, en_web), "
            f"got {type(fields).__name__} {fields!r:.60}"
        )
    path = files("padless").joinpath("data/bible-en-es.lengths.npz")
    with path.open("rb") as fh, np.load(fh) as data:
        unknown = [f for f in names if f not in data.files]
        if unknown or not names:
            raise ValueError(f"fields must be among {sorted(data.files)}, got {names}")
        cols = [np.asarray(data[f], dtype=np.int64) for f in names]
    return cols[0] if len(cols) == 1 else np.stack(cols, axis=1)
