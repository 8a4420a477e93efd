"""The claims at a glance (condenser_lite/reproduction/claims_table.py): one row per claim with
the papers' number, ours and the verdict with its weak mark and BH q, and the introduction's
table made from them."""

import json

import pytest
from locations import ROOT

from condenser_lite.reproduction import claims_table as ct
from condenser_lite.reproduction.multiplicity import WEAK_MARK, family
from condenser_lite.reproduction.registry import CLAIM


@pytest.fixture(scope="module")
def small():
    return json.loads((ROOT / "results" / "small.json").read_text())


def test_headline_rows_one_per_claim(small):
    rows = ct.headline_rows(small)
    assert [r["id"] for r in rows] == [c["id"] for c in small["claims"]]
    keys = {"id", "claim", "paper", "ours", "diff", "p", "mdd", "verdict", "weak", "weak_text", "q", "verdict_bh",
            "verdict_holm", "held", "tests", "doc", "anchor", "where"}
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


def test_headline_markdown_marks_and_links(small):
    text = ct.headline_markdown(small)
    lines = text.splitlines()
    table = [line for line in lines if line.startswith("| **")]
    rows = ct.headline_rows(small)
    assert len(table) == len(rows)
    for line, r in zip(table, rows):
        assert line.startswith(f"| **{r['id']}** ") and line.count(" | ") == 5
        assert (WEAK_MARK in line) == r["weak"]
        assert ("under BH" in line) == (r["verdict_bh"] != r["verdict"])
    assert "{ref}`chapter 8 <scorecard-am>`" in text and "{doc}`chapter 4 </notebooks/04_finetune>`" in text
    assert "{doc}" not in ct.headline_markdown(small, links=False)
    assert lines[-1].startswith(f"{WEAK_MARK} weak:")


def test_a_chapters_findings_are_its_claims_headline_rows(small):
    """A chapter's first table: only the claims it names, in the scorecard's order, each with the
    verdict and q of the introduction's table."""
    from condenser_lite.reproduction.tables import findings

    table = findings(small, ["C8", "C6"])
    rows = {r["id"]: r for r in ct.headline_rows(small)}
    assert list(table.index) == ["C6", "C8"]
    for cid in table.index:
        assert table.loc[cid, "verdict"] == rows[cid]["verdict"]
        assert table.loc[cid, "this run"] == rows[cid]["ours"]
        assert table.loc[cid, "BH q"] == ct.q_text(rows[cid]["q"])
