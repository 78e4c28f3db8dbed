"""Token stores: document offsets of a raw token file, batch gathers, positions of segments.

- :func:`eos_offsets`: where the documents of a raw token stream end (after each eos token), in
  one pass on up to four threads (a vectorised count per part, then a fill of each part's
  offsets at its place; the result does not depend on the thread count).
- :func:`gather_tokens`: a planned batch copied from a (memory-mapped) token file into one
  output buffer, converting to int64 or int32, the gaps filled with a pad value.
- :func:`segment_positions`: the position ids of packed segments.

Token dtypes: uint8, int8, int16, uint16, int32, uint32 and int64 (native byte order). Each
kernel has its plain numpy ``*_reference`` twin below it.
"""

from __future__ import annotations

import operator
import os

import numpy as np

from .. import _core

#: Token dtypes the kernels take.
TOKEN_DTYPES = tuple(
    np.dtype(t) for t in (np.uint8, np.int8, np.int16, np.uint16, np.int32, np.uint32, np.int64)
)
#: Output dtypes of :func:`gather_tokens`.
GATHER_DTYPES = (np.dtype(np.int64), np.dtype(np.int32))

MAX_THREADS = 4


def default_threads() -> int:
    """One thread per core this process may run on, at most :data:`MAX_THREADS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, cores))


def check_eos(eos: object, dtype: np.dtype, what: str = "eos") -> int:
    """``eos`` as an int, refused (TypeError/ValueError) unless it is a token of ``dtype``."""
    if isinstance(eos, (bool, np.bool_)) or not isinstance(eos, (int, np.integer)):
        raise TypeError(f"{what} must be an integer token id, got {type(eos).__name__} {eos!r}")
    info = np.iinfo(dtype)
    value = int(eos)
    if not info.min <= value <= info.max:
        raise ValueError(
            f"{what} must be a token of dtype {dtype} (in [{info.min}, {info.max}]), got {value}"
        )
    return value


def check_items(items: object, count: int, what: str = "items", of: str = "") -> np.ndarray:
    """``items`` as an int64 array of indices, each in ``[0, count)`` (its shape kept).

    ``what`` names them in errors, ``of`` (e.g. ``" (the documents of 'x.bin')"``) follows the
    range there.

    Integer arrays and sequences of ints only: floats, bools, strings and objects are a
    TypeError (never truncated or parsed); an index out of range is a ValueError naming the
    first one as given (a uint64 or Python int above int64 is reported, never wrapped).

    Cost: one pass over the indices.

    >>> check_items([2, 0], 3).tolist()
    [2, 0]
    """
    arr = np.asarray(items) if not isinstance(items, np.ndarray) else items
    if arr.size == 0:
        return np.zeros(arr.shape, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        huge = arr.dtype.kind in "fO" and isinstance(items, (list, tuple))
        if huge:  # Python ints beyond int64 make numpy infer float64 or object
            flat = list(np.asarray(items, dtype=object).reshape(-1))
            if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in flat):
                at = next(k for k, v in enumerate(flat) if not 0 <= int(v) < count)
                raise ValueError(
                    f"{what} must be in [0, {count}){of}, got {what}[{at}] = {int(flat[at])}"
                )
        raise TypeError(f"{what} must be integer indices, got dtype {arr.dtype}")
    if int(arr.min()) < 0 or int(arr.max()) >= count:
        bad = (arr < 0) | (arr >= count)
        at = int(np.argmax(bad.reshape(-1)))
        raise ValueError(
            f"{what} must be in [0, {count}){of}, got {what}[{at}] = {int(arr.reshape(-1)[at])}"
        )
    return arr.astype(np.int64, copy=False)


def _check_tokens(tokens: object) -> np.ndarray:
    if not isinstance(tokens, np.ndarray) or tokens.ndim != 1:
        raise TypeError(f"tokens must be a 1-D numpy array, got {type(tokens).__name__}")
    if tokens.dtype not in TOKEN_DTYPES:
        listed = ", ".join(d.name for d in TOKEN_DTYPES)
        raise TypeError(f"tokens must have one of the dtypes {listed}, got {tokens.dtype}")
    return tokens


def eos_offsets(tokens: np.ndarray, eos: int, threads: int | None = None) -> np.ndarray:
    """Document offsets of a token stream whose documents end with ``eos``: int64 ``(D + 1,)``.

    ``0``, the position after every eos token, and ``len(tokens)`` when the last document has no
    eos (when the last token is eos its end is already there); document ``j`` is
    ``tokens[offsets[j]:offsets[j + 1]]`` and keeps its eos. An empty array has no documents
    (``[0]``). ``threads``: None for one per core (at most four); the result is the same for any.

    Cost: one vectorised count over the tokens and one fill pass (parts of 2**20 tokens or more
    on their own threads, the GIL released); several GB/s.

    >>> eos_offsets(np.array([5, 0, 7, 8, 0, 9], dtype=np.uint16), eos=0).tolist()
    [0, 2, 5, 6]
    """
    tokens = _check_tokens(tokens)
    value = check_eos(eos, tokens.dtype)
    if threads is None:
        threads = default_threads()
    threads = operator.index(threads)
    if threads < 1:
        raise ValueError(f"threads must be >= 1 (or None), got {threads}")
    return _core.eos_offsets(tokens, value, threads)


def eos_offsets_reference(tokens: np.ndarray, eos: int) -> np.ndarray:
    ends = [i + 1 for i, t in enumerate(tokens.tolist()) if t == eos]
    if len(tokens) and (not ends or ends[-1] != len(tokens)):
        ends.append(len(tokens))
    return np.array([0, *ends], dtype=np.int64)


def gather_tokens(
    tokens: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    dest: np.ndarray,
    out: np.ndarray,
    pad: int,
) -> None:
    """Copy item k, ``tokens[starts[k]:starts[k] + lengths[k]]``, to ``out[dest[k]:…]``; pad the rest.

    ``tokens``: 1-D, any of :data:`TOKEN_DTYPES` (a read-only memory map too); ``starts``,
    ``lengths``, ``dest``: int64 of one size; ``out``: a writable C-contiguous 1-D int64 or int32
    array (a 2-D batch's ``.reshape(-1)``), written in place: every entry that no item covers
    becomes ``pad``. Rules, all checked before anything is written (ValueError naming the
    item): lengths and starts >= 0, ``starts[k] + lengths[k] <= len(tokens)``, ``dest``
    ascending without overlap (``dest[k] >= dest[k - 1] + lengths[k - 1]``), ``dest[k] +
    lengths[k] <= len(out)``; ``pad`` and (for int32 out) every token copied must fit out's
    dtype. A wrong ``out`` dtype is a TypeError.

    Cost: the copy at memory speed (vectorised widening loops, no branch per token) plus a fill
    of the gaps; one min/max pass more for uint32/int64 tokens into int32.

    >>> out = np.empty(8, dtype=np.int64)
    >>> tokens = np.arange(10, 20, dtype=np.uint16)
    >>> gather_tokens(tokens, np.array([2, 7]), np.array([3, 2]), np.array([0, 4]), out, -1)
    >>> out.tolist()
    [12, 13, 14, -1, 17, 18, -1, -1]
    """
    _core.gather_tokens(tokens, starts, lengths, dest, out, pad)


def gather_tokens_reference(
    tokens: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    dest: np.ndarray,
    out: np.ndarray,
    pad: int,
) -> None:
    if not len(starts) == len(lengths) == len(dest):
        raise ValueError("starts, lengths and dest must have the same size")
    info = np.iinfo(out.dtype)
    if not info.min <= pad <= info.max:
        raise ValueError(f"pad must fit out's dtype {out.dtype}")
    end = 0
    for k, (s, n, d) in enumerate(
        zip(starts.tolist(), lengths.tolist(), dest.tolist(), strict=True)
    ):
        if n < 0 or s < 0 or s + n > len(tokens) or d < end or d + n > len(out):
            raise ValueError(f"item {k} breaks a rule")
        piece = tokens[s : s + n].tolist()
        if any(not info.min <= t <= info.max for t in piece):
            raise ValueError(f"item {k} holds a token outside {out.dtype}")
        end = d + n
    out[...] = pad
    for s, n, d in zip(starts.tolist(), lengths.tolist(), dest.tolist(), strict=True):
        out[d : d + n] = tokens[s : s + n]


def segment_positions(lengths: np.ndarray, out: np.ndarray, start: int = 0) -> None:
    """``out[:] = concatenate(arange(start, start + n) for n in lengths)``: packed position ids.

    ``lengths``: non-negative (int64, int32, uint32 or uint16 as they are; another dtype is
    converted) summing to ``len(out)``; ``out``: a writable C-contiguous int64 array (a packed
    row's positions, written in place). ValueError otherwise.

    Cost: one vectorised pass over ``out``.

    >>> out = np.empty(5, dtype=np.int64)
    >>> segment_positions(np.array([2, 3]), out)
    >>> out.tolist()
    [0, 1, 0, 1, 2]
    """
    _core.segment_positions(lengths, out, start)


def segment_positions_reference(lengths: np.ndarray, out: np.ndarray, start: int = 0) -> None:
    parts = [np.arange(start, start + int(n), dtype=np.int64) for n in lengths]
    values = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if len(values) != len(out) or any(int(n) < 0 for n in lengths):
        raise ValueError("lengths must be non-negative and sum to len(out)")
    out[...] = values
