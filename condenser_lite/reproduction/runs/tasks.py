"""The data the protocol evaluates the arms on: the retrieval task (with its BM25 baseline), the
STS-b pairs and the texts the attention entropy is averaged over.

Explained in chapter 4, `notebooks/04_finetune.ipynb` (the task), chapter 5 (the entropy texts)
and chapter 7 (STS-b). Each reads a preset (``reproduction/configuration/presets.py``): ``task`` picks a BEIR set (SciFact,
any BEIR name, or your own BEIR-format folder: its training queries given BM25 negatives here,
evaluated on ``test``) or MS MARCO (Tevatron's own training data, evaluated on ``dev``); the
``micro_*`` fields shrink everything for the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import datasets
import numpy as np

from ...data.beir import BeirData, corpus_columns, load_beir
from ...data.sources import REGISTRY, data_id, load_pretraining_corpus, load_stsb
from ...data.tevatron import load_tevatron, load_tevatron_corpus, tevatron_eval_set, tevatron_name
from ...retrieval.biencoder import passage_strings
from ...retrieval.bm25 import bm25_search, to_tevatron
from ...retrieval.metrics import evaluate_run, metric_depth
from ...utils.cache import build_once, cache_dir, settings_hash
from ...utils.errors import SchemaError
from ..configuration.presets import get_preset
from ..configuration.settings_tree import Preset


@dataclass
class Task:
    """A retrieval task: training rows in Tevatron's schema with BM25 negatives, and an
    evaluation set (``BeirData`` with ``split``) whose corpus is also the mining corpus. Chapter 4."""

    name: str
    train: Any
    eval: Any
    split: str
    key: str = ""
    info: dict = field(default_factory=dict)


def _micro_beir(beir: BeirData, preset: Preset) -> BeirData:
    """A small but consistent SciFact: the first train/test queries and the documents they judge,
    plus ``micro_corpus`` other documents (tests only)."""
    train_q = list(beir.qrels["train"])[: preset.micro_train_queries or None]
    test_q = list(beir.qrels["test"])[: preset.micro_test_queries or None]
    qrels = {"train": {q: beir.qrels["train"][q] for q in train_q}, "test": {q: beir.qrels["test"][q] for q in test_q}}
    judged = {d for split in qrels.values() for docs in split.values() for d in docs}
    ids = list(beir.corpus["_id"])
    keep = [i for i, d in enumerate(ids) if d in judged]
    keep += [i for i, d in enumerate(ids) if d not in judged][: preset.micro_corpus or 0]
    corpus = beir.corpus.select(sorted(keep))
    wanted = set(train_q) | set(test_q)
    queries = beir.queries.filter(lambda ids_: [i in wanted for i in ids_], input_columns="_id", batched=True)
    return BeirData(beir.name, corpus, queries, qrels)


def data_location(data_dir: str | None, task: str | None = None) -> str:
    """What the data are read from, as part of a cache key: a hash of every registered data set's
    mirror files (``sources.data_id``), or their Hub ids, and of ``task``'s own files when it is not
    registered (a BEIR name in the mirror, or your folder: editing your data gives a new key); a
    missing mirror folder raises. Chapter 4."""
    extra = [task] if task and task not in REGISTRY and tevatron_name(task) is None else []
    return settings_hash(data_id([*REGISTRY, *extra], data_dir))


def _checked_beir(task: str, data_dir: str | None) -> BeirData:
    """The BEIR set of a task, refusing one without the splits the protocol needs."""
    beir = load_beir(task, data_dir=data_dir)
    missing = [s for s in ("train", "test") if not beir.qrels.get(s)]
    if missing:
        raise SchemaError(f"task {task!r} has no {' and no '.join(repr(s) for s in missing)} qrels (it has "
                          f"{sorted(beir.qrels)}): the protocol fine-tunes on 'train' and evaluates on 'test'; add "
                          f"qrels/{missing[0]}.tsv (e.g. split your labelled queries) to the folder")
    return beir


def load_task(preset: Preset | str | None = None, data_dir: str | None = None) -> Task:
    """The retrieval task of ``preset``, cached. A BEIR task (``scifact``, any BEIR name or the
    path of a BEIR-format folder: your own data) is fine-tuned on its ``train`` split with BM25
    negatives built here (``bm25.to_tevatron``) and evaluated on ``test``; a split missing is
    an error. ``msmarco`` reads Tevatron's own training data and is evaluated on ``dev``.
    Explained in chapter 4 (``notebooks/04_finetune.ipynb``)."""
    preset = get_preset(preset)
    negatives = preset.finetune.n_bm25_negatives
    settings = {"task": preset.task, "negatives": negatives, "data_dir": data_location(data_dir, preset.task),
                "micro": [preset.micro_corpus, preset.micro_train_queries, preset.micro_test_queries]}
    key = settings_hash(settings)
    name = tevatron_name(preset.task)
    if name is None:
        beir = _checked_beir(preset.task, data_dir)
        if preset.micro_corpus is not None or preset.micro_train_queries or preset.micro_test_queries:
            beir = _micro_beir(beir, preset)
        where = build_once(cache_dir("experiments") / f"task-{beir.name}-{key}", lambda folder: to_tevatron(
            beir, "train", n_negatives=negatives, bm25_depth=100).save_to_disk(str(folder)))
        train = datasets.load_from_disk(str(where))
        return Task(beir.name, train, beir, "test", key, {"corpus": len(beir.corpus), "train_queries": len(train),
                                                          "eval_queries": len(beir.qrels["test"])})
    train = load_tevatron(name, "train", data_dir=data_dir)
    if preset.micro_train_queries:
        train = train.select(range(min(preset.micro_train_queries, len(train))))
    dev = load_tevatron(name, "dev", data_dir=data_dir)
    if preset.micro_test_queries:
        dev = dev.select(range(min(preset.micro_test_queries, len(dev))))
    ev = tevatron_eval_set(dev, load_tevatron_corpus(name, data_dir=data_dir), split="dev", name=preset.task)
    return Task(preset.task, train, ev, "dev", key, {"corpus": len(ev.corpus), "train_queries": len(train),
                                                     "eval_queries": len(ev.qrels["dev"])})


def truncated_passages(tokenizer, corpus: Any, max_len: int, chunk: int = 100_000) -> dict[str, str]:
    """``{doc id: the passage text the first max_len tokens cover}``: what a dense model with
    ``p_max_len = max_len`` reads, as text for BM25 (chapter 4). Cut at the last kept token's
    character offset, ``chunk`` passages at a time: nothing is decoded back from token ids, and
    8.84M passages never sit in memory as token lists."""
    ids, titles, texts = corpus_columns(corpus, lazy=True)
    sep = f" {tokenizer.sep_token} " if getattr(tokenizer, "sep_token", None) else None
    out: dict[str, str] = {}
    for start in range(0, len(ids), chunk):
        strings = passage_strings(tokenizer, titles[start:start + chunk], texts[start:start + chunk])
        enc = tokenizer(strings, truncation=True, max_length=max_len, return_offsets_mapping=True,
                        return_special_tokens_mask=True)
        for doc, text, offsets, special in zip(ids[start:], strings, enc["offset_mapping"], enc["special_tokens_mask"]):
            end = max((o[1] for o, m in zip(offsets, special) if not m), default=0)
            out[doc] = text[:end].replace(sep, " ") if sep else text[:end]
    return out


def bm25_baseline(task: Task, preset: Preset, tokenizer=None) -> dict:
    """BM25 on the evaluation split over the whole documents, and (with ``tokenizer``) over the
    same first ``p_max_len`` tokens the dense models see (``truncated_passages``), each ranked as
    deep as the deepest metric reads (R@1000: the top 1,000). Explained in chapter 4."""
    ev = task.eval
    qrels = ev.split_qrels(task.split)
    metrics, p_max_len = preset.metrics, preset.finetune.p_max_len
    depth = metric_depth(metrics) or 100
    queries = ev.queries.filter(lambda ids: [i in qrels for i in ids], input_columns="_id", batched=True)
    out = {"full": evaluate_run(qrels, bm25_search(ev.corpus, queries, k=depth), metrics), "depth": depth}
    if tokenizer is not None:
        view = truncated_passages(tokenizer, ev.corpus, p_max_len)
        out["truncated"] = evaluate_run(qrels, bm25_search(view, queries, k=depth), metrics)
        out["truncated_tokens"] = p_max_len
    return out


def sts_data(preset: Preset, data_dir: str | None = None) -> tuple[Any, Any]:
    """STS-b ``(train, test)`` pairs, both capped at ``micro_sts_pairs`` (tests). Chapter 7."""
    train, test = load_stsb("train", data_dir=data_dir), load_stsb("test", data_dir=data_dir)
    if preset.micro_sts_pairs:
        train = train.select(range(min(preset.micro_sts_pairs, len(train))))
        test = test.select(range(min(preset.micro_sts_pairs, len(test))))
    return train, test


def entropy_texts(preset: Preset | str | None = None, data_dir: str | None = None) -> list[str]:
    """The texts the CLS attention entropy is averaged over: ``entropy_texts`` sections of the
    general corpus (Wikipedia at full scale, its first sections), a fixed random sample.
    Condenser section 5; explained in chapters 1 and 5."""
    preset = get_preset(preset)
    if preset.stages.bert.corpus == "wikipedia":
        corpus = load_pretraining_corpus(data_dir=data_dir, full=True)
        return [r["text"] for r in corpus.take(preset.entropy_texts)]
    corpus = load_pretraining_corpus(data_dir=data_dir)
    rng = np.random.default_rng(0)
    pick = rng.choice(len(corpus), size=min(preset.entropy_texts, len(corpus)), replace=False)
    return [corpus[int(i)]["text"] for i in sorted(pick)]
