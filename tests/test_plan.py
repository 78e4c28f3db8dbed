import numpy as np
import pytest

from padless import BatchPlan


def test_sequence_protocol_and_equality():
    plan = BatchPlan([4, 1, 0, 2], [0, 1, 3, 4])
    assert len(plan) == 3
    assert plan[1].tolist() == [1, 0] and plan[-1].tolist() == [2]
    assert [b.tolist() for b in plan] == [[4], [1, 0], [2]]
    assert plan == BatchPlan(np.array([4, 1, 0, 2]), np.array([0, 1, 3, 4]))
    assert plan != BatchPlan([4, 1, 0, 2], [0, 2, 3, 4])
    with pytest.raises(IndexError):
        plan[3]


def test_save_load_roundtrip(tmp_path):
    plan = BatchPlan([4, 1, 0, 2], [0, 1, 3, 4], skipped=[3])
    path = tmp_path / "plan.npz"
    plan.save(path)
    again = BatchPlan.load(path)
    assert again == plan and again.skipped.tolist() == [3]
    assert [p.name for p in tmp_path.iterdir()] == ["plan.npz"]


def test_load_rejects_other_npz(tmp_path):
    path = tmp_path / "x.npz"
    np.savez(path, a=np.arange(3))
    with pytest.raises(ValueError, match="not a padless plan"):
        BatchPlan.load(path)


@pytest.mark.parametrize(
    ("indices", "offsets", "fragment"),
    [
        ([0, 1], [1, 2], "start at 0"),
        ([0, 1], [0, 1], "end at"),
        ([0, 1], [0, 2, 1, 2], "non-decreasing"),
    ],
)
def test_bad_offsets(indices, offsets, fragment):
    with pytest.raises(ValueError, match=fragment):
        BatchPlan(indices, offsets)


def test_stats_1d():
    plan = BatchPlan([0, 1, 2, 3], [0, 2, 4])
    st = plan.stats([2, 4, 3, 3])
    assert st.batches == 2 and st.sentences == 4
    assert st.real_tokens == 12
    assert st.padded_slots == 2 * 4 + 2 * 3
    assert st.padding_fraction == pytest.approx(1 - 12 / 14)
    assert (st.min_sentences, st.median_sentences, st.max_sentences) == (2, 2.0, 2)


def test_stats_2d_counts_padding_per_field():
    lengths = np.array([[2, 5], [4, 1]])
    st = BatchPlan([0, 1], [0, 2]).stats(lengths)
    assert st.real_tokens == 12
    assert st.padded_slots == 2 * 4 + 2 * 5


def test_stats_of_empty_plan():
    st = BatchPlan([], [0]).stats([])
    assert st.batches == 0 and st.padding_fraction == 0.0


def test_stats_rejects_indices_outside_lengths():
    with pytest.raises(ValueError, match="outside"):
        BatchPlan([0, 5], [0, 2]).stats([1, 2])
