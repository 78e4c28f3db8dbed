"""One cell of the matrix: built, run on two ranks, checked, and classified.

Outcomes:

- ``works``: every check passed;
- ``refused``: a ValueError or TypeError while the run was set up (the sampler, mixture or
  consumer built, ``skip`` called, a state loaded), whose message names two parts of the cell;
- ``refused_unhelpful``: refused while set up, but the message does not name both parts, or
  is a plain signature error (an unexpected keyword...), or the part has no such method at all
  (an ``AttributeError``);
- ``late``: a ValueError or TypeError only once batches were asked for;
- ``silent``: no error, but a check failed (data lost or repeated, a budget passed, a layer
  ignored);
- ``crash``: any other exception (while set up or running).
"""

from __future__ import annotations

import gc
import itertools
import re
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from . import corpus as C
from .build import (
    Built,
    Env,
    Failure,
    Feed,
    bare_gots,
    building,
    collate_of,
    dataset_for,
    hf_collator,
    hf_dataset,
    hf_state,
    hf_train,
    is_lm,
    mixture,
    source,
)
from .checks import (
    check_batch,
    check_groups,
    check_once,
    check_order,
    expected,
    interleave,
    lm_expected,
    strategy_kw,
    without_repeats,
)
from .factors import (
    ELASTIC_WORLD,
    MIX_SCHEDULE,
    MIX_WEIGHTS,
    RAMP,
    RESUME_AT,
    SKIP_STEPS,
    WORLD,
    Cell,
    names_of,
)

OUTCOMES = ("works", "refused", "refused_unhelpful", "late", "silent", "crash")
BROKEN = ("refused_unhelpful", "late", "silent", "crash")  # what fails a cell

# A TypeError of Python's own argument binding says nothing of what to do instead.
SIGNATURE_ERRORS = (
    "unexpected keyword argument",
    "positional argument",
    "takes no keyword",
    "takes no arguments",
)


@dataclass(frozen=True)
class Params:
    """Where a cell's resumes and skips happen (``make fuzz`` draws them).

    ``resume_at``: micro-batch steps every rank trains before the checkpoint; None: 3, and for
    an elastic resume the first step from 2 on whose rest of the epoch does not divide by the
    new world size (so the tail's repeats at 3 ranks are exercised).
    """

    resume_at: int | None = None
    skip: tuple[int, int] = SKIP_STEPS  # sampler.skip(steps=skip)

    def position(self) -> int:
        return RESUME_AT if self.resume_at is None else self.resume_at


@dataclass(frozen=True)
class Outcome:
    kind: str
    reason: str = ""
    message: str = ""  # a refusal's full message

    def __str__(self) -> str:
        return f"{self.kind}: {self.reason}" if self.reason else self.kind


def said(err: BaseException) -> str:
    """What an error says: its message, or for one re-raised from a DataLoader worker (torch
    wraps it in a traceback of its own) the original's last line."""
    text = str(err)
    if "Original Traceback" in text:
        return [line for line in text.splitlines() if line.strip()][-1].strip()
    return f"{type(err).__name__}: {text}"


def one_line(err: BaseException, width: int = 200) -> str:
    """``Type: message`` on one line."""
    text = " ".join(said(err).split())
    if "Original Traceback" in str(err):
        text += " (in a DataLoader worker)"
    return text[:width]


def parts_named(cell: Cell, message: str) -> list[str]:
    """The parts of the cell a message names (the whole-corpus form and the empty layer are
    no part of a refusal). Examples in it ("(e.g. the PackingSampler ...)") name nothing."""
    parts = [cell.strategy, cell.form, cell.layer, cell.consumer]
    low = re.sub(r"\(e\.g\.[^)]*\)", "", message).lower()
    return [
        p
        for p in parts
        if p not in ("whole", "none") and any(w.lower() in low for w in names_of(p))
    ]


def classify_refusal(cell: Cell, err: BaseException) -> Outcome:
    message = one_line(err, 10_000)
    reason = one_line(err)
    if isinstance(err, AttributeError):
        return Outcome("refused_unhelpful", reason, message)
    if not isinstance(err, (ValueError, TypeError)):
        return Outcome("crash", f"while built: {reason}", message)
    if isinstance(err, TypeError) and any(s in str(err) for s in SIGNATURE_ERRORS):
        return Outcome("refused_unhelpful", reason, message)
    if len(parts_named(cell, said(err).split(": ", 1)[-1])) < 2:
        return Outcome("refused_unhelpful", reason, message)
    return Outcome("refused", reason, message)


def run_cell(cell: Cell, env: Env, params: Params | None = None) -> Outcome:
    """Build and run ``cell``; its outcome."""
    params = params or Params()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: more threads only contend (and cost ms per op)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if cell.consumer == "hf":
                _hf(cell, env, params)
            else:
                _DRIVERS[cell.layer](cell, env, params)
    except Built as built:
        return classify_refusal(cell, built.error)
    except Failure as failure:
        return Outcome("silent", str(failure))
    except (ValueError, TypeError) as err:
        return Outcome("late", one_line(err))
    except Exception as err:
        return Outcome("crash", one_line(err))
    finally:
        torch.set_num_threads(threads)
        # a loader whose iteration failed may be held by a cycle through its traceback: free
        # it here, not in a later loader's forked worker (young objects only: a full
        # collection costs a second with transformers loaded)
        gc.collect(1)
    return Outcome("works")


# ------------------------------------------------------------------------------ helpers
def _kw(cell: Cell, which: str = "base") -> dict[str, Any]:
    if cell.layer in ("warmup", "mixture_warmup") and which == "base":
        which = "warmup"
    kw = strategy_kw(cell.strategy, which)
    if cell.layer == "context_parallel":
        kw["context_parallel"] = 2
    return kw


def _options(cell: Cell) -> dict[str, Any]:
    if cell.layer == "ramp":
        return {"batches_per_step": RAMP}
    if cell.layer == "elastic_balance":
        return {"balance": True}
    if cell.layer == "groups":
        return {"groups": C.GROUPS}
    return {}


def _feeds(
    cell: Cell, env: Env, kw: dict[str, Any], world: int, options: dict[str, Any] | None = None
) -> list[Feed]:
    """One feed per rank, built, at epoch 0."""
    out = []
    with building():
        for rank in range(world):
            if cell.layer.startswith("mixture"):
                src = mixture(cell, kw, rank=rank, world=world, env=env)
            else:
                src = source(cell, kw, rank=rank, world=world, options=options, env=env)
            cp = kw.get("context_parallel", 1) if cell.strategy != "lm" else 1
            feed = Feed(cell, env, src, cp=cp)
            feed.set_epoch(0)
            out.append(feed)
    return out


def _want(cell: Cell, kw: dict[str, Any], src: Any) -> set[int]:
    """Every token the epoch must deliver once (an LM stream's: from ``src``'s offset)."""
    want = expected(cell.strategy, kw)
    return lm_expected(src, kw) if want is None else want


def _check_all(cell: Cell, kw: dict[str, Any], slots: list[C.Got], where: str) -> None:
    for i, got in enumerate(slots):
        check_batch(cell.strategy, kw, got, got.opt, f"{where} batch {i}")


def _epoch(feeds: list[Feed], ramp: bool = False) -> list[list[C.Got]]:
    return [list(f.iterate(ramp)) for f in feeds]


def _first(feeds: list[Feed], count: int) -> list[list[C.Got]]:
    """Each rank's first ``count`` batches; its iteration then stopped (workers shut down)."""
    out = []
    for feed in feeds:
        running = feed.iterate()
        out.append(list(itertools.islice(running, count)))
        running.close()
    return out


# ------------------------------------------------------------------------------ layers
def _plain(cell: Cell, env: Env, params: Params) -> None:
    """No layer, a ramp, a warm-up, context parallelism, groups: one epoch on two ranks."""
    kw = _kw(cell)
    ramp = cell.layer == "ramp"
    feeds = _feeds(cell, env, kw, WORLD, _options(cell))
    per_rank = _epoch(feeds, ramp)
    slots = interleave(per_rank)
    _check_all(cell, kw, slots, cell.layer)
    body = without_repeats(slots, feeds[0].repeated, "tail")
    check_once(body, _want(cell, kw, feeds[0].src), "epoch")
    check_order(cell.strategy, kw, body, "epoch")
    if ramp:
        for rank, feed in enumerate(feeds):
            _check_ramp(feed.groups, WORLD, f"rank {rank}")
    if cell.layer == "context_parallel":
        if not all("cu_seqlens_padded" in g.meta.get("keys", ()) for g in slots):
            raise Failure("context_parallel: the batches are no context-parallel shares")
    if cell.layer == "groups":
        check_groups(slots, "groups")


def _check_ramp(groups: list[int], world: int, where: str) -> None:
    if not groups:
        raise Failure(f"{where}: no optimizer steps")
    want = [RAMP.value(g) // world for g in range(len(groups))]
    if groups[:-1] != want[:-1] or not 0 < groups[-1] <= want[-1]:
        raise Failure(f"{where}: micro-batches per step {groups[:6]}, the ramp gives {want[:6]}")


def _skip(cell: Cell, env: Env, params: Params) -> None:
    kw = _kw(cell)
    ref_feeds = _feeds(cell, env, kw, WORLD)
    ref = interleave(_epoch(ref_feeds))
    ref_body = without_repeats(ref, ref_feeds[0].repeated, "reference")
    feeds = _feeds(cell, env, kw, WORLD)
    with building():
        for feed in feeds:
            feed.src.skip(steps=params.skip)
    slots = interleave(_epoch(feeds))
    _check_all(cell, kw, slots, "skip")
    body = without_repeats(slots, feeds[0].repeated, "tail")
    a, b = (s * WORLD for s in params.skip)
    want = [g.key for g in ref_body[:a] + ref_body[b:]]
    got = [g.key for g in body]
    if got != want:
        first = next((i for i, (x, y) in enumerate(zip(got, want, strict=False)) if x != y), None)
        raise Failure(
            f"skip{params.skip}: {len(got)} batches delivered, {len(want)} expected "
            f"(first difference at batch {first})"
        )
    skipped = {t for g in ref_body[a:b] for t in g.key}
    trained = {t for g in slots for t in g.key}
    if skipped & trained:
        raise Failure(f"skip: {len(skipped & trained)} tokens of skipped batches trained")


def _resume(cell: Cell, env: Env, params: Params) -> None:
    kw = _kw(cell)
    ref_feeds = _feeds(cell, env, kw, WORLD)
    ref = _epoch(ref_feeds)
    body = without_repeats(interleave(ref), ref_feeds[0].repeated, "reference")
    check_once(body, _want(cell, kw, ref_feeds[0].src), "uninterrupted epoch")
    feeds = _feeds(cell, env, kw, WORLD)
    first = _first(feeds, params.position())
    states = [f.state() for f in feeds]
    for feed in feeds:
        feed.stop()
    again = _feeds(cell, env, kw, WORLD)
    for feed, state in zip(again, states, strict=True):
        feed.load(state)
    rest = _epoch(again)
    for rank in range(WORLD):
        got = [g.layout for g in first[rank] + rest[rank]]
        want = [g.layout for g in ref[rank]]
        if got != want:
            at = next((i for i, (x, y) in enumerate(zip(got, want, strict=False)) if x != y), None)
            raise Failure(
                f"resume at {params.position()}: rank {rank} got {len(got)} batches, the "
                f"uninterrupted run {len(want)} (first difference at batch {at})"
            )


def _elastic_at(cell: Cell, env: Env, kw: dict[str, Any], params: Params) -> int:
    """Where an elastic resume happens (see :class:`Params`)."""
    if params.resume_at is not None:
        return params.resume_at
    try:
        with building():
            total = len(source(cell, kw, rank=0, world=1, env=env))
    except (Built, TypeError):  # a stream has no length; a refusal shows when built below
        return RESUME_AT
    for k in range(2, total):
        if (total - WORLD * k) % ELASTIC_WORLD:
            return k
    return RESUME_AT


def _elastic(cell: Cell, env: Env, params: Params) -> None:
    kw = _kw(cell)
    options = _options(cell)
    feeds = _feeds(cell, env, kw, WORLD, options)
    first = _first(feeds, _elastic_at(cell, env, kw, params))
    state = feeds[0].state()
    for feed in feeds:
        feed.stop()
    wider = _feeds(cell, env, kw, ELASTIC_WORLD, options)
    for feed in wider:
        feed.load(state)
    rest = _epoch(wider)
    slots = interleave(first) + interleave(rest)
    _check_all(cell, kw, slots, "elastic")
    body = without_repeats(slots, wider[0].repeated, f"tail at {ELASTIC_WORLD} ranks")
    check_once(body, _want(cell, kw, wider[0].src), f"epoch resumed at {ELASTIC_WORLD} ranks")


def _change(cell: Cell, env: Env, params: Params) -> None:
    old, new = _kw(cell), _kw(cell, "change")
    feeds = _feeds(cell, env, old, WORLD)
    first = _first(feeds, params.position())
    states = [f.state() for f in feeds]
    for feed in feeds:
        feed.stop()
    again = _feeds(cell, env, new, WORLD)
    for feed, state in zip(again, states, strict=True):
        feed.load(state)
    rest = _epoch(again)
    before, after = interleave(first), interleave(rest)
    _check_all(cell, old, before, "before the change")
    _check_all(cell, new, after, "after the change")
    body = without_repeats(before + after, again[0].repeated, "tail")
    check_once(body, _want(cell, old, feeds[0].src), "epoch across the change")
    if params.position() <= RESUME_AT:
        # the sample's position, early in the epoch; ``make fuzz`` draws later ones too, where
        # the few batches left may all fit both settings (2 or 4 of them, it found)
        _check_visible(cell, old, after)


def _check_visible(cell: Cell, old: dict[str, Any], after: list[C.Got]) -> None:
    """Some batch after a change must be one the old settings could not make."""
    for got in after:
        try:
            check_batch(cell.strategy, old, got, got.opt, "")
        except Failure:
            return
    raise Failure(f"change ignored: all {len(after)} batches after it fit the old settings")


def _corpus(got: C.Got, where: str) -> str:
    tokens = got.tokens
    if tokens.size == 0:
        raise Failure(f"{where}: an empty batch")
    border = C.token(C.HALF, 0)
    if int(tokens.max()) < border:
        return "a"
    if int(tokens.min()) >= border:
        return "b"
    raise Failure(f"{where}: a batch mixes the two corpora")


def _mixture_checks(
    cell: Cell, kw: dict[str, Any], slots: list[C.Got], mix: Any, repeated: int, world: int
) -> None:
    """Each batch from one corpus, within its budget at the mixture's step; each corpus's
    batches are its own sampler's, in order; the weights' shares per phase."""
    for j, got in enumerate(slots):
        check_batch(cell.strategy, kw, got, j // world, f"mixture batch {j} (step {j // world})")
    body = without_repeats(slots, repeated, "tail", counted=False)
    names = [_corpus(g, f"mixture batch {j}") for j, g in enumerate(body)]
    for name in mix.samplers:
        mine = [g.key for g, n in zip(body, names, strict=True) if n == name]
        ref = _corpus_stream(cell, kw, name, len(mine))
        if mine != ref[: len(mine)]:
            at = next((i for i, (x, y) in enumerate(zip(mine, ref, strict=False)) if x != y), None)
            raise Failure(
                f"mixture: corpus {name}'s batches are not its sampler's (batch {at} of "
                f"{len(mine)})"
            )
    if len(body) != mix.num_batches:
        raise Failure(f"mixture: {len(body)} batches, num_batches={mix.num_batches}")
    schedule = cell.layer == "mixture_schedule"
    phases = [(0, 3 * world), (3 * world, len(body))] if schedule else [(0, len(body))]
    for lo, hi in phases:
        count = sum(1 for n in names[lo:hi] if n == "a")
        if schedule:
            w = MIX_SCHEDULE["a"].value(lo // world), MIX_SCHEDULE["b"].value(lo // world)
        else:
            w = MIX_WEIGHTS["a"], MIX_WEIGHTS["b"]
        p = w[0] / (w[0] + w[1])
        if abs(count - p * (hi - lo)) >= 1:
            raise Failure(
                f"mixture weights ignored: corpus a has {count} of batches {lo}..{hi - 1}, "
                f"its weight gives {p * (hi - lo):.1f}"
            )


def _corpus_stream(cell: Cell, kw: dict[str, Any], name: str, count: int) -> list[Any]:
    """A mixture corpus's own batches, epoch after epoch (its sampler alone, one rank)."""
    sub = source(cell, kw, rank=0, world=1, part=name)
    if is_lm(sub):  # its own epochs' (x, y) batches (a warm-up changes only their layout)
        from padless.torch import lm_tensors

        keys: list[Any] = []
        for epoch in range(64):
            if len(keys) >= count:
                break
            sub.set_epoch(epoch)
            keys += [C.read(pair).key for pair in lm_tensors(sub)]
        return keys
    lo = 0 if name == "a" else C.HALF
    data = dataset_for(sub, "collate", C.ITEMS[: lo + sub.sizes.shape[0]][lo:])
    collate = collate_of(sub)
    out: list[Any] = []
    for epoch in range(64):
        if len(out) >= count:
            break
        sub.set_epoch(epoch)
        out += [g.key for g in bare_gots(sub, collate, data)]
    return out


def _mixture(cell: Cell, env: Env, params: Params) -> None:
    kw = _kw(cell)
    feeds = _feeds(cell, env, kw, WORLD)
    slots = interleave(_epoch(feeds))
    _mixture_checks(cell, kw, slots, feeds[0].src, feeds[0].repeated, WORLD)


_DRIVERS = {
    "none": _plain,
    "ramp": _plain,
    "warmup": _plain,
    "context_parallel": _plain,
    "mixture": _mixture,
    "mixture_schedule": _mixture,
    "mixture_warmup": _mixture,
    "skip": _skip,
    "resume": _resume,
    "elastic": _elastic,
    "elastic_balance": _elastic,
    "change": _change,
    "groups": _plain,
}


# ------------------------------------------------------------------------------ the HF Trainer
def _hf_source(cell: Cell, env: Env, kw: dict[str, Any], options: dict[str, Any]) -> Any:
    """The Trainer's batch sampler: one process (the Trainer's world size here)."""
    with building():
        if cell.layer.startswith("mixture"):
            return mixture(cell, kw, rank=0, world=1, env=env)
        return source(cell, kw, rank=0, world=1, options=options, env=env)


def _hf_bare(cell: Cell, env: Env, kw: dict[str, Any], options: dict[str, Any]) -> list[C.Got]:
    """The bare sampler's batches through the same collator: what the Trainer must train on."""
    src = _hf_source(cell, env, kw, options)
    return bare_gots(src, hf_collator(src), hf_dataset(src))


def _hf(cell: Cell, env: Env, params: Params) -> None:
    kw, options = _kw(cell), _options(cell)
    layer = cell.layer
    if layer.startswith("mixture"):
        src = _hf_source(cell, env, kw, options)
        seen, _ = hf_train(env, src)
        _mixture_checks(cell, kw, seen, src, src.repeated, 1)
        return
    if layer == "resume":
        k = max(1, params.position())  # a Trainer checkpoints after a step: none at step 0
        src = _hf_source(cell, env, kw, options)
        full, out = hf_train(env, src, save_at=(k,))
        body = without_repeats(full, src.repeated, "tail")
        check_once(body, _want(cell, kw, src), "HF epoch")
        resumed, _ = hf_train(
            env, _hf_source(cell, env, kw, options), resume=f"{out}/checkpoint-{k}"
        )
        got = [g.layout for g in resumed]
        want = [g.layout for g in full if g.opt >= k]
        if got != want:
            raise Failure(f"HF resume at step {k}: {len(got)} batches, expected {len(want)}")
        return
    if layer in ("elastic", "elastic_balance", "change"):
        _hf_resumed(cell, env, params, kw, options)
        return
    src = _hf_source(cell, env, kw, options)
    if layer == "skip":
        with building():  # the sampler skips, then the Trainer is built on it
            src.skip(steps=params.skip)
    seen, _ = hf_train(env, src)
    for i, got in enumerate(seen):
        check_batch(cell.strategy, kw, got, got.opt, f"HF batch {i} (step {got.opt})")
    ref = _hf_bare(cell, env, kw, options)
    if layer == "skip":
        a, b = params.skip
        ref = ref[:a] + ref[b:]
    if [g.key for g in seen] != [g.key for g in ref]:
        raise Failure(
            f"HF trained {len(seen)} batches, not the sampler's {len(ref)} (in its order)"
        )
    if layer != "skip":
        body = without_repeats(seen, src.repeated, "tail")
        check_once(body, _want(cell, kw, src), "HF epoch")
    check_order(cell.strategy, kw, seen, "HF epoch")
    if layer == "ramp":
        sizes = [sum(1 for g in seen if g.opt == s) for s in range(max(g.opt for g in seen) + 1)]
        _check_ramp(sizes, 1, "HF")
    if layer == "context_parallel":
        if not all("cu_seqlens_padded" in g.meta.get("keys", ()) for g in seen):
            raise Failure("context_parallel ignored: the Trainer trains on whole rows, no shares")
    if layer == "groups":
        check_groups(seen, "HF")


def _hf_resumed(
    cell: Cell, env: Env, params: Params, kw: dict[str, Any], options: dict[str, Any]
) -> None:
    """A Trainer run checkpointed at step k, continued elsewhere: by three bare ranks (elastic:
    the checkpoint's sampler state), or by a Trainer under other settings (change)."""
    k = _elastic_at(cell, env, kw, params) if cell.layer != "change" else params.position()
    k = max(1, k)  # a Trainer checkpoints after a step: none at step 0
    first = _hf_source(cell, env, kw, options)
    full, out = hf_train(env, first, save_at=(k,))
    before = [g for g in full if g.opt < k]
    if cell.layer == "change":
        new = _kw(cell, "change")
        second = _hf_source(cell, env, new, options)
        after, _ = hf_train(env, second, resume=f"{out}/checkpoint-{k}")
        for i, got in enumerate(after):
            check_batch(cell.strategy, new, got, got.opt, f"HF batch {i} after the change")
        body = without_repeats(before + after, second.repeated, "tail")
        check_once(body, _want(cell, kw, first), "HF epoch across the change")
        _check_visible(cell, kw, after)
        return
    state = hf_state(out, k)
    rest = []
    with building():
        wider = [
            source(cell, kw, rank=r, world=ELASTIC_WORLD, options=options, env=env)
            for r in range(ELASTIC_WORLD)
        ]
        for sampler in wider:
            sampler.load_state_dict(state)
    for sampler in wider:
        rest.append(bare_gots(sampler, hf_collator(sampler), hf_dataset(sampler)))
    slots = before + interleave(rest)
    body = without_repeats(slots, wider[0].repeated, f"tail at {ELASTIC_WORLD} ranks")
    check_once(body, _want(cell, kw, first), f"HF run resumed at {ELASTIC_WORLD} ranks")
