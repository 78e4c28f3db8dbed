"""Post-training pairs and groups: DPO pairs and GRPO groups packed whole (plan_groups).

1. DPO pairs in rows of 16,384 tokens on preference-like lengths (prompt ~ lognormal, chosen and
   rejected correlated through a shared per-pair scale): fill (real tokens ÷ rows × capacity),
   pairs split across rows, planning time; each pair as two whole sequences (prompt copied), and
   with the prompt shared (prompt once, then chosen and rejected).
2. GRPO groups (G = 8, 16), one prompt and G completions: executed tokens per group against
   P + G·R (the collate's own count on the first batches, too), logical ÷ executed, fill.
3. Through TRL on CPU with a tiny Llama (fp32): tokens/s of TRL's padded DPO (its
   DataCollatorForPreference and DPOTrainer loss, forward + backward) against padless's packed
   shared-prefix DPO (plan_groups, collate_groups, completion_logprobs, dpo_loss) on the same
   pairs, run side by side in this process; tokens counted as TRL's (prompt + completion per
   sequence) in both.
4. TRL's DPOTrainer.train() against the same trainer with padless.hf.PackedDPOMixin (each
   batch's pairs packed next fit into rows, prompts once), one epoch on the same pairs and seed:
   tokens/s of the whole loop.

Run: .venv/bin/python benchmarks/bench_posttraining_pairs.py [--pairs 20000] [--trl-pairs 96]
(the trainer comparison trains on 4 × --trl-pairs pairs, rows of --trl-capacity 512)
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from padless import plan_groups
from padless.planners.packing import group_sizes


def preference_lengths(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt, chosen, rejected) token counts: prompt lognormal (median ~245), the two answers
    lognormal around one per-pair scale (median ~330), each within 0.2 log-σ of it."""
    rng = np.random.default_rng(seed)
    prompt = np.clip(rng.lognormal(5.5, 0.9, n), 8, 6000).astype(np.int64)
    base = rng.lognormal(5.8, 0.7, n)
    chosen = np.clip(base * rng.lognormal(0, 0.2, n), 4, 4000).astype(np.int64)
    rejected = np.clip(base * rng.lognormal(0, 0.2, n), 4, 4000).astype(np.int64)
    return prompt, chosen, rejected


def split_groups(plan, groups: np.ndarray) -> int:
    row = np.empty(groups.size, np.int64)
    row[plan.indices] = np.repeat(np.arange(plan.num_rows), np.diff(plan.rows.offsets))
    first = {}
    split = set()
    for i, g in enumerate(groups.tolist()):
        if first.setdefault(g, row[i]) != row[i]:
            split.add(g)
    return len(split)


def dpo(n: int, capacity: int) -> None:
    prompt, chosen, rejected = preference_lengths(n)
    groups = np.repeat(np.arange(n), 2)
    whole = np.stack([prompt + chosen, prompt + rejected], 1).reshape(-1)
    print(f"DPO: {n} pairs, rows of {capacity} tokens")
    for name, lengths, prefix in (
        ("two sequences per pair", whole, None),
        ("prompt shared", np.stack([chosen, rejected], 1).reshape(-1), np.repeat(prompt, 2)),
    ):
        t = time.perf_counter()
        plan = plan_groups(lengths, groups, capacity=capacity, prefix=prefix)
        ms = (time.perf_counter() - t) * 1e3
        info = plan.info
        print(
            f"  {name:24s} fill {info['efficiency']:.4f}  rows {info['rows']:6d}  split pairs "
            f"{split_groups(plan, groups)}  executed {info['executed_tokens']:>10,d}  logical "
            f"{info['logical_tokens']:>10,d}  plan {ms:.1f} ms"
        )


def grpo(num_prompts: int, capacity: int) -> None:
    rng = np.random.default_rng(1)
    for g in (8, 16):
        prompt = np.clip(rng.lognormal(5.5, 0.8, num_prompts), 16, 2048).astype(np.int64)
        comp = np.clip(rng.lognormal(6.0, 0.8, (num_prompts, g)), 8, 1024).astype(np.int64)
        lengths = comp.reshape(-1)
        groups = np.repeat(np.arange(num_prompts), g)
        prefix = np.repeat(prompt, g)
        t = time.perf_counter()
        plan = plan_groups(lengths, groups, capacity=capacity, prefix=prefix, rows_per_batch=4)
        ms = (time.perf_counter() - t) * 1e3
        ideal = prompt + comp.sum(1)  # P + G·R per group
        _, _, _, sizes = group_sizes(lengths, groups, prefix)
        worst = float(np.max(np.abs(sizes - ideal) / ideal))
        collated = _collate_check(plan, lengths, groups, prefix, capacity, batches=3)
        info = plan.info
        print(
            f"GRPO G={g:2d}: {num_prompts} prompts, rows of {capacity}: executed / (P+G·R) per "
            f"group worst {1 + worst:.4f} (collate on {collated[0]} batches: {collated[1]:.4f}); "
            f"logical/executed {info['logical_tokens'] / info['executed_tokens']:.3f}; fill "
            f"{info['efficiency']:.4f}; split groups {split_groups(plan, groups)}; plan {ms:.1f} ms"
        )


def _collate_check(plan, lengths, groups, prefix, capacity, batches):
    """The collate's executed tokens over the first batches ÷ their groups' P + ΣR."""
    from padless.torch import collate_groups

    collate = collate_groups(capacity, attention_mask=None)
    got = want = 0
    for b in range(min(batches, len(plan))):
        idx = plan[b]
        samples = [
            {
                "group": int(groups[i]),
                "prompt_ids": [3] * int(prefix[i]),
                "completion_ids": [5] * int(lengths[i]),
            }
            for i in idx
        ]
        got += collate(samples)["executed_tokens"]
        seen = {}
        for i in idx.tolist():
            seen.setdefault(int(groups[i]), int(prefix[i]))
        want += sum(seen.values()) + int(lengths[idx].sum())
    return min(batches, len(plan)), got / want


def _tiny_llama() -> tuple:
    """(a maker of the tiny Llama both TRL runs train, by seed; its word-level tokenizer; the
    vocabulary size), on one torch thread."""
    import torch
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.set_num_threads(1)
    vocab_size = 512

    def model(seed: int) -> LlamaForCausalLM:
        torch.manual_seed(seed)
        config = LlamaConfig(
            vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
            use_cache=False, attn_implementation="sdpa",
        )  # fmt: skip
        return LlamaForCausalLM(config)

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(
            models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0")
        ),
        pad_token="t0",
        eos_token="t1",
    )
    return model, tok, vocab_size


def trl_ratio(num_pairs: int, pairs_per_step: int, repeat: int) -> None:
    import torch
    from datasets import Dataset
    from transformers.utils import logging as hf_logging
    from trl import DPOConfig, DPOTrainer
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    from padless.torch import PreferencePairs, collate_groups, completion_logprobs, dpo_loss

    model, tok, vocab_size = _tiny_llama()
    hf_logging.set_verbosity_error()
    trainer = DPOTrainer(
        model=model(0),
        ref_model=model(1),
        args=DPOConfig("/tmp/bench_dpo", report_to=[], use_cpu=True, bf16=False, beta=0.1),
        train_dataset=Dataset.from_list([{"prompt": "t3", "chosen": " t4", "rejected": " t5"}] * 2),
        processing_class=tok,
    )
    # the preference lengths scaled down 8× (prompt median ~30, answers ~40), token ids random
    p, c, r = (np.maximum(x // 8, 2) for x in preference_lengths(num_pairs, seed=2))
    rng = np.random.default_rng(0)
    rows = [
        {
            k: rng.integers(2, vocab_size, int(n)).tolist()
            for k, n in zip(("prompt_ids", "chosen_ids", "rejected_ids"), t, strict=True)
        }
        for t in zip(p, c, r, strict=True)
    ]
    tokens = int((2 * p + c + r).sum())  # TRL's count: prompt + completion per sequence
    net, ref = trainer.model, trainer.ref_model
    collator = DataCollatorForPreference(pad_token_id=0)

    def padded() -> None:
        for s in range(0, num_pairs, pairs_per_step):
            inputs = collator(rows[s : s + pairs_per_step])
            trainer._compute_loss(net, inputs, False).backward()

    pairs = PreferencePairs(rows)
    longest = int((p + c + r).max())
    capacity = max(1024, longest)
    # rows of the same token budget as a padded step holds on average
    plan = plan_groups(
        pairs.lengths, pairs.groups, capacity=capacity, prefix=pairs.prefix, rows_per_batch=1
    )
    collate = collate_groups(capacity)
    batches = [collate([pairs[i] for i in plan[b]]) for b in range(len(plan))]

    def packed() -> None:
        for batch in batches:
            args = {k: batch[k] for k in ("input_ids", "position_ids", "attention_mask")}
            logps = completion_logprobs(net(**args).logits, batch)
            with torch.no_grad():
                ref_logps = completion_logprobs(ref(**args).logits, batch)
            dpo_loss(batch, logps, ref_logps, beta=0.1).backward()

    runs = (("padded (TRL)", padded), ("packed (padless)", packed))
    for _, fn in runs:
        fn()  # warm-up
    times = dict.fromkeys((name for name, _ in runs), float("inf"))
    for _ in range(repeat):  # interleaved: a change of the machine's load hits both
        for name, fn in runs:
            times[name] = min(times[name], _timed(fn))
    a, b = times["padded (TRL)"], times["packed (padless)"]
    print(
        f"TRL DPO, {num_pairs} pairs, tiny Llama (h=64, 2 layers) fp32 CPU 1 thread: padded "
        f"{tokens / a:,.0f} tokens/s ({pairs_per_step} pairs per step), packed {tokens / b:,.0f} "
        f"tokens/s ({len(batches)} rows of {capacity}, collate outside the timing; fill "
        f"{plan.info['efficiency']:.3f}); packed / padded = {a / b:.2f}x"
    )


def trl_train_ratio(num_pairs: int, pairs_per_step: int, capacity: int, repeat: int) -> None:
    """TRL's DPOTrainer.train() against PackedDPOMixin's on the same text pairs, seed and
    steps (TRL's own sampler and optimizer; the same weights come out, tests/test_trl_dpo.py)."""
    import tempfile

    from datasets import Dataset
    from transformers.utils import logging as hf_logging
    from trl import DPOConfig, DPOTrainer

    from padless.hf import PackedDPOMixin

    class PackedDPOTrainer(PackedDPOMixin, DPOTrainer):
        pass

    model, tok, vocab_size = _tiny_llama()
    p, c, r = (np.maximum(x // 8, 2) for x in preference_lengths(num_pairs, seed=2))
    rng = np.random.default_rng(0)

    def words(n: int) -> str:
        return " ".join(f"t{t}" for t in rng.integers(2, vocab_size, int(n)))

    rows = [
        {"prompt": words(a), "chosen": " " + words(b), "rejected": " " + words(d)}
        for a, b, d in zip(p, c, r, strict=True)
    ]
    tokens = int((2 * p + c + r).sum()) + 2 * num_pairs  # TRL appends EOS to each completion
    hf_logging.set_verbosity_error()
    times = {"padded": float("inf"), "packed": float("inf")}
    runs = (("padded", DPOTrainer, {}), ("packed", PackedDPOTrainer, {"capacity": capacity}))
    for name, cls, extra in runs * repeat:  # interleaved, best of repeat
        with tempfile.TemporaryDirectory() as out:
            config = DPOConfig(
                out, report_to=[], use_cpu=True, bf16=False, beta=0.1, num_train_epochs=1,
                per_device_train_batch_size=pairs_per_step, save_strategy="no",
                logging_strategy="no", disable_tqdm=True, max_length=None, seed=0,
            )  # fmt: skip
            trainer = cls(
                model=model(0), ref_model=model(1), args=config,
                train_dataset=Dataset.from_list(rows), processing_class=tok, **extra,
            )  # fmt: skip
            t = time.perf_counter()
            trainer.train()
            times[name] = min(times[name], time.perf_counter() - t)
    a, b = times["padded"], times["packed"]
    print(
        f"TRL DPOTrainer.train(), {num_pairs} pairs, {pairs_per_step} a step, 1 epoch: padded "
        f"{tokens / a:,.0f} tokens/s, PackedDPOMixin (rows of {capacity}) {tokens / b:,.0f} "
        f"tokens/s; packed / padded = {a / b:.2f}x (everything in the step: loader, collate, "
        "forward, backward, optimizer)"
    )


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=20000)
    ap.add_argument("--prompts", type=int, default=4000)
    ap.add_argument("--capacity", type=int, default=16384)
    ap.add_argument("--trl-pairs", type=int, default=96)
    ap.add_argument("--trl-step", type=int, default=8)
    ap.add_argument("--trl-capacity", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"load: {os.getloadavg()} (shared machine)")
    dpo(args.pairs, args.capacity)
    grpo(args.prompts, args.capacity)
    if args.trl_pairs:
        trl_ratio(args.trl_pairs, args.trl_step, args.repeat)
        trl_train_ratio(4 * args.trl_pairs, args.trl_step, args.trl_capacity, args.repeat)


if __name__ == "__main__":
    main()
