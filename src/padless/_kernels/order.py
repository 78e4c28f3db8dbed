"""Length order: a stable counting sort of small int keys, then a Fisher-Yates pass per run."""

from __future__ import annotations

import numpy as np

from .. import _core
from .rng import SplitMix


def counting_order(keys: np.ndarray, num_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable counting sort of small non-negative int keys (each below ``num_keys``).

    Returns ``(order, starts)``: ``order`` lists positions by increasing key (ties in input order)
    and ``starts[k]:starts[k+1]`` is the run of key k. O(n + num_keys) time and memory.
    """
    return _core.counting_order(keys, int(num_keys))


def counting_order_reference(keys: np.ndarray, num_keys: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(keys, kind="stable").astype(np.int64)
    counts = np.bincount(keys, minlength=num_keys)[:num_keys]
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return order, starts


def counting_order_named(
    keys: np.ndarray, num_keys: int, names: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`counting_order` with ``names[i]`` in place of each position ``i`` in the order
    (``names[order]``, without the gather: the sort of a subset named by its indices in the
    whole corpus). ``names`` is int64, one per key."""
    return _core.counting_order_named(keys, int(num_keys), names)


def counting_order_named_reference(
    keys: np.ndarray, num_keys: int, names: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    order, starts = counting_order_reference(keys, num_keys)
    return names[order], starts


def shuffle_runs(values: np.ndarray, starts: np.ndarray, key: int | np.uint64) -> None:
    """Shuffle ``values[starts[r]:starts[r+1]]`` in place for every run r (Fisher-Yates).

    ``values`` is an int64/int32/uint32/uint16 array (written in place: no other dtype).
    """
    _core.shuffle_runs(values, starts, int(key))


def shuffle_runs_reference(values: np.ndarray, starts: np.ndarray, key: int) -> None:
    gen = SplitMix(key)
    for r in range(len(starts) - 1):
        lo, hi = int(starts[r]), int(starts[r + 1])
        for i in range(hi - 1, lo, -1):
            j = lo + gen.below(i - lo + 1)
            values[i], values[j] = values[j], values[i]
