"""padless with JAX (CPU): FixedShapes batches through padless.grain compile a jitted training
step once per shape of the shape set, and packed rows' segment ids make the attention mask
that keeps documents apart (packed attention == each document's attention alone)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("grain")

import jax.numpy as jnp  # noqa: E402

import padless  # noqa: E402
from padless.grain import PlanBatches, sampler  # noqa: E402
from padless.jax import attention_mask, compiled_shapes  # noqa: E402

VOCAB, DIM = 64, 8


def init(key):
    k1, k2 = jax.random.split(key)
    return {
        "embed": jax.random.normal(k1, (VOCAB, DIM)) * 0.1,
        "out": jax.random.normal(k2, (DIM, VOCAB)) * 0.1,
    }


def loss_fn(params, batch):
    """Next-token loss of a tiny model (embedding -> linear), real tokens only."""
    x = params["embed"][batch["inputs"]]
    logits = x @ params["out"]
    seg = batch["inputs_segment_ids"]
    target = batch["inputs"][:, 1:]
    keep = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0)
    logp = jax.nn.log_softmax(logits[:, :-1])
    picked = jnp.take_along_axis(logp, target[..., None], axis=-1)[..., 0]
    return -(picked * keep).sum() / jnp.maximum(keep.sum(), 1)


@jax.jit
def train_step(params, batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    return jax.tree_util.tree_map(lambda p, g: p - 0.5 * g, params, grads), loss


def test_a_jitted_step_compiles_once_per_shape_of_the_set():
    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.lognormal(3.0, 0.7, 300).astype(np.int64) + 2, 128)
    # counting sequences (each token the last plus one): something to learn
    starts = rng.integers(0, VOCAB - 1, lengths.size)
    records = [
        ((s + np.arange(n)) % (VOCAB - 1) + 1).astype(np.int32)
        for s, n in zip(starts, lengths, strict=True)
    ]
    shapes = padless.shape_set(lengths, 3, max_tokens=512)
    spec = padless.FixedShapes(shapes=shapes)
    params = init(jax.random.PRNGKey(0))
    seen, losses = set(), []
    for batch in PlanBatches(sampler(lengths, spec, seed=0), records, num_epochs=2):
        seen.add(batch["inputs"].shape)
        params, loss = train_step(params, jax.device_put(batch))
        losses.append(float(loss))
    assert seen == {tuple(s) for s in spec.shapes}
    assert compiled_shapes(train_step) == len(spec.shapes)  # one compile per shape, 2 epochs
    assert np.mean(losses[-10:]) < np.mean(losses[:10])  # it trains


def reference_mask(seg, causal=True):
    b, n = seg.shape
    out = np.zeros((b, n, n), bool)
    for r in range(b):
        for i in range(n):
            for j in range(n):
                out[r, i, j] = seg[r, i] == seg[r, j] != 0 and (j <= i or not causal)
    return out


def test_attention_mask_matches_its_definition():
    rng = np.random.default_rng(1)
    seg = np.sort(rng.integers(0, 4, (3, 12)), axis=1)[:, ::-1].copy()  # 0 (padding) last
    for causal in (True, False):
        np.testing.assert_array_equal(
            np.asarray(attention_mask(seg, causal=causal)), reference_mask(seg, causal)
        )
    with pytest.raises(ValueError, match="segment_ids must be"):
        attention_mask(np.zeros(4, np.int32))
    with pytest.raises(TypeError, match="segment_ids must be integers"):
        attention_mask(np.zeros((1, 4), np.float32))
    with pytest.raises(TypeError, match="fn must be a jax.jit function"):
        compiled_shapes(len)


def attend(x, mask):
    scores = jnp.einsum("bid,bjd->bij", x, x) / np.sqrt(x.shape[-1])
    scores = jnp.where(mask, scores, -1e9)
    return jnp.einsum("bij,bjd->bid", jax.nn.softmax(scores, axis=-1), x)


def causal_np(x):
    """One document's causal self-attention, in numpy."""
    scores = x @ x.T / np.sqrt(x.shape[-1])
    scores = np.where(np.tril(np.ones(scores.shape, bool)), scores, -np.inf)
    w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (w / w.sum(axis=-1, keepdims=True)) @ x


def test_packed_attention_equals_each_document_alone():
    rng = np.random.default_rng(2)
    lengths = [7, 3, 9, 2, 5, 6]
    records = [rng.integers(1, VOCAB, n).astype(np.int32) for n in lengths]
    embed = jnp.asarray(rng.standard_normal((VOCAB, DIM)).astype(np.float32))
    spec = padless.Packing(capacity=16, rows_per_batch=2)
    for batch in PlanBatches(sampler(lengths, spec, seed=0), records):
        x = embed[batch["inputs"]]
        packed = np.asarray(attend(x, attention_mask(batch["inputs_segment_ids"])))
        seg, tokens = batch["inputs_segment_ids"], batch["inputs"]
        for row in range(seg.shape[0]):
            for s in range(1, int(seg[row].max(initial=0)) + 1):
                at = np.flatnonzero(seg[row] == s)
                alone = np.asarray(embed)[tokens[row, at]]
                np.testing.assert_allclose(packed[row, at], causal_np(alone), rtol=1e-4, atol=1e-5)


def test_shard_by_jax_process_is_this_process_of_all():
    import grain

    s = sampler(
        [3, 5, 2, 7],
        padless.TokenBudget(max_tokens=8),
        shard_options=grain.sharding.ShardByJaxProcess(),
    )
    assert (s.rank, s.world_size) == (jax.process_index(), jax.process_count())
