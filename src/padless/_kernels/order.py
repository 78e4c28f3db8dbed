"""Length order: a stable counting sort of small int keys, then a Fisher-Yates pass per run."""

from __future__ import annotations

import numpy as np
from numba import njit

from .rng import SplitMix, _below


@njit(cache=True)
def counting_order(keys, num_keys):  # pragma: no cover - compiled
    """Stable counting sort of small non-negative int keys.

    Returns ``(order, starts)``: ``order`` lists positions by increasing key (ties in input order)
    and ``starts[k]:starts[k+1]`` is the run of key k. O(n + num_keys) time and memory.
    """
    n = keys.shape[0]
    starts = np.zeros(num_keys + 1, np.int64)
    for i in range(n):
        starts[keys[i] + 1] += 1
    for k in range(num_keys):
        starts[k + 1] += starts[k]
    fill = starts[:num_keys].copy()
    order = np.empty(n, np.int64)
    for i in range(n):
        k = keys[i]
        order[fill[k]] = i
        fill[k] += 1
    return order, starts


def counting_order_reference(keys: np.ndarray, num_keys: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(keys, kind="stable").astype(np.int64)
    counts = np.bincount(keys, minlength=num_keys)[:num_keys]
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return order, starts


@njit(cache=True)
def shuffle_runs(values, starts, key):  # pragma: no cover - compiled
    """Shuffle ``values[starts[r]:starts[r+1]]`` in place for every run r (Fisher-Yates)."""
    state = np.empty(1, np.uint64)
    state[0] = key
    for r in range(starts.shape[0] - 1):
        lo = starts[r]
        for i in range(starts[r + 1] - 1, lo, -1):
            j = lo + _below(state, i - lo + 1)
            tmp = values[i]
            values[i] = values[j]
            values[j] = tmp


def shuffle_runs_reference(values: np.ndarray, starts: np.ndarray, key: int) -> None:
    gen = SplitMix(key)
    for r in range(len(starts) - 1):
        lo, hi = int(starts[r]), int(starts[r + 1])
        for i in range(hi - 1, lo, -1):
            j = lo + gen.below(i - lo + 1)
            values[i], values[j] = values[j], values[i]
