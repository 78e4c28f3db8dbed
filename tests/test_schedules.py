"""padless.Schedule: each kind against its formula, DeepSpeed's kinds against DeepSpeed's own
arithmetic (re-implemented here from deepspeed/runtime/data_pipeline/curriculum_scheduler.py, not
imported), values() == value(), round trips, equality and the errors."""

from __future__ import annotations

import json
import math
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import padless
from padless.core.schedules import Schedule

# ---- DeepSpeed's curriculum scheduler, re-implemented from its source ------------------------


def ds_fixed_root(global_steps, min_d, max_d, total, difficulty_step, root_degree):
    """CurriculumScheduler.__fixed_root_get_difficulty (fixed_linear: root_degree=1)."""
    next_difficulty = (float(global_steps) / total) ** (1.0 / root_degree)
    next_difficulty = math.floor(next_difficulty * (max_d - min_d) + min_d)
    next_difficulty -= next_difficulty % difficulty_step
    return min(next_difficulty, max_d)


def ds_fixed_discrete(global_steps, difficulty, max_step):
    """CurriculumScheduler.__fixed_discrete_get_difficulty."""
    if global_steps > max_step[-1]:
        return difficulty[-1]
    for i in range(len(max_step)):
        if global_steps <= max_step[i]:
            return difficulty[i]
    raise AssertionError("unreachable")


def ds_run(get_difficulty, min_d, max_d, steps):
    """The difficulty a DeepSpeed run trains each step with: the engine calls
    ``update_difficulty(self.global_steps + 1)`` before the forward of step ``global_steps``, and
    update_difficulty changes the difficulty only while it is below max_difficulty."""
    current, out = min_d, []
    for global_steps in range(steps):
        if current < max_d:
            current = get_difficulty(global_steps + 1)
        out.append(current)
    return out


@pytest.mark.parametrize(
    ("start", "end", "total", "step", "degree"),
    [
        (8, 1024, 100, 8, 1),
        (50, 1000, 37, 8, 1),  # start not a multiple: DeepSpeed rounds below it
        (8, 100, 10, 8, 2),  # end not a multiple: reached one step after the ramp
        (64, 2048, 1000, 16, 2),
        (0, 7, 5, 1, 3),
        (128, 8192, 3000, 64, 4),
        (5, 5, 10, 4, 2),  # start == end: DeepSpeed never updates it
        (1, 2**40, 999, 1, 2),
        (8, 64, 10, 128, 1),  # multiple_of > end: 0 until the ramp overshoots to 128, then end
    ],
)
def test_fixed_root_and_linear_match_a_deepspeed_run(start, end, total, step, degree):
    def ds(g):
        return ds_fixed_root(g, start, end, total, step, degree)

    expected = ds_run(ds, start, end, 3 * total + 10)
    if degree == 1:
        s = Schedule.fixed_linear(start, end, total, multiple_of=step)
    else:
        s = Schedule.fixed_root(start, end, total, degree, multiple_of=step)
    steps = np.arange(len(expected))
    assert [s.value(int(i)) for i in steps] == expected
    assert s.values(steps).tolist() == expected
    assert s.values(steps).dtype == np.int64
    assert s.final == end and s.value(10**12) == end
    if start < end:  # the pure function too, away from the latch
        assert s.value(total // 2) == ds(total // 2 + 1)


def test_fixed_discrete_matches_a_deepspeed_run():
    difficulty, max_step = [64, 128, 256, 1024], [5, 10, 30]
    expected = ds_run(lambda g: ds_fixed_discrete(g, difficulty, max_step), 0, 10**9, 40)
    s = Schedule.fixed_discrete(difficulty, max_step)
    assert [s.value(i) for i in range(40)] == expected
    assert s.values(np.arange(40)).tolist() == expected
    assert s.changes() == (5, 10, 30)
    assert s == Schedule.fixed_discrete(difficulty, max_step)
    same = Schedule.piecewise([0, 5, 10, 30], difficulty)
    assert s.values(np.arange(40)).tolist() == same.values(np.arange(40)).tolist()


# ---- padless's kinds against their formulas ---------------------------------------------------


def test_constant():
    assert Schedule.constant(8).value(0) == 8 and Schedule.constant(8).value(2**62) == 8
    s = Schedule.constant(0.25)
    assert s.value(7) == 0.25 and isinstance(s.value(7), float) and not s.integer
    assert s.values(np.arange(3)).tolist() == [0.25] * 3 and s.is_constant and s.changes() == ()
    assert type(Schedule.constant(8, integer=False).value(1)) is float
    assert Schedule.constant(8.0, integer=True) == Schedule.constant(8)


def test_piecewise():
    s = Schedule.piecewise([0, 10, 25], [1024, 4096, 2048])
    for step, v in [(0, 1024), (9, 1024), (10, 4096), (24, 4096), (25, 2048), (10**9, 2048)]:
        assert s.value(step) == v
    assert s.changes() == (10, 25) and s.final == 2048 and not s.is_constant
    assert Schedule.piecewise([0, 5], [3, 3]).changes() == ()
    assert Schedule.piecewise([0, 5], [3, 3]).is_constant


@pytest.mark.parametrize("begin", [0, 7])
def test_linear_float_and_integer(begin):
    a, b, n = 0.1, 0.9, 13
    f = Schedule.linear(a, b, n, begin=begin)
    for step in range(begin + n + 5):
        k = min(max(step - begin, 0), n)
        assert f.value(step) == (b if k == n else a + (b - a) * k / n)
    i = Schedule.linear(256, 8192, 10, begin=begin, multiple_of=256)
    for step in range(begin + 15):
        k = min(max(step - begin, 0), 10)
        exact = 256 + (8192 - 256) * k // 10
        assert i.value(step) == exact - exact % 256
    assert i.value(begin) == 256 and i.value(begin + 10) == 8192
    down = Schedule.linear(8192, 1024, 7, multiple_of=1024)  # a decay rounds down too
    assert [down.value(k) for k in range(8)] == [8192 - 1024 * k for k in range(8)]


def test_linear_with_huge_integers_is_exact():
    s = Schedule.linear(0, 2**62, 2**40)  # (end - start) * k overflows int64: exact fallback
    steps = np.array([0, 1, 3, 2**39, 2**40 - 1, 2**40])
    expected = [2**62 * int(k) // 2**40 for k in steps]
    assert s.values(steps).tolist() == expected == [s.value(int(k)) for k in steps]


def test_cosine():
    a, b, n = 1.0, 0.1, 20
    s = Schedule.cosine(a, b, n, begin=3)
    for step in range(30):
        k = min(max(step - 3, 0), n)
        want = a if k == 0 else b if k == n else b + (a - b) * (1 + math.cos(math.pi * k / n)) / 2
        assert s.value(step) == want
    i = Schedule.cosine(512, 4096, 9, multiple_of=512)
    for k in range(12):
        real = 4096 + (512 - 4096) * (1 + math.cos(math.pi * min(k, 9) / 9)) / 2
        want = 512 if k == 0 else 4096 if k >= 9 else math.floor(real) // 512 * 512
        assert i.value(k) == want


@pytest.mark.parametrize(
    "s",
    [
        Schedule.linear(64, 4096, 100, multiple_of=64),
        Schedule.cosine(64, 4096, 100, begin=5, multiple_of=64),
        Schedule.cosine(0.0, 1.0, 77),
        Schedule.fixed_root(8, 2048, 200, 3, multiple_of=8),
    ],
)
def test_rising_ramps_are_monotone_and_reach_their_targets(s):
    v = s.values(np.arange(400))
    assert np.all(np.diff(v) >= 0) and v[-1] == s.final
    for target in [v[0], v[37], v[150], s.final]:
        first = s.first_step_reaching(target)
        assert v[first] >= target and (first == 0 or v[first - 1] < target)
    change = np.flatnonzero(np.diff(v)) + 1
    assert s.changes() == tuple(change.tolist())


def test_first_step_reaching_refuses_a_decrease_and_the_unreachable():
    with pytest.raises(ValueError, match="non-decreasing"):
        Schedule.linear(10, 2, 5).first_step_reaching(3)
    with pytest.raises(ValueError, match="final value 10"):
        Schedule.linear(2, 10, 5).first_step_reaching(11)
    assert Schedule.piecewise([0, 4, 9], [1, 5, 7]).first_step_reaching(6) == 9


# ---- values == value, round trips, equality -------------------------------------------------

ints = st.integers(0, 5000)
reals = st.floats(-1e6, 1e6, allow_nan=False)


@st.composite
def schedules(draw):
    kind = draw(st.sampled_from(sorted(["c", "p", "l", "cos", "fl", "fr", "fd"])))
    m = draw(st.sampled_from([1, 8]))
    mult = st.integers(0, 600).map(lambda v: v * m)
    if kind == "c":
        return Schedule.constant(draw(st.one_of(mult, reals)))
    if kind in ("p", "fd"):
        n = draw(st.integers(1, 6))
        steps = sorted(draw(st.sets(st.integers(1, 500), min_size=n - 1, max_size=n - 1)))
        values = draw(st.lists(st.one_of(mult, reals) if m == 1 else mult, min_size=n, max_size=n))
        if kind == "p":
            return Schedule.piecewise([0, *steps], values, multiple_of=m)
        return Schedule.fixed_discrete([*values, values[0]], [*steps, 600], multiple_of=m)
    if kind in ("l", "cos"):
        ramp = Schedule.linear if kind == "l" else Schedule.cosine
        begin, n = draw(st.integers(0, 50)), draw(st.integers(1, 300))
        if draw(st.booleans()) and m == 1:
            return ramp(draw(reals), draw(reals), n, begin=begin)
        return ramp(draw(mult), draw(mult), n, begin=begin, multiple_of=m)
    a, b = sorted([draw(ints), draw(ints)])
    total = draw(st.integers(1, 300))
    if kind == "fl":
        return Schedule.fixed_linear(a, b, total, multiple_of=draw(st.integers(1, 16)))
    return Schedule.fixed_root(a, b, total, draw(st.integers(1, 5)), multiple_of=m)


@settings(max_examples=150, deadline=None)
@given(schedules(), st.lists(st.integers(0, 2000), max_size=40))
def test_values_equals_value_elementwise(s, steps):
    out = s.values(np.array(steps, dtype=np.int64))
    assert out.dtype == (np.int64 if s.integer else np.float64)
    assert out.tolist() == [s.value(step) for step in steps]
    assert all(type(s.value(step)) is (int if s.integer else float) for step in steps[:3])


@settings(max_examples=150, deadline=None)
@given(schedules())
def test_round_trips_exactly(s):
    d = s.as_dict()
    assert json.loads(json.dumps(d)) == d and Schedule.from_dict(json.loads(json.dumps(d))) == s
    again = Schedule.from_dict(d)
    assert again.as_dict() == d and hash(again) == hash(s)
    assert json.dumps(again.as_dict()) == json.dumps(d)  # deterministic: same text
    assert eval(repr(s), {"Schedule": Schedule}) == s  # noqa: S307 - our own repr
    assert pickle.loads(pickle.dumps(s)) == s
    assert Schedule.of(d) == s and Schedule.of(s) is s
    assert s.is_constant == (s.changes() == ())
    steps = np.arange(800)
    assert s.values(steps)[-1] == s.final


def test_as_dict_repr_and_equality():
    s = Schedule.linear(256, 4096, 1000, begin=10, multiple_of=256)
    assert s.as_dict() == {
        "kind": "linear",
        "start": 256,
        "end": 4096,
        "steps": 1000,
        "begin": 10,
        "integer": True,
        "multiple_of": 256,
    }
    assert repr(s) == "Schedule.linear(start=256, end=4096, steps=1000, begin=10, multiple_of=256)"
    assert repr(Schedule.constant(0.5)) == "Schedule.constant(0.5)"
    assert Schedule.constant(1) != Schedule.constant(1.0)  # an int schedule is not a float one
    assert Schedule.constant(-0.0).as_dict() == Schedule.constant(0.0).as_dict()
    assert len({s, Schedule.of(s.as_dict()), Schedule.linear(256, 4096, 999)}) == 2
    assert Schedule.of(4096) == Schedule.constant(4096) and Schedule.of(np.int64(3)).value(0) == 3
    assert padless.Schedule is Schedule
    with pytest.raises(AttributeError, match="immutable"):
        s._kind = "constant"  # type: ignore[misc]
    with pytest.raises(TypeError, match="constructors"):
        Schedule()


# ---- errors name the parameter, the rule and the value ---------------------------------------


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: Schedule.piecewise([0, 5, 5], [1, 2, 3]), ValueError, r"strictly increasing.*5"),
        (lambda: Schedule.piecewise([1, 5], [1, 2]), ValueError, r"steps must start at step 0"),
        (lambda: Schedule.piecewise([0, -3], [1, 2]), ValueError, r"steps\[1\].*non-negative"),
        (lambda: Schedule.piecewise([0, 5], [1, 2, 3]), ValueError, r"same length.*2 steps"),
        (lambda: Schedule.piecewise([0], [math.nan]), ValueError, r"values\[0\].*finite.*nan"),
        (lambda: Schedule.linear(0, math.inf, 5), ValueError, r"end.*finite.*inf"),
        (lambda: Schedule.linear(0, 8, 0), ValueError, r"steps must be a positive int, got 0"),
        (lambda: Schedule.linear(0, 2**63, 5), ValueError, r"end must be in \[0, 2\*\*62\]"),
        (lambda: Schedule.linear(0, 100, 5, multiple_of=8), ValueError, r"end.*multiple.*100"),
        (lambda: Schedule.linear(0.0, 1.0, 5, multiple_of=8), ValueError, r"multiple_of=8"),
        (lambda: Schedule.linear(0, 8, 5, multiple_of=0), ValueError, r"multiple_of.*got 0"),
        (lambda: Schedule.constant(2.5, integer=True), ValueError, r"value.*whole.*2\.5"),
        (lambda: Schedule.constant("8"), TypeError, r"value must be a number.*'8'"),
        (lambda: Schedule.constant(True), TypeError, r"value must be a number.*True"),
        (lambda: Schedule.fixed_root(8, 64, 10, 0), ValueError, r"degree.*positive.*got 0"),
        (lambda: Schedule.fixed_root(64, 8, 10, 2), ValueError, r"start must be <= end"),
        (lambda: Schedule.fixed_linear(8.0, 64, 10), TypeError, r"start must be an int"),
        (lambda: Schedule.fixed_root(0, 1, 1, 64, multiple_of=2**40), ValueError, r"2\*\*62"),
        (lambda: Schedule.fixed_discrete([1, 2], [5, 6]), ValueError, r"one more entry"),
        (lambda: Schedule.fixed_discrete([1, 2], [0]), ValueError, r"steps.*>= 1.*0"),
        (lambda: Schedule.of("4096"), TypeError, r"value must be a number, a Schedule or"),
        (lambda: Schedule.of([1, 2], name="capacity"), TypeError, r"capacity must be a number"),
        (lambda: Schedule.from_dict({"kind": "step"}), ValueError, r"data\['kind'\].*'step'"),
        (lambda: Schedule.from_dict({"kind": "constant", "value": 1, "x": 2}), ValueError, "'x'"),
        (lambda: Schedule.constant(1).value(-1), ValueError, r"step must be a non-negative"),
        (lambda: Schedule.constant(1).value(1.0), TypeError, r"step must be an int"),
        (lambda: Schedule.constant(1).values([0.5]), TypeError, r"steps.*ints.*float64"),
        (lambda: Schedule.constant(1).values([3, -2]), ValueError, r"steps.*got -2"),
    ],
)
def test_errors_name_the_parameter_the_rule_and_the_value(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_the_docs_example_runs():
    text = (Path(__file__).parent.parent / "docs" / "schedules.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)
    assert code is not None
    exec(compile(code.group(1), "docs/schedules.md", "exec"), {"__name__": "docs_example"})
