"""Compiled per-line counters for text: whitespace tokens, UTF-8 characters or bytes per line.

:func:`count_lines` takes one piece of text and carries its state to the next piece, so a file is
counted in one pass whether it is memory-mapped (one piece: the mapping) or streamed out of a
decompressor (pieces as they come). A NUL byte stops the pass: text has none, so it marks a binary
file and the caller refuses it.

How it runs near memory speed: the text is walked in blocks that fit the L1 cache. Pass 1 over a
block is branch-free byte arithmetic that the compiler vectorises; it writes one flag byte per
input byte (bit 0: the byte counts, i.e. starts a token, or is a character or byte of the line;
bit 1: it ends a line). Pass 2 reads the flags eight at a time as one 64-bit word: a word without a
newline adds its count with one multiply; a word with one is resolved without branches.

:func:`count_lines_reference` is the plain-Python definition (``bytes.split`` per line) that the
tests compare the kernel with.
"""

from __future__ import annotations

import numba
import numpy as np

WHITESPACE, CHARS, BYTES = 0, 1, 2
MODES = {"whitespace": WHITESPACE, "chars": CHARS, "bytes": BYTES}

# state carried from one piece to the next: the open line's count so far, and whether the last
# byte was whitespace (whitespace mode; 1 at the start of the text) or a \r (chars/bytes modes,
# where a \r just before a \n is not counted)
COUNT, PREV = 0, 1

BLOCK = 1 << 14  # bytes per block: the block and its flags stay in L1

_U8 = np.uint8


def new_state(mode: int) -> np.ndarray:
    """Fresh carried state for a pass over a whole text."""
    state = np.zeros(2, dtype=np.int64)
    state[PREV] = 1 if mode == WHITESPACE else 0
    return state


@numba.njit(cache=True, nogil=True, inline="always")
def _space(x: np.uint8) -> bool:
    # ASCII whitespace as bytes.split() sees it: \t \n \v \f \r (9-13) and space
    return (x == _U8(32)) | ((x >= _U8(9)) & (x <= _U8(13)))


@numba.njit(cache=True, nogil=True, inline="always")
def _flag_words(block: np.ndarray, flags: np.ndarray, prev_space: bool) -> bool:
    """Flags of ``block`` in whitespace mode; returns whether a NUL byte is among them."""
    x = block[0]
    start = (x != _U8(32)) & ((x < _U8(9)) | (x > _U8(13))) & prev_space
    flags[0] = _U8(start) | (_U8(x == _U8(10)) << _U8(1))
    nul = x == _U8(0)
    for j in range(1, block.shape[0]):
        x = block[j]
        y = block[j - 1]
        start = (x != _U8(32)) & ((x < _U8(9)) | (x > _U8(13))) & _space(y)
        flags[j] = _U8(start) | (_U8(x == _U8(10)) << _U8(1))
        nul |= x == _U8(0)
    return nul


@numba.njit(cache=True, nogil=True, inline="always")
def _flag_units(block: np.ndarray, flags: np.ndarray, chars: bool, next_byte: int) -> bool:
    """Flags of ``block`` in chars/bytes mode; a \\r followed by \\n does not count.

    ``next_byte`` follows the block (-1 at the end of the piece: a last \\r counts for now and is
    undone if the next piece starts with \\n).
    """
    # bytes mode counts every byte; chars mode skips 10xxxxxx continuation bytes
    mask = _U8(0xC0) if chars else _U8(0)
    cont = _U8(0x80) if chars else _U8(1)
    last = block.shape[0] - 1
    nul = False
    for j in range(last):
        x = block[j]
        counted = (
            ((x & mask) != cont) & (x != _U8(10)) & ((x != _U8(13)) | (block[j + 1] != _U8(10)))
        )
        flags[j] = _U8(counted) | (_U8(x == _U8(10)) << _U8(1))
        nul |= x == _U8(0)
    x = block[last]
    counted = ((x & mask) != cont) & (x != _U8(10)) & ((x != _U8(13)) | (next_byte != 10))
    flags[last] = _U8(counted) | (_U8(x == _U8(10)) << _U8(1))
    nul |= x == _U8(0)
    return nul


@numba.njit(cache=True, nogil=True)
def count_lines(
    buf: np.ndarray, mode: int, out: np.ndarray, n_out: int, state: np.ndarray, flags: np.ndarray
) -> tuple[int, int, int]:
    """Write the count of every line that ends (with ``\\n``) in ``buf`` to ``out`` from ``n_out``.

    ``mode``: :data:`WHITESPACE` (tokens as ``bytes.split()`` sees them), :data:`CHARS` (bytes
    that do not continue a UTF-8 sequence) or :data:`BYTES`; in the last two a ``\\r`` right
    before the ``\\n`` is not counted. ``state`` (from :func:`new_state`) carries the open line to
    the next call; ``flags`` is a scratch array of :data:`BLOCK` bytes.

    Returns ``(done, n_out, nul)``: bytes of ``buf`` consumed (fewer than ``buf.size`` only when
    ``out`` has no room for another block's lines, ``BLOCK + 8``: grow it and call again with
    ``buf[done:]``), the lines now in ``out``, and the index of the first NUL byte in ``buf`` (-1
    if none; the pass stops there).
    """
    count = state[COUNT]
    prev = state[PREV]
    n = buf.shape[0]
    if n == 0:
        return 0, n_out, -1
    if mode != WHITESPACE and prev == 1 and buf[0] == _U8(10):
        count -= 1  # the last piece ended with the \r of a \r\n
    prev = 0 if mode != WHITESPACE else prev
    words = flags.view(np.uint64)
    ones = np.uint64(0x0101010101010101)
    ends = np.uint64(0x0202020202020202)
    shift = np.uint64(56)
    step = flags.shape[0]
    room = out.shape[0] - step - 8
    lo = 0
    while lo < n:
        if n_out > room:
            break
        hi = min(lo + step, n)
        m = hi - lo
        block = buf[lo:hi]
        if mode == WHITESPACE:
            nul = _flag_words(block, flags, prev == 1)
        else:
            nul = _flag_units(block, flags, mode == CHARS, int(buf[hi]) if hi < n else -1)
        if nul:
            for j in range(lo, hi):
                if buf[j] == _U8(0):
                    return j, n_out, j
        used = (m + 7) // 8
        for j in range(m, used * 8):
            flags[j] = _U8(0)  # pad the last word with bytes that count nothing
        for w in range(used):
            v = words[w]
            if (v & ends) == 0:
                count += np.int64(((v & ones) * ones) >> shift)
                continue
            for b in range(8):
                f = np.int64((v >> np.uint64(8 * b)) & np.uint64(0xFF))
                end = f >> 1
                out[n_out] = count  # kept only when this byte ends a line
                n_out += int(end)
                count = (count + (f & 1)) * (1 - end)
        if mode == WHITESPACE:
            prev = np.int64(_space(buf[hi - 1]))
        lo = hi
    if mode != WHITESPACE and lo == n:
        # a \r ending the piece counted; undone if the next piece starts with \n
        prev = np.int64(buf[n - 1] == _U8(13))
    state[COUNT] = count
    state[PREV] = prev
    return lo, n_out, -1


def finish(mode: int, state: np.ndarray, last_byte: int | None) -> int | None:
    """The count of a last line with no newline (None when the text is empty or ends with one).

    A ``\\r`` ending such a line is not counted (chars/bytes modes), as in a ``\\r\\n`` line.
    """
    if last_byte is None or last_byte == 10:
        return None
    if mode == WHITESPACE:
        return int(state[COUNT])
    return int(state[COUNT] - state[PREV])


def count_lines_reference(data: bytes, mode: int) -> list[int]:
    """Plain Python: per line of ``data`` (split at ``\\n``; a last line needs no ``\\n``),
    ``len(line.split())`` (whitespace), bytes or UTF-8 characters (bytes that do not continue a
    sequence: ``len(line.decode())`` for valid UTF-8), a trailing ``\\r`` not counted in the last two.
    """
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    if mode == WHITESPACE:
        return [len(line.split()) for line in lines]
    out = []
    for line in lines:
        body = line[:-1] if line.endswith(b"\r") else line
        out.append(len(body) if mode == BYTES else sum(1 for b in body if b & 0xC0 != 0x80))
    return out
