"""The public surface: one spelling per idea. A deprecated name still works for one release and
warns ``DeprecationWarning`` naming its replacement; it is left out of its module's ``__all__``."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("torch")

import padless  # noqa: E402
import padless.hf  # noqa: E402
import padless.torch  # noqa: E402


def _deprecated(module, name, instead):
    with pytest.warns(
        DeprecationWarning, match=rf"{module.__name__}\.{name} is deprecated.*{instead}"
    ):
        value = getattr(module, name)
    assert name not in module.__all__
    return value


def test_dist_rank_world_warns_and_gives_what_dist_kwargs_gives():
    old = _deprecated(padless.torch, "dist_rank_world", "padless.torch.dist_kwargs")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the call itself does not warn again
        assert old() == tuple(padless.torch.dist_kwargs().values()) == (0, 1)


def test_stop_together_class_warns_and_is_what_stop_together_returns():
    old = _deprecated(padless.torch, "StopTogether", "padless.torch.stop_together")
    kept = padless.torch.stop_together([[1], [2]], every=2)
    assert type(kept) is old and list(old([[1], [2]], every=2)) == list(kept) == [[1], [2]]


def test_hf_check_packed_warns_and_is_the_torch_check():
    old = _deprecated(padless.hf, "check_packed", "padless.torch.check_packed")
    assert old is padless.torch.check_packed


def test_the_warning_points_at_the_callers_line():
    with pytest.warns(DeprecationWarning) as got:
        from padless.torch import dist_rank_world  # noqa: F401
    assert got[0].filename == __file__


@pytest.mark.parametrize("module", [padless, padless.torch, padless.hf])
def test_every_listed_name_loads_without_a_warning_and_unknown_names_raise(module):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for name in module.__all__:
            getattr(module, name)
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("budget", "plan_token_budget"),
        ("budget", "TokenBudgetSampler"),
        ("exact", "plan_exact_length"),
        ("exact", "ExactLengthSampler"),
        ("buckets", "plan_buckets"),
        ("buckets", "BucketSampler"),
        ("packing", "plan_packing"),
        ("packing", "PackingSampler"),
    ],
)
def test_shortcuts_at_their_former_homes_warn_and_are_the_same(module, name):
    import importlib

    old = importlib.import_module(f"padless.planners.{module}")
    with pytest.warns(DeprecationWarning, match=rf"planners\.{module}\.{name} moved to padless"):
        value = getattr(old, name)
    assert value is getattr(padless, name)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        old.nothing  # noqa: B018


def test_a_spec_subclass_naming_sampler_name_gets_state_tag():
    import dataclasses

    with pytest.warns(DeprecationWarning, match="sampler_name is deprecated: set state_tag"):

        @dataclasses.dataclass(frozen=True, kw_only=True)
        class Old(padless.TokenBudget):
            sampler_name = "OldSampler"

    assert Old.state_tag == "OldSampler"
    lengths = [3, 5, 2, 7]
    state = padless.PlanSampler(lengths, Old(max_tokens=8)).state_dict()
    assert (
        state["fingerprint"]
        != padless.PlanSampler(lengths, padless.TokenBudget(max_tokens=8)).state_dict()[
            "fingerprint"
        ]
    )
