"""padless.torch.lm_tensors: LMStream batches as tensors, plain or pinned."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from padless.streams.lm import LMStream  # noqa: E402
from padless.torch import lm_tensors  # noqa: E402
from padless.torch._loaders import _pinned_memory_available  # noqa: E402


@pytest.mark.parametrize("out_dtype", ["int64", "int32", "uint16"])
def test_lm_tensors_equal_the_numpy_batches_and_advance_the_state(out_dtype):
    tokens = np.random.default_rng(0).integers(0, 50000, 2000).astype(np.uint16)
    kw = dict(batch_size=3, num_steps=8, out_dtype=out_dtype, mode="sequential")
    want = list(LMStream(tokens, **kw))
    stream = LMStream(tokens, **kw)
    got = []
    for x, y in lm_tensors(stream):
        assert isinstance(x, torch.Tensor) and x.dtype == getattr(torch, out_dtype)
        got.append((x, y))
        assert stream.state_dict()["position"] == len(got)
    assert len(got) == len(want)
    for (x, y), (wx, wy) in zip(got, want, strict=True):
        np.testing.assert_array_equal(x.numpy(), wx)
        np.testing.assert_array_equal(y.numpy(), wy)


def test_lm_tensors_checks_its_arguments():
    stream = LMStream(np.arange(100), batch_size=2, num_steps=4)
    with pytest.raises(
        TypeError,
        match="stream must be a padless LMStream or a MixtureSampler of LM streams, got list",
    ):
        next(lm_tensors([1, 2]))
    with pytest.raises(TypeError, match="pin_memory must be a bool"):
        next(lm_tensors(stream, pin_memory="yes"))


@pytest.mark.skipif(_pinned_memory_available(), reason="machine has an accelerator")
def test_pin_memory_without_an_accelerator_is_a_clear_error():
    stream = LMStream(np.arange(100), batch_size=2, num_steps=4)
    with pytest.raises(ValueError, match="pin_memory=True needs CUDA or another accelerator"):
        next(lm_tensors(stream, pin_memory=True))


@pytest.mark.skipif(not _pinned_memory_available(), reason="needs CUDA or another accelerator")
def test_pinned_batches_are_pinned_and_equal():
    tokens = np.arange(5000, dtype=np.uint16)
    kw = dict(batch_size=4, num_steps=16, seed=3)
    want = list(LMStream(tokens, **kw))
    got = list(lm_tensors(LMStream(tokens, **kw), pin_memory=True))
    assert len(got) == len(want)
    for (x, y), (wx, wy) in zip(got, want, strict=True):
        assert x.is_pinned() and y.is_pinned()
        np.testing.assert_array_equal(x.numpy(), wx)
        np.testing.assert_array_equal(y.numpy(), wy)
