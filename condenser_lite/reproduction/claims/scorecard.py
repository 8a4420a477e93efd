"""The scorecard: the mechanism check C0, the papers' claims C1-C8 (and C0m-C8m and Am, the same
claims asked of a modified Condenser), each judged by the rules of rules.py.

``scorecard(results)`` gives one verdict per claim (``rules.STATUSES``), judging each claim of
the registry by its ``CLAIM_CHECKS`` entry (check in ``checks.py``), the papers' numbers
(``papers.py``) beside ours; ``claim_rows`` and ``format_scorecard`` show them. Explained in
chapter 8 (``notebooks/08_scorecard.md``) and chapters 2 and 4-7, each of which checks some claims.

The rules are the pre-registered ones (commit ``PRE_REGISTRATION_COMMIT``, before the runs they
judge): C0 by the [CLS] reliance (``cls_reliance``, ``c0_rule``), C1 and C7 by a verdict that
knows its power ("reproduced", "reversed", "not reproduced", "not detectable at this power"),
and every comparison over pre-trained models (``unit_test``, rules version 2). C3's MLM term
counts as the head's only where coCondenser's own head relies on [CLS]. A results file whose
Condenser-family runs predate the reliance gauge cannot be judged by these rules and is refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...utils.errors import SchemaError
from .checks import (BERT_ARMS, CONTROL_WORDS, Evidence, Judged, check_attribution, check_c0, check_c1, check_c2,
                     check_c3, check_c4, check_c5, check_c6, check_c7, check_c8, read_evidence, refuse_ungauged)
from ..evidence.papers import base_claim, paper_text
from ..configuration.registry import CLAIM, MODIFIED_ARM, label
from ..statistics.rules import ALPHA_ONE_SIDED, EQUAL_FLOPS_STEPS, LATE_LOSS_MARGIN, RELIANCE_THRESHOLD
from ..statistics.wording import comparison_word, fixed, sentence


# ---- the claims as data -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimCheck:
    """How the scorecard judges one claim of ``registry.CLAIM``: the ``arm`` it is asked of (the
    Condenser, or the modified Condenser for the C*m claims), the ``arms`` it names (shown by
    label), its ``statement`` (a template: ``{name}`` / ``{Name}`` the arm's label, the rules'
    numbers of ``STATEMENT_FIELDS`` and the ``fields`` its check adds) and the ``check`` that
    judges it. Chapter 8 (``notebooks/08_scorecard.md``)."""

    id: str
    arm: str
    arms: tuple[str, ...]
    statement: str
    check: Callable[[Evidence, str], Judged]

    def applies(self, e: Evidence) -> bool:
        """Whether a results file makes the claim: one asked of the modified Condenser needs it."""
        return self.arm != MODIFIED_ARM or e.has(MODIFIED_ARM)


STATEMENT_FIELDS = {"threshold": RELIANCE_THRESHOLD, "margin": LATE_LOSS_MARGIN, "alpha": ALPHA_ONE_SIDED,
                    "flops_steps": EQUAL_FLOPS_STEPS, "ctl": label("bert_cont")}


def _of_modified(statement: str, cid: str) -> str:
    """A claim of the papers' asked of the modified Condenser: the statement says so."""
    return statement + f" The paper's claim {cid}, asked of the deviation the mechanism page chose."


C0_STATEMENT = (
    "The {name} head relies on the late [CLS] (pre-registered): on every pre-training seed its own late [CLS] closes "
    "at least {threshold:.0%} of its held-out MLM-loss deficit against the backbone's late layer (reliance >= "
    "{threshold:g}, against a [CLS] from another document), its late MLM loss within {margin:g} nats of the "
    "equal-step control's ({ctl}), and the late [CLS] vectors of different blocks are less alike than the "
    "control's (lower mean cosine).")
C1_STATEMENT = ("{Name} beats both BERT arms as a retriever initialiser, most at the smallest training size, the gap "
                "narrowing with more data (round 1, BM25 negatives).")
C5_STATEMENT = ("BERT's CLS attention entropy profile changes more in fine-tuning than {name}'s (mean |after - before| "
                "over layers; after = round-1 retrievers on the full training set).")
C6_STATEMENT = ("{Name}'s retrieval fine-tuning loss is lower early in training than BERT's (mean loss over the first "
                "25% of round-1 steps, full training set).")
C7_STATEMENT = "{Name} beats BERT on STS-b with little training data (the smallest two sizes)."

CLAIM_CHECKS = (
    ClaimCheck("C0", "condenser", ("condenser", "bert_cont"), C0_STATEMENT, check_c0),
    ClaimCheck("C0m", MODIFIED_ARM, (MODIFIED_ARM, "bert_cont"), C0_STATEMENT, check_c0),
    ClaimCheck("C1", "condenser", ("condenser", *BERT_ARMS), C1_STATEMENT, check_c1),
    ClaimCheck("C1m", MODIFIED_ARM, (MODIFIED_ARM, *BERT_ARMS), _of_modified(C1_STATEMENT, "C1"), check_c1),
    ClaimCheck("C2", "cocondenser", ("cocondenser", "condenser", "co_mlm_only"),
               "coCondenser beats Condenser, visibly in recall (full training set; round 1 and, where run, round 2), "
               "and beats the equal-step control that continues Condenser's MLM on the target corpus without the "
               "contrastive loss, so the gain is not target-corpus exposure alone.", check_c2),
    ClaimCheck("C3", "cocondenser", ("cocondenser", "co_contrastive_only", "co_mlm_only"),
               "Both coCondenser loss terms add something: coCondenser beats Condenser further trained with the "
               "contrastive loss only, and with the Condenser MLM loss only (full training set, round 1).", check_c3),
    ClaimCheck("C4", "condenser", ("condenser", "cocondenser", "bert"),
               "Round 2 with hard negatives mined by the arm's own round-1 retriever improves the pre-trained arms "
               "(Condenser, coCondenser) without collapse.", check_c4),
    ClaimCheck("C4m", MODIFIED_ARM, (MODIFIED_ARM, "bert"), _of_modified(
        "Round 2 with hard negatives mined by its own round-1 retriever improves the {name} without collapse.", "C4"),
        check_c4),
    ClaimCheck("C5", "condenser", (*BERT_ARMS, "condenser"), C5_STATEMENT, check_c5),
    ClaimCheck("C5m", MODIFIED_ARM, (*BERT_ARMS, MODIFIED_ARM), _of_modified(C5_STATEMENT, "C5"), check_c5),
    ClaimCheck("C6", "condenser", ("condenser", *BERT_ARMS), C6_STATEMENT, check_c6),
    ClaimCheck("C6m", MODIFIED_ARM, (MODIFIED_ARM, *BERT_ARMS), _of_modified(C6_STATEMENT, "C6"), check_c6),
    ClaimCheck("C7", "condenser", ("condenser", *BERT_ARMS), C7_STATEMENT, check_c7),
    ClaimCheck("C7m", MODIFIED_ARM, (MODIFIED_ARM, *BERT_ARMS), _of_modified(C7_STATEMENT, "C7"), check_c7),
    ClaimCheck("C8", "condenser", ("condenser", "bert", "cocondenser"),
               "Neighbourhood recall (nb-recall^{n}@k, coCondenser eq. 17): the round-1 retriever's top k covers more "
               "of the round-2 retriever's top n for Condenser than for BERT, and for coCondenser than for Condenser, "
               "at every depth k (round 2 run for these three arms).", check_c8),
    ClaimCheck("C8m", MODIFIED_ARM, (MODIFIED_ARM, "bert"), _of_modified(
        "Neighbourhood recall (nb-recall^{n}@k): the {name}'s round-1 top k covers more of its round-2 top n than "
        "BERT's does, at every depth k.", "C8"), check_c8),
    ClaimCheck("Am", MODIFIED_ARM, (MODIFIED_ARM, "bert_cont", *CONTROL_WORDS),
               "The {name}'s path through [CLS] adds to its gain over {ctl} beyond what its compute and its targets "
               "give: wherever it beats {ctl}, it also beats {ctl} trained for the same FLOPs ({flops_steps:,} "
               "updates) and the same {name} with its [CLS] path cut (the head reads a learned constant: the same "
               "masked copy, targets and compute). The controls may recover part of the gain themselves: their own "
               "gains over {ctl} are shown, not judged. Each comparison a one-sided paired t-test at {alpha:.0%} over "
               "pre-training seeds (rules version 2).", check_attribution),
)
CHECK = {c.id: c for c in CLAIM_CHECKS}


def judge_claim(check: ClaimCheck, evidence: Evidence) -> dict:
    """One claim of the scorecard: its ``id``, ``statement``, ``arms`` (labels), our numbers in
    words (``comparison``), the papers' (``paper``), ours machine-readable (``ours``) and the
    ``status`` (``verdict`` too, the book's word). Chapter 8 (``notebooks/08_scorecard.md``)."""
    found = check.check(evidence, check.arm)
    name = label(check.arm)
    statement = check.statement.format(name=name, Name=sentence(name), **STATEMENT_FIELDS, **(found.fields or {}))
    return {"id": check.id, "statement": statement, "arms": [label(a) for a in check.arms],
            "comparison": found.comparison, "paper": paper_text(check.id), "ours": found.ours,
            "status": found.status, "verdict": found.status}


def scorecard(results: Mapping) -> list[dict]:
    """Every claim a results file makes (``CLAIM_CHECKS``, in the registry's order), each with the
    papers' numbers, ours and a status from ``rules.STATUSES``. A file whose Condenser-family runs
    logged no [CLS]-reliance gauges (``checks.refuse_ungauged``), or that was made under other
    rules (``checks.read_evidence``), is refused. Explained in chapter 8
    (``notebooks/08_scorecard.md``)."""
    refuse_ungauged(results)
    evidence = read_evidence(results)
    return [judge_claim(CHECK[cid], evidence) for cid in CLAIM if CHECK[cid].applies(evidence)]


def _first_difference(stored: Any, judged: Any, path: str = "") -> str | None:
    """The first path where two JSON trees differ, as ``ours.test.p``; None where they agree."""
    if isinstance(stored, Mapping) and isinstance(judged, Mapping):
        for key in [*judged, *(k for k in stored if k not in judged)]:
            found = _first_difference(stored.get(key), judged.get(key), f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
        return None
    if isinstance(stored, list) and isinstance(judged, list) and len(stored) == len(judged):
        return next((f for i, (a, b) in enumerate(zip(stored, judged))
                     if (f := _first_difference(a, b, f"{path}[{i}]")) is not None), None)
    return None if stored == judged else path or "."


def check_judged(results: Mapping, where: str) -> None:
    """Refuse (``SchemaError``) a results file whose stored claims (verdicts, p- and q-values,
    comparisons) differ from what the rules its provenance names make of its numbers: a
    hand-edited p beside its old verdict would show a page that contradicts itself. Names the
    first claim and field that differ. Chapter 8."""
    stored = results.get("claims")
    if stored is None:
        return  # a file without claims (a test's made-up one) has nothing to disagree with
    judged = json.loads(json.dumps(scorecard(results)))  # as the file stores it: tuples as lists
    by_id = {c.get("id"): c for c in stored if isinstance(c, Mapping)}
    for claim in judged:
        field = _first_difference(by_id.get(claim["id"], {}), claim)
        if field is not None:
            raise SchemaError(f"{where}: claim {claim['id']}'s stored {field} is not what the rules make of the file's "
                              "numbers: the file was edited or damaged; restore it from git, or re-run what wrote it")
    extra = sorted(set(by_id) - {c["id"] for c in judged})
    if extra:
        raise SchemaError(f"{where}: claim {extra[0]} is stored but the rules judge no such claim of these numbers; "
                          "the file was edited or damaged: restore it from git, or re-run what wrote it")


# ---- the claims as tables and text ---------------------------------------------------------------------


def comparison_paths(ours: Any, path: tuple = ()) -> list[tuple[tuple, dict]]:
    """Every comparison in a claim's ``ours`` as ``(path, numbers)``: the keys that lead to it
    (``("by_size", "100", "bert")``) and the comparison as the rules made it. Chapter 8."""
    if isinstance(ours, Mapping):
        if {"a", "b", "diff", "spread", "verdict"} <= set(ours):
            return [(path, ours)]
        return [x for k, v in ours.items() for x in comparison_paths(v, path + (str(k),))]
    return []


def _sides(cid: str, path: tuple, arms: Sequence[str]) -> tuple[str, str, str]:
    """``(setting, a, b)`` in words for one comparison of claim ``cid`` found at ``path`` in its
    ``ours`` (``arms``: the claim's arm labels, the claimed one first); the claims asked of the
    modified Condenser (``C1m``...) read like the paper's, with that arm in the Condenser's place."""
    head, *rest = path
    base = base_claim(cid)
    claimed = label(MODIFIED_ARM if cid.endswith("m") else "condenser")
    if base in ("C1", "C7"):  # by_size / <size> / <other arm>
        unit = "training queries" if base == "C1" else "training pairs"
        return f"{rest[0]} {unit}", claimed, label(rest[1])
    if base == "C2":
        other = "Condenser MLM only" if head == "vs_target_corpus_mlm" else "Condenser"
        where = "round 2" if head == "round2" else "round 1"
        return f"{where}, {rest[0]}", "coCondenser", other
    if base == "C3":
        other = "contrastive only" if head == "mlm_term" else "Condenser MLM only"
        return f"{head.replace('_', ' ')}, {rest[0]}", "coCondenser", other
    if base == "C4":  # round2_vs_round1 / <arm>
        return label(rest[0]), "round 2", "round 1"
    if base in ("C5", "C6"):  # bert_minus_condenser / <BERT arm>
        return "", label(rest[0]), claimed
    if base == "C8":  # <arm>_vs_<arm> / n<n>@k<k>
        a, b = head.split("_vs_")
        return "nb-recall, " + rest[0].replace("n", "n = ", 1).replace("@k", ", k = "), label(a), label(b)
    if cid == "Am":  # settings / <setting> / gain | vs_control/<control> | control_vs_bert_cont/<control>
        setting, kind, *control = rest
        if kind == "gain":
            return f"{setting}: the gain", claimed, label("bert_cont")
        if kind == "vs_control":
            return f"{setting}: against the control", claimed, label(control[0])
        return f"{setting}: the control's own gain", label(control[0]), label("bert_cont")
    return " ".join(path), arms[0] if arms else "a", arms[1] if len(arms) > 1 else "b"


def comparisons(claim: Mapping) -> list[tuple[str, str, str, dict]]:
    """Each comparison behind a claim as ``(setting, a, b, numbers)``: the setting and the two
    sides in words (``a`` the side the claim favours), and the comparison as the rules made it
    (``rules.unit_test``'s dict). Chapter 8."""
    return [(*_sides(claim["id"], path, claim.get("arms", [])), c) for path, c in comparison_paths(claim.get("ours", {}))]


def claim_rows(claim: Mapping) -> list[dict]:
    """One row per comparison behind a claim, for a table beside the prose: the setting, our two
    numbers, their difference and spread, for the pre-registered claims the smallest difference
    the run could detect and the paper's effect at our scale, for a comparison tested over
    pre-trained models each model's difference and the one-sided p, and the verdict. Chapter 8."""
    rows = []
    for setting, a, b, c in comparisons(claim):
        row = {"setting": setting, "a": a, "b": b, "ours (a vs b)": f"{c['a']:.3f} vs {c['b']:.3f}",
               "compared": f"{a} {c['a']:.3f} vs {b} {c['b']:.3f}",
               "difference": round(c["diff"], 3), "spread": round(c["spread"], 3)}
        if "mdd" in c:
            row["detectable"] = None if c["mdd"] is None else round(c["mdd"], 3)
            row["paper's effect here"] = None if c.get("expected") is None else round(c["expected"], 3)
        if "p" in c:  # the test over pre-trained models, and each model's difference
            row["per pre-trained model (a - b)"] = ", ".join(
                f"{seed}: {fixed(d, signed=True)}" for seed, d in (c.get("per_seed") or {}).items()) or "unpaired"
            row["p (one-sided)"] = None if c["p"] is None else round(c["p"], 3)
        row["verdict"] = comparison_word(c["verdict"])
        rows.append(row)
    return rows


def format_scorecard(results: Mapping) -> str:
    """The main numbers and the scorecard as plain text (command line, notebooks): retrieval
    mean +- std over seeds per arm, training size and round, STS-b Spearman, then one line per claim. Chapter 8."""
    lines = []
    metrics = results.get("preset", {}).get("metrics", ["nDCG@10"])
    shown = [metrics[0]] + [m for m in metrics if m.startswith("R@")][:1]
    bm = results.get("bm25", {})
    if bm:
        lines.append("BM25: " + ", ".join(f"{m} {bm['full'][m]:.3f}" for m in shown)
                     + (f"; on the dense models' first {bm.get('truncated_tokens')} tokens: " + ", ".join(
                         f"{m} {bm['truncated'][m]:.3f}" for m in shown) if "truncated" in bm else ""))
    for arm, rounds in results.get("retrieval", {}).items():
        for rnd, by_size in rounds.items():
            for size, ms in sorted(by_size.items(), key=lambda kv: int(kv[0])):
                cells = ", ".join(f"{m} {ms[m]['mean']:.3f}+-{ms[m]['std']:.3f}" for m in shown if m in ms)
                lines.append(f"{arm:<20} {rnd} n={size:<5} {cells}")
    for arm, by_size in results.get("sts", {}).items():
        lines.append(f"{arm:<20} STS-b " + ", ".join(f"n={k} {v['mean']:.3f}+-{v['std']:.3f}" for k, v in by_size.items()))
    for c in results.get("claims") or scorecard(results):
        lines.append(f"{c['id']}  {c['status']:<30} {c['statement']}")
    return "\n".join(lines)
