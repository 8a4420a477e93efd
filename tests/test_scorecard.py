"""The scorecard's rules on made-up results: each rule shown holding and failing."""

import pytest

from condenser_lite.scorecard import (
    CLS_GAP_MARGIN,
    NOT_ATTRIBUTABLE,
    NOT_ATTRIBUTABLE_C0,
    ONE_SEED,
    compare,
    scorecard,
    stats,
)

FULL = "809"


def m(*values):
    return {"nDCG@10": stats(values), "R@100": stats(values)}


def made_up(gap=0.05, noise=0.01, cos_condenser=0.6, cos_bert=0.9, co=(0.40, 0.41, 0.42), co_mlm=(0.30, 0.31, 0.32),
            co_contrastive=(0.30, 0.31, 0.32), condenser=(0.30, 0.31, 0.32), co_round2=None, condenser_round2=None):
    """Results with the gauges and the retrieval numbers the rules read (full training set only)."""
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
        "budget": {"metrics": ["nDCG@10", "R@100"]}, "train_sizes": [int(FULL)], "retrieval": retrieval,
        "arms": {"condenser": {"heldout": {"cls_swap_gap": gap, "cls_swap_noise": noise, "cls_cosine": cos_condenser}},
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


def test_c3_reads_reproduced_only_where_c0_holds():
    assert claims(made_up())["C3"]["status"] == "reproduced"
    ignored = claims(made_up(gap=0.0, noise=0.0))
    assert ignored["C3"]["status"] == NOT_ATTRIBUTABLE and "C0 does not hold" in ignored["C3"]["comparison"]
    assert claims(made_up(cos_condenser=0.95))["C3"]["status"] == NOT_ATTRIBUTABLE_C0
    # the contrastive term alone does not rest on the head: no gate
    only_contrastive = claims(made_up(gap=0.0, noise=0.0, co_contrastive=(0.40, 0.41, 0.42)))
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
