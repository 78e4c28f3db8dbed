"""The batcher of :mod:`padless.streams`: :class:`StreamBatcher`, its state (save, check,
restore) and the round loop, which reads chunks, asks the spec's stream engine to plan each
round and yields the batches that leave."""

from __future__ import annotations

import base64
import copy
import zlib
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any, ClassVar

import numpy as np

from .._kernels.rng import mix64_reference
from ..core import _rng
from ..core._check import check_seed, positive
from ..core._keywords import checks_keywords
from ..core._state import STATE_VERSION, _check_skips, _mismatch, check_skip, fingerprint
from ..core.lengths import sizes_of
from ..planners import strategies
from ..planners._rounds import Round, StreamEngine, shuffled
from ..planners.spec import Spec, spec_to_dict
from ._buffer import Entries, ItemLengths, Piece
from ._source import Source, check_source

__all__ = [
    "CHUNKS",
    "MAX_WAIT",
    "STATE_KIND",
    "StreamBatcher",
    "check_epoch",
    "state_position",
]

#: A buffer is read in this many chunks (a round per chunk once the buffer is full).
CHUNKS = 4
#: Default ``max_wait``: an item waits at most until this many buffers of items were read after it.
MAX_WAIT = 4
STATE_KIND = "StreamBatcher"


def _mix(z: int) -> int:
    """splitmix64's output function on Python ints (a bijection of 64-bit ints)."""
    return mix64_reference(z)


def _streamable() -> list[str]:
    """The strategies with a stream form."""
    return sorted(n for n, c in strategies().items() if c.stream_engine is not Spec.stream_engine)


def check_epoch(state: Any, epoch: int, who: str, *, loading: bool = False) -> None:
    """Refuse a state of another epoch than ``epoch`` (the one set, or being set)."""
    if state is None or state.get("epoch") == epoch:
        return
    saved = state.get("epoch")
    fix = (
        "save the epoch with the state and loop from it: "
        "for epoch in range(checkpoint['epoch'], epochs): "
        f"{'dataset' if who == 'StreamDataset' else 'batcher'}.set_epoch(epoch)"
    )
    if loading:
        raise ValueError(
            f"{who}.load_state_dict: the state is of epoch {saved}, but set_epoch({epoch}) was "
            f"called: resuming it would yield the rest of epoch {saved} as epoch {epoch}; {fix}"
        )
    raise ValueError(
        f"{who}.set_epoch({epoch}) after load_state_dict() of a state of epoch {saved}: the "
        f"state would be dropped (or epoch {saved} yielded twice); {fix}"
    )


def state_position(state: dict[str, Any] | None) -> int | None:
    """The number of the batch of its epoch a (checked) state resumes at, counted from the
    epoch's start: 0 for none, -1 at the epoch's end, None when the state does not say (saved
    by a padless that did not count the epoch's batches)."""
    if state is None or state["round"] < 0 and not state["done"]:
        return 0
    if state["done"]:
        return -1
    before = state.get("before")
    return None if before is None else int(before) + int(state["emitted"])


class _Live:
    """Where the running (or last) iteration stands, for ``state_dict``."""

    __slots__ = ("epoch", "round", "emitted", "first", "snapshot", "carry_in", "done", "start",
                 "cached", "buf", "read", "before", "running", "total")  # fmt: skip

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.round = -1
        self.emitted = 0  # batches of the round consumed (yielded or skipped)
        # the epoch's batches planned before the round (None: a state saved by a padless that
        # did not count them was resumed in this epoch)
        self.before: int | None = 0
        self.running = False  # the iteration's generator is between its start and its end
        self.total: int | None = None  # the epoch's batches, once its last round is planned
        self.first = 0
        self.snapshot: Any = None
        self.carry_in: Entries | None = None
        self.done = False
        self.start: dict[str, Any] | None = None
        self.cached: tuple[str, int, list[list[int]], str] | None = None
        self.buf: Entries | None = None  # the round's buffer (waiting items + new chunk)
        self.read = 0  # items read in the round's chunk

    def bits(self, chunk: int) -> tuple[str, int, list[list[int]], str]:
        """The waiting items as a bit mask over the chunks ``first..round-1``, and the round
        buffer's digest (once per round)."""
        if self.cached is None:
            span = (self.round - self.first) * chunk
            mask = np.zeros(span, np.uint8)
            pieces: list[list[int]] = []
            pend = self.carry_in
            if pend is not None and len(pend):
                where = (pend.chunk - self.first) * chunk + pend.off
                mask[where] = 1
                split = np.flatnonzero(pend.piece >= 0)
                pieces = [[int(where[i]), int(pend.piece[i])] for i in split.tolist()]
            packed = zlib.compress(np.packbits(mask).tobytes(), 6)
            text = base64.b64encode(packed).decode("ascii")
            buf = self.buf if self.buf is not None else Entries.empty(0)
            self.cached = (text, span, pieces, _digest(buf, self.read))
        return self.cached


def _digest(buf: Entries, read: int) -> str:
    """What a restore must find again: the round buffer's lengths, chunks, offsets and pieces,
    and how many items its chunk held (a restore over other items is refused by it)."""
    crc = zlib.crc32(np.ascontiguousarray(buf.lens).data)  # CRC-32: a few ns an entry
    crc = zlib.crc32(np.ascontiguousarray(buf.meta).data, crc)
    return f"{len(buf)}:{read}:{zlib.crc32(int(read).to_bytes(8, 'little'), crc):08x}"


def _check_shard(shard: Any) -> tuple[int, int]:
    """``shard=(index, count)`` checked: two ints, ``0 <= index < count``."""
    if (
        not isinstance(shard, (tuple, list))
        or len(shard) != 2
        or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in shard)
    ):
        raise TypeError(
            f"shard must be None or (index, count), two ints (this worker's shard of the "
            f"stream, e.g. Ray Train's world rank and size), got {shard!r:.80}"
        )
    index, count = int(shard[0]), int(shard[1])
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard must be (index, count) with 0 <= index < count, got {shard!r}")
    return index, count


class StreamBatcher:
    """Batches (or packed rows) from a stream of items whose lengths are not known up front.

    Iterating yields lists of items (``Packing``: lists of ``rows_per_batch`` rows, each a list
    of items or :class:`Piece`); see the module docstring for how the buffer forms them. Every
    item comes out exactly once per epoch (``oversize="drop"``, ``max_length`` and
    ``leftovers="drop"`` leave some out and count them in :meth:`stats`).

    Args:
        source: the items. An iterable is iterated once per epoch (its ``set_epoch`` is called
            when it has one, e.g. a ``datasets.IterableDataset``); a callable is called for a
            fresh iterable each epoch; a one-shot iterator (a generator) serves one epoch and
            cannot be resumed. A source with ``state_dict()``/``load_state_dict()`` (the
            ``datasets.IterableDataset`` protocol) resumes in O(buffer); others are skipped from
            the start, O(position). So is a ``datasets.IterableDataset`` with a ``.shuffle()``
            in its chain, whose state does not hold its shuffle buffer (give it a ``seed``: its
            order for an epoch must be the same when read again).
        spec: ``TokenBudget``, ``Buckets``, ``ExactLength`` or ``Packing``.
        buffer: the most items held (at least 4; read in chunks of ``buffer // 4``).
        length: maps an item to its length (an int) or per-field lengths (a tuple of ints, e.g.
            source and target), e.g. ``lambda row: len(row["input_ids"])`` for ``datasets``
            rows; ``int`` for a stream of lengths (the items must then be ints). Required
            unless every item is a sequence of token ids (a list or tuple of ints, a 1-D integer
            array), whose ``len`` is taken. Lengths must be ints (not bool, float or str) in
            [0, 2**31); a bad one is an error naming its stream position.
        seed: non-negative int; each round's batch order comes from ``(seed, epoch)``.
        max_wait: how many buffers of stream an item may wait before it must leave (default
            :data:`MAX_WAIT`, 4): the items of a batch lie within ``max_wait × buffer``
            positions, and a restore reads that many items again. Larger pads less (see the
            module docstring).
        shard: ``(index, count)`` when the source is one of ``count`` shards the caller split
            a stream into (a Ray Train worker's ``get_dataset_shard``: ``(world rank, world
            size)``): the state records it, and a state of another shard or another number
            of shards is refused (each shard is a stream of its own, its position no other's);
            the round order draws from it too. Default: the whole stream, ``(0, 1)``.

    Cost: per item, one ``length`` call and a few compiled or vectorised steps per round it
    waits (a round per ``buffer // 4`` items); about 4.4 M items/s at ``buffer=10_000`` for a stream
    of ints (``benchmarks/bench_streams.py``). Memory: ``buffer`` items, their lengths and a
    few int64 each. ``state_dict()`` is O(1) (the bit mask, about ``max_wait × buffer / 8`` bytes
    before compression, and a digest of the round's buffer are built once per round);
    ``load_state_dict()`` is O(1). ``length=int`` checks that every item is an int (a type
    check per item, at C speed).

    >>> from padless import TokenBudget
    >>> lengths = [5, 3, 9, 3, 5, 1, 8, 9, 2, 5]
    >>> batcher = StreamBatcher(lengths, TokenBudget(max_tokens=10), buffer=4, length=int)
    >>> batches = list(batcher)
    >>> sorted(x for b in batches for x in b) == sorted(lengths)
    True
    >>> all(len(b) * max(b) <= 10 for b in batches)
    True
    """

    # a few words on each setting, for a wrong keyword given to another component
    about: ClassVar[dict[str, str]] = {
        "buffer": "the most items a stream's buffer holds",
        "length": "maps an item to its length",
        "seed": "the seed of each round's batch order",
        "max_wait": "buffers of stream an item may wait before it must leave",
        "shard": "(index, count): which of the caller's shards of a stream the source is",
    }
    # what it says of a keyword it does not take: the samplers' settings a stream does otherwise
    keyword_notes: ClassVar[dict[str, str]] = {
        **{
            k: "a StreamBatcher batches the one stream it is given, in this process: "
            "padless.torch.StreamDataset(source, spec, rank=..., world_size=...) splits a "
            "stream over ranks and DataLoader workers (a datasets.IterableDataset by its "
            "shards, any other source item by item); or give each rank a source of its own"
            for k in ("rank", "world_size")
        },
        **{
            k: f"a stream has no optimizer steps ({k} does not compose with streams yet): its "
            "batches come as its buffer forms them; accumulate them into steps in the "
            "training loop"
            for k in ("batches_per_step", "tokens_per_step")
        },
        "balance": "balanced steps do not compose with streams yet: a stream's batches leave "
        "round by round (each round's in an order shuffled from (seed, epoch)), and no plan "
        "of the epoch is there to balance",
        "shuffle": "a stream's batches always leave each round in an order shuffled from "
        "(seed, epoch); there is no unshuffled order",
        "drop_last": "a stream ends with its source; to stop every rank at the same step "
        "under torch.distributed, wrap the loader in padless.torch.stop_together",
        "groups": "groups= cannot be honoured by the stream form: its rounds plan, hold back "
        "and resume item by item (a group's items could leave in different rounds); make each "
        "group one item of the stream (a DPO pair as one record, length= its tokens) and pack "
        "it with Packing(capacity=...), which never splits an item with oversize='error' or "
        "'drop'; or plan the corpus with PlanSampler(lengths, spec, groups=...)",
    }

    @checks_keywords()
    def __init__(
        self,
        source: Iterable[Any] | Callable[[], Iterable[Any]],
        spec: Any,
        *,
        buffer: int = 10_000,
        length: Callable[[Any], Any] | None = None,
        seed: int = 0,
        max_wait: int | None = None,
        shard: tuple[int, int] | None = None,
    ) -> None:
        max_wait = positive("max_wait", MAX_WAIT if max_wait is None else max_wait)
        shard = (0, 1) if shard is None else _check_shard(shard)

        if not isinstance(spec, Spec):
            raise TypeError(
                "spec must be a padless planner spec (e.g. padless.TokenBudget(max_tokens=4096)), "
                f"got {type(spec).__name__}"
            )
        engine = spec.stream_engine()  # refuses a setting the stream form does not follow
        if engine is None:
            raise ValueError(
                f"spec must be one of the strategies {_streamable()} for a stream, got "
                f"{spec.name!r}"
            )
        buffer = positive("buffer", buffer)
        if buffer < CHUNKS:
            raise ValueError(
                f"buffer must be an int >= {CHUNKS} (it is read in {CHUNKS} chunks), got {buffer}"
            )
        if length is not None and not callable(length):
            raise TypeError(
                "length must be a callable item -> int or tuple of ints (or None for items that "
                f"are sequences of token ids), got {type(length).__name__}"
            )
        self.spec = spec
        self.buffer = buffer
        self.chunk = buffer // CHUNKS
        self.max_wait = max_wait
        self.wait = CHUNKS * max_wait - 1  # rounds an item may wait
        self._lengths = ItemLengths(length)
        self.seed = check_seed("seed", seed)
        self.epoch = 0
        self._epoch_set = False  # set_epoch was called: a state of another epoch is refused
        check_source(source, length)
        self._source = Source(source)
        self._engine: StreamEngine = engine
        self._shard = shard
        self._spec_dict = spec_to_dict(spec)
        self._loaded: dict[str, Any] | None = None
        self._live: _Live | None = None
        self._skips: tuple[tuple[int, int, int], ...] = ()  # (epoch, first, end) batches
        self._stats = self._zero_stats()

    # ------------------------------------------------------------------ public
    @property
    def source(self) -> Any:
        """The source as given."""
        return self._source.obj

    @property
    def length(self) -> Callable[[Any], Any] | None:
        """The ``length`` function as given (None: items are sequences of token ids)."""
        return self._lengths.length

    @property
    def boundaries(self) -> np.ndarray | None:
        """``Buckets``: the boundaries in use (fitted on the first buffer with num_buckets)."""
        return getattr(self._engine, "cuts", None)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration yields.

        A state is of one epoch: after ``load_state_dict`` only that epoch may be set until
        the state is used (the next iteration), and after ``set_epoch`` only a state of that
        epoch may be loaded. Either mistake is a ``ValueError`` (a resume loop that does not
        start from the saved epoch would otherwise yield an epoch twice or skip one).
        """
        epoch = check_seed("epoch", epoch)
        check_epoch(self._loaded, epoch, "StreamBatcher")
        self.epoch = epoch
        self._epoch_set = True

    def skip(self, batches: int | None = None, *, steps: tuple[int, int] | None = None) -> None:
        """Leave batches out of training: the next ``batches`` batches, or ``steps``.

        ``steps=(a, b)``: the batches ``a`` to ``b - 1`` of the current epoch, counted from its
        start as this batcher forms them (its batches are the steps; the count includes batches
        skipped before). ``batches=n``: the ``n`` batches from the current position: where the
        next iteration starts (a loaded state's position, else the epoch's start), or while
        iterating the first batch not yet yielded (the same count: ``a`` is that batch's number).

        Skipped batches are planned and consumed as in a run without the skip, only not
        yielded: the stream's order, the buffer and every other batch stay exactly as they
        were. The skip is recorded in :meth:`state_dict` (``"skips"``: ``[epoch, first, end]``)
        and kept by :meth:`load_state_dict`, so a run resumed from a checkpoint before it skips
        the same batches when it gets there (the usual loss spike recovery: load the checkpoint
        before the spike, skip the batches around it). A range past the epoch's end leaves out
        nothing there. Refused (``ValueError``) where the batches cannot be counted: in an
        epoch resumed from a state saved by a padless before skips (it did not count the
        epoch's batches; the next epoch can skip), and ``batches=n`` when the loaded state is
        at the epoch's end.

        Cost: O(1); iterating checks each batch against the epoch's skips.

        >>> from padless import TokenBudget
        >>> lengths = [5, 3, 9, 3, 5, 1, 8, 9, 2, 5]
        >>> every = list(StreamBatcher(lengths, TokenBudget(max_tokens=10), buffer=4, length=int))
        >>> b = StreamBatcher(lengths, TokenBudget(max_tokens=10), buffer=4, length=int)
        >>> b.skip(steps=(1, 3))
        >>> list(b) == [every[0], *every[3:]], b.state_dict()["skips"]
        (True, [[0, 1, 3]])
        """
        n, pair = check_skip(batches, steps)
        position = self._position()
        if position is None:
            raise ValueError(
                f"skip: epoch {self.epoch} was resumed from a state saved by a padless that did "
                "not count the epoch's batches, so the batches cannot be numbered until the "
                f"epoch ends: skip in the next epoch, or resume from a checkpoint saved by this "
                "padless"
            )
        if pair is None:
            if position < 0:
                raise ValueError(
                    f"skip(batches={n}): the state loaded is at the end of epoch {self.epoch}, "
                    "which has no batches left: iterate it (it yields nothing), set_epoch to "
                    "the next epoch, then skip"
                )
            pair = (position, position + n)
        entry = (self.epoch, *pair)
        if entry not in self._skips:
            self._skips = (*self._skips, entry)

    def _position(self) -> int | None:
        """The number of the batch the skip of ``batches=n`` starts at (see :meth:`skip`): -1
        when a loaded state is at its epoch's end, None when the epoch's batches are not counted."""
        live, state = self._live, self._loaded
        if state is None and live is not None and live.running and live.epoch == self.epoch:
            if live.start is None:
                return None if live.before is None else live.before + live.emitted
            state = live.start
        return state_position(state)

    def _skipped(self, epoch: int) -> list[tuple[int, int]]:
        """The skips of ``epoch`` as ``(first, end)`` ranges, sorted."""
        return sorted((lo, hi) for e, lo, hi in self._skips if e == epoch)

    def __iter__(self) -> Iterator[Any]:
        state, self._loaded = self._loaded, None
        live = _Live(self.epoch)
        live.start = state  # what state_dict() says until the first batch is yielded
        self._live = live
        return self._run(live, state)

    def stats(self) -> dict[str, Any]:
        """Figures of the current (or last) iteration: batches, items, padding, rounds...

        ``padding_fraction`` is 1 − real tokens ÷ padded slots (packing: rows × capacity);
        ``skipped`` counts items left out (oversize "drop", ``max_length``, dropped leftovers),
        ``skipped_batches`` the batches :meth:`skip` left out (not in ``batches``).
        Counted from where the iteration started (a resumed run counts from the restore).
        """
        out = dict(self._stats)
        padded = out["padded_slots"]
        out["padding_fraction"] = 1.0 - out["real_tokens"] / padded if padded else 0.0
        if self.spec.packs_rows:
            out["efficiency"] = out["real_tokens"] / padded if padded else 1.0
        return out

    # ------------------------------------------------------------------ state
    def _fingerprint(self) -> str:
        config = {
            "class": STATE_KIND,
            "spec": self._spec_dict,
            "buffer": self.buffer,
            "window": self.max_wait,  # its former name: states saved before still load
            "chunks": CHUNKS,
        }
        return fingerprint(config, data={"shard": list(self._shard)})

    def state_dict(self) -> dict[str, Any]:
        """A small JSON-safe state from which ``load_state_dict`` continues exactly.

        It says where the current iteration stands (after the batches yielded so far), or
        what the next iteration will do when none runs. JSON-safe when the source's own state
        is.
        """
        state = self._state()
        state.pop("skips", None)
        if self._skips:
            state["skips"] = [list(entry) for entry in self._skips]
        return state

    def _state(self) -> dict[str, Any]:
        if self._loaded is not None:
            return copy.deepcopy(self._loaded)
        live = self._live
        base: dict[str, Any] = {
            "version": STATE_VERSION,
            "kind": STATE_KIND,
            "fingerprint": self._fingerprint(),
            "seed": self.seed,
            "epoch": self.epoch,
            "round": -1,
            "emitted": 0,
            "first": 0,
            "position": 0,
            "source": None,
            "waiting": "",
            "waiting_bits": 0,
            "pieces": [],
            "digest": "",
            "done": False,
            "shard": list(self._shard),
            **self._engine.state(),
        }
        if live is None or live.epoch != self.epoch:
            return base
        if live.start is not None:
            return copy.deepcopy(live.start)
        if live.done:
            base["done"] = True
            if live.total is not None:
                base["before"] = live.total  # the epoch's batches: all of them are before
            return base
        if live.round < 0:
            return base
        text, span, pieces, digest = live.bits(self.chunk)
        base.update(
            {
                "round": live.round,
                "emitted": live.emitted,
                "first": live.first,
                "position": live.first * self.chunk,
                "source": copy.deepcopy(live.snapshot),
                "waiting": text,
                "waiting_bits": span,
                "pieces": pieces,
                "digest": digest,
            }
        )
        if live.before is not None:  # the epoch's batches before the round (absent: not known)
            base["before"] = live.before
        return base

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` at the next iteration (the input is not changed).

        Cost: O(1) here; the next iteration replays at most ``buffer`` items of a stateful
        source, or skips ``state["position"]`` items of another one.
        """
        checked = self._check(state)
        if self._epoch_set:
            check_epoch(checked, self.epoch, "StreamBatcher", loading=True)
        if checked["round"] >= 0 and not checked["done"] and not self._source.resumable:
            raise TypeError(
                "source is a one-shot iterator (e.g. a generator), which cannot be read again to "
                "resume; pass the iterable itself or a function that re-creates the iterator"
            )
        skips = _check_skips(checked.pop("skips", []))
        if "before" not in checked and checked["round"] >= 0 and not checked["done"]:
            ahead = [e for e in (*skips, *self._skips) if e[0] == checked["epoch"]]
            if ahead:
                raise ValueError(
                    f"state was saved by a padless that did not count the batches of epoch "
                    f"{checked['epoch']}, so the skip {list(ahead[0])} of that epoch cannot be "
                    "placed in it: resume from a checkpoint saved by this padless, or skip in "
                    "the next epoch"
                )
        self._engine.load(checked)
        self.epoch = checked["epoch"]
        self._loaded = checked
        # the state's skips, and any made here before the load
        self._skips = (*skips, *(e for e in self._skips if e not in skips))

    def _check_settings(self, state: Any) -> None:
        """Refuse a state saved under other settings (the fingerprint's settings half: the
        shard is the other half, which a StreamDataset checks where its workers run)."""
        saved = str(state.get("fingerprint", "")).split("-")
        want = self._fingerprint().split("-")
        if len(saved) == 2 and saved[1] != want[1]:
            raise ValueError(
                "state does not fit this StreamBatcher: the settings differ (spec, buffer or "
                "max_wait), and a stream does not resume across a change of settings: load it "
                "with the settings it was saved under (a whole-corpus PlanSampler resumes "
                "across a change of budget, balance or batches_per_step)"
            )

    def _check(self, state: Any) -> dict[str, Any]:
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        need = ("version", "kind", "fingerprint", "seed", "epoch", "round", "emitted", "first",
                "position", "source", "waiting", "waiting_bits", "pieces", "digest",
                "done")  # fmt: skip
        missing = [k for k in need if k not in state]
        if missing:
            raise ValueError(f"state is missing keys {missing}")
        if state["kind"] != STATE_KIND or state["version"] != STATE_VERSION:
            raise ValueError(
                f"state must come from a {STATE_KIND} of this padless (kind {STATE_KIND!r}, "
                f"version {STATE_VERSION}), got kind {state['kind']!r}, version {state['version']!r}"
            )
        shard = state.get("shard")
        if isinstance(shard, list) and shard != list(self._shard):
            raise ValueError(
                f"state was saved by the StreamBatcher reading shard {shard[0]} of {shard[1]} "
                f"(one per rank and DataLoader worker), and this one reads shard "
                f"{self._shard[0]} of {self._shard[1]}: a stream resumes only on the shard it "
                "read, at the same world size and number of workers (each shard is a stream of "
                "its own, with its own buffer); resume at the world size it was saved at, or "
                "plan the corpus with a PlanSampler, which resumes at any world size"
            )
        self._check_settings(state)
        want = self._fingerprint()
        if state["fingerprint"] != want:
            raise ValueError(
                f"state does not fit this StreamBatcher: {_mismatch(state['fingerprint'], want)}"
                f" (a stream does not resume across a change of settings; fingerprint "
                f"{state['fingerprint']!r} != {want!r})"
            )
        for k, low in (("seed", 0), ("epoch", 0), ("round", -1), ("emitted", 0), ("first", 0),
                       ("position", 0), ("waiting_bits", 0), ("before", 0)):  # fmt: skip
            if k not in need and k not in state:
                continue  # "before": added since, states without it still load
            v = state[k]
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"state[{k!r}] must be an int >= {low}, got {v!r}")
        if state["seed"] != self.seed:
            raise ValueError(
                f"state was saved with seed={state['seed']}, this StreamBatcher has seed={self.seed}"
            )
        r, first = int(state["round"]), int(state["first"])
        if r >= 0 and not (max(0, r - self.wait) == first and state["position"] == first * self.chunk
                           and state["waiting_bits"] == (r - first) * self.chunk):  # fmt: skip
            raise ValueError(
                f"state is inconsistent: round {r}, first chunk {first}, position "
                f"{state['position']}, {state['waiting_bits']} bits for chunks of {self.chunk}"
            )
        if not all(isinstance(state[k], str) for k in ("waiting", "digest")) or not isinstance(
            state["pieces"], list
        ):
            raise ValueError(
                "state['waiting'] and state['digest'] must be str and state['pieces'] a list"
            )
        if not isinstance(state["done"], bool):
            raise ValueError(f"state['done'] must be a bool, got {state['done']!r}")
        return copy.deepcopy(dict(state))

    # ------------------------------------------------------------------ reading
    @staticmethod
    def _zero_stats() -> dict[str, Any]:
        return {
            "batches": 0,
            "items": 0,
            "entries": 0,
            "real_tokens": 0,
            "padded_slots": 0,
            "skipped": 0,
            "skipped_batches": 0,
            "rounds": 0,
            "peak_buffer": 0,
        }

    def _entries(self, items: list[Any], chunk: int) -> Entries:
        """Buffer entries for the items of a new chunk (oversize items refused, dropped or cut)."""
        base = chunk * self.chunk
        n = len(items)
        lens = self._lengths(items, base)
        sizes = sizes_of(lens)
        engine = self._engine

        def where(i: int) -> int:
            return base + i

        keep = engine.admit(sizes, where)
        offs = np.arange(n, dtype=np.int64)
        if engine.sizes_only:
            lens = sizes
        if engine.cut_above is not None and n and int(sizes.max()) > engine.cut_above:
            return self._pieces(items, sizes, chunk, offs)
        if keep is not None:
            self._stats["skipped"] += int(n - keep.sum())
            idx = np.flatnonzero(keep)
            items = [items[i] for i in idx.tolist()]
            lens, offs = lens[idx], offs[idx]
            sizes = sizes_of(lens)
        return Entries.make(items, lens, chunk, offs)

    def _pieces(self, items: list[Any], sizes: np.ndarray, chunk: int, offs: np.ndarray) -> Entries:
        """Entries when some items are longer than the engine's ``cut_above``: each such item
        becomes the entries the engine cuts it into (pieces, a truncated piece, or none)."""
        engine = self._engine
        cap = engine.cut_above
        out_items: list[Any] = []
        out_sizes: list[int] = []
        out_off: list[int] = []
        out_piece: list[int] = []
        for item, size, off in zip(items, sizes.tolist(), offs.tolist(), strict=True):
            if cap is None or size <= cap:
                out_items.append(item)
                out_sizes.append(size)
                out_off.append(off)
                out_piece.append(-1)
                continue
            parts = engine.cut(size)
            if not parts:
                self._stats["skipped"] += 1
            for k, count, start, stop, piece in parts:
                out_items.append(Piece(item, k, count, start, stop))
                out_sizes.append(stop - start)
                out_off.append(off)
                out_piece.append(piece)
        arr = np.array(out_sizes, dtype=np.int64)
        return Entries.make(out_items, arr, chunk, np.array(out_off, np.int64),
                             np.array(out_piece, np.int64))  # fmt: skip

    # ------------------------------------------------------------------ the loop
    def _round_key(self, base: int, rnd: int) -> int:
        """Round ``rnd``'s 64-bit key, from the epoch's (seed, epoch, STREAM_ORDER) key."""
        return _mix(base + _mix((self._shard[0] << 32) + rnd + 1))

    def _replay(self, it: Iterator[Any], state: dict[str, Any], snaps: dict[int, Any]) -> Entries:
        """Read chunks ``first..round-1`` again and keep the items that were waiting."""
        c = self.chunk
        first, rnd = state["first"], state["round"]
        span = state["waiting_bits"]
        try:
            raw = zlib.decompress(base64.b64decode(state["waiting"].encode("ascii"), validate=True))
        except (ValueError, zlib.error) as err:
            raise ValueError(
                f"state['waiting'] must be the mask state_dict() wrote: {err}"
            ) from None
        bits = np.unpackbits(np.frombuffer(raw, np.uint8))
        if not span <= bits.size < span + 8:
            raise ValueError(f"state['waiting'] must hold {span} bits, got {bits.size}")
        wanted: set[tuple[int, int]] = set()
        for pair in state["pieces"]:
            if not (
                isinstance(pair, list) and len(pair) == 2 and all(type(v) is int for v in pair)
            ):
                raise ValueError(f"state['pieces'] must hold [item, piece] int pairs, got {pair!r}")
            wanted.add((pair[0], pair[1]))
        pend = Entries.empty(self._lengths.fields or 0)
        for k in range(first, rnd):
            lo = (k - first) * c
            if not bits[lo : lo + c].any():  # nothing waits from this chunk: skip it
                items = list(islice(it, c - 1, c))
                got_all = len(items) == 1
                if self._source.cheap_resume:
                    snaps[k + 1] = self._source.snapshot()
                if not got_all:
                    raise ValueError(
                        f"the source ended inside chunk {k} while replaying to the saved "
                        f"position (chunks of {c} items): it holds fewer items than when the "
                        "state was saved"
                    )
                continue
            items = list(islice(it, c))
            if len(items) < c:
                raise ValueError(
                    f"the source ended {len(items)} items into chunk {k} while replaying to the "
                    f"saved position (chunks of {c} items): it holds fewer items than when the "
                    "state was saved"
                )
            if self._source.cheap_resume:
                snaps[k + 1] = self._source.snapshot()
            offs = np.flatnonzero(bits[lo : lo + c]).astype(np.int64)
            chosen = [items[i] for i in offs.tolist()]
            lens = self._lengths(chosen, k * c)
            m = len(chosen)
            engine = self._engine
            if engine.sizes_only:
                lens = sizes_of(lens)
            got = Entries.make(chosen, lens, k, offs)
            cut = engine.cut_above
            if cut is not None and m and int(got.sizes.max()) > cut:
                saved = self._stats["skipped"]
                got = self._pieces(chosen, got.sizes, k, offs)
                self._stats["skipped"] = saved
                # of a split item only the listed pieces were waiting
                keep = [p < 0 or (lo + o, p) in wanted
                        for o, p in zip(got.off.tolist(), got.piece.tolist(), strict=True)]  # fmt: skip
                got = got.take(np.flatnonzero(np.array(keep, np.bool_)))
            pend = pend.concat(got)
        return pend

    def _check_restored(self, buf: Entries, read: int, expect: str, state: Any) -> None:
        """Refuse a restore whose round buffer is not the saved one (another source)."""
        if _digest(buf, read) == expect:
            return
        lo, mid = state["position"], state["round"] * self.chunk
        raise ValueError(
            f"the source does not fit the state: the items read again to restore round "
            f"{state['round']} of epoch {state['epoch']} (those still waiting from stream "
            f"positions [{lo}, {mid}), and the round's chunk from {mid}) have other lengths, or "
            "are fewer or more, than when the state was saved (a different or changed source, "
            "another length function or another shard)"
        )

    def _plan(self, buf: Entries, rnd: int, final: bool, key: int) -> Round:
        """Plan round ``rnd``: items ``wait`` rounds old leave, and so many others that the
        items left waiting fit in the buffer beside the next chunk."""
        forced = buf.chunk <= rnd - self.wait
        return self._engine.plan(buf, forced, final, key, self.buffer - self.chunk)

    def _run(self, live: _Live, state: dict[str, Any] | None) -> Iterator[Any]:
        live.running = True
        try:
            yield from self._rounds(live, state)
        finally:
            live.running = False

    def _rounds(self, live: _Live, state: dict[str, Any] | None) -> Iterator[Any]:
        epoch = live.epoch
        self._stats = stats = self._zero_stats()
        if state is not None and state["done"]:
            live.done = True
            live.total = state.get("before")
            return
        c, wait, src = self.chunk, self.wait, self._source
        base_key = int(_rng.key(self.seed, epoch, _rng.STREAM_ORDER))
        snaps: dict[int, Any] = {}
        expect: str | None = None  # a resume: the digest the restored round must have
        before: int | None = 0  # the epoch's batches planned before the round
        if state is None or state["round"] < 0:
            rnd, skip = 0, 0
            it = src.open(epoch, None, 0)
            snaps[0] = None
            pend = Entries.empty(self._lengths.fields or 0)
        else:
            rnd, skip, first = state["round"], state["emitted"], state["first"]
            before = state.get("before")
            it = src.open(epoch, state["source"], 0 if src.cheap_resume else state["position"])
            snaps[first] = state["source"]
            pend = self._replay(it, state, snaps)
            expect = state["digest"]
        while True:
            items = list(islice(it, c))
            final = len(items) < c
            stats["items"] += len(items)
            new = self._entries(items, rnd)
            if expect is not None:
                self._check_restored(pend.concat(new), len(items), expect, state)
                expect = None
            if src.cheap_resume:
                snaps[rnd + 1] = src.snapshot()
            if rnd < CHUNKS - 1 and not final:  # filling the buffer
                pend = pend.concat(new)
                rnd += 1
                continue
            buf = pend.concat(new)
            stats["rounds"] += 1
            stats["peak_buffer"] = max(stats["peak_buffer"], len(buf))
            key = self._round_key(base_key, rnd)
            plan = self._plan(buf, rnd, final, key)
            stats["skipped"] += plan.dropped
            perm = shuffled(plan.num_batches, _mix(key ^ 0x5EED))
            live.round, live.emitted, live.first = rnd, skip, max(0, rnd - wait)
            live.before = before
            if final and before is not None:
                live.total = before + plan.num_batches
            live.snapshot = snaps.get(live.first)
            live.carry_in, live.cached = pend, None
            live.buf, live.read = buf, len(items)
            live.start = None
            pend = buf.take(plan.carry)
            flat = buf.items[plan.order]  # leaving entries, batch after batch
            bounds = plan.offsets.tolist()
            row_offsets = None if plan.row_offsets is None else plan.row_offsets.tolist()
            real, padded = plan.real.tolist(), plan.padded.tolist()
            seen: Any = None
            for j, b in enumerate(perm[skip:].tolist(), start=skip):
                if self._skips is not seen:  # (again) when a skip was recorded meanwhile
                    seen, ranges = self._skips, self._skipped(epoch)
                if before is not None and any(lo <= before + j < hi for lo, hi in ranges):
                    live.emitted = j + 1  # planned and consumed, not yielded
                    stats["skipped_batches"] += 1
                    continue
                if row_offsets is None:
                    batch: Any = flat[bounds[b] : bounds[b + 1]].tolist()
                    stats["entries"] += len(batch)
                else:
                    lo, hi = row_offsets[b], row_offsets[b + 1]
                    batch = [flat[bounds[k] : bounds[k + 1]].tolist() for k in range(lo, hi)]
                    stats["entries"] += bounds[hi] - bounds[lo]
                stats["batches"] += 1
                stats["real_tokens"] += real[b]
                stats["padded_slots"] += padded[b]
                live.emitted = j + 1
                yield batch
            skip = 0
            if before is not None:
                before += plan.num_batches
            if final:
                break
            rnd += 1
            for k in [k for k in snaps if k < rnd - wait]:
                del snaps[k]
        live.done = True

    def __repr__(self) -> str:
        return (
            f"StreamBatcher({self.spec.describe()}, buffer={self.buffer}, seed={self.seed}, "
            f"epoch={self.epoch})"
        )
