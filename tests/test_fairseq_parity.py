"""fairseq parity in the sampler: ``sort="source_first"`` walks (source, target) pairs in the
order of fairseq's ``LanguagePairDataset.ordered_indices`` (stable sorts by target, then by
source), so a resumable sampler makes the batches fairseq's ``batch_by_size`` makes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from padless import TokenBudget, TokenBudgetSampler, plan_token_budget


def fairseq_order(pairs: np.ndarray, seed: int) -> np.ndarray:
    """fairseq's ordered_indices, written here: a random permutation (shuffle=True), stably
    sorted by target length, then by source length (the source is the primary key)."""
    idx = np.random.default_rng(seed).permutation(pairs.shape[0])
    idx = idx[np.argsort(pairs[idx, 1], kind="stable")]
    return idx[np.argsort(pairs[idx, 0], kind="stable")]


def shapes(pairs: np.ndarray, batches) -> Counter:
    """Each batch as the multiset of its (source, target) lengths."""
    return Counter(tuple(sorted(map(tuple, pairs[np.asarray(b)].tolist()))) for b in batches)


@pytest.mark.parametrize("max_tokens", [1024, 4096])
def test_source_first_makes_fairseqs_batches_on_the_builtin_pairs(bible, max_tokens):
    fairseq = plan_token_budget(bible, max_tokens=max_tokens, order=fairseq_order(bible, 1))
    sampler = TokenBudgetSampler(bible, max_tokens=max_tokens, sort="source_first", seed=3)
    ours = sampler.epoch_plan(0)[0]
    assert len(ours) == len(fairseq)
    # the same walk of lengths, so the same cuts: batch for batch the same lengths
    assert shapes(bible, ours) == shapes(bible, fairseq)
    # the default (target first) is another walk: other batches
    default = TokenBudgetSampler(bible, max_tokens=max_tokens, seed=3).epoch_plan(0)[0]
    assert shapes(bible, default) != shapes(bible, fairseq)


def test_source_first_resumes_like_any_sampler(bible):
    full = list(TokenBudgetSampler(bible, max_tokens=2048, sort="source_first", seed=2))
    first = TokenBudgetSampler(bible, max_tokens=2048, sort="source_first", seed=2)
    it = iter(first)
    head = [next(it) for _ in range(17)]
    again = TokenBudgetSampler(bible, max_tokens=2048, sort="source_first", seed=2)
    again.load_state_dict(first.state_dict())
    assert head + list(again) == full
    # the order is a setting: its states say so (a resume across it is a change of settings)
    other = TokenBudgetSampler(bible, max_tokens=2048, seed=2)
    mine, theirs = first.state_dict()["fingerprint"], other.state_dict()["fingerprint"]
    assert mine.split("-")[0] == theirs.split("-")[0] and mine != theirs


def test_sort_is_checked_and_refused_where_it_cannot_act():
    with pytest.raises(ValueError, match=r"sort must be one of .*'source_first'.*got 'source'"):
        TokenBudget(max_tokens=64, sort="source")
    with pytest.raises(ValueError, match="budgets each field"):
        TokenBudget(max_tokens=(64, 32), sort="source_first")
    # the default keeps today's settings (saved states and digests unchanged)
    assert "sort" not in TokenBudget(max_tokens=64).as_dict()
    assert TokenBudget(max_tokens=64, sort="source_first").as_dict()["sort"] == "source_first"


def test_sort_meets_the_other_forms(bible):
    """Windows follow the order within each window; the stream and histogram forms, whose
    kernels walk their own order, refuse it when built."""
    pairs = bible[:3000]
    windowed = TokenBudgetSampler(pairs, max_tokens=1024, sort="source_first", window=1000)
    batches = list(windowed)
    assert sorted(i for b in batches for i in b) == list(range(3000))  # every pair once
    # the window form follows the setting: other batches than the default order makes
    default = list(TokenBudgetSampler(pairs, max_tokens=1024, window=1000))
    assert shapes(pairs, batches) != shapes(pairs, default)
    with pytest.raises(ValueError, match="histogram.*default sort"):
        TokenBudgetSampler(bible[:, 0], max_tokens=1024, sort="source_first", window="histogram")
    from padless import StreamBatcher

    with pytest.raises(ValueError, match="sort"):
        StreamBatcher([[1] * 5] * 10, TokenBudget(max_tokens=64, sort="source_first"), buffer=4)
