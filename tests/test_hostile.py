"""Hostile values into every public entry: a clear error naming the parameter, or a right answer.

Issues 13 and 24: never a crash, a hang, a wrap-around or a silent wrong answer. Each entry is
called with valid arguments except one, which takes each hostile value in turn. A ``ValueError``
or ``TypeError`` must name that parameter; any other exception fails; a result must be valid (a
plan: every planned index in range, each at most once; a sampler, stream or iterator: consumed
without error; an entry's own check where it has one). Errors must come up front: one raised
while a result is consumed fails too.

Each validation is attacked once, where it lives: a spec's settings through the spec class (which
then plans, so refusals that need the lengths are met too); ``PlanSampler``'s own keywords
through ``PlanSampler``; a ``plan_*`` function, keyword sampler or other wrapper only on what it
checks itself, plus one setting it forwards (proof that a bad one still gets its owner's error).

Every public callable of the modules in ``MODULES`` is either an entry here or listed, with its
reason, in ``NOT_ATTACKED``; a new public callable fails ``test_every_public_entry_is_attacked``
until it is added to one of them. Entries whose module needs a running Ray (``RAY_ENTRIES``) are
attacked by tests/test_ray.py under its Ray fixture.

Token files that lie (an index that fits neither layout, lengths outside the ``.bin``) and files
that change under a reader (a stale offsets cache, a file cut while mapped) are attacked at the
end, through every reader that takes them (issue 39).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import os
import shutil
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import padless
import padless.core.cost
import padless.core.filters
import padless.core.memory
import padless.grain
import padless.hf
import padless.io
import padless.io.checked
import padless.io.readers
import padless.io.tokens
import padless.jax
import padless.lhotse
import padless.lightning
import padless.planners.windows
import padless.ray
import padless.sampling.mixing
import padless.streams.lm
import padless.torch
from padless.sampling.mixing import MixtureSampler

L = np.random.default_rng(0).integers(1, 60, 200)
PAIRS = np.stack([L * 10, L // 2], axis=1)  # [duration ticks, tokens]
# cuts as lhotse's have them (a duration and supervisions with text), without lhotse's classes
CUTS = [
    types.SimpleNamespace(
        id=f"c{i}",
        duration=float(k) / 10,
        supervisions=[types.SimpleNamespace(text="ab " * int(k))],
    )
    for i, k in enumerate(L[:30])
]

# padless.grain's records (token arrays of the lengths L) and a Grain shard
RECORDS = [np.arange(n, dtype=np.int32) for n in L]
SHARD = padless.grain.grain.sharding.ShardOptions(shard_index=0, shard_count=2)

HOSTILE = [
    None,
    -1,
    0,
    2**31,
    2**62 + 1,
    2**63,
    2**70,
    -(2**70),
    1e300,
    math.nan,
    math.inf,
    -math.inf,
    1.5,
    True,
    "4096",
    b"x",
    [1, 2],
    np.array([[1]]),
    {},
    object(),
    np.int64(-5),
    np.uint64(2**64 - 1),
]

# The modules whose public callables must all be attacked (or excused below).
MODULES = [
    "padless",
    "padless.torch",
    "padless.planners.windows",
    "padless.core.cost",
    "padless.core.memory",
    "padless.streams.lm",
    "padless.sampling.mixing",
    "padless.io.readers",
    "padless.hf",
    "padless.lightning",
    "padless.ray",
    "padless.io.checked",
    "padless.core.filters",
    "padless.lhotse",
    "padless.grain",
    "padless.jax",
]

# Public callables deliberately not attacked here, each with its reason.
NOT_ATTACKED = {
    # records padless returns (frozen dataclasses built by padless itself, not by users)
    "padless.PlanStats": "a result record, built by BatchPlan.stats",
    "padless.ShuffleResult": "a result record, returned by shuffle_file",
    "padless.ZippedLengths": "a result record, returned by zip_lengths (attacked)",
    "padless.torch.MemoryProbe": "a result record, returned by probe_memory (attacked)",
    "padless.torch.MixtureDataset": "built by mixture_dataset (attacked) from checked parts",
    "padless.sampling.mixing.ZippedLengths": "the same record, at home",
    "padless.sampling.mixing.MixtureSchedule": "a result record, built by MixtureSampler",
    "padless.StepPlan": "a result record, returned by plan_step (attacked)",
    "padless.torch.Calibration": "a result record, returned by calibrate_cost",
    # timing harnesses: they run the user's own forward on batches of the user's own lengths
    # (a hostile length is a real allocation); their checks: tests/test_calibrate.py
    "padless.torch.calibrate_cost": "times the user's forward on lengths it is given",
    "padless.torch.time_passes": "times the user's forward on a batch it is given",
    "padless.Spec": "the abstract base of the specs; each concrete spec is attacked",
    "padless.Schedule": "built only by its constructors (Schedule.linear & co., attacked)",
    "padless.io.readers.MissingDependency": "an exception class",
    "padless.core.filters.Filtered": "a result record, returned by ratio_filter and length_filter",
    # no parameters to attack
    "padless.strategies": "takes no arguments",
    "padless.torch.dist_kwargs": "takes no arguments",
    "padless.lightning.ExactResume": "takes no arguments (a Lightning callback)",
    "padless.torch.get_rng_state": "takes no arguments",
    "padless.torch.StepRng": "takes no arguments (its load_state_dict is attacked)",
    "padless.lightning.CheckPacked": "a Lightning callback (loading it imports Lightning, ~3 s): "
    "tests/test_lightning.py checks its model=",
    # covered where their collaborators exist
    "padless.torch.completion_logprobs": "takes a model's logits and a collate_groups batch: "
    "tests/test_prefix_packing.py",
    "padless.torch.check_prefix_packed": "takes a model: tests/test_prefix_packing.py",
    "padless.torch.block_mask_nbytes": "takes a BlockMask built by flex_block_mask: "
    "tests/test_flex_mask.py",
    "padless.torch.dpo_loss": "takes log-prob tensors of a collate_groups batch: "
    "tests/test_trl_dpo.py",
    "padless.torch.PreferencePairs": "takes preference rows (checked by field): "
    "tests/test_trl_dpo.py",
    "padless.hf.PadlessTrainerMixin": "needs a transformers Trainer: tests/test_hf.py attacks it",
    "padless.hf.PackedDPOMixin": "needs TRL's DPOTrainer: tests/test_trl_dpo.py refuses its "
    "settings",
    "padless.hf.PackedGRPOMixin": "needs TRL's GRPOTrainer or RLOOTrainer: tests/test_trl_grpo.py "
    "refuses its settings",
}


def _valid_plan(out: Any, n: int | None = None) -> None:
    idx = np.asarray(out.indices)
    if n is not None:
        assert idx.size == 0 or (idx.min() >= 0 and idx.max() < n)
    if isinstance(out, padless.PiecePlan):  # each piece at most once: (index, start) pairs
        assert np.unique(np.stack([idx, out.piece_start]), axis=1).shape[1] == idx.size
    else:
        assert np.unique(idx).size == idx.size
    assert out.offsets[0] == 0 and out.offsets[-1] == idx.size


def _check_result(out: Any) -> Any:
    if isinstance(out, padless.BatchPlan):
        _valid_plan(out, L.shape[0])
    elif hasattr(out, "state_dict") and hasattr(out, "__iter__"):
        size = len(out) if hasattr(out, "__len__") else None
        if size is not None and size > 10_000:  # a valid, huge setting: its first batches
            assert [b for _, b in zip(range(5), out, strict=False)]
        else:
            batches = list(out)
            assert size is None or len(batches) == size or size == 0
    elif isinstance(out, (Iterator, types.GeneratorType)):
        for _, item in zip(range(50), out, strict=False):  # errors must not wait for use
            if isinstance(item, padless.BatchPlan):
                _valid_plan(item, L.shape[0])
    return out


STEP = padless.plan_step(L[:12], world_size=2, max_tokens=200)
MESH = padless.Mesh(dp=2, cp=2, dynamic=True, max_tokens=256)
MESH_COST = padless.MeshCost(forward=padless.Cost(linear=1e-6), backward=padless.Cost(linear=2e-6))
PLACED = padless.place(L[:40], MESH, MESH_COST)


def _step_plan_ok(out: Any) -> None:
    """A step plan: every sequence once (of ``L``, or of a hostile list of lengths), no
    micro-batch over its cap."""
    assert sorted(out.indices.tolist()) == list(range(out.indices.size))
    assert out.indices.size in (L.shape[0], 2)
    assert int(out.tokens.max()) <= out.max_tokens


def _probability(out: float) -> None:
    assert isinstance(out, float) and 0.0 <= out <= 1.0


def _probabilities(out: np.ndarray) -> None:
    assert np.all(np.isfinite(out)) and np.all(out >= 0) and abs(out.sum() - 1.0) < 1e-9


def _finite(out: Any) -> None:
    assert np.all(np.isfinite(np.asarray(out, dtype=np.float64))), out


def _lengths(out: np.ndarray) -> None:
    assert out.dtype.kind in "iu" and (out.size == 0 or int(out.min()) >= 0)


def _collate_on(batch: list[Any]) -> Callable[[Any], None]:
    """A collate must also collate a small batch: a setting refused only at call time fails."""

    def check(out: Any) -> None:
        out(batch)

    return check


def _indices_ok(out: Any) -> None:
    """Rank indices of a zigzag share: a permutation's part, in range, no repeats."""
    assert isinstance(out, torch.Tensor) and out.ndim == 1
    assert out.unique().numel() == out.numel() and (out >= 0).all()


CP_SHARES = [
    padless.torch.collate_packed(8, context_parallel=2, cp_rank=r)([[1, 2, 3, 4, 5], [6, 7]])
    for r in range(2)
]


def _joined_ok(out: Any) -> None:
    assert out["input_ids"].tolist() == [[1, 2, 3, 4, 5, 0, 0, 0], [6, 7, 0, 0, 0, 0, 0, 0]]


SAMPLER = padless.TokenBudgetSampler(L, max_tokens=200)
PLAN = padless.plan_packing(L, capacity=128)
DPLAN = padless.Decomposition(tokens_per_batch=256, max_length=32, min_length=4).plan(L)
DOCS = [list(range(1, 1 + int(k))) for k in L[:12]]
ROWS = [{"input_ids": d} for d in DOCS]
LAYOUT = padless.planners.windows.WindowLayout(1000, 100)
COST = padless.Cost(quadratic=0.01)
SCHEDULE = padless.Schedule.linear(8, 64, steps=10, multiple_of=8)
MEMORY = padless.MemoryModel(fixed=1000.0, per_sequence=10.0, linear=(4.0,), quadratic=(0.5,))
MEMORY_POINTS = [(b, (n,), int(MEMORY.predict(b, n))) for b in (1, 2, 4) for n in (8, 16, 32)]


def _memory_ok(out: padless.MemoryModel) -> None:
    """A memory model that took a hostile setting predicts finite bytes and reads back."""
    _finite(out.predict(2, (10,) * out.fields))
    assert padless.MemoryModel.from_dict(out.as_dict()) == out


def _grow(size: int, length: int) -> np.ndarray:
    """A batch of 16 KiB per sequence and token (counted as the step's: made inside the probe)."""
    return np.ones(size * length * 2048)


def _schedule(out: padless.Schedule) -> None:
    """A schedule that took a hostile setting: finite values, and its dict reads back."""
    _finite(out.values(np.arange(30)))
    assert padless.Schedule.from_dict(out.as_dict()) == out


TABLE = pa.table({"ids": DOCS})


@functools.cache
def _tiny_model() -> Any:
    """A one-layer Llama of a few thousand weights that keeps packed documents apart."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, use_cache=False,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


def _files(tmp: Path) -> dict[str, Path]:
    text = tmp / "corpus.txt"
    text.write_text("".join("a " * int(k) + "\n" for k in L[:20]))
    records = tmp / "records.bin"
    records.write_bytes(bytes(range(64)) * 4)
    arrow = tmp / "docs.arrow"
    with pa.ipc.new_file(arrow, TABLE.schema) as writer:
        writer.write_table(TABLE)
    indexed = tmp / "corpus_text_document"
    padless.write_indexed(DOCS, indexed, dtype=np.uint16)
    memory = tmp / "memory.json"
    MEMORY.save(memory)
    raw = tmp / "raw.bin"
    np.concatenate([[*d, 0] for d in DOCS]).astype(np.uint16).tofile(raw)
    manifest = tmp / "cuts.jsonl"
    manifest.write_text(
        "".join(
            f'{{"id": "{c.id}", "duration": {c.duration}, "supervisions": [{{"text": "ab"}}]}}\n'
            for c in CUTS
        )
    )
    return {
        "manifest": manifest,
        "text": text,
        "records": records,
        "dst": tmp / "shuffled.bin",
        "arrow": arrow,
        "indexed": indexed,
        "raw": raw,
        "memory": memory,
    }


def _serves(out: Any) -> None:
    """A token dataset serves a batch (its settings are met at its first batch too)."""
    out.__getitems__([0, 1])


# entry (a callable), its label, valid keyword arguments (or a function of the tmp files giving
# them), the parameters to attack (a name, or (name, the name its messages use)), and a check of
# a result (or None: the generic checks above)
Entry = tuple[Any, str, Any, list[str], Callable[[Any], None] | None]

ENTRIES: list[Entry] = [
    # ------------------------------------------------------------------ padless
    (
        padless.plan_token_budget,
        "plan_token_budget",
        {"lengths": L, "max_tokens": 200},
        ["seed", "epoch", "order", "max_tokens"],
        None,
    ),
    (
        padless.plan_exact_length,
        "plan_exact_length",
        {"lengths": L, "batch_size": 4},
        ["seed", "epoch", "batch_size"],
        None,
    ),
    (
        padless.plan_buckets,
        "plan_buckets",
        {"lengths": L, "num_buckets": 3, "max_tokens": 300},
        ["seed", "epoch", "num_buckets"],
        None,
    ),
    (
        padless.plan_packing,
        "plan_packing",
        {"lengths": L, "capacity": 128},
        ["seed", "epoch", "capacity"],
        None,
    ),
    (
        padless.plan_groups,
        "plan_groups",
        {"lengths": L, "groups": np.arange(L.shape[0]) // 2, "capacity": 1 << 12},
        ["seed", "epoch", "capacity", "rows_per_batch", "oversize", "search"],
        None,
    ),
    (
        padless.batch_loss_tokens,
        "batch_loss_tokens",
        {"plan": PLAN, "lengths": L},
        ["prefix"],
        None,
    ),
    (
        padless.TokenBudgetSampler,
        "TokenBudgetSampler",
        {"lengths": L, "max_tokens": 200},
        ["max_tokens", "window"],
        None,
    ),
    (
        padless.PackingSampler,
        "PackingSampler",
        {"lengths": L, "capacity": 128},
        ["capacity", "balance"],
        None,
    ),
    (
        padless.BucketSampler,
        "BucketSampler",
        {"lengths": L, "num_buckets": 2, "batch_size": 8},
        ["num_buckets", "seed"],
        None,
    ),
    (
        padless.ExactLengthSampler,
        "ExactLengthSampler",
        {"lengths": L, "max_tokens": 100},
        ["max_tokens", "world_size"],
        None,
    ),
    (
        padless.PlanSampler,
        "PlanSampler",
        {"lengths": L, "spec": padless.TokenBudget(max_tokens=200)},
        ["spec", "seed", "world_size", "rank", "shuffle", "drop_last", "balance", "window"]
        + ["batches_per_step", "tokens_per_step", "groups"],
        None,
    ),
    (SAMPLER.checked, "PlanSampler.checked", {"dataset": [[1]] * 200}, ["dataset", "field"], None),
    (
        padless.TokenBudgetSampler(L, max_tokens=200).skip,
        "PlanSampler.skip",
        {"batches": 2},
        ["batches"],
        None,
    ),
    (
        padless.TokenBudgetSampler(L, max_tokens=200).skip,
        "PlanSampler.skip/steps",
        {"steps": (1, 3)},
        ["steps"],
        None,
    ),
    (
        padless.TokenBudgetSampler(L, max_tokens=200).set_epoch,
        "PlanSampler.set_epoch",
        {"epoch": 1},
        ["epoch"],
        None,
    ),
    (
        padless.LMStream,
        "LMStream",
        {"tokens": np.arange(1000), "batch_size": 2, "num_steps": 8},
        ["batch_size", "num_steps", "mode", "seed", "rank", "world_size", "out_dtype", "dtype"]
        + ["tokens", "drop_last", "tokens_per_batch"],
        None,
    ),
    (padless.bucket_boundaries, "bucket_boundaries", {"lengths": L, "k": 3}, ["k", "method"], None),
    (
        padless.bucket_boundaries_2d,
        "bucket_boundaries_2d",
        {"lengths": np.stack([L, L[::-1]], axis=1), "num_buckets": (3, 2)},
        ["lengths", "num_buckets", "method"],
        None,
    ),
    (
        padless.TokenBudget,
        "TokenBudget",
        {"max_tokens": 200},
        ["max_tokens", "max_sentences", "multiple_of", "oversize", "cost", "max_cost"]
        + ["pad_to_multiple_of", "resolution", "sort"],
        None,
    ),
    (
        padless.TokenBudget,
        "TokenBudget per field",  # planned on (N, 2) lengths: field 0 in ticks of 10 ms
        {"max_tokens": (2.0, 300), "resolution": (0.01, None), "cost": (padless.Cost(), None)},
        ["max_tokens", "resolution", "cost", "max_cost", "oversize"],
        None,
    ),
    (padless.durations, "durations", {"seconds": [1.0, 2.5]}, ["seconds", "resolution"], None),
    (
        padless.ExactLength,
        "ExactLength",
        {"batch_size": 4},
        ["batch_size", "max_tokens", "batch_sizes", "max_length", "include_partial", "leftovers"]
        + ["multiple_of", "cost", "max_cost", "pad_to_multiple_of", "oversize"],
        None,
    ),
    (
        padless.ExactLength,
        "ExactLength/budget",
        {"max_tokens": 100},
        ["max_tokens", "max_length"],
        None,
    ),
    (
        padless.Buckets,
        "Buckets",
        {"boundaries": [10, 30], "max_tokens": 300},
        ["boundaries", "max_tokens", "batch_size", "multiple_of", "cost", "max_cost"]
        + ["pad_to_multiple_of", "oversize", "resolution"],
        None,
    ),
    (
        padless.Buckets,
        "Buckets/table",
        {"boundaries": [10, 30], "batch_sizes": [4, 4, 4]},
        ["batch_sizes", "boundaries", "multiple_of"],
        None,
    ),
    (
        padless.Buckets,
        "Buckets/2-D",  # on (N, 2) lengths (field 0 in ticks of 10 ms): field 0, then field 1
        {"num_buckets": (3, 2), "max_tokens": (3.0, 200), "resolution": (0.01, None)},
        ["num_buckets", "max_tokens", "resolution", "max_cost", "oversize", "batch_size"],
        None,
    ),
    (
        padless.Buckets,
        "Buckets/fitted",
        {"num_buckets": 3, "batch_size": 8},
        ["num_buckets", "batch_size"],
        None,
    ),
    (
        padless.Packing,
        "Packing",
        {"capacity": 128},
        ["capacity", "max_per_row", "rows_per_batch", "oversize", "cost", "max_row_cost"]
        + ["context_parallel"],
        None,
    ),
    (
        padless.FixedShapes,
        "FixedShapes",
        {"shapes": [(4, 64), (2, 128)]},
        ["shapes", "pad_batches", "oversize"],
        None,
    ),
    (
        padless.Decomposition,
        "Decomposition",
        {"tokens_per_batch": 1024, "max_length": 64, "min_length": 16},
        [
            "tokens_per_batch",
            "max_length",
            "min_length",
            "curriculum",
            "cycles",
            "keep_short",
            "leftovers",
        ],
        None,
    ),  # fmt: skip
    (
        padless.PiecePlan,
        "PiecePlan",
        {
            "indices": DPLAN.indices,
            "offsets": DPLAN.offsets,
            "piece_start": DPLAN.piece_start,
            "piece_stop": DPLAN.piece_stop,
            "num_sequences": DPLAN.num_sequences,
        },
        ["indices", "offsets", "piece_start", "piece_stop", "num_sequences", "skipped", "info"],
        lambda p: _valid_plan(p, L.shape[0]),
    ),
    (
        padless.Cost,
        "Cost",
        {"linear": 1.0},
        ["linear", "quadratic", "per_sequence"],
        lambda c: _finite(c.of([1, 2])),
    ),
    (
        padless.Schedule.constant,
        "Schedule.constant",
        {"value": 8},
        ["value", "integer", "multiple_of"],
        _schedule,
    ),
    (
        padless.Schedule.piecewise,
        "Schedule.piecewise",
        {"steps": [0, 10], "values": [8, 16]},
        ["steps", "values", "integer", "multiple_of"],
        _schedule,
    ),
    (
        padless.Schedule.linear,
        "Schedule.linear",
        {"start": 8, "end": 64, "steps": 10},
        ["start", "end", "steps", "begin", "integer", "multiple_of"],
        _schedule,
    ),
    (
        padless.Schedule.cosine,
        "Schedule.cosine",
        {"start": 8, "end": 64, "steps": 10},
        ["start", "end", "steps", "begin", "integer", "multiple_of"],
        _schedule,
    ),
    (
        padless.Schedule.fixed_linear,
        "Schedule.fixed_linear",
        {"start": 8, "end": 64, "total_steps": 10},
        ["start", "end", "total_steps", "multiple_of"],
        _schedule,
    ),
    (
        padless.Schedule.fixed_root,
        "Schedule.fixed_root",
        {"start": 8, "end": 64, "total_steps": 10, "degree": 2},
        ["start", "end", "total_steps", "degree", "multiple_of"],
        _schedule,
    ),
    (
        padless.Schedule.fixed_discrete,
        "Schedule.fixed_discrete",
        {"values": [1, 2, 3], "steps": [5, 10]},
        ["values", "steps", "integer", "multiple_of"],
        _schedule,
    ),
    (padless.Schedule.of, "Schedule.of", {"value": 8}, ["value"], _schedule),
    (
        padless.Schedule.from_dict,
        "Schedule.from_dict",
        {"data": {"kind": "constant", "value": 8}},
        ["data"],
        _schedule,
    ),
    (SCHEDULE.value, "Schedule.value", {"step": 3}, ["step"], _finite),
    (SCHEDULE.values, "Schedule.values", {"steps": [1, 2]}, ["steps"], _finite),
    (
        SCHEDULE.first_step_reaching,
        "Schedule.first_step_reaching",
        {"value": 16},
        ["value"],
        None,
    ),
    (COST.of, "Cost.of", {"lengths": [3, 4]}, ["lengths"], _finite),
    (COST.extra, "Cost.extra", {"lengths": [3, 4]}, ["lengths"], _finite),
    (COST.padded, "Cost.padded", {"lengths": [3, 4]}, ["lengths"], _finite),
    (
        COST.packed,
        "Cost.packed",
        {"lengths": [3, 4], "capacity": 8},
        ["lengths", "capacity"],
        _finite,
    ),
    (
        padless.Cost.transformer,
        "Cost.transformer",
        {"d_model": 64, "n_layers": 2},
        ["d_model", "n_layers", "d_ff", "vocab", "causal"],
        lambda c: _finite(c.of(8)),
    ),
    (
        padless.BatchPlan,
        "BatchPlan",
        {"indices": np.array([0, 2, 1]), "offsets": np.array([0, 2, 3])},
        ["indices", "offsets", "skipped", "info"],
        lambda p: _valid_plan(p),
    ),
    (
        padless.PackedPlan,
        "PackedPlan",
        {
            "indices": PLAN.indices,
            "row_bounds": PLAN.rows.offsets,
            "row_offsets": PLAN.row_offsets,
            "piece_start": PLAN.piece_start,
            "piece_stop": PLAN.piece_stop,
            "capacity": PLAN.capacity,
            "num_sequences": PLAN.num_sequences,
        },
        ["indices", "capacity", "num_sequences", "skipped", "info", "row_bounds"],
        lambda p: _valid_plan(p, L.shape[0]),
    ),
    (
        padless.PieceDataset,
        "PieceDataset",
        {"dataset": ROWS, "capacity": 8},
        ["dataset", "capacity", "num_sequences", "keys", "scheduled"],
        lambda d: d[0],
    ),
    (
        padless.CheckedDataset,
        "CheckedDataset",
        {"dataset": DOCS, "lengths": L[:12]},
        ["dataset", "lengths", "field"],
        lambda d: [d[i] for i in range(len(d))],
    ),
    (
        padless.StreamBatcher,
        "StreamBatcher",
        {"source": DOCS, "spec": padless.TokenBudget(max_tokens=200), "buffer": 4},
        ["source", "spec", "buffer", "length", "seed", "max_wait"],
        None,
    ),
    (
        MixtureSampler,
        "MixtureSampler",
        {"samplers": {"a": SAMPLER}, "num_batches": 6},
        ["samplers", "temperature", "weights", "unit", "num_batches", "seed", "rank"]
        + ["world_size", "drop_last", "draw"],
        None,
    ),
    (padless.builtin_corpus, "builtin_corpus", {"fields": "en"}, ["fields"], _lengths),
    (padless.get_strategy, "get_strategy", {"name": "token_budget"}, [("name", "strategy")], None),
    (padless.lengths_of, "lengths_of", {"x": L}, [("x", "lengths")], _lengths),
    (
        padless.plan_windows,
        "plan_windows",
        {"lengths": L, "spec": padless.TokenBudget(max_tokens=200), "window": 50},
        ["seed", "epoch", "window"],
        None,
    ),
    (
        padless.plan_step,
        "plan_step",
        {"lengths": L, "world_size": 4, "max_tokens": 4096},
        ["lengths", "world_size", "max_tokens", "cost", "groups", "loss_tokens", "form"]
        + ["min_micro_batches", "micro_batch_multiple", "seed", "step"],
        lambda out: _step_plan_ok(out),
    ),
    (
        padless.Mesh,
        "Mesh",
        {"dp": 2, "cp": 2, "dynamic": True, "max_tokens": 256},
        ["dp", "cp", "pp", "dynamic", "max_tokens", "schedule", "vpp", "micro_batches"]
        + ["aligned_groups"],
        None,
    ),
    (
        padless.MeshCost,
        "MeshCost",
        {"forward": padless.Cost(linear=1e-6), "backward": padless.Cost(linear=2e-6)},
        ["forward", "backward", "kv_bytes", "bandwidth", "latency", "device"],
        None,
    ),
    (
        padless.place,
        "place",
        {"lengths": L[:40], "mesh": MESH, "cost": MESH_COST},
        ["lengths", "mesh", "cost", "indices", "micro_batches", "search"],
        None,
    ),
    (
        padless.plan_placement,
        "plan_placement",
        {"lengths": L, "mesh": MESH, "cost": MESH_COST, "global_batch": 32},
        ["lengths", "mesh", "cost", "global_batch", "seed", "epoch", "delay_longer_than"]
        + ["delay_steps"],
        None,
    ),
    (padless.simulate, "simulate", {"placement": PLACED}, ["placement", "memory"], None),
    (
        padless.Placer,
        "Placer",
        {"sampler": padless.PlanSampler(L[:40], padless.TokenBudget(max_tokens=400)), "mesh": MESH}
        | {"cost": MESH_COST},
        ["sampler", "mesh", "cost", "search"],
        None,
    ),
    (
        padless.torch.rank_batches,
        "rank_batches",
        {"placement": PLACED, "rank": 1, "dataset": [list(range(1, int(n) + 1)) for n in L]},
        ["placement", "rank", "dataset"],
        None,
    ),
    (
        padless.torch.collate_segment,
        "collate_segment",
        {
            "segment": PLACED.rank_step(0)[0][0],
            "samples": [list(range(1, int(L[i]) + 1)) for i in PLACED.rank_step(0)[0][0].indices],
        },
        ["segment", "samples", "pad_id", "ignore_index", "key", "position_start"],
        None,
    ),
    (
        padless.torch.split_rollout,
        "split_rollout",
        {"batch": {"input_ids": [torch.arange(int(n)) for n in L[:12]]}, "plan": STEP, "rank": 1},
        ["batch", "plan", "rank", "mask_key"],
        None,
    ),
    (
        padless.shape_set,
        "shape_set",
        {"lengths": L, "k": 3, "max_tokens": 400},
        ["lengths", "k", "max_tokens", "multiple_of"],
        None,
    ),
    (
        padless.shuffle_file,
        "shuffle_file",
        lambda f: {"src": f["records"], "dst": f["dst"], "record_size": 8, "seed": 1},
        ["record_size", "lines", "memory", "seed", "shards", "progress", "src", "dst"],
        None,
    ),
    (
        padless.spec_from_dict,
        "spec_from_dict",
        {"data": {"strategy": "token_budget", "max_tokens": 8}},
        [("data", "spec")],
        None,
    ),
    (
        padless.spec_to_dict,
        "spec_to_dict",
        {"spec": padless.TokenBudget(max_tokens=8)},
        ["spec"],
        None,
    ),
    (padless.zip_lengths, "zip_lengths", {"corpora": [L, L[:50]]}, ["corpora"], None),
    # ------------------------------------------------------------------ padless.planners.windows
    (
        padless.planners.windows.WindowLayout,
        "WindowLayout",
        {"n": 1000, "window": 100},
        ["n", "window"],
        None,
    ),
    (LAYOUT.items, "WindowLayout.items", {"w": 3}, ["w", "seed", "epoch"], None),
    (
        LAYOUT.membership,
        "WindowLayout.membership",
        {"seed": 0, "epoch": 0},
        ["seed", "epoch"],
        None,
    ),
    (
        LAYOUT.share_probability,
        "WindowLayout.share_probability",
        {"distance": 30},
        ["distance"],
        _probability,
    ),
    (
        padless.planners.windows.WindowedPlanner,
        "WindowedPlanner",
        {"spec": padless.TokenBudget(max_tokens=200), "lengths": L, "window": 50},
        ["spec", "lengths", "window", "threads"],
        None,
    ),
    # ------------------------------------------------------------------ padless.core.cost
    (
        padless.core.cost.check_max_cost,
        "check_max_cost",
        {"name": "max_cost", "value": 10.0},
        [("value", "max_cost")],
        lambda out: out is None or _finite(out),
    ),
    (padless.core.cost.as_cost, "as_cost", {"value": {"linear": 1.0}}, [("value", "cost")], None),
    # ------------------------------------------------------------------ padless.core.memory
    (
        padless.MemoryModel,
        "MemoryModel",
        {"fixed": 0.0, "per_sequence": 1.0, "linear": (1.0,), "quadratic": (0.0,)},
        ["fixed", "per_sequence", "linear", "quadratic", "points", "device"],
        _memory_ok,
    ),
    (
        padless.MemoryModel.fit,
        "MemoryModel.fit",
        {"points": MEMORY_POINTS},
        ["points", "device"],
        _memory_ok,
    ),
    (
        padless.MemoryModel.from_dict,
        "MemoryModel.from_dict",
        {"record": MEMORY.as_dict()},
        ["record"],
        _memory_ok,
    ),
    (
        padless.MemoryModel.load,
        "MemoryModel.load",
        lambda f: {"path": f["memory"]},
        ["path"],
        _memory_ok,
    ),
    (MEMORY.save, "MemoryModel.save", lambda f: {"path": f["dst"]}, ["path"], None),
    (
        MEMORY.predict,
        "MemoryModel.predict",
        {"batch_size": 2, "lengths": 10},
        ["batch_size", "lengths"],
        _finite,
    ),
    (
        MEMORY.batch_size,
        "MemoryModel.batch_size",
        {"lengths": 10, "limit": "1MiB"},
        ["lengths", "limit", "max_batch_size"],
        lambda out: isinstance(out, int) and out >= 0,
    ),
    (
        MEMORY.table,
        "MemoryModel.table",
        {"lengths": [10, 20], "limit": "1MiB"},
        ["lengths", "limit", "multiple_of", "max_batch_size"],
        lambda out: all(b >= 1 for b, _ in out),
    ),
    (
        MEMORY.shapes,
        "MemoryModel.shapes",
        {"lengths": [10, 20], "limit": "1MiB"},
        ["lengths", "limit", "multiple_of", "max_batch_size"],
        lambda out: padless.FixedShapes(shapes=out),
    ),
    (
        MEMORY.bucket_batch_sizes,
        "MemoryModel.bucket_batch_sizes",
        {"boundaries": [10, 20], "limit": "1MiB", "longest": 40},
        ["boundaries", "limit", "longest", "multiple_of", "max_batch_size"],
        lambda out: padless.Buckets(boundaries=[10, 20], batch_sizes=out),
    ),
    (MEMORY.cost, "MemoryModel.cost", {"field": 0}, ["field"], None),
    (MEMORY.max_cost, "MemoryModel.max_cost", {"limit": "1MiB"}, ["limit"], _finite),
    (padless.core.memory.as_bytes, "as_bytes", {"value": "1MiB"}, [("value", "limit")], None),
    # ------------------------------------------------------------------ padless.sampling.mixing
    (
        padless.sampling.mixing.temperature_probabilities,
        "temperature_probabilities",
        {"amounts": [10, 30, 60], "temperature": 2.0},
        ["amounts", "temperature"],
        _probabilities,
    ),
    (
        padless.sampling.mixing.stratified_counts,
        "stratified_counts",
        {"p": np.array([0.5, 0.25, 0.25]), "total": 10, "gen": np.random.default_rng(0)},
        ["p", "total", "gen"],
        lambda c: _lengths(np.asarray(c)),
    ),
    # ------------------------------------------------------------------ padless.io.readers
    (
        padless.io.readers.check_tokenizer,
        "check_tokenizer",
        {"tokenizer": "whitespace"},
        ["tokenizer"],
        None,
    ),
    (
        padless.io.readers.lengths_from_text,
        "lengths_from_text",
        lambda f: {"path": f["text"]},
        ["path", "tokenizer", "progress"],
        _lengths,
    ),
    (
        padless.io.lengths_from_file,
        "lengths_from_file",
        lambda f: {"path": f["text"]},
        ["path", "tokenizer", "fields", "column", "offsets", "split", "progress"],
        _lengths,
    ),
    (
        padless.io.lengths_from_files,
        "lengths_from_files",
        lambda f: {"paths": [f["text"], f["text"]]},
        ["paths"],
        _lengths,
    ),
    (
        padless.io.readers.lengths_from_arrow,
        "lengths_from_arrow",
        lambda f: {"path": f["arrow"], "column": "ids"},
        ["path", "column", "tokenizer", "split"],
        _lengths,
    ),
    (
        padless.io.lengths_from_file,
        "lengths_from_file/raw",
        lambda f: {"path": f["raw"], "dtype": "uint16", "eos": 0},
        ["dtype", "eos", "documents"],
        _lengths,
    ),
    (
        padless.io.readers.list_column,
        "list_column",
        {"x": TABLE, "column": "ids", "where": "list_column(x)"},
        ["x", "column"],
        None,
    ),
    # ------------------------------------------------------------------ token stores
    (
        padless.IndexedDataset,
        "IndexedDataset",
        lambda f: {"path": f["indexed"]},
        ["path", "documents"],
        lambda out: out.starts(np.arange(len(out))),
    ),
    (
        padless.write_indexed,
        "write_indexed",
        lambda f: {"items": DOCS, "prefix": f["text"].parent / "written", "dtype": "uint16"},
        [("items", "document"), "prefix", "dtype", "format", "column"],
        None,
    ),
    (
        padless.RawTokens,
        "RawTokens",
        lambda f: {"path": f["raw"], "dtype": "uint16", "eos": 0},
        ["path", "dtype", "eos", "cache"],
        lambda out: out.starts(np.arange(len(out))),
    ),
    (
        padless.shuffle_indexed,
        "shuffle_indexed",
        lambda f: {"src": f["indexed"], "dst_prefix": f["text"].parent / "shuffled", "seed": 1},
        ["src", "dst_prefix", "seed", "documents"],
        None,
    ),
    # ------------------------------------------------------------------ padless.torch
    (
        padless.torch.TokenDataset,
        "TokenDataset",
        lambda f: {"source": f["indexed"]},
        ["source", "plan", "dtype", "eos", "documents", "pad_id", "ignore_index", "out_dtype"]
        + ["pin_memory"],
        _serves,
    ),
    (
        padless.torch.TokenDataset,
        "TokenDataset/packed",
        lambda f: {
            "source": f["indexed"],
            "plan": padless.PackingSampler(
                padless.IndexedDataset(f["indexed"]).lengths, capacity=64
            ),
        },
        ["flatten", "rows", "position_start", "attention_mask"],
        _serves,
    ),
    (
        padless.torch.collate_padded,
        "collate_padded",
        {"pad_id": 0},
        ["pad_id", "multiple_of", "fields", "shapes", "plan"],
        _collate_on([torch.tensor([1, 2, 3]), torch.tensor([4])]),
    ),
    (
        padless.torch.PaddedCollate,
        "PaddedCollate",
        {"pad_id": 0, "multiple_of": 1, "fields": None},
        ["pad_id", "multiple_of", "fields", "shapes", "pad_batches"],
        _collate_on([torch.tensor([1, 2, 3]), torch.tensor([4])]),
    ),
    (
        padless.torch.collate_packed,
        "collate_packed",
        {"capacity": 16},
        ["capacity", "max_per_row", "rows", "context_parallel", "cp_rank"],
        _collate_on([torch.tensor([1, 2, 3]), torch.tensor([4])]),
    ),
    (
        padless.torch.zigzag_indices,
        "zigzag_indices",
        {"cu_seqlens_padded": [0, 8, 12], "context_parallel": 2, "cp_rank": 1},
        ["cu_seqlens_padded", "context_parallel", "cp_rank"],
        _indices_ok,
    ),
    (
        padless.torch.join_cp_shares,
        "join_cp_shares",
        {"shares": CP_SHARES},
        ["shares"],
        _joined_ok,
    ),
    (
        padless.torch.PackedCollate,
        "PackedCollate",
        {"capacity": 16},
        ["capacity", "max_per_row", "rows", "flatten", "position_start", "pad_id"]
        + ["ignore_index", "key", "truncate", "attention_mask", "context_parallel", "cp_rank"],
        _collate_on([torch.tensor([1, 2, 3]), torch.tensor([4])]),
    ),
    (
        padless.torch.collate_packed_pairs,
        "collate_packed_pairs",
        {"capacity": (16, 8)},
        ["capacity", "max_per_row", "rows", "keys", "position_start", "pad_id", "ignore_index"]
        + ["decoder_start_id"],
        _collate_on([([1], [2]), ([3], [4])]),  # fits any capacity pair
    ),
    (
        padless.torch.PackedPairsCollate,
        "PackedPairsCollate",
        {"capacity": (16, 8)},
        ["capacity", "max_per_row", "rows", "keys", "position_start", "pad_id", "ignore_index"]
        + ["decoder_start_id"],
        _collate_on([([1], [2]), ([3], [4])]),  # fits any capacity pair
    ),
    (
        padless.torch.collate_groups,
        "collate_groups",
        {"capacity": 16},
        ["capacity", "rows", "position_start", "pad_id", "attention_mask"],  # keys: any str
        _collate_on([{"group": 0, "prompt_ids": [1], "completion_ids": [2]}]),
    ),
    (
        padless.torch.GroupCollate,
        "GroupCollate",
        {"capacity": 16},
        ["capacity", "rows", "position_start", "pad_id", "attention_mask"],  # keys: any str
        _collate_on([{"group": 0, "prompt_ids": [1], "completion_ids": [2]}]),
    ),
    (
        padless.torch.flex_block_mask,
        "flex_block_mask",
        {"batch": torch.tensor([[0, 0, 1, 2]])},
        ["batch", "prompt_of", "block_size"],
        None,
    ),
    (
        padless.hf.pair_length,
        "pair_length",
        {"row": {"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [3]}},
        ["row"],
        None,
    ),
    (
        padless.hf.PreferenceCollator,
        "PreferenceCollator",
        {"capacity": 16},
        ["capacity", "pad_id", "attention_mask"],
        _collate_on([{"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [3]}]),
    ),
    (
        padless.torch.collate_for,
        "collate_for",
        {"source": SAMPLER, "pad_id": 0},
        ["source", "pad_id"],
        _collate_on([torch.tensor([1, 2, 3]), torch.tensor([4])]),
    ),
    (
        padless.torch.StatefulLoader,
        "StatefulLoader",
        {"loader": torch.utils.data.DataLoader(DOCS, batch_sampler=SAMPLER, collate_fn=list)},
        ["loader"],
        None,
    ),
    (
        padless.torch.StreamDataset,
        "StreamDataset",
        {"source": DOCS, "spec": padless.TokenBudget(max_tokens=200), "buffer": 4},
        ["source", "rank", "world_size", "buffer"],
        None,
    ),
    (
        padless.torch.stop_together,
        "stop_together",
        {"loader": [1, 2, 3]},
        ["loader", "every", "group"],
        None,
    ),
    (
        padless.torch.LMDataset,
        "LMDataset",
        {"stream": padless.LMStream(np.arange(1000), batch_size=2, num_steps=4)},
        ["stream", "pin_memory"],
        None,
    ),
    (
        padless.torch.lm_tensors,
        "lm_tensors",
        {"stream": padless.LMStream(np.arange(1000), batch_size=2, num_steps=4)},
        ["stream", "pin_memory"],
        None,
    ),
    (
        padless.torch.mixture_dataset,
        "mixture_dataset",
        {"datasets": {"a": DOCS}},
        ["datasets", "sampler"],
        None,
    ),
    (
        padless.torch.probe_memory,
        "probe_memory",
        {
            "step": len,
            "make_batch": _grow,
            "lengths_grid": [8, 16, 32],
            "device": "cpu",
            "limit": "2MiB",  # far above a step's noise: both batch sizes of each shape fit
            "tolerance": 1.0,
            "max_batch_size": 2,
            "warmup": False,
        },
        ["step", "make_batch", "lengths_grid", "device", "limit", "tolerance"]
        + ["max_batch_size", "warmup"],
        lambda out: _memory_ok(out.model),
    ),
    (
        padless.torch.measure_peak,
        "measure_peak",
        {"step": len, "batch": [1], "device": "cpu"},
        ["step", "device"],
        lambda out: out >= 0,
    ),
    (
        padless.torch.scale_loss,
        "scale_loss",
        {"loss_sum": torch.tensor(6.0), "step_total": 3},
        ["loss_sum", "step_total", "world_size"],
        lambda t: _finite(t.item()),
    ),
    (
        padless.torch.StepRng().load_state_dict,
        "StepRng.load_state_dict",
        {"state": padless.torch.StepRng().state_dict()},
        ["state"],
        None,
    ),
    (
        padless.torch.set_rng_state,
        "set_rng_state",
        lambda f: {"state": padless.torch.get_rng_state()},
        ["state"],
        None,
    ),
    (
        padless.torch.check_packed,
        "check_packed",
        lambda f: {"model": _tiny_model()},
        ["model", "collate", "lengths", "keys", "forward_kwargs", "atol"],
        _finite,
    ),
    # ------------------------------------------------------------------ padless.hf
    (
        padless.hf.PaddingFreeCollator,
        "PaddingFreeCollator",
        {"capacity": 16},
        ["capacity", "max_per_row", "rows", "flash_attn_kwargs", "seq_idx", "position_start"]
        + ["separator_id", "pad_id"],
        _collate_on([{"input_ids": [1, 2, 3]}, {"input_ids": [4]}]),
    ),
    (
        padless.hf.PaddedCollator,
        "PaddedCollator",
        {"plan": SAMPLER},
        ["plan", "pad_id", "separator_id"],
        _collate_on([{"input_ids": [1, 2, 3]}, {"input_ids": [4]}]),
    ),
    (padless.hf.TrainerBatches, "TrainerBatches", {"sampler": SAMPLER}, ["sampler"], None),
    (
        padless.hf.newest_checkpoint,
        "newest_checkpoint",
        lambda f: {"output_dir": f["text"].parent},
        ["output_dir"],
        None,
    ),
    # ------------------------------------------------------------------ padless.io.checked
    (
        padless.io.checked.sampler_lengths,
        "sampler_lengths",
        {"sampler": SAMPLER},
        ["sampler"],
        lambda out: out is None or _lengths(out),
    ),
    # ------------------------------------------------------------------ padless.lightning
    (
        padless.lightning.LightningBatches,
        "LightningBatches",
        {"sampler": SAMPLER},
        ["sampler"],
        None,
    ),
    (
        padless.lightning.LightningBatches(
            padless.TokenBudgetSampler(L, max_tokens=200)
        ).load_state_dict,
        "LightningBatches.load_state_dict",
        {"state": padless.TokenBudgetSampler(L, max_tokens=200).state_dict()},
        ["state"],
        None,
    ),
    # ------------------------------------------------------------------ padless.core.filters
    (
        padless.core.filters.ratio_filter,
        "ratio_filter",
        {"lengths": PAIRS, "max_ratio": 2.0},
        ["lengths", "numerator", "denominator", "min_ratio", "max_ratio", "resolution"],
        None,
    ),
    (
        padless.core.filters.length_filter,
        "length_filter",
        {"lengths": PAIRS, "max_length": (1.0, None), "resolution": (0.01, None)},
        ["lengths", "min_length", "max_length", "resolution"],
        None,
    ),
    # ------------------------------------------------------------------ padless.lhotse
    (
        padless.lhotse.lengths_of_cuts,
        "lengths_of_cuts",
        {"cuts": CUTS, "tokens": len},
        ["cuts", "resolution", "tokens"],
        _lengths,
    ),
    (
        padless.lhotse.lengths_of_cuts,
        "lengths_of_cuts/manifest",
        lambda f: {"cuts": f["manifest"], "tokens": "text"},
        ["resolution", "tokens"],
        _lengths,
    ),
    (padless.lhotse.is_manifest, "is_manifest", lambda f: {"path": f["manifest"]}, ["path"], None),
    (
        padless.lhotse.CutSampler,
        "CutSampler",
        {"cuts": CUTS, "spec": padless.TokenBudget(max_tokens=2000), "tokens": len},
        ["cuts", "spec", "tokens", "resolution", "lengths", "rank"],
        None,
    ),
    # ------------------------------------------------------------------ padless.grain, padless.jax
    (
        padless.grain.shard_of,
        "shard_of",
        {"shard_options": SHARD},
        ["shard_options"],
        None,
    ),
    (
        padless.grain.sampler,
        "grain.sampler",
        {"lengths": L, "spec": padless.TokenBudget(max_tokens=128), "shard_options": SHARD},
        ["lengths", "spec", "shard_options"],
        None,
    ),
    (
        padless.grain.Collate,
        "Collate",
        {"spec": padless.Packing(capacity=64), "lengths": L},
        ["spec", "feature", "keys", "pad", "lengths"],
        None,
    ),
    (
        padless.grain.PlanBatches,
        "PlanBatches",
        {"sampler": padless.PlanSampler(L, padless.Packing(capacity=64)), "records": RECORDS},
        ["sampler", "records", "num_epochs", "feature", "keys", "pad"],
        None,
    ),
    (
        padless.grain.EpochBatches,
        "EpochBatches",
        {"sampler": padless.PlanSampler(L, padless.Packing(capacity=64)), "records": RECORDS},
        ["sampler", "records", "epoch", "feature", "keys", "pad"],
        None,
    ),
    (
        padless.grain.TorchtitanPacking,
        "TorchtitanPacking",
        {"records": [{"input_ids": r, "labels": r} for r in RECORDS], "lengths": L},
        ["records", "lengths", "max_per_row", "oversize", "balance", "sequence_type"],
        None,
    ),
    (
        padless.jax.attention_mask,
        "attention_mask",
        {"segment_ids": np.array([[1, 1, 2, 0]])},
        ["segment_ids", "causal"],
        None,
    ),
    (
        padless.jax.compiled_shapes,
        "compiled_shapes",
        {"fn": padless.jax.jax.jit(lambda x: x)},
        ["fn"],
        None,
    ),
    # ------------------------------------------------------------------ padless.ray (no Ray run)
    (
        padless.ray.pack_table,
        "pack_table",
        {"table": TABLE, "spec": padless.Packing(capacity=64), "column": "ids"},
        ["table", "spec", "column", "seed", "epoch"],
        None,
    ),
    (padless.ray.PlanFiles, "PlanFiles", lambda f: {"path": f["text"].parent}, ["path"], None),
]

# Entries that need a running Ray (a dataset, or tasks): attacked by tests/test_ray.py, which
# starts one. Valid arguments are functions of (a small dataset, the tmp files).
RAY_ENTRIES: list[tuple[Any, str, Callable[[Any, Any], dict[str, Any]], list[str]]] = [
    (
        padless.ray.pack,
        "pack",
        lambda ds, f: {"ds": ds, "spec": padless.Packing(capacity=64), "column": "ids"},
        ["ds", "spec", "column", "window", "seed", "epoch", "carry"],
    ),
    (
        padless.ray.lengths,
        "lengths",
        lambda ds, f: {"ds": ds, "column": "ids", "out": f["lengths"]},
        ["ds", "column", "tokenizer", "out", "progress"],
    ),
    (
        padless.ray.plan,
        "plan",
        lambda ds, f: {
            "lengths_path": f["lengths"],
            "spec": padless.TokenBudget(max_tokens=200),
            "window": 8,
            "out": f["plan"],
        },
        ["lengths_path", "spec", "window", "seed", "epoch", "out", "tasks", "progress"],
    ),
]

LENGTH_ENTRIES = [padless.plan_token_budget, padless.plan_packing, padless.TokenBudgetSampler]


SIZES = {"capacity", "rows", "multiple_of", "max_per_row", "pad_to_multiple_of", "num_batches"}
"""Settings whose huge values are valid and cost memory in proportion: a result made with one is
neither called (collates) nor consumed (samplers)."""
PATH_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError)


def _plan_with(spec: padless.Spec, named: str, *, check: bool) -> None:
    """A spec that took a hostile setting plans ``L``: a valid plan, or (for a refusal that
    depends on the lengths, like a ``max_cost`` below one sequence's cost) an error naming the
    setting. The ``plan_*`` functions and samplers plan through this one spec."""
    lengths = np.stack([L, L], axis=1) if getattr(spec, "per_field", False) else L
    try:
        plan = spec.plan(lengths)
    except (ValueError, TypeError) as err:
        if named not in str(err):
            raise AssertionError(f"plan: {type(err).__name__} {err}") from err
        return
    if check:
        _valid_plan(plan, L.shape[0])


def attack(
    entry: Callable[..., Any], label: str, base: dict[str, Any], param: Any, check: Any
) -> list[str]:
    """Every hostile value into ``param``: the failures, one line each (empty: all well).

    ``param`` is a name, or (name, the name its messages use).
    """
    param, named = param if isinstance(param, tuple) else (param, param)
    failures = []
    for value in HOSTILE:
        kwargs = dict(base)
        kwargs[param] = value
        where = f"{label}({param}={value!r:.30})"
        try:
            out = entry(**kwargs)
        except (ValueError, TypeError) as err:
            if named not in str(err):
                failures.append(f"{where}: {type(err).__name__} {err}")
            continue
        except PATH_ERRORS as err:  # a path that is not there: the OS error names it
            if not isinstance(value, str):
                failures.append(f"{where}: {type(err).__name__} {err}")
            continue
        except Exception as err:  # noqa: BLE001 - any other exception is the failure
            failures.append(f"{where}: {type(err).__name__} {err!s:.200}")
            continue
        big = param in SIZES and isinstance(value, (int, np.integer)) and value > 1 << 20
        try:
            if isinstance(out, padless.Spec):
                _plan_with(out, named, check=not big)
            if not big:
                _check_result(out)
                if check is not None:
                    check(out)
        except Exception as err:  # noqa: BLE001
            failures.append(f"{where} returned, then {type(err).__name__}: {err!s:.200}")
    return failures


BY_LABEL = {e[1]: e for e in ENTRIES}
CASES = [
    pytest.param(label, p, id=f"{label}-{p[0] if isinstance(p, tuple) else p}")
    for _, label, _, params, _ in ENTRIES
    for p in params
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _files(tmp_path_factory.mktemp("hostile"))


@pytest.mark.parametrize(("label", "param"), CASES)
def test_hostile_value_gets_a_clear_error_or_a_right_answer(
    label, param, files, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # a relative path ("4096") names a file in an empty folder
    entry, _, base, _, check = BY_LABEL[label]
    if callable(base):  # arguments naming files made for the test
        base = base(files)
    failures = attack(entry, label, base, param, check)
    assert not failures, "\n".join(failures)


def _public_callables(name: str) -> dict[str, Any]:
    """A module's public callables: its ``__all__``, or its names not starting with ``_``
    defined in padless (not the argument checks it imports). Names in NOT_ATTACKED are left
    unloaded (``padless.lightning.ExactResume`` imports all of Lightning on first use)."""
    module = importlib.import_module(name)
    listed = getattr(module, "__all__", None)
    names = listed if listed is not None else [n for n in dir(module) if not n[0] == "_"]
    out = {}
    for n in names:
        if f"{name}.{n}" in NOT_ATTACKED:
            continue
        value = getattr(module, n)
        if isinstance(value, types.ModuleType) or not callable(value):
            continue
        home = getattr(value, "__module__", "") or ""
        if listed is None and (not home.startswith("padless") or home == "padless.core._check"):
            continue  # a name it imports from elsewhere (numpy, torch, the argument checks)
        out[f"{name}.{n}"] = value
    return out


def test_every_public_entry_is_attacked():
    """A public callable of MODULES is an entry of ENTRIES / RAY_ENTRIES or excused in
    NOT_ATTACKED: a new entry fails here until it is attacked (or excused, with a reason)."""
    for qualified in NOT_ATTACKED:
        module, _, name = qualified.rpartition(".")
        mod = importlib.import_module(module)
        assert name in (getattr(mod, "__all__", None) or dir(mod)), f"{qualified} is gone"
    attacked = {id(e[0]) for e in ENTRIES} | {id(e[0]) for e in RAY_ENTRIES}
    missing = {}
    for module in MODULES:
        for qualified, value in _public_callables(module).items():
            if id(value) not in attacked:
                missing.setdefault(id(value), qualified)  # a re-export is reported once
    assert not missing, (
        f"public entries neither in ENTRIES nor in NOT_ATTACKED: {list(missing.values())}"
    )


def test_every_spec_setting_is_attacked():
    """Each strategy's spec entries attack all its settings (a new setting fails here)."""
    for name, cls in padless.strategies().items():
        listed = {p if isinstance(p, str) else p[0] for e in ENTRIES if e[0] is cls for p in e[3]}
        settings = {f.name for f in dataclasses.fields(cls) if f.init}
        assert settings <= listed, f"{name}: settings never attacked: {sorted(settings - listed)}"


lengths_values = st.one_of(
    st.lists(st.integers(-(2**70), 2**70), max_size=20),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=20),
    st.lists(st.lists(st.integers(0, 5), max_size=4), max_size=6),
    st.lists(st.text(max_size=3), min_size=1, max_size=3),
    st.just([[1, 2], [3]]),
    st.just(np.zeros((2, 2, 2), np.int64)),
    st.just(np.array([1e19, 5.0])),
    st.just(np.array([2**62] * 4, dtype=np.int64)),
    st.just({"a": 1}),
    st.just("lengths.npy"),
)


@pytest.mark.parametrize("entry", LENGTH_ENTRIES)
@given(value=lengths_values)
def test_hostile_lengths(entry, value):
    base = {padless.plan_packing: {"capacity": 128}}.get(entry, {"max_tokens": 200})
    try:
        out = entry(value, **base)
    except (ValueError, TypeError) as err:
        assert "length" in str(err) or "max_tokens" in str(err) or "capacity" in str(err), err
        return
    if isinstance(out, padless.BatchPlan):
        n = len(padless.lengths_of(value))
        assert sorted(np.concatenate([out.indices, out.skipped]).tolist()) == list(range(n))


# group ids (issue 42): wrong lengths and shapes, floats, bools, strings, objects are refused
# naming ``groups``; negative, huge and unsigned ints are ids like any others
GROUP_IDS = [
    np.arange(199),
    np.arange(201),
    np.zeros((200, 1), np.int64),
    np.arange(200) / 2,
    np.arange(200).astype(np.float32),
    np.ones(200, bool),
    np.array(["a"] * 200),
    np.array([object()] * 200),
    list(range(199)) + [None],
    -np.arange(200) // 2 - 1,
    np.arange(200) // 2 + 2**62,
    np.arange(200, dtype=np.uint64) // 2 + np.uint64(2**64 - 101),
    np.full(200, -(2**63)) + np.arange(200) // 2,
]


@pytest.mark.parametrize("ids", GROUP_IDS, ids=range(len(GROUP_IDS)))
@pytest.mark.parametrize(
    "spec", [padless.TokenBudget(max_tokens=200), padless.Packing(capacity=128)]
)
def test_hostile_group_ids(ids, spec):
    try:
        sampler = padless.PlanSampler(L, spec, groups=ids)
    except (ValueError, TypeError) as err:
        assert "groups" in str(err)
        return
    got = [b for b in sampler]
    assert sorted(i for b in got for i in b) == list(range(L.shape[0]))
    key = np.asarray(ids).astype(np.int64)
    for batch in got:
        for g in set(key[batch].tolist()):
            assert int((key[batch] == g).sum()) == int((key == g).sum())  # whole in one batch


@given(position=st.one_of(st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=2)))
def test_hostile_state_positions(position):
    s = padless.TokenBudgetSampler(L, max_tokens=200)
    state = {**s.state_dict(), "position": position}
    try:
        s.load_state_dict(state)
    except (ValueError, TypeError) as err:
        assert "position" in str(err)
        return
    assert 0 <= position <= len(list(padless.TokenBudgetSampler(L, max_tokens=200)))


def test_mixture_hostile_temperature_and_weights():
    subs = {"a": padless.TokenBudgetSampler(L, max_tokens=200)}
    for value in HOSTILE:
        for param in ("temperature", "num_batches", "seed"):
            try:
                MixtureSampler(subs, **{param: value})
            except (ValueError, TypeError) as err:
                assert param in str(err), (param, value, err)


@pytest.mark.parametrize(
    ("length", "around"), [(int, [3, 5]), (None, [[1, 2], [3]])], ids=["int", "tokens"]
)
def test_hostile_stream_item_is_named_by_its_position(length, around):
    """Each hostile value as item 1 of a stream of lengths (``length=int``) or of token lists:
    batches holding every item, or a TypeError/ValueError naming stream position 1 (an item is
    only seen when the stream reaches it)."""
    spec = padless.TokenBudget(max_tokens=1 << 40)
    for value in HOSTILE:
        items = [around[0], value, around[1]]
        try:
            batches = list(padless.StreamBatcher(items, spec, buffer=4, length=length))
        except (ValueError, TypeError) as err:
            assert "stream position 1" in str(err), (value, err)
            continue
        assert sum(len(b) for b in batches) == 3, value


def test_position_start_may_reach_but_not_pass_the_int64_end():
    """The widest position, position_start + capacity - 1, must fit int64: the bound is exact."""
    top = 2**63 - 1
    out = padless.torch.collate_packed(4, position_start=top - 3)([[1, 2, 3, 4], [5]])
    assert out["position_ids"].max().item() == top and out["position_ids"].min().item() >= 0
    with pytest.raises(ValueError, match=r"position_start must be at most 9223372036854775804"):
        padless.torch.collate_packed(4, position_start=top - 2)


# ------------------------------------------------------------------ hostile files (issue 39)
# Token files that lie, and files that change under a reader: every reader that takes them
# refuses with a ValueError naming the file and the rule (at open, or when it serves the items),
# or gives the answer of the file as it is now; never another file's items, never zeros read
# from a cut map.

MAGIC = b"MMIDIDX\x00\x00"


def _fairseq_idx(sizes: list[int], pointers: list[int]) -> bytes:
    head = (
        MAGIC
        + np.array([1], "<u8").tobytes()
        + bytes([8])
        + np.array([len(sizes)], "<u8").tobytes()
    )
    return head + np.asarray(sizes, "<i4").tobytes() + np.asarray(pointers, "<i8").tobytes()


def _megatron_idx(sizes: list[int], pointers: list[int], docs: list[int]) -> bytes:
    counts = np.array([1], "<u8").tobytes() + bytes([8])
    counts += np.array([len(sizes), len(docs)], "<u8").tobytes()
    body = np.asarray(sizes, "<i4").tobytes() + np.asarray(pointers, "<i8").tobytes()
    return MAGIC + counts + body + np.asarray(docs, "<i8").tobytes()


def _lying_pair(tmp: Path, case: str) -> Path:
    """The pair ``tmp/case.{idx,bin}`` of one hostile case (uint16 tokens)."""
    prefix = tmp / case
    if case == "megatron_cut_to_fairseq_size":
        padless.write_indexed([list(range(1, 1 + int(k))) for k in L[:50]], prefix, dtype="uint16")
        idx = Path(f"{prefix}.idx")
        idx.write_bytes(idx.read_bytes()[: 26 + 12 * 50])
        return prefix
    idx, nbytes = {
        "fairseq_pointers_decrease": (_fairseq_idx([2, 2, 2], [0, 8, 4]), 12),
        "fairseq_pointer_misaligned": (_fairseq_idx([2, 2, 2], [0, 3, 8]), 12),
        "fairseq_short_of_the_bin": (_fairseq_idx([2, 2, 2], [0, 4, 8]), 20),
        "fairseq_overlapping": (_fairseq_idx([3, 2, 2], [0, 4, 8]), 12),
        "megatron_negative_length": (_megatron_idx([3, -5, 1], [0, 6, 6], [0, 3]), 8),
        "megatron_length_past_the_bin": (_megatron_idx([3, 2**30, 1], [0, 6, 10], [0, 3]), 12),
        "megatron_document_count": (_megatron_idx([3, 2, 1], [0, 6, 10], [0, 1, 2]), 12),
    }[case]
    Path(f"{prefix}.idx").write_bytes(idx)
    Path(f"{prefix}.bin").write_bytes(bytes(nbytes))
    return prefix


LYING = {
    "megatron_cut_to_fairseq_size": "fits neither layout",
    "fairseq_pointers_decrease": "never decrease",
    "fairseq_pointer_misaligned": "not a multiple of 2",
    "fairseq_short_of_the_bin": "the .bin holds 20 bytes",
    "fairseq_overlapping": "past the next sequence's pointer",
    "megatron_negative_length": "the negative length -5",
    "megatron_length_past_the_bin": "length 1073741824",
    "megatron_document_count": "end at S = 3",
}


def _serve_all(store: Any) -> None:
    store.starts(np.arange(len(store)))


READERS: dict[str, Callable[[Path], Any]] = {
    "IndexedDataset": lambda p: _serve_all(padless.IndexedDataset(p)),
    "open_tokens": lambda p: _serve_all(padless.io.tokens.open_tokens(p)),
    "lengths_of": lambda p: padless.lengths_of(Path(f"{p}.idx")),
    "lengths_from_file": lambda p: padless.io.lengths_from_file(Path(f"{p}.bin")),
    "TokenDataset": lambda p: (lambda d: d.__getitems__(list(range(len(d)))))(
        padless.torch.TokenDataset(p)
    ),
}


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("case", list(LYING))
def test_a_lying_index_is_refused_by_every_reader(tmp_path, case, reader):
    prefix = _lying_pair(tmp_path, case)
    with pytest.raises(ValueError) as info:
        READERS[reader](prefix)
    text = str(info.value)
    assert f"{case}.idx" in text and LYING[case] in text, text


def _raw(tmp: Path, docs: int = 300) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(39)
    tokens = np.concatenate([[*rng.integers(1, 500, int(k)), 0] for k in L[:docs] % 19 + 1])
    path = tmp / "raw.bin"
    tokens.astype(np.uint16).tofile(path)
    return path, tokens.astype(np.uint16)


RAW_READERS: dict[str, Callable[[Path], np.ndarray]] = {
    "RawTokens": lambda p: padless.RawTokens(p, dtype="uint16", eos=0).lengths,
    "open_tokens": lambda p: padless.io.tokens.open_tokens(p, dtype="uint16", eos=0).lengths,
    "lengths_from_file": lambda p: padless.io.lengths_from_file(p, dtype="uint16", eos=0),
    "TokenDataset": lambda p: padless.torch.TokenDataset(p, dtype="uint16", eos=0).store.lengths,
}


def _merge_unsampled(tokens: np.ndarray) -> np.ndarray:
    """The tokens with one eos gone, at an end the old 64-end spot check never looked at."""
    ends = np.flatnonzero(tokens == 0)[:-1] + 1
    picks = set(np.unique(np.linspace(0, ends.size - 1, 64).astype(np.int64)).tolist())
    at = int(ends[next(i for i in range(ends.size) if i not in picks)])
    changed = tokens.copy()
    changed[at - 1] = 7
    return changed


def _put_back_mtime(path: Path, stamp: os.stat_result) -> None:
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))


@pytest.mark.parametrize("reader", list(RAW_READERS))
@pytest.mark.parametrize("change", ["cp -p", "in place, same inode and ctime"])
def test_a_stale_offsets_cache_is_never_served(tmp_path, monkeypatch, change, reader):
    """The file is replaced by one of the same size with its mtime put back (``cp -p``), or
    rewritten in place where the clock did not move the ctime (simulated): every reader gives
    the file's documents as they are now, not the cached ones."""
    import padless.io._files as files

    path, tokens = _raw(tmp_path)
    want = RAW_READERS[reader](path).tolist()  # writes the cache
    changed = _merge_unsampled(tokens)
    before = path.stat()
    if change == "cp -p":
        source = tmp_path / "new.bin"
        changed.tofile(source)
        _put_back_mtime(source, before)
        shutil.copy2(source, path)
    else:
        real = files.stamp_of
        monkeypatch.setattr(files, "stamp_of", lambda st: real(st)._replace(ctime_ns=0))
        RAW_READERS[reader](path)  # the cache again, its record without ctime
        with open(path, "r+b") as fh:
            fh.write(changed.tobytes())
        _put_back_mtime(path, before)
    assert path.stat().st_size == before.st_size and path.stat().st_ino == before.st_ino
    got = RAW_READERS[reader](path).tolist()
    assert len(got) == len(want) - 1 and sum(got) == sum(want)


SERVERS: dict[str, Callable[[Any], Any]] = {
    "item": lambda store: store[len(store) - 1],
    "starts": lambda store: store.starts(np.arange(len(store))),
    "TokenDataset batch": lambda store: padless.torch.TokenDataset(store).__getitems__([0]),
}


@pytest.mark.parametrize("server", list(SERVERS))
@pytest.mark.parametrize("cut", ["raw.bin", "pair.bin", "pair.idx"])
def test_a_file_cut_under_its_store_is_refused_when_served(tmp_path, cut, server):
    """A file cut after it was opened (a writer rewriting it in place): the next item or batch
    is a ValueError naming it, the size it had and the size it has."""
    path, tokens = _raw(tmp_path)
    pair = tmp_path / "pair"
    docs = np.split(tokens, np.flatnonzero(tokens == 0)[:-1] + 1)
    indexed = padless.write_indexed(docs, pair, dtype="uint16")
    store = padless.RawTokens(path, dtype="uint16", eos=0) if cut == "raw.bin" else indexed
    victim = tmp_path / cut
    had = victim.stat().st_size
    os.truncate(victim, had - 2)
    with pytest.raises(ValueError, match="shrank") as info:
        SERVERS[server](store)
    assert cut in str(info.value) and f"held {had} bytes" in str(info.value)
    assert f"holds {had - 2} now" in str(info.value)
