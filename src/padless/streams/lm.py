"""Language-model streams: (x, y) batches cut from one long token corpus, in constant memory.

Two classic schemes, both exact (every target token counted, none sampled with replacement):

- ``mode="random"``: each epoch draws an offset ``o`` in ``[0, num_steps)``, cuts the corpus from
  ``o`` into consecutive non-overlapping subsequences of ``num_steps`` tokens (each with its next
  token for ``y``), shuffles their order with a keyed bijection evaluated on the fly, and groups
  ``batch_size`` of them per batch.
- ``mode="sequential"``: each epoch draws ``o``, splits the corpus from ``o`` into
  ``world_size × batch_size`` equal contiguous streams, and walks them ``num_steps`` columns at a
  time, so row ``i`` of batch ``k + 1`` continues row ``i`` of batch ``k`` (truncated BPTT).

Random mode takes a sequence-length warm-up: ``num_steps`` as a :class:`padless.Schedule` of the
global optimizer step; the epoch is cut into chunks of the longest length, and a step of length
``T`` cuts each of its chunks into rows of ``T``, so tokens per step stay constant.

Nothing proportional to the corpus is ever materialised: the shuffle is a Feistel network with
cycle walking over ``[0, n)`` (``padless._kernels.feistel_permute``), and batches are gathered
by a compiled loop straight from the (memory-mapped) corpus.
"""

from __future__ import annotations

import bisect
import mmap
import os
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, cast

import numpy as np

from .. import _kernels as K
from ..core import _rng
from ..core._check import _is_int, check_bool, check_choice, check_seed, non_negative, positive
from ..core._keywords import checks_keywords
from ..core._state import Resumable, fingerprint
from ..core.plan import BatchPlan
from ..core.schedules import Schedule, change_points, divisor_schedule
from ..io.tokens import npy_layout

__all__ = ["LMStream"]

#: Output dtypes offered by ``out_dtype`` (int64 for most frameworks; int32/uint16 to save bytes).
OUT_DTYPES = ("int64", "int32", "uint16")

#: Tokens hashed from each end of the corpus for the resume fingerprint.
FINGERPRINT_SAMPLE = 4096

Empty = Callable[[tuple[int, int, int], np.dtype], np.ndarray]


def _numpy_empty(shape: tuple[int, int, int], dtype: np.dtype) -> np.ndarray:
    return np.empty(shape, dtype=dtype)


def _check_token_dtype(dtype: np.dtype, what: str) -> np.dtype:
    if dtype.kind == "f" or dtype.kind == "c":
        raise TypeError(f"{what} must be an integer dtype (token ids), got float dtype {dtype}")
    if dtype.kind not in "iu":
        raise TypeError(f"{what} must be an integer dtype (token ids), got {dtype}")
    if not dtype.isnative:
        raise ValueError(
            f"{what} must be in native byte order, got {dtype.str}; "
            f"convert it with .astype({dtype.newbyteorder('=').name!r})"
        )
    return dtype


def _as_dtype(name: str, value: Any) -> np.dtype:
    try:
        return np.dtype(value)
    except TypeError as err:
        raise TypeError(f"{name} must be a numpy dtype, got {value!r}") from err


def _map_file(path: str, populate: bool) -> mmap.mmap:
    """Map a whole file read-only; with ``populate``, fault every page in up front (Linux)."""
    with open(path, "rb") as fh:
        flags = getattr(mmap, "MAP_SHARED", None)
        if flags is None:  # pragma: no cover - Windows
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        if populate:
            flags |= getattr(mmap, "MAP_POPULATE", 0)
        return mmap.mmap(fh.fileno(), 0, flags=flags, prot=mmap.PROT_READ)


def _is_store(tokens: Any) -> bool:
    """Whether ``tokens`` is a token store (``padless.io.tokens.RawTokens``, an indexed dataset)."""
    return not isinstance(tokens, np.ndarray) and isinstance(
        getattr(tokens, "tokens", None), np.ndarray
    )


def _open_path(path: str, dtype: Any, populate: bool) -> np.ndarray:
    """Map a token file: a real ``.npy`` found by its content (under any name, as
    ``padless.RawTokens`` reads it), else headerless values of ``dtype``."""
    if not os.path.isfile(path):
        raise ValueError(f"tokens must be an existing file, got {path!r}")
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        header = npy_layout(fh, path, size)
    if header is not None:
        file_dtype, count, start = header
        file_dtype = _check_token_dtype(file_dtype, f"the dtype of {path!r}")
        if dtype is not None and _as_dtype("dtype", dtype) != file_dtype:
            raise ValueError(
                f"dtype must match the .npy file's dtype {file_dtype}, got {np.dtype(dtype)}"
            )
        if count == 0:
            return np.zeros(0, dtype=file_dtype)
        mapped = _map_file(path, populate)
        return np.frombuffer(mapped, dtype=file_dtype, count=count, offset=start)
    if dtype is None and path.endswith(".npy"):
        raise ValueError(
            f"tokens file {path!r} is not a valid .npy file (no numpy header): it looks "
            "like a raw token file (an OLMo-style .npy memmap); pass dtype= (e.g. "
            "dtype='uint16') to read it as raw tokens"
        )
    if dtype is None:
        raise TypeError(
            f"dtype is required for a raw token file (e.g. dtype=np.uint16), got None for {path!r}"
        )
    raw_dtype = _check_token_dtype(_as_dtype("dtype", dtype), "dtype")
    if size % raw_dtype.itemsize:
        raise ValueError(
            f"the size of a raw token file must be a multiple of the {raw_dtype} itemsize "
            f"{raw_dtype.itemsize}, got {size} bytes in {path!r}"
        )
    if size == 0:
        return np.zeros(0, dtype=raw_dtype)
    return np.frombuffer(_map_file(path, populate), dtype=raw_dtype)


def _open_tokens(tokens: Any, dtype: Any, populate: bool) -> tuple[np.ndarray, str | None]:
    """Return the corpus as a 1-D integer array (a file is mapped) and its path, if any."""
    if isinstance(tokens, (str, os.PathLike)):
        path = os.fspath(tokens)
        if isinstance(path, bytes):  # pragma: no cover - bytes paths
            path = os.fsdecode(path)
        return _open_path(path, dtype, populate), path
    if isinstance(tokens, (list, tuple, range)):
        tokens = np.asarray(tokens)
        if tokens.size == 0:
            tokens = tokens.astype(np.int64)
    if not isinstance(tokens, np.ndarray):
        raise TypeError(
            "tokens must be a 1-D integer numpy array or memmap, or a path to a .npy or raw "
            f"file, got {type(tokens).__name__}"
        )
    arr = tokens.view(np.ndarray)  # a plain ndarray view of a memmap (no copy)
    _check_token_dtype(arr.dtype, "the dtype of tokens")
    if arr.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got shape {arr.shape}")
    if dtype is not None and _as_dtype("dtype", dtype) != arr.dtype:
        raise ValueError(f"dtype must match the tokens array's dtype {arr.dtype}, got {dtype!r}")
    return arr, None


def _length_schedule(num_steps: Any, mode: str) -> tuple[Schedule | None, int]:
    """``(schedule, longest length)`` of ``num_steps``: ``None`` for a constant (an int or a
    constant schedule); a warm-up's every value must divide its longest one (checked at step 0
    and at every step where the value changes, so every step any epoch reaches is covered)."""
    if _is_int(num_steps):
        return None, positive("num_steps", num_steps)
    schedule = Schedule.of(num_steps, name="num_steps")
    if not schedule.integer:
        raise TypeError(f"num_steps must be an integer schedule (token counts), got {schedule!r}")
    if schedule.is_constant:
        return None, positive("num_steps", schedule.value(0))
    if mode != "random":
        raise ValueError(
            f"num_steps as a schedule (a sequence-length warm-up) needs mode='random', got "
            f"mode={mode!r} with num_steps={schedule!r}: sequential mode's rows continue each "
            "other column by column (truncated BPTT), which a changing length would break"
        )
    longest = divisor_schedule(
        "num_steps", schedule, largest="longest num_steps",
        why="each step cuts chunks of the longest into rows of its length",
    )  # fmt: skip
    return schedule, longest


def _rows_per_batch(batch_size: Any, tokens_per_batch: Any, longest: int) -> int:
    """Rows of ``longest`` tokens per batch: ``batch_size``, or ``tokens_per_batch / longest``."""
    if (batch_size is None) == (tokens_per_batch is None):
        raise TypeError(
            "LMStream takes batch_size (rows per batch at the longest num_steps) or "
            "tokens_per_batch (the tokens of each batch), one of them, got "
            f"batch_size={batch_size!r} and tokens_per_batch={tokens_per_batch!r}"
        )
    if batch_size is not None:
        return positive("batch_size", batch_size)
    tokens = positive("tokens_per_batch", tokens_per_batch)
    if tokens % longest:
        raise ValueError(
            f"tokens_per_batch must be a multiple of the longest num_steps {longest} (a batch "
            f"holds whole chunks of {longest} tokens), got {tokens}"
        )
    return tokens // longest


def _phases(schedule: Schedule, first: int, steps: int) -> list[dict[str, int]]:
    """The runs of equal length among ``steps`` global steps from ``first``, in order."""
    lengths = schedule.values(first + np.arange(steps, dtype=np.int64))
    if not lengths.size:
        return []
    cuts = np.flatnonzero(lengths[1:] != lengths[:-1]) + 1
    starts = np.concatenate([[0], cuts])
    counts = np.diff(np.concatenate([starts, [lengths.size]]))
    return [
        {"num_steps": int(lengths[a]), "steps": int(n)}
        for a, n in zip(starts.tolist(), counts.tolist(), strict=True)
    ]


class LMStream(Resumable):
    """Cut one long token corpus into language-model batches ``(x, y)``, y being x shifted by one.

    Iteration yields fresh ``(x, y)`` arrays of shape ``(rows, columns)`` and dtype ``out_dtype``
    per batch: the two C-contiguous halves of one new ``(2, rows, columns)`` array (one
    allocation per batch keeps glibc from returning the pages to the OS and faulting them in again
    each batch). Nothing is reused, so batches may be kept. ``padless.torch.lm_tensors`` yields the
    same as tensors, optionally written straight into pinned memory. Through a DataLoader (with
    workers or not, torchdata's ``StatefulDataLoader`` included) wrap it in
    ``padless.torch.LMDataset``: the stream itself is no torch dataset (a DataLoader takes it
    for a map-style one and fails in a worker with ``'LMStream' object is not subscriptable``;
    it only calls ``len()`` before the workers start, so the stream cannot refuse it sooner).

    Modes (``o`` is a per-epoch offset in ``[0, num_steps)`` drawn from ``(seed, epoch)``):

    - ``"random"``: the corpus from ``o`` is cut into ``n = (N - 1 - o) // num_steps``
      subsequences of ``num_steps`` tokens (subsequence ``i`` is tokens ``o + i·T`` onwards, ``y``
      one token later). Their order is a keyed permutation (Feistel network over the next power of
      two >= n with cycle walking; pseudo-random, evaluated per index, no index array), and
      consecutive groups of ``batch_size`` form the global batches. Every token in
      ``(o, o + n·T]`` is a target exactly once per epoch. Global batch ``j`` goes to rank
      ``j mod world_size``. ``drop_last=True`` drops the smaller last batch and the incomplete
      last step (fewer than ``world_size`` batches, counted in :attr:`dropped`);
      ``drop_last=False`` keeps the smaller batch and completes the last step with the epoch's
      first batches (counted in :attr:`repeated`, 0 when ``world_size == 1``). This is the tail
      policy of the padless samplers.
    - ``"sequential"``: the corpus from ``o`` is split into ``S = world_size × batch_size`` streams
      of ``L = (N - 1 - o) // S`` tokens; rank ``r`` owns streams ``r·B … r·B + B - 1``, and its
      batch ``k`` holds columns ``[k·T, (k+1)·T)`` of each, so row ``i`` of batch ``k + 1``
      continues row ``i`` of batch ``k``. ``drop_last=False`` adds a last, shorter step with the
      ``L mod T`` remaining columns; then every token in ``(o, o + S·L]`` is a target exactly once.

    Sequence-length warm-up (random mode; ``num_steps`` a :class:`padless.Schedule`, e.g.
    ``Schedule.piecewise([0, 1000, 2000], [1024, 2048, 4096])``):

    - ``T_max``, the schedule's longest value, takes the place of ``num_steps`` above: the epoch's
      offset is in ``[0, T_max)``, its subsequences (*chunks*) have ``T_max`` tokens and are
      shuffled and grouped ``batch_size`` per global batch as above, whatever the schedule.
      Every value must divide ``T_max`` (checked up front, naming the step: a power-of-two
      warm-up does).
    - A batch at a step of length ``T`` cuts each of its chunks into ``T_max / T`` rows of ``T``
      tokens, in order: its shape is ``(batch_size · T_max / T, T)``, so tokens per batch
      (``batch_size · T_max``, :attr:`tokens_per_batch`) stay constant and the last row of a chunk
      reads the chunk's next token for ``y``. The batches, their order, ``len()``, the tail
      policy and the coverage are those of a constant ``num_steps=T_max``: every token of the
      epoch is a target exactly once, wherever the warm-up ends (mid-epoch or later).
    - The schedule's step is the global optimizer step: every rank's batch ``k`` of an epoch is
      one step, and the step counts on across epochs, from 0 at epoch 0's start
      (:meth:`first_step`: the earlier epochs' steps at this world size, tail policy and skips);
      a repeat that completes the last step (``drop_last=False``) is cut at that step's length,
      so every rank has the same length at the same step (:meth:`num_steps_at`). After a resume
      at another world size, the epoch's steps are counted as if it had run at the new one.

    Args:
        tokens: a 1-D integer array or ``np.memmap``; a token store (``padless.io.tokens.RawTokens``
            or an indexed dataset: its ``tokens``, the whole file); or a path: a real ``.npy``
            under any name (found by its numpy header, as ``RawTokens`` finds it; dtype from
            the header), else a raw binary file that needs ``dtype`` (an OLMo-style ``.npy``
            without the numpy header, a ``.bin``). Float dtypes are refused.
        batch_size: rows per batch (B); with a warm-up, rows of the longest ``num_steps``.
        num_steps: columns per batch (T), the sequence length; or, in random mode, a
            :class:`padless.Schedule` of the global optimizer step (a warm-up, see above).
        tokens_per_batch: instead of ``batch_size``, the tokens of each batch, on each rank
            (one batch per rank is one step): ``batch_size = tokens_per_batch / T_max``, which
            must be an int (``T_max``: ``num_steps``, or a warm-up's longest value).
        mode: ``"random"`` or ``"sequential"``.
        seed: non-negative int; offsets and orders derive from ``(seed, epoch)``.
        rank, world_size: this process's share; every rank yields the same number of batches.
        drop_last: see the modes above.
        dtype: dtype of a raw token file (uint16, uint32 or any native integer dtype).
        out_dtype: ``"int64"`` (default), ``"int32"`` or ``"uint16"``; it must hold every value
            of the corpus dtype (a safe cast), checked up front.
        populate: for a path, map the file with ``MAP_POPULATE`` (Linux) so that the whole file is
            read into the page cache and mapped once, at construction, instead of faulting pages
            in on first touch. It pays off most in random mode on a cold page cache (one
            sequential read instead of scattered page-ins; about 1.4x faster open + first pass
            in ``benchmarks/bench_stream.py``); on a warm cache the kernel's fault-around makes
            first touches cheap either way. Set False for a corpus larger than RAM.

    State: ``state_dict()`` / ``load_state_dict()`` resume exactly, in O(1) (no replay).
    ``position`` counts global batch slots of the current epoch (batches yielded by this rank ×
    ``world_size``, as for the samplers), so a random-mode state loads at another world size;
    a sequential-mode state needs the same world size (the streams depend on it). The
    fingerprint hashes the settings, the corpus length and its first and last
    :data:`FINGERPRINT_SAMPLE` tokens, not the whole corpus (billions of tokens).

    Cost: construction O(1) for an array; for a path with ``populate=True``, one read of the file
    into the page cache. Per batch O(B·T) time, 2·B·T·itemsize bytes out, O(1) extra memory; the
    permutation costs about 2 × 6 Feistel rounds per row. A warm-up adds one evaluation of the
    schedule per batch; its values are checked once, at construction (O(steps where it changes),
    O(the ramp's steps) for a ramp).

    >>> import numpy as np
    >>> stream = LMStream(np.arange(100), batch_size=2, num_steps=5, seed=1)
    >>> len(stream)
    9
    >>> x, y = next(iter(stream))
    >>> x.shape, x.dtype.name, bool((y == x + 1).all())
    ((2, 5), 'int64', True)
    >>> from padless import Schedule
    >>> warm = LMStream(np.arange(200), num_steps=Schedule.piecewise([0, 2], [2, 8]),
    ...                 tokens_per_batch=16)
    >>> [x.shape for x, _ in warm][:4]
    [(8, 2), (8, 2), (2, 8), (2, 8)]
    >>> warm.stats()["phases"]
    [{'num_steps': 2, 'steps': 2}, {'num_steps': 8, 'steps': 10}]
    """

    # a few words on each setting, for a wrong keyword given to another component
    about: ClassVar[dict[str, str]] = {
        "batch_size": "rows per batch",
        "num_steps": "columns per batch, the sequence length",
        "tokens_per_batch": "tokens of each batch, on each rank",
        "mode": "'random' or 'sequential' subsequences",
        "dtype": "the dtype of a raw token file",
        "out_dtype": "the dtype of the batches",
        "populate": "read a token file into the page cache at once",
    }
    # what it says of a keyword it does not take: the samplers' settings it does otherwise
    yields = "tokens"  # (x, y) arrays read from the corpus, not indices of a dataset
    keyword_notes: ClassVar[dict[str, str]] = {
        "context_parallel": "LMStream yields dense (batch_size, num_steps) blocks of one token "
        "stream, with no documents to keep apart: split each block's columns across the "
        "context-parallel ranks in the model (context-parallel packed documents are "
        "Packing(context_parallel=...) with padless.torch.collate_packed)",
        "balance": "every LMStream batch holds batch_size x num_steps tokens, the same cost: "
        "there is nothing to balance",
        **{
            k: "each LMStream batch (on each rank) is one optimizer step: size it with "
            "batch_size or tokens_per_batch, or accumulate batches in the training loop "
            f"({k} does not compose with LMStream yet)"
            for k in ("batches_per_step", "tokens_per_step")
        },
        "shuffle": "mode='random' shuffles the subsequences each epoch, mode='sequential' "
        "keeps the corpus in order",
    }

    @checks_keywords()
    def __init__(
        self,
        tokens: Any,
        *,
        batch_size: int | None = None,
        num_steps: int | Schedule,
        tokens_per_batch: int | None = None,
        mode: str = "random",
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = True,
        dtype: Any = None,
        out_dtype: Any = "int64",
        populate: bool = True,
    ) -> None:
        self.mode = check_choice("mode", mode, ("random", "sequential"))
        #: the warm-up (None for a constant num_steps); num_steps is then its longest value
        self.num_steps_schedule, self.num_steps = _length_schedule(num_steps, self.mode)
        self.batch_size = _rows_per_batch(batch_size, tokens_per_batch, self.num_steps)
        self.seed = check_seed("seed", seed)
        self.world_size = positive("world_size", world_size)
        self.rank = non_negative("rank", rank)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be < world_size={self.world_size}, got {self.rank}")
        self.drop_last = check_bool("drop_last", drop_last)
        self.populate = check_bool("populate", populate)
        out = _as_dtype("out_dtype", out_dtype)
        if out.name not in OUT_DTYPES:
            listed = ", ".join(OUT_DTYPES)
            raise ValueError(f"out_dtype must be one of {listed}, got {out}")
        self.out_dtype = out
        self._dtype_arg = dtype
        self._store = tokens if _is_store(tokens) else None
        if self._store is not None:
            self._tokens, self._path = _open_tokens(self._store.tokens, dtype, self.populate)
        else:
            self._tokens, self._path = _open_tokens(tokens, dtype, self.populate)
        src = self._tokens.dtype
        if not np.can_cast(src, out, casting="safe"):
            raise ValueError(
                f"out_dtype must hold every token of dtype {src} (a safe cast), got {out}; "
                "use out_dtype='int64'"
            )
        self.num_tokens = int(self._tokens.shape[0])
        self._signed = self._tokens.dtype.kind == "i"
        need = self.min_tokens
        if self.num_tokens < need:
            raise ValueError(
                f"tokens too short for one batch per rank: mode={self.mode!r} with "
                f"batch_size={self.batch_size}, num_steps={self.num_steps}, "
                f"world_size={self.world_size}, drop_last={self.drop_last} needs at least "
                f"{need} tokens, got {self.num_tokens}"
            )
        self.epoch = 0
        self._reset_position()
        self._geometries: dict[int, tuple[int, int, int, np.ndarray]] = {}
        self._fingerprint: str | None = None
        self._firsts: tuple[tuple[tuple[int, int, int], ...], dict[int, int]] = ((), {0: 0})

    # ------------------------------------------------------------------ geometry
    @property
    def min_tokens(self) -> int:
        """Fewest corpus tokens that give every rank at least one batch at every offset."""
        t, rows = self.num_steps, self.batch_size * self.world_size
        if self.drop_last:
            return t * (rows + 1)
        return 2 * t if self.mode == "random" else t + rows

    def offset_of(self, epoch: int) -> int:
        """Return the offset ``o`` in ``[0, num_steps)`` that ``epoch`` starts from.

        >>> LMStream(list(range(50)), batch_size=1, num_steps=4).offset_of(0) in range(4)
        True
        """
        epoch = check_seed("epoch", epoch)
        return int(_rng.rng(self.seed, epoch, _rng.LM_OFFSET).integers(self.num_steps))

    def _geometry(self) -> tuple[int, int, int, np.ndarray]:
        """(offset, units, total slots, round keys) of the current epoch.

        Random mode: units = subsequences n, slots = global batches. Sequential mode: units =
        stream length L, slots = steps × world_size.
        """
        return self._epoch_geometry(self.epoch)

    def _epoch_geometry(self, epoch: int) -> tuple[int, int, int, np.ndarray]:
        """:meth:`_geometry` of any ``epoch`` (the latest few kept: a mixture reads several)."""
        cache = self.__dict__.setdefault("_geometries", {})
        if epoch in cache:
            return cast(tuple[int, int, int, np.ndarray], cache[epoch])
        o, units, total = self._layout(epoch)
        if self.mode == "random":
            keys = K.feistel_round_keys(int(_rng.key(self.seed, epoch, _rng.LM_ORDER)))
        else:
            keys = np.zeros(0, dtype=np.uint64)
        if len(cache) >= 4:
            del cache[next(iter(cache))]
        cache[epoch] = (o, units, total, keys)
        return cache[epoch]

    def _layout(self, epoch: int) -> tuple[int, int, int]:
        """(offset, units, total slots) of ``epoch`` (see :meth:`_geometry`)."""
        o = self.offset_of(epoch)
        t, b, w = self.num_steps, self.batch_size, self.world_size
        if self.mode == "random":
            units = (self.num_tokens - 1 - o) // t
            return o, units, units // b if self.drop_last else -(-units // b)
        units = (self.num_tokens - 1 - o) // (w * b)
        return o, units, (units // t if self.drop_last else -(-units // t)) * w

    @property
    def tokens_per_batch(self) -> int:
        """Tokens of every (full) batch: ``batch_size × num_steps`` (the longest, with a warm-up)."""
        return self.batch_size * self.num_steps

    def first_step(self, epoch: int | None = None) -> int:
        """The global optimizer step ``epoch`` (default: the current one) starts at: the sum of
        the earlier epochs' steps (batches per rank, each at this world size, tail policy and
        recorded skips).

        Cost: O(epoch) the first time (one offset draw per earlier epoch), then cached.

        >>> s = LMStream(np.arange(100), batch_size=2, num_steps=5, seed=1)
        >>> s.first_step(0), s.first_step(1) == len(s)
        (0, True)
        """
        epoch = self.epoch if epoch is None else check_seed("epoch", epoch)
        if self._firsts[0] != self._skips:  # a skip changes the counts of later epochs
            self._firsts = (self._skips, {0: 0})
        firsts = self._firsts[1]
        if epoch in firsts:
            return firsts[epoch]
        known = max(e for e in firsts if e <= epoch)
        for e in range(known, epoch):
            steps = self._epoch_batches(e, self._layout(e)[2]) // self.world_size
            firsts[e + 1] = firsts[e] + steps
        return firsts[epoch]

    def num_steps_at(self, step: int) -> int:
        """The sequence length (columns) of the batches of global optimizer ``step``.

        >>> from padless import Schedule
        >>> s = LMStream(np.arange(100), batch_size=1, num_steps=Schedule.piecewise([0, 3], [4, 8]))
        >>> s.num_steps_at(2), s.num_steps_at(3)
        (4, 8)
        """
        if self.num_steps_schedule is None:
            check_seed("step", step)
            return self.num_steps
        return int(self.num_steps_schedule.value(step))

    @property
    def offset(self) -> int:
        """The offset ``o`` of the current epoch."""
        return self._geometry()[0]

    @property
    def dropped(self) -> int:
        """Whole batches left out by ``drop_last=True`` this epoch (all ranks).

        Random mode: the smaller last batch and the incomplete last step; sequential mode: the
        shorter last step on every rank.
        """
        if not self.drop_last:
            return 0
        _, units, total, _ = self._geometry()
        if self.mode == "random":
            full = total - self._steps(total, 0) * self.world_size
            return full + (1 if units % self.batch_size else 0)
        return self.world_size if units % self.num_steps else 0

    def stats(self) -> dict[str, Any]:
        """Return the figures of the current epoch's full pass (all ranks, from position 0).

        ``targets`` counts distinct target tokens over all ranks; ``coverage`` is that over the
        ``N - 1 - offset`` tokens that could be targets. With a warm-up, also ``first_step``,
        ``tokens_per_batch`` and ``phases``: the lengths of the epoch's steps in order, each with
        its number of steps (``{"num_steps": T, "steps": k}``).
        """
        o, units, total, _ = self._geometry()
        steps = self._steps(total, 0)
        t, b, w = self.num_steps, self.batch_size, self.world_size
        if self.mode == "random":
            targets = steps * w * b * t if self.drop_last else units * t
        else:
            cols = (units // t) * t if self.drop_last else units
            targets = cols * w * b
        possible = self.num_tokens - 1 - o
        out: dict[str, Any] = {
            "mode": self.mode,
            "epoch": self.epoch,
            "offset": o,
            "tokens": self.num_tokens,
            "batches_per_rank": steps,
            "world_size": self.world_size,
            "repeated": self.repeated,
            "dropped": self.dropped,
            "targets": int(targets),
            "coverage": targets / possible if possible > 0 else 0.0,
        }
        if self.num_steps_schedule is not None:
            out["first_step"] = first = self.first_step()
            out["tokens_per_batch"] = self.tokens_per_batch
            out["phases"] = _phases(self.num_steps_schedule, first, steps)
        return out

    # ------------------------------------------------------------------ Resumable hooks
    def _total(self) -> int:
        return self._geometry()[2]

    def _batch_at(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        return self._make_batch(slot, _numpy_empty)

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        return self.batches()

    def batches(self, empty: Empty | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Iterate as ``iter(stream)`` does, each ``(x, y)`` pair the two halves of ``empty(...)``.

        ``empty((2, rows, columns), dtype)`` must return a fresh writable C-contiguous numpy
        array of that shape and dtype (e.g. a pinned torch tensor's ``.numpy()``, as
        ``padless.torch.lm_tensors`` does); the compiled gather writes the batch straight into
        it. None allocates with numpy.

        >>> s = LMStream(np.arange(40), batch_size=2, num_steps=4)
        >>> x, y = next(s.batches(lambda shape, dtype: np.zeros(shape, dtype)))
        >>> bool((y == x + 1).all())
        True
        """
        return self._share(0, 1, empty)

    def _share(
        self, first: int, every: int, empty: Empty | None = None
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The next iteration's batches at its steps ``first, first + every, ...`` only, as
        :meth:`batches` yields them (a DataLoader worker's share: ``padless.torch.LMDataset``).

        The other steps are passed over without gathering them: O(1) each. ``state_dict()``
        then holds the position after the last batch yielded.

        >>> s = LMStream(np.arange(100), batch_size=2, num_steps=5, seed=1)
        >>> every = [x for x, _ in s]
        >>> odd = [x for x, _ in s._share(1, 2)]
        >>> len(odd), all((a == b).all() for a, b in zip(odd, every[1::2]))
        (4, True)
        """
        allocate = _numpy_empty if empty is None else empty
        schedule = self.num_steps_schedule
        if schedule is None:
            return self._run(
                lambda slot: self._make_batch(slot, allocate), first=first, every=every
            )
        # the length of a step by bisection over the schedule's changes, from the epoch's
        # first step (counted once per iteration)
        changes, lengths = change_points(schedule)
        epoch_step: list[int] = []

        def batch_at(slot: int, step: int) -> tuple[np.ndarray, np.ndarray]:
            if not epoch_step:
                epoch_step.append(self.first_step())
            cut = int(lengths[bisect.bisect_right(changes, epoch_step[0] + step) - 1])
            return self._make_batch(slot, allocate, cut=cut)

        return self._run(batch_at, stepped=True, first=first, every=every)

    def _make_batch(
        self, slot: int, empty: Empty, cut: int | None = None, epoch: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        epoch = self.epoch if epoch is None else epoch
        o, units, _, keys = self._epoch_geometry(epoch)
        src, out = self._tokens, self.out_dtype
        t, b = self.num_steps, self.batch_size
        if self.mode == "random":
            first = slot * b
            rows = min(b, units - first)
            cut = t if cut is None else cut  # a warm-up step's length
            x, y = empty((2, rows * (t // cut), cut), out)
            # the chunks' rows of `cut` tokens are the C-ordered (rows, t) view of the batch
            K.lm_random_batch(src, first, units, o, keys, x.reshape(rows, t), y.reshape(rows, t))
        else:
            rows0 = self.rank * b + np.arange(b, dtype=np.int64)
            col = (slot // self.world_size) * t
            cols = min(t, units - col)
            x, y = empty((2, b, cols), out)
            K.lm_gather(src, o + rows0 * units + col, x, y)
        if self._signed and x.size and min(int(x.min()), int(y.min())) < 0:
            bad = int(min(int(x.min()), int(y.min())))
            raise ValueError(
                f"tokens must be non-negative token ids, got {bad} in the batch at slot {slot} "
                f"of epoch {epoch}"
            )
        return x, y

    # ------------------------------------------------------------------ a mixture's corpus
    def epoch_plan(self, epoch: int) -> tuple[BatchPlan, np.ndarray]:
        """An epoch's global batches as a plan a mixture draws from (``padless.MixtureSampler``
        of LM streams): batch ``b`` holds one value, ``b``, its slot (the tokens are gathered by
        :meth:`mixture_batch`), in slot order (the subsequences are shuffled within the slots).

        >>> s = LMStream(np.arange(100), batch_size=2, num_steps=5, seed=1)
        >>> plan, order = s.epoch_plan(0)
        >>> len(plan) == len(s), order[:3].tolist()
        (True, [0, 1, 2])
        """
        total = self._epoch_geometry(check_seed("epoch", epoch))[2]
        slots = np.arange(total, dtype=np.int64)
        return BatchPlan(slots, np.arange(total + 1, dtype=np.int64)), slots

    def mixture_batch(
        self, epoch: int, slot: int, step: int, empty: Empty | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Batch ``slot`` of ``epoch`` as global optimizer ``step`` delivers it (a warm-up cut at
        :meth:`num_steps_at` that step): a mixture's batch of this corpus. The stream's own
        position does not move.

        >>> from padless import Schedule
        >>> s = LMStream(np.arange(200), num_steps=Schedule.piecewise([0, 2], [2, 8]),
        ...              tokens_per_batch=16)
        >>> [s.mixture_batch(0, 1, step)[0].shape for step in (0, 5)]
        [(8, 2), (2, 8)]
        """
        cut = None if self.num_steps_schedule is None else self.num_steps_at(step)
        return self._make_batch(slot, _numpy_empty if empty is None else empty, cut, epoch)

    # ------------------------------------------------------------------ state
    def _fingerprint_now(self) -> str:
        if self._fingerprint is None:
            config = {
                "class": type(self).__name__,
                "mode": self.mode,
                "batch_size": self.batch_size,
                "num_steps": self.num_steps,
                "drop_last": self.drop_last,
            }
            if self.num_steps_schedule is not None:
                config["num_steps_schedule"] = self.num_steps_schedule.as_dict()
            k = FINGERPRINT_SAMPLE
            head = np.asarray(self._tokens[:k], dtype=np.int64)
            tail = np.asarray(self._tokens[-k:], dtype=np.int64)
            data = {"num_tokens": self.num_tokens}
            self._fingerprint = fingerprint(config, head, tail, data=data)
        return self._fingerprint

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` at the next iteration: O(1), no replay; ``state`` is not changed.

        A random-mode state may come from another world size; a sequential-mode one may not.
        """
        checked = self._checked_state(state)
        if self.mode == "sequential" and checked["world_size"] != self.world_size:
            raise ValueError(
                f"state['world_size'] must equal world_size={self.world_size} in sequential mode "
                f"(the streams depend on it), got {checked['world_size']}"
            )
        super().load_state_dict(state)

    # ------------------------------------------------------------------ pickling
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_iterating"] = False
        if self._path is not None or self._store is not None:
            state["_tokens"] = None  # re-mapped on unpickling (a store pickles as its path)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("num_steps_schedule", None)  # pickled before warm-ups
        self.__dict__.setdefault("_firsts", ((), {0: 0}))
        self.__dict__.pop("_geometry_cache", None)  # pickled before the per-epoch cache
        self.__dict__.pop("_geometry_epoch", None)
        self._store = state.get("_store")  # absent from a stream pickled before stores
        if self._store is not None:
            self._tokens, _ = _open_tokens(self._store.tokens, self._dtype_arg, self.populate)
        elif self._path is not None:
            self._tokens, _ = _open_tokens(self._path, self._dtype_arg, self.populate)

    def __repr__(self) -> str:
        if self._store is not None:
            where = repr(self._store)
        elif self._path is not None:
            where = repr(self._path)
        else:
            where = f"array[{self._tokens.dtype}]"
        steps = self.num_steps_schedule or self.num_steps
        return (
            f"LMStream({where}, tokens={self.num_tokens}, mode={self.mode!r}, "
            f"batch_size={self.batch_size}, num_steps={steps}, rank={self.rank}, "
            f"world_size={self.world_size}, drop_last={self.drop_last})"
        )
