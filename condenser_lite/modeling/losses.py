"""The losses the papers write down, one function each.

* ``span_contrastive_loss``: coCondenser's corpus-aware span loss (Gao & Callan 2022, eq. 6),
  explained in chapter 3, ``notebooks/03_cocondenser.ipynb``.
* ``retrieval_loss``: the fine-tuning loss with in-batch negatives (coCondenser eq. 14,
  Condenser eq. 12), explained in chapter 4, ``notebooks/04_finetune.ipynb``.
* ``cosine_regression_loss``: Sentence-BERT's regression objective for STS-b, explained in
  chapter 7, ``notebooks/07_sentence_similarity.ipynb``.

All scores are raw dot products, as in the authors' code: no normalisation and no temperature
unless ``temperature`` is given. Scores are computed in float32 even when the representations come
out of an autocast region, because a softmax over thousands of bf16/fp16 logits loses the small
differences the loss is made of.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "span_contrastive_loss",
    "span_contrastive_loss_local",
    "span_contrastive_accuracy",
    "retrieval_loss",
    "cosine_regression_loss",
]


def _check_reduction(reduction: str) -> None:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _scale(scores: torch.Tensor, temperature: float | None) -> torch.Tensor:
    if temperature is None:
        return scores
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (or None for raw dot products), got {temperature}")
    return scores / temperature


def span_contrastive_loss_local(
    local_reps: torch.Tensor,
    all_reps: torch.Tensor,
    offset: int,
    temperature: float | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """coCondenser eq. 6 for the rows ``offset .. offset + len(local_reps)`` of a span batch.

    ``all_reps`` ``[2N, H]`` is the whole batch of late-CLS vectors laid out as
    ``[d1s1, d1s2, d2s1, d2s2, ...]`` (partners adjacent); ``local_reps`` are rows
    ``offset : offset + m`` of it (the same values; they may be the live, differentiable copy).
    For global row ``r`` the positive is its partner ``r ^ 1`` (2i <-> 2i+1), every other row of
    ``all_reps`` is a negative, and the row itself is removed from the softmax by setting its
    score to ``-inf`` (the indicator ``I[ij != kl]`` in eq. 6):

        L_r = -log exp(<h_r, h_{r^1}>) / sum_{k != r} exp(<h_r, h_k>)

    ``offset`` may be odd (a chunk boundary can split a pair). Returns the mean over the local
    rows (``reduction="mean"``), their sum, or the per-row losses (``"none"``).
    Explained in chapter 3, ``notebooks/03_cocondenser.ipynb``.
    """
    _check_reduction(reduction)
    if local_reps.dim() != 2 or all_reps.dim() != 2 or local_reps.shape[1] != all_reps.shape[1]:
        raise ValueError(
            f"expected local_reps [m, H] and all_reps [2N, H], got {tuple(local_reps.shape)} and {tuple(all_reps.shape)}"
        )
    n_all, m = all_reps.shape[0], local_reps.shape[0]
    if n_all % 2:
        raise ValueError(
            f"span batch must hold partner pairs (an even number of rows, [d1s1, d1s2, ...]), got {n_all} rows; "
            "build batches with SpanPairCollator"
        )
    if not 0 <= offset <= n_all - m:
        raise ValueError(f"offset {offset} with {m} local rows does not fit in {n_all} rows")
    rows = torch.arange(offset, offset + m, device=local_reps.device)
    scores = _scale(local_reps.float() @ all_reps.float().T, temperature)  # [m, 2N]
    # Exclude self-similarity: with raw dot products <h, h> = |h|^2 would otherwise be the largest score.
    scores = scores.masked_fill(F.one_hot(rows, n_all).bool(), float("-inf"))
    targets = rows ^ 1  # partner of row 2i is 2i+1 and vice versa
    return F.cross_entropy(scores, targets, reduction=reduction)


def span_contrastive_loss(
    reps: torch.Tensor, temperature: float | None = None, reduction: str = "mean"
) -> torch.Tensor:
    """coCondenser's corpus-aware contrastive span loss (Gao & Callan 2022, eq. 6).

    ``reps`` ``[2n, H]``: late-CLS vectors of ``n`` documents' span pairs, partners adjacent
    (rows ``2i`` and ``2i+1`` come from the same document). With ``<.,.>`` the raw dot product,

        L^co_ij = -log  exp(<h_i1, h_i2>) / sum_{kl != ij} exp(<h_ij, h_kl>)

    so each span's positive is its partner and all ``2n - 2`` other spans of the batch are its
    negatives; the span itself is excluded (its score is set to ``-inf``). ``reduction="mean"``
    gives ``(1/2n) sum_ij L^co_ij``, the contrastive half of eq. 7.
    Explained in chapter 3, ``notebooks/03_cocondenser.ipynb``.
    """
    return span_contrastive_loss_local(reps, reps, 0, temperature=temperature, reduction=reduction)


@torch.no_grad()
def span_contrastive_accuracy(reps: torch.Tensor) -> float:
    """Fraction of spans whose highest-scoring other span is their partner (a training metric for
    eq. 6). Explained in chapter 3, ``notebooks/03_cocondenser.ipynb``."""
    n = reps.shape[0]
    scores = reps.float() @ reps.float().T
    scores.fill_diagonal_(float("-inf"))
    targets = torch.arange(n, device=reps.device) ^ 1
    return (scores.argmax(dim=1) == targets).float().mean().item()


def retrieval_loss(
    q: torch.Tensor,
    p: torch.Tensor,
    train_n_passages: int,
    temperature: float | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Dense-retrieval fine-tuning loss with in-batch negatives (coCondenser eq. 14, Condenser eq. 12).

    ``q`` ``[B, H]`` query vectors, ``p`` ``[B * train_n_passages, H]`` passage vectors grouped per query:
    rows ``i*n .. i*n + n - 1`` belong to query ``i`` and the first of them (``i * train_n_passages``) is its
    positive, the rest its hard negatives. Every passage of the batch is a candidate for every query
    (the other queries' positives and negatives serve as extra negatives, as in Tevatron), and

        L_i = -log exp(s(q_i, d_i+)) / sum_{d in batch} exp(s(q_i, d)),  s = dot product.

    Explained in chapter 4, ``notebooks/04_finetune.ipynb``.
    """
    _check_reduction(reduction)
    if train_n_passages < 1:
        raise ValueError(f"train_n_passages must be >= 1 (positive + negatives per query), got {train_n_passages}")
    if q.dim() != 2 or p.dim() != 2 or q.shape[1] != p.shape[1]:
        raise ValueError(f"expected q [B, H] and p [B*train_n_passages, H], got {tuple(q.shape)} and {tuple(p.shape)}")
    if p.shape[0] != q.shape[0] * train_n_passages:
        raise ValueError(
            f"got {q.shape[0]} queries and {p.shape[0]} passages; with train_n_passages={train_n_passages} "
            f"expected {q.shape[0] * train_n_passages} passages (positive first, then negatives, per query)"
        )
    scores = _scale(q.float() @ p.float().T, temperature)  # [B, B*n]
    targets = torch.arange(q.shape[0], device=q.device) * train_n_passages
    return F.cross_entropy(scores, targets, reduction=reduction)


def cosine_regression_loss(a: torch.Tensor, b: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
    """Sentence-BERT's regression objective: mean squared error between cos(a_i, b_i) and the gold
    similarity ``score_i`` (STS-b scores rescaled to [0, 1]).
    Explained in chapter 7, ``notebooks/07_sentence_similarity.ipynb``.
    """
    if a.shape != b.shape or a.dim() != 2:
        raise ValueError(f"expected a and b of the same shape [B, H], got {tuple(a.shape)} and {tuple(b.shape)}")
    score = torch.as_tensor(score, dtype=torch.float32, device=a.device).reshape(-1)
    if score.shape[0] != a.shape[0]:
        raise ValueError(f"got {a.shape[0]} pairs but {score.shape[0]} scores")
    cos = F.cosine_similarity(a.float(), b.float(), dim=-1)
    return F.mse_loss(cos, score)
