import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from padless import _kernels as K


@given(st.integers(0, 2**64 - 1), st.lists(st.integers(1, 2**32 - 1), max_size=50))
def test_random_below_matches_reference(key, bounds):
    b = np.array(bounds, dtype=np.int64)
    out = K.random_below(np.uint64(key), b)
    assert np.array_equal(out, K.random_below_reference(key, b))
    assert np.all((out >= 0) & (out < np.maximum(b, 1)))


def test_random_below_is_uniform():
    out = K.random_below(np.uint64(7), np.full(60000, 6, dtype=np.int64))
    counts = np.bincount(out, minlength=6)
    # each cell expects 10000; 5 sigma is about 456
    assert np.all(np.abs(counts - 10000) < 460)


@given(arrays(np.int64, st.integers(0, 200), elements=st.integers(0, 30)))
def test_counting_order_matches_reference(keys):
    a = K.counting_order(keys, 31)
    b = K.counting_order_reference(keys, 31)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


@given(arrays(np.int64, st.integers(0, 200), elements=st.integers(0, 30)), st.integers(0, 2**40))
def test_counting_order_named_is_the_order_of_the_names(keys, base):
    names = base + 3 * np.arange(keys.size, dtype=np.int64)[::-1].copy()
    a = K.counting_order_named(keys, 31, names)
    b = K.counting_order_named_reference(keys, 31, names)
    order, starts = K.counting_order(keys, 31)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[0], names[order])
    assert np.array_equal(a[1], starts) and np.array_equal(b[1], starts)


def test_counting_order_named_refuses_names_of_another_length():
    with pytest.raises(ValueError, match="one entry per key"):
        K.counting_order_named(np.array([1, 0]), 2, np.array([5], dtype=np.int64))


def _segments(values: np.ndarray, data) -> tuple[np.ndarray, np.ndarray]:
    """Drawn segment bounds over ``values`` and some of the segments (repeats allowed)."""
    n = values.shape[0]
    cuts = data.draw(st.lists(st.integers(0, n), max_size=5))
    offsets = np.array([0, *sorted(cuts), n], dtype=np.int64)
    picked = data.draw(st.lists(st.integers(0, offsets.size - 2), max_size=8))
    return offsets, np.array(picked, dtype=np.int64)


@given(arrays(np.int64, st.integers(0, 60), elements=st.integers(0, 9)), st.data())
def test_take_segments_matches_reference(values, data):
    offsets, picked = _segments(values, data)
    a = K.take_segments(values, offsets, picked)
    assert np.array_equal(a, K.take_segments_reference(values, offsets, picked))
    with pytest.raises(IndexError, match="out of range"):
        K.take_segments(values, offsets, np.array([offsets.size - 1], dtype=np.int64))


@given(arrays(np.int64, st.integers(0, 60), elements=st.integers(0, 10**6)), st.data())
def test_unnamed_segments_is_unnamed_of_the_segments(values, data):
    n = values.shape[0]
    offsets, picked = _segments(values, data)
    size = data.draw(st.integers(1, 40))
    a = K.unnamed_segments(values, offsets, picked, size)
    assert np.array_equal(a, K.unnamed_segments_reference(values, offsets, picked, size))
    named = K.take_segments(values, offsets, picked) % size
    assert np.array_equal(a, np.setdiff1d(np.arange(size), named))
    with pytest.raises(ValueError, match="non-negative"):
        K.unnamed_segments(-values - 1, offsets, np.arange(offsets.size - 1), size) if n else (
            K.unnamed_segments(np.array([-1]), np.array([0, 1]), np.array([0]), size)
        )


@given(arrays(np.int64, st.integers(0, 80), elements=st.integers(0, 10**6)), st.integers(1, 50))
def test_unnamed_of_one_segment_matches_reference(values, n):
    whole, first = np.array([0, values.size], dtype=np.int64), np.zeros(1, dtype=np.int64)
    a = K.unnamed_segments(values, whole, first, n)
    assert np.array_equal(a, K.unnamed_segments_reference(values, whole, first, n))
    assert not np.isin(a, values % n).any() and np.all(np.diff(a) > 0)
    with pytest.raises(ValueError, match="non-negative"):
        K.unnamed_segments(np.array([-1], dtype=np.int64), np.array([0, 1]), first, n)


@given(
    arrays(np.int64, st.integers(0, 100), elements=st.integers(0, 1000)),
    st.lists(st.integers(0, 100), max_size=6),
    st.integers(0, 2**64 - 1),
)
def test_shuffle_runs_matches_reference(values, cuts, key):
    n = values.shape[0]
    starts = np.array(sorted({0, n, *[min(c, n) for c in cuts]}), dtype=np.int64)
    a, b = values.copy(), values.copy()
    K.shuffle_runs(a, starts, np.uint64(key))
    K.shuffle_runs_reference(b, starts, key)
    assert np.array_equal(a, b)
    for lo, hi in zip(starts[:-1], starts[1:], strict=True):
        assert sorted(a[lo:hi]) == sorted(values[lo:hi])


@given(
    arrays(np.int64, st.integers(0, 120), elements=st.integers(0, 40)),
    st.sampled_from([0, 40, 41, 64, 100, 1000]),
    st.sampled_from([0, 1, 2, 3, 7, 16]),
    st.sampled_from([1, 2, 3, 4, 8]),
)
def test_budget_kernel_matches_reference(sizes, max_tokens, max_sentences, multiple):
    if max_tokens:
        sizes = np.minimum(sizes, max_tokens)
    a = K.budget_ends(sizes, max_tokens, max_sentences, multiple)
    b = K.budget_ends_reference(sizes, max_tokens, max_sentences, multiple)
    assert np.array_equal(a, b)


@given(arrays(np.int64, st.integers(0, 60), elements=st.integers(0, 50)), st.data())
def test_segment_max_matches_reference(values, data):
    n = values.shape[0]
    cuts = data.draw(st.lists(st.integers(0, n), max_size=5))
    offsets = np.array([0, *sorted(cuts), n], dtype=np.int64)
    assert np.array_equal(K.segment_max(values, offsets), K.segment_max_reference(values, offsets))


@given(arrays(np.int64, st.integers(0, 80), elements=st.integers(0, 2**40)), st.integers(0, 2**32))
def test_hash_ints_matches_reference(values, seed):
    assert int(K.hash_ints(values, seed)) == K.hash_ints_reference(values, seed)


def test_hash_ints_sees_order_and_size():
    a = np.arange(10, dtype=np.int64)
    assert K.hash_ints(a, 0) != K.hash_ints(a[::-1].copy(), 0)
    assert K.hash_ints(a, 0) != K.hash_ints(a[:9], 0)


def _padding(sizes, ends):
    start, pad = 0, 0
    for end in ends:
        pad += (end - start) * int(sizes[end - 1]) - int(sizes[start:end].sum())
        start = end
    return pad


@given(arrays(np.int64, st.integers(0, 11), elements=st.integers(1, 9)), st.integers(9, 40))
def test_least_padding_ends_is_optimal(sizes, budget):
    sizes = np.sort(sizes)
    caps = np.maximum(1, budget // sizes).astype(np.int64)
    ends = K.least_padding_ends(sizes, caps)
    assert (len(ends), _padding(sizes, ends)) == K.least_padding_ends_reference(sizes, caps)
    # never more batches than the greedy, never more padding
    greedy = K.capped_ends(sizes, caps)
    assert len(ends) == len(greedy)
    assert _padding(sizes, ends) <= _padding(sizes, greedy)
    bounds = np.concatenate([[0], ends])
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        assert 0 < hi - lo <= caps[hi - 1]


# compiled kernels held to a plain twin of another name: the function, or the test, that does it
_TWIN_OF = {
    "budget_ends_runs": "padless._kernels.budget.budget_ends_reference",
    "budget_ends_runs1": "padless._kernels.budget.budget_ends_reference",
    "gather_walk": "padless._kernels.budget.budget_order_reference",
    "walk_first_error": "padless._kernels.budget.budget_order_reference",
    "narrow_into": "tests/test_budget.py::test_narrow_sizes_keeps_every_value",
    "mul_exceeds": "padless._kernels._sat.sat",
    "sat_add": "padless._kernels._sat.sat",
    "sat_mul": "padless._kernels._sat.sat",
    # the fused window kernels are held to the strategies' own planners on the same items
    **{
        name: "tests/test_windows.py::test_fused_kernels_equal_the_planners"
        for name in [
            "window_order",
            "budget_window",
            "budget_window_count",
            "pack_window_count",
        ]
    },  # fmt: skip
}


def test_every_compiled_kernel_has_a_plain_reference_beside_it():
    """Each function of ``padless._core`` is wrapped by a function of the same name in a module
    of ``padless._kernels`` (or the shuffle's, the text reader's, the Ray packer's), beside its
    plain ``*_reference`` twin; the few held to a twin of another name are in ``_TWIN_OF``."""
    import importlib
    import inspect
    from pathlib import Path

    from padless import _core

    families = ["_sat", "rng", "order", "budget", "segments", "shapes", "exact", "buckets",
                "packing", "cost", "windows", "streams", "feistel", "ingest",
                "collate", "step", "placement"]  # fmt: skip
    modules = [importlib.import_module(f"padless._kernels.{m}") for m in families] + [
        importlib.import_module(m)
        for m in ["padless.shuffle._kernels", "padless.io._text_kernels", "padless.ray._pack"]
    ]
    compiled = [n for n in dir(_core) if not n.startswith("_")]
    assert len(compiled) >= 50
    tests = Path(__file__).resolve().parent.parent
    for name in compiled:
        homes = [m for m in modules if inspect.isfunction(getattr(m, name, None))]
        twin = _TWIN_OF.get(name)
        if twin is None:
            assert homes, f"_core.{name} has no Python function of its name in a kernel module"
            assert any(callable(getattr(m, f"{name}_reference", None)) for m in homes), name
        elif "::" in twin:
            path, test = twin.split("::")
            assert f"def {test}(" in (tests / path).read_text(), twin
        else:
            module, _, attr = twin.rpartition(".")
            assert callable(getattr(importlib.import_module(module), attr, None)), twin


@given(
    st.one_of(st.integers(0, 2**32 + 5), st.integers(0, 2**64 - 1)),
    st.one_of(st.integers(0, 40), st.integers(0, 2**64 - 1)),
    st.integers(0, 20),
)
def test_stream_key_is_numpys_seed_sequence(seed, epoch, stream):
    """The compiled stream key equals SeedSequence([seed, epoch, stream])'s first uint64 word
    (one- and two-word values, zeros, the top of uint64), and padless.core._rng.key gives it."""
    from padless.core import _rng

    want = K.rng.stream_key_reference(seed, epoch, stream)
    assert K.rng.stream_key(seed, epoch, stream) == want
    assert int(_rng.key(seed, epoch, stream)) == want


def test_stream_keys_past_uint64_still_come_from_numpy():
    from padless.core import _rng

    big = 2**70 + 3
    want = np.random.SeedSequence([big, 1, 2]).generate_state(1, dtype=np.uint64)[0]
    assert _rng.key(big, 1, 2) == want


@given(
    arrays(np.int64, st.integers(0, 40), elements=st.integers(-(2**62), 2**62)),
    st.integers(-(2**62), 2**62),
    st.data(),
)
def test_offset_list_matches_reference(values, offset, data):
    n = values.shape[0]
    lo = data.draw(st.integers(0, n))
    hi = data.draw(st.integers(lo, n))
    got = K.offset_list(values, lo, hi, offset)
    assert got == K.offset_list_reference(values, lo, hi, offset)
    assert all(type(x) is int for x in got)
    with pytest.raises(IndexError, match="out of range"):
        K.offset_list(values, 0, n + 1, offset)
    with pytest.raises(ValueError, match="passes int64"):
        K.offset_list(np.array([2**62], dtype=np.int64), 0, 1, 2**62)
