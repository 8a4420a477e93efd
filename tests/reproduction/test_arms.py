"""The arms (condenser_lite/reproduction/arms.py): what the protocol pre-trains for each, built from
the preset."""

import pytest

from condenser_lite.utils.errors import ConfigError


def test_modified_condenser_arm_is_the_condenser_stage_with_the_presets_changes(tmp_path):
    from condenser_lite.reproduction.arms import arm_config
    from condenser_lite.reproduction.presets import get_preset
    from condenser_lite.reproduction.registry import MODIFIED_ARM

    init = str(tmp_path)
    preset = get_preset("small", modified_condenser={"head_mlm_probability": 0.5})
    faithful, modified = arm_config("condenser", preset, init), arm_config(MODIFIED_ARM, preset, init)
    assert modified == faithful.replace(head_mlm_probability=0.5)
    assert arm_config("bert", preset, None) == arm_config("bert", get_preset("small"), None)  # stage 1 shared
    with pytest.raises(ConfigError, match="modified_condenser"):
        get_preset("small", arms=("bert", MODIFIED_ARM), modified_condenser=None)
