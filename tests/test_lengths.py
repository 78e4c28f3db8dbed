import numpy as np
import pytest

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
