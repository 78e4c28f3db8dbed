"""Packed groups (DPO pairs, GRPO groups) and shared prompts: the collate, log-probs, DPO loss.

A batch of :func:`padless.planners.packing.plan_groups` lists each group's items one after the
other; :func:`collate_groups` finds the groups again (runs of equal group ids), cuts them into
rows next fit (best fit only opens a row for a group that fits in no open row, so next fit gives
the planned rows back) and lays out each group as its prompt once, then its completions. The
4-D mask (:func:`block_causal_mask` with ``prompt_of``) lets each completion see its prompt and
itself only; positions continue the prompt's in every completion; the targets (which logits
predict which token) are listed explicitly, since the first token of every completion is
predicted by the prompt's last position, which a flat ``labels`` row cannot say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..core._check import INT64_MAX, check_choice, check_int, check_int64, check_real, positive
from ..core._keywords import checks_keywords
from ._collate import _as_ids
from ._flex import flex_block_mask
from ._packed_check import _logits, block_causal_mask

__all__ = [
    "GroupCollate",
    "PreferencePairs",
    "check_prefix_packed",
    "collate_groups",
    "completion_logprobs",
    "dpo_loss",
]


class GroupCollate:
    """Collate function built by :func:`collate_groups` (a picklable callable)."""

    def __init__(
        self,
        capacity: int,
        *,
        rows: int | None = None,
        prompt_key: str | None = "prompt_ids",
        completion_key: str = "completion_ids",
        group_key: str = "group",
        pad_id: int = 0,
        position_start: int = 0,
        attention_mask: str | None = "block",
    ) -> None:
        self.capacity = positive("capacity", capacity)
        self.rows = None if rows is None else positive("rows", rows)
        for name, key in (("completion_key", completion_key), ("group_key", group_key)):
            if not isinstance(key, str):
                raise TypeError(f"{name} must be a str, got {type(key).__name__}")
        if prompt_key is not None and not isinstance(prompt_key, str):
            raise TypeError(f"prompt_key must be a str or None, got {type(prompt_key).__name__}")
        self.prompt_key, self.completion_key, self.group_key = prompt_key, completion_key, group_key
        self.pad_id = check_int64("pad_id", pad_id)
        self.position_start = check_int("position_start", position_start, minimum=0) or 0
        if self.position_start > INT64_MAX - self.capacity + 1:
            raise ValueError(
                "position_start + capacity - 1 (the last position id) must fit in int64, the "
                f"position ids' dtype: with capacity={self.capacity}, position_start must be at "
                f"most {INT64_MAX - self.capacity + 1}, got {self.position_start}"
            )
        if attention_mask is not None:
            check_choice("attention_mask", attention_mask, ("block", "flex"))
        self.attention_mask = attention_mask

    def _groups(self, samples: Sequence[Any]) -> list[tuple[int, torch.Tensor | None, list[int]]]:
        """(group id, prompt or None, sample positions) of each run of equal group ids."""
        runs: list[tuple[int, torch.Tensor | None, list[int]]] = []
        seen: set[int] = set()
        for i, s in enumerate(samples):
            if not isinstance(s, Mapping):
                raise TypeError(
                    f"sample [{i}] must be a mapping with keys {self.group_key!r}, "
                    f"{self.completion_key!r}" + (f", {self.prompt_key!r}" if self.prompt_key else "")
                    + f", got {type(s).__name__}"
                )  # fmt: skip
            missing = [
                k
                for k in (self.group_key, self.completion_key, self.prompt_key)
                if k and k not in s
            ]
            if missing:
                raise ValueError(
                    f"sample [{i}] has no field {missing[0]!r}; it has {sorted(map(str, s))!r:.80}"
                )
            gid = check_int64(f"sample [{i}][{self.group_key!r}]", s[self.group_key])
            prompt = None
            if self.prompt_key is not None:
                prompt = _as_ids(s[self.prompt_key], f"the prompt of sample [{i}]")
                if prompt.numel() == 0:
                    raise ValueError(
                        f"the prompt of sample [{i}] is empty: a completion's first token is "
                        "predicted by its prompt's last one (pass prompt_key=None for whole "
                        "sequences)"
                    )
            if runs and runs[-1][0] == gid:
                first = runs[-1][1]
                if prompt is not None and first is not None and not torch.equal(first, prompt):
                    raise ValueError(
                        f"sample [{i}] of group {gid} has another prompt than the group's first "
                        f"sample [{runs[-1][2][0]}]: a group shares one prompt"
                    )
                runs[-1][2].append(i)
                continue
            if gid in seen:
                raise ValueError(
                    f"group {gid} comes in two runs in this batch (again at sample [{i}]): a "
                    "group's items must be consecutive, as plan_groups yields them"
                )
            seen.add(gid)
            runs.append((gid, prompt, [i]))
        return runs

    def __call__(self, samples: Sequence[Any]) -> dict[str, Any]:
        comps = [
            _as_ids(s[self.completion_key], f"the completion of sample [{i}]")
            if isinstance(s, Mapping) and self.completion_key in s
            else None
            for i, s in enumerate(samples)
        ]
        runs = self._groups(samples)
        completions = [c for c in comps if c is not None]
        shared = self.prompt_key is not None
        need = 1 if shared else 2  # a whole sequence predicts from its second token on
        for i, c in enumerate(completions):
            if c.numel() < need:
                raise ValueError(
                    f"the completion of sample [{i}] has {c.numel()} tokens, at least {need} "
                    "needed (one token bearing loss)"
                )
        cap = self.capacity
        sizes = []
        for gid, prompt, members in runs:
            size = (0 if prompt is None else prompt.numel()) + sum(
                completions[m].numel() for m in members
            )
            if size > cap:
                raise ValueError(
                    f"group {gid} has {size} tokens ({len(members)} items"
                    + (", its prompt once" if shared else "")
                    + f"), more than capacity={cap}; were capacity and the lengths the plan's?"
                )
            sizes.append(size)
        row_of: list[int] = []
        row, used = -1, cap
        for size in sizes:  # next fit over groups: the planned rows
            if used + size > cap:
                row, used = row + 1, 0
            row_of.append(row)
            used += size
        needed = row_of[-1] + 1 if row_of else 0
        if self.rows is not None and needed > self.rows:
            raise ValueError(
                f"the batch needs {needed} rows of capacity={cap}, more than rows={self.rows}"
            )
        num_rows = needed if self.rows is None else self.rows
        return self._assemble(runs, completions, row_of, num_rows)

    def _assemble(
        self,
        runs: list[tuple[int, torch.Tensor | None, list[int]]],
        completions: list[torch.Tensor],
        row_of: list[int],
        num_rows: int,
    ) -> dict[str, Any]:
        cap = self.capacity
        total = num_rows * cap
        ids = torch.full((total,), self.pad_id, dtype=torch.long)
        pos = np.zeros(total, dtype=np.int64)
        seg = np.full(total, -1, dtype=np.int64)
        prompt_of = np.full(total, -1, dtype=np.int64)
        t_index: list[np.ndarray] = []
        t_ids: list[np.ndarray] = []
        t_comp: list[np.ndarray] = []
        comp_group = np.zeros(len(completions), dtype=np.int64)
        comp_loss = np.zeros(len(completions), dtype=np.int64)
        cursor = [r * cap for r in range(num_rows)]
        nseg = 0
        logical = 0
        for g, ((_, prompt, members), r) in enumerate(zip(runs, row_of, strict=True)):
            at = cursor[r]
            p_seg, p_last, plen = -1, -1, 0
            if prompt is not None:
                plen = prompt.numel()
                ids[at : at + plen] = prompt
                pos[at : at + plen] = np.arange(plen)
                seg[at : at + plen] = p_seg = nseg
                nseg += 1
                p_last = at + plen - 1
                at += plen
            for m in members:
                c = completions[m]
                n = c.numel()
                ids[at : at + n] = c
                pos[at : at + n] = plen + np.arange(n)
                seg[at : at + n] = nseg
                prompt_of[at : at + n] = p_seg
                nseg += 1
                if prompt is not None:  # the prompt's last token predicts the first
                    where = np.concatenate([[p_last], at + np.arange(n - 1)])
                    t_ids.append(c.numpy())
                else:
                    where = at + np.arange(n - 1)
                    t_ids.append(c.numpy()[1:])
                t_index.append(where)
                t_comp.append(np.full(where.size, m, dtype=np.int64))
                comp_group[m], comp_loss[m] = g, where.size
                logical += plen + n
                at += n
            cursor[r] = at
        for r in range(num_rows):  # each row's tail: a segment of its own
            a, b = cursor[r], (r + 1) * cap
            if b > a:
                seg[a:b] = nseg
                pos[a:b] = np.arange(b - a)
                nseg += 1
        none = np.zeros(0, np.int64)
        index = np.concatenate(t_index).astype(np.int64) if t_index else none
        targets = np.concatenate(t_ids) if t_ids else none
        comp_of = np.concatenate(t_comp) if t_comp else none
        shape = (num_rows, cap)
        group_loss = np.bincount(comp_group, weights=comp_loss, minlength=len(runs))
        seq_idx = torch.from_numpy(seg.astype(np.int32)).view(shape)
        out: dict[str, Any] = {
            "input_ids": ids.view(shape),
            "position_ids": torch.from_numpy(pos + self.position_start).view(shape),
            "seq_idx": seq_idx,
            "prompt_idx": torch.from_numpy(prompt_of.astype(np.int32)).view(shape),
            "target_index": torch.from_numpy(index),
            "target_ids": torch.from_numpy(targets.astype(np.int64)),
            "target_completion": torch.from_numpy(comp_of),
            "completion_group": torch.from_numpy(comp_group),
            "completion_loss_tokens": torch.from_numpy(comp_loss),
            "group_ids": torch.tensor([gid for gid, _, _ in runs], dtype=torch.long),
            "group_loss_tokens": torch.from_numpy(group_loss.astype(np.int64)),
            "loss_tokens": int(comp_loss.sum()),
            "logical_tokens": int(logical),
            "executed_tokens": int(sum(cursor[r] - r * cap for r in range(num_rows))),
        }
        if self.attention_mask == "block":
            out["attention_mask"] = block_causal_mask(
                seq_idx, prompt_of=out["prompt_idx"].to(torch.long)
            )
        elif self.attention_mask == "flex":
            out["attention_mask"] = flex_block_mask(out)
        return out

    def __repr__(self) -> str:
        return (
            f"collate_groups(capacity={self.capacity}, rows={self.rows}, "
            f"prompt_key={self.prompt_key!r}, completion_key={self.completion_key!r}, "
            f"group_key={self.group_key!r}, attention_mask={self.attention_mask!r})"
        )


@checks_keywords()
def collate_groups(
    capacity: int,
    *,
    rows: int | None = None,
    prompt_key: str | None = "prompt_ids",
    completion_key: str = "completion_ids",
    group_key: str = "group",
    pad_id: int = 0,
    position_start: int = 0,
    attention_mask: str | None = "block",
) -> GroupCollate:
    """Make the collate of :func:`padless.plan_groups` batches: groups kept whole, a shared
    prompt once per group.

    Each sample is a mapping with its group id (``group_key``), its completion tokens
    (``completion_key``) and, unless ``prompt_key=None``, its prompt (equal within a group);
    consecutive samples of one id form a group. Groups are cut into rows next fit (the rows
    ``plan_groups`` planned); a row holds each of its groups as the prompt, then every
    completion. Returned (rows × ``capacity`` unless noted):

    - ``input_ids``, ``position_ids`` (prompt from ``position_start``; every completion
      continues its prompt's positions, as if alone after it);
    - ``seq_idx`` (segments: each prompt, each completion, each row's padding tail) and
      ``prompt_idx`` (a completion token's prompt segment, else -1);
    - ``attention_mask`` (rows, 1, C, C) float additive: a prompt attends causally to itself, a
      completion to its prompt and causally to itself (``attention_mask=None``: left out;
      ``attention_mask="flex"``: the same mask as a flex-attention ``BlockMask``,
      :func:`padless.torch.flex_block_mask`, O(C) tensors instead of C² per row, for a model
      loaded with ``attn_implementation="flex_attention"``);
    - the loss targets: ``target_index`` (flat positions into the rows whose logits predict),
      ``target_ids`` (the tokens they predict) and ``target_completion`` (the sample each belongs
      to): every completion token (without a prompt: every token but the first);
    - the counts: ``completion_loss_tokens`` and ``completion_group`` per sample,
      ``group_loss_tokens`` and ``group_ids`` per group, and as ints ``loss_tokens``,
      ``logical_tokens`` (every completion with its own prompt: G·P + ΣR per group) and
      ``executed_tokens`` (the tokens in the rows: P + ΣR per group).

    >>> collate = collate_groups(8)
    >>> batch = collate([{"group": 0, "prompt_ids": [5, 6], "completion_ids": [7, 8]},
    ...                  {"group": 0, "prompt_ids": [5, 6], "completion_ids": [9]}])
    >>> batch["input_ids"].tolist(), batch["position_ids"].tolist()
    ([[5, 6, 7, 8, 9, 0, 0, 0]], [[0, 1, 2, 3, 2, 0, 1, 2]])
    >>> batch["target_index"].tolist(), batch["target_ids"].tolist()
    ([1, 2, 1], [7, 8, 9])
    >>> batch["logical_tokens"], batch["executed_tokens"], batch["loss_tokens"]
    (7, 5, 3)
    """
    return GroupCollate(
        capacity, rows=rows, prompt_key=prompt_key, completion_key=completion_key,
        group_key=group_key, pad_id=pad_id, position_start=position_start,
        attention_mask=attention_mask,
    )  # fmt: skip


def completion_logprobs(logits: torch.Tensor, batch: Mapping[str, Any]) -> torch.Tensor:
    """Each completion's summed log-probability (one per sample of the batch, in sample order)
    from the model's ``logits`` (rows, C, vocab) on a :func:`collate_groups` batch. Gradients
    flow through; the log-softmax is taken at the target positions only.

    >>> batch = collate_groups(4)([{"group": 0, "prompt_ids": [1], "completion_ids": [2, 3]}])
    >>> import math
    >>> logits = torch.zeros(1, 4, 5)  # uniform over 5 tokens
    >>> abs(float(completion_logprobs(logits, batch)[0]) + 2 * math.log(5)) < 1e-6
    True
    """
    if not isinstance(logits, torch.Tensor) or logits.ndim != 3:
        raise ValueError(
            f"logits must be a (rows, C, vocab) tensor, got {tuple(getattr(logits, 'shape', ()))}"
        )
    index = batch["target_index"].to(logits.device)
    picked = logits.reshape(-1, logits.shape[-1]).index_select(0, index)
    token = torch.log_softmax(picked.float(), dim=-1)
    token = token.gather(1, batch["target_ids"].to(logits.device)[:, None])[:, 0]
    count = int(batch["completion_loss_tokens"].numel())
    out = torch.zeros(count, dtype=token.dtype, device=logits.device)
    return out.index_add(0, batch["target_completion"].to(logits.device), token)


MODEL_INPUTS = ("input_ids", "position_ids", "attention_mask")


def check_prefix_packed(
    model: Any,
    samples: Sequence[Mapping[str, Any]],
    collate: GroupCollate,
    *,
    atol: float = 1e-4,
    forward_kwargs: Mapping[str, Any] | None = None,
) -> float:
    """Check that ``model`` gives every completion of a packed shared-prefix batch the
    log-probability it has alone (its prompt, then it, in a row of its own); return the largest
    difference, a ``ValueError`` above ``atol``. The sibling of :func:`padless.torch.check_packed`
    for :func:`collate_groups` batches (a model that derives its own mask, or ignores a 4-D
    one, fails here). Runs in eval mode without grad (the training mode is restored)."""
    if not isinstance(collate, GroupCollate):
        raise TypeError(f"collate must be a collate_groups(...) collate, got {collate!r:.60}")
    tol = check_real("atol", atol)
    extra = dict(forward_kwargs or {"use_cache": False})
    param = next(iter(model.parameters()))
    device = param.device
    batch = collate(list(samples))
    was = bool(getattr(model, "training", False))
    model.eval()
    try:
        with torch.no_grad():
            out = model(**{k: batch[k].to(device) for k in MODEL_INPUTS if k in batch}, **extra)
            packed = completion_logprobs(_logits(out), batch).double().cpu()
            alone = []  # each completion after its own prompt copy, in a row of its own
            for s in samples:
                size = len(s[collate.completion_key])
                size += len(s[collate.prompt_key]) if collate.prompt_key is not None else 0
                one = GroupCollate(
                    size, prompt_key=collate.prompt_key, completion_key=collate.completion_key,
                    group_key=collate.group_key, pad_id=collate.pad_id,
                    position_start=collate.position_start, attention_mask=None,
                )([s])  # fmt: skip
                res = model(
                    input_ids=one["input_ids"].to(device),
                    position_ids=one["position_ids"].to(device),
                    **extra,
                )
                alone.append(float(completion_logprobs(_logits(res), one)[0]))
    finally:
        model.train(was)
    diff = float((packed - torch.tensor(alone, dtype=torch.float64)).abs().max())
    if diff > tol:
        raise ValueError(
            f"packed completions' log-probs differ from unpacked by up to {diff:.3g} (atol={tol}): "
            "the model does not honour the 4-D shared-prefix mask or the position ids (try "
            "attn_implementation='eager' or 'sdpa', use_cache=False)"
        )
    return diff


class PreferencePairs:
    """Preference rows ``{"prompt_ids", "chosen_ids", "rejected_ids"}`` (TRL's tokenized form)
    as items for :func:`padless.plan_groups`: item ``2i`` is row ``i``'s chosen completion, item
    ``2i + 1`` its rejected one, both in group ``i`` with the row's prompt. ``lengths``,
    ``groups`` and ``prefix`` are the planner's arrays; ``pairs[k]`` the item a collate takes.

    >>> pairs = PreferencePairs([{"prompt_ids": [1, 2], "chosen_ids": [3], "rejected_ids": [4, 5]}])
    >>> pairs.lengths.tolist(), pairs.groups.tolist(), pairs.prefix.tolist()
    ([1, 2], [0, 0], [2, 2])
    >>> pairs[1]
    {'group': 0, 'prompt_ids': [1, 2], 'completion_ids': [4, 5], 'chosen': False}
    """

    def __init__(self, rows: Sequence[Mapping[str, Any]]) -> None:
        keys = ("prompt_ids", "chosen_ids", "rejected_ids")
        for i, r in enumerate(rows):
            missing = [k for k in keys if not isinstance(r, Mapping) or k not in r]
            if missing:
                raise ValueError(f"rows[{i}] has no field {missing[0]!r} (needs {list(keys)})")
        self.rows = rows
        n = len(rows)
        self.lengths = np.array(
            [len(r[k]) for r in rows for k in ("chosen_ids", "rejected_ids")], dtype=np.int64
        ).reshape(2 * n)
        self.groups = np.repeat(np.arange(n, dtype=np.int64), 2)
        self.prefix = np.repeat(np.array([len(r["prompt_ids"]) for r in rows], np.int64), 2)

    def __len__(self) -> int:
        return 2 * len(self.rows)

    def __getitem__(self, k: int) -> dict[str, Any]:
        k = check_int("k", k, minimum=0) or 0
        if k >= len(self):
            raise IndexError(f"item {k} out of range for {len(self)} items")
        row = self.rows[k // 2]
        chosen = k % 2 == 0
        return {
            "group": k // 2,
            "prompt_ids": row["prompt_ids"],
            "completion_ids": row["chosen_ids" if chosen else "rejected_ids"],
            "chosen": chosen,
        }


def dpo_loss(
    batch: Mapping[str, Any],
    policy_logps: torch.Tensor,
    ref_logps: torch.Tensor,
    *,
    beta: float = 0.1,
) -> torch.Tensor:
    """TRL's sigmoid DPO loss (``loss_type="sigmoid"``, the mean over pairs of
    ``-logsigmoid(β·((π_c - ref_c) - (π_r - ref_r)))``) from per-completion log-probs of a
    packed :class:`PreferencePairs` batch (:func:`completion_logprobs`): every group must hold
    two completions, chosen first.

    >>> batch = collate_groups(8)([{"group": 0, "prompt_ids": [1], "completion_ids": [2]},
    ...                            {"group": 0, "prompt_ids": [1], "completion_ids": [3]}])
    >>> round(float(dpo_loss(batch, torch.tensor([-1.0, -2.0]), torch.tensor([-1.0, -1.0]))), 4)
    0.6444
    """
    b = check_real("beta", beta)
    group = batch["completion_group"]
    count = int(group.numel())
    if count % 2 or not torch.equal(group, torch.arange(count) // 2):
        raise ValueError(
            "dpo_loss needs groups of two completions (chosen, rejected) in order, got "
            f"completion_group={group.tolist()!r:.80}"
        )
    for name, v in (("policy_logps", policy_logps), ("ref_logps", ref_logps)):
        if v.shape != (count,):
            raise ValueError(f"{name} must have shape ({count},), got {tuple(v.shape)}")
    ratio = policy_logps - ref_logps.to(policy_logps)
    delta = ratio[0::2] - ratio[1::2]
    return -torch.nn.functional.logsigmoid(b * delta).mean()
