"""Megatron-LM and fairseq indexed datasets: a ``.idx`` + ``.bin`` pair, read and written.

:class:`IndexedDataset` maps a pair in O(1) time and memory: the header is read with ``struct``
and the arrays of the ``.idx`` are read-only memory maps at their offsets; nothing is scanned
when the pair is opened. :func:`write_indexed` writes a pair that Megatron's ``IndexedDataset``
and fairseq's ``MMapIndexedDataset`` read, streaming in bounded memory and atomically.

The formats (little-endian, no padding):

- Megatron: ``b"MMIDIDX\\x00\\x00"``, u64 version 1, u8 dtype code, u64 S (sequences), u64 D
  (document-index length, documents + 1); then int32[S] sequence lengths at offset 34, int64[S]
  byte pointers into the ``.bin``, int64[D] document index (0 … S, non-decreasing), and for
  multimodal data int8[S] modes. Size 34 + 12·S + 8·D (+ S).
- fairseq: the same magic and version, u8 dtype code at 17, u64 N at 18, int32[N] sizes at 26 and
  int64[N] pointers; no document index. Size 26 + 12·N.

The content of the ``.idx`` tells the two apart, never its size alone: a Megatron index cut to
exactly 26 + 12·S bytes (an interrupted copy, a full disk) has fairseq's size. A file is read as
Megatron when its size is 34 + 12·S + 8·D (+ S) and its document index starts at 0 and ends at S
(Megatron's own reader asks the same); as fairseq when its size is 26 + 12·N and its pointers
start at 0, never decrease, are multiples of the itemsize, each sequence ends at or before the
next pointer and the last one exactly at the ``.bin``'s size (as fairseq's writer makes them;
fairseq's memory-mapped layout has no dimension offsets, those are its older ``TNTIDX`` format's).
A file that fits neither is refused naming both layouts and what each found; none fits both (the
two sizes differ by at least 8 for any count). The ``.bin`` holds the token arrays back to back.

Both files are kept open while the dataset lives (one descriptor each): every item or batch
served first checks that neither shrank since it was opened (see :mod:`padless.io._files`).
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

import numpy as np

from .. import _kernels as K
from ..core._check import check_bool
from ..core._temporary import Signals, create_temporary, remove_stale
from ._files import Watch
from .readers import list_column

__all__ = ["FORMATS", "IndexedDataset", "write_indexed"]

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
MEGATRON_HEADER = 34
FAIRSEQ_HEADER = 26
FORMATS = ("megatron", "fairseq")

# Dtype codes of each format's table (fairseq reads both 6 and 7 as float64).
MEGATRON_CODES: dict[int, np.dtype[Any]] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
FAIRSEQ_CODES: dict[int, np.dtype[Any]] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float64),
    8: np.dtype(np.uint16),
    9: np.dtype(np.uint32),
    10: np.dtype(np.uint64),
}
_TABLES = {"megatron": MEGATRON_CODES, "fairseq": FAIRSEQ_CODES}

# Elements per step of the passes over the arrays (documents' lengths, the writer's pointers).
CHUNK = 1 << 20
# Bytes of tokens the writer gathers before one write to the ``.bin``.
WRITE_BYTES = 8 << 20
MAX_SEQUENCE = (1 << 31) - 1  # a sequence length is an int32


def _unknown_code(code: int, fmt: str) -> str:
    known = ", ".join(f"{k} {v.name}" for k, v in _TABLES[fmt].items())
    return f"unknown dtype code {code} for the {fmt} table ({known})"


def _paths(path: Any, what: str = "path") -> tuple[str, str]:
    """Return (``.idx``, ``.bin``) paths from a prefix or either file's path."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"{what} must be a path (a prefix, or the .idx or .bin file), "
            f"got {type(path).__name__} {path!r}"
        )
    text = os.fspath(path)
    if not isinstance(text, str) or not text:
        raise ValueError(f"{what} must be a non-empty path, got {text!r}")
    prefix = text[:-4] if text.endswith((".idx", ".bin")) else text
    if not os.path.basename(prefix):
        raise ValueError(f"{what} must name a file prefix, not a folder, got {text!r}")
    return prefix + ".idx", prefix + ".bin"


def _empty(dtype: Any) -> np.ndarray:
    out = np.zeros(0, dtype)
    out.flags.writeable = False
    return out


def _map(file: BinaryIO, dtype: Any, offset: int, count: int) -> np.ndarray:
    """A read-only memory map of ``count`` elements at ``offset`` of the open ``file`` (its
    path as the map's ``filename``; an empty array for 0)."""
    if count == 0:
        return _empty(dtype)
    return np.memmap(file, dtype=dtype, mode="r", offset=offset, shape=(count,))


def _fairseq_arrays_misfit(
    sizes: np.ndarray, pointers: np.ndarray, itemsize: int, bin_size: int
) -> str | None:
    """What breaks fairseq's invariants in these arrays, or None: the pointers start at 0,
    lie in the ``.bin``, are multiples of the itemsize and never decrease; each size is
    non-negative and its sequence ends at or before the next pointer, the last one exactly at
    the ``.bin``'s size. One pass in chunks of ``CHUNK`` entries (a few reductions each; the
    rules one by one only in a chunk that breaks one), bounded memory."""
    count = len(sizes)
    if count == 0:
        if bin_size:
            return (
                f"fairseq: no sequences, but the .bin holds {bin_size} bytes (a fairseq index's "
                "pointers end at the .bin's size)"
            )
        return None
    if int(pointers[0]) != 0:
        return (
            f"fairseq: the first pointer is {int(pointers[0])}, not 0 (a fairseq index's "
            "pointers start at 0)"
        )
    last_ptr = last_end = 0  # of the sequence before the chunk
    for s0 in range(0, count, CHUNK):
        size = np.asarray(sizes[s0 : s0 + CHUNK])
        ptr = np.asarray(pointers[s0 : s0 + CHUNK])
        ends = np.multiply(size, itemsize, dtype=np.int64)
        ends += ptr  # may wrap only for a pointer past the .bin, refused by ptr.max()
        if not (
            int(size.min()) >= 0
            and int(ptr.min()) >= 0
            and int(ptr.max()) <= bin_size
            and not int(np.bitwise_or.reduce(ptr)) % itemsize
            and int(ptr[0]) >= last_end
            and not np.less(ptr[1:], ends[:-1]).any()
        ):
            return _fairseq_chunk_misfit(size, ptr, s0, itemsize, bin_size, last_ptr, last_end)
        last_ptr, last_end = int(ptr[-1]), int(ends[-1])
    if last_end != bin_size:
        return (
            f"fairseq: the last sequence ends at byte {last_end}, but the .bin holds {bin_size} "
            "bytes (a fairseq index's sequences end at the .bin's size)"
        )
    return None


def _fairseq_chunk_misfit(
    size: np.ndarray,
    ptr: np.ndarray,
    s0: int,
    itemsize: int,
    bin_size: int,
    last_ptr: int,
    last_end: int,
) -> str:
    """The first of fairseq's rules that the chunk of entries from ``s0`` breaks (it breaks
    one), after the pointer ``last_ptr`` whose sequence ended at ``last_end``."""
    size, ptr = size.astype(np.int64), ptr.astype(np.int64)
    bad = np.flatnonzero(size < 0)
    if bad.size:
        return f"fairseq: sequence {s0 + int(bad[0])} has the negative size {size[bad[0]]}"
    bad = np.flatnonzero((ptr < 0) | (ptr > bin_size))
    if bad.size:
        return (
            f"fairseq: pointer {s0 + int(bad[0])} is {ptr[bad[0]]}, outside the .bin "
            f"({bin_size} bytes)"
        )
    bad = np.flatnonzero(ptr % itemsize)
    if bad.size:
        return (
            f"fairseq: pointer {s0 + int(bad[0])} is {ptr[bad[0]]}, not a multiple of "
            f"{itemsize} (the itemsize)"
        )
    before = np.concatenate(([last_ptr], ptr[:-1]))
    bad = np.flatnonzero(ptr < before)
    if bad.size:
        i = s0 + int(bad[0])
        return (
            f"fairseq: pointer {i} is {ptr[bad[0]]}, below pointer {i - 1} = "
            f"{before[bad[0]]} (a fairseq index's pointers never decrease)"
        )
    ended = np.concatenate(([last_end], ptr[:-1] + size[:-1] * itemsize))
    k = int(np.argmax(ended > ptr))  # the rule left: one sequence runs past the next pointer
    return (
        f"fairseq: sequence {s0 + k - 1} ends at {ended[k]}, past the next sequence's "
        f"pointer {ptr[k]} (its size does not fit its pointers)"
    )


class IndexedDataset:
    """A Megatron-LM or fairseq indexed dataset (``.idx`` + ``.bin``), mapped, never loaded.

    Args:
        path: the prefix (``"corpus_text_document"``), or the ``.idx`` or ``.bin`` path.
        documents: serve Megatron documents (the sequences from ``document_index[j]`` to
            ``document_index[j + 1]``, contiguous in the ``.bin``) instead of sequences;
            fairseq indexes have none.

    Attributes: ``format`` (``"megatron"`` or ``"fairseq"``), ``num_sequences``,
    ``num_documents`` (``None`` for fairseq), ``sequence_lengths`` (int32 memory map),
    ``pointers`` (int64 byte offsets into the ``.bin``), ``document_index`` (int64; empty for
    fairseq), ``modes`` (int8, multimodal Megatron data only, else ``None``), ``lengths`` (tokens
    per item: ``sequence_lengths``, or with ``documents=True`` the documents' token counts,
    int64), ``tokens`` (the ``.bin`` as ``dtype``, read-only), ``path`` (the ``.bin``),
    ``idx_path``, ``dtype``.

    The format is told by the ``.idx``'s content when the pair is opened (see the module's
    docstring: a file that fits neither layout is refused naming both and what each found),
    with the sizes of both files and the last sequence's end; each item's pointer (aligned,
    inside the ``.bin``) is checked when the item is served (:meth:`starts`, ``[i]``), every
    one at once by :meth:`check`, so a hostile file is refused, never read out of bounds. Both
    files stay open while the dataset lives, and each item or batch served first checks that
    neither shrank since (a ``ValueError`` naming the file and both sizes, instead of zeros or
    ``SIGBUS`` from the map; a cut between that check and the read cannot be seen). Float token
    dtypes open (their lengths can be planned) but refuse to serve tokens.

    Cost: opening a Megatron index reads 34 bytes and two document-index entries and maps the
    arrays, O(1) time and memory; a fairseq index adds one bounded-memory pass over its sizes
    and pointers (12 bytes per sequence), which is how its format is told; with
    ``documents=True`` one bounded-memory pass over the sequence lengths, pointers and document
    index computes the documents' lengths and checks the index. Serving adds two ``os.lseek``
    per call (about 1 µs in all). Pickles as its paths and settings and opens the files again when
    unpickled (DataLoader workers).

    >>> import os, tempfile
    >>> prefix = os.path.join(tempfile.mkdtemp(), "corpus")
    >>> ds = write_indexed([[5, 6, 7], [[1], [2, 3]]], prefix, dtype="uint16")
    >>> ds.format, len(ds), ds.sequence_lengths.tolist(), ds[1].tolist()
    ('megatron', 3, [3, 1, 2], [1])
    >>> docs = IndexedDataset(prefix, documents=True)
    >>> docs.lengths.tolist(), docs[1].tolist()
    ([3, 3], [1, 2, 3])
    """

    def __init__(self, path: str | os.PathLike[str], *, documents: bool = False) -> None:
        self.documents = check_bool("documents", documents)
        self.idx_path, self.path = _paths(path)
        self._open()

    # -- opening -----------------------------------------------------------------------------

    def _fail(self, reason: str) -> ValueError:
        return ValueError(f"indexed dataset {self.idx_path!r}: {reason}")

    def _open(self) -> None:
        idx = self.idx_path
        for name in (idx, self.path):
            if not os.path.exists(name):
                raise FileNotFoundError(
                    f"no such file: {name!r} (an indexed dataset is a prefix.idx + prefix.bin pair)"
                )
            if not os.path.isfile(name):
                raise ValueError(
                    f"path of an indexed dataset: {name!r} is not a regular file (an indexed "
                    "dataset is a prefix.idx + prefix.bin pair)"
                )
        self._idx = Watch(idx, "the index")
        self._bin = Watch(self.path, "the token file")
        size = self._idx.size
        head = self._idx.read(0, MEGATRON_HEADER)
        if len(head) < FAIRSEQ_HEADER:
            if len(head) >= len(MAGIC) and head[: len(MAGIC)] != MAGIC:
                raise self._fail(f"wrong magic {head[:9]!r}: expected {MAGIC!r}")
            raise self._fail(
                f"truncated: {size} bytes, shorter than the {FAIRSEQ_HEADER}-byte header"
            )
        if head[: len(MAGIC)] != MAGIC:
            raise self._fail(
                f"wrong magic {head[:9]!r}: expected {MAGIC!r} (not a Megatron or fairseq .idx)"
            )
        (version,) = struct.unpack_from("<Q", head, 9)
        if version != VERSION:
            raise self._fail(f"version {version}: only version {VERSION} is known")
        (code,) = struct.unpack_from("<B", head, 17)
        (count,) = struct.unpack_from("<Q", head, 18)
        doc_len = struct.unpack_from("<Q", head, 26)[0] if len(head) >= MEGATRON_HEADER else None
        self._bin_size = self._bin.size
        why = {
            "megatron": self._megatron_misfit(size, code, count, doc_len),
            "fairseq": self._fairseq_misfit(size, code, count),
        }
        fits = [fmt for fmt, reason in why.items() if reason is None]
        if len(fits) != 1:
            found = "; ".join(reason or f"{fmt} fits" for fmt, reason in why.items())
            raise self._fail(
                f"size {size} bytes, fits {'both layouts' if fits else 'neither layout'} "
                f"({found}): the file is truncated, corrupt or not an index"
            )
        fmt = fits[0]
        self.format = fmt
        self.dtype: np.dtype[Any] = _TABLES[fmt][code]
        self.num_sequences = int(count)
        base = MEGATRON_HEADER if fmt == "megatron" else FAIRSEQ_HEADER
        file = self._idx.file
        self.sequence_lengths = _map(file, "<i4", base, count)
        self.pointers = _map(file, "<i8", base + 4 * count, count)
        if fmt == "megatron" and doc_len is not None:
            modes = size != MEGATRON_HEADER + 12 * count + 8 * doc_len
            self.num_documents: int | None = int(doc_len) - 1
            self.document_index = _map(file, "<i8", base + 12 * count, doc_len)
            self.modes = _map(file, "i1", base + 12 * count + 8 * doc_len, count) if modes else None
        else:
            self.num_documents = None
            self.document_index = _map(file, "<i8", base, 0)
            self.modes = None
        # fairseq's open checked every sequence; Megatron's are checked as they are served,
        # or all at once by check()
        self._checked = fmt == "fairseq"
        if count:
            end = int(self.pointers[-1]) + int(self.sequence_lengths[-1]) * self.dtype.itemsize
            if end > self._bin_size:
                raise ValueError(
                    f"indexed dataset {self.path!r}: the .bin has {self._bin_size} bytes, "
                    f"shorter than the last sequence's end {end} (last pointer + last length * "
                    f"{self.dtype.itemsize}): truncated, or not this index's .bin"
                )
        self._tokens: np.ndarray | None = None
        self._doc_starts: np.ndarray | None = None
        if self.documents:
            if fmt == "fairseq":
                raise self._fail(
                    "documents=True, but fairseq indexes have no documents (no document index): "
                    "serve sequences (documents=False)"
                )
            self.lengths: np.ndarray = self._document_lengths()
        else:
            self.lengths = self.sequence_lengths

    def _megatron_misfit(self, size: int, code: int, count: int, doc_len: int | None) -> str | None:
        """Why the file is not a Megatron index, or None: its size is 34 + 12*S + 8*D (+ S
        with modes), its dtype code Megatron's, its document index from 0 to S. Cost: O(1)."""
        if doc_len is None:
            return f"Megatron needs at least the {MEGATRON_HEADER}-byte header"
        need = MEGATRON_HEADER + 12 * count + 8 * doc_len
        if size not in (need, need + count):
            return (
                f"Megatron needs 34 + 12*S + 8*D = {need} bytes (S = {count}, D = {doc_len} "
                f"from the header; {need + count} with multimodal modes)"
            )
        if code not in MEGATRON_CODES:
            return f"Megatron: {_unknown_code(code, 'megatron')}"
        at = MEGATRON_HEADER + 12 * count
        first = last = None
        if doc_len:
            (first,) = struct.unpack("<q", self._idx.read(at, 8))
            (last,) = struct.unpack("<q", self._idx.read(at + 8 * (doc_len - 1), 8))
        if first != 0 or last != count:
            ends = f" from {first} to {last}" if doc_len else ""
            return (
                f"Megatron: the document index must start at 0 and end at S = {count} (the "
                f"sequence count), got D = {doc_len} entries{ends}"
            )
        return None

    def _fairseq_misfit(self, size: int, code: int, count: int) -> str | None:
        """Why the file is not a fairseq index, or None: its size is 26 + 12*N, its dtype code
        fairseq's, and its sizes and pointers hold fairseq's invariants
        (:func:`_fairseq_arrays_misfit`).
        Cost: O(1) when the size does not fit; else one chunked pass over 12 bytes per entry."""
        need = FAIRSEQ_HEADER + 12 * count
        if size != need:
            return f"fairseq needs 26 + 12*N = {need} bytes (N = {count})"
        if code not in FAIRSEQ_CODES:
            return f"fairseq: {_unknown_code(code, 'fairseq')}"
        file = self._idx.file
        sizes = _map(file, "<i4", FAIRSEQ_HEADER, count)
        pointers = _map(file, "<i8", FAIRSEQ_HEADER + 4 * count, count)
        return _fairseq_arrays_misfit(sizes, pointers, FAIRSEQ_CODES[code].itemsize, self._bin_size)

    def _document_lengths(self) -> np.ndarray:
        """Documents' token counts, checking the document index, in bounded memory."""
        doc, lengths, pointers = self.document_index, self.sequence_lengths, self.pointers
        total = self.num_sequences  # the index runs from 0 to S (checked when opened)
        for b0 in range(0, len(doc), CHUNK):  # non-decreasing (so searchsorted is exact)
            bounds = np.asarray(doc[max(b0 - 1, 0) : b0 + CHUNK], np.int64)
            drops = np.diff(bounds) < 0
            if drops.any():
                bad = max(b0 - 1, 0) + int(np.argmax(drops)) + 1
                raise self._fail(
                    f"the document index decreases at entry {bad} ({int(doc[bad - 1])} then "
                    f"{int(doc[bad])}): it must be non-decreasing from 0 to S = {total}"
                )
        out = np.empty(len(doc) - 1, np.int64)
        firsts = np.empty(len(doc) - 1, np.int64)  # each document's first sequence
        itemsize = self.dtype.itemsize
        acc = 0  # tokens of the sequences before s0
        j = 0  # next document boundary whose token prefix is not known yet
        prev_prefix = prev_bound = 0
        for s0 in range(0, max(total, 1), CHUNK):
            s1 = min(total, s0 + CHUNK)
            seq = np.asarray(lengths[s0:s1], np.int64)
            if seq.size and int(seq.min()) < 0:
                bad = s0 + int(np.argmax(seq < 0))
                raise self._fail(f"sequence {bad} has a negative length {int(lengths[bad])}")
            prefix = np.empty(seq.size + 1, np.int64)
            prefix[0] = acc
            np.cumsum(seq, out=prefix[1:])
            prefix[1:] += acc
            # the boundaries in [s0, s1): doc[j:k] (the last chunk takes the rest, all = S)
            k = len(doc) if s1 == total else int(np.searchsorted(doc, s1, side="left"))
            for b0 in range(j, k, CHUNK):
                b1 = min(k, b0 + CHUNK)
                bounds = np.asarray(doc[b0:b1], np.int64)
                at = prefix[bounds - s0]
                out[max(b0 - 1, 0) : b1 - 1] = np.diff(at, prepend=prev_prefix)[b0 == 0 :]
                firsts[max(b0 - 1, 0) : b1 - 1] = np.concatenate(([prev_bound], bounds[:-1]))[
                    b0 == 0 :
                ]
                prev_prefix, prev_bound = int(at[-1]), int(bounds[-1])
            j = k
            # the sequences of one document follow each other in the .bin
            ptr = np.asarray(pointers[s0 : min(total, s1 + 1)], np.int64)
            gap = ptr[1:] != ptr[:-1] + seq[: len(ptr) - 1] * itemsize
            if gap.any():
                after = np.flatnonzero(gap) + s0 + 1  # sequences not right after the one before
                at_doc = np.searchsorted(doc, after, side="left")
                first = np.asarray(doc[np.minimum(at_doc, len(doc) - 1)]) == after
                if not first.all():
                    bad = int(after[np.argmax(~first)])
                    raise self._fail(
                        f"sequence {bad} does not follow sequence {bad - 1} in the .bin "
                        f"(pointer {int(pointers[bad])}, expected "
                        f"{int(pointers[bad - 1]) + int(lengths[bad - 1]) * itemsize}) inside "
                        f"one document: a document's sequences must be contiguous"
                    )
            acc = int(prefix[-1])
        out.flags.writeable = False
        self._doc_firsts = firsts
        return out

    # -- serving -----------------------------------------------------------------------------

    def _servable(self) -> None:
        if self.dtype.kind == "f":
            raise ValueError(
                f"indexed dataset {self.path!r} holds {self.dtype.name} values, not integer "
                f"tokens: its lengths can be planned, but its tokens cannot be served"
            )

    @property
    def tokens(self) -> np.ndarray:
        """The whole ``.bin`` as a 1-D read-only memory map of ``dtype`` (mapped on first use,
        once the ``.bin`` is checked not to have shrunk since it was opened)."""
        self._servable()
        if self._tokens is None:
            self._bin.check()
            count = self._bin_size // self.dtype.itemsize
            self._tokens = _map(self._bin.file, self.dtype, 0, count)
        return self._tokens

    def __len__(self) -> int:
        return len(self.lengths)

    def _items(self, items: Any) -> np.ndarray:
        return K.ingest.check_items(items, len(self)).reshape(-1)

    def starts(self, items: Any) -> np.ndarray:
        """Return int64 element offsets into :attr:`tokens` of ``items`` (indices in [0, N)).

        Item ``i`` is ``tokens[starts[i] : starts[i] + lengths[i]]``. Checks that neither file
        shrank since it was opened and, for these items only, that each pointer is a multiple
        of the itemsize and that the item lies inside the ``.bin`` (ValueError naming the
        file, or the first bad item). Cost: O(len(items)) and two ``os.lseek`` (about 1 µs).
        """
        self._servable()
        self._idx.check()
        self._bin.check()
        arr = self._items(items)
        if self.documents:
            seqs = self._doc_firsts[arr]
            lens = self.lengths[arr]
            empty = lens == 0
            # an empty document (no sequence, or only empty ones) starts anywhere: offset 0
            ptr = np.zeros(arr.size, np.int64)
            full = ~empty
            ptr[full] = self.pointers[seqs[full]]
        else:
            lens = np.asarray(self.sequence_lengths[arr], np.int64)
            ptr = np.asarray(self.pointers[arr], np.int64)
        self._check_spans(ptr, lens, "document" if self.documents else "sequence", arr)
        return (ptr // self.dtype.itemsize).astype(np.int64, copy=False)

    def _check_spans(self, ptr: np.ndarray, lens: np.ndarray, what: str, ids: Any) -> None:
        """Refuse items (byte pointers, lengths) that are not inside the ``.bin`` at a multiple
        of the itemsize; ``ids[k]`` names item k (an array, or the first item's number)."""
        size = self.dtype.itemsize
        limit = self._bin_size // size
        bad = (ptr < 0) | (ptr % size != 0) | (lens < 0) | (ptr // size > limit - lens)
        if not bad.any():
            return
        k = int(np.argmax(bad))
        item = int(ids[k]) if isinstance(ids, np.ndarray) else ids + k
        p, n = int(ptr[k]), int(lens[k])
        if n < 0:
            rule = f"the negative length {n}"
        elif p % size:
            rule = f"pointer {p}, not a multiple of {size} (the itemsize)"
        else:
            rule = f"pointer {p} and length {n}: it would end at byte {p + n * size}"
        raise ValueError(
            f"indexed dataset {self.idx_path!r}: {what} {item} has {rule}; each {what} must lie "
            f"inside the .bin ({self._bin_size} bytes) at a pointer that is a multiple of {size}"
        )

    def check(self) -> None:
        """Check every item: each sequence's length non-negative, its pointer a multiple of the
        itemsize and the sequence inside the ``.bin``; with ``documents=True`` every document's
        length below 2**31 too. A ValueError names the first item that is not.

        ``padless.lengths_of`` (``lengths_from_file``) of an indexed dataset calls it, so the
        lengths it returns are lengths. A fairseq index was checked so when it was opened (its
        invariants are how its format is told); a Megatron index is checked here, once, and
        item by item as items are served.

        Cost: one pass over the lengths and pointers in chunks of 2**20 entries (12 bytes read
        per sequence from the map, bounded memory, nothing kept); nothing on later calls.
        """
        if not self._checked:
            size = self.dtype.itemsize
            for s0 in range(0, self.num_sequences, CHUNK):
                lens = np.asarray(self.sequence_lengths[s0 : s0 + CHUNK])
                ptr = np.asarray(self.pointers[s0 : s0 + CHUNK])
                # a few reductions over the chunk; the masks only to name a bad sequence
                ends = np.multiply(lens, size, dtype=np.int64)
                ends += ptr  # may wrap only for a pointer past the .bin, refused by ptr.max()
                if (
                    int(lens.min()) < 0
                    or int(ptr.min()) < 0
                    or int(ptr.max()) > self._bin_size
                    or int(np.bitwise_or.reduce(ptr)) % size
                    or int(ends.max()) > self._bin_size
                ):
                    self._check_spans(ptr.astype(np.int64), lens.astype(np.int64), "sequence", s0)
            self._checked = True
        if self.documents and self.lengths.size and int(self.lengths.max()) > MAX_SEQUENCE:
            at = int(np.argmax(self.lengths))
            raise self._fail(
                f"document {at} holds {int(self.lengths[at])} tokens: a length must be below "
                "2**31 (serve its sequences instead: documents=False)"
            )

    def __getitem__(self, i: int) -> np.ndarray:
        """Item ``i``'s tokens, a read-only view of the ``.bin`` (negative ``i`` counts back)."""
        if not isinstance(i, (int, np.integer)) or isinstance(i, (bool, np.bool_)):
            raise TypeError(f"index must be an int, got {type(i).__name__} {i!r}")
        n = len(self)
        j = int(i) + n if i < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(f"index {i} out of range for {n} items")
        start = int(self.starts(np.array([j]))[0])
        return self.tokens[start : start + int(self.lengths[j])]

    def __repr__(self) -> str:
        what = f"{self.num_documents} documents" if self.documents else "sequences"
        return (
            f"IndexedDataset({self.idx_path[:-4]!r}, {self.format}, {self.dtype.name}, "
            f"{self.num_sequences} sequences, serving {what})"
        )

    def __getstate__(self) -> dict[str, Any]:
        return {"idx_path": self.idx_path, "documents": self.documents}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.idx_path, self.path = _paths(state["idx_path"])
        self.documents = bool(state["documents"])
        self._open()


# -- writing ---------------------------------------------------------------------------------


def _code(dtype: Any, fmt: str) -> tuple[np.dtype[Any], int]:
    """The tokens' dtype and its code in ``fmt``'s table (integer dtypes only)."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype must be a numpy integer dtype, got {dtype!r}") from exc
    if dt.kind not in "iu":
        raise ValueError(f"dtype must be an integer dtype (tokens), got {dt.name}")
    dt = dt.newbyteorder("=")
    for code, known in _TABLES[fmt].items():
        if known == dt:
            return dt, code
    hint = " (fairseq's table has it: format='fairseq'; or use int64)" if fmt == "megatron" else ""
    raise ValueError(f"dtype {dt.name} has no code in the {fmt} .idx dtype table{hint}")


class _Temp:
    """A file under a hidden temporary name beside ``final``, renamed into place on commit."""

    def __init__(self, final: str) -> None:
        folder, base = os.path.split(os.path.realpath(final))
        self.final = final
        self.path = create_temporary(folder, base)  # named for its owner (core._temporary)
        self.file: BinaryIO = open(self.path, "wb")

    @staticmethod
    def free_name(final: str) -> str:
        """A hidden name beside ``final`` that no file has now."""
        folder, base = os.path.split(final)
        while True:
            name = os.path.join(folder, f".{base}.{os.urandom(6).hex()}.padless-out")
            if not os.path.lexists(name):
                return name

    def finish(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        try:
            mode = os.stat(self.final).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
        os.chmod(self.path, mode)
        self.file.close()

    def commit(self) -> None:
        os.replace(self.path, os.path.realpath(self.final))
        self.path = ""

    def discard(self) -> None:
        if not self.file.closed:
            self.file.close()
        if self.path:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class _Sink:
    """Streams tokens to the ``.bin`` and lengths / document ends to anonymous side files."""

    def __init__(self, bin_file: BinaryIO, folder: str, dtype: np.dtype[Any]) -> None:
        self.bin = bin_file
        self.dtype = dtype
        self.lengths = tempfile.TemporaryFile(dir=folder)  # int32 per sequence
        self.ends = tempfile.TemporaryFile(dir=folder)  # int64: sequences after each document
        self.pending: list[np.ndarray] = []
        self.pending_bytes = 0
        self.seq_lengths: list[int] = []
        self.doc_ends: list[int] = []
        self.sequences = 0
        self.documents = 0

    def sequence(self, tokens: np.ndarray) -> None:
        self.pending.append(tokens)
        self.pending_bytes += tokens.nbytes
        self.seq_lengths.append(len(tokens))
        self.sequences += 1
        if self.pending_bytes >= WRITE_BYTES or len(self.seq_lengths) >= CHUNK:
            self.flush()

    def document_end(self) -> None:
        self.doc_ends.append(self.sequences)
        self.documents += 1
        if len(self.doc_ends) >= CHUNK:
            self.flush()

    def block(self, values: np.ndarray, lengths: np.ndarray, counts: Any = None) -> None:
        """Many documents at once: their tokens, sequence lengths, and sequences per document
        (``None``: one each)."""
        self.raw(values)
        self.index(lengths, counts)

    def raw(self, values: np.ndarray) -> None:
        """Tokens (already of ``dtype``) straight to the ``.bin``, after what is pending."""
        self.flush()
        self.bin.write(np.ascontiguousarray(values, self.dtype).data.cast("B"))

    def index(self, lengths: np.ndarray, counts: Any = None) -> None:
        """The sequence lengths of whole documents, and their sequences per document."""
        self.flush()
        self.lengths.write(np.asarray(lengths, "<i4").tobytes())
        if counts is None:
            ends = np.arange(self.sequences + 1, self.sequences + len(lengths) + 1, dtype="<i8")
        else:
            ends = (np.cumsum(counts, dtype=np.int64) + self.sequences).astype("<i8")
        self.ends.write(ends.tobytes())
        self.sequences += len(lengths)
        self.documents += len(ends)

    def flush(self) -> None:
        if self.pending:
            data = self.pending[0] if len(self.pending) == 1 else np.concatenate(self.pending)
            self.bin.write(np.ascontiguousarray(data).data.cast("B"))
            self.pending, self.pending_bytes = [], 0
        if self.seq_lengths:
            self.lengths.write(np.asarray(self.seq_lengths, "<i4").tobytes())
            self.seq_lengths = []
        if self.doc_ends:
            self.ends.write(np.asarray(self.doc_ends, "<i8").tobytes())
            self.doc_ends = []

    def close(self) -> None:
        self.lengths.close()
        self.ends.close()

    def write_index(self, out: BinaryIO, fmt: str, code: int) -> None:
        """Header, lengths, pointers (a running byte sum) and the document index."""
        self.flush()
        s = self.sequences
        out.write(MAGIC + struct.pack("<QBQ", VERSION, code, s))
        if fmt == "megatron":
            out.write(struct.pack("<Q", self.documents + 1))
        for chunk in _chunks(self.lengths, "<i4", s):
            out.write(chunk.tobytes())
        acc = 0
        for chunk in _chunks(self.lengths, "<i4", s):
            nbytes = chunk.astype(np.int64) * self.dtype.itemsize
            ptr = np.empty(len(chunk), "<i8")
            ptr[0] = acc
            np.cumsum(nbytes[:-1], out=ptr[1:])
            ptr[1:] += acc
            acc += int(nbytes.sum())
            out.write(ptr.tobytes())
        if fmt == "megatron":
            out.write(struct.pack("<q", 0))
            for chunk in _chunks(self.ends, "<i8", self.documents):
                out.write(chunk.tobytes())


def _chunks(side: BinaryIO, dtype: str, count: int) -> Iterator[np.ndarray]:
    side.flush()
    side.seek(0)
    size = np.dtype(dtype).itemsize
    left = count
    while left:
        n = min(left, CHUNK)
        data = side.read(n * size)
        if len(data) != n * size:  # pragma: no cover - the side file is ours
            raise OSError("a temporary side file of the writer is shorter than written")
        yield np.frombuffer(data, dtype)
        left -= n


def _as_tokens(value: Any, dtype: np.dtype[Any], where: str) -> np.ndarray:
    """One sequence as a 1-D array of ``dtype``, its values checked to fit."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:  # ragged nesting, mixed sentences and ids
        raise ValueError(f"{where} must be a 1-D array of token ids: {exc}") from None
    if arr.ndim != 1:
        raise ValueError(f"{where} must be a 1-D array of token ids, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype)
    if arr.dtype.kind in "fO" and isinstance(value, (list, tuple)):
        arr = _python_ints(value, arr, dtype, where)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{where} must hold integers, got dtype {arr.dtype}")
    if len(arr) > MAX_SEQUENCE:
        raise ValueError(
            f"{where} has {len(arr)} tokens: a sequence's length is an int32 in the .idx "
            f"(at most 2**31 - 1); split it into sentences"
        )
    if not np.can_cast(arr.dtype, dtype):
        _fits(arr, dtype, where)
    return arr.astype(dtype, copy=False)


def _python_ints(
    value: list[Any] | tuple[Any, ...], arr: np.ndarray, dtype: np.dtype[Any], where: str
) -> np.ndarray:
    """Python ints beyond int64 make numpy infer float64 or object: check them one by one
    (floats and bools stay refused) and convert exactly; ``arr`` as it is otherwise."""
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
        return arr
    info = np.iinfo(dtype)
    for v in value:
        if not info.min <= int(v) <= info.max:
            raise ValueError(
                f"{where} holds the value {int(v)}, outside {dtype.name}'s range "
                f"[{info.min}, {info.max}]: choose a wider dtype"
            )
    return np.array([int(v) for v in value], dtype)


def _fits(arr: np.ndarray, dtype: np.dtype[Any], where: str) -> None:
    info = np.iinfo(dtype)
    lo, hi = arr.min(), arr.max()
    if lo < info.min or hi > info.max:
        bad = lo if lo < info.min else hi
        raise ValueError(
            f"{where} holds the value {int(bad)}, outside {dtype.name}'s range "
            f"[{info.min}, {info.max}]: choose a wider dtype"
        )


def _is_sentences(item: Any) -> bool:
    if not isinstance(item, (list, tuple)) or not item:
        return False
    return all(not np.isscalar(x) for x in item)


def _feed_items(items: Iterable[Any], sink: _Sink, dtype: np.dtype[Any]) -> None:
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise TypeError(
            f"items must be an iterable of documents (1-D integer arrays, or lists of them) or "
            f"an Arrow list column, got {type(items).__name__}"
        )
    for d, item in enumerate(items):
        if _is_sentences(item):
            for s, sentence in enumerate(item):
                sink.sequence(_as_tokens(sentence, dtype, f"document {d}, sentence {s}"))
        else:
            sink.sequence(_as_tokens(item, dtype, f"document {d}"))
        sink.document_end()


def _arrow_column(items: Any, column: str | None) -> Any:
    """The list column of an Arrow or ``datasets`` input (a ChunkedArray), or None for others."""
    module = type(items).__module__
    if not module.startswith(("pyarrow", "datasets")):
        if column is not None:
            raise TypeError(
                f"column= is for an Arrow table or a datasets.Dataset, got {type(items).__name__}"
            )
        return None
    import pyarrow as pa

    col = list_column(items, column, "write_indexed(items)")
    if not pa.types.is_integer(col.type.value_type):
        raise TypeError(
            f"write_indexed(items): the Arrow column must be a list of integers, got {col.type}"
        )
    if pa.types.is_fixed_size_list(col.type):
        col = col.cast(pa.list_(col.type.value_type))
    return col


def _feed_arrow(column: Any, sink: _Sink, dtype: np.dtype[Any]) -> None:
    import pyarrow.compute as pc

    row = 0
    for chunk in column.chunks:
        if chunk.null_count:
            bad = row + int(np.argmax(chunk.is_null().to_numpy(zero_copy_only=False)))
            raise ValueError(f"items: row {bad} is null; write an empty list for no tokens")
        offsets = np.asarray(chunk.offsets.to_numpy(), np.int64)
        r0 = 0
        while r0 < len(chunk):
            # rows r0..r1 hold at most WRITE_BYTES of tokens (at least one row)
            limit = offsets[r0] + max(WRITE_BYTES // dtype.itemsize, 1)
            r1 = max(int(np.searchsorted(offsets, limit, side="right")) - 1, r0 + 1)
            r1 = min(r1, len(chunk), r0 + CHUNK)
            part = chunk.slice(r0, r1 - r0)
            lengths = np.diff(offsets[r0 : r1 + 1])
            if int(lengths.max()) > MAX_SEQUENCE:
                bad = row + r0 + int(np.argmax(lengths > MAX_SEQUENCE))
                raise ValueError(
                    f"items: row {bad} has {int(lengths.max())} tokens: a sequence's length is "
                    f"an int32 in the .idx (at most 2**31 - 1)"
                )
            values = pc.list_flatten(part)
            if values.null_count:
                raise ValueError(f"items: rows {row + r0}..{row + r1 - 1} hold a null token")
            arr = values.to_numpy(zero_copy_only=False)
            if arr.size and not np.can_cast(arr.dtype, dtype):
                try:
                    _fits(arr, dtype, "items")
                except ValueError:
                    info = np.iinfo(dtype)
                    off = int(np.argmax((arr < info.min) | (arr > info.max)))
                    bad = row + r0 + int(np.searchsorted(np.cumsum(lengths), off, side="right"))
                    raise ValueError(
                        f"items: row {bad} holds the value {int(arr[off])}, outside "
                        f"{dtype.name}'s range [{info.min}, {info.max}]: choose a wider dtype"
                    ) from None
            sink.block(arr.astype(dtype, copy=False), lengths)
            r0 = r1
        row += len(chunk)


def check_target(prefix: Any, what: str = "prefix") -> tuple[str, str]:
    """Check up front that ``prefix`` can name a new pair; return its (idx, bin) paths.

    ``what`` names the parameter in errors."""
    idx_path, bin_path = _paths(prefix, what)
    if os.path.isdir(os.fspath(prefix)):
        raise IsADirectoryError(
            f"{what} {os.fspath(prefix)!r} is a folder: name the pair inside it "
            f"(e.g. {os.path.join(os.fspath(prefix), 'corpus_text_document')!r})"
        )
    folder = os.path.dirname(os.path.abspath(idx_path))
    if not os.path.isdir(folder):
        why = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise FileNotFoundError(f"the folder of {what} {os.fspath(prefix)!r} {why}: {folder}")
    for name in (idx_path, bin_path):
        if os.path.isdir(name):
            raise IsADirectoryError(f"{what}: {name!r} is a folder")
    return idx_path, bin_path


def _commit_pair(bin_tmp: _Temp, idx_tmp: _Temp) -> None:
    """Rename a pair's temporaries into place, ``.bin`` first (a reader never sees a new
    ``.idx`` over an old ``.bin``). An existing ``.bin`` is kept under a hard link until the
    ``.idx`` is in place: where that rename fails, the old ``.bin`` is put back, so the old pair
    stays whole (a new ``.bin`` under the old ``.idx`` reads as other documents, with no
    error). Only a kill between the two renames can leave them apart."""
    real_bin = os.path.realpath(bin_tmp.final)
    backup = ""
    if os.path.exists(real_bin):
        backup = _Temp.free_name(real_bin)
        try:
            os.link(real_bin, backup)
        except OSError:  # no hard links here: the renames alone
            backup = ""
    try:
        bin_tmp.commit()
        try:
            idx_tmp.commit()
        except BaseException:
            if backup:
                os.replace(backup, real_bin)
                backup = ""
            raise
    finally:
        if backup:
            try:
                os.unlink(backup)
            except FileNotFoundError:
                pass


def write_pair(
    path: str | os.PathLike[str],
    fmt: str,
    dtype: Any,
    fill: Callable[[_Sink], None],
    signals: Signals | None = None,
) -> tuple[str, str]:
    """Write a pair at ``path`` (a prefix or either file): ``fill(sink)`` streams its items.

    The machinery of :func:`write_indexed`, shared with the indexed shuffle: temporaries beside
    the targets, fsynced, renamed ``.bin`` first with SIGINT, SIGTERM and SIGHUP held back;
    removed on any error, and on SIGTERM or SIGHUP (``signals``: the caller's
    :class:`~padless.core._temporary.Signals`, entered; else one of its own). What writers
    killed by SIGKILL left beside the pair is removed first. Returns (idx, bin).
    """
    if signals is None:
        with Signals() as own:
            return write_pair(path, fmt, dtype, fill, own)
    dt, code = _code(dtype, fmt)
    idx_path, bin_path = _paths(path, "prefix")
    folder = os.path.dirname(os.path.abspath(idx_path))
    remove_stale(list(dict.fromkeys([folder, os.path.dirname(os.path.realpath(bin_path))])))
    temps: list[_Temp] = []
    sink: _Sink | None = None
    try:
        bin_tmp = _Temp(bin_path)
        temps.append(bin_tmp)
        sink = _Sink(bin_tmp.file, folder, dt)
        fill(sink)
        sink.flush()
        idx_tmp = _Temp(idx_path)
        temps.append(idx_tmp)
        sink.write_index(idx_tmp.file, fmt, code)
        for temp in temps:
            temp.finish()
        signals.check()
        with signals.deferred():
            _commit_pair(bin_tmp, idx_tmp)
    finally:
        if sink is not None:
            sink.close()
        for temp in temps:
            temp.discard()
    return idx_path, bin_path


def write_indexed(
    items: Any,
    prefix: str | os.PathLike[str],
    *,
    dtype: Any,
    format: str = "megatron",
    column: str | None = None,
) -> IndexedDataset:
    """Write ``prefix.bin`` + ``prefix.idx`` from documents; return the pair opened.

    Args:
        items: an iterable of documents, each a 1-D integer array-like (one document of one
            sequence) or a list/tuple of them (a document split into sentences: one sequence
            each); or an Arrow list<int> column (``pyarrow.Array``/``ChunkedArray``, or a
            ``pyarrow.Table`` / ``datasets.Dataset`` with ``column=``), one document per row,
            written from the values buffer with no Python pass per row.
        prefix: the pair's path without suffix (a trailing ``.idx``/``.bin`` is dropped), in
            an existing folder; an existing folder itself is refused (name the pair inside it).
        dtype: the tokens' integer dtype; every value must fit (ValueError naming the document
            and the value; Python ints beyond int64 are checked exactly). Megatron: uint8, int8,
            int16, uint16, int32, int64; fairseq also uint32, uint64. Tokens are integers:
            float arrays (whole-numbered too), bool arrays and text are a TypeError.
        format: ``"megatron"`` (with a document index) or ``"fairseq"`` (sequences only: a
            document's sentences are written as consecutive sequences).
        column: the token column of a table.

    Empty documents: an empty list or array is a document of one zero-length sequence (as an
    empty Arrow row), so every document is in the document index and every input item is one
    item when served; a list of sentences is told from a list of token ids by its elements
    (array-likes, not numbers). Documents of no sequence (Megatron's index allows them) are read,
    not written. A sequence of 2**31 tokens or more is refused (the length is an int32).

    Both files are written under temporary names beside ``prefix``, fsynced, and renamed into
    place, ``.bin`` first; on any error (KeyboardInterrupt included) the temporaries are removed
    and an existing pair is left as it was (a failed ``.idx`` rename puts the old ``.bin``
    back; only a kill between the two renames can leave a new ``.bin`` under an old ``.idx``).

    Cost: one pass over the tokens; memory bounded (8 MiB of tokens, 2**20 lengths) whatever
    the size; the lengths and document ends spill to anonymous temporary files and the ``.idx``
    is assembled from them at the end.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    dt, _ = _code(dtype, format)
    idx_path, _ = check_target(prefix)
    arrow = _arrow_column(items, column)
    if arrow is not None:
        write_pair(idx_path, format, dt, lambda sink: _feed_arrow(arrow, sink, dt))
    else:
        write_pair(idx_path, format, dt, lambda sink: _feed_items(items, sink, dt))
    return IndexedDataset(idx_path)
