"""A Llama-style decoder in plain ``torch.nn`` for the GPU benchmark (no downloads, random init).

RMSNorm, rotary positions, SwiGLU, no biases. Attention per row of a batch:

- one document per row (padded batches, a document alone): SDPA with ``is_causal=True``
  (right padding needs no key mask: a real token only sees earlier, real positions);
- several documents in a row (packed): each token attends to its own document only, through
  ``kernel``: ``"flex"`` (``flex_attention`` with a document block mask, compiled) or
  ``"sdpa-mask"`` (SDPA with a boolean block-diagonal causal mask).

Documents are ``seq_idx`` when given, else runs of ``position_ids`` that count up by one (the
padding-free form transformers reads), so ``padless.torch.check_packed`` can call it with
``input_ids`` and ``position_ids`` alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Config:
    vocab_size: int = 32000
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    ff: int = 2048
    rope_theta: float = 10000.0
    use_cache: bool = False  # read by check_packed's messages only
    _attn_implementation: str = "sdpa"


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * self.weight.float()).to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (B, H, T, Dh) by the angles of ``cos``/``sin`` (B, 1, T, Dh/2)."""
    a, b = x.float().chunk(2, dim=-1)
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1).to(x.dtype)


def documents(position_ids: torch.Tensor) -> torch.Tensor:
    """Document ids (B, T) of runs of positions counting up by one."""
    start = torch.ones_like(position_ids, dtype=torch.bool)
    start[:, 1:] = position_ids[:, 1:] != position_ids[:, :-1] + 1
    return start.long().cumsum(1)


def block_mask_bool(docs: torch.Tensor) -> torch.Tensor:
    """(B, 1, T, T) True where a token may attend: its own document, not later."""
    t = docs.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=docs.device).tril_()
    return (docs[:, :, None] == docs[:, None, :]).logical_and_(causal)[:, None]


_FLEX: Any = None


def flex_attention_compiled() -> Any:
    global _FLEX
    if _FLEX is None:
        from torch.nn.attention.flex_attention import flex_attention

        _FLEX = torch.compile(flex_attention, dynamic=False)
    return _FLEX


def flex_block_mask(docs: torch.Tensor) -> Any:
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return (docs[b, q] == docs[b, kv]) & (q >= kv)

    rows, t = docs.shape
    return create_block_mask(mask_mod, rows, None, t, t, device=docs.device)


class Block(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.heads = c.heads
        self.norm1, self.norm2 = RMSNorm(c.hidden), RMSNorm(c.hidden)
        self.qkv = nn.Linear(c.hidden, 3 * c.hidden, bias=False)
        self.proj = nn.Linear(c.hidden, c.hidden, bias=False)
        self.gate_up = nn.Linear(c.hidden, 2 * c.ff, bias=False)
        self.down = nn.Linear(c.ff, c.hidden, bias=False)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: Any, kernel: str
    ) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if mask is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif kernel == "flex":
            o = flex_attention_compiled()(q, k, v, block_mask=mask)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(o.transpose(1, 2).reshape(b, t, d))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Decoder(nn.Module):
    """``model(input_ids, position_ids=None, seq_idx=None) -> logits (B, T, vocab)``."""

    def __init__(self, c: Config, kernel: str = "sdpa-mask") -> None:
        super().__init__()
        self.config = c
        self.kernel = kernel
        self.embed = nn.Embedding(c.vocab_size, c.hidden)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden)
        self.head = nn.Linear(c.hidden, c.vocab_size, bias=False)
        half = c.hidden // c.heads // 2
        inv = 1.0 / (c.rope_theta ** (torch.arange(half, dtype=torch.float32) / half))
        self.register_buffer("inv_freq", inv, persistent=False)
        for p in self.parameters():
            if p.ndim == 2:
                nn.init.normal_(p, std=0.02)

    def set_kernel(self, kernel: str) -> None:
        self.kernel = kernel
        self.config._attn_implementation = kernel

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        seq_idx: torch.Tensor | None = None,
        **_: Any,
    ) -> torch.Tensor:
        rows, t = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(t, device=input_ids.device).expand(rows, t)
        docs = documents(position_ids) if seq_idx is None else seq_idx.long()
        mask: Any = None
        if bool((docs != docs[:, :1]).any()):  # a row holds several documents
            mask = flex_block_mask(docs) if self.kernel == "flex" else block_mask_bool(docs)
        angles = position_ids.float()[:, None, :, None] * self.inv_freq  # (B, 1, T, Dh/2)
        cos, sin = angles.cos(), angles.sin()
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x, cos, sin, mask, self.kernel)
        return self.head(self.norm(x))


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token loss with labels in transformers' form (the model's input ids, -100 at
    positions not to predict, e.g. each document's first token in a packed row)."""
    v = logits.shape[-1]
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, v).float(), labels[:, 1:].reshape(-1), ignore_index=-100
    )


def parameters_m(model: nn.Module) -> float:
    return sum(p.numel() for p in model.parameters()) / 1e6
