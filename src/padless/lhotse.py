"""lhotse glue: lengths from cuts or a cut manifest, and padless's plans as a lhotse sampler.

Speech lengths are durations. :func:`lengths_of_cuts` turns a ``CutSet`` (or a manifest
``cuts.jsonl.gz``, read as JSON lines without lhotse, audio or ``Cut`` objects) into duration
ticks (:func:`padless.durations`, ``resolution`` seconds per tick, each rounded up) and, with
``tokens=``, the target tokens of each cut's supervisions: (N, 2) lengths ``[ticks, tokens]``
that a per-field budget plans (``TokenBudget(max_tokens=(200.0, 1200), resolution=(0.01,
None))``: at most 200 s of padded audio and 1,200 padded tokens per batch).

:class:`CutSampler` is :class:`padless.PlanSampler` over those lengths, yielding each batch as a
``CutSet`` in plan order, which lhotse's datasets (``K2SpeechRecognitionDataset`` and the others
taking a ``CutSet`` per ``__getitem__``) turn into tensors::

    from lhotse import CutSet
    from lhotse.dataset import K2SpeechRecognitionDataset
    from torch.utils.data import DataLoader
    import padless
    from padless.lhotse import CutSampler

    cuts = CutSet.from_file("cuts.jsonl.gz")
    spec = padless.TokenBudget(max_tokens=(200.0, 1200), resolution=(0.01, None))
    sampler = CutSampler(cuts, spec, tokens=len, seed=0)     # tokens: characters of the text
    loader = DataLoader(K2SpeechRecognitionDataset(), sampler=sampler, batch_size=None)

Every rank yields as many batches (``rank`` / ``world_size`` from ``torch.distributed`` when not
given); ``state_dict`` / ``load_state_dict`` resume exactly, at another world size too.

``import padless.lhotse`` imports neither lhotse nor torch: reading a manifest needs neither
(``padless report cuts.jsonl.gz`` runs without lhotse), :class:`CutSampler` imports lhotse when
it makes its first ``CutSet``.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .core.fields import check_resolution, durations
from .io import lengths_of
from .io.readers import _open_text
from .planners.spec import Spec
from .sampling.sampler import PlanSampler

__all__ = ["CutSampler", "is_manifest", "lengths_of_cuts"]

MANIFEST_SUFFIXES = (".jsonl", ".jsonl.gz")
_TEXT_BATCH = 4096  # texts per call of a batch counter

Counter = Callable[[list[str]], np.ndarray]  # texts -> token counts (a batch tokenizer)


def _suffix_ok(path: Path) -> bool:
    return path.name.lower().endswith(MANIFEST_SUFFIXES)


def is_manifest(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a lhotse (or NeMo) manifest: a ``.jsonl`` or ``.jsonl.gz`` file whose
    first line is a JSON object with a ``"duration"`` (a ``MixedCut``: ``"tracks"``).

    Cost: reads the first line.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "cuts.jsonl")
    >>> _ = open(path, "w").write('{"id": "a", "duration": 1.5, "supervisions": []}\\n')
    >>> is_manifest(path), is_manifest(path + ".missing")
    (True, False)
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or a pathlib.Path, got {type(path).__name__}")
    src = Path(os.fspath(path))
    if not _suffix_ok(src) or not src.is_file():
        return False
    try:
        with _open_text(src) as fh:
            for line in fh:
                if line.strip():
                    first = json.loads(line)
                    return isinstance(first, dict) and ("duration" in first or "tracks" in first)
    except (OSError, ValueError, RecursionError):
        return False
    return False


def _check_tokens(tokens: Any) -> Any:
    if tokens is None or callable(tokens):
        return tokens
    if isinstance(tokens, str) and tokens:
        return tokens
    raise TypeError(
        "tokens must be None (durations only), a callable counting one supervision text's "
        "tokens (e.g. len, or lambda text: len(sp.encode(text))), or the name of a supervision "
        f"field holding a count, a text or a list (e.g. 'text'), got {type(tokens).__name__} "
        f"{tokens!r:.60}"
    )


def _count_of(value: Any, where: str, field: str) -> int:
    """A supervision field's value as a token count: an int itself, a text's characters, a
    list's items."""
    if isinstance(value, (str, list, tuple)):
        return len(value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 0:
        return int(value)
    raise ValueError(
        f"{where}: tokens={field!r} names a supervision field that must hold a count (a "
        f"non-negative int), a text or a list, got {type(value).__name__} {value!r:.60}"
    )


def _per_text(fn: Callable[[str], Any]) -> Counter:
    """A callable counting one text as a batch counter, its answers checked."""

    def count(texts: list[str]) -> np.ndarray:
        out = np.empty(len(texts), dtype=np.int64)
        for i, text in enumerate(texts):
            value = fn(text)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or int(value) < 0:
                raise ValueError(
                    f"tokens({text!r:.40}) must return a token count (a non-negative int), got "
                    f"{type(value).__name__} {value!r:.60}"
                )
            out[i] = int(value)
        return out

    return count


class _Tally:
    """Durations and per-cut token counts gathered one cut at a time; texts counted in batches."""

    def __init__(self, tokens: Any, counter: Counter | None) -> None:
        self.field = tokens if isinstance(tokens, str) else None
        self.counter = None if self.field is not None else counter
        self.seconds: list[float] = []
        self.counts: list[int] = []  # field mode: one per cut
        self.texts: list[str] = []  # text mode: one per supervision
        self.owners: list[int] = []  # text mode: the cut of each text

    def add(self, duration: Any, supervisions: Iterable[Any], where: str) -> None:
        if isinstance(duration, bool) or not isinstance(duration, numbers.Real):
            raise ValueError(
                f"{where}: duration must be a number of seconds, got {type(duration).__name__} "
                f"{duration!r:.60}"
            )
        try:
            seconds = float(duration)
        except OverflowError:
            seconds = float("inf")
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(
                f"{where}: duration must be a finite, non-negative number of seconds, got "
                f"{duration!r:.60}"
            )
        cut = len(self.seconds)
        self.seconds.append(seconds)
        if self.field is not None:
            total = 0
            for sup in supervisions:
                value = _get(sup, self.field)
                if value is None:
                    raise ValueError(
                        f"{where}: tokens={self.field!r} names a supervision field, and a "
                        "supervision has none (looked among its keys and its custom fields)"
                    )
                total += _count_of(value, where, self.field)
            self.counts.append(total)
        elif self.counter is not None:
            for sup in supervisions:
                text = _get(sup, "text")
                if not isinstance(text, str):
                    raise ValueError(
                        f"{where}: a supervision has no text (got {text!r:.40}); tokens= counts "
                        "supervision texts (or pass tokens='FIELD' naming a count)"
                    )
                self.texts.append(text)
                self.owners.append(cut)

    def lengths(self, resolution: float) -> np.ndarray:
        ticks = durations(np.asarray(self.seconds, dtype=np.float64), resolution=resolution)
        if self.field is None and self.counter is None:
            return ticks
        if self.counter is None:
            counts = np.asarray(self.counts, dtype=np.int64)
        else:
            per_text = np.zeros(len(self.texts), dtype=np.int64)
            for start in range(0, len(self.texts), _TEXT_BATCH):
                part = self.texts[start : start + _TEXT_BATCH]
                per_text[start : start + len(part)] = self.counter(part)
            counts = np.zeros(len(self.seconds), dtype=np.int64)
            np.add.at(counts, np.asarray(self.owners, dtype=np.int64), per_text)
        return lengths_of(np.stack([ticks, counts], axis=1))


def _get(sup: Any, name: str) -> Any:
    """A supervision's field (a dict from a manifest or a lhotse ``SupervisionSegment``): its own
    key or attribute, else an entry of its ``custom`` dict."""
    if isinstance(sup, Mapping):
        value = sup.get(name)
        custom = sup.get("custom")
    else:
        value = getattr(sup, name, None)
        custom = getattr(sup, "custom", None)
    if value is None and isinstance(custom, Mapping):
        value = custom.get(name)
    return value


def _read_manifest(src: Path, tally: _Tally) -> None:
    """Add every line of a manifest to ``tally``: a cut (its ``duration`` and ``supervisions``),
    a supervision or a NeMo line (its ``duration`` and its own ``text``); a ``MixedCut`` line
    (no top-level duration) is built by lhotse."""
    with _open_text(src) as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{src}:{number}"
            try:
                item = json.loads(line)
            except ValueError as err:
                raise ValueError(f"{where}: not a JSON line of a manifest ({err})") from None
            except RecursionError:
                raise ValueError(f"{where}: a JSON line nested too deeply to read") from None
            if not isinstance(item, dict):
                raise ValueError(f"{where}: a manifest line must be a JSON object")
            if "duration" not in item:
                if "tracks" not in item:
                    raise ValueError(f"{where}: a manifest line needs a 'duration' (seconds)")
                cut = _lhotse_item(item, where)
                tally.add(cut.duration, cut.supervisions, where)
                continue
            sups = item.get("supervisions")
            if sups is None:
                sups = [item] if "text" in item or "custom" in item else []
            if not isinstance(sups, list):
                raise ValueError(f"{where}: 'supervisions' must be a list")
            tally.add(item["duration"], sups, where)


def _lhotse_item(item: dict[str, Any], where: str) -> Any:
    try:
        from lhotse.serialization import deserialize_item
    except ImportError:
        raise ValueError(
            f"{where}: a MixedCut (its duration is its tracks'): reading it needs lhotse "
            "(pip install lhotse)"
        ) from None
    return deserialize_item(item)


def _manifest_path(cuts: str | os.PathLike[str]) -> Path:
    src = Path(os.fspath(cuts))
    if not _suffix_ok(src):
        raise ValueError(
            f"cuts must be a CutSet or a manifest path ending in .jsonl or .jsonl.gz, got "
            f"{os.fspath(cuts)!r}"
        )
    if not src.is_file():
        raise FileNotFoundError(f"no such manifest: {src}")
    return src


def _tally_of(cuts: Any, tokens: Any, counter: Counter | None) -> _Tally:
    tally = _Tally(tokens, counter)
    if isinstance(cuts, (str, os.PathLike)):
        _read_manifest(_manifest_path(cuts), tally)
        return tally
    if isinstance(cuts, (bytes, Mapping)) or not isinstance(cuts, Iterable):
        raise TypeError(
            "cuts must be a lhotse CutSet (or a list of cuts) or a manifest path, got "
            f"{type(cuts).__name__} {cuts!r:.60}"
        )
    for i, cut in enumerate(cuts):
        where = f"cut {i} ({getattr(cut, 'id', '?')!r})"
        if not hasattr(cut, "duration") or not hasattr(cut, "supervisions"):
            raise TypeError(
                f"cuts must hold lhotse cuts (a duration and supervisions each), got "
                f"{type(cut).__name__} at {i}"
            )
        tally.add(cut.duration, cut.supervisions, where)
    return tally


def _one_resolution(resolution: Any) -> float:
    out = check_resolution("resolution", resolution)
    if not isinstance(out, float):
        raise TypeError(
            "resolution must be the seconds per tick of the durations (a positive float, e.g. "
            f"0.01), got {resolution!r:.60}"
        )
    return out


def lengths_of_cuts(
    cuts: Any,
    *,
    resolution: float = 0.01,
    tokens: Callable[[str], int] | str | None = None,
) -> np.ndarray:
    """Lengths of cuts: (N,) duration ticks, or (N, 2) ``[duration ticks, target tokens]``.

    Args:
        cuts: a lhotse ``CutSet`` (or a list of cuts: each cut's ``duration`` and
            ``supervisions``; a lazy CutSet is read once), or the path of a manifest
            (``.jsonl`` / ``.jsonl.gz``) read as JSON lines, without lhotse, audio or ``Cut``
            objects: a cut's ``duration`` and ``supervisions``, or a supervision's (or NeMo
            line's) ``duration`` and its own ``text``; a ``MixedCut`` line is built by lhotse.
        resolution: seconds per tick; each duration is rounded up to whole ticks
            (:func:`padless.durations`).
        tokens: None: durations only. A callable: the tokens of one supervision text (``len``
            for characters, ``lambda t: len(sp.encode(t))``), summed over a cut's supervisions.
            A string: a supervision field (or an entry of its ``custom``) holding a count, a
            text (its characters) or a list (its items), summed likewise. A cut without
            supervisions has 0 tokens; a supervision without the text or field is a
            ``ValueError`` naming the cut.

    Cost: one pass over the cuts (a ``json.loads`` per manifest line) plus the tokenizer's;
    no audio is read.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "cuts.jsonl")
    >>> with open(path, "w") as f:
    ...     _ = f.write('{"id": "a", "duration": 1.234, "supervisions": [{"text": "hi there"}]}\\n')
    ...     _ = f.write('{"id": "b", "duration": 0.5, "supervisions": []}\\n')
    >>> lengths_of_cuts(path).tolist()
    [124, 50]
    >>> lengths_of_cuts(path, tokens=lambda text: len(text.split())).tolist()
    [[124, 2], [50, 0]]
    """
    res = _one_resolution(resolution)
    tokens = _check_tokens(tokens)
    counter = _per_text(tokens) if callable(tokens) else None
    return _tally_of(cuts, tokens, counter).lengths(res)


def manifest_lengths(path: str | os.PathLike[str], *, resolution: float, counter: Counter) -> Any:
    """A manifest's lengths for the command line: ``[ticks, tokens]`` with the supervision
    texts counted by ``counter`` (a batch tokenizer), or ticks alone when no line has a text."""
    res = _one_resolution(resolution)
    tally = _tally_of(path, None, counter)
    if not tally.texts:
        return durations(np.asarray(tally.seconds, dtype=np.float64), resolution=res)
    return tally.lengths(res)


def _spec_resolution(spec: Spec) -> tuple[float | None, int]:
    """The seconds per tick of the spec's duration field (field 0) and its number of fields."""
    value = getattr(spec, "resolution", None)
    if isinstance(value, tuple):
        return value[0], len(value)
    return value, 0


class CutSampler:
    """:class:`padless.PlanSampler` over cuts: each batch a ``CutSet`` for a lhotse dataset.

    Use it as lhotse's samplers are used: ``DataLoader(dataset, sampler=cut_sampler,
    batch_size=None)``; the dataset (``K2SpeechRecognitionDataset``, ``SpeechSynthesisDataset``...)
    gets one ``CutSet`` per ``__getitem__``, its cuts in the plan's order.

    Args:
        cuts: a lhotse ``CutSet`` (a lazy one is read into memory once), a list of cuts, or a
            manifest path (loaded with ``CutSet.from_file``).
        spec: a padless spec over the lengths of :func:`lengths_of_cuts`: duration ticks, or
            ``[ticks, tokens]`` with ``tokens``. A spec with ``resolution`` plans seconds
            (``TokenBudget(max_tokens=(200.0, 1200), resolution=(0.01, None))``); a packing
            spec (rows of concatenated sequences) is refused.
        tokens: as for :func:`lengths_of_cuts`.
        resolution: seconds per tick of the durations; default the spec's (its first field's),
            else 0.01. One that differs from the spec's is refused.
        lengths: the cuts' lengths when already computed (``lengths_of_cuts``), instead of
            ``tokens`` and ``resolution``; one row per cut.
        shuffle, seed, drop_last, and any other keyword (``balance``, ``window``,
            ``batches_per_step``...): :class:`padless.PlanSampler`'s.
        rank, world_size: this process's shard; None: from ``torch.distributed`` (rank 0 of 1
            when no process group is initialized).

    ``len()``, ``set_epoch``, ``state_dict(consumed=None)``, ``load_state_dict``, ``stats()``
    and the rest of its attributes (``repeated``, ``skip``, ``epoch_plan``...) are the plan
    sampler's (``.sampler``); ``.cuts`` holds the cuts by index.

    Cost: one pass over the cuts for their lengths, one plan per epoch; a batch costs a
    ``CutSet`` of its cuts.
    """

    def __init__(
        self,
        cuts: Any,
        spec: Spec,
        *,
        tokens: Callable[[str], int] | str | None = None,
        resolution: float | None = None,
        lengths: Any = None,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
        **options: Any,
    ) -> None:
        if not isinstance(spec, Spec):
            raise TypeError(
                "spec must be a padless planner spec (e.g. padless.TokenBudget(max_tokens=(200.0, "
                f"1200), resolution=(0.01, None))), got {type(spec).__name__}"
            )
        if spec.packs_rows:
            raise ValueError(
                f"spec must plan padded batches of whole cuts; {spec.describe()} packs "
                "sequences into rows, which lhotse's datasets do not take"
            )
        tokens = _check_tokens(tokens)
        given, fields = _spec_resolution(spec)
        if resolution is not None:
            resolution = _one_resolution(resolution)
            if given is not None and resolution != given:
                raise ValueError(
                    f"resolution={resolution!r} differs from the spec's resolution for the "
                    f"durations ({given!r}): drop resolution= (the spec's is used)"
                )
        res = resolution if resolution is not None else (given if given is not None else 0.01)
        if lengths is None and fields > 1 and tokens is None:
            raise ValueError(
                f"tokens must be given: the spec budgets {fields} fields ([duration, tokens]); "
                "pass tokens=len (characters), a tokenizer callable or a supervision field"
            )
        if rank is None or world_size is None:
            from .torch import dist_kwargs  # torch's face: imports torch

            where = dist_kwargs()
            rank = where["rank"] if rank is None else rank
            world_size = where["world_size"] if world_size is None else world_size
        if isinstance(cuts, (str, os.PathLike)):
            from lhotse import CutSet

            cuts = CutSet.from_file(_manifest_path(cuts))
        if isinstance(cuts, (bytes, Mapping)) or not isinstance(cuts, Iterable):
            raise TypeError(
                "cuts must be a lhotse CutSet, a list of cuts or a manifest path, got "
                f"{type(cuts).__name__} {cuts!r:.60}"
            )
        self.cuts: list[Any] = list(cuts)
        if lengths is None:
            lens = lengths_of_cuts(self.cuts, resolution=res, tokens=tokens)
        else:
            if tokens is not None:
                raise ValueError("pass lengths or tokens, not both (lengths already count tokens)")
            lens = lengths_of(lengths)
            if lens.shape[0] != len(self.cuts):
                raise ValueError(
                    f"lengths must have one row per cut ({len(self.cuts)}), got {lens.shape[0]}"
                )
        self.resolution = res
        self.sampler = PlanSampler(
            lens,
            spec,
            shuffle=shuffle,
            seed=seed,
            rank=rank,
            world_size=world_size,
            drop_last=drop_last,
            **options,
        )

    def __iter__(self) -> Iterator[Any]:
        from lhotse import CutSet

        cuts = self.cuts
        for batch in self.sampler:
            yield CutSet([cuts[i] for i in batch])

    def __len__(self) -> int:
        return len(self.sampler)

    @property
    def epoch(self) -> int:
        """The epoch the next iteration plans."""
        return self.sampler.epoch

    @property
    def lengths(self) -> np.ndarray:
        """The cuts' lengths as planned: (N,) ticks or (N, 2) ``[ticks, tokens]``."""
        return self.sampler.lengths

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (every rank the same): its plan and order."""
        self.sampler.set_epoch(epoch)

    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        """The plan sampler's JSON-safe state (``consumed``: batches the training loop received
        this epoch, when a loader prefetches ahead)."""
        return self.sampler.state_dict(consumed=consumed)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` at the next iteration (at another world size too)."""
        self.sampler.load_state_dict(state)

    def stats(self) -> dict[str, Any]:
        """The plan's figures (batches, padding per field, imbalance): the plan sampler's."""
        return self.sampler.stats()

    def __getattr__(self, name: str) -> Any:
        # the rest of the plan sampler's face (repeated, dropped, skip, epoch_plan, steps...)
        if name.startswith("_") or "sampler" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["sampler"], name)

    def __repr__(self) -> str:
        return f"CutSampler({len(self.cuts)} cuts, {self.sampler!r})"
