"""padless.torch.calibrate_cost: forward/backward seconds per length, fitted to a MeshCost that
predicts held-out lengths, saved as JSON and planned with."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import padless  # noqa: E402
from padless.torch import calibrate_cost, time_passes  # noqa: E402


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: more threads on a busy machine only wait
    yield
    torch.set_num_threads(threads)


def test_fit_predicts_held_out_lengths_and_plans(tmp_path, one_thread):
    torch.manual_seed(0)
    # dropout 0: attention takes the fused path (no L×L scores through the caches), quadratic
    # in the length as on an accelerator
    layer = torch.nn.TransformerEncoderLayer(
        d_model=32, nhead=2, dim_feedforward=64, batch_first=True, dropout=0.0
    )

    def forward(x):
        layer.zero_grad(set_to_none=True)
        return layer(x).square().mean()

    cal = calibrate_cost(
        forward,
        lambda n: torch.randn(1, n, 32),
        [32, 128, 256, 512, 768],
        holdout=[384, 640],
        repeats=3,
        kv_bytes=4 * 32,
        bandwidth=1e9,
    )
    assert [p[0] for p in cal.points] == [32, 128, 256, 512, 768]
    assert all(f > 0 and b > 0 for _, f, b in cal.points)
    # the fit follows the measured times: within a quarter on lengths it never saw (the
    # benchmark reaches 2-10%; this test runs beside others on a shared machine)
    assert cal.error < 0.25, cal.heldout
    times = cal.cost.time(np.array([128, 512, 2048]))
    assert (np.diff(times) > 0).all()
    path = cal.cost.save(tmp_path / "cost.json")
    cost = padless.MeshCost.load(path)
    assert cost == cal.cost and cost.kv_bytes == 128 and cost.device is None
    mesh = padless.Mesh(dp=2, cp=2, dynamic=True, max_tokens=1024)
    p = padless.place(np.arange(1, 40) * 50, mesh, cost)
    assert sorted(p.indices.tolist()) == list(range(39))


def test_time_passes_and_bad_arguments(one_thread):
    layer = torch.nn.Linear(4, 4)
    f, b = time_passes(lambda x: layer(x).sum(), torch.randn(8, 4), repeats=2)
    assert f > 0 and b > 0
    with pytest.raises(ValueError, match="three or more distinct lengths"):
        calibrate_cost(lambda x: x.sum(), lambda n: torch.randn(n), [8, 8, 16])
    with pytest.raises(ValueError, match=r"lengths\[1\] must be a positive int, got 0"):
        calibrate_cost(lambda x: x.sum(), lambda n: torch.randn(n), [8, 0, 16])
    with pytest.raises(TypeError, match="forward and make_batch must be callables"):
        calibrate_cost(None, lambda n: n, [1, 2, 3])


def test_the_timing_harness_checks_its_arguments():
    leaf = torch.ones(4, requires_grad=True)
    with pytest.raises(TypeError, match="forward must be a callable"):
        time_passes(None, leaf)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="repeats"):
        time_passes(lambda b: b.sum(), leaf, repeats=0)
    with pytest.raises(ValueError, match="device must name a torch device"):
        time_passes(lambda b: b.sum(), leaf, device="nowhere")
    with pytest.raises(TypeError, match="device must be a torch.device"):
        time_passes(lambda b: b.sum(), leaf, device=3)
    with pytest.raises(TypeError, match="forward and make_batch must be callables"):
        calibrate_cost(None, lambda n: torch.ones(n), [8, 16])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"lengths\[1\]"):
        calibrate_cost(lambda b: b.sum(), lambda n: torch.ones(n), [8, 0])


def test_rounds_until_the_fastest_runs_agree(one_thread):
    from padless.torch._timing import _settled

    assert not _settled([(1.0, 1.0)], 0.03)  # one run proves nothing
    assert _settled([(1.0, 1.0), (1.02, 1.0), (5.0, 5.0)], 0.03)  # 2.0 and 2.02: within 3%
    assert not _settled([(1.0, 1.0), (1.2, 1.0), (5.0, 5.0)], 0.03)
    calls = []

    def forward(x):
        calls.append(x.shape[0])
        return (x * 2.0).sum()

    def make(n):
        return torch.ones(n, requires_grad=True)

    calibrate_cost(forward, make, [8, 16, 32], repeats=2, warmup=1, agree=None)
    assert len(calls) == 3 * (1 + 2)  # warm-up and rounds, every length each
    calls.clear()
    calibrate_cost(forward, make, [8, 16, 32], repeats=2, warmup=0, agree=0.5)
    assert 3 * 2 <= len(calls) <= 3 * 8 and len(calls) % 3 == 0  # up to 4 × repeats rounds
    with pytest.raises(ValueError, match=r"agree must be in \(0, 1\)"):
        calibrate_cost(forward, make, [8, 16, 32], agree=1.5)
    with pytest.raises(TypeError, match="agree must be a fraction or None"):
        calibrate_cost(forward, make, [8, 16, 32], agree="3%")  # type: ignore[arg-type]
