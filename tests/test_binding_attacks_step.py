"""Hostile arguments into the step planner's binding, ``step_fit`` (see
tests/test_binding_table.py): each is refused with a ValueError naming the kernel and the rule,
before anything is placed."""

from __future__ import annotations

import numpy as np
import pytest

import padless._core as C

ATTACKED: dict[str, str] = {"step_fit": "test_step_fit"}


def test_step_fit() -> None:
    sizes = np.array([3, 2, 1], dtype=np.int64)
    costs = np.array([3.0, 2.0, 1.0])

    def bad(match: str, *args: object) -> None:
        with pytest.raises(ValueError, match=match) as info:
            C.step_fit(*args)
        assert str(info.value).startswith("step_fit: ")

    bad("sizes and costs must have the same size, got 3 and 2", sizes, costs[:2], 2, 1, 4, 1, 0.0)
    bad(r"capacity = 0 must be in \[1,", sizes, costs, 2, 1, 0, 1, 0.0)
    bad(r"world = 0 must be in \[1,", sizes, costs, 2, 1, 4, 0, 0.0)
    bad(r"bins = -1 must be in \[0,", sizes, costs, -1, 1, 4, 1, 0.0)
    bad(r"step = 0 must be in \[1,", sizes, costs, 2, 0, 4, 1, 0.0)
    bad(r"bins = 3 must be a multiple of world = 2 \(whole slots\)", sizes, costs, 3, 2, 4, 2, 0.0)
    bad(r"step = 3 must be a multiple of world = 2 \(whole slots\)", sizes, costs, 2, 3, 4, 2, 0.0)
    for polish in (np.nan, -0.5):
        bad(r"polish = .* must be a number >= 0", sizes, costs, 2, 1, 4, 1, polish)
    bad("bins \\+ step = .* needs .* bytes of working memory", sizes, costs, 2**62, 1, 4, 1, 0.0)
    bad("bins \\+ step = .* needs", sizes, costs, 2**62, 2**62, 4, 2**61, 0.0)  # no overflow
    bad(
        r"sizes\[0\] = 3 must be in \[0, 2\] \(an item fits one bin\)",
        sizes,
        costs,
        2,
        1,
        2,
        1,
        0.0,
    )
    bad(
        r"sizes\[1\] = -2 must be in", np.array([1, -2], dtype=np.int64), costs[:2], 2, 1, 4, 1, 0.0
    )
    for value in (np.nan, np.inf, -1.0):
        bad(
            r"costs\[1\] = .* must be a finite number >= 0",
            sizes,
            np.array([1.0, value, 1.0]),
            2,
            1,
            4,
            1,
            0.0,
        )
    # the refusals left nothing half done: a good call still places every item
    bin_of, bins, load, tokens = C.step_fit(sizes, costs, 0, 1, 3, 1, 0.0)
    assert bins == 2 and tokens.tolist() == [3, 3] and load.tolist() == [3.0, 3.0]
    assert np.bincount(bin_of, weights=sizes).tolist() == [3.0, 3.0]
