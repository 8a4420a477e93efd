"""Dense retrieval: Tevatron-schema training data, BM25, the bi-encoder, encoding, FAISS search,
hard-negative mining and the two-round fine-tuning recipe of the papers.

Explained in chapter 4, `notebooks/04_finetune.ipynb`.

The pipeline, as coCondenser section 3.4 and the authors' Tevatron recipe run it:

1. training data in Tevatron's schema (``query_id, query, positive_passages, negative_passages``,
   passages ``{docid, title, text}``), negatives from BM25 (``to_tevatron``);
2. round 1: fine-tune the *pre-trained* checkpoint as a bi-encoder (``finetune_retriever``):
   last-layer CLS, dot product, each query against its positive, its negatives and every other
   passage of the batch (``losses.retrieval_loss``);
3. encode the corpus, exact inner-product search, evaluate (``encode``, ``search``,
   ``evaluate_retriever``);
4. mine hard negatives with the round-1 model (``mine_hard_negatives``: top 200, labelled
   positives dropped, 30 sampled) and add them to the BM25 negatives;
5. round 2: fine-tune the *pre-trained* checkpoint again (not the round-1 model) on the enlarged
   negative pool (``two_round`` runs 2-5).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import random
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .data import PASSAGE_FIELDS, TEVATRON_FIELDS, BeirData, SchemaError

__all__ = [
    "SchemaError",
    "TEVATRON_FIELDS",
    "validate_training_schema",
    "check_qrels",
    "to_tevatron",
    "sample_queries",
    "tevatron_eval_set",
    "BM25Index",
    "bm25_search",
    "BiEncoder",
    "BiEncoderOutput",
    "RetrievalCollator",
    "retrieval_step",
    "encode",
    "encode_corpus",
    "FaissIndex",
    "search",
    "write_trec_run",
    "read_trec_run",
    "mine_hard_negatives",
    "finetune_retriever",
    "evaluate_retriever",
    "two_round",
    "RetrieverPreset",
    "RETRIEVER_PRESETS",
    "train_config_from_preset",
]

# ---------------------------------------------------------------------------------------
# Data: corpus / query views, schema checks, BEIR -> Tevatron
# ---------------------------------------------------------------------------------------


def _column_names(data: Any) -> list[str]:
    names = getattr(data, "column_names", None)
    if names is None and isinstance(data, Sequence) and len(data) and isinstance(data[0], Mapping):
        names = list(data[0].keys())
    return list(names or [])


def _corpus_lists(corpus: Any) -> tuple[list[str], list[str], list[str]]:
    """(ids, titles, texts) of a corpus given as a BEIR ``Dataset[_id, title, text]``, a Tevatron
    ``Dataset[docid, title, text]``, a list of such dicts, or ``{id: text}`` / ``{id: {title, text}}``."""
    if isinstance(corpus, Mapping):
        ids = [str(k) for k in corpus]
        vals = list(corpus.values())
        if vals and isinstance(vals[0], Mapping):
            return ids, [str(v.get("title") or "") for v in vals], [str(v.get("text") or "") for v in vals]
        return ids, [""] * len(ids), [str(v) for v in vals]
    names = _column_names(corpus)
    id_col = "_id" if "_id" in names else "docid" if "docid" in names else None
    if id_col is None or "text" not in names:
        raise SchemaError(
            f"corpus needs an id column ('_id' as in BEIR or 'docid' as in Tevatron) and 'text'; got columns {names}"
        )
    if hasattr(corpus, "column_names"):  # datasets.Dataset: columnar access is fast
        ids = [str(x) for x in corpus[id_col]]
        texts = [str(x or "") for x in corpus["text"]]
        titles = [str(x or "") for x in corpus["title"]] if "title" in names else [""] * len(ids)
    else:
        ids = [str(r[id_col]) for r in corpus]
        texts = [str(r.get("text") or "") for r in corpus]
        titles = [str(r.get("title") or "") for r in corpus]
    if not ids:
        raise SchemaError("corpus is empty")
    return ids, titles, texts


def _query_lists(queries: Any) -> tuple[list[str], list[str]]:
    """(ids, texts) of queries given as ``Dataset[_id, text]``, Tevatron rows or ``{id: text}``."""
    if isinstance(queries, Mapping):
        return [str(k) for k in queries], [str(v) for v in queries.values()]
    names = _column_names(queries)
    if "_id" in names and "text" in names:
        id_col, text_col = "_id", "text"
    elif "query_id" in names and "query" in names:
        id_col, text_col = "query_id", "query"
    else:
        raise SchemaError(f"queries need columns ('_id', 'text') or ('query_id', 'query'); got {names}")
    if hasattr(queries, "column_names"):
        return [str(x) for x in queries[id_col]], [str(x) for x in queries[text_col]]
    return [str(r[id_col]) for r in queries], [str(r[text_col]) for r in queries]


def validate_training_schema(dataset: Any) -> None:
    """Raise ``SchemaError`` naming the first missing field of Tevatron's training schema
    (chapter 4): ``query_id, query, positive_passages, negative_passages``, each passage
    ``{docid, title, text}``. Checks the column names and the first rows, not every row."""
    names = _column_names(dataset)
    for f in TEVATRON_FIELDS:
        if f not in names:
            raise SchemaError(
                f"training data lacks the field {f!r} (columns: {names}); Tevatron's schema is "
                f"{list(TEVATRON_FIELDS)} with passages {list(PASSAGE_FIELDS)}. Build it from a BEIR set "
                "with retrieval.to_tevatron(...)"
            )
    if len(dataset) == 0:
        raise SchemaError("training data has no queries (0 rows); check the split and the qrels")
    for i in range(min(len(dataset), 3)):
        row = dataset[i]
        if not row["positive_passages"]:
            raise SchemaError(f"query {row['query_id']!r} (row {i}) has no positive_passages; drop it or fix the qrels")
        for key in ("positive_passages", "negative_passages"):
            for p in row[key][:1]:
                for f in PASSAGE_FIELDS:
                    if f not in p:
                        raise SchemaError(
                            f"{key} of query {row['query_id']!r} lacks the field {f!r} (has {sorted(p)}); "
                            f"each passage needs {list(PASSAGE_FIELDS)} (title may be empty)"
                        )


def check_qrels(qrels: Mapping[str, Mapping[str, int]], corpus_ids: Sequence[str], query_ids: Sequence[str] | None = None) -> None:
    """Fail early, with a count and examples, when qrels point at documents (or queries) that
    are not there: a wrong corpus or split would otherwise just score zero (chapter 4)."""
    if not qrels:
        raise SchemaError("qrels are empty: no query has a relevance label; check the split name")
    known = set(corpus_ids)
    missing = sorted({d for docs in qrels.values() for d in docs if d not in known})
    if missing:
        raise SchemaError(
            f"{len(missing)} document ids in the qrels are not in the corpus (e.g. {missing[:5]}); "
            "the qrels and the corpus come from different data sets or versions"
        )
    if query_ids is not None:
        qknown = set(query_ids)
        qmissing = sorted(q for q in qrels if q not in qknown)
        if qmissing:
            raise SchemaError(
                f"{len(qmissing)} query ids in the qrels have no query text (e.g. {qmissing[:5]}); "
                "the qrels and the queries come from different data sets or versions"
            )


def _as_beir(beir_data: Any, data_dir: str | None):
    if isinstance(beir_data, str):
        from .data import load_beir

        return load_beir(beir_data, data_dir=data_dir)
    for attr in ("corpus", "queries", "qrels"):
        if not hasattr(beir_data, attr):
            raise TypeError(f"expected a BEIR set (data.load_beir) or its name, got {type(beir_data).__name__} without .{attr}")
    return beir_data


def to_tevatron(
    beir_data: Any,
    split: str = "train",
    n_negatives: int = 30,
    bm25_depth: int = 100,
    data_dir: str | None = None,
    bm25_kwargs: Mapping[str, Any] | None = None,
):
    """Tevatron training rows from a BEIR set, with BM25 negatives (chapter 4).

    ``beir_data`` is what ``data.load_beir`` returns (or a BEIR name, loaded from ``data_dir``).
    For each query of ``qrels[split]`` with at least one positive (grade > 0): its positives, and
    as negatives the ``n_negatives`` highest BM25 passages among the top ``bm25_depth`` that are
    not labelled positive (the papers keep 30 BM25 negatives per query; the collator samples
    from them each step). Returns a ``datasets.Dataset``.
    """
    import datasets

    if n_negatives < 0 or bm25_depth < 1:
        raise ValueError(f"need n_negatives >= 0 and bm25_depth >= 1, got {n_negatives} and {bm25_depth}")
    beir = _as_beir(beir_data, data_dir)
    if split not in beir.qrels:
        raise SchemaError(f"no qrels for split {split!r}; available: {sorted(beir.qrels)}")
    ids, titles, texts = _corpus_lists(beir.corpus)
    qids_all, qtexts_all = _query_lists(beir.queries)
    positives = {q: [d for d, g in docs.items() if g > 0] for q, docs in beir.qrels[split].items()}
    positives = {q: p for q, p in positives.items() if p}
    if not positives:
        raise SchemaError(f"split {split!r} has no query with a positive label; nothing to train on")
    check_qrels({q: dict.fromkeys(p, 1) for q, p in positives.items()}, ids, qids_all)
    qtext = dict(zip(qids_all, qtexts_all))
    qids = [q for q in qids_all if q in positives]  # keep the query file's order
    row_of = {d: i for i, d in enumerate(ids)}
    index = BM25Index((ids, titles, texts), **(bm25_kwargs or {}))
    run = index.search({q: qtext[q] for q in qids}, k=bm25_depth + max(len(p) for p in positives.values()))

    def passage(d: str) -> dict:
        i = row_of[d]
        return {"docid": d, "title": titles[i], "text": texts[i]}

    rows = []
    for q in qids:
        pos = set(positives[q])
        ranked = sorted(run.get(q, {}).items(), key=lambda x: -x[1])[:bm25_depth + len(pos)]
        negs = [d for d, _ in ranked if d not in pos][: min(n_negatives, bm25_depth)]
        rows.append(
            {
                "query_id": q,
                "query": qtext[q],
                "positive_passages": [passage(d) for d in positives[q]],
                "negative_passages": [passage(d) for d in negs],
            }
        )
    features = datasets.Features(
        {
            "query_id": datasets.Value("string"),
            "query": datasets.Value("string"),
            "positive_passages": [{k: datasets.Value("string") for k in PASSAGE_FIELDS}],
            "negative_passages": [{k: datasets.Value("string") for k in PASSAGE_FIELDS}],
        }
    )
    return datasets.Dataset.from_list(rows, features=features)


def sample_queries(dataset: Any, n: int, seed: int = 0):
    """A seeded random subset of ``n`` training queries (the papers' low-data settings, chapter 4).

    Subsets are nested: with the same seed, the 500-query sample is the first half of the
    1,000-query sample, so a learning curve compares like with like.
    """
    size = len(dataset)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"sample_queries: n must be a positive integer, got {n!r}")
    if n > size:
        raise ValueError(f"sample_queries: asked for n={n} queries but the data set has only {size}; use n <= {size}")
    order = np.random.default_rng(seed).permutation(size)[:n]
    return dataset.select(order.tolist())


def tevatron_eval_set(dev_dataset: Any, corpus: Any, split: str = "dev", name: str = "tevatron") -> BeirData:
    """A BEIR-style evaluation set (``corpus``, ``queries``, ``qrels``) from Tevatron data:
    queries and their labelled positives from ``dev_dataset`` (Tevatron schema), passages from
    the Tevatron corpus (``docid, title, text``). This is how MS MARCO dev is evaluated (chapter 4)."""
    import datasets

    names = _column_names(dev_dataset)
    for f in ("query_id", "query", "positive_passages"):
        if f not in names:
            raise SchemaError(f"evaluation queries lack the field {f!r} (columns: {names})")
    qids = [str(x) for x in dev_dataset["query_id"]]
    qrels = {
        q: {str(p["docid"]): 1 for p in pos}
        for q, pos in zip(qids, dev_dataset["positive_passages"])
        if pos
    }
    queries = datasets.Dataset.from_dict({"_id": qids, "text": [str(x) for x in dev_dataset["query"]]})
    if "docid" in _column_names(corpus):
        corpus = corpus.rename_column("docid", "_id")
    return BeirData(name=name, corpus=corpus, queries=queries, qrels={split: qrels})


# ---------------------------------------------------------------------------------------
# BM25
# ---------------------------------------------------------------------------------------


def _stemmer(stem: bool | None):
    """PyStemmer's English Snowball stemmer if installed (``stem=None``: auto). With
    ``stem=True`` and no PyStemmer, the pure-Python ``snowballstemmer`` (same algorithm) is used."""
    if stem is False:
        return None
    try:
        import Stemmer  # PyStemmer

        return Stemmer.Stemmer("english").stemWords
    except ImportError:
        if stem is None:
            return None
    try:
        import snowballstemmer

        return snowballstemmer.stemmer("english").stemWords
    except ImportError:
        raise ImportError("stem=True needs PyStemmer (pip install PyStemmer) or snowballstemmer") from None


class BM25Index:
    """A bm25s index over ``title + " " + text`` (chapter 4).

    Lower-cased, English stop words removed, bm25s defaults (Lucene variant, k1=1.5, b=0.75);
    Snowball-stemmed if PyStemmer is installed (``stem=None``, the default), or as asked. SciFact
    test nDCG@10 / R@100: 0.686 / 0.913 stemmed, 0.662 / 0.876 unstemmed (BEIR reports 0.665
    nDCG@10 for its Elasticsearch BM25)."""

    def __init__(self, corpus: Any, stem: bool | None = None, k1: float = 1.5, b: float = 0.75, method: str = "lucene"):
        import bm25s

        if isinstance(corpus, tuple) and len(corpus) == 3:
            self.ids, titles, texts = corpus
        else:
            self.ids, titles, texts = _corpus_lists(corpus)
        self.stemmer = _stemmer(stem)
        docs = [f"{t} {x}".strip() for t, x in zip(titles, texts)]
        tokens = bm25s.tokenize(docs, lower=True, stopwords="en", stemmer=self.stemmer, show_progress=False)
        self.retriever = bm25s.BM25(k1=k1, b=b, method=method)
        self.retriever.index(tokens, show_progress=False)

    def search(self, queries: Any, k: int = 100) -> dict[str, dict[str, float]]:
        import bm25s

        qids, qtexts = _query_lists(queries)
        if not qids:
            raise ValueError("bm25 search: the query set is empty")
        k = min(k, len(self.ids))
        tokens = bm25s.tokenize(qtexts, lower=True, stopwords="en", stemmer=self.stemmer, show_progress=False)
        docs, scores = self.retriever.retrieve(tokens, k=k, show_progress=False)
        run: dict[str, dict[str, float]] = {}
        for i, q in enumerate(qids):
            # bm25s pads with score-0 hits when fewer documents match; those are not retrieved.
            run[q] = {self.ids[d]: float(s) for d, s in zip(docs[i], scores[i]) if s > 0}
        return run


def bm25_search(corpus: Any, queries: Any, k: int = 100, **bm25_kwargs) -> dict[str, dict[str, float]]:
    """BM25 run ``{qid: {docid: score}}`` of the top ``k`` passages per query (chapter 4).
    ``corpus``: BEIR/Tevatron corpus or ``{id: text}``; ``queries``: ``Dataset[_id, text]`` or ``{id: text}``."""
    return BM25Index(corpus, **bm25_kwargs).search(queries, k=k)


# ---------------------------------------------------------------------------------------
# The bi-encoder
# ---------------------------------------------------------------------------------------


def _load_encoder(name_or_dir: str | os.PathLike) -> nn.Module:
    """The plain transformer (no MLM head, no pooler) of a checkpoint dir or Hub id."""
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(name_or_dir)
    kwargs = {"add_pooling_layer": False} if config.model_type == "bert" else {}
    return AutoModel.from_pretrained(name_or_dir, **kwargs)


def _cls(encoder: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    # Last layer's CLS vector, never the pooler (the papers and Tevatron use the raw CLS).
    return encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0]


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
    CLS. ``forward`` returns the in-batch retrieval loss with ``train_n_passages`` passages per
    query (positive first).
    """

    def __init__(
        self,
        query_encoder: nn.Module,
        passage_encoder: nn.Module | None = None,
        train_n_passages: int = 8,
        temperature: float | None = None,
    ):
        super().__init__()
        self.query_encoder = query_encoder
        # Tied: no second module at all (registering the same one twice would give the state dict
        # shared tensors, which safetensors checkpoints refuse).
        if passage_encoder is not None and passage_encoder is not query_encoder:
            self.passage_encoder = passage_encoder
        self.train_n_passages = train_n_passages
        self.temperature = temperature

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
    ) -> "BiEncoder":
        """From a pre-trained checkpoint (dir or Hub id; a Condenser/``BertForMaskedLM`` checkpoint
        loads its backbone), or from a saved ``BiEncoder`` dir (untied ones have ``query/`` and
        ``passage/`` sub-dirs and load untied whatever ``untied`` says)."""
        path = Path(name_or_dir)
        if (path / "query").is_dir() and (path / "passage").is_dir():
            return cls(_load_encoder(path / "query"), _load_encoder(path / "passage"), train_n_passages, temperature)
        q = _load_encoder(name_or_dir)
        p = _load_encoder(name_or_dir) if untied else None
        return cls(q, p, train_n_passages, temperature)

    @property
    def config(self):
        return self.query_encoder.config

    def encode_query(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return _cls(self.query_encoder, input_ids, attention_mask)

    def encode_passage(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return _cls(self.encoder("passage"), input_ids, attention_mask)

    def compute_loss(self, q: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, accuracy) of eq. 14 for query reps ``[B, H]`` and passage reps ``[B * n, H]``."""
        from .losses import retrieval_loss

        if p.shape[0] != q.shape[0] * self.train_n_passages:
            raise ValueError(
                f"got {q.shape[0]} queries and {p.shape[0]} passages but train_n_passages={self.train_n_passages}; "
                "build the batch with RetrievalCollator(train_n_passages=...) using the same value"
            )
        loss = retrieval_loss(q, p, self.train_n_passages, temperature=self.temperature)
        with torch.no_grad():
            targets = torch.arange(q.shape[0], device=q.device) * self.train_n_passages
            accuracy = ((q.float() @ p.float().T).argmax(dim=1) == targets).float().mean()
        return loss, accuracy

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
        """Plain Hugging Face dirs: the encoder itself (tied) or ``query/`` and ``passage/`` (untied)."""
        save_directory = Path(save_directory)
        if self.untied:
            self.query_encoder.save_pretrained(save_directory / "query", **kwargs)
            self.passage_encoder.save_pretrained(save_directory / "passage", **kwargs)
        else:
            self.query_encoder.save_pretrained(save_directory, **kwargs)


# ---------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------


def _passage_strings(tokenizer, titles: Sequence[str], texts: Sequence[str]) -> list[str]:
    # Tevatron's format: "title [SEP] text" as one segment (text alone when there is no title).
    sep = f" {tokenizer.sep_token} " if getattr(tokenizer, "sep_token", None) else " "
    return [f"{t}{sep}{x}" if t else x for t, x in zip(titles, texts)]


def _pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


def _tokenize(tokenizer, texts: Sequence[str], max_len: int) -> list[list[int]]:
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
        q_ids, q_mask = _pad(_tokenize(tok, queries, self.q_max_len), tok.pad_token_id)
        strings = _passage_strings(tok, [p.get("title") or "" for p in passages], [p["text"] for p in passages])
        p_ids, p_mask = _pad(_tokenize(tok, strings, self.p_max_len), tok.pad_token_id)
        return {
            "query_input_ids": q_ids,
            "query_attention_mask": q_mask,
            "passage_input_ids": p_ids,
            "passage_attention_mask": p_mask,
        }


# ---------------------------------------------------------------------------------------
# One training step, optionally with the gradient cache
# ---------------------------------------------------------------------------------------


def retrieval_step(
    model: nn.Module,
    batch: Mapping[str, torch.Tensor],
    accelerator: Any = None,
    chunk_size: int | None = None,
    replay_rng: bool = True,
) -> dict[str, float]:
    """Forward + backward of eq. 14 for one batch, a ``step_fn`` for ``training.train`` (chapter 4).

    ``chunk_size=None`` (or >= the batch): one forward of both sides, one backward. Otherwise the
    gradient cache (coCondenser eq. 9-12 applied to the fine-tuning loss, as the authors' GC-DPR):
    pass 1 encodes queries and passages ``chunk_size`` sequences at a time without a graph, the loss
    and its gradient with respect to the representations are computed on the detached vectors, and
    pass 2 re-encodes each chunk with its recorded RNG state (same dropout masks) and
    back-propagates ``<rep, cached gradient>``. Same loss and gradient, one chunk's activations in
    memory: how DPR's 128-query batches fit one GPU.

    Distributed (``torch.distributed`` initialised): representations of all processes are
    gathered, so every query also scores the other processes' passages (DPR's cross-device
    negatives); each process back-propagates ``world *`` the global loss because DDP averages
    gradients. An *untied* model under DDP needs ``find_unused_parameters=True`` with the cache (a
    passage chunk's backward does not reach the query encoder).
    """
    from .gradcache import RandContext, gather_with_grad, world_info
    from .losses import retrieval_loss

    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 (or None for no gradient cache), got {chunk_size}")
    inner = accelerator.unwrap_model(model) if accelerator is not None else getattr(model, "module", model)
    n, temperature = inner.train_n_passages, inner.temperature
    autocast = accelerator.autocast if accelerator is not None else contextlib.nullcontext
    backward = accelerator.backward if accelerator is not None else (lambda loss: loss.backward())
    world, rank = world_info()
    q_ids, q_mask = batch["query_input_ids"], batch["query_attention_mask"]
    p_ids, p_mask = batch["passage_input_ids"], batch["passage_attention_mask"]
    n_q, n_p = q_ids.shape[0], p_ids.shape[0]
    if n_p != n_q * n:
        raise ValueError(f"got {n_q} queries and {n_p} passages but train_n_passages={n}")

    def global_loss(q: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q_all, p_all = gather_with_grad(q), gather_with_grad(p)
        loss = retrieval_loss(q_all, p_all, n, temperature=temperature)
        with torch.no_grad():
            targets = torch.arange(q_all.shape[0], device=q_all.device) * n
            acc = ((q_all @ p_all.T).argmax(dim=1) == targets).float().mean()
        return loss, acc, q_all

    if chunk_size is None or chunk_size >= max(n_q, n_p):
        with autocast():
            out = model(query_input_ids=q_ids, query_attention_mask=q_mask,
                        passage_input_ids=p_ids, passage_attention_mask=p_mask)
        loss, acc, _ = global_loss(out.q_reps.float(), out.p_reps.float())
        backward(world * loss)
        return {"loss": float(loss.detach()), "accuracy": float(acc)}

    def side(ids: torch.Tensor, mask: torch.Tensor, prefix: str) -> list[dict[str, torch.Tensor]]:
        return [{f"{prefix}_input_ids": ids[s:s + chunk_size], f"{prefix}_attention_mask": mask[s:s + chunk_size]}
                for s in range(0, ids.shape[0], chunk_size)]

    chunks = [("q", c) for c in side(q_ids, q_mask, "query")] + [("p", c) for c in side(p_ids, p_mask, "passage")]

    def rep(kind: str, out: BiEncoderOutput) -> torch.Tensor:
        return (out.q_reps if kind == "q" else out.p_reps).float()

    # Pass 1: no graph; record each chunk's RNG state so pass 2 draws the same dropout masks.
    states, reps = [], {"q": [], "p": []}
    with torch.no_grad():
        for kind, chunk in chunks:
            states.append(RandContext())
            with autocast():
                reps[kind].append(rep(kind, model(**chunk)))
    q = torch.cat(reps["q"]).requires_grad_()
    p = torch.cat(reps["p"]).requires_grad_()
    loss, acc, _ = global_loss(q, p)
    grad_q, grad_p = torch.autograd.grad(world * loss, [q, p])
    cache = {"q": list(grad_q.split(chunk_size)), "p": list(grad_p.split(chunk_size))}
    # Pass 2: re-encode with grad and back-propagate the surrogate <rep, cached gradient> (eq. 12).
    no_sync = (lambda: accelerator.no_sync(model)) if accelerator is not None else (
        model.no_sync if hasattr(model, "no_sync") else contextlib.nullcontext)
    for i, ((kind, chunk), state) in enumerate(zip(chunks, states)):
        last = i == len(chunks) - 1
        with contextlib.nullcontext() if last else no_sync():
            with state if replay_rng else contextlib.nullcontext():
                with autocast():
                    out = model(**chunk)
            backward((rep(kind, out) * cache[kind].pop(0)).sum())
    return {"loss": float(loss.detach()), "accuracy": float(acc)}


# ---------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------


def _pick_encoder(model: Any, side: str) -> nn.Module:
    from transformers import PreTrainedModel

    if isinstance(model, BiEncoder):
        return model.encoder(side)
    inner = getattr(model, "encoder", None)
    if isinstance(inner, PreTrainedModel):  # e.g. similarity.SentenceEncoder
        return inner
    if isinstance(model, PreTrainedModel):
        return model.base_model  # BertForMaskedLM -> its BertModel; BertModel -> itself
    raise TypeError(f"cannot encode with a {type(model).__name__}; pass a BiEncoder, a transformers model or a checkpoint dir")


def _autocast(device: torch.device, amp: bool | None):
    if device.type == "cuda" and amp is not False:
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.autocast("cuda", dtype=dtype)
    return contextlib.nullcontext()


@torch.inference_mode()
def encode(
    model_or_dir: Any,
    texts: Sequence[str] | tuple[Sequence[str], Sequence[str]],
    tokenizer=None,
    max_len: int = 128,
    batch_size: int = 128,
    device: str | torch.device | None = None,
    side: str | None = None,
    amp: bool | None = None,
    chunk_size: int = 65536,
) -> np.ndarray:
    """Embed texts with the last-layer CLS, ``float32 [N, H]`` in input order (chapter 4).

    ``texts`` is a list of strings (queries) or a ``(titles, texts)`` pair (passages, encoded as
    ``title [SEP] text``). ``side`` picks a ``BiEncoder``'s query or passage encoder (default:
    passage for a pair, query otherwise). Batches are formed after sorting by length, so little
    compute goes to padding; eval mode, no grad, bf16/fp16 autocast on a GPU (``amp=False`` turns
    it off). Texts are tokenised ``chunk_size`` at a time to bound memory on large corpora.
    With ``device`` the model is moved there (and stays); by default it runs where it is
    (a checkpoint dir is loaded onto the GPU when there is one).
    """
    if isinstance(model_or_dir, (str, os.PathLike)):
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model_or_dir)
        model_or_dir = BiEncoder.from_pretrained(model_or_dir)
        if device is None and torch.cuda.is_available():
            device = "cuda"
    if tokenizer is None:
        raise ValueError("encode: pass the tokenizer (or a checkpoint dir that contains one)")
    is_pair = isinstance(texts, tuple) and len(texts) == 2 and not isinstance(texts[0], str)
    side = side or ("passage" if is_pair else "query")
    if side not in ("query", "passage"):
        raise ValueError(f"encode: side must be 'query' or 'passage', got {side!r}")
    strings = _passage_strings(tokenizer, texts[0], texts[1]) if is_pair else [str(t) for t in texts]
    encoder = _pick_encoder(model_or_dir, side)
    limit = getattr(encoder.config, "max_position_embeddings", None)
    if limit is not None and max_len > limit:
        raise ValueError(f"encode: max_len={max_len} exceeds the model's max_position_embeddings={limit}; use max_len <= {limit}")
    if device is not None:
        encoder.to(device)
    dev = next(encoder.parameters()).device
    hidden = encoder.config.hidden_size
    out = np.zeros((len(strings), hidden), dtype=np.float32)
    was_training = encoder.training
    encoder.eval()
    try:
        for start in range(0, len(strings), chunk_size):
            ids = _tokenize(tokenizer, strings[start : start + chunk_size], max_len)
            order = np.argsort([-len(s) for s in ids], kind="stable")  # longest first: OOM shows at once
            for b in range(0, len(order), batch_size):
                rows = order[b : b + batch_size]
                input_ids, mask = _pad([ids[r] for r in rows], tokenizer.pad_token_id)
                with _autocast(dev, amp):
                    reps = _cls(encoder, input_ids.to(dev), mask.to(dev))
                out[start + rows] = reps.float().cpu().numpy()
    finally:
        encoder.train(was_training)
    return out


def encode_corpus(model: Any, corpus: Any, tokenizer, p_max_len: int = 128, **kwargs) -> tuple[np.ndarray, list[str]]:
    """``(embeddings, doc_ids)`` of a BEIR or Tevatron corpus (chapter 4)."""
    ids, titles, texts = _corpus_lists(corpus)
    return encode(model, (titles, texts), tokenizer, max_len=p_max_len, side="passage", **kwargs), ids


# ---------------------------------------------------------------------------------------
# FAISS search
# ---------------------------------------------------------------------------------------


def _available_memory() -> int:
    """Bytes of available RAM (``MemAvailable`` in /proc/meminfo; total pages elsewhere)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30  # unknown: assume a modest 8 GiB


class FaissIndex:
    """Inner-product FAISS index over passage embeddings (chapter 4).

    ``index_type="flat"`` (default) is exact search, as the papers use; ``"hnsw"`` (HNSW32) and
    ``"ivf"`` (IVF with about 4*sqrt(N) lists, trained on the vectors) are approximate options for
    corpora whose flat index does not fit; any other string is passed to ``faiss.index_factory``.
    Before building, the index size is checked against ``memory_budget`` bytes (default: 80% of
    available RAM) and a clear error suggests the alternatives.
    """

    def __init__(
        self,
        passage_embs: np.ndarray,
        passage_ids: Sequence[str],
        index_type: str = "flat",
        memory_budget: int | None = None,
        nprobe: int = 32,
    ):
        import faiss

        embs = np.ascontiguousarray(passage_embs, dtype=np.float32)
        if embs.ndim != 2 or embs.shape[0] != len(passage_ids):
            raise ValueError(f"passage_embs must be [N, H] with N = len(passage_ids) = {len(passage_ids)}, got {embs.shape}")
        if embs.shape[0] == 0:
            raise ValueError("cannot build an index over an empty corpus")
        n, dim = embs.shape
        budget = int(0.8 * _available_memory()) if memory_budget is None else int(memory_budget)
        per_vector = {"flat": 4 * dim, "ivf": 4 * dim + 8, "hnsw": 4 * dim + 2 * 32 * 4}.get(index_type, 4 * dim)
        need = n * per_vector
        if need > budget:
            raise MemoryError(
                f"a {index_type!r} index of {n:,} x {dim} float32 vectors needs about {need / 2**30:.1f} GiB, "
                f"over the memory budget of {budget / 2**30:.1f} GiB; use index_type='ivf' or 'hnsw' with less memory "
                "per vector (e.g. a factory string like 'IVF4096,PQ64'), search shards of the corpus and merge the top-k, "
                "or raise memory_budget"
            )
        self.ids = list(passage_ids)
        metric = faiss.METRIC_INNER_PRODUCT
        if index_type == "flat":
            self.index = faiss.IndexFlatIP(dim)
        elif index_type == "hnsw":
            self.index = faiss.index_factory(dim, "HNSW32,Flat", metric)
        elif index_type == "ivf":
            nlist = max(1, min(int(4 * math.sqrt(n)), n // 39 or 1))  # faiss wants >= 39 points per list
            self.index = faiss.index_factory(dim, f"IVF{nlist},Flat", metric)
        else:
            self.index = faiss.index_factory(dim, index_type, metric)
        if not self.index.is_trained:
            self.index.train(embs)
        if hasattr(self.index, "nprobe"):
            self.index.nprobe = nprobe
        self.index.add(embs)

    def search_indices(self, query_embs: np.ndarray, k: int, batch_size: int = 4096) -> tuple[np.ndarray, np.ndarray]:
        """``(scores [Q, k], row indices [Q, k])``; -1 where fewer than k passages were found."""
        q = np.ascontiguousarray(query_embs, dtype=np.float32)
        k = min(k, len(self.ids))
        scores = np.empty((q.shape[0], k), dtype=np.float32)
        idx = np.empty((q.shape[0], k), dtype=np.int64)
        for s in range(0, q.shape[0], batch_size):
            scores[s : s + batch_size], idx[s : s + batch_size] = self.index.search(q[s : s + batch_size], k)
        return scores, idx

    def search(self, query_embs: np.ndarray, query_ids: Sequence[str], k: int = 100) -> dict[str, dict[str, float]]:
        if len(query_ids) != len(query_embs):
            raise ValueError(f"got {len(query_embs)} query embeddings but {len(query_ids)} query ids")
        scores, idx = self.search_indices(query_embs, k)
        return {
            str(qid): {self.ids[j]: float(s) for s, j in zip(scores[i], idx[i]) if j >= 0}
            for i, qid in enumerate(query_ids)
        }


def search(
    passage_embs: np.ndarray,
    passage_ids: Sequence[str],
    query_embs: np.ndarray,
    query_ids: Sequence[str],
    k: int = 100,
    index_type: str = "flat",
    memory_budget: int | None = None,
) -> dict[str, dict[str, float]]:
    """Top-``k`` passages per query by inner product, as a run ``{qid: {docid: score}}`` (chapter 4).
    Exact (``IndexFlatIP``) unless ``index_type`` says otherwise; see ``FaissIndex``."""
    return FaissIndex(passage_embs, passage_ids, index_type=index_type, memory_budget=memory_budget).search(
        query_embs, query_ids, k=k
    )


# ---------------------------------------------------------------------------------------
# TREC run files
# ---------------------------------------------------------------------------------------


def write_trec_run(run: Mapping[str, Mapping[str, float]], path: str | os.PathLike, tag: str = "condenser_lite") -> None:
    """Write ``qid Q0 docid rank score tag`` lines, best first per query (chapter 4)."""
    if any(c.isspace() for c in tag) or not tag:
        raise ValueError(f"tag must be a non-empty string without spaces, got {tag!r}")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for q, docs in run.items():
            for rank, (d, s) in enumerate(sorted(docs.items(), key=lambda x: (-x[1], x[0])), start=1):
                f.write(f"{q} Q0 {d} {rank} {float(s)!r} {tag}\n")


def read_trec_run(path: str | os.PathLike) -> dict[str, dict[str, float]]:
    """Read a TREC run file back into ``{qid: {docid: score}}`` (chapter 4)."""
    run: dict[str, dict[str, float]] = {}
    with open(path) as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 6:
                raise ValueError(f"{path}:{n}: expected 6 fields 'qid Q0 docid rank score tag', got {len(parts)}: {line.strip()!r}")
            run.setdefault(parts[0], {})[parts[2]] = float(parts[4])
    return run


# ---------------------------------------------------------------------------------------
# Fine-tuning, evaluation, mining, the two rounds
# ---------------------------------------------------------------------------------------


def _load_tokenizer(tokenizer, name_or_dir):
    if tokenizer is not None:
        return tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name_or_dir)


def _model_and_tokenizer(model: Any, tokenizer, device: str | None, caller: str, cls: type | None = None):
    """A model given as a folder/Hub id is loaded as ``cls`` (default ``BiEncoder``) with its
    tokenizer, on CUDA when there is one; a model object needs its tokenizer passed."""
    if isinstance(model, (str, os.PathLike)):
        tokenizer = _load_tokenizer(tokenizer, model)
        model = (cls or BiEncoder).from_pretrained(model)
        if device is None and torch.cuda.is_available():
            device = "cuda"
    if tokenizer is None:
        raise ValueError(f"{caller}: pass the tokenizer when giving a model object")
    return model, tokenizer, device


def finetune_retriever(
    init_checkpoint: str | os.PathLike,
    train_dataset: Any,
    tokenizer,
    cfg,
    q_max_len: int = 32,
    p_max_len: int = 128,
    train_n_passages: int = 8,
    untied: bool = False,
    temperature: float | None = None,
    grad_cache_chunk: int | None = None,
) -> BiEncoder:
    """Fine-tune a pre-trained checkpoint as a dense retriever (coCondenser eq. 14, chapter 4).

    ``cfg`` is a ``training.TrainConfig``; its ``batch_size`` counts *queries* (each brings
    ``train_n_passages`` passages). The final model and tokenizer are saved to ``cfg.output_dir``
    as a plain Hugging Face dir (``query/`` and ``passage/`` when untied), loadable with
    ``BiEncoder.from_pretrained`` or ``encode``; the loop's log and resumable checkpoint sit
    beside it. ``grad_cache_chunk``: sequences per gradient-cache chunk (``retrieval_step``);
    None trains with plain forward/backward.
    """
    from .training import train

    validate_training_schema(train_dataset)
    tokenizer = _load_tokenizer(tokenizer, init_checkpoint)
    model = BiEncoder.from_pretrained(init_checkpoint, untied=untied, train_n_passages=train_n_passages, temperature=temperature)
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and max(q_max_len, p_max_len) > limit:
        raise ValueError(
            f"q_max_len={q_max_len} / p_max_len={p_max_len} exceed the checkpoint's max_position_embeddings={limit}; "
            f"use lengths <= {limit}"
        )
    collator = RetrievalCollator(tokenizer, q_max_len=q_max_len, p_max_len=p_max_len, train_n_passages=train_n_passages)
    step_fn = functools.partial(retrieval_step, chunk_size=grad_cache_chunk) if grad_cache_chunk else None
    result = train(model, train_dataset, cfg, collate_fn=collator, step_fn=step_fn)
    model.train_result = result  # history and log path, for the loss-curve chapter
    model.save_pretrained(cfg.output_dir)
    tokenizer.save_pretrained(cfg.output_dir)
    return model


def evaluate_retriever(
    model_dir_or_model: Any,
    beir_data: Any,
    split: str = "test",
    tokenizer=None,
    q_max_len: int = 32,
    p_max_len: int = 128,
    k: int = 100,
    metrics: Sequence[str] = ("nDCG@10", "RR@10", "R@100"),
    batch_size: int = 128,
    device: str | None = None,
    corpus_embeddings: tuple[np.ndarray, list[str]] | None = None,
    index_type: str = "flat",
) -> dict:
    """Encode the corpus and the split's queries, search, score (chapter 4).

    Returns ``{"metrics": {name: value}, "run": run, "corpus_embeddings": (embs, ids)}``; pass
    ``corpus_embeddings`` back in (e.g. to ``mine_hard_negatives``) to skip re-encoding the corpus
    with the same model.
    """
    from .metrics import evaluate_run

    if split not in beir_data.qrels:
        raise SchemaError(f"no qrels for split {split!r}; available: {sorted(beir_data.qrels)}")
    qrels = {q: d for q, d in beir_data.qrels[split].items() if d}
    model, tokenizer, device = _model_and_tokenizer(model_dir_or_model, tokenizer, device, "evaluate_retriever")
    qids_all, qtexts_all = _query_lists(beir_data.queries)
    if corpus_embeddings is None:
        corpus_embeddings = encode_corpus(model, beir_data.corpus, tokenizer, p_max_len, batch_size=batch_size, device=device)
    p_embs, p_ids = corpus_embeddings
    check_qrels(qrels, p_ids, qids_all)
    qtext = dict(zip(qids_all, qtexts_all))
    qids = [q for q in qids_all if q in qrels]
    if not qids:
        raise SchemaError(f"split {split!r}: none of the queries has qrels; nothing to evaluate")
    q_embs = encode(model, [qtext[q] for q in qids], tokenizer, max_len=q_max_len, batch_size=batch_size, device=device, side="query")
    run = search(p_embs, p_ids, q_embs, qids, k=k, index_type=index_type)
    return {"metrics": evaluate_run(qrels, run, metrics), "run": run, "corpus_embeddings": corpus_embeddings}


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
    Tevatron-schema ``Dataset``.
    """
    validate_training_schema(train_dataset)
    model, tokenizer, device = _model_and_tokenizer(model_dir, tokenizer, device, "mine_hard_negatives")
    ids, titles, texts = _corpus_lists(corpus)
    if corpus_embeddings is None:
        p_embs = encode(model, (titles, texts), tokenizer, max_len=p_max_len, batch_size=batch_size, device=device, side="passage")
    else:
        p_embs, emb_ids = corpus_embeddings
        if list(emb_ids) != ids:
            raise ValueError("corpus_embeddings were computed for a different corpus (ids differ in value or order)")
    queries = [str(x) for x in train_dataset["query"]]
    q_embs = encode(model, queries, tokenizer, max_len=q_max_len, batch_size=batch_size, device=device, side="query")
    _, ranked = FaissIndex(p_embs, ids).search_indices(q_embs, depth)
    rng = random.Random(seed)
    mined: list[list[dict]] = []
    positives_col = train_dataset["positive_passages"]
    for i, pos in enumerate(positives_col):
        pos_ids = {str(p["docid"]) for p in pos}
        pool = [int(j) for j in ranked[i] if j >= 0 and ids[j] not in pos_ids]
        pick = rng.sample(pool, min(n, len(pool)))
        mined.append([{"docid": ids[j], "title": titles[j], "text": texts[j]} for j in pick])

    def add(example: dict, idx: int) -> dict:
        old = list(example["negative_passages"]) if keep_bm25 else []
        seen = {p["docid"] for p in old}
        example["negative_passages"] = old + [p for p in mined[idx] if p["docid"] not in seen]
        return example

    return train_dataset.map(add, with_indices=True, desc=None)


def two_round(
    init_checkpoint: str | os.PathLike,
    train_dataset: Any,
    corpus: Any,
    tokenizer,
    cfg_round1,
    cfg_round2,
    q_max_len: int = 32,
    p_max_len: int = 128,
    train_n_passages: int = 8,
    untied: bool = False,
    temperature: float | None = None,
    depth: int = 200,
    n_mined: int = 30,
    seed: int = 0,
    grad_cache_chunk: int | None = None,
) -> tuple[BiEncoder, Any]:
    """The papers' two-round recipe (coCondenser section 3.4, chapter 4).

    Round 1 fine-tunes ``init_checkpoint`` on BM25 negatives; its model mines hard negatives
    (``mine_hard_negatives``); round 2 restarts from the same *pre-trained* ``init_checkpoint``
    (not from the round-1 model) on BM25 + mined negatives. Returns the round-2 model and the
    round-2 training set. The same as calling the three functions yourself:

        finetune_retriever(ckpt, train, tok, cfg1, ...)
        train2 = mine_hard_negatives(cfg1.output_dir, train, corpus, tok, depth=200, n=30)
        finetune_retriever(ckpt, train2, tok, cfg2, ...)
    """
    tokenizer = _load_tokenizer(tokenizer, init_checkpoint)
    common = dict(q_max_len=q_max_len, p_max_len=p_max_len, train_n_passages=train_n_passages, untied=untied,
                  temperature=temperature, grad_cache_chunk=grad_cache_chunk)
    round1 = finetune_retriever(init_checkpoint, train_dataset, tokenizer, cfg_round1, **common)
    train2 = mine_hard_negatives(
        round1, train_dataset, corpus, tokenizer, depth=depth, n=n_mined, seed=seed, q_max_len=q_max_len, p_max_len=p_max_len
    )
    del round1
    round2 = finetune_retriever(init_checkpoint, train2, tokenizer, cfg_round2, **common)
    return round2, train2


# ---------------------------------------------------------------------------------------
# Presets
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetrieverPreset:
    """Fine-tuning settings of one task (chapter 4). ``batch_size`` counts queries per update."""

    name: str
    lr: float
    batch_size: int
    train_n_passages: int
    epochs_round1: float
    epochs_round2: float
    q_max_len: int
    p_max_len: int
    warmup_ratio: float = 0.1
    weight_decay: float = 0.0
    untied: bool = False
    temperature: float | None = None
    mixed_precision: str = "auto"  # TrainConfig's "auto": bf16 where supported, else fp32
    n_bm25_negatives: int = 30
    mine_depth: int = 200
    n_mined: int = 30
    grad_cache_chunk: int | None = None  # queries per gradient-cache chunk; None = no gradient cache
    notes: str = ""


RETRIEVER_PRESETS: dict[str, RetrieverPreset] = {
    # Tevatron's MS MARCO recipe (papers README; Condenser A.1 "Web Search"): 8 queries x 8 passages
    # = 64 passages per batch on one GPU, lr 5e-6, 3 epochs round 1, 2 epochs round 2.
    "msmarco": RetrieverPreset(
        name="msmarco", lr=5e-6, batch_size=8, train_n_passages=8, epochs_round1=3, epochs_round2=2,
        q_max_len=32, p_max_len=128, notes="Tevatron MS MARCO passage; exact search over 8.84M passages",
    ),
    # DPR's NQ/TriviaQA setting as the authors ran it: untied encoders, 4 GPUs x 32 queries = 128 queries
    # with cross-device negatives, 1 positive + 1 BM25 negative, passages up to 256 tokens, 40 epochs
    # (20 with hard negatives). lr 5e-6 follows the papers README (the Condenser appendix quotes DPR's
    # published 1e-5). On one GPU the 128-query batch needs the gradient cache.
    "nq": RetrieverPreset(
        name="nq", lr=5e-6, batch_size=128, train_n_passages=2, epochs_round1=40, epochs_round2=20,
        q_max_len=32, p_max_len=256, untied=True, grad_cache_chunk=32,
        notes="DPR NQ; top-k answer accuracy; 128 queries need gradient cache on one GPU",
    ),
    # Scaled-down setting for the book: a tiny pre-trained model on SciFact train (809 queries) on a CPU.
    # A guess to be tuned: tiny models take a larger lr; p_max_len 128 = the tiny model's position limit.
    "scifact": RetrieverPreset(
        name="scifact", lr=1e-4, batch_size=8, train_n_passages=8, epochs_round1=5, epochs_round2=3,
        q_max_len=64, p_max_len=128, mine_depth=100, notes="scaled-down CPU preset, to be tuned",
    ),
}


def train_config_from_preset(preset: RetrieverPreset | str, output_dir: str | os.PathLike, round: int = 1, **overrides):
    """A ``training.TrainConfig`` for round 1 or 2 of a preset (chapter 4); ``overrides`` win."""
    from .training import TrainConfig

    if isinstance(preset, str):
        if preset not in RETRIEVER_PRESETS:
            raise ValueError(f"unknown preset {preset!r}; choose from {sorted(RETRIEVER_PRESETS)}")
        preset = RETRIEVER_PRESETS[preset]
    if round not in (1, 2):
        raise ValueError(f"round must be 1 or 2, got {round}")
    kwargs = dict(
        output_dir=str(output_dir),
        epochs=preset.epochs_round1 if round == 1 else preset.epochs_round2,
        batch_size=preset.batch_size,
        lr=preset.lr,
        weight_decay=preset.weight_decay,
        warmup_ratio=preset.warmup_ratio,
        mixed_precision=preset.mixed_precision,
    )
    kwargs.update(overrides)
    return TrainConfig(**kwargs)
