"""TokenDataset refuses, when it is built, the plans whose batches it cannot serve (issue 40:
a warm-up's plan was accepted and failed at the first batch with an index out of range, a
StreamBatcher with numpy's "inhomogeneous shape", Decomposition with an index out of range)."""

from __future__ import annotations

import numpy as np
import pytest

import padless
from padless import Decomposition, Packing, PlanSampler, Schedule, TokenBudget
from padless.io.indexed import write_indexed
from padless.streams import StreamBatcher
from padless.torch import TokenDataset


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(7)
    docs = [rng.integers(1, 500, n) for n in rng.integers(1, 90, 300)]
    prefix = str(tmp_path_factory.mktemp("plans") / "corpus")
    write_indexed(docs, prefix, dtype=np.uint16)
    return prefix, np.array([len(d) for d in docs], dtype=np.int64)


def test_a_warm_up_plan_is_refused_when_built(store):
    prefix, lengths = store
    warm = padless.PackingSampler(
        lengths, capacity=Schedule.piecewise([0, 4], [64, 128]), rows_per_batch=2
    )
    for plan in (warm, warm.spec):
        with pytest.raises(
            ValueError, match="cannot be served by TokenDataset: capacity=.*warm-up"
        ):
            TokenDataset(prefix, plan=plan)


def test_decomposition_is_refused_when_built(store):
    prefix, lengths = store
    plan = PlanSampler(lengths, Decomposition(min_length=1, max_length=32, tokens_per_batch=64))
    with pytest.raises(ValueError, match="Decomposition yields the codes .* pieces"):
        TokenDataset(prefix, plan=plan)


def test_a_stream_batcher_is_refused_when_built(store):
    prefix, lengths = store
    batcher = StreamBatcher(lengths.tolist(), TokenBudget(max_tokens=256), length=int)
    with pytest.raises(TypeError, match="sampler of item indices .* got StreamBatcher"):
        TokenDataset(prefix, plan=batcher)


def test_split_pieces_are_still_served(store):
    """The refusal asks what holds whatever the lengths: split pieces, which TokenDataset
    serves itself, are not refused."""
    prefix, lengths = store
    plan = padless.PackingSampler(lengths, capacity=48, oversize="split", seed=1)
    assert Packing(capacity=48, oversize="split").needs_pieces(lengths) is not None
    ds = TokenDataset(prefix, plan=plan)
    served = sum(int((b["input_ids"] != 0).sum()) for b in ds.loader(plan))  # tokens: 1..499
    assert served == int(lengths.sum())  # every token once
