"""BM25, the sparse baseline and the source of the first-round negatives (chapter 4).

Explained in chapter 4, `notebooks/04_finetune.ipynb`: the papers train round 1 on BM25's top
passages that are not labelled relevant (``to_tevatron``: a BEIR set as Tevatron's training
rows), and BM25 is the baseline every dense retriever is compared with. ``bm25s`` does the
indexing and scoring.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

# bm25s runs a JAX top-k at import wherever JAX is installed (Colab, many GPU images): on a GPU
# that claims most of the GPU's memory before torch asks for any, or stops the import where JAX's
# CUDA backend cannot start. BM25 is CPU work here, so JAX stays on the CPU unless the user chose.
if "jax" not in sys.modules:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
import bm25s  # noqa: E402
import datasets

from ..data.beir import BeirData, corpus_columns, load_beir, query_columns
from ..data.tevatron import PASSAGE_FIELDS, check_qrels
from ..utils.errors import SchemaError


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
        if isinstance(corpus, tuple) and len(corpus) == 3:
            self.ids, titles, texts = corpus
        else:
            self.ids, titles, texts = corpus_columns(corpus)
        self.stemmer = _stemmer(stem)
        docs = [f"{t} {x}".strip() for t, x in zip(titles, texts)]
        tokens = bm25s.tokenize(docs, lower=True, stopwords="en", stemmer=self.stemmer, show_progress=False)
        self.retriever = bm25s.BM25(k1=k1, b=b, method=method)
        self.retriever.index(tokens, show_progress=False)

    def search(self, queries: Any, k: int = 100) -> dict[str, dict[str, float]]:
        qids, qtexts = query_columns(queries)
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


def _as_beir(beir_data: Any, data_dir: str | None) -> BeirData:
    if isinstance(beir_data, str):
        return load_beir(beir_data, data_dir=data_dir)
    for attr in ("corpus", "queries", "qrels"):
        if not hasattr(beir_data, attr):
            raise TypeError(f"expected a BEIR set (beir.load_beir) or its name, got {type(beir_data).__name__} without .{attr}")
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

    ``beir_data`` is what ``beir.load_beir`` returns (or a BEIR name, loaded from ``data_dir``).
    For each query of ``qrels[split]`` with at least one positive (grade > 0): its positives, and
    as negatives the ``n_negatives`` highest BM25 passages among the top ``bm25_depth`` that are
    not labelled positive (the papers keep 30 BM25 negatives per query; the collator samples
    from them each step). Returns a ``datasets.Dataset``.
    """
    if n_negatives < 0 or bm25_depth < 1:
        raise ValueError(f"need n_negatives >= 0 and bm25_depth >= 1, got {n_negatives} and {bm25_depth}")
    beir = _as_beir(beir_data, data_dir)
    if split not in beir.qrels:
        raise SchemaError(f"no qrels for split {split!r}; available: {sorted(beir.qrels)}")
    ids, titles, texts = corpus_columns(beir.corpus)
    qids_all, qtexts_all = query_columns(beir.queries)
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
