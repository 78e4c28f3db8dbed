"""Whole planned batches built from a token store in one compiled pass.

- :func:`next_fit_count`: how many rows next fit cuts a packed batch's items into (the rows the
  plan opened, as :func:`padless.planners.packing.next_fit_rows` finds them).
- :func:`packed_batch`: a packed batch's ids, labels, position ids, segment ids and
  ``cu_seqlens``, the rows' padding tails as segments of their own (``collate_packed``'s layout).
- :func:`padded_batch`: a padded batch's ids and attention mask (``collate_padded``'s layout).

The tokens are read straight from the store's (memory-mapped) array, of any token dtype, and
written as int64 or int32 into the caller's buffers. Each kernel has its plain numpy
``*_reference`` twin below it.
"""

from __future__ import annotations

import numpy as np

from .. import _core


def next_fit_count(lengths: np.ndarray, capacity: int, max_per_row: int) -> int:
    """Rows next fit cuts ``lengths`` into: a new row when the next item does not fit in the
    current one or it holds ``max_per_row`` items (0: no cap). ValueError for a length outside
    [0, capacity].

    >>> next_fit_count(np.array([6, 2, 5, 3]), 8, 0), next_fit_count(np.array([1, 1, 1]), 8, 2)
    (2, 2)
    """
    return _core.next_fit_count(lengths, capacity, max_per_row)


def next_fit_count_reference(lengths: np.ndarray, capacity: int, max_per_row: int) -> int:
    rows = used = count = 0
    for s in lengths.tolist():
        if not 0 <= s <= capacity:
            raise ValueError(f"a length outside [0, {capacity}]: {s}")
        if count and (used + s > capacity or count == max_per_row):
            used = count = 0
        if count == 0:
            rows += 1
        used += s
        count += 1
    return rows


def packed_batch(
    tokens: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    capacity: int,
    max_per_row: int,
    rows: int,
    flatten: bool,
    pad: int,
    ignore: int,
    position_start: int,
    ids: np.ndarray,
    labels: np.ndarray,
    positions: np.ndarray,
    seq_idx: np.ndarray,
    cu: np.ndarray,
) -> tuple[int, int]:
    """Write a packed batch of the items ``tokens[starts[k]:starts[k] + lengths[k]]``.

    Rows of ``capacity`` (``rows`` of them, at least the next-fit count; the items in order, then
    each row's padding tail as a segment), or with ``flatten`` one row of the items back to back.
    Per output token: ``ids`` (int64 or int32; ``pad`` on padding), ``labels`` (ids' dtype; the
    token, ``ignore`` at each item's first token and on padding), ``positions`` (int64,
    restarting at ``position_start`` per segment), ``seq_idx`` (int32 segment number); ``cu``
    (int32, at least segments + 1 entries) the segment bounds. Returns (segments, the longest
    segment). Every rule (lengths in [0, capacity], spans inside ``tokens``, sizes, int32 room)
    is checked before anything is written: ValueError naming it; a wrong output dtype is a
    TypeError.

    Cost: one pass over the output, the tokens read once.

    >>> tokens = np.arange(10, 20, dtype=np.uint16)
    >>> ids, labels = np.empty(8, np.int64), np.empty(8, np.int64)
    >>> pos, seg, cu = np.empty(8, np.int64), np.empty(8, np.int32), np.empty(5, np.int32)
    >>> packed_batch(tokens, np.array([0, 5]), np.array([3, 2]), 4, 0, 2, False, 0, -100, 0,
    ...              ids, labels, pos, seg, cu)
    (4, 3)
    >>> ids.tolist(), labels.tolist(), pos.tolist(), cu.tolist()[:5]
    ([10, 11, 12, 0, 15, 16, 0, 0], [-100, 11, 12, -100, -100, 16, -100, -100], [0, 1, 2, 0, 0, 1, 0, 1], [0, 3, 4, 6, 8])
    """
    segments, longest = _core.packed_batch(
        tokens, starts, lengths, capacity, max_per_row, rows, flatten, pad, ignore,
        position_start, ids, labels, positions, seq_idx, cu,
    )  # fmt: skip
    return int(segments), int(longest)


def packed_batch_reference(
    tokens: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    capacity: int,
    max_per_row: int,
    rows: int,
    flatten: bool,
    pad: int,
    ignore: int,
    position_start: int,
    ids: np.ndarray,
    labels: np.ndarray,
    positions: np.ndarray,
    seq_idx: np.ndarray,
    cu: np.ndarray,
) -> tuple[int, int]:
    lens = lengths.tolist()
    items = [tokens[s : s + n].astype(np.int64) for s, n in zip(starts.tolist(), lens, strict=True)]
    segs: list[tuple[np.ndarray, bool]] = []  # (tokens, real)
    if flatten:
        segs = [(t, True) for t in items]
    else:
        k = 0
        for _ in range(rows):
            used = count = 0
            while k < len(items) and not (
                count and (used + lens[k] > capacity or count == max_per_row)
            ):
                segs.append((items[k], True))
                used, count, k = used + lens[k], count + 1, k + 1
            if used < capacity:
                segs.append((np.full(capacity - used, pad, np.int64), False))
        if k != len(items):
            raise ValueError("the items need more rows")
    at = 0
    cu[0] = 0
    for i, (part, real) in enumerate(segs):
        n = part.size
        ids[at : at + n] = part
        labels[at : at + n] = part if real else ignore
        if real and n:
            labels[at] = ignore
        positions[at : at + n] = np.arange(position_start, position_start + n)
        seq_idx[at : at + n] = i
        cu[i + 1] = at + n
        at += n
    return len(segs), max((p.size for p, _ in segs), default=0)


def padded_batch(
    tokens: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    rows: int,
    width: int,
    pad: int,
    ids: np.ndarray,
    mask: np.ndarray,
) -> None:
    """Write a padded batch: row ``r < len(starts)`` holds item r's tokens then ``pad`` (``ids``,
    int64 or int32, ``rows * width`` entries), ``mask`` (int64) 1 on the tokens and 0 after; rows
    past the items are padding with a zero mask. Lengths must be in [0, width], spans inside
    ``tokens`` (ValueError, before anything is written).

    Cost: one pass over the output, the tokens read once.

    >>> ids, mask = np.empty(6, np.int64), np.empty(6, np.int64)
    >>> padded_batch(np.arange(5, dtype=np.int32), np.array([1]), np.array([2]), 2, 3, 9, ids, mask)
    >>> ids.tolist(), mask.tolist()
    ([1, 2, 9, 9, 9, 9], [1, 1, 0, 0, 0, 0])
    """
    _core.padded_batch(tokens, starts, lengths, rows, width, pad, ids, mask)


def padded_batch_reference(
    tokens: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    rows: int,
    width: int,
    pad: int,
    ids: np.ndarray,
    mask: np.ndarray,
) -> None:
    if len(starts) > rows or any(not 0 <= n <= width for n in lengths.tolist()):
        raise ValueError("the items do not fit the rows")
    grid, cover = ids.reshape(rows, width), mask.reshape(rows, width)
    grid[...] = pad
    cover[...] = 0
    for r, (s, n) in enumerate(zip(starts.tolist(), lengths.tolist(), strict=True)):
        grid[r, :n] = tokens[s : s + n]
        cover[r, :n] = 1
