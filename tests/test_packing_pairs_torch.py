"""collate_packed_pairs: the rows of Packing(capacity=(C_src, C_tgt)) batches, field by field."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import padless
from padless.torch import collate_for, collate_packed, collate_packed_pairs

PAD, IGNORE, START = 0, -100, 1


def _dataset(lengths, seed):
    """(source, target) token lists of the given lengths (ids from 2 on: 0 pads, 1 starts)."""
    rs = np.random.default_rng(seed)
    return [(rs.integers(2, 99, a).tolist(), rs.integers(2, 99, b).tolist()) for a, b in lengths]


def _check_batch(out, rows, dataset, caps):
    """Every planned row's pairs, back to back in each field's row, and nothing else."""
    num_rows = len(rows)
    assert out["input_ids"].shape == (num_rows, caps[0])
    assert out["labels"].shape == out["decoder_input_ids"].shape == (num_rows, caps[1])
    cu = {f: out[f"cu_seqlens_{f}"].tolist() for f in ("src", "tgt")}
    assert len(cu["src"]) == len(cu["tgt"])  # segment k of one field pairs with k of the other
    k = 0
    for r, row in enumerate(rows):
        src = [t for i in row for t in dataset[i][0]]
        tgt = [t for i in row for t in dataset[i][1]]
        assert len(src) <= caps[0] and len(tgt) <= caps[1]  # a row keeps both capacities
        assert out["input_ids"][r].tolist() == src + [PAD] * (caps[0] - len(src))
        assert out["labels"][r].tolist() == tgt + [IGNORE] * (caps[1] - len(tgt))
        dec = []
        for i in row:
            a, b = cu["src"][k] - r * caps[0], cu["tgt"][k] - r * caps[1]
            source, target = dataset[i]
            assert cu["src"][k + 1] - cu["src"][k] == len(source)
            assert cu["tgt"][k + 1] - cu["tgt"][k] == len(target)
            assert out["position_ids_src"][r, a : a + len(source)].tolist() == list(
                range(len(source))
            )
            assert out["position_ids_tgt"][r, b : b + len(target)].tolist() == list(
                range(len(target))
            )
            assert (out["seq_idx_src"][r, a : a + len(source)] == k).all()
            assert (out["seq_idx_tgt"][r, b : b + len(target)] == k).all()
            dec += ([START] + target[:-1]) if target else []
            k += 1
        k += 1  # the row's tail, a segment in both fields (maybe empty)
        assert out["decoder_input_ids"][r].tolist() == dec + [PAD] * (caps[1] - len(dec))
    assert k == len(cu["src"]) - 1
    assert out["max_seqlen_src"] == max(np.diff(cu["src"]), default=0)


@settings(max_examples=25, deadline=None)
@given(
    st.tuples(st.integers(12, 40), st.integers(12, 40)),
    st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=40),
    st.sampled_from([None, 2]),
    st.sampled_from([1, 3]),
    st.integers(0, 5),
)
def test_rows_of_each_field_reassemble_the_planned_pairs(caps, pairs, max_per_row, per, seed):
    lengths = np.array(pairs, dtype=np.int64)
    dataset = _dataset(lengths, seed)
    spec = padless.Packing(capacity=caps, max_per_row=max_per_row, rows_per_batch=per)
    plan = spec.plan(lengths, seed=seed)
    collate = collate_for(spec, decoder_start_id=START)
    for b in range(len(plan)):
        out = collate([dataset[i] for i in plan[b].tolist()])
        _check_batch(out, [r.tolist() for r in plan.batch_rows(b)], dataset, caps)


def test_a_sampler_collates_its_batches_through_a_dataloader():
    lengths = padless.builtin_corpus(["en", "es"])[:400]
    dataset = _dataset(lengths, 1)
    sampler = padless.PlanSampler(lengths, padless.Packing(capacity=(256, 256), rows_per_batch=2))
    loader = torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, collate_fn=collate_for(sampler, decoder_start_id=START)
    )
    src = tgt = 0
    for out in loader:
        assert out["input_ids"].shape[1] == out["labels"].shape[1] == 256
        src += int((out["input_ids"] != PAD).sum())
        tgt += int((out["labels"] != IGNORE).sum())
    assert (src, tgt) == tuple(lengths.sum(axis=0).tolist())  # every pair's tokens once


def test_mapping_samples_fixed_rows_and_no_decoder_inputs():
    collate = collate_packed_pairs((6, 4), rows=3, keys=("src", "tgt"), position_start=2)
    out = collate([{"src": [5, 6], "tgt": [7]}, {"src": torch.tensor([8]), "tgt": [9, 9]}])
    assert out["input_ids"].tolist() == [[5, 6, 8, 0, 0, 0], [0] * 6, [0] * 6]
    assert out["labels"].tolist() == [[7, 9, 9, -100], [-100] * 4, [-100] * 4]
    assert out["position_ids_src"][0].tolist() == [2, 3, 2, 2, 3, 4]
    assert out["cu_seqlens_tgt"].tolist() == [0, 1, 3, 4, 8, 12]
    assert "decoder_input_ids" not in out


def test_bad_batches_and_settings_are_refused_by_name():
    collate = collate_packed_pairs((4, 4), rows=1)
    with pytest.raises(ValueError, match=r"sample \[1\] has \(5, 1\) tokens"):
        collate([([1], [1]), ([1] * 5, [1])])
    with pytest.raises(ValueError, match="the batch needs 2 rows .* more than rows=1"):
        collate([([1, 1, 1], [1]), ([1, 1], [1])])
    with pytest.raises(TypeError, match=r"sample \[0\] must be a \(source, target\) pair"):
        collate([[1, 2, 3]])
    with pytest.raises(ValueError, match=r"sample \[0\] has no field 'labels'"):
        collate([{"input_ids": [1]}])
    pairs = padless.Packing(capacity=(8, 8), max_per_row=2)
    with pytest.raises(ValueError, match="collate_packed_pairs"):
        collate_packed(pairs)
    with pytest.raises(ValueError, match="max_per_row must match"):
        collate_packed_pairs(pairs, max_per_row=3)
    with pytest.raises(ValueError, match=r"capacity must be a pair or a Packing spec"):
        collate_packed_pairs(padless.Packing(capacity=8))
    with pytest.raises(TypeError, match="capacity must not be passed"):
        collate_for(pairs, capacity=(8, 8))
    assert collate_for(pairs).max_per_row == 2


def test_token_dataset_refuses_a_plan_of_pairs(tmp_path):
    from padless.torch import TokenDataset

    path = tmp_path / "t.bin"
    np.tile(np.array([5, 6, 0], dtype=np.uint16), 4).tofile(path)
    spec = padless.Packing(capacity=(8, 8))
    with pytest.raises(ValueError, match=r"the plan packs \(source, target\) pairs"):
        TokenDataset(str(path), dtype="uint16", eos=0, plan=spec)
