"""Placement composed with what a sampler does (issue 43 with issue 41's rule): a
:class:`padless.Placer` over every strategy x form that keeps sequences whole, a batch-size
ramp, a budget warm-up, a mixture (weights constant and over time), skip, epochs, resume and
elastic resume (another mesh). Each either works (the placements hold exactly the sampler's
batches, every sequence once per epoch, no rank over its budget) or is refused when the placer
is built, naming the placer's part and the sampler's part.
"""

from __future__ import annotations

import numpy as np
import pytest

import padless
from padless import Cost, Mesh, Placer, PlanSampler, Schedule, TokenBudget
from padless.sampling.mixing import MixtureSampler
from tests.test_placement import COST  # the small cost model placement tests share

N = 150
LENGTHS = np.minimum((64 * (1 + np.random.default_rng(0).pareto(1.2, N))).astype(np.int64), 7000)
MESH = Mesh(dp=2, cp=4, dynamic=True, max_tokens=2048)
OTHER = Mesh(dp=3, cp=4, pp=2, dynamic=True, max_tokens=2048)  # an elastic resume's mesh
LONGEST = int(LENGTHS.max())

SPECS = {
    "token_budget": TokenBudget(max_tokens=12000),
    "exact_length": padless.ExactLength(batch_size=16),
    "buckets": padless.Buckets(num_buckets=3, max_tokens=12000),
    "fixed_shapes": padless.FixedShapes(shapes=[(4, 8192), (16, 1024), (64, 256)]),
    "packing": padless.Packing(capacity=8192, rows_per_batch=2),
}
FORMS = {"whole": {}, "window": {"window": 64}, "histogram": {"window": "histogram"}}


def _cells() -> list[tuple[str, str]]:
    out = []
    for name in SPECS:
        for form in FORMS:
            if form == "histogram" and name not in ("token_budget", "packing"):
                continue  # histogram plans serve token budgets (refused by the sampler itself)
            out.append((name, form))
    return out


def _sampler(name: str = "token_budget", form: str = "whole", **kw: object) -> PlanSampler:
    return PlanSampler(LENGTHS, SPECS[name], seed=3, **{**FORMS[form], **kw})  # type: ignore[arg-type]


def _check(placements: list[padless.Placement], batches: list[np.ndarray], mesh: Mesh) -> None:
    """The placements hold exactly the batches, in order; each within the mesh's budget."""
    assert len(placements) == len(batches)
    for p, batch in zip(placements, batches, strict=True):
        assert sorted(p.indices.tolist()) == sorted(batch.tolist())
        assert np.array_equal(p.lengths, LENGTHS[p.indices])
        assert int(p.rank_tokens().max(initial=0)) <= mesh.max_tokens
        assert p.micro_batches % mesh.multiple == 0 and p.micro_batches >= mesh.pp


def _flat(batches: list[list[int]]) -> list[np.ndarray]:
    return [np.asarray(b, dtype=np.int64) for b in batches]


@pytest.mark.parametrize(("name", "form"), _cells())
def test_every_strategy_and_form_places_the_sampler_batches(name: str, form: str) -> None:
    want = _flat(list(_sampler(name, form)))
    placements = list(Placer(_sampler(name, form), MESH, COST))
    _check(placements, want, MESH)
    seen = np.concatenate([p.indices for p in placements])
    assert np.array_equal(np.sort(seen), np.arange(N))  # every sequence once per epoch


def test_a_ramp_places_each_optimizer_step_whole() -> None:
    ramp = Schedule.piecewise([0, 3], [1, 3])
    s = _sampler(batches_per_step=ramp)
    want = [np.concatenate(_flat(g)) for g in s.steps(s)]
    placer = Placer(_sampler(batches_per_step=ramp), MESH, COST)
    assert len(placer) == len(want)
    placements = list(placer)
    _check(placements, want, MESH)
    assert [len(p) for p in placements[:4]] == [len(w) for w in want[:4]]


def test_a_warm_up_of_packed_rows_is_refused_by_name() -> None:
    # a sequence-length warm-up yields codes tagged per step: no whole sequences to place
    spec = padless.Packing(capacity=Schedule.piecewise([0, 4], [8192, 16384]), rows_per_batch=2)
    with pytest.raises(ValueError, match="warm-up.*a placement places whole sequences"):
        Placer(PlanSampler(LENGTHS, spec, seed=3), MESH, COST)


@pytest.mark.parametrize("weights", ["constant", "schedule"])
def test_a_mixture_places_its_corpora_batches(weights: str) -> None:
    def mixture() -> MixtureSampler:
        subs = {
            "a": PlanSampler(LENGTHS[:60], TokenBudget(max_tokens=9000), seed=1),
            "b": PlanSampler(LENGTHS[60:], SPECS["buckets"], seed=2),
        }
        w: dict[str, object] = {"a": 1.0, "b": 3.0}
        if weights == "schedule":
            w = {"a": Schedule.piecewise([0, 3], [3.0, 1.0]), "b": 1.0}
        return MixtureSampler(subs, weights=w, num_batches=12, seed=5)  # type: ignore[arg-type]

    want = _flat(list(mixture()))
    placements = list(Placer(mixture(), MESH, COST))
    _check(placements, want, MESH)


def test_skip_leaves_the_steps_out() -> None:
    every = list(Placer(_sampler(), MESH, COST))
    s = _sampler()
    placer = Placer(s, MESH, COST)
    placer.skip(steps=(1, 3))
    got = list(placer)
    assert [p.indices.tolist() for p in got] == [p.indices.tolist() for p in every[:1] + every[3:]]
    assert s.state_dict()["skips"]


def _same(a: padless.Placement, b: padless.Placement) -> bool:
    return all(
        np.array_equal(getattr(a, f), getattr(b, f))
        for f in ("indices", "slots", "degrees", "ranks", "times")
    )


def test_epochs_differ_and_cover_once() -> None:
    placer = Placer(_sampler(), MESH, COST)
    first = [p.indices.tolist() for p in placer]
    placer.set_epoch(1)
    second = [p.indices for p in placer]
    assert sorted(np.concatenate(second).tolist()) == list(range(N))
    assert [b.tolist() for b in second] != first


@pytest.mark.parametrize("at", [1, 3])
def test_resume_equals_an_uninterrupted_run(at: int) -> None:
    whole = list(Placer(_sampler(), MESH, COST))
    running = Placer(_sampler(), MESH, COST)
    it = iter(running)
    head = [next(it) for _ in range(at)]
    state = running.state_dict()
    again = Placer(_sampler(), MESH, COST)
    again.load_state_dict(state)
    rest = list(again)
    assert len(head) + len(rest) == len(whole)
    assert all(_same(a, b) for a, b in zip(head + rest, whole, strict=True))


def test_elastic_resume_places_the_rest_on_another_mesh() -> None:
    whole = list(Placer(_sampler(), MESH, COST))
    running = Placer(_sampler(), MESH, COST)
    it = iter(running)
    head = [next(it) for _ in range(2)]
    state = running.state_dict()
    again = Placer(_sampler(), MESH, COST).on(OTHER)
    again.load_state_dict(state)
    rest = list(again)
    # the same batches, placed on the new mesh within its budget
    _check(rest, [p.indices for p in whole[2:]], OTHER)
    seen = np.concatenate([p.indices for p in head + rest])
    assert np.array_equal(np.sort(seen), np.arange(N))


REFUSED = {
    "world_size": (lambda: PlanSampler(LENGTHS, SPECS["token_budget"], world_size=2), MESH),
    "groups": (
        lambda: PlanSampler(LENGTHS, TokenBudget(max_tokens=20000), groups=np.arange(N) // 2),
        MESH,
    ),
    "context_parallel": (
        lambda: PlanSampler(LENGTHS, padless.Packing(capacity=8192, context_parallel=2)),
        MESH,
    ),
    "pieces": (
        lambda: PlanSampler(
            LENGTHS, padless.Decomposition(tokens_per_batch=4096, max_length=512, min_length=8)
        ),
        MESH,
    ),
    "split packing": (
        lambda: PlanSampler(LENGTHS, padless.Packing(capacity=1024, oversize="split")),
        MESH,
    ),
    "micro_batches": (lambda: _sampler(), Mesh(dp=2, cp=4, max_tokens=2048, micro_batches=4)),
    "too long": (lambda: _sampler(), Mesh(dp=2, cp=2, dynamic=True, max_tokens=1024)),
    "fields": (
        lambda: PlanSampler(np.stack([LENGTHS, LENGTHS], axis=1), SPECS["token_budget"]),
        MESH,
    ),
}
SAYS = {
    "world_size": ("world_size", "mesh"),
    "groups": ("groups", "placement"),
    "context_parallel": ("context_parallel", "Placer"),
    "pieces": ("pieces", "placement"),
    "split packing": ("pieces", "Packing"),
    "micro_batches": ("micro_batches", "Placer"),
    "too long": ("PlanSampler", "mesh", "max_tokens"),
    "fields": ("Placer", "fields"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_cannot_work_is_refused_when_built(case: str) -> None:
    make, mesh = REFUSED[case]
    with pytest.raises(ValueError) as err:
        Placer(make(), mesh, COST)
    for word in SAYS[case]:
        assert word in str(err.value), (word, str(err.value))


def test_a_language_model_stream_is_refused(tmp_path: object) -> None:
    tokens = np.arange(4096, dtype=np.uint16)
    stream = padless.LMStream(tokens, batch_size=2, num_steps=4)
    with pytest.raises(ValueError, match="LMStream yields language-model token windows"):
        Placer(stream, MESH, COST)


def test_a_stream_is_refused_by_name() -> None:
    stream = padless.StreamBatcher(
        [np.arange(int(n)) for n in LENGTHS[:8]], TokenBudget(max_tokens=20000), length=len
    )
    with pytest.raises(TypeError, match="known lengths.*got StreamBatcher"):
        Placer(stream, MESH, COST)


def test_bad_arguments_are_type_errors() -> None:
    with pytest.raises(TypeError, match="sampler must be a padless PlanSampler"):
        Placer([[0, 1]], MESH, COST)
    with pytest.raises(TypeError, match="mesh must be a padless.Mesh"):
        Placer(_sampler(), "dp=2", COST)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cost must be a padless.MeshCost"):
        Placer(_sampler(), MESH, Cost(linear=1.0))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="search"):
        Placer(_sampler(), MESH, COST, search="yes")  # type: ignore[arg-type]


def test_consumers_of_batch_samplers_refuse_a_placer_when_built(tmp_path) -> None:
    # a placer yields placements, not index batches: what takes a sampler's batches says so at
    # construction (its per-rank tensors come from padless.torch.rank_batches)
    from torch.utils.data import DataLoader

    from padless.grain import PlanBatches
    from padless.hf import _check_sampler
    from padless.io.indexed import write_indexed
    from padless.lightning import LightningBatches
    from padless.torch import StatefulLoader, TokenDataset, collate_for, collate_padded

    placer = Placer(_sampler(), MESH, COST)
    write_indexed([np.arange(1, int(n) + 1) for n in LENGTHS], tmp_path / "c", dtype="int32")
    builds = {
        "collate_for": lambda: collate_for(placer),
        "TokenDataset": lambda: TokenDataset(str(tmp_path / "c"), plan=placer),
        "PlanBatches": lambda: PlanBatches(placer, [[1] * int(n) for n in LENGTHS]),
        "batch_sampler": lambda: _check_sampler(placer),  # what PadlessTrainerMixin runs first
        "collate_padded": lambda: collate_padded(0, plan=placer),
        "LightningBatches": lambda: LightningBatches(placer),
        "StatefulLoader": lambda: StatefulLoader(DataLoader(range(6), batch_sampler=placer)),
    }
    for name, build in builds.items():
        with pytest.raises(TypeError) as err:
            build()
        message = str(err.value)  # names the placer, and says what to use instead
        assert "Placer" in message and "rank_batches" in message, (name, message)
        assert "world_size" in message, (name, message)
