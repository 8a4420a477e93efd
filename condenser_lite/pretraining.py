"""Pre-training recipes: plain MLM, Condenser and coCondenser stages, cached by their settings.

A *stage* is one call of the training loop: a method (``"mlm"``, ``"condenser"`` or
``"cocondenser"``), a starting checkpoint, a corpus and a budget. Stages chain: the book's
"Condenser" arm is the "BERT" arm's checkpoint continued with Condenser pre-training, and
coCondenser continues that one on the target corpus. Each finished stage is saved under
``$CONDENSER_LITE_CACHE/checkpoints/<method>-<hash>/``, the hash covering every setting and the
starting checkpoint's own hash, so chapters and the command line share a stage instead of
re-running it, and an interrupted stage resumes from its last training checkpoint.

A stage's settings come from a preset (``presets.py``): :func:`stage_config` builds the
``PretrainConfig`` of one stage of any preset, the same one for the protocol's arms and the
``pretrain`` command; :class:`PretrainConfig`'s own defaults are the ``tiny`` preset's, and
:func:`paper_condenser` / :func:`paper_cocondenser` are the ``paper`` preset's two stages.
Explained in chapter 2 (``notebooks/02_condenser.ipynb``) and chapter 3
(``notebooks/03_cocondenser.ipynb``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset

from .config import cache_dir
from .data import load_documents, load_pretraining_corpus
from .gradcache import cocondenser_step
from .model import BertMLM, Condenser, has_head, tiny_bert_config
from .presets import PAPER, TEVATRON_TASKS, TINY, Preset, get_preset
from .pretrain_data import MLMCollator, pack_blocks
from .spans import SpanPairCollator, SpanPairs, tokenize_documents
from .tevatron import load_tevatron_corpus
from .tokenizer import load_tokenizer, tiny_tokenizer
from .training import TrainConfig, set_step_seed, train

logger = logging.getLogger(__name__)

METHODS = ("mlm", "condenser", "cocondenser")
DONE_FILE = "pretrain_config.json"  # written last: a stage folder without it is unfinished


_MODEL, _TRAINING = TINY.model, TINY.pretraining  # PretrainConfig's defaults: the tiny preset's


@dataclass
class PretrainConfig:
    """One pre-training stage. Defaults: the ``tiny`` preset's settings (``presets.TINY``).

    ``init`` is ``None`` (a tiny BERT from scratch with ``tokenizer``'s vocabulary), a checkpoint
    folder or a Hub id. ``head`` says what a Condenser starts with: ``"random"`` (a fresh head,
    Condenser from BERT, paper section 3.4) or ``"load"`` (the checkpoint's head, coCondenser from
    Condenser); ``None`` picks ``"random"`` for ``condenser`` and ``"load"`` for ``cocondenser``.
    ``corpus`` is ``"general"`` (the Wikipedia sample, WikiText-2 and news; at full scale
    ``"wikipedia"``) for ``mlm``/``condenser``, or a retrieval corpus (``"scifact"``,
    ``"msmarco"``, ``"wikipedia-nq"``) whose documents coCondenser cuts spans from.
    ``batch_size`` counts sequences for MLM/Condenser and *documents* (two spans each) for
    coCondenser. ``mlm_weight``/``co_weight`` weight coCondenser's two terms (table 4's
    ablations set one to 0); ``chunk_size`` turns on the gradient cache. Chapter 2.
    """

    method: str = "condenser"
    init: str | None = None
    head: str | None = None
    tokenizer: str | None = _MODEL.tokenizer  # None: the checkpoint's own, or the book's WordPiece for a new model
    corpus: str = "general"
    corpus_limit: int | None = None  # use only the first N documents (full-scale smoke runs)
    max_len: int = _MODEL.max_len
    # the tiny BERT built when init is None (ignored otherwise)
    hidden_size: int = _MODEL.hidden_size
    num_hidden_layers: int = _MODEL.num_hidden_layers
    num_attention_heads: int = _MODEL.num_attention_heads
    intermediate_size: int = _MODEL.intermediate_size
    vocab_size: int = _MODEL.vocab_size
    # Condenser (paper section 3)
    skip_from: int = _MODEL.skip_from
    n_head_layers: int = _MODEL.n_head_layers
    late_mlm: bool = True
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

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method={self.method!r} is not one of {METHODS}")
        if self.head not in (None, "load", "random"):
            raise ValueError(f"head={self.head!r} must be 'load', 'random' or None")
        if self.method == "cocondenser" and self.corpus == "general":
            raise ValueError("coCondenser pre-trains on a target corpus: set corpus='scifact' (or 'msmarco', ...)")

    def replace(self, **changes) -> "PretrainConfig":
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"unknown PretrainConfig field(s) {sorted(unknown)}")
        return dataclasses.replace(self, **changes)

    @property
    def resolved_head(self) -> str:
        return self.head or ("load" if self.method == "cocondenser" else "random")


def stage_config(preset: Preset | str, method: str, init: str | None = None, **changes) -> PretrainConfig:
    """The ``PretrainConfig`` of one pre-training stage of ``preset`` (chapters 2 and 3).

    ``mlm`` / ``condenser`` read the general corpus: from scratch (``init`` None) for
    ``s1_steps``, continuing ``init`` for ``s2_steps`` (a Condenser with a fresh head, paper
    section 3.4). ``cocondenser`` continues ``init`` *with its head* on the preset's target corpus
    for ``s3_steps``, ``cocondenser_batch`` documents per update and never accumulated.
    ``changes`` replace any field. The protocol's arms (``arms.arm_config``) and the ``pretrain``
    command both build their stages here.
    """
    preset = get_preset(preset)
    model, training = preset.model, preset.pretraining
    common = dict(
        tokenizer=model.tokenizer, max_len=model.max_len, hidden_size=model.hidden_size,
        num_hidden_layers=model.num_hidden_layers, num_attention_heads=model.num_attention_heads,
        intermediate_size=model.intermediate_size, vocab_size=model.vocab_size, skip_from=model.skip_from,
        n_head_layers=model.n_head_layers, epochs=training.epochs, weight_decay=training.weight_decay,
        warmup_ratio=training.warmup_ratio, seed=training.seed, mixed_precision=training.mixed_precision,
        save_every=training.save_every,
    )
    if method == "cocondenser":
        published = (preset.pretrained or {}).get("condenser")
        head = training.cocondenser_head if init is not None and init == published else "load"
        cfg = PretrainConfig(
            method=method, init=init, head=head, corpus=preset.task, corpus_limit=training.target_limit,
            max_steps=training.s3_steps, batch_size=training.cocondenser_batch, grad_accum=1,
            lr=training.cocondenser_lr, chunk_size=training.chunk_size, min_span=training.min_span, **common)
    else:
        cfg = PretrainConfig(
            method=method, init=init, head="random" if method == "condenser" else None,
            corpus=training.general_corpus, corpus_limit=training.general_limit,
            max_steps=training.s1_steps if init is None else training.s2_steps, batch_size=training.batch_size,
            grad_accum=training.grad_accum, lr=training.lr, **common)
    return cfg.replace(**changes)


def paper_condenser(init: str | None = None, **changes) -> PretrainConfig:
    """The ``paper`` preset's Condenser stage (Condenser section 4.1): from ``init`` (default bert-base-uncased),
    skip_from 6, 2 head layers, lr 1e-4, weight decay 0.01, 10% warm-up, max length 128, ~1024
    sequences per update (64 x 16 accumulation steps), 8 epochs.

    What it reads is not the paper's corpus: the paper pre-trains on English Wikipedia +
    BookCorpus; this stage streams ``wikimedia/wikipedia`` 20231101.en (plus WikiText-103 and the
    news sample, ``data.load_pretraining_corpus(full=True)``) and keeps the first
    ``general_limit`` = 1,000,000 sections, because a stage packs its corpus into blocks in memory
    and the library has no BookCorpus loader. The 8 epochs run over those sections. Chapter 2."""
    return stage_config(PAPER, "condenser", init=init or PAPER.pretrained["bert"], **changes)


def paper_cocondenser(init: str | None = None, **changes) -> PretrainConfig:
    """The ``paper`` preset's coCondenser stage (coCondenser section 4.1): on the target corpus
    (MS MARCO passages), 2,000 documents (4,000 spans) per update through the gradient cache,
    lr 1e-4, weight decay 0.01, 8 epochs, spans of at least ``min_span`` = 8 tokens.

    The paper continues a Condenser *with its trained head*. Choose how:

    * ``paper_cocondenser(init=<folder of pretrain(paper_condenser())>)``: your own stage 1, its
      head loaded, as the paper;
    * ``paper_cocondenser()``: the published ``Luyu/condenser``, which has no head weights, so the
      head starts fresh (``head="random"``): a deviation, warned when the stage is built.

    Explained in chapter 3, ``notebooks/03_cocondenser.ipynb``."""
    return stage_config(PAPER, "cocondenser", init=init or PAPER.pretrained["condenser"], **changes)


# ---- caching -----------------------------------------------------------------------------


def checkpoint_key(init: str | None) -> str | None:
    """What names a starting checkpoint in a cache key: a cached stage's own settings hash (so a
    re-trained parent invalidates its children), else the folder or Hub id itself. Chapter 2."""
    if init is None:
        return None
    done = Path(init) / DONE_FILE
    if done.exists():
        return json.loads(done.read_text())["key"]
    return str(init)


def stage_key(cfg: PretrainConfig, tokenizer_id: str | None = None) -> str:
    """Hash of every setting that changes the result (bookkeeping fields excluded).

    ``tokenizer_id`` names the vocabulary when the stage builds a new model (the book's
    WordPiece folder is itself named by a hash of its training data and settings)."""
    settings = dataclasses.asdict(cfg)
    settings.pop("save_every")
    settings["init"] = checkpoint_key(cfg.init)
    settings["tokenizer_id"] = tokenizer_id
    blob = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def stage_dir(cfg: PretrainConfig, tokenizer_id: str | None = None) -> Path:
    """Where the stage's checkpoint lives (``<cache>/checkpoints/<method>-<hash>``)."""
    return cache_dir("checkpoints") / f"{cfg.method}-{stage_key(cfg, tokenizer_id)}"


def _tokenizer_id(cfg: PretrainConfig, tokenizer) -> str | None:
    if cfg.init is not None:
        return None  # the init checkpoint (already in the key) carries its tokenizer
    return str(Path(tokenizer.name_or_path).name) if cfg.tokenizer is None else str(cfg.tokenizer)


def is_done(path: str | Path) -> bool:
    return (Path(path) / DONE_FILE).exists()


# ---- building blocks -----------------------------------------------------------------------


def get_tokenizer(cfg: PretrainConfig, data_dir: str | None = None):
    """The stage's tokenizer: explicit, else the starting checkpoint's, else the book's WordPiece."""
    if cfg.tokenizer is not None:
        return load_tokenizer(cfg.tokenizer)
    if cfg.init is not None:
        return load_tokenizer(cfg.init)
    return tiny_tokenizer(vocab_size=cfg.vocab_size, data_dir=data_dir)


def _check_head_choice(cfg: PretrainConfig) -> None:
    """coCondenser continues a Condenser with its head: refuse a headless ``init`` with
    ``head='load'`` naming both ways out, and warn when the head starts fresh (a deviation)."""
    if cfg.resolved_head == "load" and not has_head(cfg.init):
        raise FileNotFoundError(
            f"coCondenser starts from {cfg.init!r} with head='load', but that checkpoint has no Condenser head "
            "(the published Luyu/condenser has none). Either pre-train stage 1 yourself "
            "(pretrain(paper_condenser()), then paper_cocondenser(init=<its folder>)), or start the head fresh "
            "with head='random' (--set head=random), a deviation from the paper.")
    if cfg.resolved_head == "random":
        warnings.warn(f"coCondenser stage from {cfg.init!r} with a fresh, untrained Condenser head: a deviation from "
                      "the paper, which continues a Condenser with its trained head (pre-train stage 1 yourself "
                      "with paper_condenser() to follow it)", UserWarning, stacklevel=3)


def build_model(cfg: PretrainConfig, tokenizer):
    """``BertMLM`` for ``mlm``, ``Condenser`` otherwise, from scratch or from ``cfg.init``.

    Random initial weights (a model from scratch, a fresh Condenser head) are drawn as "step 0"
    of the stage's seed: without it they came from torch's start-up seed, which differs in every
    process, so a stage re-run from a cold cache gave other numbers."""
    set_step_seed(cfg.seed, 0)  # the training loop seeds steps 1, 2, ...

    condenser_kw = dict(skip_from=cfg.skip_from, n_head_layers=cfg.n_head_layers, late_mlm=cfg.late_mlm)
    if cfg.init is None and cfg.method != "mlm" and cfg.resolved_head == "load":
        raise ValueError("head='load' needs an init checkpoint that has a Condenser head")
    if cfg.method == "cocondenser":
        _check_head_choice(cfg)
    if cfg.init is None:
        config = tiny_bert_config(
            vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_hidden_layers,
            num_attention_heads=cfg.num_attention_heads, intermediate_size=cfg.intermediate_size,
            max_position_embeddings=cfg.max_len, pad_token_id=tokenizer.pad_token_id,
        )
        if cfg.method == "mlm":
            return BertMLM.from_config(config)
        return Condenser.from_config(config, **condenser_kw)
    if cfg.method == "mlm":
        return BertMLM.from_pretrained(cfg.init)
    if cfg.resolved_head == "load":
        return Condenser.from_pretrained(cfg.init, head="load", **condenser_kw)
    return Condenser.from_bert(cfg.init, **condenser_kw)


def general_blocks(cfg: PretrainConfig, tokenizer, data_dir: str | None = None):
    """The general corpus packed into ``[CLS] ... [SEP]`` blocks (MLM and Condenser stages)."""
    if cfg.corpus not in ("general", "wikipedia"):
        raise ValueError(f"MLM/Condenser stages read corpus='general' (or 'wikipedia' at full scale), got {cfg.corpus!r}")
    full = cfg.corpus == "wikipedia"
    corpus = load_pretraining_corpus(data_dir=data_dir, full=full)
    if full:  # streamed: materialise only what the budget needs
        limit = cfg.corpus_limit or 1_000_000
        corpus = Dataset.from_list(list(corpus.take(limit)))
    elif cfg.corpus_limit:
        corpus = corpus.select(range(min(cfg.corpus_limit, len(corpus))))
    return pack_blocks(corpus, tokenizer, max_len=cfg.max_len, short_seq_prob=cfg.short_seq_prob, seed=cfg.seed)


TEVATRON_CORPORA = {**TEVATRON_TASKS, "wikipedia-nq": TEVATRON_TASKS["nq"]}  # the tasks' names, and the old one


def target_documents(cfg: PretrainConfig, data_dir: str | None = None):
    """The target search corpus coCondenser pre-trains on (rows with ``title`` and ``text``):
    ``msmarco`` / ``wikipedia-nq`` (Tevatron's passage collections), a BEIR name, or a path
    (a BEIR folder, a ``.jsonl`` of documents, a text file with one document per line:
    ``data.load_documents``). Chapter 3."""
    if cfg.corpus in TEVATRON_CORPORA:
        docs = load_tevatron_corpus(TEVATRON_CORPORA[cfg.corpus], data_dir=data_dir)
    else:
        docs = load_documents(cfg.corpus, data_dir=data_dir)
    if cfg.corpus_limit:
        docs = docs.select(range(min(cfg.corpus_limit, len(docs))))
    return docs


def span_pairs(cfg: PretrainConfig, tokenizer, data_dir: str | None = None):
    """Per-epoch span pairs of the target corpus (``spans.SpanPairs``)."""
    ids = tokenize_documents(target_documents(cfg, data_dir), tokenizer)
    return SpanPairs(ids, max_len=cfg.max_len, min_span=cfg.min_span, seed=cfg.seed)


# ---- running a stage -------------------------------------------------------------------------


def train_config(cfg: PretrainConfig, output_dir: str | Path, progress: bool | None = None):
    return TrainConfig(
        output_dir=str(output_dir), max_steps=cfg.max_steps, epochs=cfg.epochs, batch_size=cfg.batch_size,
        grad_accum=cfg.grad_accum, lr=cfg.lr, weight_decay=cfg.weight_decay, warmup_ratio=cfg.warmup_ratio,
        max_grad_norm=cfg.max_grad_norm, mixed_precision=cfg.mixed_precision, seed=cfg.seed,
        save_every=cfg.save_every, progress=progress,
    )


def pretrain(
    cfg: PretrainConfig,
    output_dir: str | Path | None = None,
    data_dir: str | None = None,
    progress: bool | None = None,
) -> Path:
    """Run one pre-training stage (or reuse it from the cache) and return its checkpoint folder.

    The folder holds a plain Hugging Face BERT checkpoint (the backbone; with a Condenser also
    ``condenser_head.pt``), the tokenizer, the training log ``train/log.jsonl`` and
    ``pretrain_config.json``. Interrupting and calling again resumes from the last training
    checkpoint in ``train/``.
    Explained in chapter 2 (``notebooks/02_condenser.ipynb``).
    """
    if cfg.init is not None and Path(cfg.init).is_dir() and not (Path(cfg.init) / "config.json").exists():
        raise FileNotFoundError(f"init checkpoint {cfg.init} is incomplete (no config.json); re-run the stage that makes it")
    tokenizer = get_tokenizer(cfg, data_dir)
    tok_id = _tokenizer_id(cfg, tokenizer)
    out = Path(output_dir) if output_dir is not None else stage_dir(cfg, tok_id)
    if is_done(out):
        logger.info("reusing pre-trained stage %s", out)
        return out
    model = build_model(cfg, tokenizer)
    mlm_collator = MLMCollator(tokenizer, mlm_probability=cfg.mlm_probability)
    tcfg = train_config(cfg, out / "train", progress)
    if cfg.method == "cocondenser":
        pairs = span_pairs(cfg, tokenizer, data_dir)
        step_fn = functools.partial(cocondenser_step, chunk_size=cfg.chunk_size,
                                    mlm_weight=cfg.mlm_weight, co_weight=cfg.co_weight)
        result = train(model, pairs, tcfg, collate_fn=SpanPairCollator(mlm_collator), step_fn=step_fn)
        n_skipped, n_documents = pairs.n_skipped, pairs.n_documents
    else:
        blocks = general_blocks(cfg, tokenizer, data_dir)
        result = train(model, blocks, tcfg, collate_fn=mlm_collator)
        n_skipped = n_documents = 0
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    record = {"key": stage_key(cfg, tok_id), "config": dataclasses.asdict(cfg), "steps": result.step,
              "wall_time": result.wall_time, "skipped_documents": n_skipped,
              "documents": n_documents}
    (out / DONE_FILE).write_text(json.dumps(record, indent=2, default=str))
    # the optimizer state is only needed to resume an unfinished stage
    shutil.rmtree(out / "train" / "checkpoint", ignore_errors=True)
    return out


def read_log(path: str | Path) -> list[dict]:
    """A stage's (or any training run's) per-step log as a list of dicts (chapter 6 plots it)."""
    path = Path(path)
    if path.is_dir():
        path = path / "train" / "log.jsonl" if (path / "train").exists() else path / "log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
