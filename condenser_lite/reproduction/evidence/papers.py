"""The papers' published numbers behind each claim, read from ``papers.json`` beside this module.

Each entry of that file is one source (a paper's table, figure or section) for one claim: a
table's numbers (``PaperTable``) or a finding without numbers (``PaperFinding``), read by
``read_papers`` into ``PAPER_RESULTS``. The rest renders them (``paper_text``, ``paper_headline``)
and reads the gains a claim's effect is expected to match (``expected_gain``). Chapter 8.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources

from ..configuration.registry import CLAIM

PAPERS_FILE = "papers.json"  # package data of condenser_lite.reproduction


@dataclass(frozen=True)
class Cells:
    """Two cells of a table the introduction quotes, each ``(row, column)``: the ``claimed`` side
    first, then its ``baseline``, under a few ``words``. Chapter 8."""

    words: str
    claimed: tuple[str, str]
    baseline: tuple[str, str]


@dataclass(frozen=True)
class PaperTable:
    """Published numbers behind a claim: ``rows`` of values, one per ``columns`` entry, and the
    pairs of cells the introduction quotes (``headline``). Chapter 8."""

    claim: str
    source: str
    measure: str
    columns: tuple[str, ...]
    rows: dict[str, tuple[float, ...]] = field(default_factory=dict)
    headline: tuple[Cells, ...] = ()
    digits: int = 3  # every published number on the 0-1 scale of ours (the papers print x 100)

    def text(self) -> str:
        cells = ", ".join(f"{label} " + " / ".join(f"{v:.{self.digits}f}" for v in values)
                          for label, values in self.rows.items())
        return f"{self.source} ({self.measure}; {' / '.join(self.columns)}): {cells}"

    def value(self, row: str, column: str) -> float:
        """The number in ``row`` under ``column``."""
        return self.rows[row][self.columns.index(column)]


@dataclass(frozen=True)
class PaperFinding:
    """A claim the papers make in a figure, without numbers to copy. Chapter 8."""

    claim: str
    source: str
    finding: str

    def text(self) -> str:
        return f"{self.source} ({self.finding})"


def read_papers(text: str | None = None) -> tuple[PaperTable | PaperFinding, ...]:
    """The entries of ``papers.json`` (or of ``text``, the same layout), in the file's order: a
    ``PaperFinding`` where an entry has a ``finding``, else a ``PaperTable``. Chapter 8."""
    if text is None:
        text = resources.files(__package__).joinpath(PAPERS_FILE).read_text(encoding="utf-8")
    out: list[PaperTable | PaperFinding] = []
    for e in json.loads(text)["papers"]:
        if "finding" in e:
            out.append(PaperFinding(e["claim"], e["source"], e["finding"]))
            continue
        cells = tuple(Cells(h["words"], tuple(h["claimed"]), tuple(h["baseline"])) for h in e.get("headline", ()))
        out.append(PaperTable(e["claim"], e["source"], e["measure"], tuple(e["columns"]),
                              {row: tuple(values) for row, values in e["rows"].items()}, cells))
    return tuple(out)


PAPER_RESULTS = read_papers()


def base_claim(cid: str) -> str:
    """The paper's claim a claim asks (``"C4m"`` -> ``"C4"``; ``"Am"`` and ``"C4"`` as they are).
    Chapter 8."""
    return cid[:-1] if cid.endswith("m") and cid[:-1] in CLAIM else cid


def paper_text(claim: str) -> str:
    """The papers' numbers (or finding) behind ``claim``, one source after another (chapter 8)."""
    sources = [r.text() for r in PAPER_RESULTS if r.claim == claim]
    if not sources and claim.endswith("m") and claim[:-1] in {r.claim for r in PAPER_RESULTS}:
        # C0m, C1m, C7m: the paper has no modified Condenser; its numbers are those of the claim asked
        # no "; " at the top level: the scorecard breaks the line there
        return f"none for this arm, which is the book's deviation (for the faithful Condenser, see {claim[:-1]})."
    if not sources:  # Am: the book's own question about its deviation, with controls neither paper ran
        return ("none: neither paper has the modified Condenser or its two controls, so this is the book's own "
                "question about its deviation.")
    return "; ".join(sources) + "."


def paper_headline(cid: str) -> str:
    """The papers' number behind claim ``cid`` in a few words: the pairs of cells its table's
    ``headline`` quotes, the figure of a claim made in one, or none for the modified Condenser's
    claims and Am, which are the book's. Chapter 8."""
    if cid == "Am":
        return "none: the book's own question"
    if cid != base_claim(cid):
        return f"none: the book's deviation (see {base_claim(cid)})"
    table = next((r for r in PAPER_RESULTS if r.claim == cid and isinstance(r, PaperTable) and r.headline), None)
    if table is not None:
        pairs = "; ".join(f"{c.words} {table.value(*c.claimed):.3f} vs {table.value(*c.baseline):.3f}"
                          for c in table.headline)
        return f"{pairs} ({table.measure}, {table.source})"
    finding = next(r for r in PAPER_RESULTS if r.claim == cid and isinstance(r, PaperFinding))
    return f"no number: {finding.source}"


def paper_table(source: str) -> PaperTable:
    """The ``PAPER_RESULTS`` table named ``source`` (e.g. ``"Condenser table 1"``). Chapters 7, 8."""
    return next(r for r in PAPER_RESULTS if isinstance(r, PaperTable) and r.source == source)


def paper_gain(source: str, column: str, arm: str = "Condenser", base: str = "BERT") -> float:
    """The paper's relative gain of ``arm`` over ``base`` in one column of a ``PAPER_RESULTS``
    table (e.g. ``paper_gain("Condenser table 5", "full")`` = 0.338 / 0.309 - 1). Chapter 8."""
    table = paper_table(source)
    return table.value(arm, column) / table.value(base, column) - 1


# The papers' tables whose relative gains a claim's effect is expected to match (pre-registered):
# C1 the MS MARCO low-data table ("about 9%" at full data), C7 the STS-b table.
EXPECTED_GAIN_SOURCE = {"C1": "Condenser table 5", "C7": "Condenser table 1"}


def paper_column(claim: str, size: str, sizes: Sequence[str]) -> str | None:
    """The column of the paper's table (``EXPECTED_GAIN_SOURCE[claim]``) our training ``size``
    (one of ``sizes``, the sizes run) is compared with: with as many sizes as the table has
    columns, column by position (STS-b: 500, 1K, full); otherwise our smallest size reads the
    table's first column (the paper's lowest-data setting) and our largest its last ("full"),
    any other None. Chapter 8."""
    columns = paper_table(EXPECTED_GAIN_SOURCE[claim]).columns
    ordered = sorted(sizes, key=int)
    if len(ordered) == len(columns):
        return columns[ordered.index(size)]
    return columns[0] if size == ordered[0] else columns[-1] if size == ordered[-1] else None


def expected_gain(claim: str, size: str, sizes: Sequence[str]) -> float | None:
    """The paper's relative gain expected at our training ``size``, read at ``paper_column``
    (None where no column matches). Chapter 8."""
    column = paper_column(claim, size, sizes)
    return None if column is None else paper_gain(EXPECTED_GAIN_SOURCE[claim], column)
