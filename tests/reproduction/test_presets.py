"""The presets (condenser_lite/reproduction/configuration/presets.py): named, replaced field by field, checked, and
the paper preset's stages."""

import dataclasses

import pytest

from condenser_lite.modeling.condenser import PAPER_CONDENSER
from condenser_lite.reproduction.runs.arms import needed_arms
from condenser_lite.reproduction.configuration.presets import (
    PAPER,
    PRESETS,
    RETRIEVAL_RECIPES,
    get_preset,
    paper_cocondenser,
    paper_condenser,
    stage_config,
)
from condenser_lite.reproduction.configuration.registry import STANDARD_ARMS
from condenser_lite.reproduction.configuration.settings_tree import Preset
from condenser_lite.utils.errors import ConfigError


def test_presets():
    tiny, micro, full = get_preset("tiny"), get_preset("micro"), get_preset("full")
    assert get_preset(None) is tiny and tiny.arms == STANDARD_ARMS  # the default: the scaled-down book's arms
    # full scale: the papers' checkpoints and Tevatron's recipe for its task, through the same protocol
    assert full.finetune == RETRIEVAL_RECIPES[full.task]
    assert needed_arms(full.arms, full.pretrained) == ["bert", "condenser", "cocondenser"]
    assert needed_arms(["cocondenser"], {}) == ["bert", "condenser", "cocondenser"]
    assert get_preset("paper") is full and full.name == "paper"
    changed = tiny.replace(**{"finetune.lr": 5e-4, "stages.bert.max_steps": 10}, seeds=(0,))
    assert (changed.finetune.lr, changed.stages.bert.max_steps, changed.seeds) == (5e-4, 10, (0,))
    assert changed.stages.condenser == tiny.stages.condenser and changed.sts == tiny.sts  # the rest as it was
    assert changed.stages.bert == dataclasses.replace(tiny.stages.bert, max_steps=10)
    with pytest.raises(ConfigError, match="ambiguous: name its path, stages.bert.lr or stages.condenser.lr or "
                                          "stages.cocondenser.lr or finetune.lr or sts.lr"):
        tiny.replace(lr=1e-4)  # each stage, fine-tuning and STS-b have one
    with pytest.raises(ValueError, match="unknown preset"):
        get_preset("huge")
    with pytest.raises(ValueError, match="unknown arm"):
        Preset(arms=("bert", "electra"))
    with pytest.raises(ConfigError, match="unknown setting 'steps'"):
        tiny.replace(steps=3)
    with pytest.raises(ConfigError, match="unknown setting 's1_steps'"):
        tiny.replace(s1_steps=3)
    # a whole stage, or a whole component, by its path
    recipe = dataclasses.replace(tiny.stages.cocondenser, lr=1e-4)
    assert tiny.replace(**{"stages.cocondenser": recipe}).stages.cocondenser is recipe
    assert tiny.get("stages.cocondenser.lr") == tiny.stages.cocondenser.lr and tiny.get("model") is tiny.model
    # pre-training seeds: one by default; more pre-train the main arms once each, the ablations once
    from condenser_lite.reproduction.runs.protocol import arm_pretrain_seeds

    assert tiny.pretraining_seeds == (tiny.stages.bert.seed,) and micro.pretraining_seeds == (micro.stages.bert.seed,)
    two = tiny.replace(pretrain_seeds=(1, 2))
    assert [arm_pretrain_seeds(two, a) for a in ("bert", "cocondenser", "co_mlm_only")] == [(1, 2), (1, 2), (1,)]
    with pytest.raises(ValueError, match="distinct seeds"):
        tiny.replace(pretrain_seeds=(1, 1))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_a_condenser_and_fits_its_texts_in_it(name):
    """Every preset is a model that can be built and texts that fit it: a head count that divides
    the width, the head reading a layer below the last, fine-tuning and STS-b inputs no longer
    than the positions the blocks were pre-trained on; and a spread for the claims to be judged
    by (the papers' need three seeds; the micro test run two)."""
    preset = get_preset(name)
    model = preset.model
    assert model.hidden_size % model.num_attention_heads == 0
    assert 0 <= model.skip_from < model.num_hidden_layers and model.n_head_layers >= 1
    assert max(preset.finetune.q_max_len, preset.finetune.p_max_len, preset.sts.max_len) <= model.max_len
    assert len(set(preset.seeds)) >= (2 if name == "micro" else 3)


def test_paper_stages_are_the_papers_head_and_continue_each_other():
    c, co = paper_condenser(), paper_cocondenser()
    # the Condenser head where the modeling module puts the paper's (skip_from 6, 2 head layers)
    assert (c.model.skip_from, c.model.n_head_layers) == (PAPER_CONDENSER["skip_from"], PAPER_CONDENSER["n_head_layers"])
    # coCondenser continues a Condenser of the same shape, by default the published one
    assert co.model == c.model
    assert (c.init, co.init) == (PAPER.pretrained["bert"], PAPER.pretrained["condenser"])
    # the published Luyu/condenser has no head: a fresh one (warned when built); your own stage 1's is loaded
    assert co.resolved_head == "random"
    assert paper_cocondenser(init="my_condenser").resolved_head == "load"
    # its documents per update (two spans each) only fit through the gradient cache, in several chunks
    assert co.chunk_size is not None and co.chunk_size < 2 * co.batch_size


def test_the_small_presets_modified_condenser_is_the_mechanism_studys_choice():
    """The committed run's modified arm is the deviation that the pre-registered rule chose in
    results/mechanism.json, and the choice there is that rule applied to the parts it holds."""
    import json

    from locations import ROOT

    from condenser_lite.reproduction.configuration.presets import get_preset
    from condenser_lite.reproduction.configuration.registry import MODIFIED_ARM
    from condenser_lite.studies.mechanism_rules import MODIFIED_CANDIDATES, choose_modified

    study = json.loads((ROOT / "results" / "mechanism.json").read_text())
    choice = choose_modified({p: study[p]["c0"] for p in MODIFIED_CANDIDATES if p in study})
    assert {k: study["modified"][k] for k in choice} == choice
    small = get_preset("small")
    assert small.modified_condenser == study[choice["part"]]["modified_condenser"]
    assert MODIFIED_ARM in small.arms and MODIFIED_ARM in small.sts_arms


def test_the_colab_preset_is_the_small_runs_protocol_on_the_published_checkpoints():
    """``colab`` pre-trains nothing (every arm is a published checkpoint, the ``paper`` preset's),
    and asks the committed small run's questions: same task, training sizes, seeds, metrics and
    STS-b sizes, so the scorecard judges the claims that compare its three models; its recipe is
    the paper's MS MARCO one (Condenser appendix A.1) for 5 epochs a round, in the GPU's own
    precision."""
    colab, small, paper = get_preset("colab"), get_preset("small"), get_preset("paper")
    assert set(colab.arms) == set(colab.pretrained) and dict(colab.pretrained) == dict(paper.pretrained)
    assert needed_arms(colab.arms, colab.pretrained) == list(colab.arms) and colab.model == paper.model
    for name in ("task", "train_sizes", "seeds", "metrics", "sts_sizes", "nb_n", "nb_k"):
        assert colab.get(name) == small.get(name), name
    ft = colab.finetune
    assert (ft.lr, ft.batch_size, ft.train_n_passages, ft.q_max_len, ft.p_max_len) == (5e-6, 8, 8, 32, 128)
    assert (ft.epochs_round1, ft.epochs_round2, ft.min_steps) == (5, 5, 0)
    assert ft.mixed_precision == colab.sts.mixed_precision == "auto"  # fp16 on a T4 (devices.cuda_amp_dtype)
    assert colab.sts == paper.sts  # Sentence-BERT's STS-b settings, as the paper


def test_a_stage_is_its_recipe_under_the_same_names_with_the_presets_model():
    """``stage_config`` builds a stage as its named stage's recipe, field for field under the same
    name, plus the method, the start, the corpus and the preset's ``ModelConfig`` itself: a value
    changed in a recipe reaches the stage of that name and no other. The settings a method does
    not read keep the defaults (an MLM control does not take the Condenser stage's head)."""
    from condenser_lite.training.pretraining_config import RECIPE_FIELDS, StageConfig, StageRecipe

    tiny = get_preset("tiny")
    changed = get_preset("tiny", **{"model.hidden_size": 96, "model.num_attention_heads": 3,
                                    **{f"stages.{s}.seed": 7 + i for i, s in enumerate(("bert", "condenser", "cocondenser"))},
                                    **{f"stages.{s}.lr": 1e-4 * (i + 1) for i, s in enumerate(("bert", "condenser", "cocondenser"))}})
    for method, init, stage in (("mlm", None, "bert"), ("condenser", None, "condenser"), ("mlm", "x", "condenser"),
                                ("condenser", "x", "condenser"), ("cocondenser", "x", "cocondenser")):
        cfg, recipe = stage_config(changed, method, init), getattr(changed.stages, stage)
        assert cfg.model is changed.model and (cfg.model.hidden_size, cfg.model.num_attention_heads) == (96, 3)
        assert (cfg.method, cfg.init, cfg.seed, cfg.lr) == (method, init, recipe.seed, recipe.lr)
        read = [n for n in RECIPE_FIELDS if not StageConfig.unread(method, [n]) and n not in ("corpus", "head")]
        assert {n: getattr(cfg, n) for n in read} == {n: getattr(recipe, n) for n in read}
        if method != "mlm":  # a head left to the method is named as the stage starts it
            assert cfg.head == (recipe.head or {"condenser": "random", "cocondenser": "load"}[method])
        assert all(getattr(cfg, n) == getattr(StageRecipe, n) for n in StageConfig.unread(method, RECIPE_FIELDS))
    assert stage_config(tiny, "cocondenser", "x").corpus == tiny.task  # the recipe's None: the preset's task
    assert stage_config(tiny, "mlm", "x").head is None and tiny.stages.condenser.head == "random"
    assert stage_config(tiny, "condenser").head == "random" and tiny.stages.bert.head is None  # one key either way


def test_every_arm_trains_by_its_named_stage():
    """``arms.ARM_STAGES`` names the stage each arm's last stage trains by: a budget set there
    reaches the arm (the controls match the Condenser's, scaled for the FLOPs control)."""
    from condenser_lite.reproduction.runs.arms import ARM_STAGES, arm_config
    from condenser_lite.reproduction.configuration.registry import ARMS

    small = get_preset("small")
    assert set(ARM_STAGES) == set(ARMS)
    for arm in ARMS:
        stage = ARM_STAGES[arm]
        longer = small.replace(**{f"stages.{stage}.max_steps": 2 * small.get(f"stages.{stage}.max_steps")})
        init = None if arm == "bert" else "x"
        assert arm_config(arm, longer, init).max_steps == 2 * arm_config(arm, small, init).max_steps, arm
        for other in {"bert", "condenser", "cocondenser"} - {stage}:
            moved = small.replace(**{f"stages.{other}.max_steps": 7})
            assert arm_config(arm, moved, init) == arm_config(arm, small, init), (arm, other)


def test_the_settings_tree_has_one_path_per_setting():
    """Every field of every component is one path, a stage's under ``stages.<stage>.<field>``
    with the recipe's own name, and a bare name resolves only where one path ends in it."""
    from condenser_lite.reproduction.configuration.settings_tree import COMPONENTS, setting_path, setting_tree
    from condenser_lite.training.pretraining_config import RECIPE_FIELDS, STAGES

    tree = setting_tree()
    assert {p for p in tree if p.startswith("stages.")} == {f"stages.{s}.{f}" for s in STAGES for f in RECIPE_FIELDS}
    assert not any(p.startswith(("pretraining.", "stage.")) for p in tree)
    assert set(COMPONENTS) == set(Preset.components)
    for path in tree:
        assert setting_path(path) == path
        name = path.rpartition(".")[2]
        owners = [p for p in tree if p.rpartition(".")[2] == name]
        if len(owners) == 1:
            assert setting_path(name) == path


def test_a_model_from_scratch_has_the_model_configs_shape_and_nothing_else():
    """A stage from scratch builds its BERT from ``ModelConfig.bert_config`` alone: every shape
    field, the position rows and dropout follow the preset's ``model``, so a shape declared
    anywhere else (a default that wins over it) fails here."""
    from condenser_lite.training.pretraining import build_model
    from condenser_lite.training.pretraining_config import ModelConfig

    class Vocabulary:  # what a config from scratch reads of a tokenizer
        pad_token_id = 3

        def __len__(self):
            return 77

    odd = ModelConfig(hidden_size=24, num_hidden_layers=3, num_attention_heads=3, intermediate_size=40, max_len=24,
                      skip_from=1, n_head_layers=1, dropout=0.2)
    assert all(getattr(odd, f) != getattr(ModelConfig(), f) for f in ("hidden_size", "num_hidden_layers",
                                                                       "num_attention_heads", "intermediate_size",
                                                                       "max_len", "dropout"))
    for method in ("mlm", "condenser"):
        cfg = stage_config(get_preset("tiny", model=odd), method)
        built = build_model(cfg, Vocabulary()).backbone.config
        assert (built.vocab_size, built.pad_token_id, built.hidden_size, built.num_hidden_layers,
                built.num_attention_heads, built.intermediate_size, built.max_position_embeddings,
                built.hidden_dropout_prob, built.attention_probs_dropout_prob) == (77, 3, 24, 3, 3, 40, 24, 0.2, 0.2)


def test_bert_config_covers_its_blocks_and_takes_overrides():
    """``ModelConfig.bert_config`` without a tokenizer: the positions cover ``max_len`` and a
    longer input fails loudly; ``overrides`` change the fields they name and keep the others; a
    head count that does not divide the width is refused as the config is made."""
    import torch

    from condenser_lite.modeling.condenser import BertMLM
    from condenser_lite.training.pretraining_config import ModelConfig
    from condenser_lite.utils.errors import ConfigError

    shape = ModelConfig(vocab_size=100, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                        num_hidden_layers=1, max_len=48)
    torch.manual_seed(0)
    mlm = BertMLM.from_config(shape.bert_config()).eval()
    ids = torch.randint(5, 100, (1, 48))
    assert mlm(ids, torch.ones_like(ids)).cls.shape == (1, 32)
    ids = torch.randint(5, 100, (1, 49))
    with pytest.raises(RuntimeError):
        mlm(ids, torch.ones_like(ids))
    default, changed = shape.bert_config().to_dict(), shape.bert_config(vocab_size=500, num_hidden_layers=6).to_dict()
    assert (changed["vocab_size"], changed["num_hidden_layers"]) == (500, 6)
    assert {k: v for k, v in changed.items() if k not in ("vocab_size", "num_hidden_layers")} == \
        {k: v for k, v in default.items() if k not in ("vocab_size", "num_hidden_layers")}
    with pytest.raises(ConfigError, match="divisible"):
        ModelConfig(num_attention_heads=3)
