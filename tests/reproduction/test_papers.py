"""The papers' published numbers (condenser_lite/reproduction/evidence/papers.json, read by papers.py): every
claim of the papers has a source, every table is whole and on our 0-1 scale, every cell the
introduction quotes exists, and the file travels with the package."""

import json
from importlib import resources

import pytest

from condenser_lite.reproduction.evidence.papers import (
    PAPER_RESULTS,
    PAPERS_FILE,
    PaperFinding,
    PaperTable,
    paper_headline,
    paper_table,
    read_papers,
)
from condenser_lite.reproduction.configuration.registry import CLAIM


def test_every_claim_of_the_papers_has_a_source():
    papers_claims = [c for c in CLAIM if c != "Am" and not c.endswith("m")]
    assert {r.claim for r in PAPER_RESULTS} == set(papers_claims)
    assert len({(r.claim, r.source) for r in PAPER_RESULTS}) == len(PAPER_RESULTS)  # each source once per claim


@pytest.mark.parametrize("table", [r for r in PAPER_RESULTS if isinstance(r, PaperTable)], ids=lambda r: r.source)
def test_each_table_is_whole_on_our_scale_and_quotes_its_own_cells(table):
    assert table.rows and all(len(values) == len(table.columns) for values in table.rows.values()), table.source
    assert all(0 < v < 1 for values in table.rows.values() for v in values)  # the papers print x 100; we do not
    for cells in table.headline:
        for row, column in (cells.claimed, cells.baseline):
            assert row in table.rows and column in table.columns, (table.source, row, column)


def test_the_introduction_quotes_the_table_cells():
    assert paper_headline("C1") == ("1K queries 0.192 vs 0.156; full 0.338 vs 0.309 "
                                    "(MS MARCO dev MRR@10, training queries, Condenser table 5)")
    assert paper_headline("C5") == "no number: Condenser figure 2"
    assert paper_headline("C1m").startswith("none") and paper_headline("Am").startswith("none")
    assert paper_table("coCondenser table 4").value("+ MLM (coCondenser)", "MRR@10") == 0.382


def test_read_papers_reads_tables_and_findings_in_the_files_order():
    text = json.dumps({"papers": [
        {"claim": "C9", "source": "a figure", "finding": "up"},
        {"claim": "C9", "source": "a table", "measure": "m", "columns": ["x", "y"], "rows": {"A": [0.1, 0.2]},
         "headline": [{"words": "w", "claimed": ["A", "y"], "baseline": ["A", "x"]}]}]})
    finding, table = read_papers(text)
    assert isinstance(finding, PaperFinding) and finding.text() == "a figure (up)"
    assert isinstance(table, PaperTable) and table.rows == {"A": (0.1, 0.2)} and table.value("A", "y") == 0.2
    assert table.headline[0].claimed == ("A", "y") and table.text() == "a table (m; x / y): A 0.100 / 0.200"


def test_the_numbers_travel_with_the_package():
    """Read as package data, so an install away from the clone has them (pyproject's package-data)."""
    from locations import ROOT

    assert resources.files("condenser_lite.reproduction.evidence").joinpath(PAPERS_FILE).is_file()
    assert PAPERS_FILE in (ROOT / "pyproject.toml").read_text()
