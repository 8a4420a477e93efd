"""The settings of a pre-training stage: the encoder (``ModelConfig``), how a preset's stages
train (``PretrainingConfig``) and one stage (``StageConfig``).

A *stage* is one call of the training loop: a method (``"mlm"``, ``"condenser"`` or
``"cocondenser"``), a starting checkpoint, a corpus and a budget. Stages chain: the book's
"Condenser" arm is the "BERT" arm's checkpoint continued with Condenser pre-training, and
coCondenser continues that one on the target corpus. A preset holds the encoder every stage
shares and how its stages train; ``reproduction.presets.stage_config`` builds one stage's
``StageConfig`` from them (what ``pretraining.pretrain`` runs, the same for the protocol's arms
and the command line; ``StageConfig``'s own defaults are the ``tiny`` preset's).
Explained in chapter 2 (``notebooks/02_condenser.ipynb``) and chapter 3
(``notebooks/03_cocondenser.ipynb``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ..modeling.condenser import HEAD_CLS_SOURCES, PAPER_SWITCHES, deviations
from ..utils.checks import check_positive, check_types
from ..utils.errors import ConfigError


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


METHODS = ("mlm", "condenser", "cocondenser")
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
    save_every: int | None = _TRAINING.save_every
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

