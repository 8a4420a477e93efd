"""The cache keys of the committed runs' stages stay what they were: a stage's key is the hash of
everything its result depends on (``pretraining.stage_settings``), so a refactoring that changed
one would silently orphan every cached stage and make the committed runs' records point nowhere.
The stage-1 models of ``results/small.json`` (and of its parts) and of ``results/mechanism.json``
are recomputed here from today's presets; their folders' names must be the recorded ones."""

import json

import pytest
from locations import MIRROR, ROOT

from condenser_lite.reproduction.arms import arm_config
from condenser_lite.reproduction.presets import get_preset
from condenser_lite.training.pretraining import stage_key

needs_mirror = pytest.mark.skipif(not MIRROR.exists(), reason="local data mirror ../shared/data not found")


def recorded_stage_1() -> list[tuple[str, dict, int, str]]:
    """``(where, preset changes, seed, folder name)`` of every recorded stage-1 model."""
    rows = []
    for path in [ROOT / "results" / "small.json", *sorted((ROOT / "results" / "parts").glob("*.json"))]:
        results = json.loads(path.read_text())
        bert = results["arms"]["bert"]
        for run in [bert, *bert.get("other_pretraining_seeds", [])]:
            rows.append((path.name, {}, run["seed"], run["checkpoint"].rsplit("/", 1)[-1]))
    mechanism = json.loads((ROOT / "results" / "mechanism.json").read_text())
    shapes = {"e0": {}, "e2": {"num_hidden_layers": 6, "skip_from": 3, "n_head_layers": 2},
              "w256": {"hidden_size": 256, "intermediate_size": 1024}}
    for part, changes in shapes.items():
        for seed, stages in mechanism[part]["per_seed"].items():
            rows.append((f"mechanism {part}", changes, int(seed), stages["bert"]["checkpoint_key"]))
    return rows


@pytest.mark.protocol
@needs_mirror
@pytest.mark.parametrize("where, changes, seed, folder", recorded_stage_1(),
                         ids=lambda x: str(x) if not isinstance(x, dict) else ",".join(x) or "small")
def test_the_recorded_stage_1_keys_are_todays(where, changes, seed, folder, monkeypatch):
    monkeypatch.setenv("CONDENSER_LITE_DATA", str(MIRROR))
    cfg = arm_config("bert", get_preset("small", **changes), None).replace(seed=seed)
    assert f"{cfg.method}-{stage_key(cfg)}" == folder, f"{where}: the stage-1 key of seed {seed} changed"


# The fields every stage's key holds. A field added to StageConfig or ModelConfig joins every key; a switch of
# the paper's design (condenser.PAPER_SWITCHES) joins only the keys of the stages that turn it on.
KEYED_FIELDS = {
    "attn_implementation", "batch_size", "chunk_size", "co_weight", "corpus", "corpus_limit", "dropout", "epochs",
    "eval_blocks", "eval_every", "grad_accum", "head", "heldout_fraction", "hidden_size", "init",
    "intermediate_size", "late_mlm", "lr", "max_grad_norm", "max_len", "max_steps", "method", "min_span",
    "mixed_precision", "mlm_probability", "mlm_weight", "n_head_layers", "num_attention_heads",
    "num_hidden_layers", "seed", "short_seq_prob", "skip_from", "tokenizer", "vocab_size", "warmup_ratio",
    "weight_decay"}


@pytest.mark.unit
def test_a_new_stage_field_leaves_the_keys_of_stages_that_do_not_use_it():
    from condenser_lite.modeling.condenser import PAPER_SWITCHES
    from condenser_lite.training.pretraining import BOOKKEEPING, StageConfig

    fields = StageConfig().settings()  # the defaults, the model's fields by their own names
    keyed = set(fields) - set(BOOKKEEPING) - set(PAPER_SWITCHES)
    assert keyed == KEYED_FIELDS, f"fields that would change every stage's key: {sorted(keyed - KEYED_FIELDS)}"
    assert all(fields[k] == v for k, v in PAPER_SWITCHES.items()), "a switch's default must be the paper's value"
