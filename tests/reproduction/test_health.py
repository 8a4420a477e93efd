"""The health check of a pre-training stage against the committed runs (reproduction/health.py)."""

import json

import numpy as np
import pytest
from scipy import stats

from condenser_lite.reproduction.health import StageCheck, band_at, bands, prediction_band, stage_check
from condenser_lite.reproduction.presets import get_preset, stage_config


def test_band_is_scipys_prediction_interval_for_one_more_seed():
    values = [4.41, 4.46, 4.38, 4.52, 4.44]
    n, mean, sd = len(values), np.mean(values), np.std(values, ddof=1)
    low, high = stats.t.interval(0.95, n - 1, loc=mean, scale=sd * np.sqrt(1 + 1 / n))
    assert prediction_band(values, "mlm_loss") == pytest.approx((low, high))
    assert prediction_band([4.4], "mlm_loss") is None  # one seed: no spread to go on
    # never narrower than the floor (other CPUs differ in the last digits)
    assert prediction_band([4.4, 4.4, 4.4], "mlm_loss") == pytest.approx((4.38, 4.42))


def test_one_more_seed_falls_in_the_band_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    for n in (2, 5):
        draws = rng.normal(4.4, 0.05, size=(4000, n + 1))
        hits = [lo <= d[-1] <= hi for d in draws for lo, hi in [prediction_band(list(d[:-1]), "mlm_loss")]]
        assert np.mean(hits) == pytest.approx(0.95, abs=0.012), n


def test_band_is_linear_between_evaluations_and_absent_outside_them():
    curves = {"a": [{"step": 500, "mlm_loss": 7.0}, {"step": 1000, "mlm_loss": 6.0}],
              "b": [{"step": 500, "mlm_loss": 7.2}, {"step": 1000, "mlm_loss": 6.2}]}
    table = bands(curves, "mlm_loss")
    mid = band_at(table, 750)
    assert mid.low == pytest.approx((table[0].low + table[1].low) / 2)
    assert mid.high == pytest.approx((table[0].high + table[1].high) / 2)
    assert band_at(table, 1000).low == table[1].low
    assert band_at(table, 250) is None and band_at(table, 1500) is None


def check_of(values_at_500, suspects=()):
    curves = {str(i): [{"step": 500, "mlm_loss": v}, {"step": 1000, "mlm_loss": v - 0.5}]
              for i, v in enumerate(values_at_500)}
    return StageCheck("bert", curves, suspects)


def test_verdicts_name_the_band_and_the_first_suspects():
    check = check_of([6.6, 6.7, 6.65, 6.62, 6.68], suspects=["lr 0.1 (committed: 0.001)"])
    inside = check(500, {"mlm_loss": 6.64})
    assert inside["health"] == "within" and "within the committed runs' band" in inside["line"]
    assert "lr 0.1" in inside["line"]  # a difference is always named
    above = check(500, {"mlm_loss": 7.9})
    assert above["health"] == "above" and above["health_excess"] > 1.0
    assert "check the learning rate" in above["line"] and "first suspects" in above["line"]
    below = check(500, {"mlm_loss": 5.0})
    assert below["health"] == "below" and "shorter schedule" in below["line"] and "held-out text" in below["line"]
    assert check(5000, {"mlm_loss": 3.0})["health"] == "none"


def test_without_a_reference_it_says_so_once():
    check = StageCheck(None, reason="hidden_size 256 (committed: 128)")
    first, second = check(500, {"mlm_loss": 6.0}), check(1000, {"mlm_loss": 5.0})
    assert first["health"] == second["health"] == "none"
    assert "hidden_size 256" in first["line"] and second["line"] is None


def test_a_different_heldout_set_means_no_reference():
    check = StageCheck("bert", {"a": [{"step": 1, "mlm_loss": 1.0}], "b": [{"step": 1, "mlm_loss": 1.1}]},
                       heldout={"n_blocks": 256, "n_masked": 1654, "unigram_entropy": 6.79})
    check.check_heldout({"n_blocks": 256, "n_masked": 1654, "unigram_entropy": 6.79})
    assert check.arm == "bert"
    check.check_heldout({"n_blocks": 120, "n_masked": 800, "unigram_entropy": 7.3})
    assert check.arm is None and "n_blocks 120 (committed: 256)" in check.reason


def test_the_committed_small_run_is_the_reference_of_its_own_stages():
    small = get_preset("small")
    check = stage_check(stage_config(small, "mlm"))
    assert check.arm == "bert" and check.suspects == [] and check.seeds >= 2
    assert check.heldout and check.heldout["n_blocks"] > 0
    fast = stage_check(stage_config(small, "mlm").replace(lr=0.1, max_steps=500))
    assert fast.arm == "bert" and fast.suspects[0].startswith("lr 0.1") and fast.suspects[1].startswith("max_steps")
    wide = stage_check(stage_config(small, "mlm").replace(hidden_size=256, intermediate_size=1024))
    assert wide.arm is None and "hidden_size 256 (committed: 128)" in wide.reason
    # a BERT stage reads no head setting: a head elsewhere in the layers is no difference
    assert stage_check(stage_config(small, "mlm").replace(skip_from=2, n_head_layers=2)).suspects == []
    # a continuation from a model this library did not pre-train has no reference
    other = stage_check(stage_config(small, "condenser", init="bert-base-uncased"))
    assert other.arm is None and "not a stage this library pre-trained" in other.reason


def test_pretrain_judges_each_evaluation_and_records_it(tmp_path, monkeypatch, tokenizer_dir):
    """A stage run with a check logs a verdict at every held-out evaluation and keeps the updates
    outside the band in its record; a reference whose losses no real run reaches flags it."""
    from locations import MIRROR

    from condenser_lite.training.pretraining import StageConfig, pretrain, read_log

    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    cfg = StageConfig().replace(method="mlm", tokenizer=tokenizer_dir, hidden_size=32, num_hidden_layers=2,
                                num_attention_heads=2, intermediate_size=64, max_len=64, batch_size=4, max_steps=4,
                                corpus_limit=40, save_every=None, heldout_fraction=0.05, eval_blocks=8,
                                eval_every=2)
    low = {str(i): [{"step": s, "mlm_loss": 0.5 + i / 100} for s in (2, 4)] for i in range(3)}
    out = pretrain(cfg, output_dir=tmp_path / "stage", data_dir=str(MIRROR), check=StageCheck("bert", low))
    log = [r for r in read_log(out) if "eval_mlm_loss" in r]
    assert [r["step"] for r in log] == [2, 4] and all(r["health"] == "above" for r in log)
    record = json.loads((out / "pretrain_config.json").read_text())["health"]
    assert record["evaluations"] == 2 and [o["step"] for o in record["outside"]] == [2, 4]
