"""Pre-training recipes: plain MLM, Condenser and coCondenser stages, cached by their settings.

A *stage* is one call of the training loop: a method (``"mlm"``, ``"condenser"`` or
``"cocondenser"``), a starting checkpoint, a corpus and a budget. Stages chain: the book's
"Condenser" arm is the "BERT" arm's checkpoint continued with Condenser pre-training, and
coCondenser continues that one on the target corpus. Each finished stage is saved under
``$CONDENSER_LITE_CACHE/checkpoints/<method>-<hash>/``, the hash covering every setting and, by
content, the starting checkpoint, the tokenizer and the data files read (``stage_settings``), so
chapters and the command line share a stage instead of re-running it, replacing a file gives a
new stage, and an interrupted stage resumes from its last training checkpoint.

Settings at three levels: a preset holds the encoder every stage shares (``ModelConfig``) and
how its stages train (``PretrainingConfig``); ``reproduction.presets.stage_config`` builds one
stage's ``StageConfig`` from them (what ``pretrain`` runs, the same for the protocol's arms and
the command line; ``StageConfig``'s own defaults are the ``tiny`` preset's); and
``stage_loop_config`` turns a stage into the loop's ``loop.TrainConfig``.
Explained in chapter 2 (``notebooks/02_condenser.ipynb``) and chapter 3
(``notebooks/03_cocondenser.ipynb``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar
from pathlib import Path

import torch
from datasets import Dataset
from tqdm import tqdm

from ..data.beir import load_documents
from ..data.packing import heldout_split, mlm_eval_batches, pack_blocks
from ..data.sources import PRETRAINING_SOURCES, data_id, load_pretraining_corpus
from ..data.tevatron import TEVATRON_TASKS, load_tevatron_corpus
from ..data.tokenizer import load_tokenizer, tiny_tokenizer, tokenizer_key
from ..modeling.condenser import (HEAD_CLS_SOURCES, PAPER_SWITCHES, BertMLM, Condenser, CondenserVariant, deviations,
                                  tiny_bert_config)
from ..modeling.gauges import cls_cosine, cls_reliance_gauge, cls_swap_gap, heldout_mlm_loss, unigram_entropy
from ..modeling.gradcache import cocondenser_step
from ..modeling.masking import MLMCollator
from ..modeling.spans import SpanPairCollator, SpanPairs, tokenize_documents
from ..utils.cache import cache_dir, output_lock, settings_diff, settings_hash
from ..utils.checks import check_positive, check_types
from ..utils.devices import resolve_precision
from ..utils.errors import CheckpointError, ConfigError
from ..utils.loading import check_checkpoint, checkpoint_key, has_head, read_condenser_config
from .accounting import stage_compute
from .checkpoint import save_model
from .loop import TrainConfig, set_step_seed, train


@dataclass(frozen=True)
class ModelConfig:
    """The encoder all arms share. ``tokenizer`` None: the book's WordPiece
    (``tokenizer.tiny_tokenizer`` with ``vocab_size`` pieces); the shape fields build a BERT from
    scratch (ignored when a stage starts from a checkpoint); ``max_len`` is the length of blocks
    and spans and the model's position limit; ``skip_from`` / ``n_head_layers``: the Condenser
    head reads the output of layer ``skip_from`` through ``n_head_layers`` layers (Condenser
    section 3). ``dropout`` (hidden and attention) is set when a model is built from scratch,
    and the stages that continue it inherit it from its checkpoint; ``attn_implementation``
    (``"sdpa"`` or ``"eager"``) applies to every stage. The study page found pre-training
    without dropout learns faster per CPU second (as Cramming does), and eager attention under
    bf16 autocast the faster kernel on this CPU. Chapter 2.
    """

    tokenizer: str | None = None
    vocab_size: int = 8192
    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 512
    max_len: int = 64
    skip_from: int = 2
    n_head_layers: int = 2
    dropout: float = 0.1
    attn_implementation: str = "sdpa"

    def __post_init__(self) -> None:
        check_types(self)
        check_positive(self, "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                       "intermediate_size", "max_len", "n_head_layers")
        if self.attn_implementation not in ("sdpa", "eager"):
            raise ConfigError(f"attn_implementation={self.attn_implementation!r} must be 'sdpa' or 'eager'")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout={self.dropout!r} must be in [0, 1)")


@dataclass(frozen=True)
class PretrainingConfig:
    """How the pre-training stages train. Steps per stage: ``s1_steps`` (MLM from scratch, arm 1),
    ``s2_steps`` (continuing a checkpoint with MLM or Condenser, arms 2-3), ``s3_steps``
    (coCondenser on the target corpus, arm 4 and the ablations); ``None`` trains ``epochs``
    instead. ``batch_size`` counts sequences per MLM/Condenser update (``grad_accum``
    micro-batches each); ``cocondenser_batch`` counts documents (two spans each) and is never
    accumulated, because the contrastive loss needs the whole batch at once: ``chunk_size`` turns
    on the gradient cache instead. ``min_span``: the shortest span coCondenser cuts (a document
    needs ``2 * min_span`` tokens, ``spans.SpanPairs``). ``cocondenser_head``: the Condenser head a
    coCondenser stage starts with when it continues the preset's published Condenser
    (``Preset.pretrained["condenser"]``): ``"load"`` (its trained head, as the paper) or
    ``"random"`` (a fresh head: the only choice from a headless published checkpoint, a warned
    deviation). From any other checkpoint (your own stage 1) the head is loaded.
    ``general_corpus``: ``"general"`` (the scaled-down mix) or ``"wikipedia"``; ``*_limit``: use
    only the first N documents (full-scale Wikipedia is streamed, so it needs a limit).

    Held-out evaluation (chapter 2): ``heldout_fraction`` of the general corpus's documents
    (a hash of each document id, ``packing.heldout_split``) is never trained on; every
    stage evaluates on ``eval_blocks`` fixed, fixed-masked blocks of it every ``eval_every``
    steps and after the last one (``None``: after the last one only): the held-out MLM loss and,
    for a Condenser, the [CLS]-swap gap and the [CLS] cosine. ``heldout_fraction=None`` trains on
    everything and evaluates nothing. ``save_every``: steps between training checkpoints, so an
    interrupted stage resumes losing at most that many steps. Chapters 2 and 3."""

    s1_steps: int | None = 1200
    s2_steps: int | None = 600
    s3_steps: int | None = 250
    epochs: float = 1.0
    batch_size: int = 32
    grad_accum: int = 1
    lr: float = 1e-3
    cocondenser_batch: int = 16
    cocondenser_lr: float = 1e-3
    chunk_size: int | None = None
    min_span: int = 16
    cocondenser_head: str = "load"
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    general_corpus: str = "general"
    general_limit: int | None = None
    target_limit: int | None = None
    seed: int = 42
    mixed_precision: str = "no"
    save_every: int | None = 200
    heldout_fraction: float | None = 0.05
    eval_blocks: int = 256
    eval_every: int | None = 100

logger = logging.getLogger(__name__)

METHODS = ("mlm", "condenser", "cocondenser")
DONE_FILE = "pretrain_config.json"  # written last: a stage folder without it is unfinished
BOOKKEEPING = ("save_every",)  # StageConfig fields that change neither the weights nor the log
TARGET_CORPORA = TEVATRON_TASKS  # the passage collections coCondenser reads, by the tasks' names


_MODEL, _TRAINING = ModelConfig(), PretrainingConfig()  # StageConfig's defaults: the tiny preset's
MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ModelConfig))


@dataclass
class StageConfig:
    """One pre-training stage. Defaults: the ``tiny`` preset's settings (``presets.TINY``).

    ``init`` is ``None`` (a tiny BERT from scratch with ``tokenizer``'s vocabulary), a checkpoint
    folder or a Hub id. ``head`` says what a Condenser starts with: ``"random"`` (a fresh head,
    Condenser from BERT, paper section 3.4) or ``"load"`` (the checkpoint's head, coCondenser from
    Condenser); ``None`` picks ``"random"`` for ``condenser`` and ``"load"`` for ``cocondenser``.
    ``corpus`` is ``"general"`` (the Wikipedia sample, WikiText-2 and news; at full scale
    ``"wikipedia"``) for ``mlm``/``condenser``, or a retrieval corpus (``"scifact"``,
    ``"msmarco"``, ``"nq"``) whose documents coCondenser cuts spans from.
    ``model`` is the encoder (``ModelConfig``: its shape when built from scratch, the tokenizer,
    ``max_len`` and the head's ``skip_from`` and ``n_head_layers``). ``batch_size`` counts
    sequences for MLM/Condenser and *documents* (two spans each) for coCondenser.
    ``mlm_weight``/``co_weight`` weight coCondenser's two terms (table 4's ablations set one to
    0); ``chunk_size`` turns on the gradient cache. ``replace`` and ``settings`` take and give the
    model's fields by their own names, beside the stage's, as ``--set`` does. Chapter 2.

    >>> StageConfig().replace(hidden_size=256, lr=1e-4).model.hidden_size
    256
    """

    method: str = "condenser"
    init: str | None = None
    head: str | None = None
    corpus: str = "general"
    corpus_limit: int | None = None  # use only the first N documents (full-scale smoke runs)
    model: ModelConfig = _MODEL  # tokenizer None: the checkpoint's own, or the book's WordPiece for a new model
    # Condenser (paper section 3; the head's skip_from and n_head_layers are the model's)
    late_mlm: bool = True
    # switches of the Condenser stage that the mechanism page tries (condenser.PAPER_SWITCHES: off)
    head_mlm_probability: float | None = None  # the head reads a copy with this share masked
    detach_early: bool = False  # no gradient from the head into the early layers
    head_cls: str = "late"  # "constant": the head reads a learned constant, not the late CLS (a control)
    # masking and packing
    mlm_probability: float = 0.15
    short_seq_prob: float = 0.1
    # coCondenser (section 3.2-3.3)
    mlm_weight: float = 1.0
    co_weight: float = 1.0
    chunk_size: int | None = _TRAINING.chunk_size
    min_span: int = _TRAINING.min_span
    # optimisation (training.TrainConfig)
    max_steps: int | None = None
    epochs: float = _TRAINING.epochs
    batch_size: int = _TRAINING.batch_size
    grad_accum: int = _TRAINING.grad_accum
    lr: float = _TRAINING.lr
    weight_decay: float = _TRAINING.weight_decay
    warmup_ratio: float = _TRAINING.warmup_ratio
    max_grad_norm: float | None = 1.0
    mixed_precision: str = _TRAINING.mixed_precision
    seed: int = _TRAINING.seed
    save_every: int | None = 200
    # held-out evaluation on the general corpus (presets.PretrainingConfig explains them)
    heldout_fraction: float | None = _TRAINING.heldout_fraction
    eval_blocks: int = _TRAINING.eval_blocks
    eval_every: int | None = _TRAINING.eval_every

    def __post_init__(self) -> None:
        check_types(self)
        check_positive(self, "lr", "batch_size", "grad_accum", "min_span", "epochs", "max_steps")
        if not isinstance(self.model, ModelConfig):
            raise ConfigError(f"model={self.model!r} must be a ModelConfig")
        if self.method not in METHODS:
            raise ConfigError(f"method={self.method!r} is not one of {METHODS}")
        if self.head not in (None, "load", "random"):
            raise ConfigError(f"head={self.head!r} must be 'load', 'random' or None")
        if self.method == "cocondenser" and self.corpus == "general":
            raise ConfigError("coCondenser pre-trains on a target corpus: set corpus='scifact' (or 'msmarco', ...)")
        if deviations(self) and self.method != "condenser":
            raise ConfigError(f"{', '.join(deviations(self))} change a Condenser stage; method={self.method!r} "
                              f"has no such stage: leave them at {PAPER_SWITCHES}")
        if self.head_cls not in HEAD_CLS_SOURCES:
            raise ConfigError(f"head_cls={self.head_cls!r} must be one of {HEAD_CLS_SOURCES}")
        if self.head_mlm_probability is not None and not self.mlm_probability < self.head_mlm_probability < 1:
            raise ConfigError(f"head_mlm_probability={self.head_mlm_probability} must be above mlm_probability="
                              f"{self.mlm_probability} and below 1")
        if self.heldout_fraction is not None and not 0 < self.heldout_fraction < 1:
            raise ConfigError(f"heldout_fraction={self.heldout_fraction} must be in (0, 1), or None for no held-out set")
        if self.eval_blocks < 2 or (self.eval_every is not None and self.eval_every < 1):
            raise ConfigError(f"eval_blocks={self.eval_blocks} must be >= 2 and eval_every={self.eval_every} "
                              ">= 1 (or None: evaluate after the last step only)")

    # settings only some methods read: set for another, they would change the stage's cache key
    # and nothing it computes (the gradient cache and the span sampler are coCondenser's)
    READ_ONLY_BY: ClassVar[dict[str, tuple[str, ...]]] = {
        **dict.fromkeys(("mlm_weight", "co_weight", "chunk_size", "min_span"), ("cocondenser",)),
        **dict.fromkeys(("late_mlm", "head", "head_mlm_probability", "detach_early", "head_cls", "skip_from",
                         "n_head_layers"), ("condenser", "cocondenser")),
    }

    @classmethod
    def unread(cls, method: str, names) -> list[str]:
        """Those of ``names`` a stage of ``method`` does not read."""
        return [n for n in names if method not in cls.READ_ONLY_BY.get(n, (method,))]

    @classmethod
    def setting_names(cls) -> tuple[str, ...]:
        """The names ``replace``, ``settings`` and ``--set`` use: the stage's fields, the model's
        in place of ``model``."""
        return tuple(n for f in dataclasses.fields(cls)
                     for n in ((f.name,) if f.name != "model" else MODEL_FIELDS))

    def replace(self, **changes) -> "StageConfig":
        """A copy with ``changes``, the model's fields among them by their own names."""
        unknown = set(changes) - set(self.setting_names()) - {"model"}
        if unknown:
            raise TypeError(f"unknown StageConfig field(s) {sorted(unknown)}")
        model = {k: changes.pop(k) for k in MODEL_FIELDS if k in changes}
        if model:
            changes["model"] = dataclasses.replace(changes.get("model", self.model), **model)
        return dataclasses.replace(self, **changes)

    def settings(self) -> dict:
        """Every setting under its ``setting_names`` name (what a stage's record and key hold)."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "model"}
        return {**dataclasses.asdict(self.model), **own}

    @property
    def resolved_head(self) -> str:
        return self.head or ("load" if self.method == "cocondenser" else "random")


# ---- caching -----------------------------------------------------------------------------


def stage_data(cfg: StageConfig) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """The data sets a stage reads and which of their files: ``sources.data_id``'s names and roles."""
    if cfg.method == "cocondenser" or cfg.corpus not in ("general", "wikipedia"):
        return (TARGET_CORPORA.get(cfg.corpus, cfg.corpus),), ("corpus",)
    if cfg.corpus == "wikipedia":
        return ("wikipedia-full", "wikitext-103", "news"), None
    return PRETRAINING_SOURCES, None


def stage_settings(cfg: StageConfig, tokenizer=None, data_dir: str | None = None) -> dict:
    """Everything a stage's result depends on, by content (chapter 2): every setting of
    ``StageConfig.settings`` (the model's among them) but the ``BOOKKEEPING`` ones (a field added
    to either config joins by itself), the ``PAPER_SWITCHES`` only where the stage turns one on, with
    ``init`` as the starting checkpoint's content key (``loading.checkpoint_key``), ``tokenizer``
    as the vocabulary's (``tokenizer.tokenizer_key``) and ``data`` as the files read
    (``sources.data_id``). Replacing the files at the ``init`` path or in the data mirror gives a
    new key; a missing mirror folder raises instead of reusing a stale stage."""
    tokenizer = tokenizer if tokenizer is not None else get_tokenizer(cfg, data_dir)
    # the switches join only where they deviate, so the paper's Condenser keeps one key whatever
    # switches the book adds beside it (and a stage that turns one on gets a key of its own)
    settings = {k: v for k, v in cfg.settings().items() if k not in BOOKKEEPING and k not in PAPER_SWITCHES}
    settings.update(deviations(cfg))
    names, roles = stage_data(cfg)
    settings.update(init=checkpoint_key(cfg.init), tokenizer=tokenizer_key(tokenizer),
                    data=data_id(names, data_dir, roles),
                    mixed_precision=resolve_precision(cfg.mixed_precision))  # "auto" differs by machine
    if cfg.method != "mlm" and cfg.heldout_fraction is not None:
        settings["gauges"] = HEAD_GAUGES
    return settings


def stage_key(cfg: StageConfig, tokenizer=None, data_dir: str | None = None) -> str:
    """Hash of ``stage_settings``: the stage's cache folder is ``<cache>/checkpoints/<method>-<key>`` (chapter 2)."""
    return settings_hash(stage_settings(cfg, tokenizer, data_dir))


def is_done(path: str | Path) -> bool:
    return (Path(path) / DONE_FILE).exists()


def stage_folder(cfg: StageConfig, data_dir: str | None = None) -> Path:
    """The cache folder ``pretrain(cfg)`` uses: ``<cache>/checkpoints/<method>-<stage_key>``. Chapter 2."""
    return cache_dir("checkpoints") / f"{cfg.method}-{stage_key(cfg, data_dir=data_dir)}"


def stage_done(cfg: StageConfig, output_dir: str | Path | None = None, data_dir: str | None = None) -> bool:
    """Whether ``pretrain(cfg, output_dir)`` would reuse a finished stage instead of training
    (the estimate before long work skips it then). Chapter 2."""
    return is_done(Path(output_dir) if output_dir is not None else stage_folder(cfg, data_dir))


# ---- building blocks -----------------------------------------------------------------------


def get_tokenizer(cfg: StageConfig, data_dir: str | None = None):
    """The stage's tokenizer: explicit, else the starting checkpoint's, else the book's WordPiece."""
    if cfg.model.tokenizer is not None:
        return load_tokenizer(cfg.model.tokenizer)
    if cfg.init is not None:
        return load_tokenizer(cfg.init)
    return tiny_tokenizer(vocab_size=cfg.model.vocab_size, data_dir=data_dir)


def _check_head_choice(cfg: StageConfig) -> None:
    """coCondenser continues a Condenser with its head: refuse a headless ``init`` with
    ``head='load'`` naming both ways out, and warn when the head starts fresh (a deviation)."""
    if cfg.resolved_head == "load" and not has_head(cfg.init):
        raise ConfigError(
            f"coCondenser starts from {cfg.init!r} with head='load', but that checkpoint has no Condenser head "
            "(the published Luyu/condenser has none). Either pre-train stage 1 yourself "
            "(pretrain(paper_condenser()), then paper_cocondenser(init=<its folder>)), or start the head fresh "
            "with head='random' (--set head=random), a deviation from the paper.")
    if cfg.resolved_head == "random":
        warnings.warn(f"coCondenser stage from {cfg.init!r} with a fresh, untrained Condenser head: a deviation from "
                      "the paper, which continues a Condenser with its trained head (pre-train stage 1 yourself "
                      "with paper_condenser() to follow it)", UserWarning, stacklevel=3)


def _check_head_shape(cfg: StageConfig) -> None:
    """A stage that continues a saved Condenser head must give it the shape it was trained with:
    the stage's ``skip_from`` / ``n_head_layers`` come from its preset, the head from the checkpoint,
    and a head read from another layer than it learnt on would train on, silently wrong."""
    saved = read_condenser_config(cfg.init) or {}
    asked = {"skip_from": cfg.model.skip_from, "n_head_layers": cfg.model.n_head_layers}
    differ = {k: v for k, v in asked.items() if k in saved and saved[k] != v}
    if differ:
        have = ", ".join(f"{k}={saved[k]}" for k in differ)
        fix = " ".join(f"--set {k}={saved[k]}" for k in differ)
        raise ConfigError(f"the Condenser head in {cfg.init!r} was trained with {have}, but this stage asks for "
                          + ", ".join(f"{k}={v}" for k, v in differ.items())
                          + f"; pass {fix} to continue that head, or --set head=random for a fresh one")


def build_model(cfg: StageConfig, tokenizer):
    """``BertMLM`` for ``mlm``, ``Condenser`` otherwise (``CondenserVariant`` where the stage turns
    on a switch of the mechanism page or the control), from scratch or from ``cfg.init``.

    Random initial weights (a model from scratch, a fresh Condenser head) are drawn as "step 0"
    of the stage's seed: without it they came from torch's start-up seed, which differs in every
    process, so a stage re-run from a cold cache gave other numbers."""
    set_step_seed(cfg.seed, 0)  # the training loop seeds steps 1, 2, ...

    switches = deviations(cfg)
    head_copy = switches.pop("head_mlm_probability", None)  # the collator's: the model reads a batch input
    condenser_kw = dict(skip_from=cfg.model.skip_from, n_head_layers=cfg.model.n_head_layers, late_mlm=cfg.late_mlm, **switches)
    # the head's own masked copy is a batch input only the variant's forward reads
    condenser = CondenserVariant if head_copy is not None else Condenser.class_for(condenser_kw)
    if cfg.init is None and cfg.method != "mlm" and cfg.resolved_head == "load":
        raise ConfigError("head='load' needs an init checkpoint that has a Condenser head")
    if cfg.method == "cocondenser":
        _check_head_choice(cfg)
    if cfg.init is None:
        config = tiny_bert_config(
            vocab_size=len(tokenizer), hidden_size=cfg.model.hidden_size, num_hidden_layers=cfg.model.num_hidden_layers,
            num_attention_heads=cfg.model.num_attention_heads, intermediate_size=cfg.model.intermediate_size,
            max_position_embeddings=cfg.model.max_len, pad_token_id=tokenizer.pad_token_id,
            hidden_dropout_prob=cfg.model.dropout, attention_probs_dropout_prob=cfg.model.dropout,
        )
        model = BertMLM.from_config(config) if cfg.method == "mlm" else condenser.from_config(config, **condenser_kw)
    elif cfg.method == "mlm":
        model = BertMLM.from_pretrained(cfg.init)
    elif cfg.resolved_head == "load":
        _check_head_shape(cfg)
        model = condenser.from_pretrained(cfg.init, head="load", **condenser_kw)
    else:
        model = condenser.from_bert(cfg.init, **condenser_kw)
    # the kernel only (eager and sdpa agree to ~5e-7); the head's layers share the backbone's config
    model.backbone.set_attn_implementation(cfg.model.attn_implementation)
    return model


def general_sections(heldout_fraction: float | None, data_dir: str | None = None, corpus: Dataset | None = None):
    """``(train, heldout)`` sections of the scaled-down general corpus: with ``heldout_fraction``
    the hash split of ``packing.heldout_split`` (by document, so no held-out section shares
    an article with a training one), else ``(all, None)``. ``corpus``: the loaded corpus, if at
    hand. Chapter 2."""
    corpus = corpus if corpus is not None else load_pretraining_corpus(data_dir=data_dir)
    if heldout_fraction is None:
        return corpus, None
    return heldout_split(corpus, fraction=heldout_fraction)


def general_blocks(cfg: StageConfig, tokenizer, data_dir: str | None = None, corpus: Dataset | None = None):
    """The blocks an MLM or Condenser stage trains on, ``[CLS] ... [SEP]`` packed
    (``packing.pack_blocks``): the general corpus's training sections (held-out documents
    excluded, ``general_sections``; then the first ``corpus_limit``), or a reader's own corpus
    (``cfg.corpus`` a path or a retrieval corpus's name: ``target_documents``), all of it, each
    title a sentence of its own. Either way the held-out gauges read the general corpus's
    held-out set, so a stage on your corpus compares with the book's. Chapter 2."""
    if cfg.corpus not in ("general", "wikipedia"):
        train = _titled(target_documents(cfg, data_dir))
    elif cfg.corpus == "wikipedia":
        if cfg.heldout_fraction is not None:
            raise ValueError("held-out evaluation reads the scaled-down general corpus, not streamed Wikipedia: "
                             "set heldout_fraction=None at full scale")
        # streamed: materialise only what the budget needs
        stream = load_pretraining_corpus(data_dir=data_dir, full=True)
        train = Dataset.from_list(list(stream.take(cfg.corpus_limit or 1_000_000)))
    else:
        train, _ = general_sections(cfg.heldout_fraction, data_dir, corpus)
        if cfg.corpus_limit:
            train = train.select(range(min(cfg.corpus_limit, len(train))))
    return pack_blocks(train, tokenizer, max_len=cfg.model.max_len, short_seq_prob=cfg.short_seq_prob, seed=cfg.seed)


def _titled(docs: Dataset) -> Dataset:
    """Documents as one ``text`` each, the title (where there is one) on a line of its own before
    the text: packing splits sentences at line breaks, so a title never runs into the text."""
    texts = [f"{title.strip()}\n{text or ''}" if title and title.strip() else text or ""
             for title, text in zip(docs["title"], docs["text"])]
    return Dataset.from_dict({"text": texts})


def target_documents(cfg: StageConfig, data_dir: str | None = None):
    """The target search corpus coCondenser pre-trains on, or a reader's own corpus an MLM or
    Condenser stage does (rows with ``title`` and ``text``):
    ``msmarco`` / ``nq`` (Tevatron's passage collections), a BEIR name, or a path
    (a BEIR folder, a ``.jsonl`` of documents, a text file with one document per line:
    ``beir.load_documents``). Chapter 3."""
    if cfg.corpus in TARGET_CORPORA:
        docs = load_tevatron_corpus(TARGET_CORPORA[cfg.corpus], data_dir=data_dir)
    else:
        docs = load_documents(cfg.corpus, data_dir=data_dir)
    if cfg.corpus_limit:
        docs = docs.select(range(min(cfg.corpus_limit, len(docs))))
    return docs


def span_pairs(cfg: StageConfig, tokenizer, data_dir: str | None = None):
    """Per-epoch span pairs of the target corpus (``spans.SpanPairs``)."""
    ids = tokenize_documents(target_documents(cfg, data_dir), tokenizer)
    return SpanPairs(ids, max_len=cfg.model.max_len, min_span=cfg.min_span, seed=cfg.seed)


# ---- held-out evaluation and gauges -------------------------------------------------------

EVAL_SEED = 0  # packing and masking of the held-out blocks: one fixed set for every stage and seed
_EVAL_BATCH = 64  # blocks per evaluation batch (the [CLS] swap rolls within a batch)
RELIANCE_DRAWS = 3  # mask draws of the held-out blocks the [CLS]-reliance gauge averages over
# What a Condenser-family stage logs joins its cache key, so a cached stage is reused only where it
# logged the gauges the book reads (an MLM stage's key carries no such entry); the "-2" names how
# the ablation partners are drawn: from every held-out block, not only the batch's.
HEAD_GAUGES = "cls-reliance-2"


def heldout_set(cfg: StageConfig, tokenizer, data_dir: str | None = None, corpus: Dataset | None = None) -> dict:
    """The fixed held-out evaluation set of ``cfg``'s tokenizer, cached on disk:
    ``{"batches": [...], "info": {...}}``.

    ``batches``: ``eval_blocks`` blocks of the general corpus's held-out documents
    (``general_sections``), packed and masked once with ``EVAL_SEED``
    (``packing.mlm_eval_batches``), so every stage of every arm and pre-training seed is
    scored on the same tokens; each batch carries ``doc_id``, its blocks' documents (numbered by
    ``source`` and ``doc_id``, the key of the held-out split), so the [CLS]-reliance gauge takes
    its ablation partners from other documents. ``mask_draws``: ``RELIANCE_DRAWS - 1`` further
    maskings of the same blocks (the reliance gauge's noise covers masks). ``info``: ``unigram_entropy``, the cross-entropy of those masked
    tokens under the unigram model of the training sections (``gauges.unigram_entropy``: what
    a model that knows only word frequencies scores; computed once per tokenizer), and the counts
    (``n_blocks``, ``n_masked``, held-out ``sections``). The key covers the vocabulary itself, so
    a stage continuing a checkpoint finds its parent's set. Explained in chapter 2.
    """
    vocab = sorted(tokenizer.get_vocab().items())
    settings = {"vocab": settings_hash(vocab), "max_len": cfg.model.max_len, "short_seq_prob": cfg.short_seq_prob,
                "mlm_probability": cfg.mlm_probability, "fraction": cfg.heldout_fraction, "blocks": cfg.eval_blocks,
                "data": data_id(PRETRAINING_SOURCES, data_dir), "seed": EVAL_SEED,
                "doc_ids": True, "mask_draws": RELIANCE_DRAWS}
    path = cache_dir("heldout") / f"heldout-{settings_hash(settings)}.pt"
    if path.exists():
        return torch.load(path, weights_only=True)
    train, held = general_sections(cfg.heldout_fraction, data_dir, corpus)
    blocks = pack_blocks(held, tokenizer, max_len=cfg.model.max_len, short_seq_prob=cfg.short_seq_prob, seed=EVAL_SEED)
    collator = MLMCollator(tokenizer, mlm_probability=cfg.mlm_probability)
    # a block's document: its section's (source, doc_id), numbered; sections of one article share it
    number: dict[tuple, int] = {}
    section_doc = torch.tensor([number.setdefault(key, len(number)) for key in zip(held["source"], held["doc_id"])])

    def draw(mask_seed: int) -> list[dict]:
        out = mlm_eval_batches(blocks, collator, n_blocks=cfg.eval_blocks, batch_size=_EVAL_BATCH, seed=EVAL_SEED,
                               mask_seed=mask_seed, columns=("doc_index",))
        for b in out:
            b["doc_id"] = section_doc[b.pop("doc_index")]
        return out

    batches = draw(EVAL_SEED)  # the blocks and masks of every committed stage's gauges, so runs compare
    mask_draws = [draw(EVAL_SEED + d) for d in range(1, RELIANCE_DRAWS)]
    # unigram counts from the training sections as text (packing would only drop a few short blocks)
    train_ids = tokenizer(list(train["text"]), add_special_tokens=False, return_attention_mask=False,
                          return_token_type_ids=False, verbose=False)["input_ids"]
    info = {"unigram_entropy": unigram_entropy(train_ids, batches, len(tokenizer), tokenizer.all_special_ids),
            "n_blocks": sum(len(b["input_ids"]) for b in batches),
            "n_masked": int(sum(int((b["labels"] != -100).sum()) for b in batches)),
            "sections": len(held), "heldout_fraction": cfg.heldout_fraction, "settings": settings}
    out = {"batches": batches, "mask_draws": mask_draws, "info": info}
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    torch.save(out, tmp)
    tmp.replace(path)
    return out


def stage_gauges(model, batches: list[dict], mask_draws: Sequence[list[dict]] = ()) -> dict[str, float]:
    """What a stage logs on the held-out batches (chapter 2): ``mlm_loss`` (the backbone's last
    layer) and ``cls_cosine`` (mean cosine between different blocks' late [CLS]) for every model;
    for a Condenser (and coCondenser) also ``head_loss``, the [CLS]-swap gap ``cls_swap_gap`` with
    its paired standard error ``cls_swap_noise`` (``gauges.cls_swap_gap``) and, where the batches
    carry ``doc_id`` (``heldout_set``), the pre-registered reliance gauge over ``batches`` and
    ``mask_draws`` (``gauges.cls_reliance_gauge``): ``cls_reliance`` (omitted where undefined),
    ``cls_reliance_noise``, ``cls_reliance_mask_spread``, ``cls_reliance_zero``,
    ``cls_reliance_mean`` and the losses it is made of, ``reliance_{own,ablated,zero,mean,late}_loss``
    (from which the scorecard recomputes it). Eval mode, no gradients."""
    out = heldout_mlm_loss(model, batches)
    out["cls_cosine"] = cls_cosine(model, batches)
    if isinstance(model, Condenser):
        swap = cls_swap_gap(model, batches)
        out["cls_swap_gap"], out["cls_swap_noise"] = swap["gap"], swap["noise"]
        if all("doc_id" in b for b in batches):
            rel = cls_reliance_gauge(model, [batches, *mask_draws])
            for k in ("own", "ablated", "zero", "mean", "late"):
                out[f"reliance_{k}_loss"] = rel[f"{k}_loss"]
            named = {"cls_reliance": "reliance", "cls_reliance_noise": "noise", "cls_reliance_mask_spread":
                     "mask_spread", "cls_reliance_zero": "reliance_zero", "cls_reliance_mean": "reliance_mean"}
            # the training log holds floats: an undefined value is left out, not written as NaN
            out.update({k: rel[v] for k, v in named.items() if rel[v] is not None})
    return out


def final_gauges(history: list[dict]) -> dict[str, float] | None:
    """The last held-out evaluation of a training log (``eval_*`` keys, prefix dropped, with its
    ``step``), or None if the stage evaluated nothing. Chapter 2."""
    for rec in reversed(history):
        values = {k[len("eval_"):]: v for k, v in rec.items() if k.startswith("eval_")}
        if values:
            return {"step": rec["step"], **values}
    return None


def mlm_step(model, batch: dict, accelerator) -> dict[str, float]:
    """One MLM/Condenser micro-batch through ``train``'s ``step_fn`` hook: forward, backward,
    the output's losses (the loop scales the gradients for accumulation). Chapter 2."""
    out = model(**batch)
    accelerator.backward(out.loss)
    return {k: float(getattr(out, k).detach()) for k in ("loss", "head_loss", "late_loss")
            if getattr(out, k, None) is not None}


def counted(step_fn, grad_accum: int):
    """``step_fn`` that also reports its batch's sizes (``accounting.COUNTS``) for compute
    accounting. The loop averages metrics over micro-batches and processes, so each count is
    scaled by both: the logged value is the whole optimizer step's. Chapter 4."""

    def step(model, batch: dict, accelerator) -> dict[str, float]:
        metrics = step_fn(model, batch, accelerator)
        rows, length = batch["input_ids"].shape
        scale = grad_accum * accelerator.num_processes
        metrics.update(tokens=float(batch["attention_mask"].sum()) * scale, positions=float(rows * length * scale),
                       pairs=float(rows * length * length * scale),
                       masked=float((batch["labels"] != -100).sum()) * scale if "labels" in batch else 0.0)
        if "head_labels" in batch:  # the head's own masked copy: its early layers and MLM loss
            metrics["head_masked"] = float((batch["head_labels"] != -100).sum()) * scale
        return metrics

    return step


# ---- running a stage -------------------------------------------------------------------------


def stage_training(cfg: StageConfig, tokenizer, mlm_collator: MLMCollator, data_dir: str | None = None,
                   corpus: Dataset | None = None):
    """``(data, collate_fn, step_fn)`` of a stage: coCondenser's span pairs with the gradient-cache
    step (``cocondenser_step``), or the packed blocks of an MLM or Condenser stage with the plain
    step; what ``pretrain`` trains and ``benchmarks/bench_pretrain.py`` times. Chapters 2 and 3."""
    if cfg.method == "cocondenser":
        step_fn = functools.partial(cocondenser_step, chunk_size=cfg.chunk_size, mlm_weight=cfg.mlm_weight,
                                    co_weight=cfg.co_weight)
        return span_pairs(cfg, tokenizer, data_dir), SpanPairCollator(mlm_collator), step_fn
    return general_blocks(cfg, tokenizer, data_dir, corpus), mlm_collator, mlm_step


def stage_loop_config(cfg: StageConfig, output_dir: str | Path, progress: bool | None = None,
                 evaluate: bool = False, resume: bool = True):
    # without eval_every, evaluate after the last step only (the loop always evaluates there)
    eval_every = (cfg.eval_every or 2**31) if evaluate else None
    return TrainConfig(
        output_dir=str(output_dir), max_steps=cfg.max_steps, epochs=cfg.epochs, batch_size=cfg.batch_size,
        grad_accum=cfg.grad_accum, lr=cfg.lr, weight_decay=cfg.weight_decay, warmup_ratio=cfg.warmup_ratio,
        max_grad_norm=cfg.max_grad_norm, mixed_precision=cfg.mixed_precision, seed=cfg.seed,
        save_every=cfg.save_every, eval_every=eval_every, progress=progress, resume=resume,
    )


def pretrain(
    cfg: StageConfig,
    output_dir: str | Path | None = None,
    data_dir: str | None = None,
    progress: bool | None = None,
    restart: bool = False,
    check: Callable[[int, Mapping[str, float]], dict] | None = None,
) -> Path:
    """Run one pre-training stage (or reuse it from the cache) and return its checkpoint folder.

    The folder holds a plain Hugging Face BERT checkpoint (the backbone; with a Condenser also
    ``condenser_head.pt``), the tokenizer, the training log ``train/log.jsonl`` and
    ``pretrain_config.json``. Interrupting and calling again resumes from the last training
    checkpoint in ``train/``. The folder is named by ``stage_key`` unless ``output_dir`` is
    given; a finished stage there is reused only if it was made with the same
    ``stage_settings``, else ``CheckpointError`` names the differing ones (``restart=True``
    replaces it; so it does an unfinished one). The folder is locked while the stage runs
    (``cache.output_lock``): a second process asking for it waits, then reuses it.
    ``check`` (``health.stage_check``) judges every held-out evaluation against the committed
    runs: its line is printed (logged without ``progress``), its verdict joins the log line and the
    stage's record keeps the updates outside the band. Explained in chapter 2
    (``notebooks/02_condenser.ipynb``).
    """
    if cfg.init is not None:
        check_checkpoint(cfg.init)
    tokenizer = get_tokenizer(cfg, data_dir)
    settings = stage_settings(cfg, tokenizer, data_dir)
    key = settings_hash(settings)
    out = Path(output_dir) if output_dir is not None else cache_dir("checkpoints") / f"{cfg.method}-{key}"
    with output_lock(out):
        if restart:
            (out / DONE_FILE).unlink(missing_ok=True)
        elif is_done(out):
            _check_stage_record(out, key, settings)
            logger.info("reusing the pre-trained stage in %s", out)
            return out
        elif (out / "config.json").exists() and not (out / "train" / "checkpoint").exists():
            raise CheckpointError(f"{out} holds a model that no pre-training stage finished there (no {DONE_FILE}); "
                                  "it is not overwritten: use another output folder, or restart=True (command "
                                  "line: --restart) to replace it")
        model = build_model(cfg, tokenizer)
        mlm_collator = MLMCollator(tokenizer, mlm_probability=cfg.mlm_probability,
                                   head_mlm_probability=cfg.head_mlm_probability)
        # MLM stages load the general corpus once, for training and (first time) the held-out set
        corpus = load_pretraining_corpus(data_dir=data_dir) if cfg.method != "cocondenser" and cfg.corpus == "general" \
            else None
        heldout = heldout_set(cfg, tokenizer, data_dir, corpus) if cfg.heldout_fraction is not None else None
        eval_fn = functools.partial(stage_gauges, batches=heldout["batches"],
                                    mask_draws=heldout.get("mask_draws", ())) if heldout else None
        tcfg = stage_loop_config(cfg, out / "train", progress, evaluate=heldout is not None, resume=not restart)
        on_eval = None
        if check is not None and heldout is not None:
            if hasattr(check, "check_heldout"):
                check.check_heldout(heldout["info"])
            on_eval = functools.partial(_health, check, progress)
        data, collate_fn, step_fn = stage_training(cfg, tokenizer, mlm_collator, data_dir, corpus)
        result = train(model, data, tcfg, collate_fn=collate_fn, step_fn=counted(step_fn, cfg.grad_accum),
                       eval_fn=eval_fn, on_eval=on_eval, depends_on=settings)
        if cfg.method == "cocondenser":
            n_skipped, n_documents, rows = data.n_skipped, data.n_documents, 2 * cfg.batch_size
        else:
            n_skipped, n_documents, rows = 0, 0, cfg.batch_size
        save_model(model, out)
        tokenizer.save_pretrained(out)
        shape = {k: getattr(model.config, k)
                 for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size")}
        shape["n_head_layers"] = getattr(model, "n_head_layers", 0)
        if cfg.head_mlm_probability:  # the head reads its own masked copy: its early layers run again
            shape["head_copy_layers"] = cfg.model.skip_from
        grad_cache = cfg.method == "cocondenser" and cfg.chunk_size is not None and cfg.chunk_size < rows
        record = {"key": key, "settings": settings, "config": cfg.settings(), "steps": result.step,
                  "wall_time": result.wall_time, "skipped_documents": n_skipped, "documents": n_documents,
                  "heldout": final_gauges(result.history), "heldout_set": heldout["info"] if heldout else None,
                  "compute": stage_compute(result.history, cfg.method, shape, rows, grad_cache, result.wall_time),
                  "threads": torch.get_num_threads(),
                  "health": _health_summary(result.history) if on_eval else None}
        (out / DONE_FILE).write_text(json.dumps(record, indent=2, default=str))
        # the optimizer state is only needed to resume an unfinished stage
        shutil.rmtree(out / "train" / "checkpoint", ignore_errors=True)
    return out


def _health(check: Callable, progress: bool | None, step: int, values: Mapping[str, float]) -> dict:
    """One held-out evaluation judged by ``check``: its line shown, its verdict for the log."""
    verdict = dict(check(step, {k.removeprefix("eval_"): v for k, v in values.items()}))
    line = verdict.pop("line", None)
    if line:
        if progress:
            tqdm.write(line)
        else:
            logger.info(line)
    return verdict


def _health_summary(history: Sequence[Mapping]) -> dict:
    """A stage's health verdicts: how many evaluations fell within the band, and the updates that did not."""
    judged = [r for r in history if "health" in r]
    return {"evaluations": len(judged), "within": sum(r["health"] == "within" for r in judged),
            "outside": [{"step": r["step"], "health": r["health"], "excess": r.get("health_excess")}
                        for r in judged if r["health"] in ("above", "below")],
            "no_reference": sum(r["health"] == "none" for r in judged)}


def _check_stage_record(out: Path, key: str, settings: dict) -> None:
    """A finished stage in ``out`` is the one asked for, or ``CheckpointError`` says what differs."""
    record = json.loads((out / DONE_FILE).read_text())
    if record.get("key") == key:
        return
    saved = json.loads(json.dumps(record.get("settings") or {}))
    now = json.loads(json.dumps(settings, default=str))  # as it reads back (tuples -> lists)
    diff = settings_diff(saved, now) if saved else [f"settings hash: saved {record.get('key')!r} vs now {key!r}"]
    raise CheckpointError(f"{out} holds another pre-training stage ({'; '.join(diff)}); use another output "
                          "folder, or restart=True (command line: --restart) to replace it")
