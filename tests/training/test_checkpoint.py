"""Tests for condenser_lite.training.checkpoint: the random states a resumed run restores, and a
finished model saved without transformers' progress bar."""

import pytest
import torch


def test_rng_states_come_back_from_a_checkpoint(tmp_path):
    """rng.pt holds tensors, lists and numbers (read with weights_only=True), and restoring it
    replays Python's, NumPy's and torch's draws, a cached Gaussian included."""
    import random

    import numpy as np

    from condenser_lite.training.checkpoint import restore_rng, rng_state

    def draws():
        return random.random(), random.gauss(0, 1), np.random.rand(), np.random.randn(), torch.rand(2).tolist()

    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    random.gauss(0, 1), np.random.randn()  # leave a cached Gaussian in both
    torch.save(rng_state(), tmp_path / "rng.pt")
    expected = draws()
    draws()  # move on
    restore_rng(tmp_path)
    assert draws() == expected
    assert isinstance(torch.load(tmp_path / "rng.pt", weights_only=True), dict)
    restore_rng(tmp_path / "absent")  # a checkpoint without rng.pt: nothing to restore


@pytest.mark.parametrize("bars_on", [True, False])
def test_save_model_draws_no_transformers_bar_and_restores_the_setting(tmp_path, capfd, bars_on):
    from huggingface_hub.utils import are_progress_bars_disabled
    from transformers.utils import logging as hf_logging

    from condenser_lite.modeling.condenser import BertMLM, tiny_bert_config
    from condenser_lite.training.checkpoint import save_model

    model = BertMLM.from_config(tiny_bert_config(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                                                 num_attention_heads=2, intermediate_size=32))
    before = hf_logging.is_progress_bar_enabled(), are_progress_bars_disabled()
    (hf_logging.enable_progress_bar if bars_on else hf_logging.disable_progress_bar)()
    try:
        if bars_on:  # the bar this removes: save_pretrained draws it
            model.save_pretrained(tmp_path / "plain")
            assert "Writing model shards" in capfd.readouterr().err
        save_model(model, tmp_path / "quiet")
        assert "Writing model shards" not in capfd.readouterr().err
        assert (tmp_path / "quiet" / "config.json").exists()
        assert hf_logging.is_progress_bar_enabled() == bars_on and are_progress_bars_disabled() == (not bars_on)
    finally:
        (hf_logging.enable_progress_bar if before[0] else hf_logging.disable_progress_bar)()
        if before[1]:
            from huggingface_hub.utils import disable_progress_bars

            disable_progress_bars()
