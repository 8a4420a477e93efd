"""The settings tree's reader of recorded presets (reproduction/configuration/settings_tree.py): every preset a
committed results file records, in the layout with a flat ``pretraining`` dict, reads back as the
preset that ran it, and a preset written today reads back as itself."""

import json

import pytest
from locations import ROOT

from condenser_lite.reproduction.configuration.presets import PRESETS, get_preset
from condenser_lite.reproduction.configuration.settings_tree import (RECORDED_LAYOUT, preset_from_record,
                                                                     stages_from_pretraining)
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
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_preset_recorded_in_the_flat_layout_reads_back(name):
    """Each preset written in the recorded layout (its stages folded back into one ``pretraining``
    dict through ``RECORDED_LAYOUT``) reads back as itself: the table names every stage setting a
    preset sets differently from the recipe's defaults."""
    preset = get_preset(name)
    flat = {}
    for recorded, (stages, field) in RECORDED_LAYOUT.items():
        values = {getattr(getattr(preset.stages, s), field) for s in stages}
        assert len(values) == 1, (name, recorded)  # the stages one recorded setting fed agree
        flat[recorded] = values.pop()
    record = {**preset.to_dict(), "pretraining": flat}
    del record["stages"]
    assert preset_from_record(record) == preset


@pytest.mark.unit
def test_a_former_setting_lands_on_every_stage_that_read_it():
    stages = stages_from_pretraining({"cocondenser_lr": 5e-4, "lr": 2e-4, "s2_steps": 9, "seed": 3})
    assert (stages.cocondenser.lr, stages.bert.lr, stages.condenser.lr) == (5e-4, 2e-4, 2e-4)
    assert (stages.bert.max_steps, stages.condenser.max_steps) == (1200, 9)
    assert {r.seed for _, r in stages.items()} == {3}
    with pytest.raises(ConfigError, match=r"^x.json: its pretraining settings name s4_steps, which no version"):
        stages_from_pretraining({"s4_steps": 1}, "x.json")
    with pytest.raises(ConfigError, match="x.json: its preset names budget, which this version"):
        preset_from_record({"name": "micro", "budget": {}}, "x.json")
