"""The arms (condenser_lite/reproduction/runs/arms.py): what the protocol pre-trains for each, built from
the preset."""

from pathlib import Path

import pytest

from condenser_lite.utils.errors import ConfigError


def test_modified_condenser_arm_is_the_condenser_stage_with_the_presets_changes(tmp_path):
    from condenser_lite.reproduction.runs.arms import arm_config
    from condenser_lite.reproduction.configuration.presets import get_preset
    from condenser_lite.reproduction.configuration.registry import MODIFIED_ARM

    init = str(tmp_path)
    preset = get_preset("small", modified_condenser={"head_mlm_probability": 0.5})
    faithful, modified = arm_config("condenser", preset, init), arm_config(MODIFIED_ARM, preset, init)
    assert modified == faithful.replace(head_mlm_probability=0.5)
    assert arm_config("bert", preset, None) == arm_config("bert", get_preset("small"), None)  # stage 1 shared
    with pytest.raises(ConfigError, match="modified_condenser"):
        get_preset("small", arms=("bert", MODIFIED_ARM), modified_condenser=None)


@pytest.mark.parametrize("logged, warned", [(False, True), (True, False)])
def test_a_cached_modified_stage_without_its_copys_count_is_named(tmp_path, monkeypatch, logged, warned):
    """A modified-Condenser stage pre-trained before its head's masked copy was counted has
    undercounted FLOPs: reusing it says so and how to redo it, instead of passing the number on."""
    import json
    import warnings

    from condenser_lite.reproduction.runs import arms

    compute = {"steps": 1, "masked": 10, "flops": 1.0, **({"head_masked": 33} if logged else {})}
    record = {"steps": 1, "wall_time": 1.0, "config": {}, "heldout": None, "heldout_set": None, "compute": compute,
              "settings": {"mixed_precision": "no"}}
    (tmp_path / "pretrain_config.json").write_text(json.dumps(record))
    monkeypatch.setattr(arms, "pretrain", lambda *a, **k: tmp_path)
    monkeypatch.setattr(arms, "read_log", lambda folder: [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = arms.pretrain_arm("condenser_mod", "small", init="bert-checkpoint")
    assert out["compute"] == compute
    said = [str(w.message) for w in caught if "masked copy" in str(w.message)]
    assert bool(said) == warned and all("delete that folder" in m for m in said)


def test_a_fine_tuning_is_keyed_by_the_pooling_it_reads(tmp_path, monkeypatch):
    """Two folders with the same weights, one declaring mean pooling, fine-tune into different cache
    folders (the pooling files are not weights, so the checkpoint's content key is the same); a
    folder declaring [CLS] keys as one declaring nothing, as the runs before pooling existed."""
    import shutil

    from tiny_checkpoint import make_checkpoint

    from condenser_lite.reproduction.runs import arms
    from condenser_lite.reproduction.runs.tasks import Task
    from condenser_lite.retrieval.pooling import Pooling, write_pooling

    plain = make_checkpoint(tmp_path / "plain", ["the cat sat on a mat"] * 3)
    folders = {"plain": plain}
    for name, pooling in (("cls", Pooling()), ("mean", Pooling("mean", True))):
        folders[name] = tmp_path / name
        shutil.copytree(plain, folders[name])
        write_pooling(folders[name], pooling)
    monkeypatch.setattr(arms, "compute_once", lambda path, compute: str(path.parent))  # the key, not the run
    task = Task("toy", train=[{"query_id": "q"}], eval=None, split="test", key="toy")
    dirs = {name: arms.finetune_arm("x", str(folder), task, "micro") for name, folder in folders.items()}
    assert Path(dirs["plain"]).name.rsplit("-", 1)[1] == Path(dirs["cls"]).name.rsplit("-", 1)[1]
    assert dirs["mean"].rsplit("-", 1)[1] != dirs["plain"].rsplit("-", 1)[1]
