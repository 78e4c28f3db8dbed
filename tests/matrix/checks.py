"""The checks a working cell must pass, on what the consumer delivered (read back into tokens).

Each raises :class:`build.Failure` with one line saying what went wrong.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from padless import Schedule

from . import corpus as C
from .build import Failure
from .factors import STRATEGIES


def value(x: Any, step: int) -> Any:
    """A setting at an optimizer step (a schedule's value, or the number)."""
    return int(x.value(step)) if isinstance(x, Schedule) else x


def largest(x: Any) -> int:
    if isinstance(x, Schedule):
        return max(int(v) for v in x.values(np.arange(0, 64)).tolist())
    return int(x)


def segments(got: C.Got) -> list[np.ndarray]:
    """The sequences of a batch: a padded row each, or the runs of consecutive tokens of a
    packed or flat row (an item's piece: its tokens follow each other)."""
    if got.kind == "padded":
        return [r for r in got.rows if r.size]
    positions = got.meta.get("positions") or [None] * len(got.rows)
    return [run for r, p in zip(got.rows, positions, strict=True) for run in C.runs(r, p)]


def check_tokens(got: C.Got, where: str) -> None:
    tokens = got.tokens
    bad = [int(t) for t in tokens.tolist() if not C.valid(int(t))]
    if bad:
        raise Failure(f"{where}: {len(bad)} tokens that are no item's (e.g. {bad[0]})")
    if got.kind == "padded":
        for r, row in enumerate(got.rows):
            if row.size and np.any(np.diff(row) != 1):
                raise Failure(f"{where}: row {r} holds more than one sequence")


def whole(seq: np.ndarray) -> bool:
    item, pos = divmod(int(seq[0]) - 1, C.K)
    return pos == 0 and seq.size == int(C.LENGTHS[item])


def check_batch(strategy: str, kw: dict[str, Any], got: C.Got, step: int, where: str) -> None:
    """The batch is within its strategy's budget at ``step`` (after the collate), as the
    strategy shapes it: ``kw`` are the spec's settings (schedules read at ``step``)."""
    check_tokens(got, where)
    shape = got.shape
    if strategy == "lm":
        t = value(kw["num_steps"], step)
        per = kw.get("tokens_per_batch") or kw["batch_size"] * largest(kw["num_steps"])
        if got.kind != "lm" or shape[1] != t or shape[0] * shape[1] > per:
            raise Failure(f"{where}: LM batch {shape} at step {step}, expected rows of {t}")
        return
    segs = segments(got)
    rows, width = shape[0], shape[1]
    total = int(got.tokens.size)
    if strategy in ("token_budget", "buckets", "exact_length", "fixed_shapes"):
        broken = [s for s in segs if not whole(s)]
        if broken:
            raise Failure(f"{where}: a sequence cut or joined ({broken[0].size} tokens)")
    if strategy in ("token_budget", "buckets", "exact_length"):
        budget = value(kw["max_tokens"], step)
        used = total if got.kind == "flat" else rows * width
        if used > budget:
            raise Failure(f"{where}: {rows}x{width} = {used} tokens > max_tokens={budget}")
        if strategy == "exact_length" and len({s.size for s in segs}) > 1:
            raise Failure(f"{where}: lengths {sorted({s.size for s in segs})} in one batch")
        if got.kind == "padded" and segs and width != max(s.size for s in segs):
            raise Failure(f"{where}: padded to {width}, longest is {max(s.size for s in segs)}")
    elif strategy == "fixed_shapes":
        shapes = {tuple(s) for s in kw["shapes"]}
        if (rows, width) not in shapes:
            raise Failure(f"{where}: shape {(rows, width)} is not one of {sorted(shapes)}")
    elif strategy == "decomposition":
        sizes = {s.size for s in segs}
        if len(sizes) > 1:
            raise Failure(f"{where}: pieces of lengths {sorted(sizes)} in one batch")
        used = total if got.kind == "flat" else rows * width
        if used > kw["tokens_per_batch"]:
            raise Failure(f"{where}: {used} tokens > tokens_per_batch={kw['tokens_per_batch']}")
    elif strategy == "packing":
        cap, top = value(kw["capacity"], step), largest(kw["capacity"])
        most = kw.get("rows_per_batch", 1) * (top // cap)
        if any(s.size > cap for s in segs):
            raise Failure(f"{where}: a sequence of {max(s.size for s in segs)} > capacity {cap}")
        if got.kind == "flat":
            if total > most * cap:
                raise Failure(f"{where}: {total} tokens > {most} rows of {cap}")
        elif width != cap or rows > most:
            raise Failure(
                f"{where}: rows {shape} at step {step}, expected at most {most} rows of {cap}"
            )


def check_order(strategy: str, kw: dict[str, Any], slots: list[C.Got], where: str) -> None:
    """A length curriculum from short to long: piece lengths never fall along the epoch."""
    if kw.get("curriculum") != "short_to_long":
        return
    sizes = [max((s.size for s in segments(g)), default=0) for g in slots]
    for i in range(1, len(sizes)):
        if sizes[i] < sizes[i - 1]:
            raise Failure(
                f"{where}: curriculum short_to_long ignored: pieces of {sizes[i - 1]} "
                f"then {sizes[i]} (batch {i})"
            )


def expected(strategy: str, kw: dict[str, Any]) -> set[int] | None:
    """Every token an epoch must deliver once (None: the LM stream's, from its offset)."""
    if strategy == "decomposition":
        return C.decomposition_tokens(kw["max_length"], kw["min_length"])
    if strategy == "lm":
        return None
    return C.all_tokens()


def lm_expected(src: Any, kw: dict[str, Any]) -> set[int]:
    """An LM epoch's targets: the stream's tokens from its offset on, in whole chunks of the
    longest length (the contract's definition)."""
    top = largest(kw["num_steps"])
    offset = int(src.offset)
    tokens = C.STREAM_TOKENS
    count = (len(tokens) - 1 - offset) // top * top
    return set(tokens[offset + 1 : offset + 1 + count].tolist())


def interleave(per_rank: list[list[C.Got]]) -> list[C.Got]:
    """The global order of the ranks' batches: step by step, rank by rank."""
    out = []
    for step in range(max((len(r) for r in per_rank), default=0)):
        for batches in per_rank:
            if step < len(batches):
                out.append(batches[step])
    return out


def without_repeats(
    slots: list[C.Got], repeated: int, where: str, counted: bool = True
) -> list[C.Got]:
    """The epoch's batches without the tail's repeats: the last ``repeated`` global batches,
    each of which must be a batch delivered before (the epoch's first batches). ``counted``:
    no other batch at the end may repeat one (a mixture's corpora repeat theirs: False)."""
    if repeated < 0 or repeated > len(slots):
        raise Failure(f"{where}: repeated={repeated} for {len(slots)} batches")
    body, tail = slots[: len(slots) - repeated], slots[len(slots) - repeated :]
    keys = [g.key for g in body]
    for g in tail:
        if g.key not in keys:
            raise Failure(
                f"{where}: repeated={repeated}, but the last {repeated} batches are not all "
                "repeats of the epoch's batches"
            )
    extra = 0  # batches at the end that repeat earlier ones, beyond `repeated`
    while counted and extra < len(body) - 1 and keys[-1 - extra] in keys[: len(body) - 1 - extra]:
        extra += 1
    if extra:
        raise Failure(
            f"{where}: the last step repeats {repeated + extra} of the epoch's batches, "
            f"but repeated={repeated}"
        )
    return body


def check_once(slots: list[C.Got], want: set[int], where: str) -> None:
    """Every wanted token exactly once over the batches, nothing else."""
    counts = Counter(int(t) for g in slots for t in g.tokens.tolist())
    twice = sum(1 for c in counts.values() if c > 1)
    missing = len(want - counts.keys())
    extra = len(counts.keys() - want)
    if twice or missing or extra:
        items_missing = len({(t - 1) // C.K for t in want - counts.keys()})
        raise Failure(
            f"{where}: {missing} tokens ({items_missing} items) missing, {twice} twice, "
            f"{extra} unexpected"
        )


def strategy_kw(strategy: str, which: str) -> dict[str, Any]:
    row = STRATEGIES[strategy]
    if which == "warmup":
        assert row.warmup is not None
        return dict(row.warmup)
    return dict(getattr(row, which))


def check_groups(slots: list[C.Got], where: str) -> None:
    """Every batch holds whole groups (``C.GROUPS``): each item's partner is in its batch."""
    for j, got in enumerate(slots):
        items = set(((got.tokens - 1) // C.K).tolist())
        for i in items:
            partners = set(np.flatnonzero(C.GROUPS == C.GROUPS[i]).tolist())
            if not partners <= items:
                raise Failure(f"{where} batch {j}: item {i}'s group {sorted(partners)} is split")
