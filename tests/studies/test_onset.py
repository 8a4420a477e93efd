"""The onset rules (studies/onset.py): a seed's onset, switch and plateau on made-up curves,
the estimates against scipy and brute force, the reading's words at each outcome, and the rules on
the committed L48 curves (a regression check of seeds 42-44)."""

import json

import numpy as np
import pytest
from locations import ROOT
from scipy import stats as scipy_stats

from condenser_lite.studies import onset as o

pytestmark = pytest.mark.unit


def curve(values, noise=0.01, every=500):
    return [{"step": every * (i + 1), "cls_reliance": r, "cls_reliance_noise": noise} for i, r in enumerate(values)]


def test_the_onset_is_where_the_curve_stays_above_twice_its_noise():
    assert o.onset(curve([0.0, 0.05, 0.0, 0.03, 0.05, 0.06])) == 2000  # the first crossing falls back
    assert o.onset(curve([0.0, 0.05, 0.05, 0.05, 0.05, 0.0])) is None  # ends below: never stays
    assert o.onset(curve([0.0, 0.02, 0.02])) is None  # twice the noise is not above it
    assert o.onset(curve([None, 0.05])) == 1000  # an undefined reliance is not above noise


def test_a_switch_needs_a_stay_of_min_stay_evaluations():
    blip = [0.0] * 10 + [0.05] * (o.MIN_STAY - 1)
    assert o.onset(curve(blip)) is not None and not o.switched_on(curve(blip))
    assert o.switched_on(curve([0.0] * 10 + [0.05] * o.MIN_STAY))


def test_the_plateau_is_the_last_quarters_mean():
    c = curve([0.0] * 6 + [0.1, 0.3])  # 8 evaluations, 4,000 updates: the last quarter is after 3,000
    assert o.plateau(c, 4000) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="no evaluation after"):
        o.plateau(curve([0.1]), 4000)


def test_the_estimates_match_scipy_and_brute_force():
    per_seed = {"1": {"onset": 1000, "switched_on": True, "plateau": 0.2},
                "2": {"onset": 3000, "switched_on": True, "plateau": 0.25},
                "3": {"onset": 2000, "switched_on": True, "plateau": 0.15},
                "4": {"onset": None, "switched_on": False, "plateau": 0.01}}
    e = o.estimates(per_seed, end=4000)
    assert (e["n"], e["switched_on"], e["fraction"]) == (4, 3, 0.75)
    # Clopper-Pearson by its definition: the beta quantiles
    assert e["fraction_interval"] == [pytest.approx(scipy_stats.beta.ppf(0.025, 3, 2)),
                                      pytest.approx(scipy_stats.beta.ppf(0.975, 4, 1))]
    assert e["onset_median"] == 2000 and e["onset_range"] == [1000, 3000]
    # no censoring before the end: Kaplan-Meier is the share switched by each onset
    assert [(p["step"], round(p["switched"], 6)) for p in e["kaplan_meier"][:4]] == \
        [(0, 0.0), (1000, 0.25), (2000, 0.5), (3000, 0.75)]
    assert e["half_by"] == 2000
    x = np.array([0.2, 0.25, 0.15])
    half = scipy_stats.t.ppf(0.975, 2) * x.std(ddof=1) / np.sqrt(3)
    assert e["plateau_interval"] == [pytest.approx(x.mean() - half), pytest.approx(x.mean() + half)]


@pytest.mark.parametrize("k, n, words", [(8, 8, "Most pre-trained"), (0, 8, "A minority"),
                                         (5, 8, "cannot tell most from a minority")])
def test_the_reading_says_only_what_the_fraction_interval_allows(k, n, words):
    per_seed = {str(i): {"onset": 1000 if i < k else None, "switched_on": i < k, "plateau": 0.2 + 0.01 * i}
                for i in range(n)}
    assert words in o.reading(o.estimates(per_seed, 4000))["fraction"]


NEAR = "average near C0's threshold of 0.2; these seeds cannot tell on which side"


@pytest.mark.parametrize("plateaus, words", [((0.1, 0.11, 0.12), "below"), ((0.3, 0.31, 0.32), "above"),
                                             ((0.15, 0.2, 0.25), NEAR)])
def test_the_reading_places_the_plateau_only_where_its_interval_does(plateaus, words):
    per_seed = {str(i): {"onset": 1000, "switched_on": True, "plateau": p} for i, p in enumerate(plateaus)}
    assert words in o.reading(o.estimates(per_seed, 4000))["plateau"]


def test_the_committed_l48_seeds_regression_check():
    """Regression check: seeds 42-44's onsets as the rules read the committed curves."""
    study = json.loads((ROOT / "results" / "mechanism.json").read_text())
    summary = o.study_onset(study["l48"])
    got = {s: summary["per_seed"][s] for s in ("42", "43", "44")}
    assert {s: v["onset"] for s, v in got.items()} == {"42": 8000, "43": 14000, "44": None}
    assert [round(got[s]["plateau"], 2) for s in ("42", "43", "44")] == [0.21, 0.21, 0.02]
    if summary["missing_seeds"]:
        assert summary["reading"] is None  # no words before every registered seed has run
