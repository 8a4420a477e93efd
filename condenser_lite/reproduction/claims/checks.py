"""The scorecard's checks, one per claim: what each reads in a results file and how it judges it.

A results file is read once as ``Evidence`` (``read_evidence``), with means per pre-trained model
(``rules.model_means``: the rules' unit). Each ``check_*`` judges one claim (C0-C8 for the
Condenser or, C*m, the modified one; ``check_attribution``, Am) by ``rules.py`` and returns a
``Judged``, its status by the claim's rule beside it (``c1_status``... ``am_status``, reused by
``multiplicity.rejudge``); ``scorecard.py`` holds which check judges which claim. Explained in chapter 8
(``notebooks/08_scorecard.md``) and chapters 2 and 4-7, each of which checks some claims.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ...utils.errors import SchemaError
from ..evidence.papers import expected_gain
from ..configuration.registry import MAIN_ARMS, MODIFIED_ARM, label
from ..evidence.results import (arm_seeds, bm25_score, entropy_change, head_gate, judged_seeds, loss_curves, nb_recall,
                                preset_name, pretraining_runs, reliance_by_seed, retrieval_score, rules_version,
                                runs_without_reliance, stage_flops, sts_score)
from ..statistics.rules import (FLOPS_MATCH, LATE_LOSS_MARGIN, MODIFIED_CHOICE_SEEDS, NOT_ATTRIBUTABLE,
                                NOT_ATTRIBUTABLE_UNGAUGED, ONE_SEED, PRE_REGISTERED_RULES, RULES_V2, RULES_VERSION,
                                c0_rule, claim_status, compare, holds, model_means, power_call, power_claim_status,
                                power_verdict, reliance_summary, stats, unit_test)
from ..statistics.wording import comparison_text, fixed

Call = Callable[[Mapping], str]  # a tested comparison's dict -> "better", "worse" or "not significant"

# ---- what every claim's check reads ----------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """One results file as the claims' checks read it: its numbers (with their means per
    pre-trained model, ``_with_models``), the budget's main ``metric`` (nDCG@10 on SciFact) and
    ``recall`` metric (R@100), and the training ``sizes`` as run. Chapter 8
    (``notebooks/08_scorecard.md``)."""

    results: Mapping
    metric: str
    recall: str
    sizes: tuple[str, ...]

    @property
    def full(self) -> str | None:
        """The full training set's size: the last one run."""
        return self.sizes[-1] if self.sizes else None

    def has(self, arm: str) -> bool:
        return arm in self.results.get("arms", {})


def read_evidence(results: Mapping) -> Evidence:
    """``results`` as the checks read them: the pre-trained model is the unit, so every
    comparison is over pre-training seeds. A file made under other rules than this library's
    (``rules_version``; one that records none is judged by these) is refused in one line.
    Chapter 8."""
    version = rules_version(results)
    if version not in (None, RULES_VERSION):
        name = preset_name(results) or "<preset>"
        raise SchemaError(f"results file of preset {name!r} was made under rules version {version}, this library "
                          f"judges by version {RULES_VERSION}: re-run it with `python -m condenser_lite experiments "
                          f"--preset {name} --force --out results/{name}.json`")
    results = _with_models(results)
    metrics = results.get("preset", {}).get("metrics", ["nDCG@10", "RR@10", "R@100"])
    return Evidence(results, metrics[0], recall_metric(results), tuple(str(s) for s in results.get("train_sizes", [])))


def recall_metric(results: Mapping) -> str:
    """The recall metric the claims read (C2's, the tables' R@k): the run's first R@k, else its last
    metric. Chapter 8."""
    metrics = results.get("preset", {}).get("metrics", ["nDCG@10", "RR@10", "R@100"])
    return next((m for m in metrics if m.startswith("R@")), metrics[-1])


def refuse_ungauged(results: Mapping) -> None:
    """Raise where a Condenser-family run of ``results`` logged no [CLS]-reliance gauges though it
    logged its head's others (``runs_without_reliance``): the pre-registered C0 and the C3 gate
    read the reliance, so such a file cannot be judged; re-running it logs them. Chapter 8."""
    arms = runs_without_reliance(results)
    if arms:
        name = preset_name(results) or "<preset>"
        raise SchemaError(f"results file of preset {name!r} has no [CLS]-reliance gauges for {', '.join(arms)}, which "
                          f"the pre-registered rules read: re-run it with `python -m condenser_lite experiments "
                          f"--preset {name} --force --out results/{name}.json`")


class Judged(NamedTuple):
    """What a claim's check finds: our numbers in words (``comparison``), the same machine-readable
    (``ours``), the claim's ``status``, and ``fields`` its statement names (C8's depth n)."""

    comparison: str
    ours: dict
    status: str
    fields: Mapping[str, Any] | None = None


def called(c: Mapping | None, call: Call | None = None, power: bool = False) -> Mapping | None:
    """Comparison ``c`` with the verdict ``call`` gives it (with its power, ``power_call``, where ``power``);
    as it stands where ``call`` is None (the scorecard's: each test at 5%) or it carries no test. Chapter 12."""
    if call is None or not c or c.get("p") is None:
        return c
    verdict = call(c)
    if power and c.get("expected") is not None:
        verdict = power_call(verdict, c["expected"], c["mdd"])
    return {**c, "verdict": verdict}


def early_loss(results: Mapping, arm: str, label: str, frac: float = 0.25) -> dict | None:
    """Mean round-1 fine-tuning loss over the first ``frac`` of the steps, per seed, as ``stats``
    (claim C6; ``frac=1`` averages every step). Explained in chapter 6."""
    curves = loss_curves(results, arm, label)
    if not curves:
        return None
    vals = [float(np.mean(c[: max(1, int(len(c) * frac))])) for c in curves]
    out = stats(vals)
    seeds = results.get("_unit_seeds", {}).get(arm)  # the pre-trained model as the unit
    return {**out, "models": model_means(vals, seeds)} if seeds else out


def _compare(a: Mapping | None, b: Mapping | None) -> dict | None:
    """``a`` against ``b``: over pre-trained models (``unit_test``) where both carry their
    ``models``, else by the spread (``compare``: a published checkpoint, ``_with_models``)."""
    if a is None or b is None or a.get("mean") is None or b.get("mean") is None:
        return None
    if a.get("models") and b.get("models"):
        return unit_test(a["models"], b["models"])
    return compare(a, b)


def _power(a: Mapping | None, b: Mapping | None, gain: float | None) -> dict | None:
    """A claimed improvement judged with its power (``unit_test`` with the paper's effect at our
    scale, ``gain`` x b's mean; without models per pre-trained model: ``power_verdict``)."""
    if a is None or b is None or a.get("mean") is None or b.get("mean") is None:
        return None
    if a.get("models") and b.get("models"):
        expected = None if gain is None else gain * float(np.mean(b["models"]["means"]))
        return {**unit_test(a["models"], b["models"], expected), "gain": gain}
    return power_verdict(a, b, gain)


def _with_models(results: Mapping) -> dict:
    """A copy of ``results`` whose per-run numbers (retrieval, STS-b, nb-recall, the entropy
    change, and the early fine-tuning loss through ``_unit_seeds``) also carry their means per
    pre-trained model (``model_means``): what the rules test. A published checkpoint (no
    pre-training seed of ours) is one model that no seed resamples: a comparison with it is about
    that checkpoint, over its fine-tuning runs, so its numbers keep the spread rule. Chapter 8."""
    out = dict(results)
    seeds = {arm: s for arm in results.get("arms", {}) if None not in (s := arm_seeds(results, arm))}

    def attach(d: Any, arm: str) -> Any:
        if isinstance(d, Mapping) and "values" in d and "mean" in d:
            return {**d, "models": model_means(d["values"], seeds[arm])} if arm in seeds else d
        if isinstance(d, Mapping):
            return {k: attach(v, arm) for k, v in d.items()}
        return d

    for part in ("retrieval", "sts", "nb_recall"):
        out[part] = {arm: attach(v, arm) for arm, v in (results.get(part) or {}).items()}
    out["entropy"] = {arm: {**v, **({"mean_abs_change": attach(v["mean_abs_change"], arm)}
                                    if "mean_abs_change" in v else {})}
                      for arm, v in (results.get("entropy") or {}).items()}
    out["_unit_seeds"] = seeds
    return out


# ---- the checks, one per claim (asked of ``arm``: the Condenser, or the modified one) --------------


def check_c0(e: Evidence, arm: str) -> Judged:
    """C0 (C0m) by the pre-registered ``c0_rule``: ``arm``'s reliance on every pre-training seed it
    is judged on (``judged_seeds``), its late MLM loss against BERT-continued's, and the cosine
    half against BERT-continued. Chapters 2 and 8."""
    results, name = e.results, label(arm)
    gauged = reliance_by_seed(results, arm)
    if not gauged:
        return Judged(f"not measured: the {name}'s head logged no [CLS]-reliance gauges (a published checkpoint, or "
                      "a stage without held-out blocks).",
                      {"rules": PRE_REGISTERED_RULES, "reliance": [], "relies": None, "cosine_lower": None},
                      "not measured")
    seeds, keep = arm_seeds(results, arm), judged_seeds(results, arm)
    pick = [i for i, s in enumerate(seeds) if s in keep]
    runs = [r for i, r in enumerate(gauged) if i in pick]
    held = [r.get("heldout") or {} for i, r in enumerate(pretraining_runs(results, arm)) if i in pick]
    control = [r.get("heldout") or {} for r in pretraining_runs(results, "bert_cont")]
    control = [control[i] for i in pick] if len(control) == len(seeds) else []
    reliance = [r["reliance"] for r in runs]
    paired = bool(held) and len(control) == len(held) and all(h.get("mlm_loss") is not None for h in control)
    cos = [h.get("cls_cosine") for h in held], [h.get("cls_cosine") for h in control]
    has_cos = paired and None not in cos[0] + cos[1]
    rule = (c0_rule(reliance, [h["mlm_loss"] for h in held], [h["mlm_loss"] for h in control],
                    *(cos if has_cos else (None, None))) if paired else
            {"relies": None, "cosine_lower": None, "status": "not measured"})
    summary = reliance_summary(runs)
    words = _c0_words(name, runs, summary, held, control if paired else None, rule, cos if has_cos else None)
    if len(keep) < len(seeds):
        words += (f" (judged on pre-training seeds {', '.join(map(str, keep)) or 'none'}: the choice of this arm "
                  f"read seeds {', '.join(str(s) for s in seeds if s not in keep)})")
    return Judged(words + ".",
                  {"rules": PRE_REGISTERED_RULES, "reliance": reliance, "reliance_summary": summary,
                   "reliance_zero": [r["zero"] for r in runs], "reliance_mean": [r["mean"] for r in runs],
                   "cls_cosine": {arm: cos[0], "bert_cont": cos[1]}, **{k: v for k, v in rule.items() if k != "status"}},
                  rule["status"])


def _c0_words(name: str, runs: Sequence[Mapping], summary: Mapping, held: Sequence[Mapping],
              control: Sequence[Mapping] | None, rule: Mapping, cos: tuple[list, list] | None) -> str:
    """C0's numbers in words: the reliance per seed, the late MLM loss against the control's
    (``control``: its run per judged seed, None where it has none) and the cosines, or why there
    is nothing to judge."""
    ctl = label("bert_cont")

    def num(x):  # reliances are thousandths of a nat: four decimals
        return "undefined" if x is None else fixed(x, 4)

    words = (f"reliance of the {name}'s head per pre-training seed {', '.join(num(r['reliance']) for r in runs)} "
             f"(mean {num(summary['mean'])}, noise {num(summary['noise'])} over {summary['noise_covers'] or 'nothing'}; "
             f"with a zero [CLS] {', '.join(num(r['zero']) for r in runs)}, a mean [CLS] "
             f"{', '.join(num(r['mean']) for r in runs)})")
    if not held:
        return (f"no pre-training seed of the {name} that its choice did not see (the choice read seeds "
                f"{', '.join(map(str, MODIFIED_CHOICE_SEEDS))}): not measured")
    if control is None:
        return words + f"; no {ctl} run per pre-training seed to hold the late MLM loss against: not measured"
    words += (f"; late MLM loss {name} " + ", ".join(f"{h['mlm_loss']:.3f}" for h in held) + f" vs {ctl} "
              + ", ".join(f"{h['mlm_loss']:.3f}" for h in control) + f" (within {LATE_LOSS_MARGIN:g} nats: "
              + ", ".join("yes" if x else "no" for x in rule["late_loss_matched"]) + ")")
    if cos:
        words += (f"; mean cosine between blocks' late [CLS]: {name} " + ", ".join(f"{c:.3f}" for c in cos[0])
                  + f", {ctl} " + ", ".join(f"{c:.3f}" for c in cos[1]))
    return words


BERT_ARMS = ("bert", "bert_cont")  # the two baselines a Condenser is held against


def check_c1(e: Evidence, arm: str) -> Judged:
    """C1 (C1m): better than both BERT arms as a retriever initialiser at every training size, most
    at the smallest, the gap narrowing with more data (round 1, BM25 negatives); each size judged
    with its power, the narrowing only where the arm is ahead at the smallest size. Chapter 8."""
    results, sizes, name = e.results, list(e.sizes), label(arm)
    small, full = (sizes[0], sizes[-1]) if sizes else (None, None)

    def against(size: str, base: str) -> dict | None:
        a, b = (retrieval_score(results, x, "round1", size, e.metric) for x in (arm, base))
        return _power(a, b, expected_gain("C1", size, sizes))

    per_size = {s: {b: against(s, b) for b in BERT_ARMS} for s in sizes}
    gaps = {s: [c["diff"] for c in per_size[s].values() if c] for s in sizes}
    narrowing = None
    if small and full and small != full and gaps.get(small) and gaps.get(full):
        narrowing = min(gaps[small]) > min(gaps[full])
    words = "; ".join(f"{e.metric} at {s} training queries: " + ", ".join(
        comparison_text(per_size[s][b], name, label(b)) for b in BERT_ARMS) for s in sizes)
    ours = {"metric": e.metric, "by_size": per_size, "bm25": bm25_score(results, e.metric), "narrowing": narrowing,
            "rules": RULES_V2}
    return Judged((words or "not measured") + ".", ours, c1_status(ours))


def c1_status(ours: Mapping, call: Call | None = None) -> str:
    """C1's status from ``check_c1``'s ``ours``: each size's comparisons with their power, and the
    ``narrowing`` only where the arm beats both BERT arms at the smallest (first) size. Chapter 8."""
    per_size = [{b: called(c, call, power=True) for b, c in by.items()} for by in ours["by_size"].values()]
    smallest = per_size[0] if per_size else {}
    ahead = ours.get("narrowing") if smallest and all(holds(c) is True for c in smallest.values()) else None
    return power_claim_status([c for by in per_size for c in by.values()], [ahead])


def check_c2(e: Evidence, arm: str) -> Judged:
    """C2: coCondenser beats Condenser, visibly in recall, in round 1 and round 2, and beats the
    Condenser MLM continued on the target corpus (not target-corpus exposure alone). Chapter 8."""
    results, measures = e.results, (e.metric, e.recall)

    def against(base: str, rnd: str = "round1") -> dict:
        return {m: _compare(retrieval_score(results, "cocondenser", rnd, e.full, m),
                            retrieval_score(results, base, rnd, e.full, m)) for m in measures}

    r1, r2, ctl = against("condenser"), against("condenser", "round2"), against("co_mlm_only")
    words = (f"{e.recall}, full training set: round 1 {comparison_text(r1[e.recall], 'coCondenser', 'Condenser')}, "
             f"{comparison_text(ctl[e.recall], 'coCondenser', 'Condenser MLM only on the target corpus')}; round 2 "
             f"{comparison_text(r2[e.recall], 'coCondenser', 'Condenser')}.")
    ours = {"round1": r1, "round2": r2, "vs_target_corpus_mlm": ctl}
    return Judged(words, ours, c2_status(ours))


def c2_status(ours: Mapping, call: Call | None = None) -> str:
    """C2's status from ``check_c2``'s ``ours``: by recall (the last measure) in each comparison. Chapter 8."""
    recall = list(ours["round1"])[-1]
    return claim_status([holds(called(ours[k][recall], call)) for k in ("round1", "round2", "vs_target_corpus_mlm")])


C3_TERMS = (("mlm_term", "co_contrastive_only"), ("contrastive_term", "co_mlm_only"))  # a term, the arm without it
C3_GATE_WORDS = {
    NOT_ATTRIBUTABLE: "; the MLM term's gain is not the Condenser head's: coCondenser's own head does not rely on [CLS]",
    NOT_ATTRIBUTABLE_UNGAUGED: "; the MLM term's gain cannot be credited to the Condenser head: coCondenser's own "
                               "head was not gauged"}


def c3_status(ours: Mapping, call: Call | None = None) -> str:
    """C3's status from ``check_c3``'s ``ours``: a loss term adds something where coCondenser is ahead on
    some measure, the MLM term's only where coCondenser's own head relies on [CLS]. Chapter 8."""
    parts = {}
    for term, _ in C3_TERMS:
        cs = [holds(called(c, call)) for c in ours[term].values() if c]
        known = [p for p in cs if p != ONE_SEED]
        parts[term] = None if not cs else (any(known) if known else ONE_SEED)
    co_head = ours.get("cocondenser_head_relies")
    if parts["mlm_term"] is True and co_head is not True:
        return NOT_ATTRIBUTABLE if co_head is False else NOT_ATTRIBUTABLE_UNGAUGED
    return claim_status(list(parts.values()))


def check_c3(e: Evidence, arm: str) -> Judged:
    """C3: both coCondenser loss terms add something (coCondenser table 4); the MLM term's gain is
    the Condenser head's only where coCondenser's own head relies on [CLS] (``head_gate``), so it
    is gated by that head alone, not by C0, C2 or C4. Chapter 8."""
    results, measures = e.results, (e.metric, e.recall)
    c3 = {term: {m: _compare(retrieval_score(results, "cocondenser", "round1", e.full, m),
                             retrieval_score(results, without, "round1", e.full, m)) for m in measures}
          for term, without in C3_TERMS}
    co_head = head_gate(e.results, "cocondenser")  # coCondenser's own head, not the Condenser arm's
    ours = {**c3, "cocondenser_head_relies": co_head, "rules": RULES_V2}
    status = c3_status(ours)
    words = "Full training set, round 1: " + "; ".join(
        f"{m}: " + ", ".join(comparison_text(c3[term][m], "coCondenser", label(without)) for term, without in C3_TERMS)
        for m in measures) + C3_GATE_WORDS.get(status, "") + "."
    return Judged(words, ours, status)


def check_c4(e: Evidence, arm: str) -> Judged:
    """C4 (C4m): round 2 with hard negatives mined by the arm's own round-1 retriever improves the
    pre-trained arms without collapse. Chapter 4."""
    shown = list(MAIN_ARMS) if arm == "condenser" else ["bert", arm]
    c4 = {a: _compare(retrieval_score(e.results, a, "round2", e.full, e.metric),
                      retrieval_score(e.results, a, "round1", e.full, e.metric)) for a in shown}
    collapse = [a for a, c in c4.items() if c and c["verdict"] == "worse"]
    words = f"{e.metric}, round 2 vs round 1: " + ", ".join(
        comparison_text(c4[a], f"{label(a)} round 2", "round 1") for a in shown if c4[a])
    if collapse:
        words += "; collapsed (round 2 below round 1 beyond the spread): " + ", ".join(label(a) for a in collapse)
    ours = {"metric": e.metric, "round2_vs_round1": c4, "collapsed": collapse,
            **({"nb_recall": e.results.get("nb_recall", {})} if arm == "condenser" else {})}
    return Judged(words + ".", ours, c4_status(ours))


def c4_status(ours: Mapping, call: Call | None = None) -> str:
    """C4's status from ``check_c4``'s ``ours``: the pre-trained arms' round 2, not BERT's. Chapter 4."""
    return claim_status([holds(called(c, call)) for a, c in ours["round2_vs_round1"].items() if a not in BERT_ARMS])


def check_c5(e: Evidence, arm: str) -> Judged:
    """C5 (C5m): BERT's CLS attention entropy profile changes more in fine-tuning than the
    Condenser's (mean |after - before| over layers). Chapter 5."""
    entropy = e.results.get("entropy", {})
    c5 = {b: _compare(entropy_change(e.results, b), entropy_change(e.results, arm)) for b in BERT_ARMS}
    shown = entropy if arm == "condenser" else (*BERT_ARMS, arm)
    ours = {"change": {a: entropy_change(e.results, a) for a in shown}, "bert_minus_condenser": c5}
    return Judged("Mean change of the per-layer CLS attention entropy (nats): " + ", ".join(
        comparison_text(c5[b], label(b), label(arm)) for b in c5) + ".", ours, c5_status(ours))


def c5_status(ours: Mapping, call: Call | None = None) -> str:
    """C5's (and C6's) status from its ``ours``: each BERT arm against the arm. Chapters 5 and 6."""
    return claim_status([holds(called(c, call)) for c in ours["bert_minus_condenser"].values()])


def check_c6(e: Evidence, arm: str) -> Judged:
    """C6 (C6m): the Condenser's retrieval fine-tuning loss is lower early in training than
    BERT's (mean loss over the first 25% of round-1 steps). Chapter 6."""
    early = {a: early_loss(e.results, a, e.full) for a in (MAIN_ARMS if arm == "condenser" else (*BERT_ARMS, arm))}
    c6 = {b: _compare(early[b], early[arm]) for b in BERT_ARMS}
    ours = {"early_loss": early, "bert_minus_condenser": c6}
    return Judged("Mean loss over the first quarter of round-1 steps (higher is worse): " + ", ".join(
        comparison_text(c6[b], label(b), label(arm)) for b in c6) + ".", ours, c5_status(ours))


def check_c7(e: Evidence, arm: str) -> Judged:
    """C7 (C7m): as good as or better than BERT on STS-b with little training data (the smallest
    two sizes), each size judged with its power. Chapter 7."""
    sts = e.results.get("sts", {})
    all_sts = [str(s) for s in e.results.get("sts_sizes", [])]
    low, name = all_sts[:2], label(arm)
    c7 = {s: {b: _power(sts_score(e.results, arm, s), sts_score(e.results, b, s), expected_gain("C7", s, all_sts))
              for b in BERT_ARMS} for s in low}
    words = "; ".join(f"STS-b Spearman at {s} pairs: "
                      + ", ".join(comparison_text(c7[s][b], name, label(b)) for b in c7[s]) for s in low)
    ours = {"by_size": c7, "all": sts, "rules": RULES_V2}
    return Judged((words or "not measured") + ".", ours, c7_status(ours))


def c7_status(ours: Mapping, call: Call | None = None) -> str:
    """C7's status from ``check_c7``'s ``ours``: each size's comparisons with their power. Chapter 7."""
    return power_claim_status([called(c, call, power=True) for by in ours["by_size"].values() for c in by.values()])


def check_c8(e: Evidence, arm: str) -> Judged:
    """C8 (C8m): neighbourhood recall (coCondenser eq. 17, figure 3): a round-1 retriever's top k
    covers more of the round-2 retriever's top n for the Condenser than for BERT (and for
    coCondenser than for Condenser); judged at the paper's n (50, else the largest the run has)
    and every depth k. Chapter 6."""
    nb = e.results.get("nb_recall", {})
    names = sorted({name for a in nb.values() for name in a})
    ns = sorted({int(name.split("@")[0][1:]) for name in names})
    n = 50 if 50 in ns else (ns[-1] if ns else None)
    depths = sorted((name for name in names if name.startswith(f"n{n}@")), key=lambda name: int(name.split("@k")[1]))
    pairs = (("condenser", "bert"), ("cocondenser", "condenser")) if arm == "condenser" else ((arm, "bert"),)
    c8 = {f"{a}_vs_{b}": {name: _compare(nb_recall(e.results, a, name), nb_recall(e.results, b, name)) for name in depths}
          for a, b in pairs}
    if not depths:
        return Judged("not measured.", {"n": n, **c8}, "not measured", {"n": n})
    words = "; ".join(f"{label(a)} vs {label(b)}: " + ", ".join(
        f"{name} {comparison_text(c, label(a), label(b))}" for name, c in c8[f"{a}_vs_{b}"].items()) for a, b in pairs)
    return Judged(words + ".", {"n": n, **c8}, c8_status({"n": n, **c8}), {"n": n})


def c8_status(ours: Mapping, call: Call | None = None) -> str:
    """C8's status from ``check_c8``'s ``ours``: every pair of arms at every depth. Chapter 6."""
    return claim_status([holds(called(c, call)) for key, pair in ours.items() if key != "n" for c in pair.values()])


CONTROL_WORDS = {"bert_cont_flops": "equal compute", "condenser_mod_nocls": "no bottleneck"}


def _flops_matched(results: Mapping) -> list[bool] | None:
    """Per pre-training seed, whether the equal-compute control's stage spent the modified
    Condenser's FLOPs within ``FLOPS_MATCH`` (None where either was not accounted)."""
    ctl, mod = pretraining_runs(results, "bert_cont_flops"), pretraining_runs(results, MODIFIED_ARM)
    flops = [[stage_flops(r) for r in runs] for runs in (ctl, mod)]
    if not ctl or len(ctl) != len(mod) or None in flops[0] + flops[1]:
        return None
    return [abs(c / m - 1) <= FLOPS_MATCH for c, m in zip(*flops)]


def check_attribution(e: Evidence, arm: str) -> Judged:
    """Am: the modified Condenser's path through [CLS] adds to its gain beyond what its compute and
    its targets give (pre-registered: "its gains come from its head reading [CLS]"; the test shows
    the arm beating each control, not the controls adding nothing). In each setting where it beats
    BERT-continued (C1m's and C7m's), it must also beat both controls (``CONTROL_WORDS``), each by
    the one-sided paired test: reproduced where every such setting holds, partly where some do.
    Each control's own gain over BERT-continued is recorded, not judged. Chapter 8."""
    results = e.results
    arms = results.get("arms", {})
    controls = [c for c in CONTROL_WORDS if c in arms]
    low = [str(s) for s in results.get("sts_sizes", [])][:2]
    where = {f"{e.metric} at {s} training queries": lambda a, s=s: retrieval_score(results, a, "round1", s, e.metric)
             for s in e.sizes}
    where.update({f"STS-b at {s} training pairs": lambda a, s=s: sts_score(results, a, s) for s in low})
    settings = {}
    for name, read in where.items():
        st = {"gain": _compare(read(arm), read("bert_cont")),
              "vs_control": {c: _compare(read(arm), read(c)) for c in controls},
              "control_vs_bert_cont": {c: _compare(read(c), read("bert_cont")) for c in controls}}
        settings[name] = {**st, "attributed": _attributed(st)}
    missing = [c for c in CONTROL_WORDS if c not in arms]
    matched = _flops_matched(results)
    ours = {"settings": settings, "flops_matched": matched, "rules": RULES_V2}
    return Judged("; ".join(_attribution_words(settings, controls, missing, matched)) + ".", ours,
                  am_status(ours))


def _attributed(setting: Mapping, call: Call | None = None) -> bool | None:
    """Whether the modified Condenser beats both controls in an Am ``setting``; None where it has no gain."""
    if holds(called(setting["gain"], call)) is not True:
        return None
    return all(holds(called(setting["vs_control"].get(c), call)) is True for c in CONTROL_WORDS)


def am_status(ours: Mapping, call: Call | None = None) -> str:
    """Am's status from ``check_attribution``'s ``ours``: its settings with a gain (``_attributed``);
    not measured where a control was not run or no setting has a gain. Chapter 8."""
    settings = ours["settings"].values()
    parts = [p for p in (_attributed(st, call) for st in settings) if p is not None]
    missing = any(c not in st["vs_control"] for st in settings for c in CONTROL_WORDS)  # a control not run
    return claim_status(parts) if parts and not missing else "not measured"


def _attribution_words(settings: Mapping, controls: Sequence[str], missing: Sequence[str],
                       matched: Sequence[bool] | None) -> list[str]:
    """Am's settings in words, then what is missing or unmatched."""
    mod, ctl = label(MODIFIED_ARM), label("bert_cont")
    words = []
    for name, st in settings.items():
        text = f"{name}: {comparison_text(st['gain'], mod, ctl)}"
        for c in controls:
            text += (f"; {comparison_text(st['vs_control'][c], mod, label(c))}; "
                     f"{comparison_text(st['control_vs_bert_cont'][c], label(c), ctl)}")
        words.append(text)
    if missing:
        words.append("no " + " and no ".join(CONTROL_WORDS[c] + f" control ({label(c)})" for c in missing) + " in this run")
    elif all(st["attributed"] is None for st in settings.values()):
        words.append(f"no setting where the {mod} beats {ctl}: no gain to attribute")
    if matched is not None and not all(matched):
        words.append(f"the equal-compute control's FLOPs differ from the {mod}'s by more than {FLOPS_MATCH:.0%} on "
                     "some seed, so it does not control compute there")
    return words
