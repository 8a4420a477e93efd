"""Fine-tuning a pre-trained checkpoint as a dense retriever: the papers' two-round recipe.

Explained in chapter 4, `notebooks/04_finetune.ipynb`. As coCondenser section 3.4 and the
authors' Tevatron recipe run it:

1. round 1: fine-tune the *pre-trained* checkpoint as a bi-encoder on BM25 negatives
   (``finetune_retriever``; the training rows come from ``tevatron``);
2. mine hard negatives with the round-1 retriever (``mine_hard_negatives``: its top
   ``mine_depth`` passages, labelled positives dropped, ``n_mined`` sampled) and add them to the
   BM25 negatives;
3. round 2: fine-tune the *pre-trained* checkpoint again (not the round-1 model) on the enlarged
   negative pool.

``finetune_round`` is one round of that recipe with the settings of a ``finetune.FinetuneConfig``
(the protocol runs its rounds as separate cached jobs through it); ``two_round`` runs both, as
the command line does.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from ..data.beir import corpus_columns
from ..data.tevatron import validate_training_schema
from ..data.tokenizer import load_tokenizer, tokenizer_key
from ..retrieval.biencoder import BiEncoder, RetrievalCollator, load_model_and_tokenizer, retrieval_step
from ..retrieval.pooling import CLS, Pooling
from ..retrieval.search import encode, encode_corpus, search_indices
from ..utils.cache import output_lock
from ..utils.checks import check_positive
from ..utils.roles import having, inherited
from ..utils.errors import ConfigError
from ..utils.loading import checkpoint_key
from .checkpoint import save_model
from .loop import TrainConfig, train


def rows_key(rows: Any) -> str:
    """Training rows by content, for the resume check (chapter 4): each query's id and text and
    the doc ids of its positives and negatives, in order (not the passages' texts: MS MARCO's
    400k queries x 30 negatives would take minutes to hash). Mined negatives change it."""
    h = hashlib.sha256()

    def add(values: list) -> None:
        h.update("\x1f".join(map(str, values)).encode() + b"\x1e")

    if hasattr(rows, "with_format"):  # datasets.Dataset: columnar, without building Python rows
        columns = ["query_id", "query", "positive_passages", "negative_passages"]
        for batch in rows.select_columns(columns).with_format("arrow").iter(batch_size=10_000):
            add(batch["query_id"].to_pylist())
            add(batch["query"].to_pylist())
            for col in columns[2:]:
                add(pc.list_value_length(batch[col]).to_pylist())
                add(pc.struct_field(pc.list_flatten(batch[col]), "docid").to_pylist())
    else:
        for row in rows:
            add([row["query_id"], row["query"], *(len(row[c]) for c in ("positive_passages", "negative_passages"))])
            add([p["docid"] for c in ("positive_passages", "negative_passages") for p in row[c]])
    return h.hexdigest()[:16]

def finetune_retriever(
    init_checkpoint: str | os.PathLike,
    train_dataset: Any,
    tokenizer,
    cfg: TrainConfig,
    output_dir: str | os.PathLike,
    q_max_len: int = 32,
    p_max_len: int = 128,
    train_n_passages: int = 8,
    untied: bool = False,
    temperature: float | None = None,
    chunk_size: int | None = None,
    dropout: float | None = None,
    resume: bool = True,
    progress: bool | None = None,
    pooling: str | None = None,
) -> BiEncoder:
    """Fine-tune a pre-trained checkpoint as a dense retriever (coCondenser eq. 14, chapter 4).

    ``cfg`` is a ``loop.TrainConfig`` (a round of a ``FinetuneConfig``: ``round_config``); its
    ``batch_size`` counts *queries* (each brings ``train_n_passages`` passages). The final model
    and tokenizer are saved to ``output_dir``
    as a plain Hugging Face dir (``query/`` and ``passage/`` when untied), loadable with
    ``BiEncoder.from_pretrained`` or ``encode``; the loop's log and resumable checkpoint sit
    beside it. ``chunk_size``: sequences per gradient-cache chunk (``retrieval_step``);
    None trains with plain forward/backward. ``dropout``: the encoder's during fine-tuning
    (``None``: the checkpoint's own). ``pooling``: how a text becomes one vector
    (``pooling.Pooling``; ``None``: the checkpoint's own, ``[CLS]`` unless a sentence-transformers
    folder says otherwise). A checkpoint left in ``output_dir`` is resumed
    (or, finished, reused) only if it was trained from the same weights (by content), tokenizer,
    training rows (``rows_key``) and settings; otherwise ``CheckpointError`` names what differs.
    The folder is locked while training (``cache.output_lock``).
    """
    validate_training_schema(train_dataset)
    tokenizer = load_tokenizer(tokenizer if tokenizer is not None else init_checkpoint)
    depends_on = {"init": checkpoint_key(init_checkpoint), "tokenizer": tokenizer_key(tokenizer),
                  "data": rows_key(train_dataset), "q_max_len": q_max_len, "p_max_len": p_max_len,
                  "train_n_passages": train_n_passages, "untied": untied, "temperature": temperature,
                  "chunk_size": chunk_size, "dropout": dropout}
    model = BiEncoder.from_pretrained(init_checkpoint, untied=untied, train_n_passages=train_n_passages,
                                      temperature=temperature, dropout=dropout, pooling=pooling)
    if model.pooling != CLS:  # the papers' [CLS] adds nothing, so the keys of runs before pooling existed hold
        depends_on["pooling"] = str(model.pooling)
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and max(q_max_len, p_max_len) > limit:
        raise ConfigError(
            f"q_max_len={q_max_len} / p_max_len={p_max_len} exceed the checkpoint's max_position_embeddings={limit}; "
            f"use lengths <= {limit}"
        )
    collator = RetrievalCollator(tokenizer, q_max_len=q_max_len, p_max_len=p_max_len, train_n_passages=train_n_passages)
    step_fn = functools.partial(retrieval_step, chunk_size=chunk_size) if chunk_size else None
    with output_lock(output_dir):
        result = train(model, train_dataset, cfg, output_dir=output_dir, collate_fn=collator, step_fn=step_fn,
                       depends_on=depends_on, resume=resume, progress=progress)
        model.train_result = result  # history and log path, for the loss-curve chapter
        save_model(model, output_dir)
        tokenizer.save_pretrained(output_dir)
    return model


def mine_hard_negatives(
    model_dir: Any,
    train_dataset: Any,
    corpus: Any,
    tokenizer=None,
    depth: int = 200,
    n: int = 30,
    seed: int = 0,
    q_max_len: int = 32,
    p_max_len: int = 128,
    batch_size: int = 128,
    device: str | None = None,
    corpus_embeddings: tuple[np.ndarray, list[str]] | None = None,
    keep_bm25: bool = True,
):
    """Hard negatives from a round-1 retriever (chapter 4; the papers' round 2 data).

    For each training query: retrieve the top ``depth`` passages with the model, drop the
    labelled positives, sample ``n`` of the rest (seeded). With ``keep_bm25=True`` (the papers'
    round 2: "BM25 plus mined negatives") they are appended to the query's existing BM25
    ``negative_passages`` (duplicates skipped); otherwise they replace them. Returns a new
    Tevatron-schema ``Dataset``. ``corpus_embeddings`` (``(embeddings, ids)`` of the same model, e.g.
    the float16 memmap ``search.encode_corpus(path=)`` wrote) skip re-encoding the corpus.
    """
    validate_training_schema(train_dataset)
    model, tokenizer, device = load_model_and_tokenizer(model_dir, tokenizer, device, caller="mine_hard_negatives")
    ids, titles, texts = corpus_columns(corpus, lazy=True)
    if corpus_embeddings is None:
        p_embs = encode(model, (titles, texts), tokenizer, max_len=p_max_len, batch_size=batch_size, device=device, side="passage")
    else:
        p_embs, emb_ids = corpus_embeddings
        if list(emb_ids) != ids:
            raise ValueError("corpus_embeddings were computed for a different corpus (ids differ in value or order)")
    queries = [str(x) for x in train_dataset["query"]]
    q_embs = encode(model, queries, tokenizer, max_len=q_max_len, batch_size=batch_size, device=device, side="query")
    _, ranked = search_indices(p_embs, q_embs, depth)  # exact, shard by shard: p_embs may be a memmap
    rng = random.Random(seed)
    mined: list[list[dict]] = []
    positives_col = train_dataset["positive_passages"]
    for i, pos in enumerate(positives_col):
        pos_ids = {str(p["docid"]) for p in pos}
        pool = [int(j) for j in ranked[i] if j >= 0 and ids[j] not in pos_ids]
        pick = rng.sample(pool, min(n, len(pool)))
        mined.append([{"docid": ids[j], "title": str(titles[j] or ""), "text": str(texts[j] or "")} for j in pick])

    def add(example: dict, idx: int) -> dict:
        old = list(example["negative_passages"]) if keep_bm25 else []
        seen = {p["docid"] for p in old}
        example["negative_passages"] = old + [p for p in mined[idx] if p["docid"] not in seen]
        return example

    return train_dataset.map(add, with_indices=True, desc=None)


def round_config(recipe: FinetuneConfig, round_number: int, n_queries: int, seed: int = 0,
                 **overrides: Any) -> FinetuneConfig:
    """``recipe`` as the loop runs one round of it on ``n_queries`` training queries (chapter 4):
    ``epochs_round1`` or ``epochs_round2`` epochs of ``batch_size`` queries, at least ``min_steps``
    updates (the small training sets of the scaled-down book), or the recipe's ``max_steps`` when
    set, with the round's ``seed``; every other setting (``lr``, ...) is the recipe's own.
    ``overrides`` (the loop's fields: ``max_steps``, ``log_every``, ...) win."""
    if round_number not in (1, 2):
        raise ConfigError(f"round_number must be 1 or 2, got {round_number}")
    if n_queries < recipe.batch_size:
        raise ConfigError(f"a training set of {n_queries} queries is smaller than the batch of {recipe.batch_size}; "
                         "use more queries or a smaller batch_size")
    epochs = recipe.epochs_round1 if round_number == 1 else recipe.epochs_round2
    steps = recipe.max_steps or max(recipe.min_steps, int(epochs * (n_queries // recipe.batch_size)), 1)
    return dataclasses.replace(recipe, **{"max_steps": steps, "seed": seed, **overrides})


def finetune_round(
    init_checkpoint: str | os.PathLike,
    train_dataset: Any,
    tokenizer,
    recipe: FinetuneConfig,
    output_dir: str | os.PathLike,
    round_number: int = 1,
    seed: int = 0,
    round1: Any = None,
    corpus: Any = None,
    corpus_embeddings: tuple[np.ndarray, list[str]] | None = None,
    resume: bool = True,
    progress: bool | None = None,
    **overrides: Any,
) -> tuple[BiEncoder, Any]:
    """One round of the papers' recipe (coCondenser section 3.4, chapter 4); returns the model and
    the training rows it was trained on.

    Round 1 fine-tunes ``init_checkpoint`` on ``train_dataset``'s BM25 negatives. Round 2 first
    mines hard negatives with ``round1`` (the round-1 retriever or its folder) over ``corpus``
    (reusing ``corpus_embeddings`` of that retriever when given, else encoding the corpus into a
    scratch memmap in ``output_dir`` in the recipe's ``embedding_dtype``) and adds them to the BM25
    negatives, then fine-tunes the same *pre-trained* ``init_checkpoint`` again, not the round-1
    model. The model is saved to ``output_dir``; ``overrides`` go to ``round_config``; ``resume`` and
    ``progress`` to ``loop.train``.
    """
    if round_number == 2:
        if round1 is None or corpus is None:
            raise ValueError("round 2 mines negatives with the round-1 retriever: pass round1=<its model or folder> and corpus=")
        scratch = Path(output_dir) / "mining_embeddings.npy"
        if corpus_embeddings is None:  # the round-1 model's corpus, straight to disk (NQ: 21M passages)
            Path(output_dir).mkdir(parents=True, exist_ok=True)
            corpus_embeddings = encode_corpus(round1, corpus, tokenizer, recipe.p_max_len, path=scratch,
                                              dtype=recipe.embedding_dtype, batch_size=recipe.encode_batch)
        train_dataset = mine_hard_negatives(
            round1, train_dataset, corpus, tokenizer, depth=recipe.mine_depth, n=recipe.n_mined, seed=seed,
            q_max_len=recipe.q_max_len, p_max_len=recipe.p_max_len, batch_size=recipe.encode_batch,
            corpus_embeddings=corpus_embeddings)
        del corpus_embeddings
        scratch.unlink(missing_ok=True)
    cfg = round_config(recipe, round_number, len(train_dataset), seed, **overrides)
    model = finetune_retriever(
        init_checkpoint, train_dataset, tokenizer, cfg, output_dir, q_max_len=recipe.q_max_len,
        p_max_len=recipe.p_max_len, train_n_passages=recipe.train_n_passages, untied=recipe.untied,
        temperature=recipe.temperature, chunk_size=recipe.chunk_size, dropout=recipe.dropout, resume=resume,
        progress=progress, pooling=recipe.pooling)
    return model, train_dataset


def two_round(
    init_checkpoint: str | os.PathLike,
    train_dataset: Any,
    corpus: Any,
    tokenizer,
    recipe: FinetuneConfig,
    output_dir: str | os.PathLike,
    seed: int = 0,
    **overrides: Any,
) -> tuple[BiEncoder, Any]:
    """The papers' two rounds (chapter 4): ``finetune_round`` 1 into ``output_dir/round1``, then
    round 2 from the same pre-trained checkpoint, mining with the round-1 model, into
    ``output_dir/round2``. Returns the round-2 model and its training rows (BM25 + mined)."""
    tokenizer = load_tokenizer(tokenizer if tokenizer is not None else init_checkpoint)
    out = Path(output_dir)
    finetune_round(init_checkpoint, train_dataset, tokenizer, recipe, out / "round1", 1, seed, **overrides)
    # mine with the saved round-1 model, so it is not held in memory while round 2 trains
    return finetune_round(init_checkpoint, train_dataset, tokenizer, recipe, out / "round2", 2, seed,
                          round1=out / "round1", corpus=corpus, **overrides)


@dataclass(frozen=True)
class FinetuneConfig(TrainConfig):
    """The retriever recipe (coCondenser section 4.1, Tevatron): the loop's ``TrainConfig`` (``lr``,
    ``weight_decay``, ...) and the retriever's own settings. ``batch_size`` queries per update,
    each with ``train_n_passages`` passages (its positive first, then negatives); round 1 trains
    ``epochs_round1`` epochs on BM25 negatives (``n_bm25_negatives`` kept per query), round 2
    ``epochs_round2`` on BM25 + ``n_mined`` negatives sampled from the round-1 retriever's top
    ``mine_depth``; at least ``min_steps`` updates per round, or ``max_steps`` when set.
    ``untied``: separate query and passage encoders (DPR on NQ); ``chunk_size``: sequences per
    gradient-cache chunk (as a coCondenser stage's); ``encode_batch``: sequences per batch when
    encoding for search and mining;
    ``embedding_dtype``: how the corpus embeddings are stored on disk for search and mining
    (``"float16"`` halves MS MARCO's 27 GB; scores are computed in float32); ``dropout``: the
    encoder's during fine-tuning (``None``: the checkpoint's own); ``pooling``: how a text becomes
    one vector, ``cls``, ``mean``, ``cls+norm`` or ``mean+norm`` (``None``: the checkpoint's own,
    ``pooling.checkpoint_pooling``). Chapter 4."""

    # the loop's settings a round sets itself (the loop's ``epochs``, the run's ``seed``), or that
    # would change the loss (accumulating splits the in-batch negatives): not paths of the tree
    epochs: float = inherited(TrainConfig, "epochs", unread="a round trains epochs_round1 or epochs_round2")
    seed: int = inherited(TrainConfig, "seed",
                          unread="a run's seed comes from finetune --seed or the preset's seeds")
    grad_accum: int = inherited(TrainConfig, "grad_accum", unread="the contrastive loss needs the whole batch: "
                                                               "set chunk_size for the gradient cache")
    eval_every: int | None = inherited(TrainConfig, "eval_every",
                                       unread="fine-tuning evaluates nothing while it trains")
    batch_size: int = 8
    weight_decay: float = 0.0
    train_n_passages: int = 2
    q_max_len: int = 48
    p_max_len: int = 64
    epochs_round1: float = 2.0
    epochs_round2: float = 2.0
    min_steps: int = 60
    untied: bool = False
    temperature: float | None = None
    chunk_size: int | None = None
    n_bm25_negatives: int = 30
    mine_depth: int = 100
    n_mined: int = 30
    encode_batch: int = 256
    embedding_dtype: str = "float32"
    dropout: float | None = None
    pooling: str | None = None

    def __post_init__(self) -> None:
        if self.grad_accum != 1:  # before the loop's checks, which would only ask for a divisor
            raise ConfigError(f"FinetuneConfig.grad_accum={self.grad_accum}: {having(FinetuneConfig, 'unread')['grad_accum']}")
        super().__post_init__()
        check_positive(self, "train_n_passages", "q_max_len", "p_max_len", "epochs_round1", "epochs_round2",
                       "encode_batch")
        if self.pooling is not None:
            Pooling.parse(self.pooling)  # a misspelt pooling is refused here, not at the first update
        if self.temperature is not None and not self.temperature > 0:  # the loss divides by it
            raise ConfigError(f"FinetuneConfig.temperature={self.temperature!r} is invalid: use a value > 0, or None "
                              "(the pooling's default: 1 for dot products)")
