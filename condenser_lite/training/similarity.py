"""Sentence similarity (STS-b) with a bi-encoder, as in Condenser section 4.2 / Sentence-BERT.

Explained in chapter 7, `notebooks/07_sentence_similarity.ipynb`.

Both sentences go through the same encoder; each is represented by its last-layer CLS vector
(the representation the Condenser pre-training shapes). Training regresses the cosine of the two
vectors onto the gold score in [0, 1] (mean squared error, Sentence-BERT's ``CosineSimilarityLoss``);
evaluation is the Spearman correlation between cosine and gold on the test pairs. The paper runs
it with 500 and 1,000 sampled training pairs and the full 5,749 (Table 1), using the
Sentence-BERT settings: Adam, lr 2e-5, linear schedule, 4 epochs (8 for the small sets, the better
of {4, 8} for BERT).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr
from torch import nn

from ..data.tokenizer import load_tokenizer
from ..modeling.losses import cosine_regression_loss
from ..retrieval.biencoder import cls_embedding, load_model_and_tokenizer, pad_batch, token_ids
from ..retrieval.search import encode
from ..utils.checks import check_positive
from ..utils.roles import inherited
from ..utils.loading import dropout_kwargs, load_encoder
from .loop import TrainConfig, train


@dataclass(frozen=True)
class STSConfig(TrainConfig):
    """The STS-b bi-encoder (Condenser section 4.2, Sentence-BERT's recipe): the loop's
    ``TrainConfig`` (``lr``, ``batch_size``, ...) for cosine regression with AdamW;
    ``epochs_low_data`` for the small training sizes, ``epochs_full`` for the whole set (below 1:
    only part of it, subsampled in time); ``dropout``: the encoder's during training (``None``:
    the checkpoint's own). Chapter 7."""

    # the loop's settings a run sets itself from the training set's size and the run's seed
    epochs: float = inherited(TrainConfig, "epochs", unread="a run trains epochs_low_data or epochs_full")
    max_steps: int | None = inherited(TrainConfig, "max_steps", unread="a run trains epochs_low_data or epochs_full")
    seed: int = inherited(TrainConfig, "seed", unread="a run's seed comes from the preset's seeds")
    eval_every: int | None = inherited(TrainConfig, "eval_every", unread="STS-b evaluates after training")
    batch_size: int = 16
    epochs_low_data: float = 2.0
    epochs_full: float = 0.5
    max_len: int = 32
    dropout: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, "epochs_low_data", "epochs_full", "max_len")

__all__ = ["SentenceEncoder", "SimilarityOutput", "PairCollator", "finetune_sts", "evaluate_sts", "sample_pairs"]


@dataclass
class SimilarityOutput:
    """``loss`` (MSE of cosine vs gold) and ``cosine_mean`` (a cheap sanity metric for the log)."""

    loss: torch.Tensor
    cosine_mean: torch.Tensor


class SentenceEncoder(nn.Module):
    """One encoder for both sentences, last-layer CLS, cosine regression (chapter 7)."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    @classmethod
    def from_pretrained(cls, name_or_dir: str | os.PathLike, dropout: float | None = None) -> "SentenceEncoder":
        """From a checkpoint dir or Hub id (a Condenser checkpoint loads its backbone);
        ``dropout``: the encoder's for training (``None``: the checkpoint's own)."""
        return cls(load_encoder(name_or_dir, **dropout_kwargs(dropout)))

    @property
    def config(self):
        return self.encoder.config

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return cls_embedding(self.encoder, input_ids, attention_mask)

    def forward(
        self,
        input_ids_a: torch.Tensor,
        attention_mask_a: torch.Tensor,
        input_ids_b: torch.Tensor,
        attention_mask_b: torch.Tensor,
        score: torch.Tensor,
    ) -> SimilarityOutput:
        a = self.embed(input_ids_a, attention_mask_a)
        b = self.embed(input_ids_b, attention_mask_b)
        loss = cosine_regression_loss(a, b, score)
        with torch.no_grad():
            cos = torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1).mean()
        return SimilarityOutput(loss=loss, cosine_mean=cos)

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs) -> None:
        self.encoder.save_pretrained(save_directory, **kwargs)


class PairCollator:
    """``{sentence1, sentence2, score}`` rows -> a padded batch for ``SentenceEncoder`` (chapter 7)."""

    def __init__(self, tokenizer, max_len: int = 64):
        self.tokenizer = tokenizer
        self.max_len = max_len

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        pad = self.tokenizer.pad_token_id
        ids_a, mask_a = pad_batch(token_ids(self.tokenizer, [e["sentence1"] for e in examples], self.max_len), pad)
        ids_b, mask_b = pad_batch(token_ids(self.tokenizer, [e["sentence2"] for e in examples], self.max_len), pad)
        score = torch.tensor([float(e["score"]) for e in examples], dtype=torch.float32)
        return {"input_ids_a": ids_a, "attention_mask_a": mask_a, "input_ids_b": ids_b, "attention_mask_b": mask_b, "score": score}


def _check_pairs(pairs: Any, where: str) -> None:
    names = getattr(pairs, "column_names", None) or (list(pairs[0]) if len(pairs) else [])
    for f in ("sentence1", "sentence2", "score"):
        if f not in names:
            raise ValueError(f"{where}: pairs lack the field {f!r} (have {names}); load them with data.load_stsb")
    if len(pairs) == 0:
        raise ValueError(f"{where}: no sentence pairs")


def sample_pairs(ds: Any, n: int | str | None, seed: int = 0):
    """A seeded random subset of ``n`` training pairs (500, 1000; ``None`` or ``"full"``: all), chapter 7.
    Subsets with one seed are nested: the 500 pairs are the first half of the 1,000."""
    if n is None or n == "full":
        return ds
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"sample_pairs: n must be a positive integer, None or 'full', got {n!r}")
    if n > len(ds):
        raise ValueError(f"sample_pairs: asked for n={n} pairs but the data set has only {len(ds)}; use n <= {len(ds)} or 'full'")
    return ds.select(np.random.default_rng(seed).permutation(len(ds))[:n].tolist())


def finetune_sts(init_checkpoint: str | os.PathLike, train_pairs: Any, tokenizer, cfg: TrainConfig,
                 output_dir: str | os.PathLike, max_len: int = 64, dropout: float | None = None,
                 resume: bool = True, progress: bool | None = None) -> SentenceEncoder:
    """Fine-tune a checkpoint on STS pairs with the cosine regression loss (chapter 7).

    ``cfg`` is a ``loop.TrainConfig`` (the papers' scale: lr 2e-5, batch 16, 4 epochs, the
    ``paper`` preset's ``similarity.STSConfig``). The model and tokenizer are saved to
    ``output_dir`` (plain Hugging Face dir). ``dropout``: the encoder's during training
    (``None``: the checkpoint's own).
    """
    _check_pairs(train_pairs, "finetune_sts")
    tokenizer = load_tokenizer(tokenizer if tokenizer is not None else init_checkpoint)
    model = SentenceEncoder.from_pretrained(init_checkpoint, dropout=dropout)
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and max_len > limit:
        raise ValueError(f"max_len={max_len} exceeds the checkpoint's max_position_embeddings={limit}")
    model.train_result = train(model, train_pairs, cfg, output_dir=output_dir,
                               collate_fn=PairCollator(tokenizer, max_len), resume=resume, progress=progress)
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return model


def evaluate_sts(
    model: Any,
    pairs: Any,
    tokenizer=None,
    max_len: int = 64,
    batch_size: int = 128,
    device: str | None = None,
) -> float:
    """Spearman correlation between cos(CLS(s1), CLS(s2)) and the gold score (chapter 7).

    ``model``: a ``SentenceEncoder``, any transformers model, or a checkpoint dir (its tokenizer
    is loaded from there when ``tokenizer`` is None).
    """
    _check_pairs(pairs, "evaluate_sts")
    model, tokenizer, device = load_model_and_tokenizer(model, tokenizer, device, SentenceEncoder, caller="evaluate_sts")
    if hasattr(pairs, "column_names"):  # datasets.Dataset: columns
        s1, s2, gold = list(pairs["sentence1"]), list(pairs["sentence2"]), list(pairs["score"])
    else:  # a list of dicts
        s1, s2, gold = ([p[k] for p in pairs] for k in ("sentence1", "sentence2", "score"))
    gold = np.asarray(gold, dtype=np.float64)
    # Encode every distinct sentence once (STS-b repeats many).
    unique = list(dict.fromkeys(s1 + s2))
    embs = encode(model, unique, tokenizer, max_len=max_len, batch_size=batch_size, device=device, side="query")
    row = {s: i for i, s in enumerate(unique)}
    a = embs[[row[s] for s in s1]].astype(np.float64)
    b = embs[[row[s] for s in s2]].astype(np.float64)
    cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    return float(spearmanr(cos, gold).statistic)
