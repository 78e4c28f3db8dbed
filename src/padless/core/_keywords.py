"""A wrong keyword says what to do: the ``TypeError`` every public constructor and factory raises
for a keyword it does not take.

The message names what the user called (``PackingSampler``, not the ``PlanSampler`` it builds
on), the keyword, what the callee says of it (its ``keyword_notes``: ``StreamBatcher(rank=...)``
says how a stream is sharded), padless's own name for a name from another library
(:data:`SYNONYMS`), the closest keywords the callee takes (``difflib``, as Python's own
``NameError`` hints), the padless components whose setting the keyword is (with the few words
their ``about`` gives it), and every keyword the callee takes::

    Buckets got an unexpected keyword 'context_parallel': context_parallel is a setting of
    Packing (packed rows split across that many context-parallel ranks); Buckets takes:
    boundaries, num_buckets, max_tokens, ...

Components answer for themselves (this module tests no type): a class may set ``about``
(setting -> a few words saying what it is) and ``keyword_notes`` (a keyword it does not take ->
what to do instead). Specs are checked in ``Spec.__new__``; classes and functions with explicit
keywords by :func:`checks_keywords`; a function forwarding ``**options`` by
:func:`check_keywords`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from importlib import import_module
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])

#: A name from another library (or padless's former one) -> the padless settings it may mean;
#: the first one the callee takes is suggested ("in Packing that is capacity").
SYNONYMS: dict[str, tuple[str, ...]] = {
    "max_tokens": ("capacity", "tokens_per_batch"),
    "batch_size": ("rows_per_batch", "max_sentences"),
    "max_length": ("capacity", "max_tokens", "num_steps", "shapes"),
    "max_seq_len": ("max_length", "capacity", "max_tokens", "num_steps", "shapes"),
    "seq_len": ("num_steps", "max_length", "capacity", "max_tokens"),
    "block_size": ("num_steps", "capacity"),
    "tokens_per_batch": ("max_tokens",),
    "window": ("max_wait",),  # streams' former name of max_wait
    "num_replicas": ("world_size",),  # torch's DistributedSampler
    "bsz_mult": ("multiple_of",),  # fairseq
    "required_batch_size_multiple": ("multiple_of",),  # fairseq
    "pad_token_id": ("pad_id",),  # transformers
    "label_pad_token_id": ("ignore_index",),  # transformers
    "cp_size": ("context_parallel",),
    "buffer_size": ("buffer",),
}


def keyword_names(*sources: Any) -> tuple[str, ...]:
    """The keywords ``sources`` take, in order, each once: a dataclass's init fields (a spec's
    settings), a class's ``__init__`` or a function's parameters that may be given by keyword."""
    out: dict[str, None] = {}
    for src in sources:
        if dataclasses.is_dataclass(src):
            out.update((f.name, None) for f in dataclasses.fields(src) if f.init)
            continue
        func = src.__init__ if isinstance(src, type) else src  # type: ignore[misc]
        for name, p in inspect.signature(inspect.unwrap(func)).parameters.items():
            if name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                out[name] = None
    return tuple(out)


# the components besides the strategies (whose registry is padless.planners.strategies) that a
# wrong keyword may be a setting of: (module, name), imported by name when a message is made
# (only then, so this module stays below them all); padless.torch's only once it is imported
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("padless.sampling.sampler", "PlanSampler"),
    ("padless.streams", "StreamBatcher"),
    ("padless.streams.lm", "LMStream"),
    ("padless.sampling.mixing", "MixtureSampler"),
    ("padless.torch", "StreamDataset"),
    ("padless.torch", "TokenDataset"),
    ("padless.torch", "collate_padded"),
    ("padless.torch", "collate_packed"),
    ("padless.torch", "collate_packed_pairs"),
)


def _owners() -> list[Any]:
    """The padless components whose settings a wrong keyword may be."""
    found: list[Any] = list(import_module("padless.planners").strategies().values())
    for module, name in COMPONENTS:
        if module == "padless.torch":  # named once in use: an error never imports torch
            loaded = sys.modules.get(module)
            if loaded is not None:
                found.append(getattr(loaded, name))
            continue
        found.append(getattr(import_module(module), name))
    return found


def _about(owner: Any, name: str) -> str:
    words = getattr(owner, "about", {}).get(name)
    return f" ({words})" if words else ""


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def unexpected(
    callee: str,
    keyword: str,
    takes: Iterable[str],
    notes: Mapping[str, str] | None = None,
    about: Mapping[str, str] | None = None,
) -> TypeError:
    """The ``TypeError`` for ``callee(keyword=...)``: ``callee`` takes the keywords ``takes``;
    ``notes`` is its word on keywords it does not take (its ``keyword_notes``), ``about`` on
    those it takes (its ``about``).

    >>> print(unexpected("Spec", "max_token", ["max_tokens", "oversize"]))
    Spec got an unexpected keyword 'max_token': did you mean 'max_tokens'? Spec takes: max_tokens, oversize
    """
    takes = list(takes)
    said: list[str] = []
    if notes and keyword in notes:
        said.append(notes[keyword])
    synonym = next((s for s in SYNONYMS.get(keyword, ()) if s in takes), None)
    close = [c for c in difflib.get_close_matches(keyword, takes, n=3) if c != synonym]
    owners = [o for o in _owners() if o.__name__ != callee and keyword in keyword_names(o)]
    if synonym is not None:
        words = (about or {}).get(synonym)
        said.append(f"in {callee} that is {synonym}" + (f" ({words})" if words else ""))
    if owners:
        names = [o.__name__ for o in owners]
        said.append(f"{keyword} is a setting of {_listed(names)}{_about(owners[0], keyword)}")
    text = f"{callee} got an unexpected keyword {keyword!r}"
    if close or said:
        text += ":"
    if close:
        text += " did you mean " + " or ".join(repr(c) for c in close) + "?"
    if said:
        text += " " + "; ".join(said) + ";"
    elif not close:
        text += ";"
    return TypeError(f"{text} {callee} takes: {', '.join(takes)}")


def check_keywords(
    callee: str,
    given: Iterable[str],
    takes: Iterable[str],
    notes: Mapping[str, str] | None = None,
    about: Mapping[str, str] | None = None,
) -> None:
    """Raise :func:`unexpected` for the first of ``given`` that ``takes`` does not hold (for a
    function that forwards ``**options``: it names itself, not the function it forwards to)."""
    takes = tuple(takes)
    for name in given:
        if name not in takes:
            raise unexpected(callee, name, takes, notes, about)


def about_of(*sources: Any) -> dict[str, str]:
    """The ``about`` of ``sources`` merged (the first source's word on a setting wins)."""
    out: dict[str, str] = {}
    for src in reversed(sources):
        out.update(getattr(src, "about", {}))
    return out


def checks_keywords(
    *also: Any, notes: Mapping[str, str] | None = None, but: tuple[str, ...] = ()
) -> Callable[[F], F]:
    """Decorate a function, or a class's ``__init__``, so that a keyword it does not take is
    :func:`unexpected`, naming the function (or ``type(self)``: the class the user called).

    ``also``: what its ``**keywords`` are forwarded to (a spec class: its settings; a class or
    function: its keywords), except those named in ``but``. ``notes``: a function's
    ``keyword_notes`` (a class's are read from ``type(self).keyword_notes``). Costs a set lookup
    per keyword per call.
    """

    def wrap(func: F) -> F:
        takes: frozenset[str] | None = None
        order: tuple[str, ...] = ()
        method = func.__name__ == "__init__"

        @functools.wraps(func)
        def checked(*args: Any, **kwargs: Any) -> Any:
            nonlocal takes, order
            if kwargs:
                if takes is None:
                    order = tuple(k for k in keyword_names(func, *also) if k not in but)
                    takes = frozenset(order)
                for name in kwargs:
                    if name not in takes:
                        owner = type(args[0]) if method and args else None
                        callee = func.__name__ if owner is None else owner.__name__
                        said = notes if owner is None else getattr(owner, "keyword_notes", None)
                        about = about_of(*([] if owner is None else [owner]), *also)
                        raise unexpected(callee, name, order, said, about)
            return func(*args, **kwargs)

        return cast(F, checked)

    return wrap
