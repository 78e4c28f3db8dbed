"""LM streams: a keyed permutation of [0, n) evaluated one index at a time, and row gathers."""

from __future__ import annotations

import numpy as np
from numba import njit

from .rng import SplitMix, _mix64, mix64_reference

FEISTEL_ROUNDS = 6


def feistel_round_keys(key: int) -> np.ndarray:
    """Round keys of the LM-stream permutation: the first outputs of ``SplitMix(key)``."""
    gen = SplitMix(key)
    return np.array([gen.next64() for _ in range(FEISTEL_ROUNDS)], dtype=np.uint64)


@njit(cache=True, inline="always")
def _feistel_one(i, n, bits, round_keys):  # pragma: no cover - compiled
    """Image of ``i`` under the keyed permutation of [0, n); ``2**bits`` is the next power >= n.

    Each round maps ``x = L·2^b + R`` (L of a bits, R of b bits) to ``R·2^a + (L ^ F(R))``, a
    bijection of [0, 2^bits) for any split a + b = bits; the split alternates so odd widths work.
    Cycle walking re-applies the network until the value falls below n.
    """
    one = np.uint64(1)
    x = np.uint64(i)
    limit = np.uint64(n)
    while True:
        right = np.uint64(bits >> 1)
        left = np.uint64(bits) - right
        for r in range(round_keys.shape[0]):
            rmask = (one << right) - one
            lmask = (one << left) - one
            hi = x >> right
            lo = x & rmask
            f = _mix64(lo ^ round_keys[r]) & lmask
            x = (lo << left) | (hi ^ f)
            tmp = left
            left = right
            right = tmp
        if x < limit:
            return np.int64(x)


@njit(cache=True)
def feistel_permute(ids, n, round_keys):  # pragma: no cover - compiled
    """Images of ``ids`` (each in [0, n)) under the keyed permutation of [0, n)."""
    bits = 0
    while (np.int64(1) << bits) < n:
        bits += 1
    out = np.empty(ids.shape[0], np.int64)
    for k in range(ids.shape[0]):
        out[k] = _feistel_one(ids[k], n, bits, round_keys)
    return out


def _feistel_one_reference(i: int, n: int, round_keys: list[int]) -> int:
    bits = max(n - 1, 0).bit_length()
    x = i
    while True:
        right = bits >> 1
        left = bits - right
        for k in round_keys:
            hi, lo = x >> right, x & ((1 << right) - 1)
            z = mix64_reference(lo ^ k)
            x = (lo << left) | (hi ^ (z & ((1 << left) - 1)))
            left, right = right, left
        if x < n:
            return x


def feistel_permute_reference(ids: np.ndarray, n: int, round_keys: np.ndarray) -> np.ndarray:
    keys = [int(k) for k in round_keys]
    return np.array([_feistel_one_reference(int(i), n, keys) for i in ids], dtype=np.int64)


@njit(cache=True, inline="always")
def _gather_rows(src, starts, x, y):  # pragma: no cover - compiled
    w = x.shape[1]
    # First touch one element per 64-byte line of every row: the loads are independent, so the
    # core keeps many cache misses in flight; the copy below then reads from cache.
    step = max(64 // src.itemsize, 1)
    acc = 0
    for b in range(starts.shape[0]):
        row = src[starts[b] : starts[b] + w + 1]
        for t in range(0, w + 1, step):
            acc += row[t]
    # Loops over slices (not src[s + t]) so that LLVM sees no index wraparound and vectorises.
    for b in range(starts.shape[0]):
        s = starts[b]
        xs = src[s : s + w]
        ys = src[s + 1 : s + 1 + w]
        xb = x[b]
        yb = y[b]
        for t in range(w):
            xb[t] = xs[t]
        for t in range(w):
            yb[t] = ys[t]
    return acc


@njit(cache=True)
def lm_gather(src, starts, x, y):  # pragma: no cover - compiled
    """Row b of x is ``src[starts[b]:starts[b] + w]`` and row b of y the same shifted by one."""
    _gather_rows(src, starts, x, y)


def lm_gather_reference(src: np.ndarray, starts: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
    w = x.shape[1]
    cols = np.arange(w, dtype=np.int64)
    x[...] = src[starts[:, None] + cols].astype(x.dtype)
    y[...] = src[starts[:, None] + cols + 1].astype(y.dtype)


@njit(cache=True)
def lm_random_batch(src, first, n, offset, round_keys, x, y):  # pragma: no cover - compiled
    """Fill x, y with the subsequences at shuffled positions ``first, first + 1, …`` (mod n).

    Position p holds subsequence ``perm(p mod n)``, which starts at token
    ``offset + perm(p mod n) · num_steps`` with ``num_steps = x.shape[1]``.
    """
    bits = 0
    while (np.int64(1) << bits) < n:
        bits += 1
    w = x.shape[1]
    starts = np.empty(x.shape[0], np.int64)
    for b in range(x.shape[0]):
        starts[b] = offset + _feistel_one((first + b) % n, n, bits, round_keys) * w
    _gather_rows(src, starts, x, y)


def lm_random_batch_reference(
    src: np.ndarray,
    first: int,
    n: int,
    offset: int,
    round_keys: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
) -> None:
    rows = x.shape[0]
    ids = (first + np.arange(rows, dtype=np.int64)) % n
    starts = offset + feistel_permute_reference(ids, n, round_keys) * x.shape[1]
    lm_gather_reference(src, starts, x, y)
