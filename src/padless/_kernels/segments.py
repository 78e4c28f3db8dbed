"""Per-segment figures of a plan (batch ``b`` is ``values[offsets[b]:offsets[b + 1]]``)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def segment_max(values, offsets):  # pragma: no cover - compiled
    """Max of ``values[offsets[b]:offsets[b+1]]`` per segment (0 for an empty one), in the
    values' dtype (non-negative values: lengths, or float costs)."""
    nb = offsets.shape[0] - 1
    out = np.zeros(nb, values.dtype)
    for b in range(nb):
        m = values.dtype.type(0)
        for i in range(offsets[b], offsets[b + 1]):
            if values[i] > m:
                m = values[i]
        out[b] = m
    return out


def segment_max_reference(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    return np.array(
        [values[a:b].max() if b > a else 0 for a, b in zip(offsets[:-1], offsets[1:], strict=True)],
        dtype=values.dtype,
    )
