"""The simulator against brute-force references on small cases, and ``padless simulate``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from padless import MemoryModel
from padless._kernels.placement import pipeline
from padless.core.mesh import Mesh, rank_tokens
from padless.planners.placement import place, simulate

sys.path.insert(0, str(Path(__file__).parent))
from test_placement import COST  # noqa: E402  the same small cost model


def brute_ranks(p) -> np.ndarray:
    """Each rank's end time, from the segments every rank is told to run (``rank_step``): a
    shard starts when it heads the queue of every rank of its group, at the latest of their
    free times. Queues are consumed one shard at a time until all are empty."""
    queues = []
    for r in range(p.mesh.ranks):
        q = []
        for segments in p.rank_step(r):
            for seg in segments:
                q.extend((int(i), seg.group) for i in seg.indices)
        queues.append(q)
    time_of = dict(zip(p.indices.tolist(), p.times.tolist(), strict=True))
    free = [0.0] * p.mesh.ranks
    heads = [0] * p.mesh.ranks
    while any(h < len(q) for h, q in zip(heads, queues, strict=True)):
        for r in range(p.mesh.ranks):
            if heads[r] >= len(queues[r]):
                continue
            i, group = queues[r][heads[r]]
            if all(heads[g] < len(queues[g]) and queues[g][heads[g]][0] == i for g in group):
                end = max(free[g] for g in group) + time_of[i]
                for g in group:
                    free[g] = end
                    heads[g] += 1
                break
        else:
            raise AssertionError("deadlock: the ranks' orders disagree")
    return np.array(free)


@settings(max_examples=20, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(1, 4),
    st.booleans(),
    st.lists(st.integers(1, 12000), min_size=1, max_size=25),
)
def test_rank_times_match_a_queue_by_queue_replay(dp, cp, dynamic, raw):
    mesh = Mesh(dp=dp, cp=cp, dynamic=dynamic, max_tokens=4096)
    lens = np.minimum(np.array(raw), 4096 * cp - 2 * cp)
    p = place(lens, mesh, COST)
    sim = simulate(p)
    assert np.allclose(sim.rank_time, brute_ranks(p))
    assert sim.makespan == pytest.approx(sim.rank_time.max())
    assert sim.makespan >= sim.bound * (1 - 1e-9)
    # tokens per rank: summed from the segments
    toks = np.zeros(mesh.ranks, dtype=np.int64)
    for r in range(mesh.ranks):
        for segments in p.rank_step(r):
            for seg in segments:
                toks[r] += int(seg.cu_seqlens_padded[-1]) // seg.cp
    assert np.array_equal(sim.tokens, toks)


def brute_pipeline(fwd, bwd, stages):
    """1F1B by its recurrence: a device does its warm-up forwards, then alternates, each op at
    the later of its device and its dependency (computed by fixed-point iteration)."""
    m = len(fwd)
    F = np.zeros((stages, m))
    B = np.zeros((stages, m))
    for _ in range(4 * (m + stages)):
        for s in range(stages):
            warm = min(stages - s - 1, m)
            ops = [("F", i) for i in range(warm)]
            for i in range(warm, m):
                ops += [("F", i), ("B", i - warm)]
            ops += [("B", i) for i in range(m - warm, m)]
            t = 0.0
            for kind, i in ops:
                if kind == "F":
                    t = max(t, F[s - 1, i] if s else 0.0) + fwd[i]
                    F[s, i] = t
                else:
                    dep = B[s + 1, i] if s < stages - 1 else F[s, i]
                    t = max(t, dep) + bwd[i]
                    B[s, i] = t
    return B.max()


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 4), st.lists(st.floats(0.1, 5.0), min_size=1, max_size=10))
def test_1f1b_matches_its_recurrence_and_respects_the_bound(stages, times):
    fwd = np.array(times) / 3
    bwd = np.array(times) - fwd
    got, _ = pipeline(fwd, bwd, stages)
    assert got == pytest.approx(brute_pipeline(fwd, bwd, stages))
    t = np.array(times)
    bound = max(t.sum() + (stages - 1) * t.min(), stages * t.max())
    assert got >= bound * (1 - 1e-9)


@pytest.mark.parametrize(("stages", "vpp", "micro"), [(4, 1, 8), (4, 2, 8), (2, 3, 6)])
def test_uniform_pipelines_have_the_textbook_bubble(stages, vpp, micro):
    t = np.full(micro, 3.0)
    got, busy = pipeline(t / 3, t * 2 / 3, stages, vpp)
    # 1F1B: (m + S − 1)·t; interleaved: the warm-up shrinks by vpp
    assert got == pytest.approx((micro + (stages - 1) / vpp) * 3.0)
    assert busy == pytest.approx(np.full(stages, micro * 3.0))


def test_memory_per_micro_batch_and_in_flight_peak():
    mem = MemoryModel(fixed=1000.0, per_sequence=10.0, linear=(2.0,), quadratic=(0.0,))
    lens = np.array([4000, 3000, 100, 200, 300])
    mesh = Mesh(dp=1, cp=2, pp=2, dynamic=True, max_tokens=4096, micro_batches=4)
    p = place(lens, mesh, COST)
    sim = simulate(p, mem)
    act = np.zeros((4, 2))
    tau = rank_tokens(p.lengths, p.degrees)
    for i in range(len(p)):
        for r in p.ranks[i][p.ranks[i] >= 0]:
            act[p.slots[i], r] += 10.0 + 2.0 * tau[i]
    assert np.allclose(sim.memory, 1000.0 + act.max(axis=1))
    pairs = [act[i : i + 2].sum(axis=0).max() for i in range(3)]
    assert sim.peak_memory == pytest.approx(1000.0 + max(pairs))
    assert 0 < sim.bubble < 1


def test_table_reads_in_80_columns():
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 60000, 500)
    mem = MemoryModel(fixed=2**30, per_sequence=0.0, linear=(1e5,), quadratic=(0.0,))
    mesh = Mesh(dp=4, cp=8, pp=4, dynamic=True, max_tokens=16384, micro_batches=40)
    text = simulate(place(lens, mesh, COST), mem).table()
    assert max(map(len, text.splitlines())) <= 80
    assert "bubble" in text and "mem GiB" in text and len(text.splitlines()) >= 40 + 8


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "padless.cli", "simulate", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_prints_80_columns_json_and_a_plot(tmp_path):
    np.save(tmp_path / "l.npy", np.random.default_rng(1).integers(1, 20000, 300))
    mesh = "dp=4,cp=4,pp=2,dynamic=1,max_tokens=8192"
    proc = cli(tmp_path / "l.npy", "--mesh", mesh, "--global-batch", 128)
    assert proc.returncode == 0, proc.stderr
    assert max(map(len, proc.stdout.splitlines())) <= 80 and "bubble" in proc.stdout
    COST.save(tmp_path / "c.json")
    proc = cli(tmp_path / "l.npy", "--mesh", mesh, "--cost", tmp_path / "c.json", "--json")
    data = json.loads(proc.stdout)
    assert data["cost"] == COST.as_dict() and len(data["tokens_per_rank"]) == 16
    assert data["makespan_s"] >= data["bound_s"] * (1 - 1e-9)
    pytest.importorskip("matplotlib")
    proc = cli(tmp_path / "l.npy", "--mesh", mesh, "--plot", tmp_path / "s.png")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
    proc = cli(tmp_path / "l.npy", "--mesh", "dp=2,tp=2")
    assert proc.returncode == 2 and "mesh must be key=value" in proc.stderr
