"""The claims at a glance, with what the verdicts rest on: the one-sided tests behind each
verdict, how many there are and what their number does to them (Benjamini-Hochberg q-values,
Holm), the weak-verdict mark, the verdicts on the seeds a choice never saw, what each control of
Am recovers, and one row per claim for the introduction (``headline_rows``,
``headline_markdown``).

Nothing here changes a verdict. The pre-registered rules (``rules.py``, judged in
``scorecard.py``) test each comparison at 5% on its own; this module reports beside them.
Explained in chapter 8 (``notebooks/08_scorecard.md``, "How many tests, and how sure").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
from scipy import stats as scipy_stats

from .registry import CLAIM, MODIFIED_ARM, label
from .rules import (
    ALPHA_ONE_SIDED,
    NOT_ATTRIBUTABLE,
    NOT_ATTRIBUTABLE_UNGAUGED,
    NOT_DETECTABLE,
    NOT_SIGNIFICANT,
    ONE_SEED,
    claim_status,
    holds,
    judged_seeds,
    power_claim_status,
)
from .scorecard import CONTROL_WORDS, PAPER_RESULTS, PaperFinding, comparison_paths, comparisons, p_text, read_evidence

WEAK_P = (0.02, 0.05)  # a "better" at 0.02 <= p < 0.05 whose difference is below its MDD is marked weak
WEAK_MARK = "†"
POWER_CLAIMS = ("C1", "C7")  # claims whose comparisons know the paper's effect (power-aware verdicts)


def base_claim(cid: str) -> str:
    """The paper's claim a claim asks (``"C4m"`` -> ``"C4"``; ``"Am"`` and ``"C4"`` as they are).
    Chapter 8."""
    return cid[:-1] if cid.endswith("m") and cid[:-1] in CLAIM else cid


class Comparison(NamedTuple):
    """One one-sided test a claim's verdict rests on: the ``claim``, the ``path`` to it in the
    claim's ``ours``, its ``setting`` and two sides in words (``a`` the side the claim favours),
    and its ``numbers`` as the rules made them (``rules.unit_test``'s dict: ``p``, ``p_reversed``,
    ``diff``, ``mdd``, ``per_seed``, ``verdict``)."""

    claim: str
    path: tuple
    setting: str
    a: str
    b: str
    numbers: dict


def decides(cid: str, path: tuple, recall: str) -> bool:
    """Whether the comparison at ``path`` of claim ``cid`` is one its verdict rests on (as
    ``scorecard``'s checks judge them): C2 by recall only (``recall``: its metric); C4 and C4m by
    the pre-trained arms, not BERT's round 2 (shown beside them); Am by its gains and by the
    modified Condenser against each control, not by the controls' own gains (shown, not judged);
    C0 and C0m rest on no test (the reliance rule). Chapter 8."""
    base = base_claim(cid)
    if base == "C0":
        return False
    if base == "C2":
        return path[-1] == recall
    if base == "C4":
        return path[-1] != "bert"
    if cid == "Am":
        return path[2] != "control_vs_bert_cont"
    return True


def deciding_tests(results: Mapping) -> list[Comparison]:
    """Every test the verdicts of ``results["claims"]`` rest on (``decides``), claim by claim in
    the scorecard's order. A test two claims share (C1m's against BERT-continued is also Am's
    gain) appears once for each. Chapter 8."""
    recall = read_evidence(results).recall
    out = []
    for claim in results["claims"]:
        paths = comparison_paths(claim.get("ours", {}))
        for (path, numbers), (setting, a, b, _) in zip(paths, comparisons(claim)):
            if decides(claim["id"], path, recall) and numbers.get("p") is not None:
                out.append(Comparison(claim["id"], path, setting, a, b, numbers))
    return out


def _setting(t: Comparison) -> str:
    # Am's setting without "against the control" / "the gain": its two sides say which
    return t.path[1] if t.claim == "Am" else t.setting


def _identity(numbers: Mapping) -> tuple:
    # one test, however many claims list it: the same two means and the same per-seed differences
    return (numbers["a"], numbers["b"], numbers["diff"], tuple(sorted((numbers.get("per_seed") or {}).items())))


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (the k-th smallest times m - k + 1, never below the one
    before, at most 1): calling every test with an adjusted p below 5% keeps the chance of any
    false call at most 5%. Chapter 8.

    >>> holm([0.01, 0.04, 0.03]).round(2).tolist()
    [0.03, 0.06, 0.06]
    """
    p = np.asarray(p, dtype=float)
    order = np.argsort(p, kind="stable")
    scaled = p[order] * (len(p) - np.arange(len(p)))
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return adjusted


def _family(tests: Sequence[Comparison]) -> dict[tuple, dict]:
    """The distinct tests among ``tests`` by their numbers (``_identity``), each a ``family`` row."""
    rows: dict[tuple, dict] = {}
    for t in tests:
        key = _identity(t.numbers)
        if key in rows:
            rows[key]["claims"].append(t.claim)
            continue
        c = t.numbers
        rows[key] = {"claims": [t.claim], "setting": _setting(t), "a": t.a, "b": t.b, "diff": c["diff"],
                     "mdd": c.get("mdd"), "p": c["p"], "p_reversed": c["p_reversed"], "verdict": c["verdict"],
                     "weak": is_weak(c), "per_seed": c.get("per_seed")}
    if rows:
        values = list(rows.values())
        for key, p in (("q", "p"), ("q_reversed", "p_reversed")):
            for r, x in zip(values, scipy_stats.false_discovery_control([r[p] for r in values], method="bh")):
                r[key] = float(x)
        for key, p in (("holm", "p"), ("holm_reversed", "p_reversed")):
            for r, x in zip(values, holm([r[p] for r in values])):
                r[key] = float(x)
    return rows


def family(results: Mapping) -> list[dict]:
    """The distinct one-sided tests behind the verdicts (``deciding_tests``, a test two claims
    share counted once), a dict each: ``claims`` (every claim that rests on it), ``setting``,
    ``a``, ``b``, ``diff``, ``mdd``, ``p`` and ``p_reversed`` (the test the other way round),
    ``verdict``, ``weak`` (``is_weak``), the Benjamini-Hochberg q-values over the family (``q``:
    ``scipy.stats.false_discovery_control`` of the stored p; ``q_reversed`` over the reverse
    tests, a family of their own) and Holm's adjusted p (``holm``, ``holm_reversed``). Chapter 8."""
    return list(_family(deciding_tests(results)).values())


def multiplicity(results: Mapping, alpha: float = ALPHA_ONE_SIDED) -> dict:
    """The family in numbers: ``tests`` (distinct tests), ``listed`` (tests as the claims list
    them, a shared one once per claim), ``expected_false`` (the "better" calls expected if no arm
    differed from any other: tests x ``alpha``; as many "worse" calls again), ``significant``
    (p < ``alpha``), ``bh`` and ``holm`` (tests still called better when the FDR, or the chance of
    any false call, is held at ``alpha``), the reverse calls likewise (``reversed``,
    ``reversed_bh``, ``reversed_holm``), and each claim's verdict as the rules give it
    (``verdicts``) and with the calls of BH (``verdicts_bh``) and Holm (``verdicts_holm``).
    Chapter 8."""
    tests = deciding_tests(results)
    rows = list(_family(tests).values())

    def count(key):
        return sum(r[key] < alpha for r in rows)

    return {"tests": len(rows), "listed": len(tests), "alpha": alpha, "expected_false": len(rows) * alpha,
            "significant": count("p"), "bh": count("q"), "holm": count("holm"),
            "reversed": count("p_reversed"), "reversed_bh": count("q_reversed"),
            "reversed_holm": count("holm_reversed"),
            "verdicts": {c["id"]: c["status"] for c in results["claims"]},
            "verdicts_bh": rejudge(results, "bh", alpha, tests), "verdicts_holm": rejudge(results, "holm", alpha, tests)}


# ---- the verdicts again, with other calls --------------------------------------------------------


def _calls(tests: Sequence[Comparison], method: str | None, alpha: float) -> Callable[[Mapping], str]:
    """The call of each test by ``method``: None, each test at ``alpha`` on its own (the rules');
    ``"bh"``, better where its q < ``alpha``, worse where its reverse q is; ``"holm"`` likewise
    with Holm's adjusted p."""
    if method is None:
        return lambda c: ("better" if c["p"] < alpha else "worse" if c["p_reversed"] < alpha else NOT_SIGNIFICANT)
    if method not in ("bh", "holm"):
        raise ValueError(f"method {method!r}: choose None (each test on its own), 'bh' or 'holm'")
    forward, backward = ("q", "q_reversed") if method == "bh" else ("holm", "holm_reversed")
    rows = _family(tests)

    def call(c: Mapping) -> str:
        r = rows[_identity(c)]
        return "better" if r[forward] < alpha else "worse" if r[backward] < alpha else NOT_SIGNIFICANT

    return call


def _with_call(c: Mapping, call: str, power: bool) -> dict:
    """Comparison ``c`` with the verdict ``call`` gives it; a power-aware one (C1, C7) reads it
    as the rules do: reproduced, reversed, not reproduced (the paper's effect at least the MDD)
    or not detectable at this power."""
    if power and c.get("expected") is not None:
        call = {"better": "reproduced", "worse": "reversed"}.get(call) or (
            "not reproduced" if c["expected"] >= c["mdd"] else NOT_DETECTABLE)
    return {**c, "verdict": call}


def claim_verdict(claim: Mapping, call: Callable[[Mapping], str]) -> str:
    """``claim``'s status from its stored comparisons with each test called by ``call`` (a
    comparison's dict -> "better", "worse" or "not significant"), by the status rules the
    scorecard applies (``rules.claim_status``, ``rules.power_claim_status``, C1's narrowing, C3's
    gate, Am's settings). C0 and C0m rest on no test and keep their status. Chapter 8."""
    cid, ours = claim["id"], claim["ours"]
    base = base_claim(cid)
    if base == "C0" or claim["status"] in ("not measured", ONE_SEED):
        return claim["status"]
    power = base in POWER_CLAIMS

    def judged(c):
        return _with_call(c, call(c), power) if c and c.get("p") is not None else c

    if power:
        per_size = {s: {b: judged(c) for b, c in by.items()} for s, by in ours["by_size"].items()}
        records = [c for by in per_size.values() for c in by.values()]
        if base == "C7":
            return power_claim_status(records)
        small = min(per_size, key=int)
        beats_small = [holds(c) for c in per_size[small].values()]
        ahead = ours.get("narrowing") if beats_small and all(b is True for b in beats_small) else None
        return power_claim_status(records, [ahead])
    if base == "C2":
        recall = next(m for m in ours["round1"] if m.startswith("R@"))
        return claim_status([holds(judged(ours[k][recall])) for k in ("round1", "round2", "vs_target_corpus_mlm")])
    if base == "C3":
        parts = {}
        for term in ("mlm_term", "contrastive_term"):
            cs = [holds(judged(c)) for c in ours[term].values() if c]
            known = [p for p in cs if p != ONE_SEED]
            parts[term] = None if not cs else (any(known) if known else ONE_SEED)
        status = claim_status(list(parts.values()))
        head = ours.get("cocondenser_head_relies")
        if parts["mlm_term"] is True and head is not True:
            status = NOT_ATTRIBUTABLE if head is False else NOT_ATTRIBUTABLE_UNGAUGED
        return status
    if base == "C4":
        return claim_status([holds(judged(c)) for a, c in ours["round2_vs_round1"].items() if a != "bert"])
    if cid == "Am":
        parts = [all(holds(judged(st["vs_control"].get(c))) is True for c in CONTROL_WORDS)
                 for st in ours["settings"].values() if holds(judged(st["gain"])) is True]
        return claim_status(parts) if parts else "not measured"  # no gain to attribute: as the scorecard says
    return claim_status([holds(judged(c)) for _, c in comparison_paths(ours)])


def rejudge(results: Mapping, method: str | None = None, alpha: float = ALPHA_ONE_SIDED,
            tests: Sequence[Comparison] | None = None) -> dict[str, str]:
    """Each claim's verdict with the tests called by ``method``: None, each at ``alpha`` on its
    own (this gives the stored verdicts back); ``"bh"``, with the Benjamini-Hochberg q-values over
    the family (``family``); ``"holm"``, with Holm's. ``tests``: ``deciding_tests(results)`` if
    already at hand. A report beside the pre-registered verdicts, not a change of them. Chapter 8."""
    call = _calls(deciding_tests(results) if tests is None else tests, method, alpha)
    return {c["id"]: claim_verdict(c, call) for c in results["claims"]}


# ---- weak verdicts ---------------------------------------------------------------------------------


def is_weak(c: Mapping | None) -> bool:
    """A comparison called better (or reproduced) at 0.02 <= p < 0.05 (``WEAK_P``) whose
    difference is below its minimum detectable difference: significant, but by less than the
    test could promise to find. Chapter 8.

    >>> is_weak({"verdict": "better", "p": 0.03, "diff": 0.011, "mdd": 0.013})
    True
    >>> is_weak({"verdict": "better", "p": 0.018, "diff": 0.011, "mdd": 0.013})
    False
    """
    if not c or c.get("p") is None or c.get("mdd") is None:
        return False
    return c["verdict"] in ("better", "reproduced") and WEAK_P[0] <= c["p"] < WEAK_P[1] and c["diff"] < c["mdd"]


def _held(tests: Sequence[Comparison], cid: str) -> list[Comparison]:
    held = [t for t in tests if t.claim == cid and holds(t.numbers) is True]
    if cid == "Am":  # only the settings with a gain to attribute count
        gained = {t.path[1] for t in held if t.path[2] == "gain"}
        held = [t for t in held if t.path[1] in gained]
    return held


def held_tests(results: Mapping, cid: str) -> list[Comparison]:
    """The tests claim ``cid``'s verdict counts as holding: its deciding tests called better (or
    reproduced); for Am only in the settings where it has a gain to attribute. Chapter 8."""
    return _held(deciding_tests(results), cid)


def _weak(tests: Sequence[Comparison], claims: Sequence[Mapping]) -> dict[str, list[Comparison]]:
    out = {c["id"]: [t for t in _held(tests, c["id"]) if is_weak(t.numbers)] for c in claims}
    return {cid: weak for cid, weak in out.items() if weak}


def weak_tests(results: Mapping) -> dict[str, list[Comparison]]:
    """Per claim, the held tests that are weak (``is_weak``); a claim with none is left out: its
    verdict carries no mark. Chapter 8."""
    return _weak(deciding_tests(results), results["claims"])


def said(t: Comparison, reverse: bool = False) -> str:
    """One test in words: its setting, the two sides, the difference, its p (``reverse``: the
    reverse test's) and the MDD. Chapter 8."""
    c = t.numbers
    where = f"{_setting(t)}: " if _setting(t) else ""
    p = p_text(c["p_reversed"] if reverse else c["p"])
    return f"{where}{t.a} vs {t.b} {c['diff']:+.3f} ({'reverse ' if reverse else ''}{p}, MDD {c['mdd']:.3f})"


# ---- the seeds a choice never saw, and the controls of Am ----------------------------------------


def on_seeds(c: Mapping, seeds: Sequence) -> dict:
    """Comparison ``c`` again on some pre-training ``seeds`` only: the one-sided paired t-test of
    its per-seed differences (``seeds``, ``n``, ``diff``, ``p``). Chapter 8."""
    d = np.asarray([c["per_seed"][str(s)] for s in seeds], dtype=float)
    p = float(scipy_stats.ttest_1samp(d, 0.0, alternative="greater").pvalue)
    return {"seeds": [int(s) for s in seeds], "n": len(d), "diff": float(d.mean()), "p": p}


def unseen_seed_tests(results: Mapping, claims: Sequence[str] = ("C1m", "C7m", "Am"),
                      seeds: Sequence | None = None) -> list[dict]:
    """Each test the verdicts of ``claims`` rest on, again on the pre-training ``seeds`` the
    choice of the modified Condenser never saw (default: ``rules.judged_seeds``, 44-46 in the
    committed run), each test once (Am's gains are C1m's and C7m's): ``claim``, ``setting``,
    ``a``, ``b``, the p over every seed (``p_all``) and over those seeds (``seeds``, ``n``,
    ``diff``, ``p``). Chapter 8."""
    seeds = list(seeds) if seeds is not None else judged_seeds(results, MODIFIED_ARM)
    out, seen = [], set()
    for t in deciding_tests(results):
        if t.claim not in claims or _identity(t.numbers) in seen:
            continue
        seen.add(_identity(t.numbers))
        out.append({"claim": t.claim, "setting": _setting(t), "a": t.a, "b": t.b, "p_all": t.numbers["p"],
                    **on_seeds(t.numbers, seeds)})
    return out


def control_shares(results: Mapping) -> list[dict]:
    """Am's controls set against the gain they were built to explain: per setting where the
    modified Condenser is ahead of BERT-continued, each control (``arm``; ``control``, its label)
    with its own difference from BERT-continued (``own``), its ``share`` of the modified
    Condenser's gain (``gain``, ``gain_p``), its one-sided ``p``, ``mdd`` and ``own_verdict``, and
    the modified Condenser against that control (``beaten``, ``beaten_p``, ``beaten_mdd``,
    ``beaten_per_seed``). Chapter 8."""
    am = next(c for c in results["claims"] if c["id"] == "Am")
    rows = []
    for setting, st in am["ours"]["settings"].items():
        gain = st["gain"]
        if not gain or gain["diff"] <= 0:
            continue
        for ctl, own in st["control_vs_bert_cont"].items():
            beaten = st["vs_control"][ctl]
            rows.append({"setting": setting, "arm": ctl, "control": label(ctl), "gain": gain["diff"], "gain_p": gain["p"],
                         "own": own["diff"], "share": own["diff"] / gain["diff"], "p": own["p"], "mdd": own["mdd"],
                         "own_verdict": own["verdict"], "beaten": beaten["diff"], "beaten_p": beaten["p"],
                         "beaten_mdd": beaten["mdd"], "beaten_per_seed": beaten["per_seed"]})
    return rows


# ---- one row per claim ---------------------------------------------------------------------------

# Where each claim is argued: (doc, label or None, its name in prose)
WHERE = {
    "C0": ("notebooks/02_condenser", None, "chapter 2"), "C0m": ("notebooks/10_mechanism", None, "the mechanism page"),
    **{c: ("notebooks/04_finetune", None, "chapter 4") for c in ("C1", "C1m", "C2", "C3", "C4", "C4m")},
    **{c: ("notebooks/05_attention_entropy", None, "chapter 5") for c in ("C5", "C5m")},
    **{c: ("notebooks/06_loss_curves", None, "chapter 6") for c in ("C6", "C6m", "C8", "C8m")},
    **{c: ("notebooks/07_sentence_similarity", None, "chapter 7") for c in ("C7", "C7m")},
    "Am": ("notebooks/08_scorecard", "scorecard-am", "chapter 8"),
}

# The papers' headline numbers per claim: source, then (words, (row, column) claimed, (row, column) baseline)
PAPER_CELLS = {
    "C1": ("Condenser table 5", [("1K queries", ("Condenser", "1K"), ("BERT", "1K")),
                                 ("full", ("Condenser", "full"), ("BERT", "full"))]),
    "C2": ("coCondenser table 5", [("coCondenser vs Condenser", ("coCondenser w/o HN", "MRR@10"),
                                    ("Condenser w/o HN", "MRR@10"))]),
    "C3": ("coCondenser table 4", [("both terms vs contrastive only", ("+ MLM (coCondenser)", "MRR@10"),
                                    ("+ contrastive", "MRR@10"))]),
    "C4": ("coCondenser table 5", [("Condenser", ("Condenser", "with hard negatives"), ("Condenser", "without")),
                                   ("coCondenser", ("coCondenser", "with hard negatives"),
                                    ("coCondenser", "without"))]),
    "C7": ("Condenser table 1", [("500 pairs", ("Condenser", "500"), ("BERT", "500")),
                                 ("1K pairs", ("Condenser", "1K"), ("BERT", "1K"))]),
}


def paper_headline(cid: str) -> str:
    """The papers' number behind claim ``cid`` in a few words (from ``scorecard.PAPER_RESULTS``):
    published pairs, the figure of a claim made in one, or none for the modified Condenser's
    claims and Am, which are the book's. Chapter 8."""
    if cid == "Am":
        return "none: the book's own question"
    if cid != base_claim(cid):
        return f"none: the book's deviation (see {base_claim(cid)})"
    if cid in PAPER_CELLS:
        source, cells = PAPER_CELLS[cid]
        table = next(r for r in PAPER_RESULTS if r.claim == cid and r.source == source)

        def value(cell):
            row, column = cell
            return table.rows[row][table.columns.index(column)]

        pairs = "; ".join(f"{words} {value(a):.3f} vs {value(b):.3f}" for words, a, b in cells)
        return f"{pairs} ({table.measure}, {source})"
    finding = next(r for r in PAPER_RESULTS if r.claim == cid and isinstance(r, PaperFinding))
    return f"no number: {finding.source}"


def _reliance_text(claim: Mapping, seeds: Sequence) -> str:
    r = claim["ours"].get("reliance") or []
    if not r:
        return "not measured"
    where = f"seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    top = max(abs(x) for x in r)
    level = f"at most {top:.4f}" if top < 0.05 else f"{min(r):.2f}-{max(r):.2f}"
    return f"reliance {level} on {where} (the rule asks 0.2 on every seed)"


def _headline_test(tests: Sequence[Comparison], cid: str) -> tuple[Comparison | None, bool]:
    held = _held(tests, cid)
    if held:
        return max(held, key=lambda t: t.numbers["p"]), False
    own = [t for t in tests if t.claim == cid]
    if not own:
        return None, False
    reversed_ = [t for t in own if t.numbers["verdict"] in ("worse", "reversed")]
    if reversed_:
        return min(reversed_, key=lambda t: t.numbers["p_reversed"]), True
    return min(own, key=lambda t: t.numbers["p"]), False


def headline_test(results: Mapping, cid: str) -> tuple[Comparison | None, bool]:
    """The test that tells most about claim ``cid``'s verdict, and whether it reads reversed: the
    weakest held test (largest p) where some hold; else the reversed test with the smallest
    reverse p where some are reversed; else the test nearest to holding (smallest p); None for
    C0 and C0m. Chapter 8."""
    return _headline_test(deciding_tests(results), cid)


def headline_rows(results: Mapping, alpha: float = ALPHA_ONE_SIDED) -> list[dict]:
    """One row per claim of ``results["claims"]`` (C0-C8, C0m-C8m, Am, in the scorecard's order),
    for the introduction's table and chapter 8. Each row: ``id``; ``claim`` (the registry's title,
    plain words); ``paper`` (``paper_headline``); ``ours`` (the ``headline_test`` in words: its
    difference with its p and MDD, and how many of the claim's tests hold; for C0 and C0m the
    reliance); ``diff``, ``p``, ``mdd`` of that test (None for C0, C0m); ``held`` and ``tests``
    (counts); ``verdict``; ``weak`` (a held test is weak, ``is_weak``) and ``weak_text`` (which);
    ``q`` (the headline test's BH q over the family, its reverse q where it reads reversed; None
    for C0, C0m); ``verdict_bh`` and ``verdict_holm`` (``rejudge``); ``doc``, ``anchor`` and
    ``where`` (the page that argues the claim, ``WHERE``). Chapter 8."""
    tests = deciding_tests(results)
    rows_by_test = _family(tests)
    weak = _weak(tests, results["claims"])
    bh, hm = rejudge(results, "bh", alpha, tests), rejudge(results, "holm", alpha, tests)
    rows = []
    for claim in results["claims"]:
        cid = claim["id"]
        test, reverse = _headline_test(tests, cid)
        own, held = [t for t in tests if t.claim == cid], _held(tests, cid)
        row = {"id": cid, "claim": CLAIM[cid].title if cid in CLAIM else claim["statement"],
               "paper": paper_headline(cid), "verdict": claim["status"], "held": len(held), "tests": len(own),
               "weak": cid in weak, "weak_text": "; ".join(said(t) for t in weak.get(cid, [])) or None,
               "verdict_bh": bh[cid], "verdict_holm": hm[cid]}
        if test is None:  # C0, C0m: the reliance rule, no test
            seeds = judged_seeds(results, MODIFIED_ARM if cid.endswith("m") else "condenser")
            row.update({"ours": _reliance_text(claim, seeds), "diff": None, "p": None, "mdd": None, "q": None})
        else:
            c, r = test.numbers, rows_by_test[_identity(test.numbers)]
            turned = sum(t.numbers["verdict"] in ("worse", "reversed") for t in own)
            count = (f"{'reversed' if reverse else 'holds'} in {turned if reverse else len(held)} of {len(own)} "
                     f"test{'s' * (len(own) > 1)}")
            if claim["ours"].get("narrowing") is False and len(held) == len(own):
                count += "; the gap does not narrow with more data"
            row.update({"ours": f"{said(test, reverse)}; {count}", "diff": c["diff"],
                        "p": c["p_reversed"] if reverse else c["p"], "mdd": c["mdd"],
                        "q": r["q_reversed"] if reverse else r["q"]})
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
    return "–" if q is None else "< 0.001" if q < 0.0005 else f"{q:.3f}"


def headline_markdown(results: Mapping, links: bool = True, alpha: float = ALPHA_ONE_SIDED) -> str:
    """``headline_rows`` as a compact Markdown table (the claim, the papers' number, ours, the
    verdict with ``WEAK_MARK`` where it is weak and, where BH would change it, what it would be,
    the BH q, where it is argued) with a note under it on the mark and the q. ``links``: the page
    as a MyST ``{doc}``/``{ref}`` role (for the book's pages), else its name. Chapter 8 and the
    introduction."""
    lines = ["| claim | the papers | ours | verdict | BH q | argued in |", "|---|---|---|---|---|---|"]
    for r in headline_rows(results, alpha):
        verdict = r["verdict"] + (f" {WEAK_MARK}" if r["weak"] else "")
        if r["verdict_bh"] != r["verdict"]:
            verdict += f" (under BH: {r['verdict_bh']})"
        cells = [f"**{r['id']}** {r['claim']}", r["paper"], r["ours"], verdict, q_text(r["q"]),
                 where_link(r) if links else r["where"]]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += ["", f"{WEAK_MARK} weak: a test the verdict rests on has {WEAK_P[0]:g} ≤ p < {WEAK_P[1]:g} and a "
              "difference below its MDD. BH q: the Benjamini-Hochberg q-value of the test shown in *ours*, over "
              "every distinct test behind the verdicts."]
    return "\n".join(lines)

