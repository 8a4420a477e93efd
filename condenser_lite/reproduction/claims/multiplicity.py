"""What the claims' verdicts rest on: the one-sided tests behind each verdict (``deciding_tests``),
how many there are and what their number does to them (Benjamini-Hochberg q-values, Holm:
``family``, ``multiplicity``, ``rejudge``), the weak-verdict mark (``is_weak``, ``weak_tests``),
the verdicts on the seeds a choice never saw (``unseen_seed_tests``) and what each control of Am
recovers (``control_shares``).

Nothing here changes a verdict. The pre-registered rules (``rules.py``, judged in
``scorecard.py``) test each comparison at 5% on its own; this module reports beside them.
Explained in chapter 12 (``notebooks/12_how_sure.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
from scipy import stats as scipy_stats

from .checks import (BERT_ARMS, Call, am_status, c1_status, c2_status, c3_status, c4_status, c5_status,
                     c7_status, c8_status, called, read_evidence)
from ..evidence.papers import base_claim
from ..configuration.registry import MODIFIED_ARM, label
from ..evidence.results import judged_seeds
from ..statistics.rules import ALPHA_ONE_SIDED, NOT_SIGNIFICANT, ONE_SEED, holds
from .scorecard import comparison_paths, comparisons
from ..statistics.wording import p_text

WEAK_P = (0.02, 0.05)  # a "better" at 0.02 <= p < 0.05 whose difference is below its MDD is marked weak
WEAK_MARK = "†"
STATUS_RULES = {"C1": c1_status, "C2": c2_status, "C3": c3_status, "C4": c4_status, "C5": c5_status,
                "C6": c5_status, "C7": c7_status, "C8": c8_status, "Am": am_status}  # checks.py's, by the paper's claim


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
    the pre-trained arms, not the BERT arms' round 2 (shown beside them); Am by its gains and by the
    modified Condenser against each control, not by the controls' own gains (shown, not judged);
    C0 and C0m rest on no test (the reliance rule). Chapter 12."""
    base = base_claim(cid)
    if base == "C0":
        return False
    if base == "C2":
        return path[-1] == recall
    if base == "C4":
        return path[-1] not in BERT_ARMS  # as checks.c4_status reads them
    if cid == "Am":
        return path[2] != "control_vs_bert_cont"
    return True


def deciding_tests(results: Mapping) -> list[Comparison]:
    """Every test the verdicts of ``results["claims"]`` rest on (``decides``), claim by claim in
    the scorecard's order. A test two claims share (C1m's against BERT-continued is also Am's
    gain) appears once for each. Chapter 12."""
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


def comparison_key(numbers: Mapping) -> tuple:
    """One test, however many claims list it: the same two means and the same per-seed differences.
    Chapter 12."""
    return (numbers["a"], numbers["b"], numbers["diff"], tuple(sorted((numbers.get("per_seed") or {}).items())))


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (the k-th smallest times m - k + 1, never below the one
    before, at most 1): calling every test with an adjusted p below 5% keeps the chance of any
    false call at most 5%. Chapter 12.

    >>> holm([0.01, 0.04, 0.03]).round(2).tolist()
    [0.03, 0.06, 0.06]
    """
    p = np.asarray(p, dtype=float)
    order = np.argsort(p, kind="stable")
    scaled = p[order] * (len(p) - np.arange(len(p)))
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return adjusted


def family_of(tests: Sequence[Comparison]) -> dict[tuple, dict]:
    """The distinct tests among ``tests`` by their numbers (``comparison_key``), each a ``family``
    row. Chapter 12."""
    rows: dict[tuple, dict] = {}
    for t in tests:
        key = comparison_key(t.numbers)
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
    tests, a family of their own) and Holm's adjusted p (``holm``, ``holm_reversed``). Chapter 12."""
    return list(family_of(deciding_tests(results)).values())


def multiplicity(results: Mapping, alpha: float = ALPHA_ONE_SIDED) -> dict:
    """The family in numbers: ``tests`` (distinct tests), ``listed`` (tests as the claims list
    them, a shared one once per claim), ``expected_false`` (the "better" calls expected if no arm
    differed from any other: tests x ``alpha``; as many "worse" calls again), ``significant``
    (p < ``alpha``), ``bh`` and ``holm`` (tests still called better when the FDR, or the chance of
    any false call, is held at ``alpha``), the reverse calls likewise (``reversed``,
    ``reversed_bh``, ``reversed_holm``), and each claim's verdict as the rules give it
    (``verdicts``) and with the calls of BH (``verdicts_bh``) and Holm (``verdicts_holm``).
    Chapter 12."""
    tests = deciding_tests(results)
    rows = list(family_of(tests).values())

    def count(key):
        return sum(r[key] < alpha for r in rows)

    return {"tests": len(rows), "listed": len(tests), "alpha": alpha, "expected_false": len(rows) * alpha,
            "significant": count("p"), "bh": count("q"), "holm": count("holm"),
            "reversed": count("p_reversed"), "reversed_bh": count("q_reversed"),
            "reversed_holm": count("holm_reversed"),
            "verdicts": {c["id"]: c["status"] for c in results["claims"]},
            "verdicts_bh": rejudge(results, "bh", alpha, tests), "verdicts_holm": rejudge(results, "holm", alpha, tests)}


# ---- the verdicts again, with other calls --------------------------------------------------------


def _calls(tests: Sequence[Comparison], method: str | None, alpha: float) -> Call:
    """The call of each test by ``method``: None, each test at ``alpha`` on its own (the rules');
    ``"bh"``, better where its q < ``alpha``, worse where its reverse q is; ``"holm"`` likewise
    with Holm's adjusted p."""
    if method is None:
        return lambda c: ("better" if c["p"] < alpha else "worse" if c["p_reversed"] < alpha else NOT_SIGNIFICANT)
    if method not in ("bh", "holm"):
        raise ValueError(f"method {method!r}: choose None (each test on its own), 'bh' or 'holm'")
    forward, backward = ("q", "q_reversed") if method == "bh" else ("holm", "holm_reversed")
    rows = family_of(tests)

    def call(c: Mapping) -> str:
        r = rows[comparison_key(c)]
        return "better" if r[forward] < alpha else "worse" if r[backward] < alpha else NOT_SIGNIFICANT

    return call


def claim_verdict(claim: Mapping, call: Callable[[Mapping], str]) -> str:
    """``claim``'s status from its stored comparisons with each test called by ``call`` (a
    comparison's dict -> "better", "worse" or "not significant"), by the status rule the
    scorecard applies (``STATUS_RULES``: ``checks.c1_status``... ``checks.am_status``). C0 and C0m
    rest on no test, and a claim not measured or on one seed has none to call: they keep their
    status. Chapter 12."""
    base = base_claim(claim["id"])
    if base == "C0" or claim["status"] in ("not measured", ONE_SEED):
        return claim["status"]
    return STATUS_RULES[base](claim["ours"], call)


def rejudge(results: Mapping, method: str | None = None, alpha: float = ALPHA_ONE_SIDED,
            tests: Sequence[Comparison] | None = None) -> dict[str, str]:
    """Each claim's verdict with the tests called by ``method``: None, each at ``alpha`` on its
    own (this gives the stored verdicts back); ``"bh"``, with the Benjamini-Hochberg q-values over
    the family (``family``); ``"holm"``, with Holm's. ``tests``: ``deciding_tests(results)`` if
    already at hand. A report beside the pre-registered verdicts, not a change of them. Chapter 12."""
    call = _calls(deciding_tests(results) if tests is None else tests, method, alpha)
    return {c["id"]: claim_verdict(c, call) for c in results["claims"]}


def am_settings(results: Mapping, method: str | None = None, alpha: float = ALPHA_ONE_SIDED) -> tuple[int, int]:
    """Am is judged only in the settings where the modified Condenser beats BERT-continued: how
    many of its settings have that gain with the tests called by ``method`` (as ``rejudge``), and
    how many it has. A stricter call can leave fewer settings to judge, and the verdict then rests
    on those alone. Chapter 12."""
    am = next((c for c in results["claims"] if c["id"] == "Am"), None)
    if am is None or "settings" not in am["ours"]:
        return 0, 0
    call = _calls(deciding_tests(results), method, alpha)
    gains = [st["gain"] for st in am["ours"]["settings"].values()]
    held = [c for c in gains if c and c.get("p") is not None and holds(called(c, call)) is True]
    return len(held), len(gains)


# ---- weak verdicts ---------------------------------------------------------------------------------


def is_weak(c: Mapping | None) -> bool:
    """A comparison called better (or reproduced) at 0.02 <= p < 0.05 (``WEAK_P``) whose
    difference is below its minimum detectable difference: significant, but by less than the
    test could promise to find. Chapter 12.

    >>> is_weak({"verdict": "better", "p": 0.03, "diff": 0.011, "mdd": 0.013})
    True
    >>> is_weak({"verdict": "better", "p": 0.018, "diff": 0.011, "mdd": 0.013})
    False
    """
    if not c or c.get("p") is None or c.get("mdd") is None:
        return False
    return c["verdict"] in ("better", "reproduced") and WEAK_P[0] <= c["p"] < WEAK_P[1] and c["diff"] < c["mdd"]


def held_among(tests: Sequence[Comparison], cid: str) -> list[Comparison]:
    """The tests among ``tests`` (``deciding_tests``) that claim ``cid``'s verdict counts as
    holding: called better (or reproduced); for Am only in the settings where it has a gain to
    attribute. Chapter 12."""
    held = [t for t in tests if t.claim == cid and holds(t.numbers) is True]
    if cid == "Am":  # only the settings with a gain to attribute count
        gained = {t.path[1] for t in held if t.path[2] == "gain"}
        held = [t for t in held if t.path[1] in gained]
    return held


def weak_among(tests: Sequence[Comparison], claims: Sequence[Mapping]) -> dict[str, list[Comparison]]:
    """``weak_tests`` among ``tests`` (``deciding_tests``), for ``claims``. Chapter 12."""
    out = {c["id"]: [t for t in held_among(tests, c["id"]) if is_weak(t.numbers)] for c in claims}
    return {cid: weak for cid, weak in out.items() if weak}


def weak_tests(results: Mapping) -> dict[str, list[Comparison]]:
    """Per claim, the held tests that are weak (``is_weak``); a claim with none is left out: its
    verdict carries no mark. Chapter 12."""
    return weak_among(deciding_tests(results), results["claims"])


def said(t: Comparison, reverse: bool = False) -> str:
    """One test in words: its setting, the two sides, the difference, its p (``reverse``: the
    reverse test's) and the MDD. Chapter 12."""
    c = t.numbers
    where = f"{_setting(t)}: " if _setting(t) else ""
    p = p_text(c["p_reversed"] if reverse else c["p"])
    return f"{where}{t.a} vs {t.b} {c['diff']:+.3f} ({'reverse ' if reverse else ''}{p}, MDD {c['mdd']:.3f})"


# ---- the seeds a choice never saw, and the controls of Am ----------------------------------------


def on_seeds(c: Mapping, seeds: Sequence) -> dict:
    """Comparison ``c`` again on some pre-training ``seeds`` only: the one-sided paired t-test of
    its per-seed differences (``seeds``, ``n``, ``diff``, ``p``). Chapter 12."""
    d = np.asarray([c["per_seed"][str(s)] for s in seeds], dtype=float)
    p = float(scipy_stats.ttest_1samp(d, 0.0, alternative="greater").pvalue)
    return {"seeds": [int(s) for s in seeds], "n": len(d), "diff": float(d.mean()), "p": p}


def unseen_seed_tests(results: Mapping, claims: Sequence[str] = ("C1m", "C7m", "Am"),
                      seeds: Sequence | None = None) -> list[dict]:
    """Each test the verdicts of ``claims`` rest on, again on the pre-training ``seeds`` the
    choice of the modified Condenser never saw (default: ``results.judged_seeds``, 44-46 in the
    committed run), each test once (Am's gains are C1m's and C7m's): ``claim``, ``setting``,
    ``a``, ``b``, the difference and p over every seed (``diff_all``, ``p_all``) and over those
    seeds (``seeds``, ``n``, ``diff``, ``p``). Chapter 12."""
    seeds = list(seeds) if seeds is not None else judged_seeds(results, MODIFIED_ARM)
    out, seen = [], set()
    for t in deciding_tests(results):
        if t.claim not in claims or comparison_key(t.numbers) in seen:
            continue
        seen.add(comparison_key(t.numbers))
        out.append({"claim": t.claim, "setting": _setting(t), "a": t.a, "b": t.b,
                    "diff_all": t.numbers["diff"], "p_all": t.numbers["p"],
                    **on_seeds(t.numbers, seeds)})
    return out


def control_shares(results: Mapping) -> list[dict]:
    """Am's controls set against the gain they were built to explain: per setting where the
    modified Condenser is ahead of BERT-continued, each control (``arm``; ``control``, its label)
    with its own difference from BERT-continued (``own``), its ``share`` of the modified
    Condenser's gain (``gain``, ``gain_p``), its one-sided ``p``, ``mdd`` and ``own_verdict``, and
    the modified Condenser against that control (``beaten``, ``beaten_p``, ``beaten_mdd``,
    ``beaten_per_seed``). Chapter 12."""
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

