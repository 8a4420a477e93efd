"""The settings of a pre-training stage: the encoder (``ModelConfig``), how a stage trains
(``StageRecipe``), a preset's named stages (``Stages``) and one stage to run (``StageConfig``).

A *stage* is one call of the training loop: a method (``"mlm"``, ``"condenser"`` or
``"cocondenser"``), a starting checkpoint, a corpus and a budget. Stages chain: the book's
"Condenser" arm is the "BERT" arm's checkpoint continued with Condenser pre-training, and
coCondenser continues that one on the target corpus. A preset holds the encoder every stage
shares and one recipe per named stage (``stages.bert``, ``stages.condenser``,
``stages.cocondenser``). A recipe is the training loop's own ``TrainConfig`` with the stage's
fields added, so the loop reads a stage's ``lr`` from the stage itself. A ``StageConfig`` is a
recipe with the method, the start and the encoder added
(``reproduction.configuration.presets.stage_config`` builds it from a preset; ``pretraining.pretrain``
runs it, the same for the protocol's arms and the command line). Explained in chapter 2 (``notebooks/02_condenser.ipynb``) and chapter 3
(``notebooks/03_cocondenser.ipynb``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from transformers import BertConfig

from ..modeling.variant import HEAD_CLS_SOURCES, PAPER_SWITCHES, deviations
from ..utils.checks import check_positive, check_types
from ..utils.errors import ConfigError
from ..utils.roles import having, inherited, setting
from .loop import TrainConfig


# A block's length bounds the position table and the attention, which grows with its square: a
# typo such as max_len=640000 would otherwise allocate gigabytes before the first update.
MAX_POSITIONS = 8192
METHODS = ("mlm", "condenser", "cocondenser")
CONDENSERS = ("condenser", "cocondenser")  # the methods with a head


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
    skip_from: int = setting(2, read_by=CONDENSERS)
    n_head_layers: int = setting(2, read_by=CONDENSERS)
    dropout: float = 0.1
    attn_implementation: str = setting("sdpa", health="neutral")  # the same maths, another kernel

    def __post_init__(self) -> None:
        check_types(self)
        check_positive(self, "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                       "intermediate_size", "max_len", "n_head_layers")
        if self.max_len > MAX_POSITIONS:
            raise ConfigError(f"max_len={self.max_len} is beyond the {MAX_POSITIONS:,} positions a block may have "
                              f"here (attention grows with its square; BERT's is 512); use at most {MAX_POSITIONS}")
        if self.attn_implementation not in ("sdpa", "eager"):
            raise ConfigError(f"attn_implementation={self.attn_implementation!r} must be 'sdpa' or 'eager'")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout={self.dropout!r} must be in [0, 1)")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(f"hidden_size={self.hidden_size} must be divisible by num_attention_heads="
                              f"{self.num_attention_heads}; change one of them")

    def bert_config(self, tokenizer=None, **overrides) -> BertConfig:
        """The ``transformers.BertConfig`` of this encoder built from scratch: the one declaration of
        the shape. The vocabulary is ``tokenizer``'s (its size and ``[PAD]`` id), or ``vocab_size``
        without one; the position rows are ``max_len`` (an input longer than the blocks then fails
        loudly instead of reading rows pre-training never touched); ``dropout`` applies to the hidden
        states and the attention. ``overrides`` set any other ``BertConfig`` field. Chapter 2.

        >>> ModelConfig(hidden_size=32, num_attention_heads=2).bert_config().hidden_size
        32
        """
        vocab = {"vocab_size": self.vocab_size} if tokenizer is None else \
            {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
        return BertConfig(**{**vocab, "hidden_size": self.hidden_size, "num_hidden_layers": self.num_hidden_layers,
                             "num_attention_heads": self.num_attention_heads,
                             "intermediate_size": self.intermediate_size, "max_position_embeddings": self.max_len,
                             "hidden_dropout_prob": self.dropout, "attention_probs_dropout_prob": self.dropout,
                             **overrides})


MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ModelConfig))


@dataclass(frozen=True)
class StageRecipe(TrainConfig):
    """How one pre-training stage trains: the loop's ``TrainConfig`` (``max_steps``, ``batch_size``,
    ``lr``, ...) and the stage's own settings; what it starts from (``method``, ``init``) and the
    encoder (``model``) are ``StageConfig``'s. A preset holds one recipe per named stage
    (``Stages``); the defaults are the ``tiny`` preset's.

    ``corpus`` is ``"general"`` (the Wikipedia sample, WikiText-2 and news; at full scale
    ``"wikipedia"``) for ``mlm``/``condenser``, or a retrieval corpus (``"scifact"``,
    ``"msmarco"``, ``"nq"``) whose documents coCondenser cuts spans from (in a preset ``None``:
    its ``task``); ``corpus_limit`` uses only its first N documents (full-scale Wikipedia is
    streamed, so it needs one). ``head`` says what a Condenser starts with: ``"random"`` (a fresh
    head, Condenser from BERT, paper section 3.4) or ``"load"`` (the checkpoint's head,
    coCondenser from Condenser); ``None`` picks ``"random"`` for ``condenser`` and ``"load"`` for
    ``cocondenser``. ``max_steps`` ``None`` trains ``epochs`` instead. ``batch_size`` counts
    sequences per MLM/Condenser update (``grad_accum`` micro-batches each) and *documents* (two
    spans each) for coCondenser, never accumulated: the contrastive loss needs the whole batch at
    once, so ``chunk_size`` turns on the gradient cache instead. ``min_span``: the shortest span
    coCondenser cuts (a document needs ``2 * min_span`` tokens, ``spans.SpanPairs``).
    ``mlm_weight``/``co_weight`` weight coCondenser's two terms (table 4's ablations set one to 0).

    Held-out evaluation (chapter 2): ``heldout_fraction`` of the general corpus's documents (a
    hash of each document id, ``packing.heldout_split``) is never trained on; the stage evaluates
    on ``eval_blocks`` fixed, fixed-masked blocks of it every ``eval_every`` steps and after the
    last one (``None``: after the last one only): the held-out MLM loss and, for a Condenser, the
    [CLS]-swap gap and the [CLS] cosine. ``heldout_fraction=None`` trains on everything and
    evaluates nothing. ``save_every``: steps between training checkpoints, so an interrupted
    stage resumes losing at most that many steps. Chapters 2 and 3.
    """

    corpus: str | None = "general"
    corpus_limit: int | None = None
    head: str | None = setting(None, read_by=CONDENSERS, health="neutral")  # checked with init
    # the contrastive batch is never accumulated: coCondenser sets chunk_size instead
    grad_accum: int = inherited(TrainConfig, "grad_accum", read_by=("mlm", "condenser"))
    # Condenser (paper section 3; the head's skip_from and n_head_layers are the model's)
    late_mlm: bool = setting(True, read_by=CONDENSERS)
    # switches of the Condenser stage that the mechanism page tries, off at the paper's values
    # (variant.PAPER_SWITCHES): keyed only where on, so the paper's Condenser keeps one key
    head_mlm_probability: float | None = setting(None, read_by=CONDENSERS, key="if_changed")  # the head's copy
    detach_early: bool = setting(False, read_by=CONDENSERS, key="if_changed")  # no gradient into early layers
    head_cls: str = setting("late", read_by=CONDENSERS, key="if_changed")  # "constant": a control
    # masking and packing
    mlm_probability: float = 0.15
    short_seq_prob: float = 0.1
    # coCondenser (section 3.2-3.3); chunk_size is an exact reformulation (the gradient cache)
    mlm_weight: float = setting(1.0, read_by=("cocondenser",))
    co_weight: float = setting(1.0, read_by=("cocondenser",))
    chunk_size: int | None = setting(None, read_by=("cocondenser",), health="neutral")
    min_span: int = setting(16, read_by=("cocondenser",))
    # the loop's, at a stage's defaults (a stage resumes losing at most 200 updates)
    save_every: int | None = setting(200, key="no", resume=False, health="neutral")
    eval_every: int | None = setting(100, resume=False, health="neutral")
    # held-out evaluation on the general corpus
    heldout_fraction: float | None = 0.05
    eval_blocks: int = 256

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, "min_span")
        if not 0 < self.mlm_probability < 1:
            raise ConfigError(f"mlm_probability={self.mlm_probability} must be in (0, 1): the share of tokens masked")
        if self.chunk_size is not None and self.chunk_size < 1:
            raise ConfigError(f"chunk_size={self.chunk_size} must be >= 1, or None for no gradient cache")
        if self.head not in (None, "load", "random"):
            raise ConfigError(f"head={self.head!r} must be 'load', 'random' or None")
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

    @classmethod
    def unread(cls, method: str, names) -> list[str]:
        """Those of ``names`` (a stage's or the model's fields) a stage of ``method`` does not
        read (their ``read_by`` role)."""
        return [n for n in names if method not in READ_BY.get(n, (method,))]


RECIPE_FIELDS = tuple(f.name for f in dataclasses.fields(StageRecipe))
# the stage methods that read each setting only some read (its read_by role, utils.roles)
READ_BY = {**having(ModelConfig, "read_by"), **having(StageRecipe, "read_by")}

# the named stages of a preset: what each runs (the method, and whether it continues a checkpoint)
STAGES = {"bert": "MLM from scratch on the general corpus",
          "condenser": "continuing a checkpoint on the general corpus (Condenser, and its MLM controls)",
          "cocondenser": "coCondenser on the target corpus, continuing a Condenser with its head"}


def stage_name(method: str, init: str | None) -> str:
    """The named stage whose recipe a stage of ``method`` from ``init`` trains with: the method's
    own (``condenser``, ``cocondenser``), from scratch or continuing alike. MLM from scratch is
    BERT's stage, ``bert``; MLM continuing a checkpoint is the Condenser stage's equal-budget
    control, so it trains by ``condenser``. Chapter 2."""
    if method not in METHODS:
        raise ConfigError(f"method={method!r} is not one of {METHODS}")
    return "bert" if method == "mlm" and init is None else "condenser" if method == "mlm" else method


@dataclass(frozen=True)
class Stages:
    """A preset's pre-training stages by name, each its ``StageRecipe`` (chapters 2 and 3):
    ``bert`` (MLM from scratch: the ``bert`` arm), ``condenser`` (continuing a checkpoint on the
    general corpus: the ``condenser`` arm and its controls ``bert_cont``, ``condenser_mod``, ...,
    which must match its budget) and ``cocondenser`` (on the target corpus: ``cocondenser`` and
    its ablations). Their paths are ``stages.<name>.<field>`` (``stages.cocondenser.lr``)."""

    # the protocol runs every stage of an arm's chain on the arm's pre-training seed
    # (``pretrain_seeds``, else ``stages.bert.seed``), so it reads no later stage's seed
    bert: StageRecipe = StageRecipe(max_steps=1200)
    condenser: StageRecipe = setting(StageRecipe(max_steps=600, head="random"), protocol_unread=("seed",))
    cocondenser: StageRecipe = setting(StageRecipe(max_steps=250, corpus=None, head="load", batch_size=16),
                                       protocol_unread=("seed",))

    def __post_init__(self) -> None:
        for name in STAGES:
            if not isinstance(getattr(self, name), StageRecipe):
                raise ConfigError(f"stages.{name}={getattr(self, name)!r} must be a StageRecipe")

    def with_changes(self, every: dict | None = None, **stages: dict) -> "Stages":
        """A copy with ``every``'s settings in each stage, then each named stage's own
        (``with_changes(every={"lr": 1e-4}, bert={"max_steps": 500})``)."""
        unknown = sorted(set(stages) - set(STAGES))
        if unknown:
            raise ConfigError(f"unknown stage(s) {unknown}; the stages are {', '.join(STAGES)}")
        return dataclasses.replace(self, **{
            name: dataclasses.replace(getattr(self, name), **{**(every or {}), **stages.get(name, {})})
            for name in STAGES})

    def items(self):
        """``(name, recipe)`` of each stage, in ``STAGES``' order."""
        return [(name, getattr(self, name)) for name in STAGES]


@dataclass(frozen=True)
class StageConfig(StageRecipe):
    """One pre-training stage to run: a ``StageRecipe`` with what it starts from and the encoder
    (``presets.stage_config`` builds it from a preset's recipe); its defaults are the recipe's.

    ``method``: ``"mlm"``, ``"condenser"`` or ``"cocondenser"``. ``init`` is ``None`` (a tiny
    BERT from scratch with ``tokenizer``'s vocabulary), a checkpoint folder or a Hub id.
    ``model`` is the encoder (``ModelConfig``: its shape when built from scratch, the tokenizer,
    ``max_len`` and the head's ``skip_from`` and ``n_head_layers``). ``replace`` and
    ``settings`` take and give the model's fields by their own names, beside the stage's.
    Chapter 2.

    >>> StageConfig().replace(hidden_size=256, lr=1e-4).model.hidden_size
    256
    """

    method: str = "condenser"
    init: str | None = setting(None, health="neutral")  # checked on its own
    model: ModelConfig = ModelConfig()  # tokenizer None: the checkpoint's own, or the book's WordPiece for a new model

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.model, ModelConfig):
            raise ConfigError(f"model={self.model!r} must be a ModelConfig")
        if self.method not in METHODS:
            raise ConfigError(f"method={self.method!r} is not one of {METHODS}")
        if not self.corpus:
            raise ConfigError("corpus is not set: name what the stage reads ('general', 'scifact', a path, ...)")
        if self.method == "cocondenser" and self.corpus == "general":
            raise ConfigError("coCondenser pre-trains on a target corpus: set corpus='scifact' (or 'msmarco', ...)")
        if self.method == "cocondenser" and self.min_span > self.model.max_len - 2:
            raise ConfigError(f"min_span={self.min_span} must be at most max_len - 2 = {self.model.max_len - 2} "
                              "(a span and its [CLS] and [SEP] fill a block); lower min_span or raise model.max_len")
        if self.method != "mlm" and self.init is None and \
                not 0 <= self.model.skip_from < self.model.num_hidden_layers:
            raise ConfigError(f"skip_from={self.model.skip_from}: the head reads one of the "
                              f"{self.model.num_hidden_layers} layers, 0 to {self.model.num_hidden_layers - 1}; "
                              "set model.skip_from lower or model.num_hidden_layers higher")
        if self.method == "cocondenser" and self.grad_accum != 1:
            raise ConfigError(f"grad_accum={self.grad_accum}: coCondenser's contrastive loss needs the whole batch "
                              "at once; leave grad_accum at 1 and set chunk_size for the gradient cache")
        if deviations(self) and self.method != "condenser":
            raise ConfigError(f"{', '.join(deviations(self))} change a Condenser stage; method={self.method!r} "
                              f"has no such stage: leave them at {PAPER_SWITCHES}")

    @classmethod
    def setting_names(cls) -> tuple[str, ...]:
        """The names ``replace`` and ``settings`` use: the stage's fields, the model's
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

