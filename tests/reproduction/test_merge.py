"""Merging runs of one preset on different pre-training seeds (reproduction/runs/merge.py): the merged
file is the file one call on every seed writes, and parts that do not belong together are refused."""

import json

import pytest
from locations import MIRROR

from condenser_lite.cli import main
from condenser_lite.reproduction.runs.merge import merge_results
from condenser_lite.reproduction.configuration.presets import get_preset
from condenser_lite.reproduction.runs.protocol import run_protocol
from condenser_lite.utils.errors import ConfigError

needs_mirror = pytest.mark.skipif(not MIRROR.exists(), reason="local data mirror ../shared/data not found")
TIMING = ("wall_time", "execution", "provenance", "key")


@pytest.fixture(scope="module")
def runs(tokenizer_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("merge")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CONDENSER_LITE_CACHE", str(root / "cache"))
        mp.setenv("CONDENSER_LITE_DATA", str(MIRROR))
        preset = get_preset("micro", tokenizer=tokenizer_dir, pretrain_seeds=(7, 8), ablation_pretrain_seeds=2)
        joint = run_protocol(preset, verbose=False, workers=2)
        # the parts find every stage and fine-tuning in the cache the joint call filled
        parts = [run_protocol(preset.replace(pretrain_seeds=(s,)), out_path=root / f"part-{s}.json", verbose=False,
                              workers=1) for s in (8, 7)]
    return joint, parts, root


@needs_mirror
def test_merged_parts_are_the_joint_run_number_for_number(runs):
    joint, parts, _ = runs
    merged = merge_results(parts, names=["part-8.json", "part-7.json"])
    assert merged["pretraining_seeds"] == [7, 8]
    for key in joint:
        if key in TIMING:
            continue
        if key == "headline":
            assert {k: v for k, v in merged[key].items() if k != "wall_minutes"} == \
                {k: v for k, v in joint[key].items() if k != "wall_minutes"}
            continue
        assert json.loads(json.dumps(merged[key])) == json.loads(json.dumps(joint[key])), key
    prov = merged["provenance"]
    assert set(prov["parts"]) == {"part-7.json", "part-8.json"} and prov["parts"]["part-7.json"]["pretraining_seeds"] == [7]
    assert prov["rules"] == joint["provenance"]["rules"] and prov["machine"]["cores"]


@needs_mirror
def test_a_part_that_stored_only_its_log_keeps_its_held_out_curve(runs):
    # a part written before runs carried their own curve: the merge takes the curve from the log
    _, parts, _ = runs
    older = json.loads(json.dumps(parts[0]))  # seed 8, a later seed of the merged file
    for entry in older["arms"].values():
        del entry["heldout_curve"]
    merged = merge_results([older, parts[1]])
    fresh = merge_results(parts)
    for arm, entry in merged["arms"].items():
        (run,) = [r for r in entry.get("other_pretraining_seeds", []) if r["seed"] == 8]
        (want,) = [r for r in fresh["arms"][arm].get("other_pretraining_seeds", []) if r["seed"] == 8]
        assert run["heldout_curve"] == want["heldout_curve"] and run["heldout_curve"], arm
        assert "pretrain_log" not in run


@needs_mirror
def test_parts_that_do_not_belong_together_are_refused(runs):
    _, parts, root = runs
    with pytest.raises(ConfigError, match="pre-training seed 8 is in both"):
        merge_results([parts[0], parts[0]])
    other = json.loads(json.dumps(parts[0]))
    other["preset"]["finetune"]["lr"] = 0.5
    with pytest.raises(ConfigError, match="different settings .*finetune"):
        merge_results([other, parts[1]])
    shifted = json.loads(json.dumps(parts[0]))
    shifted["bm25"]["full"]["nDCG@10"] += 0.1
    with pytest.raises(ConfigError, match="differ in 'bm25'"):
        merge_results([shifted, parts[1]])
    missing = json.loads(json.dumps(parts[0]))
    del missing["arms"]["co_mlm_only"]  # the ablation of seed 8 lost: the preset runs it on both seeds
    with pytest.raises(ConfigError, match=r"arm 'co_mlm_only' has pre-training seeds \[7\]"):
        merge_results([missing, parts[1]])
    renamed = [json.loads(json.dumps(p)) for p in parts]  # written by a version with another field name
    for p in renamed:
        p["preset"]["finetune"]["grad_cache_chunk"] = p["preset"]["finetune"].pop("chunk_size")
    with pytest.raises(ConfigError, match="finetune settings name grad_cache_chunk, which this version"):
        merge_results(renamed, names=["a.json", "b.json"])


@needs_mirror
def test_the_merge_command_writes_the_merged_file(runs, capsys):
    _, _, root = runs
    out = root / "merged.json"
    main(["merge", str(root / "part-7.json"), str(root / "part-8.json"), "--out", str(out)])
    merged = json.loads(out.read_text())
    assert merged["pretraining_seeds"] == [7, 8] and merged["provenance"]["command"].startswith("python -m condenser_lite merge")
    assert "merged 2 parts" in capsys.readouterr().out
    notes = root / "notes.txt"
    notes.write_text("my notes")
    with pytest.raises(SystemExit):  # a file that is not a results file is not overwritten
        main(["merge", str(root / "part-7.json"), "--out", str(notes)])
    assert notes.read_text() == "my notes" and "error: --out" in capsys.readouterr().err
