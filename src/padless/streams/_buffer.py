"""The buffer of :class:`~padless.streams.StreamBatcher`: its entries (items or :class:`Piece`
with their lengths, chunk, offset and piece) and the checked lengths of the items read."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, NoReturn

import numpy as np

from ..core._check import _is_int
from ..core.lengths import sizes_of

__all__ = ["MAX_LENGTH", "Entries", "ItemLengths", "Piece"]

#: Largest length accepted (lengths are int64 sums in the kernels, like ``lengths_of``).
MAX_LENGTH = 1 << 31


class Piece(NamedTuple):
    """Tokens ``start:stop`` of ``item``: piece ``piece`` (from 0) of the ``pieces`` it was cut into.

    ``Packing(oversize="split")`` cuts an item longer than ``capacity`` into pieces of
    ``capacity`` tokens (the last one shorter); ``oversize="truncate"`` keeps one piece, the
    first ``capacity`` tokens. :meth:`tokens` slices them out.

    >>> p = Piece([1, 2, 3, 4, 5], piece=1, pieces=3, start=2, stop=4)
    >>> p.tokens()
    [3, 4]
    """

    item: Any
    piece: int
    pieces: int
    start: int
    stop: int

    def tokens(self, key: str | None = None) -> Any:
        """The piece's tokens: ``item[start:stop]``, or ``item[key][start:stop]`` for a mapping."""
        part = self.item if key is None or not hasattr(self.item, "keys") else self.item[key]
        return part[self.start : self.stop]


def _objects(items: list[Any]) -> np.ndarray:
    """A 1-D object array holding ``items`` as they are (no nesting into 2-D)."""
    return np.fromiter(items, dtype=object, count=len(items))


_NO_OBJECTS = np.zeros(0, dtype=object)
_BOOLS = frozenset({bool, np.bool_})


class Entries:
    """Buffer entries (items or pieces) with their lengths, chunk, offset in chunk and piece.

    ``items`` is an object array (gathers run at C speed); ``meta`` holds per entry its chunk,
    its offset in the chunk and its piece: -1 for an item that is one entry (whole or
    truncated), else the piece number of a split item. Entries stay in stream order.
    """

    __slots__ = ("items", "lens", "sizes", "meta")

    def __init__(self, items: np.ndarray, lens: np.ndarray, meta: np.ndarray) -> None:
        self.items = items
        self.lens = lens
        self.sizes = sizes_of(lens)
        self.meta = meta

    @classmethod
    def make(
        cls, items: list[Any], lens: np.ndarray, chunk: int, off: np.ndarray, piece: Any = -1
    ) -> Entries:
        meta = np.empty((len(items), 3), np.int64)
        meta[:, 0] = chunk
        meta[:, 1] = off
        meta[:, 2] = piece
        return cls(_objects(items), lens, meta)

    @classmethod
    def empty(cls, fields: int) -> Entries:
        lens = np.zeros(0, np.int64) if fields == 0 else np.zeros((0, fields), np.int64)
        return cls(_NO_OBJECTS, lens, np.zeros((0, 3), np.int64))

    @property
    def chunk(self) -> np.ndarray:
        return self.meta[:, 0]

    @property
    def off(self) -> np.ndarray:
        return self.meta[:, 1]

    @property
    def piece(self) -> np.ndarray:
        return self.meta[:, 2]

    def __len__(self) -> int:
        return int(self.items.shape[0])

    def concat(self, other: Entries) -> Entries:
        if not len(self):
            return other
        if not len(other):
            return self
        return Entries(
            np.concatenate([self.items, other.items]),
            np.concatenate([self.lens, other.lens]),
            np.concatenate([self.meta, other.meta]),
        )

    def take(self, idx: np.ndarray) -> Entries:
        return Entries(self.items[idx], self.lens[idx], self.meta[idx])


_INT_TYPES: dict[type, bool] = {}


def _int_type(kind: type) -> bool:
    """Whether values of type ``kind`` are ints as lengths (``int``, numpy ints; not bool)."""
    ok = _INT_TYPES.get(kind)
    if ok is None:
        ok = _INT_TYPES[kind] = issubclass(kind, (int, np.integer)) and not issubclass(
            kind, (bool, np.bool_)
        )
    return ok


def _token_count(item: Any) -> int | None:
    """``len(item)`` when ``item`` is a sized sequence of ints (token ids), else None.

    A list or tuple whose first element is an int, or a 1-D integer array or tensor; checked
    on the first element only (O(1) per item).
    """
    if isinstance(item, (list, tuple)):
        return len(item) if not item or _is_int(item[0]) else None
    dtype = getattr(item, "dtype", None)
    if dtype is None or getattr(item, "ndim", None) != 1 or isinstance(item, (str, bytes)):
        return None
    name = str(dtype).rsplit(".", 1)[-1]  # numpy "int64", torch "torch.int64"
    return len(item) if name.startswith(("int", "uint")) else None


def _length_hint(item: Any) -> str:
    """How to write ``length=`` for an item that is not a sequence of ints."""
    if isinstance(item, Mapping):
        keys = list(item.keys())
        sized = [k for k in keys if isinstance(k, str) and hasattr(item[k], "__len__")]
        key = "input_ids" if "input_ids" in keys else (sized[0] if sized else "input_ids")
        return (
            f"a {type(item).__name__} with keys {keys[:6]!r:.80}, whose len() counts its keys; "
            f'pass length=lambda row: len(row["{key}"]) (or a named function, '
            f'def tokens(row): return len(row["{key}"]), where DataLoader workers pickle it)'
        )
    if _is_int(item):
        return f"an int ({item!r}); for a stream of lengths pass length=int"
    return (
        f"{type(item).__name__} {item!r:.60}; pass length=, a function from an item to its "
        "length (an int) or per-field lengths (a tuple of ints)"
    )


class ItemLengths:
    """The checked int64 lengths of a stream's items, by the ``length`` function given.

    The first lengths seen fix their kind (``fields``: 0 for ints, else the size of the tuples);
    a later length of another kind is an error naming its stream position.

    >>> lengths = ItemLengths(None)
    >>> lengths([[1, 2], [3]], 0).tolist(), lengths.fields
    ([2, 1], 0)
    """

    __slots__ = ("length", "fields")

    def __init__(self, length: Callable[[Any], Any] | None) -> None:
        self.length = length
        self.fields: int | None = None

    def __call__(self, items: list[Any], base: int) -> np.ndarray:
        """Checked int64 lengths of ``items`` (at stream positions ``base``, ``base + 1``...)."""
        fields = self.fields
        if not items:
            return np.zeros(0, np.int64) if not fields else np.zeros((0, fields), np.int64)
        length = self.length
        raw: list[Any] = items
        if length is None:  # items must be sequences of token ids
            raw = list(map(_token_count, items))
            if None in raw:
                i = raw.index(None)
                raise TypeError(
                    "StreamBatcher needs length= unless every item is a sequence of token ids "
                    f"(a list or tuple of ints, a 1-D integer array): the item at stream "
                    f"position {base + i} is {_length_hint(items[i])}"
                )
            arr = np.array(raw, np.int64)
        elif length is int and not fields:  # a stream of lengths: the items are the lengths
            if not all(map(_int_type, set(map(type, items)))):
                i = next(k for k, x in enumerate(items) if not _int_type(type(x)))
                raise TypeError(
                    "length=int takes the items as their lengths, which must be ints (not bool, "
                    f"float, str or None): the item at stream position {base + i} is "
                    f"{type(items[i]).__name__} {items[i]!r:.60}"
                )
            try:
                arr = np.fromiter(items, np.int64, len(items))
            except OverflowError:
                self._bad_length(raw, base)
        else:
            if length is len and any(isinstance(x, Mapping) for x in items):
                i = next(k for k, x in enumerate(items) if isinstance(x, Mapping))
                raise TypeError(
                    f"length=len on the item at stream position {base + i}, "
                    f"{_length_hint(items[i])}"
                )
            try:
                raw = list(map(length, items))
            except Exception as err:  # noqa: BLE001 - re-raised naming the item's position
                self._failed_length(items, base, err)
            try:
                arr = np.array(raw)
            except (ValueError, OverflowError):
                self._bad_length(raw, base)
            if arr.dtype.kind in "iu" and arr.ndim == 1 and not _BOOLS.isdisjoint(map(type, raw)):
                self._bad_length(raw, base)  # numpy made ints of True/False
        if arr.dtype.kind not in "iu" or arr.ndim not in (1, 2) or arr.shape[-1] == 0:
            self._bad_length(raw, base)
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        got = 0 if arr.ndim == 1 else int(arr.shape[1])
        if fields is None:
            self.fields = fields = got
        if got != fields:
            self._bad_length(raw, base)
        if int(arr.min()) < 0 or int(arr.max()) >= MAX_LENGTH:
            self._bad_length(raw, base)
        return np.ascontiguousarray(arr, dtype=np.int64)

    def _failed_length(self, items: list[Any], base: int, err: Exception) -> NoReturn:
        """Raise ``length``'s own error again, naming the stream position of the item."""
        for i, item in enumerate(items):
            try:
                self.length(item)  # type: ignore[misc]
            except Exception as again:  # noqa: BLE001 - the first item that fails
                kind = TypeError if isinstance(again, TypeError) else ValueError
                raise kind(
                    f"length(item) raised {type(again).__name__}: {again} for the item at stream "
                    f"position {base + i} ({type(item).__name__} {item!r:.60})"
                ) from again
        raise err

    def _bad_length(self, raw: list[Any], base: int) -> NoReturn:
        """Raise for the first length that is not an int (tuple) in [0, 2**31) of the
        stream's kind (the first length seen sets whether lengths are ints or tuples)."""

        def fields_of(v: Any) -> int:
            return len(v) if isinstance(v, (tuple, list)) and len(v) != 1 else 0

        fields = self.fields
        if fields is None and raw:
            fields = fields_of(raw[0])
        want = "an int" if not fields else f"a tuple of {fields} ints"
        for i, v in enumerate(raw):
            parts = list(v) if isinstance(v, (tuple, list)) else [v]
            if fields_of(v) != fields or not parts or not all(_is_int(x) for x in parts):
                raise TypeError(
                    f"length(item) must return {want} (the same kind for every item), got "
                    f"{type(v).__name__} {v!r:.60} at stream position {base + i}"
                )
            if not all(0 <= x < MAX_LENGTH for x in parts):
                raise ValueError(
                    f"length(item) at stream position {base + i} must lie in [0, 2**31), "
                    f"got {v!r:.60}"
                )
        raise TypeError(f"length(item) must return {want}, got {raw[:3]!r:.80}...")
