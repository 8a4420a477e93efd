"""Pre-training recipes: plain MLM, Condenser and coCondenser stages, cached by their settings.

A *stage* is one call of the training loop: a method (``"mlm"``, ``"condenser"`` or
``"cocondenser"``), a starting checkpoint, a corpus and a budget. Stages chain: the book's
"Condenser" arm is the "BERT" arm's checkpoint continued with Condenser pre-training, and
coCondenser continues that one on the target corpus. Each finished stage is saved under
``$CONDENSER_LITE_CACHE/checkpoints/<method>-<hash>/``, the hash covering every setting and, by
content, the starting checkpoint, the tokenizer and the data files read (``stage_settings``), so
chapters and the command line share a stage instead of re-running it, replacing a file gives a
new stage, and an interrupted stage resumes from its last training checkpoint.

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
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset

from .config import cache_dir, check_types
from .data import PRETRAINING_SOURCES, data_id, load_beir, load_pretraining_corpus
from .errors import CheckpointError, ConfigError
from .gradcache import cocondenser_step
from .jobs import output_lock, settings_diff, settings_hash
from .model import BertMLM, Condenser, check_checkpoint, checkpoint_key, tiny_bert_config
from .presets import PAPER, TINY, Preset, get_preset
from .pretrain_data import MLMCollator, pack_blocks
from .spans import SpanPairCollator, SpanPairs, tokenize_documents
from .tevatron import load_tevatron_corpus
from .tokenizer import load_tokenizer, tiny_tokenizer, tokenizer_key
from .training import TrainConfig, set_step_seed, train

logger = logging.getLogger(__name__)

METHODS = ("mlm", "condenser", "cocondenser")
DONE_FILE = "pretrain_config.json"  # written last: a stage folder without it is unfinished
BOOKKEEPING = ("save_every",)  # PretrainConfig fields that change neither the weights nor the log
TARGET_CORPORA = {"msmarco": "Tevatron/msmarco-passage", "wikipedia-nq": "Tevatron/wikipedia-nq"}


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
        check_types(self)
        if self.method not in METHODS:
            raise ConfigError(f"method={self.method!r} is not one of {METHODS}")
        if self.head not in (None, "load", "random"):
            raise ConfigError(f"head={self.head!r} must be 'load', 'random' or None")
        if self.method == "cocondenser" and self.corpus == "general":
            raise ConfigError("coCondenser pre-trains on a target corpus: set corpus='scifact' (or 'msmarco', ...)")

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
        cfg = PretrainConfig(
            method=method, init=init, head="load", corpus=preset.task, corpus_limit=training.target_limit,
            max_steps=training.s3_steps, batch_size=training.cocondenser_batch, grad_accum=1,
            lr=training.cocondenser_lr, chunk_size=training.chunk_size, min_span=training.min_span, **common)
    else:
        cfg = PretrainConfig(
            method=method, init=init, head="random" if method == "condenser" else None,
            corpus=training.general_corpus, corpus_limit=training.general_limit,
            max_steps=training.s1_steps if init is None else training.s2_steps, batch_size=training.batch_size,
            grad_accum=training.grad_accum, lr=training.lr, **common)
    return cfg.replace(**changes)


def paper_condenser(**changes) -> PretrainConfig:
    """The ``paper`` preset's Condenser stage (Condenser section 4.1): from bert-base-uncased,
    skip_from 6, 2 head layers, lr 1e-4, weight decay 0.01, 10% warm-up, 8 epochs of Wikipedia,
    max length 128, ~1024 sequences per update (64 x 16 accumulation steps). Chapter 2."""
    return stage_config(PAPER, "condenser", init=PAPER.pretrained["bert"], **changes)


def paper_cocondenser(**changes) -> PretrainConfig:
    """The ``paper`` preset's coCondenser stage (coCondenser section 4.1): from Luyu/condenser
    *with its head*, on the target corpus (MS MARCO passages), 2,000 documents (4,000 spans) per
    update through the gradient cache, lr 1e-4, weight decay 0.01, 8 epochs. Chapter 3."""
    return stage_config(PAPER, "cocondenser", init=PAPER.pretrained["condenser"], **changes)


# ---- caching -----------------------------------------------------------------------------


def stage_data(cfg: PretrainConfig) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """The data sets a stage reads and which of their files: ``data.data_id``'s names and roles."""
    if cfg.method == "cocondenser" or cfg.corpus not in ("general", "wikipedia"):
        return (TARGET_CORPORA.get(cfg.corpus, cfg.corpus),), ("corpus",)
    if cfg.corpus == "wikipedia":
        return ("wikipedia-full", "wikitext-103", "news"), None
    return PRETRAINING_SOURCES, None


def stage_settings(cfg: PretrainConfig, tokenizer=None, data_dir: str | None = None) -> dict:
    """Everything a stage's result depends on, by content (chapter 2): every ``PretrainConfig``
    field but the ``BOOKKEEPING`` ones (a field added to the config joins by itself), with
    ``init`` as the starting checkpoint's content key (``model.checkpoint_key``), ``tokenizer``
    as the vocabulary's (``tokenizer.tokenizer_key``) and ``data`` as the files read
    (``data.data_id``). Replacing the files at the ``init`` path or in the data mirror gives a
    new key; a missing mirror folder raises instead of reusing a stale stage."""
    tokenizer = tokenizer if tokenizer is not None else get_tokenizer(cfg, data_dir)
    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in BOOKKEEPING}
    names, roles = stage_data(cfg)
    settings.update(init=checkpoint_key(cfg.init), tokenizer=tokenizer_key(tokenizer),
                    data=data_id(names, data_dir, roles))
    return settings


def stage_key(cfg: PretrainConfig, tokenizer=None, data_dir: str | None = None) -> str:
    """Hash of ``stage_settings``: the stage's cache folder is ``<cache>/checkpoints/<method>-<key>`` (chapter 2)."""
    return settings_hash(stage_settings(cfg, tokenizer, data_dir))


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


def build_model(cfg: PretrainConfig, tokenizer):
    """``BertMLM`` for ``mlm``, ``Condenser`` otherwise, from scratch or from ``cfg.init``.

    Random initial weights (a model from scratch, a fresh Condenser head) are drawn as "step 0"
    of the stage's seed: without it they came from torch's start-up seed, which differs in every
    process, so a stage re-run from a cold cache gave other numbers."""
    set_step_seed(cfg.seed, 0)  # the training loop seeds steps 1, 2, ...

    condenser_kw = dict(skip_from=cfg.skip_from, n_head_layers=cfg.n_head_layers, late_mlm=cfg.late_mlm)
    if cfg.init is None and cfg.method != "mlm" and cfg.resolved_head == "load":
        raise ConfigError("head='load' needs an init checkpoint that has a Condenser head")
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


def target_documents(cfg: PretrainConfig, data_dir: str | None = None):
    """The target search corpus coCondenser pre-trains on (rows with ``title`` and ``text``)."""
    if cfg.corpus in TARGET_CORPORA:
        docs = load_tevatron_corpus(TARGET_CORPORA[cfg.corpus], data_dir=data_dir)
    else:
        docs = load_beir(cfg.corpus, data_dir=data_dir).corpus
    if cfg.corpus_limit:
        docs = docs.select(range(min(cfg.corpus_limit, len(docs))))
    return docs


def span_pairs(cfg: PretrainConfig, tokenizer, data_dir: str | None = None):
    """Per-epoch span pairs of the target corpus (``spans.SpanPairs``)."""
    ids = tokenize_documents(target_documents(cfg, data_dir), tokenizer)
    return SpanPairs(ids, max_len=cfg.max_len, min_span=cfg.min_span, seed=cfg.seed)


# ---- running a stage -------------------------------------------------------------------------


def train_config(cfg: PretrainConfig, output_dir: str | Path, progress: bool | None = None, resume: bool = True):
    return TrainConfig(
        output_dir=str(output_dir), max_steps=cfg.max_steps, epochs=cfg.epochs, batch_size=cfg.batch_size,
        grad_accum=cfg.grad_accum, lr=cfg.lr, weight_decay=cfg.weight_decay, warmup_ratio=cfg.warmup_ratio,
        max_grad_norm=cfg.max_grad_norm, mixed_precision=cfg.mixed_precision, seed=cfg.seed,
        save_every=cfg.save_every, progress=progress, resume=resume,
    )


def pretrain(
    cfg: PretrainConfig,
    output_dir: str | Path | None = None,
    data_dir: str | None = None,
    progress: bool | None = None,
    restart: bool = False,
) -> Path:
    """Run one pre-training stage (or reuse it from the cache) and return its checkpoint folder.

    The folder holds a plain Hugging Face BERT checkpoint (the backbone; with a Condenser also
    ``condenser_head.pt``), the tokenizer, the training log ``train/log.jsonl`` and
    ``pretrain_config.json``. Interrupting and calling again resumes from the last training
    checkpoint in ``train/``. The folder is named by ``stage_key`` unless ``output_dir`` is
    given; a finished stage there is reused only if it was made with the same
    ``stage_settings``, else ``CheckpointError`` names the differing ones (``restart=True``
    replaces it; so it does an unfinished one). The folder is locked while the stage runs
    (``jobs.output_lock``): a second process asking for it waits, then reuses it.
    Explained in chapter 2 (``notebooks/02_condenser.ipynb``).
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
        mlm_collator = MLMCollator(tokenizer, mlm_probability=cfg.mlm_probability)
        tcfg = train_config(cfg, out / "train", progress, resume=not restart)
        if cfg.method == "cocondenser":
            pairs = span_pairs(cfg, tokenizer, data_dir)
            step_fn = functools.partial(cocondenser_step, chunk_size=cfg.chunk_size,
                                        mlm_weight=cfg.mlm_weight, co_weight=cfg.co_weight)
            result = train(model, pairs, tcfg, collate_fn=SpanPairCollator(mlm_collator), step_fn=step_fn,
                           depends_on=settings)
            n_skipped = pairs.n_skipped
        else:
            blocks = general_blocks(cfg, tokenizer, data_dir)
            result = train(model, blocks, tcfg, collate_fn=mlm_collator, depends_on=settings)
            n_skipped = 0
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        record = {"key": key, "settings": settings, "config": dataclasses.asdict(cfg), "steps": result.step,
                  "wall_time": result.wall_time, "skipped_documents": n_skipped}
        (out / DONE_FILE).write_text(json.dumps(record, indent=2, default=str))
        # the optimizer state is only needed to resume an unfinished stage
        shutil.rmtree(out / "train" / "checkpoint", ignore_errors=True)
    return out


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


def read_log(path: str | Path) -> list[dict]:
    """A stage's (or any training run's) per-step log as a list of dicts (chapter 6 plots it)."""
    path = Path(path)
    if path.is_dir():
        path = path / "train" / "log.jsonl" if (path / "train").exists() else path / "log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
