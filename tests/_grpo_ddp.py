"""Two processes (torchrun, gloo, CPU) train GRPO with TRL's GRPOTrainer, then with
PackedGRPOMixin (prompts shared or not), from the same seed; each process writes its weights
and the micro-batch counts it planned alone and agreed on. Run by tests/test_trl_grpo.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging
from trl import GRPOConfig, GRPOTrainer

from padless import plan_step
from padless.hf import PackedGRPOMixin

COUNTS: list[tuple[int, int]] = []  # (micro-batches planned alone, agreed over the processes)


class PackedGRPOTrainer(PackedGRPOMixin, GRPOTrainer):
    def _padless_plan(self, lengths, loss_tokens, groups=None):
        alone = plan_step(
            lengths, world_size=1, max_tokens=20, loss_tokens=loss_tokens, groups=groups
        )
        plan = super()._padless_plan(lengths, loss_tokens, groups)
        COUNTS.append((alone.num_micro_batches, plan.num_micro_batches))
        return plan


def reward_variety(completions, **kwargs):
    return [float(len(set(c.split()))) for c in completions]


def train(out: Path, name: str, cls: type, **extra) -> list[torch.Tensor]:
    vocab = {f"t{i}": i for i in range(48)}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")),
        pad_token="t0",
        eos_token="t1",
    )
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=48, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=2, eos_token_id=1, pad_token_id=0,
        )
    )  # fmt: skip
    prompts = ["t3 t4", "t5 t6 t7 t8 t9 t10", "t9", "t10 t11 t12", "t13 t14 t15 t16", "t18"]
    config = GRPOConfig(
        str(out / name), max_steps=2, per_device_train_batch_size=3, num_generations=3,
        max_completion_length=8, use_cpu=True, bf16=False, report_to=[], save_strategy="no",
        logging_strategy="no", disable_tqdm=True, gradient_accumulation_steps=2,
        learning_rate=1e-2, seed=0,
    )  # fmt: skip
    trainer = cls(
        model=model,
        reward_funcs=reward_variety,
        args=config,
        train_dataset=Dataset.from_list([{"prompt": p} for p in prompts] * 4),
        processing_class=tok,
        **extra,
    )
    trainer.train()
    return [p.detach().clone() for p in trainer.model.parameters()]


def main() -> None:
    out = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    hf_logging.set_verbosity_error()
    runs = {
        "trl": train(out, "trl", GRPOTrainer),
        "packed": train(out, "packed", PackedGRPOTrainer, padless_max_tokens=20),
        "shared": train(
            out, "shared", PackedGRPOTrainer, padless_max_tokens=20, padless_share_prompts=True
        ),
    }
    torch.save(runs, out / f"weights{rank}.pt")
    (out / f"counts{rank}.json").write_text(json.dumps(COUNTS))


if __name__ == "__main__":
    main()
