"""Do packed documents stay apart? A packed-vs-alone check of a model's attention (torch only).

Private module: ``padless.torch`` and ``padless.hf`` re-export :func:`check_packed`. It imports torch
and duck-types the model (``model.config``, ``.logits``), so it never imports transformers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ..core._check import check_int, check_real

# batch keys an HF causal LM understands; the rest of a collate's output (labels, seq_idx,
# cu_seqlens, max_seqlen) is not what a training loop passes to such a model
MODEL_KEYS = (
    "input_ids",
    "position_ids",
    "attention_mask",
    "cu_seq_lens_q",
    "cu_seq_lens_k",
    "max_length_q",
    "max_length_k",
)
_DEFAULT_LENGTHS = (7, 5, 4)
_FIX_FLASH = (
    "attn_implementation='flash_attention_2' with cu_seq_lens_q/k "
    "(PaddingFreeCollator(flash_attn_kwargs=True)), after this check passes on the GPU"
)


def block_causal_mask(
    seq_idx: torch.Tensor,
    dtype: torch.dtype = torch.float32,
    *,
    prompt_of: torch.Tensor | None = None,
) -> torch.Tensor:
    """Return the additive block-diagonal causal mask of segment ids ``seq_idx`` (rows, T).

    A segment is a run of equal ids. The result has shape (rows, 1, T, T): 0 where a token may
    attend (its own segment, not later), the dtype's most negative value elsewhere. transformers
    passes a 4-D mask through unchanged; eager attention adds it to the scores and sdpa takes it as
    an additive mask, so both honour a float mask (a bool one is honoured by sdpa only: eager adds
    True as 1.0). Cost: one fill of rows * T * T elements (64 MiB per row of 4,096 tokens in
    float32) plus one small fill per segment.

    ``prompt_of`` (rows, T), for shared-prefix rows: the segment id whose tokens a token's
    segment also sees whole (its prompt), or -1; a completion then attends to its prompt and to
    itself, never to the other completions of the prompt.

    >>> block_causal_mask(torch.tensor([[0, 0, 1]]))[0, 0].eq(0).int().tolist()
    [[1, 0, 0], [1, 1, 0], [0, 0, 1]]
    >>> seg, pro = torch.tensor([[0, 0, 1, 2]]), torch.tensor([[-1, -1, 0, 0]])
    >>> block_causal_mask(seg, prompt_of=pro)[0, 0].eq(0).int().tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 1]]
    """
    if prompt_of is not None and prompt_of.shape != seq_idx.shape:
        raise ValueError(
            f"prompt_of must have seq_idx's shape {tuple(seq_idx.shape)}, got "
            f"{tuple(prompt_of.shape)}"
        )
    if seq_idx.ndim != 2:
        raise ValueError(f"seq_idx must be 2-D (rows, T), got shape {tuple(seq_idx.shape)}")
    rows, width = seq_idx.shape
    device = seq_idx.device
    out = torch.full((rows, 1, width, width), torch.finfo(dtype).min, dtype=dtype, device=device)
    lower = torch.ones(width, width, dtype=torch.bool, device=device).tril_()
    for r in range(rows):
        ids = seq_idx[r]
        cuts = (torch.nonzero(ids[1:] != ids[:-1]).view(-1) + 1).tolist()
        spans = list(zip([0, *cuts], [*cuts, width], strict=True))
        for a, b in spans:
            out[r, 0, a:b, a:b].masked_fill_(lower[: b - a, : b - a], 0)
        if prompt_of is not None:
            where = {int(ids[a]): (a, b) for a, b in spans}
            for a, b in spans:
                p = int(prompt_of[r, a])
                if p >= 0:
                    if p not in where:
                        raise ValueError(
                            f"prompt_of names segment {p} for the segment at row {r}, token "
                            f"{a}, but row {r} has no segment {p}"
                        )
                    pa, pb = where[p]
                    out[r, 0, a:b, pa:pb] = 0
    return out


def _documents(lengths: Sequence[int], vocab: int) -> list[list[int]]:
    # deterministic, distinct token ids in [1, vocab): no randomness is needed to see a leak
    docs = []
    for d, n in enumerate(lengths):
        docs.append([1 + (7919 * (i + 1) + 104729 * (d + 1)) % (vocab - 1) for i in range(n)])
    return docs


def _config(model: Any) -> Any:
    config = getattr(model, "config", None)
    if config is None and hasattr(model, "module"):  # DistributedDataParallel and similar
        config = getattr(model.module, "config", None)
    return config


def _vocab_size(model: Any) -> int:
    sizes = []
    embed = getattr(model, "get_input_embeddings", None)
    if callable(embed):
        sizes.append(getattr(embed(), "num_embeddings", None))
    sizes.append(getattr(_config(model), "vocab_size", None))
    known = [s for s in sizes if isinstance(s, int) and s > 1]
    if not known:
        raise TypeError(
            "model must expose its vocabulary (config.vocab_size or get_input_embeddings()), "
            f"got {type(model).__name__}"
        )
    return min(known)


def _logits(out: Any) -> torch.Tensor:
    logits = getattr(out, "logits", None)
    if logits is None:
        logits = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(logits, torch.Tensor) or logits.ndim != 3:
        raise TypeError(
            "model(...) must return logits (rows, T, vocab) as .logits or its first element, "
            f"got {type(out).__name__}"
        )
    return logits.detach().float()


def _default_batch(docs: list[list[int]]) -> dict[str, torch.Tensor]:
    # one flat row, positions restarting: what PaddingFreeCollator / DataCollatorWithFlattening emit
    ids = torch.tensor([t for doc in docs for t in doc], dtype=torch.long)
    pos = torch.cat([torch.arange(len(doc)) for doc in docs])
    return {"input_ids": ids[None], "position_ids": pos[None]}


def _locate(flat: list[int], docs: list[list[int]]) -> list[int]:
    starts, cursor = [], 0
    for d, doc in enumerate(docs):
        n = len(doc)
        at = next((s for s in range(cursor, len(flat) - n + 1) if flat[s : s + n] == doc), None)
        if at is None:
            raise ValueError(
                f"the collate's input_ids do not hold document {d} ({n} tokens) whole and after "
                "the documents before it; check_packed needs a collate that keeps documents whole "
                "and in order (padless's packed collates do)"
            )
        starts.append(at)
        cursor = at + n
    return starts


def _segments(shape: tuple[int, int], starts: list[int], lengths: Sequence[int]) -> torch.Tensor:
    # each document a segment; each other run of tokens (row padding) a segment of its own
    rows, width = shape
    seg = torch.full((rows * width,), -1, dtype=torch.long)
    for d, (s, n) in enumerate(zip(starts, lengths, strict=True)):
        seg[s : s + n] = d
    nxt = len(starts)
    for t in range(rows * width):
        if seg[t] < 0:
            if t % width == 0 or seg[t - 1] < len(starts):
                nxt += 1
            seg[t] = nxt
    return seg.view(rows, width)


def _to(value: Any, device: torch.device) -> Any:
    return value.to(device) if isinstance(value, torch.Tensor) else value


def packs(collate: Callable[[list[dict[str, list[int]]]], Mapping[str, Any]]) -> bool:
    """Whether ``collate`` puts two documents in one row (so a model could see across them).

    Calls it on three short documents as ``[{"input_ids": [...]}, ...]``; a collate that needs
    other keys, or returns no 2-D ``input_ids``, is taken as not packing.

    >>> from padless.torch import collate_packed, collate_padded
    >>> packs(collate_packed(capacity=64)), packs(collate_padded(0))
    (True, False)
    """
    docs = _documents(_DEFAULT_LENGTHS, 64)
    try:
        batch = collate([{"input_ids": doc} for doc in docs])
        ids = batch["input_ids"]
        if not isinstance(ids, torch.Tensor) or ids.ndim != 2:
            return False
        starts = _locate(ids.reshape(-1).tolist(), docs)
    except Exception:  # noqa: BLE001 - a collate of another input form does not pack these
        return False
    rows = [s // int(ids.shape[1]) for s in starts]
    return len(set(rows)) < len(rows)


def check_packed(
    model: Any,
    *,
    collate: Callable[[list[dict[str, list[int]]]], Mapping[str, Any]] | None = None,
    lengths: Sequence[int] = _DEFAULT_LENGTHS,
    keys: Sequence[str] | None = None,
    forward_kwargs: Mapping[str, Any] | None = None,
    atol: float | None = None,
) -> float:
    """Check that ``model`` keeps packed documents apart; return the largest logit difference.

    Packs a few short documents into one row the way ``collate`` does (default: one flat row with
    ``position_ids`` restarting at every document, the padding-free form), runs the packed batch
    and each document alone (eval mode, no grad; the training mode is restored), and compares
    each document's logits. A token that attends to an earlier document of its row changes its
    logits, so a difference above the tolerance is a leak: a ``ValueError`` that says how far the
    logits moved, under which attention implementation and ``use_cache``, and which fix works for
    this model (it tries ``use_cache=False`` and the 4-D block mask of
    ``collate_packed(..., attention_mask="block")``).

    transformers derives the block-diagonal mask from restarting ``position_ids`` only when the
    forward has no attention mask and no cache, and every model config defaults to
    ``use_cache=True``; some models (OPT) never derive it. See docs/packed_attention.md.

    Args:
        model: a causal LM called as ``model(**batch)`` and returning logits (``.logits`` or the
            first element), on its training device and dtype.
        collate: the collate the training uses, called with ``[{"input_ids": [...]}, ...]``
            (``collate_packed``, ``PaddingFreeCollator``, ``DataCollatorWithFlattening``...). It must
            put at least two of the documents in one row.
        lengths: the documents' lengths (at least two, each at least 2).
        keys: the batch keys the training loop passes to the model; default those of
            ``MODEL_KEYS`` present in the batch (labels, seq_idx, cu_seqlens are left out).
        forward_kwargs: more keyword arguments for every forward (e.g. ``{"use_cache": False}``
            when the loop passes it).
        atol: the largest difference accepted; default ``1e-4`` (float32/64) or ``3e-2`` (16-bit)
            times ``max(1, largest |logit|)``.

    Cost: one forward per document and one of the packed batch (a few dozen tokens, or the
    collate's rows of ``capacity`` tokens); on a leak, up to two more packed forwards.

    >>> import transformers
    >>> config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    >>> model = transformers.LlamaForCausalLM(config)
    >>> check_packed(model)  # config.use_cache is True: the cache turns off the packed mask
    Traceback (most recent call last):
    ValueError: packed documents attend to each other: ...
    >>> model.config.use_cache = False
    >>> check_packed(model) < 1e-4
    True
    """
    if not callable(model):
        raise TypeError(f"model must be callable (a torch module), got {type(model).__name__}")
    if collate is not None and not callable(collate):
        raise TypeError(f"collate must be callable or None, got {type(collate).__name__}")
    if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence):
        raise TypeError(f"lengths must be a sequence of ints, got {type(lengths).__name__}")
    lengths = [check_int(f"lengths[{i}]", n, minimum=2) or 0 for i, n in enumerate(lengths)]
    if len(lengths) < 2:
        raise ValueError(f"lengths must hold at least two documents, got {lengths}")
    if keys is not None and (
        isinstance(keys, str)
        or not isinstance(keys, Sequence)
        or not all(isinstance(k, str) for k in keys)
    ):
        raise TypeError(f"keys must be a sequence of str or None, got {keys!r:.80}")
    if forward_kwargs is not None and not isinstance(forward_kwargs, Mapping):
        raise TypeError(f"forward_kwargs must be a mapping or None, got {forward_kwargs!r}")
    tol_given = None if atol is None else check_real("atol", atol)
    extra = dict(forward_kwargs or {})
    param = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    if param is None:
        raise TypeError(f"model must be a torch module with parameters, got {type(model).__name__}")
    device, dtype = param.device, param.dtype

    docs = _documents(lengths, _vocab_size(model))
    features = [{"input_ids": doc} for doc in docs]
    batch = dict(collate(features)) if collate is not None else _default_batch(docs)
    ids = batch.get("input_ids")
    if not isinstance(ids, torch.Tensor) or ids.ndim != 2:
        raise ValueError(
            "collate must return 'input_ids' as a 2-D tensor (rows, T), got "
            f"{type(ids).__name__} {tuple(getattr(ids, 'shape', ()))}"
        )
    shape = (int(ids.shape[0]), int(ids.shape[1]))
    starts = _locate(ids.reshape(-1).tolist(), docs)
    rows = [s // shape[1] for s in starts]
    if len(set(rows)) == len(rows):
        raise ValueError(
            f"the collate put each of the {len(docs)} documents (lengths={lengths}) in a row of its "
            "own, so nothing can leak and the check proves nothing; pass shorter lengths= or a "
            "collate whose rows hold two of them"
        )
    pos = batch.get("position_ids")
    start = int(pos.reshape(-1)[starts[0]]) if isinstance(pos, torch.Tensor) else 0
    for d, s in enumerate(starts[1:], 1):
        if isinstance(pos, torch.Tensor) and int(pos.reshape(-1)[s]) != start:
            raise ValueError(
                f"the collate's position_ids do not restart at document {d}: it starts at "
                f"position {int(pos.reshape(-1)[s])}, document 0 at {start}; a packed document "
                "must have the positions it would have alone"
            )
    inputs = {k: batch[k] for k in (keys if keys is not None else MODEL_KEYS) if k in batch}
    missing = [k for k in (keys or ()) if k not in batch]
    if missing:
        raise ValueError(f"keys names {missing}, not in the collate's output {sorted(batch)}")

    was_training = bool(getattr(model, "training", False))
    model.eval()
    try:
        with torch.no_grad():
            alone = []  # each document on its own, positions from the first one's start
            for doc in docs:
                out = model(
                    input_ids=torch.tensor([doc], device=device),
                    position_ids=torch.arange(start, start + len(doc), device=device)[None],
                    **extra,
                )
                alone.append(_logits(out)[0])

            def leak(changes: Mapping[str, Any]) -> float:
                args = {k: _to(v, device) for k, v in {**inputs, **extra, **changes}.items()}
                if changes:  # a fix tried: one the model rejects is no fix
                    try:
                        out = model(**args)
                    except Exception:  # noqa: BLE001
                        return float("inf")
                else:
                    out = model(**args)
                flat = _logits(out).reshape(-1, alone[0].shape[-1])
                return max(
                    float((flat[s : s + a.shape[0]] - a).abs().max())
                    for s, a in zip(starts, alone, strict=True)
                )

            diff = leak({})
            scale = max([1.0] + [float(a.abs().max()) for a in alone])
            wide = dtype in (torch.float32, torch.float64)
            tol = tol_given if tol_given is not None else scale * (1e-4 if wide else 3e-2)
            if diff <= tol:
                return diff
            config = _config(model)
            use_cache = extra.get("use_cache", getattr(config, "use_cache", None))
            tried = []
            if use_cache:
                tried.append(("use_cache=False", leak({"use_cache": False})))
            mask = block_causal_mask(_segments(shape, starts, lengths))
            tried.append(("block", leak({"attention_mask": mask})))
    finally:
        model.train(was_training)
    impl = getattr(config, "_attn_implementation", None)
    fixes = []
    for name, moved in tried:
        if moved <= tol and name == "use_cache=False":
            fixes.append(
                "set model.config.use_cache = False (transformers keeps packed documents apart "
                "from restarting position_ids only with no cache and no attention mask)"
            )
        elif moved <= tol:
            fixes.append(
                "emit the 4-D block mask: collate_packed(..., attention_mask='block') "
                "(a float (rows, 1, T, T) mask, honoured by eager and sdpa; O(rows * T^2) memory)"
            )
    failed = ", ".join(
        f"{n} moves them {m:.3g}" if m < float("inf") else f"{n} fails" for n, m in tried if m > tol
    )
    if fixes:
        fix = "Fix: " + "; or ".join(fixes) + f"; or {_FIX_FLASH}."
    else:
        fix = (
            "Neither use_cache=False nor a 4-D block mask keeps this model's documents apart"
            + (f" ({failed})" if failed else "")
            + f"; use {_FIX_FLASH}, or pad instead of packing."
        )
    mask_kind = inputs.get("attention_mask")
    mask_note = (
        f", a {mask_kind.dtype} {tuple(mask_kind.shape)} attention_mask"
        if isinstance(mask_kind, torch.Tensor)
        else ""
    )
    raise ValueError(
        f"packed documents attend to each other: {type(model).__name__} with "
        f"attn_implementation={impl!r}, use_cache={use_cache!r}{mask_note} moves the logits of "
        f"packed documents up to {diff:.3g} from those of each document run alone (tolerance "
        f"{tol:.3g}): each document sees the ones before it in its row. {fix}"
    )
