"""The introduction's claims tables (``book/claims_table.md``): the papers' claims, then the
modified Condenser's, each as ``claims_table.findings_markdown`` makes every findings table of
the book, from ``results/small.json``:

    python -m condenser_book.claims_summary > book/claims_table.md

Chapter 8 argues them.
"""

from __future__ import annotations

from collections.abc import Mapping

from condenser_lite.reproduction.claims.claims_table import findings_markdown


def intro_tables(results: Mapping) -> str:
    """The two tables as MyST Markdown, the key to their verdicts above the first."""
    ids = [c["id"] for c in results["claims"]]
    papers = [i for i in ids if not i.endswith("m")]
    modified = [i for i in ids if i.endswith("m")]
    return "\n".join(["The papers' claims, with the Condenser and coCondenser as published.", "",
                      findings_markdown(results, papers), "",
                      "The {term}`modified Condenser`'s claims (a deviation from the paper; no paper has these numbers):", "",
                      findings_markdown(results, modified, papers=False, key=False)])


if __name__ == "__main__":
    import json
    import sys

    print(intro_tables(json.loads(open(sys.argv[1] if len(sys.argv) > 1 else "results/small.json").read())))
