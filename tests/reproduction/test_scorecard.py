"""The scorecard (condenser_lite/reproduction/scorecard.py) on made-up results: each claim's verdict
shown holding and failing, under the old rules and the pre-registered ones, and the papers' numbers
it compares against. The rule functions themselves are test_rules.py's."""

import pytest

from condenser_lite.reproduction.rules import (
    CLS_GAP_MARGIN,
    NOT_ATTRIBUTABLE,
    NOT_ATTRIBUTABLE_UNGAUGED,
    NOT_DETECTABLE,
    OLD_RULES,
    ONE_SEED,
    PRE_REGISTERED_RULES,
    STATUSES,
    compare,
    head_arms,
    pre_registered,
    stats,
)
from condenser_lite.reproduction.scorecard import expected_gain, paper_gain, scorecard

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
    assert {c["status"], c["verdict"]} <= set(STATUSES), c["status"]  # one the scorecard page knows how to show
    assert c["paper"].endswith(".") and c["comparison"].endswith(".")
    assert all("_" not in a for a in c["arms"])


# ---- the papers' numbers ------------------------------------------------------------------------------


def test_paper_gains_are_read_from_the_papers_tables():
    assert paper_gain("Condenser table 5", "full") == pytest.approx(0.338 / 0.309 - 1)
    assert paper_gain("Condenser table 1", "500") == pytest.approx(76.6 / 68.6 - 1)
    # C1: our smallest size reads the paper's lowest-data column, our largest "full"
    assert expected_gain("C1", "100", ["100", "809"]) == pytest.approx(0.192 / 0.156 - 1)
    assert expected_gain("C1", "809", ["100", "809"]) == pytest.approx(0.338 / 0.309 - 1)
    assert expected_gain("C1", "300", ["100", "300", "700", "809"]) is None
    # C7: as many sizes as columns, by position
    assert expected_gain("C7", "1000", ["500", "1000", "5749"]) == pytest.approx(77.8 / 71.4 - 1)


# ---- the scorecard under the pre-registered rules (and the fallback for older files) -------------------

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
    assert ok["ours"]["reliance"] == pytest.approx([0.3, 0.25]) and ok["arms"] == ["Condenser", "BERT-continued"]
    assert "BERT-continued" in ok["comparison"] and ok["ours"]["cls_cosine"]["bert_cont"] == [0.8, 0.8]
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


# ---- from a hand-made results dict (the protocol's own shape) -------------------------------------------


def test_scorecard_on_made_up_numbers():
    """A hand-made results dict where Condenser clearly wins at the small size only."""

    def m(*vals):
        return {"nDCG@10": stats(vals), "R@100": stats(vals)}

    results = {
        "preset": {"metrics": ["nDCG@10", "R@100"]},
        "train_sizes": [100, 809],
        "retrieval": {
            "bert": {"round1": {"100": m(0.10, 0.11, 0.12), "809": m(0.30, 0.31, 0.32)}},
            "bert_cont": {"round1": {"100": m(0.12, 0.13, 0.14), "809": m(0.31, 0.32, 0.33)}},
            "condenser": {"round1": {"100": m(0.25, 0.26, 0.27), "809": m(0.32, 0.33, 0.34)}},
        },
    }
    claims = {c["id"]: c for c in scorecard(results)}
    assert claims["C1"]["status"] == "reproduced"
    assert claims["C1"]["ours"]["narrowing"] is True
    assert claims["C2"]["status"] == "not measured"  # no coCondenser arm in this dict
    assert claims["C0"]["status"] == "not measured"  # no pre-training gauges either


def _results_with(condenser: dict, bert: dict) -> dict:
    """A minimal results dict for C1: nDCG@10 per training size for three arms."""
    def arm(by_size):
        return {"round1": {s: {"nDCG@10": {"mean": m, "std": sd, "n": 3}} for s, (m, sd) in by_size.items()}}

    return {"preset": {"metrics": ["nDCG@10", "R@100"]}, "train_sizes": [100, 809],
            "retrieval": {"condenser": arm(condenser), "bert": arm(bert), "bert_cont": arm(bert)}}


def c1(results: dict) -> dict:
    return next(c for c in scorecard(results) if c["id"] == "C1")


def test_c1_narrowing_counts_only_when_condenser_is_ahead():
    # no difference beyond the spread at any size: a "narrowing" gap of noise is not a partial reproduction
    noise = _results_with({"100": (0.010, 0.002), "809": (0.028, 0.01)}, {"100": (0.008, 0.002), "809": (0.027, 0.01)})
    assert c1(noise)["status"] == "not reproduced at this scale"
    ahead = _results_with({"100": (0.30, 0.01), "809": (0.40, 0.01)}, {"100": (0.20, 0.01), "809": (0.35, 0.01)})
    assert c1(ahead)["status"] == "reproduced"  # ahead at 100, gap 0.10 -> 0.05
    widening = _results_with({"100": (0.30, 0.01), "809": (0.50, 0.01)}, {"100": (0.20, 0.01), "809": (0.35, 0.01)})
    assert c1(widening)["status"] == "partly reproduced"


# ---- the modified Condenser and the claims asked of it; nb-recall (C8); the claims as a table -----------------

def with_modified(results, mod_reliance=(0.6, 0.5), mod_small=(0.40, 0.401, 0.402), bert_small=(0.30, 0.301, 0.302)):
    """``registered`` results with a modified Condenser arm: its gauges, retrieval at two sizes and
    STS-b, beside BERT's and BERT-continued's."""
    results["arms"]["condenser_mod"] = {"heldout": reliance_gauges(mod_reliance[0]), "other_pretraining_seeds":
                                        [{"heldout": reliance_gauges(r)} for r in mod_reliance[1:]]}
    results["train_sizes"] = [100, int(FULL)]
    ret = results["retrieval"]
    mod_full = tuple(x - 0.05 for x in mod_small)  # ahead at both sizes, less with more data
    for arm, small, full in (("condenser", bert_small, bert_small), ("condenser_mod", mod_small, mod_full),
                             ("bert", bert_small, bert_small), ("bert_cont", bert_small, bert_small)):
        ret.setdefault(arm, {"round1": {}})["round1"].update({"100": m(*small), FULL: m(*full)})
    results["sts_sizes"] = [500, 1000, 5749]
    results["sts"] = {a: {"500": stats(v), "1000": stats(v)} for a, v in
                      (("condenser", bert_small), ("condenser_mod", mod_small), ("bert", bert_small),
                       ("bert_cont", bert_small))}
    return results


def test_the_modified_condenser_is_judged_by_the_same_rules():
    cl = claims(with_modified(registered()))
    ids = list(cl)
    assert ids.index("C0") < ids.index("C0m") < ids.index("C1") < ids.index("C1m") < ids.index("C2")
    assert ids.index("C7") < ids.index("C7m")
    assert cl["C0m"]["status"] == "reproduced" and cl["C0m"]["arms"][0] == "modified Condenser"
    assert cl["C1m"]["status"] == "reproduced" and cl["C1"]["status"] != "reproduced"  # its own numbers
    assert cl["C7m"]["status"] == "reproduced"
    assert claims(with_modified(registered(), mod_reliance=(0.6, 0.1)))["C0m"]["ours"]["relies"] is False
    assert not {"C0m", "C1m", "C7m"} & set(claims(registered()))  # only where the run has the arm


def test_c8_neighbourhood_recall_at_the_papers_n_and_every_depth():
    def nb(arm_values):
        return {arm: {f"n{n}@k{k}": stats(v) for n in (10, 50) for k in (10, 100)} for arm, v in arm_values.items()}

    results = registered()
    results["nb_recall"] = nb({"bert": (0.2, 0.21, 0.22), "condenser": (0.3, 0.31, 0.32), "cocondenser": (0.5, 0.51, 0.52)})
    c8 = claims(results)["C8"]
    assert c8["status"] == "reproduced" and c8["ours"]["n"] == 50
    assert set(c8["ours"]["condenser_vs_bert"]) == {"n50@k10", "n50@k100"}
    results["nb_recall"]["condenser"] = {k: stats((0.2, 0.21, 0.22)) for k in results["nb_recall"]["bert"]}
    assert claims(results)["C8"]["status"] == "partly reproduced"  # coCondenser still above Condenser


def test_claim_rows_name_each_comparison():
    from condenser_lite.reproduction.plots import claim_table
    from condenser_lite.reproduction.scorecard import claim_rows

    results = with_modified(registered())
    cl = claims(results)
    rows = claim_rows(cl["C1m"])
    assert [(r["setting"], r["a"], r["b"]) for r in rows] == [
        ("100 training queries", "modified Condenser", "BERT"), ("100 training queries", "modified Condenser",
                                                                 "BERT-continued"),
        (f"{FULL} training queries", "modified Condenser", "BERT"),
        (f"{FULL} training queries", "modified Condenser", "BERT-continued")]
    assert rows[0]["ours (a vs b)"] == "0.401 vs 0.301" and rows[0]["verdict"] == "reproduced"
    assert "detectable" in rows[0] and "paper's effect here" in rows[0]
    table = claim_table({**results, "claims": list(cl.values())}, ["C2", "C1m"])
    assert list(table.index.get_level_values(0).unique()) == ["C2", "C1m"]
    assert (table.loc["C2"]["verdict"] == "better").all()
    assert not table.isna().any().any() and (table.loc["C2"]["detectable / paper's"] == "–").all()  # no NaN
    assert table.loc["C1m"]["compared"].iloc[0] == "modified Condenser 0.401 vs BERT 0.301"
    assert list(table.columns) == ["compared", "verdict", "difference (spread)", "detectable / paper's"]
    for bad in (["C1m", "C99"], "C1m"):  # an unknown id, or one id as a bare string: named, not dropped
        with pytest.raises(ValueError, match="not among the book's claims"):
            claim_table({**results, "claims": list(cl.values())}, bad)
