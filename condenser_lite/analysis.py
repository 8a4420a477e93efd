"""Lenses on a pre-trained encoder: CLS attention entropy, held-out MLM loss, Condenser gauges.

CLS attention entropy per layer (Clark et al., 2019) is the lens of Condenser section 5.

For layer ``l`` and head ``a``, the CLS token's attention is a distribution ``alpha`` over the
(non-padding) positions of the sequence. Its entropy

    H_{l,a} = - sum_j alpha_j log alpha_j

is large when CLS looks broadly and small when it focuses on a few tokens (often [CLS]/[SEP]
themselves). The paper averages over heads and over 1k Wikipedia sections and plots one value per
layer, before and after fine-tuning: BERT's profile moves a lot, Condenser's little.
Explained in chapter 1 (``notebooks/01_readiness.ipynb``) and chapter 5
(``notebooks/05_attention_entropy.ipynb``).

Held-out MLM loss and the unigram entropy of the same masked tokens say whether pre-training
got past word frequencies. The two Condenser gauges say whether the head relies on [CLS]:
the *[CLS]-swap gap* (head MLM loss when each block's head reads another block's late [CLS],
minus the loss with its own, same masks) and the *mean cosine* between different blocks' late
[CLS]. A head that ignores [CLS] has a gap of exactly 0. Explained in chapter 2
(``notebooks/02_condenser.ipynb``) and the study page (``notebooks/09_study.md``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@torch.no_grad()
def cls_attention_entropy(
    encoder: nn.Module,
    tokenizer,
    texts: Sequence[str],
    max_len: int = 128,
    batch_size: int = 32,
    device: str | torch.device | None = None,
) -> np.ndarray:
    """Mean CLS attention entropy (nats) per layer, averaged over heads and texts.

    ``encoder`` is any transformers BERT-shaped model (``BertModel``, ``BertForMaskedLM``, a
    ``Condenser``'s backbone). Returns an array of shape ``[num_layers]``.
    Explained in chapter 1 (``notebooks/01_readiness.ipynb``).
    """
    if len(texts) == 0:
        raise ValueError("cls_attention_entropy needs at least one text")
    device = torch.device(device) if device is not None else next(encoder.parameters()).device
    was_training = encoder.training
    encoder.eval()
    # sdpa attention returns no weights; eager gives the same outputs (to ~5e-7) with weights.
    previous = getattr(encoder.config, "_attn_implementation", None)
    if previous != "eager":
        encoder.set_attn_implementation("eager")
    try:
        total, count = None, 0
        for start in range(0, len(texts), batch_size):
            enc = tokenizer(
                list(texts[start : start + batch_size]),
                truncation=True,
                max_length=max_len,
                padding=True,
                return_tensors="pt",
            ).to(device)
            out = encoder(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], output_attentions=True)
            if not out.attentions:
                raise RuntimeError("the model returned no attention weights; it must support eager attention")
            # attentions: per layer [B, heads, T, T]; row 0 is what CLS attends to.
            cls_rows = torch.stack([a[:, :, 0, :].float() for a in out.attentions], dim=1)  # [B, L, heads, T]
            ent = -(cls_rows * torch.log(cls_rows.clamp_min(1e-12))).sum(-1)  # padding has alpha = 0
            per_text = ent.mean(dim=2)  # mean over heads -> [B, L]
            total = per_text.sum(0) if total is None else total + per_text.sum(0)
            count += per_text.shape[0]
        return (total / count).cpu().numpy()
    finally:
        if previous is not None and previous != "eager":
            encoder.set_attn_implementation(previous)
        encoder.train(was_training)


def _bert(model: nn.Module) -> nn.Module:
    """The `BertModel` inside a `BertMLM`/`Condenser` (`.backbone.bert`), a `BertForMaskedLM`, or itself."""
    if hasattr(model, "backbone"):
        model = model.backbone
    return model.bert if hasattr(model, "bert") else model


def _mlm_head(model: nn.Module) -> nn.Module:
    backbone = model.backbone if hasattr(model, "backbone") else model
    if not hasattr(backbone, "cls"):
        raise TypeError(f"{type(model).__name__} has no MLM head (.cls): pass a BertMLM, Condenser or BertForMaskedLM")
    return backbone.cls


def _token_losses(mlm_head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy at each masked position and the row (block) it belongs to."""
    selected = labels != -100
    ce = F.cross_entropy(mlm_head(hidden[selected]).float(), labels[selected], reduction="none")
    return ce, selected.nonzero()[:, 0]


@torch.no_grad()
def heldout_mlm_loss(model: nn.Module, batches: Iterable[Mapping[str, torch.Tensor]]) -> dict[str, float]:
    """Mean MLM cross-entropy (nats) over every masked token of fixed held-out batches.

    `model` is a `BertMLM`, `Condenser` or `BertForMaskedLM`; `batches` come from
    `pretrain_data.mlm_eval_batches` (same blocks, same masks for every model). Returns
    `{"mlm_loss": ...}` (the backbone's last layer), plus `"head_loss"` for a `Condenser`.
    Runs in eval mode (no dropout) and restores the mode. Token-weighted, so batches with
    more masked tokens count more.

    Explained in the study page (`notebooks/09_study.md`) and chapter 2 (`notebooks/02_condenser.ipynb`).
    """
    was_training = model.training
    model.eval()
    try:
        bert, head = _bert(model), _mlm_head(model)
        skip_from = getattr(model, "skip_from", None)
        sums = {"mlm_loss": 0.0, "head_loss": 0.0}
        count = 0
        for batch in batches:
            out = bert(batch["input_ids"], attention_mask=batch["attention_mask"],
                       output_hidden_states=skip_from is not None)
            ce, _ = _token_losses(head, out.last_hidden_state, batch["labels"])
            sums["mlm_loss"] += float(ce.sum())
            count += len(ce)
            if skip_from is not None:
                hh = model.head_forward(out.last_hidden_state[:, :1], out.hidden_states[skip_from][:, 1:],
                                        batch["attention_mask"])
                sums["head_loss"] += float(_token_losses(head, hh, batch["labels"])[0].sum())
        if count == 0:
            raise ValueError("the held-out batches have no masked token; build them with pretrain_data.mlm_eval_batches")
        keys = ("mlm_loss", "head_loss") if skip_from is not None else ("mlm_loss",)
        return {k: sums[k] / count for k in keys}
    finally:
        model.train(was_training)


def unigram_entropy(train_ids: Iterable[Sequence[int]], batches: Iterable[Mapping[str, torch.Tensor]],
                    vocab_size: int, ignore_ids: Iterable[int] = ()) -> float:
    """Cross-entropy (nats) of the held-out masked tokens under the training text's unigram model.

    The unigram probabilities are the token counts of `train_ids` (e.g. the training blocks'
    `input_ids`; `ignore_ids`, such as [CLS]/[SEP]/[PAD], are not counted) with add-one
    smoothing over `vocab_size` entries. This is the loss of a model that knows word
    frequencies and nothing else, on the very tokens `heldout_mlm_loss` scores: an MLM loss
    close to it means pre-training learnt little beyond frequencies.

    Explained in the study page (`notebooks/09_study.md`) and chapter 2 (`notebooks/02_condenser.ipynb`).
    """
    counts = torch.ones(vocab_size, dtype=torch.float64)  # add-one
    ignore = torch.tensor(sorted(set(ignore_ids)), dtype=torch.long)
    for ids in train_ids:
        counts += torch.bincount(torch.as_tensor(ids, dtype=torch.long), minlength=vocab_size)[:vocab_size]
    if len(ignore):
        counts[ignore] = 1.0
    log_p = counts.log() - counts.sum().log()
    total, n = 0.0, 0
    for batch in batches:
        labels = batch["labels"][batch["labels"] != -100]
        total -= float(log_p[labels].sum())
        n += len(labels)
    if n == 0:
        raise ValueError("the held-out batches have no masked token; build them with pretrain_data.mlm_eval_batches")
    return total / n


@torch.no_grad()
def cls_swap_gap(model: nn.Module, batches: Iterable[Mapping[str, torch.Tensor]],
                 shifts: Sequence[int] = (1, 2, 3)) -> dict[str, float]:
    """The [CLS]-swap gap of a `Condenser`: does its head rely on the late [CLS]?

    For each batch, the head reads [late CLS; early tokens] as in training (`own`), then
    with the late [CLS] of another block of the batch (`swapped`: the batch's CLS rows rolled
    by each of `shifts`, a derangement); masks, early tokens and everything else are the same.
    Returns, in nats per masked token:

    * `gap`: mean head MLM loss swapped minus own (> 0 when [CLS] carries what the head
      needs about its own block; exactly 0 for a head that ignores [CLS]);
    * `noise`: the paired standard error of `gap` over blocks (each block's loss difference,
      a ratio estimate weighted by its masked tokens) -- call the gap clear when it is
      several times this;
    * `shift_spread`: the standard deviation of the gap over the `shifts` (the choice of
      partner block), `own_loss`, `swapped_loss`, `n_blocks`, `n_tokens`.

    Runs in eval mode (no dropout) and restores the mode.
    Explained in chapter 2 (`notebooks/02_condenser.ipynb`) and the study page (`notebooks/09_study.md`).
    """
    if not hasattr(model, "head_forward") or not hasattr(model, "skip_from"):
        raise TypeError(f"cls_swap_gap needs a Condenser (head_forward, skip_from), got {type(model).__name__}")
    if not shifts:
        raise ValueError("shifts must name at least one offset, e.g. (1, 2, 3)")
    was_training = model.training
    model.eval()
    try:
        bert, head = _bert(model), _mlm_head(model)
        own_sums, swap_sums, counts = [], [], []  # per block
        for batch in batches:
            ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
            B = ids.shape[0]
            bad = [s for s in shifts if s % B == 0]
            if bad:
                raise ValueError(f"shifts {bad} leave some blocks with their own [CLS] in a batch of {B}: "
                                 f"use batches of more than {max(shifts)} blocks or smaller shifts")
            out = bert(ids, attention_mask=mask, output_hidden_states=True)
            cls, early = out.last_hidden_state[:, :1], out.hidden_states[model.skip_from][:, 1:]
            ce, row = _token_losses(head, model.head_forward(cls, early, mask), labels)
            own_sums.append(torch.zeros(B, dtype=torch.float64).index_add_(0, row, ce.double()))
            counts.append(torch.bincount(row, minlength=B).double())
            per_shift = []
            for s in shifts:
                ce_s, _ = _token_losses(head, model.head_forward(cls.roll(s, dims=0), early, mask), labels)
                per_shift.append(torch.zeros(B, dtype=torch.float64).index_add_(0, row, ce_s.double()))
            swap_sums.append(torch.stack(per_shift))  # [n_shifts, B]
        own, swapped, n = torch.cat(own_sums), torch.cat(swap_sums, dim=1), torch.cat(counts)
        if n.sum() == 0:
            raise ValueError("the batches have no masked token; build them with pretrain_data.mlm_eval_batches")
        keep = n > 0
        own, swapped, n = own[keep], swapped[:, keep], n[keep]
        diff = swapped.mean(0) - own  # per block, summed over its masked tokens
        gap = float(diff.sum() / n.sum())
        N = len(n)
        noise = math.sqrt(float(((diff - gap * n) ** 2).sum()) / (N * (N - 1))) / float(n.mean()) if N > 1 else float("nan")
        shift_gaps = (swapped.sum(1) - own.sum()) / n.sum()
        return {"gap": gap, "noise": noise,
                "shift_spread": float(shift_gaps.std()) if len(shifts) > 1 else 0.0,
                "own_loss": float(own.sum() / n.sum()), "swapped_loss": float(swapped.sum() / (len(shifts) * n.sum())),
                "n_blocks": N, "n_tokens": int(n.sum())}
    finally:
        model.train(was_training)


@torch.no_grad()
def cls_cosine(model: nn.Module, batches: Iterable[Mapping[str, torch.Tensor]]) -> float:
    """Mean cosine similarity between the late [CLS] vectors of *different* blocks.

    The off-diagonal mean of the cosine matrix of every block's last-layer [CLS] (before any
    pooler), in eval mode. Near 1, the [CLS] vectors are nearly one direction and say little
    about their block; a [CLS] that carries its block's content spreads out. Works for any
    BERT-shaped model (`BertMLM`, `Condenser`, `BertForMaskedLM`, `BertModel`).

    Explained in chapter 2 (`notebooks/02_condenser.ipynb`) and the study page (`notebooks/09_study.md`).
    """
    was_training = model.training
    model.eval()
    try:
        bert = _bert(model)
        cls = torch.cat([bert(b["input_ids"], attention_mask=b["attention_mask"]).last_hidden_state[:, 0].double()
                         for b in batches])
        n = len(cls)
        if n < 2:
            raise ValueError(f"cls_cosine needs at least 2 blocks, got {n}")
        x = F.normalize(cls, dim=1)
        total = (x.sum(0) ** 2).sum()  # sum of the whole cosine matrix, diagonal included
        return float((total - n) / (n * (n - 1)))
    finally:
        model.train(was_training)
