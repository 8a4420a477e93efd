"""The introduction's claims tables: each claim in plain words, the papers' number, ours (the test
its verdict rests on most weakly: the difference, its p and MDD, and how many of its tests hold)
and the verdict with its BH q, in two tables narrow enough for the page: the papers' claims, then
the modified Condenser's. ``book/claims_table.md`` holds them, made from ``results/small.json``:

    python -m condenser_lite.reproduction.claims_summary > book/claims_table.md

The rows are ``claims_table.headline_rows``; chapter 8 argues them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .claims_table import headline_rows, q_text, where_link
from .multiplicity import WEAK_MARK, WEAK_P


def _paper(text: str) -> str:
    """The papers' number and metric without the table it comes from (chapter 8 gives it)."""
    text = re.sub(r",\s*(co)?Condenser( preprint)? (table|figure|section) [\d.]+", "", text)
    return "no number" if text.startswith("no number") else text


def _verdict(row: Mapping) -> str:
    verdict = row["verdict"] + (f" {WEAK_MARK}" if row["weak"] else "")
    if row["verdict_bh"] != row["verdict"]:
        verdict += f"; under BH: {row['verdict_bh']}"
    return verdict + ("" if row["q"] is None else f" (q {q_text(row['q'])})")


def _table(rows, paper: bool) -> list[str]:
    head = ["claim", *(["the papers"] if paper else []), "ours", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"**{where_link(r, r['id'])}** {r['claim']}", *([_paper(r["paper"])] if paper else []),
                 r["ours"], _verdict(r)]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def intro_tables(results: Mapping) -> str:
    """The two tables as MyST Markdown, with a note on the mark and the q under them."""
    rows = headline_rows(results)
    papers = [r for r in rows if not r["id"].endswith("m")]
    modified = [r for r in rows if r["id"].endswith("m")]
    lines = ["The papers' claims, with the Condenser and coCondenser as published:", "", *_table(papers, True),
             "", "The modified Condenser's claims (a deviation from the paper; no paper has these numbers):", "",
             *_table(modified, False), "",
             f"{WEAK_MARK} weak: a test the verdict rests on has {WEAK_P[0]:g} ≤ p < {WEAK_P[1]:g} and a difference "
             "below its MDD. q: the Benjamini-Hochberg q-value of the test shown, over every distinct test behind "
             "the verdicts; where the row reads reversed, of its reverse test, over the reverse tests (a family of "
             "their own)."]
    return "\n".join(lines)


if __name__ == "__main__":
    import json
    import sys

    print(intro_tables(json.loads(open(sys.argv[1] if len(sys.argv) > 1 else "results/small.json").read())))
