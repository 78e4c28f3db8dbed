"""Packing for context parallelism (issue 30): ``Packing(context_parallel=cp)`` and its collate.

Every document is planned padded to a multiple of ``2·cp``; CP rank ``r`` holds chunks ``r`` and
``2·cp − 1 − r`` of every (padded) document. The ranks' work is computed here independently of
padless (positions listed chunk by chunk, keys attended summed token by token).

The balance, derived: a document of ``l`` real tokens padded to ``L = 2·cp·c``. Chunk ``k``
attends ``Σ_{p=kc}^{(k+1)c−1} (p + 1) = c²·k + c(c+1)/2`` keys, so rank ``r`` attends
``c²·(2cp − 1) + c(c + 1) = c·(L + 1)`` with no padding: exactly the same on every rank. The
padding, positions ``l..L−1``, takes its keys ``B = Σ_{p=l}^{L−1} (p + 1)`` from the ranks whose
chunks hold them, so the ranks differ by at most ``B``, and by exactly ``B`` when the padding
fits in the last chunk (``L − l <= c``: it is all rank 0's). ``B <= (L − l)·L < (2cp − 1)·L``:
a share ``<= 2cp·(2cp − 1)/(L + 1)`` of a rank's keys, under 1% from ``L + 1 >= 101·2cp·(2cp − 1)``
(1212 tokens at cp=2, 5656 at cp=4, 24240 at cp=8) and much less on average (the padding is
``cp − ½`` tokens on average, not ``2cp − 1``). A row's spread is at most ``ΣB / (F − ΣB)``
(``F`` its keys with no padding). Rows of long documents are balanced to well under 1%; a row of
short documents can be 10% off in attention alone at cp=8, but its attention is a sliver of its
step (linear layers run on ``capacity / cp`` tokens on every rank): the 7B-like step cost of
every web-like row is within 0.1% (see benchmarks/bench_context_parallel.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import padless
from padless import Cost, Packing, PackingSampler, PlanSampler
from padless.core.cost import context_parallel_costs, packed_batch_costs, zigzag_work
from padless.planners.packing import PieceDataset
from padless.torch import collate_packed, join_cp_shares, zigzag_indices

SEVEN_B = Cost.transformer(4096, 32, d_ff=int(1.5 * 11008), vocab=32000)
KEYS = ("input_ids", "labels", "shift_labels", "position_ids", "seq_idx")


def rank_positions(padded: int, cp: int, r: int) -> list[int]:
    """Positions within a document padded to ``padded`` tokens that CP rank ``r`` holds."""
    if cp == 1:
        return list(range(padded))
    c = padded // (2 * cp)
    return list(range(r * c, (r + 1) * c)) + list(range((2 * cp - 1 - r) * c, (2 * cp - r) * c))


def rank_keys(length: int, cp: int) -> list[int]:
    """Keys each rank's real tokens of one document attend causally: Σ (p + 1), p < length."""
    m = 1 if cp == 1 else 2 * cp
    padded = -(-length // m) * m
    return [sum(p + 1 for p in rank_positions(padded, cp, r) if p < length) for r in range(cp)]


def web_like(n: int, seed: int = 0) -> np.ndarray:
    raw = np.random.default_rng(seed).lognormal(np.log(600.0), 1.3, n)
    return np.clip(np.round(raw), 16, 200_000).astype(np.int64)


# ------------------------------------------------------------------ the spec


def test_cp1_is_todays_packing():
    lengths = np.random.default_rng(0).integers(1, 200, 500)
    plain, one = Packing(capacity=256), Packing(capacity=256, context_parallel=1)
    assert one.as_dict() == plain.as_dict() and "context_parallel" not in plain.as_dict()
    assert one.plan(lengths, seed=3) == plain.plan(lengths, seed=3)
    assert "context_parallel" not in plain.plan(lengths).info
    a = PlanSampler(lengths, plain, seed=1, balance=True)
    b = PlanSampler(lengths, one, seed=1, balance=True)
    assert a.state_dict() == b.state_dict() and list(a) == list(b)
    batch = [[5, 6, 7], [8], [9, 10]]
    today, again = collate_packed(8)(batch), collate_packed(8, context_parallel=1, cp_rank=0)(batch)
    assert today.keys() == again.keys()
    for k, v in today.items():
        same = torch.equal(v, again[k]) if isinstance(v, torch.Tensor) else v == again[k]
        assert same, k


def test_cp_setting_is_recorded_and_checked():
    spec = Packing(capacity=64, context_parallel=4)
    assert spec.as_dict()["context_parallel"] == 4
    assert padless.spec_from_dict(padless.spec_to_dict(spec)) == spec
    assert "context_parallel=4" in spec.describe()
    with pytest.raises(
        ValueError, match=r"capacity must be a multiple of 2 \* context_parallel = 8"
    ):
        Packing(capacity=60, context_parallel=4)
    with pytest.raises(ValueError, match="context_parallel must be a positive int"):
        Packing(capacity=64, context_parallel=0)
    with pytest.raises(ValueError, match="not supported by StreamBatcher"):
        padless.StreamBatcher(iter([[1, 2]]), spec)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 300), min_size=1, max_size=80),
    cp=st.sampled_from([1, 2, 4, 8]),
    chunks=st.integers(4, 32),
    oversize=st.sampled_from(["split", "truncate", "drop"]),
)
def test_plan_rounds_documents_and_counts_only_real_tokens(lengths, cp, chunks, oversize):
    m = 1 if cp == 1 else 2 * cp
    capacity = m * chunks
    plan = Packing(capacity=capacity, context_parallel=cp, oversize=oversize).plan(lengths, seed=1)
    sizes = np.asarray(lengths)
    pieces = plan.piece_lengths
    # each row's padded pieces fit; pieces are real tokens of their sequence
    for r in range(plan.num_rows):
        lo, hi = int(plan.rows.offsets[r]), int(plan.rows.offsets[r + 1])
        assert int((-(-pieces[lo:hi] // m) * m).sum()) <= capacity
    assert (plan.piece_stop <= sizes[plan.indices]).all()
    real = int(pieces.sum())
    assert plan.real_tokens == real == plan.info["real_tokens"]
    slots = plan.num_rows * capacity
    assert plan.efficiency == pytest.approx(real / slots if slots else 1.0)
    assert plan.info["efficiency"] == pytest.approx(plan.efficiency)
    stats = plan.stats(lengths)
    assert stats.padding_fraction == pytest.approx(1 - plan.efficiency)
    # the rounding is padding: at least Σ (round_up(l) - l) slots hold no real token
    assert slots - real >= int((-(-pieces // m) * m - pieces).sum())
    over = sizes > capacity
    if oversize == "split":  # every token once, pieces cut at multiples of capacity
        assert (plan.piece_start % capacity == 0).all()
        for i, n in enumerate(lengths):
            mine = plan.indices == i
            got = sorted(
                zip(plan.piece_start[mine].tolist(), plan.piece_stop[mine].tolist(), strict=True)
            )
            assert got == [(k, min(k + capacity, n)) for k in range(0, max(n, 1), capacity)]
    elif oversize == "truncate":
        assert sorted(plan.indices.tolist()) == list(range(len(lengths)))
        assert (pieces == np.minimum(sizes[plan.indices], capacity)).all()
        assert plan.info["tokens_lost"] == int((sizes[over] - capacity).sum())
    else:
        assert plan.skipped.tolist() == np.flatnonzero(over).tolist()
        assert plan.info["tokens_lost"] == int(sizes[over].sum())


# ------------------------------------------------------------------ the collate


def _batches(lengths: list[int], cp: int, capacity: int, seed: int):
    """(sampler, the batches' samples): pieces of random token ids, as a DataLoader gives them."""
    rng = np.random.default_rng(seed)
    data = [rng.integers(1, 1000, n).tolist() for n in lengths]
    sampler = PackingSampler(
        lengths, capacity=capacity, rows_per_batch=2, oversize="split", context_parallel=cp,
        seed=seed,
    )  # fmt: skip
    pieces = PieceDataset(data, capacity=capacity)
    return sampler, [[pieces[c] for c in batch] for batch in sampler]


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 200), min_size=1, max_size=40),
    cp=st.sampled_from([1, 2, 4, 8]),
    chunks=st.integers(2, 12),
    flatten=st.booleans(),
    seed=st.integers(0, 5),
)
def test_shares_reassemble_every_row_exactly(lengths, cp, chunks, flatten, seed):
    m = 1 if cp == 1 else 2 * cp
    capacity = m * chunks
    sampler, batches = _batches(lengths, cp, capacity, seed)
    plan, order = sampler.epoch_plan(0)
    for b, samples in list(zip(order.tolist(), batches, strict=True))[:6]:  # a few batches each
        shares = [
            collate_packed(sampler, cp_rank=r, flatten=flatten, position_start=1)(samples)
            for r in range(cp)
        ]
        if cp == 1:  # today's batch, for the one rank
            today = collate_packed(capacity, flatten=flatten, position_start=1)(samples)
            assert all(torch.equal(today[k], shares[0][k]) for k in ("input_ids", "labels"))
            continue
        whole = collate_packed(sampler, flatten=flatten, position_start=1)(samples)
        joined = join_cp_shares(shares)
        for k in KEYS:
            assert torch.equal(joined[k], whole[k]), k
        cu = whole["cu_seqlens_padded"].tolist()
        real = torch.diff(whole["cu_seqlens"]).tolist()
        widths = np.diff(cu)
        assert (widths % m == 0).all() and all(
            0 <= n <= w for n, w in zip(real, widths, strict=True)
        )
        flat = {k: whole[k].reshape(-1) for k in KEYS}
        # each rank's share, cut here chunk by chunk, is what its collate gave
        for r, share in enumerate(shares):
            mine = [cu[i] + p for i in range(len(real)) for p in rank_positions(widths[i], cp, r)]
            for k in KEYS:
                assert share[k].reshape(-1).tolist() == flat[k][mine].tolist(), (r, k)
            assert share["input_ids"].shape[-1] * cp == whole["input_ids"].shape[-1]
        # the segments: the samples in order (each row's tail a segment of no real token)
        got = [flat["input_ids"][cu[i] : cu[i] + n].tolist() for i, n in enumerate(real) if n]
        assert got == [d for d in samples if d]
        for i, n in enumerate(real):
            seg = slice(cu[i], cu[i + 1])
            assert flat["position_ids"][seg].tolist() == list(range(1, widths[i] + 1))
            labels, shift = flat["labels"][seg].tolist(), flat["shift_labels"][seg].tolist()
            ids = flat["input_ids"][seg].tolist()
            ignored = [-100] * widths[i]
            assert labels == ([-100] + ids[1:n] + ignored[n:] if n else ignored)
            assert shift == ids[1:n] + ignored[max(n - 1, 0) :]
        # the rows are the plan's (next fit over the padded lengths gives them back)
        if not flatten:
            rows, width = whole["input_ids"].shape
            assert width == capacity and rows == len(plan.batch_rows(b))


def test_collate_options_follow_the_spec():
    from padless.torch import collate_for

    spec = Packing(capacity=32, context_parallel=4)
    sampler = PackingSampler([5, 9, 3], capacity=32, context_parallel=4)
    assert collate_for(sampler, cp_rank=2).cp_rank == 2
    assert collate_packed(spec).context_parallel == 4
    with pytest.raises(ValueError, match="context_parallel must match the packing spec's"):
        collate_packed(spec, context_parallel=2)
    with pytest.raises(TypeError, match="context_parallel must not be passed"):
        collate_for(sampler, context_parallel=4)
    with pytest.raises(ValueError, match=r"cp_rank must be in \[0, context_parallel\)"):
        collate_packed(spec, cp_rank=4)
    with pytest.raises(ValueError, match="attention_mask must be None with context_parallel"):
        collate_packed(spec, attention_mask="block")
    with pytest.raises(ValueError, match=r"capacity must be a multiple of 2 \* context_parallel"):
        collate_packed(30, context_parallel=4)
    with pytest.raises(ValueError, match="segments of a multiple of 2"):
        zigzag_indices([0, 6], 2, 0)
    out = [collate_packed(spec, cp_rank=r)([[1] * 9, [2] * 5, [3] * 3]) for r in range(4)]
    with pytest.raises(ValueError, match="other cu_seqlens_padded"):
        join_cp_shares([out[0], collate_packed(spec, cp_rank=1)([[1] * 9])])
    with pytest.raises(ValueError, match="shares must hold one batch"):
        join_cp_shares([])


def test_token_dataset_refuses_a_context_parallel_plan(tmp_path):
    from padless.torch import TokenDataset

    tokens = np.tile(np.array([5, 6, 7, 0], dtype=np.uint16), 4)  # four documents, eos 0
    path = tmp_path / "t.bin"
    tokens.tofile(path)
    sampler = PackingSampler(np.full(4, 4), capacity=32, context_parallel=4)
    with pytest.raises(ValueError, match="plan must not pack for context parallelism"):
        TokenDataset(str(path), dtype="uint16", eos=0, plan=sampler)
    assert len(TokenDataset(str(path), dtype="uint16", eos=0, plan=PackingSampler(
        np.full(4, 4), capacity=32))) > 0  # fmt: skip


# ------------------------------------------------------------------ balance


@settings(max_examples=60, deadline=None)
@given(length=st.integers(0, 3000), cp=st.sampled_from([2, 4, 8]))
def test_a_documents_ranks_differ_by_at_most_its_paddings_keys(length, cp):
    m = 2 * cp
    padded = -(-length // m) * m
    c = padded // m
    keys = rank_keys(length, cp)
    tokens, work = zigzag_work([length], cp)
    assert work[0].tolist() == keys
    assert tokens[0].tolist() == [
        sum(p < length for p in rank_positions(padded, cp, r)) for r in range(cp)
    ]
    lost = sum(p + 1 for p in range(length, padded))  # B: the padding's keys
    spread = max(keys) - min(keys)
    assert sum(keys) + lost == cp * c * (padded + 1)  # c·(L + 1) each, less the padding's
    assert spread <= lost <= (padded - length) * padded
    if padded - length <= c:  # the padding sits in the last chunk: rank 0 loses all of it
        assert spread == lost and keys[0] == min(keys)
    if length == padded:
        assert keys == [c * (padded + 1)] * cp


def _row_keys(samples, cp, capacity) -> list[int]:
    """Keys each rank attends in a batch, summed over the real tokens of its collated share."""
    out = []
    for r in range(cp):
        share = collate_packed(capacity, context_parallel=cp, cp_rank=r, flatten=True)(samples)
        real = torch.diff(share["cu_seqlens"])[share["seq_idx"].reshape(-1).long()]
        pos = share["position_ids"].reshape(-1)
        out.append(int((pos + 1)[pos < real].sum()))
    return out


@settings(max_examples=15, deadline=None)
@given(cp=st.sampled_from([2, 4, 8]), data=st.data())
def test_rows_of_long_documents_are_balanced_within_one_percent(cp, data):
    """Every document at least 101·2cp·(2cp − 1) − 1 tokens: each rank within 1% of the others."""
    shortest = 101 * 2 * cp * (2 * cp - 1) - 1
    lengths = data.draw(st.lists(st.integers(shortest, 2 * shortest), min_size=1, max_size=3))
    m = 2 * cp
    capacity = m * (-(-sum(lengths) // m) + len(lengths))  # room for them all, padded
    keys = _row_keys([torch.ones(n, dtype=torch.long) for n in lengths], cp, capacity)
    assert max(keys) / min(keys) - 1 <= 0.01


def test_web_rows_are_balanced_within_their_bound():
    """Rows of web-like documents at 32k: each row's ranks within the bound ΣB / (F − ΣB) in
    attention, the attention within 1% over all rows, and the 7B-like step cost of every row
    within 1% (linear layers on capacity / cp tokens per rank, plus its attention)."""
    cp, capacity = 4, 32_768
    lengths = web_like(1500, seed=2)
    plan = Packing(capacity=capacity, context_parallel=cp, oversize="split").plan(lengths)
    pieces = plan.piece_lengths
    totals = np.zeros(cp)
    tops = 0.0
    for r in range(min(plan.num_rows, 40)):
        lo, hi = int(plan.rows.offsets[r]), int(plan.rows.offsets[r + 1])
        row = pieces[lo:hi].tolist()
        samples = [torch.ones(n, dtype=torch.long) for n in row]
        keys = np.array(_row_keys(samples, cp, capacity), dtype=np.float64)
        padded = [-(-n // 8) * 8 for n in row]
        lost = sum(sum(range(n + 1, p + 1)) for n, p in zip(row, padded, strict=True))
        full = sum(p // 8 * (p + 1) for p in padded)
        assert keys.max() / keys.min() - 1 <= lost / (full - lost) + 1e-12
        lf = np.asarray(row, dtype=np.float64)
        attention = SEVEN_B.quadratic * float((lf * lf).sum()) * keys / keys.sum()
        step = SEVEN_B.linear * capacity / cp + attention
        assert step.max() / step.mean() <= 1.01
        totals += keys
        tops += keys.max()
    assert tops / (totals.sum() / cp) <= 1.01


def test_balance_costs_a_batch_at_its_slowest_cp_rank():
    lengths = web_like(2000, seed=1)
    keys_of: dict[int, np.ndarray] = {}  # batch -> (docs, cp) keys, counted here
    for cost in (None, SEVEN_B, Cost(linear=1.0, quadratic=1e-3, per_sequence=5.0)):
        spec = Packing(capacity=16_384, context_parallel=4, oversize="split", cost=cost,
                       rows_per_batch=2)  # fmt: skip
        planner = spec.bind(lengths)
        plan = planner.plan(0, 0)  # the same plan for each cost (no max_row_cost)
        per_rank = context_parallel_costs(cost, plan, 4)
        assert np.array_equal(planner.costs(plan), per_rank.max(axis=1))
        # independently: each rank's linear slots, per-sequence costs and share of attention
        for b in range(0, len(plan), 15):
            lo, hi = int(plan.offsets[b]), int(plan.offsets[b + 1])
            row = plan.piece_lengths[lo:hi].tolist()
            if b not in keys_of:
                keys_of[b] = np.array([rank_keys(n, 4) for n in row], dtype=np.float64)
            keys = keys_of[b]
            if cost is None:
                tokens = zigzag_work(row, 4)[0].sum(axis=0)
                assert per_rank[b].tolist() == tokens.tolist()
                assert tokens.sum() == sum(row)
                continue
            rows = int(plan.row_offsets[b + 1] - plan.row_offsets[b])
            whole = np.array([n * (n + 1) / 2 for n in row])
            lf = np.asarray(row, dtype=np.float64)
            share = cost.quadratic * (lf * lf)[:, None] * keys / np.maximum(whole, 1)[:, None]
            want = cost.linear * 16_384 / 4 * rows + cost.per_sequence * len(row) + share.sum(0)
            assert np.allclose(per_rank[b], want, rtol=1e-9)
        if cost is SEVEN_B:  # the ranks' attention adds up to the rows'
            full = packed_batch_costs(cost, plan)
            assert np.allclose(per_rank.sum(axis=1), full, rtol=1e-9)


def test_balanced_steps_over_dp_and_cp_ranks():
    """8 DP × 4 CP ranks: balance=True brings the slowest of the 32 within 1% of their mean."""
    lengths = web_like(40_000, seed=3)
    spec = Packing(capacity=32_768, context_parallel=4, oversize="split", cost=SEVEN_B)
    figures = {}
    for balance in (False, True):
        s = PlanSampler(lengths, spec, world_size=8, seed=0, balance=balance)
        plan, order = s.epoch_plan(0)
        per_rank = context_parallel_costs(SEVEN_B, plan, 4)
        steps = order.size // 8
        table = per_rank[order[: steps * 8]].reshape(steps, 32)
        figures[balance] = float((table.max(axis=1) / table.mean(axis=1)).mean())
    assert figures[True] <= 1.01 < figures[False]


def test_an_epoch_resumed_with_context_parallelism_loses_and_repeats_nothing():
    """A state saved at cp=1 (split pieces half yielded) loads at cp=4: the rest is planned at
    the padded lengths, every piece of the epoch is yielded once."""
    lengths = np.random.default_rng(5).integers(1, 400, 300)
    n = lengths.size
    one = Packing(capacity=128, oversize="split")
    four = Packing(capacity=128, oversize="split", context_parallel=4)
    s = PlanSampler(lengths, one, seed=2)
    it = iter(s)
    head = [next(it) for _ in range(len(s) // 2)]
    t = PlanSampler(lengths, four, seed=2)
    t.load_state_dict(s.state_dict())
    rest = list(t)
    codes = np.array([c for b in head + rest for c in b])
    want = np.concatenate([i + np.arange(-(-k // 128)) * n for i, k in enumerate(lengths)])
    assert np.array_equal(np.sort(codes), np.sort(want))
    piece = np.minimum(lengths[codes % n] - codes // n * 128, 128)
    at = {int(c): int(p) for c, p in zip(codes, piece, strict=True)}
    for b in rest:  # next fit over the padded pieces gives rows that fit
        sizes = [-(-at[c] // 8) * 8 for c in b]
        rows = padless.planners.packing.next_fit_rows(sizes, capacity=128)
        assert len(set(rows.tolist())) == 1


def test_the_docs_example_runs():
    """docs/context_parallel.md's loader example runs as written, and its shares are the ranks'
    cuts of the whole padded row."""
    import re
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "context_parallel.md").read_text()
    code = re.search(r"<!-- example: cp -->\n```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {"__name__": "docs_context_parallel"}
    exec(compile(code, "docs/context_parallel.md:cp", "exec"), scope)
    sampler, documents = scope["sampler"], scope["documents"]
    pieces = sampler.pieces(documents)
    first = next(iter(sampler))
    whole = collate_packed(sampler)([pieces[c] for c in first])
    for k in KEYS:
        assert torch.equal(scope["whole"][k], whole[k]), k


def test_the_readme_recipe_runs_and_every_cp_rank_gets_its_share():
    import re
    from pathlib import Path

    from torch.utils.data import DataLoader

    text = (Path(__file__).parent.parent / "docs" / "usage.md").read_text()
    at = text.index("\n## Long context\n")
    code = re.search(r"```python\n(.*?)```", text[at:], re.S).group(1)
    rng = np.random.default_rng(9)
    lengths = rng.integers(1, 40_000, 60)
    dataset = [rng.integers(1, 1000, n).tolist() for n in lengths]
    shares = []
    for cp_rank in range(4):
        scope = {
            "padless": padless,
            "DataLoader": DataLoader,
            "lengths": lengths,
            "dataset": dataset,
            "dp_rank": 0,
            "dp_size": 1,
            "cp_rank": cp_rank,
        }
        exec(compile(code, "docs/usage.md:Long context", "exec"), scope)
        shares.append(next(iter(scope["loader"])))
    assert all(s["input_ids"].shape[-1] == 131072 // 4 for s in shares)
    assert all(torch.equal(s["cu_seqlens"], shares[0]["cu_seqlens"]) for s in shares)
    real = int(shares[0]["cu_seqlens"][-1])
    tokens = sum(int((s["labels"] != -100).sum()) for s in shares)
    assert 0 < tokens < real  # every real token but each document's first is a label
