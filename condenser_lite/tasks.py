"""The data the protocol evaluates the arms on: the retrieval task (with its BM25 baseline), the
STS-b pairs and the texts the attention entropy is averaged over.

Explained in chapter 4, `notebooks/04_finetune.ipynb` (the task), chapter 5 (the entropy texts)
and chapter 7 (STS-b). Each reads a preset (``presets.py``): ``task`` picks SciFact (BEIR, its
training queries given BM25 negatives here, evaluated on ``test``) or MS MARCO (Tevatron's own
training data, evaluated on ``dev``); the ``micro_*`` fields shrink everything for the tests.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Any

import datasets
import numpy as np

from .biencoder import passage_strings
from .bm25 import bm25_search
from .config import cache_dir
from .data import REGISTRY, BeirData, corpus_columns, data_id, load_beir, load_pretraining_corpus, load_stsb
from .jobs import settings_hash
from .metrics import evaluate_run
from .presets import Preset, get_preset
from .tevatron import load_tevatron, load_tevatron_corpus, tevatron_eval_set, to_tevatron


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


def data_location(data_dir: str | None) -> str:
    """What the data are read from, as part of a cache key: a hash of every registered data set's
    mirror files (``data.data_id``), or their Hub ids; a missing mirror folder raises. Chapter 4."""
    return settings_hash(data_id(REGISTRY, data_dir))


def load_task(preset: Preset | str | None = None, data_dir: str | None = None) -> Task:
    """The retrieval task of ``preset``, cached: SciFact (BEIR; BM25 negatives built here with
    ``tevatron.to_tevatron``, evaluated on ``test``) or MS MARCO (Tevatron's own training data,
    evaluated on ``dev``). Explained in chapter 4 (``notebooks/04_finetune.ipynb``)."""
    preset = get_preset(preset)
    negatives = preset.finetune.n_bm25_negatives
    settings = {"task": preset.task, "negatives": negatives, "data_dir": data_location(data_dir),
                "micro": [preset.micro_corpus, preset.micro_train_queries, preset.micro_test_queries]}
    key = settings_hash(settings)
    if preset.task == "scifact":
        beir = load_beir("scifact", data_dir=data_dir)
        if preset.micro_corpus is not None or preset.micro_train_queries or preset.micro_test_queries:
            beir = _micro_beir(beir, preset)
        where = cache_dir("experiments") / f"task-{preset.task}-{key}"
        if not (where / "dataset_info.json").exists():
            train = to_tevatron(beir, "train", n_negatives=negatives, bm25_depth=100)
            tmp = where.with_name(where.name + f".tmp{os.getpid()}")
            train.save_to_disk(str(tmp))
            shutil.rmtree(where, ignore_errors=True)
            tmp.rename(where)
        train = datasets.load_from_disk(str(where))
        return Task(preset.task, train, beir, "test", key, {"corpus": len(beir.corpus), "train_queries": len(train),
                                                             "eval_queries": len(beir.qrels["test"])})
    name = "Tevatron/msmarco-passage"
    train = load_tevatron(name, "train", data_dir=data_dir)
    if preset.micro_train_queries:
        train = train.select(range(min(preset.micro_train_queries, len(train))))
    dev = load_tevatron(name, "dev", data_dir=data_dir)
    if preset.micro_test_queries:
        dev = dev.select(range(min(preset.micro_test_queries, len(dev))))
    ev = tevatron_eval_set(dev, load_tevatron_corpus(name, data_dir=data_dir), split="dev", name="msmarco")
    return Task("msmarco", train, ev, "dev", key, {"corpus": len(ev.corpus), "train_queries": len(train),
                                                     "eval_queries": len(ev.qrels["dev"])})


def bm25_baseline(task: Task, preset: Preset, tokenizer=None) -> dict:
    """BM25 on the evaluation split over the whole documents, and (with ``tokenizer``) over the
    same first ``p_max_len`` tokens the dense models see. Explained in chapter 4."""
    ev = task.eval
    qrels = ev.qrels[task.split]
    metrics, p_max_len = preset.metrics, preset.finetune.p_max_len
    queries = ev.queries.filter(lambda ids: [i in qrels for i in ids], input_columns="_id", batched=True)
    out = {"full": evaluate_run(qrels, bm25_search(ev.corpus, queries, k=100), metrics)}
    if tokenizer is not None:
        ids, titles, texts = corpus_columns(ev.corpus)
        enc = tokenizer(passage_strings(tokenizer, titles, texts), truncation=True, max_length=p_max_len)["input_ids"]
        view = {i: tokenizer.decode(e, skip_special_tokens=True) for i, e in zip(ids, enc)}
        out["truncated"] = evaluate_run(qrels, bm25_search(view, queries, k=100), metrics)
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
    if preset.pretraining.general_corpus == "wikipedia":
        corpus = load_pretraining_corpus(data_dir=data_dir, full=True)
        return [r["text"] for r in corpus.take(preset.entropy_texts)]
    corpus = load_pretraining_corpus(data_dir=data_dir)
    rng = np.random.default_rng(0)
    pick = rng.choice(len(corpus), size=min(preset.entropy_texts, len(corpus)), replace=False)
    return [corpus[int(i)]["text"] for i in sorted(pick)]
