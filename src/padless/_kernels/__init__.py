"""Compiled hot loops, one module per family, each kernel with a plain reference beside it.

The kernels are C++17 in one extension module, ``padless._core`` (sources in ``csrc/``, one
header and source per family named as the modules here, bound with nanobind and built with the
package). Each module here wraps its family's kernels in plain typed functions of the same names
and holds their ``*_reference`` twins, written in plain Python/numpy: the tests prove they agree
on random inputs and near the int64 limits. Nothing compiles at run time; importing this package
loads the extension (a few milliseconds), which ``import padless`` does not do.

==============  ================================================================================
``rng``         splitmix64 streams, exact bounded draws (``random_below``), ``hash_ints``
``order``       ``counting_order`` (stable counting sort; ``_named``: of a named subset),
                ``shuffle_runs`` (tie-break shuffles)
``budget``      ``budget_ends``/``budget_ends_runs``/``budget_order``: fairseq's greedy rule
``segments``    ``segment_max``: per-batch figures of a plan; ``take_segments``, ``unnamed_segments``
``shapes``      ``shape_ends``, ``pick_shapes``, ``carry_cuts``, ``static_cuts``, ``polish_ends``
``exact``       ``exact_split``, ``capped_ends``, ``least_padding_ends``: exact-length batches
``buckets``     ``optimal_cuts``: bucket boundaries by dynamic programming
``packing``     ``best_fit_rows`` (64-ary bit tree), ``best_fit_pairs`` (two fields), ``scatter_rows``
``feistel``     ``feistel_permute`` and the LM-stream row gathers
``ingest``      ``eos_offsets``, ``gather_tokens``, ``segment_positions``: token stores
``collate``     ``next_fit_count``, ``packed_batch``, ``padded_batch``: batches from a store
``step``        ``step_fit``: least-cost placement under a token cap (the step planner)
==============  ================================================================================

Callers import from this package (``from padless import _kernels as K``), never from a family
module, so families can move without edits elsewhere.
"""

from . import cost as cost  # cost models: K.cost.budget_cost_ends, best_fit_rows_cost...
from . import ingest as ingest  # token stores: K.ingest.check_eos, TOKEN_DTYPES
from . import step as step  # the step planner: K.step.step_fit
from . import streams as streams  # stream rounds: K.streams.budget_round
from . import windows as windows  # windowed plans: K.windows.budget_window, pack_window_rows...
from .buckets import optimal_cuts, optimal_cuts_reference
from .budget import (
    budget_ends,
    budget_ends_reference,
    budget_ends_runs,
    budget_order,
    budget_order_reference,
    in_parts,
    narrow_sizes,
)
from .collate import (
    next_fit_count,
    next_fit_count_reference,
    packed_batch,
    packed_batch_reference,
    padded_batch,
    padded_batch_reference,
)
from .exact import (
    capped_ends,
    capped_ends_reference,
    exact_split,
    exact_split_reference,
    least_padding_ends,
    least_padding_ends_reference,
)
from .feistel import (
    FEISTEL_ROUNDS,
    feistel_permute,
    feistel_permute_reference,
    feistel_round_keys,
    lm_gather,
    lm_gather_reference,
    lm_random_batch,
    lm_random_batch_reference,
)
from .ingest import (
    eos_offsets,
    eos_offsets_reference,
    gather_tokens,
    gather_tokens_reference,
    segment_positions,
    segment_positions_reference,
)
from .order import (
    counting_order,
    counting_order_named,
    counting_order_named_reference,
    counting_order_reference,
    shuffle_runs,
    shuffle_runs_reference,
)
from .packing import (
    best_fit_pairs,
    best_fit_pairs_reference,
    best_fit_rows,
    best_fit_rows_reference,
    scatter_rows,
    scatter_rows_reference,
)
from .rng import SplitMix, hash_ints, hash_ints_reference, random_below, random_below_reference
from .segments import (
    offset_list,
    offset_list_reference,
    segment_max,
    segment_max_reference,
    take_segments,
    take_segments_reference,
    unnamed_segments,
    unnamed_segments_reference,
)
from .shapes import (
    carry_cuts,
    carry_cuts_reference,
    pick_shapes,
    pick_shapes_reference,
    polish_ends,
    polish_ends_reference,
    shape_ends,
    shape_ends_reference,
    shaped_cost,
    shaped_cost_reference,
    static_cuts,
    static_cuts_reference,
)

__all__ = [
    "FEISTEL_ROUNDS",
    "SplitMix",
    "best_fit_pairs",
    "best_fit_pairs_reference",
    "best_fit_rows",
    "best_fit_rows_reference",
    "budget_ends",
    "budget_ends_reference",
    "budget_ends_runs",
    "budget_order",
    "budget_order_reference",
    "in_parts",
    "narrow_sizes",
    "capped_ends",
    "capped_ends_reference",
    "carry_cuts",
    "carry_cuts_reference",
    "counting_order",
    "counting_order_named",
    "counting_order_named_reference",
    "counting_order_reference",
    "eos_offsets",
    "next_fit_count",
    "next_fit_count_reference",
    "packed_batch",
    "packed_batch_reference",
    "padded_batch",
    "padded_batch_reference",
    "eos_offsets_reference",
    "exact_split",
    "exact_split_reference",
    "feistel_permute",
    "feistel_permute_reference",
    "feistel_round_keys",
    "gather_tokens",
    "gather_tokens_reference",
    "hash_ints",
    "hash_ints_reference",
    "least_padding_ends",
    "least_padding_ends_reference",
    "lm_gather",
    "lm_gather_reference",
    "lm_random_batch",
    "lm_random_batch_reference",
    "optimal_cuts",
    "optimal_cuts_reference",
    "pick_shapes",
    "pick_shapes_reference",
    "polish_ends",
    "polish_ends_reference",
    "random_below",
    "random_below_reference",
    "scatter_rows",
    "scatter_rows_reference",
    "offset_list",
    "offset_list_reference",
    "segment_max",
    "segment_max_reference",
    "take_segments",
    "take_segments_reference",
    "unnamed_segments",
    "unnamed_segments_reference",
    "segment_positions",
    "segment_positions_reference",
    "shape_ends",
    "shape_ends_reference",
    "shaped_cost",
    "shaped_cost_reference",
    "shuffle_runs",
    "shuffle_runs_reference",
    "static_cuts",
    "static_cuts_reference",
]
