"""Shared-prefix packing: the collate's mask, positions and targets exactly on tiny cases, and a
small HF causal LM (fp32, CPU, built here) giving every packed completion the log-probability it
has alone after its own prompt."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from padless import plan_groups  # noqa: E402
from padless.torch import (  # noqa: E402
    check_prefix_packed,
    collate_groups,
    completion_logprobs,
)

sys.path.insert(0, str(Path(__file__).parent))
import _hf_train as hft  # noqa: E402


def _allowed(batch, r=0):
    return batch["attention_mask"][r, 0].eq(0).int().tolist()


def test_two_completions_of_one_prompt_mask_positions_targets_exact():
    batch = collate_groups(8)(
        [
            {"group": 4, "prompt_ids": [11, 12], "completion_ids": [13, 14]},
            {"group": 4, "prompt_ids": [11, 12], "completion_ids": [15]},
        ]
    )
    assert batch["input_ids"].tolist() == [[11, 12, 13, 14, 15, 0, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 2, 0, 1, 2]]
    assert batch["seq_idx"].tolist() == [[0, 0, 1, 1, 2, 3, 3, 3]]
    assert batch["prompt_idx"].tolist() == [[-1, -1, 0, 0, 0, -1, -1, -1]]
    assert _allowed(batch) == [
        [1, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 0, 0, 1, 0, 0, 0],  # the second completion: its prompt and itself only
        [0, 0, 0, 0, 0, 1, 0, 0],
        [0, 0, 0, 0, 0, 1, 1, 0],
        [0, 0, 0, 0, 0, 1, 1, 1],
    ]
    assert batch["target_index"].tolist() == [1, 2, 1]
    assert batch["target_ids"].tolist() == [13, 14, 15]
    assert batch["target_completion"].tolist() == [0, 0, 1]
    assert batch["completion_loss_tokens"].tolist() == [2, 1]
    assert batch["group_loss_tokens"].tolist() == [3]
    assert batch["group_ids"].tolist() == [4]
    assert (batch["logical_tokens"], batch["executed_tokens"], batch["loss_tokens"]) == (7, 5, 3)


def test_groups_go_to_rows_next_fit_and_whole_sequences_predict_from_the_second_token():
    collate = collate_groups(5, prompt_key=None, completion_key="input_ids")
    batch = collate(
        [
            {"group": 0, "input_ids": [1, 2]},
            {"group": 0, "input_ids": [3, 4]},
            {"group": 1, "input_ids": [5, 6, 7]},  # 4 + 3 > 5: a new row
        ]
    )
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 0], [5, 6, 7, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 0, 1, 0], [0, 1, 2, 0, 1]]
    assert batch["target_index"].tolist() == [0, 2, 5, 6]
    assert batch["target_ids"].tolist() == [2, 4, 6, 7]
    assert batch["group_loss_tokens"].tolist() == [2, 2]
    assert _allowed(batch)[2] == [0, 0, 1, 0, 0]  # a sequence sees only itself
    assert batch["executed_tokens"] == batch["logical_tokens"] == 7


@pytest.mark.parametrize(
    ("samples", "match"),
    [
        ([{"group": 0, "prompt_ids": [1] * 5, "completion_ids": [2] * 4}], "group 0 has 9 tokens"),
        (
            [
                {"group": 0, "prompt_ids": [1], "completion_ids": [2]},
                {"group": 1, "prompt_ids": [1], "completion_ids": [2]},
                {"group": 0, "prompt_ids": [1], "completion_ids": [2]},
            ],
            "group 0 comes in two runs",
        ),
        (
            [
                {"group": 0, "prompt_ids": [1], "completion_ids": [2]},
                {"group": 0, "prompt_ids": [9], "completion_ids": [2]},
            ],
            "another prompt",
        ),
        ([{"group": 0, "completion_ids": [2]}], "no field 'prompt_ids'"),
    ],
)
def test_bad_batches_are_refused_by_name(samples, match):
    with pytest.raises(ValueError, match=match):
        collate_groups(8)(samples)


def _model(attn: str, **config):
    """A tiny Llama (fp32, random weights from seed 0) with attention ``attn``."""
    wider = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4}
    settings = {**wider, "max_position_embeddings": 128, **config}
    return hft.tiny_model(0, attn_implementation=attn, **settings).float()


def _grpo_samples(rng, groups: int, g: int):
    out = []
    for k in range(groups):
        prompt = rng.integers(1, 64, int(rng.integers(3, 9))).tolist()
        for _ in range(g):
            out.append(
                {
                    "group": k,
                    "prompt_ids": prompt,
                    "completion_ids": rng.integers(1, 64, int(rng.integers(1, 7))).tolist(),
                }
            )
    return out


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_packed_completion_logprobs_equal_unpacked(attn):
    rng = np.random.default_rng(3)
    samples = _grpo_samples(rng, groups=3, g=4)
    collate = collate_groups(48)
    diff = check_prefix_packed(_model(attn), samples, collate, atol=1e-5)
    assert diff <= 1e-5
    batch = collate(samples)
    assert batch["input_ids"].shape[0] >= 1
    assert batch["executed_tokens"] < batch["logical_tokens"]


def test_a_model_without_the_mask_is_caught():
    """Without the 4-D mask the completions of a prompt see each other: the check fails."""
    rng = np.random.default_rng(4)
    samples = _grpo_samples(rng, groups=1, g=3)
    with pytest.raises(ValueError, match="differ from unpacked"):
        check_prefix_packed(_model("sdpa"), samples, collate_groups(40, attention_mask=None))


def test_plan_then_collate_rows_never_exceed_capacity_and_gradients_flow():
    rng = np.random.default_rng(5)
    samples = _grpo_samples(rng, groups=6, g=3)
    lengths = [len(s["completion_ids"]) for s in samples]
    groups = [s["group"] for s in samples]
    prefix = [len(s["prompt_ids"]) for s in samples]
    plan = plan_groups(lengths, groups, capacity=40, prefix=prefix, rows_per_batch=2, seed=1)
    model = _model("sdpa")
    collate = collate_groups(40)
    seen = []
    for b in range(len(plan)):
        batch = collate([samples[i] for i in plan[b]])
        assert batch["input_ids"].shape[1] == 40
        assert batch["input_ids"].shape[0] == len(plan.batch_rows(b))
        logits = model(
            input_ids=batch["input_ids"],
            position_ids=batch["position_ids"],
            attention_mask=batch["attention_mask"],
        ).logits
        logps = completion_logprobs(logits, batch)
        (-logps.sum() / batch["loss_tokens"]).backward()
        seen.extend(plan[b].tolist())
    assert sorted(seen) == list(range(len(samples)))
    assert model.model.embed_tokens.weight.grad is not None
