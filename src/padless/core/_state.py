"""Tiny JSON-safe resume state shared by samplers and streams."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import numpy as np

from ._check import check_int, check_seed
from ._schedule import position_limit, steps_left, tail_counts

STATE_VERSION = 1
STATE_KEYS = ("version", "seed", "epoch", "position", "world_size", "fingerprint")


def _digest(*parts: bytes) -> str:
    import hashlib  # stdlib, deferred with json: 7 ms of start-up that only a fingerprint needs

    h = hashlib.blake2b(digest_size=4)
    for part in parts:
        h.update(part)
    return h.hexdigest()


def fingerprint(
    config: Mapping[str, Any], *arrays: np.ndarray, data: Mapping[str, Any] | None = None
) -> str:
    """Two-part hash ``"<data>-<settings>"``, 8 hex digits each, so a mismatch can say which differs.

    The data part covers ``data`` (JSON-safe summaries such as a length hash) and ``arrays``
    (dtype, shape and bytes); the settings part covers ``config``.

    Cost: one pass over the arrays' bytes (blake2b, about 1 GB/s).

    >>> a = fingerprint({"max_tokens": 8}, data={"n": 3})
    >>> b = fingerprint({"max_tokens": 9}, data={"n": 3})
    >>> a.split("-")[0] == b.split("-")[0], a == b
    (True, False)
    """
    import json

    blobs = [json.dumps(dict(data or {}), sort_keys=True, default=str).encode()]
    for arr in arrays:
        a = np.ascontiguousarray(arr)
        blobs.append(f"{a.dtype.str}{a.shape}".encode())
        blobs.append(bytes(cast(Any, a).data))
    return f"{_digest(*blobs)}-{settings_digest(config)}"


def settings_digest(config: Mapping[str, Any]) -> str:
    """The settings part of :func:`fingerprint` for ``config``."""
    import json

    return _digest(json.dumps(dict(config), sort_keys=True, default=str).encode())


def _mismatch(saved: Any, expected: str) -> str:
    """Say which part of a fingerprint differs."""
    got = str(saved).split("-")
    want = expected.split("-")
    if len(got) != 2 or len(want) != 2:
        return "it was saved by another kind of sampler or another padless version"
    reasons = []
    if got[0] != want[0]:
        reasons.append("the data differ (other lengths, tokens or group ids)")
    if got[1] != want[1]:
        reasons.append(
            "the settings differ (class, batch size or budget, shuffle, balance...): load it "
            "with the settings it was saved under"
        )
    return " and ".join(reasons)


def check_state(state: Any, *, expected_fingerprint: str, what: str = "state") -> dict[str, Any]:
    """Validate a state dict (without mutating it) and return a checked copy."""
    if not isinstance(state, Mapping):
        raise TypeError(f"{what} must be a dict from state_dict(), got {type(state).__name__}")
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        raise ValueError(f"{what} is missing keys {missing}")
    if state["version"] != STATE_VERSION:
        raise ValueError(
            f"{what} has version {state['version']!r}; this padless reads {STATE_VERSION}"
        )
    for k in ("seed", "epoch", "position", "world_size"):
        v = state[k]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{what}[{k!r}] must be a non-negative int, got {v!r}")
    if state["world_size"] < 1:
        raise ValueError(f"{what}['world_size'] must be a positive int, got {state['world_size']}")
    if state["fingerprint"] != expected_fingerprint:
        raise ValueError(
            f"{what} does not fit: {_mismatch(state['fingerprint'], expected_fingerprint)} "
            f"(fingerprint {state['fingerprint']!r} != {expected_fingerprint!r})"
        )
    return {
        k: (v if isinstance(v, str) else int(v)) for k, v in state.items() if k in STATE_KEYS
    } | {k: v for k, v in state.items() if k not in STATE_KEYS}


def _workers_ahead() -> int:
    """The workers of a torch DataLoader whose iterator is drawing the batches of the iteration
    starting now (a frame above this one holds it), 0 for none: torch's multiprocessing
    iterator takes ``prefetch_factor × num_workers`` batches ahead of the loop, so the
    iteration's own count runs ahead of what the loop received (torchdata's stateful iterator
    and padless's loaders count what was received). Names are compared as strings: the core
    imports no torch. Cost: a look at a few frames, once per iteration."""
    frame: Any = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return 0
        owner = frame.f_locals.get("self")
        cls = type(owner)
        if (
            cls.__name__ == "_MultiProcessingDataLoaderIter"
            and cls.__module__ == "torch.utils.data.dataloader"
        ):
            return int(getattr(owner, "_num_workers", 0) or 0)
        frame = frame.f_back
    return 0


class Resumable:
    """Epoch, position and iteration loop shared by every padless sampler and stream.

    A subclass sets ``seed``, ``epoch``, ``rank``, ``world_size`` and ``drop_last``, calls
    :meth:`_reset_position` in ``__init__`` and supplies three things: ``_total()`` (batch slots
    in the current epoch), ``_batch_at(slot)`` (the batch at a global slot) and
    ``_fingerprint_now()``. The loop, the counting, the tail policy and the state live here.
    Positions are global (batch slots consumed in the epoch over all ranks), so a state loads at
    another world size. ``_history`` keeps the ``(world_size, position)`` parts of the epoch run
    at other world sizes: a subclass whose order depends on the world size (balanced steps)
    re-balances what is left from it (see :func:`padless.core._schedule.elastic_order`), and it
    bounds the positions a state may hold.
    """

    seed: int
    epoch: int
    rank: int
    world_size: int
    drop_last: bool
    _pending: int | None
    _start: int
    _yielded: int
    _iterating: bool
    _history: tuple[tuple[int, int], ...]

    def _reset_position(self) -> None:
        self._pending = None  # global position loaded, used by the next iteration
        self._start = 0  # global start position of the current (or last) iteration
        self._yielded = 0  # batches this rank yielded in that iteration
        self._iterating = False
        self._history = ()
        # changes of settings within the epoch (resume across a change; see PlanSampler)
        self._changes: tuple[Any, ...] = ()
        self._epoch_given: int | None = None  # set_epoch's epoch, until an iteration begins
        self._done_at: int | None = None  # end of an epoch finished by a loaded state
        self._skips: tuple[tuple[int, int, int], ...] = ()  # (epoch, lo, hi) global positions
        self._step_end: list[int] = []  # the global position after each yielded batch's step
        self._next_pos = 0  # the global position the running iteration's next step starts at
        self._ahead = 0  # workers of a DataLoader that draws this iteration's batches ahead

    # ------------------------------------------------------------------ for subclasses
    # settings a run keeps whatever else changes (names in ``_config()``), and what it may change
    _fixed_settings: tuple[str, ...] = ("class",)
    # the epoch the last iteration ran to its end (None: none since), and whether iterating it
    # again without set_epoch was warned of (a forgotten set_epoch repeats an epoch silently)
    _completed: int | None = None
    _warned_repeat = False
    # what iteration yields: "indices" (batches of dataset indices, for a DataLoader's or a
    # Trainer's batch_sampler) or "tokens" (the batches themselves, read from a token corpus)
    yields: str = "indices"
    _changeable_text = "its settings"

    def _fingerprint_now(self) -> str:
        raise NotImplementedError

    def _shown(self, name: str, value: Any) -> Any:
        """A setting's value of a ``_config()`` record as a message names it to the user."""
        return value

    def _what_differs(self, name: str, saved: Any, now: Any) -> str | None:
        """Words for a fixed setting that differs, where its values alone say little (None:
        name both values)."""
        return None

    def _config(self) -> dict[str, Any]:
        """The settings the fingerprint covers (JSON-safe); needed for resume across a change."""
        raise NotImplementedError

    def _settings_record(self) -> dict[str, Any] | None:
        """What a state records of its settings (with ``"config"``: :meth:`_config`), so a
        resume under other settings can recompute what these delivered; None: this object
        cannot resume across a change of settings."""
        return None

    def _checked_settings(self, record: Any) -> str:
        """A recorded part's settings checked against this object (a ``ValueError`` for
        settings it cannot rebuild), as canonical JSON: what :attr:`_changes` holds."""
        raise NotImplementedError

    def _changeable(self) -> None:
        """Raise a ``ValueError`` if this object cannot resume across a change now (by default
        it never can: only samplers that record their settings resume across a change)."""
        raise ValueError(
            f"state does not fit: the settings differ, and a {type(self).__name__} does not "
            "resume across a change of settings (a "
            "whole-corpus PlanSampler or a MixtureSampler does): load it with the settings it "
            "was saved under"
        )

    def _total(self) -> int:
        """Batch slots of the current epoch (all ranks, before the tail policy)."""
        raise NotImplementedError

    def _batch_at(self, slot: int) -> Any:
        """The batch at global ``slot`` (``0 <= slot < _total()``) of the current epoch."""
        raise NotImplementedError

    def _slot_ids(
        self, positions: np.ndarray, history: tuple[tuple[int, int], ...], world: int
    ) -> np.ndarray | None:
        """Which batch each global position of the current epoch holds, as ids that name a
        batch whatever its position (int64, one per position), when the epoch had run its
        ``history`` parts and goes on at ``world``; None when the batch at a position does not
        depend on the world sizes (then a skip recorded by position names the same batches
        at any world size). Positions are below :meth:`_total`."""
        return None

    # whether a skip still ahead of a state's position can cross a change of settings (the
    # change leaves its batches' sequences out of the rest; see :meth:`_pending_skips`)
    _skips_cross_changes = False

    # ------------------------------------------------------------------ iteration
    def _next_start(self) -> int:
        """Global position the next iteration starts from."""
        if self._pending is not None:
            return self._pending
        return self._done_at if self._done_at is not None else 0

    def _begin_iteration(self) -> int:
        """Start an iteration at the loaded position (then forget it); return that position.

        An epoch that a loaded state finished stays finished until another epoch is set:
        torchdata's loader, given a state saved after its iterator ended, iterates the sampler
        once more at once, which must not repeat the epoch.
        """
        start = self._next_start()
        if (
            self._completed == self.epoch
            and self._epoch_given is None
            and self._pending is None
            and not self._warned_repeat
        ):
            self._warned_repeat = True
            warnings.warn(
                f"{type(self).__name__} starts epoch {self.epoch} again, with the same batches "
                "in the same order: call set_epoch(epoch) before each epoch (set_epoch with the "
                "same epoch repeats it on purpose; this warning comes once)",
                UserWarning,
                stacklevel=3,
            )
        self._completed = None
        if self._pending is not None:
            self._done_at = start if self._finished_at(start) else None
        self._pending = None
        self._epoch_given = None
        self._start = start
        self._yielded = 0
        self._iterating = True
        self._ahead = _workers_ahead()
        return start

    def _steps(self, total: int, start: int) -> int:
        """Steps (batches per rank) left from global position ``start`` of ``total`` slots."""
        return steps_left(total, start, self.world_size, self.drop_last)

    def _skip_ranges(self, start: int) -> list[tuple[int, int]]:
        """The recorded skips of the current epoch that reach past ``start``."""
        return [(lo, hi) for e, lo, hi in self._skips if e == self.epoch and hi > start]

    def _positions(self, total: int, start: int) -> tuple[np.ndarray | None, int]:
        """The global positions the steps from ``start`` take, ``world_size`` per step, and the
        number of steps; ``(None, steps)`` when no skip applies (position ``start + i·W + r``).

        With skips, the positions from ``start`` to ``total`` less the skipped ones are dealt to
        the steps in order (so every rank has the same steps, and a skip of any size at any
        world size leaves out exactly its batches); the tail policy then applies to what is
        left, a short last step completed by positions past ``total`` (the epoch's first
        batches again) unless ``drop_last``.
        """
        ranges = self._skip_ranges(start)
        if not ranges:
            return None, self._steps(total, start)
        world = self.world_size
        pos = np.arange(start, max(total, start), dtype=np.int64)
        keep = np.ones(pos.size, dtype=bool)
        for lo, hi in ranges:
            keep &= (pos < lo) | (pos >= hi)
        pos = pos[keep]
        n = int(pos.size)
        steps = n // world if self.drop_last else -(-n // world)
        if steps * world > n:
            pos = np.concatenate([pos, total + np.arange(steps * world - n, dtype=np.int64)])
        return pos[: steps * world], steps

    def _skipped_before(self, epoch: int, position: int) -> int:
        """Global positions of ``epoch`` below ``position`` that its recorded skips leave out
        (overlapping skips counted once)."""
        ranges = sorted((lo, min(hi, position)) for e, lo, hi in self._skips if e == epoch)
        out, reach = 0, 0
        for lo, hi in ranges:
            lo = max(lo, reach)
            if hi > lo:
                out += hi - lo
                reach = hi
        return out

    def _counted(self, total: int, position: int) -> int:
        """Global batches the current epoch (``total`` slots) yields before global ``position``
        (skipped ones not counted, the tail's repeats counted)."""
        return position - self._skipped_before(self.epoch, min(position, total))

    def _epoch_batches(self, epoch: int, total: int) -> int:
        """Global batches ``epoch`` (``total`` slots) yields from its start at this world size
        under the tail policy, its recorded skips left out."""
        kept = total - self._skipped_before(epoch, total)
        return self._steps(kept, 0) * self.world_size

    def _step_slots(self, total: int, start: int) -> np.ndarray:
        """The (steps, world_size) table of the global slots each step gives each rank."""
        pos, steps = self._positions(total, start)
        world = self.world_size
        if pos is None:
            pos = start + np.arange(steps * world, dtype=np.int64)
        repeats = self._repeats(total)
        slots = np.where(pos < total, pos, repeats[(pos - total) % max(repeats.size, 1)])
        return slots.reshape(steps, world)

    def _repeats(self, total: int) -> np.ndarray:
        """The slots the tail's repeats take, in turn: the epoch's first batches, those its
        recorded skips leave out passed over (a skipped batch is never trained, not even as a
        repeat); fewer than ``world_size`` are ever needed."""
        ranges = sorted((lo, hi) for e, lo, hi in self._skips if e == self.epoch)
        out: list[int] = []
        slot = 0
        for lo, hi in [*ranges, (total, total)]:
            out.extend(range(slot, min(lo, total, slot + self.world_size - len(out))))
            slot = max(slot, hi)
            if len(out) >= self.world_size or slot >= total:
                break
        return np.array(out or [0], dtype=np.int64)

    def _run(
        self,
        batch_at: Callable[..., Any],
        *,
        stepped: bool = False,
        positioned: bool = False,
        first: int = 0,
        every: int = 1,
    ) -> Iterator[Any]:
        """This rank's batches of the current epoch from the loaded position (skipped batches
        left out; a skip recorded while iterating applies to the steps not yet produced).

        With ``stepped``, ``batch_at(slot, step)`` also gets the step of the epoch the batch is
        in: the global batches counted before the step's first one (skipped ones left out),
        over ``world_size`` — the same on every rank. With ``positioned``,
        ``batch_at(slot, position)`` gets the batch's global position (past the epoch's
        batches for the tail's repeats).

        ``first`` and ``every``: only the steps ``first, first + every, ...`` of this iteration
        (counted from its start), the others passed over without calling ``batch_at`` (a
        DataLoader worker's share); the state then counts the steps up to the last one yielded.
        A skip recorded while such a share runs is refused (it would deal the steps anew).
        """
        total = self._total()
        start = self._begin_iteration()
        world, rank = self.world_size, self.rank
        self._step_end = []
        self._next_pos = start
        try:
            while True:
                seen = self._skips
                repeats: list[int] = []  # the tail's, under these skips
                base = self._next_pos
                pos, steps = self._positions(total, base)
                step0 = self._counted(total, base) // world if stepped else 0
                for i in range(first, steps, every):
                    if self._skips is not seen:
                        if (first, every) != (0, 1):
                            raise ValueError(
                                "skip() was called while a share of the steps (a DataLoader "
                                "worker's) was being yielded: skip before the iteration starts"
                            )
                        break  # a skip was recorded: deal the rest again
                    if pos is None:
                        p, end = base + i * world + rank, base + (i + 1) * world
                    else:
                        p, end = int(pos[i * world + rank]), int(pos[i * world + world - 1]) + 1
                    if p < total:
                        slot = p
                    else:  # the tail's repeats
                        repeats = repeats or self._repeats(total).tolist()
                        slot = repeats[(p - total) % len(repeats)]
                    if stepped:
                        batch = batch_at(slot, step0 + i)
                    elif positioned:
                        batch = batch_at(slot, p)
                    else:
                        batch = batch_at(slot)
                    self._next_pos = end
                    self._yielded += 1
                    self._step_end.append(end)
                    yield batch
                else:
                    if start == 0 and self._yielded and (first, every) == (0, 1):
                        # the whole epoch, from its start (not a DataLoader worker's share)
                        self._completed = self.epoch
                    return
        finally:
            self._iterating = False

    def __iter__(self) -> Iterator[Any]:
        return self._run(self._batch_at)

    def __len__(self) -> int:
        """Batches this rank yields in the next iteration of the current epoch (exact; skipped
        batches are not counted)."""
        return self._positions(self._total(), self._next_start())[1]

    def skip(self, batches: int | None = None, *, steps: tuple[int, int] | None = None) -> None:
        """Leave batches out of training: the next ``batches`` global batches, or ``steps``.

        ``batches``: the next global batches (over all ranks) from the current position: the
        next iteration's start, or while iterating the first step not yet produced.
        Skips name positions and do not add up: ``skip(2)`` twice at one position leaves out
        the same two batches (calling it again after a resume is harmless), ``skip(1)`` then
        ``skip(4)`` the next four.
        ``steps=(a, b)``: the steps ``a`` to ``b - 1`` of the current epoch, counted from its
        start at the current world size (global batches ``a · world_size`` to
        ``b · world_size - 1``).

        The skipped batches are never yielded and every other batch is, in its order: the plan
        does not change; the batches after a skip are dealt to the ranks in turn as before, so
        every rank keeps the same number of steps (``len()`` counts them without the skipped),
        whatever the skip's size and the world size; the tail's repeats pass over them. The
        skip is recorded in :meth:`state_dict` (``"skips"``: ``[epoch, first, end]`` global
        positions), so a run resumed from an earlier checkpoint skips them again when it gets
        there (the usual loss spike recovery: load the checkpoint before the spike, skip the
        batches around it). It names the batches at those positions: a resume at another world
        size that orders the rest anew moves it to where they are, and a resume across a change
        of settings leaves their sequences out of the re-planned rest (a mixture refuses that
        load, naming the skip).
        A skip made while a DataLoader iterates applies to the steps the sampler has not yet
        produced (a DataLoader may have fetched a few ahead).

        >>> from padless import TokenBudget, PlanSampler
        >>> s = PlanSampler([3, 5, 2, 7, 4, 4], TokenBudget(max_tokens=10), seed=0)
        >>> every = list(s)
        >>> s.skip(steps=(1, 3))
        >>> len(every), len(s), list(s) == [every[0], *every[3:]], s.state_dict()["skips"]
        (4, 2, True, [[0, 1, 3]])
        """
        n, pair = check_skip(batches, steps)
        world = self.world_size
        if pair is None:
            lo = self._next_pos if self._iterating else self._next_start()
            hi = lo + n
        else:
            lo, hi = pair[0] * world, pair[1] * world
        entry = (self.epoch, int(lo), int(hi))
        if entry not in self._skips:
            self._skips = (*self._skips, entry)

    @property
    def repeated(self) -> int:
        """Batch slots filled with repeats of the epoch's first batches (all ranks, this epoch,
        as it runs: from a loaded position at this world size, its skips left out)."""
        return self._tail()[0]

    @property
    def dropped(self) -> int:
        """Batches left out by ``drop_last=True`` (all ranks, this epoch, as it runs)."""
        return self._tail()[1]

    def _tail(self) -> tuple[int, int]:
        """``(repeated, dropped)`` of the current epoch: :func:`tail_counts` of the positions
        left from where its iteration starts (a loaded state's position, until the next epoch;
        skipped ones not counted), plus the repeats an earlier part at a wider world size
        already ran into."""
        total = self._total()
        start = self._start if self._pending is None else self._pending
        kept = max(total - start, 0) - (
            self._skipped_before(self.epoch, total) - self._skipped_before(self.epoch, start)
        )
        repeated, dropped = tail_counts(kept, self.world_size, self.drop_last)
        return repeated + max(start - total, 0), dropped

    def _end_position(self) -> int:
        """The global position after the last step the next iteration yields (its start when
        it yields none): a position at which the current epoch is finished."""
        start = self._next_start()
        pos, steps = self._positions(self._total(), start)
        if not steps:
            return start
        return start + steps * self.world_size if pos is None else int(pos[-1]) + 1

    def _finished_at(self, position: int) -> bool:
        """Whether an iteration of the current epoch from ``position`` yields nothing."""
        return self._positions(self._total(), position)[1] == 0

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration yields.

        A loaded state that has not been used yet keeps its position for its own epoch, and
        gives way to the next epoch when it is at its epoch's end. Any other epoch would skip
        the rest of the loaded epoch or repeat epochs: a ``ValueError`` (loop from
        ``sampler.epoch`` after loading). Without a loaded state, any epoch starts at 0.
        """
        epoch = check_seed("epoch", epoch)
        self._check_epoch(epoch)
        pending = self._pending
        if pending is not None and epoch != self.epoch:
            if not (epoch == self.epoch + 1 and self._finished_at(pending)):
                raise ValueError(
                    f"set_epoch({epoch}) after loading a state of epoch {self.epoch} at position "
                    f"{pending}, before it was used: that would "
                    f"{'skip the rest of' if epoch > self.epoch else 'repeat epochs before'} "
                    f"epoch {self.epoch}. Resume the loop at the loaded epoch (for epoch in "
                    "range(sampler.epoch, epochs), or the epoch saved with the state)"
                )
        self._epoch_given = epoch
        if epoch != self.epoch:
            self._done_at = None
            self._pending = None
            self._start = 0
            self._yielded = 0
            self._history = ()
            self._changes = ()
        self.epoch = epoch

    # ------------------------------------------------------------------ state
    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        """Return a tiny JSON-safe state from which ``load_state_dict`` resumes exactly.

        Args:
            consumed: batches the training loop has *received* from the current iteration. Pass
                it when a DataLoader prefetches (``padless.torch.StatefulLoader`` does it for
                you); by default the batches yielded so far are counted.

        ``position`` is global: batch slots consumed in this epoch over all ranks.
        """
        if self._pending is not None and not self._iterating:
            position = self._pending
        else:
            if consumed is None and self._iterating and self.__dict__.get("_ahead", 0):
                if self._epoch_given is None:  # (after set_epoch the state is its start)
                    warnings.warn(
                        f"{type(self).__name__}.state_dict() while a torch DataLoader with "
                        f"num_workers={self._ahead} iterates it: the loader draws batches ahead "
                        "of the loop (prefetch_factor per worker), so the position counts "
                        f"{self._yielded} batches handed to its workers, more than the loop "
                        "received, and a resume from it would skip the difference. Save the "
                        "loader's state instead: torchdata's StatefulDataLoader, "
                        "padless.torch.StatefulLoader(loader), or the padless HF Trainer or "
                        "Lightning integrations, which count what the loop received (or pass "
                        "consumed=)",
                        UserWarning,
                        stacklevel=2,
                    )
            count = self._yielded
            if consumed is not None:
                count = check_int("consumed", consumed, minimum=0) or 0
                if count > self._yielded:
                    raise ValueError(
                        f"consumed must be <= the {self._yielded} batches yielded so far, got {count}"
                    )
            # the position past the last batch's step (skipped batches before it included)
            if 0 < count <= len(self._step_end):
                position = self._step_end[count - 1]
            else:
                position = self._start + count * self.world_size
        state: dict[str, Any] = {
            "version": STATE_VERSION,
            "seed": self.seed,
            "epoch": self.epoch,
            "position": int(position),
            "world_size": self.world_size,
            "fingerprint": self._fingerprint_now(),
            "drop_last": self.drop_last,
        }
        if self._history:
            state["elastic"] = [list(part) for part in self._history]
        if self._skips:
            state["skips"] = [list(entry) for entry in self._skips]
        record = self._settings_record()
        if record is not None:
            state["settings"] = record
            if self._changes:
                state["changes"] = [change_record(c) for c in self._changes]
        return state

    # ------------------------------------------------------------------ changes of settings
    def _change_in(self, state: Any) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """For a state saved under other settings that may change during a run: the epoch's
        changes with the new one last, and the state as the resume goes on with it (this
        object's settings, world size and fingerprint). None when the settings are the same
        (the state's own changes, if any, are read by :meth:`_changes_of`), or when the state
        cannot say (the usual check then refuses it)."""
        if not isinstance(state, dict) or not isinstance(state.get("fingerprint"), str):
            return None
        saved = state["fingerprint"].split("-")
        own = self._settings_record()
        if len(saved) != 2 or "settings" not in state or own is None:
            now = self._fingerprint_now().split("-")
            if len(saved) == 2 and saved[0] == now[0] and saved[1] != now[1]:
                self._changeable()  # the same data under settings this one cannot change to
            return None
        config = own["config"]
        if saved[1] == settings_digest(config):
            return None
        record = state["settings"]
        if not (
            isinstance(record, dict)
            and isinstance(record.get("config"), dict)
            and settings_digest(record["config"]) == saved[1]
        ):
            raise ValueError(
                "state['settings'] does not match its fingerprint (edited, or from another "
                "padless): the settings it was saved under cannot be told"
            )
        self._changeable()
        old = record["config"]
        for name in self._fixed_settings:
            if old.get(name) != config.get(name):
                what = "strategy" if name == "class" else name
                differs = self._what_differs(name, old.get(name), config.get(name)) or (
                    f"it was saved with {what}={self._shown(name, old.get(name))!r:.80}, this "
                    f"{type(self).__name__} has {what}="
                    f"{self._shown(name, config.get(name))!r:.80}"
                )
                raise ValueError(
                    f"state does not fit: the settings differ in what a run cannot change: "
                    f"{differs} (a run can change {self._changeable_text})"
                )
        if state.get("seed") != self.seed:
            raise ValueError(
                f"state was saved with seed={state.get('seed')!r}, this {type(self).__name__} "
                f"has seed={self.seed} (a run cannot change its seed)"
            )
        if saved[0] != self._fingerprint_now().split("-")[0]:
            return None  # other data: the usual check says so
        skips, pending = self._pending_skips(state)
        changes = (*self._changes_of(state), self._change_of(state, record, pending))
        resumed = {k: v for k, v in state.items() if k not in ("elastic", "skips")}
        if skips:
            resumed["skips"] = [list(entry) for entry in skips]
        resumed["changes"] = [change_record(c) for c in changes]
        resumed["world_size"] = self.world_size
        resumed["fingerprint"] = f"{saved[0]}-{settings_digest(config)}"
        return changes, resumed

    def _pending_skips(
        self, state: Mapping[str, Any]
    ) -> tuple[tuple[tuple[int, int, int], ...], tuple[tuple[int, int], ...]]:
        """A state's skips split at its position, for a resume under other settings: those
        that stay (``[epoch, first, end]``, the parts before the position and other epochs'),
        and the ranges past the position (``(first, end)``, in the state's order), which a
        change of settings takes with it (:meth:`_change_of`) or refuses."""
        skips = _check_skips(state.get("skips", []))
        epoch, position = state.get("epoch"), state.get("position")
        if not isinstance(position, int) or isinstance(position, bool):
            return skips, ()
        stay = [entry for entry in skips if entry[0] != epoch or entry[2] <= position]
        ahead = []
        for e, lo, hi in skips:
            if e == epoch and hi > position:
                if lo < position:
                    stay.append((e, lo, position))
                ahead.append((max(lo, position), hi))
        if ahead and not self._skips_cross_changes:
            first, end = ahead[0]
            raise ValueError(
                f"state has a skip of global batches {first} to {end - 1} of epoch {epoch} "
                f"still ahead of its position {position}, and this {type(self).__name__} "
                "cannot take a skip across a change of settings (the batches it names are "
                "drawn again under the new settings): load it with the settings it was saved "
                "under and change them past the skip, or drop the skip from state['skips'] "
                "and skip again after loading"
            )
        return tuple(stay), tuple(sorted(ahead))

    def _change_of(
        self, entry: Mapping[str, Any], record: Any, skips: Any = None
    ) -> tuple[Any, ...]:
        """A change ``(position, settings, world_size, elastic, skips)`` from a state (or one of
        its ``changes`` entries): the part of the epoch before global ``position`` ran under
        ``record``'s settings (canonical JSON, checked) at ``world_size``, after the elastic
        parts ``elastic``; ``skips`` (``(first, end)`` global positions at or past
        ``position``, in that part's order) are batches of that part left out of training,
        which the rest of the epoch leaves out too (default: the entry's ``"skips"``)."""
        position, world = entry.get("position"), entry.get("world_size")
        for name, value, least in (("position", position, 0), ("world_size", world, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
                raise ValueError(
                    f"state[{name!r}] of a change must be an int >= {least}, got {value!r}"
                )
        settings = self._checked_settings(record)
        elastic = check_history(entry.get("elastic", []), position)
        if skips is None:
            skips = _check_ranges(entry.get("skips", []), "a change's skips", False)
            if any(lo < position for lo, _ in skips):
                raise ValueError(
                    f"state['changes'] has a skip before its change's position {position}: "
                    f"{entry.get('skips')!r:.80}"
                )
        return (int(cast(int, position)), settings, int(cast(int, world)), elastic, skips)

    def _changes_of(self, state: Any) -> tuple[Any, ...]:
        """The changes of settings a state records for its epoch (checked)."""
        if not isinstance(state, dict):
            return ()
        raw = state.get("changes", [])
        if not isinstance(raw, list):
            raise ValueError(f"state['changes'] must be a list, got {type(raw).__name__}")
        out = []
        reach = 0
        for entry in raw:
            if not isinstance(entry, dict) or "settings" not in entry:
                raise ValueError(
                    "state['changes'] must hold {position, settings, world_size, elastic[, "
                    f"skips]}} entries, got {entry!r:.80}"
                )
            change = self._change_of(entry, entry["settings"])
            if change[0] < reach:
                raise ValueError(
                    f"state['changes'] positions must not decrease, got {change[0]} after {reach}"
                )
            reach = change[0]
            out.append(change)
        position = state.get("position")
        if out and isinstance(position, int) and reach > position:
            raise ValueError(
                f"state['changes'] has a change at position {reach}, past the state's "
                f"position {position}"
            )
        return tuple(out)

    def _check_epoch(self, epoch: int) -> None:
        """Refuse an epoch this object cannot plan (a subclass's limit; none here)."""

    def _checked_state(self, state: Any) -> dict[str, Any]:
        """Check ``state`` against this object (fingerprint, seed, tail policy), changing nothing."""
        checked = check_state(
            state,
            expected_fingerprint=self._fingerprint_now(),
            what=f"state for this {type(self).__name__}",
        )
        if checked["seed"] != self.seed:
            raise ValueError(
                f"state was saved with seed={checked['seed']}, this {type(self).__name__} has "
                f"seed={self.seed}"
            )
        saved_drop = checked.get("drop_last", self.drop_last)
        if not isinstance(saved_drop, bool) or saved_drop != self.drop_last:
            raise ValueError(
                f"state was saved with drop_last={saved_drop!r}, this {type(self).__name__} has "
                f"drop_last={self.drop_last} (the tail policy decides which batches remain)"
            )
        self._check_epoch(checked["epoch"])
        checked["elastic"] = check_history(checked.get("elastic", []), checked.get("position"))
        checked["skips"] = _check_skips(checked.get("skips", []))
        return checked

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` at the next iteration: O(1), no replay; the input is not changed.

        The state may come from another world size (elastic resume). A position past the end
        of its epoch is refused.
        """
        checked = self._checked_state(state)
        history = checked["elastic"]
        saved_world, position = checked["world_size"], checked["position"]
        self._done_at = None
        given = self._epoch_given
        if given is not None and given != checked["epoch"]:
            self._load_at_given_epoch(checked, given)
            return
        if saved_world != self.world_size:
            history = (*history, (saved_world, position))
        previous = (self.epoch, self._history)
        self.epoch, self._history = checked["epoch"], history
        try:
            total = self._total()
        except Exception:
            self.epoch, self._history = previous
            raise
        # an earlier part of the epoch, at a wider world size, may have run into the repeats
        # (a part before a change of settings too: its world size is the change's record)
        widest = max(part_worlds(saved_world, checked["elastic"], self._changes))
        limit = position_limit(total, widest, self.drop_last)
        if position > limit:
            self.epoch, self._history = previous
            raise ValueError(
                f"state['position'] must be <= {limit}, the end of epoch {checked['epoch']} "
                f"({total} batches at world_size={widest}, drop_last={self.drop_last}), "
                f"got {position}"
            )
        skips = checked["skips"]
        if saved_world != self.world_size:
            try:
                skips = self._moved_skips(skips, position, total, checked["elastic"], saved_world)
            except Exception:
                self.epoch, self._history = previous
                raise
        self._pending = position
        self._start = position
        self._yielded = 0
        self._step_end = []
        # the state's skips, and any made here before the load
        self._skips = (*skips, *(e for e in self._skips if e not in skips))

    def _moved_skips(
        self,
        skips: tuple[tuple[int, int, int], ...],
        position: int,
        total: int,
        history: tuple[tuple[int, int], ...],
        world: int,
    ) -> tuple[tuple[int, int, int], ...]:
        """A state's ``skips`` in this object's order of the rest of the epoch.

        A skip names global positions in the order the state was saved in (its elastic parts
        ``history``, then ``world``). Where the order of what is left from ``position`` depends
        on the world size (balanced steps, weight schedules), the same positions hold other
        batches here: each skip past ``position`` is moved to the positions that hold its
        batches now (the part before ``position`` was delivered and keeps its positions, as
        do the tail's repeats past ``total``).

        Cost: the batch ids of the rest of the epoch in both orders (one order of the plan).
        """
        ranges = [(lo, hi) for e, lo, hi in skips if e == self.epoch and hi > position]
        ahead = np.zeros(0, dtype=np.int64)
        for lo, hi in ranges:
            ahead = np.union1d(ahead, np.arange(max(lo, position), min(hi, total)))
        if not ahead.size:
            return skips
        before = self._slot_ids(ahead, history, world)
        if before is None:
            return skips
        rest = np.arange(position, total, dtype=np.int64)
        now = self._slot_ids(rest, self._history, self.world_size)
        if now is None:
            return skips
        moved = rest[np.isin(now, before)]
        kept = [entry for entry in skips if entry[0] != self.epoch or entry[2] <= position]
        for lo, hi in ranges:
            if lo < position:
                kept.append((self.epoch, lo, position))
            if hi > total:
                kept.append((self.epoch, max(lo, total), hi))
        # the moved positions as ranges of consecutive positions
        cuts = np.flatnonzero(np.diff(moved) != 1) + 1
        for run in np.split(moved, cuts) if moved.size else []:
            kept.append((self.epoch, int(run[0]), int(run[-1]) + 1))
        return tuple(kept)

    def _load_at_given_epoch(self, checked: dict[str, Any], given: int) -> None:
        """Load a state of another epoch than ``set_epoch`` gave (torchdata's loader loads
        its state when iterated, after the loop's ``set_epoch``): a state at the end of the epoch
        before ``given`` continues with ``given`` at 0; any other would skip or repeat batches."""
        saved = checked["epoch"]
        if given == saved + 1:
            before = (self.epoch, self._pending, self._start, self._yielded, self._history)
            changes = self._changes
            probe = {k: v for k, v in checked.items() if k not in ("elastic", "skips")}
            if checked["elastic"]:
                probe["elastic"] = [list(part) for part in checked["elastic"]]
            if checked["skips"]:
                probe["skips"] = [list(entry) for entry in checked["skips"]]
            self._epoch_given = None
            try:
                self.load_state_dict(probe)  # checks the position against its own epoch
                done = self._finished_at(self._start)
            finally:
                self._epoch_given = given
            if done:  # the loaded epoch is over: the given one starts at 0
                self.epoch, self._pending, self._start, self._yielded = given, 0, 0, 0
                self._history, self._changes = (), ()
                return
            self.epoch, self._pending, self._start, self._yielded, self._history = before
            self._changes = changes
        raise ValueError(
            f"state is of epoch {saved} at position {checked['position']}, but set_epoch({given}) "
            f"was called before it was loaded: it would "
            f"{'skip the rest of' if given > saved else 'repeat epochs before'} epoch {saved}. "
            f"Save the epoch with the state and resume the loop from it (set_epoch({saved}))"
        )


def check_skip(batches: Any, steps: Any) -> tuple[int, tuple[int, int] | None]:
    """The arguments of a ``skip(batches=None, *, steps=None)`` checked: ``(n, None)`` for
    ``batches=n``, ``(0, (first, end))`` for ``steps=(first, end)`` (ints, ``0 <= first <
    end``); a ``TypeError`` or ``ValueError`` naming the parameter otherwise."""
    if (batches is None) == (steps is None):
        raise TypeError("skip takes batches (the next n batches) or steps=(a, b), one of them")
    if batches is not None:
        return check_int("batches", batches, minimum=1) or 0, None
    if not isinstance(steps, (tuple, list)) or len(steps) != 2:
        raise TypeError(f"steps must be a pair (first, end) of steps, got {steps!r:.60}")
    first = check_int("steps[0]", steps[0], minimum=0) or 0
    end = check_int("steps[1]", steps[1], minimum=0) or 0
    if end <= first:
        raise ValueError(f"steps must be (first, end) with first < end, got {steps!r}")
    return 0, (first, end)


def change_record(change: tuple[Any, ...]) -> dict[str, Any]:
    """A change of settings as a state holds it (JSON-safe)."""
    import json

    position, settings, world, elastic, skips = change
    record = {
        "position": position,
        "settings": json.loads(settings),
        "world_size": world,
        "elastic": [list(part) for part in elastic],
    }
    if skips:
        record["skips"] = [[lo, hi] for lo, hi in skips]
    return record


def part_worlds(world: Any, history: Any, changes: tuple[Any, ...]) -> set[Any]:
    """The world sizes the parts of an epoch ran at: ``world`` (the last part's), its elastic
    ``history`` (``(world_size, position)`` pairs) and each checked change's part and history
    (``(position, settings, world_size, elastic, skips)``)."""
    return {
        world,
        *(w for w, _ in history),
        *(c[2] for c in changes),
        *(w for c in changes for w, _ in c[3]),
    }


def check_history(value: Any, position: Any = None) -> tuple[tuple[int, int], ...]:
    """Check the ``elastic`` entry of a state: a list of ``[world_size, position]`` pairs whose
    positions never decrease and, given the state's ``position``, do not pass it (what any run
    writes: a part ends where the next began)."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(
            f"state['elastic'] must be a list of [world_size, position] pairs, got {value!r}"
        )
    out: list[tuple[int, int]] = []
    for part in value:
        ok = isinstance(part, (list, tuple)) and len(part) == 2
        ok = ok and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in part)
        if not ok or part[0] < 1 or part[1] < 0:
            raise ValueError(
                f"state['elastic'] must hold [world_size >= 1, position >= 0] pairs, got {part!r}"
            )
        if out and part[1] < out[-1][1]:
            raise ValueError(
                f"state['elastic'] positions must not decrease, got {int(part[1])} after "
                f"{out[-1][1]}"
            )
        out.append((int(part[0]), int(part[1])))
    if out and isinstance(position, (int, np.integer)) and out[-1][1] > position:
        raise ValueError(
            f"state['elastic'] has a part ending at position {out[-1][1]}, past the state's "
            f"position {int(position)}"
        )
    return tuple(out)


def _check_skips(value: Any) -> tuple[tuple[int, int, int], ...]:
    """Check the ``skips`` entry of a state: a list of ``[epoch, first, end]`` positions."""
    return cast("tuple[tuple[int, int, int], ...]", _check_ranges(value, "state['skips']", True))


def _check_ranges(value: Any, what: str, epochs: bool) -> tuple[tuple[int, ...], ...]:
    """Check a list of ``[epoch, first, end]`` (or, without ``epochs``, ``[first, end]``)
    global positions."""
    form = "[epoch, first, end]" if epochs else "[first, end]"
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{what} must be a list of {form}, got {value!r:.60}")
    out = []
    for entry in value:
        ok = isinstance(entry, (list, tuple)) and len(entry) == len(form.split(","))
        ok = ok and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in entry)
        if not ok or min(entry) < 0 or entry[-1] <= entry[-2]:
            rule = "epoch >= 0, first >= 0, end > first" if epochs else "first >= 0, end > first"
            raise ValueError(f"{what} must hold [{rule}] entries, got {entry!r:.60}")
        out.append(tuple(int(v) for v in entry))
    return tuple(out)
