import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from padless import builtin_corpus, lengths_of


def test_list_of_ints_and_array_agree():
    assert lengths_of([3, 0, 5]).tolist() == [3, 0, 5]
    out = lengths_of(np.array([3, 0, 5], dtype=np.int32))
    assert out.dtype == np.int64 and out.tolist() == [3, 0, 5]


def test_token_sequences_give_their_lengths():
    assert lengths_of([[1, 2, 3], [], np.arange(4)]).tolist() == [3, 0, 4]


def test_multi_field_sequences_give_2d():
    pairs = [([1, 2], [3]), ([4], [5, 6, 7])]
    assert lengths_of(pairs).tolist() == [[2, 1], [1, 3]]


def test_2d_array_of_field_lengths():
    arr = np.array([[3, 4], [5, 6]], dtype=np.uint16)
    out = lengths_of(arr)
    assert out.shape == (2, 2) and out.dtype == np.int64


def test_whole_floats_are_accepted():
    assert lengths_of(np.array([1.0, 2.0])).tolist() == [1, 2]


def test_empty_inputs():
    assert lengths_of([]).shape == (0,)
    assert lengths_of(np.zeros(0, np.int32)).shape == (0,)


@pytest.mark.parametrize(
    ("bad", "exc", "fragment"),
    [
        ([1, -2, 3], ValueError, "-2 at position [1]"),
        (np.array([1.0, 2.5]), ValueError, "2.5 at position [1]"),
        (np.array([1.0, np.nan]), ValueError, "position [1]"),
        (np.array([[1, 2], [3, -1]]), ValueError, "-1 at position [1, 1]"),
        ([True, False], TypeError, "bool"),
        (np.array([True]), TypeError, "boolean"),
        ([1, [2, 3]], ValueError, "ragged nesting: position [1]"),
        ([[1, 2], 3], ValueError, "ragged nesting: item [1]"),
        ([[1, [2]], [3]], ValueError, "ragged nesting"),
        (np.zeros((2, 2, 2)), ValueError, "3-D"),
        (["abc"], TypeError, "tokenize"),
        ([1, "x"], TypeError, "position [1]"),
    ],
)
def test_bad_inputs_name_position_and_value(bad, exc, fragment):
    with pytest.raises(exc) as info:
        lengths_of(bad)
    assert fragment in str(info.value)


def test_builtin_corpus_matches_shared_statistics():
    en = builtin_corpus("en")
    assert en.shape == (29814,)
    assert int(np.median(en)) == 31 and int(en.max()) == 122
    with pytest.raises(ValueError, match="fields must be among"):
        builtin_corpus("fr")


# --------------------------------------------------------------------------- supported range

RULE = "whole numbers in [0, 2**31)"


@pytest.mark.parametrize(
    ("bad", "shown", "where"),
    [
        (np.array([1e300]), "1e+300", "[0]"),
        (np.array([1e19, 5.0]), "1e+19", "[0]"),
        (np.array([3.0, 2.0**63]), "9.223372036854776e+18", "[1]"),
        (np.array([1.0, np.inf]), "inf", "[1]"),
        (np.array([np.nan]), "nan", "[0]"),
        (np.array([0.5]), "0.5", "[0]"),
        (np.array([2**31]), "2147483648", "[0]"),
        (np.array([1, 2**63], dtype=np.uint64), "9223372036854775808", "[1]"),
        (np.array([[1, 2], [2**40, 3]]), "1099511627776", "[1, 0]"),
        ([2**70], "1180591620717411303424", "[0]"),
        ([1, 2**64], "18446744073709551616", "[1]"),
        ([1, -(2**70)], "-1180591620717411303424", "[1]"),
        ([1, 2**31], "2147483648", "[1]"),
        ([1, 1e300], "1e+300", "[1]"),
        ([1, float("nan")], "nan", "[1]"),
        ([1, float("-inf")], "-inf", "[1]"),
        ([np.float64(2.5)], "2.5", "[0]"),
        (np.array([2**70, 1], dtype=object), "1180591620717411303424", "[0]"),
    ],
)
def test_out_of_range_values_name_lengths_rule_value_and_position(bad, shown, where):
    with pytest.raises(ValueError) as info:
        lengths_of(bad)
    msg = str(info.value)
    assert msg.startswith("lengths must be ") and RULE in msg
    assert f"got {shown} at position {where}" in msg


def test_range_edges_are_kept_exactly():
    top = 2**31 - 1
    for good in ([0, top], np.array([0.0, float(top)]), np.array([0, top], dtype=np.uint64)):
        out = lengths_of(good)
        assert out.dtype == np.int64 and out.tolist() == [0, top]


@given(st.lists(st.integers(-(2**80), 2**80) | st.floats(allow_nan=True), max_size=20))
def test_any_number_is_kept_exactly_or_refused_by_position(values):
    def ok(v):
        return 0 <= v < 2**31 and float(v) == int(v) if v == v and abs(v) != float("inf") else False

    bad = [i for i, v in enumerate(values) if not ok(v)]
    for form in (values, np.array(values, dtype=object)):
        if bad:
            with pytest.raises(ValueError, match=rf"at position \[{bad[0]}\]"):
                lengths_of(form)
        else:
            out = lengths_of(form)
            assert out.dtype == np.int64 and out.tolist() == [int(v) for v in values]
    floats = np.array([float(v) for v in values]) if values else np.zeros(0)
    fbad = [i for i, v in enumerate(floats) if not ok(v)]
    if fbad:
        with pytest.raises(ValueError, match=rf"at position \[{fbad[0]}\]"):
            lengths_of(floats)
    else:
        assert lengths_of(floats).tolist() == [int(v) for v in floats]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_planner_with_huge_float_lengths_raises_instead_of_crashing():
    # used to end the interpreter with a segmentation fault
    proc = _run(
        "import numpy as np, padless\n"
        "for call in (lambda: padless.plan_token_budget(np.array([1e19, 5.0]), max_tokens=16),\n"
        "             lambda: padless.TokenBudgetSampler(np.array([1e19, 5.0]), max_tokens=16)):\n"
        "    try:\n"
        "        call()\n"
        "    except ValueError as exc:\n"
        "        print('refused:', exc)\n"
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("refused: lengths must be") and "1e+19 at position [0]" in line


# --------------------------------------------------------------------------- clear errors


def test_str_path_is_refused_with_the_ways_to_read_it(tmp_path):
    text = tmp_path / "a.txt"
    text.write_text("a b\n")
    with pytest.raises(TypeError) as info:
        lengths_of(str(text))
    msg = str(info.value)
    assert "got a str naming a file" in msg and str(text) in msg
    assert "pathlib.Path" in msg and "padless.io.lengths_from_file" in msg
    assert lengths_of(text).tolist() == [2]  # the way the message names works


def test_str_folder_is_refused_as_a_folder(tmp_path):
    with pytest.raises(TypeError, match="naming the folder") as info:
        lengths_of(str(tmp_path))
    assert "padless.io.readers.lengths_from_arrow" in str(info.value)


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ({"en": [3, 4], "es": [5, 6]}, "got a dict with keys ['en', 'es']"),
        ({}, "got a dict"),
        (b"a b c", "got bytes"),
        (["some text", "more"], "got text"),
        (np.array(["ab", "c"]), "got text"),
        # were an IndexError, a planned (1, 2) matrix, and a silent dedup in any order
        (np.ma.array([3, -1], mask=[0, 1]), "got a masked array; pass arr.compressed()"),
        (np.matrix([[3, 4]]), "got an np.matrix"),
        (set([5, 3, 5]), "got a set, which keeps no order and drops repeated lengths"),
    ],
)
def test_dicts_and_text_are_refused_clearly(bad, fragment):
    with pytest.raises(TypeError) as info:
        lengths_of(bad)
    assert fragment in str(info.value)


def test_text_hint_names_functions_reachable_after_import_padless():
    with pytest.raises(TypeError) as info:
        lengths_of(["some text"])
    named = re.findall(r"padless\.io\.readers\.(\w+)", str(info.value))
    assert named
    proc = _run(
        "import padless\n"
        f"for name in {named!r}:\n"
        "    assert callable(getattr(padless.io.readers, name)), name\n"
        "print('ok')\n"
    )
    assert proc.stdout.strip() == "ok", proc.stderr


def test_readers_and_lengths_import_one_way():
    proc = _run(
        "import sys\n"
        "import padless.core.lengths\n"
        "assert 'padless.io.readers' not in sys.modules\n"
        "import padless\n"
        "assert 'padless.io.readers' not in sys.modules\n"  # import padless stays light
        "assert callable(padless.io.lengths_from_file)\n"
        "assert 'torch' not in sys.modules\n"
        "assert callable(padless.torch.scale_loss)\n"  # the README's FLOPs snippet
        "print('ok')\n"
    )
    assert proc.stdout.strip() == "ok", proc.stderr
    # the dispatcher for paths sits above the readers and the array checks below them
    proc = _run(
        "import padless.io as io; print(io.as_lengths.__module__, io.lengths_of.__module__)"
    )
    assert proc.stdout.strip() == "padless.core.lengths padless.io", proc.stderr


@pytest.mark.parametrize("bad", [5, 2.0, None, [1], ("en", 2)])
def test_builtin_corpus_fields_type_is_checked(bad):
    with pytest.raises(TypeError, match="fields must be a str or a list of str"):
        builtin_corpus(bad)


def test_zero_d_arrays_and_half_floats_are_counts():
    """A list of np.array(3) was 'len() of unsized object'; float16 lengths warned of an
    overflow (the bound 2**31 cast to float16)."""
    import warnings

    assert lengths_of([np.array(3), np.array(4)]).tolist() == [3, 4]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lengths_of(np.array([3, 4], np.float16)).tolist() == [3, 4]
    with pytest.raises(ValueError, match=r"got -1 at position \[1\]"):
        lengths_of([np.array(3), np.array(-1)])
