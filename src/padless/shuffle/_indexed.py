"""Shuffle the documents (or sequences) of a Megatron/fairseq indexed dataset into a new pair."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from ..core import _rng
from ..core._check import check_bool, check_seed
from ..io.indexed import CHUNK, IndexedDataset, _paths, _Sink, check_target, write_pair
from . import _safety
from ._api import _fresh_seed

# Tokens gathered per step (a few MB of tokens, and 8 bytes of index each while gathering).
GATHER_TOKENS = 1 << 21


@dataclass(frozen=True)
class IndexedShuffleResult:
    """Report what :func:`shuffle_indexed` did.

    Attributes:
        seed: the seed used (drawn fresh when none was given); pass it again to reproduce.
        items: documents (or sequences) written, each once.
        sequences: sequences written.
        bytes: bytes of tokens written to the ``.bin``.
        seconds: wall time.
        outputs: the ``.idx`` and ``.bin`` written.
        documents: whether documents (True) or sequences were permuted.
        format: ``"megatron"`` or ``"fairseq"`` (the source's, kept).

    >>> IndexedShuffleResult(1, 2, 3, 4_000_000, 0.5, ("o.idx", "o.bin"), True, "megatron").mb_per_s
    8.0
    """

    seed: int
    items: int
    sequences: int
    bytes: int
    seconds: float
    outputs: tuple[str, str]
    documents: bool
    format: str

    @property
    def mb_per_s(self) -> float:
        """Return bytes of tokens ÷ wall time, in MB/s (10^6 bytes per second)."""
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _gather(src: IndexedDataset, items: np.ndarray, lens: np.ndarray, sink: _Sink) -> None:
    """Write the tokens of ``items`` (lengths ``lens``) to the ``.bin`` in this order."""
    starts = src.starts(items)
    tokens = src.tokens
    total = int(lens.sum())
    if len(items) == 1 and total > GATHER_TOKENS:  # one long item: copied slice by slice
        s = int(starts[0])
        for a in range(0, total, GATHER_TOKENS):
            sink.raw(np.array(tokens[s + a : s + min(total, a + GATHER_TOKENS)]))
        return
    ends = np.cumsum(lens)
    where = np.repeat(starts - (ends - lens), lens) + np.arange(total, dtype=np.int64)
    sink.raw(tokens[where])


def _sequences(src: IndexedDataset, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sequence lengths of ``docs``' sequences in order, and sequences per document."""
    first = np.asarray(src.document_index[docs], np.int64)
    counts = np.asarray(src.document_index[docs + 1], np.int64) - first
    ends = np.cumsum(counts)
    seqs = np.repeat(first - (ends - counts), counts) + np.arange(int(counts.sum()))
    return np.asarray(src.sequence_lengths[seqs]), counts


def shuffle_indexed(
    src: str | os.PathLike[str],
    dst_prefix: str | os.PathLike[str],
    *,
    seed: int | None = None,
    documents: bool = True,
) -> IndexedShuffleResult:
    """Write a new pair holding ``src``'s documents (or sequences) in a uniform random order.

    Args:
        src: the source pair (prefix, ``.idx`` or ``.bin``); it is only read.
        dst_prefix: the new pair's prefix; it must not be the source's (refused: the source
            stays untouched, so write elsewhere and rename).
        seed: the seed; a fresh one is drawn (and reported) when None. The permutation comes
            from ``SeedSequence([seed, 0, FILE_SHUFFLE])``, the stream of ``padless shuffle``.
        documents: permute Megatron documents, each keeping its sequences in order (True), or
            sequences (False: each becomes a document of its own in the new index). A fairseq
            index has no documents: its sequences are its items either way.

    The new pair has the source's format and dtype. Tokens are gathered in output order a few
    MB at a time and streamed to a temporary ``.bin``; the ``.idx`` is assembled at the end, and
    both are fsynced and renamed into place (``.bin`` first), or removed on any error, on
    KeyboardInterrupt, and on SIGTERM and SIGHUP (when their handler is the default one and the
    call runs in the main thread: the process then still ends by that signal).

    Cost: O(items) memory for the permutation; one read of every token (in random order, a few
    MB at a time) and one sequential write.

    >>> import os, tempfile
    >>> from padless.io.indexed import write_indexed
    >>> d = tempfile.mkdtemp()
    >>> _ = write_indexed([[1], [[2], [3, 4]], [5]], os.path.join(d, "a"), dtype="uint8")
    >>> r = shuffle_indexed(os.path.join(d, "a"), os.path.join(d, "b"), seed=0)
    >>> out = IndexedDataset(os.path.join(d, "b"), documents=True)
    >>> sorted(out[i].tolist() for i in range(len(out)))
    [[1], [2, 3, 4], [5]]
    """
    documents = check_bool("documents", documents)
    seed = _fresh_seed() if seed is None else check_seed("seed", seed)
    src_idx, src_bin = _paths(src, "src")
    probe = IndexedDataset(src_idx)
    by_docs = documents and probe.format == "megatron"
    data = IndexedDataset(src_idx, documents=True) if by_docs else probe
    if data.modes is not None:
        raise ValueError(
            f"src {src_idx!r} is a multimodal Megatron index (a mode per sequence): its "
            f"shuffle is not supported"
        )
    dst_idx, dst_bin = check_target(dst_prefix, "dst_prefix")
    for out in (dst_idx, dst_bin):
        for inp in (src_idx, src_bin):
            if os.path.exists(out) and _same(out, inp):
                raise ValueError(
                    f"dst_prefix names the source ({out!r} is {inp!r}): the source is never "
                    f"modified; write to another prefix (then rename it if you wish)"
                )
    began = time.perf_counter()
    n = len(data)
    perm = np.random.default_rng(_rng.seed_sequence(seed, 0, _rng.FILE_SHUFFLE)).permutation(n)
    lengths = np.asarray(data.lengths)
    signals = _safety.Signals()

    def fill(sink: _Sink) -> None:
        k = 0
        while k < n:
            signals.check()  # a signal swallowed by a C callback stops the run here
            lens = lengths[perm[k : k + CHUNK]].astype(np.int64)
            m = max(int(np.searchsorted(np.cumsum(lens), GATHER_TOKENS, side="right")), 1)
            items = perm[k : k + m]
            _gather(data, items, lens[:m], sink)
            if by_docs:
                seq_lengths, counts = _sequences(data, items)
                sink.index(seq_lengths, counts)
            else:
                sink.index(lens[:m])
            k += m

    # SIGTERM and SIGHUP raise Terminated (a KeyboardInterrupt), on which write_pair removes its
    # temporaries; leaving the block then ends the process by that signal, as the file shuffle
    # does. write_pair holds them back over its two renames.
    with signals:
        write_pair(dst_idx, data.format, data.dtype, fill, signals)
    seconds = time.perf_counter() - began
    return IndexedShuffleResult(
        seed=seed,
        items=n,
        sequences=data.num_sequences,
        bytes=os.path.getsize(dst_bin),
        seconds=seconds,
        outputs=(dst_idx, dst_bin),
        documents=by_docs,
        format=data.format,
    )
