"""Per-segment figures of a plan (batch ``b`` is ``values[offsets[b]:offsets[b + 1]]``)."""

from __future__ import annotations

import numpy as np

from .. import _core


def segment_max(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Max of ``values[offsets[b]:offsets[b+1]]`` per segment (0 for an empty one), in the
    values' dtype (non-negative values: lengths, or float costs)."""
    return _core.segment_max(values, offsets)


def segment_max_reference(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    return np.array(
        [values[a:b].max() if b > a else 0 for a, b in zip(offsets[:-1], offsets[1:], strict=True)],
        dtype=values.dtype,
    )


def take_segments(values: np.ndarray, offsets: np.ndarray, picked: np.ndarray) -> np.ndarray:
    """The values of segments ``picked``, one after the other (int64): the entries of some of a
    plan's batches. A picked segment out of range is an IndexError."""
    return _core.take_segments(values, offsets, picked)


def take_segments_reference(
    values: np.ndarray, offsets: np.ndarray, picked: np.ndarray
) -> np.ndarray:
    parts = [values[offsets[b] : offsets[b + 1]] for b in picked.tolist()]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def unnamed_segments(
    values: np.ndarray, offsets: np.ndarray, picked: np.ndarray, n: int
) -> np.ndarray:
    """The indices in ``[0, n)`` that no value of segments ``picked`` names (``v`` names
    ``v % n``: a piece code names its sequence), ascending int64, in one pass with no array of
    the picked values: what an epoch left after delivering some of a plan's batches."""
    return _core.unnamed_segments(values, offsets, picked, int(n))


def unnamed_segments_reference(
    values: np.ndarray, offsets: np.ndarray, picked: np.ndarray, n: int
) -> np.ndarray:
    named = np.zeros(n, dtype=bool)
    named[take_segments_reference(values, offsets, picked) % n] = True
    return np.flatnonzero(~named).astype(np.int64)


def offset_list(values: np.ndarray, lo: int, hi: int, offset: int) -> list[int]:
    """``(values[lo:hi] + offset).tolist()`` in one pass (int64 values; a sum past int64 is a
    ValueError): a batch in its step's form, as a sampler yields it."""
    out: list[int] = _core.offset_list(values, lo, hi, offset)  # ints: nanobind checks them
    return out


def offset_list_reference(values: np.ndarray, lo: int, hi: int, offset: int) -> list[int]:
    out = [int(v) + int(offset) for v in values[lo:hi].tolist()]
    if any(x >= 1 << 63 or x < -(1 << 63) for x in out):
        raise ValueError("offset_list: a value plus offset passes int64")
    return out
