"""Tests for condenser_lite.training.checkpoint: the random states a resumed run restores, a
finished model saved without transformers' progress bar, and a checkpoint that is incomplete,
damaged or holds a pickle payload refused in one line, never deleted unasked."""

from pathlib import Path

import pytest
import torch
from command_line import FINETUNE, cli, one_error_line
from toy_models import Regressor, crash_in_step, regression, regression_collate

from condenser_lite.cli import main
from condenser_lite.training.loop import TrainConfig, train
from condenser_lite.utils.errors import CheckpointError


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

    from condenser_lite.modeling.condenser import BertMLM
    from condenser_lite.training.pretraining_config import ModelConfig
    from condenser_lite.training.checkpoint import save_model

    model = BertMLM.from_config(ModelConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                                                num_attention_heads=2, intermediate_size=32).bert_config())
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


def test_incomplete_or_damaged_checkpoint_is_refused_not_deleted(tmp_path):
    cfg, run = TrainConfig(max_steps=6, batch_size=4, save_every=2), dict(output_dir=tmp_path, progress=False)
    crash_in_step(5, cfg, tmp_path)
    ckpt = tmp_path / "checkpoint"
    state = (ckpt / "state.json").read_text()
    (ckpt / "state.json").unlink()
    with pytest.raises(CheckpointError, match=f"checkpoint {ckpt} is incomplete: state.json missing"):
        train(Regressor(), regression(), cfg, collate_fn=regression_collate, **run)
    assert (ckpt / "model.pt").exists()  # still there

    (ckpt / "state.json").write_text(state)
    (ckpt / "optimizer.pt").write_bytes((ckpt / "optimizer.pt").read_bytes()[:100])  # cut short
    with pytest.raises(CheckpointError, match="optimizer.pt cannot be read.*--restart"):
        train(Regressor(), regression(), cfg, collate_fn=regression_collate, **run)

    res = train(Regressor(), regression(), cfg, collate_fn=regression_collate, resume=False, **run)
    assert res.resumed_from is None and res.step == 6  # asked for: starts over


class _Payload:
    """What a hostile checkpoint folder could hold: unpickling it creates ``marker`` (it could
    as well run any command)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickle_payload_in_a_checkpoint_is_refused_not_run(tmp_path):
    """An rng.pt or model.pt holding a pickle payload is refused in one line naming the objects it
    holds, and the payload does not run (no marker file); with the good files back, the run resumes."""
    cfg, run = TrainConfig(max_steps=6, batch_size=4, save_every=2), dict(output_dir=tmp_path / "run", progress=False)
    crash_in_step(5, cfg, tmp_path / "run")
    ckpt = tmp_path / "run" / "checkpoint"
    assert isinstance(torch.load(ckpt / "rng.pt", weights_only=True), dict)  # plain tensors, lists and numbers
    good = {name: (ckpt / name).read_bytes() for name in ("rng.pt", "model.pt")}
    for name in good:
        marker = tmp_path / f"ran_{name}"
        torch.save({"state": _Payload(marker)}, ckpt / name)
        with pytest.raises(CheckpointError, match=rf"{name} holds Python objects other than tensors \(.*pathlib"
                                                  r".*not loaded.*--restart"):
            train(Regressor(), regression(), cfg, collate_fn=regression_collate, **run)
        assert not marker.exists()
        (ckpt / name).write_bytes(good[name])
    assert train(Regressor(), regression(), cfg, collate_fn=regression_collate, **run).resumed_from == 4


@pytest.mark.protocol  # fine-tunes
def test_damaged_training_checkpoint_is_named_and_debug_shows_the_traceback(beir, retriever, tmp_path, capsys):
    args = ["finetune", "--init", retriever, *FINETUNE, "--data-dir", beir, "--output-dir", tmp_path / "ft"]
    assert cli(args, capsys)[0] == 0
    model_pt = tmp_path / "ft" / "checkpoint" / "model.pt"
    model_pt.write_bytes(model_pt.read_bytes()[:64])
    line = one_error_line(cli(args, capsys))
    assert f"{model_pt.parent}: model.pt cannot be read" in line and "--restart" in line
    with pytest.raises(CheckpointError):
        main([str(a) for a in [*args, "--debug"]])
    model_pt.unlink()
    assert "incomplete: model.pt missing" in one_error_line(cli(args, capsys))
    assert cli([*args, "--restart"], capsys)[0] == 0
