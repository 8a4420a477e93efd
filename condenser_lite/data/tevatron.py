"""Tevatron's training data: its schema, its loaders, and how the book builds it from BEIR.

Explained in chapter 4, `notebooks/04_finetune.ipynb`. The authors fine-tune with Tevatron, whose
training rows are ``query_id, query, positive_passages, negative_passages`` with passages
``{docid, title, text}`` (``TEVATRON_FIELDS``, ``PASSAGE_FIELDS``). MS MARCO and NQ come in that
schema (``load_tevatron``, ``load_tevatron_corpus``; mirror layout ``<mirror>/<name>/<split>.jsonl``
and ``<mirror>/<name>/corpus.jsonl``, the Hub files uncompressed); SciFact is converted from BEIR
with BM25 negatives (``retrieval.bm25.to_tevatron``). ``sample_queries`` draws the papers' low-data training
sets; ``tevatron_eval_set`` turns a Tevatron dev split into a BEIR-style evaluation set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from datasets import Dataset, Features, IterableDataset, Value

from ..utils.errors import SchemaError
from .beir import BeirData, column_names
from .sources import REGISTRY, TEVATRON_NAMES, DataSpec, check_fields, mirror_file, read_dataset, resolve_mirror

TEVATRON_TASKS = {"msmarco": "Tevatron/msmarco-passage", "nq": "Tevatron/wikipedia-nq"}  # Tevatron's own data


def tevatron_name(name: str) -> str | None:
    """The Hub id of a Tevatron task (``"msmarco"``, ``"nq"`` or a ``"Tevatron/..."`` id), which is
    read in Tevatron's own schema; None for anything else (a BEIR name or a folder in BEIR's
    layout, converted with BM25 negatives). The one place that tells them apart. Chapter 4."""
    if name in TEVATRON_TASKS:
        return TEVATRON_TASKS[name]
    return name if name.startswith("Tevatron/") else None

TEVATRON_FIELDS = ("query_id", "query", "positive_passages", "negative_passages")
PASSAGE_FIELDS = ("docid", "title", "text")
PASSAGE_FEATURE = [{"docid": Value("string"), "title": Value("string"), "text": Value("string")}]


def _tevatron_spec(name: str) -> DataSpec:
    full = name if name.startswith("Tevatron/") else f"Tevatron/{name}"
    if full not in REGISTRY:
        raise ValueError(f"unknown Tevatron data set {name!r}; known: {', '.join(TEVATRON_NAMES)}")
    return REGISTRY[full]


def _passage_keys(feature: Any) -> set[str] | None:
    """Field names inside a list-of-passages feature, or None when it cannot tell (all empty)."""
    inner = getattr(feature, "feature", feature[0] if isinstance(feature, list) and feature else None)
    return set(inner) if isinstance(inner, dict) else None


def validate_tevatron(dataset: Dataset | IterableDataset | Sequence[Mapping], source: str = "the data set",
                      require_passages: bool = True) -> Dataset | IterableDataset | Sequence[Mapping]:
    """Check Tevatron's training schema; raise SchemaError naming the first missing field.

    Rows: `query_id`, `query`, `positive_passages`, `negative_passages`, each passage a dict
    with `docid`, `title`, `text`. Returns the data set unchanged. Explained in chapter 4.
    """
    required = TEVATRON_FIELDS if require_passages else TEVATRON_FIELDS[:2]
    if getattr(dataset, "features", None) is None:  # streamed, or a list of dicts: check one row
        first = next(iter(dataset), None)
        if first is None:
            return dataset
        check_fields(first, required, source)
        for col in ("positive_passages", "negative_passages"):
            if first.get(col):
                check_fields(first[col][0], PASSAGE_FIELDS, f"{source}, {col}[*]")
        return dataset
    check_fields(dataset.features, required, source)
    for col in ("positive_passages", "negative_passages"):
        keys = _passage_keys(dataset.features[col]) if col in dataset.features else None
        if keys is not None:
            check_fields(keys, PASSAGE_FIELDS, f"{source}, {col}[*]")
    return dataset


def _normalise_tevatron(ds: Dataset, where: str, require_passages: bool) -> Dataset:
    validate_tevatron(ds, where, require_passages)
    casts = {c: Value("string") for c in ("query_id", "query") if ds.features[c] != Value("string")}
    for col in ("positive_passages", "negative_passages"):
        # Empty lists everywhere are inferred as list<null>; give every file the same schema.
        if col in ds.features and _passage_keys(ds.features[col]) in (None, set(PASSAGE_FIELDS)):
            if ds.features[col] != datasets.List(PASSAGE_FEATURE[0]):
                casts[col] = datasets.List(PASSAGE_FEATURE[0])
    return ds.cast(Features({**ds.features, **casts})) if casts else ds


def _tevatron_files(spec: DataSpec, role: str, root: Path | None) -> str:
    if root:
        return str(mirror_file(root, spec, role))
    if role not in spec.hub_files:
        raise ValueError(f"{spec.name} has no {role!r} on the Hub; splits: "
                         f"{[r for r in spec.hub_files if r != 'corpus']}")
    hub_file = spec.hub_files[role]
    repo, _, path = hub_file.rpartition(":")
    return f"hf://datasets/{repo or spec.hub_id}/{path}"


def load_tevatron(name: str, split: str = "train", data_dir: str | os.PathLike | None = None) -> Dataset:
    """Tevatron training data (`Tevatron/msmarco-passage`, `Tevatron/wikipedia-nq`,
    `Tevatron/scifact`): `query_id`, `query`, `positive_passages`, `negative_passages`
    (extra columns such as NQ's `answers` are kept). Mirror: `<mirror>/<name>/<split>.jsonl`.
    Evaluation splits may lack passages. Explained in chapter 4, `notebooks/04_finetune.ipynb`.
    """
    spec = _tevatron_spec(name)
    if split == "corpus" or split not in {**spec.mirror_files, **spec.hub_files}:
        splits = [r for r in spec.mirror_files if r != "corpus"]
        raise ValueError(f"split must be one of {splits} for {spec.name}, got {split!r}")
    root = resolve_mirror(data_dir)
    files = _tevatron_files(spec, split, root)
    ds = read_dataset(spec, root is not None, "json", data_files=files, split="train")
    return _normalise_tevatron(ds, files, require_passages=(split == "train"))


def load_tevatron_corpus(name: str, data_dir: str | os.PathLike | None = None) -> Dataset:
    """The passage collection of a Tevatron data set (`<name>-corpus` on the Hub): `docid`,
    `title`, `text`. Mirror: `<mirror>/<name>/corpus.jsonl`; a BEIR-style `_id` column is
    accepted as `docid`. Explained in chapter 4."""
    spec = _tevatron_spec(name)
    root = resolve_mirror(data_dir)
    files = _tevatron_files(spec, "corpus", root)
    ds = read_dataset(spec, root is not None, "json", data_files=files, split="train")
    if "docid" not in ds.column_names and "_id" in ds.column_names:
        ds = ds.rename_column("_id", "docid")
    check_fields(ds.column_names, PASSAGE_FIELDS, files)
    ds = ds.select_columns(list(PASSAGE_FIELDS))
    return ds.cast(Features({k: Value("string") for k in PASSAGE_FIELDS}))


def validate_training_schema(dataset: Any) -> None:
    """Raise ``SchemaError`` naming the first missing field of Tevatron's training schema
    (chapter 4): the columns and passage fields (``validate_tevatron``), then that there are
    queries and that the first rows have a positive. Checks the first rows, not every row."""
    validate_tevatron(dataset, "training data")
    if len(dataset) == 0:
        raise SchemaError("training data has no queries (0 rows); check the split and the qrels")
    for i in range(min(len(dataset), 3)):
        row = dataset[i]
        if not row["positive_passages"]:
            raise SchemaError(f"query {row['query_id']!r} (row {i}) has no positive_passages; drop it or fix the qrels")


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
                "the qrels and the queries come from different data sets or versions: add those queries to the "
                "queries file, or drop their lines from the qrels"
            )


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
    the Tevatron corpus (``docid, title, text``), and the ``answers`` strings where the rows have
    them (NQ). This is how MS MARCO dev and NQ are evaluated (chapter 4)."""
    check_fields(column_names(dev_dataset), ("query_id", "query", "positive_passages"), "evaluation queries")
    qids = [str(x) for x in dev_dataset["query_id"]]
    qrels = {
        q: {str(p["docid"]): 1 for p in pos}
        for q, pos in zip(qids, dev_dataset["positive_passages"])
        if pos
    }
    queries = datasets.Dataset.from_dict({"_id": qids, "text": [str(x) for x in dev_dataset["query"]]})
    if "docid" in column_names(corpus):
        corpus = corpus.rename_column("docid", "_id")
    answers = {}
    if "answers" in column_names(dev_dataset):  # NQ / TriviaQA: DPR's top-k accuracy reads them
        answers = {split: {q: [str(a) for a in ans] for q, ans in zip(qids, dev_dataset["answers"]) if ans}}
    return BeirData(name=name, corpus=corpus, queries=queries, qrels={split: qrels}, answers=answers)
