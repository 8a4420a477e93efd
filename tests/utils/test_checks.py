"""Settings checked where they enter (condenser_lite/utils/checks.py): an integer setting refuses a
fraction, and a zero, negative or empty setting is refused in one line naming it, from the
configs (``StageConfig``, ``FinetuneConfig``, ``STSConfig``, ``Preset``, ``TrainConfig``) and from the
command line's own counts."""

import pytest
from command_line import FINETUNE, cli, finetune_with, one_error_line

from condenser_lite.parameters import parse_settings
from condenser_lite.training.loop import TrainConfig
from condenser_lite.training.pretraining_config import StageConfig
from condenser_lite.utils.errors import ConfigError


def test_integer_settings_refuse_fractions(capsys):
    with pytest.raises(ConfigError, match="max_steps takes an integer"):
        parse_settings(["stages.bert.max_steps=2.5"])
    with pytest.raises(ConfigError, match=r"TrainConfig.max_steps=2.5 must be int or None"):
        TrainConfig(max_steps=2.5)
    with pytest.raises(ConfigError, match=r"StageConfig.batch_size=4.0 must be int"):
        StageConfig(batch_size=4.0)
    assert "max_steps takes an integer" in one_error_line(cli(["pretrain", "--method", "mlm", "--set", "stages.bert.max_steps=2.5"], capsys))


SETTINGS = {  # each refused in one line before any training, naming the setting and a valid value
    "finetune lr=0": (["finetune", *finetune_with("finetune.lr=0")], "FinetuneConfig.lr=0.0 must be > 0"),
    "finetune batch_size=0": (["finetune", *finetune_with("finetune.batch_size=0")], "FinetuneConfig.batch_size=0 must be > 0"),
    "finetune train_n_passages=0": (["finetune", *finetune_with("train_n_passages=0")],
                                    "FinetuneConfig.train_n_passages=0 must be > 0"),
    "finetune max_steps=0": (["finetune", *finetune_with("finetune.max_steps=0")],
                             "FinetuneConfig.max_steps=0 must be > 0"),
    "pretrain lr=0": (["pretrain", "--method", "mlm", "--set", "stages.bert.lr=0"], "StageRecipe.lr=0.0 must be > 0"),
    "pretrain lr<0": (["pretrain", "--method", "mlm", "--set", "stages.bert.lr=-1e-4"], "StageRecipe.lr=-0.0001 must be > 0"),
    "pretrain batch_size=0": (["pretrain", "--method", "mlm", "--set", "stages.bert.batch_size=0"],
                              "--set stages.bert.batch_size: StageRecipe.batch_size=0 must be > 0"),
    "pretrain min_span<0": (["pretrain", "--method", "cocondenser", "--corpus", "scifact", "--set",
                             "stages.cocondenser.min_span=-1"], "StageRecipe.min_span=-1 must be > 0"),
    "experiments --seeds ''": (["experiments", "--preset", "micro", "--seeds", ""], "--seeds '': give at least one"),
    "experiments seeds=[]": (["experiments", "--preset", "micro", "--set", "seeds=[]"],
                             "Preset.seeds must name at least one seed"),
    "experiments finetune.lr=0": (["experiments", "--preset", "micro", "--set", "finetune.lr=0"],
                                  "FinetuneConfig.lr=0.0 must be > 0"),
    "experiments sts.batch_size=-1": (["experiments", "--preset", "micro", "--set", "sts.batch_size=-1"],
                                      "STSConfig.batch_size=-1 must be > 0"),
}


@pytest.mark.parametrize("case", list(SETTINGS))
def test_zero_negative_and_empty_settings_are_refused(case, beir, retriever, tmp_path, capsys):
    """A zero or negative lr, batch_size, train_n_passages or min_span, a zero max_steps and an
    empty seed list: each refused in one line naming the setting, before anything is written
    (the flags --train-size and --min-span are checked by the parser: test_cli)."""
    args, expected = SETTINGS[case]
    if args[0] == "finetune":
        args = [*args, "--init", retriever, "--data-dir", beir, "--output-dir", tmp_path / "ft"]
    assert expected in one_error_line(cli(args, capsys))
    assert not (tmp_path / "ft").exists()  # refused before anything was written
