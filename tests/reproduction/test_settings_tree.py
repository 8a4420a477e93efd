"""The settings tree's reader of recorded presets (reproduction/configuration/settings_tree.py): every preset a
committed results file records reads back as the preset that ran it, and a preset written today
reads back as itself; one layout is recorded and read, by stages."""

import json

import pytest
from locations import ROOT

from condenser_lite.reproduction.configuration.presets import get_preset
from condenser_lite.reproduction.configuration.settings_tree import preset_from_record
from condenser_lite.utils.errors import ConfigError


def recorded_presets() -> list[tuple[str, dict]]:
    """``(where, record)`` of every preset a committed results file holds: its ``preset`` and its
    ``provenance.settings``, wherever they sit in the file."""
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("preset", "settings") and isinstance(value, dict) and "model" in value:
                    found.append((f"{where}/{key}", value))
                else:
                    walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    for path in sorted((ROOT / "results").rglob("*.json")):
        walk(json.loads(path.read_text()), str(path.relative_to(ROOT)))
    return found


RECORDED = recorded_presets()


@pytest.mark.unit
def test_the_committed_results_record_presets():
    files = {where.split("/preset")[0].split("/provenance")[0] for where, _ in RECORDED}
    assert {"results/small.json", "results/parts/small-42-43.json", "results/parts/small-44-45.json",
            "results/parts/small-46.json"} <= files


@pytest.mark.unit
@pytest.mark.parametrize("where, record", RECORDED, ids=[w for w, _ in RECORDED])
def test_every_recorded_preset_reads_back_as_the_preset_that_ran(where, record):
    preset = preset_from_record(record, where)
    named = get_preset(record["name"]).replace(pretrain_seeds=preset.pretrain_seeds)
    assert preset == named, where
    assert preset_from_record(preset.to_dict()) == preset  # today's layout reads back as itself


@pytest.mark.unit
def test_every_recorded_preset_holds_its_stages_by_name():
    """No committed results file records the flat ``pretraining`` layout any more: each records
    its stages under ``stages``, so one reader reads them all."""
    assert RECORDED and all("stages" in r and "pretraining" not in r for _, r in RECORDED)


@pytest.mark.unit
def test_a_preset_from_another_version_is_refused_by_name():
    with pytest.raises(ConfigError, match="x.json: its preset names budget, which this version"):
        preset_from_record({"name": "micro", "budget": {}}, "x.json")
    with pytest.raises(ConfigError, match="x.json: its preset names pretraining, which this version"):
        preset_from_record({"name": "micro", "pretraining": {"s1_steps": 1}}, "x.json")
