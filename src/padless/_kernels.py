"""Compiled hot loops, each with a plain reference beside it.

Every ``@njit`` function here has a ``*_reference`` twin written in plain Python/numpy; the tests
prove they agree on random inputs. Kernels compile on first call and are cached on disk
(``cache=True``), so ``import padless`` compiles nothing.

Random numbers inside kernels come from a splitmix64 counter seeded with a 64-bit key that
``padless._rng.key`` derives from ``np.random.SeedSequence([seed, epoch, stream])``; bounded draws
use Lemire's multiply-and-reject method, so they are exactly uniform.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_MASK32 = np.uint64(0xFFFFFFFF)
_MASK64 = (1 << 64) - 1


# --------------------------------------------------------------------------- random numbers


@njit(cache=True, inline="always")
def _next64(state):  # pragma: no cover - compiled
    state[0] += _GOLDEN
    z = state[0]
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, inline="always")
def _below(state, bound):  # pragma: no cover - compiled
    """Uniform int in [0, bound) for 1 <= bound < 2**32 (Lemire's method)."""
    b = np.uint64(bound)
    m = (_next64(state) >> np.uint64(32)) * b
    low = m & _MASK32
    if low < b:
        limit = ((_MASK32 + np.uint64(1)) - b) % b
        while low < limit:
            m = (_next64(state) >> np.uint64(32)) * b
            low = m & _MASK32
    return np.int64(m >> np.uint64(32))


class SplitMix:
    """Plain-Python twin of the compiled generator (same outputs, for references and tests)."""

    def __init__(self, key: int) -> None:
        self.state = int(key) & _MASK64

    def next64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)

    def below(self, bound: int) -> int:
        m = (self.next64() >> 32) * bound
        low = m & 0xFFFFFFFF
        if low < bound:
            limit = ((1 << 32) - bound) % bound
            while low < limit:
                m = (self.next64() >> 32) * bound
                low = m & 0xFFFFFFFF
        return m >> 32


@njit(cache=True)
def random_below(key, bounds):  # pragma: no cover - compiled
    """Draw one uniform int below each of ``bounds`` from the stream ``key`` (for tests)."""
    state = np.empty(1, np.uint64)
    state[0] = key
    out = np.empty(bounds.shape[0], np.int64)
    for i in range(bounds.shape[0]):
        out[i] = _below(state, bounds[i])
    return out


def random_below_reference(key: int, bounds: np.ndarray) -> np.ndarray:
    gen = SplitMix(key)
    return np.array([gen.below(int(b)) for b in bounds], dtype=np.int64)


# --------------------------------------------------------------------------- ordering


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


# --------------------------------------------------------------------------- hashing


@njit(cache=True, inline="always")
def _mix64(z):  # pragma: no cover - compiled
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def hash_ints(values, seed):  # pragma: no cover - compiled
    """64-bit hash of an int64 array (order-sensitive), four independent lanes; ~0.3 ns per value.

    Lane j chains the values at positions i ≡ j (mod 4); the lanes are then mixed in order.
    """
    n = values.shape[0]
    base = np.uint64(seed) ^ np.uint64(n)
    h0 = base
    h1 = base + _GOLDEN
    h2 = base + _MIX1
    h3 = base + _MIX2
    quads = n // 4
    for q in range(quads):
        i = 4 * q
        h0 = _mix64(np.uint64(values[i]) + h0 + _GOLDEN)
        h1 = _mix64(np.uint64(values[i + 1]) + h1 + _GOLDEN)
        h2 = _mix64(np.uint64(values[i + 2]) + h2 + _GOLDEN)
        h3 = _mix64(np.uint64(values[i + 3]) + h3 + _GOLDEN)
    for i in range(4 * quads, n):
        h0 = _mix64(np.uint64(values[i]) + h0 + _GOLDEN)
    h = _mix64(h0 + _GOLDEN)
    h = _mix64(h ^ h1)
    h = _mix64(h ^ h2)
    return _mix64(h ^ h3)


def hash_ints_reference(values: np.ndarray, seed: int) -> int:
    def mix(z: int) -> int:
        z &= _MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)

    vals = [v & _MASK64 for v in values.tolist()]
    n = len(vals)
    base = (seed ^ n) & _MASK64
    lanes = [base, base + 0x9E3779B97F4A7C15, base + 0xBF58476D1CE4E5B9, base + 0x94D049BB133111EB]
    lanes = [x & _MASK64 for x in lanes]
    quads = n // 4
    for i in range(4 * quads):
        lanes[i % 4] = mix(vals[i] + lanes[i % 4] + 0x9E3779B97F4A7C15)
    for i in range(4 * quads, n):
        lanes[0] = mix(vals[i] + lanes[0] + 0x9E3779B97F4A7C15)
    h = mix(lanes[0] + 0x9E3779B97F4A7C15)
    for lane in lanes[1:]:
        h = mix(h ^ lane)
    return h


# --------------------------------------------------------------------------- token budget


@njit(cache=True)
def _budget_step(pos, s, ends, closed, start, cut, batch_max, tail_max, max_tokens, max_sentences, multiple):  # fmt: skip  # pragma: no cover
    """One item of the greedy rule; returns the new (closed, start, cut, batch_max, tail_max).

    The open batch ``[start, cut)`` grows by a tail ``[cut, pos]``; the tail joins it whenever
    the union is small (< multiple) or a multiple of ``multiple``. When batch + tail would break
    a limit (0 = none), the batch closes and the tail opens the next one; if the tail alone
    (with the new item) breaks max_tokens, the tail without the new item closes too.
    """
    if s > tail_max:
        tail_max = s
    count = pos + 1 - start
    longest = batch_max if batch_max > tail_max else tail_max
    over = (max_sentences > 0 and count > max_sentences) or (
        max_tokens > 0 and count * longest > max_tokens
    )
    if over:
        ends[closed] = cut
        closed += 1
        if max_tokens > 0 and tail_max * (pos + 1 - cut) > max_tokens:
            ends[closed] = pos
            closed += 1
            tail_max = s
            start = pos
        else:
            start = cut
        cut = pos + 1
        batch_max = tail_max
        tail_max = 0
    elif count < multiple or count % multiple == 0:
        cut = pos + 1
        batch_max = longest
        tail_max = 0
    return closed, start, cut, batch_max, tail_max


@njit(cache=True)
def budget_ends_runs(values, starts, max_tokens, max_sentences, multiple):  # pragma: no cover
    """Greedy token-budget batching (fairseq's rule, see :func:`_budget_step`); batch ends.

    Positions ``starts[r]:starts[r+1]`` all have size ``values[r]`` (a length-sorted order from a
    counting sort needs no per-position size array); an empty ``starts`` means one position per
    value, i.e. ``values`` are the sizes in order. ``max_tokens``/``max_sentences`` of 0 mean
    "no limit".
    """
    per_item = starts.shape[0] == 0
    n = values.shape[0] if per_item else starts[starts.shape[0] - 1]
    ends = np.empty(n + 1, np.int64)  # pages past the batch count are never touched
    closed, start, cut, batch_max, tail_max = 0, 0, 0, values.dtype.type(0), values.dtype.type(0)
    if per_item:
        for pos in range(n):
            closed, start, cut, batch_max, tail_max = _budget_step(
                pos, values[pos], ends, closed, start, cut, batch_max, tail_max,
                max_tokens, max_sentences, multiple,
            )  # fmt: skip
    else:
        for r in range(starts.shape[0] - 1):
            s = values[r]
            for pos in range(starts[r], starts[r + 1]):
                closed, start, cut, batch_max, tail_max = _budget_step(
                    pos, s, ends, closed, start, cut, batch_max, tail_max,
                    max_tokens, max_sentences, multiple,
                )  # fmt: skip
    if cut > start:
        ends[closed] = cut
        closed += 1
    if n > cut:
        ends[closed] = n
        closed += 1
    return ends[:closed].copy()


_NO_RUNS = np.zeros(0, np.int64)


def budget_ends(
    sizes: np.ndarray, max_tokens: int, max_sentences: int, multiple: int
) -> np.ndarray:
    """:func:`budget_ends_runs` over per-position ``sizes`` (already in order)."""
    return budget_ends_runs(sizes, _NO_RUNS, max_tokens, max_sentences, multiple)


def budget_ends_reference(
    sizes: np.ndarray, max_tokens: int, max_sentences: int, multiple: int
) -> np.ndarray:
    """The same rule written with Python lists, one batch and one tail at a time."""

    def cost(items: list[int]) -> int:
        return len(items) * max(int(sizes[i]) for i in items) if items else 0

    batches: list[list[int]] = []
    batch: list[int] = []
    tail: list[int] = []
    for pos in range(len(sizes)):
        tail.append(pos)
        union = batch + tail
        too_many = max_sentences > 0 and len(union) > max_sentences
        too_big = max_tokens > 0 and cost(union) > max_tokens
        if too_many or too_big:
            batches.append(batch)
            if max_tokens > 0 and cost(tail) > max_tokens:
                batches.append(tail[:-1])
                tail = tail[-1:]
            batch, tail = tail, []
        elif len(union) < multiple or len(union) % multiple == 0:
            batch, tail = union, []
    batches.extend(part for part in (batch, tail) if part)
    ends = np.cumsum([len(b) for b in batches], dtype=np.int64)
    return ends if len(ends) else np.zeros(0, np.int64)


@njit(cache=True)
def segment_max(values, offsets):  # pragma: no cover - compiled
    """Max of ``values[offsets[b]:offsets[b+1]]`` per segment (0 for an empty one)."""
    nb = offsets.shape[0] - 1
    out = np.zeros(nb, np.int64)
    for b in range(nb):
        m = 0
        for i in range(offsets[b], offsets[b + 1]):
            if values[i] > m:
                m = values[i]
        out[b] = m
    return out


def segment_max_reference(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    return np.array(
        [values[a:b].max() if b > a else 0 for a, b in zip(offsets[:-1], offsets[1:], strict=True)],
        dtype=np.int64,
    )


# --------------------------------------------------------------------------- LM streams
# A keyed permutation of [0, n) evaluated one index at a time (no index array), and the row
# gather that cuts (x, y) batches out of a token corpus.

FEISTEL_ROUNDS = 6


def feistel_round_keys(key: int) -> np.ndarray:
    """Round keys of the LM-stream permutation: the first outputs of ``SplitMix(key)``."""
    gen = SplitMix(key)
    return np.array([gen.next64() for _ in range(FEISTEL_ROUNDS)], dtype=np.uint64)


@njit(cache=True, inline="always")
def _fmix64(z):  # pragma: no cover - compiled
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


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
            f = _fmix64(lo ^ round_keys[r]) & lmask
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
            z = lo ^ k
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
            z ^= z >> 31
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


# --------------------------------------------------------------------------- exact length, buckets
# Runs of equal length (or equal bucket) are cut into fixed-size batches; leftovers are merged
# greedily; bucket boundaries come from a DP over the length histogram.


@njit(cache=True)
def exact_split(order, starts, run_size, mode):  # pragma: no cover - compiled
    """Cut run ``r`` of ``order`` (``order[starts[r]:starts[r+1]]``) into batches of ``run_size[r]``.

    A run with ``run_size[r] == 0`` is left out. ``mode`` says what happens to a run's last,
    incomplete batch: 0 keeps it as a smaller batch, 1 or 2 moves its items to ``rest``.
    Kept items are compacted to the front of ``order`` in place (nothing moves when nothing is
    left out). Returns ``(kept, ends, rest, rest_run)``: ``order[:kept]`` holds the batches,
    ``ends`` their ends, then the left-out items in run order with the run each came from.
    O(runs + batches + items moved) time.
    """
    runs = starts.shape[0] - 1
    n_keep = 0
    n_batches = 0
    for r in range(runs):
        count = starts[r + 1] - starts[r]
        size = run_size[r]
        if count == 0 or size == 0:
            continue
        full = count // size
        n_keep += full * size
        n_batches += full
        if mode == 0 and count > full * size:
            n_keep += count - full * size
            n_batches += 1
    n_rest = order.shape[0] - n_keep
    ends = np.empty(n_batches, np.int64)
    rest = np.empty(n_rest, np.int64)
    rest_run = np.empty(n_rest, np.int64)
    k = 0
    b = 0
    q = 0
    for r in range(runs):
        lo = starts[r]
        hi = starts[r + 1]
        size = run_size[r]
        if hi == lo:
            continue
        stop = lo
        if size > 0:
            stop = hi if mode == 0 else lo + ((hi - lo) // size) * size
        if k < lo:
            for i in range(lo, stop):
                order[k + i - lo] = order[i]
        pos = k
        k += stop - lo
        while pos < k:
            pos += size
            ends[b] = pos if pos < k else k
            b += 1
        for i in range(stop, hi):
            rest[q] = order[i]
            rest_run[q] = r
            q += 1
    return n_keep, ends, rest, rest_run


def exact_split_reference(
    order: np.ndarray, starts: np.ndarray, run_size: np.ndarray, mode: int
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    batches: list[list[int]] = []
    rest: list[int] = []
    rest_run: list[int] = []
    for r in range(len(starts) - 1):
        items = [int(i) for i in order[starts[r] : starts[r + 1]]]
        size = int(run_size[r])
        if size == 0:
            rest += items
            rest_run += [r] * len(items)
            continue
        chunks = [items[j : j + size] for j in range(0, len(items), size)]
        if chunks and len(chunks[-1]) < size and mode != 0:
            tail = chunks.pop()
            rest += tail
            rest_run += [r] * len(tail)
        batches += chunks
    flat = [i for batch in batches for i in batch]
    order[: len(flat)] = flat
    ends = np.cumsum([len(batch) for batch in batches], dtype=np.int64)
    return (
        len(flat),
        ends if len(ends) else np.zeros(0, np.int64),
        np.array(rest, dtype=np.int64),
        np.array(rest_run, dtype=np.int64),
    )


@njit(cache=True)
def capped_ends(sizes, caps):  # pragma: no cover - compiled
    """Greedy batches over items in order: a batch holds at most the cap of its longest item.

    Item ``i`` has size ``sizes[i]`` and cap ``caps[i]`` (the batch size its size allows; equal
    sizes must have equal caps). An item joins the open batch when the count stays within the
    cap of the batch's longest item, itself included; otherwise it opens the next batch.
    Returns the batch ends. O(n).
    """
    n = sizes.shape[0]
    ends = np.empty(n, np.int64)
    b = 0
    count = 0
    longest = 0
    cap = 0
    for i in range(n):
        s = sizes[i]
        new_longest = longest
        new_cap = cap
        if count == 0 or s >= longest:
            new_longest = s
            new_cap = caps[i]
        if count > 0 and count + 1 > new_cap:
            ends[b] = i
            b += 1
            count = 0
            new_longest = s
            new_cap = caps[i]
        count += 1
        longest = new_longest
        cap = new_cap
    if count > 0:
        ends[b] = n
        b += 1
    return ends[:b].copy()


def capped_ends_reference(sizes: np.ndarray, caps: np.ndarray) -> np.ndarray:
    ends: list[int] = []
    batch: list[int] = []
    for i in range(len(sizes)):
        trial = batch + [i]
        top = max(int(sizes[j]) for j in trial)
        cap = min(int(caps[j]) for j in trial if int(sizes[j]) == top)
        if batch and len(trial) > cap:
            ends.append(i)
            batch = [i]
        else:
            batch = trial
    if batch:
        ends.append(len(sizes))
    return np.array(ends, dtype=np.int64)


@njit(cache=True)
def least_padding_ends(sizes, caps):  # pragma: no cover - compiled
    """Batch ends over items sorted by size: fewest batches, then least padding among those.

    A batch ``[i, j)`` is allowed when ``j - i <= caps[j - 1]`` (the cap of its longest, last item)
    and pads ``(j - i) · sizes[j - 1] − Σ sizes[i:j]``. Dynamic programming over prefixes with
    (count, padding) compared lexicographically; ties keep the earliest cut. The greedy
    (:func:`capped_ends`) gives the same count but cuts wherever a batch fills, often mid-run of a
    length; this moves cuts to length changes. O(n · max cap) time, O(n) memory.
    """
    n = sizes.shape[0]
    csum = np.zeros(n + 1, np.int64)
    for i in range(n):
        csum[i + 1] = csum[i] + sizes[i]
    best_count = np.zeros(n + 1, np.int64)
    best_pad = np.zeros(n + 1, np.int64)
    back = np.zeros(n + 1, np.int64)
    for j in range(1, n + 1):
        top = sizes[j - 1]
        lo = j - caps[j - 1]
        if lo < 0:
            lo = 0
        if lo > j - 1:
            lo = j - 1
        bc = np.int64(-1)
        bp = np.int64(0)
        bi = np.int64(j - 1)
        for i in range(lo, j):
            c = best_count[i] + 1
            pad = best_pad[i] + (j - i) * top - (csum[j] - csum[i])
            if bc < 0 or c < bc or (c == bc and pad < bp):
                bc = c
                bp = pad
                bi = i
        best_count[j] = bc
        best_pad[j] = bp
        back[j] = bi
    count = best_count[n]
    ends = np.empty(count, np.int64)
    j = n
    for b in range(count - 1, -1, -1):
        ends[b] = j
        j = back[j]
    return ends


def least_padding_ends_reference(sizes: np.ndarray, caps: np.ndarray) -> tuple[int, int]:
    """(fewest batches, least padding among them) by exhaustive search over cut sets (tiny n)."""
    n = len(sizes)
    if n == 0:
        return 0, 0
    best: tuple[int, int] | None = None
    for mask in range(1 << (n - 1)):
        cuts = [i + 1 for i in range(n - 1) if mask >> i & 1] + [n]
        start, pad, ok = 0, 0, True
        for end in cuts:
            if end - start > int(caps[end - 1]):
                ok = False
                break
            pad += (end - start) * int(sizes[end - 1]) - int(sizes[start:end].sum())
            start = end
        if ok and (best is None or (len(cuts), pad) < best):
            best = (len(cuts), pad)
    return best if best is not None else (0, 0)


@njit(cache=True)
def optimal_cuts(values, counts, k):  # pragma: no cover - compiled
    """Split sorted distinct ``values`` (with ``counts``) into ``min(k, L)`` contiguous groups that
    minimise Σ group count × group max; return the index of each group's last value but the last.

    DP over groups with the divide-and-conquer optimisation: the cost (C[j] − C[i])·v[j−1] of a
    group i..j−1 satisfies the quadrangle inequality, so the leftmost best split is monotone in j.
    O(k · L · log L) time, O(k · L) memory (int32 split table); exact int64 arithmetic; ties go to
    the leftmost split.
    """
    n = values.shape[0]
    groups = min(k, n)
    if groups <= 1:
        return np.zeros(0, np.int64)
    csum = np.zeros(n + 1, np.int64)
    for j in range(n):
        csum[j + 1] = csum[j] + counts[j]
    prev = np.empty(n + 1, np.int64)
    cur = np.empty(n + 1, np.int64)
    for j in range(n + 1):
        prev[j] = csum[j] * values[j - 1] if j > 0 else 0
    best = np.zeros((groups + 1, n + 1), np.int32)
    stack = np.empty((130, 4), np.int64)  # depth-first: at most one pending sibling per level
    for m in range(2, groups + 1):
        # cur[j] for j in [m, n]: best cost of the first j values in m groups
        stack[0, 0] = m
        stack[0, 1] = n
        stack[0, 2] = m - 1
        stack[0, 3] = n - 1
        top = 1
        while top > 0:
            top -= 1
            lo = stack[top, 0]
            hi = stack[top, 1]
            olo = stack[top, 2]
            ohi = stack[top, 3]
            if lo > hi:
                continue
            mid = (lo + hi) // 2
            last = ohi if ohi < mid - 1 else mid - 1
            arg = olo
            val = prev[olo] + (csum[mid] - csum[olo]) * values[mid - 1]
            for i in range(olo + 1, last + 1):
                c = prev[i] + (csum[mid] - csum[i]) * values[mid - 1]
                if c < val:
                    val = c
                    arg = i
            cur[mid] = val
            best[m, mid] = np.int32(arg)
            stack[top, 0] = lo
            stack[top, 1] = mid - 1
            stack[top, 2] = olo
            stack[top, 3] = arg
            top += 1
            stack[top, 0] = mid + 1
            stack[top, 1] = hi
            stack[top, 2] = arg
            stack[top, 3] = ohi
            top += 1
        for j in range(m, n + 1):
            prev[j] = cur[j]
    out = np.empty(groups - 1, np.int64)
    j = n
    for m in range(groups, 1, -1):
        i = np.int64(best[m, j])
        out[m - 2] = i - 1
        j = i
    return out


def optimal_cuts_reference(values: np.ndarray, counts: np.ndarray, k: int) -> np.ndarray:
    """The plain O(k · L²) DP with the same leftmost tie rule."""
    n = len(values)
    groups = min(k, n)
    if groups <= 1:
        return np.zeros(0, np.int64)
    csum = [0]
    for c in counts:
        csum.append(csum[-1] + int(c))
    inf = float("inf")
    cost = [[inf] * (n + 1) for _ in range(groups + 1)]
    arg = [[0] * (n + 1) for _ in range(groups + 1)]
    for j in range(1, n + 1):
        cost[1][j] = csum[j] * int(values[j - 1])
    for m in range(2, groups + 1):
        for j in range(m, n + 1):
            for i in range(m - 1, j):
                c = cost[m - 1][i] + (csum[j] - csum[i]) * int(values[j - 1])
                if c < cost[m][j]:
                    cost[m][j] = c
                    arg[m][j] = i
    out = []
    j = n
    for m in range(groups, 1, -1):
        i = arg[m][j]
        out.append(i - 1)
        j = i
    return np.array(out[::-1], dtype=np.int64)


# --------------------------------------------------------------------------- packing
# Best-fit decreasing. Open rows are kept on one LIFO stack per remaining space r in
# [0, capacity]; a 64-ary bit hierarchy over r (bit r set iff stack r is non-empty, one level of
# "word non-empty" bits above another) finds the smallest r >= size in O(log_64 capacity) words.

_DEBRUIJN64 = np.uint64(0x03F79D71B4CB0A89)
_DEBRUIJN_TABLE = np.zeros(64, np.int64)
for _bit in range(64):
    _DEBRUIJN_TABLE[((1 << _bit) * 0x03F79D71B4CB0A89 & _MASK64) >> 58] = _bit
del _bit
_ALL64 = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True, inline="always")
def _lowest_bit(word):  # pragma: no cover - compiled
    """Position of the lowest set bit of a non-zero uint64 (de Bruijn multiplication)."""
    low = word & (~word + np.uint64(1))
    return _DEBRUIJN_TABLE[(low * _DEBRUIJN64) >> np.uint64(58)]


@njit(cache=True)
def _bit_levels(universe):  # pragma: no cover - compiled
    """Word offsets and bit counts of the levels of a bit hierarchy over [0, universe)."""
    offs = np.zeros(16, np.int64)
    nbits = np.zeros(16, np.int64)
    levels = 0
    bits = universe
    total = 0
    while True:
        words = (bits + 63) >> 6
        offs[levels] = total
        nbits[levels] = bits
        total += words
        levels += 1
        if words == 1:
            break
        bits = words
    return offs[:levels].copy(), nbits[:levels].copy(), total


@njit(cache=True, inline="always")
def _bits_set(words, offs, pos):  # pragma: no cover - compiled
    one = np.uint64(1)
    for lev in range(offs.shape[0]):
        k = offs[lev] + (pos >> 6)
        was = words[k]
        words[k] = was | (one << np.uint64(pos & 63))
        if was != 0:
            return
        pos >>= 6


@njit(cache=True, inline="always")
def _bits_clear(words, offs, pos):  # pragma: no cover - compiled
    one = np.uint64(1)
    for lev in range(offs.shape[0]):
        k = offs[lev] + (pos >> 6)
        now = words[k] & ~(one << np.uint64(pos & 63))
        words[k] = now
        if now != 0:
            return
        pos >>= 6


@njit(cache=True, inline="always")
def _bits_next(words, offs, nbits, pos):  # pragma: no cover - compiled
    """Smallest set position >= pos, or -1."""
    levels = offs.shape[0]
    lev = 0
    while True:
        if pos >= nbits[lev]:
            return -1
        w = pos >> 6
        word = words[offs[lev] + w] & (_ALL64 << np.uint64(pos & 63))
        if word != 0:
            pos = (w << 6) + _lowest_bit(word)
            break
        lev += 1
        if lev == levels:
            return -1
        pos = w + 1
    while lev > 0:
        lev -= 1
        pos = (pos << 6) + _lowest_bit(words[offs[lev] + pos])
    return pos


@njit(cache=True)
def best_fit_rows(sizes, capacity, max_per_row):  # pragma: no cover - compiled
    """Best-fit placement of items (in the order given) into rows of ``capacity``.

    Each item goes to the open row with the smallest remaining space >= its size (among equal
    remaining spaces, the row that reached it last), else opens a new row. A row holding
    ``max_per_row`` items (0: no cap) closes. Sizes must lie in [0, capacity]. Returns
    ``(row_of, num_rows)``: rows are numbered in the order they open. O(n · log_64 capacity).
    """
    n = sizes.shape[0]
    offs, nbits, total = _bit_levels(capacity + 1)
    words = np.zeros(total, np.uint64)
    head = np.full(capacity + 1, -1, np.int64)  # top of the stack of rows with remaining r
    room = 64
    below = np.empty(room, np.int64)  # next row down the same stack (grown by doubling)
    count = np.empty(room, np.int64)
    row_of = np.empty(n, np.int64)
    rows = 0
    for i in range(n):
        s = sizes[i]
        r = _bits_next(words, offs, nbits, s)
        if r < 0:
            if rows == room:
                room *= 2
                grown = np.empty(room, np.int64)
                grown[:rows] = below[:rows]
                below = grown
                grown = np.empty(room, np.int64)
                grown[:rows] = count[:rows]
                count = grown
            row = rows
            rows += 1
            left = capacity - s
            count[row] = 1
        else:
            row = head[r]
            head[r] = below[row]
            if head[r] < 0:
                _bits_clear(words, offs, r)
            left = r - s
            count[row] += 1
        row_of[i] = row
        if max_per_row == 0 or count[row] < max_per_row:
            below[row] = head[left]
            if head[left] < 0:
                _bits_set(words, offs, left)
            head[left] = row
    return row_of, rows


def best_fit_rows_reference(
    sizes: np.ndarray, capacity: int, max_per_row: int
) -> tuple[np.ndarray, int]:
    """The same rule with a dict of Python lists, scanning every remaining space."""
    stacks: dict[int, list[int]] = {}
    counts: list[int] = []
    row_of = []
    for s in (int(x) for x in sizes):
        fits = [r for r, rows in stacks.items() if r >= s and rows]
        if fits:
            r = min(fits)
            row = stacks[r].pop()
            left = r - s
            counts[row] += 1
        else:
            row = len(counts)
            counts.append(1)
            left = capacity - s
        row_of.append(row)
        if max_per_row == 0 or counts[row] < max_per_row:
            stacks.setdefault(left, []).append(row)
    return np.array(row_of, dtype=np.int64), len(counts)


@njit(cache=True)
def scatter_rows(row_of, row_rank, values, sizes):  # pragma: no cover - compiled
    """Group items by row: rows in increasing ``row_rank[row]``, a row's items in input order.

    Returns ``(values, sizes, bounds)`` regrouped, with ``bounds[k]:bounds[k + 1]`` the items of
    the row of rank k. One counting pass and one scatter pass, O(n + rows).
    """
    n = row_of.shape[0]
    num_rows = row_rank.shape[0]
    bounds = np.zeros(num_rows + 1, np.int64)
    for i in range(n):
        bounds[row_rank[row_of[i]] + 1] += 1
    for k in range(num_rows):
        bounds[k + 1] += bounds[k]
    fill = bounds[:num_rows].copy()
    out_values = np.empty(n, np.int64)
    out_sizes = np.empty(n, np.int64)
    for i in range(n):
        k = row_rank[row_of[i]]
        p = fill[k]
        fill[k] = p + 1
        out_values[p] = values[i]
        out_sizes[p] = sizes[i]
    return out_values, out_sizes, bounds


def scatter_rows_reference(
    row_of: np.ndarray, row_rank: np.ndarray, values: np.ndarray, sizes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same regrouping with a stable argsort of the row ranks."""
    keys = np.asarray(row_rank)[row_of]
    order = np.argsort(keys, kind="stable")
    counts = np.bincount(keys, minlength=len(row_rank))
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return np.asarray(values)[order], np.asarray(sizes)[order], bounds
