"""padless: batch planning for variable-length sequences with as little padding as possible.

Names load on first use, so ``import padless`` (and ``padless --help``) stays fast and compiles
nothing.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "BatchPlan": "padless.core.plan",
    "PlanStats": "padless.core.plan",
    "lengths_of": "padless.io",
    "builtin_corpus": "padless.core.lengths",
    "durations": "padless.core.fields",
    "plan_token_budget": "padless.sampling.shortcuts",
    "TokenBudget": "padless.planners.budget",
    "ExactLength": "padless.planners.exact",
    "Buckets": "padless.planners.buckets",
    "Packing": "padless.planners.packing",
    "FixedShapes": "padless.planners.shapes",
    "Decomposition": "padless.planners.decomposition",
    "PiecePlan": "padless.core.plan",
    "shape_set": "padless.planners.shapes",
    "Spec": "padless.planners.spec",
    "Cost": "padless.core.cost",
    "MemoryModel": "padless.core.memory",
    "Mesh": "padless.core.mesh",
    "MeshCost": "padless.core.mesh",
    "place": "padless.planners.placement",
    "plan_placement": "padless.planners.placement",
    "simulate": "padless.planners.placement",
    "Placer": "padless.sampling.placed",
    "Schedule": "padless.core.schedules",
    "spec_from_dict": "padless.planners.spec",
    "spec_to_dict": "padless.planners.spec",
    "strategies": "padless.planners",
    "get_strategy": "padless.planners",
    "TokenBudgetSampler": "padless.sampling.shortcuts",
    "PlanSampler": "padless.sampling.sampler",
    "CheckedDataset": "padless.io.checked",
    "plan_exact_length": "padless.sampling.shortcuts",
    "ExactLengthSampler": "padless.sampling.shortcuts",
    "plan_buckets": "padless.sampling.shortcuts",
    "bucket_boundaries": "padless.planners.buckets",
    "bucket_boundaries_2d": "padless.planners.buckets",
    "BucketSampler": "padless.sampling.shortcuts",
    "LMStream": "padless.streams.lm",
    "StreamBatcher": "padless.streams",
    "plan_packing": "padless.sampling.shortcuts",
    "PackedPlan": "padless.core.plan",
    "PackingSampler": "padless.sampling.shortcuts",
    "PieceDataset": "padless.planners.packing",
    "plan_groups": "padless.planners.packing",
    "batch_loss_tokens": "padless.planners.packing",
    "shuffle_file": "padless.shuffle",
    "ShuffleResult": "padless.shuffle",
    "MixtureSampler": "padless.sampling.mixing",
    "zip_lengths": "padless.sampling.mixing",
    "ZippedLengths": "padless.sampling.mixing",
    "plan_windows": "padless.planners.windows",
    "IndexedDataset": "padless.io.indexed",
    "write_indexed": "padless.io.indexed",
    "RawTokens": "padless.io.tokens",
    "shuffle_indexed": "padless.shuffle._indexed",
    "ratio_filter": "padless.core.filters",
    "length_filter": "padless.core.filters",
    "plan_step": "padless.planners.step",
    "StepPlan": "padless.planners.step",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from .core.cost import Cost as Cost
    from .core.fields import durations as durations
    from .core.filters import length_filter as length_filter
    from .core.filters import ratio_filter as ratio_filter
    from .core.lengths import builtin_corpus as builtin_corpus
    from .core.memory import MemoryModel as MemoryModel
    from .core.mesh import Mesh as Mesh
    from .core.mesh import MeshCost as MeshCost
    from .core.plan import BatchPlan as BatchPlan
    from .core.plan import PackedPlan as PackedPlan
    from .core.plan import PiecePlan as PiecePlan
    from .core.plan import PlanStats as PlanStats
    from .core.schedules import Schedule as Schedule
    from .io import lengths_of as lengths_of
    from .io.indexed import IndexedDataset as IndexedDataset
    from .io.indexed import write_indexed as write_indexed
    from .io.tokens import RawTokens as RawTokens
    from .planners import get_strategy as get_strategy
    from .planners import strategies as strategies
    from .planners.buckets import Buckets as Buckets
    from .planners.buckets import bucket_boundaries as bucket_boundaries
    from .planners.buckets import bucket_boundaries_2d as bucket_boundaries_2d
    from .planners.budget import TokenBudget as TokenBudget
    from .planners.decomposition import Decomposition as Decomposition
    from .planners.exact import ExactLength as ExactLength
    from .planners.packing import Packing as Packing
    from .planners.packing import PieceDataset as PieceDataset
    from .planners.packing import batch_loss_tokens as batch_loss_tokens
    from .planners.packing import plan_groups as plan_groups
    from .planners.placement import place as place
    from .planners.placement import plan_placement as plan_placement
    from .planners.placement import simulate as simulate
    from .planners.shapes import FixedShapes as FixedShapes
    from .planners.shapes import shape_set as shape_set
    from .planners.spec import Spec as Spec
    from .planners.spec import spec_from_dict as spec_from_dict
    from .planners.spec import spec_to_dict as spec_to_dict
    from .planners.step import StepPlan as StepPlan
    from .planners.step import plan_step as plan_step
    from .planners.windows import plan_windows as plan_windows
    from .sampling.mixing import MixtureSampler as MixtureSampler
    from .sampling.mixing import ZippedLengths as ZippedLengths
    from .sampling.mixing import zip_lengths as zip_lengths
    from .sampling.placed import Placer as Placer
    from .sampling.sampler import PlanSampler as PlanSampler
    from .sampling.shortcuts import BucketSampler as BucketSampler
    from .sampling.shortcuts import ExactLengthSampler as ExactLengthSampler
    from .sampling.shortcuts import PackingSampler as PackingSampler
    from .sampling.shortcuts import TokenBudgetSampler as TokenBudgetSampler
    from .sampling.shortcuts import plan_buckets as plan_buckets
    from .sampling.shortcuts import plan_exact_length as plan_exact_length
    from .sampling.shortcuts import plan_packing as plan_packing
    from .sampling.shortcuts import plan_token_budget as plan_token_budget
    from .shuffle import ShuffleResult as ShuffleResult
    from .shuffle import shuffle_file as shuffle_file
    from .shuffle._indexed import shuffle_indexed as shuffle_indexed
    from .streams import StreamBatcher as StreamBatcher
    from .streams.lm import LMStream as LMStream


# submodules reached as attributes of a bare ``import padless``; each is imported (with its
# library: torch, transformers, lightning, ray, lhotse, grain, jax) only when first used
_SUBMODULES = frozenset(
    {
        "io",
        "core",
        "torch",
        "hf",
        "lightning",
        "ray",
        "lhotse",
        "grain",
        "jax",
    }
)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:  # padless.torch.scale_loss after a bare import padless
        return import_module(f"padless.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'padless' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
