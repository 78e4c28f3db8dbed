"""Grain glue: padless plans as Grain datasets, resumed through Grain's own iterator state.

Grain packs locally (``FirstFitPackIterDataset`` / ``BestFitPackIterDataset`` fill a few open
bins from the stream); padless plans the whole epoch from the lengths. This module hands that
plan to a Grain pipeline:

- :class:`PlanBatches`, a ``grain.IterDataset`` whose elements are a padless sampler's batches,
  epoch after epoch: the record indices of each batch (the "sampler" form, for a ``MapDataset``
  of records you keep), or, given ``records``, the batch itself as numpy arrays. Its iterator's
  ``get_state()`` is the sampler's ``state_dict()`` (JSON, a few numbers), so Grain's
  checkpointing (``grain.checkpoint.CheckpointHandler``, the Orbax path, which saves
  ``json.dumps(iterator.get_state())``) resumes exactly, and a state saved at one world size
  restores at another (elastic resume: every item once over the epoch), packed or mixed.
- :class:`EpochBatches`, a ``grain.MapDataset`` of one epoch's batches for this rank (random
  access; Grain's ``to_iter_dataset()`` state is then a plain index, and ``mp_prefetch`` slices
  it over worker processes; Grain refuses to slice :class:`PlanBatches`, a stream).
- :func:`sampler`: a :class:`padless.PlanSampler` sharded by Grain's ``ShardOptions``.
- :class:`TorchtitanPacking`: torchtitan's Grain data path fed by a padless packing plan (an
  object with torchtitan's ``DatasetConfig.build(context=..., dataset_iteration_policy=...)``).

**Element format** (Grain's packing output convention, so models written for Grain's packers
take the batches unchanged): for every packed feature ``k`` (``feature`` for plain token
arrays, ``"inputs"`` by default; every key of mapping records), ``k`` (rows, width) holding
the tokens, ``k_segment_ids`` (int32, 1, 2, … per sequence within a row, 0 on padding) and
``k_positions`` (int32, 0, 1, … within each sequence, 0 on padding). A packed batch
(:class:`padless.Packing`) has ``rows_per_batch`` rows of ``capacity`` (always that many: a
batch short of rows gets empty ones, all segment ids 0, so shapes stay static), exactly what
``BestFitPackIterDataset(...).batch(rows_per_batch)`` yields. A padded batch has one sequence
per row (segment id 1 on its tokens): width the batch's longest rounded up to the spec's
``multiple_of``, or the shape of :class:`padless.FixedShapes` (dummy rows with
``pad_batches``).

**Sharding.** ``sampler(lengths, spec, shard_options=grain.sharding.ShardOptions(i, n))`` is
rank ``i`` of ``n``: every rank gets the same number of batches (padless's rank split of one
global plan); ``drop_remainder=True`` maps to ``drop_last=True`` (the incomplete last step is
dropped), ``False`` completes it with the epoch's first batches. Shard the *plan*, never the
records: no ``.shard()`` / ``slice`` on what this module yields.

``import padless`` never imports Grain; this module does.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import grain
import numpy as np

from .core._check import check_bool, check_choice, check_int64, check_seed, positive_or_none
from .io import lengths_of
from .planners.packing import Packing, PieceDataset, next_fit_rows, refuse_grouped_rows
from .planners.spec import CollateForm, Spec
from .sampling.mixing import MixtureSampler
from .sampling.placed import refuse_placements
from .sampling.sampler import PlanSampler

__all__ = [
    "Collate",
    "EpochBatches",
    "PlanBatches",
    "TorchtitanPacking",
    "sampler",
    "shard_of",
]

IGNORE_INDEX = -100  # torchtitan's (and PyTorch's cross entropy's) ignored label


# ------------------------------------------------------------------------------- sharding
def shard_of(shard_options: Any) -> tuple[int, int, bool]:
    """``(rank, world_size, drop_last)`` of a Grain ``ShardOptions`` (``ShardByJaxProcess``
    too): ``shard_index``, ``shard_count``, ``drop_remainder``.

    >>> shard_of(grain.sharding.ShardOptions(shard_index=1, shard_count=4))
    (1, 4, False)
    """
    if not isinstance(shard_options, grain.sharding.ShardOptions):
        raise TypeError(
            "shard_options must be a grain.sharding.ShardOptions (or ShardByJaxProcess), got "
            f"{type(shard_options).__name__}"
        )
    return (
        int(shard_options.shard_index),
        int(shard_options.shard_count),
        bool(shard_options.drop_remainder),
    )


def sampler(lengths: Any, spec: Spec, *, shard_options: Any = None, **options: Any) -> PlanSampler:
    """A :class:`padless.PlanSampler` over ``lengths`` and ``spec``, this process's shard of it
    given by Grain's ``shard_options`` (see the module docstring); ``options`` are the
    sampler's other keywords (``seed``, ``shuffle``, ``balance``…). ``rank``, ``world_size``
    and ``drop_last`` come from ``shard_options`` when it is given, and may not be given too.

    >>> from padless import TokenBudget
    >>> s = sampler([3, 5, 2, 7], TokenBudget(max_tokens=8),
    ...             shard_options=grain.sharding.ShardOptions(shard_index=0, shard_count=2))
    >>> s.rank, s.world_size
    (0, 2)
    """
    if shard_options is not None:
        given = sorted({"rank", "world_size", "drop_last"} & set(options))
        if given:
            raise TypeError(
                f"pass shard_options or {', '.join(given)}, not both: shard_options gives "
                "rank (shard_index), world_size (shard_count) and drop_last (drop_remainder)"
            )
        rank, world, drop = shard_of(shard_options)
        options = {**options, "rank": rank, "world_size": world, "drop_last": drop}
    return PlanSampler(lengths, spec, **options)


# ------------------------------------------------------------------------------- collation
def _spec_of(source: PlanSampler | MixtureSampler) -> Spec:
    """The one spec whose form collates every batch of ``source`` (a mixture's corpora must
    agree on it)."""
    if isinstance(source, PlanSampler):
        return source.spec
    specs = [s.spec for s in source.samplers.values()]
    first = specs[0]
    for name, spec in zip(source.samplers, specs, strict=True):
        same = spec.collate_form() == first.collate_form() and getattr(
            spec, "rows_per_batch", None
        ) == getattr(first, "rows_per_batch", None)
        if not same:
            raise ValueError(
                f"a mixture's corpora must collate alike for one Grain element format: corpus "
                f"{name!r} has {spec.describe()}, the first {first.describe()}; give every "
                "corpus the same capacity and rows_per_batch (packing) or shapes (padding)"
            )
    return first


def _check_lengths(lengths: Any) -> np.ndarray:
    """One non-negative int length per record (ValueError / TypeError naming ``lengths``)."""
    try:
        out = lengths_of(lengths)
    except (TypeError, ValueError) as err:
        raise type(err)(f"lengths: {err}") from err
    if out.ndim != 1:
        raise ValueError(
            f"padless.grain collates one length per record; lengths have shape {out.shape}"
        )
    return out


def _check_feature(feature: Any) -> str:
    if not isinstance(feature, str) or not feature:
        raise TypeError(
            f"feature must be a non-empty str, got {type(feature).__name__} {feature!r:.40}"
        )
    return feature


def _check_keys(keys: Any) -> tuple[str, ...] | None:
    if keys is None:
        return None
    if (
        isinstance(keys, (str, bytes))
        or not isinstance(keys, Sequence)
        or not keys
        or not all(isinstance(k, str) for k in keys)
    ):
        raise TypeError(
            f"keys must be None or a non-empty sequence of str (the record keys to pack), got "
            f"{type(keys).__name__} {keys!r:.40}"
        )
    return tuple(keys)


def _check_pad(pad: Any) -> int | dict[str, int]:
    if isinstance(pad, Mapping):
        out = {}
        for k, v in pad.items():
            if not isinstance(k, str):
                raise TypeError(f"pad's keys must be feature names (str), got {k!r:.40}")
            out[k] = check_int64(f"pad[{k!r}]", v)
        return out
    return check_int64("pad", pad)


class Collate:
    """Turn a batch's records into Grain's packing output convention (module docstring).

    Args:
        spec: the padless spec that planned the batches (its collate form: packed rows or
            padded sequences, capacity, static shapes…).
        feature: the feature name of records that are plain token sequences.
        keys: for mapping records, the keys to pack (default: every key of each record).
        pad: the padding value, one for all features or a dict feature -> value (default 0).
        lengths: the planned length of every record: a record of another length is a
            ``ValueError`` (the records are not the ones planned).

    >>> from padless import Packing
    >>> out = Collate(Packing(capacity=4, rows_per_batch=2))([[1, 2, 3], [4], [5, 6]])
    >>> out["inputs"].tolist(), out["inputs_segment_ids"].tolist()
    ([[1, 2, 3, 4], [5, 6, 0, 0]], [[1, 1, 1, 2], [1, 1, 0, 0]])
    >>> out["inputs_positions"].tolist()
    [[0, 1, 2, 0], [0, 1, 0, 0]]
    """

    def __init__(
        self,
        spec: Spec,
        *,
        feature: str = "inputs",
        keys: Sequence[str] | None = None,
        pad: int | Mapping[str, int] = 0,
        lengths: Any = None,
    ) -> None:
        if not isinstance(spec, Spec):
            raise TypeError(f"spec must be a padless planner spec, got {type(spec).__name__}")
        feature = _check_feature(feature)
        keys = _check_keys(keys)
        pad = _check_pad(pad)
        form: CollateForm = spec.collate_form()
        if form.capacities is not None or form.context_parallel != 1:
            raise ValueError(
                f"padless.grain collates rows of one field without context parallelism; "
                f"{spec.describe()} needs padless.torch's collates (collate_for)"
            )
        self.spec, self.form = spec, form
        self.feature = feature
        self.keys = None if keys is None else tuple(keys)
        self.pad = pad
        self.lengths = None if lengths is None else _check_lengths(lengths)
        self.rows = int(getattr(spec, "rows_per_batch", 1)) if form.packed else 0
        self.capacity = int(spec.row_capacity) if form.packed else 0  # type: ignore[attr-defined]

    def _pad_of(self, key: str, dtype: np.dtype) -> int:
        if isinstance(self.pad, Mapping):
            if key not in self.pad:
                raise ValueError(f"pad has no value for feature {key!r} (pad={dict(self.pad)})")
            value = int(self.pad[key])
        else:
            value = int(self.pad)
        if dtype.kind in "iu" and not np.iinfo(dtype).min <= value <= np.iinfo(dtype).max:
            raise ValueError(
                f"pad={value} does not fit feature {key!r}, whose records are {dtype.name}"
            )
        return value

    def _fields(self, item: Any) -> dict[str, np.ndarray]:
        if isinstance(item, Mapping):
            keys = self.keys if self.keys is not None else tuple(item)
            missing = [k for k in keys if k not in item]
            if missing:
                raise ValueError(f"record has no feature {missing[0]!r} (keys={list(item)})")
            out = {k: np.asarray(item[k]) for k in keys}
        else:
            out = {self.feature: np.asarray(item)}
        for k, v in out.items():
            if v.ndim != 1:
                raise ValueError(f"feature {k!r} must be a 1-D token sequence, got shape {v.shape}")
        sizes = {v.shape[0] for v in out.values()}
        if len(sizes) != 1:
            raise ValueError(
                f"the features of a record must have one length, got "
                f"{ {k: v.shape[0] for k, v in out.items()} }"
            )
        return out

    def __call__(
        self, items: Sequence[Any], indices: Sequence[int] | None = None
    ) -> dict[str, np.ndarray]:
        """The batch of ``items`` (``indices``: their record indices, to check lengths)."""
        fields = [self._fields(x) for x in items]
        if not fields:
            raise ValueError("a batch must hold at least one record")
        names = list(fields[0])
        for f in fields[1:]:
            if list(f) != names:
                raise ValueError(f"records must share their features, got {names} and {list(f)}")
        sizes = np.array([next(iter(f.values())).shape[0] for f in fields], dtype=np.int64)
        if self.lengths is not None and indices is not None:
            _check_planned(indices, sizes, self.lengths[np.asarray(indices, dtype=np.int64)])
        if self.form.packed:
            row_of = next_fit_rows(sizes, capacity=self.capacity, max_per_row=self.form.max_per_row)
            rows, width = max(self.rows, int(row_of[-1]) + 1), self.capacity
        else:
            row_of = np.arange(sizes.size, dtype=np.int64)
            rows, width = self._padded_shape(sizes)
        segment = np.zeros((rows, width), dtype=np.int32)
        position = np.zeros((rows, width), dtype=np.int32)
        out: dict[str, np.ndarray] = {}
        for name in names:
            dtype = _feature_dtype(name, [f[name].dtype for f in fields])
            out[name] = np.full((rows, width), self._pad_of(name, dtype), dtype=dtype)
        used = np.zeros(rows, dtype=np.int64)
        count = np.zeros(rows, dtype=np.int32)
        for k, (f, row) in enumerate(zip(fields, row_of.tolist(), strict=True)):
            n = int(sizes[k])
            lo = int(used[row])
            for name in names:
                out[name][row, lo : lo + n] = f[name]
            count[row] += 1
            segment[row, lo : lo + n] = count[row]
            position[row, lo : lo + n] = np.arange(n, dtype=np.int32)
            used[row] = lo + n
        for name in names:
            out[f"{name}_segment_ids"] = segment if name == names[0] else segment.copy()
            out[f"{name}_positions"] = position if name == names[0] else position.copy()
        return out

    def _padded_shape(self, sizes: np.ndarray) -> tuple[int, int]:
        longest = int(sizes.max())
        if self.form.shapes is not None:
            shape = self.spec.shape_of(int(sizes.size), longest)  # type: ignore[attr-defined]
            if shape is None:
                raise ValueError(
                    f"a batch of {sizes.size} records, the longest {longest}, fits none of the "
                    f"shapes {list(self.form.shapes)}: the records are not the ones planned"
                )
            rows = int(shape[0]) if self.form.pad_batches else int(sizes.size)
            return rows, int(shape[1])
        m = self.form.multiple_of
        return int(sizes.size), -(-longest // m) * m  # all empty: width 0, as planned


# ------------------------------------------------------------------------------- records
class _Records:
    """Record look-up by the indices a sampler yields: a mixture's global indices split by
    corpus, split pieces served by :class:`padless.PieceDataset`."""

    def __init__(self, source: PlanSampler | MixtureSampler, records: Any, keys: Any) -> None:
        if isinstance(source, MixtureSampler):
            why = source.needs_pieces()
            if why is not None:
                raise ValueError(
                    f"padless.grain serves a mixture's plain indices; this one yields pieces "
                    f"({why}): plan those corpora without split/truncate or warm-ups"
                )
            if isinstance(records, Mapping):
                if list(records) != list(source.names):
                    raise ValueError(
                        f"records must name the mixture's corpora in its order "
                        f"{list(source.names)}, got {list(records)}"
                    )
                parts = [records[n] for n in source.names]
            elif isinstance(records, Sequence) and len(records) == len(source.names):
                parts = list(records)
            else:
                raise TypeError(
                    "a mixture's records must be a dict corpus name -> records (one indexable "
                    "per corpus, in the mixture's order)"
                )
            for name, part, size in zip(source.names, parts, source.corpus_sizes, strict=True):
                if len(part) != int(size):
                    raise ValueError(
                        f"records[{name!r}] holds {len(part)} records, its corpus {int(size)}"
                    )
            self.parts: list[Any] | None = parts
            self.mixture: MixtureSampler | None = source
            self.records: Any = None
            return
        self.parts, self.mixture = None, None
        n = int(source.lengths.shape[0])
        if not hasattr(records, "__getitem__") or not hasattr(records, "__len__"):
            raise TypeError(
                "records must be indexable by int with a len() (a grain.MapDataset, a list, an "
                f"array source…), got {type(records).__name__}"
            )
        if len(records) != n:
            raise ValueError(f"records holds {len(records)} records, the lengths {n}")
        spec = source.spec
        why = spec.needs_pieces(source.sizes)
        if why is not None:
            if not isinstance(spec, Packing) or spec.capacity_schedule is not None:
                raise ValueError(
                    f"padless.grain serves plain records and the pieces of split or truncated "
                    f"ones; {spec.describe()} yields other codes ({why}): use padless.torch's "
                    "collate_for(sampler) with spec.pieces(dataset)"
                )
            if keys:
                sliced = tuple(keys)
            else:  # every key of the records, as the collate packs them (they share theirs)
                first = records[0] if n else None
                sliced = tuple(first) if isinstance(first, Mapping) else ("inputs", "input_ids")
            records = spec.pieces(records, keys=sliced)
        self.records = records

    def __call__(self, indices: np.ndarray) -> list[Any]:
        if self.mixture is None:
            records = self.records
            return [records[i] for i in indices.tolist()]
        assert self.parts is not None
        corpus, local = self.mixture.corpus_of(indices)
        parts = self.parts
        return [parts[c][i] for c, i in zip(corpus.tolist(), local.tolist(), strict=True)]

    def planned(self, source: Any, indices: np.ndarray) -> np.ndarray | None:
        """The planned lengths of ``indices`` (None where pieces are served)."""
        if self.mixture is None:
            if isinstance(self.records, PieceDataset):
                return None
            return np.asarray(source.sizes)[indices]
        corpus, local = self.mixture.corpus_of(indices)
        subs = list(self.mixture.samplers.values())
        return np.array(
            [int(subs[c].sizes[i]) for c, i in zip(corpus.tolist(), local.tolist(), strict=True)],
            dtype=np.int64,
        )


class _Maker:
    """Batch indices -> the element (the indices themselves without records)."""

    def __init__(
        self,
        source: PlanSampler | MixtureSampler,
        records: Any,
        *,
        feature: str,
        keys: Sequence[str] | None,
        pad: int | Mapping[str, int],
    ) -> None:
        self.source = source
        feature, keys, pad = _check_feature(feature), _check_keys(keys), _check_pad(pad)
        if records is None:
            self.records: _Records | None = None
            self.collate: Collate | None = None
            return
        subs = [source] if isinstance(source, PlanSampler) else list(source.samplers.values())
        for sub in subs:
            refuse_grouped_rows(sub, "padless.grain's collate")
            if sub.lengths.ndim != 1:
                raise ValueError(
                    f"padless.grain collates one length per record; these lengths have shape "
                    f"{sub.lengths.shape} (fields of pairs): pass records=None for the index "
                    "batches, or use padless.torch's collates (collate_for)"
                )
        self.records = _Records(source, records, keys)
        self.collate = Collate(_spec_of(source), feature=feature, keys=keys, pad=pad)

    def __call__(self, batch: Sequence[int] | np.ndarray) -> Any:
        indices = np.asarray(batch, dtype=np.int64)
        if self.records is None or self.collate is None:
            return indices
        items = self.records(indices)
        planned = self.records.planned(self.source, indices)
        if planned is not None:
            # the tokens placed per record must be the planned ones
            got = np.array([len(_first(x, self.collate)) for x in items], dtype=np.int64)
            _check_planned(indices, got, planned)
        return self.collate(items)


def _check_planned(indices: Any, sizes: np.ndarray, planned: np.ndarray) -> None:
    """Refuse records whose token counts are not the planned lengths (another dataset)."""
    bad = np.flatnonzero(planned != sizes)
    if bad.size:
        k = int(bad[0])
        raise ValueError(
            f"record {int(indices[k])} has {int(sizes[k])} tokens, planned "
            f"{int(planned[k])}: the records are not the ones the lengths describe"
        )


def _first(item: Any, collate: Collate) -> Any:
    if isinstance(item, Mapping):
        key = collate.keys[0] if collate.keys else next(iter(item))
        return item[key]
    return item


def _own_copy(source: PlanSampler | MixtureSampler) -> Any:
    """A copy of ``source`` with its own position (the lengths arrays shared, read-only)."""
    memo: dict[int, Any] = {}
    subs = [source] if isinstance(source, PlanSampler) else list(source.samplers.values())
    for s in subs:
        memo[id(s.lengths)] = s.lengths
    return copy.deepcopy(source, memo)


def _check_source(source: Any) -> None:
    refuse_placements(source, "padless.grain")
    if not isinstance(source, (PlanSampler, MixtureSampler)):
        raise TypeError(
            "sampler must be a padless PlanSampler (or a shortcut such as PackingSampler) or "
            f"MixtureSampler, got {type(source).__name__}"
        )
    if getattr(source, "yields", "indices") != "indices":
        raise TypeError(
            "sampler must yield indices of records, and this MixtureSampler mixes LM streams: it "
            "yields the (x, y) token batches themselves; iterate the mixture (or "
            "padless.torch.LMDataset over it) instead of wrapping it in a Grain dataset"
        )


# ------------------------------------------------------------------------------- datasets
class PlanBatches(grain.IterDataset):
    """A padless sampler's batches as a Grain ``IterDataset``, epoch after epoch.

    Args:
        sampler: a :class:`padless.PlanSampler` (any strategy; see :func:`sampler` for Grain's
            sharding) or a :class:`padless.MixtureSampler`. It is copied by each iterator;
            iteration starts at its epoch and position (a loaded state's).
        records: None to yield each batch's record indices (int64 array): the sampler form,
            for a ``MapDataset`` of records you keep (``.map(lambda ix: ...)``). Else an
            indexable of records (a ``grain.MapDataset``, a list…; for a mixture, a dict
            corpus name -> records), and each element is the collated batch (:class:`Collate`).
        num_epochs: epochs to yield (None: without end).
        feature, keys, pad: as :class:`Collate`.

    The iterator's ``get_state()`` is ``{"padless": sampler.state_dict()}`` (JSON-safe);
    ``set_state`` loads it into the iterator's sampler: exact resume, and at another world
    size (a sampler with another ``shard_options``) the rest of the epoch re-dealt over the new
    ranks with every item still exactly once.

    >>> from padless import Packing
    >>> s = sampler([3, 1, 2, 4], Packing(capacity=4), seed=0)
    >>> [b.tolist() for b in PlanBatches(s)]
    [[0, 1], [2], [3]]
    """

    def __init__(
        self,
        sampler: PlanSampler | MixtureSampler,
        records: Any = None,
        *,
        num_epochs: int | None = 1,
        feature: str = "inputs",
        keys: Sequence[str] | None = None,
        pad: int | Mapping[str, int] = 0,
    ) -> None:
        super().__init__()
        _check_source(sampler)
        self._sampler = sampler
        self._num_epochs = positive_or_none("num_epochs", num_epochs)
        self._make = _Maker(sampler, records, feature=feature, keys=keys, pad=pad)

    def __iter__(self) -> _PlanIterator:
        return _PlanIterator(_own_copy(self._sampler), self._make, self._num_epochs)

    def __str__(self) -> str:
        return f"PlanBatches({self._sampler!r}, num_epochs={self._num_epochs})"


def _feature_dtype(name: str, dtypes: list[np.dtype]) -> np.dtype:
    """The dtype of feature ``name`` in a batch: its records' one dtype, or the one that holds
    them all (a uint16 record beside an int32 one: int32, never a cast that wraps ids)."""
    first = dtypes[0]
    if all(d == first for d in dtypes):
        return first
    common = np.result_type(*dtypes)
    if any(d.kind in "iu" for d in dtypes) and common.kind not in "iu":
        raise ValueError(
            f"feature {name!r} has records of dtypes {sorted({d.name for d in dtypes})}, which "
            "no integer dtype holds together: give its records one dtype (e.g. .astype(np.int64))"
        )
    return common


class _PlanIterator(grain.DatasetIterator):
    """The iterator of :class:`PlanBatches`: the sampler's position is the whole state."""

    def __init__(self, source: Any, make: _Maker, num_epochs: int | None) -> None:
        super().__init__()
        self._source = source
        self._make = make
        self._end = None if num_epochs is None else source.epoch + num_epochs
        self._batches: Iterator[Any] | None = None
        self._done = False

    def __next__(self) -> Any:
        source = self._source
        empty = 0  # epochs in a row that gave this rank nothing (a resumed one at its end: 1)
        while not self._done:
            if self._batches is None:
                self._batches = iter(source)
            batch = next(self._batches, None)
            if batch is not None:
                return self._make(batch)
            self._batches = None
            if self._end is not None and source.epoch + 1 >= self._end:
                self._done = True
                break
            empty += 1
            if empty > 2:
                raise ValueError(
                    f"this rank has no batches in epochs {source.epoch - 2}..{source.epoch} (an "
                    "empty corpus, or fewer batches than ranks with drop_remainder): with "
                    "num_epochs=None the iterator would repeat empty epochs forever; check the "
                    "corpus and the shard options, or pass num_epochs"
                )
            source.set_epoch(source.epoch + 1)
        raise StopIteration

    def get_state(self) -> dict[str, Any]:
        return {"padless": self._source.state_dict()}

    def set_state(self, state: dict[str, Any]) -> None:
        if not isinstance(state, Mapping) or "padless" not in state:
            raise ValueError(
                f"state must be a padless.grain iterator state {{'padless': ...}}, got "
                f"{state!r:.80}"
            )
        self._source.load_state_dict(dict(state["padless"]))
        self._batches = None
        epoch = int(state["padless"].get("epoch", self._source.epoch))
        self._done = self._end is not None and epoch >= self._end

    def __str__(self) -> str:
        return "PlanBatchesIterator"


class EpochBatches(grain.MapDataset):
    """One epoch of a padless sampler's batches for this rank as a Grain ``MapDataset``.

    Element ``i`` is the ``i``-th batch this rank yields in ``epoch`` (the sampler's own by
    default; from the epoch's start, whatever position the sampler is at), as :class:`PlanBatches` yields it (indices, or the collated batch with
    ``records``); an index past the end wraps around (Grain's source convention: the same
    epoch again; plan another epoch with ``EpochBatches(sampler, epoch=e)``). The rank's batch
    indices are computed once, on first access (O(N) ints).

    >>> from padless import TokenBudget
    >>> ds = EpochBatches(sampler([3, 5, 2, 7], TokenBudget(max_tokens=8), shuffle=False))
    >>> len(ds), ds[0].tolist()
    (3, [2, 0])
    """

    def __init__(
        self,
        sampler: PlanSampler | MixtureSampler,
        records: Any = None,
        *,
        epoch: int | None = None,
        feature: str = "inputs",
        keys: Sequence[str] | None = None,
        pad: int | Mapping[str, int] = 0,
    ) -> None:
        super().__init__()
        _check_source(sampler)
        own = _own_copy(sampler)
        own.set_epoch(own.epoch if epoch is None else check_seed("epoch", epoch))  # from its start
        self._sampler = own
        self._epoch = own.epoch
        self._len = len(own)
        self._view = range(self._len)  # the batches this dataset shows (a worker's slice)
        self._batches: list[np.ndarray] | None = None
        self._make = _Maker(sampler, records, feature=feature, keys=keys, pad=pad)

    def __len__(self) -> int:
        return len(self._view)

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        """Show only the batches ``sl`` picks (Grain's in-place slicing, how ``mp_prefetch``
        gives each worker process its share; ``sequential_slice``: worker ``sl.start`` of
        ``sl.step`` takes a contiguous run instead of every ``sl.step``-th batch)."""
        full = range(self._len)
        if sequential_slice and sl.step is not None and sl.step > 1:
            worker, count = sl.start or 0, sl.step
            lo = worker * self._len // count
            self._view = full[lo : (worker + 1) * self._len // count]
        else:
            self._view = full[sl]

    def _all(self) -> list[np.ndarray]:
        if self._batches is None:
            self._batches = [np.asarray(b, dtype=np.int64) for b in self._sampler]
        return self._batches

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.slice(index)
        if len(self._view) == 0:
            raise IndexError("this rank has no batches in the epoch")
        return self._make(self._all()[self._view[int(index) % len(self._view)]])

    def __str__(self) -> str:
        return f"EpochBatches(epoch={self._epoch}, batches={self._len})"


# ------------------------------------------------------------------------------- torchtitan
@dataclasses.dataclass(frozen=True)
class TorchtitanPacking:
    """torchtitan's Grain data path fed by a padless packing plan.

    An object with torchtitan's ``DatasetConfig`` protocol (``build(*, context,
    dataset_iteration_policy)`` returning a Grain dataset), to put where torchtitan takes
    ``FirstFitPackingConfig(dataset=...)``: ``GrainDataLoader.Config(dataset=TorchtitanPacking(
    records, lengths))``. It plans ``Packing(capacity=context.num_tokens_per_batch,
    rows_per_batch=1)`` over the whole corpus, shards the plan by the policy's ``dp_rank`` /
    ``dp_world_size`` (every rank the same number of rows), seeds and shuffles it by the
    policy's ``seed`` / ``shuffle``, repeats it with ``repeat``, and yields one
    ``TextSequence(input_ids, labels, positions)`` per row in the form torchtitan's own packers
    give (labels ``IGNORE_INDEX`` on padding, positions restarting at 0 per document and 0 on
    padding). Checkpoints: GrainDataLoader's ``state_dict()`` holds the iterator's state, the
    padless sampler's position.

    Args:
        records: indexable of documents: ``TextSequence``-like objects (``input_ids``,
            ``labels``) or mappings with those keys; ``len(input_ids) == lengths[i]``.
        lengths: tokens of each document's ``input_ids``.
        max_per_row, oversize, balance: as :class:`padless.Packing` / ``PlanSampler``; a
            document longer than ``context.max_context_length`` (the model's positions end
            there) is over too: refused when built with ``"error"``, left out with
            ``"drop"``.
        sequence_type: the row type (default: torchtitan's ``TextSequence``, imported when
            the dataset is built).
    """

    records: Any
    lengths: Any
    max_per_row: int | None = None
    oversize: str = "error"
    balance: bool = False
    sequence_type: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        records = self.records
        if not hasattr(records, "__getitem__") or not hasattr(records, "__len__"):
            raise TypeError(
                "records must be indexable by int with a len() (documents with input_ids and "
                f"labels), got {type(records).__name__}"
            )
        lengths = _check_lengths(self.lengths)
        if len(records) != lengths.shape[0]:
            raise ValueError(f"records holds {len(records)} documents, lengths {lengths.shape[0]}")
        object.__setattr__(self, "lengths", lengths)
        positive_or_none("max_per_row", self.max_per_row)
        oversize = check_choice("oversize", self.oversize, ("error", "drop", "split", "truncate"))
        if oversize in ("split", "truncate"):
            raise ValueError(
                f"oversize={oversize!r} cuts documents, which TorchtitanPacking does not "
                "serve: use 'error' or 'drop'"
            )
        check_bool("balance", self.balance)
        if self.sequence_type is not None and not callable(self.sequence_type):
            raise TypeError(
                f"sequence_type must be None or a row type (callable), got "
                f"{type(self.sequence_type).__name__}"
            )

    def build(self, *, context: Any, dataset_iteration_policy: Any) -> grain.IterDataset:
        policy = dataset_iteration_policy
        capacity = int(context.num_tokens_per_batch)
        spec = Packing(
            capacity=capacity,
            rows_per_batch=1,
            max_per_row=self.max_per_row,
            oversize=self.oversize,
        )
        plan = PlanSampler(
            self._within_context(getattr(context, "max_context_length", None), capacity),
            spec,
            shuffle=bool(policy.shuffle),
            seed=int(policy.seed),
            rank=int(policy.dp_rank),
            world_size=int(policy.dp_world_size),
            balance=self.balance,
        )
        kind = self.sequence_type
        if kind is None:
            from torchtitan.components.data import TextSequence

            kind = TextSequence
        rows = PlanBatches(
            plan,
            _TextRecords(self.records),
            num_epochs=None if policy.repeat else 1,
            keys=("input_ids", "labels"),
            pad={"input_ids": 0, "labels": IGNORE_INDEX},
        )
        return rows.map(_TextRow(kind))

    def _within_context(self, limit: Any, capacity: int) -> np.ndarray:
        """The lengths to plan: a document longer than the model's context
        (``max_context_length``, whose positions the model has no table for; torchtitan's own
        packers leave such documents out) is refused with ``oversize="error"`` and planned as
        over the row's capacity (so left out) with ``"drop"``."""
        lengths = np.asarray(self.lengths)
        if limit is None:
            return lengths
        if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
            raise ValueError(
                f"context.max_context_length must be a positive int (the model's longest "
                f"sequence), got {limit!r}"
            )
        if limit >= capacity:
            return lengths
        over = lengths > limit
        if not over.any():
            return lengths
        if self.oversize == "error":
            i = int(np.argmax(over))
            raise ValueError(
                f"document {i} has {int(lengths[i])} tokens, more than torchtitan's "
                f"max_context_length={int(limit)} (training.max_context_length: the model's "
                f"positions end there; {int(over.sum())} documents are over it): raise it, "
                "or leave them out with TorchtitanPacking(oversize='drop')"
            )
        return np.where(over, capacity + 1, lengths)


class _TextRecords:
    """Documents as ``{"input_ids", "labels"}`` mappings (TextSequence-like objects read)."""

    def __init__(self, records: Any) -> None:
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        item = self.records[index]
        if isinstance(item, Mapping):
            return {"input_ids": item["input_ids"], "labels": item["labels"]}
        return {"input_ids": item.input_ids, "labels": item.labels}


class _TextRow:
    def __init__(self, kind: Callable[..., Any]) -> None:
        self.kind = kind

    def __call__(self, batch: dict[str, np.ndarray]) -> Any:
        return self.kind(
            input_ids=batch["input_ids"][0],
            labels=batch["labels"][0],
            positions=batch["input_ids_positions"][0].astype(np.int64),
        )
