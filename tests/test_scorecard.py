"""The scorecard's rules on made-up results: each rule shown holding and failing."""

import pytest

from condenser_lite.reproduction.rules import CLS_GAP_MARGIN, NOT_ATTRIBUTABLE, NOT_ATTRIBUTABLE_UNGAUGED, ONE_SEED, compare, stats
from condenser_lite.reproduction.scorecard import scorecard

FULL = "809"


def m(*values):
    return {"nDCG@10": stats(values), "R@100": stats(values)}


def made_up(gap=0.05, noise=0.01, cos_condenser=0.6, cos_bert=0.9, co=(0.40, 0.41, 0.42), co_mlm=(0.30, 0.31, 0.32),
            co_contrastive=(0.30, 0.31, 0.32), condenser=(0.30, 0.31, 0.32), co_round2=None, condenser_round2=None,
            co_gap=None):
    """Results with the gauges and the retrieval numbers the rules read (full training set only);
    coCondenser's own swap gap is ``co_gap`` (default: the Condenser's ``gap``)."""
    retrieval = {
        "condenser": {"round1": {FULL: m(*condenser)}},
        "cocondenser": {"round1": {FULL: m(*co)}},
        "co_mlm_only": {"round1": {FULL: m(*co_mlm)}},
        "co_contrastive_only": {"round1": {FULL: m(*co_contrastive)}},
    }
    if co_round2:
        retrieval["cocondenser"]["round2"] = {FULL: m(*co_round2)}
    if condenser_round2:
        retrieval["condenser"]["round2"] = {FULL: m(*condenser_round2)}
    return {
        "preset": {"metrics": ["nDCG@10", "R@100"]}, "train_sizes": [int(FULL)], "retrieval": retrieval,
        "arms": {"condenser": {"heldout": {"cls_swap_gap": gap, "cls_swap_noise": noise, "cls_cosine": cos_condenser}},
                 "cocondenser": {"heldout": {"cls_swap_gap": gap if co_gap is None else co_gap, "cls_swap_noise": noise}},
                 "bert": {"heldout": {"cls_cosine": cos_bert}}},
    }


def claims(results):
    return {c["id"]: c for c in scorecard(results)}


def test_c0_holds_only_with_a_clear_gap_and_distinct_cls():
    assert claims(made_up())["C0"]["status"] == "reproduced"
    # a gap within CLS_GAP_MARGIN x noise: the head may as well ignore [CLS]
    weak = claims(made_up(gap=CLS_GAP_MARGIN * 0.01 - 1e-4, noise=0.01))["C0"]
    assert weak["status"] == "partly reproduced" and weak["ours"]["gap_clear"] is False
    assert claims(made_up(gap=0.0, noise=0.0, cos_condenser=0.98, cos_bert=0.97))["C0"]["status"] == \
        "not reproduced at this scale"
    # with a second pre-training seed, every run must show the gap
    two = made_up()
    two["arms"]["condenser"]["other_pretraining_seeds"] = [{"heldout": {"cls_swap_gap": 0.001, "cls_swap_noise": 0.01,
                                                                        "cls_cosine": 0.6}}]
    assert claims(two)["C0"]["ours"]["gap_clear"] is False


def test_c3_gate_reads_cocondensers_own_head():
    """Old rules (no reliance gauges): the gate is coCondenser's own swap gap, not the Condenser arm's."""
    assert claims(made_up())["C3"]["status"] == "reproduced"
    ignored = claims(made_up(co_gap=0.0))
    assert ignored["C3"]["status"] == NOT_ATTRIBUTABLE and "coCondenser's own head" in ignored["C3"]["comparison"]
    # the Condenser's head ignoring [CLS] does not decide C3; coCondenser's relying does
    assert claims(made_up(gap=0.0, co_gap=0.05))["C3"]["status"] == "reproduced"
    assert claims(made_up(cos_condenser=0.95))["C3"]["status"] == "reproduced"  # C0's cosine half: no gate
    ungauged = made_up()
    del ungauged["arms"]["cocondenser"]
    assert claims(ungauged)["C3"]["status"] == NOT_ATTRIBUTABLE_UNGAUGED
    # the contrastive term alone does not rest on the head: no gate
    only_contrastive = claims(made_up(co_gap=0.0, co_contrastive=(0.40, 0.41, 0.42)))
    assert only_contrastive["C3"]["status"] == "partly reproduced"


def test_c2_separates_the_contrastive_gain_from_target_corpus_exposure():
    assert claims(made_up())["C2"]["status"] == "reproduced"
    # coCondenser beats Condenser, but so would Condenser's MLM continued on the target corpus
    exposure = claims(made_up(co_mlm=(0.40, 0.41, 0.42)))["C2"]
    assert exposure["status"] == "partly reproduced"
    assert exposure["ours"]["vs_target_corpus_mlm"]["R@100"]["verdict"] == "within spread"
    assert "target corpus" in exposure["statement"] and "target corpus" in exposure["comparison"]


def test_c4_says_which_arm_collapsed():
    fine = claims(made_up(co_round2=(0.50, 0.51, 0.52), condenser_round2=(0.40, 0.41, 0.42)))["C4"]
    assert fine["status"] == "reproduced" and "collapsed" not in fine["comparison"]
    collapsed = claims(made_up(co_round2=(0.20, 0.21, 0.22), condenser_round2=(0.40, 0.41, 0.42)))["C4"]
    assert collapsed["ours"]["collapsed"] == ["cocondenser"]
    assert "collapsed" in collapsed["comparison"] and collapsed["comparison"].endswith("coCondenser.")
    assert collapsed["status"] == "partly reproduced"


def test_one_seed_calls_no_difference():
    one, other = stats([0.5]), stats([0.1])
    assert compare(one, other)["verdict"] == ONE_SEED
    assert compare(stats([0.5, 0.5]), stats([0.1, 0.1]))["verdict"] == "better"
    single = claims(made_up(co=(0.9,), condenser=(0.1,), co_mlm=(0.1,), co_contrastive=(0.1,)))
    for cid in ("C2", "C3"):
        assert single[cid]["status"] == ONE_SEED, cid
        assert "better" not in single[cid]["comparison"] and "worse" not in single[cid]["comparison"]


@pytest.mark.parametrize("cid", ["C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7"])
def test_every_claim_has_plain_words(cid):
    c = claims(made_up())[cid]
    assert c["verdict"] == c["status"] and c["paper"].endswith(".") and c["comparison"].endswith(".")
    assert all("_" not in a for a in c["arms"])


# ---- the pre-registered rules (issue 17) -------------------------------------------------------------

from condenser_lite.modeling.gauges import cls_reliance
from condenser_lite.reproduction.rules import LATE_LOSS_MARGIN, NOT_DETECTABLE, RELIANCE_THRESHOLD, c0_rule, head_relies, minimum_detectable_difference, power_verdict, reliance_summary
from condenser_lite.reproduction.scorecard import expected_gain, paper_gain


def test_pre_registered_constants():
    assert (RELIANCE_THRESHOLD, LATE_LOSS_MARGIN) == (0.2, 0.05)


def test_cls_reliance_is_the_share_of_the_deficit_its_own_cls_closes():
    # head without its [CLS] 5.0, with it 4.5, backbone 2.5: closes 0.5 of a 2.5 deficit
    assert cls_reliance(l_own=4.5, l_ablated=5.0, l_late=2.5) == 0.2
    assert cls_reliance(l_own=2.5, l_ablated=5.0, l_late=2.5) == 1.0  # all the late information
    assert cls_reliance(l_own=5.0, l_ablated=5.0, l_late=2.5) == 0.0  # ignores [CLS]
    assert cls_reliance(l_own=5.5, l_ablated=5.0, l_late=2.5) == -0.2  # its own [CLS] hurts
    # no deficit to close: undefined, and an undefined reliance does not count as relying
    assert cls_reliance(l_own=2.0, l_ablated=2.5, l_late=2.5) is None
    assert cls_reliance(l_own=2.0, l_ablated=2.4, l_late=2.5) is None
    assert head_relies([None]) is False and head_relies([]) is None


def test_reliance_threshold_is_inclusive_and_holds_on_every_seed():
    assert head_relies([0.2, 0.2]) is True
    assert head_relies([0.2, 0.2 - 1e-9]) is False
    assert head_relies([0.9, 0.1]) is False  # one seed below the threshold fails


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


def test_paper_gains_are_read_from_the_papers_tables():
    assert paper_gain("Condenser table 5", "full") == pytest.approx(0.338 / 0.309 - 1)
    assert paper_gain("Condenser table 1", "500") == pytest.approx(76.6 / 68.6 - 1)
    # C1: our smallest size reads the paper's lowest-data column, our largest "full"
    assert expected_gain("C1", "100", ["100", "809"]) == pytest.approx(0.192 / 0.156 - 1)
    assert expected_gain("C1", "809", ["100", "809"]) == pytest.approx(0.338 / 0.309 - 1)
    assert expected_gain("C1", "300", ["100", "300", "700", "809"]) is None
    # C7: as many sizes as columns, by position
    assert expected_gain("C7", "1000", ["500", "1000", "5749"]) == pytest.approx(77.8 / 71.4 - 1)


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


# ---- the scorecard under the pre-registered rules (and the fallback for older files) -------------------

from condenser_lite.reproduction.rules import OLD_RULES, PRE_REGISTERED_RULES, head_arms, pre_registered  # noqa: E402


def reliance_gauges(r, late=4.0, cosine=0.6):
    """A run's final gauges with reliance ``r``: late 2.0, ablated 3.0, own 3.0 - r (zero and mean
    [CLS] as bad as another document's); ``r=None``: ablated 2.0 = late, undefined."""
    ablated = 2.0 if r is None else 3.0
    return {"mlm_loss": late, "cls_cosine": cosine, "cls_swap_gap": 0.01, "cls_swap_noise": 0.001,
            "reliance_own_loss": 3.0 - (r or 0.0), "reliance_ablated_loss": ablated, "reliance_zero_loss": ablated,
            "reliance_mean_loss": ablated, "reliance_late_loss": 2.0, "cls_reliance_noise": 0.01}


def registered(condenser=(0.3, 0.25), cocondenser=(0.3, 0.3), late=(4.0, 4.0), control=(4.02, 4.02),
               cos=(0.6, 0.6), cos_control=(0.8, 0.8), **kw):
    """``made_up`` results whose arms logged the reliance gauges, one entry per pre-training seed."""
    results = made_up(**kw)

    def arm(runs):
        return {**runs[0], "other_pretraining_seeds": runs[1:]}

    results["arms"]["condenser"] = arm([{"heldout": reliance_gauges(r, x, c)} for r, x, c in zip(condenser, late, cos)])
    results["arms"]["cocondenser"] = arm([{"heldout": reliance_gauges(r)} for r in cocondenser])
    results["arms"]["bert_cont"] = arm([{"heldout": {"mlm_loss": x, "cls_cosine": c}} for x, c in zip(control, cos_control)])
    results["pretraining_seeds"] = [42, 43][:len(condenser)]
    return results


def test_c0_by_the_pre_registered_rule():
    ok = claims(registered())["C0"]
    assert ok["status"] == "reproduced" and ok["ours"]["rules"] == PRE_REGISTERED_RULES
    assert ok["ours"]["reliance"] == pytest.approx([0.3, 0.25]) and ok["arms"] == ["Condenser", "BERT, continued"]
    assert "BERT, continued" in ok["comparison"] and ok["ours"]["cls_cosine"]["bert_cont"] == [0.8, 0.8]
    one_low = claims(registered(condenser=(0.3, 0.19)))["C0"]
    assert one_low["ours"]["relies"] is False and one_low["status"] == "partly reproduced"
    worse_backbone = claims(registered(late=(4.0, 4.08)))["C0"]
    assert worse_backbone["ours"]["late_loss_matched"] == [True, False] and worse_backbone["ours"]["relies"] is False
    undefined = claims(registered(condenser=(0.3, None)))["C0"]
    assert undefined["ours"]["relies"] is False and "undefined" in undefined["comparison"]
    # the cosine half against BERT-continued (stage-1 BERT's cosine 0.9 plays no part)
    assert claims(registered(cos_control=(0.55, 0.55)))["C0"]["ours"]["cosine_lower"] is False
    assert head_arms(registered()) == ["condenser", "cocondenser"]


def test_an_older_results_file_falls_back_to_the_old_rules_labelled():
    old = claims(made_up())
    assert not pre_registered(made_up()) and old["C0"]["ours"]["rules"] == OLD_RULES
    assert "swap gap" in old["C0"]["statement"] and old["C0"]["status"] == "reproduced"
    assert old["C7"]["ours"]["rules"] == OLD_RULES


def test_c3_gate_under_the_pre_registered_rules():
    assert claims(registered())["C3"]["status"] == "reproduced"
    # the Condenser's head relies, coCondenser's does not: the MLM term's gain is not the head's
    assert claims(registered(cocondenser=(0.3, 0.1)))["C3"]["status"] == NOT_ATTRIBUTABLE
    assert claims(registered(condenser=(0.0, 0.0)))["C3"]["status"] == "reproduced"


def test_c1_and_c7_carry_their_power():
    def with_arms(results, condenser_small, bert_small, condenser_full=None, bert_full=None):
        results["train_sizes"] = [100, int(FULL)]
        ret = results["retrieval"]
        ret["condenser"]["round1"]["100"] = m(*condenser_small)
        ret["condenser"]["round1"][FULL] = m(*(condenser_full or condenser_small))
        for arm in ("bert", "bert_cont"):
            ret[arm] = {"round1": {"100": m(*bert_small), FULL: m(*(bert_full or bert_small))}}
        results["sts_sizes"] = [500, 1000, 5749]
        results["sts"] = {a: {"500": stats(v), "1000": stats(v)} for a, v in
                          (("condenser", condenser_small), ("bert", bert_small), ("bert_cont", bert_small))}
        return results

    noisy = claims(with_arms(registered(), (0.10, 0.20, 0.30), (0.12, 0.22, 0.32)))
    c1 = noisy["C1"]
    record = c1["ours"]["by_size"]["100"]["bert"]
    assert record["verdict"] == NOT_DETECTABLE and record["mdd"] > record["expected"] > 0
    assert record["expected"] == pytest.approx(0.22 * (0.192 / 0.156 - 1), abs=1e-4)
    assert c1["status"] == NOT_DETECTABLE and "detectable" in c1["comparison"]
    assert noisy["C7"]["status"] == NOT_DETECTABLE
    tight = claims(with_arms(registered(), (0.300, 0.301, 0.302), (0.300, 0.301, 0.302)))
    assert tight["C1"]["status"] == "not reproduced" and tight["C7"]["status"] == "not reproduced"
    worse = claims(with_arms(registered(), (0.20, 0.201, 0.202), (0.30, 0.301, 0.302)))
    assert worse["C1"]["status"] == "reversed" and worse["C7"]["status"] == "reversed"
    better = claims(with_arms(registered(), (0.40, 0.401, 0.402), (0.30, 0.301, 0.302),
                              condenser_full=(0.35, 0.351, 0.352)))
    assert better["C1"]["status"] == "reproduced" and better["C1"]["ours"]["narrowing"] is True
    # an older file keeps the spread-only verdicts
    old = claims(with_arms(made_up(), (0.20, 0.201, 0.202), (0.30, 0.301, 0.302)))["C1"]
    assert old["ours"]["by_size"]["100"]["bert"]["verdict"] == "worse" and "mdd" not in old["ours"]["by_size"]["100"]["bert"]


# ---- the modified Condenser: the choice among the deviations, pre-registered -----------------------

from condenser_lite.reproduction.rules import MODIFIED_FLOOR, choose_modified  # noqa: E402


def _part(reliances, late=(4.40, 4.40), control=(4.40, 4.40)):
    return c0_rule(list(reliances), list(late), list(control))


def test_choose_modified_takes_the_best_candidate_that_meets_c0():
    parts = {"e3": _part([0.25, 0.30]), "e4": _part([0.21, 0.90]), "e5": _part([0.5, 0.15]),
             "e1": _part([0.9, 0.9])}  # E1 is no candidate: the faithful head, longer
    choice = choose_modified(parts)
    assert choice["part"] == "e3" and choice["meets_c0"] and choice["rule"] == 2  # largest smallest-seed reliance
    assert choice["smallest_reliance"] == 0.25


def test_choose_modified_falls_back_only_above_the_floor_with_the_late_loss_matched():
    below = {"e3": _part([0.05, 0.4]), "e4": _part([0.15, 0.5]), "e5": _part([0.3, 0.3], late=(4.5, 4.4))}
    choice = choose_modified(below)
    assert choice["part"] == "e4" and choice["meets_c0"] is False and choice["rule"] == 3
    assert choose_modified({"e4": _part([MODIFIED_FLOOR, 0.5])})["part"] == "e4"  # the floor is inclusive
    nothing = choose_modified({"e3": _part([0.05, 0.4]), "e5": _part([0.3, 0.3], late=(4.5, 4.4)),
                               "e4": _part([None, 0.5])})
    assert nothing["part"] is None and nothing["rule"] == 4
