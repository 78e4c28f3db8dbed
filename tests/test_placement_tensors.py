"""A placed step as tensors (padless.torch.collate_segment / rank_batches): every rank's share
of every CP group's row, joined over the group, is the planned row — each sequence's tokens once,
in place, padded to ``2·cp`` — and a sample of another length than planned is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import padless
from padless import Mesh, Placer, PlanSampler, TokenBudget
from padless.core.mesh import padded
from padless.torch import collate_segment, join_cp_shares, rank_batches
from tests.test_placement import COST

RNG = np.random.default_rng(5)
LENGTHS = np.minimum((40 * (1 + RNG.pareto(1.1, 90))).astype(np.int64), 3000)
DOCS = [torch.randint(1, 30_000, (int(n),)) for n in LENGTHS]
MESHES = [
    Mesh(dp=2, cp=4, dynamic=True, max_tokens=512),
    Mesh(dp=1, cp=6, dynamic=True, max_tokens=600, aligned_groups=False),
    Mesh(dp=2, cp=4, dynamic=True, max_tokens=512, aligned_groups=True),
    Mesh(dp=2, cp=4, max_tokens=1024),
    Mesh(dp=2, cp=4, pp=2, dynamic=True, max_tokens=512),
]


def _joined(p: padless.Placement) -> dict[tuple[int, tuple[int, ...], int], dict]:
    """Per (micro-batch, group, first index): the group's shares joined into the whole row."""
    shares: dict[tuple[int, tuple[int, ...], int], dict[int, dict]] = {}
    for r in range(p.mesh.ranks):
        for m, micro in enumerate(rank_batches(p, r, DOCS)):
            for s in micro:
                key = (m, s["group"], int(s["indices"][0]))
                shares.setdefault(key, {})[s["cp_rank"]] = s
    out = {}
    for key, by_rank in shares.items():
        cp = len(key[1])
        assert sorted(by_rank) == list(range(cp))  # every rank of the group has its share
        parts = [by_rank[r] for r in range(cp)]
        assert all(np.array_equal(x["indices"], parts[0]["indices"]) for x in parts)
        tensors = [{k: v for k, v in x.items() if isinstance(v, torch.Tensor)} for x in parts]
        for t in tensors:
            t["max_seqlen"] = parts[0]["max_seqlen"]
        out[key] = (parts[0]["indices"], join_cp_shares(tensors) if cp > 1 else tensors[0])
    return out


@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: repr(m)[5:60])
def test_every_row_joined_is_the_planned_row(mesh: Mesh) -> None:
    p = padless.place(LENGTHS, mesh, COST)
    seen: list[int] = []
    for (_, group, _), (indices, row) in _joined(p).items():
        k = len(group)
        want = []
        for i in indices.tolist():
            doc = DOCS[i]
            pad = int(padded(np.array([doc.numel()]), k)[0]) - doc.numel()
            want.append(torch.cat([doc, torch.zeros(pad, dtype=doc.dtype)]))
        assert torch.equal(row["input_ids"].reshape(-1), torch.cat(want))
        lens = torch.tensor([DOCS[i].numel() for i in indices.tolist()])
        assert row["cu_seqlens"].tolist() == [0, *torch.cumsum(lens, 0).tolist()]
        seen.extend(indices.tolist())
    assert sorted(seen) == list(range(LENGTHS.size))  # each sequence in one group's row, once


def test_a_rank_holds_its_zigzag_share_within_the_budget() -> None:
    mesh = MESHES[0]
    p = padless.place(LENGTHS, mesh, COST)
    for r in range(mesh.ranks):
        for m, micro in enumerate(rank_batches(p, r, DOCS)):
            held = sum(int(s["input_ids"].numel()) for s in micro)
            assert held == int(p.rank_tokens()[m, r]) <= mesh.max_tokens


def test_mapping_samples_of_any_kind_give_the_same_tensors() -> None:
    """A Mapping that is not a dict (a BatchEncoding, a UserDict) was read as token ids."""
    import collections
    import types

    p = padless.place(LENGTHS, MESHES[0], COST)
    want = rank_batches(p, 1, DOCS)
    for kind in (dict, collections.UserDict, types.MappingProxyType):
        got = rank_batches(p, 1, [kind({"input_ids": d}) for d in DOCS])
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert all(
                torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, b, strict=True)
            )


def test_one_rank_segments_get_the_same_keys() -> None:
    p = padless.place(LENGTHS, MESHES[0], COST)
    solo = [s for m in rank_batches(p, 0, DOCS) for s in m if s["cp"] == 1]
    wide = [s for r in range(8) for m in rank_batches(p, r, DOCS) for s in m if s["cp"] > 1]
    assert solo and wide
    for s in solo:
        assert set(s) == set(wide[0])
        assert torch.equal(s["cu_seqlens_padded"], s["cu_seqlens"])
        assert torch.equal(s["shift_labels"][:, :-1], s["labels"][:, 1:])
        assert int(s["shift_labels"][0, -1]) == -100


def test_a_placer_step_delivers_its_batch() -> None:
    placer = Placer(PlanSampler(LENGTHS, TokenBudget(max_tokens=20_000), seed=1), MESHES[0], COST)
    step = next(iter(placer))
    rows = [
        s for r in range(8) for m in rank_batches(step, r, DOCS) for s in m if s["cp_rank"] == 0
    ]
    delivered = sorted(int(i) for s in rows for i in s["indices"])
    assert delivered == sorted(step.indices.tolist())


def test_a_sample_of_another_length_is_refused() -> None:
    p = padless.place(LENGTHS, MESHES[0], COST)
    seg = p.rank_step(0)[0][0]
    samples = [DOCS[int(i)] for i in seg.indices]
    samples[0] = samples[0][:-1]
    with pytest.raises(ValueError, match=f"sample {int(seg.indices[0])} has .* planned"):
        collate_segment(seg, samples)
    with pytest.raises(ValueError, match="samples must hold the segment's"):
        collate_segment(seg, samples[:-1] if len(samples) > 1 else [])
    with pytest.raises(TypeError, match="segment must be a padless Segment"):
        collate_segment((0, 1), samples)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="placement must be a padless Placement"):
        rank_batches("step", 0, DOCS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rank must be in"):
        rank_batches(p, 8, DOCS)


def test_a_token_store_serves_a_placed_step(tmp_path) -> None:
    # the documents read from a memory-mapped indexed dataset: the same tensors as from memory
    from padless.io.indexed import write_indexed

    store = write_indexed([d.numpy() for d in DOCS], tmp_path / "docs", dtype="int32")
    p = padless.place(LENGTHS, MESHES[0], COST)
    for r in range(MESHES[0].ranks):
        for a, b in zip(rank_batches(p, r, store), rank_batches(p, r, DOCS), strict=True):
            for x, y in zip(a, b, strict=True):
                assert torch.equal(x["input_ids"].long(), y["input_ids"].long())
                assert torch.equal(x["cu_seqlens_padded"], y["cu_seqlens_padded"])
