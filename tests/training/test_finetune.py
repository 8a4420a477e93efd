"""The papers' fine-tuning recipe (condenser_lite/training/finetune.py): each round's TrainConfig
from a recipe and the number of training queries."""

import pytest

from condenser_lite.reproduction.presets import RETRIEVAL_RECIPES, finetune_recipe
from condenser_lite.training.finetune import FinetuneConfig, round_loop_config


def test_recipes_build_train_configs(tmp_path):
    # a round: its epochs of whole batches of the training queries (the last partial batch dropped)
    recipe = FinetuneConfig(batch_size=8, epochs_round1=3, epochs_round2=2, min_steps=0)
    assert round_loop_config(recipe, tmp_path, 1, n_queries=800).max_steps == 300  # 3 epochs of 100 batches
    assert round_loop_config(recipe, tmp_path, 2, n_queries=805).max_steps == 200
    # the papers' recipes reach the training loop as they are written
    for name, recipe in RETRIEVAL_RECIPES.items():
        cfg = round_loop_config(recipe, tmp_path, 1, n_queries=10 * recipe.batch_size)
        assert (cfg.lr, cfg.batch_size, cfg.weight_decay, cfg.warmup_ratio, cfg.mixed_precision) == (
            recipe.lr, recipe.batch_size, recipe.weight_decay, recipe.warmup_ratio, recipe.mixed_precision), name
    # NQ's batch of 128 queries fits one GPU only through the gradient cache, in several chunks
    nq = RETRIEVAL_RECIPES["nq"]
    assert nq.grad_cache_chunk is not None and nq.grad_cache_chunk < nq.batch_size
    tiny = finetune_recipe("tiny")  # the book's: 2 epochs of 8 queries, at least 60 updates
    assert round_loop_config(tiny, tmp_path, 1, n_queries=809).max_steps == 202
    assert round_loop_config(tiny, tmp_path, 1, n_queries=100).max_steps == 60
    assert round_loop_config(tiny, tmp_path, 1, n_queries=809, max_steps=2).max_steps == 2
    with pytest.raises(ValueError, match="smaller than the batch"):
        round_loop_config(tiny, tmp_path, 1, n_queries=4)
    with pytest.raises(ValueError, match="no fine-tuning recipe"):
        finetune_recipe("nope")
