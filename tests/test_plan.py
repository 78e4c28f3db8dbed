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


# ------------------------------------------------------------------ saved files (issue 13)


def test_save_writes_exactly_the_path_given(tmp_path):
    from padless import plan_packing

    plain = BatchPlan([1, 0], [0, 1, 2])
    packed = plan_packing([5, 3, 3, 8, 1], capacity=8)
    for name, plan in (("plain", plain), ("packed.bin", packed)):
        plan.save(tmp_path / name)
        assert BatchPlan.load(tmp_path / name) == plan
    assert sorted(p.name for p in tmp_path.iterdir()) == ["packed.bin", "plain"]


def test_load_returns_the_type_that_was_saved(tmp_path):
    from padless import PackedPlan, TokenBudget, plan_packing

    packed = plan_packing([5, 3, 3, 8, 1], capacity=8, rows_per_batch=2)
    packed.save(tmp_path / "packed.npz")
    back = BatchPlan.load(tmp_path / "packed.npz")
    assert type(back) is PackedPlan and back == packed and back.capacity == 8
    assert back.batch_rows(0)[0].tolist() == packed.batch_rows(0)[0].tolist()
    plain = TokenBudget(max_tokens=8).plan([5, 3, 3, 8, 1])
    plain.save(tmp_path / "plain.npz", spec=TokenBudget(max_tokens=8))
    back = BatchPlan.load(tmp_path / "plain.npz")
    assert type(back) is BatchPlan and back == plain
    assert back.info["spec"] == {
        "strategy": "token_budget",
        "max_tokens": 8,
        "max_sentences": None,
        "multiple_of": 1,
        "oversize": "error",
    }
    with pytest.raises(ValueError, match="not a padless packing plan: it holds a BatchPlan"):
        PackedPlan.load(tmp_path / "plain.npz")


def test_load_reads_plans_saved_before_the_record(tmp_path):
    np.savez(tmp_path / "old.npz", indices=[2, 0, 1], offsets=[0, 2, 3], skipped=[4])
    assert BatchPlan.load(tmp_path / "old.npz") == BatchPlan([2, 0, 1], [0, 2, 3], skipped=[4])


def test_load_refuses_records_naming_foreign_classes(tmp_path):
    import json

    record = json.dumps({"type": "Popen", "module": "subprocess"})
    np.savez(tmp_path / "x.npz", indices=[0], offsets=[0, 1], padless_plan=np.array(record))
    with pytest.raises(ValueError, match="unknown type"):
        BatchPlan.load(tmp_path / "x.npz")
    (tmp_path / "t.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a padless plan"):
        BatchPlan.load(tmp_path / "t.npz")


def test_save_keeps_the_old_file_when_writing_fails(tmp_path):
    plan = BatchPlan([1, 0], [0, 1, 2])
    plan.save(tmp_path / "p.npz")
    before = (tmp_path / "p.npz").read_bytes()

    class DiskFull:
        def __array__(self, dtype=None, copy=None):
            raise OSError(28, "No space left on device")

    class Unwritable(BatchPlan):
        __slots__ = ()

        def to_arrays(self):  # the second array fails half way through the archive
            return {"indices": self.indices, "offsets": DiskFull()}

    with pytest.raises(OSError, match="could not write plan output .*p.npz.*No space left"):
        Unwritable([0], [0, 1]).save(tmp_path / "p.npz")
    assert (tmp_path / "p.npz").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.npz"]


class _Arrays(dict):
    """Arrays by name with ``.files``, as an opened ``.npz`` answers."""

    @property
    def files(self):
        return list(self)


def test_to_arrays_and_from_arrays_give_every_plan_type_back():
    from padless import FixedShapes, Packing, TokenBudget

    lens = np.arange(60) * 37 % 50 + 1
    for plan in (
        TokenBudget(max_tokens=128, oversize="drop").plan(lens, seed=2),
        Packing(capacity=64, max_per_row=3).plan(lens, seed=2),
        FixedShapes(shapes=[(8, 32), (2, 64)]).plan(lens),
    ):
        arrays = plan.to_arrays()
        assert set(arrays) >= {"indices", "offsets", "skipped"}
        back = type(plan).from_arrays(_Arrays(arrays), {"info": plan.info}, "here")
        assert type(back) is type(plan) and back == plan
    with pytest.raises(ValueError, match="here is not a padless plan: missing"):
        BatchPlan.from_arrays(_Arrays(indices=np.arange(2)), {}, "here")


def test_save_records_a_spec_without_the_planners_and_refuses_anything_else(tmp_path):
    from padless import TokenBudget
    from padless.planners.spec import spec_to_dict

    spec = TokenBudget(max_tokens=8, oversize="drop")
    plan = spec.plan([5, 3, 3, 9, 1])
    plan.save(tmp_path / "p.npz", spec=spec)
    assert BatchPlan.load(tmp_path / "p.npz").info["spec"] == spec_to_dict(spec)
    for bad in ({"max_tokens": 8}, "token_budget", TokenBudget):
        with pytest.raises(TypeError, match="spec must be a padless spec .e.g. TokenBudget., got"):
            plan.save(tmp_path / "bad.npz", spec=bad)
        with pytest.raises(TypeError, match="spec must be a padless spec .e.g. TokenBudget., got"):
            spec_to_dict(bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.npz"]
