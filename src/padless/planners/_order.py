"""Length order with ties broken at random from (seed, epoch), by counting sort."""

from __future__ import annotations

import numpy as np

from .. import _kernels as K
from ..core import _rng

#: the field sort orders of 2-D lengths: the last field first (padless's default: the target
#: of a (source, target) pair), or the first (fairseq's ``ordered_indices``: by source length,
#: then by target length)
SORTS = ("target_first", "source_first")


def _key_fields(num_fields: int, sort: str = "target_first") -> list[int]:
    """Sort priority of fields: the last, then the first, then the rest; ``"source_first"``:
    the first, then the last, then the rest."""
    if sort == "source_first":
        return [0, num_fields - 1, *range(1, num_fields - 1)][:num_fields]
    return [num_fields - 1, *range(num_fields - 1)]


def group_keys(lengths: np.ndarray, sort: str = "target_first") -> tuple[np.ndarray, int]:
    """Dense-enough int keys whose order is the length order, and their range.

    1-D lengths are their own keys. (N, F) lengths become a mixed-radix composite. When the range
    would be far larger than N, keys are replaced by their ranks among the distinct values, which
    keeps the same groups in the same order (and so the same random draws).
    """
    n = lengths.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64), 1
    small = 2 * n + (1 << 16)
    if lengths.ndim == 1:
        span = int(lengths.max()) + 1
        if span <= small:
            return lengths, span
        uniq, ranks = np.unique(lengths, return_inverse=True)
        return ranks.astype(np.int64).ravel(), int(uniq.size)
    fields = _key_fields(lengths.shape[1], sort)
    radices = [int(lengths[:, f].max()) + 1 for f in fields]
    span = 1
    for r in radices:
        span *= r
    if span <= small:
        key = np.zeros(n, dtype=np.int64)
        for f, r in zip(fields, radices, strict=True):
            key *= r
            key += lengths[:, f]
        return key, span
    uniq, ranks = np.unique(lengths[:, fields], axis=0, return_inverse=True)
    return ranks.astype(np.int64).ravel(), int(uniq.shape[0])


def length_order(
    lengths: np.ndarray,
    seed: int,
    epoch: int,
    stream: int = _rng.TIE_BREAK,
    names: np.ndarray | None = None,
    sort: str = "target_first",
) -> tuple[np.ndarray, np.ndarray]:
    """Indices by increasing length (2-D: last field, then the first, then the rest; with
    ``sort="source_first"`` the first field, then the last, then the rest).

    Ties come in a uniformly random order drawn from (seed, epoch, stream). Returns
    ``(order, starts)``: ``starts`` bounds the runs of equal length (or length tuple), some empty.
    ``names`` (int64, one per sequence): the order holds ``names[i]`` for each index ``i``,
    exactly ``names[order]`` (the counting sort writes them: no gather after).
    Cost: O(N + max length) time and memory (a counting sort, then a Fisher-Yates pass per run).
    """
    return keys_order(*group_keys(lengths, sort), seed, epoch, stream, names=names)


def keys_order(
    keys: np.ndarray,
    span: int,
    seed: int,
    epoch: int,
    stream: int = _rng.TIE_BREAK,
    names: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`length_order` of the keys :func:`group_keys` gave (``span`` of them)."""
    if names is None:
        order, starts = K.counting_order(keys, span)
    else:
        order, starts = K.counting_order_named(keys, span, names)
    K.shuffle_runs(order, starts, _rng.key(seed, epoch, stream))
    return order, starts


def run_sizes(lengths: np.ndarray, order: np.ndarray, starts: np.ndarray) -> np.ndarray | None:
    """The size of every run of an order from :func:`length_order`, when 1-D runs are lengths.

    Runs are indexed by the length itself when the last (longest) run's index is that length;
    then run k holds length k (an O(1) check, no pass over the lengths). None otherwise (2-D, or
    lengths ranked because they were too sparse): gather per-position sizes instead.
    """
    if lengths.ndim == 1 and (order.size == 0 or int(lengths[order[-1]]) == starts.size - 2):
        return np.arange(starts.size - 1, dtype=np.int64)
    return None
