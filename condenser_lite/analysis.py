"""CLS attention entropy per layer (Clark et al., 2019), the lens of Condenser section 5.

For layer ``l`` and head ``a``, the CLS token's attention is a distribution ``alpha`` over the
(non-padding) positions of the sequence. Its entropy

    H_{l,a} = - sum_j alpha_j log alpha_j

is large when CLS looks broadly and small when it focuses on a few tokens (often [CLS]/[SEP]
themselves). The paper averages over heads and over 1k Wikipedia sections and plots one value per
layer, before and after fine-tuning: BERT's profile moves a lot, Condenser's little.
Explained in chapter 1 (``notebooks/01_readiness.ipynb``) and chapter 5
(``notebooks/05_attention_entropy.ipynb``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
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
