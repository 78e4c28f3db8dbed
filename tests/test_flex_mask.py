"""Flex-attention block masks of packed batches (padless.torch.flex_block_mask and the collates'
``attention_mask="flex"``): the mask_mod equals the dense 4-D mask exactly, the block metadata
equals what torch's own ``create_block_mask`` computes from the full mask, the memory is O(T)
(16,384 tokens: under 1 MiB against the 4-D mask's 1 GiB), and a tiny HF Llama loaded with
``attn_implementation="flex_attention"`` gives every packed completion its unpacked
log-probability (fp32, CPU).

The model check runs transformers' flex path under ``torch.compile(backend="eager")``: flex
attention's unfused implementation, which applies the ``mask_mod`` to every (query, key) pair and
so proves the mask's meaning; the tiles' metadata (what the fused kernels skip) is proven exactly
against ``create_block_mask``. The fused inductor kernel on CPU compiles for ~30 s on this
machine, too long for the suite (docs/preference.md reports that run)."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
flex = pytest.importorskip("torch.nn.attention.flex_attention")

from padless.torch import (  # noqa: E402
    GroupCollate,
    block_mask_nbytes,
    check_prefix_packed,
    collate_groups,
    collate_packed,
    flex_block_mask,
)
from padless.torch._packed_check import block_causal_mask  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_prefix_packing import _model  # noqa: E402

_TILE_FIELDS = (
    "kv_num_blocks",
    "kv_indices",
    "full_kv_num_blocks",
    "full_kv_indices",
    "q_num_blocks",
    "q_indices",
    "full_q_num_blocks",
    "full_q_indices",
)


def _dense(mask, rows: int, width: int) -> torch.Tensor:
    """The mask_mod over every (query, key) pair: (rows, T, T) booleans."""
    q, kv = torch.arange(width)[:, None], torch.arange(width)[None]
    return torch.stack(
        [mask.mask_mod(torch.tensor(b), torch.tensor(0), q, kv) for b in range(rows)]
    )


# a row: segments (length, prompt), the prompt an earlier segment of the row (or itself), by
# its index modulo the segments before it, or None
_SEGMENTS = st.lists(
    st.tuples(st.integers(1, 12), st.one_of(st.none(), st.integers(0, 50))), min_size=1, max_size=9
)


def _layout(rows_spec):
    """Segment ids and prompts (rows, T) from per-row segment lists, rows padded to the longest
    with a tail segment of their own; ids distinct across rows, as the collates number them."""
    width = max(sum(n for n, _ in row) for row in rows_spec)
    seg, pro = [], []
    for r, row in enumerate(rows_spec):
        ids, prompt = [], []
        for k, (n, p) in enumerate(row):
            ids += [1000 * r + k] * n
            prompt += [-1 if p is None or k == 0 else 1000 * r + p % (k + 1)] * n
        tail = width - len(ids)
        ids += [1000 * r + len(row)] * tail
        prompt += [-1] * tail
        seg.append(ids)
        pro.append(prompt)
    return torch.tensor(seg), torch.tensor(pro)


@settings(max_examples=25)
@given(
    rows_spec=st.lists(_SEGMENTS, min_size=1, max_size=3),
    block=st.sampled_from([1, 3, 8, 16, 128]),  # ragged last blocks included
)
def test_mask_equals_the_dense_mask_and_tiles_equal_create_block_mask(rows_spec, block):
    seg, pro = _layout(rows_spec)
    rows, width = seg.shape
    mask = flex_block_mask(seg, prompt_of=pro, block_size=block)
    assert mask.shape == (rows, 1, width, width)
    dense = block_causal_mask(seg, prompt_of=pro)[:, 0].eq(0)
    assert torch.equal(_dense(mask, rows, width), dense)
    # torch's own tiles of the same mask, computed from the full (rows, T, T) mask
    ref = flex.create_block_mask(
        lambda b, h, q, kv: dense[b, q, kv], rows, None, width, width, device="cpu",
        BLOCK_SIZE=block, _compile=False,
    )  # fmt: skip
    for name in _TILE_FIELDS:
        assert torch.equal(getattr(mask, name), getattr(ref, name)), name


@pytest.mark.parametrize("capacity", [24, 40])
def test_collates_flex_option_is_their_block_mask(capacity):
    rng = np.random.default_rng(capacity)
    samples = _grpo_samples(rng, groups=3, g=3)
    block = collate_groups(capacity, attention_mask="block")(samples)
    flexed = collate_groups(capacity, attention_mask="flex")(samples)
    for key in ("input_ids", "position_ids", "seq_idx", "prompt_idx", "target_index"):
        assert torch.equal(block[key], flexed[key])
    rows = block["input_ids"].shape[0]
    assert isinstance(flexed["attention_mask"], flex.BlockMask)
    assert torch.equal(
        _dense(flexed["attention_mask"], rows, capacity), block["attention_mask"][:, 0].eq(0)
    )
    docs = [s["completion_ids"] + s["prompt_ids"] for s in samples[:5]]
    packed = collate_packed(capacity, attention_mask="block")(docs)
    fp = collate_packed(capacity, attention_mask="flex")(docs)
    assert torch.equal(
        _dense(fp["attention_mask"], packed["input_ids"].shape[0], capacity),
        packed["attention_mask"][:, 0].eq(0),
    )
    # the defaults are unchanged: the 4-D mask for groups, none for packed rows
    assert collate_groups(capacity).attention_mask == "block"
    assert collate_packed(capacity).attention_mask is None


def test_memory_at_16k_tokens_is_o_t_not_t_squared():
    capacity = 16_384
    rng = np.random.default_rng(0)
    samples = []
    for k in range(12):  # GRPO-like groups: a prompt, 8 completions
        prompt = [1] * int(rng.integers(100, 400))
        for _ in range(8):
            samples.append(
                {
                    "group": k,
                    "prompt_ids": prompt,
                    "completion_ids": [2] * int(rng.integers(50, 150)),
                }
            )
    batch = collate_groups(capacity, attention_mask="flex")(samples)
    rows = batch["input_ids"].shape[0]
    mask = batch["attention_mask"]
    assert mask.shape == (rows, 1, capacity, capacity)
    flex_bytes = block_mask_nbytes(mask)
    # the 4-D float32 mask: rows · C² · 4 bytes (checked on a small one, computed at 16k)
    small = block_causal_mask(batch["seq_idx"][:, :256])
    assert small.numel() * small.element_size() == rows * 256 * 256 * 4
    dense_bytes = rows * capacity * capacity * 4
    assert dense_bytes == rows * 2**30  # 1 GiB a row
    assert flex_bytes < rows * 2**20  # under 1 MiB a row
    assert dense_bytes / flex_bytes > 2000
    # tiles: (C / 128)² int32 index entries per row and field, the rest O(C)
    assert mask.kv_indices.shape == (rows, 1, 128, 128)


def test_a_batch_with_its_mask_pickles_and_the_mask_still_works():
    batch = collate_groups(16, attention_mask="flex")(
        [
            {"group": 0, "prompt_ids": [5, 6], "completion_ids": [7, 8]},
            {"group": 0, "prompt_ids": [5, 6], "completion_ids": [9]},
        ]
    )
    again = pickle.loads(pickle.dumps(batch))
    assert torch.equal(
        _dense(again["attention_mask"], 1, 16), _dense(batch["attention_mask"], 1, 16)
    )
    assert _dense(again["attention_mask"], 1, 16)[0, 4, :5].int().tolist() == [1, 1, 0, 0, 1]


def test_bad_input_is_refused_by_name():
    seg = torch.tensor([[0, 0, 1, 2]])
    with pytest.raises(ValueError, match="block_size"):
        flex_block_mask(seg, block_size=0)
    with pytest.raises(ValueError, match="no 'seq_idx'"):
        flex_block_mask({"input_ids": seg})
    with pytest.raises(ValueError, match="prompt_of must be None"):
        flex_block_mask({"seq_idx": seg}, prompt_of=seg)
    with pytest.raises(ValueError, match="has no segment 7"):
        flex_block_mask(seg, prompt_of=torch.tensor([[-1, -1, 7, 0]]))
    with pytest.raises(ValueError, match="2-D"):
        flex_block_mask(seg[0])
    with pytest.raises(ValueError, match="prompt_of must be a tensor of seq_idx's shape"):
        flex_block_mask(seg, prompt_of=torch.tensor([-1]))
    with pytest.raises(ValueError, match="attention_mask"):
        collate_groups(8, attention_mask="dense")
    with pytest.raises(ValueError, match="context_parallel"):
        collate_packed(8, attention_mask="flex", context_parallel=2)


def _grpo_samples(rng, groups: int, g: int):
    out = []
    for k in range(groups):
        prompt = rng.integers(1, 64, int(rng.integers(3, 9))).tolist()
        for _ in range(g):
            completion = rng.integers(1, 64, int(rng.integers(1, 7))).tolist()
            out.append({"group": k, "prompt_ids": prompt, "completion_ids": completion})
    return out


@pytest.mark.filterwarnings("ignore:_compile flag on create_block_mask:DeprecationWarning")
def test_hf_llama_with_flex_attention_gives_packed_completions_their_unpacked_logprobs():
    model = _model("flex_attention")
    # transformers' flex path, traced without inductor (see the module's docstring)
    compiled = torch.compile(model, backend="eager")
    # prompt + completion of 8 tokens each, so the unpacked runs share one compiled shape
    rng = np.random.default_rng(3)
    samples = [
        {"group": k, "prompt_ids": prompt, "completion_ids": rng.integers(1, 64, 8 - p).tolist()}
        for k, p in enumerate([3, 6, 5])
        for prompt in [rng.integers(1, 64, p).tolist()]
        for _ in range(3)
    ]
    collate = collate_groups(40, attention_mask="flex")
    assert collate(samples)["input_ids"].shape[0] == 2  # two rows, groups of 18, 12 and 14
    assert isinstance(collate(samples)["attention_mask"], flex.BlockMask)
    assert check_prefix_packed(compiled, samples, collate, atol=1e-5) <= 1e-5


@pytest.mark.skipif(
    not os.environ.get("PADLESS_FLEX_COMPILE"),
    reason="compiles flex attention's fused CPU kernel with inductor (~30 s cold): set "
    "PADLESS_FLEX_COMPILE=1",
)
@pytest.mark.filterwarnings("ignore:_compile flag on create_block_mask:DeprecationWarning")
def test_fused_flex_kernel_reads_the_tiles_right():
    """transformers' own compiled flex attention (the fused kernel, which skips empty tiles and
    applies no mask_mod on full ones): a prompt of 300 tokens gives full tiles; the packed
    completions have their unpacked log-probs, and a mask that drops the prompts is caught."""
    model = _model("flex_attention", max_position_embeddings=512)
    rng = np.random.default_rng(5)
    samples = [
        {"group": k, "prompt_ids": prompt, "completion_ids": rng.integers(1, 64, n).tolist()}
        for k, (p, g) in enumerate([(300, 3), (40, 4)])
        for prompt in [rng.integers(1, 64, p).tolist()]
        for n in rng.integers(20, 60, g)
    ]
    collate = collate_groups(640, attention_mask="flex")
    mask = collate(samples)["attention_mask"]
    assert int(mask.full_kv_num_blocks.sum()) > 0 and int(mask.kv_num_blocks.sum()) > 0
    assert check_prefix_packed(model, samples, collate, atol=1e-4) <= 1e-4

    class NoPrompts(GroupCollate):
        def __call__(self, items):
            out = super().__call__(items)
            out["attention_mask"] = flex_block_mask(out["seq_idx"])  # completions alone
            return out

    with pytest.raises(ValueError, match="differ from unpacked"):
        check_prefix_packed(model, samples, NoPrompts(640, attention_mask=None), atol=1e-4)
