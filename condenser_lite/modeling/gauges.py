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
[CLS]. A head that ignores [CLS] has a gap of exactly 0. The pre-registered gauge,
``cls_reliance_gauge``, asks how much: the share of the head's deficit against the backbone's late
layer that its own late [CLS] closes, against a [CLS] from another document (and a zero and a mean
[CLS]), over several mask draws, with a bootstrap noise. Explained in page 2b
(``notebooks/02_reliance.ipynb``) and the study page (``notebooks/09_study.md``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..utils.errors import SchemaError
from .mlm import bert_of, masked_token_losses, mlm_head_of


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


@torch.no_grad()
def heldout_mlm_loss(model: nn.Module, batches: Iterable[Mapping[str, torch.Tensor]]) -> dict[str, float]:
    """Mean MLM cross-entropy (nats) over every masked token of fixed held-out batches.

    `model` is a `BertMLM`, `Condenser` or `BertForMaskedLM`; `batches` come from
    `packing.mlm_eval_batches` (same blocks, same masks for every model). Returns
    `{"mlm_loss": ...}` (the backbone's last layer), plus `"head_loss"` for a `Condenser`.
    Runs in eval mode (no dropout) and restores the mode. Token-weighted, so batches with
    more masked tokens count more.

    Explained in the study page (`notebooks/09_study.md`) and page 2b (`notebooks/02_reliance.ipynb`).
    """
    was_training = model.training
    model.eval()
    try:
        bert, head = bert_of(model), mlm_head_of(model)
        skip_from = getattr(model, "skip_from", None)
        sums = {"mlm_loss": 0.0, "head_loss": 0.0}
        count = 0
        for batch in batches:
            ids, mask, labels = _inputs(model, batch)
            out = bert(ids, attention_mask=mask, output_hidden_states=skip_from is not None)
            ce, _ = masked_token_losses(head, out.last_hidden_state, labels)
            sums["mlm_loss"] += float(ce.sum())
            count += len(ce)
            if skip_from is not None:
                hh = model.head_forward(out.last_hidden_state[:, :1], out.hidden_states[skip_from][:, 1:], mask)
                sums["head_loss"] += float(masked_token_losses(head, hh, labels)[0].sum())
        if count == 0:
            raise ValueError("the held-out batches have no masked token; build them with packing.mlm_eval_batches")
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

    Explained in the study page (`notebooks/09_study.md`) and page 2b (`notebooks/02_reliance.ipynb`).
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
        raise ValueError("the held-out batches have no masked token; build them with packing.mlm_eval_batches")
    return total / n


@contextlib.contextmanager
def _eval_mode(model: nn.Module):
    """Eval mode (no dropout) for the duration, then the caller's mode back."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _inputs(model: nn.Module, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """A held-out batch's ``input_ids``, ``attention_mask`` and ``labels`` on the model's device:
    the batches stay on the CPU (they are built once and reused), the model may sit on a GPU."""
    device = next(model.parameters()).device
    return tuple(batch[k].to(device) for k in ("input_ids", "attention_mask", "labels"))


def _require_head(model: nn.Module, name: str) -> None:
    if not hasattr(model, "head_forward") or not hasattr(model, "skip_from"):
        raise TypeError(f"{name} needs a Condenser (head_forward, skip_from), got {type(model).__name__}")


def head_block_losses(model: nn.Module, batch: Mapping[str, torch.Tensor],
                       variants: Callable[[torch.Tensor], Sequence[torch.Tensor]]):
    """One batch of a Condenser-family model, per block (summed over its masked tokens, float64):
    the backbone's late MLM loss, the head's loss reading its own late [CLS], and the head's loss
    reading each [CLS] of ``variants(late_cls)`` (``[k, B]``) in its place, with everything else
    (early tokens, masks) the same; plus each block's masked-token count. The one procedure behind
    ``cls_swap_gap``, ``cls_reliance_gauge`` and the study's ablations. Chapter 2."""
    bert, mlm = bert_of(model), mlm_head_of(model)
    ids, mask, labels = _inputs(model, batch)
    B = ids.shape[0]
    out = bert(ids, attention_mask=mask, output_hidden_states=True)
    cls, early = out.last_hidden_state[:, :1], out.hidden_states[model.skip_from][:, 1:]

    def per_block(hidden):
        ce, row = masked_token_losses(mlm, hidden, labels)
        row = row.cpu()  # per-block sums on the CPU, where the gauges' statistics run
        return torch.zeros(B, dtype=torch.float64).index_add_(0, row, ce.double().cpu()), row

    late, row = per_block(out.last_hidden_state)
    own, _ = per_block(model.head_forward(cls, early, mask))
    other = [per_block(model.head_forward(c, early, mask))[0] for c in variants(cls)]
    counts = torch.bincount(row, minlength=B).double()
    return late, own, torch.stack(other) if other else torch.zeros(0, B, dtype=torch.float64), counts


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

    The partners are neighbouring blocks of the batch, possibly of the same document; the
    pre-registered gauge is `cls_reliance_gauge` (partners from other documents).
    Runs in eval mode (no dropout) and restores the mode.
    Explained in page 2b (`notebooks/02_reliance.ipynb`) and the study page (`notebooks/09_study.md`).
    """
    _require_head(model, "cls_swap_gap")
    if not shifts:
        raise ValueError("shifts must name at least one offset, e.g. (1, 2, 3)")
    with _eval_mode(model):
        own_sums, swap_sums, counts = [], [], []  # per block
        for batch in batches:
            B = batch["input_ids"].shape[0]
            bad = [s for s in shifts if s % B == 0]
            if bad:
                raise ValueError(f"shifts {bad} leave some blocks with their own [CLS] in a batch of {B}: "
                                 f"use batches of more than {max(shifts)} blocks or smaller shifts")
            _, own, swapped, n = head_block_losses(model, batch, lambda cls: [cls.roll(s, dims=0) for s in shifts])
            own_sums.append(own)
            swap_sums.append(swapped)  # [n_shifts, B]
            counts.append(n)
        own, swapped, n = torch.cat(own_sums), torch.cat(swap_sums, dim=1), torch.cat(counts)
        if n.sum() == 0:
            raise ValueError("the batches have no masked token; build them with packing.mlm_eval_batches")
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


def other_document_partners(doc_ids: torch.Tensor, generator: torch.Generator | None = None,
                            pool_doc_ids: torch.Tensor | None = None) -> torch.Tensor:
    """For each block of a batch, the index of a partner block drawn uniformly from the blocks of
    *other documents* in ``pool_doc_ids`` (default: the batch itself; ``doc_ids``: one document
    id per block). Neighbouring blocks often come from the same section, whose [CLS] would carry
    much of the block's own content; a partner of another document does not. A long document can
    fill a whole batch, so the gauge draws partners from every held-out block. Raises
    ``SchemaError`` where a block has no such partner. Explained in chapter 2
    (``notebooks/02_reliance.ipynb``)."""
    pool = doc_ids if pool_doc_ids is None else pool_doc_ids
    other = doc_ids[:, None] != pool[None, :]
    lonely = (~other.any(1)).nonzero()[:, 0].tolist()
    if lonely:
        raise SchemaError(f"blocks {lonely[:5]}{' ...' if len(lonely) > 5 else ''} have no block of another "
                          "document to take a [CLS] from: the held-out blocks must come from several documents "
                          "(pretraining_data.heldout_set's do unless the held-out corpus is one document)")
    scores = torch.rand(other.shape, generator=generator).masked_fill(~other, -1.0)
    return scores.argmax(1)


def _mean_other_cls(pool_cls: torch.Tensor, pool_doc_ids: torch.Tensor, doc_ids: torch.Tensor) -> torch.Tensor:
    """Per block, the mean late [CLS] of the pool's blocks of other documents (a generic [CLS])."""
    w = (doc_ids[:, None] != pool_doc_ids[None, :]).to(pool_cls.device, pool_cls.dtype)
    return (w @ pool_cls.flatten(1) / w.sum(1, keepdim=True)).view(len(doc_ids), *pool_cls.shape[1:])


def _late_cls_pool(model: nn.Module, batches: Sequence[Mapping[str, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every block's late [CLS] (``[N, 1, H]``, as the head reads it) and document id, over ``batches``."""
    bert = bert_of(model)
    cls = [bert(ids, attention_mask=mask).last_hidden_state[:, :1] for ids, mask, _ in (_inputs(model, b) for b in batches)]
    return torch.cat(cls), torch.cat([b["doc_id"] for b in batches])


RELIANCE_ABLATIONS = ("ablated", "zero", "mean")  # another document's late [CLS], zeros, a mean [CLS]


@torch.no_grad()
def cls_reliance_gauge(model: nn.Module, draws: Sequence[Sequence[Mapping[str, torch.Tensor]]],
                       n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The pre-registered [CLS]-reliance gauge of a Condenser-family model (chapter 2, and the page
    "When does the head need [CLS]?", ``notebooks/10_mechanism.md``).

    ``draws``: mask draws of the same held-out blocks, each a list of batches carrying
    ``doc_id`` (``pretraining_data.heldout_set``'s ``batches`` and ``mask_draws``). On every block
    and draw, with the same masks and early tokens: ``own_loss`` (the head reading its own late
    [CLS]), ``ablated_loss`` (the late [CLS] of a held-out block of another document, from any
    batch: ``other_document_partners``, a fresh draw per mask draw), ``zero_loss`` (a zero vector),
    ``mean_loss`` (the mean late [CLS] of the other documents' held-out blocks) and ``late_loss``
    (the backbone's last layer), in nats per masked token over every draw.

    ``reliance`` = ``gauges.cls_reliance(own, ablated, late)`` (None where undefined),
    ``reliance_zero`` / ``reliance_mean`` the same with the zero / mean [CLS] as the ablation;
    ``noise``: the bootstrap standard error of ``reliance`` over blocks (``n_boot`` resamples,
    each block with all its mask draws, so it covers blocks and masks); ``mask_spread``: the
    standard deviation of the per-draw reliance; ``n_blocks``, ``n_tokens``, ``n_draws``.
    Runs in eval mode and restores it. Explained in page 2b (``notebooks/02_reliance.ipynb``).
    """

    _require_head(model, "cls_reliance_gauge")
    if not draws or not all(draws):
        raise ValueError("cls_reliance_gauge needs at least one mask draw of held-out batches")
    parts = ("late", "own", *RELIANCE_ABLATIONS)
    sums = {k: [] for k in (*parts, "n")}  # per draw: [N] per part
    with _eval_mode(model):
        for d, batches in enumerate(draws):
            g = torch.Generator().manual_seed(seed * 1_000_003 + d)
            per = {k: [] for k in sums}
            if any("doc_id" not in b for b in batches):
                raise SchemaError("the held-out batches carry no doc_id: build them with "
                                  "pretraining_data.heldout_set, which records each block's document")
            pool_cls, pool_docs = _late_cls_pool(model, batches)  # partners from every block
            for batch in batches:
                docs = batch["doc_id"]
                partners = other_document_partners(docs, g, pool_docs)
                late, own, alt, n = head_block_losses(model, batch, lambda cls: [
                    pool_cls[partners.to(pool_cls.device)], torch.zeros_like(cls),
                    _mean_other_cls(pool_cls, pool_docs, docs)])
                for k, v in zip(sums, (late, own, *alt, n)):
                    per[k].append(v)
            for k in sums:
                sums[k].append(torch.cat(per[k]))
    x = {k: torch.stack(v).numpy() for k, v in sums.items()}  # [D, N]
    if len({v.shape for v in x.values()}) != 1:
        raise ValueError("every mask draw must hold the same blocks: build them with pretraining_data.heldout_set")
    total_n = x["n"].sum()
    if total_n == 0:
        raise ValueError("the batches have no masked token; build them with packing.mlm_eval_batches")
    loss = {k: float(x[k].sum() / total_n) for k in parts}
    out: dict[str, Any] = {f"{k}_loss": loss[k] for k in parts}
    out["reliance"] = cls_reliance(loss["own"], loss["ablated"], loss["late"])
    for k in ("zero", "mean"):
        out[f"reliance_{k}"] = cls_reliance(loss["own"], loss[k], loss["late"])
    # blocks with their mask draws are the unit of the bootstrap (masks nested in blocks)
    block = {k: x[k].sum(0) for k in ("late", "own", "ablated")}
    idx = np.random.default_rng(seed).integers(0, block["own"].size, size=(n_boot, block["own"].size))
    own_b, abl_b, late_b = (block[k][idx].sum(1) for k in ("own", "ablated", "late"))
    defined = abl_b > late_b
    boot = (abl_b[defined] - own_b[defined]) / (abl_b[defined] - late_b[defined])
    out["noise"] = float(boot.std(ddof=1)) if defined.sum() > 1 else None
    per_draw = [cls_reliance(*(float(x[k][d].sum() / x["n"][d].sum()) for k in ("own", "ablated", "late")))
                for d in range(len(draws))]
    out["mask_spread"] = (float(np.std(per_draw, ddof=1)) if len(draws) > 1 and None not in per_draw else None)
    out.update(n_blocks=int((x["n"].sum(0) > 0).sum()), n_tokens=int(total_n), n_draws=len(draws))
    return out


@torch.no_grad()
def cls_cosine(model: nn.Module, batches: Iterable[Mapping[str, torch.Tensor]]) -> float:
    """Mean cosine similarity between the late [CLS] vectors of *different* blocks.

    The off-diagonal mean of the cosine matrix of every block's last-layer [CLS] (before any
    pooler), in eval mode. Near 1, the [CLS] vectors are nearly one direction and say little
    about their block; a [CLS] that carries its block's content spreads out. Works for any
    BERT-shaped model (`BertMLM`, `Condenser`, `BertForMaskedLM`, `BertModel`).

    Explained in page 2b (`notebooks/02_reliance.ipynb`) and the study page (`notebooks/09_study.md`).
    """
    was_training = model.training
    model.eval()
    try:
        bert = bert_of(model)
        cls = torch.cat([bert(ids, attention_mask=mask).last_hidden_state[:, 0].double()
                         for ids, mask, _ in (_inputs(model, b) for b in batches)])
        n = len(cls)
        if n < 2:
            raise ValueError(f"cls_cosine needs at least 2 blocks, got {n}")
        x = F.normalize(cls, dim=1)
        total = (x.sum(0) ** 2).sum()  # sum of the whole cosine matrix, diagonal included
        return float((total - n) / (n * (n - 1)))
    finally:
        model.train(was_training)


# ---- Pre-registered rules -------------------------------------------------------------------------

def cls_reliance(l_own: float, l_ablated: float, l_late: float) -> float | None:
    """The [CLS] reliance of a Condenser-family head, pre-registered for C0:

        reliance = (l_ablated - l_own) / (l_ablated - l_late)

    with ``l_own`` the head's held-out MLM loss reading its own late [CLS], ``l_ablated`` reading
    the late [CLS] of a block of another document, and ``l_late`` the backbone's late MLM loss on
    the same masks. Without its own [CLS] the head reads only early layers, so ``l_ablated -
    l_late`` is the deficit that the late information could close; the reliance is the share of
    it that the head's own [CLS] does close: 0 for a head that ignores [CLS], 1 for a head that
    gets everything the late layers know through it (below 0 where its own [CLS] hurts).

    None (undefined) where ``l_ablated <= l_late``: the head already predicts as well as the
    backbone without the block's own [CLS], so there is no deficit for [CLS] to close and no
    share to speak of; the C0 rule counts an undefined reliance as not relying on [CLS].
    Explained in page 2b (``notebooks/02_reliance.ipynb``) and chapter 8
    (``notebooks/08_scorecard.ipynb``).
    """
    deficit = l_ablated - l_late
    if not deficit > 0:
        return None
    return (l_ablated - l_own) / deficit
