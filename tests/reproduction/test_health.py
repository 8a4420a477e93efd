"""The health check of a pre-training stage against the committed runs (reproduction/runs/health.py)."""

import json

import numpy as np
import pytest
from scipy import stats

from condenser_lite.reproduction.runs.health import (LEVEL, StageCheck, band_at, bands, leave_one_out,
                                                     planned_evaluations, prediction_band, reference_curves, stage_check)
from condenser_lite.reproduction.configuration.presets import get_preset, stage_config
from condenser_lite.reproduction.evidence.results import results_dir


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
    above = check(500, {"mlm_loss": 8.2})
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

    from condenser_lite.training.loop import read_log
    from condenser_lite.training.pretraining import pretrain
    from condenser_lite.training.pretraining_config import StageConfig

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


def test_the_stage_band_is_one_evaluations_band_at_sidaks_confidence():
    """Each evaluation of a stage of m is judged at confidence (1 - LEVEL) ** (1/m), so that all m
    stay inside with chance 1 - LEVEL; m = 1 at 5% is one evaluation's 95% interval."""
    rng = np.random.default_rng(1)
    curves = {str(i): [{"step": 500 * (j + 1), "mlm_loss": 7 - j + rng.normal(0, 0.05)} for j in range(24)]
              for i in range(5)}
    for m, level in ((24, LEVEL), (3, 0.05), (1, 0.05)):
        table = bands(curves, "mlm_loss", evaluations=m, level=level)
        for b in table:
            values = [rows[b.step // 500 - 1]["mlm_loss"] for rows in curves.values()]
            assert (b.low, b.high) == pytest.approx(prediction_band(values, "mlm_loss", (1 - level) ** (1 / m)))
    one = bands(curves, "mlm_loss", evaluations=1, level=0.05)
    assert np.ravel([(b.low, b.high) for b in one]) == pytest.approx(
        np.ravel([prediction_band([rows[i]["mlm_loss"] for rows in curves.values()], "mlm_loss") for i in range(24)]))
    # the default: as many evaluations as the committed stage had, at LEVEL
    assert bands(curves, "mlm_loss") == bands(curves, "mlm_loss", evaluations=24, level=LEVEL)


@pytest.mark.parametrize("rho", [0.0, 0.95])
def test_a_healthy_stage_leaves_the_stage_band_at_most_level_of_the_time(rho):
    """Simulated seeds of a stage of 24 evaluations (normal spread; evaluations independent, or
    moving together as real curves do): one more seed leaves the stage band somewhere in about
    LEVEL of stages, and in fewer when the evaluations move together."""
    rng = np.random.default_rng(2)
    steps, n, trials = 24, 5, 2000
    cov = rho ** np.abs(np.subtract.outer(np.arange(steps), np.arange(steps)))
    draws = rng.multivariate_normal(np.zeros(steps), cov, size=(trials, n + 1)) * 0.3 + 6.0
    flagged = 0
    for d in draws:
        table = bands({str(i): [{"step": j, "mlm_loss": d[i, j]} for j in range(steps)] for i in range(n)}, "mlm_loss")
        flagged += any(not b.low <= d[n, b.step] <= b.high for b in table)
    rate, error = flagged / trials, 3 * np.sqrt(LEVEL * (1 - LEVEL) / trials)
    assert rate <= LEVEL + error
    if rho == 0:
        assert rate == pytest.approx(LEVEL, abs=error)


def test_leaving_each_committed_seed_out_flags_at_most_one_stage_in_twenty():
    """The false-alarm rate on real curves: every committed seed judged over its whole stage
    against the band of the other seeds of its arm, on every arm with three seeds or more. One
    evaluation's 95% band flagged 3 of bert's 4 stage-1 seeds (8 of 96 evaluations)."""
    curves = reference_curves()
    assert len(curves["bert"]) >= 4  # not vacuous: the committed stage 1 of every seed with a curve
    judged = 0
    for arm, seeds in curves.items():
        if len(seeds) < 3:
            continue
        flagged = []
        for key, rows in seeds.items():
            check = StageCheck(arm, {k: v for k, v in seeds.items() if k != key})
            verdicts = [check(r["step"], {"mlm_loss": r["mlm_loss"]})["health"] for r in rows]
            flagged += [key] if any(v in ("above", "below") for v in verdicts) else []
            judged += 1
        assert len(flagged) <= len(seeds) / 20, (arm, flagged)
    assert judged >= 30


def test_leave_one_out_counts_what_the_test_counts():
    counts = leave_one_out(reference_curves())
    assert all(c["flagged"] == 0 for c in counts.values())
    assert counts["bert"]["evaluations"] == 24 * counts["bert"]["stages"]
    # one evaluation's 95% band, judged at every evaluation, flags healthy stages: the reason for the stage band
    per_evaluation = leave_one_out(reference_curves(), evaluations=1, level=0.05)
    assert per_evaluation["bert"]["flagged"] >= 2
    assert sum(c["flagged"] for c in per_evaluation.values()) > sum(c["stages"] for c in per_evaluation.values()) / 20


def test_the_line_says_how_sure_it_is_and_p_matches_the_verdict():
    check = check_of([6.6, 6.7, 6.65, 6.62, 6.68])
    band = check.bands["mlm_loss"][0]
    for value in (6.64, band.high - 1e-4, band.high + 1e-4, band.low - 0.05, 9.0):
        out = check(500, {"mlm_loss": value})
        assert "\n" not in out["line"] and "that a healthy stage strays this far" in out["line"]
        assert (out["health_p"] < LEVEL) == (out["health"] != "within"), value
    assert "a healthy stage of 2 evaluations leaves this band 1 time in 100" in out["line"]


def test_a_stage_is_judged_for_the_evaluations_it_will_make():
    small = get_preset("small")
    cfg = stage_config(small, "mlm")
    curves = reference_curves()["bert"]
    assert planned_evaluations(cfg, curves) == 24
    assert planned_evaluations(cfg.replace(max_steps=1500), curves) == 3
    assert planned_evaluations(cfg.replace(max_steps=1700), curves) == 4  # and after the last update
    assert planned_evaluations(cfg.replace(eval_every=100), curves) == 116  # from the committed 500 on
    short = stage_check(cfg.replace(max_steps=1500))
    assert short.evaluations == 3 and stage_check(cfg).evaluations == 24
    # fewer evaluations to judge: a narrower band at each
    wide, narrow = stage_check(cfg).bands["mlm_loss"][1], short.bands["mlm_loss"][1]
    assert narrow.high - narrow.low < wide.high - wide.low


def test_a_shifted_run_is_flagged_where_the_seeds_agree():
    """Synthetic: five seeds that agree to 0.02 nats early and spread later; a run 0.3 nats above
    them is flagged at the first evaluation, one 0.3 below too, and one that follows them is not."""
    rng = np.random.default_rng(3)
    spread = [0.02] * 3 + [0.3] * 9 + [0.04] * 12
    mean = np.linspace(6.8, 4.4, 24)
    curves = {str(i): [{"step": 500 * (j + 1), "mlm_loss": mean[j] + rng.normal(0, spread[j])} for j in range(24)]
              for i in range(5)}
    for shift, verdict in ((0.3, "above"), (-0.3, "below"), (0.0, "within")):
        check = StageCheck("bert", curves)
        first = check(500, {"mlm_loss": mean[0] + shift})
        assert first["health"] == verdict, first["line"]


def test_broken_runs_are_flagged_within_1500_updates_and_the_healthy_one_is_not():
    """The runs of ``python -m condenser_lite health-runs`` (results/health.json), judged again
    from the committed curves: the first 1,500 updates of the committed schedule on a new seed
    stay inside the band; the same with a learning rate 100x or with masking at 5% leave it
    above, and with the held-out blocks in the training data below."""
    demo = json.loads((results_dir() / "health.json").read_text())
    base = stage_config(get_preset(demo["preset"]), "mlm")
    judged = {}
    for name, run in demo["runs"].items():
        check = stage_check(base.replace(**run["settings"]))
        judged[name] = [{"step": e["step"], "mlm_loss": e["mlm_loss"], **check(e["step"], {"mlm_loss": e["mlm_loss"]})}
                        for e in run["evaluations"]]
    assert [e["health"] for e in judged["schedule"]] == ["within"] * 3
    for name, where in (("lr_x100", "above"), ("mask_5pct", "above"), ("leak", "below")):
        first = next((e for e in judged[name] if e["health"] != "within"), None)
        assert first and first["health"] == where and first["step"] <= 1500, (name, judged[name])
        assert first["health_p"] < LEVEL
    # the leak lowers the loss against the healthy run on the same seed and batches
    assert judged["leak"][-1]["mlm_loss"] < judged["schedule"][-1]["mlm_loss"] - 0.05


def test_curves_added_to_the_results_join_the_reference(tmp_path):
    rows = [{"step": 500, "mlm_loss": 6.7}, {"step": 1000, "mlm_loss": 6.5}]
    (tmp_path / "health.json").write_text(json.dumps({"committed_curves": {"preset": "small", "arms": {
        "bert": {"mlm-abc": {"seed": 45, "source": "a re-run", "curve": rows}}}}}))
    assert reference_curves(tmp_path) == {"bert": {"mlm-abc": rows}}
    assert reference_curves(tmp_path, preset="tiny") == {}
