"""Bind a dataset to the lengths a sampler planned, so a mismatch is an error, never wrong batches.

A padless sampler plans on lengths; the DataLoader then indexes the dataset with the planned
indices. If the dataset is not the one the lengths describe (another size, another order, rows
dropped or truncated by a preparation step), nothing else notices: the batches silently exceed
their budget, train on a subset, or fail with an ``IndexError`` half an epoch later.
:class:`CheckedDataset` (or ``sampler.checked(dataset)``) refuses a dataset of another size up
front and checks every item's length against its planned length as the item is loaded.

numpy only: the Arrow fast path uses ``pyarrow`` when the dataset is a ``datasets.Dataset``.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from ..core.lengths import MappedFile
from . import lengths_of
from .readers import list_lengths

__all__ = ["CheckedDataset", "Field", "sampler_lengths"]

Field = None | str | tuple[str, ...] | Callable[[Any], Any]
"""What ``field=`` takes: None, a key, a tuple of keys (one per column), or item -> length(s)."""


def sampler_lengths(sampler: Any) -> np.ndarray | None:
    """The (N,) or (N, F) lengths a padless sampler plans on, or None if it has none.

    A :class:`padless.MixtureSampler` gives its corpora's lengths one after the other (the
    order of its global indices: a ``ConcatDataset`` of the corpora in its order).
    """
    subs = getattr(sampler, "samplers", None)
    if isinstance(subs, Mapping) and hasattr(sampler, "corpus_offsets"):
        parts = [sampler_lengths(s) for s in subs.values()]
        if any(p is None for p in parts) or len({p.shape[1:] for p in parts if p is not None}) > 1:
            return None
        return np.concatenate([p for p in parts if p is not None])
    lengths = getattr(sampler, "lengths", None)
    if lengths is None:
        return None
    return lengths_of(lengths) if not _int_array(lengths) else np.asarray(lengths)


def _int_array(x: Any) -> bool:
    """An integer array the sampler already holds (its validated lengths; a memory-mapped
    int32 file of a billion lengths among them): kept as it is, never copied to int64."""
    return (
        isinstance(x, np.ndarray)
        and x.dtype.kind in "iu"
        and x.dtype != np.uint64
        and x.ndim in (1, 2)
    )


class CheckedDataset:
    """A dataset whose items are checked against the lengths a sampler planned for them.

    Built with ``sampler.checked(dataset, field=...)`` or directly. ``len(dataset)`` must equal
    the number of lengths (else a ``ValueError`` naming both, up front), and each item's length
    is compared with its planned length when the item is loaded (``__getitem__``, and
    ``__getitems__``, which torch's DataLoader uses for a batch): a mismatch is a ``ValueError``
    naming the index, the planned and the actual length. Items come back unchanged.

    Args:
        dataset: anything with ``len()`` indexed by int (a list, a ``torch`` map-style dataset,
            a ``datasets.Dataset``...).
        lengths: the planned (N,) or (N, F) lengths (``sampler.lengths``).
        field: how to measure an item. None: the item is a sized sequence of tokens (for (N, F)
            lengths, a sequence of F such sequences, e.g. a ``(source, target)`` tuple). A key
            (``"input_ids"``): the item is a mapping and that value is measured. A tuple of keys
            (``("source", "target")``), one per column of (N, F) lengths. Or a function
            ``item -> int`` (a tuple of F ints for (N, F) lengths).

    An Arrow ``datasets.Dataset`` (no custom transform) with ``field`` naming list columns is
    checked whole when the check is built, from the columns' list offsets (``pyarrow``, no pass
    over the rows in Python); its items are then served without further checks
    (``verified`` is True).

    Unless the Arrow path checked it whole, item 0 is loaded and measured once when the check
    is built, so that a ``field`` that does not fit the rows is refused up front (mapping rows
    without a key: a ``TypeError`` that names the key to pass; a key the rows lack; a function
    that does not return a length).

    Cost: O(1) per item (a ``len`` and a comparison, in C-level passes over a batch): about
    0.15-0.3 us per item, 1-2.5% of a padded collate of the same batch for rows of ~300 tokens,
    less for longer rows (``benchmarks/bench_checked.py``); the Arrow path O(N) vectorised once. Picklable (for DataLoader workers) when ``dataset`` and ``field``
    are.

    >>> checked = CheckedDataset([[5, 6, 7], [8]], [3, 1])
    >>> checked[0], len(checked)
    ([5, 6, 7], 2)
    >>> CheckedDataset([[5, 6, 7], [8]], [3, 2])[1]
    Traceback (most recent call last):
    ...
    ValueError: dataset item 1 has length 1, but the sampler planned 2: the lengths were not computed from this dataset (or it was changed since: reordered, filtered, truncated)
    """

    def __init__(self, dataset: Any, lengths: Any, *, field: Field = None) -> None:
        self.lengths = lengths if _int_array(lengths) else lengths_of(lengths)
        self.dataset = dataset
        self.field = _check_field(field, self.columns)
        n = int(self.lengths.shape[0])
        try:
            size = len(dataset)
        except TypeError:
            raise TypeError(
                f"dataset must be a map-style dataset with len(), got {type(dataset).__name__}"
            ) from None
        if size != n:
            raise ValueError(
                f"dataset has {size} items but the sampler planned {n} lengths; the lengths must "
                "be computed from this very dataset, one per item in its order (was the dataset "
                "filtered, extended or prepared after the lengths were taken?)"
            )
        self.verified = _arrow_check(dataset, self.lengths, self.field)
        self._fast_view()
        if n and not self.verified:
            # one item, so that a field that does not fit the rows (dict rows without a key, a
            # key they lack) is refused now rather than at the first batch
            _measure(dataset[0], self.field, self.columns, 0)

    def _fast_view(self) -> None:
        # a memoryview reads a Python int in ~50 ns (a numpy scalar read costs ~3x that)
        flat = np.ascontiguousarray(self.lengths).reshape(-1)  # a memory map stays one
        self._planned = memoryview(flat) if flat.size else None  # type: ignore[arg-type]
        self._key = self.field if isinstance(self.field, str) else None
        self._getter = itemgetter(self._key) if self._key is not None else None
        self._plain = self.field is None and not self.columns
        self._fast = (
            not self.verified and self._planned is not None and (self._plain or bool(self._key))
        )
        self._many = callable(getattr(self.dataset, "__getitems__", None))

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planned"] = state["_getter"] = (
            None  # rebuilt on load (a memoryview does not pickle)
        )
        mapped = MappedFile.of(self.lengths)
        if mapped is not None:  # a worker maps the file again instead of receiving a copy
            state["lengths"] = mapped
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if isinstance(state.get("lengths"), MappedFile):
            state["lengths"] = state["lengths"].open()
        self.__dict__.update(state)
        self._fast_view()

    def verify(self) -> CheckedDataset:
        """Check every item now, then serve items unchecked; returns ``self``.

        For a dataset in memory (a list) this is one quick pass, so a wrong dataset fails
        before training instead of at the first batch that holds a wrong item. Cost: one load
        of every item (nothing for an Arrow dataset already checked whole).

        >>> CheckedDataset([[5, 6, 7], [8]], [3, 1]).verify().verified
        True
        """
        if self.verified:
            return self
        n, step = len(self), 1 << 16
        for lo in range(0, n, step):
            idx = list(range(lo, min(lo + step, n)))
            self.__getitems__(idx)
        self.verified, self._fast = True, False
        return self

    @property
    def columns(self) -> int:
        """F for (N, F) lengths, 0 for (N,) lengths."""
        return int(self.lengths.shape[1]) if self.lengths.ndim == 2 else 0

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    def __getitem__(self, index: int) -> Any:
        i = self._index(index)
        item = self.dataset[i]
        if not self.verified and not self._same(i, item):
            self._check(i, item)
        return item

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        idx = indices if type(indices) is list else list(indices)
        data = self.dataset
        if self._fast and idx:  # the DataLoader's path, in C-level passes: keep it lean
            try:  # the planned lengths first: this also refuses indices >= N and non-ints
                got = itemgetter(*idx)(self._planned)  # type: ignore[arg-type]
                planned = got if len(idx) != 1 else (got,)
            except (IndexError, TypeError):
                planned = None
            if planned is not None and min(idx) >= 0:
                items = list(data.__getitems__(idx) if self._many else map(data.__getitem__, idx))
                values = items if self._getter is None else list(map(self._getter, items))
                try:
                    fits = tuple(map(len, values)) == planned
                    fits = fits and _SLOW.isdisjoint(map(type, values))
                except Exception:  # the full check below names what is wrong
                    fits = False
                if not fits:
                    for i, item in zip(idx, items, strict=True):
                        self._check(i, item)
                return items
        n = len(self)
        if not self.verified or (idx and (min(idx) < 0 or max(idx) >= n)):
            idx = [self._index(i) for i in idx]  # raises, naming the index
        items = list(data.__getitems__(idx) if self._many else map(data.__getitem__, idx))
        if not self.verified:
            for i, item in zip(idx, items, strict=True):
                if not self._same(i, item):
                    self._check(i, item)
        return items

    def _same(self, i: int, item: Any) -> bool:
        """The O(1) check of the common cases; False sends the item to the full check."""
        planned = self._planned
        try:
            if self._plain:
                return type(item) not in _SLOW and len(item) == planned[i]  # type: ignore[index]
            if self._key is not None:
                value = item[self._key]
                return type(value) not in _SLOW and len(value) == planned[i]  # type: ignore[index]
        except Exception:  # the full check names what is wrong
            return False
        return False

    def _index(self, index: Any) -> int:
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(
                f"index must be an int (a sampler's index), got {type(index).__name__} {index!r}"
            ) from None
        n = int(self.lengths.shape[0])
        if not 0 <= i < n:
            hint = (
                "; a PackingSampler with oversize='split' yields pieces as codes index + piece * N:"
                " serve them with PieceDataset(sampler.checked(dataset), capacity=...)"
                if i >= n
                else ""
            )
            raise IndexError(f"index must be in [0, {n}), got {i}{hint}")
        return i

    def _check(self, i: int, item: Any) -> None:
        actual = _measure(item, self.field, self.columns, i)
        row = self.lengths[i]
        if self.columns:
            planned: Any = tuple(int(x) for x in row)
            same = actual == planned
        else:
            planned = int(row)
            same = actual == planned
        if not same:
            raise ValueError(_mismatch(i, planned, actual))

    def __repr__(self) -> str:
        return (
            f"CheckedDataset({type(self.dataset).__name__}, n={len(self)}, field={self.field!r}, "
            f"verified={self.verified})"
        )


_SLOW = frozenset((dict, str, bytes))  # sized, but not token sequences: the full check says why


def _mismatch(i: int, planned: Any, actual: Any) -> str:
    return (
        f"dataset item {i} has length {actual}, but the sampler planned {planned}: the lengths "
        "were not computed from this dataset (or it was changed since: reordered, filtered, "
        "truncated)"
    )


def _check_field(field: Any, columns: int) -> Any:
    """Check ``field`` against the lengths' shape up front."""
    if field is None or callable(field):
        return field
    if isinstance(field, str):
        if not field:
            raise ValueError("field must be a non-empty key name, got ''")
        if columns:
            raise TypeError(
                f"field must be a tuple of {columns} key names for (N, {columns}) lengths (one "
                f"per column, e.g. ('source', 'target')), got the single key {field!r}"
            )
        return field
    if isinstance(field, (tuple, list)):
        names = tuple(field)
        bad = [f for f in names if not isinstance(f, str) or not f]
        if bad:
            raise TypeError(f"field must be a tuple of non-empty key names, got {field!r}")
        if not names:
            raise ValueError("field must name at least one column, got an empty tuple")
        if not columns:
            raise ValueError(
                f"field {field!r} names {len(names)} columns, but the lengths have shape (N,); "
                f"give (N, {len(names)}) lengths, or one key (field='input_ids')"
            )
        if len(names) != columns:
            raise ValueError(
                f"field {field!r} names {len(names)} columns, but the lengths have shape "
                f"(N, {columns}); give {columns} names"
            )
        return names
    raise TypeError(
        "field must be None, a key name, a tuple of key names or a function item -> length, got "
        f"{type(field).__name__} {field!r}"
    )


def _size(value: Any, i: int, what: str) -> int:
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError(
            f"dataset item {i}{what} must be a sequence of tokens, got {type(value).__name__}"
        )
    try:
        return len(value)
    except TypeError:
        raise TypeError(
            f"dataset item {i}{what} must be a sized sequence of tokens, got {type(value).__name__}"
        ) from None


def _value(item: Any, key: str, i: int) -> Any:
    if not isinstance(item, Mapping):
        raise TypeError(
            f"dataset item {i} must be a mapping with key {key!r} (field={key!r}), got "
            f"{type(item).__name__}"
        )
    try:
        return item[key]
    except KeyError:
        raise ValueError(
            f"dataset item {i} has no key {key!r} (field={key!r}); its keys are {list(item)}"
        ) from None


def _measure(item: Any, field: Any, columns: int, i: int) -> Any:
    """The length of an item (a tuple of ints for (N, F) lengths)."""
    if field is None:
        if isinstance(item, Mapping):
            keys = list(item)
            guess = "input_ids" if "input_ids" in item else (keys[0] if keys else "input_ids")
            raise TypeError(
                f"dataset item {i} is a mapping (keys {keys}): say which value the lengths "
                f"measure, e.g. field={guess!r}, or field=lambda row: len(row[{guess!r}])"
            )
        if not columns:
            return _size(item, i, "")
        parts = list(item) if isinstance(item, (tuple, list)) else None
        if parts is None or len(parts) != columns:
            raise TypeError(
                f"dataset item {i} must be a tuple of {columns} token sequences for (N, "
                f"{columns}) lengths (or pass field=('source', 'target')), got "
                f"{type(item).__name__}"
            )
        return tuple(_size(p, i, f"[{k}]") for k, p in enumerate(parts))
    if isinstance(field, str):
        return _size(_value(item, field, i), i, f"[{field!r}]")
    if isinstance(field, tuple):
        return tuple(_size(_value(item, k, i), i, f"[{k!r}]") for k in field)
    out = field(item)
    if columns:
        if not isinstance(out, (tuple, list)) or len(out) != columns or not all(map(_is_int, out)):
            raise TypeError(
                f"field function must return a tuple of {columns} ints for (N, {columns}) "
                f"lengths, got {out!r} for item {i}"
            )
        return tuple(int(x) for x in out)
    if not _is_int(out):
        raise TypeError(
            f"field function must return an int length, got {type(out).__name__} {out!r} for "
            f"item {i}"
        )
    return int(out)


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


# --------------------------------------------------------------------------- the Arrow path


def _arrow_check(dataset: Any, lengths: np.ndarray, field: Any) -> bool:
    """Check a ``datasets.Dataset`` whole from its list offsets; True when done.

    False (check per item instead) when the dataset is not Arrow-backed, ``field`` names no
    column (None or a function) or the dataset has a custom transform (its items are not its
    table's rows).
    """
    hf = sys.modules.get("datasets")
    if hf is None or not isinstance(dataset, hf.Dataset) or not isinstance(field, (str, tuple)):
        return False
    if dataset.format.get("type") == "custom":
        return False
    names = (field,) if isinstance(field, str) else field
    call = f"CheckedDataset(field={field!r})"
    cols, masks = [], []
    for name in names:  # each column's lengths from its offsets, in the dataset's row order
        sizes, nulls = list_lengths(dataset, name, call, param="field")
        cols.append(sizes)
        masks.append(np.zeros(sizes.shape, bool) if nulls is None else nulls)
    actual = np.stack(cols, axis=1) if len(cols) > 1 else cols[0]
    nulls = np.stack(masks, axis=1) if len(cols) > 1 else masks[0]
    planned = lengths.reshape(actual.shape) if len(cols) == 1 else lengths
    bad = nulls | (actual != planned)
    if bad.ndim == 2:
        bad = bad.any(axis=1)
    if bad.any():
        where = np.flatnonzero(bad)
        i = int(where[0])
        got: Any = actual[i]
        if got.ndim:
            got = tuple(None if null else int(x) for x, null in zip(got, nulls[i], strict=True))
        else:
            got = None if nulls[i] else int(got)
        row = lengths[i]
        want: Any = tuple(int(x) for x in row) if row.ndim else int(row)
        raise ValueError(_mismatch(i, want, got) + f"; {where.size} of {bad.size} items differ")
    return True
