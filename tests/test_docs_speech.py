"""docs/speech.md runs as written: a manifest of real audio files → lengths → filter → spec →
CutSampler → lhotse's K2SpeechRecognitionDataset → DataLoader, every batch within both
budgets, every kept cut once per epoch; and the filters' block."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lhotse")

DOC = Path(__file__).parent.parent / "docs" / "speech.md"
RATE = 8000


def blocks() -> tuple[str, str, str]:
    """The loader example, the report shown after it, and the filters' example."""
    text = DOC.read_text()
    example = re.search(r"<!-- example: speech -->\n```python\n(.*?)```", text, re.S).group(1)
    shown = re.search(r"report says what it dropped.*?\n```\n(.*?)```", text, re.S).group(1)
    filters = re.search(r"## Filters.*?```python\n(.*?)```", text, re.S).group(1)
    return example, shown, filters


def write_manifest(folder: Path) -> list[tuple[str, float, str]]:
    """40 cuts of 8 kHz noise (0.5-4 s, about 15 characters a second) and two outliers (one
    character in 4 s; 100 characters in 1 s) as wav files and ``cuts.jsonl.gz``."""
    import soundfile
    from lhotse import CutSet, Recording, SupervisionSegment

    rng = np.random.default_rng(0)
    rows = []
    for i in range(40):
        d = round(float(rng.uniform(0.5, 4.0)), 3)
        rows.append((f"c{i:02d}", d, "ab cd " * max(1, round(d * 15 / 6))))
    rows += [("c40", 4.3, "a"), ("c41", 1.0, "x" * 100)]
    cuts = []
    for name, d, text in rows:
        path = folder / f"{name}.wav"
        soundfile.write(path, rng.standard_normal(round(d * RATE)) * 0.1, RATE)
        cut = Recording.from_file(path, recording_id=name).to_cut()
        cut.supervisions = [
            SupervisionSegment(f"{name}-s", name, start=0.0, duration=cut.duration, text=text)
        ]
        cuts.append(cut)
    CutSet(cuts).to_file(folder / "cuts.jsonl.gz")
    return rows


def test_the_speech_example_runs_within_both_budgets(tmp_path):
    import torch

    example, shown, _ = blocks()
    rows = write_manifest(tmp_path)
    here, threads = os.getcwd(), torch.get_num_threads()
    os.chdir(tmp_path)
    torch.set_num_threads(1)
    out = io.StringIO()
    try:
        scope: dict = {"__name__": "docs_speech"}
        with contextlib.redirect_stdout(out):
            exec(compile(example, "docs/speech.md:speech", "exec"), scope)
    finally:
        torch.set_num_threads(threads)
        os.chdir(here)
    printed = out.getvalue()
    assert shown.strip() in printed  # the report the page shows is the one it prints
    sampler, keep = scope["sampler"], scope["keep"]
    assert keep.dropped.tolist() == [40, 41]
    kept = {rows[i][0]: rows[i] for i in keep.kept}
    seen = []
    for cuts in sampler:  # the epoch after the example's two
        got = [kept[c.id] for c in cuts]
        assert len(got) * max(d for _, d, _ in got) <= 20.0
        assert len(got) * max(len(t) for *_, t in got) <= 400
        seen += [c.id for c in cuts]
    assert sorted(seen) == sorted(kept)
    batch = scope["batch"]
    assert batch["inputs"].shape[0] == len(batch["supervisions"]["text"])
    assert batch["inputs"].shape[1] == max(
        math.ceil(kept[c.id][1] * RATE - 1e-6) for c in batch["supervisions"]["cut"]
    )
    fields = sampler.stats()["fields"]
    assert fields[0]["real_seconds"] == pytest.approx(
        sum(math.ceil(d * 100 - 1e-6) for _, d, _ in kept.values()) / 100
    )
    again = type(sampler)(scope["cuts"], scope["spec"], lengths=sampler.lengths, seed=0)
    again.load_state_dict(json.loads(json.dumps(scope["state"])))  # JSON-safe, and it loads
    assert again.epoch == 1


def test_the_filters_example_runs():
    _, _, filters = blocks()
    exec(compile(filters, "docs/speech.md:filters", "exec"), {"__name__": "docs_filters"})


def test_the_readme_speech_section_runs_within_both_budgets():

    readme = (Path(__file__).parent.parent / "docs" / "usage.md").read_text()
    at = readme.index("\n## Speech and translation\n")
    code = re.search(r"```python\n(.*?)```", readme[at:], re.S).group(1)
    rng = np.random.default_rng(3)
    seconds = rng.lognormal(1.8, 0.5, 3000).clip(0.3, 40.0)
    tokens = (seconds * rng.lognormal(1.2, 0.2, 3000)).astype(np.int64) + 1
    tokens[:3] = [900, 0, 1]  # outliers: far too many tokens a second, none at all
    scope = {"seconds": seconds, "tokens": tokens, "rank": 0, "world_size": 1}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(code, "docs/usage.md:Speech and translation", "exec"), scope)
    keep, sampler = scope["keep"], scope["sampler"]
    assert {0, 1} <= set(keep.dropped.tolist()) and "dropped" in out.getvalue()
    lengths = scope["lengths"][keep.kept]
    for batch in sampler:
        assert len(batch) * lengths[batch, 0].max() <= 20000
        assert len(batch) * lengths[batch, 1].max() <= 1000
    assert sampler.stats()["fields"][0]["real_seconds"] == pytest.approx(lengths[:, 0].sum() / 100)
    plan = scope["buckets"].plan(lengths)
    assert sorted(plan.indices.tolist()) == list(range(len(lengths)))
    packed = scope["packed"]
    pairs = scope["pairs"]
    batch = scope["collate"](
        [{"input_ids": [1] * a, "labels": [2] * b} for a, b in pairs[next(iter(packed))]]
    )
    assert batch["input_ids"].shape[-1] == 1024 and batch["labels"].shape[-1] == 1024


def test_the_readme_lhotse_recipe_yields_cutsets_within_both_budgets(tmp_path):
    import torch
    from torch.utils.data import DataLoader

    import padless

    readme = (Path(__file__).parent.parent / "docs" / "usage.md").read_text()
    at = readme.index("With lhotse, the sampler hands its datasets one `CutSet` per batch")
    code = re.search(r"```python\n(.*?)```", readme[at:], re.S).group(1)
    rows = write_manifest(tmp_path)
    here, threads = os.getcwd(), torch.get_num_threads()
    os.chdir(tmp_path)
    torch.set_num_threads(1)
    try:
        scope: dict = {"__name__": "readme_lhotse", "padless": padless, "DataLoader": DataLoader}
        exec(compile(code, "docs/usage.md:lhotse", "exec"), scope)
    finally:
        torch.set_num_threads(threads)
        os.chdir(here)
    by_id = {name: (d, text) for name, d, text in rows}
    seen = []
    for cuts in scope["cut_sampler"]:
        got = [by_id[c.id] for c in cuts]
        assert len(got) * max(d for d, _ in got) <= 20.0
        assert len(got) * max(len(t) for _, t in got) <= 400
        seen += [c.id for c in cuts]
    assert sorted(seen) == sorted(by_id)
    assert len(scope["texts"]) == scope["audio"].shape[0]
