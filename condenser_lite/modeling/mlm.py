"""BERT's masked-language-model objective as both pre-training models compute it, and where it sits
inside them.

* ``masked_lm_loss``: the mean cross-entropy over the masked tokens, projecting only the masked
  positions (on a CPU the vocabulary projection over every position is the most expensive part of
  a small model's step); ``BertMLM`` trains on it, ``Condenser`` twice (Condenser eq. 9-10);
* ``masked_token_losses``: the same cross-entropy per masked token, which the gauges sum per block;
* ``bert_of`` and ``mlm_head_of``: the encoder and the MLM head inside any model of the book, the
  one unwrapping every lens and search uses.

Explained in chapter 2, `notebooks/02_condenser.ipynb`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def masked_token_losses(mlm_head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy at each masked position (``labels != -100``) and the row it belongs to,
    projecting only the masked positions: what ``masked_lm_loss`` averages and the gauges sum
    per block. Explained in chapter 2, `notebooks/02_condenser.ipynb`."""
    selected = labels != -100
    ce = F.cross_entropy(mlm_head(hidden[selected]).float(), labels[selected], reduction="none")
    return ce, selected.nonzero()[:, 0]


def masked_lm_loss(mlm_head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over masked tokens, projecting only the masked positions.

    Identical to `BertForMaskedLM(labels=...)` (which projects every position and
    then ignores the -100 labels), at a fraction of the cost.

    Explained in chapter 2, `notebooks/02_condenser.ipynb`.
    """
    selected = labels != -100
    if not bool(selected.any()):
        raise ValueError(
            "labels has no masked position (all -100), so the MLM loss is undefined; "
            "build batches with modeling.masking.MLMCollator, which masks at least one token per sequence."
        )
    logits = mlm_head(hidden[selected])  # [n_masked, vocab]
    # F.cross_entropy's own mean, not masked_token_losses(...).mean(): the same number up to the
    # last bits, and training reproduces its committed runs only bit for bit
    return F.cross_entropy(logits.float(), labels[selected])


def bert_of(model: nn.Module) -> nn.Module:
    """The plain encoder (a `BertModel`) inside a `BertMLM` or `Condenser` (``.backbone``), a
    `BertForMaskedLM`, or a `BertModel` itself: the one unwrapping every lens and search uses.
    Chapter 2."""
    model = getattr(model, "backbone", model)
    return getattr(model, "base_model", model)


def mlm_head_of(model: nn.Module) -> nn.Module:
    """The MLM head (``.cls``) of a `BertMLM`, `Condenser` or `BertForMaskedLM`: the projection
    both Condenser losses share. Chapter 2."""
    backbone = getattr(model, "backbone", model)
    if not hasattr(backbone, "cls"):
        raise TypeError(f"{type(model).__name__} has no MLM head (.cls): pass a BertMLM, Condenser or BertForMaskedLM")
    return backbone.cls
