"""collate_packed: tensors for varlen attention, and packed == unpacked on a real attention layer."""

import math
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from padless.planners.packing import next_fit_rows
from padless.sampling.shortcuts import PackingSampler
from padless.torch import collate_packed


def random_corpus(n, low, high, seed=0, vocab=50):
    rs = np.random.default_rng(seed)
    return [rs.integers(1, vocab, int(k)).tolist() for k in rs.integers(low, high + 1, n)]


def segments_of(out):
    """Token ranges [a, b) of the segments cu_seqlens describes over input_ids.view(-1)."""
    cu = out["cu_seqlens"].tolist()
    return list(zip(cu[:-1], cu[1:], strict=True))


def expected_segments(lengths, capacity, flatten, rows=None):
    """(length, is_real) of every segment the collate should describe, from next fit."""
    if flatten:
        return [(n, True) for n in lengths]
    row_of = next_fit_rows(lengths, capacity=capacity).tolist()
    num_rows = rows if rows is not None else (row_of[-1] + 1 if row_of else 0)
    out = []
    for r in range(num_rows):
        mine = [n for n, q in zip(lengths, row_of, strict=True) if q == r]
        out += [(n, True) for n in mine]
        if sum(mine) < capacity:
            out.append((capacity - sum(mine), False))
    return out


def check_batch(out, samples, capacity, flatten, position_start=0):
    ids = out["input_ids"]
    flat = ids.reshape(-1)
    cu = out["cu_seqlens"]
    assert cu.dtype == torch.int32 and cu[0] == 0 and cu[-1] == flat.numel()
    assert torch.all(cu[1:] >= cu[:-1])
    assert type(out["max_seqlen"]) is int
    assert out["max_seqlen"] == max((b - a for a, b in segments_of(out)), default=0)
    for name in ("labels", "position_ids", "seq_idx"):
        assert out[name].shape == ids.shape
    assert out["seq_idx"].dtype == torch.int32
    if flatten:
        assert ids.shape == (1, sum(len(s) for s in samples))
    else:
        assert ids.shape[1] == capacity
    # segments: the samples in order, each row's padding tail after them (2-D)
    segs = expected_segments([len(x) for x in samples], capacity, flatten)
    cu = [0, *np.cumsum([n for n, _ in segs]).tolist()]
    assert out["cu_seqlens"].tolist() == cu
    pos = out["position_ids"].reshape(-1)
    seq_idx = out["seq_idx"].reshape(-1)
    labels = out["labels"].reshape(-1)
    real = iter(samples)
    for j, ((a, b), (_, is_real)) in enumerate(zip(segments_of(out), segs, strict=True)):
        assert pos[a:b].tolist() == list(range(position_start, position_start + b - a))
        assert torch.all(seq_idx[a:b] == j)
        if is_real:
            sample = list(next(real))
            assert flat[a:b].tolist() == sample
            if b > a:
                assert labels[a] == -100
                assert labels[a + 1 : b].tolist() == sample[1:]
        else:
            assert torch.all(labels[a:b] == -100) and torch.all(flat[a:b] == 0)


def test_docstring_layout_and_flatten():
    samples = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16, 17], [18]]
    out = collate_packed(8)(samples)
    check_batch(out, samples, 8, flatten=False)
    assert out["seq_idx"].tolist() == [[0] * 6 + [1] * 2, [2] * 5 + [3] + [4] * 2]
    flat = collate_packed(8, flatten=True, position_start=2)(samples)
    check_batch(flat, samples, 8, flatten=True, position_start=2)
    assert flat["input_ids"].tolist() == [list(range(5, 19))]
    assert flat["cu_seqlens"].tolist() == [0, 6, 8, 13, 14]
    assert flat["max_seqlen"] == 6
    assert flat["position_ids"].tolist() == [[2, 3, 4, 5, 6, 7, 2, 3, 2, 3, 4, 5, 6, 2]]
    assert flat["labels"][0, [0, 6, 8, 13]].tolist() == [-100] * 4


@given(
    st.lists(st.lists(st.integers(1, 99), max_size=20), max_size=12),
    st.sampled_from([20, 21, 32]),
    st.booleans(),
    st.integers(0, 2),
)
def test_any_batch_is_laid_out_consistently(samples, capacity, flatten, position_start):
    out = collate_packed(capacity, flatten=flatten, position_start=position_start)(samples)
    check_batch(out, samples, capacity, flatten, position_start)
    if not flatten:
        rows = next_fit_rows([len(s) for s in samples], capacity=capacity)
        assert out["input_ids"].shape[0] == (rows.max() + 1 if samples else 0)


def test_fixed_rows_mappings_truncate_and_errors():
    samples = [{"input_ids": torch.tensor([1, 2, 3]), "id": 0}, {"input_ids": [4, 5]}]
    out = collate_packed(4, rows=3, pad_id=-1)(samples)
    assert out["input_ids"].tolist() == [[1, 2, 3, -1], [4, 5, -1, -1], [-1, -1, -1, -1]]
    assert out["cu_seqlens"].tolist() == [0, 3, 4, 6, 8, 12]
    assert out["max_seqlen"] == 4
    capped = collate_packed(8, max_per_row=1)([[1], [2], [3]])
    assert capped["input_ids"].shape == (3, 8)
    assert collate_packed(3, truncate=True)([[1, 2, 3, 4, 5]])["input_ids"].tolist() == [[1, 2, 3]]
    empty = collate_packed(4)([])
    assert empty["input_ids"].shape == (0, 4) and empty["cu_seqlens"].tolist() == [0]
    assert empty["max_seqlen"] == 0
    with pytest.raises(ValueError, match=r"sample \[0\] has 5 tokens, more than capacity=3"):
        collate_packed(3)([[1, 2, 3, 4, 5]])
    with pytest.raises(ValueError, match="needs 2 rows of capacity=4, more than rows=1"):
        collate_packed(4, rows=1)([[1, 2, 3], [4, 5]])
    with pytest.raises(ValueError, match="capacity must be a positive int, got 0"):
        collate_packed(0)
    with pytest.raises(TypeError, match="flatten must be a bool"):
        collate_packed(4, flatten=1)
    with pytest.raises(ValueError, match="position_start must be a non-negative int"):
        collate_packed(4, position_start=-1)
    with pytest.raises(TypeError, match="must hold integer token ids"):
        collate_packed(4)([[1.5, 2.0]])
    with pytest.raises(ValueError, match="token id 9223372036854775813, past int64"):
        collate_packed(4)([np.array([2**63 + 5, 1], np.uint64)])  # wrapped to a negative id
    # rows of text, holes or a dict where ids were meant: named (were torch's own words)
    from padless.torch import collate_padded

    for bad, words, collates in (
        ({"input_ids": [1, 2]}, r"got dict .*name its ids with fields= or key=", [collate_padded]),
        (["a", "b"], r"sample \[0\] must be a 1-D sequence of integer token ids, got list", None),
        ([4, None], "integer token ids, got list", None),
    ):
        for collate in collates or (collate_packed, collate_padded):
            with pytest.raises(TypeError, match=words):
                collate(4 if collate is collate_packed else 0)([bad])
    collate = pickle.loads(pickle.dumps(collate_packed(8, max_per_row=3, flatten=True)))
    assert "capacity=8" in repr(collate) and collate([[1, 2]])["input_ids"].tolist() == [[1, 2]]


# ---------------------------------------------------------------------------------- equivalence


class TinyCausalAttention(torch.nn.Module):
    """One causal self-attention layer with learned absolute positions, in float64."""

    def __init__(self, vocab=64, dim=16, heads=2, max_pos=80):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.heads, self.dim = heads, dim

        def w(*shape):
            return torch.nn.Parameter(torch.randn(*shape, generator=gen, dtype=torch.float64))

        self.tok, self.pos = w(vocab, dim), w(max_pos, dim)
        self.qkv, self.out = w(dim, 3 * dim) / math.sqrt(dim), w(dim, dim) / math.sqrt(dim)

    def forward(self, ids, positions, allowed):
        """ids, positions: (T,); allowed: (T, T) bool, True where query i may attend key j."""
        x = self.tok[ids] + self.pos[positions]
        q, k, v = (x @ self.qkv).split(self.dim, dim=-1)
        t, d = ids.shape[0], self.dim // self.heads
        q, k, v = (z.view(t, self.heads, d).transpose(0, 1) for z in (q, k, v))
        scores = (q @ k.transpose(1, 2)) / math.sqrt(d)
        scores = scores.masked_fill(~allowed, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        h = y.transpose(0, 1).reshape(t, self.dim) @ self.out
        return h, h @ self.tok.T  # hidden states and logits


def block_causal_mask(cu_seqlens, total):
    """Block-diagonal causal mask from cu_seqlens: i attends j iff same segment and j <= i."""
    seg = torch.searchsorted(cu_seqlens.to(torch.long), torch.arange(total), right=True) - 1
    causal = torch.arange(total)[None, :] <= torch.arange(total)[:, None]
    return (seg[:, None] == seg[None, :]) & causal


@pytest.mark.parametrize("flatten", [False, True])
@pytest.mark.parametrize("position_start", [0, 2])
def test_packed_attention_equals_each_sequence_alone(flatten, position_start):
    corpus = random_corpus(40, 1, 30, seed=3)
    lengths = [len(s) for s in corpus]
    sampler = PackingSampler(lengths, capacity=48, rows_per_batch=3, seed=2)
    collate = collate_packed(48, flatten=flatten, position_start=position_start)
    model = TinyCausalAttention()
    loss_fn = torch.nn.functional.cross_entropy
    checked = 0
    with torch.no_grad():
        for batch in sampler:
            out = collate([corpus[i] for i in batch])
            ids = out["input_ids"].reshape(-1)
            pos = out["position_ids"].reshape(-1)
            mask = block_causal_mask(out["cu_seqlens"], ids.numel())
            hidden, logits = model(ids, pos, mask)
            # next-token loss over the packed tokens: labels shifted by one, boundaries masked
            packed_loss = loss_fn(
                logits[:-1], out["labels"].reshape(-1)[1:], ignore_index=-100, reduction="sum"
            )
            alone_loss = torch.zeros((), dtype=torch.float64)
            cu = out["cu_seqlens"].tolist()
            segs = expected_segments([lengths[i] for i in batch], 48, flatten)
            real = iter(batch)
            for a, b, (_, is_real) in zip(cu[:-1], cu[1:], segs, strict=True):
                if not is_real:
                    continue
                seq = torch.tensor(corpus[next(real)])
                assert torch.equal(ids[a:b], seq)
                n = seq.numel()
                alone_pos = torch.arange(n) + position_start
                causal = torch.arange(n)[None, :] <= torch.arange(n)[:, None]
                h_alone, logits_alone = model(seq, alone_pos, causal)
                torch.testing.assert_close(hidden[a:b], h_alone, rtol=1e-12, atol=1e-12)
                if n > 1:
                    alone_loss += loss_fn(logits_alone[:-1], seq[1:], reduction="sum")
                checked += 1
            assert next(real, None) is None
            torch.testing.assert_close(packed_loss, alone_loss, rtol=1e-12, atol=1e-12)
    assert checked == len(corpus)


def test_dataloader_with_split_pieces_sees_every_token_once():
    corpus = random_corpus(30, 1, 100, seed=5)
    lengths = [len(s) for s in corpus]
    sampler = PackingSampler(lengths, capacity=32, oversize="split", rows_per_batch=2, seed=1)
    loader = torch.utils.data.DataLoader(
        sampler.pieces(corpus),
        batch_sampler=sampler,
        collate_fn=collate_packed(32, rows=2),
    )
    pieces = [sampler.pieces(corpus)[c] for batch in sampler for c in batch]
    got = []
    for out in loader:
        assert out["input_ids"].shape == (2, 32)
        flat = out["input_ids"].reshape(-1)
        cu = out["cu_seqlens"].tolist()
        for a, b in zip(cu[:-1], cu[1:], strict=True):
            if flat[a:b].ne(0).all():  # token ids are >= 1, padding is 0
                got.append(flat[a:b].tolist())
    assert got == [p for p in pieces if p]
    # every token of every sequence, piece by piece, across the epoch
    by_seq = {}
    for batch in sampler:
        for c in batch:
            i, k = divmod(c, len(corpus))[::-1]
            by_seq.setdefault(i, []).append((k, sampler.pieces(corpus)[c]))
    assert all([t for _, p in sorted(parts) for t in p] == corpus[i] for i, parts in by_seq.items())
    assert sorted(by_seq) == list(range(len(corpus)))
