"""LM streams as corpora of a MixtureSampler: each batch is one stream's, a sequence-length
warm-up follows the mixture's step, weights may change, and resume (exact, elastic, across a
change of weights) loses and repeats nothing — the issue's third run."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from padless import LMStream, MixtureSampler, Schedule, TokenBudgetSampler

WARM = Schedule.piecewise([0, 4, 9], [4, 8, 16])


def streams(warm: object = WARM) -> dict[str, LMStream]:
    # token ids unique across both corpora, so a flattened batch names its tokens
    return {
        "web": LMStream(np.arange(6000), num_steps=warm, tokens_per_batch=64, seed=1),
        "code": LMStream(10_000 + np.arange(3000), num_steps=warm, tokens_per_batch=64, seed=2),
    }


def mixture(world_size: int = 1, rank: int = 0, weights: object = None) -> MixtureSampler:
    if weights is None:
        weights = {"web": Schedule.piecewise([0, 12], [0.8, 0.2]), "code": 0.4}
    return MixtureSampler(
        streams(), weights=weights, seed=5, world_size=world_size, rank=rank, num_batches=90
    )


def chunks(batches: list) -> list[bytes]:
    """Each batch's x, flattened (a warm-up only reshapes a batch's rows)."""
    return [np.ascontiguousarray(x).ravel().tobytes() for x, _ in batches]


def test_the_warm_up_follows_the_mixture_step_and_each_batch_is_one_corpus():
    mix = mixture()
    out = list(mix)
    assert len(out) == 90 and mix.yields == "tokens"
    for step, (x, y) in enumerate(out):
        t = int(WARM.value(step))
        assert x.shape == (64 // t, t) and (y == x + 1).all()
        assert (x < 10_000).all() or (x >= 10_000).all()  # one corpus per batch


def own_chunks(name: str, count: int) -> list[bytes]:
    """The first ``count`` batches of a corpus's own epochs at its longest length, flattened."""
    alone = LMStream(
        np.arange(6000) if name == "web" else 10_000 + np.arange(3000),
        num_steps=16,
        tokens_per_batch=64,
        seed=1 if name == "web" else 2,
    )
    out: list[bytes] = []
    epoch = 0
    while len(out) < count:
        alone.set_epoch(epoch)
        out += chunks(list(alone))
        epoch += 1
    return out[:count]


def test_each_corpus_delivers_its_own_epochs_in_order():
    mix = mixture()
    out = list(mix)
    schedule = mix.epoch_schedule(0)
    for k, name in enumerate(mix.names):
        mine = chunks([b for b, c in zip(out, schedule.corpus, strict=True) if c == k])
        assert mine == own_chunks(name, len(mine))
        assert mix.samplers[name].epoch == 0  # the corpus's own position did not move


@given(st.integers(0, 89))
def test_resume_anywhere_equals_no_interruption(stop):
    full = chunks(list(mixture()))
    first = mixture()
    it = iter(first)
    head = [next(it) for _ in range(stop)]
    state = first.state_dict()
    again = mixture()
    again.load_state_dict(state)
    rest = list(again)
    assert chunks(head) + chunks(rest) == full
    # and the rest keeps its steps' lengths
    assert [x.shape for x, _ in rest] == [x.shape for x, _ in list(mixture())[stop:]]


@given(st.integers(0, 40), st.sampled_from([(2, 3), (3, 2), (2, 1)]))
def test_elastic_resume_delivers_every_batch_once(steps, worlds):
    before, after = worlds
    ranks = [mixture(before, r) for r in range(before)]
    got: list[bytes] = []
    for s in ranks:
        it = iter(s)
        got += chunks([next(it) for _ in range(min(steps, len(s)))])
    state = ranks[0].state_dict()
    for r in range(after):
        s = mixture(after, r)
        s.load_state_dict(state)
        got += chunks(list(s))
    # the draws follow each world size's steps, so compare per corpus: its batches are its
    # own stream's first ones, none twice (the tail's repeats complete the last step)
    web = [c for c in set(got) if np.frombuffer(c, np.int64)[0] < 10_000]
    code = [c for c in set(got) if np.frombuffer(c, np.int64)[0] >= 10_000]
    assert sorted(web) == sorted(own_chunks("web", len(web)))
    assert sorted(code) == sorted(own_chunks("code", len(code)))
    assert len(web) + len(code) == 90 and len(got) - 90 < after


def test_a_change_of_weights_continues_every_stream():
    first = mixture(weights={"web": 0.9, "code": 0.1})
    it = iter(first)
    head = [next(it) for _ in range(30)]
    later = mixture(weights={"web": 0.1, "code": 0.9})
    later.load_state_dict(first.state_dict())
    rest = list(later)
    got = chunks(head) + chunks(rest)
    assert len(got) == 90 and len(set(got)) == 90  # nothing repeated
    code = sum(1 for x, _ in rest if x.min() >= 10_000)
    assert code > 0.7 * len(rest)  # the new weights rule the rest


def test_lm_streams_and_samplers_do_not_mix():
    with pytest.raises(
        ValueError, match=r"samplers\['web'\] yields token arrays.*samplers\['pairs'\]"
    ):
        MixtureSampler(
            {
                "web": LMStream(np.arange(500), num_steps=4, batch_size=2),
                "pairs": TokenBudgetSampler([3, 4, 5], max_tokens=8),
            }
        )
    with pytest.raises(ValueError, match="world_size=1"):
        MixtureSampler({"web": LMStream(np.arange(500), num_steps=4, batch_size=2, world_size=2)})
    with pytest.raises(ValueError, match="no indices"):
        mixture().corpus_of([0])
    # a stream's own skip had no effect on the mixed batches (as a sampler corpus's)
    skipped = streams()
    skipped["web"].skip(3)
    with pytest.raises(ValueError, match=r"samplers\['web'\] has batches left out by skip\(\)"):
        MixtureSampler(skipped, seed=5, num_batches=9)


def test_through_dataloader_workers_and_a_stateful_loader():
    torch = pytest.importorskip("torch")
    from torchdata.stateful_dataloader import StatefulDataLoader

    from padless.torch import LMDataset, lm_tensors

    expected = [x.numpy().copy() for x, _ in lm_tensors(mixture())]
    loader = torch.utils.data.DataLoader(LMDataset(mixture()), batch_size=None, num_workers=2)
    got = [x.numpy() for x, _ in loader]
    assert len(got) == len(expected)
    assert all((a == b).all() for a, b in zip(got, expected, strict=True))
    # a state taken after 7 batches resumes the rest exactly
    stateful = StatefulDataLoader(LMDataset(mixture()), batch_size=None, num_workers=0)
    it = iter(stateful)
    for _ in range(7):
        next(it)
    resumed = StatefulDataLoader(LMDataset(mixture()), batch_size=None, num_workers=0)
    resumed.load_state_dict(stateful.state_dict())
    rest = [x.numpy() for x, _ in resumed]
    assert all((a == b).all() for a, b in zip(rest, expected[7:], strict=True))
    assert len(rest) == len(expected) - 7


def test_a_skip_leaves_out_exactly_those_batches_and_keeps_the_steps_lengths():
    full = list(mixture())
    skipping = mixture()
    skipping.skip(steps=(2, 6))
    got = list(skipping)
    kept = full[:2] + full[6:]
    assert chunks(got) == chunks(kept)
    # a skip does not move the mixture's schedule: each batch keeps its position's step, the
    # warm-up's length there included (batch 2 is cut at step 6's 8 columns, not step 2's 4)
    assert [x.shape for x, _ in got] == [x.shape for x, _ in kept]
    assert got[2][0].shape == (8, 8)
