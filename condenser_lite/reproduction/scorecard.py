"""The scorecard: the mechanism check C0, the papers' claims C1-C8 (and C0m-C8m and Am, the same
claims asked of a modified Condenser), their published numbers, judged by the rules of rules.py.

Explained in chapter 8 (``notebooks/08_scorecard.md``) and chapters 2 and 4-7, each of which
checks some claims. ``scorecard(results)`` turns a protocol results file into one verdict per
claim, from ``STATUSES``. Each claim of the registry (``registry.CLAIM``) is one entry of
``CLAIM_CHECKS``: the arm it asks about, the arms it names, its statement, the check that judges
it and when a results file makes it; ``scorecard`` runs them in the registry's order.

The rules are the pre-registered ones (commit ``PRE_REGISTRATION_COMMIT``, before the runs they
judge): C0 by the [CLS] reliance (``cls_reliance``, ``c0_rule``), C1 and C7 by a verdict that
knows its power (``power_verdict``: "reproduced", "reversed", "not reproduced", "not detectable
at this power"), and under rules version 2 every comparison over pre-trained models
(``unit_test``). C3's MLM term counts as the head's only where coCondenser's own head relies on
[CLS]. A results file whose Condenser-family runs predate the reliance gauge cannot be judged by
these rules and is refused. ``PAPER_RESULTS`` holds the numbers the papers publish for each claim
as data; ``paper_text`` renders them for the scorecard's table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..utils.errors import SchemaError
from .registry import CLAIM, MAIN_ARMS, MODIFIED_ARM, label
from .rules import (
    ALPHA_ONE_SIDED,
    EQUAL_FLOPS_STEPS,
    FLOPS_MATCH,
    LATE_LOSS_MARGIN,
    MODIFIED_CHOICE_SEEDS,
    NOT_ATTRIBUTABLE,
    NOT_ATTRIBUTABLE_UNGAUGED,
    ONE_SEED,
    PRE_REGISTERED_RULES,
    RELIANCE_THRESHOLD,
    RULES_V2,
    arm_seeds,
    c0_rule,
    claim_status,
    compare,
    get_path,
    head_gate,
    holds,
    judged_seeds,
    model_means,
    power_claim_status,
    power_verdict,
    pretraining_runs,
    reliance_by_seed,
    reliance_summary,
    rules_version,
    runs_without_reliance,
    stats,
    unit_test,
)


@dataclass(frozen=True)
class PaperTable:
    """Published numbers behind a claim: ``rows`` of values, one per ``columns`` entry. Chapter 8."""

    claim: str
    source: str
    measure: str
    columns: tuple[str, ...]
    rows: dict[str, tuple[float, ...]] = field(default_factory=dict)
    digits: int = 3  # every published number on the 0-1 scale of ours (the papers print x 100)

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
    PaperFinding("C0", "Condenser section 3.3", "no number published; the design: 'the late CLS representation is "
                 "therefore required to aggregate newly generated information later in the backbone, and the head "
                 "can then condition on late CLS to make LM predictions'"),
    PaperTable("C1", "Condenser table 5", "MS MARCO dev MRR@10, training queries", ("1K", "10K", "full"),
               {"BERT": (0.156, 0.228, 0.309), "Condenser": (0.192, 0.258, 0.338)}),
    PaperTable("C1", "Condenser table 3", "NQ Top-20, training queries", ("1K", "10K", "full"),
               {"BERT": (0.666, 0.759, 0.784), "Condenser": (0.727, 0.783, 0.801)}),
    PaperTable("C2", "coCondenser table 5", "MS MARCO dev", ("MRR@10", "R@1000"),
               {"Condenser w/o HN": (0.338, 0.961), "coCondenser w/o HN": (0.357, 0.978),
                "Condenser with HN": (0.366, 0.974), "coCondenser with HN": (0.382, 0.984)}),
    PaperTable("C3", "coCondenser table 4", "MS MARCO dev", ("MRR@10", "R@100", "R@1000"),
               {"Condenser": (0.366, 0.894, 0.974), "+ contrastive": (0.367, 0.903, 0.980),
                "+ MLM (coCondenser)": (0.382, 0.913, 0.984)}),
    PaperFinding("C3", "Condenser preprint figure 4", "the MLM-only continuation is its 'CT' arm, continued "
                 "pre-training on the MS MARCO corpus"),
    PaperTable("C4", "coCondenser table 5", "MS MARCO dev MRR@10", ("without", "with hard negatives"),
               {"Condenser": (0.338, 0.366), "coCondenser": (0.357, 0.382)}),
    PaperTable("C4", "Condenser table 7", "MS MARCO dev MRR@10", ("without", "with un-denoised hard negatives"),
               {"RocketQA": (0.333, 0.260)}),
    PaperFinding("C8", "coCondenser figure 3", "MS MARCO dev, n = 50 and 100, depths k up to 200: nb-recall "
                 "higher for Condenser than BERT and for coCondenser than Condenser at every k"),
    PaperFinding("C5", "Condenser figure 2", "qualitative: BERT's per-layer CLS entropy changes drastically after "
                 "fine-tuning, Condenser's and ICT's little"),
    PaperFinding("C6", "Condenser preprint figure 5", "NQ, first 10 epochs, log scale: Condenser's loss lower than "
                 "BERT's in early epochs"),
    PaperTable("C7", "Condenser table 1", "STS-b test Spearman, training pairs", ("500", "1K", "full"),
               {"BERT": (0.686, 0.714, 0.825), "Condenser": (0.766, 0.778, 0.856)}),
)


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


def paper_table(source: str) -> PaperTable:
    """The ``PAPER_RESULTS`` table named ``source`` (e.g. ``"Condenser table 1"``). Chapters 7, 8."""
    return next(r for r in PAPER_RESULTS if isinstance(r, PaperTable) and r.source == source)


def paper_gain(source: str, column: str, arm: str = "Condenser", base: str = "BERT") -> float:
    """The paper's relative gain of ``arm`` over ``base`` in one column of a ``PAPER_RESULTS``
    table (e.g. ``paper_gain("Condenser table 5", "full")`` = 0.338 / 0.309 - 1). Chapter 8."""
    table = paper_table(source)
    i = table.columns.index(column)
    return table.rows[arm][i] / table.rows[base][i] - 1


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


def early_loss(results: Mapping, arm: str, label: str, frac: float = 0.25) -> dict | None:
    """Mean round-1 fine-tuning loss over the first ``frac`` of the steps, per seed, as ``stats``
    (claim C6; ``frac=1`` averages every step). Explained in chapter 6."""
    curves = get_path(results, "loss_curves", arm, label)
    if not curves:
        return None
    vals = [float(np.mean(c[: max(1, int(len(c) * frac))])) for c in curves]
    out = stats(vals)
    seeds = results.get("_unit_seeds", {}).get(arm)  # rules version 2: the pre-trained model as the unit
    return {**out, "models": model_means(vals, seeds)} if seeds else out


def fixed(value: float, digits: int = 3, signed: bool = False) -> str:
    """``value`` with ``digits`` decimals (``signed``: with its sign, ``+0.012``), never
    ``-0.000``: a tiny negative rounds to zero. Chapter 8."""
    return f"{round(value, digits) + 0.0:{'+' if signed else ''}.{digits}f}"


def p_text(p: float | None, equals: str = " ") -> str:
    """A p-value in words: ``p 0.042`` (``equals=" = "``: ``p = 0.042``), ``p < 0.001`` where
    three decimals would read 0.000, a dash where there is none. Chapter 8."""
    if p is None or p != p:  # None or NaN
        return "–"
    return "p < 0.001" if p < 0.0005 else f"p{equals}{p:.3f}"


def flops_text(log10: float) -> str:
    """A FLOPs count given as its log10, in prose: ``flops_text(15.5)`` is ``3.2 × 10¹⁵``.
    Chapters 8 and 10."""
    exponent = int(np.floor(log10))
    power = str(exponent).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{10 ** (log10 - exponent):.1f} × 10{power}"


FAR_DECADES = 3  # beyond 1,000 times the compute measured, a straight line says nothing worth a number


def _times_text(decades: float) -> str:
    """How many times one FLOPs count is another, from the difference of their log10 (at most
    ``FAR_DECADES``: ``trend_text`` gives no number beyond)."""
    ratio = 10 ** decades
    return f"{ratio:,.0f} times" if ratio >= 10 else f"{ratio:.1f} times"


def trend_text(trend: Mapping, top_log_flops: float, subject: str = "The training-length trend",
               brief: bool = False) -> str:
    """The mechanism study's pre-registered trend (``rules.scaling_trend``'s result) in words,
    without a final stop; ``top_log_flops``: the largest Condenser stage measured (log10 FLOPs).
    A rise gives where the mean line reaches the threshold, said to be an extrapolation where it
    lies past the data (no number beyond ``FAR_DECADES`` decades past it), and (unless ``brief``) the range the slope's limits give with the mean
    point held fixed, which is narrower than a confidence interval for that FLOPs count. No
    detectable rise gives the fewest FLOPs at which the interval's upper slope would reach the
    threshold: within the measured range (a rise that steep is not ruled out), past it, or not
    within ``FAR_DECADES`` decades. Chapters 8 and 10."""
    lo, hi = trend["slope_interval"]
    level = f"{trend['threshold']:g}"
    said = f"{subject} {'shows no detectable rise' if trend['flat'] else 'rises'}"
    if not brief:
        said += (f": a mean slope of {trend['mean_slope']:.3f} reliance per tenfold FLOPs, "
                 f"{trend['confidence']:.0%} interval {lo:.3f} to {hi:.3f} over {len(trend['slopes'])} seeds")
    if not trend["flat"]:
        cross = trend["crossing_log_flops"]
        if cross - top_log_flops > FAR_DECADES:
            return (said + f"; its line would not reach {level} within {_times_text(FAR_DECADES)} the "
                    "largest stage measured")
        where = ("within the measured range" if cross <= top_log_flops else
                 f"a straight-line extrapolation to {_times_text(cross - top_log_flops)} the largest stage "
                 "measured")
        said += f"; its line reaches {level} at about {flops_text(cross)} FLOPs ({where}"
        if not brief:
            left, right = trend["crossing_interval"]
            said += (f"; {flops_text(left)} to {flops_text(right)} with the slope's {trend['confidence']:.0%} "
                     "limits and the mean point held fixed, a range narrower than a confidence interval "
                     "for that count")
        return said + ")"
    bound = trend["bound_log_flops"]
    if bound is None:
        return said + f"; not even the interval's upper slope rises, so no line it allows reaches {level}"
    if bound <= top_log_flops:
        return (said + f"; the interval's upper slope would carry the line to {level} by {flops_text(bound)} "
                "FLOPs, within the measured range, so a rise that steep is not ruled out")
    if bound - top_log_flops > FAR_DECADES:
        return (said + f"; even the interval's upper slope would not reach {level} within "
                f"{_times_text(FAR_DECADES)} the largest stage measured")
    return (said + f"; even the interval's upper slope would reach {level} only at about "
            f"{flops_text(bound)} FLOPs, {_times_text(bound - top_log_flops)} the largest stage measured")


def _compare(a: Mapping | None, b: Mapping | None) -> dict | None:
    """``a`` against ``b`` by the file's rules: over pre-trained models (``unit_test``) where both
    carry their ``models`` (rules version 2), else by the spread (``compare``, version 1)."""
    if a is None or b is None or a.get("mean") is None or b.get("mean") is None:
        return None
    if a.get("models") and b.get("models"):
        return unit_test(a["models"], b["models"])
    return compare(a, b)


def _power(a: Mapping | None, b: Mapping | None, gain: float | None) -> dict | None:
    """A claimed improvement judged with its power by the file's rules (``unit_test`` with the
    paper's effect at our scale, ``gain`` x b's mean; version 1: ``power_verdict``)."""
    if a is None or b is None or a.get("mean") is None or b.get("mean") is None:
        return None
    if a.get("models") and b.get("models"):
        expected = None if gain is None else gain * float(np.mean(b["models"]["means"]))
        return {**unit_test(a["models"], b["models"], expected), "gain": gain}
    return power_verdict(a, b, gain)


def _with_models(results: Mapping) -> dict:
    """A copy of ``results`` whose per-run numbers (retrieval, STS-b, nb-recall, the entropy
    change, and the early fine-tuning loss through ``_unit_seeds``) also carry their means per
    pre-trained model (``model_means``): what rules version 2 tests. A published checkpoint (no
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


def _sentence(text: str) -> str:
    """``text`` starting with a capital: a claim about the "modified Condenser" is a sentence too."""
    return text[:1].upper() + text[1:]


def _said(c: Mapping | None, a: str, b: str, digits: int = 3) -> str:
    """One comparison in words: ``a 0.123 vs b 0.100 (better)``; a power-aware one adds the
    smallest difference the run could detect and the paper's effect at our scale; one tested over
    pre-trained models (rules version 2) its p-value and the number of models."""
    if c is None:
        return f"{a} vs {b} not measured"
    if c.get("p") is not None:
        n = c["n"] if isinstance(c["n"], int) else "/".join(map(str, c["n"]))
        verdict = f"{c['verdict']}, one-sided {p_text(c['p'], equals=' = ')} over {n} pre-trained models"
        c = {**c, "verdict": verdict}
    power = "" if c.get("mdd") is None else (
        f"; detectable {c['mdd']:.{digits}f}" + ("" if c.get("expected") is None else
                                                 f", the paper's gain here {c['expected']:.{digits}f}"))
    return f"{a} {c['a']:.{digits}f} vs {b} {c['b']:.{digits}f} ({c['verdict']}{power})"



# ---- what every claim's check reads ----------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """One results file as the claims' checks read it: its numbers (under rules version 2 also
    their means per pre-trained model, ``_with_models``), the rules' ``version``, the budget's
    main ``metric`` (nDCG@10 on SciFact) and ``recall`` metric (R@100), and the training
    ``sizes`` as run. Chapter 8 (``notebooks/08_scorecard.md``)."""

    results: Mapping
    version: int
    metric: str
    recall: str
    sizes: tuple[str, ...]

    @property
    def full(self) -> str | None:
        """The full training set's size: the last one run."""
        return self.sizes[-1] if self.sizes else None

    @property
    def rules(self) -> str:
        """The rules the comparisons are judged by, as a claim's ``ours["rules"]`` names them."""
        return RULES_V2 if self.version >= 2 else PRE_REGISTERED_RULES

    def has(self, arm: str) -> bool:
        return arm in self.results.get("arms", {})


def read_evidence(results: Mapping, version: int | None = None) -> Evidence:
    """``results`` as the checks read them, judged by rules ``version`` (default: the file's own,
    ``rules_version``). Chapter 8."""
    version = rules_version(results) if version is None else version
    if version >= 2:  # the pre-trained model is the unit: every comparison over pre-training seeds
        results = _with_models(results)
    metrics = results.get("preset", {}).get("metrics", ["nDCG@10", "RR@10", "R@100"])
    recall = next((m for m in metrics if m.startswith("R@")), metrics[-1])
    return Evidence(results, version, metrics[0], recall, tuple(str(s) for s in results.get("train_sizes", [])))


def refuse_ungauged(results: Mapping) -> None:
    """Raise where a Condenser-family run of ``results`` logged no [CLS]-reliance gauges though it
    logged its head's others (``runs_without_reliance``): the pre-registered C0 and the C3 gate
    read the reliance, so such a file cannot be judged; re-running it logs them. Chapter 8."""
    arms = runs_without_reliance(results)
    if arms:
        name = get_path(results, "preset", "name") or "<preset>"
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


# ---- the checks, one per claim (asked of ``arm``: the Condenser, or the modified one) --------------


def _c0(e: Evidence, arm: str) -> Judged:
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
    seeds, keep = arm_seeds(results, arm), judged_seeds(results, arm, e.version)
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


def _c1(e: Evidence, arm: str) -> Judged:
    """C1 (C1m): better than both BERT arms as a retriever initialiser at every training size, most
    at the smallest, the gap narrowing with more data (round 1, BM25 negatives); each size judged
    with its power, the narrowing only where the arm is ahead at the smallest size. Chapter 8."""
    results, sizes, name = e.results, list(e.sizes), label(arm)
    small, full = (sizes[0], sizes[-1]) if sizes else (None, None)

    def against(size: str, base: str) -> dict | None:
        a, b = (get_path(results, "retrieval", x, "round1", size, e.metric) for x in (arm, base))
        return _power(a, b, expected_gain("C1", size, sizes))

    per_size = {s: {b: against(s, b) for b in BERT_ARMS} for s in sizes}
    beats_small = [holds(per_size.get(small, {}).get(b)) for b in BERT_ARMS] if small else [None]
    gaps = {s: [c["diff"] for c in per_size[s].values() if c] for s in sizes}
    narrowing = None
    if small and full and small != full and gaps.get(small) and gaps.get(full):
        narrowing = min(gaps[small]) > min(gaps[full])
    ahead = narrowing if beats_small and all(b is True for b in beats_small) else None
    words = "; ".join(f"{e.metric} at {s} training queries: " + ", ".join(
        _said(per_size[s][b], name, label(b)) for b in BERT_ARMS) for s in sizes)
    return Judged((words or "not measured") + ".",
                  {"metric": e.metric, "by_size": per_size, "bm25": get_path(results, "bm25", "full", e.metric),
                   "narrowing": narrowing, "rules": e.rules},
                  power_claim_status([c for s in sizes for c in per_size[s].values()], [ahead]))


def _c2(e: Evidence, arm: str) -> Judged:
    """C2: coCondenser beats Condenser, visibly in recall, in round 1 and round 2, and beats the
    Condenser MLM continued on the target corpus (not target-corpus exposure alone). Chapter 8."""
    retrieval, measures = e.results.get("retrieval", {}), (e.metric, e.recall)

    def against(base: str, rnd: str = "round1") -> dict:
        return {m: _compare(get_path(retrieval, "cocondenser", rnd, e.full, m), get_path(retrieval, base, rnd, e.full, m))
                for m in measures}

    r1, r2, ctl = against("condenser"), against("condenser", "round2"), against("co_mlm_only")
    words = (f"{e.recall}, full training set: round 1 {_said(r1[e.recall], 'coCondenser', 'Condenser')}, "
             f"{_said(ctl[e.recall], 'coCondenser', 'Condenser MLM only on the target corpus')}; round 2 "
             f"{_said(r2[e.recall], 'coCondenser', 'Condenser')}.")
    return Judged(words, {"round1": r1, "round2": r2, "vs_target_corpus_mlm": ctl},
                  claim_status([holds(c) for c in (r1[e.recall], r2[e.recall], ctl[e.recall])]))


C3_TERMS = (("mlm_term", "co_contrastive_only"), ("contrastive_term", "co_mlm_only"))  # a term, the arm without it
C3_GATE_WORDS = {
    NOT_ATTRIBUTABLE: "; the MLM term's gain is not the Condenser head's: coCondenser's own head does not rely on [CLS]",
    NOT_ATTRIBUTABLE_UNGAUGED: "; the MLM term's gain cannot be credited to the Condenser head: coCondenser's own "
                               "head was not gauged"}


def _c3(e: Evidence, arm: str) -> Judged:
    """C3: both coCondenser loss terms add something (coCondenser table 4); the MLM term's gain is
    the Condenser head's only where coCondenser's own head relies on [CLS] (``head_gate``), so it
    is gated by that head alone, not by C0, C2 or C4. Chapter 8."""
    retrieval, measures = e.results.get("retrieval", {}), (e.metric, e.recall)
    c3 = {term: {m: _compare(get_path(retrieval, "cocondenser", "round1", e.full, m),
                             get_path(retrieval, without, "round1", e.full, m)) for m in measures}
          for term, without in C3_TERMS}
    parts = {}
    for term, by_measure in c3.items():  # a term adds something where coCondenser is ahead on some measure
        cs = [holds(c) for c in by_measure.values() if c]
        known = [p for p in cs if p != ONE_SEED]
        parts[term] = None if not cs else (any(known) if known else ONE_SEED)
    status = claim_status(list(parts.values()))
    co_head = head_gate(e.results, "cocondenser")  # coCondenser's own head, not the Condenser arm's
    if parts["mlm_term"] is True and co_head is not True:
        status = NOT_ATTRIBUTABLE if co_head is False else NOT_ATTRIBUTABLE_UNGAUGED
    words = "Full training set, round 1: " + "; ".join(
        f"{m}: " + ", ".join(_said(c3[term][m], "coCondenser", label(without)) for term, without in C3_TERMS)
        for m in measures) + C3_GATE_WORDS.get(status, "") + "."
    return Judged(words, {**c3, "cocondenser_head_relies": co_head, "rules": e.rules}, status)


def _c4(e: Evidence, arm: str) -> Judged:
    """C4 (C4m): round 2 with hard negatives mined by the arm's own round-1 retriever improves the
    pre-trained arms without collapse. Chapter 4."""
    retrieval = e.results.get("retrieval", {})
    shown = list(MAIN_ARMS) if arm == "condenser" else ["bert", arm]
    c4 = {a: _compare(get_path(retrieval, a, "round2", e.full, e.metric), get_path(retrieval, a, "round1", e.full, e.metric))
          for a in shown}
    judged = ("condenser", "cocondenser") if arm == "condenser" else (arm,)
    collapse = [a for a, c in c4.items() if c and c["verdict"] == "worse"]
    words = f"{e.metric}, round 2 vs round 1: " + ", ".join(
        _said(c4[a], f"{label(a)} round 2", "round 1") for a in shown if c4[a])
    if collapse:
        words += "; collapsed (round 2 below round 1 beyond the spread): " + ", ".join(label(a) for a in collapse)
    return Judged(words + ".",
                  {"metric": e.metric, "round2_vs_round1": c4, "collapsed": collapse,
                   **({"nb_recall": e.results.get("nb_recall", {})} if arm == "condenser" else {})},
                  claim_status([holds(c4[a]) for a in judged]))


def _c5(e: Evidence, arm: str) -> Judged:
    """C5 (C5m): BERT's CLS attention entropy profile changes more in fine-tuning than the
    Condenser's (mean |after - before| over layers). Chapter 5."""
    entropy = e.results.get("entropy", {})
    c5 = {b: _compare(get_path(entropy, b, "mean_abs_change"), get_path(entropy, arm, "mean_abs_change"))
          for b in BERT_ARMS}
    shown = entropy if arm == "condenser" else (*BERT_ARMS, arm)
    return Judged("Mean change of the per-layer CLS attention entropy (nats): " + ", ".join(
        _said(c5[b], label(b), label(arm)) for b in c5) + ".",
        {"change": {a: get_path(entropy, a, "mean_abs_change") for a in shown}, "bert_minus_condenser": c5},
        claim_status([holds(c) for c in c5.values()]))


def _c6(e: Evidence, arm: str) -> Judged:
    """C6 (C6m): the Condenser's retrieval fine-tuning loss is lower early in training than
    BERT's (mean loss over the first 25% of round-1 steps). Chapter 6."""
    early = {a: early_loss(e.results, a, e.full) for a in (MAIN_ARMS if arm == "condenser" else (*BERT_ARMS, arm))}
    c6 = {b: _compare(early[b], early[arm]) for b in BERT_ARMS}
    return Judged("Mean loss over the first quarter of round-1 steps (higher is worse): " + ", ".join(
        _said(c6[b], label(b), label(arm)) for b in c6) + ".",
        {"early_loss": early, "bert_minus_condenser": c6}, claim_status([holds(c) for c in c6.values()]))


def _c7(e: Evidence, arm: str) -> Judged:
    """C7 (C7m): as good as or better than BERT on STS-b with little training data (the smallest
    two sizes), each size judged with its power. Chapter 7."""
    sts = e.results.get("sts", {})
    all_sts = [str(s) for s in e.results.get("sts_sizes", [])]
    low, name = all_sts[:2], label(arm)
    c7 = {s: {b: _power(get_path(sts, arm, s), get_path(sts, b, s), expected_gain("C7", s, all_sts)) for b in BERT_ARMS}
          for s in low}
    words = "; ".join(f"STS-b Spearman at {s} pairs: " + ", ".join(_said(c7[s][b], name, label(b)) for b in c7[s])
                      for s in low)
    return Judged((words or "not measured") + ".", {"by_size": c7, "all": sts, "rules": e.rules},
                  power_claim_status([c for s in low for c in c7[s].values()]))


def _c8(e: Evidence, arm: str) -> Judged:
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
    c8 = {f"{a}_vs_{b}": {name: _compare(get_path(nb, a, name), get_path(nb, b, name)) for name in depths}
          for a, b in pairs}
    if not depths:
        return Judged("not measured.", {"n": n, **c8}, "not measured", {"n": n})
    words = "; ".join(f"{label(a)} vs {label(b)}: " + ", ".join(
        f"{name} {_said(c, label(a), label(b))}" for name, c in c8[f"{a}_vs_{b}"].items()) for a, b in pairs)
    return Judged(words + ".", {"n": n, **c8}, claim_status([holds(c) for pair in c8.values() for c in pair.values()]),
                  {"n": n})


CONTROL_WORDS = {"bert_cont_flops": "equal compute", "condenser_mod_nocls": "no bottleneck"}


def _flops_matched(results: Mapping) -> list[bool] | None:
    """Per pre-training seed, whether the equal-compute control's stage spent the modified
    Condenser's FLOPs within ``FLOPS_MATCH`` (None where either was not accounted)."""
    ctl, mod = pretraining_runs(results, "bert_cont_flops"), pretraining_runs(results, MODIFIED_ARM)
    flops = [[get_path(r, "compute", "stage", "flops") for r in runs] for runs in (ctl, mod)]
    if not ctl or len(ctl) != len(mod) or None in flops[0] + flops[1]:
        return None
    return [abs(c / m - 1) <= FLOPS_MATCH for c, m in zip(*flops)]


def _attribution(e: Evidence, arm: str) -> Judged:
    """Am (rules version 2): the modified Condenser's path through [CLS] adds to its gain beyond
    what its compute and its targets give (the pre-registered wording: "its gains come from its
    head reading [CLS]"; the test shows the arm beating each control, not the controls adding
    nothing). Judged where the modified Condenser beats BERT-continued (a gain to attribute: C1m's settings,
    the main metric at each training size, and C7m's, STS-b at the two smallest sizes): there the
    [CLS] path adds to the gain only if the modified Condenser also beats both controls,
    BERT-continued for the same FLOPs (``bert_cont_flops``) and the modified Condenser with its
    [CLS] path cut (``condenser_mod_nocls``), each by the one-sided paired test. Reproduced where
    every such setting holds, partly where some do. Each setting also records which control
    itself beats BERT-continued: what the gain comes from where [CLS] does not explain it. Chapter 8."""
    results = e.results
    arms = results.get("arms", {})
    controls = [c for c in CONTROL_WORDS if c in arms]
    retrieval, sts = results.get("retrieval", {}), results.get("sts", {})
    low = [str(s) for s in results.get("sts_sizes", [])][:2]
    where = {f"{e.metric} at {s} training queries": lambda a, s=s: get_path(retrieval, a, "round1", s, e.metric)
             for s in e.sizes}
    where.update({f"STS-b at {s} training pairs": lambda a, s=s: get_path(sts, a, s) for s in low})
    settings, parts = {}, []
    for name, read in where.items():
        gain = _compare(read(arm), read("bert_cont"))
        beats = {c: _compare(read(arm), read(c)) for c in controls}
        control_gain = {c: _compare(read(c), read("bert_cont")) for c in controls}
        to_attribute = holds(gain) is True
        attributed = (all(holds(beats.get(c)) is True for c in CONTROL_WORDS) if to_attribute else None)
        settings[name] = {"gain": gain, "vs_control": beats, "control_vs_bert_cont": control_gain,
                          "attributed": attributed}
        if to_attribute:
            parts.append(attributed)
    missing = [c for c in CONTROL_WORDS if c not in arms]
    status = "not measured" if missing or not parts else claim_status(parts)
    matched = _flops_matched(results)
    return Judged("; ".join(_attribution_words(settings, controls, missing, parts, matched)) + ".",
                  {"settings": settings, "flops_matched": matched, "rules": RULES_V2}, status)


def _attribution_words(settings: Mapping, controls: Sequence[str], missing: Sequence[str], parts: Sequence,
                       matched: Sequence[bool] | None) -> list[str]:
    """Am's settings in words, then what is missing or unmatched."""
    mod, ctl = label(MODIFIED_ARM), label("bert_cont")
    words = []
    for name, st in settings.items():
        text = f"{name}: {_said(st['gain'], mod, ctl)}"
        for c in controls:
            text += f"; {_said(st['vs_control'][c], mod, label(c))}; {_said(st['control_vs_bert_cont'][c], label(c), ctl)}"
        words.append(text)
    if missing:
        words.append("no " + " and no ".join(CONTROL_WORDS[c] + f" control ({label(c)})" for c in missing) + " in this run")
    elif not parts:
        words.append(f"no setting where the {mod} beats {ctl}: no gain to attribute")
    if matched is not None and not all(matched):
        words.append(f"the equal-compute control's FLOPs differ from the {mod}'s by more than {FLOPS_MATCH:.0%} on "
                     "some seed, so it does not control compute there")
    return words


# ---- the claims as data -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimCheck:
    """How the scorecard judges one claim of ``registry.CLAIM``: the ``arm`` it is asked of (the
    Condenser, or the modified Condenser for the C*m claims), the ``arms`` it names (shown by
    label), its ``statement`` (a template: ``{name}`` / ``{Name}`` the arm's label, the rules'
    numbers of ``STATEMENT_FIELDS`` and the ``fields`` its check adds), the ``check`` that judges
    it, and ``applies``: whether a results file makes the claim at all. Chapter 8
    (``notebooks/08_scorecard.md``)."""

    id: str
    arm: str
    arms: tuple[str, ...]
    statement: str
    check: Callable[[Evidence, str], Judged]
    applies: Callable[[Evidence], bool]


def _always(e: Evidence) -> bool:
    return True


def _with_modified(e: Evidence) -> bool:
    """The run has a modified Condenser: C0m, C1m and C7m are asked of it under every rules version."""
    return e.has(MODIFIED_ARM)


def _with_modified_v2(e: Evidence) -> bool:
    """C4m-C6m, C8m and Am: asked of a modified Condenser under rules version 2, which added them."""
    return e.has(MODIFIED_ARM) and e.version >= 2


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
    ClaimCheck("C0", "condenser", ("condenser", "bert_cont"), C0_STATEMENT, _c0, _always),
    ClaimCheck("C0m", MODIFIED_ARM, (MODIFIED_ARM, "bert_cont"), C0_STATEMENT, _c0, _with_modified),
    ClaimCheck("C1", "condenser", ("condenser", *BERT_ARMS), C1_STATEMENT, _c1, _always),
    ClaimCheck("C1m", MODIFIED_ARM, (MODIFIED_ARM, *BERT_ARMS), _of_modified(C1_STATEMENT, "C1"), _c1, _with_modified),
    ClaimCheck("C2", "cocondenser", ("cocondenser", "condenser", "co_mlm_only"),
               "coCondenser beats Condenser, visibly in recall (full training set; round 1 and, where run, round 2), "
               "and beats the equal-step control that continues Condenser's MLM on the target corpus without the "
               "contrastive loss, so the gain is not target-corpus exposure alone.", _c2, _always),
    ClaimCheck("C3", "cocondenser", ("cocondenser", "co_contrastive_only", "co_mlm_only"),
               "Both coCondenser loss terms add something: coCondenser beats Condenser further trained with the "
               "contrastive loss only, and with the Condenser MLM loss only (full training set, round 1).", _c3, _always),
    ClaimCheck("C4", "condenser", ("condenser", "cocondenser", "bert"),
               "Round 2 with hard negatives mined by the arm's own round-1 retriever improves the pre-trained arms "
               "(Condenser, coCondenser) without collapse.", _c4, _always),
    ClaimCheck("C4m", MODIFIED_ARM, (MODIFIED_ARM, "bert"), _of_modified(
        "Round 2 with hard negatives mined by its own round-1 retriever improves the {name} without collapse.", "C4"),
        _c4, _with_modified_v2),
    ClaimCheck("C5", "condenser", (*BERT_ARMS, "condenser"), C5_STATEMENT, _c5, _always),
    ClaimCheck("C5m", MODIFIED_ARM, (*BERT_ARMS, MODIFIED_ARM), _of_modified(C5_STATEMENT, "C5"), _c5, _with_modified_v2),
    ClaimCheck("C6", "condenser", ("condenser", *BERT_ARMS), C6_STATEMENT, _c6, _always),
    ClaimCheck("C6m", MODIFIED_ARM, (MODIFIED_ARM, *BERT_ARMS), _of_modified(C6_STATEMENT, "C6"), _c6, _with_modified_v2),
    ClaimCheck("C7", "condenser", ("condenser", *BERT_ARMS), C7_STATEMENT, _c7, _always),
    ClaimCheck("C7m", MODIFIED_ARM, (MODIFIED_ARM, *BERT_ARMS), _of_modified(C7_STATEMENT, "C7"), _c7, _with_modified),
    ClaimCheck("C8", "condenser", ("condenser", "bert", "cocondenser"),
               "Neighbourhood recall (nb-recall^{n}@k, coCondenser eq. 17): the round-1 retriever's top k covers more "
               "of the round-2 retriever's top n for Condenser than for BERT, and for coCondenser than for Condenser, "
               "at every depth k (round 2 run for these three arms).", _c8, _always),
    ClaimCheck("C8m", MODIFIED_ARM, (MODIFIED_ARM, "bert"), _of_modified(
        "Neighbourhood recall (nb-recall^{n}@k): the {name}'s round-1 top k covers more of its round-2 top n than "
        "BERT's does, at every depth k.", "C8"), _c8, _with_modified_v2),
    ClaimCheck("Am", MODIFIED_ARM, (MODIFIED_ARM, "bert_cont", *CONTROL_WORDS),
               "The {name}'s path through [CLS] adds to its gain over {ctl} beyond what its compute and its targets "
               "give: wherever it beats {ctl}, it also beats {ctl} trained for the same FLOPs ({flops_steps:,} "
               "updates) and the same {name} with its [CLS] path cut (the head reads a learned constant: the same "
               "masked copy, targets and compute). The controls may recover part of the gain themselves: their own "
               "gains over {ctl} are shown, not judged. Each comparison a one-sided paired t-test at {alpha:.0%} over "
               "pre-training seeds (rules version 2).",
               _attribution, _with_modified_v2),
)
CHECK = {c.id: c for c in CLAIM_CHECKS}


def judge_claim(check: ClaimCheck, evidence: Evidence) -> dict:
    """One claim of the scorecard: its ``id``, ``statement``, ``arms`` (labels), our numbers in
    words (``comparison``), the papers' (``paper``), ours machine-readable (``ours``) and the
    ``status`` (``verdict`` too, the book's word). Chapter 8 (``notebooks/08_scorecard.md``)."""
    found = check.check(evidence, check.arm)
    name = label(check.arm)
    statement = check.statement.format(name=name, Name=_sentence(name), **STATEMENT_FIELDS, **(found.fields or {}))
    return {"id": check.id, "statement": statement, "arms": [label(a) for a in check.arms],
            "comparison": found.comparison, "paper": paper_text(check.id), "ours": found.ours,
            "status": found.status, "verdict": found.status}


def scorecard(results: Mapping, version: int | None = None) -> list[dict]:
    """Every claim a results file makes (``CLAIM_CHECKS``, in the registry's order), each with the
    papers' numbers, ours and a status from ``STATUSES``, judged by rules ``version`` (default:
    the file's own). A file whose Condenser-family runs logged no [CLS]-reliance gauges is
    refused (``refuse_ungauged``). Explained in chapter 8 (``notebooks/08_scorecard.md``)."""
    refuse_ungauged(results)
    evidence = read_evidence(results, version)
    return [judge_claim(CHECK[cid], evidence) for cid in CLAIM if CHECK[cid].applies(evidence)]


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
    base = cid[:-1] if cid.endswith("m") and cid[:-1] in CLAIM else cid
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
        return rest[0].replace("n", "n = ", 1).replace("@k", ", k = "), label(a), label(b)
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
    (``rules.unit_test``'s dict under version 2). Chapter 8."""
    return [(*_sides(claim["id"], path, claim.get("arms", [])), c) for path, c in comparison_paths(claim.get("ours", {}))]


def claim_rows(claim: Mapping) -> list[dict]:
    """One row per comparison behind a claim, for a table beside the prose: the setting, our two
    numbers, their difference and spread, for the pre-registered claims the smallest difference
    the run could detect and the paper's effect at our scale, for a comparison tested over
    pre-trained models (rules version 2) each model's difference and the one-sided p, and the
    verdict. Chapter 8."""
    rows = []
    for setting, a, b, c in comparisons(claim):
        row = {"setting": setting, "a": a, "b": b, "ours (a vs b)": f"{c['a']:.3f} vs {c['b']:.3f}",
               "compared": f"{a} {c['a']:.3f} vs {b} {c['b']:.3f}",
               "difference": round(c["diff"], 3), "spread": round(c["spread"], 3)}
        if "mdd" in c:
            row["detectable"] = None if c["mdd"] is None else round(c["mdd"], 3)
            row["paper's effect here"] = None if c.get("expected") is None else round(c["expected"], 3)
        if "p" in c:  # rules version 2: the test over pre-trained models, and each model's difference
            row["per pre-trained model (a - b)"] = ", ".join(
                f"{seed}: {fixed(d, signed=True)}" for seed, d in (c.get("per_seed") or {}).items()) or "unpaired"
            row["p (one-sided)"] = None if c["p"] is None else round(c["p"], 3)
        row["verdict"] = c["verdict"]
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
