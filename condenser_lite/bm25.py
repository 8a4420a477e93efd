"""BM25, the sparse baseline and the source of the first-round negatives (chapter 4).

Explained in chapter 4, `notebooks/04_finetune.ipynb`: the papers train round 1 on BM25's top
passages that are not labelled relevant (``tevatron.to_tevatron``), and BM25 is the baseline
every dense retriever is compared with. ``bm25s`` does the indexing and scoring.
"""

from __future__ import annotations

from typing import Any

import bm25s

from .beir import corpus_columns, query_columns


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
