"""BM25 (condenser_lite/retrieval/bm25.py): the obvious document first, SciFact near BEIR's number
(on the local mirror), and BEIR's qrels turned into Tevatron rows with BM25 negatives."""

from types import SimpleNamespace

import datasets
import pytest

from condenser_lite.data.tevatron import TEVATRON_FIELDS
from condenser_lite.retrieval.bm25 import bm25_search, to_tevatron
from condenser_lite.utils.errors import SchemaError


CORPUS = datasets.Dataset.from_dict(
    {
        "_id": ["d0", "d1", "d2", "d3", "d4", "d5"],
        "title": ["Volcano", "Jazz", "Glacier", "Cells", "Python", "Lava lamp"],
        "text": [
            "A volcano erupts when magma rises and escapes as lava.",
            "Jazz music began in New Orleans.",
            "A glacier is a river of ice formed from snow.",
            "Cells divide by mitosis; the gene is copied.",
            "Python is a programming language.",
            "A lamp with coloured wax that moves like lava.",
        ],
    }
)


def test_bm25_ranks_the_obvious_document_first():
    run = bm25_search(CORPUS, {"a": "volcano magma eruption", "b": "glacier ice", "c": "jazz"}, k=3)
    assert next(iter(sorted(run["a"].items(), key=lambda x: -x[1])))[0] == "d0"
    assert max(run["b"], key=run["b"].get) == "d2"
    assert list(run["c"]) == ["d1"]  # only one document matches; zero-score padding is dropped
    assert all(len(docs) <= 3 for docs in run.values())
    with pytest.raises(ValueError, match="empty"):
        bm25_search(CORPUS, {}, k=3)


def test_to_tevatron_negatives_exclude_positives():
    beir = SimpleNamespace(
        corpus=CORPUS,
        queries=datasets.Dataset.from_dict({"_id": ["q1", "q2", "q3"], "text": ["lava", "lava volcano", "nothing"]}),
        qrels={"train": {"q1": {"d0": 1}, "q2": {"d5": 1, "d0": 0}}},  # d0 graded 0 for q2: not a positive
    )
    ds = to_tevatron(beir, "train", n_negatives=2, bm25_depth=10)
    assert ds.column_names == list(TEVATRON_FIELDS)
    rows = {r["query_id"]: r for r in ds}
    assert set(rows) == {"q1", "q2"}  # q3 has no qrels
    assert [p["docid"] for p in rows["q1"]["positive_passages"]] == ["d0"]
    for r in rows.values():
        pos = {p["docid"] for p in r["positive_passages"]}
        negs = [p["docid"] for p in r["negative_passages"]]
        assert negs and len(negs) <= 2 and not pos & set(negs)
    assert rows["q1"]["negative_passages"][0]["docid"] == "d5"  # the other "lava" document
    assert "d0" in [p["docid"] for p in rows["q2"]["negative_passages"]]  # judged non-relevant: a negative
    missing = SimpleNamespace(corpus=CORPUS, queries=beir.queries, qrels={"train": {"q1": {"nope": 1}}})
    with pytest.raises(SchemaError, match="not in the corpus"):
        to_tevatron(missing)
    with pytest.raises(SchemaError, match="no qrels for split"):
        to_tevatron(beir, "test")


@pytest.mark.protocol  # BM25 over the whole SciFact corpus, twice: 2.5 s
def test_bm25_scifact_matches_beir():
    """BM25 on the real SciFact test set lands near BEIR's 0.665 (skipped without the mirror)."""
    from condenser_lite.data.beir import load_beir
    from condenser_lite.retrieval.metrics import evaluate_run
    from condenser_lite.utils.errors import DataSourceError

    try:
        beir = load_beir("scifact")
    except DataSourceError:
        pytest.skip("SciFact mirror not available (set CONDENSER_LITE_DATA)")
    qrels = beir.qrels["test"]
    queries = {q: t for q, t in zip(beir.queries["_id"], beir.queries["text"]) if q in qrels}
    plain = evaluate_run(qrels, bm25_search(beir.corpus, queries, k=100, stem=False), ("nDCG@10", "R@100"))
    assert 0.65 < plain["nDCG@10"] < 0.675 and plain["R@100"] > 0.85  # measured 0.662 / 0.876
    stemmed = evaluate_run(qrels, bm25_search(beir.corpus, queries, k=100, stem=True), ("nDCG@10", "R@100"))
    assert stemmed["nDCG@10"] > plain["nDCG@10"] and stemmed["R@100"] > plain["R@100"]  # measured 0.686 / 0.913


@pytest.mark.parametrize("chosen", [None, "cuda"])
def test_bm25_keeps_jax_on_the_cpu_unless_the_user_chose(chosen):
    """bm25s runs JAX at import: on a GPU with JAX installed that would take the GPU's memory
    from torch, so importing the book's BM25 points JAX at the CPU, unless JAX_PLATFORMS is set."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    if chosen:
        env["JAX_PLATFORMS"] = chosen
    code = "import os, condenser_lite.retrieval.bm25; print(os.environ.get('JAX_PLATFORMS'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (chosen or "cpu")
