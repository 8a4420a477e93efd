"""The tests behind the claims' verdicts (condenser_lite/reproduction/claims/multiplicity.py): their
number, the Benjamini-Hochberg q-values against a hand-written procedure and Holm's against a hand
loop, the verdicts judged again (each test on its own gives the stored verdicts back, on the
committed file and on every part), the weak-verdict rule at its edges, the unseen seeds
recomputed from the runs, and the controls' shares."""

import copy
import json

import numpy as np
import pytest
from locations import ROOT
from scipy import stats

from condenser_lite.reproduction.claims import multiplicity as mt
from condenser_lite.reproduction.claims.claims_table import headline_rows
from condenser_lite.reproduction.configuration.registry import CLAIM
from condenser_lite.reproduction.evidence.results import arm_seeds
from condenser_lite.reproduction.statistics.rules import model_means

RESULTS = [ROOT / "results" / "small.json", *sorted((ROOT / "results" / "parts").glob("*.json"))]


@pytest.fixture(scope="module")
def small():
    return json.loads((ROOT / "results" / "small.json").read_text())


def bh_by_hand(p):
    """Benjamini-Hochberg q-values as the procedure is written: sort, p_(k) m / k, the running
    minimum from the largest down, at most 1."""
    p = list(p)
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    q, running = [0.0] * m, 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, p[i] * m / rank)
        q[i] = running
    return q


def holm_by_hand(p, alpha):
    """Holm's step-down procedure: reject the k-th smallest while it is below alpha / (m - k + 1)."""
    m, rejected = len(p), set()
    for k, i in enumerate(sorted(range(m), key=lambda i: p[i])):
        if p[i] >= alpha / (m - k):
            break
        rejected.add(i)
    return rejected


def test_scipys_q_values_are_the_procedure_by_hand(small):
    rng = np.random.default_rng(0)
    for p in (rng.uniform(size=40), rng.uniform(size=7) ** 3, [0.01, 0.04, 0.03, 0.04, 0.5]):
        assert np.allclose(stats.false_discovery_control(p, method="bh"), bh_by_hand(p))
    family = mt.family(small)
    assert np.allclose([r["q"] for r in family], bh_by_hand([r["p"] for r in family]))
    assert np.allclose([r["q_reversed"] for r in family], bh_by_hand([r["p_reversed"] for r in family]))


def test_holm_is_the_step_down_procedure():
    rng = np.random.default_rng(1)
    for p in (rng.uniform(size=30) ** 4, [0.001, 0.011, 0.02, 0.04], [0.2, 0.01, 0.01]):
        adjusted = mt.holm(p)
        assert {i for i, a in enumerate(adjusted) if a < 0.05} == holm_by_hand(p, 0.05)
        assert (adjusted >= np.asarray(p)).all() and (adjusted <= 1).all()
    assert list(mt.holm([0.01, 0.04, 0.03])) == pytest.approx([0.03, 0.06, 0.06])


def test_the_tests_behind_the_verdicts_are_counted_once(small):
    tests = mt.deciding_tests(small)
    by_claim = {cid: [t for t in tests if t.claim == cid] for cid in CLAIM}
    assert not by_claim["C0"] and not by_claim["C0m"]  # the reliance rule, no test
    assert all(t.path[-1] == "R@100" for t in by_claim["C2"])  # C2 by recall
    assert all(t.path[-1] != "bert" for t in by_claim["C4"] + by_claim["C4m"])  # BERT's round 2 only shown
    assert not [t for t in by_claim["Am"] if t.path[2] == "control_vs_bert_cont"]  # shown, not judged
    family = mt.family(small)
    shared = [r["claims"] for r in family if len(r["claims"]) > 1]
    assert sorted(shared) == [["C1m", "Am"], ["C1m", "Am"], ["C2", "C3"], ["C7m", "Am"], ["C7m", "Am"]]
    assert len(family) == len(tests) - len(shared)
    m = mt.multiplicity(small)
    assert m["tests"] == len(family) and m["listed"] == len(tests)
    assert m["expected_false"] == pytest.approx(0.05 * len(family))
    assert m["significant"] == sum(r["p"] < 0.05 for r in family)


def test_c4_rests_on_the_tests_its_status_reads(small):
    """BERT-continued's round 2 is shown beside C4, not judged: given a test, it neither enters the
    family nor changes a verdict, as for BERT's."""
    edited = copy.deepcopy(small)
    c4 = next(c for c in edited["claims"] if c["id"] == "C4")
    c4["ours"]["round2_vs_round1"]["bert_cont"] = {**c4["ours"]["round2_vs_round1"]["bert"], "p": 0.001,
                                                   "verdict": "better"}
    assert not [t for t in mt.deciding_tests(edited) if t.claim == "C4" and t.path[-1] in ("bert", "bert_cont")]
    assert mt.rejudge(edited, "bh") == mt.rejudge(small, "bh")


def test_each_test_on_its_own_gives_the_stored_verdicts_back():
    for path in RESULTS:
        results = json.loads(path.read_text())
        stored = {c["id"]: c["status"] for c in results["claims"]}
        assert mt.rejudge(results) == stored, path.name


def test_a_test_that_falls_changes_its_claims_verdict(small):
    edited = copy.deepcopy(small)
    c4m = next(c for c in edited["claims"] if c["id"] == "C4m")
    c4m["ours"]["round2_vs_round1"]["condenser_mod"].update(p=0.2, p_reversed=0.8)
    assert mt.rejudge(edited)["C4m"] == "not reproduced at this scale"
    # a shown, not judged, comparison changes no verdict
    edited = copy.deepcopy(small)
    am = next(c for c in edited["claims"] if c["id"] == "Am")
    for st in am["ours"]["settings"].values():
        for c in st["control_vs_bert_cont"].values():
            c.update(p=0.9, p_reversed=0.1)
    assert mt.rejudge(edited) == mt.rejudge(small)
    # Am holds only where the modified Condenser beats both controls
    am["ours"]["settings"]["STS-b at 500 training pairs"]["vs_control"]["bert_cont_flops"].update(p=0.3)
    assert mt.rejudge(edited)["Am"] == "partly reproduced"
    with pytest.raises(ValueError, match="bh"):
        mt.rejudge(small, "bonferroni")


def test_bh_and_holm_on_the_committed_run(small):
    m = mt.multiplicity(small)
    changed_bh = {c for c, v in m["verdicts_bh"].items() if v != m["verdicts"][c]}
    family = mt.family(small)
    falls = {c for r in family if r["p"] < 0.05 <= r["q"] for c in r["claims"]}
    assert changed_bh == falls  # a verdict changes exactly where one of its tests falls
    assert m["bh"] == m["significant"] - sum(r["p"] < 0.05 <= r["q"] for r in family)
    assert m["holm"] == len(holm_by_hand([r["p"] for r in family], 0.05))
    assert m["holm"] <= m["bh"] <= m["significant"]
    assert all(m["verdicts_holm"][c] == m["verdicts"][c] for c in ("C0", "C0m", "C2", "C8", "C8m"))


@pytest.mark.parametrize("p, diff, mdd, verdict, weak", [
    (0.02, 0.01, 0.011, "better", True), (0.0499, 0.01, 0.011, "reproduced", True),
    (0.0199, 0.01, 0.011, "better", False), (0.05, 0.01, 0.011, "better", False),
    (0.03, 0.011, 0.011, "better", False), (0.03, 0.01, 0.011, "not significant", False),
    (0.03, 0.01, None, "better", False)])
def test_the_weak_rule_at_its_edges(p, diff, mdd, verdict, weak):
    assert mt.is_weak({"p": p, "diff": diff, "mdd": mdd, "verdict": verdict}) is weak


def test_the_weak_verdicts_of_the_committed_run(small):
    weak = mt.weak_tests(small)
    for cid, tests in weak.items():
        assert all(mt.is_weak(t.numbers) for t in tests)
        assert next(c for c in small["claims"] if c["id"] == cid)["status"] != "not reproduced at this scale"
    rows = {r["id"]: r for r in headline_rows(small)}
    assert {c for c, r in rows.items() if r["weak"]} == set(weak)
    # a weak test outside what a verdict counts as holding marks nothing: Am's controls' own gains
    am = next(c for c in small["claims"] if c["id"] == "Am")
    own = [c for st in am["ours"]["settings"].values() for c in st["control_vs_bert_cont"].values()]
    assert any(mt.is_weak(c) for c in own)
    assert all(t.path[2] != "control_vs_bert_cont" for t in weak.get("Am", []))


def test_the_unseen_seeds_recomputed_from_the_runs(small):
    rows = mt.unseen_seed_tests(small)
    unseen = [s for s in arm_seeds(small, "condenser_mod") if s not in (42, 43)]
    assert rows and all(r["seeds"] == unseen and r["n"] == len(unseen) for r in rows)
    assert len({(r["a"], r["b"], r["setting"]) for r in rows}) == len(rows)  # each test once
    # one of them from the fine-tuning runs themselves, with scipy's paired test
    full = str(small["train_sizes"][-1])

    def means(arm):
        m = model_means(small["retrieval"][arm]["round1"][full]["nDCG@10"]["values"], arm_seeds(small, arm))
        return [x for s, x in zip(m["seeds"], m["means"]) if s in unseen]

    p = stats.ttest_rel(means("condenser_mod"), means("bert_cont"), alternative="greater").pvalue
    row = next(r for r in rows if r["claim"] == "C1m" and r["setting"].startswith(full) and r["b"] == "BERT-continued")
    assert row["p"] == pytest.approx(p, abs=1e-4)
    # and over every seed, the difference of the means the rules' own test reads
    every = model_means(small["retrieval"]["condenser_mod"]["round1"][full]["nDCG@10"]["values"],
                        arm_seeds(small, "condenser_mod"))["means"]
    cont = model_means(small["retrieval"]["bert_cont"]["round1"][full]["nDCG@10"]["values"],
                       arm_seeds(small, "bert_cont"))["means"]
    assert row["diff_all"] == pytest.approx(sum(every) / len(every) - sum(cont) / len(cont), abs=1e-5)


def test_the_controls_shares_recomputed_from_the_runs(small):
    rows = mt.control_shares(small)
    full = str(small["train_sizes"][-1])

    def mean(arm):
        m = model_means(small["retrieval"][arm]["round1"][full]["nDCG@10"]["values"], arm_seeds(small, arm))
        return np.mean(m["means"])

    row = next(r for r in rows if r["setting"].startswith(f"nDCG@10 at {full}") and "FLOPs" in r["control"])
    share = (mean("bert_cont_flops") - mean("bert_cont")) / (mean("condenser_mod") - mean("bert_cont"))
    assert row["share"] == pytest.approx(share, abs=1e-4)
    assert all(r["gain"] > 0 and r["share"] == pytest.approx(r["own"] / r["gain"]) for r in rows)


def test_am_is_judged_on_the_settings_whose_gain_each_call_keeps(small):
    """Am reads only the settings where the modified Condenser beats BERT-continued. Counted by
    hand from the family's adjusted p: each setting's gain stands where its call is below 5%."""
    am = next(c for c in small["claims"] if c["id"] == "Am")
    rows = mt.family_of(mt.deciding_tests(small))
    gains = [st["gain"] for st in am["ours"]["settings"].values()]
    for method, key in ((None, "p"), ("bh", "q"), ("holm", "holm")):
        kept = sum(rows[mt.comparison_key(c)][key] < 0.05 for c in gains)
        assert mt.am_settings(small, method) == (kept, len(gains)), method
    assert mt.am_settings(small, "holm")[0] < mt.am_settings(small)[0]  # the stricter call keeps fewer
