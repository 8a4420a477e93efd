"""The rules that turn numbers into verdicts (condenser_lite/reproduction/statistics/rules.py): the spread
comparison and claim status, the pre-registered [CLS]-reliance rule of C0 and the power of a
comparison, on made-up numbers; and every pre-registered value (here and in mechanism_rules.py)
against the commit that registered it."""

import ast
import subprocess

import pytest
from locations import ROOT

from condenser_lite.reproduction.statistics import rules
from condenser_lite.studies import mechanism_rules
from condenser_lite.studies.mechanism_rules import MODIFIED_RULE_COMMIT, SCALING_RULE_COMMIT
from condenser_lite.reproduction.statistics.rules import (
    NOT_DETECTABLE,
    ONE_SEED,
    PRE_REGISTRATION_COMMIT,
    RULES_V2_COMMIT,
    c0_rule,
    claim_status,
    compare,
    head_relies,
    minimum_detectable_difference,
    power_verdict,
    reliance_summary,
    stats,
)


def test_compare_and_status_rules():
    a, b = stats([0.5, 0.52, 0.54]), stats([0.40, 0.41, 0.42])
    assert compare(a, b)["verdict"] == "better" and compare(b, a)["verdict"] == "worse"
    c = stats([0.35, 0.45, 0.55])  # wide spread: no verdict
    assert compare(c, b)["verdict"] == "within spread"
    assert compare(None, b) is None
    assert claim_status([True, True]) == "reproduced"
    assert claim_status([True, False]) == "partly reproduced"
    assert claim_status([False, None]) == "not reproduced at this scale"
    assert claim_status([None]) == "not measured"
    assert claim_status([ONE_SEED, None]) == ONE_SEED and claim_status([ONE_SEED, True]) == "reproduced"


PRE_REGISTERED = {PRE_REGISTRATION_COMMIT: ("RELIANCE_THRESHOLD", "LATE_LOSS_MARGIN", "ALPHA", "POWER"),
                  MODIFIED_RULE_COMMIT: ("MODIFIED_FLOOR",),
                  RULES_V2_COMMIT: ("ALPHA_ONE_SIDED", "MODIFIED_CHOICE_SEEDS", "EQUAL_FLOPS_RATIO",
                                    "FLOPS_MATCH", "RULES_VERSION"),
                  SCALING_RULE_COMMIT: ("SCALING_SEEDS", "SCALING_CONFIDENCE", "RELIANCE_THRESHOLD")}


def committed_value(commit: str, name: str):
    """The value the package gave ``name`` (a top-level ``NAME = literal``) at ``commit``, wherever
    it was defined then (the module that holds it may have changed since); None without the
    history (an archive, a shallow clone)."""
    grep = subprocess.run(["git", "grep", "-h", "-E", f"^{name} = ", commit, "--", "condenser_lite"],
                          cwd=ROOT, capture_output=True, text=True)
    lines = grep.stdout.splitlines()
    if grep.returncode != 0 or len(lines) != 1:
        return None
    return ast.literal_eval(lines[0].split("=", 1)[1].split("#", 1)[0].strip())


@pytest.mark.parametrize("commit, name", [(c, n) for c, names in PRE_REGISTERED.items() for n in names],
                         ids=[f"{n}@{c[:7]}" for c, names in PRE_REGISTERED.items() for n in names])
def test_pre_registered_values_are_the_ones_committed_before_the_runs(commit, name):
    """Fixed before the runs they judge, never changed after seeing a number: each pre-registered
    value is the one in the commit that registered it."""
    committed = committed_value(commit, name)
    if committed is None:
        pytest.skip(f"needs the repository's history with commit {commit[:7]}")
    now = getattr(rules, name) if hasattr(rules, name) else getattr(mechanism_rules, name)
    assert now == committed, f"{name} differs from its value at the pre-registration {commit[:7]}"


def test_reliance_threshold_is_inclusive_and_holds_on_every_seed():
    assert head_relies([0.2, 0.2]) is True
    assert head_relies([0.2, 0.2 - 1e-9]) is False
    assert head_relies([0.9, 0.1]) is False  # one seed below the threshold fails
    assert head_relies([None]) is False and head_relies([]) is None  # undefined does not count as relying


def test_c0_rule_reliance_late_loss_and_cosine_parts():
    ok = c0_rule([0.3, 0.25], [4.00, 4.10], [4.02, 4.07], cosine=[0.6, 0.7], control_cosine=[0.8, 0.8])
    assert ok["relies"] is True and ok["cosine_lower"] is True and ok["status"] == "reproduced"
    # exactly at the threshold on one seed: still reproduced (>=)
    assert c0_rule([0.2, 0.3], [4.0, 4.0], [4.0, 4.0])["relies"] is True
    # one pre-training seed below the threshold fails C0's reliance part
    one_low = c0_rule([0.3, 0.19], [4.0, 4.0], [4.0, 4.0], cosine=[0.6, 0.6], control_cosine=[0.8, 0.8])
    assert one_low["relies"] is False and one_low["status"] == "partly reproduced"
    # reliance bought with a worse backbone (late loss 0.06 above the equal-step control) fails
    worse = c0_rule([0.5], [4.06], [4.0])
    assert worse["relies"] is False and worse["late_loss_matched"] == [False]
    assert c0_rule([0.5], [4.04], [4.0])["late_loss_matched"] == [True]
    assert c0_rule([0.5], [3.94], [4.0])["late_loss_matched"] == [False]  # "within", either way
    # the cosine half is paired by seed, against BERT-continued: lower on every seed
    cos = c0_rule([0.5, 0.5], [4.0, 4.0], [4.0, 4.0], cosine=[0.6, 0.9], control_cosine=[0.8, 0.8])
    assert cos["cosine_lower"] is False and cos["status"] == "partly reproduced"
    none = c0_rule([0.0, None], [4.0, 4.0], [4.0, 4.0], cosine=[0.9, 0.9], control_cosine=[0.8, 0.8])
    assert none["relies"] is False and none["status"] == "not reproduced at this scale"
    assert c0_rule([], [], [])["status"] == "not measured"
    with pytest.raises(ValueError, match="one value per pre-training seed"):
        c0_rule([0.3], [4.0, 4.0], [4.0, 4.0])


def test_reliance_summary_noise_covers_seeds():
    one = reliance_summary([{"reliance": 0.3, "noise": 0.02}])
    assert one["mean"] == 0.3 and one["noise"] == pytest.approx(0.02) and "one pre-training seed" in one["noise_covers"]
    two = reliance_summary([{"reliance": 0.2, "noise": 0.01}, {"reliance": 0.4, "noise": 0.01}])
    assert two["mean"] == pytest.approx(0.3) and two["noise"] == pytest.approx(0.1)  # std 0.1414 / sqrt 2
    agree = reliance_summary([{"reliance": 0.3, "noise": 0.04}, {"reliance": 0.3, "noise": 0.04}])
    assert agree["noise"] == pytest.approx(0.04 / 2 ** 0.5)  # the within-seed floor
    assert reliance_summary([{"reliance": None, "noise": None}])["mean"] is None


def test_minimum_detectable_difference_matches_welch():
    from scipy.stats import t

    # equal spreads and sizes: df = 2(n-1), se = s sqrt(2/n)
    s, n = 0.01, 3
    want = (t.ppf(0.975, 4) + t.ppf(0.8, 4)) * s * (2 / n) ** 0.5
    assert minimum_detectable_difference(s, n, s, n) == pytest.approx(want)
    # more runs, smaller spread: detects less; a higher power needs more
    assert minimum_detectable_difference(s, 9, s, 9) < minimum_detectable_difference(s, 3, s, 3)
    assert minimum_detectable_difference(s, 3, s, 3, power=0.9) > minimum_detectable_difference(s, 3, s, 3)
    # unequal spreads: Welch-Satterthwaite degrees of freedom
    va, vb = 0.02 ** 2 / 3, 0.01 ** 2 / 6
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 5)
    assert minimum_detectable_difference(0.02, 3, 0.01, 6) == pytest.approx(
        (t.ppf(0.975, df) + t.ppf(0.8, df)) * (va + vb) ** 0.5)
    assert minimum_detectable_difference(s, 1, s, 3) is None
    assert minimum_detectable_difference(0.0, 3, 0.0, 3) == 0.0


def test_power_verdict_every_branch():
    b = stats([0.50, 0.51, 0.52])  # std 0.01
    better = power_verdict(stats([0.60, 0.61, 0.62]), b, gain=0.1)
    assert better["verdict"] == "reproduced" and better["mdd"] > 0 and better["expected"] == pytest.approx(0.051)
    assert power_verdict(stats([0.40, 0.41, 0.42]), b, gain=0.1)["verdict"] == "reversed"
    # within the spread: a 10% effect (0.051) is above the mdd (~0.035): absent, so not reproduced
    same = stats([0.505, 0.515, 0.525])
    absent = power_verdict(same, b, gain=0.1)
    assert absent["verdict"] == "not reproduced" and absent["expected"] >= absent["mdd"]
    # a 1% effect (0.0051) is below the mdd: the run could not have told
    small = power_verdict(same, b, gain=0.01)
    assert small["verdict"] == NOT_DETECTABLE and small["expected"] < small["mdd"]
    assert power_verdict(same, b, gain=None)["verdict"] == NOT_DETECTABLE
    # a reversal beyond the spread is called even where the expected effect is undetectable
    assert power_verdict(stats([0.40, 0.41, 0.42]), b, gain=0.001)["verdict"] == "reversed"
    one = power_verdict(stats([0.9]), b, gain=0.1)
    assert one["verdict"] == ONE_SEED and one["mdd"] is None
    assert power_verdict(None, b, gain=0.1) is None
    assert {"a", "b", "diff", "spread", "mdd", "expected"} <= set(better)
