"""The report's peer rows are the peers' own behaviour: HF ``group_by_length`` is transformers'
``get_length_grouped_indices`` (megabatches of at most 50 batches, fewer on a small corpus so
there are 4, the longest item first), so the row's padding is HF's on any corpus size."""

from __future__ import annotations

import numpy as np
import pytest

import padless
from padless.sampling.report import compare_strategies, grouped_by_length

torch = pytest.importorskip("torch")
trainer_pt_utils = pytest.importorskip("transformers.trainer_pt_utils")


@pytest.mark.parametrize("n", [1, 7, 64, 300, 3000, 20000])
@pytest.mark.parametrize("batch_size", [1, 16, 64])
def test_group_by_length_row_is_transformers_order(n, batch_size):
    rng = np.random.default_rng(n + batch_size)
    sizes = np.minimum(rng.zipf(1.3, n), 4000).astype(np.int64)
    for seed in range(3):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).numpy()
        ours = grouped_by_length(order.astype(np.int64), sizes, batch_size)
        hf = trainer_pt_utils.get_length_grouped_indices(
            sizes.tolist(), batch_size, generator=torch.Generator().manual_seed(seed)
        )
        assert ours.indices.tolist() == hf
        # the DataLoader cuts HF's list every batch_size items; so does the row
        assert ours.offsets.tolist() == [*range(0, n, batch_size), n]


def test_a_corpus_without_tokens_gets_no_made_up_ratio():
    rows = compare_strategies(np.zeros(5, dtype=np.int64), max_tokens=16, batch_size=2)
    for row in rows:
        assert "e+" not in row.note and "99999" not in row.note, row.note
    assert any("least padding" in row.note for row in rows)


def test_the_report_row_pads_as_transformers_on_a_small_corpus():
    """en[:3000] at 64 per batch: 11 megabatches of 11 batches (50 before: 2.6% padding, where
    HF's own sampler pads 11%)."""
    lengths = padless.builtin_corpus("en")[:3000]
    rows = {r.strategy: r for r in compare_strategies(lengths, batch_size=64)}
    pads = []
    for seed in range(3):
        order = np.array(
            list(
                trainer_pt_utils.LengthGroupedSampler(
                    64, lengths=lengths.tolist(), generator=torch.Generator().manual_seed(seed)
                )
            )
        )
        batches = [order[i : i + 64] for i in range(0, order.size, 64)]
        slots = sum(len(b) * lengths[b].max() for b in batches)
        pads.append(100 * (1 - lengths.sum() / slots))
    assert abs(rows["group_by_length"].padding_pct - np.mean(pads)) < 2.0
