"""The scaling part of the mechanism study: the pre-registered trend of reliance against log
FLOPs (mechanism_rules.scaling_trend) checked against a least-squares fit by scipy, and the study's parts
and summary on made-up gauges (condenser_lite/studies/mechanism.py)."""

import json
import math

import numpy as np
import pytest
from locations import ROOT
from scipy import stats as scipy_stats

from condenser_lite.studies.mechanism_rules import SCALING_SEEDS, scaling_trend
from condenser_lite.reproduction.statistics.rules import RELIANCE_THRESHOLD
from condenser_lite.utils.errors import ConfigError

pytestmark = pytest.mark.unit


def study_module():
    from condenser_lite.studies import mechanism

    return mechanism


def points(slopes, xs=(13.0, 13.6, 14.2), base=0.0):
    return [{"seed": seed, "log_flops": x, "reliance": base + b * (x - xs[0]) + 0.01 * ((i + k) % 2)}
            for k, (seed, b) in enumerate(slopes.items()) for i, x in enumerate(xs)]


def test_the_trend_is_the_mean_of_per_seed_least_squares_slopes_with_a_t_interval():
    pts = points({42: 0.10, 43: 0.14, 44: 0.12})
    trend = scaling_trend(pts)
    per_seed = {s: scipy_stats.linregress([p["log_flops"] for p in pts if p["seed"] == s],
                                          [p["reliance"] for p in pts if p["seed"] == s]).slope for s in (42, 43, 44)}
    assert trend["slopes"] == {str(s): pytest.approx(b, abs=1e-6) for s, b in per_seed.items()}
    s = np.array(list(per_seed.values()))
    half = scipy_stats.t.ppf(0.975, 2) * s.std(ddof=1) / math.sqrt(3)
    assert trend["slope_interval"] == [pytest.approx(s.mean() - half, abs=1e-6), pytest.approx(s.mean() + half, abs=1e-6)]
    assert not trend["flat"]
    x = trend["crossing_log_flops"]  # the line through the mean point reaches the threshold there
    assert trend["r_mean"] + trend["mean_slope"] * (x - trend["x_mean"]) == pytest.approx(RELIANCE_THRESHOLD, abs=1e-4)
    lo, hi = trend["crossing_interval"]
    assert lo < x < hi


def test_a_flat_trend_is_reported_as_a_bound():
    trend = scaling_trend(points({42: 0.02, 43: -0.03, 44: 0.01}))
    assert trend["flat"] and trend["crossing_log_flops"] is None
    hi = trend["slope_interval"][1]
    assert trend["bound_log_flops"] == pytest.approx(trend["x_mean"] + (RELIANCE_THRESHOLD - trend["r_mean"]) / hi)
    nothing = scaling_trend(points({42: -0.05, 43: -0.06, 44: -0.04}))
    assert nothing["flat"] and nothing["bound_log_flops"] is None  # no slope in the interval rises
    with pytest.raises(ValueError, match="two pre-training seeds"):
        scaling_trend(points({42: 0.1}))


def test_the_scaling_parts_are_the_registered_points():
    from condenser_lite.reproduction.configuration.presets import get_preset

    study = study_module()
    small = get_preset("small")
    assert SCALING_SEEDS == (42, 43, 44)
    steps = {p: study.part_preset(p, small)[0].stages.condenser.max_steps for p in study.SERIES["training length"]}
    assert steps == {"e0": 3000, "e1": 12000, "l48": 48000}
    s1x4, arm = study.part_preset("s1x4", small)
    assert (s1x4.stages.bert.max_steps, s1x4.stages.condenser.max_steps, arm) == (48000, 3000, "condenser")
    w = study.part_preset("w256", small)[0]
    assert (w.model.hidden_size, w.model.intermediate_size, w.stages.condenser.max_steps) == (256, 1024, 3000)


def fake_part(flops, reliance_by_seed, relies):
    per_seed = {}
    for seed, r in reliance_by_seed.items():
        own, late = 5.0 - 0.2 * r, 4.8  # ablated 5.0: reliance = (5.0 - own) / (5.0 - late) = r
        final = {"reliance_own_loss": own, "reliance_ablated_loss": 5.0, "reliance_late_loss": late,
                 "reliance_zero_loss": 5.0, "reliance_mean_loss": 5.0, "mlm_loss": late, "cls_cosine": 0.5}
        per_seed[seed] = {"condenser": {"final": final, "flops": flops, "steps": 1},
                          "bert_cont": {"final": {"mlm_loss": late, "cls_cosine": 0.6}}}
    return {"seeds": [int(s) for s in per_seed], "per_seed": per_seed, "c0": {"relies": relies}}


def test_the_study_summary_reads_the_points_and_fits_the_training_length_series():
    study = study_module()
    fake = {"e0": fake_part(1e13, {"42": 0.0, "43": 0.01, "44": 0.0}, False),
            "e1": fake_part(4e13, {"42": 0.05, "43": 0.08, "44": 0.04}, False),
            "l48": fake_part(1.6e14, {"42": 0.15, "43": 0.2, "44": 0.12}, False),
            "w256": fake_part(3e13, {"42": 0.0, "43": 0.0, "44": 0.02}, False)}
    out = study.scaling(fake)
    assert set(out["points"]) == {"e0", "e1", "l48", "w256"}
    assert out["points"]["e1"]["per_seed"]["43"]["reliance"] == pytest.approx(0.08)
    assert out["trend"]["mean_slope"] > 0 and set(out["versus_e0"]) == {"w256"}
    assert json.loads(json.dumps(out)) == out  # what the results file stores
    partial = study.scaling({k: v for k, v in fake.items() if k != "l48"})
    assert partial["trend"] is None  # the training-length series needs its three points
    assert set(partial["versus_e0"]) == {"w256"}  # the width point needs only E0 on its seeds


def test_a_rerun_that_reads_the_old_seeds_stages_back_keeps_their_record():
    reused = study_module().reused
    old = {"seeds": [42], "per_seed": {"42": {arm: {"checkpoint_key": f"{arm}-1"} for arm in ("bert", "condenser")}}}
    same = {"42": {arm: {"checkpoint_key": f"{arm}-1"} for arm in ("bert", "condenser")},
            "44": {arm: {"checkpoint_key": f"{arm}-9"} for arm in ("bert", "condenser")}}
    assert reused(old, same)
    retrained = {**same, "42": {**same["42"], "condenser": {"checkpoint_key": "condenser-2"}}}
    assert not reused(old, retrained)  # another stage under the old seed: a new record
    assert not reused(old, {"44": same["44"]})  # the old seed left out


def test_merging_another_machines_part_rejudges_and_refuses_a_different_run(tmp_path, monkeypatch):
    """``--merge``: a part run elsewhere joins the file and the summaries are recomputed from
    the parts; the same part holding another run is refused, naming the part."""
    study = study_module()
    committed = json.loads((ROOT / "results" / "mechanism.json").read_text())
    part = next(p for p in study.SCALING_PARTS if p in committed and p != "e0")
    base = {k: v for k, v in committed.items() if k not in (part, "scaling")}
    out, other = tmp_path / "mechanism.json", tmp_path / "elsewhere.json"
    out.write_text(json.dumps(base))
    header = {"study": "mechanism", "preset": committed["preset"]}
    other.write_text(json.dumps({**header, part: committed[part]}))
    monkeypatch.setattr("sys.argv", ["mechanism_study.py", "--out", str(out), "--merge", str(other)])
    study.main()
    merged = json.loads(out.read_text())
    assert merged[part] == committed[part] and merged["scaling"] == committed["scaling"]
    changed = {**committed[part], "seeds": [1]}
    other.write_text(json.dumps({**header, part: changed}))
    with pytest.raises(ConfigError, match=f"different runs of part {part}"):
        study.main()
    for bad, why in [("{not json", "not JSON"), ('{"study": "small"}', "not a mechanism study")]:
        other.write_text(bad)
        with pytest.raises(ConfigError, match=why):
            study.main()
    other.unlink()
    with pytest.raises(ConfigError, match="cannot be read .No such file"):
        study.main()


def test_merging_a_part_that_grew_by_new_seeds_keeps_the_larger_run(tmp_path, monkeypatch):
    """A point run seed by seed on a machine that keeps nothing: the file holds L48 on seed 42,
    the other machine ran seed 43 from a copy of it, so its part holds seed 42's record unchanged
    (its provenance kept) and seed 43's. Merging either way round keeps the larger part; an old
    seed's record changed on the way is refused."""
    study = study_module()
    committed = json.loads((ROOT / "results" / "mechanism.json").read_text())
    header = {"study": "mechanism", "preset": committed["preset"]}
    old = {**committed["e1"], "seeds": [42], "per_seed": {"42": committed["e1"]["per_seed"]["42"]}}
    old["provenance"] = {**old["provenance"], "seeds": [42]}
    old.pop("provenance_of_other_seeds", None)
    grown = {**committed["e1"], "seeds": [42, 43],
             "per_seed": {s: committed["e1"]["per_seed"][s] for s in ("42", "43")},
             "provenance": {**committed["e1"]["provenance"], "seeds": [43]},
             "provenance_of_other_seeds": [{"seeds": [42], **old["provenance"]}]}
    base = {k: v for k, v in committed.items() if k not in ("e1", "scaling")}
    out, other = tmp_path / "mechanism.json", tmp_path / "elsewhere.json"
    monkeypatch.setattr("sys.argv", ["mechanism_study.py", "--out", str(out), "--merge", str(other)])
    for here, there in ((old, grown), (grown, old)):
        out.write_text(json.dumps({**header, **base, "e1": here}))
        other.write_text(json.dumps({**header, "e1": there}))
        study.main()
        assert json.loads(out.read_text())["e1"] == grown
    bent = json.loads(json.dumps(grown))
    bent["per_seed"]["42"]["condenser"]["final"]["cls_reliance"] += 0.1
    out.write_text(json.dumps({**header, **base, "e1": old}))
    other.write_text(json.dumps({**header, "e1": bent}))
    with pytest.raises(ConfigError, match="different runs of part e1"):
        study.main()


def test_merging_seeds_run_side_by_side_from_one_copy_joins_them_in_either_order(tmp_path, monkeypatch):
    """Seeds run side by side, each on a machine given a copy of the file: the file holds L48 on
    seeds 42-46, the other machine added seed 47 to an older copy (42-44). The merge holds the
    union, every run's provenance, the later run's as the part's own, and C0, the reliance summary
    and the onset judged over all six seeds; either order gives the same file and merging again
    changes nothing. A seed both hold with another summary, or trained by both runs, is refused."""
    study = study_module()
    committed = json.loads((ROOT / "results" / "mechanism.json").read_text())
    header = {"study": "mechanism", "preset": committed["preset"]}
    full = committed["l48"]  # the part as it stood with seeds 42-46, whatever the file holds now
    runs = [full["provenance"], *full["provenance_of_other_seeds"]]
    older = [r for r in runs if r["seeds"][0] in (42, 43, 44)]
    ours = {**study.judge({s: full["per_seed"][s] for s in ("42", "43", "44", "45", "46")}),
            "what": full["what"], "seeds": [42, 43, 44, 45, 46], "modified_condenser": full["modified_condenser"],
            "provenance": next(r for r in runs if r["seeds"] == [45, 46]), "provenance_of_other_seeds": older}
    per_seed = {s: ours["per_seed"][s] for s in ("42", "43", "44")}
    per_seed["47"] = json.loads(json.dumps(ours["per_seed"]["46"]))
    per_seed["47"]["condenser"]["checkpoint_key"] = "condenser-seed47"
    theirs = {**study.judge(per_seed), "what": ours["what"], "seeds": [42, 43, 44, 47],
              "modified_condenser": ours["modified_condenser"],
              "provenance": {**ours["provenance"], "seeds": [47], "finished": "2099-01-01T00:00:00+00:00"},
              "provenance_of_other_seeds": older}
    base = {k: v for k, v in committed.items() if k not in ("l48", "scaling", "onset")}
    out, other = tmp_path / "mechanism.json", tmp_path / "elsewhere.json"
    monkeypatch.setattr("sys.argv", ["mechanism_study.py", "--out", str(out), "--merge", str(other)])
    files = []
    for here, there in ((ours, theirs), (theirs, ours)):
        out.write_text(json.dumps({**header, **base, "l48": here}))
        other.write_text(json.dumps({**header, "l48": there}))
        study.main()
        files.append(json.loads(out.read_text()))
    assert files[0] == files[1]
    part = files[0]["l48"]
    assert part["seeds"] == [42, 43, 44, 45, 46, 47] and sorted(part["per_seed"], key=int) == list(map(str, part["seeds"]))
    assert part["provenance"]["seeds"] == [47]
    assert [r["seeds"] for r in part["provenance_of_other_seeds"]] == [[42], [43], [44], [45, 46]]
    assert part["reliance"] == study.judge(part["per_seed"])["reliance"] and part["c0_seeds"] == [42, 43, 44]
    assert sorted(files[0]["onset"]["per_seed"], key=int) == list(map(str, part["seeds"]))
    assert files[0]["onset"]["missing_seeds"] == [48, 49]
    other.write_text(json.dumps({**header, "l48": theirs}))
    study.main()  # the file already holds both runs
    assert json.loads(out.read_text()) == files[0]
    bent = json.loads(json.dumps(theirs))
    bent["per_seed"]["44"]["condenser"]["final"]["cls_reliance"] += 0.1
    twice = {**theirs, "seeds": [42, 43, 44, 45, 47], "per_seed": {**theirs["per_seed"], "45": ours["per_seed"]["45"]},
             "provenance": {**theirs["provenance"], "seeds": [45, 47]}}
    for refused in (bent, twice):
        out.write_text(json.dumps({**header, **base, "l48": ours}))
        other.write_text(json.dumps({**header, "l48": refused}))
        with pytest.raises(ConfigError, match="different runs of part l48"):
            study.main()


def test_the_crossing_range_runs_low_to_high_on_both_sides_of_the_threshold():
    """Below the threshold the steeper slope reaches it sooner, above it later: either way the
    range the slope's limits give is reported low end first."""
    below = scaling_trend(points({42: 0.10, 43: 0.14, 44: 0.12}))
    above = scaling_trend(points({42: 0.40, 43: 0.50, 44: 0.45}, base=0.1))
    assert above["r_mean"] > RELIANCE_THRESHOLD > below["r_mean"]
    for trend in (below, above):
        lo, hi = trend["crossing_interval"]
        assert lo < trend["crossing_log_flops"] < hi


def test_the_trends_interval_cannot_see_a_rise_on_fewer_than_all_three_seeds():
    """What the pre-registered test can detect, known before the runs: with three seeds, a rise
    on one or two of them (the others flat) is never called a rise, however steep."""
    from condenser_lite.studies.mechanism_rules import trend_sensitivity

    sens = trend_sensitivity(3)
    assert sens["blind_to"] == 2
    assert sens["ratio"] == pytest.approx(scipy_stats.t.ppf(0.975, 2) / math.sqrt(3))
    for slopes in ({42: 5.0, 43: 0.0, 44: 0.0}, {42: 5.0, 43: 5.0, 44: 0.0}, {42: 9.0, 43: 4.0, 44: 0.0}):
        assert scaling_trend(points(slopes))["flat"]
    assert not scaling_trend(points({42: 5.0, 43: 5.0, 44: 4.0}))["flat"]  # all three: it can
    assert trend_sensitivity(10)["blind_to"] == 3  # more seeds see a rise on fewer of them


def test_the_trend_in_words_says_where_the_line_crosses_and_how_far_past_the_data():
    """``trend_text``, each branch on made-up trends: a rise inside the measured range or past
    it (an extrapolation), a flat trend whose upper slope crosses inside the range, past it, far
    past it (no number), or never."""
    from condenser_lite.reproduction.statistics.wording import flops_text, trend_text

    assert flops_text(15.5) == "3.2 × 10¹⁵" and flops_text(13.0) == "1.0 × 10¹³"
    base = {"mean_slope": 0.1, "slope_interval": [0.05, 0.15], "confidence": 0.95, "threshold": 0.2,
            "slopes": {"42": 0.1, "43": 0.1, "44": 0.1}, "flat": False, "bound_log_flops": None}
    inside = trend_text({**base, "crossing_log_flops": 14.0, "crossing_interval": [13.8, 14.3]}, 14.5)
    assert "rises: a mean slope of 0.100" in inside and "within the measured range" in inside
    assert "1.0 × 10¹⁴ FLOPs" in inside and "narrower than a confidence interval" in inside
    past = trend_text({**base, "crossing_log_flops": 15.5, "crossing_interval": [15.2, 16.0]}, 14.5, brief=True)
    assert "extrapolation to 10 times the largest stage" in past and "confidence" not in past
    beyond = trend_text({**base, "crossing_log_flops": 25.7, "crossing_interval": [20.0, 40.0]}, 14.5)
    assert "would not reach 0.2 within 1,000 times" in beyond and "10²⁵" not in beyond
    flat = {**base, "flat": True, "slope_interval": [-0.02, 0.05], "crossing_log_flops": None,
            "crossing_interval": None}
    assert "not ruled out" in trend_text({**flat, "bound_log_flops": 14.2}, 14.5)
    assert "only at about 1.0 × 10¹⁶ FLOPs, 32 times" in trend_text({**flat, "bound_log_flops": 16.0}, 14.5)
    far = trend_text({**flat, "bound_log_flops": 307.9}, 14.5)
    assert "not reach 0.2 within 1,000 times" in far and "10³" not in far
    assert "no line it allows" in trend_text({**flat, "bound_log_flops": None}, 14.5)


def test_a_point_without_reliance_gauges_is_refused_not_counted_as_zero():
    study = study_module()
    fake = {"e0": fake_part(1e13, {"42": 0.0, "43": 0.01, "44": 0.0}, False)}
    del fake["e0"]["per_seed"]["43"]["condenser"]["final"]["reliance_own_loss"]
    with pytest.raises(ValueError, match="part e0: seed.s. 43 have no reliance gauges"):
        study.scaling(fake)


def test_a_point_on_some_of_the_registered_seeds_is_not_judged():
    """Rule 1 judges a point on every seed of SCALING_SEEDS: L48 run seed by seed across sessions
    must not read [CLS] on its first seed alone, nor enter the trend."""
    study = study_module()
    fake = {"e0": fake_part(1e13, {"42": 0.0, "43": 0.01, "44": 0.0}, False),
            "e1": fake_part(4e13, {"42": 0.05, "43": 0.08, "44": 0.04}, False),
            "l48": fake_part(1.6e14, {"42": 0.3}, True)}  # c0 over its one seed: relies
    out = study.scaling(fake)
    assert out["points"]["l48"]["reads_cls"] is None
    assert out["points"]["l48"]["missing_seeds"] == [43, 44]
    assert out["points"]["l48"]["below_threshold"] == []  # seed 42 alone leaves "reads" open
    short = study.scaling({**fake, "l48": fake_part(1.6e14, {"42": 0.3, "43": 0.1}, False)})
    assert short["points"]["l48"]["below_threshold"] == ["43"]  # no seed 44 can make it read
    assert out["points"]["e0"]["missing_seeds"] == [] and out["points"]["e0"]["reads_cls"] is False
    assert out["trend"] is None
    fake["l48"] = fake_part(1.6e14, {"42": 0.3, "43": 0.25, "44": 0.21}, True)
    assert study.scaling(fake)["points"]["l48"]["reads_cls"] is True


def test_a_run_on_some_of_a_parts_seeds_is_refused_before_training(tmp_path, monkeypatch):
    """A part holding seeds 42 and 43: --seeds 43 alone would replace seed 43 and drop 42's
    record, so it is refused before any stage trains; new seeds only, or all of them, run."""
    from condenser_lite.utils.errors import ConfigError

    study = study_module()
    out = tmp_path / "mechanism.json"
    out.write_text(json.dumps({"study": "mechanism", "preset": "small", "l48": {"seeds": [42, 43]}}))

    def trained(*args, **kwargs):
        raise AssertionError("a stage was trained")
    monkeypatch.setattr("condenser_lite.reproduction.runs.jobs.run_jobs", trained)
    monkeypatch.setattr("sys.argv", ["mechanism_study.py", "--out", str(out), "--only", "l48", "--seeds", "43"])
    with pytest.raises(ConfigError, match=r"part l48 already holds seeds \[42, 43\].*--seeds 42,43\)"):
        study.main()
    for seeds in ("44", "42,43,44"):  # only new seeds join; all of them re-run the part
        monkeypatch.setattr("sys.argv", ["mechanism_study.py", "--out", str(out), "--only", "l48", "--seeds", seeds])
        with pytest.raises(AssertionError, match="a stage was trained"):
            study.main()


def test_the_dry_runs_wall_time_waits_for_stage_1_and_the_longest_stage():
    """One L48 seed on two workers: stage 1 alone, then the Condenser stage and its control side
    by side, so the wall time is stage 1 plus the longer of the two (measured 13 + 84 min), not
    the one-thread total halved."""
    wall = study_module().wall_seconds
    one_seed = [("l48", "stage 1", 1, 780.0), ("l48", "condenser", 1, 5040.0), ("l48", "bert_cont", 1, 2934.0)]
    assert wall(one_seed, 2) == pytest.approx(780 + 5040)
    assert wall(one_seed, 1) == pytest.approx(780 + 5040 + 2934)
    three = [("s1x4", "stage 1", 3, 3120.0), ("s1x4", "condenser", 3, 360.0), ("s1x4", "bert_cont", 3, 240.0)]
    assert wall(three, 2) == pytest.approx(2 * 3120 + 3 * 600 / 2)  # stage 1 in two rounds
    cached = [("e0", "stage 1", 0, 780.0), ("e0", "condenser", 0, 400.0), ("e0", "bert_cont", 0, 300.0)]
    assert wall(cached, 2) == 0.0 and wall(one_seed + three, 2) == pytest.approx(5820 + 6240 + 900)


def test_seeds_added_for_the_onset_rules_leave_the_scaling_summary_as_it_was():
    """L48 joined by seeds outside mechanism_rules.SCALING_SEEDS (the onset rules' 45-49, some without a
    control): every point, the trend and the comparisons stay those of SCALING_SEEDS."""
    study = json.loads((ROOT / "results" / "mechanism.json").read_text())
    m = study_module()
    before = m.scaling(study)
    grown = json.loads(json.dumps(study))
    extra = {k: v for k, v in grown["l48"]["per_seed"]["44"].items() if k != "bert_cont"}
    extra["condenser"] = {**extra["condenser"], "final": {**extra["condenser"]["final"], "reliance_own_loss": 0.0}}
    grown["l48"]["per_seed"]["45"] = extra
    grown["l48"].update(m.judge(grown["l48"]["per_seed"]))
    assert grown["l48"]["c0_seeds"] == [42, 43, 44]  # C0 pairs each Condenser with its control
    assert m.scaling(grown) == before
    broken = json.loads(json.dumps(grown))
    broken["l48"]["per_seed"]["44"]["condenser"]["final"]["reliance_own_loss"] -= 1.0  # a seed inside the scope
    assert m.scaling(broken) != before
