"""Packed documents kept apart: check_packed against real tiny transformers models (CPU), and the
4-D block mask of collate_packed(attention_mask="block")."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402
import transformers as tf  # noqa: E402

from padless.hf import PaddingFreeCollator  # noqa: E402
from padless.torch import collate_packed  # noqa: E402
from padless.torch._packed_check import block_causal_mask, check_packed  # noqa: E402

VOCAB = 64
TOKENS = dict(vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2)
DECODER = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2)
FAMILIES = {
    "llama": lambda **kw: tf.LlamaConfig(**DECODER, num_key_value_heads=1, **TOKENS, **kw),
    "qwen2": lambda **kw: tf.Qwen2Config(**DECODER, num_key_value_heads=1, **TOKENS, **kw),
    "mistral": lambda **kw: tf.MistralConfig(**DECODER, num_key_value_heads=1, **TOKENS, **kw),
    "phi3": lambda **kw: tf.Phi3Config(**DECODER, num_key_value_heads=1, **TOKENS, **kw),
    "gpt2": lambda **kw: tf.GPT2Config(n_embd=16, n_layer=2, n_head=2, **TOKENS, **kw),
    "gpt_neox": lambda **kw: tf.GPTNeoXConfig(**DECODER, **TOKENS, **kw),
    "opt": lambda **kw: tf.OPTConfig(
        hidden_size=16, ffn_dim=32, num_hidden_layers=2, num_attention_heads=2,
        word_embed_proj_dim=16, **TOKENS, **kw,
    ),
}  # fmt: skip
DERIVE_FROM_POSITIONS = ["llama", "qwen2", "mistral", "phi3", "gpt2", "gpt_neox"]


def _model(family, impl="sdpa", dtype=torch.float32, **config):
    torch.manual_seed(0)
    cfg = FAMILIES[family](**config)
    return tf.AutoModelForCausalLM.from_config(cfg, attn_implementation=impl, dtype=dtype).eval()


DOCS = [[5, 9, 13, 17, 21, 25, 29], [33, 37, 41, 45, 49], [53, 57, 61, 3]]


def _raw_leak(model, attention_mask=None, **kw):
    """Max |logits packed - logits alone| over the documents, computed here without check_packed."""
    ids = torch.tensor([[t for d in DOCS for t in d]])
    pos = torch.cat([torch.arange(len(d)) for d in DOCS])[None]
    with torch.no_grad():
        alone = torch.cat(
            [model(input_ids=torch.tensor([d]), position_ids=torch.arange(len(d))[None]).logits[0]
             for d in DOCS]
        )  # fmt: skip
        packed = model(input_ids=ids, position_ids=pos, attention_mask=attention_mask, **kw)
    return float((packed.logits[0].float() - alone.float()).abs().max())


# --------------------------------------------------------------------------- the leak is real


@pytest.mark.parametrize("family", list(FAMILIES))
def test_default_config_leaks_and_is_refused(family):
    # every config defaults to use_cache=True: the cache turns off the mask from position_ids
    model = _model(family)
    assert model.config.use_cache is True
    assert _raw_leak(model) > 1e-3
    model.train()
    with pytest.raises(ValueError, match="attend to each other") as err:
        check_packed(model)
    msg = str(err.value)
    assert "use_cache=True" in msg and "attn_implementation='sdpa'" in msg
    assert "attention_mask='block'" in msg
    assert (family != "opt") == ("use_cache = False" in msg)  # only where it would help
    assert model.training  # restored after the refusal


@pytest.mark.parametrize("family", DERIVE_FROM_POSITIONS)
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_no_cache_keeps_apart_and_passes(family, impl):
    model = _model(family, impl, use_cache=False)
    assert _raw_leak(model) < 1e-5
    assert check_packed(model) < 1e-5
    assert not model.training


def test_opt_leaks_without_cache_too():
    # OPT never hands position_ids to the mask: no cache is not enough
    model = _model("opt", "eager", use_cache=False)
    assert _raw_leak(model) > 1e-3
    with pytest.raises(ValueError, match="use_cache=False.*attention_mask='block'") as err:
        check_packed(model)
    assert "use_cache = False" not in str(err.value)


def test_forward_kwargs_use_cache_false_passes():
    model = _model("llama")
    assert check_packed(model, forward_kwargs={"use_cache": False}) < 1e-5


# --------------------------------------------------------------------------- the 4-D block mask


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_block_mask_keeps_apart_even_with_cache(family, impl):
    model = _model(family, impl)  # use_cache=True
    assert check_packed(model, collate=collate_packed(16, attention_mask="block")) < 1e-5
    batch = collate_packed(32, flatten=True, attention_mask="block")(DOCS)
    assert _raw_leak(model, attention_mask=batch["attention_mask"]) < 1e-5


def test_bool_block_mask_leaks_under_eager():
    # why the collate emits a float mask: eager attention adds a bool mask (True as 1.0)
    model = _model("llama", "eager")
    seg = collate_packed(32, flatten=True)(DOCS)["seq_idx"]
    as_bool = block_causal_mask(seg) == 0
    assert _raw_leak(model, attention_mask=as_bool) > 1e-3
    assert _raw_leak(_model("llama", "sdpa"), attention_mask=as_bool) < 1e-5

    def collate(features):
        out = collate_packed(32, flatten=True)(features)
        return {**out, "attention_mask": block_causal_mask(out["seq_idx"]) == 0}

    with pytest.raises(ValueError, match=r"torch.bool \(1, 1, 16, 16\) attention_mask"):
        check_packed(model, collate=collate)


def test_block_mask_layout():
    out = collate_packed(8, attention_mask="block")([[5, 6, 7], [8, 9], [1, 2, 3, 4]])
    mask = out["attention_mask"]
    assert mask.shape == (2, 1, 8, 8) and mask.dtype == torch.float32
    allowed = (mask[:, 0] == 0).int()
    assert allowed[0, 4].tolist() == [0, 0, 0, 1, 1, 0, 0, 0]  # second document, not the first
    assert allowed[0, 7].tolist() == [0, 0, 0, 0, 0, 1, 1, 1]  # the padding tail, on its own
    assert allowed[1, 3].tolist() == [1, 1, 1, 1, 0, 0, 0, 0]
    assert set(mask.unique().tolist()) == {0.0, torch.finfo(torch.float32).min}
    flat = collate_packed(8, flatten=True, attention_mask="block")([[5, 6], [7]])["attention_mask"]
    assert (flat[0, 0] == 0).int().tolist() == [[1, 0, 0], [1, 1, 0], [0, 0, 1]]
    assert "attention_mask" not in collate_packed(8)([[5, 6], [7]])
    with pytest.raises(ValueError, match="attention_mask must be one of 'block', 'flex', got '4d'"):
        collate_packed(8, attention_mask="4d")


# --------------------------------------------------------------------------- collates, dtypes


def test_padless_and_hf_collates():
    model = _model("llama", use_cache=False)
    for collate in (
        collate_packed(16),  # (rows, capacity), padding tails restart positions too
        collate_packed(32, flatten=True),
        PaddingFreeCollator(),
        PaddingFreeCollator(16, flash_attn_kwargs=True),
        tf.DataCollatorWithFlattening(),
    ):
        assert check_packed(model, collate=collate) < 1e-5, collate


def test_positions_must_restart():
    # the block mask keeps attention apart, but continuing positions still reach GPT-2's learned
    # position embeddings: the document is not what it would be alone
    model = _model("gpt2")

    def continuing(features):
        out = collate_packed(32, flatten=True, attention_mask="block")(features)
        return {**out, "position_ids": torch.arange(out["input_ids"].shape[1])[None]}

    with pytest.raises(ValueError, match="position_ids do not restart at document 1: it starts"):
        check_packed(model, collate=continuing)
    assert (
        check_packed(model, collate=collate_packed(16, position_start=2, attention_mask="block"))
        < 1e-5
    )


def test_bfloat16_tolerance():
    assert check_packed(_model("llama", dtype=torch.bfloat16, use_cache=False)) < 3e-2
    with pytest.raises(ValueError, match="attend to each other"):
        check_packed(_model("llama", dtype=torch.bfloat16))


def test_bad_arguments():
    model = _model("llama", use_cache=False)
    with pytest.raises(ValueError, match="each of the 3 documents .* row of its own"):
        check_packed(model, collate=collate_packed(8))
    with pytest.raises(ValueError, match="lengths must hold at least two documents"):
        check_packed(model, lengths=[5])
    with pytest.raises(ValueError, match=r"lengths\[1\] must be an int >= 2, got 1"):
        check_packed(model, lengths=[5, 1])
    with pytest.raises(TypeError, match=r"lengths\[0\] must be an int, got float"):
        check_packed(model, lengths=[5.0, 4])
    with pytest.raises(TypeError, match="collate must be callable"):
        check_packed(model, collate="packed")
    with pytest.raises(ValueError, match="atol must be a positive finite number"):
        check_packed(model, atol=-1.0)
    with pytest.raises(ValueError, match=r"keys names \['cu_seqlens_x'\]"):
        check_packed(model, keys=["input_ids", "cu_seqlens_x"])
    with pytest.raises(ValueError, match="do not hold document 1"):
        check_packed(model, collate=lambda f: collate_packed(32, flatten=True)(f[:1] + f[2:]))
    with pytest.raises(TypeError, match="torch module with parameters"):
        check_packed(lambda **kw: None)


def test_docs_example_runs(capsys):
    import re
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "packed_attention.md").read_text()
    code = re.search(r"<!-- example: check-packed -->\n```python\n(.*?)```", text, re.S)
    assert code is not None
    exec(compile(code.group(1), "docs/packed_attention.md", "exec"), {"__name__": "docs_example"})
    assert "attend to each other" in capsys.readouterr().out
