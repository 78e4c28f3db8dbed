"""Per-line counters for text: whitespace tokens, UTF-8 characters or bytes per line.

:func:`count_lines` takes one piece of text and carries its state to the next piece, so a file is
counted in one pass whether it is memory-mapped (one piece: the mapping) or streamed out of a
decompressor (pieces as they come). A NUL byte stops the pass: text has none, so it marks a binary
file and the caller refuses it.

How it runs near memory speed (the compiled kernel ``padless._core.count_lines``, csrc/text.hpp):
the text is walked in blocks that fit the L1 cache. Pass 1 over a block is branch-free byte
arithmetic that the compiler vectorises; it writes one flag byte per input byte (bit 0: the byte
counts, i.e. starts a token, or is a character or byte of the line; bit 1: it ends a line). Pass 2
reads the flags eight at a time as one 64-bit word: a word without a newline adds its count with
one multiply; a word with one is resolved without branches.

:func:`count_lines_reference` is the plain-Python definition (``bytes.split`` per line) that the
tests compare the kernel with.
"""

from __future__ import annotations

import numpy as np

from .. import _core

WHITESPACE, CHARS, BYTES = 0, 1, 2
MODES = {"whitespace": WHITESPACE, "chars": CHARS, "bytes": BYTES}

# state carried from one piece to the next: the open line's count so far, and whether the last
# byte was whitespace (whitespace mode; 1 at the start of the text) or a \r (chars/bytes modes,
# where a \r just before a \n is not counted)
COUNT, PREV = 0, 1

BLOCK = 1 << 14  # bytes per block: the block and its flags stay in L1


def new_state(mode: int) -> np.ndarray:
    """Fresh carried state for a pass over a whole text."""
    state = np.zeros(2, dtype=np.int64)
    state[PREV] = 1 if mode == WHITESPACE else 0
    return state


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
    return _core.count_lines(buf, mode, out, n_out, state, flags)


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
