"""The papers' fine-tuning recipe (condenser_lite/training/finetune.py): each round's config
from a recipe and the number of training queries; a reused output folder must come from the same
--init."""

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch
from command_line import FINETUNE, cli, one_error_line
from safetensors.torch import load_file, save_file

from condenser_lite.reproduction.configuration.presets import RETRIEVAL_RECIPES, finetune_recipe
from condenser_lite.training.finetune import FinetuneConfig, round_config


def test_recipes_build_train_configs(tmp_path):
    # a round: its epochs of whole batches of the training queries (the last partial batch dropped)
    recipe = FinetuneConfig(batch_size=8, epochs_round1=3, epochs_round2=2, min_steps=0)
    assert round_config(recipe, 1, n_queries=800).max_steps == 300  # 3 epochs of 100 batches
    assert round_config(recipe, 2, n_queries=805).max_steps == 200
    # the papers' recipes reach the training loop as they are written
    for name, recipe in RETRIEVAL_RECIPES.items():
        cfg = round_config(recipe, 1, n_queries=10 * recipe.batch_size)
        assert (cfg.lr, cfg.batch_size, cfg.weight_decay, cfg.warmup_ratio, cfg.mixed_precision) == (
            recipe.lr, recipe.batch_size, recipe.weight_decay, recipe.warmup_ratio, recipe.mixed_precision), name
    # NQ's batch of 128 queries fits one GPU only through the gradient cache, in several chunks
    nq = RETRIEVAL_RECIPES["nq"]
    assert nq.chunk_size is not None and nq.chunk_size < nq.batch_size
    tiny = finetune_recipe("tiny")  # the book's: 2 epochs of 8 queries, at least 60 updates
    assert round_config(tiny, 1, n_queries=809).max_steps == 202
    assert round_config(tiny, 1, n_queries=100).max_steps == 60
    assert round_config(tiny, 1, n_queries=809, max_steps=2).max_steps == 2
    with pytest.raises(ValueError, match="smaller than the batch"):
        round_config(tiny, 1, n_queries=4)
    # a round is the recipe itself (a TrainConfig), its updates and seed replaced; the recipe's
    # own max_steps, when set, is every round's
    rnd = round_config(tiny, 2, n_queries=809, seed=5)
    assert isinstance(rnd, FinetuneConfig) and (rnd.max_steps, rnd.seed) == (202, 5)
    assert dataclasses.replace(rnd, max_steps=None, seed=tiny.seed) == tiny
    assert round_config(dataclasses.replace(tiny, max_steps=7), 1, n_queries=809).max_steps == 7
    with pytest.raises(ValueError, match="grad_accum=2: the contrastive loss needs the whole batch"):
        FinetuneConfig(grad_accum=2)
    with pytest.raises(ValueError, match="no fine-tuning recipe"):
        finetune_recipe("nope")


def perturbed_copy(src: Path, dst: Path) -> Path:
    """``src`` with one weight changed: same files, other content."""
    shutil.copytree(src, dst)
    weights = load_file(dst / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name] + 0.5
    save_file(weights, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


@pytest.mark.protocol  # fine-tunes (three short runs)
def test_reused_finetune_folder_must_come_from_the_same_init(beir, retriever, tmp_path, capsys):
    other = perturbed_copy(retriever, tmp_path / "other")
    out = tmp_path / "ft"
    common = [*FINETUNE, "--data-dir", beir, "--output-dir", out]
    code, _, err = cli(["finetune", "--init", retriever, *common], capsys)
    assert code == 0, err
    first = load_file(out / "model.safetensors")

    line = one_error_line(cli(["finetune", "--init", other, *common], capsys))
    assert "init: checkpoint" in line and "--restart" in line  # names the differing field and the way out
    assert all(torch.equal(first[k], v) for k, v in load_file(out / "model.safetensors").items())
    code, _, err = cli(["finetune", "--init", retriever, *common], capsys)  # the same run: reused, and said so
    assert code == 0 and "reusing the finished run" in err

    assert cli(["finetune", "--init", other, *common, "--restart"], capsys)[0] == 0
    assert not all(torch.equal(first[k], v) for k, v in load_file(out / "model.safetensors").items())
