"""The claims at a glance (condenser_lite/reproduction/claims/claims_table.py): one row per claim with
the papers' number, ours and the verdict with its weak mark and BH q, and the introduction's
table made from them."""

import json

import pytest
from locations import ROOT

from condenser_lite.reproduction.claims import claims_table as ct
from condenser_lite.reproduction.claims.multiplicity import WEAK_MARK, family
from condenser_lite.reproduction.claims.scorecard import comparison_paths
from condenser_lite.reproduction.configuration.registry import CLAIM


@pytest.fixture(scope="module")
def small():
    return json.loads((ROOT / "results" / "small.json").read_text())


def test_headline_rows_one_per_claim(small):
    rows = ct.headline_rows(small)
    assert [r["id"] for r in rows] == [c["id"] for c in small["claims"]]
    keys = {"id", "claim", "paper", "ours", "diff", "p", "mdd", "verdict", "weak", "weak_text", "q", "verdict_bh",
            "verdict_holm", "held", "tests", "doc", "anchor", "where", "reversed", "undetected", "holm"}
    assert all(set(r) == keys for r in rows)
    by_test = {(r["diff"], r["p"]): r for r in family(small)}
    for r in rows:
        assert r["claim"] == CLAIM[r["id"]].title and r["doc"].startswith("notebooks/")
        if r["p"] is None:
            assert r["id"] in ("C0", "C0m") and "reliance" in r["ours"]
        else:
            assert f"MDD {r['mdd']:.3f}" in r["ours"] and r["q"] >= r["p"]
        assert r["weak"] == bool(r["weak_text"])
    c1 = next(r for r in rows if r["id"] == "C1")
    assert "0.338 vs 0.309" in c1["paper"] and "Condenser table 5" in c1["paper"]
    assert next(r for r in rows if r["id"] == "Am")["paper"].startswith("none")
    assert by_test  # the q of a held headline test is its family's q
    c4 = next(r for r in rows if r["id"] == "C4")
    assert c4["q"] == pytest.approx(by_test[(c4["diff"], c4["p"])]["q"])


def test_one_findings_table_marks_links_and_folds_its_numbers(small):
    """Every page's findings table: claim in words with its code after (linked), verdict with its
    weak mark and BH reading, the headline test's difference with its MDD, q; the numbers fold out
    below; the key comes before the table."""
    text = ct.findings_markdown(small)
    lines = text.splitlines()
    rows = ct.headline_rows(small)
    head = "| claim | verdict | difference (MDD) | q |"
    table = lines[lines.index(head) + 2:][:len(rows)]
    assert lines.index(head) > lines.index(ct.KEY)
    for line, r in zip(table, rows):
        assert line.startswith(f"| {r['claim']} (") and line.count(" | ") == 3
        size = line.split(" | ")[2]
        assert size == ("–" if r["diff"] is None else f"{r['diff']:+.3f}\u00a0({r['mdd']:.3f})")
        assert (WEAK_MARK in line) == r["weak"] and ct.verdict_text(r) in line
        assert ("under BH" in line) == (r["verdict_bh"] != r["verdict"] or (r["reversed"] and r["q"] >= 0.05))
    assert "{ref}`Am <sure-am>`" in text and "{doc}`C1 </notebooks/04_finetune>`" in text
    assert "{doc}" not in ct.findings_markdown(small, links=False)
    assert ":::{dropdown}" in text and "| C1 | 1K queries" in text
    assert ct.KEY not in ct.findings_markdown(small, key=False)
    assert "the papers" not in ct.findings_markdown(small, ["C1m"], papers=False)


def test_verdicts_say_not_detected_and_the_other_way_as_their_tests_do():
    """An underpowered null is "not detected (MDD ...)", not "not reproduced"; a reversal says so,
    and where BH drops it, so; a reproduced claim reads as it is. Made-up rows."""
    base = {"verdict": "not reproduced at this scale", "verdict_bh": "not reproduced at this scale",
            "weak": False, "reversed": False, "diff": 0.022, "mdd": 0.101, "q": 0.3, "undetected": True}
    assert ct.verdict_text(base) == "not detected (MDD 0.101)"
    # one of the claim's tests found a difference it could detect: no longer "not detected"
    assert ct.verdict_text({**base, "undetected": False}) == "not reproduced at this scale"
    assert ct.verdict_text({**base, "diff": -0.12, "reversed": True}) == \
        "not reproduced: the other way; under BH: not detected (MDD 0.101)"
    assert ct.verdict_text({**base, "diff": -0.9, "reversed": True, "q": 0.029}) == "not reproduced: the other way"
    c4 = {**base, "verdict": "partly reproduced", "weak": True, "diff": 0.018, "mdd": 0.026}
    assert ct.verdict_text(c4) == "partly reproduced †; under BH: not detected (MDD 0.026)"
    assert ct.verdict_text({**base, "verdict": "reproduced", "verdict_bh": "reproduced", "mdd": None}) == "reproduced"


def test_the_rejudged_verdicts_read_as_the_findings_tables_say_them(small):
    """Chapter 12's table of verdicts by the rules, under BH and under Holm: a reversal only where
    its adjusted reverse test stands (C5m's does not under BH, C6m's does), "not detected" only
    where every test of the claim is below its MDD (C1 under Holm has one above), the weak mark
    where the verdict and its weak test both stand (Am's falls under Holm)."""
    lines = ct.rejudged_markdown(small).splitlines()
    assert lines[0] == "| claim | the rules' verdict | under BH at 5% | under Holm at 5% |"
    cells = {line.split(" | ")[0].rsplit("(", 1)[1].rstrip(")"): line.rstrip(" |").split(" | ")[1:]
             for line in lines[2:]}
    rows = {r["id"]: r for r in ct.headline_rows(small)}
    assert set(cells) == set(rows)
    for cid, (rules, bh, holm) in cells.items():
        r = rows[cid]
        assert rules == ct.verdict_phrase(r, r["verdict"]) + (f" {WEAK_MARK}" if r["weak"] else "")
        assert ("the other way" in bh) == (r["reversed"] and r["q"] < 0.05)
        assert ("the other way" in holm) == (r["reversed"] and r["holm"] < 0.05)
        assert (WEAK_MARK in bh) == (r["weak"] and r["verdict_bh"] == r["verdict"] and r["q"] < 0.05)
        assert (WEAK_MARK in holm) == (r["weak"] and r["verdict_holm"] == r["verdict"] and r["holm"] < 0.05)
        assert not ("not detected" in holm and not r["undetected"])
    assert "the other way" not in cells["C5m"][1] and "the other way" in cells["C6m"][1]
    assert cells["C1"][2].startswith("not reproduced") and WEAK_MARK in cells["C1"][1]
    assert WEAK_MARK not in cells["Am"][2]  # under Holm its weak test falls


def test_a_chapters_findings_are_its_claims_headline_rows(small):
    """A chapter's first table: only the claims it names, in the scorecard's order, each with the
    verdict and q of the introduction's table."""
    text = ct.findings_markdown(small, ["C8", "C6"])
    rows = {r["id"]: r for r in ct.headline_rows(small)}
    body = [line for line in text.splitlines() if line.startswith("| ") and "{doc}" in line.split(" | ")[0]]
    assert [line.split("{doc}`")[1].split(" ")[0] for line in body] == ["C6", "C8"]
    for line, cid in zip(body, ["C6", "C8"]):
        assert ct.verdict_text(rows[cid]) in line and line.endswith(f"| {ct.q_text(rows[cid]['q'])} |")


def test_a_claims_table_says_its_codes_in_words_or_links_them_at_first_use():
    """Codes in words (nb-recall's n and k, "w/o HN"); each glossary term linked once, at its
    first use, to its entry: R@100 is not read inside R@1000, and round 2 links to the
    "round 1, round 2" entry."""
    from condenser_lite.reproduction.claims.claims_table import glossed

    seen: set[str] = set()
    first = glossed("round 2, R@1000: Condenser w/o HN 0.3 vs n50@k100 0.2 (MDD 0.01)", seen)
    assert first == ("{term}`round 2 <round 1, round 2>`, {term}`R@1000`: Condenser without hard negatives 0.3 vs "
                     "{term}`nb-recall` (n = 50, k = 100) 0.2 ({term}`MDD` 0.01)")
    assert glossed("round 1, R@1000, R@100", seen) == "round 1, R@1000, {term}`R@100`"
    html = glossed("MRR@10 and MRR@10", set(), "../glossary.html")
    assert html == '<a class="reference internal" href="../glossary.html#term-MRR-10">MRR@10</a> and MRR@10'


def test_claim_table_gives_each_pre_trained_models_range_and_sign_count(small):
    """The claim tables read the pre-trained models' differences in one cell: their range and how
    many are above zero, counted here from the results file's own per-model differences."""
    from condenser_book.tables import claim_table, model_range

    assert model_range({"42": 0.012, "43": -0.004, "44": 0.0}).replace("\u00a0", " ") == \
        "-0.004 to +0.012; 1 of 3 > 0"
    assert model_range(None) == "unpaired"
    claim = next(c for c in small["claims"] if c["id"] == "C1")
    per_model = [c["per_seed"] for _, c in comparison_paths(claim["ours"])]
    cells = [c.replace("\u00a0", " ") for c in claim_table(small, ["C1"])["each model"]]
    assert len(cells) == len(per_model) == 4
    for cell, d in zip(cells, per_model):
        low, high = min(d.values()), max(d.values())
        assert cell == f"{low:+.3f} to {high:+.3f}; {sum(v > 0 for v in d.values())} of {len(d)} > 0"


def test_claim_table_shows_the_reverse_p_beside_a_call_the_other_way(small):
    """A "worse" row gives the p of the reverse test it rests on, not the claim-direction p near 1."""
    from condenser_book.tables import claim_table

    claim = next(c for c in small["claims"] if c["id"] == "C6m")
    tests = [c for _, c in comparison_paths(claim["ours"])]
    table = claim_table(small, ["C6m"])
    assert all(c["verdict"] == "worse" for c in tests)  # the committed run's C6m: both worse
    for cell, c in zip(table["difference (p)"], tests):
        assert cell.replace("\u00a0", " ").endswith(f"(reverse p {c['p_reversed']:.3f})")
