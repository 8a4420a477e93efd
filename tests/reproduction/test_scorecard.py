"""The scorecard (condenser_lite/reproduction/claims/scorecard.py, its checks in checks.py) on made-up
results whose heads logged the [CLS]-reliance gauges: each claim's verdict shown holding and
failing under the pre-registered rules, a file without those gauges or made under other rules
refused, the claims as one check per registered claim, and the papers' numbers it compares
against (papers.py). The rule functions themselves are test_rules.py's."""

import pytest

from condenser_lite.reproduction.evidence.papers import expected_gain, paper_gain
from condenser_lite.reproduction.configuration.registry import CLAIM
from condenser_lite.reproduction.evidence.results import head_arms, pretraining_runs
from condenser_lite.reproduction.statistics.rules import (
    NOT_ATTRIBUTABLE,
    NOT_ATTRIBUTABLE_UNGAUGED,
    NOT_DETECTABLE,
    ONE_SEED,
    PRE_REGISTERED_RULES,
    RULES_V2,
    STATUSES,
    compare,
    stats,
)
from condenser_lite.reproduction.claims.scorecard import CLAIM_CHECKS, scorecard
from condenser_lite.reproduction.statistics.wording import fixed
from condenser_lite.utils.errors import SchemaError

FULL = "809"


def m(*values):
    return {"nDCG@10": stats(values), "R@100": stats(values)}


def reliance_gauges(r, late=4.0, cosine=0.6):
    """A run's final gauges with reliance ``r``: late 2.0, ablated 3.0, own 3.0 - r (zero and mean
    [CLS] as bad as another document's); ``r=None``: ablated 2.0 = late, undefined."""
    ablated = 2.0 if r is None else 3.0
    return {"mlm_loss": late, "cls_cosine": cosine, "cls_swap_gap": 0.01, "cls_swap_noise": 0.001,
            "reliance_own_loss": 3.0 - (r or 0.0), "reliance_ablated_loss": ablated, "reliance_zero_loss": ablated,
            "reliance_mean_loss": ablated, "reliance_late_loss": 2.0, "cls_reliance_noise": 0.01}


def made_up(reliance=(0.3, 0.25), co_reliance=(0.3, 0.3), late=(4.0, 4.0), control=(4.02, 4.02), cos=(0.6, 0.6),
            cos_control=(0.8, 0.8), co=(0.40, 0.41, 0.42), co_mlm=(0.30, 0.31, 0.32), co_contrastive=(0.30, 0.31, 0.32),
            condenser=(0.30, 0.31, 0.32), co_round2=None, condenser_round2=None):
    """Results with the gauges and the retrieval numbers the rules read (full training set only):
    the Condenser's ``reliance`` and coCondenser's ``co_reliance``, its late MLM loss ``late``
    against BERT-continued's ``control`` and the cosines, one entry per pre-training seed; the
    retrieval numbers one per fine-tuning run."""
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

    def arm(runs):
        return {**runs[0], "other_pretraining_seeds": runs[1:]}

    return {
        "preset": {"metrics": ["nDCG@10", "R@100"]}, "train_sizes": [int(FULL)], "retrieval": retrieval,
        "pretraining_seeds": [42, 43][:len(reliance)],
        "arms": {"condenser": arm([{"heldout": reliance_gauges(r, x, c)} for r, x, c in zip(reliance, late, cos)]),
                 "cocondenser": arm([{"heldout": reliance_gauges(r)} for r in co_reliance]),
                 "bert_cont": arm([{"heldout": {"mlm_loss": x, "cls_cosine": c}} for x, c in zip(control, cos_control)]),
                 "bert": {"heldout": {"cls_cosine": 0.9}}},  # stage-1 BERT: no part in C0
    }


def claims(results):
    return {c["id"]: c for c in scorecard(results)}


def test_c0_by_the_pre_registered_rule():
    ok = claims(made_up())["C0"]
    assert ok["status"] == "reproduced" and ok["ours"]["rules"] == PRE_REGISTERED_RULES
    assert ok["ours"]["reliance"] == pytest.approx([0.3, 0.25]) and ok["arms"] == ["Condenser", "BERT-continued"]
    assert "BERT-continued" in ok["comparison"] and ok["ours"]["cls_cosine"]["bert_cont"] == [0.8, 0.8]
    one_low = claims(made_up(reliance=(0.3, 0.19)))["C0"]
    assert one_low["ours"]["relies"] is False and one_low["status"] == "partly reproduced"
    worse_backbone = claims(made_up(late=(4.0, 4.08)))["C0"]
    assert worse_backbone["ours"]["late_loss_matched"] == [True, False] and worse_backbone["ours"]["relies"] is False
    undefined = claims(made_up(reliance=(0.3, None)))["C0"]
    assert undefined["ours"]["relies"] is False and "undefined" in undefined["comparison"]
    # the cosine half against BERT-continued (stage-1 BERT's cosine 0.9 plays no part)
    assert claims(made_up(cos_control=(0.55, 0.55)))["C0"]["ours"]["cosine_lower"] is False
    assert head_arms(made_up()) == ["condenser", "cocondenser"]


def test_c3_gate_reads_cocondensers_own_head():
    assert claims(made_up())["C3"]["status"] == "reproduced"
    # the Condenser's head relies, coCondenser's does not (on one seed): the MLM term's gain is not the head's
    ignored = claims(made_up(co_reliance=(0.3, 0.1)))["C3"]
    assert ignored["status"] == NOT_ATTRIBUTABLE and "coCondenser's own head" in ignored["comparison"]
    assert ignored["ours"]["cocondenser_head_relies"] is False
    # not gated by C0: the Condenser's head ignoring [CLS], or C0's cosine half failing, decides nothing
    assert claims(made_up(reliance=(0.0, 0.0)))["C3"]["status"] == "reproduced"
    assert claims(made_up(cos=(0.95, 0.95)))["C3"]["status"] == "reproduced"
    # nor by C2 (Condenser as good as coCondenser) or C4 (coCondenser collapsing in round 2)
    no_c2 = claims(made_up(condenser=(0.40, 0.41, 0.42)))
    assert no_c2["C2"]["status"] == "partly reproduced" and no_c2["C3"]["status"] == "reproduced"
    no_c4 = claims(made_up(co_round2=(0.20, 0.21, 0.22), condenser_round2=(0.40, 0.41, 0.42)))
    assert no_c4["C4"]["status"] == "partly reproduced" and no_c4["C3"]["status"] == "reproduced"
    ungauged = made_up()
    del ungauged["arms"]["cocondenser"]
    assert claims(ungauged)["C3"]["status"] == NOT_ATTRIBUTABLE_UNGAUGED
    # the contrastive term alone does not rest on the head: no gate
    only_contrastive = claims(made_up(co_reliance=(0.0, 0.0), co_contrastive=(0.40, 0.41, 0.42)))
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


# ---- a results file the rules cannot judge; one the gauges cannot reach ---------------------------------


def without_reliance(results, arms=("condenser", "cocondenser")):
    """``results`` as a file made before the reliance gauge: its heads logged the swap gap only."""
    for arm in arms:
        for run in pretraining_runs(results, arm):
            run["heldout"] = {k: v for k, v in run["heldout"].items() if "reliance" not in k}
    return results


def test_a_results_file_without_the_reliance_gauges_is_refused_in_one_line():
    old = without_reliance(made_up())
    old["preset"]["name"] = "small"
    with pytest.raises(SchemaError, match=r"no \[CLS\]-reliance gauges for condenser, cocondenser") as refused:
        scorecard(old)
    message = str(refused.value)
    assert "\n" not in message and "`python -m condenser_lite experiments --preset small --force" in message
    # one head's runs are enough: coCondenser's own gauges are what C3's gate reads
    with pytest.raises(SchemaError, match=r"gauges for cocondenser,"):
        scorecard(without_reliance(made_up(), ["cocondenser"]))


def test_published_checkpoints_are_judged_without_c0():
    """A file of published checkpoints (the `colab` and `paper` presets): no run of ours, no gauges
    at all. Nothing to refuse: C0 is not measured and the other claims are judged by the same
    rules, C1 each training size with its power (here Condenser clearly wins at the small size only)."""
    results = {
        "preset": {"metrics": ["nDCG@10", "R@100"]},
        "train_sizes": [100, 809],
        "arms": {a: {"seed": None, "heldout": None} for a in ("bert", "bert_cont", "condenser")},
        "retrieval": {
            "bert": {"round1": {"100": m(0.10, 0.11, 0.12), "809": m(0.30, 0.31, 0.32)}},
            "bert_cont": {"round1": {"100": m(0.12, 0.13, 0.14), "809": m(0.31, 0.32, 0.33)}},
            "condenser": {"round1": {"100": m(0.25, 0.26, 0.27), "809": m(0.31, 0.32, 0.33)}},
        },
    }
    cl = claims(results)
    assert cl["C0"]["status"] == "not measured" and "published checkpoint" in cl["C0"]["comparison"]
    assert cl["C1"]["ours"]["by_size"]["100"]["bert"]["verdict"] == "reproduced"
    assert "mdd" in cl["C1"]["ours"]["by_size"]["809"]["bert"] and cl["C1"]["ours"]["narrowing"] is True
    assert cl["C1"]["status"] == "partly reproduced"
    assert cl["C2"]["status"] == "not measured"  # no coCondenser arm in this dict
    assert cl["C3"]["status"] == "not measured"


def test_a_results_file_made_under_other_rules_is_refused_in_one_line():
    """The file records the rules it was made under; a version other than this library's is
    refused, not judged by rules it was not made for. A file that records none (made by hand, as
    these) is judged by the library's rules."""
    from condenser_lite.reproduction.statistics.rules import RULES_VERSION

    other = made_up()
    other["preset"]["name"] = "small"
    other["provenance"] = {"rules": {"version": RULES_VERSION - 1}}
    with pytest.raises(SchemaError, match=rf"made under rules version {RULES_VERSION - 1}, this library judges by "
                                          rf"version {RULES_VERSION}: re-run it") as refused:
        scorecard(other)
    assert "\n" not in str(refused.value) and "--preset small --force" in str(refused.value)
    other["provenance"]["rules"]["version"] = RULES_VERSION
    assert claims(other) == claims(made_up())


# ---- the claims as data ---------------------------------------------------------------------------------------


def test_every_registered_claim_has_one_check_in_the_registrys_order():
    assert [c.id for c in CLAIM_CHECKS] == list(CLAIM)
    assert list(claims(with_modified(made_up()))) == list(CLAIM)  # every claim made, in the registry's order
    assert [c["id"] for c in scorecard(made_up())] == ["C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8"]


def test_fmt_and_fixed_format_numbers_alike():
    from condenser_book.tables import fmt

    assert fixed(-0.0001) == "0.000" and fixed(0.0124, signed=True) == "+0.012"
    assert fmt(stats([-0.0001, -0.0002])) == "0.000\u00a0±\u00a00.000"  # never "-0.000"
    assert fmt(stats([0.31, 0.33]), 2) == f"{fixed(0.32, 2)}\u00a0±\u00a0{fixed(0.0141, 2)}" == "0.32\u00a0±\u00a00.01"
    assert fmt(None) == fmt({"mean": None}) == ""


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


# ---- C1 and C7 with their power ------------------------------------------------------------------------------


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

    noisy = claims(with_arms(made_up(), (0.10, 0.20, 0.30), (0.12, 0.22, 0.32)))
    c1 = noisy["C1"]
    record = c1["ours"]["by_size"]["100"]["bert"]
    assert record["verdict"] == NOT_DETECTABLE and record["mdd"] > record["expected"] > 0
    assert record["expected"] == pytest.approx(0.22 * (0.192 / 0.156 - 1), abs=1e-4)
    assert c1["status"] == NOT_DETECTABLE and "detectable" in c1["comparison"]
    assert noisy["C7"]["status"] == NOT_DETECTABLE
    tight = claims(with_arms(made_up(), (0.300, 0.301, 0.302), (0.300, 0.301, 0.302)))
    assert tight["C1"]["status"] == "not reproduced" and tight["C7"]["status"] == "not reproduced"
    worse = claims(with_arms(made_up(), (0.20, 0.201, 0.202), (0.30, 0.301, 0.302)))
    assert worse["C1"]["status"] == "reversed" and worse["C7"]["status"] == "reversed"
    better = claims(with_arms(made_up(), (0.40, 0.401, 0.402), (0.30, 0.301, 0.302),
                              condenser_full=(0.35, 0.351, 0.352)))
    assert better["C1"]["status"] == "reproduced" and better["C1"]["ours"]["narrowing"] is True


def _results_with(condenser: dict, bert: dict) -> dict:
    """``made_up`` results whose C1 numbers are nDCG@10 per training size, ``(mean, std)`` over
    three runs, for the Condenser and both BERT arms."""
    def arm(by_size):
        return {"round1": {s: {"nDCG@10": {"mean": m, "std": sd, "n": 3}} for s, (m, sd) in by_size.items()}}

    results = made_up()
    results["train_sizes"] = [100, 809]
    results["retrieval"].update(condenser=arm(condenser), bert=arm(bert), bert_cont=arm(bert))
    return results


def c1(results: dict) -> dict:
    return next(c for c in scorecard(results) if c["id"] == "C1")


def test_c1_narrowing_counts_only_when_condenser_is_ahead():
    # no difference beyond the spread at any size: a "narrowing" gap of noise is not a partial reproduction
    noise = c1(_results_with({"100": (0.010, 0.002), "809": (0.028, 0.01)}, {"100": (0.008, 0.002), "809": (0.027, 0.01)}))
    assert noise["ours"]["narrowing"] is True and noise["status"] == NOT_DETECTABLE
    ahead = _results_with({"100": (0.30, 0.01), "809": (0.40, 0.01)}, {"100": (0.20, 0.01), "809": (0.35, 0.01)})
    assert c1(ahead)["status"] == "reproduced"  # ahead at 100, gap 0.10 -> 0.05
    widening = _results_with({"100": (0.30, 0.01), "809": (0.50, 0.01)}, {"100": (0.20, 0.01), "809": (0.35, 0.01)})
    assert c1(widening)["status"] == "partly reproduced"


# ---- the modified Condenser and the claims asked of it; nb-recall (C8); the claims as a table -----------------

def with_modified(results, mod_reliance=(0.6, 0.5), mod_small=(0.40, 0.401, 0.402), bert_small=(0.30, 0.301, 0.302)):
    """``made_up`` results with a modified Condenser arm: its gauges, retrieval at two sizes and
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
    cl = claims(with_modified(made_up()))
    ids = list(cl)
    assert ids.index("C0") < ids.index("C0m") < ids.index("C1") < ids.index("C1m") < ids.index("C2")
    assert ids.index("C7") < ids.index("C7m")
    assert cl["C0m"]["status"] == "reproduced" and cl["C0m"]["arms"][0] == "modified Condenser"
    assert cl["C1m"]["status"] == "reproduced" and cl["C1"]["status"] != "reproduced"  # its own numbers
    assert cl["C7m"]["status"] == "reproduced"
    assert claims(with_modified(made_up(), mod_reliance=(0.6, 0.1)))["C0m"]["ours"]["relies"] is False
    assert not {"C0m", "C1m", "C7m"} & set(claims(made_up()))  # only where the run has the arm
    assert {"C4m", "C5m", "C6m", "C8m", "Am"} <= set(cl)  # the rest of the papers' claims, and the attribution
    assert cl["C1m"]["ours"]["rules"] == RULES_V2 and cl["C0m"]["ours"]["rules"] == PRE_REGISTERED_RULES


def test_c8_neighbourhood_recall_at_the_papers_n_and_every_depth():
    def nb(arm_values):
        return {arm: {f"n{n}@k{k}": stats(v) for n in (10, 50) for k in (10, 100)} for arm, v in arm_values.items()}

    results = made_up()
    results["nb_recall"] = nb({"bert": (0.2, 0.21, 0.22), "condenser": (0.3, 0.31, 0.32), "cocondenser": (0.5, 0.51, 0.52)})
    c8 = claims(results)["C8"]
    assert c8["status"] == "reproduced" and c8["ours"]["n"] == 50
    assert c8["statement"].startswith("Neighbourhood recall (nb-recall^50@k")  # the n judged, in its statement
    assert set(c8["ours"]["condenser_vs_bert"]) == {"n50@k10", "n50@k100"}
    results["nb_recall"]["condenser"] = {k: stats((0.2, 0.21, 0.22)) for k in results["nb_recall"]["bert"]}
    assert claims(results)["C8"]["status"] == "partly reproduced"  # coCondenser still above Condenser


def test_claim_rows_name_each_comparison():
    from condenser_book.tables import claim_table
    from condenser_lite.reproduction.claims.scorecard import claim_rows

    results = with_modified(made_up())
    cl = claims(results)
    rows = claim_rows(cl["C1m"])
    assert [(r["setting"], r["a"], r["b"]) for r in rows] == [
        ("100 training queries", "modified Condenser", "BERT"), ("100 training queries", "modified Condenser",
                                                                 "BERT-continued"),
        (f"{FULL} training queries", "modified Condenser", "BERT"),
        (f"{FULL} training queries", "modified Condenser", "BERT-continued")]
    # a comparison speaks the comparisons' words; only a claim is "reproduced"
    assert rows[0]["ours (a vs b)"] == "0.401 vs 0.301" and rows[0]["verdict"] == "better"
    assert cl["C1m"]["ours"]["by_size"]["100"]["bert"]["verdict"] == "reproduced"  # the rule's own word, stored
    assert not {r["verdict"] for r in rows} & {"reproduced", "reversed", "not reproduced"}
    assert "(reproduced" not in cl["C1m"]["comparison"] and "(better" in cl["C1m"]["comparison"]
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


def test_claim_rows_name_both_sides_in_words_for_every_claim_of_a_version_2_file():
    """Each comparison of each claim of a committed rules-version-2 part names its two sides by
    the arms' labels (or the rounds) and its setting without the file's keys: the claims asked of
    the modified Condenser put it where the paper has the Condenser, and the attribution claim
    names each control."""
    import json

    from locations import ROOT

    from condenser_lite.reproduction.configuration.registry import ARM_LIST, label
    from condenser_lite.reproduction.claims.scorecard import claim_rows

    results = json.loads((ROOT / "results" / "parts" / "small-44-45.json").read_text())
    names = {label(a.name) for a in ARM_LIST} | {"round 1", "round 2"}
    made = {c["id"]: c for c in scorecard(results)}
    for cid, claim in made.items():
        for row in claim_rows(claim):
            assert {row["a"], row["b"]} <= names and row["a"] != row["b"], (cid, row)
            assert not any(key in row["setting"] for key in ("_vs_", "settings", "_minus_", "vs_control")), (cid, row)
    sides = {cid: {(r["a"], r["b"]) for r in claim_rows(made[cid])} for cid in ("C4m", "C5m", "Am")}
    assert ("round 2", "round 1") in sides["C4m"]
    assert ("BERT", "modified Condenser") in sides["C5m"]
    assert {("modified Condenser", "BERT-continued"), ("modified Condenser", "modified Condenser, [CLS] cut"),
            ("BERT-continued, equal FLOPs", "BERT-continued")} <= sides["Am"]


def test_am_says_what_its_test_shows_and_that_no_paper_has_it():
    """Am's test finds the modified Condenser ahead of each control: its words say the [CLS] path
    adds to the gain beyond compute and targets, not that the gain comes from it (the controls
    recover part of it themselves); no paper has Am, and its papers' cell says so instead of
    reading "."."""
    from condenser_lite.reproduction.evidence.papers import paper_text
    from condenser_lite.reproduction.claims.scorecard import CHECK

    for text in (CLAIM["Am"].title, CHECK["Am"].statement):
        assert "come from" not in text and "adds to" in text and "compute" in text, text
    assert "shown, not judged" in CHECK["Am"].statement
    assert paper_text("Am").startswith("none") and "; " not in paper_text("Am")  # one line in the table
    assert all(paper_text(c.id).strip(" .") for c in CLAIM_CHECKS)  # no claim's papers cell is empty


def test_comparison_paths_find_every_comparison_with_its_keys():
    from condenser_lite.reproduction.claims.scorecard import comparison_paths, comparisons

    c = {"a": 1.0, "b": 0.5, "diff": 0.5, "spread": 0.1, "verdict": "better"}
    ours = {"by_size": {"100": {"bert": c, "bert_cont": None}}, "narrowing": False}
    assert comparison_paths(ours) == [(("by_size", "100", "bert"), c)]
    claim = {"id": "C1", "arms": ["Condenser", "BERT", "BERT-continued"], "ours": ours}
    assert [x[-1] for x in comparisons(claim)] == [c]
