"""The scorecard: the papers' claims C1-C7, their published numbers, and the verdict rules.

Explained in chapter 8 (the scorecard page) and chapters 4-7, each of which checks some claims.
``scorecard(results)`` turns a protocol results file into one verdict per claim, from
``STATUSES``: a difference between two arms counts only where it exceeds the seed spread
(``compare``: |mean_a - mean_b| > std_a + std_b). ``PAPER_RESULTS`` holds the numbers the papers
publish for each claim as data; ``paper_text`` renders them for the scorecard's table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .presets import MAIN_ARMS

STATUSES = ("reproduced", "partly reproduced", "not reproduced at this scale", "not measured")


@dataclass(frozen=True)
class PaperTable:
    """Published numbers behind a claim: ``rows`` of values, one per ``columns`` entry. Chapter 8."""

    claim: str
    source: str
    measure: str
    columns: tuple[str, ...]
    rows: dict[str, tuple[float, ...]] = field(default_factory=dict)
    digits: int = 1

    def text(self) -> str:
        cells = ", ".join(f"{label} " + " / ".join(f"{v:.{self.digits}f}" for v in values)
                          for label, values in self.rows.items())
        return f"{self.source} ({self.measure}; {' / '.join(self.columns)}): {cells}"


@dataclass(frozen=True)
class PaperFinding:
    """A claim the papers make in a figure, without numbers to copy. Chapter 8."""

    claim: str
    source: str
    finding: str

    def text(self) -> str:
        return f"{self.source} ({self.finding})"


PAPER_RESULTS: tuple[PaperTable | PaperFinding, ...] = (
    PaperTable("C1", "Condenser table 5", "MS MARCO dev MRR@10, training queries", ("1K", "10K", "full"),
               {"BERT": (0.156, 0.228, 0.309), "Condenser": (0.192, 0.258, 0.338)}, digits=3),
    PaperTable("C1", "Condenser table 3", "NQ Top-20, training queries", ("1K", "10K", "full"),
               {"BERT": (66.6, 75.9, 78.4), "Condenser": (72.7, 78.3, 80.1)}),
    PaperTable("C2", "coCondenser table 5", "MS MARCO dev", ("MRR@10", "R@1000"),
               {"Condenser w/o HN": (33.8, 96.1), "coCondenser w/o HN": (35.7, 97.8),
                "Condenser with HN": (36.6, 97.4), "coCondenser with HN": (38.2, 98.4)}),
    PaperTable("C3", "coCondenser table 4", "MS MARCO dev", ("MRR@10", "R@100", "R@1000"),
               {"Condenser": (36.6, 89.4, 97.4), "+ contrastive": (36.7, 90.3, 98.0),
                "+ MLM (coCondenser)": (38.2, 91.3, 98.4)}),
    PaperFinding("C3", "Condenser preprint figure 4", "the MLM-only continuation is its 'CT' arm, continued "
                 "pre-training on the MS MARCO corpus"),
    PaperTable("C4", "coCondenser table 5", "MS MARCO dev MRR@10", ("without", "with hard negatives"),
               {"Condenser": (33.8, 36.6), "coCondenser": (35.7, 38.2)}),
    PaperTable("C4", "Condenser table 7", "MS MARCO dev MRR@10", ("without", "with un-denoised hard negatives"),
               {"RocketQA": (33.3, 26.0)}),
    PaperFinding("C4", "coCondenser figure 3", "nb-recall higher for Condenser than BERT and coCondenser than Condenser"),
    PaperFinding("C5", "Condenser figure 2", "qualitative: BERT's per-layer CLS entropy changes drastically after "
                 "fine-tuning, Condenser's and ICT's little"),
    PaperFinding("C6", "Condenser preprint figure 5", "NQ, first 10 epochs, log scale: Condenser's loss lower than "
                 "BERT's in early epochs"),
    PaperTable("C7", "Condenser table 1", "STS-b test Spearman, training pairs", ("500", "1K", "full"),
               {"BERT": (68.6, 71.4, 82.5), "Condenser": (76.6, 77.8, 85.6)}),
)


def paper_text(claim: str) -> str:
    """The papers' numbers (or finding) behind ``claim``, one source after another (chapter 8)."""
    return "; ".join(r.text() for r in PAPER_RESULTS if r.claim == claim) + "."


def stats(values: Sequence[float]) -> dict:
    """``{"mean", "std", "values", "n"}``; std is the sample standard deviation over seeds (ddof=1;
    0 for a single value). Explained in chapter 4."""
    v = np.asarray([float(x) for x in values], dtype=np.float64)
    if v.size == 0:
        return {"mean": None, "std": None, "values": [], "n": 0}
    std = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return {"mean": float(v.mean()), "std": std, "values": v.tolist(), "n": int(v.size)}


def compare(a: Mapping | None, b: Mapping | None) -> dict | None:
    """``a`` vs ``b`` (each ``stats``): difference of means, spread (std_a + std_b) and the verdict
    ``"better"`` / ``"worse"`` (difference beyond the spread) or ``"within spread"``. Chapter 8."""
    if not a or not b or a.get("mean") is None or b.get("mean") is None:
        return None
    diff = a["mean"] - b["mean"]
    spread = (a["std"] or 0.0) + (b["std"] or 0.0)
    verdict = "better" if diff > spread else "worse" if -diff > spread else "within spread"
    return {"a": round(a["mean"], 4), "b": round(b["mean"], 4), "diff": round(diff, 4), "spread": round(spread, 4),
            "verdict": verdict}


def _get(d: Mapping, *path: Any) -> Any:
    for p in path:
        if not isinstance(d, Mapping) or p not in d:
            return None
        d = d[p]
    return d


def claim_status(parts: Sequence[bool | None]) -> str:
    """Every measured part holds: reproduced; some: partly; none: not reproduced; nothing
    measured: not measured. (A part is None where its arm or size was not run.) Chapter 8."""
    known = [p for p in parts if p is not None]
    if not known:
        return "not measured"
    if all(known):
        return "reproduced"
    if any(known):
        return "partly reproduced"
    return "not reproduced at this scale"


def early_loss(results: Mapping, arm: str, label: str, frac: float = 0.25) -> dict | None:
    """Mean round-1 fine-tuning loss over the first ``frac`` of the steps, per seed, as ``stats``
    (claim C6; ``frac=1`` averages every step). Explained in chapter 6."""
    curves = _get(results, "loss_curves", arm, label)
    if not curves:
        return None
    vals = [float(np.mean(c[: max(1, int(len(c) * frac))])) for c in curves]
    return stats(vals)


def scorecard(results: Mapping) -> list[dict]:
    """Claims C1-C7 with the papers' numbers, ours and a status from ``STATUSES``.

    A difference counts only where it exceeds the seed spread (``compare``: |mean difference| >
    std_a + std_b). Retrieval claims read the first metric of the budget (nDCG@10 on SciFact) and
    the recall metric (R@100). Explained in the closing chapter.
    """
    budget = results.get("budget", {})
    metrics = budget.get("metrics", ["nDCG@10", "RR@10", "R@100"])
    main_m = metrics[0]
    recall_m = next((m for m in metrics if m.startswith("R@")), metrics[-1])
    sizes = [str(s) for s in results.get("train_sizes", [])]
    small, full = (sizes[0], sizes[-1]) if sizes else (None, None)
    retrieval = results.get("retrieval", {})
    claims = []

    def r1(arm, size, m):
        return _get(retrieval, arm, "round1", size, m)

    # C1: Condenser beats both BERT arms, most at the smallest size, gap narrowing with data.
    per_size = {s: {b: compare(r1("condenser", s, main_m), r1(b, s, main_m)) for b in ("bert", "bert_cont")} for s in sizes}
    beats_small = [None if per_size.get(small, {}).get(b) is None else per_size[small][b]["verdict"] == "better"
                   for b in ("bert", "bert_cont")] if small else [None]
    gaps = {s: [c["diff"] for c in per_size[s].values() if c] for s in sizes}
    narrowing = None
    if small and full and small != full and gaps.get(small) and gaps.get(full):
        narrowing = min(gaps[small]) > min(gaps[full])
    claims.append({
        "id": "C1", "statement": "Condenser beats both BERT arms as a retriever initialiser, most at the smallest training "
        "size, the gap narrowing with more data (round 1, BM25 negatives).",
        "paper": paper_text("C1"),
        "ours": {"metric": main_m, "by_size": per_size, "bm25": _get(results, "bm25", "full", main_m),
                 "narrowing": narrowing},
        # a narrowing gap only means something where Condenser is ahead at the small size
        "status": claim_status([*beats_small, narrowing if beats_small and all(b is True for b in beats_small) else None]),
    })

    # C2: coCondenser beats Condenser, visibly in recall.
    c2 = {m: compare(r1("cocondenser", full, m), r1("condenser", full, m)) for m in (main_m, recall_m)}
    c2r2 = {m: compare(_get(retrieval, "cocondenser", "round2", full, m), _get(retrieval, "condenser", "round2", full, m))
            for m in (main_m, recall_m)}
    claims.append({
        "id": "C2", "statement": "coCondenser beats Condenser, visibly in recall (full training set; round 1 and, "
        "where run, round 2).",
        "paper": paper_text("C2"),
        "ours": {"round1": c2, "round2": c2r2},
        "status": claim_status([None if c is None else c["verdict"] == "better" for c in (c2[recall_m], c2r2[recall_m])]),
    })

    # C3: both terms of the coCondenser loss add something (table 4).
    c3 = {name: {m: compare(r1("cocondenser", full, m), r1(abl, full, m)) for m in (main_m, recall_m)}
          for name, abl in (("mlm_term", "co_contrastive_only"), ("contrastive_term", "co_mlm_only"))}
    c3_parts = []
    for name in c3:
        cs = [c for c in c3[name].values() if c]
        c3_parts.append(None if not cs else any(c["verdict"] == "better" for c in cs))
    claims.append({
        "id": "C3", "statement": "Both coCondenser loss terms add something: coCondenser beats Condenser further trained "
        "with the contrastive loss only, and with the Condenser MLM loss only (full training set, round 1).",
        "paper": paper_text("C3"),
        "ours": c3,
        "status": claim_status(c3_parts),
    })

    # C4: hard negatives help the pre-trained arms (no collapse).
    c4 = {arm: compare(_get(retrieval, arm, "round2", full, main_m), r1(arm, full, main_m)) for arm in MAIN_ARMS}
    c4_parts = [None if c4[a] is None else c4[a]["verdict"] == "better" for a in ("condenser", "cocondenser")]
    collapse = [a for a, c in c4.items() if c and c["verdict"] == "worse"]
    claims.append({
        "id": "C4", "statement": "Round 2 with hard negatives mined by the arm's own round-1 retriever improves the "
        "pre-trained arms (Condenser, coCondenser) without collapse.",
        "paper": paper_text("C4"),
        "ours": {"metric": main_m, "round2_vs_round1": c4, "collapsed": collapse, "nb_recall": results.get("nb_recall", {})},
        "status": claim_status(c4_parts),
    })

    # C5: BERT's CLS attention changes more in fine-tuning than Condenser's.
    entropy = results.get("entropy", {})
    c5 = {b: compare(_get(entropy, b, "mean_abs_change"), _get(entropy, "condenser", "mean_abs_change"))
          for b in ("bert", "bert_cont")}
    claims.append({
        "id": "C5", "statement": "BERT's CLS attention entropy profile changes more in fine-tuning than Condenser's "
        "(mean |after - before| over layers; after = round-1 retrievers on the full training set).",
        "paper": paper_text("C5"),
        "ours": {"change": {a: _get(entropy, a, "mean_abs_change") for a in entropy}, "bert_minus_condenser": c5},
        "status": claim_status([None if c is None else c["verdict"] == "better" for c in c5.values()]),
    })

    # C6: Condenser's fine-tuning loss falls faster early.
    early = {a: early_loss(results, a, full) for a in MAIN_ARMS}
    c6 = {b: compare(early[b], early["condenser"]) for b in ("bert", "bert_cont")}
    claims.append({
        "id": "C6", "statement": "Condenser's retrieval fine-tuning loss is lower early in training than BERT's "
        "(mean loss over the first 25% of round-1 steps, full training set).",
        "paper": paper_text("C6"),
        "ours": {"early_loss": early, "bert_minus_condenser": c6},
        "status": claim_status([None if c is None else c["verdict"] == "better" for c in c6.values()]),
    })

    # C7: Condenser matches or beats BERT on STS-b at low data.
    sts = results.get("sts", {})
    low = [str(s) for s in results.get("sts_sizes", [])][:2]
    c7 = {s: {b: compare(_get(sts, "condenser", s), _get(sts, b, s)) for b in ("bert", "bert_cont")} for s in low}
    c7_parts = [None if c is None else c["verdict"] == "better" for s in low for c in c7[s].values()]
    claims.append({
        "id": "C7", "statement": "Condenser beats BERT on STS-b with little training data (the smallest two sizes); "
        "'matches' shows as 'within spread' in ours.",
        "paper": paper_text("C7"),
        "ours": {"by_size": c7, "all": sts},
        "status": claim_status(c7_parts),
    })
    for c in claims:
        assert c["status"] in STATUSES, c
    return claims


def _compares(d: Any, path: tuple = ()) -> list[tuple[tuple, dict]]:
    if isinstance(d, Mapping):
        if {"a", "b", "diff", "spread", "verdict"} <= set(d):
            return [(path, d)]
        return [x for k, v in d.items() for x in _compares(v, path + (str(k),))]
    return []


def claim_numbers(claim: Mapping) -> str:
    """Our numbers behind one scorecard claim, one comparison per line: ``where: a vs b
    (difference, spread) verdict``. For the scorecard page (chapter 8)."""
    lines = []
    for path, c in _compares(claim.get("ours", {})):
        where = " ".join(p for p in path if p not in ("by_size", "round2_vs_round1", "bert_minus_condenser"))
        lines.append(f"{where}: {c['a']:.3f} vs {c['b']:.3f} (diff {c['diff']:+.3f}, spread {c['spread']:.3f}) {c['verdict']}")
    ours = claim.get("ours", {})
    if isinstance(ours, Mapping) and ours.get("narrowing") is not None:
        lines.append(f"gap narrows with more data: {ours['narrowing']}")
    return "\n".join(lines)


def format_scorecard(results: Mapping) -> str:
    """The main numbers and the scorecard as plain text (command line, notebooks): retrieval
    mean +- std over seeds per arm, training size and round, STS-b Spearman, then one line per claim. Chapter 8."""
    lines = []
    metrics = results.get("budget", {}).get("metrics", ["nDCG@10"])
    shown = [metrics[0]] + [m for m in metrics if m.startswith("R@")][:1]
    bm = results.get("bm25", {})
    if bm:
        lines.append("BM25: " + ", ".join(f"{m} {bm['full'][m]:.3f}" for m in shown)
                     + ("; on the dense models' first %s tokens: " % bm.get("truncated_tokens") + ", ".join(
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
