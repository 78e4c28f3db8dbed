"""GRPO and RLOO on packed micro-batches equal TRL's (the real GRPOTrainer and RLOOTrainer, a
tiny Llama built here, fp32, CPU): on the same rollout batch the loss and gradients of
``PackedGRPOMixin`` (the batch planned by ``plan_step`` under a token cap, one packed row per
micro-batch) equal those of TRL's own padded ``_compute_loss``; two ``train()`` steps beside the
plain trainer end with the same weights."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("trl")
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, models  # noqa: E402
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer  # noqa: E402

from padless.hf import PackedGRPOMixin  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import _hf_train as hft  # noqa: E402


class PackedGRPOTrainer(PackedGRPOMixin, GRPOTrainer):
    """TRL's GRPOTrainer on packed micro-batches."""


class PackedRLOOTrainer(PackedGRPOMixin, RLOOTrainer):
    """TRL's RLOOTrainer on packed micro-batches."""


PLANS: list = []  # every step plan the packed trainers made


def _recorded(self, lengths, loss_tokens, groups=None):
    plan = PackedGRPOMixin._padless_plan(self, lengths, loss_tokens, groups)
    PLANS.append(plan)
    return plan


PackedGRPOTrainer._padless_plan = _recorded  # type: ignore[method-assign]
PackedRLOOTrainer._padless_plan = _recorded  # type: ignore[method-assign]


def _model(seed: int = 0) -> LlamaForCausalLM:
    return hft.tiny_model(
        seed, attn_implementation="sdpa", eos_token_id=1, pad_token_id=0, bos_token_id=None
    )


def _tokenizer() -> PreTrainedTokenizerFast:
    vocab = {f"t{i}": i for i in range(hft.VOCAB)}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")),
        pad_token="t0",
        eos_token="t1",
    )
    tok.backend_tokenizer.pre_tokenizer = __import__(
        "tokenizers.pre_tokenizers", fromlist=["WhitespaceSplit"]
    ).WhitespaceSplit()
    return tok


def reward_variety(completions, **kwargs):
    """A plain Python reward: completions with more distinct tokens score more."""
    return [float(len(set(c.split()))) for c in completions]


PROMPTS = ["t3 t4", "t5 t6 t7 t8", "t9", "t10 t11 t12", "t13 t14 t15 t16 t17", "t18 t19"]


def _config(cls, out: Path, **extra):
    settings = {
        **hft.SETTINGS,
        "num_train_epochs": 1,
        "max_steps": 2,
        "gradient_accumulation_steps": 1,
        "per_device_train_batch_size": 6,
        "num_generations": 3,
        "max_completion_length": 8,
        "bf16": False,
        "temperature": 1.0,
        "generation_kwargs": {"do_sample": True},
        **extra,
    }
    return cls(str(out), **settings)


def _trainer(cls, config, **extra):
    # from a saved model: TRL loads its reference model (beta != 0) from the policy's path
    path = Path(config.output_dir) / "tiny"
    if not path.exists():
        _model(0).save_pretrained(path)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        return cls(
            model=str(path),
            reward_funcs=reward_variety,
            args=config,
            train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS]),
            processing_class=_tokenizer(),
            **extra,
        )
    finally:
        hf_logging.set_verbosity(verbosity)


def _rollout(n: int, *, seed: int, rloo: bool = False, per_prompt: int = 1) -> dict:
    """A rollout batch as TRL's trainers hand it to the loss: prompts left-padded, completions
    right-padded, long-tailed lengths, old and reference log-probs off the current ones;
    ``per_prompt`` rollouts of each prompt, in a shuffled order."""
    g = torch.Generator().manual_seed(seed)
    p_len = torch.randint(1, 7, (n,), generator=g)
    c_len = torch.randint(0, 12, (n,), generator=g)
    c_len[0] = 11
    P, C = int(p_len.max()), int(c_len.max())
    prompt_mask = (torch.arange(P)[None, :] >= P - p_len[:, None]).long()
    completion_mask = (torch.arange(C)[None, :] < c_len[:, None]).long()
    prompt_ids = torch.randint(2, hft.VOCAB, (n, P), generator=g) * prompt_mask
    if per_prompt > 1:  # rollouts of one prompt: the same prompt row
        which = torch.randperm(n, generator=g) // per_prompt
        prompt_ids, prompt_mask = prompt_ids[which], prompt_mask[which]
    batch = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": torch.randint(2, hft.VOCAB, (n, C), generator=g) * completion_mask,
        "completion_mask": completion_mask,
        "advantages": torch.randn(n, generator=g),
        "num_items_in_batch": completion_mask.sum() * 2,  # a generation batch twice this one
    }
    if rloo:
        batch["old_logps"] = -3.0 * c_len.float() + 0.3 * torch.randn(n, generator=g)
    else:
        batch["old_per_token_logps"] = (-3.7 + 0.3 * torch.randn(n, C, generator=g)) * (
            completion_mask
        )
        batch["ref_per_token_logps"] = (-3.7 + 0.3 * torch.randn(n, C, generator=g)) * (
            completion_mask
        )
    return batch


def _loss_and_grads(trainer, model, inputs):
    model.zero_grad()
    loss = trainer._compute_loss(model, inputs)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return loss.detach(), grads


@pytest.mark.parametrize(
    ("loss_type", "extra"),
    [
        ("dapo", {}),
        ("dapo", {"share": True}),
        ("grpo", {"share": True, "beta": 0.05}),
        ("grpo", {"beta": 0.05}),
        ("bnpo", {}),
        ("grpo", {"importance_sampling_level": "sequence", "delta": 1.1}),
        ("dr_grpo", {"delta": 1.2, "epsilon_high": 0.28}),
        ("bnpo", {"tools": True}),
    ],
)
def test_packed_grpo_loss_and_gradients_equal_trls(tmp_path, loss_type, extra):
    extra = dict(extra)
    share = extra.pop("share", False)
    tools = extra.pop("tools", False)
    config = _config(GRPOConfig, tmp_path, **{"loss_type": loss_type, **extra})
    theirs = _trainer(GRPOTrainer, config)
    ours = _trainer(PackedGRPOTrainer, config, padless_max_tokens=24, padless_share_prompts=share)
    inputs = _rollout(12, seed=1, per_prompt=3 if share else 1)
    if tools:  # tool outputs inside the completions: run, never scored
        g = torch.Generator().manual_seed(5)
        inputs["tool_mask"] = (
            torch.rand(inputs["completion_mask"].shape, generator=g) > 0.3
        ).long()
    theirs.model.train()
    ours.model.train()
    ours.model.load_state_dict(theirs.model.state_dict())
    theirs.current_gradient_accumulation_steps = ours.current_gradient_accumulation_steps = 1
    want, want_grads = _loss_and_grads(theirs, theirs.model, inputs)
    got, got_grads = _loss_and_grads(ours, ours.model, inputs)
    assert abs(want.item() - got.item()) < 1e-5, (want, got)
    assert want.abs().item() > 1e-3  # a loss that says something
    for a, b in zip(want_grads, got_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    # the metrics TRL logs, from the packed micro-batches
    m_theirs, m_ours = theirs._metrics["train"], ours._metrics["train"]
    for name in ("entropy", "clip_ratio/region_mean") + (("kl",) if "beta" in extra else ()):
        assert abs(m_theirs[name][-1] - m_ours[name][-1]) < 1e-5, name


def test_the_batch_runs_in_several_capped_micro_batches(tmp_path):
    """The cap binds: 10 rollouts of up to 17 tokens under 24 run as several micro-batches,
    each a single packed row of at most 24 tokens, together exactly the batch's tokens."""
    ours = _trainer(PackedGRPOTrainer, _config(GRPOConfig, tmp_path), padless_max_tokens=24)
    inputs = _rollout(10, seed=1)
    seen = []
    forward = ours.model.forward

    def spy(*args, **kwargs):
        seen.append(tuple(kwargs["input_ids"].shape))
        assert "attention_mask" not in kwargs
        return forward(*args, **kwargs)

    ours.model.forward = spy
    ours.current_gradient_accumulation_steps = 1
    ours._compute_loss(ours.model, inputs).backward()
    tokens = int(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum())
    assert len(seen) >= tokens // 24 + 1 > 1
    assert all(rows == 1 and 0 < width <= 24 for rows, width in seen)
    assert sum(width for _, width in seen) == tokens


@pytest.mark.parametrize("share", [False, True])
def test_packed_rloo_loss_and_gradients_equal_trls(tmp_path, share):
    config = _config(RLOOConfig, tmp_path)
    theirs = _trainer(RLOOTrainer, config)
    ours = _trainer(PackedRLOOTrainer, config, padless_max_tokens=20, padless_share_prompts=share)
    ours.model.load_state_dict(theirs.model.state_dict())
    inputs = _rollout(10, seed=2, rloo=True, per_prompt=2 if share else 1)
    theirs.model.train()
    ours.model.train()
    theirs.current_gradient_accumulation_steps = ours.current_gradient_accumulation_steps = 1
    want, want_grads = _loss_and_grads(theirs, theirs.model, inputs)
    got, got_grads = _loss_and_grads(ours, ours.model, inputs)
    assert abs(want.item() - got.item()) < 1e-5, (want, got)
    for a, b in zip(want_grads, got_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize(("cls", "plain"), [(GRPOConfig, GRPOTrainer), (RLOOConfig, RLOOTrainer)])
def test_two_training_steps_end_with_trls_weights(tmp_path, cls, plain):
    """Generation (transformers, sampling) from the same seed, a Python reward, two optimizer
    steps of 2 accumulated micro-steps: the plain trainer and the packed one end equal."""
    packed = PackedGRPOTrainer if plain is GRPOTrainer else PackedRLOOTrainer
    # beta: the reference model's log-probs are scored (without a gradient) packed too
    settings = {"gradient_accumulation_steps": 2, "per_device_train_batch_size": 3, "beta": 0.04}
    theirs = _trainer(plain, _config(cls, tmp_path / "plain", **settings))
    theirs.train()
    ours = _trainer(packed, _config(cls, tmp_path / "packed", **settings), padless_max_tokens=16)
    PLANS.clear()
    ours.train()
    assert ours.state.global_step == theirs.state.global_step == 2
    assert len(PLANS) >= 6  # 2 steps × 2 micro-steps, and each generation batch's scoring
    assert any(plan.num_micro_batches > 1 for plan in PLANS)  # the cap bound
    assert all(int(plan.tokens.max()) <= 16 for plan in PLANS)
    hft.assert_same_weights(theirs.model, ours.model, _model(0))


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"loss_type": "cispo"}, "loss_type='cispo' is not supported"),
        ({"loss_type": "sapo"}, "loss_type='sapo'"),
        ({"top_entropy_quantile": 0.5}, "top_entropy_quantile=0.5"),
        ({"off_policy_mask_threshold": 0.1}, "off_policy_mask_threshold=0.1"),
    ],
)
def test_settings_the_packed_loss_does_not_implement_are_refused(tmp_path, config, match):
    with pytest.raises(ValueError, match=match):
        _trainer(PackedGRPOTrainer, _config(GRPOConfig, tmp_path, **config), padless_max_tokens=32)


@pytest.mark.parametrize("bases", ["packed", "grpo", "rloo"])
def test_padless_trainer_mixin_over_an_online_rl_trainer_is_refused_when_built(bases):
    """PadlessTrainerMixin's plan of the dataset's rows replaced GRPO's sampler: a "group" held
    three prompts, then the first step failed in a method both mixins define."""
    from padless.hf import PadlessTrainerMixin

    parents = {
        "packed": (PadlessTrainerMixin, PackedGRPOMixin, GRPOTrainer),
        "grpo": (PadlessTrainerMixin, GRPOTrainer),
        "rloo": (PadlessTrainerMixin, RLOOTrainer),
    }[bases]
    cls = type("Planned", parents, {})
    with pytest.raises(TypeError, match="puts PadlessTrainerMixin over .*Use PackedGRPOMixin"):
        cls(batch_sampler=None)


def test_bad_cap_and_long_rollouts_are_refused(tmp_path):
    from transformers import Trainer

    class NotRL(PackedGRPOMixin, Trainer):
        pass

    with pytest.raises(TypeError, match="mixes into TRL's GRPOTrainer or RLOOTrainer"):
        NotRL(model=_model(0), padless_max_tokens=64)
    with pytest.raises(TypeError, match="padless_share_prompts must be a bool"):
        _trainer(
            PackedGRPOTrainer,
            _config(GRPOConfig, tmp_path),
            padless_max_tokens=64,
            padless_share_prompts="yes",
        )
    with pytest.raises(TypeError, match="padless_max_tokens must be an int"):
        _trainer(PackedGRPOTrainer, _config(GRPOConfig, tmp_path), padless_max_tokens="64")
    # a cap that no full-length completion fits beside a prompt: refused when built
    with pytest.raises(ValueError, match="more than max_completion_length=8 tokens, got 8"):
        _trainer(PackedGRPOTrainer, _config(GRPOConfig, tmp_path), padless_max_tokens=8)
    ours = _trainer(PackedGRPOTrainer, _config(GRPOConfig, tmp_path), padless_max_tokens=12)
    ours.current_gradient_accumulation_steps = 1
    with pytest.raises(ValueError, match="rollout 0 holds .* over padless_max_tokens=12.*TRL"):
        ours._compute_loss(ours.model, _rollout(4, seed=0))
    ours._padless_max_tokens = 64
    holes = _rollout(4, seed=0)
    holes["completion_mask"][1] = 0
    holes["completion_mask"][1, 1:3] = 1  # a gap between the prompt and the completion
    with pytest.raises(ValueError, match="rollout 1: its prompt_mask and completion_mask"):
        ours._compute_loss(ours.model, holes)
    empty = _rollout(4, seed=0)
    empty["prompt_mask"][2] = 0
    with pytest.raises(ValueError, match="rollout 2 has an empty prompt"):
        ours._compute_loss(ours.model, empty)


def test_no_gradient_scoring_packed_equals_trls(tmp_path):
    """The old policy's and the reference model's log-probs (TRL scores the generation batch
    without a gradient) come from packed micro-batches too, equal to TRL's padded ones, zero
    where TRL's are (padding)."""
    config = _config(GRPOConfig, tmp_path)
    theirs = _trainer(GRPOTrainer, config)
    ours = _trainer(PackedGRPOTrainer, config, padless_max_tokens=20)
    inputs = _rollout(9, seed=3)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    keep = inputs["completion_ids"].shape[1]
    with torch.no_grad():
        want = theirs._get_per_token_logps_and_entropies(theirs.model, ids, mask, keep, 4, True)
        got = ours._get_per_token_logps_and_entropies(ours.model, ids, mask, keep, 4, True)
    assert PLANS and PLANS[-1].num_micro_batches > 1
    for a, b in zip(want[:2], got[:2], strict=True):
        assert a.shape == b.shape
        assert torch.allclose(a, b, atol=1e-5)
    assert got[0][inputs["completion_mask"].bool()].lt(0).all()


def test_shared_prompts_run_each_prompt_once_per_micro_batch(tmp_path):
    """padless_share_prompts: the rollouts of a prompt run after one copy of it (its last
    token repeated per rollout), under the cap; fewer tokens than one prompt per rollout."""
    ours = _trainer(
        PackedGRPOTrainer,
        _config(GRPOConfig, tmp_path),
        padless_max_tokens=40,
        padless_share_prompts=True,
    )
    inputs = _rollout(12, seed=4, per_prompt=4)
    widths = []
    forward = ours.model.forward

    def spy(*args, **kwargs):
        widths.append(kwargs["input_ids"].shape[1])
        assert kwargs["attention_mask"].shape == (1, 1, widths[-1], widths[-1])
        return forward(*args, **kwargs)

    ours.model.forward = spy
    ours.current_gradient_accumulation_steps = 1
    ours._compute_loss(ours.model, inputs)
    p = inputs["prompt_mask"].sum(dim=1)
    c = inputs["completion_mask"].sum(dim=1)
    assert all(w <= 40 for w in widths)
    # each prompt at least once (but its last token), every rollout's block: last token + answer
    distinct = {tuple(row.tolist()) for row in inputs["prompt_ids"]}
    once = sum(int(inputs["prompt_mask"][0].numel() - row.count(0)) - 1 for row in distinct)
    assert len(distinct) == 3
    assert once + int((c + 1).sum()) <= sum(widths) < int((p + c).sum())


@pytest.fixture(scope="module")
def scorers(tmp_path_factory):
    """TRL's trainer and the packed one (prompts shared or not), once for the property."""
    out = tmp_path_factory.mktemp("scorers")
    config = _config(GRPOConfig, out)
    theirs = _trainer(GRPOTrainer, config)
    packed = {
        share: _trainer(
            PackedGRPOTrainer, config, padless_max_tokens=20, padless_share_prompts=share
        )
        for share in (False, True)
    }
    return theirs, packed


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(1, 9),
    per_prompt=st.sampled_from([1, 2, 3]),
    seed=st.integers(0, 2**16),
    share=st.booleans(),
)
def test_packed_scoring_equals_trls_on_any_rollout(scorers, n, per_prompt, seed, share):
    """Whatever the lengths (empty completions included), the grouping and the cap's cuts,
    every completion token's log-prob from the packed micro-batches equals TRL's padded one."""
    theirs, packed = scorers
    ours = packed[share]
    inputs = _rollout(n, seed=seed, per_prompt=per_prompt)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    keep = inputs["completion_ids"].shape[1]
    with torch.no_grad():
        want, _, _ = theirs._get_per_token_logps_and_entropies(theirs.model, ids, mask, keep)
        got, _, _ = ours._get_per_token_logps_and_entropies(ours.model, ids, mask, keep)
    assert torch.allclose(want, got, atol=1e-5)
    assert int(PLANS[-1].tokens.max()) <= 20


def test_two_processes_agree_on_micro_batches_and_train_to_trls_weights(tmp_path):
    """DDP over two processes (torchrun, gloo): each plans its own batch, the processes run
    the same number of micro-batches (the most either needs; one process's count alone would
    differ), and the weights equal TRL's GRPOTrainer's on the same two processes, on both."""
    from _procs import torchrun

    torchrun("_grpo_ddp.py", tmp_path, timeout=240)
    weights = [torch.load(tmp_path / f"weights{r}.pt") for r in (0, 1)]
    counts = [json.loads((tmp_path / f"counts{r}.json").read_text()) for r in (0, 1)]
    assert len(counts[0]) == len(counts[1]) > 0
    for (alone0, agreed0), (alone1, agreed1) in zip(*counts, strict=True):
        assert agreed0 == agreed1 == max(alone0, alone1)
    assert any(a0 != a1 for (a0, _), (a1, _) in zip(*counts, strict=True))  # it mattered
    for rank in (0, 1):
        for name in ("packed", "shared"):
            for a, b in zip(weights[rank]["trl"], weights[rank][name], strict=True):
                assert torch.allclose(a, b, atol=1e-5), (rank, name)
    for a, b in zip(weights[0]["packed"], weights[1]["packed"], strict=True):
        assert torch.equal(a, b)  # DDP kept the processes' weights equal
