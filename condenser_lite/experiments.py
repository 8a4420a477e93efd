"""The scaled-down reproduction: equal-compute experiments that test the papers' claims.

One protocol, three budgets (nanoGPT style: the default is the one that runs here):

* ``tiny``  (default): a tiny BERT from scratch on a 2-core CPU in under 40 minutes;
* ``micro``: the same code path in seconds (tests);
* ``full``: the papers' checkpoints (``bert-base-uncased``, ``Luyu/condenser``,
  ``Luyu/co-condenser-marco``) fine-tuned on MS MARCO with Tevatron's recipe
  (``retrieval.RETRIEVER_PRESETS["msmarco"]``). It cannot run here; it is the same function
  with a different :class:`Budget`.

The arms share one tokenizer, one architecture, one data order and equal pre-training steps:

1. ``bert``: MLM from scratch on the general corpus for ``s1_steps``;
2. ``bert_cont``: arm 1 + ``s2_steps`` more MLM steps (the equal-compute control);
3. ``condenser``: arm 1 + ``s2_steps`` Condenser steps (a fresh head, paper section 3.4);
4. ``cocondenser``: arm 3 + ``s3_steps`` coCondenser steps on the target corpus (head loaded);
5. ablations at the same ``s3_steps``: ``co_contrastive_only`` (``mlm_weight=0``, coCondenser
   table 4's "+ contrastive loss") and ``co_mlm_only`` (``co_weight=0``: Condenser MLM on the
   target corpus, the preprint's "continue training").

Each arm is then fine-tuned as a retriever (round 1 with BM25 negatives at several training
sizes, round 2 with negatives mined by its own round-1 retriever), and as an STS-b bi-encoder;
its CLS attention entropy is measured before and after fine-tuning. Every fine-tuning runs
over several seeds; :func:`scorecard` turns the numbers into a verdict per claim (C1-C7), where a
difference counts only when it exceeds the seed spread.

Notebooks call the parts (``pretrain_arms``, ``load_task``, ``finetune_arm``, ``sts_arm``,
``entropy_before``, ``scorecard``) or everything at once (``run_protocol``). Every part is
cached under ``$CONDENSER_LITE_CACHE`` by a hash of its settings, and so is the whole results
JSON, so a second call returns at once.
Explained in chapters 4-7 (``notebooks/04_finetune.ipynb`` ... ``07_sentence_similarity.ipynb``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .config import cache_dir

ARMS = ("bert", "bert_cont", "condenser", "cocondenser", "co_contrastive_only", "co_mlm_only")
MAIN_ARMS = ARMS[:4]
ABLATION_ARMS = ARMS[4:]
STATUSES = ("reproduced", "partly reproduced", "not reproduced at this scale", "not measured")
RESULTS_VERSION = 1


# ---------------------------------------------------------------------------------------
# Budgets
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """Every setting of the protocol. Defaults: the ``tiny`` budget (2-core CPU, < 40 min).

    Pre-training (``pretraining.PretrainConfig`` fields): the tiny BERT's shape, ``max_len``
    (blocks, spans and the model's position limit), steps per stage (``s1``: arm 1; ``s2``:
    arms 2-3; ``s3``: arm 4 and the ablations), batch sizes (sequences; documents for
    coCondenser) and learning rates. ``pretrained`` maps arms to existing checkpoints (Hub ids at
    full scale); those arms skip pre-training. ``arms`` are the arms to run.

    Retrieval: ``task`` (``"scifact"``: BEIR SciFact, test split; ``"msmarco"``: Tevatron
    MS MARCO, dev split), ``train_sizes`` (``None`` = every training query), the Tevatron
    recipe's knobs (queries per batch, passages per query, lengths, lr), round 1 ``ft_epochs``
    at the full training set with at least ``ft_min_steps`` steps at the small sizes, round 2
    ``ft_epochs_round2`` on BM25 + mined negatives for ``round2_arms``; the ablation arms are
    fine-tuned at ``ablation_sizes`` only.

    STS-b: ``sts_sizes`` (``None`` = all 5,749 pairs), epochs for the small sizes and for the
    full set (``sts_full_epochs < 1`` visits only part of the full set: subsampled in time).

    ``micro_*`` fields shrink the data for the test suite (``None`` = no limit).

    How ``tiny`` was sized (one-thread CPU seconds on the 2-core machine; the protocol runs its
    jobs in two one-thread processes). Pre-training: a step of 32 blocks x 64 tokens costs about
    0.33 s (MLM) and 0.55 s (Condenser), a coCondenser step of 16 documents about 0.5 s; S1 =
    1,200, S2 = 600, S3 = 250 steps take 6.5, 3.5-5.5 and about 2 minutes. Fine-tuning (8 queries
    x 2 passages of 64 tokens, 2 epochs = 202 steps at 809 queries, then encoding the 5,183
    abstracts) about 60 s; STS-b 10-30 s. 39 retrieval and 36 STS-b fine-tunings dominate: the
    whole run took 38 minutes here. Passages are cut to 64 tokens (BM25 on the same 64 tokens
    scores nDCG@10 0.50 instead of 0.69) and STS-b "full" visits half of the 5,749 pairs.

    Tuning log (every arm alike; learning rates chosen on a dev split of 200 held-out SciFact
    training queries and STS-b dev): 1e-3 for every pre-training stage, fine-tuning and STS-b.
    Batch 128 for 300 + 150 MLM steps left the MLM loss at 6.6 nats, at the unigram entropy
    (6.9), and every retriever at chance (R@100 0.09-0.16 on SciFact); batch 32 for four times as
    many updates (same tokens) reaches 6.2-6.4, and lr 2e-3 or no dropout changed little in an
    800-step test. Round 2 for ``bert_cont`` and 4 passages per query were dropped to fit the
    time budget. The tiny encoders stay barely past word frequencies: see chapter 8.
    """

    name: str = "tiny"
    arms: tuple[str, ...] = ARMS
    pretrained: Mapping[str, str] | None = None
    seeds: tuple[int, ...] = (0, 1, 2)
    # -- model and pre-training --
    tokenizer: str | None = None  # None: the book's WordPiece (tokenizer.tiny_tokenizer)
    vocab_size: int = 8192
    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 512
    max_len: int = 64
    skip_from: int = 2
    n_head_layers: int = 2
    s1_steps: int = 1200
    s2_steps: int = 600
    s3_steps: int = 250
    pretrain_batch: int = 32
    cocondenser_batch: int = 16
    pretrain_lr: float = 1e-3
    cocondenser_lr: float = 1e-3
    chunk_size: int | None = None
    general_limit: int | None = None  # documents of the general corpus (None: all)
    target_limit: int | None = None  # documents of the target corpus for coCondenser
    pretrain_seed: int = 42
    mixed_precision: str = "no"
    # -- retrieval fine-tuning --
    task: str = "scifact"
    train_sizes: tuple[int | None, ...] = (100, None)
    ablation_sizes: tuple[int | None, ...] = (None,)
    round2_arms: tuple[str, ...] = ("bert", "condenser", "cocondenser")
    ft_lr: float = 1e-3
    ft_batch: int = 8
    ft_n_passages: int = 2
    q_max_len: int = 48
    p_max_len: int = 64
    ft_epochs: float = 2.0
    ft_min_steps: int = 60
    ft_epochs_round2: float = 2.0
    ft_warmup_ratio: float = 0.1
    n_bm25_negatives: int = 30
    mine_depth: int = 100
    n_mined: int = 30
    metrics: tuple[str, ...] = ("nDCG@10", "RR@10", "R@100")
    nb_n: tuple[int, ...] = (10, 50)
    nb_k: tuple[int, ...] = (10, 50, 100, 200)
    encode_batch: int = 256
    # -- STS-b --
    sts_arms: tuple[str, ...] = MAIN_ARMS
    sts_sizes: tuple[int | None, ...] = (500, 1000, None)
    sts_lr: float = 1e-3
    sts_batch: int = 16
    sts_epochs_low: float = 2.0
    sts_full_epochs: float = 0.5
    sts_max_len: int = 32
    # -- CLS attention entropy --
    entropy_texts: int = 256
    entropy_max_len: int = 128
    # -- data limits for the test suite --
    micro_corpus: int | None = None  # target corpus: judged documents + this many others
    micro_train_queries: int | None = None
    micro_test_queries: int | None = None
    micro_sts_pairs: int | None = None  # caps STS train (the "full" size) and test pairs

    def __post_init__(self) -> None:
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown:
            raise ValueError(f"Budget.arms: unknown arm(s) {unknown}; choose from {ARMS}")
        if not self.seeds:
            raise ValueError("Budget.seeds must name at least one seed (the papers' claims need >= 3)")
        if self.task not in ("scifact", "msmarco"):
            raise ValueError(f"Budget.task={self.task!r}: use 'scifact' (tiny) or 'msmarco' (full)")
        if not self.train_sizes:
            raise ValueError("Budget.train_sizes must list at least one training size (None = all queries)")

    def replace(self, **changes: Any) -> "Budget":
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"unknown Budget field(s) {sorted(unknown)}; known: {sorted(f.name for f in dataclasses.fields(self))}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["pretrained"] = dict(self.pretrained) if self.pretrained else None
        return d


def tiny_budget(**changes: Any) -> Budget:
    """The default budget: every arm, 3 seeds, SciFact and STS-b on a 2-core CPU."""
    return Budget().replace(**changes)


def micro_budget(**changes: Any) -> Budget:
    """The same protocol in seconds (tests): hidden 32, a few steps, a handful of queries."""
    b = Budget(
        name="micro", seeds=(0, 1), vocab_size=8192, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
        intermediate_size=64, max_len=64, s1_steps=2, s2_steps=2, s3_steps=2, pretrain_batch=4, cocondenser_batch=4,
        general_limit=20, target_limit=40, train_sizes=(4, None), ft_batch=4, ft_n_passages=2, q_max_len=32,
        p_max_len=64, ft_epochs=1.0, ft_min_steps=2, n_bm25_negatives=4, mine_depth=10, n_mined=3,
        nb_n=(2, 5), nb_k=(5, 10), sts_sizes=(8, None), sts_batch=4, sts_epochs_low=1.0, sts_full_epochs=1.0,
        sts_max_len=32, entropy_texts=8, entropy_max_len=64, micro_corpus=40, micro_train_queries=8,
        micro_test_queries=10, micro_sts_pairs=16,
    )
    return b.replace(**changes)


def full_budget(**changes: Any) -> Budget:
    """The papers' scale: published checkpoints, MS MARCO with Tevatron's recipe, STS-b with
    Sentence-BERT's. Arms without a published checkpoint (``bert_cont``, the ablations) would need
    days of pre-training (``pretraining.paper_condenser``/``paper_cocondenser``) and are left out."""
    from .retrieval import RETRIEVER_PRESETS
    from .similarity import STS_PRESET

    p = RETRIEVER_PRESETS["msmarco"]
    b = Budget(
        name="full", arms=("bert", "condenser", "cocondenser"),
        pretrained={"bert": "bert-base-uncased", "condenser": "Luyu/condenser", "cocondenser": "Luyu/co-condenser-marco"},
        max_len=512, mixed_precision="auto", task="msmarco", train_sizes=(1000, 10000, None), ablation_sizes=(),
        round2_arms=("bert", "condenser", "cocondenser"), ft_lr=p.lr, ft_batch=p.batch_size,
        ft_n_passages=p.train_n_passages, q_max_len=p.q_max_len, p_max_len=p.p_max_len, ft_epochs=p.epochs_round1,
        ft_min_steps=0, ft_epochs_round2=p.epochs_round2, ft_warmup_ratio=p.warmup_ratio,
        n_bm25_negatives=p.n_bm25_negatives, mine_depth=p.mine_depth, n_mined=p.n_mined,
        metrics=("RR@10", "R@1000", "nDCG@10"), nb_n=(50, 100), nb_k=(100, 200, 500, 1000), encode_batch=512,
        sts_arms=("bert", "condenser", "cocondenser"), sts_lr=STS_PRESET["lr"], sts_batch=STS_PRESET["batch_size"],
        sts_epochs_low=float(STS_PRESET["epochs_low_data"][1]), sts_full_epochs=float(STS_PRESET["epochs_full"]),
        sts_max_len=STS_PRESET["max_len"], entropy_texts=1000, entropy_max_len=128,
    )
    return b.replace(**changes)


BUDGETS = {"tiny": tiny_budget, "micro": micro_budget, "full": full_budget}


def get_budget(budget: Budget | str | None = None, **changes: Any) -> Budget:
    """A :class:`Budget` from a name (``"tiny"``, ``"micro"``, ``"full"``) or itself."""
    if budget is None:
        budget = "tiny"
    if isinstance(budget, str):
        if budget not in BUDGETS:
            raise ValueError(f"unknown budget {budget!r}; choose from {sorted(BUDGETS)}")
        return BUDGETS[budget](**changes)
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a Budget or one of {sorted(BUDGETS)}, got {type(budget).__name__}")
    return budget.replace(**changes) if changes else budget


# ---------------------------------------------------------------------------------------
# Small helpers: hashing, caching, statistics, quiet transformers
# ---------------------------------------------------------------------------------------


def _hash(obj: Any, n: int = 12) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def _ckpt_key(path_or_id: str | os.PathLike) -> str:
    """A cached pre-training stage is named by its settings' hash; a Hub id by itself."""
    from .pretraining import _init_key

    return str(_init_key(str(path_or_id)))


def _say(verbose: bool, t0: float, msg: str) -> None:
    if verbose:
        print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", flush=True)


@contextlib.contextmanager
def _quiet():
    """Silence transformers' load reports (a BertModel loaded from an MLM checkpoint lists the
    unused MLM head) and datasets' progress bars while the protocol runs; restore afterwards."""
    import datasets
    import transformers

    level = transformers.logging.get_verbosity()
    bars = datasets.is_progress_bar_enabled()
    tf_bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(level)
        if tf_bars:
            transformers.utils.logging.enable_progress_bar()
        if bars:
            datasets.enable_progress_bars()


def stats(values: Sequence[float]) -> dict:
    """``{"mean", "std", "values", "n"}``; std is the sample standard deviation over seeds (ddof=1;
    0 for a single value)."""
    v = np.asarray([float(x) for x in values], dtype=np.float64)
    if v.size == 0:
        return {"mean": None, "std": None, "values": [], "n": 0}
    std = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return {"mean": float(v.mean()), "std": std, "values": v.tolist(), "n": int(v.size)}


def _size_label(size: int | None, total: int) -> str:
    return str(total if size is None else min(size, total))


def _environment() -> dict:
    import importlib.metadata as md

    import torch

    versions = {}
    for pkg in ("torch", "transformers", "tokenizers", "datasets", "accelerate", "faiss-cpu", "bm25s", "ir_measures",
                "numpy", "scipy"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    from . import __version__

    return {"condenser_lite": __version__, "python": sys.version.split()[0], "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.is_available(), "packages": versions}


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# ---------------------------------------------------------------------------------------
# Pre-training the arms
# ---------------------------------------------------------------------------------------


def arm_config(arm: str, budget: Budget, init: str | None):
    """The ``PretrainConfig`` of one arm's *last* stage, starting from ``init`` (its parent's
    checkpoint; ``None`` for ``bert``). Arms 2-6 restart warm-up and decay, the same for all."""
    from .pretraining import PretrainConfig

    common = dict(
        tokenizer=budget.tokenizer, max_len=budget.max_len, hidden_size=budget.hidden_size,
        num_hidden_layers=budget.num_hidden_layers, num_attention_heads=budget.num_attention_heads,
        intermediate_size=budget.intermediate_size, vocab_size=budget.vocab_size, skip_from=budget.skip_from,
        n_head_layers=budget.n_head_layers, batch_size=budget.pretrain_batch, lr=budget.pretrain_lr,
        seed=budget.pretrain_seed, mixed_precision=budget.mixed_precision, save_every=None,
    )
    if arm == "bert":
        return PretrainConfig(method="mlm", init=None, corpus="general", corpus_limit=budget.general_limit,
                              max_steps=budget.s1_steps, **common)
    if init is None:
        raise ValueError(f"arm {arm!r} continues another arm: pass its checkpoint as init")
    if arm == "bert_cont":
        return PretrainConfig(method="mlm", init=init, corpus="general", corpus_limit=budget.general_limit,
                              max_steps=budget.s2_steps, **common)
    if arm == "condenser":
        return PretrainConfig(method="condenser", init=init, head="random", corpus="general",
                              corpus_limit=budget.general_limit, max_steps=budget.s2_steps, **common)
    weights = {"cocondenser": (1.0, 1.0), "co_contrastive_only": (0.0, 1.0), "co_mlm_only": (1.0, 0.0)}
    if arm not in weights:
        raise ValueError(f"unknown arm {arm!r}; choose from {ARMS}")
    mlm_w, co_w = weights[arm]
    common.update(batch_size=budget.cocondenser_batch, lr=budget.cocondenser_lr)
    return PretrainConfig(method="cocondenser", init=init, head="load", corpus=budget.task,
                          corpus_limit=budget.target_limit, max_steps=budget.s3_steps, mlm_weight=mlm_w,
                          co_weight=co_w, chunk_size=budget.chunk_size, **common)


PARENT = {"bert": None, "bert_cont": "bert", "condenser": "bert", "cocondenser": "condenser",
          "co_contrastive_only": "condenser", "co_mlm_only": "condenser"}


def _needed_arms(arms: Sequence[str], pretrained: Mapping[str, str]) -> list[str]:
    """``arms`` plus the parents they continue from, parents first."""
    out: list[str] = []

    def add(a: str) -> None:
        if a in out:
            return
        if a not in pretrained and PARENT[a] is not None:
            add(PARENT[a])
        out.append(a)

    for a in arms:
        add(a)
    return out


def pretrain_arm(arm: str, budget: Budget | str | None = None, init: str | None = None,
                 data_dir: str | None = None) -> dict:
    """Pre-train (or reuse from the cache) one arm's last stage from ``init`` (its parent's
    checkpoint); returns ``{"checkpoint", "steps", "wall_time", "config", "log"}`` (``log``: the
    per-step loss records). An arm in ``budget.pretrained`` is taken as it is (no log).
    Explained in chapter 2 (``notebooks/02_condenser.ipynb``) and chapter 3."""
    from .pretraining import pretrain, read_log

    budget = get_budget(budget)
    if budget.pretrained and arm in budget.pretrained:
        return {"checkpoint": budget.pretrained[arm], "steps": None, "wall_time": None, "config": None, "log": []}
    ckpt = pretrain(arm_config(arm, budget, init), data_dir=data_dir, progress=False)
    record = json.loads((Path(ckpt) / "pretrain_config.json").read_text())
    keep = ("step", "loss", "mlm_loss", "co_loss", "co_acc", "head_loss", "late_loss", "lr", "elapsed")
    log = [{k: r[k] for k in keep if k in r} for r in read_log(ckpt)]
    return {"checkpoint": str(ckpt), "steps": record["steps"], "wall_time": record["wall_time"],
            "config": record["config"], "log": log}


def pretrain_arms(budget: Budget | str | None = None, data_dir: str | None = None, verbose: bool = False) -> dict[str, dict]:
    """Pre-train (or reuse) every arm of ``budget`` and the parents they continue, in order;
    returns ``{arm: pretrain_arm(...)}``. Explained in chapters 2 and 3."""
    budget = get_budget(budget)
    t0 = time.perf_counter()
    out: dict[str, dict] = {}
    for arm in _needed_arms(budget.arms, dict(budget.pretrained or {})):
        parent = PARENT[arm]
        _say(verbose, t0, f"pre-training {arm}")
        out[arm] = pretrain_arm(arm, budget, out[parent]["checkpoint"] if parent in out else None, data_dir)
    return out


def _tokenizer_for(budget: Budget, data_dir: str | None):
    from .tokenizer import load_tokenizer, tiny_tokenizer

    if budget.tokenizer is not None:
        return load_tokenizer(budget.tokenizer)
    return tiny_tokenizer(vocab_size=budget.vocab_size, data_dir=data_dir)


# ---------------------------------------------------------------------------------------
# The retrieval task
# ---------------------------------------------------------------------------------------


@dataclass
class Task:
    """A retrieval task: training rows in Tevatron's schema with BM25 negatives, and an
    evaluation set (``BeirData`` with ``split``) whose corpus is also the mining corpus."""

    name: str
    train: Any
    eval: Any
    split: str
    key: str = ""
    info: dict = field(default_factory=dict)


def _micro_beir(beir, budget: Budget):
    """A small but consistent SciFact: the first train/test queries and the documents they judge,
    plus ``micro_corpus`` other documents (tests only)."""
    import datasets

    from .data import BeirData

    train_q = list(beir.qrels["train"])[: budget.micro_train_queries or None]
    test_q = list(beir.qrels["test"])[: budget.micro_test_queries or None]
    qrels = {"train": {q: beir.qrels["train"][q] for q in train_q}, "test": {q: beir.qrels["test"][q] for q in test_q}}
    judged = {d for split in qrels.values() for docs in split.values() for d in docs}
    ids = list(beir.corpus["_id"])
    keep = [i for i, d in enumerate(ids) if d in judged]
    keep += [i for i, d in enumerate(ids) if d not in judged][: budget.micro_corpus or 0]
    corpus = beir.corpus.select(sorted(keep))
    wanted = set(train_q) | set(test_q)
    queries = beir.queries.filter(lambda ids_: [i in wanted for i in ids_], input_columns="_id", batched=True)
    assert isinstance(queries, datasets.Dataset)
    return BeirData(beir.name, corpus, queries, qrels)


def load_task(budget: Budget | str | None = None, data_dir: str | None = None) -> Task:
    """The retrieval task of ``budget``, cached: SciFact (BEIR; BM25 negatives built here with
    ``retrieval.to_tevatron``, evaluated on ``test``) or MS MARCO (Tevatron's own training data,
    evaluated on ``dev``). Explained in chapter 4 (``notebooks/04_finetune.ipynb``)."""
    import datasets

    from .data import load_beir, load_tevatron, load_tevatron_corpus
    from .retrieval import tevatron_eval_set, to_tevatron

    budget = get_budget(budget)
    settings = {"task": budget.task, "negatives": budget.n_bm25_negatives, "micro": [budget.micro_corpus,
                budget.micro_train_queries, budget.micro_test_queries], "data_dir": str(data_dir or os.environ.get("CONDENSER_LITE_DATA") or "hub")}
    key = _hash(settings)
    if budget.task == "scifact":
        beir = load_beir("scifact", data_dir=data_dir)
        if budget.micro_corpus is not None or budget.micro_train_queries or budget.micro_test_queries:
            beir = _micro_beir(beir, budget)
        where = cache_dir("experiments") / f"task-{budget.task}-{key}"
        if (where / "dataset_info.json").exists():
            train = datasets.load_from_disk(str(where))
        else:
            train = to_tevatron(beir, "train", n_negatives=budget.n_bm25_negatives, bm25_depth=100)
            tmp = where.with_name(where.name + f".tmp{os.getpid()}")
            train.save_to_disk(str(tmp))
            shutil.rmtree(where, ignore_errors=True)
            tmp.rename(where)
            train = datasets.load_from_disk(str(where))
        return Task(budget.task, train, beir, "test", key, {"corpus": len(beir.corpus), "train_queries": len(train),
                                                             "eval_queries": len(beir.qrels["test"])})
    name = "Tevatron/msmarco-passage"
    train = load_tevatron(name, "train", data_dir=data_dir)
    if budget.micro_train_queries:
        train = train.select(range(min(budget.micro_train_queries, len(train))))
    dev = load_tevatron(name, "dev", data_dir=data_dir)
    if budget.micro_test_queries:
        dev = dev.select(range(min(budget.micro_test_queries, len(dev))))
    ev = tevatron_eval_set(dev, load_tevatron_corpus(name, data_dir=data_dir), split="dev", name="msmarco")
    return Task("msmarco", train, ev, "dev", key, {"corpus": len(ev.corpus), "train_queries": len(train),
                                                     "eval_queries": len(ev.qrels["dev"])})


def bm25_baseline(task: Task, budget: Budget, tokenizer=None) -> dict:
    """BM25 on the evaluation split over the whole documents, and (with ``tokenizer``) over the
    same first ``p_max_len`` tokens the dense models see. Explained in chapter 4."""
    from .metrics import evaluate_run
    from .retrieval import _corpus_lists, _passage_strings, bm25_search

    ev = task.eval
    qrels = ev.qrels[task.split]
    queries = ev.queries.filter(lambda ids: [i in qrels for i in ids], input_columns="_id", batched=True)
    out = {"full": evaluate_run(qrels, bm25_search(ev.corpus, queries, k=100), budget.metrics)}
    if tokenizer is not None:
        ids, titles, texts = _corpus_lists(ev.corpus)
        enc = tokenizer(_passage_strings(tokenizer, titles, texts), truncation=True, max_length=budget.p_max_len)["input_ids"]
        view = {i: tokenizer.decode(e, skip_special_tokens=True) for i, e in zip(ids, enc)}
        out["truncated"] = evaluate_run(qrels, bm25_search(view, queries, k=100), budget.metrics)
        out["truncated_tokens"] = budget.p_max_len
    return out


# ---------------------------------------------------------------------------------------
# Fine-tuning one arm (retrieval), cached
# ---------------------------------------------------------------------------------------


def _train_subset(task: Task, size: int | None, seed: int):
    from .retrieval import sample_queries

    if size is None or size >= len(task.train):
        return task.train
    return sample_queries(task.train, size, seed=seed)


def _ft_steps(n_queries: int, budget: Budget, epochs: float) -> int:
    if n_queries < budget.ft_batch:
        raise ValueError(f"a training size of {n_queries} queries is smaller than ft_batch={budget.ft_batch}; "
                         "raise the size or lower ft_batch")
    return max(budget.ft_min_steps, int(epochs * (n_queries // budget.ft_batch)), 1)


def _ft_settings(budget: Budget, round_: int) -> dict:
    return {"lr": budget.ft_lr, "batch": budget.ft_batch, "n_passages": budget.ft_n_passages, "q": budget.q_max_len,
            "p": budget.p_max_len, "epochs": budget.ft_epochs if round_ == 1 else budget.ft_epochs_round2,
            "min_steps": budget.ft_min_steps, "warmup": budget.ft_warmup_ratio, "mp": budget.mixed_precision,
            "mine": [budget.mine_depth, budget.n_mined] if round_ == 2 else None, "metrics": list(budget.metrics),
            "depth": _run_depth(budget), "entropy": [budget.entropy_texts, budget.entropy_max_len]}


def _run_depth(budget: Budget) -> int:
    cutoffs = [int(m.split("@")[1]) for m in budget.metrics if "@" in m]
    return max([*budget.nb_k, *budget.nb_n, *cutoffs, 10])


def finetune_arm(
    arm: str,
    checkpoint: str,
    task: Task,
    budget: Budget | str | None = None,
    size: int | None = None,
    seed: int = 0,
    round: int = 1,
    round1: dict | None = None,
    entropy_texts: Sequence[str] | None = None,
    keep_model: bool = True,
    verbose: bool = False,
) -> dict:
    """Fine-tune ``checkpoint`` as a retriever on ``size`` training queries (``None``: all) and
    evaluate it; cached under ``$CONDENSER_LITE_CACHE/finetune/<arm>-r<round>-...-<hash>/``.

    Round 1 trains on BM25 negatives. Round 2 (pass the round-1 result of the same arm, size and
    seed as ``round1``) restarts from the *pre-trained* checkpoint on BM25 + negatives mined by
    the round-1 retriever (top ``mine_depth``, labelled positives dropped, ``n_mined`` sampled).
    Returns ``{"metrics", "loss", "steps", "wall_time", "dir", "n_queries", "entropy_after"}``;
    ``dir`` holds ``run.json`` (ranked doc ids per evaluation query), the training log and, with
    ``keep_model``, the model and the corpus embeddings (``corpus_embeddings.npy``) that round 2
    mines with. With ``entropy_texts``, also the CLS attention entropy per layer after fine-tuning.
    Explained in chapter 4.
    """
    from transformers import AutoTokenizer

    from .retrieval import evaluate_retriever, finetune_retriever, mine_hard_negatives
    from .training import TrainConfig

    budget = get_budget(budget)
    if round not in (1, 2):
        raise ValueError(f"round must be 1 or 2, got {round}")
    if round == 2 and round1 is None:
        raise ValueError("round 2 mines negatives with the round-1 retriever: pass round1=<finetune_arm(..., round=1)>")
    train = _train_subset(task, size, seed)
    key = _hash({"init": _ckpt_key(checkpoint), "task": task.key, "size": len(train), "seed": seed, "round": round,
                 "round1": round1["key"] if round1 else None, "ft": _ft_settings(budget, round)})
    out_dir = cache_dir("finetune") / f"{arm}-r{round}-n{len(train)}-s{seed}-{key}"
    done = out_dir / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    t_start, cpu_start = time.perf_counter(), time.process_time()
    tok = AutoTokenizer.from_pretrained(checkpoint)
    if round == 2:
        r1 = Path(round1["dir"])
        embs = np.load(r1 / "corpus_embeddings.npy")
        ids = json.loads((r1 / "corpus_ids.json").read_text())
        train = mine_hard_negatives(str(r1), train, task.eval.corpus, tok, depth=budget.mine_depth, n=budget.n_mined,
                                    seed=seed, q_max_len=budget.q_max_len, p_max_len=budget.p_max_len,
                                    batch_size=budget.encode_batch, corpus_embeddings=(embs, ids))
    epochs = budget.ft_epochs if round == 1 else budget.ft_epochs_round2
    steps = _ft_steps(len(train), budget, epochs)
    cfg = TrainConfig(output_dir=str(out_dir), max_steps=steps, batch_size=budget.ft_batch, lr=budget.ft_lr,
                      weight_decay=0.0, warmup_ratio=budget.ft_warmup_ratio, mixed_precision=budget.mixed_precision,
                      seed=seed, progress=False, resume=False)
    model = finetune_retriever(checkpoint, train, tok, cfg, q_max_len=budget.q_max_len, p_max_len=budget.p_max_len,
                               train_n_passages=budget.ft_n_passages)
    t_train = time.perf_counter() - t_start
    shutil.rmtree(out_dir / "checkpoint", ignore_errors=True)  # optimizer state: only for resuming
    ev = evaluate_retriever(model, task.eval, split=task.split, tokenizer=tok, q_max_len=budget.q_max_len,
                            p_max_len=budget.p_max_len, k=_run_depth(budget), metrics=budget.metrics,
                            batch_size=budget.encode_batch)
    embs, ids = ev["corpus_embeddings"]
    np.save(out_dir / "corpus_embeddings.npy", embs)
    (out_dir / "corpus_ids.json").write_text(json.dumps(list(ids)))
    ranked = {q: [d for d, _ in sorted(docs.items(), key=lambda x: (-x[1], x[0]))] for q, docs in ev["run"].items()}
    (out_dir / "run.json").write_text(json.dumps(ranked))
    entropy = None
    if entropy_texts:
        from .analysis import cls_attention_entropy

        entropy = cls_attention_entropy(model.encoder("passage"), tok, list(entropy_texts),
                                        max_len=min(budget.entropy_max_len, budget.max_len)).tolist()
    result = {"arm": arm, "round": round, "seed": seed, "n_queries": len(train), "steps": steps, "key": key,
              "dir": str(out_dir), "metrics": ev["metrics"], "loss": [r["loss"] for r in model.train_result.history],
              "accuracy": [r.get("accuracy") for r in model.train_result.history], "entropy_after": entropy,
              "wall_time": {"train": round_(t_train), "total": round_(time.perf_counter() - t_start),
                            "cpu": round_(time.process_time() - cpu_start)}}
    if not keep_model:  # only the numbers are reused: a tiny model is ~8 MB, 40 of them add up
        for p in out_dir.iterdir():
            if p.name not in ("run.json", "log.jsonl", "train_state.json"):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    done.write_text(json.dumps(result))
    _say(verbose, t_start, f"{arm} round {round} n={len(train)} seed {seed}: "
         + ", ".join(f"{k} {v:.3f}" for k, v in ev["metrics"].items()))
    return result


def round_(x: float, nd: int = 2) -> float:
    return float(round(x, nd))


def _load_run(result: dict) -> dict[str, dict[str, float]]:
    """A cached run as ``{qid: {docid: score}}`` with scores that keep the stored rank order."""
    ranked = json.loads((Path(result["dir"]) / "run.json").read_text())
    return {q: {d: float(len(docs) - i) for i, d in enumerate(docs)} for q, docs in ranked.items()}


# ---------------------------------------------------------------------------------------
# STS-b and attention entropy
# ---------------------------------------------------------------------------------------


def _sts_data(budget: Budget, data_dir: str | None):
    from .data import load_stsb

    train, test = load_stsb("train", data_dir=data_dir), load_stsb("test", data_dir=data_dir)
    if budget.micro_sts_pairs:
        train = train.select(range(min(budget.micro_sts_pairs, len(train))))
        test = test.select(range(min(budget.micro_sts_pairs, len(test))))
    return train, test


def sts_arm(
    arm: str,
    checkpoint: str,
    budget: Budget | str | None = None,
    size: int | None = None,
    seed: int = 0,
    data: tuple[Any, Any] | None = None,
    data_dir: str | None = None,
) -> dict:
    """Fine-tune ``checkpoint`` on ``size`` STS-b training pairs (``None``: all, for
    ``sts_full_epochs``) with the cosine regression loss and return the test Spearman; cached
    (the weights are not kept). Condenser table 1. Explained in chapter 7."""
    from transformers import AutoTokenizer

    from .similarity import evaluate_sts, finetune_sts, sample_pairs
    from .training import TrainConfig

    budget = get_budget(budget)
    train_all, test = data if data is not None else _sts_data(budget, data_dir)
    full = size is None or size >= len(train_all)
    train = train_all if full else sample_pairs(train_all, size, seed=seed)
    epochs = budget.sts_full_epochs if full else budget.sts_epochs_low
    key = _hash({"init": _ckpt_key(checkpoint), "n": len(train), "test": len(test), "seed": seed, "lr": budget.sts_lr,
                 "batch": budget.sts_batch, "epochs": epochs, "len": budget.sts_max_len, "mp": budget.mixed_precision})
    out_dir = cache_dir("sts") / f"{arm}-n{len(train)}-s{seed}-{key}"
    done = out_dir / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    t0, cpu0 = time.perf_counter(), time.process_time()
    tok = AutoTokenizer.from_pretrained(checkpoint)
    cfg = TrainConfig(output_dir=str(out_dir), epochs=epochs, batch_size=budget.sts_batch, lr=budget.sts_lr,
                      weight_decay=0.01, warmup_ratio=0.1, mixed_precision=budget.mixed_precision, seed=seed,
                      progress=False, resume=False)
    model = finetune_sts(checkpoint, train, tok, cfg, max_len=budget.sts_max_len)
    spearman = evaluate_sts(model, test, tok, max_len=budget.sts_max_len)
    # the weights are not reused: keep only the numbers and the log
    for p in out_dir.iterdir():
        if p.is_dir():
            shutil.rmtree(p)
        elif p.name != "log.jsonl":
            p.unlink()
    result = {"arm": arm, "seed": seed, "n_pairs": len(train), "epochs": epochs, "spearman": spearman,
              "steps": model.train_result.step, "wall_time": round_(time.perf_counter() - t0),
              "cpu_time": round_(time.process_time() - cpu0)}
    done.write_text(json.dumps(result))
    return result


def entropy_texts(budget: Budget | str | None = None, data_dir: str | None = None) -> list[str]:
    """The texts the CLS attention entropy is averaged over: ``entropy_texts`` sections of the
    general corpus (Wikipedia at full scale), a fixed random sample. Condenser section 5."""
    from .data import load_pretraining_corpus

    budget = get_budget(budget)
    if budget.name == "full":
        corpus = load_pretraining_corpus(data_dir=data_dir, full=True)
        return [r["text"] for r in corpus.take(budget.entropy_texts)]
    corpus = load_pretraining_corpus(data_dir=data_dir)
    rng = np.random.default_rng(0)
    pick = rng.choice(len(corpus), size=min(budget.entropy_texts, len(corpus)), replace=False)
    return [corpus[int(i)]["text"] for i in sorted(pick)]


def entropy_before(checkpoint: str, texts: Sequence[str], budget: Budget) -> list[float]:
    """CLS attention entropy per layer of a pre-trained checkpoint's backbone (chapter 5)."""
    from transformers import AutoTokenizer

    from .analysis import cls_attention_entropy
    from .model import load_encoder

    tok = AutoTokenizer.from_pretrained(checkpoint)
    enc = load_encoder(checkpoint)
    return cls_attention_entropy(enc, tok, list(texts), max_len=min(budget.entropy_max_len, budget.max_len)).tolist()


# ---------------------------------------------------------------------------------------
# The protocol
# ---------------------------------------------------------------------------------------


def results_key(budget: Budget, data_dir: str | None = None) -> str:
    """Hash naming a protocol run: the budget, the data location and the library version."""
    from . import __version__

    return _hash({"budget": budget.to_dict(), "data": str(data_dir or os.environ.get("CONDENSER_LITE_DATA") or "hub"),
                  "version": __version__, "results": RESULTS_VERSION}, 16)


def run_protocol(
    budget: Budget | str | None = "tiny",
    out_path: str | os.PathLike | None = None,
    seeds: Sequence[int] | None = None,
    data_dir: str | None = None,
    force: bool = False,
    verbose: bool = True,
    workers: int | None = None,
) -> dict:
    """Run (or load from the cache) the whole protocol and return the results dict; with
    ``out_path`` also write it there as JSON. ``seeds`` overrides ``budget.seeds``; ``force``
    recomputes the results file (pre-trained and fine-tuned models stay cached).

    ``workers``: processes for the independent jobs (default: the number of CPU cores, at most
    2 on a CPU, 1 with a GPU). Each worker uses ``cores // workers`` threads: on a small CPU,
    two one-thread processes beat one two-thread process, and they do not collapse when another
    program shares the cores (oversubscribed OpenMP threads wait on each other at every
    operation). ``workers=1`` runs everything in this process with torch's thread setting.

    The results hold the budget, seeds, package versions, wall time per part, every number per
    seed with mean and standard deviation, the loss curves and entropies for the plots, and the
    scorecard (``results["claims"]``). Explained in the closing chapter.
    """
    budget = get_budget(budget)
    if seeds is not None:
        budget = budget.replace(seeds=tuple(int(s) for s in seeds))
    key = results_key(budget, data_dir)
    cached = cache_dir("experiments") / f"results-{budget.name}-{key}.json"
    if cached.exists() and not force:
        results = json.loads(cached.read_text())
        results["claims"] = scorecard(results)  # verdicts always from the current rules
    else:
        with _quiet():
            results = _run(budget, data_dir, verbose, _default_workers() if workers is None else int(workers))
        results["key"] = key
        tmp = cached.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(results, indent=1))
        tmp.replace(cached)
    if out_path is not None:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        Path(out_path).write_text(json.dumps(results, indent=1))
    return results


def _default_workers() -> int:
    import torch

    if torch.cuda.is_available():
        return 1
    return max(1, min(2, os.cpu_count() or 1))


# ---- jobs: top-level functions, so worker processes can run them ----------------------------

_MEMO: dict[Any, Any] = {}  # per process: the task and STS data, loaded once


def _init_worker(threads: int) -> None:
    import warnings

    import datasets
    import torch
    import transformers

    torch.set_num_threads(threads)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    warnings.filterwarnings("ignore")


def _task_memo(budget: Budget, data_dir: str | None) -> Task:
    key = ("task", budget.task, budget.n_bm25_negatives, budget.micro_corpus, budget.micro_train_queries,
           budget.micro_test_queries, data_dir)
    if key not in _MEMO:
        _MEMO[key] = load_task(budget, data_dir)
    return _MEMO[key]


def _sts_memo(budget: Budget, data_dir: str | None):
    key = ("sts", budget.micro_sts_pairs, data_dir)
    if key not in _MEMO:
        _MEMO[key] = _sts_data(budget, data_dir)
    return _MEMO[key]


def _job_pretrain(arm, budget, init, data_dir):
    return pretrain_arm(arm, budget, init, data_dir)


def _job_entropy(arm, ckpt, texts, budget):
    return entropy_before(ckpt, texts, budget)


def _job_finetune(arm, ckpt, budget, size, seed, data_dir, texts, round1, keep_model):
    task = _task_memo(budget, data_dir)
    return finetune_arm(arm, ckpt, task, budget, size=size, seed=seed, round=2 if round1 else 1, round1=round1,
                        entropy_texts=texts, keep_model=keep_model)


def _job_sts(arm, ckpt, budget, size, seed, data_dir):
    return sts_arm(arm, ckpt, budget, size=size, seed=seed, data=_sts_memo(budget, data_dir))


@dataclass
class _Job:
    fn: Any
    args: Any  # callable: results of finished jobs -> argument tuple
    deps: tuple = ()
    priority: int = 0  # lower runs first among ready jobs


def _describe(key: tuple, result: Any) -> str:
    if key[0] == "finetune" and isinstance(result, dict):
        m = result["metrics"]
        return f"{key}: " + ", ".join(f"{k} {v:.3f}" for k, v in m.items()) + f" ({result['wall_time']['total']:.0f}s)"
    if key[0] == "sts":
        return f"{key}: Spearman {result['spearman']:.3f} ({result['wall_time']:.0f}s)"
    if key[0] == "pretrain":
        return f"{key}: {result['steps']} steps ({result['wall_time'] or 0:.0f}s)"
    return f"{key} done"


def _execute(jobs: dict[tuple, _Job], workers: int, verbose: bool, t0: float, done: dict | None = None) -> dict:
    """Run ``jobs`` respecting their dependencies. With one worker, in this process in order of
    (priority, insertion); otherwise in ``workers`` spawned processes, never queueing more jobs
    than there are free workers, so a job that becomes ready later (a pre-training stage that
    unblocks others) still goes ahead of the low-priority queue."""
    done = {} if done is None else done
    pending = dict(jobs)
    order = {k: i for i, k in enumerate(jobs)}

    def ready() -> list[tuple]:
        keys = [k for k, j in pending.items() if all(d in done for d in j.deps)]
        return sorted(keys, key=lambda k: (pending[k].priority, order[k]))

    if workers <= 1:
        while pending:
            keys = ready()
            if not keys:
                raise RuntimeError(f"jobs with unmet dependencies: {list(pending)}")
            k = keys[0]
            job = pending.pop(k)
            done[k] = job.fn(*job.args(done))
            _say(verbose, t0, _describe(k, done[k]))
        return done

    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    threads = max(1, (os.cpu_count() or 1) // workers)
    ctx = multiprocessing.get_context("spawn")  # fork after torch has started threads can hang
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(threads,)) as pool:
        running: dict[Any, tuple] = {}
        while pending or running:
            for k in ready()[: workers - len(running)]:
                job = pending.pop(k)
                running[pool.submit(job.fn, *job.args(done))] = k
            if not running:
                raise RuntimeError(f"jobs with unmet dependencies: {list(pending)}")
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for f in finished:
                k = running.pop(f)
                done[k] = f.result()  # re-raises a worker's exception here
                _say(verbose, t0, _describe(k, done[k]))
    return done


@contextlib.contextmanager
def _num_threads(n: int | None):
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _first_stage_threads(workers: int) -> int | None:
    """Threads for the first pre-training stage, which runs alone in this process: all cores
    on a quiet machine; one when the machine is already busy (1-minute load average above 1),
    because oversubscribed OpenMP threads wait on each other at every operation (measured here:
    a step took 4.3 s with two threads beside another busy process, 2.3 s with one thread)."""
    if workers <= 1:
        return None  # the caller's setting
    load = _load_average()
    return 1 if load and load[0] > 1.0 else None


def _run(budget: Budget, data_dir: str | None, verbose: bool, workers: int) -> dict:
    t0 = time.perf_counter()
    wall: dict[str, Any] = {}
    load_start = _load_average()
    arms, seeds = list(budget.arms), list(budget.seeds)
    pretrained = dict(budget.pretrained or {})

    def lap(part: str, since: float) -> float:
        now = time.perf_counter()
        wall[part] = round_(now - since)
        return now

    # Serial head, in this process: tokenizer, task (BM25 negatives), BM25 baseline, the first
    # pre-training stage (nothing else can run before it exists).
    t = time.perf_counter()
    tokenizer = _tokenizer_for(budget, data_dir) if len(pretrained) < len(arms) else None
    task = load_task(budget, data_dir)
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(pretrained[arms[0]])
    bm25 = bm25_baseline(task, budget, tokenizer)
    texts = entropy_texts(budget, data_dir)
    _say(verbose, t0, f"task {task.name}: {task.info}; BM25 {bm25['full']}")
    t = lap("setup", t)
    plan = _needed_arms(arms, pretrained)
    stages: dict[str, dict] = {}
    first = plan[0]
    threads = _first_stage_threads(workers)
    with _num_threads(threads):
        stages[first] = pretrain_arm(first, budget, None, data_dir)
    _say(verbose, t0, _describe(("pretrain", first), stages[first]))
    t = lap("pretrain_first_stage", t)

    # Everything else as a job graph.
    total = len(task.train)
    full_label = str(total)
    jobs: dict[tuple, _Job] = {}
    done: dict[tuple, Any] = {("pretrain", first): stages[first]}

    def ckpt_of(arm):
        return lambda d: d[("pretrain", arm)]["checkpoint"]

    for arm in plan[1:]:
        parent = PARENT[arm] if arm not in pretrained else None
        deps = (("pretrain", parent),) if parent else ()
        jobs[("pretrain", arm)] = _Job(
            _job_pretrain, (lambda d, a=arm, p=parent: (a, budget, d[("pretrain", p)]["checkpoint"] if p else None, data_dir)),
            deps, priority=0)
    for arm in arms:
        if arm in MAIN_ARMS:
            jobs[("entropy", arm)] = _Job(_job_entropy, (lambda d, a=arm: (a, ckpt_of(a)(d), texts, budget)),
                                          (("pretrain", arm),), priority=3)
    sizes = {arm: (budget.train_sizes if arm in MAIN_ARMS else budget.ablation_sizes) for arm in arms}
    for seed in seeds:
        for arm in arms:
            for size in sizes[arm]:
                label = _size_label(size, total)
                is_full = label == full_label
                mines = is_full and arm in budget.round2_arms  # round 2 needs this model and its embeddings
                jobs[("finetune", arm, 1, label, seed)] = _Job(
                    _job_finetune,
                    (lambda d, a=arm, s=size, sd=seed, f=is_full, k=mines: (
                        a, ckpt_of(a)(d), budget, s, sd, data_dir, texts if (f and a in MAIN_ARMS) else None, None, k)),
                    (("pretrain", arm),), priority=1 if mines else 2)
            if arm in budget.round2_arms and full_label in [_size_label(z, total) for z in sizes[arm]]:
                r1_key = ("finetune", arm, 1, full_label, seed)
                jobs[("finetune", arm, 2, full_label, seed)] = _Job(
                    _job_finetune, (lambda d, a=arm, sd=seed, k=r1_key: (a, ckpt_of(a)(d), budget, None, sd, data_dir,
                                                                        None, d[k], False)),
                    (("pretrain", arm), r1_key), priority=1)
    sts_train, _ = _sts_data(budget, data_dir)
    for seed in seeds:
        for arm in arms:
            if arm in budget.sts_arms:
                for size in budget.sts_sizes:
                    jobs[("sts", arm, _size_label(size, len(sts_train)), seed)] = _Job(
                        _job_sts, (lambda d, a=arm, s=size, sd=seed: (a, ckpt_of(a)(d), budget, s, sd, data_dir)),
                        (("pretrain", arm),), priority=3)
    done = _execute(jobs, workers, verbose, t0, done)
    t = lap("jobs", t)

    for arm in plan:
        stages[arm] = done[("pretrain", arm)]
    entropy = {arm: {"before": done[("entropy", arm)]} for arm in arms if ("entropy", arm) in done}
    r1: dict[str, dict[str, list[dict]]] = {arm: {} for arm in arms}
    r2: dict[str, list[dict]] = {}
    sts: dict[str, dict[str, list[dict]]] = {}
    for k, v in done.items():  # insertion order of the jobs = seed order
        if k[0] == "finetune" and k[2] == 1:
            r1[k[1]].setdefault(k[3], []).append(v)
        elif k[0] == "finetune":
            r2.setdefault(k[1], []).append(v)
        elif k[0] == "sts":
            sts.setdefault(k[1], {}).setdefault(k[2], []).append(v)
    for group in [*r1.values(), *sts.values()]:
        for runs in group.values():
            runs.sort(key=lambda r: r["seed"])
    for runs in r2.values():
        runs.sort(key=lambda r: r["seed"])

    results = _assemble(budget, stages, task, bm25, entropy, r1, r2, sts, total, len(sts_train))
    wall["finetune_jobs_seconds"] = round_(sum(r["wall_time"]["total"] for k, r in done.items() if k[0] == "finetune"))
    wall["sts_jobs_seconds"] = round_(sum(r["wall_time"] for k, r in done.items() if k[0] == "sts"))
    # CPU seconds of the jobs (one-thread workers): the work itself, whatever else ran on the machine
    wall["finetune_cpu_seconds"] = round_(sum(r["wall_time"].get("cpu", 0.0) for k, r in done.items() if k[0] == "finetune"))
    wall["sts_cpu_seconds"] = round_(sum(r.get("cpu_time", 0.0) for k, r in done.items() if k[0] == "sts"))
    wall["pretrain_stage_seconds"] = {a: stages[a]["wall_time"] for a in plan}
    wall["total"] = round_(time.perf_counter() - t0)
    results["wall_time"] = wall
    results["execution"] = {"workers": workers, "first_stage_threads": threads or None, "threads_per_worker": max(1, (os.cpu_count() or 1) // workers)
                            if workers > 1 else None, "load_average_start": load_start, "load_average_end": _load_average()}
    results["claims"] = scorecard(results)
    _say(verbose, t0, "scorecard: " + ", ".join(f"{c['id']} {c['status']}" for c in results["claims"]))
    return results


def _metric_stats(runs: list[dict], metrics: Sequence[str]) -> dict:
    return {m: stats([r["metrics"][m] for r in runs]) for m in metrics}


def _by_size(d: dict) -> dict:
    return {k: d[k] for k in sorted(d, key=int)}


def _assemble(budget, stages, task, bm25, entropy, r1, r2, sts, total, sts_total) -> dict:
    metrics = list(budget.metrics)
    r1 = {arm: _by_size(v) for arm, v in r1.items()}
    sts = {arm: _by_size(v) for arm, v in sts.items()}
    retrieval: dict[str, dict] = {}
    loss_curves: dict[str, dict] = {}
    pretrain_wall = {}
    for arm in budget.arms:
        retrieval[arm] = {"round1": {label: _metric_stats(runs, metrics) for label, runs in r1[arm].items()}}
        loss_curves[arm] = {label: [r["loss"] for r in runs] for label, runs in r1[arm].items()}
        if arm in r2:
            retrieval[arm]["round2"] = {str(total): _metric_stats(r2[arm], metrics)}
        pretrain_wall[arm] = stages[arm]["wall_time"]
    # nb-recall (coCondenser eq. 17): round-1 top k vs round-2 top n on the evaluation queries.
    nb: dict[str, dict] = {}
    for arm, runs2 in r2.items():
        runs1 = r1[arm][str(total)]
        per_seed = []
        for a, b in zip(runs1, runs2):
            from .metrics import nb_recall

            run1, run2 = _load_run(a), _load_run(b)
            per_seed.append({f"n{n}@k{k}": nb_recall(run1, run2, n=n, k=k) for n in budget.nb_n for k in budget.nb_k})
        nb[arm] = {name: stats([s[name] for s in per_seed]) for name in per_seed[0]}
    # entropy after fine-tuning: the round-1 retrievers at the full training set, per seed.
    for arm, e in entropy.items():
        after = [r["entropy_after"] for r in r1[arm].get(str(total), []) if r.get("entropy_after")]
        if after:
            a = np.asarray(after)
            e["after"] = {"mean": a.mean(0).tolist(), "std": (a.std(0, ddof=1) if len(a) > 1 else 0 * a[0]).tolist(),
                          "values": a.tolist()}
            change = np.abs(a - np.asarray(e["before"])[None]).mean(1)  # mean |after - before| over layers
            e["mean_abs_change"] = stats(change.tolist())
    sts_out = {arm: {label: stats([r["spearman"] for r in runs]) for label, runs in by_size.items()}
               for arm, by_size in sts.items()}
    notes = [
        "Pre-training runs once per arm (seed %d); the seed spread covers fine-tuning only (training-set sample, "
        "data order, negatives, dropout)." % budget.pretrain_seed,
        "Arms 2 (bert_cont) and 3 (condenser) both continue arm 1 with a fresh warm-up and linear decay over "
        "s2_steps; arm 4 and the ablations likewise over s3_steps. Equal compute means equal steps of the same "
        "batch size on the same data order; a Condenser step also runs the 2-layer head (~1.6x the FLOPs).",
        "Spread = sample standard deviation over seeds; a difference counts when |mean_a - mean_b| > std_a + std_b "
        "(the mean +- std intervals do not overlap).",
        "Dense models read the first p_max_len tokens of each document; BM25 'full' reads everything, BM25 "
        "'truncated' reads the same tokens as the dense models.",
        "Ablations (co_contrastive_only, co_mlm_only) are fine-tuned in round 1 only; the paper's table 4 "
        "compares retrievers trained with hard negatives.",
    ]
    if budget.sts_full_epochs < budget.sts_epochs_low or budget.micro_sts_pairs:
        notes.append(f"STS-b 'full' trains on all {sts_total} pairs for {budget.sts_full_epochs:g} epoch(s) (the "
                     f"small sizes for {budget.sts_epochs_low:g}); the paper trains 4 epochs: subsampled in time.")
    return {
        "protocol": "condenser_lite.experiments", "version": RESULTS_VERSION, "budget": budget.to_dict(),
        "seeds": list(budget.seeds), "environment": _environment(), "notes": notes,
        "task": {"name": task.name, "split": task.split, **task.info},
        "train_sizes": sorted({int(label) for arm in r1 for label in r1[arm]}),
        "sts_sizes": sorted({int(label) for arm in sts for label in sts[arm]}),
        "arms": {arm: {"checkpoint": stages[arm]["checkpoint"], "parent": PARENT[arm] if not (budget.pretrained and arm in budget.pretrained) else None,
                       "pretrain_steps": stages[arm]["steps"], "pretrain_wall_time": pretrain_wall[arm],
                       "pretrain_log": stages[arm]["log"]} for arm in budget.arms},
        "bm25": bm25,
        "retrieval": retrieval,
        "nb_recall": nb,
        "loss_curves": loss_curves,
        "entropy": entropy,
        "sts": sts_out,
        "finetune_wall_time": {arm: {label: [r["wall_time"]["total"] for r in runs] for label, runs in r1[arm].items()}
                               for arm in budget.arms},
    }


# ---------------------------------------------------------------------------------------
# The scorecard
# ---------------------------------------------------------------------------------------


def compare(a: Mapping | None, b: Mapping | None) -> dict | None:
    """``a`` vs ``b`` (each ``stats``): difference of means, spread (std_a + std_b) and the verdict
    ``"better"`` / ``"worse"`` (difference beyond the spread) or ``"within spread"``."""
    if not a or not b or a.get("mean") is None or b.get("mean") is None:
        return None
    diff = a["mean"] - b["mean"]
    spread = (a["std"] or 0.0) + (b["std"] or 0.0)
    verdict = "better" if diff > spread else "worse" if -diff > spread else "within spread"
    return {"a": round(a["mean"], 4), "b": round(b["mean"], 4), "diff": round(diff, 4), "spread": round(spread, 4),
            "verdict": verdict}


def _get(d: Mapping, *path: Any) -> Any:
    for p in path:
        if not isinstance(d, Mapping) or p not in d:
            return None
        d = d[p]
    return d


def _status(parts: Sequence[bool | None]) -> str:
    """Every measured part holds: reproduced; some: partly; none: not reproduced; nothing
    measured: not measured. (A part is None where its arm or size was not run.)"""
    known = [p for p in parts if p is not None]
    if not known:
        return "not measured"
    if all(known):
        return "reproduced"
    if any(known):
        return "partly reproduced"
    return "not reproduced at this scale"


def early_loss(results: Mapping, arm: str, label: str, frac: float = 0.25) -> dict | None:
    """Mean round-1 fine-tuning loss over the first ``frac`` of the steps, per seed, as ``stats``
    (claim C6; ``frac=1`` averages every step). Explained in chapter 6."""
    curves = _get(results, "loss_curves", arm, label)
    if not curves:
        return None
    vals = [float(np.mean(c[: max(1, int(len(c) * frac))])) for c in curves]
    return stats(vals)


def scorecard(results: Mapping) -> list[dict]:
    """Claims C1-C7 with the papers' numbers, ours and a status from ``STATUSES``.

    A difference counts only where it exceeds the seed spread (``compare``: |mean difference| >
    std_a + std_b). Retrieval claims read the first metric of the budget (nDCG@10 on SciFact) and
    the recall metric (R@100). Explained in the closing chapter.
    """
    budget = results.get("budget", {})
    metrics = budget.get("metrics", ["nDCG@10", "RR@10", "R@100"])
    main_m = metrics[0]
    recall_m = next((m for m in metrics if m.startswith("R@")), metrics[-1])
    sizes = [str(s) for s in results.get("train_sizes", [])]
    small, full = (sizes[0], sizes[-1]) if sizes else (None, None)
    R = results.get("retrieval", {})
    claims = []

    def r1(arm, size, m):
        return _get(R, arm, "round1", size, m)

    # C1: Condenser beats both BERT arms, most at the smallest size, gap narrowing with data.
    per_size = {s: {b: compare(r1("condenser", s, main_m), r1(b, s, main_m)) for b in ("bert", "bert_cont")} for s in sizes}
    beats_small = [None if per_size.get(small, {}).get(b) is None else per_size[small][b]["verdict"] == "better"
                   for b in ("bert", "bert_cont")] if small else [None]
    gaps = {s: [c["diff"] for c in per_size[s].values() if c] for s in sizes}
    narrowing = None
    if small and full and small != full and gaps.get(small) and gaps.get(full):
        narrowing = min(gaps[small]) > min(gaps[full])
    claims.append({
        "id": "C1", "statement": "Condenser beats both BERT arms as a retriever initialiser, most at the smallest training "
        "size, the gap narrowing with more data (round 1, BM25 negatives).",
        "paper": "Condenser table 5 (MS MARCO dev MRR@10, train size 1K / 10K / full): BERT 0.156 / 0.228 / 0.309, "
                 "Condenser 0.192 / 0.258 / 0.338; table 3 (NQ Top-20, 1K / 10K / full): BERT 66.6 / 75.9 / 78.4, "
                 "Condenser 72.7 / 78.3 / 80.1.",
        "ours": {"metric": main_m, "by_size": per_size, "bm25": _get(results, "bm25", "full", main_m),
                 "narrowing": narrowing},
        # a narrowing gap only means something where Condenser is ahead at the small size
        "status": _status([*beats_small, narrowing if beats_small and all(b is True for b in beats_small) else None]),
    })

    # C2: coCondenser beats Condenser, visibly in recall.
    c2 = {m: compare(r1("cocondenser", full, m), r1("condenser", full, m)) for m in (main_m, recall_m)}
    c2r2 = {m: compare(_get(R, "cocondenser", "round2", full, m), _get(R, "condenser", "round2", full, m))
            for m in (main_m, recall_m)}
    claims.append({
        "id": "C2", "statement": "coCondenser beats Condenser, visibly in recall (full training set; round 1 and, "
        "where run, round 2).",
        "paper": "coCondenser table 5 (MS MARCO dev MRR@10 / R@1000): Condenser w/o HN 33.8 / 96.1, coCondenser w/o "
                 "HN 35.7 / 97.8; with HN 36.6 / 97.4 vs 38.2 / 98.4.",
        "ours": {"round1": c2, "round2": c2r2},
        "status": _status([None if c is None else c["verdict"] == "better" for c in (c2[recall_m], c2r2[recall_m])]),
    })

    # C3: both terms of the coCondenser loss add something (table 4).
    c3 = {name: {m: compare(r1("cocondenser", full, m), r1(abl, full, m)) for m in (main_m, recall_m)}
          for name, abl in (("mlm_term", "co_contrastive_only"), ("contrastive_term", "co_mlm_only"))}
    c3_parts = []
    for name in c3:
        cs = [c for c in c3[name].values() if c]
        c3_parts.append(None if not cs else any(c["verdict"] == "better" for c in cs))
    claims.append({
        "id": "C3", "statement": "Both coCondenser loss terms add something: coCondenser beats Condenser further trained "
        "with the contrastive loss only, and with the Condenser MLM loss only (full training set, round 1).",
        "paper": "coCondenser table 4 (MS MARCO dev MRR@10 / R@100 / R@1000): Condenser 36.6 / 89.4 / 97.4; + contrastive "
                 "36.7 / 90.3 / 98.0; + MLM (coCondenser) 38.2 / 91.3 / 98.4. (The MLM-only continuation is the "
                 "preprint's 'CT' arm, figure 4.)",
        "ours": c3,
        "status": _status(c3_parts),
    })

    # C4: hard negatives help the pre-trained arms (no collapse).
    c4 = {arm: compare(_get(R, arm, "round2", full, main_m), r1(arm, full, main_m)) for arm in MAIN_ARMS}
    c4_parts = [None if c4[a] is None else c4[a]["verdict"] == "better" for a in ("condenser", "cocondenser")]
    collapse = [a for a, c in c4.items() if c and c["verdict"] == "worse"]
    claims.append({
        "id": "C4", "statement": "Round 2 with hard negatives mined by the arm's own round-1 retriever improves the "
        "pre-trained arms (Condenser, coCondenser) without collapse.",
        "paper": "coCondenser table 5 (MS MARCO dev MRR@10): Condenser 33.8 -> 36.6, coCondenser 35.7 -> 38.2 with hard "
                 "negatives; Condenser table 7: RocketQA 33.3 -> 26.0 with un-denoised hard negatives; coCondenser "
                 "figure 3: nb-recall higher for Condenser than BERT and coCondenser than Condenser.",
        "ours": {"metric": main_m, "round2_vs_round1": c4, "collapsed": collapse, "nb_recall": results.get("nb_recall", {})},
        "status": _status(c4_parts),
    })

    # C5: BERT's CLS attention changes more in fine-tuning than Condenser's.
    E = results.get("entropy", {})
    c5 = {b: compare(_get(E, b, "mean_abs_change"), _get(E, "condenser", "mean_abs_change")) for b in ("bert", "bert_cont")}
    claims.append({
        "id": "C5", "statement": "BERT's CLS attention entropy profile changes more in fine-tuning than Condenser's "
        "(mean |after - before| over layers; after = round-1 retrievers on the full training set).",
        "paper": "Condenser figure 2 (qualitative: BERT's per-layer CLS entropy changes drastically after fine-tuning, "
                 "Condenser's and ICT's little).",
        "ours": {"change": {a: _get(E, a, "mean_abs_change") for a in E}, "bert_minus_condenser": c5},
        "status": _status([None if c is None else c["verdict"] == "better" for c in c5.values()]),
    })

    # C6: Condenser's fine-tuning loss falls faster early.
    early = {a: early_loss(results, a, full) for a in MAIN_ARMS}
    c6 = {b: compare(early[b], early["condenser"]) for b in ("bert", "bert_cont")}
    claims.append({
        "id": "C6", "statement": "Condenser's retrieval fine-tuning loss is lower early in training than BERT's "
        "(mean loss over the first 25% of round-1 steps, full training set).",
        "paper": "Preprint figure 5 (NQ, first 10 epochs, log scale: Condenser's loss lower than BERT's in early epochs).",
        "ours": {"early_loss": early, "bert_minus_condenser": c6},
        "status": _status([None if c is None else c["verdict"] == "better" for c in c6.values()]),
    })

    # C7: Condenser matches or beats BERT on STS-b at low data.
    S = results.get("sts", {})
    low = [str(s) for s in results.get("sts_sizes", [])][:2]
    c7 = {s: {b: compare(_get(S, "condenser", s), _get(S, b, s)) for b in ("bert", "bert_cont")} for s in low}
    c7_parts = [None if c is None else c["verdict"] == "better" for s in low for c in c7[s].values()]
    claims.append({
        "id": "C7", "statement": "Condenser beats BERT on STS-b with little training data (the smallest two sizes); "
        "'matches' shows as 'within spread' in ours.",
        "paper": "Condenser table 1 (STS-b test Spearman, 500 / 1K / full pairs): BERT 68.6 / 71.4 / 82.5, Condenser "
                 "76.6 / 77.8 / 85.6.",
        "ours": {"by_size": c7, "all": S},
        "status": _status(c7_parts),
    })
    for c in claims:
        assert c["status"] in STATUSES, c
    return claims


def _compares(d: Any, path: tuple = ()) -> list[tuple[tuple, dict]]:
    if isinstance(d, Mapping):
        if {"a", "b", "diff", "spread", "verdict"} <= set(d):
            return [(path, d)]
        return [x for k, v in d.items() for x in _compares(v, path + (str(k),))]
    return []


def claim_numbers(claim: Mapping) -> str:
    """Our numbers behind one scorecard claim, one comparison per line: ``where: a vs b
    (difference, spread) verdict``. For the scorecard page (chapter 8)."""
    lines = []
    for path, c in _compares(claim.get("ours", {})):
        where = " ".join(p for p in path if p not in ("by_size", "round2_vs_round1", "bert_minus_condenser"))
        lines.append(f"{where}: {c['a']:.3f} vs {c['b']:.3f} (diff {c['diff']:+.3f}, spread {c['spread']:.3f}) {c['verdict']}")
    ours = claim.get("ours", {})
    if isinstance(ours, Mapping) and ours.get("narrowing") is not None:
        lines.append(f"gap narrows with more data: {ours['narrowing']}")
    return "\n".join(lines)


def format_scorecard(results: Mapping) -> str:
    """The main numbers and the scorecard as plain text (command line, notebooks): retrieval
    mean +- std over seeds per arm, training size and round, STS-b Spearman, then one line per claim."""
    lines = []
    metrics = results.get("budget", {}).get("metrics", ["nDCG@10"])
    shown = [metrics[0]] + [m for m in metrics if m.startswith("R@")][:1]
    bm = results.get("bm25", {})
    if bm:
        lines.append("BM25: " + ", ".join(f"{m} {bm['full'][m]:.3f}" for m in shown)
                     + ("; on the dense models' first %s tokens: " % bm.get("truncated_tokens") + ", ".join(
                         f"{m} {bm['truncated'][m]:.3f}" for m in shown) if "truncated" in bm else ""))
    for arm, rounds in results.get("retrieval", {}).items():
        for rnd, by_size in rounds.items():
            for size, ms in sorted(by_size.items(), key=lambda kv: int(kv[0])):
                cells = ", ".join(f"{m} {ms[m]['mean']:.3f}+-{ms[m]['std']:.3f}" for m in shown if m in ms)
                lines.append(f"{arm:<20} {rnd} n={size:<5} {cells}")
    for arm, by_size in results.get("sts", {}).items():
        lines.append(f"{arm:<20} STS-b " + ", ".join(f"n={k} {v['mean']:.3f}+-{v['std']:.3f}" for k, v in by_size.items()))
    for c in results.get("claims") or scorecard(results):
        lines.append(f"{c['id']}  {c['status']:<30} {c['statement']}")
    return "\n".join(lines)
