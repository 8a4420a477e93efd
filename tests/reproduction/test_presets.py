"""The presets (condenser_lite/reproduction/presets.py): named, replaced field by field, checked, and
the paper preset's stages."""

import pytest

from condenser_lite.reproduction.arms import needed_arms
from condenser_lite.reproduction.presets import Preset, get_preset, paper_cocondenser, paper_condenser
from condenser_lite.reproduction.registry import STANDARD_ARMS


def test_presets():
    tiny, micro, full = get_preset("tiny"), get_preset("micro"), get_preset("full")
    assert tiny.seeds == (0, 1, 2) and tiny.arms == STANDARD_ARMS
    assert micro.model.hidden_size == 32
    # full scale: the papers' checkpoints and Tevatron's MS MARCO recipe, through the same protocol
    assert full.pretrained["condenser"] == "Luyu/condenser" and full.pretrained["cocondenser"] == "Luyu/co-condenser-marco"
    assert full.task == "msmarco" and full.finetune.lr == 5e-6 and full.finetune.train_n_passages == 8
    assert needed_arms(full.arms, full.pretrained) == ["bert", "condenser", "cocondenser"]
    assert needed_arms(["cocondenser"], {}) == ["bert", "condenser", "cocondenser"]
    # the scaled-down book's settings, one object for the protocol, the chapters and the command line
    assert (tiny.pretraining.s1_steps, tiny.pretraining.batch_size, tiny.pretraining.lr, tiny.model.max_len) == (
        1200, 32, 1e-3, 64)
    assert (tiny.finetune.lr, tiny.finetune.train_n_passages, tiny.finetune.p_max_len) == (1e-3, 2, 64)
    assert get_preset("paper") is full and full.name == "paper"
    changed = tiny.replace(**{"finetune.lr": 5e-4}, s1_steps=10, seeds=(0,))
    assert (changed.finetune.lr, changed.pretraining.s1_steps, changed.seeds, changed.pretraining.lr) == (
        5e-4, 10, (0,), 1e-3)
    with pytest.raises(TypeError, match="ambiguous"):
        tiny.replace(lr=1e-4)  # pre-training, fine-tuning and STS-b each have one
    with pytest.raises(ValueError, match="unknown preset"):
        get_preset("huge")
    with pytest.raises(ValueError, match="unknown arm"):
        Preset(arms=("bert", "electra"))
    with pytest.raises(TypeError, match="unknown Preset field"):
        tiny.replace(steps=3)
    # pre-training seeds: one by default; more pre-train the main arms once each, the ablations once
    from condenser_lite.reproduction.protocol import arm_pretrain_seeds

    assert tiny.pretraining_seeds == (tiny.pretraining.seed,) and micro.pretraining_seeds == (42,)
    two = tiny.replace(pretrain_seeds=(1, 2))
    assert [arm_pretrain_seeds(two, a) for a in ("bert", "cocondenser", "co_mlm_only")] == [(1, 2), (1, 2), (1,)]
    with pytest.raises(ValueError, match="distinct seeds"):
        tiny.replace(pretrain_seeds=(1, 1))


def test_paper_presets_match_the_papers():
    c = paper_condenser()
    assert (c.init, c.skip_from, c.n_head_layers, c.lr, c.weight_decay, c.max_len) == ("bert-base-uncased", 6, 2, 1e-4, 0.01, 128)
    co = paper_cocondenser()
    # the published Luyu/condenser has no head: a fresh one (warned when built); your own stage 1's is loaded
    assert (co.init, co.resolved_head, co.batch_size, co.corpus) == ("Luyu/condenser", "random", 2000, "msmarco")
    assert paper_cocondenser(init="my_condenser").resolved_head == "load"
    assert co.chunk_size is not None  # 2,000 documents per update only fit through the gradient cache
