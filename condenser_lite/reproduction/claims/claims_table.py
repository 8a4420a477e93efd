"""The claims at a glance: one row per claim for the introduction and chapter 8
(``headline_rows``), each with the papers' number, ours (the test that tells most about its
verdict), the verdict with its weak mark and BH q, and a link to the page that argues it
(``where_link``); and ``findings_markdown``, the one table every page shows them in.

Nothing here changes a verdict: the rows read the scorecard's claims and the tests behind them
(``multiplicity.py``). Explained in chapter 8 (``notebooks/08_scorecard.md``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from .multiplicity import (WEAK_MARK, WEAK_P, Comparison, comparison_key, deciding_tests, family_of, held_among,
                           rejudge, said, weak_among)
from ..evidence.papers import paper_headline
from ..configuration.registry import CLAIM, MODIFIED_ARM
from ..evidence.results import judged_seeds
from ..statistics.rules import ALPHA_ONE_SIDED
from ..statistics.wording import fixed

# Where each claim is argued: (doc, label or None, its name in prose)
WHERE = {
    "C0": ("notebooks/02_reliance", None, "page 2b"), "C0m": ("notebooks/10_mechanism", None, "the mechanism page"),
    **{c: ("notebooks/04_finetune", None, "chapter 4") for c in ("C1", "C1m", "C2", "C3", "C4", "C4m")},
    **{c: ("notebooks/05_attention_entropy", None, "chapter 5") for c in ("C5", "C5m")},
    **{c: ("notebooks/06_loss_curves", None, "chapter 6") for c in ("C6", "C6m", "C8", "C8m")},
    **{c: ("notebooks/07_sentence_similarity", None, "chapter 7") for c in ("C7", "C7m")},
    "Am": ("notebooks/12_how_sure", "sure-am", "chapter 12"),
}


def _reliance_text(claim: Mapping, seeds: Sequence) -> str:
    r = claim["ours"].get("reliance") or []
    if not r:
        return "not measured"
    where = f"seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    top = max(abs(x) for x in r)
    level = f"at most {top:.4f}" if top < 0.05 else f"{min(r):.2f}-{max(r):.2f}"
    return f"reliance {level} on {where} (the rule asks 0.2 on every seed)"


def _headline_test(tests: Sequence[Comparison], cid: str) -> tuple[Comparison | None, bool]:
    """The test among ``tests`` that tells most about claim ``cid``'s verdict, and whether it reads
    reversed: the weakest held test (largest p) where some hold; else the reversed test with the
    smallest reverse p where some are reversed; else the test nearest to holding (smallest p);
    None for C0 and C0m. Chapter 8."""
    held = held_among(tests, cid)
    if held:
        return max(held, key=lambda t: t.numbers["p"]), False
    own = [t for t in tests if t.claim == cid]
    if not own:
        return None, False
    reversed_ = [t for t in own if t.numbers["verdict"] in ("worse", "reversed")]
    if reversed_:
        return min(reversed_, key=lambda t: t.numbers["p_reversed"]), True
    return min(own, key=lambda t: t.numbers["p"]), False


def headline_rows(results: Mapping, alpha: float = ALPHA_ONE_SIDED) -> list[dict]:
    """One row per claim of ``results["claims"]`` (C0-C8, C0m-C8m, Am, in the scorecard's order),
    for the introduction's table and chapter 8. Each row: ``id``; ``claim`` (the registry's title,
    plain words); ``paper`` (``paper_headline``); ``ours`` (the ``_headline_test`` in words: its
    difference with its p and MDD, and how many of the claim's tests hold; for C0 and C0m the
    reliance); ``diff``, ``p``, ``mdd`` of that test (None for C0, C0m); ``held`` and ``tests``
    (counts); ``verdict``; ``weak`` (a held test is weak, ``is_weak``) and ``weak_text`` (which);
    ``q`` and ``holm`` (the headline test's BH q and Holm p over the family, its reverse ones where
    it reads reversed; None for C0, C0m); ``verdict_bh`` and ``verdict_holm`` (``rejudge``);
    ``reversed`` (the headline test reads reversed); ``undetected`` (every test of the claim below
    its MDD); ``doc``, ``anchor`` and ``where`` (the page that argues the claim, ``WHERE``).
    Chapter 8."""
    tests = deciding_tests(results)
    rows_by_test = family_of(tests)
    weak = weak_among(tests, results["claims"])
    bh, hm = rejudge(results, "bh", alpha, tests), rejudge(results, "holm", alpha, tests)
    rows = []
    for claim in results["claims"]:
        cid = claim["id"]
        test, reverse = _headline_test(tests, cid)
        own, held = [t for t in tests if t.claim == cid], held_among(tests, cid)
        row = {"id": cid, "claim": CLAIM[cid].title if cid in CLAIM else claim["statement"],
               "paper": paper_headline(cid), "verdict": claim["status"], "held": len(held), "tests": len(own),
               "weak": cid in weak, "weak_text": "; ".join(said(t) for t in weak.get(cid, [])) or None,
               "verdict_bh": bh[cid], "verdict_holm": hm[cid],
               "undetected": bool(own) and all(abs(t.numbers["diff"]) < t.numbers["mdd"] for t in own)}
        if test is None:  # C0, C0m: the reliance rule, no test
            seeds = judged_seeds(results, MODIFIED_ARM if cid.endswith("m") else "condenser")
            row.update({"ours": _reliance_text(claim, seeds), "diff": None, "p": None, "mdd": None, "q": None,
                        "holm": None, "reversed": False})
        else:
            c, r = test.numbers, rows_by_test[comparison_key(test.numbers)]
            turned = sum(t.numbers["verdict"] in ("worse", "reversed") for t in own)
            count = (f"{'reversed' if reverse else 'holds'} in {turned if reverse else len(held)} of {len(own)} "
                     f"test{'s' * (len(own) > 1)}")
            if claim["ours"].get("narrowing") is False and len(held) == len(own):
                count += "; the gap does not narrow with more data"
            row.update({"ours": f"{said(test, reverse)}; {count}", "diff": c["diff"],
                        "p": c["p_reversed"] if reverse else c["p"], "mdd": c["mdd"],
                        "q": r["q_reversed"] if reverse else r["q"],
                        "holm": r["holm_reversed"] if reverse else r["holm"], "reversed": reverse})
        doc, anchor, name = WHERE.get(cid, ("notebooks/08_scorecard", None, "chapter 8"))
        row.update({"doc": doc, "anchor": anchor, "where": name})
        rows.append(row)
    return rows


def where_link(row: Mapping, text: str | None = None) -> str:
    """A MyST link to the page that argues ``row``'s claim, resolved from any page of the book:
    its label where the row has one, else the page; ``text`` defaults to the page's name.
    Chapter 8 and the introduction."""
    text = row["where"] if text is None else text
    if row["anchor"]:
        return f"{{ref}}`{text} <{row['anchor']}>`"
    return f"{{doc}}`{text} </{row['doc']}>`"


def q_text(q: float | None) -> str:
    """A q-value in a table: three decimals, ``< 0.001`` below that, a dash where there is none.
    Chapter 8."""
    return "–" if q is None else "<\u00a00.001" if q < 0.0005 else f"{q:.3f}"  # kept on one line


def difference_text(row: Mapping) -> str:
    """The size of what a findings row found: its headline test's difference, signed, with the MDD
    it is read against in brackets; a dash for C0 and C0m, which rest on no test. Chapter 8."""
    return "–" if row["diff"] is None else f"{fixed(row['diff'], signed=True)}\u00a0({row['mdd']:.3f})"


NOT_DETECTED = "not detected"  # a claim's test with no call, below what it could detect


def verdict_phrase(row: Mapping, verdict: str, reversed_: bool | None = None) -> str:
    """``verdict`` (the rules', or a rejudged one) said for ``row``'s claim as the findings tables
    say it: "not reproduced: the other way" where its reverse test stands (``reversed_``: by the
    rules, ``row["reversed"]``, unless given), else "not detected (MDD m)" for a claim not
    reproduced each of whose tests found a difference below its MDD (m: the shown test's).
    Chapter 8."""
    if not verdict.startswith("not reproduced") or row["mdd"] is None:
        return verdict
    if row["reversed"] if reversed_ is None else reversed_:
        return "not reproduced: the other way"
    if row["undetected"]:
        return f"{NOT_DETECTED} (MDD {row['mdd']:.3f})"
    return verdict


def verdict_text(row: Mapping) -> str:
    """A claim's verdict as every findings table says it (``verdict_phrase``), with ``WEAK_MARK``
    where weak and what Benjamini-Hochberg would make of it where that differs. Chapter 8
    explains each part."""
    text = verdict_phrase(row, row["verdict"]) + (f" {WEAK_MARK}" if row["weak"] else "")
    bh_reversed = row["reversed"] and row["q"] < ALPHA_ONE_SIDED
    if row["verdict_bh"] != row["verdict"] or row["reversed"] and not bh_reversed:  # or the reversal falls
        text += f"; under BH: {verdict_phrase(row, row['verdict_bh'], bh_reversed)}"
    return text


def rejudged_markdown(results: Mapping) -> str:
    """Each claim's verdict by the rules, under BH and under Holm, as MyST Markdown, every one
    said as the findings tables say it (``verdict_phrase``): a reversal only where the reverse
    test's adjusted value stands, the weak mark where the verdict and its weak test both stand.
    Chapter 12."""
    lines = ["| claim | the rules' verdict | under BH at 5% | under Holm at 5% |", "|---|---|---|---|"]
    for r in headline_rows(results):
        stands = {k: r[k] is not None and r[k] < ALPHA_ONE_SIDED for k in ("q", "holm")}
        cols = [(r["verdict"], r["reversed"]), (r["verdict_bh"], r["reversed"] and stands["q"]),
                (r["verdict_holm"], r["reversed"] and stands["holm"])]
        weak = [r["weak"], r["weak"] and stands["q"], r["weak"] and stands["holm"]]  # its weak test stands
        said = [verdict_phrase(r, v, rev) + (f" {WEAK_MARK}" if w and v == r["verdict"] else "")
                for (v, rev), w in zip(cols, weak)]
        lines.append(f"| {r['claim']} ({r['id']}) | " + " | ".join(said) + " |")
    return "\n".join(lines)


def verdict_words(results: Mapping) -> dict[str, str]:
    """Each claim's verdict as the findings tables say it (``verdict_text``), by claim id: what a
    page's prose pastes, so that a verdict reads the same in a sentence as in every table (its
    mark, "not detected (MDD m)", "the other way", its BH note). Chapter 8."""
    return {r["id"]: verdict_text(r) for r in headline_rows(results)}


KEY = ("Verdict words: reproduced, partly reproduced (some of the claim's tests hold), not reproduced, or "
       f"{NOT_DETECTED}. {NOT_DETECTED.capitalize()} (MDD …) means no call, and every difference the claim's tests "
       f"found is below the smallest each could detect, its {{term}}`MDD` (in brackets, the test shown's). A {WEAK_MARK} marks a weak verdict: a test that holds for it has "
       f"{WEAK_P[0]:g} ≤ p < {WEAK_P[1]:g} and a difference below its MDD (a call the other way carries no mark). The other way means that the claim's "
       "test holds in the reverse direction. The q is the {term}`BH q-value` of the test shown, over every distinct "
       "test behind the verdicts (for a row read the other way, of its reverse test). The difference is the test "
       "shown's, in its metric, with its MDD in brackets. Holds in k of n tests counts "
       "the claim's comparisons that call its direction. A {term}`reverse p` tests the other direction.")


# The codes the claims' numbers use: some said in words, the others linked to the glossary
# (their entry there) where a table first uses them
IN_WORDS = ((re.compile(r"\bn(\d+)@k(\d+)\b"), r"nb-recall (n = \1, k = \2)"),
            (re.compile(r"\bw/o HN\b"), "without hard negatives"), (re.compile(r"\bwith HN\b"), "with hard negatives"))
TERMS = {"MRR@10": "MRR@10", "nDCG@10": "nDCG@10", "R@1000": "R@1000", "R@100": "R@100", "RR@10": "RR@10",
         "Top-20": "Top-20", "round 1": "round 1, round 2", "round 2": "round 1, round 2", "nb-recall": "nb-recall",
         "MDD": "MDD", "reverse p": "reverse p"}
_TERM = re.compile("(?<![\\w@-])(" + "|".join(re.escape(k) for k in sorted(TERMS, key=len, reverse=True)) + ")(?![\\w@])")


def glossed(text: str, seen: set[str], glossary: str | None = None) -> str:
    """``text`` with its codes in words (``IN_WORDS``) and each glossary term (``TERMS``) linked
    where it is first used, ``seen`` holding the entries already linked: as MyST roles, or as
    HTML links to ``glossary`` (the glossary page's address from the page) in HTML. Chapter 8."""
    for pattern, words in IN_WORDS:
        text = pattern.sub(words, text)

    def link(m: re.Match) -> str:
        word, entry = m.group(1), TERMS[m.group(1)]
        if entry in seen:
            return word
        seen.add(entry)
        if glossary is None:
            return f"{{term}}`{word} <{entry}>`" if word != entry else f"{{term}}`{word}`"
        anchor = "term-" + re.sub(r"[^A-Za-z0-9]+", "-", entry).strip("-")
        return f'<a class="reference internal" href="{glossary}#{anchor}">{word}</a>'

    return _TERM.sub(link, text)


def findings_markdown(results: Mapping, ids: Sequence[str] | None = None, papers: bool = True,
                      key: bool = True, links: bool = True, here: str | None = None) -> str:
    """The book's one findings table, as MyST Markdown: per claim of ``ids`` (all, by default)
    its words with its code after, linked to the page that argues it; the verdict
    (``verdict_text``); the size of what it found (``difference_text``); the q. The numbers behind
    each (the papers' where ``papers``, and ours, the ``_headline_test``) fold out below it.
    ``key`` puts ``KEY`` above the table, folded. The introduction, chapters 4-7 and chapter 8
    show their findings with it. ``here``: the page the table stands on
    (``notebooks/04_finetune``), whose own claims are not linked to its top."""
    rows = [r for r in headline_rows(results) if ids is None or r["id"] in ids]
    cell = lambda c: c.replace("|", "\\|")  # noqa: E731
    lines = [":::{dropdown} How to read this table", "", KEY, "", ":::", ""] if key else []
    lines += ["| claim | verdict | difference (MDD) | q |", "|---|---|---|---|"]
    for r in rows:
        code = where_link(r, r["id"]) if links and not (r["doc"] == here and not r["anchor"]) else r["id"]
        lines.append(f"| {cell(r['claim'])} ({code}) | {cell(verdict_text(r))} | {difference_text(r)} "
                     f"| {q_text(r['q'])} |")
    head = ["claim", *(["the papers"] if papers else []), "ours"]
    lines += ["", ":::{dropdown} The numbers behind these verdicts", "", "| " + " | ".join(head) + " |",
              "|" + "---|" * len(head)]
    seen = {"MDD", "reverse p"} if key else set()  # the key above links these
    for r in rows:
        said = [*([r["paper"]] if papers else []), r["ours"]]
        lines.append("| " + " | ".join([r["id"], *(glossed(cell(s), seen) for s in said)]) + " |")
    lines += ["", ":::"]
    return "\n".join(lines)
