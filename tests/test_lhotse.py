"""padless.lhotse against real lhotse: lengths of cuts and manifests, CutSampler in a loader."""

from __future__ import annotations

import gzip
import json
import math
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import padless
from padless.lhotse import CutSampler, is_manifest, lengths_of_cuts

lhotse = pytest.importorskip("lhotse")
from lhotse import CutSet  # noqa: E402
from lhotse.testing.dummies import (  # noqa: E402
    dummy_cut,
    dummy_in_memory_features,
    dummy_supervision,
)

TWO = padless.TokenBudget(max_tokens=(20.0, 90), resolution=(0.01, None))
WORDS = ["the", "cat", "sat", "on", "a", "mat", "quietly"]


def _cuts(n: int = 40, seed: int = 0, features: bool = True) -> CutSet:
    """``n`` mono cuts of 0.5-6 s, one supervision each (1-8 words), features in memory."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        d = round(float(rng.uniform(0.5, 6.0)), 4)
        text = " ".join(rng.choice(WORDS, int(rng.integers(1, 9))))
        sup = dummy_supervision(i, duration=d, text=text)
        sup.custom = {"num_tokens": int(rng.integers(0, 50))}
        feats = dummy_in_memory_features(i, duration=d) if features else None
        out.append(
            dummy_cut(i, duration=d, recording_duration=d, features=feats, supervisions=[sup])
        )
    return CutSet(out)


@pytest.fixture(scope="module")
def cuts() -> CutSet:
    return _cuts()


def test_a_cutset_and_its_manifest_give_the_same_lengths(cuts, tmp_path):
    path = tmp_path / "cuts.jsonl.gz"
    _cuts(features=False).to_file(path)  # the same cuts without in-memory features
    assert is_manifest(path) and not is_manifest(tmp_path / "x.jsonl")
    seconds = np.array([c.duration for c in cuts])
    ticks = lengths_of_cuts(cuts)
    assert ticks.dtype == np.int64 and ticks.tolist() == np.ceil(seconds * 100 - 1e-6).tolist()
    for tokens in (None, len, "text", "num_tokens", lambda t: len(t.split())):
        a, b = lengths_of_cuts(cuts, tokens=tokens), lengths_of_cuts(path, tokens=tokens)
        assert np.array_equal(a, b), tokens
    pairs = lengths_of_cuts(path, tokens="num_tokens", resolution=0.1)
    want = [
        [math.ceil(c.duration * 10 - 1e-6), c.supervisions[0].custom["num_tokens"]] for c in cuts
    ]
    assert pairs.tolist() == want
    words = lengths_of_cuts(cuts, tokens=lambda t: len(t.split()))[:, 1]
    assert words.tolist() == [len(c.supervisions[0].text.split()) for c in cuts]


def test_mixed_cut_lines_and_nemo_lines_are_read(cuts, tmp_path):
    mono = cuts[0].drop_features()
    mixed = mono.pad(duration=mono.duration + 2.0)  # a MixedCut: no top-level duration
    path = tmp_path / "mixed.jsonl"
    CutSet([mono, mixed]).to_file(path)
    got = lengths_of_cuts(path, tokens=len)
    assert got.tolist() == lengths_of_cuts([mono, mixed], tokens=len).tolist()
    assert got[1, 0] == math.ceil((mono.duration + 2.0) * 100 - 1e-6)
    nemo = tmp_path / "train_manifest.jsonl"
    nemo.write_text(
        '{"audio_filepath": "a.wav", "duration": 2.5, "text": "hello there"}\n\n'
        '{"audio_filepath": "b.wav", "duration": 0.31, "text": ""}\n'
    )
    assert lengths_of_cuts(nemo, tokens=len).tolist() == [[250, 11], [31, 0]]


durations = st.floats(0, 40, allow_nan=False, allow_infinity=False)
texts = st.lists(st.text(alphabet="ab ", max_size=12), max_size=3)


@given(st.lists(st.tuples(durations, texts), min_size=1, max_size=30))
def test_manifest_ticks_bound_the_durations_and_tokens_sum_the_supervisions(rows):
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/cuts.jsonl.gz"
        with gzip.open(path, "wt") as fh:
            for i, (dur, sups) in enumerate(rows):
                item = {"id": str(i), "duration": dur, "supervisions": [{"text": t} for t in sups]}
                fh.write(json.dumps(item) + "\n")
        got = lengths_of_cuts(path, resolution=0.02, tokens=len)
    objects = [
        SimpleNamespace(duration=dur, supervisions=[SimpleNamespace(text=t) for t in sups])
        for dur, sups in rows
    ]
    assert np.array_equal(got, lengths_of_cuts(objects, resolution=0.02, tokens=len))
    for (dur, sups), (ticks, tokens) in zip(rows, got.tolist(), strict=True):
        assert ticks * 0.02 >= dur - 1e-9 and (ticks - 1) * 0.02 < dur
        assert tokens == sum(len(t) for t in sups)


def test_cut_sampler_feeds_a_k2_dataset_every_cut_once_within_both_budgets(cuts):
    from lhotse.dataset import K2SpeechRecognitionDataset
    from torch.utils.data import DataLoader

    spec = padless.TokenBudget(max_tokens=(12.0, 60), resolution=(0.01, None))
    sampler = CutSampler(cuts, spec, tokens=len, seed=3)  # 12 s of audio, 60 characters
    dataset = K2SpeechRecognitionDataset(return_cuts=True)
    loader = DataLoader(dataset, sampler=sampler, batch_size=None)
    by_id = {c.id: c for c in cuts}
    for epoch in range(2):
        sampler.set_epoch(epoch)
        seen = []
        for batch in loader:
            got = [by_id[c.id] for c in batch["supervisions"]["cut"]]
            assert len(got) * max(c.duration for c in got) <= 12.0
            assert len(got) * max(len(c.supervisions[0].text) for c in got) <= 60
            assert batch["inputs"].shape[0] == len(got)
            seen += [c.id for c in got]
        assert sorted(seen) == sorted(by_id)
    stats = sampler.stats()
    assert len(sampler) == stats["batches"] and len(stats["fields"]) == 2
    assert (
        0 < stats["fields"][0]["real_seconds"] == pytest.approx(sum(sampler.lengths[:, 0]) * 0.01)
    )


def _ids(sampler) -> list[list[str]]:
    return [[c.id for c in batch] for batch in sampler]


def test_resume_is_the_uninterrupted_epoch_and_ranks_take_equal_steps(cuts):
    spec = padless.TokenBudget(max_tokens=900)
    whole = _ids(CutSampler(cuts, spec, seed=5, rank=0, world_size=1))
    for stop in (0, 1, len(whole) // 2, len(whole) - 1):
        first = CutSampler(cuts, spec, seed=5, rank=0, world_size=1)
        it = iter(first)
        done = [[c.id for c in next(it)] for _ in range(stop)]
        state = first.state_dict()
        again = CutSampler(cuts, spec, seed=5, rank=0, world_size=1)
        again.load_state_dict(json.loads(json.dumps(state)))
        assert done + _ids(again) == whole
    ranks = [CutSampler(cuts, spec, seed=5, rank=r, world_size=2) for r in range(2)]
    shards = [_ids(s) for s in ranks]
    assert len(shards[0]) == len(shards[1]) == len(ranks[0])
    covered = {i for shard in shards for batch in shard for i in batch}
    assert covered == {c.id for c in cuts}
    elastic = CutSampler(cuts, spec, seed=5, rank=0, world_size=1)
    elastic.load_state_dict({**ranks[0].state_dict(), "position": 2})
    assert _ids(elastic) == whole[2:]  # a state of world size 2 loads at world size 1


def test_lengths_given_and_settings_refused_by_name(cuts, tmp_path):
    lens = lengths_of_cuts(cuts)
    a = CutSampler(cuts, padless.TokenBudget(max_tokens=800), lengths=lens, seed=1)
    b = CutSampler(list(cuts), padless.TokenBudget(max_tokens=800), seed=1)
    assert _ids(a) == _ids(b) and len(a.cuts) == len(cuts)
    c = CutSampler(cuts, TWO, tokens="num_tokens", resolution=0.01, seed=2)
    d = CutSampler(cuts, TWO, lengths=lengths_of_cuts(cuts, tokens="num_tokens"), seed=2)
    assert _ids(c) == _ids(d) and c.resolution == 0.01
    bad = [
        (dict(spec=padless.Packing(capacity=800)), ValueError, "packs"),
        (dict(spec=padless.TokenBudget(max_tokens=800), lengths=lens[:3]), ValueError, "one row"),
        (dict(spec=padless.TokenBudget(max_tokens=800), tokens=3), TypeError, "tokens"),
        (dict(spec=padless.TokenBudget(max_tokens=800), resolution=0), ValueError, "resolution"),
        (dict(spec=TWO, resolution=0.02, tokens=len), ValueError, "differs from the spec"),
        (dict(spec=TWO), ValueError, "tokens must be given"),
        (dict(spec="budget"), TypeError, "spec"),
    ]
    for kwargs, error, words in bad:
        with pytest.raises(error, match=words):
            CutSampler(cuts, **kwargs)
    with pytest.raises(TypeError, match="cuts"):
        CutSampler(5, padless.TokenBudget(max_tokens=800))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"duration": 1.0}\n{"id": "x"}\n')
    with pytest.raises(ValueError, match=r"broken.jsonl:2: .*'duration'"):
        lengths_of_cuts(broken)
    broken.write_text('{"duration": "1.0"}\n')
    with pytest.raises(ValueError, match=r"broken.jsonl:1: duration"):
        lengths_of_cuts(broken)
    broken.write_text('{"duration": 1.0, "supervisions": [{"id": "s"}]}\n')
    with pytest.raises(ValueError, match="no text"):
        lengths_of_cuts(broken, tokens=len)
    with pytest.raises(ValueError, match="'num_tokens'"):
        lengths_of_cuts(broken, tokens="num_tokens")
    with pytest.raises(ValueError, match=r"tokens\('"):
        lengths_of_cuts(cuts, tokens=lambda t: -1)
    with pytest.raises(ValueError, match=".jsonl or .jsonl.gz"):
        lengths_of_cuts(tmp_path / "cuts.txt")
    # hostile lines and files: each a ValueError naming the file (were OverflowError,
    # RecursionError and EOFError)
    first = '{"duration": 1.5, "supervisions": []}\n'
    for line, words in (
        ('{"duration": 1' + "0" * 400 + "}", r"broken.jsonl:2: duration must be a finite"),
        ('{"duration": NaN}', r"broken.jsonl:2: duration must be a finite"),
        ('\n\n{"duration": -0.5}', r"broken.jsonl:4: duration must be a finite, non-negative"),
        ('{"duration": 1.0, "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ):
        broken.write_text(first + line + "\n")
        with pytest.raises(ValueError, match=words):
            lengths_of_cuts(broken)
    packed = gzip.compress((first * 5000).encode())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(ValueError, match="cut.jsonl.gz is not whole gzip data"):
        lengths_of_cuts(cut)


def test_padless_report_reads_a_manifest_without_lhotse_and_prints_seconds(
    tmp_path, monkeypatch, capsys
):
    from padless.cli import main

    path = tmp_path / "cuts.jsonl.gz"
    _cuts(features=False).to_file(path)
    monkeypatch.setitem(sys.modules, "lhotse", None)  # an import of lhotse fails from here
    assert main(["report", str(path), "--max-tokens", "2000"]) == 0
    out = capsys.readouterr().out
    assert "(manifest: [duration ticks, tokens])" in out
    assert "durations: 0.0" in out and " s, max " in out and "10 ms ticks" in out
    assert "supervision tokens:" in out and "token_budget" in out
    assert main(["report", str(path), str(path)]) != 0
    assert "give it alone" in capsys.readouterr().err
