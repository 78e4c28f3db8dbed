"""Raw token files as token stores: documents split at an end-of-sequence token.

A raw token file is one integer dtype's values back to back with no header: a Megatron/OLMo
``.bin``, or an OLMo-style ``.npy`` that is a raw memory map without the numpy header (a real
``.npy`` with a header is read too, its dtype from the header). :class:`RawTokens` serves its
documents, each ending after an ``eos`` token, by the token-store interface that
``padless.torch.TokenDataset`` and ``LMStream`` read (``path``, ``dtype``, ``tokens``,
``lengths``, ``starts``, ``__getitem__``, ``__len__``; pickled as its path and settings).

The document offsets come from one compiled pass (``eos_offsets``, several GB/s) and are written
once beside the token file (``<name>.<dtype>.eos<id>.offsets.npy``, int64, atomically) with a
record of the token file's identity, then memory-mapped by later opens while that identity holds
(:mod:`padless.io._files` says what it tells and what it cannot). :func:`open_tokens` picks the
store for a path: a Megatron/fairseq ``.idx``/``.bin`` pair or a raw file.
"""

from __future__ import annotations

import operator
import os
import stat
from typing import Any, BinaryIO

import numpy as np

from .. import _kernels as K
from ..core._output import write_exactly
from . import _files
from ._files import Watch
from .indexed import IndexedDataset
from .readers import is_indexed_path

__all__ = ["RawTokens", "open_tokens"]

_NPY_MAGIC = b"\x93NUMPY"
#: Offsets checked against the tokens (the token before each must be eos) when a cache is read.
_SPOT_CHECKS = 64


def _token_dtype(value: Any, what: str) -> np.dtype:
    try:
        dtype = np.dtype(value)
    except TypeError as err:
        raise TypeError(f"{what} must be a numpy integer dtype, got {value!r}") from err
    if dtype.kind not in "iu":
        kind = {"f": "float ", "c": "complex "}.get(dtype.kind, "")
        raise TypeError(f"{what} must be an integer dtype (token ids), got {kind}dtype {dtype}")
    if not dtype.isnative:
        raise ValueError(f"{what} must be in native byte order, got {dtype.str}")
    if dtype not in K.ingest.TOKEN_DTYPES:
        listed = ", ".join(d.name for d in K.ingest.TOKEN_DTYPES)
        raise TypeError(f"{what} must be one of {listed}, got {dtype}")
    return dtype


def npy_layout(fh: BinaryIO, path: str, size: int) -> tuple[np.dtype, int, int] | None:
    """(dtype as the header says, count, data offset) of a real ``.npy`` token file open at
    ``fh`` (``size`` bytes), found by its numpy magic under any name; None without the magic.
    A header that is not valid, not 1-D, or promising more bytes than the file holds is a
    ValueError naming the file (``RawTokens`` and ``LMStream`` read token files by it)."""
    fh.seek(0)
    if fh.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
        return None
    fh.seek(0)
    try:
        version = np.lib.format.read_magic(fh)
        shape, _, dtype = (
            np.lib.format.read_array_header_1_0(fh)
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0(fh)
        )
    except ValueError as err:
        raise ValueError(
            f"{path!r} starts as a .npy file but its header is not valid: {err}"
        ) from err
    start = fh.tell()
    if len(shape) != 1 or int(shape[0]) < 0:
        raise ValueError(f"a token file must be 1-D, got shape {shape} in {path!r}")
    dtype, count = np.dtype(dtype), int(shape[0])
    if start + count * dtype.itemsize > size:
        raise ValueError(
            f"{path!r} is truncated: its header promises {count} tokens of {dtype} "
            f"({count * dtype.itemsize} bytes), the file holds {size - start}"
        )
    return dtype, count, start


class RawTokens:
    """The documents of a raw token file, each ending after an ``eos`` token (which it keeps).

    Args:
        path: the token file (a regular file: a folder, pipe or device such as ``/dev/zero``
            is refused, having no size to map): headerless values of ``dtype`` (``.bin``, a raw OLMo ``.npy``), or
            a real 1-D ``.npy`` (then ``dtype`` may be omitted; given, it must match the header).
        dtype: the tokens' dtype: uint8, int8, int16, uint16, int32, uint32 or int64.
        eos: the end-of-sequence token id that closes each document (in the dtype's range). A
            last document without eos ends at the end of the file; an empty file has none.
        cache: write the document offsets beside the file on first open
            (``<name>.<dtype>.eos<eos>.offsets.npy``, under a temporary name, fsynced, renamed)
            and map them on later opens while valid. The file is a ``.npy`` of the offsets
            (``np.load`` reads it) followed by an 80-byte record of the token file's identity
            when they were computed: its size, mtime_ns, ctime_ns, inode (st_ino, st_dev) and
            a blake2b digest of 16 sampled 64 KiB blocks. It is used only when that record
            equals the file's now and its offsets hold (first 0, last the token count,
            increasing, a sample of its ends right after an eos); anything else, a cache of
            the old format without the record included, is recomputed (and rewritten). So a
            file replaced or rewritten is seen even with its mtime put back (``cp -p``,
            ``rsync -a``, ``tar x``, ``touch -r``: the ctime moves); a same-size rewrite in
            place is seen by the digest when a sampled block changed, and not at all when none
            did and the clock was too coarse for the ctime to move. A folder that cannot be
            written, or a link, pipe or device at the offsets file's name (never written
            through, never opened unless it is a regular file), keeps the offsets in memory.
            ``cache=False`` neither reads nor writes it.

    Attributes: ``path``, ``dtype``, ``eos``, ``tokens`` (read-only memmap of the whole file),
    ``offsets`` (int64, documents + 1), ``lengths`` (int64 ``np.diff(offsets)``, computed at
    open), ``cache_path`` (the offsets file in use, or None when they live in memory).

    The token file is kept open while the store lives; each item or batch served
    (``[i]``, :meth:`starts`) first checks that it has not shrunk since it was opened
    (``ValueError`` naming it, the size it had and has), instead of reading zeros or dying of
    ``SIGBUS`` in the map. A cut between that check and the read is not seen (the kernel's
    ``SIGBUS``, as for Megatron's reader), nor is a rewrite in place of the same size.

    Cost: the first open, one pass over the tokens (several GB/s, on up to four threads) and a
    write of 8 bytes per document; later opens, a map of the offsets file and one pass over it;
    with ``cache``, an fstat and 1 MiB read and hashed for the identity. Serving adds one
    ``os.lseek`` per call (under 1 µs).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "corpus.bin")
    >>> np.array([5, 6, 0, 7, 0, 8, 9], dtype=np.uint16).tofile(path)
    >>> docs = RawTokens(path, dtype="uint16", eos=0)
    >>> len(docs), docs.lengths.tolist(), docs[1].tolist()
    (3, [3, 2, 2], [7, 0])
    """

    path: str
    dtype: np.dtype
    eos: int
    tokens: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    cache_path: str | None

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        dtype: Any = None,
        eos: int,
        cache: bool = True,
    ) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a path to a token file, got {type(path).__name__}")
        if not isinstance(cache, bool):
            raise TypeError(f"cache must be a bool, got {cache!r}")
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            what = (
                "does not exist"
                if not os.path.exists(self.path)
                else (
                    "is a folder"
                    if os.path.isdir(self.path)
                    else "is not a regular file (a device or pipe has no size to map)"
                )
            )
            raise ValueError(
                f"path must be an existing token file, got {self.path!r}, which {what}"
            )
        self._dtype_arg = dtype
        self._cache = cache
        self._watch = Watch(self.path, "token file")
        self.dtype, self.tokens = self._map(dtype)
        self.eos = K.ingest.check_eos(eos, self.dtype)
        self.offsets, self.cache_path = self._offsets()
        self.lengths = np.diff(np.asarray(self.offsets))

    # ------------------------------------------------------------------ opening
    def _map(self, dtype: Any) -> tuple[np.dtype, np.ndarray]:
        size = self._watch.size
        header = npy_layout(self._watch.file, self.path, size)
        if header is not None:
            file_dtype, count, start = header
            file_dtype = _token_dtype(file_dtype, f"the dtype of {self.path!r}")
            if dtype is not None and _token_dtype(dtype, "dtype") != file_dtype:
                raise ValueError(
                    f"dtype must match the .npy header's dtype {file_dtype} of {self.path!r}, "
                    f"got {np.dtype(dtype)}"
                )
        else:
            if dtype is None:
                raise TypeError(
                    f"dtype is required for a raw token file (no .npy header), got None for "
                    f"{self.path!r}; e.g. dtype='uint16'"
                )
            file_dtype, start = _token_dtype(dtype, "dtype"), 0
            if size % file_dtype.itemsize:
                raise ValueError(
                    f"the size of a raw token file must be a multiple of the {file_dtype} "
                    f"itemsize {file_dtype.itemsize}, got {size} bytes in {self.path!r}"
                )
            count = size // file_dtype.itemsize
        if count == 0:
            return file_dtype, np.zeros(0, dtype=file_dtype)
        mapped = np.memmap(
            self._watch.file, dtype=file_dtype, mode="r", offset=start, shape=(count,)
        )
        return file_dtype, mapped

    def _cache_name(self) -> str:
        return f"{self.path}.{self.dtype.name}.eos{self.eos}.offsets.npy"

    def _offsets(self) -> tuple[np.ndarray, str | None]:
        name = self._cache_name()
        if not self._cache:
            return K.eos_offsets(self.tokens, self.eos), None
        # the identity before the pass: a change during it makes the record stale, never wrong
        record = _files.identity_of(self._watch.fileno())
        cached = self._read_cache(name, record)
        if cached is not None:
            return cached, name
        offsets = np.ascontiguousarray(K.eos_offsets(self.tokens, self.eos), dtype="<i8")
        try:
            held = os.lstat(name)
        except FileNotFoundError:
            held = None
        except OSError:
            return offsets, None
        if held is not None and not stat.S_ISREG(held.st_mode):
            # a link, pipe, device or folder at the cache's name is the user's: never written
            # through (a link would overwrite the file it points to), offsets kept in memory
            return offsets, None
        try:
            write_exactly(name, lambda f: _write_offsets(f, offsets, record), what="offsets file")
        except OSError:  # a folder we may not write: the offsets stay in memory
            return offsets, None
        return offsets, name

    def _read_cache(self, name: str, record: bytes) -> np.ndarray | None:
        """The offsets file at ``name`` when it was written for the tokens as they are (its
        identity record equals ``record``) and its offsets hold, else None.

        Only a regular file is opened (a pipe would block, a device never end); its header is
        read by hand and must describe exactly the bytes that follow but the record (1-D
        little-endian int64), so a hostile header never maps past the file's end nor allocates.
        """
        try:
            info = os.stat(name)
            if not stat.S_ISREG(info.st_mode):
                return None
            with open(name, "rb") as fh:
                version = np.lib.format.read_magic(fh)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
                else:
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
                start = fh.tell()
                if dtype != np.dtype("<i8") or fortran or len(shape) != 1 or shape[0] < 1:
                    return None
                end = start + 8 * int(shape[0])
                if end + _files.RECORD.size != os.fstat(fh.fileno()).st_size:
                    return None  # the old format (no record), or not ours
                fh.seek(end)
                if fh.read(_files.RECORD.size) != record:
                    return None  # written for another file, or for this one before a change
                offsets = np.memmap(fh, dtype="<i8", mode="r", offset=start, shape=(shape[0],))
        except (OSError, ValueError, EOFError, TypeError):
            return None
        n = len(self.tokens)
        if (
            not isinstance(offsets, np.ndarray)
            or offsets.dtype != np.int64
            or offsets.ndim != 1
            or offsets.size < 1
            or offsets[0] != 0
            or offsets[-1] != n
            or bool((np.diff(offsets) <= 0).any())  # every document holds a token
        ):
            return None
        # the inner ends each follow an eos (a sample of them; a full check is a pass over tokens)
        inner = offsets[1:-1]
        if inner.size:
            picks = np.unique(np.linspace(0, inner.size - 1, _SPOT_CHECKS).astype(np.int64))
            if bool((self.tokens[inner[picks] - 1] != self.eos).any()):
                return None
        return offsets

    # ------------------------------------------------------------------ the store
    def __len__(self) -> int:
        return len(self.offsets) - 1

    def starts(self, items: np.ndarray) -> np.ndarray:
        """int64 offsets into ``tokens`` of the given items (each in ``[0, len(self))``);
        ValueError when the token file shrank since it was opened."""
        self._watch.check()
        idx = K.ingest.check_items(items, len(self), of=f" (the documents of {self.path!r})")
        return np.asarray(self.offsets[idx], dtype=np.int64)

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self)
        if isinstance(i, (bool, np.bool_)):
            raise TypeError(f"index must be an int, got bool {i!r}")
        k = operator.index(i)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError(f"document {i} out of range for {n} documents")
        self._watch.check()
        return self.tokens[int(self.offsets[k]) : int(self.offsets[k + 1])]

    # ------------------------------------------------------------------ pickling
    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "dtype": self._dtype_arg, "eos": self.eos, "cache": self._cache}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["path"], dtype=state["dtype"], eos=state["eos"], cache=state["cache"]
        )

    def __repr__(self) -> str:
        return (
            f"RawTokens({self.path!r}, dtype={self.dtype.name!r}, eos={self.eos}, "
            f"documents={len(self)}, tokens={len(self.tokens)})"
        )


def _write_offsets(out: BinaryIO, offsets: np.ndarray, record: bytes) -> None:
    """The offsets as a ``.npy`` (read by ``np.load``, which stops at its shape), then the
    token file's identity record after them."""
    header = {"descr": "<i8", "fortran_order": False, "shape": (len(offsets),)}
    np.lib.format.write_array_header_1_0(out, header)
    out.write(offsets.data.cast("B"))
    out.write(record)


def open_tokens(
    source: str | os.PathLike[str],
    *,
    dtype: Any = None,
    eos: int | None = None,
    documents: bool = False,
) -> Any:
    """The token store for a path: an indexed dataset or a :class:`RawTokens`.

    A Megatron/fairseq pair (``prefix``, ``prefix.idx`` or ``prefix.bin`` with both files there,
    or any ``.idx``) opens as ``padless.io.indexed.IndexedDataset(source, documents=documents)``
    (its items are sequences, or documents with ``documents=True``); anything else is a raw token
    file, ``RawTokens(source, dtype=dtype, eos=eos)``, which needs ``eos`` (and ``dtype`` unless
    it is a real ``.npy``).

    Cost: that of the store's open.
    """
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a path, got {type(source).__name__}")
    text = os.fspath(source)
    if is_indexed_path(text):
        for name, value in (("dtype", dtype), ("eos", eos)):
            if value is not None:
                raise ValueError(
                    f"{name} describes a raw token file; {text!r} is an indexed dataset, whose "
                    f".idx gives its dtype and its items: drop {name}={value!r:.40}"
                )
        return IndexedDataset(source, documents=documents)
    if not os.path.exists(text):
        raise FileNotFoundError(f"no such token file: {text!r}")
    if documents:
        raise ValueError(
            f"documents=True is for an indexed dataset (.idx + .bin); {text!r} is a raw token "
            "file, whose items are already its documents (pass eos=)"
        )
    if eos is None:
        raise TypeError(
            f"eos is required for a raw token file (the token that ends each document), got "
            f"None for {text!r}; e.g. open_tokens(path, dtype='uint16', eos=0)"
        )
    return RawTokens(source, dtype=dtype, eos=eos)
