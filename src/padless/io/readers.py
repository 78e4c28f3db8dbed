"""Read sequence lengths from files: arrays, token corpora, text, Arrow/Parquet, saved HF datasets.

Nothing here makes a Python pass over rows where the format gives lengths directly: text is
counted by one compiled pass over the memory-mapped (or streamed, decompressed) bytes, Arrow list
columns give lengths from their offsets, and tokenizers are called through their batch APIs.

This module depends on :mod:`padless.core.lengths` (for the checks of what it reads); the dispatcher
for paths, :func:`padless.io.lengths_from_file` (and :func:`padless.lengths_of`), imports it.
"""

from __future__ import annotations

import gzip
import io
import mmap
import os
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple, cast

import numpy as np

from ..core._output import load_json
from ..core.lengths import arrow_like, as_lengths
from ..core.plan import is_saved_plan

__all__ = [
    "TOKENIZERS",
    "MissingDependency",
    "check_tokenizer",
    "lengths_from_arrow",
    "lengths_from_text",
    "list_column",
]  # the user's readers; tokenizer_counter, arrow_lengths, load_npy serve padless.ray too

PathLike = str | os.PathLike[str]

TOKENIZERS = ("whitespace", "chars", "bytes", "spm:MODEL", "hf:TOKENIZER.json")
_CHUNK = 8 << 20  # bytes of text per streamed piece (decompressed)
_MAPPED_PIECE = 64 << 20  # bytes of a mapped file per progress report
_TEXT_BATCH = 4096  # lines per tokenizer batch call
_IN_FLIGHT = 3  # tokenizer batches submitted and not yet collected
_TEXT_MODES = {"whitespace": 0, "chars": 1, "bytes": 2}  # as in _text_kernels


class MissingDependency(ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


def _need(module: str, extra: str, what: str) -> Any:
    from importlib import import_module

    try:
        return import_module(module)
    except ImportError as exc:
        raise MissingDependency(
            f"{what} needs the optional package {module!r}: pip install 'padless[{extra}]' "
            f"(or pip install {module})"
        ) from exc


# --------------------------------------------------------------------------- text

_COMPRESSED = (".gz", ".zst", ".zstd")

# the first bytes of each format padless reads (a file's kind is told by its content; its
# name decides only where the content says nothing: text, raw tokens, an Arrow stream)
_MAGIC = (
    (b"\x93NUMPY", "npy"),
    (b"PK\x03\x04", "npz"),
    (b"PK\x05\x06", "npz"),  # an empty archive
    (b"PAR1", "parquet"),
    (b"ARROW1", "arrow"),
    (b"FEA1", "arrow"),  # Feather version 1
    (b"\x1f\x8b", "gzip"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)


def sniff(path: Path) -> str | None:
    """The format a regular file's first bytes name (``"npy"``, ``"npz"``, ``"parquet"``,
    ``"arrow"``, ``"gzip"``, ``"zstd"``), or None: unknown, or not a regular file (a pipe or
    device is not read ahead: its bytes would be gone)."""
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return None
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if len(head) >= 4 and head[0] & 0xF0 == 0x50 and head[1:4] == b"\x2a\x4d\x18":
        return "zstd"  # a skippable frame first (0x184D2A5?)
    return None


def _compression(path: Path) -> str | None:
    """``"gzip"`` or ``"zstd"`` for compressed text, by content (by name for a pipe)."""
    kind = sniff(path)
    if kind in ("gzip", "zstd"):
        return kind
    name = path.name.lower()
    named = "gzip" if name.endswith(".gz") else "zstd" if name.endswith((".zst", ".zstd")) else None
    if named is not None and path.is_file():  # the name says compressed, the content does not
        raise ValueError(
            f"{path} is not whole {named} data (it does not begin as {named} data does, as its "
            "name says): a damaged file, or text under a compressed name (rename it)"
        )
    return named


_INFLATE_IN = 8192  # compressed bytes per zstd call: bounds the text one call can produce


def _open_text(path: Path) -> IO[bytes]:
    """A binary stream of the text: decompressed on the fly for .gz/.zst (never whole in RAM),
    a file cut short or corrupt a ``ValueError`` naming it when read (:class:`_Inflating`)."""
    kind = _compression(path)
    if kind == "gzip":
        return cast(IO[bytes], io.BufferedReader(_Inflating(path, None)))
    if kind == "zstd":
        zstd = _need("zstandard", "text", f"reading {path.name}")
        return cast(IO[bytes], io.BufferedReader(_Inflating(path, zstd)))
    return open(path, "rb")


class _Inflating(io.RawIOBase):
    """The text of a .gz file (``zstd`` None) or a .zst file (``zstd``: the zstandard module,
    read frame after frame) as a raw stream, each read checked: data cut short or corrupt
    raises a ValueError naming the file, never ends as a shorter text (gzip says so itself;
    zstandard's stream reader ends quietly inside a frame, so frames are read here and the
    last one must end)."""

    def __init__(self, path: Path, zstd: Any) -> None:
        super().__init__()
        self._path, self._zstd = path, zstd
        self._raw = open(path, "rb")
        self._gzip = None if zstd is not None else gzip.GzipFile(fileobj=self._raw, mode="rb")
        self._frame: Any = None  # the .zst frame being read (a decompressobj)
        self._out, self._at = b"", 0  # decompressed text not yet read, and where it starts
        # what the decompressors raise for data cut short or corrupt
        self._errors: tuple[type[BaseException], ...] = (EOFError, zlib.error, gzip.BadGzipFile)
        if zstd is not None:
            self._errors = (*self._errors, zstd.ZstdError)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            if self._gzip is not None:
                return self._gzip.readinto(buffer)
            return self._zstd_into(memoryview(buffer).cast("B"))
        except self._errors as err:
            kind = "gzip" if self._zstd is None else "zstd"
            raise ValueError(
                f"{self._path} is not whole {kind} data (cut short or corrupt: {err}); its "
                "text cannot be read to its end"
            ) from None

    def _zstd_into(self, view: memoryview) -> int:
        while self._at == len(self._out):
            data = self._raw.read(_INFLATE_IN)
            if not data:
                if self._frame is not None and not self._frame.eof:
                    raise EOFError("the file ends inside a frame")
                return 0
            parts = []
            while data:  # a frame may end inside the data, and the next begin
                if self._frame is None or self._frame.eof:
                    self._frame = self._zstd.ZstdDecompressor().decompressobj()
                parts.append(self._frame.decompress(data))
                data = self._frame.unused_data if self._frame.eof else b""
            self._out, self._at = b"".join(parts), 0
        n = min(len(view), len(self._out) - self._at)
        view[:n] = self._out[self._at : self._at + n]
        self._at += n
        return n

    def close(self) -> None:
        try:
            if self._gzip is not None:
                self._gzip.close()
        finally:
            self._raw.close()
            super().close()


def _as_path(path: Any) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"path must be a str or a pathlib.Path, got {type(path).__name__} {path!r:.60}"
        )
    return Path(path)


def _check_progress(progress: Any) -> Callable[[int, int], None] | None:
    if progress is not None and not callable(progress):
        raise TypeError(
            "progress must be a function (text_bytes, lines) -> None, or None, got "
            f"{type(progress).__name__} {progress!r:.60}"
        )
    return cast("Callable[[int, int], None] | None", progress)


def _text_path(path: PathLike, what: str) -> Path:
    """Check that ``path`` names a readable text source (a file, a pipe), not a folder."""
    src = _as_path(path)
    if src.is_dir():
        raise ValueError(
            f"{src} is a folder, not a text file: {what} reads one text file (one sequence per "
            "line); a saved datasets folder is read by lengths_from_file(path, column=...)"
        )
    if not src.exists():
        raise FileNotFoundError(f"no such file: {src}")
    return src


def _binary_error(src: Path, offset: int) -> ValueError:
    where = "of the decompressed text" if _compression(src) else "in the file"
    return ValueError(
        f"{src} looks binary, not text: a NUL byte at offset {offset} {where}; "
        "lengths_from_text reads text, one sequence per line (arrays of lengths: .npy/.npz; "
        "Arrow/Parquet: lengths_from_arrow)"
    )


class _LineCounter:
    """Feeds pieces of text to the compiled counter, growing the output as lines come."""

    def __init__(self, mode: int, capacity: int) -> None:
        from . import _text_kernels  # loaded only when text is counted

        self.tk = _text_kernels
        self.mode = mode
        self.state = self.tk.new_state(mode)
        self.flags = np.zeros(self.tk.BLOCK, dtype=np.uint8)
        self.out = np.empty(max(capacity, 4 * self.tk.BLOCK), dtype=np.int64)
        self.lines = 0
        self.offset = 0  # bytes fed so far
        self.last: int | None = None  # the last byte fed

    def feed(self, piece: np.ndarray) -> int:
        """Count the lines that end in ``piece``; return the NUL's offset in the text or -1."""
        done = 0
        size = piece.shape[0]
        while True:
            used, self.lines, nul = self.tk.count_lines(
                piece[done:], self.mode, self.out, self.lines, self.state, self.flags
            )
            if nul >= 0:
                return self.offset + done + nul
            done += used
            if done == size:
                break
            grown = np.empty(2 * self.out.shape[0], dtype=np.int64)
            grown[: self.lines] = self.out[: self.lines]
            self.out = grown
        if size:
            self.last = int(piece[size - 1])
        self.offset += size
        return -1

    def result(self) -> np.ndarray:
        tail = self.tk.finish(self.mode, self.state, self.last)
        out = self.out[: self.lines + (tail is not None)].copy()
        if tail is not None:
            out[-1] = tail
        return out


def _count_mapped(
    src: Path, counter: _LineCounter, progress: Callable[[int, int], None] | None
) -> bool:
    """Count a plain file through a read-only memory map; False if it cannot be mapped."""
    try:
        fh = open(src, "rb")
    except OSError:
        return False
    with fh:
        try:
            mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # empty file, a pipe, a device
            return False
        data: np.ndarray | None = None
        try:
            if hasattr(mapped, "madvise"):
                mapped.madvise(mmap.MADV_SEQUENTIAL)
            data = np.frombuffer(mapped, dtype=np.uint8)
            step = _MAPPED_PIECE if progress is not None else max(1, data.shape[0])
            for lo in range(0, data.shape[0], step):
                before = counter.lines
                nul = counter.feed(data[lo : lo + step])
                if nul >= 0:
                    raise _binary_error(src, nul)
                if progress is not None:
                    progress(min(step, data.shape[0] - lo), counter.lines - before)
        finally:
            data = None  # release the buffer before closing the mapping
            try:
                mapped.close()
            except BufferError:  # a view is still alive (in a traceback); it closes with it
                pass
    return True


def _count_streamed(
    src: Path, counter: _LineCounter, progress: Callable[[int, int], None] | None
) -> None:
    """Count a compressed file (or anything unmappable) piece by piece as it decompresses."""
    block = bytearray(_CHUNK)
    view = np.frombuffer(block, dtype=np.uint8)
    with _open_text(src) as fh:
        while True:
            got = fh.readinto(block)  # type: ignore[attr-defined]
            if not got:
                break
            before = counter.lines
            nul = counter.feed(view[:got])
            if nul >= 0:
                raise _binary_error(src, nul)
            if progress is not None:
                progress(got, counter.lines - before)


def _count_text(src: Path, mode: int, progress: Callable[[int, int], None] | None) -> np.ndarray:
    compressed = _compression(src) is not None
    regular = src.is_file()  # pipes and devices are read once, as a stream
    size = src.stat().st_size if regular else 0
    # a first guess at the lines (about 128 bytes each); the output doubles when it fills up
    counter = _LineCounter(mode, (size * (4 if compressed else 1)) // 128)
    if compressed or not regular or not _count_mapped(src, counter, progress):
        _count_streamed(src, counter, progress)
    return counter.result()


def _byte_chunks(fh: IO[bytes], src: Path) -> Iterator[bytes]:
    """Chunks of whole lines (each ends with a newline, except possibly the very last one).

    Refuses binary input: a NUL byte raises, naming the file and the offset.
    """
    carry = b""
    offset = 0  # text offset of the start of `carry`
    while True:
        block = fh.read(_CHUNK)
        if not block:
            if carry:
                yield carry
            return
        nul = block.find(b"\0")
        if nul >= 0:
            raise _binary_error(src, offset + len(carry) + nul)
        data = carry + block
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            continue
        carry = data[cut + 1 :]
        offset += cut + 1
        yield data[: cut + 1]


def _decode_lines(data: bytes) -> list[str]:
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def tokenizer_counter(tokenizer: str) -> Callable[[list[str]], np.ndarray]:
    """A batch function: list of texts -> token counts, for spm:/hf: tokenizers.

    Each call is one batch call of the tokenizer, which spreads the batch over its own threads
    (sentencepiece: ``num_threads=-1``, all cores; ``tokenizers``: its Rayon pool).
    """
    kind, _, model = tokenizer.partition(":")
    if not model:
        raise ValueError(f"tokenizer {tokenizer!r} needs a model path: {kind}:PATH")
    if not Path(model).is_file():
        raise FileNotFoundError(f"tokenizer model not found: {model}")
    if kind == "spm":
        spm = _need("sentencepiece", "spm", "--tokenizer spm:")
        try:
            sp = spm.SentencePieceProcessor(model_file=model)
        except Exception as exc:  # sentencepiece raises RuntimeError/OSError with its own text
            raise ValueError(f"{model} is not a sentencepiece model ({exc})") from exc

        def count_spm(texts: list[str]) -> np.ndarray:
            return np.fromiter(map(len, sp.encode(texts)), np.int64, len(texts))

        return count_spm
    if kind == "hf":
        tk = _need("tokenizers", "hf", "--tokenizer hf:")
        try:
            tok = tk.Tokenizer.from_file(model)
        except Exception as exc:  # tokenizers raises a bare Exception on a bad file
            raise ValueError(f"{model} is not a Hugging Face tokenizer.json ({exc})") from exc
        # the same ids as encode_batch, without computing character offsets
        encode = getattr(tok, "encode_batch_fast", tok.encode_batch)

        def count_hf(texts: list[str]) -> np.ndarray:
            return np.fromiter(map(len, encode(texts)), np.int64, len(texts))

        return count_hf
    raise ValueError(f"tokenizer must be one of {', '.join(TOKENIZERS)}, got {tokenizer!r}")


def check_tokenizer(tokenizer: str) -> str:
    """Validate a tokenizer spec (without loading a model)."""
    if not isinstance(tokenizer, str):
        raise TypeError(f"tokenizer must be a str, got {type(tokenizer).__name__}")
    if tokenizer in _TEXT_MODES:
        return tokenizer
    kind, sep, _ = tokenizer.partition(":")
    if sep and kind in ("spm", "hf"):
        return tokenizer
    raise ValueError(f"tokenizer must be one of {', '.join(TOKENIZERS)}, got {tokenizer!r}")


def lengths_from_text(
    path: PathLike,
    *,
    tokenizer: str = "whitespace",
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """Count tokens per line of a text file (plain, ``.gz`` or ``.zst``).

    Tokenizers: ``whitespace`` (ASCII whitespace: ``len(line.split())`` of the line's bytes),
    ``chars`` (UTF-8 characters: bytes that do not continue a sequence, so ``len(line.decode())``
    for valid UTF-8), ``bytes``, ``spm:MODEL`` (sentencepiece) or ``hf:tokenizer.json`` (Hugging
    Face ``tokenizers``, with the tokenizer's special tokens). Lines end at ``\\n``; a ``\\r``
    before it is not counted; a last line without a newline counts as a line. A file holding a NUL
    byte is binary and refused (the error names the offset). ``progress(text_bytes, lines)`` is
    called after each piece (decompressed bytes for .gz/.zst).

    Cost: whitespace/chars/bytes are one compiled pass over the memory-mapped file (GB/s, memory:
    8 bytes per line); .gz/.zst are decompressed in 8 MB pieces, never whole. Model tokenizers
    take 4096-line batches through their batch APIs, on the tokenizer's own threads (two batches
    at a time, so that reading and counting overlap the encoding).

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.txt")
    >>> _ = open(p, "w").write("a b  c\\n\\nhello world\\n")
    >>> lengths_from_text(p).tolist()
    [3, 0, 2]
    """
    tokenizer = check_tokenizer(tokenizer)
    progress = _check_progress(progress)
    src = _text_path(path, "lengths_from_text")
    if tokenizer in _TEXT_MODES:
        return as_lengths(_count_text(src, _TEXT_MODES[tokenizer], progress))
    parts = _count_tokens(src, tokenizer_counter(tokenizer), progress)
    return as_lengths(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def _count_tokens(
    src: Path,
    counter: Callable[[list[str]], np.ndarray],
    progress: Callable[[int, int], None] | None,
) -> list[np.ndarray]:
    """Token counts of the lines of ``src``, batch by batch, in order.

    Two threads call the tokenizer, so that while one batch is in the tokenizer's own threads
    (which run without the GIL) the other's results are turned into Python objects and counted,
    and the file is read and decoded meanwhile. At most :data:`_IN_FLIGHT` batches wait.
    """
    from collections import deque
    from concurrent.futures import Future, ThreadPoolExecutor

    parts: list[np.ndarray] = []
    # each entry: a batch's future, and the text bytes and lines to report when it is done
    pending: deque[tuple[Future[np.ndarray], int, int]] = deque()

    def collect(keep: int) -> None:
        while len(pending) > keep:
            future, nbytes, nlines = pending.popleft()
            parts.append(future.result())
            if progress is not None and nbytes:
                progress(nbytes, nlines)

    with (
        _open_text(src) as fh,
        ThreadPoolExecutor(2, thread_name_prefix="padless-tokenize") as pool,
    ):
        for chunk in _byte_chunks(fh, src):
            lines = _decode_lines(chunk)
            starts = range(0, len(lines), _TEXT_BATCH)
            for lo in starts:
                last = lo == starts[-1]
                batch = lines[lo : lo + _TEXT_BATCH]
                pending.append((pool.submit(counter, batch), len(chunk) * last, len(lines) * last))
                collect(_IN_FLIGHT)
        collect(0)
    return parts


# --------------------------------------------------------------------------- arrow


def _text_type(pa: Any, kind: Any) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _list_type(pa: Any, kind: Any) -> bool:
    return bool(
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    )


def _filled(values: Any) -> np.ndarray:
    """An Arrow array of numbers as numpy, its nulls (rows the mapping leaves out) as 0."""
    if values.null_count:
        values = values.fill_null(0)
    return np.asarray(values.to_numpy(zero_copy_only=False))


def _null_rows(column: Any, rows: np.ndarray | None) -> np.ndarray | None:
    """The null rows of ``column`` as the rows mapping shows them (a bool mask), None if none."""
    if not column.null_count:
        return None
    pc = _need("pyarrow.compute", "arrow", "a null check")
    mask = np.asarray(pc.is_null(column).to_numpy(zero_copy_only=False), dtype=bool)
    mask = mask if rows is None else np.take(mask, rows)
    return mask if mask.any() else None


def arrow_lengths(
    column: Any, tokenizer: str | None, where: str, *, rows: np.ndarray | None = None
) -> np.ndarray:
    """The int64 lengths of an Arrow column (lists, text by ``tokenizer``, or numbers).

    ``where`` names the column in messages; ``rows`` (a datasets indices mapping) picks and
    orders the rows. A null row (among those ``rows`` picks) is a ValueError naming it.
    List lengths come from the offsets (a compiled pass, no Python loop).
    """
    pa = _need("pyarrow", "arrow", where)
    pc = _need("pyarrow.compute", "arrow", where)
    kind = column.type
    if rows is not None and _text_type(pa, kind):
        column, rows = column.take(rows), None  # the texts in the order the rows show them
    nulls = _null_rows(column, rows)
    if nulls is not None:
        raise ValueError(
            f"{where}: row {int(np.argmax(nulls))} is null; lengths need a value in every row"
        )
    if _list_type(pa, kind):
        if tokenizer not in (None, "whitespace"):
            raise ValueError(f"{where}: a list column is already tokenized; drop --tokenizer")
        out = pc.list_value_length(column)
    elif _text_type(pa, kind):
        tok = tokenizer or "whitespace"
        if tok == "chars":
            out = pc.utf8_length(column)
        elif tok == "bytes":
            out = pc.binary_length(column)
        elif tok == "whitespace":
            pieces = pc.ascii_split_whitespace(column)
            flat = pc.list_flatten(pieces)
            empty = pc.equal(pc.binary_length(flat), 0)
            counts = pc.list_value_length(pieces).to_numpy(zero_copy_only=False)
            parents = pc.list_parent_indices(pieces).to_numpy(zero_copy_only=False)
            drop = np.bincount(parents[empty.to_numpy(zero_copy_only=False)], minlength=counts.size)
            return (counts - drop).astype(np.int64)
        else:
            counter = tokenizer_counter(tok)
            texts = column.to_pylist()
            parts = [counter(texts[i : i + _TEXT_BATCH]) for i in range(0, len(texts), _TEXT_BATCH)]
            return np.concatenate(parts) if parts else np.zeros(0, np.int64)
    elif pa.types.is_integer(kind) or pa.types.is_floating(kind):
        out = column  # lengths as values (floats must be whole numbers: lengths_of checks them)
    else:
        raise ValueError(
            f"{where}: column type {kind} holds no lengths (need a list, string or integer column)"
        )
    values = _filled(out)
    return _checked(values if rows is None else np.take(values, rows), where)


class _Column(NamedTuple):
    """One column of an in-memory Arrow object, as stored, and how to show it to the user."""

    data: Any  # pyarrow.ChunkedArray, the rows as stored
    rows: np.ndarray | None  # a datasets indices mapping (select/shuffle/filter), or None
    where: str  # names the column in messages: "column 'input_ids'"
    arg: str  # the call's arguments that name it: "ds, column='input_ids'"
    name: str | None = None  # the column's name when a parameter named it


def _hf_module(name: str) -> Any:
    """A ``datasets`` module if it is loaded (an object of its types exists only then)."""
    return sys.modules.get(f"datasets.{name}" if name else "datasets")


def _is_hf(x: Any, module: str, *names: str) -> bool:
    """Whether ``x`` is one of the named types of a loaded ``datasets`` module."""
    mod = _hf_module(module)
    kinds = tuple(getattr(mod, n) for n in names if hasattr(mod, n))
    return bool(kinds) and isinstance(x, kinds)


def _guess_column(names: Sequence[str], types: Sequence[Any] | None) -> str:
    """The column to suggest in a hint: ``input_ids`` if there, else the first list column."""
    if "input_ids" in names:
        return "input_ids"
    if types is not None:
        pa = sys.modules["pyarrow"]
        for name, kind in zip(names, types, strict=True):
            if _list_type(pa, kind):
                return name
    return names[0] if names else "input_ids"


def _refuse_unsized(x: Any, column: Any, call: str) -> None:
    """Hints for the ``datasets`` objects that hold no lengths up front (or several sets)."""
    col = f", column={column!r}" if isinstance(column, str) else ", column=..."
    if _is_hf(x, "", "DatasetDict", "IterableDatasetDict"):
        splits = list(x.keys())
        first = splits[0] if splits else "train"
        if column is None and splits and getattr(x[first], "column_names", None):
            col = f", column={_guess_column(x[first].column_names, None)!r}"
        raise TypeError(
            f"{call} got a {type(x).__name__} with splits {splits}; lengths are per split: "
            f"{call}(dd[{first!r}]{col})"
        )
    if _is_hf(x, "", "IterableDataset", "IterableColumn"):
        name = getattr(x, "column_name", None)
        names = getattr(x, "column_names", None)
        if column is None and isinstance(name, str):
            col = f", column={name!r}"
        elif column is None and names:
            col = f", column={_guess_column(list(names), None)!r}"
        raise TypeError(
            f"{call} got a datasets.{type(x).__name__}: it streams its rows, so it has no "
            "lengths up front; plan as it streams with padless.StreamBatcher (in a DataLoader: "
            "padless.torch.StreamDataset), or load it whole (load_dataset(..., streaming=False)) "
            f"and call {call}(ds{col})"
        )


def _pick(table: Any, column: Any, kind: str, shown: str, param: str, call: str) -> _Column:
    names = list(table.column_names)
    types = [f.type for f in table.schema]
    if column is None:
        if len(names) != 1:
            guess = _guess_column(names, types)
            raise ValueError(
                f"{call}: the {kind} has columns {names}; choose one with {param}=: "
                f"{call}({shown}, {param}={guess!r})"
            )
        column = names[0]
    if not isinstance(column, str):
        raise TypeError(
            f"{param} must be a column name (str), got {type(column).__name__} {column!r:.60}"
        )
    if column not in names:
        raise ValueError(
            f"{call}: the {kind} has no column {column!r}; its columns are {names} "
            f"({param}= names one)"
        )
    data = table.column(column)
    pa = sys.modules["pyarrow"]
    if not isinstance(data, pa.ChunkedArray):  # a RecordBatch's column is an Array
        data = pa.chunked_array([data], type=data.type)
    return _Column(data, None, f"column {column!r}", f"{shown}, {param}={column!r}", column)


def _hf_column(x: Any, call: str) -> _Column:
    """``ds["a"]`` (or ``ds["s"]["a"]`` of a struct column): its dataset's stored column."""
    pa = sys.modules["pyarrow"]
    pc = _need("pyarrow.compute", "arrow", call)
    kind = type(x)
    names: list[str] = []
    source = x
    while isinstance(source, kind):
        names.append(source.column_name)
        source = source.source
    names.reverse()
    shown = "ds" + "".join(f"[{n!r}]" for n in names)
    if not _is_hf(source, "arrow_dataset", "Dataset"):
        raise TypeError(f"{call}: {shown} comes from a {type(source).__name__}, not a Dataset")
    picked = _pick(source.data.table, names[0], "dataset", "ds", "column", call)
    data = picked.data
    for depth, name in enumerate(names[1:], 1):
        if not pa.types.is_struct(data.type):
            inner = "ds" + "".join(f"[{n!r}]" for n in names[:depth])
            raise TypeError(f"{call}: {inner} holds {data.type}, not a struct with field {name!r}")
        data = pc.struct_field(data, [name])
    return _Column(data, _dataset_rows(source), f"column {shown}", shown)


def _dataset_rows(ds: Any) -> np.ndarray | None:
    """The rows a select/shuffle/filter left, in their order (None: the table as it is)."""
    indices = getattr(ds, "_indices", None)
    if indices is None:
        return None
    rows = np.asarray(indices.column(0).to_numpy(zero_copy_only=False))
    # uint64 row numbers below 2**63: as int64 (no copy), which np.take gathers fastest
    return rows.view(np.int64) if rows.dtype == np.uint64 else rows.astype(np.int64, copy=False)


def _in_memory(x: Any, column: Any, call: str, param: str = "column") -> _Column:
    """One column of an in-memory Arrow object (see :func:`list_column`), or a TypeError."""
    pa = _need("pyarrow", "arrow", f"{call} of an Arrow object")
    _refuse_unsized(x, column, call)
    if _is_hf(x, "arrow_dataset", "Column"):
        if column is not None:
            raise TypeError(
                f"{call} got ds[{x.column_name!r}], one column already, and {param}="
                f"{column!r}: {call}(ds[{x.column_name!r}]) or {call}(ds, {param}={column!r})"
            )
        return _hf_column(x, call)
    if _is_hf(x, "arrow_dataset", "Dataset"):
        got = _pick(x.data.table, column, "dataset", "ds", param, call)
        return got._replace(rows=_dataset_rows(x))
    if isinstance(x, pa.Table):
        return _pick(x, column, "table", "table", param, call)
    if isinstance(x, pa.RecordBatch):
        return _pick(x, column, "record batch", "batch", param, call)
    if isinstance(x, (pa.ChunkedArray, pa.Array)):
        if column is not None:
            raise TypeError(
                f"{call} got a pyarrow {type(x).__name__}, one column already, and {param}="
                f"{column!r}: {call}(arr) without {param}="
            )
        data = x if isinstance(x, pa.ChunkedArray) else pa.chunked_array([x], type=x.type)
        return _Column(data, None, f"the {type(x).__name__}", "arr")
    raise TypeError(
        f"{call} reads a datasets.Dataset (or ds[column]), a pyarrow Table, RecordBatch, "
        f"ChunkedArray or Array, got {type(x).__name__}"
    )


def _lists_only(col: _Column, call: str, param: str) -> None:
    pa = sys.modules["pyarrow"]
    if not _list_type(pa, col.data.type):
        what = f"{param}={col.name!r} must name" if col.name is not None else f"{col.arg} must be"
        raise TypeError(
            f"{call}: {what} a column of token lists (list, large_list or fixed_size_list), but "
            f"it holds {col.data.type}; tokenize it first (ds.map(...))"
        )


def list_lengths(
    x: Any, column: str | None, where: str, *, param: str = "column"
) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-row lengths of one list column of ``x``, in the row order ``x`` shows.

    Returns int64 lengths (0 in a null row) and the null rows as a bool mask (None if there are
    none); ``where`` (the caller's name) and ``param`` (its parameter) are named in errors. ``x``
    is any input of :func:`list_column`. Cost: O(rows) from the list offsets (plus one gather
    through a datasets indices mapping); the tokens are never read.
    """
    col = _in_memory(x, column, where, param)
    _lists_only(col, where, param)
    pc = _need("pyarrow.compute", "arrow", where)
    nulls = _null_rows(col.data, col.rows)
    sizes = _filled(pc.list_value_length(col.data))
    sizes = sizes if col.rows is None else np.take(sizes, col.rows)
    return sizes.astype(np.int64, copy=False), nulls


def list_column(x: Any, column: str | None, where: str) -> Any:
    """One token-list column of an in-memory Arrow object, as a ``pyarrow.ChunkedArray``.

    ``x``: a ``datasets.Dataset`` (its select/shuffle/filter indices mapping applied: row i is
    the dataset's row i), ``ds[name]`` (a datasets ``Column``), a ``pyarrow.Table`` or
    ``RecordBatch`` (with ``column``, which may be None when there is one column), or a
    ``ChunkedArray``/``Array`` (``column`` None). The column must be a list, large_list or
    fixed_size_list with no null row; errors name ``where`` (the caller) and the call to make.
    A ``DatasetDict`` or an ``IterableDataset`` is a TypeError naming the right call.

    Cost: zero-copy without a mapping; with one, a take (a copy of the column's rows).
    """
    col = _in_memory(x, column, where)
    _lists_only(col, where, "column")
    nulls = _null_rows(col.data, col.rows)
    if nulls is not None:
        raise ValueError(
            f"{where}: {col.where}: row {int(np.argmax(nulls))} is null; every row needs a list"
        )
    return col.data if col.rows is None else col.data.take(col.rows)


def _arrow_object_lengths(
    x: Any, column: str | None, tokenizer: str | None, split: str | None
) -> np.ndarray:
    call = "lengths_from_arrow"
    if tokenizer is not None:
        tokenizer = check_tokenizer(tokenizer)
    if split is not None:
        if not _is_hf(x, "", "DatasetDict", "IterableDatasetDict"):
            raise TypeError(
                f"split picks a split of a datasets.DatasetDict, got a {type(x).__name__}; "
                f"{call}(ds, column=...) without split="
            )
        if split not in x:
            raise ValueError(f"split must be one of {list(x.keys())}, got {split!r}")
        x = x[split]
    col = _in_memory(x, column, call)
    return arrow_lengths(col.data, tokenizer, col.where, rows=col.rows)


def _numeric_table(x: Any) -> bool:
    """A Table/RecordBatch of number columns only: np.asarray(x) gives its (N, F) lengths."""
    pa = sys.modules["pyarrow"]
    return (
        isinstance(x, (pa.Table, pa.RecordBatch))
        and x.num_columns > 0
        and all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in x.schema.types)
    )


def lengths_of_arrow(x: Any, column: str | Sequence[str] | None) -> np.ndarray:
    """``lengths_of`` of an in-memory Arrow object: see :func:`padless.lengths_of`."""
    _need("pyarrow", "arrow", "lengths_of of an Arrow object")
    if column is None and _numeric_table(x):
        return as_lengths(np.asarray(x))  # as before Arrow objects were read here: (N, F)
    if isinstance(column, (list, tuple)):
        if not column or not all(isinstance(c, str) for c in column):
            raise TypeError(f"column must be a name or a list of names, got {column!r:.60}")
        return np.stack([lengths_of_arrow(x, c) for c in column], axis=1)
    col = _in_memory(x, column, "lengths_of")
    pa = sys.modules["pyarrow"]
    if _text_type(pa, col.data.type):
        raise TypeError(
            f"lengths_of({col.arg}): {col.where} holds text ({col.data.type}), and lengths_of "
            "counts tokens: tokenize it first (ds.map(...) to input_ids), or count it with "
            f"padless.io.readers.lengths_from_arrow({col.arg}, tokenizer='whitespace') (or "
            "'chars', 'bytes', 'spm:MODEL', 'hf:tokenizer.json')"
        )
    return arrow_lengths(col.data, None, col.where, rows=col.rows)


def _pick_column(table: Any, column: str | None, where: str) -> Any:
    names = list(table.column_names)
    if column is None:
        if len(names) == 1:
            return table.column(0)
        raise ValueError(f"{where} has columns {names}; choose one with column= (--column)")
    if column not in names:
        raise ValueError(f"column must be one of {names} in {where}, got {column!r}")
    return table.column(column)


def _read_arrow_table(path: Path, columns: list[str] | None) -> Any:
    pa = _need("pyarrow", "arrow", f"reading {path.name}")
    if _is_parquet(path):
        pq = _need("pyarrow.parquet", "arrow", f"reading {path.name}")
        try:
            return pq.read_table(path, columns=columns)
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"{path} is not a readable Parquet file ({exc})") from exc
    source = pa.memory_map(str(path), "r")
    try:
        try:
            return pa.ipc.open_file(source).read_all()
        except pa.ArrowInvalid:
            source.seek(0)
            return pa.ipc.open_stream(source).read_all()
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(
            f"{path} is not an Arrow IPC file or stream (.arrow/.feather, as datasets saves) "
            f"({exc})"
        ) from exc


def _is_parquet(path: Path) -> bool:
    """Parquet by content (``PAR1``); by the name where the content says nothing."""
    kind = sniff(path)
    return kind == "parquet" or (kind is None and path.suffix.lower() == ".parquet")


def _hf_dataset_files(folder: Path, split: str | None) -> list[Path]:
    if (folder / "dataset_dict.json").is_file():
        splits = _json_object(folder / "dataset_dict.json").get("splits", [])
        chosen = split or "train"
        if not isinstance(splits, list) or chosen not in splits:
            raise ValueError(f"split must be one of {splits!r:.80} in {folder}, got {chosen!r}")
        folder = folder / chosen
    state = folder / "state.json"
    if not state.is_file():
        raise ValueError(f"{folder} is not a saved Hugging Face dataset (no state.json)")
    files = _json_object(state).get("_data_files", [])
    if not isinstance(files, list) or not files:
        raise ValueError(f"{state} lists no data files (_data_files: {files!r:.60})")
    names = [f.get("filename") if isinstance(f, dict) else None for f in files]
    for name in names:
        if not isinstance(name, str) or not name or os.path.basename(name) != name:
            raise ValueError(
                f"{state}: each _data_files entry must name a file of the folder "
                f"({{'filename': NAME}}), got {files[names.index(name)]!r:.80}"
            )
    return [folder / cast(str, name) for name in names]


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, or a ValueError naming the file."""
    value = load_json(path, "dataset metadata")
    if not isinstance(value, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(value).__name__}")
    return value


def lengths_from_arrow(
    path: PathLike | Any,
    *,
    column: str | None = None,
    tokenizer: str | None = None,
    split: str | None = None,
) -> np.ndarray:
    """Read lengths from an Arrow/Feather/Parquet file, a saved ``datasets`` folder, or Arrow data
    in memory.

    ``path`` may also be an in-memory ``datasets.Dataset`` (its select/shuffle/filter mapping
    followed: row i is the dataset's row i), ``ds[name]``, a ``datasets.DatasetDict`` with
    ``split``, a ``pyarrow.Table`` or ``RecordBatch`` (``column`` may be left out when there is
    one column), or a ``ChunkedArray``/``Array`` (no ``column``).
    List columns (e.g. ``input_ids``) give lengths from their offsets, with no pass over rows;
    string columns are measured with ``tokenizer`` (default whitespace); integer columns are taken
    as lengths (all checked by :func:`padless.lengths_of`; errors name the file or the column).
    A null row is an error naming it. Needs ``pyarrow`` (``pip install 'padless[arrow]'``).

    Cost: reads the chosen column (memory-mapped for Arrow IPC files), O(rows) vectorised; in
    memory, nothing is copied but the lengths (a text column under a mapping: its rows).

    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> table = pa.table({"input_ids": [[1, 2, 3], [4]], "text": ["a b", "c"]})
    >>> p = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> pq.write_table(table, p)
    >>> lengths_from_arrow(p, column="input_ids").tolist(), lengths_from_arrow(p, column="text").tolist()
    ([3, 1], [2, 1])
    >>> lengths_from_arrow(table, column="text", tokenizer="chars").tolist()
    [3, 1]
    """
    if not isinstance(path, (str, os.PathLike)):
        if not arrow_like(path):
            raise TypeError(
                "path must be a path (an Arrow/Feather/Parquet file or a saved datasets folder) "
                "or an in-memory datasets.Dataset, ds[column], pyarrow Table, RecordBatch, "
                f"ChunkedArray or Array, got {type(path).__name__} {path!r:.60}"
            )
        return _arrow_object_lengths(path, column, tokenizer, split)
    src = _as_path(path)
    where = str(src)
    if src.is_dir():
        files = _hf_dataset_files(src, split)
        parts = [
            arrow_lengths(_pick_column(_read_arrow_table(f, None), column, where), tokenizer, where)
            for f in files
        ]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)
    if not src.is_file():
        raise FileNotFoundError(f"no such file: {src}")
    columns = None
    if column is not None and _is_parquet(src):
        pq = _need("pyarrow.parquet", "arrow", f"reading {src.name}")
        names = list(pq.read_schema(src).names)
        if column not in names:
            raise ValueError(f"column must be one of {names} in {where}, got {column!r}")
        columns = [column]
    table = _read_arrow_table(src, columns)
    return arrow_lengths(_pick_column(table, column, where), tokenizer, where)


# --------------------------------------------------------------------------- arrays and dispatch


def _lengths_from_offsets(offsets: Any, where: str, tokens: int | None = None) -> np.ndarray:
    off = np.asarray(offsets)
    if off.ndim != 1 or off.size == 0 or not np.issubdtype(off.dtype, np.integer):
        raise ValueError(f"{where}: offsets must be a non-empty 1-D integer array")
    off = off.astype(np.int64)
    if off[0] != 0 or np.any(np.diff(off) < 0):
        raise ValueError(f"{where}: offsets must start at 0 and never decrease")
    if tokens is not None and off[-1] != tokens:
        raise ValueError(f"{where}: offsets end at {off[-1]} but the corpus holds {tokens} tokens")
    return _checked(np.diff(off), where)


def _token_count(tokens: np.ndarray, where: str) -> int:
    """The tokens of a token corpus array (1-D), the offsets' end."""
    if tokens.ndim != 1:
        raise ValueError(f"{where}: tokens must be a 1-D array, got shape {tokens.shape}")
    return int(tokens.shape[0])


def _checked(values: Any, where: str) -> np.ndarray:
    """``lengths_of`` of values read from a file, its errors prefixed with the file."""
    try:
        return as_lengths(np.asarray(values))
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{where}: {exc}") from exc


_NPY_MAGIC = b"\x93NUMPY"


def load_npy(path: Path, mmap_mode: Any = None) -> np.ndarray:
    """``np.load`` of a .npy, its failures (not .npy, truncated, pickled objects) naming the file.

    A file without the .npy header is refused before numpy reads it (numpy would take it for
    pickled data); such a file is most often raw tokens (OLMo-style), and the message says so.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_NPY_MAGIC))
    except OSError as exc:
        raise ValueError(f"{path} is not a readable .npy array ({exc})") from exc
    if head.startswith(b"PK\x03\x04"):
        raise ValueError(f"{path} is not a .npy array (it holds an archive: name it .npz)")
    if head != _NPY_MAGIC:
        raise ValueError(
            f"{path} has no .npy header (it does not start with b'\\x93NUMPY'): it looks like a "
            "raw token file (OLMo-style, tokens back to back), whose dtype padless.lengths_of "
            "cannot tell; read it with padless.io.tokens.RawTokens(path, dtype=..., eos=...) or "
            "padless.io.lengths_from_file(path, dtype=..., eos=...) (the command line: "
            "--dtype ... --eos ...)"
        )
    try:
        arr = np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{path} is not a readable .npy array ({exc})") from exc
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"{path} is not a .npy array (it holds an archive: name it .npz)")
    return arr


def _lengths_from_npz(path: Path, fields: Sequence[str] | None) -> np.ndarray:
    import zipfile

    try:
        data = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path} is not a readable .npz archive ({exc})") from exc
    if not hasattr(data, "files"):
        raise ValueError(f"{path} is not a .npz archive (it holds one array: name it .npy)")
    with data:
        names = list(data.files)

        if is_saved_plan(names):
            raise ValueError(
                f"{path} is a padless plan, not lengths: read it with padless.BatchPlan.load"
            )

        def read(name: str) -> np.ndarray:
            try:
                return np.asarray(data[name])
            except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
                raise ValueError(f"{path}: array {name!r} is not readable ({exc})") from exc

        def column(name: str) -> np.ndarray:
            return _checked(read(name), f"{path} [{name}]")

        if fields:
            unknown = [f for f in fields if f not in names]
            if unknown:
                raise ValueError(f"fields must be among {names} in {path}, got {list(fields)}")
            cols = [column(f) for f in fields]
            if len({c.shape for c in cols}) > 1:
                raise ValueError(
                    f"fields must hold one length per sequence each in {path}, got "
                    + ", ".join(f"{f!r}: {c.shape[0]}" for f, c in zip(fields, cols, strict=True))
                )
            return cols[0] if len(cols) == 1 else np.stack(cols, axis=1)
        if "offsets" in names:
            tokens = _token_count(read("tokens"), f"{path} [tokens]") if "tokens" in names else None
            return _lengths_from_offsets(read("offsets"), str(path), tokens)
        if len(names) == 1:
            return column(names[0])
        raise ValueError(f"{path} holds arrays {names}; choose with fields= (--fields en,es)")


def is_indexed_path(path: PathLike) -> bool:
    """Whether ``path`` names an indexed dataset: a ``.idx``, or a ``.bin`` or prefix with both
    files of the pair present (``padless.io.tokens.open_tokens`` and ``lengths_from_file`` ask)."""
    text = os.fspath(path)
    prefix = text[:-4] if text.endswith((".idx", ".bin")) else text
    pair = os.path.isfile(prefix + ".idx") and os.path.isfile(prefix + ".bin")
    return text.endswith(".idx") or (pair and not os.path.isdir(text))
