"""The cache keys of the committed runs' stages stay what they were: a stage's key is the hash of
everything its result depends on (``stage_cache.stage_settings``), so a refactoring that changed
one would silently orphan every cached stage and make the committed runs' records point nowhere.

Every stage folder a committed results file names (``results/small.json`` and its parts,
``results/mechanism.json``, the committed curves of ``results/health.json``) is recomputed here
from today's presets, arms and study parts, and its name must be the recorded one. A stage that
continues another one is keyed by its parent's content (``loading.checkpoint_key``), which the
results file records for the released seed's models (``provenance.checkpoints``, ``source_key``):
those stages are recomputed from it; the others' parents are not on this machine, and are left out.
``results/study.json`` records the study page's own runs, keyed by the study."""

import json
import os
from pathlib import Path

import pytest
from locations import MIRROR, ROOT

from condenser_lite.reproduction.runs.arms import arm_config
from condenser_lite.reproduction.configuration.presets import get_preset
from condenser_lite.reproduction.configuration.registry import PARENT
from condenser_lite.studies.mechanism import PARTS, part_preset
from condenser_lite.training.stage_cache import stage_settings
from condenser_lite.utils.cache import settings_hash

DATA = MIRROR if MIRROR.exists() else Path(os.environ.get("CONDENSER_LITE_DATA", MIRROR))
needs_mirror = pytest.mark.skipif(not DATA.exists(), reason="local data mirror not found (../shared/data or "
                                  "$CONDENSER_LITE_DATA)")
RESULTS = ROOT / "results"


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def content_keys() -> dict[str, str]:
    """Stage folder name -> its content key, for the released models' sources."""
    small = json.loads((RESULTS / "small.json").read_text())
    released = small["provenance"]["checkpoints"]["arms"]
    return {_name(small["arms"][arm]["checkpoint"]): rec["source_key"] for arm, rec in released.items()
            if small["arms"][arm]["seed"] == rec["pretraining_seed"]}


def recorded_stages() -> list[tuple]:
    """``(where, preset, arm, seed, parent folder or None, precision, folder)`` of every
    recorded stage whose key can be recomputed here."""
    rows = []
    for path in [RESULTS / "small.json", *sorted((RESULTS / "parts").glob("*.json"))]:
        results = json.loads(path.read_text())
        precision = results["provenance"]["precision"]["stages"]
        runs = {arm: {r["seed"]: _name(r["checkpoint"]) for r in [rec, *rec.get("other_pretraining_seeds", [])]}
                for arm, rec in results["arms"].items()}
        for arm, folders in runs.items():
            for seed, folder in folders.items():
                parent = PARENT[arm] and runs[PARENT[arm]][seed]
                rows.append((f"{path.name} {arm}/{seed}", "small", arm, seed, parent, precision[f"{arm}/{seed}"],
                             folder))
    mechanism = json.loads((RESULTS / "mechanism.json").read_text())
    for part, entry in mechanism.items():
        if part not in PARTS:
            continue
        preset, condenser = part_preset(part, get_preset(mechanism["preset"]))
        for seed, stages in entry["per_seed"].items():
            parent = stages["bert"]["checkpoint_key"]
            for arm, key in (("bert", "bert"), ("bert_cont", "bert_cont"), (condenser, "condenser")):
                if key not in stages:  # a seed trained without its control
                    continue
                rows.append((f"mechanism.json {part} {key}/{seed}", preset, arm, int(seed),
                             None if arm == "bert" else parent, stages[key]["precision"],
                             stages[key]["checkpoint_key"]))
    health = json.loads((RESULTS / "health.json").read_text())
    for arm, curves in health["committed_curves"]["arms"].items():
        assert PARENT[arm] is None, f"health.json: a committed curve of {arm}, a continued stage: key it here"
        for folder, curve in curves.items():
            rows.append((f"health.json {arm}/{curve['seed']}", health["committed_curves"]["preset"], arm,
                         curve["seed"], None, "bf16", folder))
    known = content_keys()
    return [row for row in rows if row[4] is None or row[4] in known]


@pytest.fixture(scope="module")
def book_tokenizer():
    from condenser_lite.data.tokenizer import tiny_tokenizer

    return tiny_tokenizer(vocab_size=get_preset("small").model.vocab_size, data_dir=str(DATA))


@pytest.mark.protocol
@needs_mirror
@pytest.mark.parametrize("where, preset, arm, seed, parent, precision, folder", recorded_stages(),
                         ids=lambda x: x if isinstance(x, str) and " " in x else "")
def test_every_recorded_stage_key_is_todays(where, preset, arm, seed, parent, precision, folder, book_tokenizer):
    # a parent's content key stands for its folder (a name that is no folder is keyed by itself)
    init = None if parent is None else content_keys()[parent]
    cfg = arm_config(arm, preset, init).replace(seed=seed, mixed_precision=precision)
    key = settings_hash(stage_settings(cfg, book_tokenizer, str(DATA)))
    assert f"{cfg.method}-{key}" == folder, f"{where}: the stage's key changed"


@pytest.mark.unit
def test_the_key_test_covers_every_stage_of_the_released_seed():
    """Every arm of the released seed, and every part of the mechanism study on it, is recomputed."""
    rows = recorded_stages()
    small = {r[2] for r in rows if r[0].startswith("small.json") and r[3] == 42}
    assert small == set(json.loads((RESULTS / "small.json").read_text())["arms"])
    parts = {r[0].split()[1] for r in rows if r[0].startswith("mechanism.json") and r[4] is not None}
    assert {"e0", "e1", "e3", "e4", "e5", "l48"} <= parts
    assert len(rows) >= 60


# The fields every stage's key holds. A field added to StageConfig or ModelConfig joins every key; a field
# declared key="if_changed" (a switch of the paper's design, variant.PAPER_SWITCHES, or of the loop) joins only
# the keys of the stages that turn it on.
KEYED_FIELDS = {
    "attn_implementation", "batch_size", "chunk_size", "co_weight", "corpus", "corpus_limit", "dropout", "epochs",
    "eval_blocks", "eval_every", "grad_accum", "head", "heldout_fraction", "hidden_size", "init",
    "intermediate_size", "late_mlm", "lr", "max_grad_norm", "max_len", "max_steps", "method", "min_span",
    "mixed_precision", "mlm_probability", "mlm_weight", "n_head_layers", "num_attention_heads",
    "num_hidden_layers", "seed", "short_seq_prob", "skip_from", "tokenizer", "vocab_size", "warmup_ratio",
    "weight_decay"}


@pytest.mark.unit
def test_a_new_stage_field_leaves_the_keys_of_stages_that_do_not_use_it(monkeypatch):
    from condenser_lite.modeling.variant import PAPER_SWITCHES
    from condenser_lite.training.pretraining_config import StageConfig
    from condenser_lite.training.stage_cache import BOOKKEEPING, IF_CHANGED, stage_settings

    fields = StageConfig().settings()  # the defaults, the model's fields by their own names
    keyed = set(fields) - set(BOOKKEEPING) - set(IF_CHANGED)
    assert keyed == KEYED_FIELDS, f"fields that would change every stage's key: {sorted(keyed - KEYED_FIELDS)}"
    assert set(IF_CHANGED) == {*PAPER_SWITCHES, "schedule", "log_every"}
    assert all(fields[k] == v for k, v in PAPER_SWITCHES.items()), "a switch's default must be the paper's value"
    # the loop's switch joins the key where a stage turns it on (the key reads the tokenizer and
    # the data by identity only)
    monkeypatch.setattr("condenser_lite.training.stage_cache.tokenizer_key", lambda tok: "tok")
    monkeypatch.setattr("condenser_lite.training.stage_cache.data_id", lambda *a, **k: "data")
    cfg = StageConfig(method="mlm", max_steps=2)
    assert "schedule" not in stage_settings(cfg, object())
    assert stage_settings(cfg.replace(schedule="constant"), object())["schedule"] == "constant"
    assert stage_settings(cfg.replace(log_every=10), object())["log_every"] == 10  # a coarser log
    assert stage_settings(cfg.replace(compile=True), object()) == stage_settings(cfg, object())  # same maths
