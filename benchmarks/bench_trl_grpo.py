"""GRPO through TRL on CPU: TRL's padded loss step against padless.hf.PackedGRPOMixin's.

The same rollout batches (prompts left-padded, completions right-padded, as TRL's
GRPOTrainer hands them to its loss) go through TRL's own ``GRPOTrainer._compute_loss`` and
through the same trainer with ``PackedGRPOMixin`` (each batch planned by ``plan_step`` under
``--max-tokens``, one packed row per micro-batch), forward + backward, side by side in this
process: interleaved (padded, packed, padded, ...), best of ``--repeat`` after a warm-up.
Tokens are the rollouts' own (prompt + completion, no padding), the same count for both.

Lengths are long-tailed, as rollouts are: prompts lognormal (median ~40 tokens), completions
lognormal (median ~60) with one in ten running to the cap (``--max-completion``, as a
truncated reasoning trace does): the padded batch is as wide as its longest completion.

Run: .venv/bin/python benchmarks/bench_trl_grpo.py [--batches 8] [--batch-size 16]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def rollout_lengths(
    n: int, max_completion: int, seed: int, per_prompt: int
) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, completion) token counts: lognormal prompts (``per_prompt`` rollouts each),
    lognormal completions with one in ten at the cap (a truncated trace)."""
    rng = np.random.default_rng(seed)
    prompts = np.clip(rng.lognormal(np.log(40), 0.5, n // per_prompt), 4, 256).astype(np.int64)
    prompt = np.repeat(prompts, per_prompt)
    completion = np.clip(rng.lognormal(np.log(60), 0.9, n), 1, max_completion).astype(np.int64)
    completion[rng.random(n) < 0.1] = max_completion
    return prompt, completion


def rollout(
    prompt: np.ndarray, completion: np.ndarray, vocab: int, seed: int, per_prompt: int
) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)
    n = prompt.size
    p_len, c_len = torch.from_numpy(prompt), torch.from_numpy(completion)
    P, C = int(p_len.max()), int(c_len.max())
    prompt_mask = (torch.arange(P)[None, :] >= P - p_len[:, None]).long()
    completion_mask = (torch.arange(C)[None, :] < c_len[:, None]).long()
    ids = torch.randint(2, vocab, (n // per_prompt, P), generator=g).repeat_interleave(
        per_prompt, dim=0
    )
    return {
        "prompt_ids": ids * prompt_mask,
        "prompt_mask": prompt_mask,
        "completion_ids": torch.randint(2, vocab, (n, C), generator=g) * completion_mask,
        "completion_mask": completion_mask,
        "advantages": torch.randn(n, generator=g),
        "num_items_in_batch": completion_mask.sum(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-completion", type=int, default=768)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--per-prompt", type=int, default=8, help="rollouts of one prompt (G)")
    args = ap.parse_args()

    import torch
    from datasets import Dataset
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer

    from padless.hf import PackedGRPOMixin

    class PackedGRPOTrainer(PackedGRPOMixin, GRPOTrainer):
        pass

    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    vocab = 512
    tmp = Path(tempfile.mkdtemp(prefix="bench_grpo_"))
    torch.manual_seed(0)
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
            use_cache=False, attn_implementation="sdpa", eos_token_id=1, pad_token_id=0,
        )
    ).save_pretrained(tmp / "tiny")  # fmt: skip
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, "t0")),
        pad_token="t0",
        eos_token="t1",
    )
    config = GRPOConfig(
        str(tmp / "out"), report_to=[], use_cpu=True, bf16=False, num_generations=2,
        per_device_train_batch_size=args.batch_size, max_completion_length=args.max_completion,
        gradient_accumulation_steps=1,
    )  # fmt: skip

    def trainer(cls: type, **extra: int) -> GRPOTrainer:
        return cls(
            model=str(tmp / "tiny"),
            reward_funcs=lambda completions, **kw: [0.0] * len(completions),
            args=config,
            train_dataset=Dataset.from_list([{"prompt": "t3"}] * 2),
            processing_class=tok,
            **extra,
        )

    theirs = trainer(GRPOTrainer)
    ours = trainer(PackedGRPOTrainer, padless_max_tokens=args.max_tokens)
    shared = trainer(
        PackedGRPOTrainer, padless_max_tokens=args.max_tokens, padless_share_prompts=True
    )
    ours.model.load_state_dict(theirs.model.state_dict())
    shared.model.load_state_dict(theirs.model.state_dict())
    for t in (theirs, ours, shared):
        t.model.train()
        t.current_gradient_accumulation_steps = 1
    batches, tokens, padded_tokens, once = [], 0, 0, 0
    g = args.per_prompt
    for b in range(args.batches):
        p, c = rollout_lengths(args.batch_size, args.max_completion, seed=b, per_prompt=g)
        batches.append(rollout(p, c, vocab, seed=b, per_prompt=g))
        tokens += int((p + c).sum())
        padded_tokens += args.batch_size * int(p.max() + c.max())
        once += int(p[::g].sum() + c.sum())

    def run(t: GRPOTrainer) -> float:
        start = time.perf_counter()
        for inputs in batches:
            t._compute_loss(t.model, inputs).backward()
        t.model.zero_grad()
        return time.perf_counter() - start

    runs = {"padded (TRL)": theirs, "packed (padless)": ours, "prompts shared": shared}
    for t in runs.values():
        run(t)  # warm-up
    times = dict.fromkeys(runs, float("inf"))
    for _ in range(args.repeat):  # interleaved: a change of the machine's load hits both
        for name, t in runs.items():
            times[name] = min(times[name], run(t))
    a, b, c = times["padded (TRL)"], times["packed (padless)"], times["prompts shared"]
    print(
        f"GRPO loss step (TRL GRPOTrainer._compute_loss, dapo, forward + backward), "
        f"{args.batches} batches of {args.batch_size} rollouts ({g} per prompt), {tokens:,} "
        f"tokens ({padded_tokens:,} padded: {tokens / padded_tokens:.3f} real; {once:,} with "
        f"each prompt once), tiny Llama (h=64, 2 layers) fp32 CPU 1 thread:"
    )
    print(
        f"  padded (TRL) {tokens / a:,.0f} tokens/s; packed (padless, max_tokens="
        f"{args.max_tokens}) {tokens / b:,.0f} tokens/s; prompts shared {tokens / c:,.0f} "
        f"tokens/s"
    )
    print(f"  packed / padded = {a / b:.2f}x; prompts shared / padded = {a / c:.2f}x")


if __name__ == "__main__":
    main()
