"""A ``.npy`` file written as a stream: rows appended, the length known only at the end.

What :func:`padless.ray.lengths` writes its lengths with, and each task of
:func:`padless.ray.plan` its windows' arrays: nothing is held in memory on a seekable file.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import numpy as np

HEADER = 128  # bytes of a streamed .npy header (holds any 1-D or (N, F) shape)


def npy_header(dtype: np.dtype[Any], shape: tuple[int, ...]) -> bytes:
    """A version 1.0 ``.npy`` header of exactly :data:`HEADER` bytes.

    >>> len(npy_header(np.dtype(np.int32), (10,)))
    128
    """
    descr = np.lib.format.dtype_to_descr(dtype)
    dims = tuple(int(s) for s in shape)
    body = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {dims!r}, }}"
    raw = body.encode("latin1")
    pad = HEADER - 10 - len(raw) - 1
    if pad < 0:  # pragma: no cover - 128 bytes hold shapes up to 2**62 rows
        raise ValueError(f"shape {shape} does not fit a {HEADER}-byte .npy header")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", HEADER - 10) + raw + b" " * pad + b"\n"


class NpyStream:
    """Append arrays to a ``.npy`` file whose length is known only at the end.

    A placeholder header is written first and the real one (same size) when the stream closes,
    so nothing is held in memory; an unseekable target gets the pieces held and written at the
    end instead.

    Cost: one write per appended array; O(1) memory on a seekable file, O(rows) otherwise.

    >>> import io
    >>> fh = io.BytesIO()
    >>> stream = NpyStream(fh, np.int32)
    >>> stream.write(np.arange(3)); stream.write(np.arange(2)); stream.close()
    >>> np.load(io.BytesIO(fh.getvalue())).tolist()
    [0, 1, 2, 0, 1]
    """

    def __init__(self, fh: Any, dtype: Any, tail: tuple[int, ...] = ()) -> None:
        self.fh = fh
        self.dtype = np.dtype(dtype)
        self.tail = tail
        self.rows = 0
        self.seekable = bool(getattr(fh, "seekable", lambda: False)())
        self.held: list[bytes] = []
        if self.seekable:
            fh.write(b"\0" * HEADER)

    def write(self, arr: np.ndarray) -> None:
        data = np.ascontiguousarray(arr, dtype=self.dtype)
        if data.shape[1:] != self.tail:
            raise ValueError(f"rows of shape {data.shape[1:]} in a stream of {self.tail}")
        self.rows += int(data.shape[0])
        if not data.size:
            return
        if self.seekable:
            self.fh.write(data.data)
        else:
            self.held.append(data.tobytes())

    def close(self) -> None:
        header = npy_header(self.dtype, (self.rows, *self.tail))
        if self.seekable:
            self.fh.seek(0)
            self.fh.write(header)
            self.fh.seek(0, os.SEEK_END)
        else:
            self.fh.write(header)
            for piece in self.held:
                self.fh.write(piece)
            self.held = []
