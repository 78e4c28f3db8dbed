"""A wrong keyword says what to do (issues 40/41): the TypeError names what the user called, the
keyword, the closest keywords it takes, padless's name for another library's, and the padless
component whose setting the keyword is; a valid keyword builds what it built before."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import padless
from padless import (
    LMStream,
    MixtureSampler,
    PlanSampler,
    StreamBatcher,
    TokenBudget,
    strategies,
)
from padless.core._keywords import SYNONYMS, keyword_names

STRATEGIES = strategies()
LENGTHS = [5, 3, 7, 2, 8, 4]


def settings_of(cls):
    return [f.name for f in dataclasses.fields(cls) if f.init]


def refused(call, *args, **kwargs) -> str:
    with pytest.raises(TypeError) as info:
        call(*args, **kwargs)
    return str(info.value)


def suggested(message: str) -> list[str]:
    """The names of ``did you mean 'a' or 'b'?``."""
    found = re.search(r"did you mean (.*?)\?", message)
    return re.findall(r"'(\w+)'", found.group(1)) if found else []


def owners(message: str, keyword: str) -> list[str]:
    """The components of ``KEYWORD is a setting of A, B and C``."""
    found = re.search(rf"{keyword} is a setting of ([\w, ]+?)(?: \(|;)", message)
    return re.split(r", | and ", found.group(1)) if found else []


def takes(message: str, callee: str) -> list[str]:
    return message.split(f"{callee} takes: ", 1)[1].split(", ")


def misspellings(name: str) -> list[str]:
    """One-character deletions and neighbour swaps of ``name``."""
    out = {name[:i] + name[i + 1 :] for i in range(len(name))}
    out |= {name[:i] + name[i + 1] + name[i] + name[i + 2 :] for i in range(len(name) - 1)}
    return sorted(w for w in out if w != name and w.isidentifier())


# ---------------------------------------------------------------------------- every strategy


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_misspelt_setting_of_a_strategy_suggests_it(data):
    name = data.draw(st.sampled_from(sorted(STRATEGIES)))
    cls = STRATEGIES[name]
    setting = data.draw(st.sampled_from(settings_of(cls)))
    typo = data.draw(st.sampled_from(misspellings(setting)))
    if typo in settings_of(cls) or typo in SYNONYMS:
        return  # a valid name (batch_sizes -> batch_size), or a synonym answered otherwise
    message = refused(cls, **{typo: 1})
    assert message.startswith(f"{cls.__name__} got an unexpected keyword {typo!r}")
    assert setting in suggested(message), message
    assert takes(message, cls.__name__) == settings_of(cls)


@pytest.mark.parametrize(
    ("callee", "keyword"),
    [
        (a, s)
        for a in sorted(STRATEGIES)
        for b in sorted(STRATEGIES)
        if a != b
        for s in settings_of(STRATEGIES[b])
        if s not in settings_of(STRATEGIES[a])
    ],
)
def test_a_setting_of_another_strategy_is_named_where_it_belongs(callee, keyword):
    cls = STRATEGIES[callee]
    message = refused(cls, **{keyword: 2})
    assert message.startswith(f"{cls.__name__} got an unexpected keyword {keyword!r}: ")
    belongs = {c.__name__ for c in STRATEGIES.values() if keyword in settings_of(c)}
    assert belongs <= set(owners(message, keyword)), message
    assert cls.__name__ not in owners(message, keyword)


def test_the_issue_example_verbatim():
    message = refused(padless.Buckets, context_parallel=2)
    assert message.startswith(
        "Buckets got an unexpected keyword 'context_parallel': context_parallel is a setting of "
        "Packing"
    )
    assert "(packed rows split across that many context-parallel ranks)" in message
    assert message.endswith(
        "Buckets takes: boundaries, num_buckets, max_tokens, batch_size, batch_sizes, "
        "multiple_of, cost, max_cost, pad_to_multiple_of, oversize, resolution"
    )


# ---------------------------------------------------------------------------- synonyms


@pytest.mark.parametrize(
    ("call", "keyword", "name"),
    [
        (padless.Packing, "max_tokens", "capacity"),
        (padless.Packing, "batch_size", "rows_per_batch"),
        (padless.Packing, "max_length", "capacity"),
        (padless.TokenBudget, "max_length", "max_tokens"),
        (padless.Buckets, "max_length", "max_tokens"),
        (padless.FixedShapes, "max_length", "shapes"),
        (padless.TokenBudget, "batch_size", "max_sentences"),
        (padless.TokenBudget, "bsz_mult", "multiple_of"),
        (padless.Decomposition, "max_tokens", "tokens_per_batch"),
        (padless.PackingSampler, "max_tokens", "capacity"),
        (padless.plan_packing, "batch_size", "rows_per_batch"),
        (LMStream, "seq_len", "num_steps"),
        (LMStream, "max_tokens", "tokens_per_batch"),
        (PlanSampler, "num_replicas", "world_size"),
    ],
)
def test_a_synonym_points_to_the_padless_name(call, keyword, name):
    callee = call.__name__
    args = (LENGTHS,) if call in (padless.PackingSampler, padless.plan_packing) else ()
    message = refused(call, *args, **{keyword: 4})
    assert f"in {callee} that is {name}" in message, message
    assert message.startswith(f"{callee} got an unexpected keyword {keyword!r}")


def test_every_synonym_names_a_padless_keyword():
    known = {k for c in STRATEGIES.values() for k in settings_of(c)}
    for cls in (PlanSampler, StreamBatcher, LMStream, MixtureSampler):
        known |= set(keyword_names(cls))
    torch = pytest.importorskip("padless.torch")
    for call in (torch.collate_padded, torch.collate_packed, torch.StreamDataset):
        known |= set(keyword_names(call))
    for names in SYNONYMS.values():
        assert set(names) <= known, names


# ---------------------------------------------------------------------------- samplers, streams


def _budget():
    return padless.TokenBudgetSampler(LENGTHS, max_tokens=8)


@pytest.mark.parametrize(
    ("callee", "call", "keyword", "close"),
    [
        ("PlanSampler", lambda **k: PlanSampler(LENGTHS, TokenBudget(max_tokens=8), **k),
         "worldsize", "world_size"),
        ("TokenBudgetSampler", lambda **k: padless.TokenBudgetSampler(LENGTHS, **k),
         "max_token", "max_tokens"),
        ("ExactLengthSampler", lambda **k: padless.ExactLengthSampler(LENGTHS, **k),
         "batchsize", "batch_size"),
        ("BucketSampler", lambda **k: padless.BucketSampler(LENGTHS, **k),
         "num_bucket", "num_buckets"),
        ("PackingSampler", lambda **k: padless.PackingSampler(LENGTHS, capacity=8, **k),
         "drop_lsat", "drop_last"),
        ("plan_token_budget", lambda **k: padless.plan_token_budget(LENGTHS, **k),
         "max_sentence", "max_sentences"),
        ("plan_exact_length", lambda **k: padless.plan_exact_length(LENGTHS, **k),
         "leftover", "leftovers"),
        ("plan_buckets", lambda **k: padless.plan_buckets(LENGTHS, **k),
         "boundary", "boundaries"),
        ("plan_packing", lambda **k: padless.plan_packing(LENGTHS, **k),
         "max_per_rows", "max_per_row"),
        ("MixtureSampler", lambda **k: MixtureSampler({"a": _budget()}, **k),
         "temperatur", "temperature"),
        ("LMStream", lambda **k: LMStream(np.arange(100), num_steps=4, **k),
         "batch_sizes", "batch_size"),
        ("StreamBatcher", lambda **k: StreamBatcher(LENGTHS, TokenBudget(max_tokens=8), **k),
         "bufer", "buffer"),
    ],
)  # fmt: skip
def test_each_sampler_and_stream_names_itself(callee, call, keyword, close):
    message = refused(call, **{keyword: 1})
    assert message.startswith(f"{callee} got an unexpected keyword {keyword!r}: "), message
    assert close in suggested(message)
    assert "__init__" not in message


def test_a_keyword_sampler_is_named_not_its_base():
    message = refused(padless.PackingSampler, LENGTHS, capacity=8, context_paralel=2)
    assert message.startswith("PackingSampler got an unexpected keyword 'context_paralel'")
    assert "context_parallel" in suggested(message)
    assert "spec" not in takes(message, "PackingSampler")  # the keyword sampler makes its spec
    message = refused(padless.TokenBudgetSampler, LENGTHS, max_tokens=8, capacity=8)
    assert message.startswith("TokenBudgetSampler got an unexpected keyword 'capacity'")
    assert owners(message, "capacity")[0] == "Packing"


def test_plan_sampler_says_a_strategy_setting_goes_in_the_spec():
    message = refused(PlanSampler, LENGTHS, TokenBudget(max_tokens=8), max_tokens=8)
    assert "PlanSampler(lengths, TokenBudget(max_tokens=...))" in message
    assert "TokenBudgetSampler(lengths, max_tokens=...)" in message


@pytest.mark.parametrize("keyword", ["rank", "world_size"])
def test_stream_batcher_says_how_a_stream_is_sharded(keyword):
    message = refused(StreamBatcher, LENGTHS, TokenBudget(max_tokens=8), **{keyword: 1})
    assert message.startswith(f"StreamBatcher got an unexpected keyword {keyword!r}: ")
    assert "padless.torch.StreamDataset" in message and "DataLoader workers" in message
    assert "PlanSampler" in owners(message, keyword)


@pytest.mark.parametrize(
    ("call", "keyword", "says"),
    [
        (lambda **k: StreamBatcher(LENGTHS, TokenBudget(max_tokens=8), **k),
         "batches_per_step", "does not compose with streams yet"),
        (lambda **k: StreamBatcher(LENGTHS, TokenBudget(max_tokens=8), **k),
         "balance", "do not compose with streams yet"),
        (lambda **k: LMStream(np.arange(100), batch_size=2, num_steps=4, **k),
         "batches_per_step", "each LMStream batch (on each rank) is one optimizer step"),
        (lambda **k: LMStream(np.arange(100), batch_size=2, num_steps=4, **k),
         "balance", "nothing to balance"),
        (lambda **k: LMStream(np.arange(100), batch_size=2, num_steps=4, **k),
         "context_parallel", "Packing(context_parallel=...)"),
        (lambda **k: MixtureSampler({"a": _budget()}, **k),
         "shuffle", "give it to the PlanSampler of each corpus"),
    ],
)  # fmt: skip
def test_a_sampler_setting_given_elsewhere_says_what_happens_instead(call, keyword, says):
    message = refused(call, **{keyword: 2})
    assert says in message, message
    where = "Packing" if keyword == "context_parallel" else "PlanSampler"
    assert where in owners(message, keyword), message


def test_window_the_streams_former_keyword_points_to_max_wait():
    message = refused(StreamBatcher, LENGTHS, TokenBudget(max_tokens=8), window=4)
    assert "in StreamBatcher that is max_wait" in message
    assert "window is a setting of PlanSampler (items per window" in message


# ---------------------------------------------------------------------------- padless.torch


def test_torch_datasets_and_collates_name_themselves():
    torch = pytest.importorskip("padless.torch")
    spec = TokenBudget(max_tokens=8)
    message = refused(torch.StreamDataset, LENGTHS, spec, length=int, batches_per_step=2)
    assert message.startswith("StreamDataset got an unexpected keyword 'batches_per_step': ")
    assert "does not compose with streams yet" in message
    assert "PlanSampler" in owners(message, "batches_per_step")
    message = refused(torch.StreamDataset, LENGTHS, spec, window=2)
    assert "in StreamDataset that is max_wait" in message
    message = refused(torch.TokenDataset, np.arange(10), eoss=1)
    assert message.startswith("TokenDataset got an unexpected keyword 'eoss'")
    assert suggested(message) == ["eos"]
    for call, args in (
        (torch.collate_padded, (0,)),
        (torch.collate_packed, (8,)),
        (torch.collate_packed_pairs, ((8, 8),)),
    ):
        message = refused(call, *args, pad_token_id=0)
        assert f"in {call.__name__} that is pad_id" in message, message
    message = refused(torch.collate_for, padless.Packing(capacity=8), fields=["input_ids"])
    assert message.startswith("collate_for got an unexpected keyword 'fields'")
    assert "collate_padded" in owners(message, "fields")
    assert "capacity" not in takes(message, "collate_for")  # the spec gives it
    message = refused(torch.collate_for, StreamBatcher(LENGTHS, spec, length=int), pad_idd=0)
    assert message.startswith("collate_for got an unexpected keyword 'pad_idd'")
    from padless.torch._streams import stream_collate

    message = refused(stream_collate, spec, pad_idd=0)
    assert message.startswith("stream_collate got an unexpected keyword 'pad_idd'")


# ---------------------------------------------------------------------------- valid keywords


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_valid_keywords_build_the_same_spec(name):
    from tests.test_specs import EXAMPLES

    spec = EXAMPLES[name]
    again = type(spec)(**spec.as_dict())
    assert again == spec and again.as_dict() == spec.as_dict()
    assert dataclasses.replace(spec) == spec


def test_valid_keywords_give_the_same_batches():
    s = padless.PackingSampler(LENGTHS, capacity=8, rows_per_batch=2, seed=4)
    t = PlanSampler(LENGTHS, padless.Packing(capacity=8, rows_per_batch=2), seed=4)
    assert list(s) == list(t) and s.state_dict() == t.state_dict()
    plan = padless.plan_token_budget(LENGTHS, max_tokens=9, seed=1)
    same = TokenBudget(max_tokens=9).plan(LENGTHS, seed=1)
    assert [b.tolist() for b in plan] == [b.tolist() for b in same]


@pytest.mark.parametrize("name", ["token_budget", "exact_length", "buckets"])
def test_a_budget_schedule_says_what_follows_the_step(name):
    """A token budget does not warm up: the refusal names the strategy and the settings that do
    follow the optimizer step (a ramp, a packed or LM-stream warm-up)."""
    from padless import Schedule

    spec = padless.strategies()[name]
    with pytest.raises(TypeError, match=r"max_tokens must be an int, got Schedule") as info:
        spec(max_tokens=Schedule.piecewise([0, 2], [96, 192]))
    message = str(info.value)
    assert f"{spec.__name__} plans each epoch once" in message
    assert "batches_per_step=Schedule" in message and "Packing(capacity=Schedule)" in message


def test_an_integral_float_budget_says_which_int_to_pass():
    """max_tokens=4096.0 is a count typed as a float: the error says to pass 4096 first, then
    how budgets in seconds are given (it only spoke of seconds)."""
    with pytest.raises(TypeError, match=r"got float 4096.0: pass max_tokens=4096 \(a budget in"):
        padless.TokenBudget(max_tokens=4096.0)
    with pytest.raises(TypeError, match=r"got float 0.5; for durations in seconds"):
        padless.TokenBudget(max_tokens=0.5)
