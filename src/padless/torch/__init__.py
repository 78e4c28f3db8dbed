"""PyTorch glue: collate functions, DataLoader helpers, stream loaders, loss and random state.

The only padless package that imports torch (``import padless`` does not). It only re-exports
its parts, each importing the ones below it and never this ``__init__``:

- ``_dist``: ``dist_kwargs`` (this process's place in torch.distributed);
- ``_rng``: ``StepRng``, ``get_rng_state``, ``set_rng_state`` (per-step random state);
- ``_packed_check``: ``check_packed`` (do packed documents stay apart in a model);
- ``_loss``: ``scale_loss`` (loss normalised over the global optimizer step);
- ``_collate``: ``collate_padded``, ``collate_packed`` and their picklable collate classes;
  ``zigzag_indices`` and ``join_cp_shares`` (context-parallel shares of packed rows);
- ``_flex``: ``flex_block_mask`` (a packed batch's block-diagonal, or shared-prefix, causal
  mask as a flex-attention ``BlockMask``: O(T) tensors, no T×T one), ``block_mask_nbytes``;
- ``_pairs``: ``collate_packed_pairs`` (packed rows of (source, target) pairs, a row per
  field, for ``Packing(capacity=(C_src, C_tgt))``);
- ``_groups``: ``collate_groups`` (groups kept whole, a shared prompt once per group, for
  ``padless.plan_groups``), ``completion_logprobs``, ``check_prefix_packed``, ``dpo_loss``,
  ``PreferencePairs``;
- ``_loaders``: ``StatefulLoader``, ``lm_tensors``, ``mixture_dataset`` / ``MixtureDataset``;
- ``_lm``: ``LMDataset`` (an ``LMStream`` through a DataLoader with workers, resumable);
- ``_streams``: ``StreamDataset``, ``stop_together`` and the stream collate;
- ``_collate_for``: ``collate_for``, the collate of any sampler, spec or stream;
- ``_tokens``: ``TokenDataset`` (planned batches gathered from a memory-mapped token file);
- ``_probe``: ``probe_memory``, ``measure_peak``, ``MemoryProbe`` (a step's peak memory per
  batch shape, fitted to a ``padless.MemoryModel``);
- ``_rollout``: ``split_rollout`` (a rollout batch into a rank's packed micro-batches of a
  ``padless.plan_step`` plan).
- ``_placed``: ``collate_segment``, ``rank_batches`` (a placed step's tensors: each rank's
  zigzag share of its CP groups' rows, for ``padless.place`` and ``padless.Placer``).
- ``_timing``: ``calibrate_cost``, ``time_passes``, ``Calibration`` (forward and backward
  seconds per length, fitted to a ``padless.MeshCost``).
"""

from __future__ import annotations

from ._collate import PackedCollate as PackedCollate
from ._collate import PaddedCollate as PaddedCollate
from ._collate import collate_packed as collate_packed
from ._collate import collate_padded as collate_padded
from ._collate import join_cp_shares as join_cp_shares
from ._collate import zigzag_indices as zigzag_indices
from ._collate_for import collate_for as collate_for
from ._dist import dist_kwargs as dist_kwargs
from ._flex import block_mask_nbytes as block_mask_nbytes
from ._flex import flex_block_mask as flex_block_mask
from ._groups import GroupCollate as GroupCollate
from ._groups import PreferencePairs as PreferencePairs
from ._groups import check_prefix_packed as check_prefix_packed
from ._groups import collate_groups as collate_groups
from ._groups import completion_logprobs as completion_logprobs
from ._groups import dpo_loss as dpo_loss
from ._lm import LMDataset as LMDataset
from ._loaders import MixtureDataset as MixtureDataset
from ._loaders import StatefulLoader as StatefulLoader
from ._loaders import lm_tensors as lm_tensors
from ._loaders import mixture_dataset as mixture_dataset
from ._loss import scale_loss as scale_loss
from ._packed_check import check_packed as check_packed
from ._pairs import PackedPairsCollate as PackedPairsCollate
from ._pairs import collate_packed_pairs as collate_packed_pairs
from ._placed import collate_segment as collate_segment
from ._placed import rank_batches as rank_batches
from ._probe import MemoryProbe as MemoryProbe
from ._probe import measure_peak as measure_peak
from ._probe import probe_memory as probe_memory
from ._rng import StepRng as StepRng
from ._rng import get_rng_state as get_rng_state
from ._rng import set_rng_state as set_rng_state
from ._rollout import split_rollout as split_rollout
from ._streams import StreamDataset as StreamDataset
from ._streams import stop_together as stop_together
from ._timing import Calibration as Calibration
from ._timing import calibrate_cost as calibrate_cost
from ._timing import time_passes as time_passes
from ._tokens import TokenDataset as TokenDataset

__all__ = [
    "GroupCollate",
    "Calibration",
    "LMDataset",
    "MemoryProbe",
    "PackedCollate",
    "PackedPairsCollate",
    "PaddedCollate",
    "PreferencePairs",
    "StatefulLoader",
    "StepRng",
    "StreamDataset",
    "TokenDataset",
    "calibrate_cost",
    "check_packed",
    "check_prefix_packed",
    "collate_groups",
    "completion_logprobs",
    "dpo_loss",
    "collate_for",
    "collate_packed",
    "collate_segment",
    "collate_packed_pairs",
    "collate_padded",
    "dist_kwargs",
    "block_mask_nbytes",
    "flex_block_mask",
    "get_rng_state",
    "join_cp_shares",
    "lm_tensors",
    "measure_peak",
    "MixtureDataset",
    "mixture_dataset",
    "probe_memory",
    "rank_batches",
    "scale_loss",
    "set_rng_state",
    "split_rollout",
    "stop_together",
    "time_passes",
    "zigzag_indices",
]
