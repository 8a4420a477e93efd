"""The training loop (condenser_lite/training/loop.py) as a user meets it: a resumed run says so in
one line, and Ctrl-C then the same command gives the run that was never interrupted (the loop's
own tests, with toy models, are in test_loop.py)."""

import pytest
import torch
from command_line import FINETUNE, cli
from safetensors.torch import load_file
from toy_models import Regressor, crash_in_step, regression, regression_collate

from condenser_lite.training.loop import TrainConfig, train


def test_a_resumed_run_says_so_in_one_line(tmp_path, caplog):
    cfg = TrainConfig(max_steps=6, batch_size=4, save_every=2)
    crash_in_step(4, cfg, tmp_path)
    with caplog.at_level("INFO", logger="condenser_lite"):
        train(Regressor(), regression(), cfg, output_dir=tmp_path, collate_fn=regression_collate, progress=False)
    assert [r.getMessage() for r in caplog.records] == [f"resuming from the checkpoint in {tmp_path} at step 2 of 6"]


@pytest.mark.protocol  # fine-tunes
def test_ctrl_c_during_finetune_then_the_same_command_gives_the_uninterrupted_result(beir, retriever, tmp_path,
                                                                                      monkeypatch, capsys):
    """Ctrl-C in step 4 of 6 (exit status 130, a checkpoint of steps 1-3), then the same command:
    the weights and the search metrics are those of a run never interrupted (the training loop's
    exact resume, through the command line)."""
    from condenser_lite.retrieval import biencoder

    common = ["finetune", "--init", retriever, *FINETUNE[:2], "--set", "finetune.max_steps=6", *FINETUNE[4:], "--data-dir", beir]
    assert cli([*common, "--output-dir", tmp_path / "whole"], capsys)[0] == 0

    calls = {"n": 0}
    collate = biencoder.RetrievalCollator.__call__

    def interrupted(self, examples):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return collate(self, examples)

    with monkeypatch.context() as patch:
        patch.setattr(biencoder.RetrievalCollator, "__call__", interrupted)
        code, _, err = cli([*common, "--output-dir", tmp_path / "cut"], capsys)
    assert code == 130 and "checkpoint at step 3" in err and "interrupted" in err
    code, _, err = cli([*common, "--output-dir", tmp_path / "cut"], capsys)
    assert code == 0 and "resuming from the checkpoint" in err and "at step 3 of 6" in err
    whole, cut = load_file(tmp_path / "whole" / "model.safetensors"), load_file(tmp_path / "cut" / "model.safetensors")
    assert [k for k in whole if not torch.equal(whole[k], cut[k])] == []
    search = ["search", "--data-dir", beir, "--p-max-len", "64", "--model"]
    assert cli([*search, tmp_path / "whole"], capsys)[1] == cli([*search, tmp_path / "cut"], capsys)[1]
