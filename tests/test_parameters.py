"""The chapters' papermill parameters, parsed (condenser_lite/parameters.py): ``-p full true``
arrives as the string "true"."""

import pytest

from condenser_lite.parameters import parse_bool, parse_choice, parse_int, parse_path, parse_settings
from condenser_lite.utils.errors import ConfigError


@pytest.mark.parametrize("value,expected", [
    (True, True), (False, False), ("true", True), ("True", True), (" TRUE ", True), ("false", False),
    ("False", False), ("1", True), ("0", False), (1, True), (0, False), ("yes", True), ("no", False),
])
def test_parse_bool_accepts_papermill_strings(value, expected):
    assert parse_bool(value) is expected


@pytest.mark.parametrize("value", ["maybe", "tru", 2, 0.5, None, [True]])
def test_parse_bool_rejects_with_clear_message(value):
    with pytest.raises(ValueError, match="parameter 'full' must be a boolean"):
        parse_bool(value)


def test_parse_int_and_float():
    assert parse_int("12", "steps") == 12 and parse_int(3, "steps") == 3
    with pytest.raises(ValueError, match="'steps' must be an integer"):
        parse_int("1.5", "steps")
    with pytest.raises(ValueError, match=">= 1"):
        parse_int(0, "steps", minimum=1)


def test_optional_int_choice_and_path():
    assert parse_int("None", "max_steps", optional=True) is None
    assert parse_int(None, "max_steps", optional=True) is None and parse_int("7", "n", optional=True) == 7
    with pytest.raises(ValueError, match="'max_steps' must be an integer"):
        parse_int("None", "max_steps")
    assert parse_choice(" TINY", "budget", ("tiny", "micro")) == "tiny"
    with pytest.raises(ValueError, match="must be one of 'tiny', 'micro', got 'small' \\(use -p full true\\)"):
        parse_choice("small", "budget", ("tiny", "micro"), hint="use -p full true")
    assert parse_path("none", "data_dir") is None and parse_path("", "data_dir") is None
    assert str(parse_path("~/x", "data_dir")).endswith("/x") and "~" not in str(parse_path("~/x", "d"))


@pytest.mark.parametrize("value", ["finetune.lr=1e-4 'seeds=[0, 1]' hidden_size=64",
                                   ["finetune.lr=1e-4", "seeds=[0, 1]", "model.hidden_size=64"]])
def test_parse_settings_reads_papermills_string_and_a_list(value):
    """``-p settings "..."`` arrives as one string of ``path=value`` pairs; a list (papermill -y) too."""
    assert parse_settings(value) == {"finetune.lr": 1e-4, "seeds": (0, 1), "model.hidden_size": 64}
    assert parse_settings(None) == parse_settings("none") == parse_settings("") == {}


@pytest.mark.parametrize("value, message", [
    ("lr=1", "parameter 'settings' lr=1: setting 'lr' is ambiguous: name its path, stages.bert.lr or"),
    ("finetune.nope=1", "parameter 'settings' finetune.nope=1: unknown setting 'finetune.nope'; finetune's fields:"),
    ("model.hidden_size=wide", "parameter 'settings' model.hidden_size=wide: model.hidden_size takes an integer"),
    ("finetune.lr", "parameter 'settings' expects path=value")])
def test_parse_settings_names_the_parameter_and_the_fix(value, message):
    with pytest.raises(ConfigError) as err:
        parse_settings(value, where="parameter 'settings'")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
