"""The bi-encoder of dense retrieval: model, batches, loss step, and loading a checkpoint.

Explained in chapter 4, `notebooks/04_finetune.ipynb`. A query and a passage are encoded
separately into their last-layer CLS vectors and scored by the dot product (coCondenser eq. 13);
training minimises the softmax cross-entropy of each query's positive against its own negatives
and every other passage of the batch (eq. 14, ``losses.retrieval_loss``). ``RetrievalCollator``
builds the batches from Tevatron rows; ``retrieval_step`` is the training step, optionally
through the gradient cache (``gradcache.gradient_cache``) as the authors' GC-DPR runs it.
"""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data.tokenizer import load_tokenizer
from ..modeling.gradcache import gradient_cache
from ..modeling.losses import retrieval_loss
from ..utils.devices import default_device
from ..utils.distributed import gather_with_grad, step_hooks, world_info
from ..utils.errors import SchemaError
from ..utils.loading import check_checkpoint, check_vocabulary, dropout_kwargs, load_encoder
from .pooling import CLS, Pooling, checkpoint_pooling, write_pooling


def embed(encoder: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
          pooling: Pooling = CLS) -> torch.Tensor:
    """One vector per sequence from the last layer, never BERT's pooler: the ``[CLS]`` vector by
    default (the papers and Tevatron), or as ``pooling`` says (``pooling.Pooling``); chapter 4."""
    hidden = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return pooling(hidden, attention_mask)


def cls_embedding(encoder: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The last layer's CLS vector, never the pooler (the papers and Tevatron use the raw CLS); chapter 4."""
    return embed(encoder, input_ids, attention_mask, CLS)


@dataclass
class BiEncoderOutput:
    """``loss`` (eq. 14), ``accuracy`` (share of queries whose positive scores highest in the
    batch) and the representations; ``loss``/``accuracy`` are None when only one side was encoded."""

    loss: torch.Tensor | None = None
    accuracy: torch.Tensor | None = None
    q_reps: torch.Tensor | None = None
    p_reps: torch.Tensor | None = None


class BiEncoder(nn.Module):
    """Query and passage encoders with dot-product scores (coCondenser eq. 13, chapter 4).

    Tied (one encoder, as Tevatron on MS MARCO) by default; ``untied=True`` gives separate query
    and passage copies of the same checkpoint (as DPR on NQ/TriviaQA). Representation: last-layer
    CLS, or the checkpoint's own pooling (``pooling.Pooling``: a sentence-transformers model's mean
    pooling, say). ``forward`` returns the in-batch retrieval loss with ``train_n_passages``
    passages per query (positive first). ``temperature`` None is the pooling's default (1 for dot
    products; 0.05 for unit vectors, as sentence-transformers).
    """

    def __init__(
        self,
        query_encoder: nn.Module,
        passage_encoder: nn.Module | None = None,
        train_n_passages: int = 8,
        temperature: float | None = None,
        pooling: Pooling = CLS,
    ):
        super().__init__()
        self.query_encoder = query_encoder
        # Tied: no second module at all (registering the same one twice would give the state dict
        # shared tensors, which safetensors checkpoints refuse).
        if passage_encoder is not None and passage_encoder is not query_encoder:
            self.passage_encoder = passage_encoder
        self.train_n_passages = train_n_passages
        self.pooling = Pooling.parse(pooling)
        self.temperature = temperature if temperature is not None else self.pooling.default_temperature

    @property
    def untied(self) -> bool:
        return "passage_encoder" in self._modules

    def encoder(self, side: str) -> nn.Module:
        """The query or passage encoder (the same module when tied)."""
        if side not in ("query", "passage"):
            raise ValueError(f"side must be 'query' or 'passage', got {side!r}")
        return self._modules["passage_encoder"] if side == "passage" and self.untied else self.query_encoder

    @classmethod
    def from_pretrained(
        cls,
        name_or_dir: str | os.PathLike,
        untied: bool = False,
        train_n_passages: int = 8,
        temperature: float | None = None,
        dropout: float | None = None,
        pooling: Pooling | str | None = None,
    ) -> "BiEncoder":
        """From a pre-trained checkpoint (dir or Hub id; a Condenser/``BertForMaskedLM`` checkpoint
        loads its backbone), or from a saved ``BiEncoder`` dir (untied ones have ``query/`` and
        ``passage/`` sub-dirs and load untied whatever ``untied`` says). ``dropout``: the encoders'
        dropout for training (``None``: the checkpoint's own). ``pooling``: ``None`` reads the
        checkpoint's (``pooling.checkpoint_pooling``: a sentence-transformers folder's, else CLS)."""
        path = Path(name_or_dir)
        kw = dropout_kwargs(dropout)
        if (path / "query").is_dir() and (path / "passage").is_dir():
            pooling = Pooling.parse(pooling) if pooling is not None else checkpoint_pooling(path / "query")
            return cls(load_encoder(path / "query", **kw), load_encoder(path / "passage", **kw), train_n_passages,
                       temperature, pooling)
        pooling = Pooling.parse(pooling) if pooling is not None else checkpoint_pooling(name_or_dir)
        q = load_encoder(name_or_dir, **kw)
        p = load_encoder(name_or_dir, **kw) if untied else None
        return cls(q, p, train_n_passages, temperature, pooling)

    @property
    def config(self):
        return self.query_encoder.config

    def encode_query(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return embed(self.query_encoder, input_ids, attention_mask, self.pooling)

    def encode_passage(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return embed(self.encoder("passage"), input_ids, attention_mask, self.pooling)

    def compute_loss(self, q: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, accuracy) of eq. 14 for query reps ``[B, H]`` and passage reps ``[B * n, H]``."""
        if p.shape[0] != q.shape[0] * self.train_n_passages:
            raise ValueError(
                f"got {q.shape[0]} queries and {p.shape[0]} passages but train_n_passages={self.train_n_passages}; "
                "build the batch with RetrievalCollator(train_n_passages=...) using the same value"
            )
        loss = retrieval_loss(q, p, self.train_n_passages, temperature=self.temperature)
        return loss, _accuracy(q, p, self.train_n_passages)

    def forward(
        self,
        query_input_ids: torch.Tensor | None = None,
        query_attention_mask: torch.Tensor | None = None,
        passage_input_ids: torch.Tensor | None = None,
        passage_attention_mask: torch.Tensor | None = None,
    ) -> BiEncoderOutput:
        """Encode both sides and return the loss; given one side only, just its representations
        (the gradient cache encodes queries and passages in separate chunks)."""
        q = self.encode_query(query_input_ids, query_attention_mask) if query_input_ids is not None else None
        p = self.encode_passage(passage_input_ids, passage_attention_mask) if passage_input_ids is not None else None
        if q is None or p is None:
            return BiEncoderOutput(q_reps=q, p_reps=p)
        loss, accuracy = self.compute_loss(q, p)
        return BiEncoderOutput(loss=loss, accuracy=accuracy, q_reps=q, p_reps=p)

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs) -> None:
        """Plain Hugging Face dirs: the encoder itself (tied) or ``query/`` and ``passage/`` (untied),
        each also a sentence-transformers folder with this model's pooling (``pooling.write_pooling``)."""
        save_directory = Path(save_directory)
        if self.untied:
            self.query_encoder.save_pretrained(save_directory / "query", **kwargs)
            self.passage_encoder.save_pretrained(save_directory / "passage", **kwargs)
        else:
            self.query_encoder.save_pretrained(save_directory, **kwargs)
        write_pooling(save_directory, self.pooling)


def passage_strings(tokenizer, titles: Sequence[str], texts: Sequence[str]) -> list[str]:
    """Passages as the encoder reads them, Tevatron's ``title [SEP] text`` (text alone without a
    title); chapter 4."""
    sep = f" {tokenizer.sep_token} " if getattr(tokenizer, "sep_token", None) else " "
    return [f"{t}{sep}{x or ''}" if t else str(x or "") for t, x in zip(titles, texts)]


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int,
              width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of token-id lists padded to the longest, or to ``width``
    (one shape for every batch, as XLA wants); chapter 4."""
    width = width or max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


def token_ids(tokenizer, texts: Sequence[str], max_len: int) -> list[list[int]]:
    """Token ids of ``texts``, truncated to ``max_len``, unpadded (chapter 4)."""
    return tokenizer(list(texts), truncation=True, max_length=max_len, padding=False, return_token_type_ids=False)[
        "input_ids"
    ]


class RetrievalCollator:
    """Tevatron rows -> a bi-encoder batch (chapter 4).

    Per query: a random positive first, then ``train_n_passages - 1`` negatives sampled without
    replacement (with replacement, and one warning, when a query has too few). Randomness comes
    from python ``random``, which the training loop seeds per step, so batches replay exactly on
    resume. Output: ``query_input_ids/attention_mask [B, Lq]`` and
    ``passage_input_ids/attention_mask [B * train_n_passages, Lp]``, padded to the batch maximum.
    """

    def __init__(self, tokenizer, q_max_len: int = 32, p_max_len: int = 128, train_n_passages: int = 8):
        if train_n_passages < 1:
            raise ValueError(f"train_n_passages must be >= 1 (1 positive + negatives), got {train_n_passages}")
        self.tokenizer = tokenizer
        self.q_max_len = q_max_len
        self.p_max_len = p_max_len
        self.train_n_passages = train_n_passages
        self._warned = False

    def group(self, example: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The passages of one query: positive first, then sampled negatives."""
        positives = example["positive_passages"]
        if not positives:
            raise SchemaError(f"query {example.get('query_id')!r} has no positive passage; drop it from the training set")
        group = [random.choice(positives)]
        n_neg = self.train_n_passages - 1
        if n_neg == 0:
            return group
        negatives = example["negative_passages"]
        if not negatives:
            raise SchemaError(
                f"query {example.get('query_id')!r} has no negative passages but train_n_passages={self.train_n_passages}; "
                "add BM25 negatives (to_tevatron) or use train_n_passages=1 (in-batch negatives only)"
            )
        if len(negatives) >= n_neg:
            group += random.sample(list(negatives), n_neg)
        else:
            if not self._warned:
                warnings.warn(
                    f"query {example.get('query_id')!r} has {len(negatives)} negatives < {n_neg} needed; "
                    "sampling with replacement (warned once)",
                    stacklevel=2,
                )
                self._warned = True
            group += random.choices(list(negatives), k=n_neg)
        return group

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        queries = [ex["query"] for ex in examples]
        passages = [p for ex in examples for p in self.group(ex)]
        tok = self.tokenizer
        q_ids, q_mask = pad_batch(token_ids(tok, queries, self.q_max_len), tok.pad_token_id)
        strings = passage_strings(tok, [p.get("title") or "" for p in passages], [p["text"] for p in passages])
        p_ids, p_mask = pad_batch(token_ids(tok, strings, self.p_max_len), tok.pad_token_id)
        return {
            "query_input_ids": q_ids,
            "query_attention_mask": q_mask,
            "passage_input_ids": p_ids,
            "passage_attention_mask": p_mask,
        }


def _accuracy(q: torch.Tensor, p: torch.Tensor, n: int) -> torch.Tensor:
    """Share of queries whose positive (passage ``i * n``) scores highest in the batch."""
    with torch.no_grad():
        targets = torch.arange(q.shape[0], device=q.device) * n
        return ((q.float() @ p.float().T).argmax(dim=1) == targets).float().mean()


def load_model_and_tokenizer(
    model: Any, tokenizer=None, device: str | None = None, model_class: type | None = None, caller: str = "loading"
) -> tuple[Any, Any, str | None]:
    """``(model, tokenizer, device)`` from a checkpoint folder / Hub id, or a model object (chapter 4).

    A folder or Hub id is loaded as ``model_class`` (default ``BiEncoder``) with its own tokenizer
    (unless one is passed), and ``device`` becomes the accelerator when there is one
    (``devices.default_device``: a GPU, else a TPU); a model object is
    returned as it is and needs its ``tokenizer`` passed. ``encode``, ``evaluate_retriever``,
    ``mine_hard_negatives`` and ``similarity.evaluate_sts`` all load through here.
    """
    if isinstance(model, (str, os.PathLike)):
        check_checkpoint(model)  # a missing folder is named as the model's, not as its tokenizer's
        tokenizer = load_tokenizer(tokenizer if tokenizer is not None else model)
        name, model = model, (model_class or BiEncoder).from_pretrained(model)
        check_vocabulary(model.config, tokenizer, name)  # else an IndexError in the embeddings, mid-run
        if device is None:
            device = default_device()
    if tokenizer is None:
        raise ValueError(f"{caller}: pass the tokenizer when giving a model object (or a checkpoint folder that has one)")
    return model, tokenizer, device


def retrieval_step(
    model: nn.Module,
    batch: Mapping[str, torch.Tensor],
    accelerator: Any = None,
    chunk_size: int | None = None,
    replay_rng: bool = True,
) -> dict[str, float]:
    """Forward + backward of eq. 14 for one batch, a ``step_fn`` for ``loop.train`` (chapter 4).

    ``chunk_size=None`` (or >= the batch): one forward of both sides, one backward. Otherwise the
    gradient cache (coCondenser eq. 9-12 applied to the fine-tuning loss, as the authors' GC-DPR,
    through ``gradcache.gradient_cache``): queries and passages are encoded ``chunk_size``
    sequences at a time without a graph, the loss's gradient with respect to the representations
    is cached, and each chunk is re-encoded with its recorded RNG state (same dropout masks) and
    back-propagated. Same loss and gradient, one chunk's activations in memory: how DPR's
    128-query batches fit one GPU.

    Distributed (``torch.distributed`` initialised): representations of all processes are
    gathered, so every query also scores the other processes' passages (DPR's cross-device
    negatives); each process back-propagates ``world *`` the global loss because DDP averages
    gradients. An *untied* model under DDP needs ``find_unused_parameters=True`` with the cache (a
    passage chunk's backward does not reach the query encoder).
    """
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 (or None for no gradient cache), got {chunk_size}")
    inner = accelerator.unwrap_model(model) if accelerator is not None else getattr(model, "module", model)
    n, temperature = inner.train_n_passages, inner.temperature
    autocast, backward, no_sync = step_hooks(model, accelerator)
    world, _ = world_info()
    sides = {"query": (batch["query_input_ids"], batch["query_attention_mask"]),
             "passage": (batch["passage_input_ids"], batch["passage_attention_mask"])}
    n_q, n_p = sides["query"][0].shape[0], sides["passage"][0].shape[0]
    if n_p != n_q * n:
        raise ValueError(f"got {n_q} queries and {n_p} passages but train_n_passages={n}")

    def global_loss(q: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q_all, p_all = gather_with_grad(q), gather_with_grad(p)
        return retrieval_loss(q_all, p_all, n, temperature=temperature), _accuracy(q_all, p_all, n)

    if chunk_size is None or chunk_size >= max(n_q, n_p):
        with autocast():
            out = model(query_input_ids=sides["query"][0], query_attention_mask=sides["query"][1],
                        passage_input_ids=sides["passage"][0], passage_attention_mask=sides["passage"][1])
        loss, acc = global_loss(out.q_reps.float(), out.p_reps.float())
        backward(world * loss)
        return {"loss": float(loss.detach()), "accuracy": float(acc)}

    chunks = [(side, s) for side, (ids, _) in sides.items() for s in range(0, ids.shape[0], chunk_size)]
    n_query_chunks = sum(side == "query" for side, _ in chunks)

    def forward(chunk: tuple[str, int], with_grad: bool) -> tuple[torch.Tensor, None]:
        side, s = chunk
        ids, mask = sides[side]
        with autocast():  # a one-sided forward returns only that side's representations
            out = model(**{f"{side}_input_ids": ids[s:s + chunk_size], f"{side}_attention_mask": mask[s:s + chunk_size]})
        return (out.q_reps if side == "query" else out.p_reps).float(), None

    def scaled_loss(reps: list[torch.Tensor]) -> torch.Tensor:
        nonlocal loss, acc
        loss, acc = global_loss(torch.cat(reps[:n_query_chunks]), torch.cat(reps[n_query_chunks:]))
        return world * loss

    loss = acc = torch.zeros(())
    gradient_cache(chunks, forward, scaled_loss, backward, no_sync, replay_rng, device=sides["query"][0].device)
    return {"loss": float(loss.detach()), "accuracy": float(acc)}
