"""The source adapter of :class:`~padless.streams.StreamBatcher`: what kind of source it reads
(stateful, re-iterable, callable, one-shot), opening it at an epoch and a position, and
snapshots of a stateful source's own state."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from itertools import islice
from typing import Any

import numpy as np

from ..core._check import _is_int

__all__ = ["Source", "check_source"]


def _is_stateful(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None)
    )


def _buffer_shuffled(obj: Any) -> bool:
    """Whether ``obj`` is a ``datasets.IterableDataset`` with a shuffle buffer in its chain.

    ``IterableDataset.shuffle()`` wraps the examples in a buffer whose content its
    ``state_dict()`` does not hold ("the shuffle buffer will be refilled"), so restoring that
    state does not continue the same order; ``.map``, ``.filter``, ``.take``, ``.skip`` and
    ``interleave_datasets`` keep exact states. Such a source is re-read from the start of
    the epoch instead (its order for an epoch is fixed by its seed).
    """
    node = getattr(obj, "_ex_iterable", None)
    todo, seen = [node], set()
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if any(c.__name__ == "BufferShuffledExamplesIterable" for c in type(node).__mro__):
            return True
        todo.append(getattr(node, "ex_iterable", None))
        todo.extend(getattr(node, "ex_iterables", None) or ())
    return False


def check_source(source: Any, length: Any) -> None:
    """Refuse, up front, a ``source`` that is not a stream of items.

    Text and bytes are not (their items are characters and bytes); nor is something neither
    iterable nor callable; nor, without ``length``, a list, tuple or array of ints (item 0 is
    looked at: an int is a length, not a sequence of tokens, so ``length=int`` is required).
    """
    if isinstance(source, (str, bytes, bytearray)):
        raise TypeError(
            "source must be a stream of items (a datasets.IterableDataset, a list of token "
            f"lists, a generator...), got {type(source).__name__} {source!r:.40}, whose items "
            "are single characters or byte values; a stream of texts is a list of them (with "
            "length=)"
        )
    unsized = isinstance(source, np.ndarray) and source.ndim == 0
    if unsized or not (hasattr(source, "__iter__") or callable(source)):
        raise TypeError(
            "source must be an iterable of items (a datasets.IterableDataset, a list, a "
            "generator...) or a callable returning a fresh iterable, got "
            f"{type(source).__name__}"
        )
    if length is None and isinstance(source, (list, tuple, np.ndarray)) and len(source):
        first = source[0]
        if _is_int(first):
            raise TypeError(
                "source holds ints, not sequences of token ids: the item at stream position 0 "
                f"is an int ({first!r}); for a stream of lengths pass length=int"
            )


class Source:
    """Opens the source for an epoch at a position; snapshots the state of stateful ones."""

    def __init__(self, source: Any) -> None:
        self.obj = source
        if hasattr(source, "__iter__"):
            if _is_stateful(source) and not _buffer_shuffled(source):
                self.kind = "stateful"
            elif isinstance(source, Iterator):
                self.kind = "oneshot"
            else:
                self.kind = "iterable"
        else:  # a callable (check_source refused anything else)
            self.kind = "callable"
        self.start_state: Any = None
        self.loaded = False  # a state was loaded into the source: a fresh start must undo it
        self.opened = False
        if self.kind == "stateful":
            try:
                self.start_state = copy.deepcopy(source.state_dict())
            except Exception:  # noqa: BLE001 - a source may only know its state once iterated
                self.start_state = None

    @property
    def resumable(self) -> bool:
        return self.kind != "oneshot"

    @property
    def cheap_resume(self) -> bool:
        return self.kind == "stateful"

    def open(self, epoch: int, state: Any, position: int) -> Iterator[Any]:
        obj = self.obj
        if self.kind == "oneshot":
            if self.opened:
                raise TypeError(
                    "source is a one-shot iterator (e.g. a generator) that was already read; "
                    "pass the iterable itself or a function that re-creates the iterator"
                )
            self.opened = True
            return iter(obj)
        self.opened = True
        if self.kind == "callable":
            it = iter(obj())
        else:
            set_epoch = getattr(obj, "set_epoch", None)
            # only when it differs: datasets keeps the epoch in memory shared with DataLoader
            # workers and updates it with a read-modify-write, so two workers that both set it
            # can race (0 -> 2, another order of shards)
            if callable(set_epoch) and getattr(obj, "epoch", None) != epoch:
                set_epoch(epoch)
            if self.kind == "stateful":
                if state is not None:
                    obj.load_state_dict(copy.deepcopy(state))
                    self.loaded = True
                    return iter(obj)
                if self.loaded and self.start_state is not None:
                    obj.load_state_dict(copy.deepcopy(self.start_state))
                    self.loaded = False
                return iter(obj)
            it = iter(obj)
        if position:
            next(islice(it, position, position), None)  # O(position), at C speed
        return it

    def snapshot(self) -> Any:
        if self.kind != "stateful":
            return None
        return copy.deepcopy(self.obj.state_dict())
