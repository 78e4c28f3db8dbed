"""Every global batch of a sampler, placed on a mesh: :class:`Placer`.

:func:`padless.plan_placement` cuts an epoch into global batches itself (shuffled, fixed size).
A :class:`Placer` takes them from any padless sampler at ``world_size=1`` instead — a token
budget per step, buckets, a mixture of corpora with weights over time, a budget warm-up, a
batch-size ramp (``batches_per_step``), windowed or histogram plans — and places each on the
mesh with :func:`padless.place`. The sampler orders, remembers the position and skips; the
placer adds no state of its own (a placement is a pure function of the batch, the mesh and the
cost), so resume, skip and epochs are the sampler's, and an elastic resume is the same sampler
state placed on another mesh.

What cannot work is refused when the placer is built, naming both parts: a sampler sharded over
ranks (the mesh spreads the global batch), groups (a placement does not keep a group in one
micro-batch), a spec's ``context_parallel`` (the mesh decides each sequence's degree), batches of
pieces (split, truncated or warm-up codes: a placement holds whole sequences), language-model
streams, (N, F) lengths, a fixed ``micro_batches`` (each step's count is the fewest that hold
it), and a sequence that fits no rank group of the mesh.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..core._check import check_bool
from ..core.mesh import Mesh, MeshCost
from ..planners.placement import Placement, fitted_degrees, place

__all__ = ["Placer"]


def refuse_placements(source: Any, consumer: str) -> None:
    """A TypeError if ``source`` yields placements (a :class:`Placer`) where ``consumer`` takes
    batches of dataset indices; the message says what to use instead."""
    if getattr(source, "yields", None) != "placements":
        return
    raise TypeError(
        f"{consumer} takes batches of dataset indices, and a {type(source).__name__} yields a "
        "padless.Placement per optimizer step (micro-batches over a DP x CP x PP mesh): turn "
        "each placement into one rank's tensors with padless.torch.rank_batches(placement, "
        f"rank, dataset) in your own loop, or, for data parallelism alone, give {consumer} a "
        "sampler sharded over the ranks (PlanSampler(lengths, spec, world_size=..., rank=...))"
    )


def _sizes_of(sampler: Any) -> np.ndarray:
    """One length per item the sampler's batches index (a mixture's: its corpora's, in order)."""
    subs = getattr(sampler, "samplers", None)
    if isinstance(subs, dict) and hasattr(sampler, "names"):
        parts = [_sizes_of(subs[name]) for name in sampler.names]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    lengths = np.asarray(sampler.lengths)
    if lengths.ndim == 2 and lengths.shape[1] != 1:
        raise ValueError(
            f"Placer places one length per sequence, but the sampler's lengths have "
            f"{lengths.shape[1]} fields (shape {lengths.shape}); give the sampler (N,) lengths "
            "(a decoder-only sequence's tokens)"
        )
    return np.ascontiguousarray(lengths.reshape(-1), dtype=np.int64)


def _refusal(sampler: Any) -> str | None:
    """Why ``sampler``'s global batches cannot be placed, or None."""
    name = type(sampler).__name__
    if getattr(sampler, "yields", "indices") == "tokens":
        return (
            f"{name} yields language-model token windows, not sequences; place the documents "
            "with a PlanSampler over their lengths instead"
        )
    world = getattr(sampler, "world_size", None)
    if world != 1:
        return (
            f"Placer places global batches: build the {name} with world_size=1 (got "
            f"world_size={world}); the mesh spreads each batch over its dp·cp ranks"
        )
    subs = getattr(sampler, "samplers", None)
    parts = list(subs.values()) if isinstance(subs, dict) else [sampler]
    if any(getattr(s, "groups", None) is not None for s in parts):
        return (
            f"the {name} has groups=, but a placement does not keep a group's items in one "
            "micro-batch; place without groups, or use the sampler with collate_groups"
        )
    for spec in (s.spec for s in parts):
        if getattr(spec, "context_parallel", 1) != 1:
            return (
                f"{spec.describe()} has context_parallel={spec.context_parallel}, but with a "
                "Placer the mesh decides each sequence's context-parallel degree; leave "
                "context_parallel at 1 and set Mesh(cp=...)"
            )
    why = (
        sampler.needs_pieces()
        if isinstance(subs, dict)
        else sampler.spec.needs_pieces(sampler.sizes)
    )
    if why is not None:
        return (
            f"the {name}'s batches hold pieces of sequences ({why}), but a placement places "
            "whole sequences; use a strategy that keeps them whole (TokenBudget, ExactLength, "
            "Buckets, FixedShapes, or Packing with capacity >= the longest)"
        )
    return None


class Placer:
    """Each global batch ``sampler`` yields, placed on ``mesh`` (:func:`padless.place`).

    Args:
        sampler: a :class:`padless.PlanSampler` or :class:`padless.MixtureSampler` with
            ``world_size=1``: its batches are the global batches (with ``batches_per_step``,
            an optimizer step's batches together are one).
        mesh: a :class:`padless.Mesh` with ``micro_batches=None``.
        cost: the :class:`padless.MeshCost` placements are planned with.
        search: :func:`padless.place`'s ``search``.

    Iterating yields one :class:`padless.Placement` per optimizer step (its ``indices`` are the
    sampler's, every one once; ``rank_step(rank)`` is what a rank runs). ``len()``,
    :meth:`set_epoch`, :meth:`skip`, :meth:`state_dict` and :meth:`load_state_dict` are the
    sampler's: the position a state records is the steps placed so far. :meth:`on` is the same
    sampler placed on another mesh (an elastic resume: load the state, then place on).

    >>> import padless
    >>> from padless import Cost, Mesh, MeshCost
    >>> cost = MeshCost(forward=Cost(linear=1e-6), backward=Cost(linear=2e-6))
    >>> sampler = padless.PlanSampler([900, 40, 3000, 70, 2500, 600], padless.TokenBudget(
    ...     max_tokens=6000), seed=0)
    >>> placer = padless.Placer(sampler, Mesh(dp=2, cp=2, dynamic=True, max_tokens=2048), cost)
    >>> sorted(int(i) for p in placer for i in p.indices)
    [0, 1, 2, 3, 4, 5]
    """

    yields = "placements"
    """What iterating yields (index batches' consumers refuse a placer by it)."""

    def __init__(self, sampler: Any, mesh: Mesh, cost: MeshCost, *, search: bool = True) -> None:
        if not isinstance(mesh, Mesh):
            raise TypeError(f"mesh must be a padless.Mesh, got {type(mesh).__name__}")
        if not isinstance(cost, MeshCost):
            raise TypeError(f"cost must be a padless.MeshCost, got {type(cost).__name__}")
        if not all(hasattr(sampler, a) for a in ("state_dict", "load_state_dict", "world_size")):
            raise TypeError(
                "sampler must be a padless PlanSampler or MixtureSampler (world_size=1): "
                "batches of dataset indices over known lengths, which a placement needs; got "
                f"{type(sampler).__name__}"
            )
        self.search = check_bool("search", search)
        why = _refusal(sampler)
        if why is not None:
            raise ValueError(why)
        if mesh.micro_batches is not None:
            raise ValueError(
                f"Placer chooses each step's micro-batches (the fewest that hold it, at least "
                f"pp, a multiple of vpp), but the mesh fixes micro_batches={mesh.micro_batches}; "
                "use Mesh(micro_batches=None) with a sampler's batches"
            )
        self.sampler = sampler
        self.mesh = mesh
        self.cost = cost
        self.sizes = _sizes_of(sampler)
        try:
            fitted_degrees(self.sizes, mesh)
        except ValueError as err:
            raise ValueError(
                f"the {type(sampler).__name__}'s sequences must fit the mesh: {err}, or leave "
                "such sequences out of the sampler"
            ) from None
        self._steps = getattr(sampler, "batches_per_step", None) is not None

    def _batches(self) -> Iterator[np.ndarray]:
        if self._steps:
            for group in self.sampler.steps(self.sampler):
                yield np.concatenate([np.asarray(b, dtype=np.int64) for b in group])
        else:
            for batch in self.sampler:
                yield np.asarray(batch, dtype=np.int64)

    def __iter__(self) -> Iterator[Placement]:
        for idx in self._batches():
            yield place(self.sizes[idx], self.mesh, self.cost, indices=idx, search=self.search)

    def __len__(self) -> int:
        if self._steps:
            return int(self.sampler.optimizer_steps())
        return len(self.sampler)

    def set_epoch(self, epoch: int) -> None:
        """The sampler's :meth:`set_epoch`."""
        self.sampler.set_epoch(epoch)

    def skip(self, batches: int | None = None, *, steps: tuple[int, int] | None = None) -> None:
        """The sampler's ``skip`` (its global batches are the placer's steps, without
        ``batches_per_step``)."""
        self.sampler.skip(batches, steps=steps)

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state: the steps placed so far."""
        return dict(self.sampler.state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The sampler's ``load_state_dict`` (saved on this mesh or another)."""
        self.sampler.load_state_dict(state)

    def on(self, mesh: Mesh, cost: MeshCost | None = None) -> Placer:
        """The same sampler (and position) placed on ``mesh`` (and ``cost``)."""
        return Placer(self.sampler, mesh, self.cost if cost is None else cost, search=self.search)

    def __repr__(self) -> str:
        return f"Placer({type(self.sampler).__name__}, {self.mesh!r})"
