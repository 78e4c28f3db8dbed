"""The planner interface: specs, the registry, the wrappers and the one sampler."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import padless
from padless import PlanSampler, spec_from_dict, spec_to_dict, strategies

LENGTHS = np.random.default_rng(5).integers(1, 120, 500)

# one spec per registered strategy, with settings away from the defaults
EXAMPLES = {
    "token_budget": padless.TokenBudget(max_tokens=600, max_sentences=40, multiple_of=4),
    "exact_length": padless.ExactLength(batch_sizes={1: 8, 60: 3}, batch_size=9, leftovers="merge"),
    "buckets": padless.Buckets(boundaries=[20, 50], max_tokens=900, multiple_of=2),
    "packing": padless.Packing(capacity=256, max_per_row=6, rows_per_batch=2, oversize="split"),
    "fixed_shapes": padless.FixedShapes(shapes=[(16, 32), (8, 64), (4, 128)]),
    "decomposition": padless.Decomposition(
        tokens_per_batch=512,
        max_length=64,
        min_length=16,
        curriculum="grow_linear",
        cycles=3,
        keep_short=True,
        leftovers="drop",
    ),  # fmt: skip
}


def test_registry_names_every_strategy_and_examples_cover_it():
    registry = strategies()
    assert set(registry) == set(EXAMPLES)
    for name, cls in registry.items():
        assert cls.name == name and padless.get_strategy(name) is cls
    with pytest.raises(ValueError, match="strategy must be one of"):
        padless.get_strategy("nope")


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_as_dict_is_json_safe_and_round_trips(name):
    spec = EXAMPLES[name]
    again = type(spec)(**json.loads(json.dumps(spec.as_dict())))
    assert again == spec and hash(again) == hash(spec)
    assert spec_from_dict(json.loads(json.dumps(spec_to_dict(spec)))) == spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.multiple_of = 3  # type: ignore[misc]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_one_sampler_gives_the_spec_plans(name):
    spec = EXAMPLES[name]
    sampler = PlanSampler(LENGTHS, spec, seed=4, shuffle=True)
    sampler.set_epoch(2)
    plan, order = sampler.epoch_plan(2)
    assert plan == spec.plan(LENGTHS, seed=4, epoch=2)
    values = sampler.planner.values(plan)
    expected = [values[plan.offsets[b] : plan.offsets[b + 1]].tolist() for b in order]
    assert list(sampler) == expected


CONVENIENCE = [
    (padless.TokenBudgetSampler, {"max_tokens": 600, "multiple_of": 4}, padless.TokenBudget),
    (padless.ExactLengthSampler, {"batch_size": 5}, padless.ExactLength),
    (padless.BucketSampler, {"num_buckets": 3, "batch_size": 16}, padless.Buckets),
    (padless.PackingSampler, {"capacity": 256, "rows_per_batch": 2}, padless.Packing),
]


@pytest.mark.parametrize(("cls", "settings", "spec_cls"), CONVENIENCE)
def test_named_samplers_are_the_one_sampler(cls, settings, spec_cls):
    """Same batches and interchangeable states as PlanSampler with the spec."""
    options = {"seed": 2, "world_size": 3, "rank": 1, "balance": True}
    named = cls(LENGTHS, **settings, **options)
    plain = PlanSampler(LENGTHS, spec_cls(**settings), **options)
    assert named.spec == plain.spec
    assert list(named) == list(plain)
    assert named.state_dict() == plain.state_dict()
    plain.load_state_dict(named.state_dict())


@pytest.mark.parametrize(
    ("function", "spec_cls", "settings"),
    [
        (padless.plan_token_budget, padless.TokenBudget, {"max_tokens": 500}),
        (padless.plan_exact_length, padless.ExactLength, {"batch_size": 4}),
        (padless.plan_buckets, padless.Buckets, {"num_buckets": 4, "max_tokens": 700}),
        (padless.plan_packing, padless.Packing, {"capacity": 300}),
    ],
)
def test_plan_functions_wrap_their_spec(function, spec_cls, settings):
    assert function(LENGTHS, **settings, seed=1, epoch=3) == spec_cls(**settings).plan(
        LENGTHS, seed=1, epoch=3
    )


def test_one_word_for_leaving_oversize_items_out():
    lengths = [3, 50, 4]
    for cls, kw in ((padless.TokenBudget, {"max_tokens": 10}), (padless.Packing, {"capacity": 10})):
        drop, skip = cls(**kw, oversize="drop"), cls(**kw, oversize="skip")
        assert drop == skip and skip.oversize == "drop"
        assert drop.plan(lengths).skipped.tolist() == [1]
    # states saved before "drop" became the word still load
    old_style = padless.TokenBudgetSampler(LENGTHS, max_tokens=100, oversize="skip")
    padless.TokenBudgetSampler(LENGTHS, max_tokens=100, oversize="drop").load_state_dict(
        old_style.state_dict()
    )


def test_settings_are_checked_once_when_the_spec_is_made():
    with pytest.raises(ValueError, match="max_tokens must be a positive int, got 0"):
        padless.TokenBudget(max_tokens=0)
    with pytest.raises(ValueError, match="capacity must be <= 268435456"):
        padless.Packing(capacity=2**29)
    with pytest.raises(TypeError, match="spec must be a padless planner spec"):
        PlanSampler(LENGTHS, {"max_tokens": 4})


@pytest.mark.parametrize("name", sorted(strategies()))
def test_specs_take_keywords_only(name):
    # Packing(512, 8) once set max_per_row=8 silently; every registered spec now refuses
    # positional settings, so a new strategy is covered by its registry line
    cls = strategies()[name]
    fields = [f for f in dataclasses.fields(cls) if f.init]
    assert fields and all(f.kw_only for f in fields), name
    settings = {f.name: getattr(EXAMPLES[name], f.name) for f in fields}
    assert cls(**settings) == EXAMPLES[name]  # the same values are fine as keywords
    with pytest.raises(TypeError, match="positional argument"):
        cls(*settings.values())
    with pytest.raises(TypeError, match="positional argument"):
        cls(settings[fields[0].name])


def test_packing_refuses_positional_max_per_row():
    with pytest.raises(TypeError, match="positional argument"):
        padless.Packing(512, 8)  # type: ignore[misc]
    assert padless.Packing(capacity=512, max_per_row=8).max_per_row == 8


def test_packing_sampler_collate_carries_its_capacity():
    from padless.torch import collate_for

    pytest.importorskip("torch")
    sampler = padless.PackingSampler([6, 2, 5, 3], capacity=8, max_per_row=2, seed=0)
    collate = collate_for(sampler, flatten=False)
    batch = next(iter(sampler))
    out = collate([[1] * [6, 2, 5, 3][i] for i in batch])
    assert tuple(out["input_ids"].shape)[1] == 8
    from padless.torch import collate_packed

    with pytest.raises(ValueError, match="max_per_row must match"):
        collate_packed(sampler, max_per_row=3)


def test_shortcut_keywords_are_the_specs_settings():
    """padless.sampling.shortcuts types each strategy's keywords with one TypedDict: it must name the
    spec's settings exactly (a new setting fails here), required where the spec requires it."""
    import dataclasses

    from padless.sampling import shortcuts
    from padless.sampling.sampler import SamplerOptions

    for cls in (padless.TokenBudget, padless.ExactLength, padless.Buckets, padless.Packing):
        settings = getattr(shortcuts, f"{cls.__name__}Settings")
        fields = [f for f in dataclasses.fields(cls) if f.init]
        assert list(settings.__annotations__) == [f.name for f in fields], cls.__name__
        sampler = {"Buckets": "Bucket"}.get(cls.__name__, cls.__name__)
        keywords = getattr(shortcuts, f"{sampler}SamplerKeywords")
        assert set(keywords.__annotations__) == {f.name for f in fields} | set(
            SamplerOptions.__annotations__
        )
    # a setting and a sampler option reach their places; an unknown keyword is refused
    s = padless.PackingSampler([5, 3, 7], capacity=8, rows_per_batch=2, seed=4, world_size=1)
    assert s.spec == padless.Packing(capacity=8, rows_per_batch=2) and s.seed == 4
    with pytest.raises(TypeError, match="PackingSampler got an unexpected keyword 'capacty'"):
        padless.PackingSampler([5], capacity=8, capacty=8)
