"""The papers' fine-tuning recipe (condenser_lite/training/finetune.py): each round's TrainConfig
from a recipe and the number of training queries."""

import pytest

from condenser_lite.reproduction.presets import RETRIEVAL_RECIPES, finetune_recipe
from condenser_lite.training.finetune import round_loop_config


def test_recipes_build_train_configs(tmp_path):
    msmarco = RETRIEVAL_RECIPES["msmarco"]
    cfg = round_loop_config(msmarco, tmp_path, 1, n_queries=800)
    assert (cfg.lr, cfg.batch_size, cfg.max_steps, cfg.weight_decay) == (5e-6, 8, 300, 0.0)  # 3 epochs of 100 batches
    assert round_loop_config(msmarco, tmp_path, 2, n_queries=800).max_steps == 200
    nq = RETRIEVAL_RECIPES["nq"]
    assert nq.untied and nq.train_n_passages == 2 and nq.p_max_len == 256
    tiny = finetune_recipe("tiny")  # the book's: 2 epochs of 8 queries, at least 60 updates
    assert round_loop_config(tiny, tmp_path, 1, n_queries=809).max_steps == 202
    assert round_loop_config(tiny, tmp_path, 1, n_queries=100).max_steps == 60
    assert round_loop_config(tiny, tmp_path, 1, n_queries=809, max_steps=2).max_steps == 2
    with pytest.raises(ValueError, match="smaller than the batch"):
        round_loop_config(tiny, tmp_path, 1, n_queries=4)
    with pytest.raises(ValueError, match="no fine-tuning recipe"):
        finetune_recipe("nope")
