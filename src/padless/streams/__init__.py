"""Batching and packing for streams whose lengths are not known up front, resumable exactly.

:class:`StreamBatcher` reads any iterable of items (a ``datasets`` streaming dataset, a
generator, webdataset shards...) through a buffer and yields batches that follow a planner spec
(``TokenBudget``, ``Buckets``, ``ExactLength``, ``Packing``).

How the buffer works. The source is read in *chunks* of ``buffer // 4`` items. Once the buffer
is full (after the first four chunks) every new chunk starts a *round*: the items waiting in
the buffer and the new chunk are planned together, the batches that came out well leave (in an
order shuffled from ``(seed, epoch)``) and the rest of the items wait for company from the next
chunks. Two rules bound the waiting:

- *memory*: when more than ``buffer - buffer // 4`` items would wait, the best of the waiting
  batches (least padded, fullest) leave too, so the buffer never holds more than ``buffer``
  items (the extra pieces of a split item come on top);
- *max_wait*: an item leaves, whatever its padding, before ``max_wait`` buffers of items have
  been read after it. So the items of a batch lie within ``max_wait × buffer`` positions of each
  other in the stream, and a restore reads at most that many items again.

At the end of the stream everything left leaves. ``max_wait`` trades padding for restore time:
with 1e6 lognormal lengths and ``TokenBudget(max_tokens=4096)`` at ``buffer=10_000``, padding is
2.0% with ``max_wait=1``, 0.9% with 2 and 0.42% with 4 (a global sort: 0.13%), and a restore
reads about 1, 2 or 4 buffers again (``benchmarks/bench_streams.py``). (``max_wait`` counts
buffers; the ``window`` of samplers and :func:`padless.plan_windows` counts items.)

- ``TokenBudget``: each round sorts the buffer by length, takes out the full batches of a
  single length (no padding), and cuts the rest with the greedy budget rule (fairseq's), so no
  batch is ever over ``max_tokens`` (count × longest) or ``max_sentences``, and batch sizes are
  multiples of ``multiple_of`` as far as that rule allows. A batch leaves when it is full (one
  more item of its longest length would break a limit) and pads at most 0.5% of its slots;
  other batches wait.
- ``Buckets``: with ``num_buckets`` the boundaries are fitted once, by
  :func:`padless.bucket_boundaries` (least padded slots, exact dynamic programme), on the first
  buffer of lengths (the first ``buffer`` items), and then kept for every later round and epoch
  (they go into the state). A bucket's batch size is ``max_tokens // its upper boundary`` (the
  last bucket, unbounded above, uses the longest item it holds in the round) or ``batch_size``;
  full batches leave oldest items first, a remainder waits, and an expired remainder leaves as
  a smaller batch.
- ``ExactLength``: one length (length tuple) per batch; full batches leave oldest first, the
  leftover of each length waits for more of that length; leftovers that expire, and all
  leftovers at the end of the stream, are handled as the spec's ``leftovers`` says (``"merge"``
  pools them into padded batches, ``"partial"`` keeps smaller batches, ``"drop"`` drops them).
- ``Packing``: best fit over the buffer into rows of ``capacity`` tokens (the items that must
  leave first, then longest first); rows filled to at least 99.9% leave and under-filled rows
  wait (their items are placed again with the next chunk). A batch is a list of ``rows_per_batch`` rows, each row a list of
  items; an item longer than ``capacity`` is handled by ``oversize`` as in the planner, and
  ``"split"``/``"truncate"`` put :class:`Piece` entries in the rows, saying which tokens of which
  item they hold. ``collate_for(batcher)`` turns a batch into ``padless.torch.collate_packed``'s
  varlen format.

Resume. ``state_dict()`` is small and JSON-safe (when the source's own state is): the round, the
batches of that round already yielded, one bit per item still in reach (the last ``max_wait``
buffers) saying which ones still wait (zlib-compressed), and for a source with the
``datasets.IterableDataset`` protocol (``state_dict()`` / ``load_state_dict()``) its state at the
oldest chunk in reach. ``load_state_dict()`` is O(1); the next iteration reads those chunks again
(at most ``max_wait × buffer`` items, calling ``length`` only on the items that still wait,
skipping chunks where none waits) and the batches continue exactly as without the interruption. A plain iterable or a
callable that re-creates the iterator is skipped from its start instead: O(position) items are
read again (at C speed, ``itertools.islice``, no ``length`` calls); so is a
``datasets.IterableDataset`` with a ``.shuffle()`` in its chain, whose state does not hold its
shuffle buffer. A state is of one epoch (a state of another epoch than ``set_epoch``'s is
refused), and it holds a digest of the round it restores (the lengths and positions of the
items read again): a restore over a source that ends earlier or holds other lengths there is
refused rather than yielding another epoch.
"""

from ._batcher import CHUNKS as CHUNKS
from ._batcher import MAX_WAIT as MAX_WAIT
from ._batcher import STATE_KIND as STATE_KIND
from ._batcher import StreamBatcher as StreamBatcher
from ._batcher import check_epoch as check_epoch
from ._batcher import state_position as state_position
from ._buffer import MAX_LENGTH as MAX_LENGTH
from ._buffer import Piece as Piece
from ._source import check_source as check_source

__all__ = ["Piece", "StreamBatcher"]
