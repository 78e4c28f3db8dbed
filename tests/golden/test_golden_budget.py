"""Pinned outputs for fixed seeds: a change here changes every user's batches."""

import hashlib

import numpy as np

from padless import builtin_corpus, plan_token_budget


def _digest(plan) -> str:
    h = hashlib.sha256(plan.indices.tobytes())
    h.update(plan.offsets.tobytes())
    return h.hexdigest()[:16]


def test_small_plan_is_pinned():
    plan = plan_token_budget([5, 3, 3, 8, 1, 3, 2, 5], max_tokens=9, seed=0, epoch=0)
    assert [b.tolist() for b in plan] == GOLDEN_SMALL


def test_builtin_corpus_plan_is_pinned():
    plan = plan_token_budget(builtin_corpus(["en", "es"]), max_tokens=4096, multiple_of=8, seed=1)
    assert (len(plan), _digest(plan)) == GOLDEN_BIBLE


def test_lognormal_plan_is_pinned():
    lengths = np.random.default_rng(0).lognormal(3.2, 0.6, 5000).astype(np.int64) + 1
    plan = plan_token_budget(lengths, max_tokens=1024, max_sentences=64, seed=3, epoch=2)
    assert (len(plan), _digest(plan)) == GOLDEN_LOGNORMAL


GOLDEN_SMALL = [[4, 6, 2], [5, 1], [7], [0], [3]]
GOLDEN_BIBLE = (295, "485dde3d4ad34985")
GOLDEN_LOGNORMAL = (154, "897740830104af1e")
