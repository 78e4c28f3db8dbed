"""Lengths from anything a user holds: the one dispatcher for paths (files, folders, Arrow data).

:func:`lengths_of` reads values in memory with :func:`padless.core.lengths.as_lengths`, Arrow data in
memory from its list offsets and a path with :func:`lengths_from_file`, which picks the reader
by the file's kind: :mod:`padless.io.readers` (arrays, text, Arrow/Parquet, saved ``datasets``) or
:mod:`padless.io.tokens` (indexed datasets, raw token files; imported on use, as it loads the
compiled kernels).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core.lengths import arrow_like, as_lengths
from .readers import (
    PathLike,
    _as_path,
    _check_progress,
    _checked,
    _lengths_from_npz,
    _lengths_from_offsets,
    _token_count,
    is_indexed_path,
    lengths_from_arrow,
    lengths_from_text,
    lengths_of_arrow,
    load_npy,
    sniff,
)

__all__ = ["lengths_from_file", "lengths_from_files", "lengths_of"]


def lengths_of(x: Any, *, column: str | Sequence[str] | None = None) -> np.ndarray:
    """Return lengths as an int64 array of shape (N,) or (N, F) (an indexed dataset's: its int32
    memory map, below).

    Accepts a numpy array of lengths ((N,) or (N, F) per-field lengths), a list of ints, a list of
    token sequences (lists or arrays), a list of tuples of token sequences (one per field, e.g.
    source and target), or a ``pathlib.Path`` to a file that
    :func:`lengths_from_file` reads (.npy, .npz, text, Arrow/Parquet, a saved
    ``datasets`` folder, a Megatron/fairseq ``.idx``: its int32 lengths as memory-mapped, after
    one chunked pass that checks each is non-negative and its sequence inside the ``.bin``; a
    ``str`` is refused, as it could be text as well as a path).

    Arrow data in memory, lengths from the list offsets (no pass over rows, no token read):
    a ``datasets.Dataset`` with ``column`` (optional when it has one column; its
    select/shuffle/filter mapping is followed: length i is the dataset's row i), ``ds[name]``,
    a ``pyarrow.Table`` or ``RecordBatch`` with ``column`` (one with only number columns and no
    ``column`` is an (N, F) array of lengths), a ``ChunkedArray`` or ``Array``. ``column`` is a
    name, or a list of names for (N, F) lengths. A list column (list, large_list,
    fixed_size_list) gives each row's length, an integer column its values; a text column is
    refused (lengths are token counts: tokenize first, or count words or characters with
    :func:`padless.io.readers.lengths_from_arrow` and its ``tokenizer``); a null row is a
    ValueError naming it. The lengths are the stored column's (a ``set_transform`` is not
    applied: :class:`padless.CheckedDataset` catches one that changes them). A ``DatasetDict``
    (pass one split) or an ``IterableDataset`` (no lengths up front:
    :class:`padless.StreamBatcher`) is a TypeError naming the call to make.

    Supported range: lengths are whole numbers in [0, 2**31) (0 is allowed). Integer and float
    input outside it (negative, >= 2**31, NaN, inf, fractions, Python ints of any size) is refused
    up front, never wrapped or clipped, so sums of up to 2**32 lengths fit in int64.

    Raises:
        TypeError: booleans, text (a ``str``, ``bytes``, a list of strings, a text column), a
            dict, a ``DatasetDict``/``IterableDataset``, ``column`` for input without columns,
            or non-numeric values.
        ValueError: a value outside the range, ragged nesting or >2-D input; the message names
            the first bad position and value.

    Cost: O(N) vectorised for arrays and Arrow data (Arrow: reads 4 or 8 bytes per row, the
    offsets; a datasets mapping adds one gather); one Python pass over the items for lists.

    >>> lengths_of([[1, 2, 3], [4]]).tolist()
    [3, 1]
    >>> lengths_of(np.array([[3, 4], [5, 6]])).shape
    (2, 2)
    >>> lengths_of(np.array([2.0**31]))
    Traceback (most recent call last):
    ...
    ValueError: lengths must be whole numbers in [0, 2**31), got 2147483648.0 at position [0]
    """
    if column is not None or arrow_like(x):
        if not arrow_like(x):
            raise TypeError(
                f"column= picks a column of a datasets.Dataset or a pyarrow Table/RecordBatch, "
                f"got a {type(x).__name__}; call lengths_of(x) without column="
            )
        return lengths_of_arrow(x, column)
    if isinstance(x, os.PathLike):
        return lengths_from_file(x)
    return as_lengths(x)


def lengths_from_file(
    path: PathLike,
    *,
    tokenizer: str = "whitespace",
    fields: Sequence[str] | None = None,
    column: str | None = None,
    offsets: PathLike | None = None,
    split: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    dtype: Any = None,
    eos: int | None = None,
    documents: bool = False,
) -> np.ndarray:
    """Read lengths from one file or folder, choosing the reader by its kind.

    - an indexed dataset (Megatron-LM or fairseq): its ``.idx``, or its ``.bin`` or prefix when
      both files are there: the sequence lengths as they are stored, a read-only int32 memory
      map (never copied: the windowed samplers plan on it as it is), checked first in one
      chunked pass (each length non-negative, each sequence inside the ``.bin``:
      :meth:`padless.io.indexed.IndexedDataset.check`); ``documents=True``: Megatron's documents'
      lengths (int64). See :class:`padless.io.indexed.IndexedDataset`.
    - with ``eos``: a raw token file (``.bin``, an OLMo-style ``.npy`` without header, anything)
      of ``dtype`` tokens, whose documents end at each ``eos`` token (the eos counts): their
      lengths, from one compiled pass whose offsets are kept in a file beside it for the next
      read (:class:`padless.io.tokens.RawTokens`).
    - ``.npy``: an array of lengths; with ``offsets`` (a ``.npy`` of document offsets) the file is
      a token-id corpus and lengths are the document sizes.
    - ``.npz``: pick arrays with ``fields`` (several give (N, F) lengths); an archive with
      ``offsets`` (and ``tokens``) is a token corpus.
    - ``.arrow``/``.feather``/``.parquet`` files and saved ``datasets`` folders:
      :func:`lengths_from_arrow` with ``column`` (and ``split`` for a DatasetDict).
    - anything else: a text file, one sequence per line, :func:`lengths_from_text` (gzip or
      zstd compressed text read as it streams).

    The kind is told by the file's content where its first bytes name a format (``.npy``,
    ``.npz``, Parquet, an Arrow IPC file, gzip, zstd), whatever its name; by the name
    otherwise (``.npy``/``.npz`` whose header is damaged, an Arrow stream, text).

    Values read are checked as :func:`padless.lengths_of` checks them; a file that is not what its
    name says (a corrupt .npy, a non-Arrow .arrow, binary "text") raises ``ValueError`` naming it.

    Cost: that of the reader chosen; .npy files are memory-mapped.

    >>> import os, tempfile, numpy as np
    >>> d = tempfile.mkdtemp()
    >>> np.save(os.path.join(d, "l.npy"), np.array([3, 1, 4]))
    >>> lengths_from_file(os.path.join(d, "l.npy")).tolist()
    [3, 1, 4]
    """
    src = _as_path(path)
    progress = _check_progress(progress)
    tokens = _token_file_lengths(src, dtype, eos, documents)
    if tokens is not None:
        return tokens
    # the kind by content (a .npy named .bin, gzip text without .gz, Parquet named .arrow), by
    # the name where the content says nothing (text, an Arrow stream)
    kind = sniff(src)
    suffix = src.suffix.lower()
    if kind is None and suffix in (".npy", ".npz"):
        kind = suffix[1:]
    if kind is None and suffix in (".arrow", ".feather", ".parquet"):
        kind = "arrow"
    if src.is_dir() or kind in ("arrow", "parquet"):
        return lengths_from_arrow(
            src,
            column=column,
            tokenizer=None if tokenizer == "whitespace" else tokenizer,
            split=split,
        )
    if not src.exists():
        raise FileNotFoundError(f"no such file: {src}")
    if kind == "npy":
        arr = load_npy(src, mmap_mode="r")
        if offsets is None:
            return _checked(arr, str(src))
        off = load_npy(Path(offsets))
        return _lengths_from_offsets(off, str(offsets), _token_count(arr, str(src)))
    if kind == "npz":
        return _lengths_from_npz(src, fields)
    return lengths_from_text(src, tokenizer=tokenizer, progress=progress)


def _token_file_lengths(src: Path, dtype: Any, eos: Any, documents: Any) -> np.ndarray | None:
    """Lengths of an indexed dataset or of a raw token file (``eos``); None for other files."""
    if not isinstance(documents, bool):
        raise TypeError(f"documents must be True or False, got {documents!r:.60}")
    if eos is not None:
        if documents:
            raise ValueError(
                "documents=True reads an indexed dataset's document index; with eos= the file is "
                "raw tokens, whose documents are already its items: drop documents=True"
            )
        from .tokens import RawTokens  # loads the compiled kernels

        return _checked(RawTokens(src, dtype=dtype, eos=eos).lengths, str(src))
    if is_indexed_path(src):
        if dtype is not None:
            raise ValueError(
                f"dtype is given by the header of an indexed dataset's .idx ({src}); drop "
                f"dtype={dtype!r} (or pass eos= to read the .bin as raw tokens)"
            )
        from .tokens import open_tokens  # an IndexedDataset (the tokens module loads kernels)

        store = open_tokens(src, documents=documents)
        store.check()  # each length non-negative, each sequence inside the .bin
        return store.lengths
    if dtype is not None:
        raise ValueError(
            f"dtype={dtype!r} reads {src} as raw tokens: pass eos= too (the token that ends "
            "each document), e.g. lengths_from_file(path, dtype='uint16', eos=0)"
        )
    if documents:
        raise ValueError(
            f"documents=True is for an indexed dataset (.idx + .bin), got {src}: no .idx there"
        )
    return None


def lengths_from_files(paths: Sequence[PathLike], **kwargs: Any) -> np.ndarray:
    """Read several files side by side (e.g. ``train.en train.es``) as (N, F) lengths.

    ``kwargs`` go to :func:`lengths_from_file` for every file; the files must hold as many
    sequences each. Cost: one read per file.

    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> for name, text in (("t.en", "a b\\nc\\n"), ("t.es", "x\\ny z w\\n")):
    ...     _ = open(os.path.join(d, name), "w").write(text)
    >>> lengths_from_files([os.path.join(d, "t.en"), os.path.join(d, "t.es")]).tolist()
    [[2, 1], [1, 3]]
    """
    if isinstance(paths, (str, bytes, os.PathLike)) or not isinstance(paths, Sequence):
        raise TypeError(
            "paths must be a list of paths (e.g. ['train.en', 'train.es']; one file: "
            f"lengths_from_file), got {type(paths).__name__} {paths!r:.60}"
        )
    if not paths:
        raise ValueError("paths must name at least one file")
    for i, p in enumerate(paths):
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(
                f"paths[{i}] must be a str or a pathlib.Path, got {type(p).__name__} {p!r:.60}"
            )
    cols = [lengths_from_file(p, **kwargs) for p in paths]
    if len(cols) == 1:
        return cols[0]
    sizes = {c.shape[0] for c in cols}
    if len(sizes) > 1:
        counts = ", ".join(f"{p}: {c.shape[0]}" for p, c in zip(paths, cols, strict=True))
        raise ValueError(f"parallel files must have the same number of lines, got {counts}")
    flat = [c if c.ndim == 2 else c[:, None] for c in cols]
    return np.concatenate(flat, axis=1)
