"""Every setting of the book in one place: four components and the named presets built from
them (nanoGPT style: the defaults are the scaled-down book that runs on a 2-core CPU).

* ``model`` (``ModelConfig``): the encoder every arm shares (shape, vocabulary, where the
  Condenser head reads);
* ``stages`` (``Stages``): the pre-training stages by name, each a ``StageRecipe`` under the names
  the stage itself uses: ``stages.bert`` (MLM from scratch), ``stages.condenser`` (continuing it on
  the general corpus; the MLM controls read it too, to match its budget), ``stages.cocondenser``
  (on the target corpus; the ablations read it too);
* ``finetune`` (``FinetuneConfig``): the retriever recipe, both rounds (Tevatron's knobs);
* ``sts`` (``STSConfig``): the STS-b bi-encoder (Sentence-BERT's knobs);
* ``Preset``: those four plus the protocol's own choices (arms, seeds, task, training sizes,
  metrics) under a name.

Each setting has one path (``settings_tree``): ``stages.cocondenser.lr``, ``model.hidden_size``,
``finetune.lr``, ``seeds``. ``--set stages.cocondenser.lr=1e-4`` (or a chapter's ``-p settings``)
is read by ``parameters.parse_settings``; ``Preset.replace`` sets ``preset.stages.cocondenser.lr``;
``stage_config`` builds the stage as that recipe plus the method, the start, the corpus and the
model, and the training loop sets AdamW's rate from it (a recipe is a ``TrainConfig``);
``finetune.lr`` reaches the loop the same way (``finetune.round_config``). No setting is renamed
or copied on the way.

``PRESETS`` holds the named presets: ``micro`` (the whole protocol in seconds, for tests),
``tiny`` (the first scaled-down recipe, and the live cells' short stages), ``small`` (the
committed run the book reads, chosen on the study page), ``colab`` (the papers' published
checkpoints fine-tuned on the small run's task, sized for one free Colab GPU session) and
``paper`` (the papers' checkpoints, data and hyper-parameters; also reachable as ``full``). The
command line's ``--preset``, the chapters' ``preset`` parameter, ``stage_config`` and the protocol
all read them through ``get_preset``. A new preset is one definition, e.g. a wider model with
longer blocks and a longer first stage::

    WIDE = Preset(name="wide", model=ModelConfig(hidden_size=256, max_len=128),
                  stages=Stages().with_changes(bert={"max_steps": 4000, "batch_size": 64, "lr": 5e-4}),
                  finetune=FinetuneConfig(train_n_passages=4, p_max_len=128))

``DATA_RECIPES`` holds the papers' fine-tuning recipe per data set (MS MARCO, NQ), and
``RETRIEVAL_RECIPES`` those and ``pretrained`` (a real pre-trained checkpoint on a small set),
for the ``finetune`` command. How ``tiny`` was sized and tuned is in DESIGN.md ("Presets").
Explained in chapter 4, ``notebooks/04_finetune.ipynb``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ...training.finetune import FinetuneConfig
from ...training.pretraining_config import RECIPE_FIELDS, ModelConfig, StageConfig, StageRecipe, Stages, stage_name
from ...training.similarity import STSConfig
from ...utils.errors import ConfigError
from ...utils.loading import saved_here
from .registry import CONTROL_ARMS, MAIN_ARMS, MODIFIED_ARM, STANDARD_ARMS
from .settings_tree import Preset


# ---- the named presets -----------------------------------------------------------------------

TINY = Preset()

MICRO = Preset(
    name="micro", seeds=(0, 1),
    model=ModelConfig(hidden_size=32, num_attention_heads=2, intermediate_size=64),
    stages=Stages().with_changes(every=dict(max_steps=2, batch_size=4, eval_blocks=16, eval_every=1),
                                 bert=dict(corpus_limit=20), condenser=dict(corpus_limit=20),
                                 cocondenser=dict(corpus_limit=40)),
    finetune=FinetuneConfig(batch_size=4, q_max_len=32, epochs_round1=1.0, min_steps=2, n_bm25_negatives=4,
                            mine_depth=10, n_mined=3),
    sts=STSConfig(batch_size=4, epochs_low_data=1.0, epochs_full=1.0),
    train_sizes=(4, None), nb_n=(2, 5), nb_k=(5, 10), sts_sizes=(8, None), entropy_texts=8, entropy_max_len=64,
    micro_corpus=40, micro_train_queries=8, micro_test_queries=10, micro_sts_pairs=16,
)

# The papers' scale. Pre-training: Condenser section 4.1 (from bert-base-uncased, skip_from 6,
# 2 head layers, lr 1e-4, weight decay 0.01, 10% warm-up, 8 epochs, ~1,024 sequences of 128
# tokens per update: 64 x 16 accumulation steps) and coCondenser section 4.1 (on the target
# corpus, 2,000 documents per update through the gradient cache). Two deviations, both stated:
# * the paper's corpus is English Wikipedia + BookCorpus; we stream wikimedia/wikipedia
#   20231101.en (the Hub's current Wikipedia; the library has no BookCorpus loader) and keep its
#   first 1,000,000 sections (the general stages' corpus_limit), because a stage materialises its
#   corpus in memory to pack blocks (8 epochs over those sections);
# * coCondenser continues a Condenser *with its head*, but the published Luyu/condenser has no
#   head weights, so from it the head starts fresh (stages.cocondenser.head="random"; to follow
#   the paper instead, see paper_cocondenser).
# The arms with a published checkpoint start from it; those without one (bert_cont, the
# ablations) would need days of pre-training and are left out.
MSMARCO_RECIPE = FinetuneConfig(
    # Tevatron's MS MARCO recipe (papers README; Condenser A.1 "Web Search"): 8 queries x 8 passages
    # = 64 passages per batch on one GPU, lr 5e-6, 3 epochs round 1, 2 epochs round 2.
    lr=5e-6, batch_size=8, train_n_passages=8, q_max_len=32, p_max_len=128, epochs_round1=3, epochs_round2=2,
    min_steps=0, mixed_precision="auto", mine_depth=200, encode_batch=512, embedding_dtype="float16",
)
NQ_RECIPE = FinetuneConfig(
    # DPR's NQ setting as the authors ran it: untied encoders, 4 GPUs x 32 queries = 128 queries
    # with cross-device negatives, 1 positive + 1 BM25 negative, passages up to 256 tokens, 40 epochs
    # (20 with hard negatives). lr 5e-6 follows the papers README (the Condenser appendix quotes DPR's
    # published 1e-5). On one GPU the 128-query batch needs the gradient cache.
    lr=5e-6, batch_size=128, train_n_passages=2, q_max_len=32, p_max_len=256, epochs_round1=40, epochs_round2=20,
    min_steps=0, untied=True, chunk_size=32, mixed_precision="auto", mine_depth=200, encode_batch=512,
    embedding_dtype="float16",
)
# Continuing a real pre-trained checkpoint (cli_settings.stage_config_from_args): Condenser and coCondenser
# section 4.1 pre-train from bert-base at 1e-4.
PRETRAINED_STAGE_LR = 1e-4
PRETRAINED_RECIPE = FinetuneConfig(
    # A real pre-trained checkpoint (bert-base, all-MiniLM-L6-v2) on a small BEIR training set:
    # the papers' learning-rate scale for a pre-trained model (5e-6 to 1e-5 over their long MS
    # MARCO and NQ runs; 2e-5, BEIR's and sentence-transformers' rate, over this set's few hundred
    # updates), the tiny recipe's batch and rounds. The tiny recipe's 1e-3 is for models trained
    # here from scratch; on all-MiniLM-L6-v2 it undoes the pre-training (chapter 4).
    lr=2e-5, p_max_len=128,
)
# the general-corpus stages: ~1,024 sequences per update as 64 x 16 accumulation steps
PAPER_GENERAL_STAGE = dict(batch_size=1024, grad_accum=16, corpus="wikipedia", corpus_limit=1_000_000)
PAPER = Preset(
    name="paper",
    model=ModelConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072, max_len=128, skip_from=6, n_head_layers=2),
    stages=Stages().with_changes(
        every=dict(max_steps=None, epochs=8, lr=1e-4, mixed_precision="auto", save_every=1000, heldout_fraction=None,
                   eval_every=None),
        bert=PAPER_GENERAL_STAGE, condenser=PAPER_GENERAL_STAGE,
        cocondenser=dict(batch_size=2000, chunk_size=128, min_span=8, head="random")),
    finetune=MSMARCO_RECIPE,
    # Sentence-BERT's STS-b settings (Condenser appendix A.1): 4 epochs, 8 for the small sets (the
    # better of 4 and 8 for BERT); weight decay and warm-up are sentence-transformers' defaults.
    sts=STSConfig(lr=2e-5, batch_size=16, epochs_low_data=8.0, epochs_full=4.0, max_len=64, mixed_precision="auto"),
    arms=("bert", "condenser", "cocondenser"),
    pretrained={"bert": "bert-base-uncased", "condenser": "Luyu/condenser", "cocondenser": "Luyu/co-condenser-marco"},
    seeds=(0, 1, 2), task="msmarco", train_sizes=(1000, 10000, None), ablation_sizes=(),
    metrics=("RR@10", "R@1000", "nDCG@10"), nb_n=(50, 100), nb_k=(100, 200, 500, 1000),
    sts_arms=("bert", "condenser", "cocondenser"), entropy_texts=1000, entropy_max_len=128,
)

# One free Colab GPU session. Colab's free runtime is a T4 (16 GB; fp16 tensor cores, so
# mixed_precision "auto" computes in fp16 there, devices.cuda_amp_dtype); it lives at most 12
# hours and its GPU time is rationed without a published quota, so this budget aims at under two
# hours by computation (estimate.estimate_by_flops at an assumed 12 TFLOP/s: README, "What runs
# where"); `experiments --preset colab --dry-run` times it on the T4 itself. Nothing is
# pre-trained: the papers' published checkpoints (as `paper`) are fine-tuned on the committed
# small run's task, SciFact, with its protocol, so the scorecard asks the claims that compare
# these three BERT-base models (those that need the arms only `small` pre-trains read "not
# measured"). The retrieval recipe is the paper's MS MARCO one for 5 epochs per round, the
# smallest count the paper searched for its low-data runs ({5, 10, 40}; 809 queries is close to
# its 1K). Two things differ from the papers, both stated in the book: Luyu/co-condenser-marco
# was pre-trained on MS MARCO, so on SciFact it measures transfer, not coCondenser's own recipe
# (pre-training on the target corpus); and the attention entropy reads the scaled-down corpus's
# texts (a Wikipedia sample, WikiText-2, news), not the paper's Wikipedia.
COLAB_RECIPE = dataclasses.replace(MSMARCO_RECIPE, epochs_round1=5, epochs_round2=5, mine_depth=100,
                                   embedding_dtype="float32")
COLAB = dataclasses.replace(
    PAPER, name="colab", task="scifact", finetune=COLAB_RECIPE,
    stages=PAPER.stages.with_changes(bert=dict(corpus="general"), condenser=dict(corpus="general")),
    train_sizes=(100, None), metrics=("nDCG@10", "RR@10", "R@100"), nb_n=(10, 50), nb_k=(10, 50, 100, 200),
    sts_sizes=(500, 1000, None), entropy_texts=256,
)

# The book's budget, chosen on the study page (notebooks/09_study.md, results/study.json) by
# held-out MLM loss per CPU second and the Condenser gauges, never by retrieval numbers: the tiny
# shape with pre-training that gets past word frequencies (precision "auto": bf16 autocast where the
# CPU has bf16 units, devices.resolve_precision; eager attention and no dropout, as Cramming does;
# 12,000 stage-1 updates, where the study's 9,457 already reached 2.2 nats below the unigram
# entropy), the shallowest Condenser head path (1 early layer + 1 head layer against 4), and
# coCondenser on 64 documents per update for about 5 passes over SciFact. Fine-tuning and STS-b keep
# tiny's recipe (chosen on dev data), passages the 64 tokens the blocks were pre-trained on (the
# study found 128-token blocks slower to learn per CPU second), and put back the 0.1 dropout the
# tiny checkpoints carry (Cramming re-enables it too).
# Beside the faithful Condenser it carries a modified one: the deviation the mechanism page chose by
# a rule fixed after its parts E1 and E4 and before E3 and E5 ran (mechanism_rules.choose_modified;
# results/mechanism.json, "modified": part E5, the head reading a copy of the block with half its
# tokens masked, after RetroMAE's decoder), and the two controls of its gain that rules version 2
# pre-registered. Five pre-training seeds (rules version 2 tests over them; a verdict can be
# required to hold on each), the ablations on every one too, as they cost a few minutes each.
SMALL = Preset(
    name="small",
    model=ModelConfig(skip_from=1, n_head_layers=1, dropout=0.0, attn_implementation="eager"),
    stages=Stages().with_changes(every=dict(mixed_precision="auto", save_every=1000, eval_every=500),
                                 bert=dict(max_steps=12000), condenser=dict(max_steps=3000),
                                 cocondenser=dict(max_steps=400, batch_size=64)),
    finetune=FinetuneConfig(dropout=0.1),
    sts=STSConfig(dropout=0.1),
    pretrain_seeds=(42, 43, 44, 45, 46),
    ablation_pretrain_seeds=5,
    arms=STANDARD_ARMS + (MODIFIED_ARM, *CONTROL_ARMS),
    modified_condenser={"head_mlm_probability": 0.5},
    round2_arms=("bert", "condenser", "cocondenser", MODIFIED_ARM),
    sts_arms=MAIN_ARMS + (MODIFIED_ARM, *CONTROL_ARMS),
)

PRESETS: dict[str, Preset] = {"micro": MICRO, "tiny": TINY, "small": SMALL, "colab": COLAB, "paper": PAPER}
ALIASES = {"full": "paper"}
DATA_RECIPES: dict[str, FinetuneConfig] = {"msmarco": MSMARCO_RECIPE, "nq": NQ_RECIPE}  # the papers' data sets
RETRIEVAL_RECIPES: dict[str, FinetuneConfig] = {**DATA_RECIPES, "pretrained": PRETRAINED_RECIPE}


def get_preset(preset: Preset | str | None = None, **changes: Any) -> Preset:
    """A ``Preset`` from a name (``PRESETS`` or ``ALIASES``; None: tiny) or itself, with ``changes``
    applied (``Preset.replace``). Explained in chapter 4."""
    preset = "tiny" if preset is None else preset
    if isinstance(preset, str):
        name = ALIASES.get(preset, preset)
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {preset!r}; choose from {sorted([*PRESETS, *ALIASES])}")
        preset = PRESETS[name]
    if not isinstance(preset, Preset):
        raise TypeError(f"expected a Preset or one of {sorted(PRESETS)}, got {type(preset).__name__}")
    return preset.replace(**changes) if changes else preset


def finetune_recipe(name: str) -> FinetuneConfig:
    """The fine-tuning recipe called ``name``: a preset's or one of ``RETRIEVAL_RECIPES``. Chapter 4."""
    if name in RETRIEVAL_RECIPES:
        return RETRIEVAL_RECIPES[name]
    if name in PRESETS or name in ALIASES:
        return get_preset(name).finetune
    raise ValueError(f"no fine-tuning recipe {name!r}; choose from {sorted([*PRESETS, *RETRIEVAL_RECIPES])}")


def recipe_for(data: str, init: str | os.PathLike) -> tuple[str, str]:
    """The fine-tuning recipe for ``init`` on ``data`` when none is named, and why: the papers' for
    their data sets; else ``tiny`` for a model this library trained (``loading.saved_here``), and
    ``pretrained`` for any other, whose pre-training the tiny recipe's rate would undo. Chapter 4."""
    if data in DATA_RECIPES:
        return data, f"the papers' recipe for {data}"
    if saved_here(init):
        return "tiny", "the book's recipe for the small models it trains"
    return "pretrained", "the checkpoint was not trained by this library, so the recipe for pre-trained checkpoints"


def stage_config(preset: Preset | str, method: str, init: str | None = None, **changes) -> StageConfig:
    """The ``StageConfig`` of one pre-training stage of ``preset`` (chapters 2 and 3): the recipe of
    the stage it runs (``pretraining_config.stage_name``) plus ``method``, ``init``, the corpus and
    the preset's model, then ``changes`` to any field.

    ``mlm`` / ``condenser`` read the general corpus: a Condenser by ``stages.condenser`` (a fresh
    head, paper section 3.4), MLM by ``stages.bert`` from scratch and by ``stages.condenser``
    continuing ``init`` (the Condenser stage's control). ``cocondenser`` continues ``init`` *with
    its head* by ``stages.cocondenser``, on ``task`` unless the recipe names another corpus. The
    protocol's arms and the ``pretrain`` command both build their stages here.

    The settings the method does not read keep their defaults, so a stage's key holds only what it
    computes with: an MLM control that reads the Condenser stage's recipe does not take its head.
    A head left to the method (``None``) is named, as the stage will start it, so a stage has one
    key however its recipe says it.
    """
    preset = get_preset(preset)
    recipe = getattr(preset.stages, stage_name(method, init))
    own = {name: getattr(recipe, name) for name in RECIPE_FIELDS}
    own.update({name: getattr(StageRecipe, name) for name in StageConfig.unread(method, RECIPE_FIELDS)})
    if method == "cocondenser" and recipe.corpus is None:
        own["corpus"] = preset.task
    stage = StageConfig(**own, method=method, init=init, model=preset.model)
    if method != "mlm":
        stage = dataclasses.replace(stage, head=stage.resolved_head)
    return stage.replace(**changes) if changes else stage


def paper_condenser(init: str | None = None, **changes) -> StageConfig:
    """The ``paper`` preset's Condenser stage (Condenser section 4.1) from ``init`` (default
    bert-base-uncased). Its corpus is not the paper's (English Wikipedia + BookCorpus): it streams
    ``wikimedia/wikipedia`` 20231101.en (plus WikiText-103 and the news sample,
    ``sources.load_pretraining_corpus(full=True)``) and keeps the first 1,000,000 sections (see
    ``PAPER``). Chapter 2."""
    return stage_config(PAPER, "condenser", init=init or PAPER.pretrained["bert"], **changes)


def paper_cocondenser(init: str | None = None, **changes) -> StageConfig:
    """The ``paper`` preset's coCondenser stage (coCondenser section 4.1): on the target corpus
    (MS MARCO passages), 2,000 documents (4,000 spans) per update through the gradient cache,
    lr 1e-4, weight decay 0.01, 8 epochs, spans of at least ``min_span`` = 8 tokens.

    The paper continues a Condenser *with its trained head*. Choose how:

    * ``paper_cocondenser(init=<folder of pretrain(paper_condenser())>)``: your own stage 1, its
      head loaded, as the paper;
    * ``paper_cocondenser()``: the published ``Luyu/condenser``, which has no head weights, so the
      head starts fresh (the preset's ``stages.cocondenser.head="random"``): a deviation, warned
      when the stage is built.

    Explained in chapter 3, ``notebooks/03_cocondenser.ipynb``."""
    if init is not None:
        changes = {"head": "load", **changes}
    return stage_config(PAPER, "cocondenser", init=init or PAPER.pretrained["condenser"], **changes)
