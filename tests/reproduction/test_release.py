"""The committed checkpoints: a micro protocol run's final models exported as
float16 save_pretrained folders, loaded back by transformers' AutoModel, within float16 of the
float32 models, named by content in the provenance, and refused beyond the size limit."""

import json

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModel, AutoTokenizer

from condenser_lite.modeling.condenser import BertMLM, Condenser
from condenser_lite.reproduction.runs.release import (
    MAX_BYTES,
    export_checkpoints,
    record_checkpoints,
    released_arms,
    verify_checkpoints,
)
from condenser_lite.utils.errors import CheckpointError, ConfigError
from condenser_lite.utils.loading import checkpoint_key


@pytest.fixture(scope="module")
def exported(micro_run, tmp_path_factory):
    _, _, results, _ = micro_run
    out = tmp_path_factory.mktemp("release") / "micro"
    return results, out, export_checkpoints(results, out_dir=out)


def test_exports_the_main_models_with_heads_and_tokenizers(exported):
    results, out, record = exported
    assert released_arms(results) == ["bert", "condenser", "cocondenser"]
    assert set(record["arms"]) == {"bert", "condenser", "cocondenser"} and record["dtype"] == "float16"
    assert 0 < record["bytes"] <= record["max_bytes"] == MAX_BYTES  # the limit it applied, recorded
    for arm, rec in record["arms"].items():
        folder = out / arm
        assert rec["head"] == (arm != "bert") and (folder / "condenser_head.pt").exists() == rec["head"], arm
        assert (folder / "tokenizer.json").exists() and (folder / "config.json").exists()
        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}  # stored in half precision
        assert rec["key"] == checkpoint_key(folder) and rec["source_key"] == checkpoint_key(results["arms"][arm]["checkpoint"])
        assert rec["pretraining_seed"] == results["arms"][arm]["seed"]
    assert not list(out.parent.glob(".micro.tmp*"))  # no temporary folder left


@pytest.mark.parametrize("arm", ["bert", "condenser", "cocondenser"])
def test_automodel_loads_each_folder_within_float16_of_the_float32_model(exported, arm):
    results, out, _ = exported
    source = results["arms"][arm]["checkpoint"]
    tok = AutoTokenizer.from_pretrained(out / arm)
    batch = tok(["the cell membrane protein binds", "a study of gene expression in mice"], padding=True,
                return_tensors="pt")
    batch.pop("token_type_ids", None)
    loaded = AutoModel.from_pretrained(out / arm).eval()
    assert next(loaded.parameters()).dtype == torch.float32  # loaded as float32 by default
    original = (Condenser.from_pretrained(source) if arm != "bert" else BertMLM.from_pretrained(source)).eval()
    with torch.no_grad():
        want = original.backbone.bert(**batch).last_hidden_state
        got = loaded(**batch).last_hidden_state
    torch.testing.assert_close(got, want, atol=2e-2, rtol=1e-2)
    if arm != "bert":  # the head too, through the library's own loader
        head = Condenser.from_pretrained(out / arm).eval()
        with torch.no_grad():
            out_b = head.backbone.bert(**batch, output_hidden_states=True)
            out_a = original.backbone.bert(**batch, output_hidden_states=True)
            got = head.head_forward(out_b.last_hidden_state[:, :1], out_b.hidden_states[head.skip_from][:, 1:],
                                    batch["attention_mask"])
            want = original.head_forward(out_a.last_hidden_state[:, :1], out_a.hidden_states[original.skip_from][:, 1:],
                                         batch["attention_mask"])
        torch.testing.assert_close(got, want, atol=2e-2, rtol=1e-2)


def test_provenance_names_the_folders_and_a_changed_folder_is_found(exported):
    results, out, record = exported
    named = record_checkpoints(json.loads(json.dumps(results)), record)
    assert named["provenance"]["checkpoints"]["arms"]["condenser"]["key"] == record["arms"]["condenser"]["key"]
    assert verify_checkpoints(record) == []
    config = out / "bert" / "config.json"
    text = config.read_text()
    try:
        config.write_text(text.replace('"float32"', '"float16"'))
        assert [p for p in verify_checkpoints(record) if p.startswith("bert: ") and "changed" in p]
    finally:
        config.write_text(text)


def test_refuses_beyond_the_size_limit_and_an_existing_folder(micro_run, tmp_path):
    _, _, results, _ = micro_run
    with pytest.raises(ConfigError, match="more than 0.001 MB"):
        export_checkpoints(results, out_dir=tmp_path / "big", max_bytes=1000)
    assert not list(tmp_path.iterdir())  # nothing half-exported
    export_checkpoints(results, out_dir=tmp_path / "one", arms=["bert"])
    with pytest.raises(CheckpointError, match="replace=True"):
        export_checkpoints(results, out_dir=tmp_path / "one", arms=["bert"])
    again = export_checkpoints(results, out_dir=tmp_path / "one", arms=["condenser"], replace=True)
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["condenser"] and set(again["arms"]) == {"condenser"}
    with pytest.raises(ConfigError, match="not in these results"):
        export_checkpoints(results, out_dir=tmp_path / "x", arms=["nope"])
    mine = tmp_path / "mine"  # a user's folder given with replace: refused, not deleted
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="holds 'notes.txt', which is no checkpoint that release writes"):
        export_checkpoints(results, out_dir=mine, arms=["bert"], replace=True)
    assert (mine / "notes.txt").read_text() == "mine"


def test_release_command_exports_and_records_in_the_results_file(micro_run, tmp_path, capsys):
    from condenser_lite.cli import main

    _, _, results, _ = micro_run
    path = tmp_path / "micro.json"
    path.write_text(json.dumps(results, indent=1))
    main(["release", str(path), "--out", str(tmp_path / "ckpt")])
    written = json.loads(path.read_text())
    record = written["provenance"].pop("checkpoints")
    assert written == json.loads(json.dumps(results))  # the file gains the record and nothing else
    assert set(record["arms"]) == {"bert", "condenser", "cocondenser"} and not verify_checkpoints(record)
    assert "recorded in" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # the folder is there now: refused, in one line, unless --replace
        main(["release", str(path), "--out", str(tmp_path / "ckpt")])
    assert "exists: pass replace=True" in capsys.readouterr().err
    main(["release", str(path), "--out", str(tmp_path / "ckpt"), "--replace"])
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(SystemExit):
        main(["release", str(tmp_path / "other.json")])
    assert "not a protocol results file" in capsys.readouterr().err


def test_a_cache_moved_elsewhere_still_exports_and_a_missing_one_is_named(micro_run, tmp_path, monkeypatch):
    """The results file records each checkpoint's absolute folder. A copy of the cache at another
    path, named by $CONDENSER_LITE_CACHE, holds the same folders by their keys: export finds them
    there; where neither has it, the error names both places to look."""
    import copy
    import shutil
    from pathlib import Path

    _, _, results, _ = micro_run
    moved = copy.deepcopy(results)
    source = Path(results["arms"]["bert"]["checkpoint"])
    cache = tmp_path / "cache"
    shutil.copytree(source, cache / "checkpoints" / source.name)
    moved["arms"]["bert"]["checkpoint"] = str(tmp_path / "gone" / source.name)
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(cache))
    done = export_checkpoints(moved, out_dir=tmp_path / "out", arms=["bert"])
    assert done["arms"]["bert"]["source_key"] == checkpoint_key(source)
    moved["arms"]["bert"]["checkpoint"] = str(tmp_path / "gone" / "mlm-000000000000")
    with pytest.raises(CheckpointError, match="is not here, nor under this cache's checkpoints/"):
        export_checkpoints(moved, out_dir=tmp_path / "out2", arms=["bert"])
