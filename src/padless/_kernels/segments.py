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
