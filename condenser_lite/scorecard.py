"""The scorecard: the mechanism check C0, the papers' claims C1-C7, their published numbers,
and the verdict rules.

Explained in chapter 8 (the scorecard page) and chapters 2 and 4-7, each of which checks some
claims. ``scorecard(results)`` turns a protocol results file into one verdict per claim, from
``STATUSES``: a difference between two arms counts only where it exceeds the seed spread
(``compare``: |mean_a - mean_b| > std_a + std_b), and from one seed no difference is called.
C0 ("the Condenser head relies on [CLS]") reads the pre-training gauges; C3's MLM term counts
as the head's only where coCondenser's own head relies on [CLS]. ``PAPER_RESULTS`` holds the
numbers the papers publish for each claim as data; ``paper_text`` renders them for the
scorecard's table.

Issue 17 pre-registered sharper rules (commit ``PRE_REGISTRATION_COMMIT``, before the runs they
judge): C0 by the [CLS] reliance (``cls_reliance``, ``c0_rule``) and C1 / C7 by a verdict that
knows its power (``power_verdict``: "reproduced", "reversed", "not reproduced", "not detectable
at this power"). ``scorecard`` applies them to a results file whose Condenser arm logged the
reliance gauges, and the old rules (labelled ``OLD_RULES`` in each claim's ``ours["rules"]``) to an
older file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from .plots import label
from .presets import MAIN_ARMS

ONE_SEED = "one seed, no spread"  # a verdict, and a claim's status, where no spread exists
NOT_ATTRIBUTABLE = "not attributable: the head ignores [CLS]"
NOT_ATTRIBUTABLE_C0 = "not attributable: C0 does not hold"  # the old gate's status (kept for older files)
NOT_ATTRIBUTABLE_UNGAUGED = "not attributable: coCondenser's head was not gauged"
STATUSES = ("reproduced", "partly reproduced", "not reproduced at this scale", ONE_SEED, NOT_ATTRIBUTABLE,
            NOT_ATTRIBUTABLE_C0, NOT_ATTRIBUTABLE_UNGAUGED, "not measured",
            "reversed", "not reproduced", "not detectable at this power")  # the last three: power-aware claims
CLS_GAP_MARGIN = 2.0  # the old C0 rule (results files before issue 17): the [CLS]-swap gap above this x its noise

# Pre-registered rules (issue 17): fixed before the runs they judge, never changed after seeing a number.
RELIANCE_THRESHOLD = 0.2  # C0: the head's own late [CLS] closes at least this share of its deficit
LATE_LOSS_MARGIN = 0.05  # C0: nats; the Condenser's late MLM loss this close to BERT-continued's
ALPHA = 0.05  # two-sided significance level of the minimum detectable difference
POWER = 0.8  # the chance of detecting a true difference of that size
NOT_DETECTABLE = "not detectable at this power"
POWER_VERDICTS = ("reproduced", "reversed", "not reproduced", NOT_DETECTABLE, ONE_SEED)


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
    PaperFinding("C0", "Condenser section 3.3", "no number published; the design: 'the late CLS representation is "
                 "therefore required to aggregate newly generated information later in the backbone, and the head "
                 "can then condition on late CLS to make LM predictions'"),
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
    ``"better"`` / ``"worse"`` (difference beyond the spread) or ``"within spread"``; ``ONE_SEED``
    (``"one seed, no spread"``) where either side has a single value, so there is no spread to
    judge a difference by. Chapter 8."""
    if not a or not b or a.get("mean") is None or b.get("mean") is None:
        return None
    diff = a["mean"] - b["mean"]
    spread = (a["std"] or 0.0) + (b["std"] or 0.0)
    if min(a.get("n", 2), b.get("n", 2)) < 2:  # (stats always carry n; a hand-made dict without it: several)
        verdict = ONE_SEED
    else:
        verdict = "better" if diff > spread else "worse" if -diff > spread else "within spread"
    return {"a": round(a["mean"], 4), "b": round(b["mean"], 4), "diff": round(diff, 4), "spread": round(spread, 4),
            "verdict": verdict}


# ---- Pre-registered rules (issue 17) -------------------------------------------------------------

def cls_reliance(l_own: float, l_ablated: float, l_late: float) -> float | None:
    """The [CLS] reliance of a Condenser-family head, pre-registered for C0:

        reliance = (l_ablated - l_own) / (l_ablated - l_late)

    with ``l_own`` the head's held-out MLM loss reading its own late [CLS], ``l_ablated`` reading
    the late [CLS] of a block of another document, and ``l_late`` the backbone's late MLM loss on
    the same masks. Without its own [CLS] the head reads only early layers, so ``l_ablated -
    l_late`` is the deficit that the late information could close; the reliance is the share of
    it that the head's own [CLS] does close: 0 for a head that ignores [CLS], 1 for a head that
    gets everything the late layers know through it (below 0 where its own [CLS] hurts).

    None (undefined) where ``l_ablated <= l_late``: the head already predicts as well as the
    backbone without the block's own [CLS], so there is no deficit for [CLS] to close and no
    share to speak of; the C0 rule counts an undefined reliance as not relying on [CLS].
    Explained in chapter 2 (``notebooks/02_condenser.ipynb``) and chapter 8
    (``notebooks/08_scorecard.ipynb``).
    """
    deficit = l_ablated - l_late
    if not deficit > 0:
        return None
    return (l_ablated - l_own) / deficit


def head_relies(reliances: Sequence[float | None]) -> bool | None:
    """Whether a head relies on [CLS] by the pre-registered threshold: reliance >=
    ``RELIANCE_THRESHOLD`` on every pre-training seed (an undefined reliance fails); None where no
    seed was measured. Also the C3 gate, read on coCondenser's own head. Chapter 8."""
    if not reliances:
        return None
    return all(r is not None and r >= RELIANCE_THRESHOLD for r in reliances)


def late_loss_matched(late_loss: float, control_late_loss: float) -> bool:
    """Whether the Condenser's late (backbone) MLM loss is within ``LATE_LOSS_MARGIN`` nats of
    its equal-step control's (BERT-continued), either way: reliance counts only for a backbone
    trained as well as the control, not one that bought reliance with a worse (or got a
    different) language model. Chapter 8."""
    return abs(late_loss - control_late_loss) <= LATE_LOSS_MARGIN


def c0_rule(reliance: Sequence[float | None], late_loss: Sequence[float], control_late_loss: Sequence[float],
            cosine: Sequence[float] | None = None, control_cosine: Sequence[float] | None = None) -> dict:
    """The pre-registered C0 ("the Condenser head relies on [CLS]"), one entry per pre-training
    seed in each list (the Condenser's seed k is paired with BERT-continued's seed k: both continue
    the same stage-1 BERT).

    * ``relies``: on every seed, reliance >= ``RELIANCE_THRESHOLD`` (``head_relies``) and the late
      MLM loss within ``LATE_LOSS_MARGIN`` of BERT-continued's (``late_loss_matched``);
    * ``cosine_lower`` (the cosine half): on every seed, the mean cosine between different blocks'
      late [CLS] is lower for the Condenser than for BERT-continued, the equal-step control (not
      stage-1 BERT, which has fewer steps); None where not measured;
    * ``status``: ``claim_status`` of the two parts (both: reproduced; one: partly).

    Explained in chapter 8 (``notebooks/08_scorecard.ipynb``) and chapter 2.
    """
    if len(reliance) != len(late_loss) or len(late_loss) != len(control_late_loss):
        raise ValueError(f"c0_rule needs one value per pre-training seed in each list, got {len(reliance)} "
                         f"reliances, {len(late_loss)} late losses and {len(control_late_loss)} control losses")
    matched = [late_loss_matched(x, c) for x, c in zip(late_loss, control_late_loss)]
    relies = head_relies(reliance)
    relies = None if relies is None else relies and all(matched)
    cosine_lower = None
    if cosine and control_cosine:
        if len(cosine) != len(control_cosine):
            raise ValueError(f"c0_rule pairs cosines by pre-training seed: got {len(cosine)} and {len(control_cosine)}")
        cosine_lower = all(c < b for c, b in zip(cosine, control_cosine))
    return {"relies": relies, "reliance": list(reliance), "late_loss_matched": matched, "cosine_lower": cosine_lower,
            "threshold": RELIANCE_THRESHOLD, "late_loss_margin": LATE_LOSS_MARGIN,
            "status": claim_status([relies, cosine_lower])}


# The modified Condenser, pre-registered before the mechanism study's parts E3 and E5 ran: which
# deviation from the paper's head, if any, the `small` run carries as an extra arm beside the
# faithful Condenser (which stays the main arm).
MODIFIED_CANDIDATES = ("e3", "e4", "e5")  # no gradient into the early layers; embeddings; a more masked copy
MODIFIED_FLOOR = 0.1  # a candidate that fails C0 is still carried if it reads [CLS] this much on every seed
MODIFIED_RULE_COMMIT = "345dbf9ea156701a26acf6a271be2592f996eb4a"  # the commit that fixed choose_modified


def choose_modified(parts: Mapping[str, Mapping]) -> dict:
    """Which of the mechanism study's deviations becomes the "modified Condenser" arm, by the rule
    fixed before E3 and E5 ran. ``parts`` maps a part name to its ``c0_rule`` result (one entry
    per pre-training seed, each candidate run for the preset's Condenser steps from the same
    stage-1 BERTs as the faithful Condenser); only ``MODIFIED_CANDIDATES`` are considered.

    1. A candidate *meets C0* when its ``relies`` holds: reliance >= ``RELIANCE_THRESHOLD`` on
       every seed with the late MLM loss within ``LATE_LOSS_MARGIN`` of BERT-continued's on each.
    2. Among those that meet it, the largest smallest-seed reliance is chosen.
    3. If none does, the candidate with the largest smallest-seed reliance among those whose late
       loss is matched on every seed is chosen all the same, provided that reliance is at least
       ``MODIFIED_FLOOR`` (it reads [CLS] on every seed): the book then says it does not meet C0.
    4. Otherwise none is chosen, and the run has no modified arm.

    Returns ``{"part", "meets_c0", "smallest_reliance", "candidates", "rule"}`` (``part`` None
    for rule 4). Chapter 8 and the mechanism page (``notebooks/10_mechanism.md``)."""
    scored = {}
    for name in MODIFIED_CANDIDATES:
        c0 = parts.get(name)
        if not c0 or not c0.get("reliance"):
            continue
        values = c0["reliance"]
        smallest = None if any(r is None for r in values) else min(values)  # undefined: reads no [CLS]
        scored[name] = {"meets_c0": bool(c0.get("relies")), "smallest_reliance": smallest,
                        "late_loss_matched": all(c0.get("late_loss_matched") or [False])}
    meets = [n for n, v in scored.items() if v["meets_c0"]]
    fallback = [n for n, v in scored.items() if v["late_loss_matched"] and v["smallest_reliance"] is not None
                and v["smallest_reliance"] >= MODIFIED_FLOOR]
    pool, rule = (meets, 2) if meets else (fallback, 3) if fallback else ([], 4)
    part = max(pool, key=lambda n: scored[n]["smallest_reliance"]) if pool else None
    return {"part": part, "meets_c0": scored[part]["meets_c0"] if part else None,
            "smallest_reliance": scored[part]["smallest_reliance"] if part else None,
            "candidates": scored, "rule": rule}


def reliance_summary(per_seed: Sequence[Mapping]) -> dict:
    """The reliance over pre-training seeds: ``per_seed`` holds each seed's ``{"reliance",
    "noise"}`` (its noise over held-out blocks and mask draws, from the gauge). Returns ``mean``
    (None if any seed is undefined), ``noise`` (standard error of the mean: the larger of the
    between-seed estimate, std / sqrt(n), which covers blocks, masks and seeds, and the within-seed
    one, sqrt(mean noise^2 / n), a floor where two seeds happen to agree), ``values`` and
    ``noise_covers``. Chapters 2 and 8."""
    values = [s.get("reliance") for s in per_seed]
    noises = [s.get("noise") for s in per_seed]
    n = len(values)
    if n == 0 or any(v is None for v in values):
        return {"mean": None, "noise": None, "values": values, "n_seeds": n, "noise_covers": None}
    within = math.sqrt(sum((x or 0.0) ** 2 for x in noises) / n / n)
    if n > 1:
        between = float(np.std(values, ddof=1)) / math.sqrt(n)
        noise, covers = max(between, within), "held-out blocks, masks and pre-training seeds"
    else:
        noise, covers = within, "held-out blocks and masks (one pre-training seed)"
    return {"mean": float(np.mean(values)), "noise": noise, "values": values, "n_seeds": n, "noise_covers": covers}


def minimum_detectable_difference(spread_a: float, n_a: int, spread_b: float, n_b: int,
                                  alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest true difference of means that a two-sided Welch t-test at level ``alpha``
    detects with probability ``power``, given each arm's spread (sample std over its runs) and
    number of runs: (t_{1-alpha/2} + t_{power}) x sqrt(s_a^2/n_a + s_b^2/n_b), t quantiles at the
    Welch-Satterthwaite degrees of freedom. None with fewer than 2 runs on a side (no spread);
    0 where both spreads are 0. Explained in chapter 8 (``notebooks/08_scorecard.ipynb``).
    """
    if min(n_a, n_b) < 2:
        return None
    va, vb = spread_a ** 2 / n_a, spread_b ** 2 / n_b
    if va + vb == 0:
        return 0.0
    df = (va + vb) ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1))
    t = scipy_stats.t
    return float((t.ppf(1 - alpha / 2, df) + t.ppf(power, df)) * math.sqrt(va + vb))


def paper_gain(source: str, column: str, arm: str = "Condenser", base: str = "BERT") -> float:
    """The paper's relative gain of ``arm`` over ``base`` in one column of a ``PAPER_RESULTS``
    table (e.g. ``paper_gain("Condenser table 5", "full")`` = 0.338 / 0.309 - 1). Chapter 8."""
    table = next(r for r in PAPER_RESULTS if isinstance(r, PaperTable) and r.source == source)
    i = table.columns.index(column)
    return table.rows[arm][i] / table.rows[base][i] - 1


# The papers' tables whose relative gains a claim's effect is expected to match (pre-registered):
# C1 the MS MARCO low-data table (the issue's "about 9%" at full data), C7 the STS-b table.
EXPECTED_GAIN_SOURCE = {"C1": "Condenser table 5", "C7": "Condenser table 1"}


def expected_gain(claim: str, size: str, sizes: Sequence[str]) -> float | None:
    """The paper's relative gain expected at our training ``size`` (one of ``sizes``, the sizes
    run): with as many sizes as the paper's table has columns, column by position (STS-b: 500, 1K,
    full); otherwise our smallest size reads the table's first column (the paper's lowest-data
    setting) and our largest its last ("full"), any other None. Chapter 8."""
    source = EXPECTED_GAIN_SOURCE[claim]
    columns = next(r for r in PAPER_RESULTS if isinstance(r, PaperTable) and r.source == source).columns
    ordered = sorted(sizes, key=int)
    if len(ordered) == len(columns):
        column = columns[ordered.index(size)]
    elif size == ordered[0]:
        column = columns[0]
    elif size == ordered[-1]:
        column = columns[-1]
    else:
        return None
    return paper_gain(source, column)


def power_verdict(a: Mapping | None, b: Mapping | None, gain: float | None,
                  alpha: float = ALPHA, power: float = POWER) -> dict | None:
    """A claimed improvement of arm ``a`` over arm ``b`` (each ``stats``) judged with its power:

    * ``"reproduced"``: a above b beyond the run's spread (``compare``'s rule, diff > std_a + std_b);
    * ``"reversed"``: b above a beyond the spread;
    * ``"not reproduced"``: neither, and the paper's effect (``expected`` = the paper's relative
      ``gain`` x b's mean) is at least the minimum detectable difference ``mdd``: a real effect
      of the paper's size would most likely have shown, and it did not;
    * ``"not detectable at this power"``: neither, and the expected effect is below ``mdd`` (or no
      gain is known): the run could not have told;
    * ``ONE_SEED`` where a side has a single run (no spread, no mdd).

    Returns ``compare``'s record with this ``verdict``, plus ``mdd``, ``expected`` and ``gain``,
    so chapters can print them. Explained in chapter 8 (``notebooks/08_scorecard.ipynb``).
    """
    c = compare(a, b)
    if c is None:
        return None
    mdd = minimum_detectable_difference(a["std"] or 0.0, a.get("n", 2), b["std"] or 0.0, b.get("n", 2), alpha, power)
    expected = None if gain is None else gain * b["mean"]
    if c["verdict"] == ONE_SEED:
        verdict = ONE_SEED
    elif c["verdict"] == "better":
        verdict = "reproduced"
    elif c["verdict"] == "worse":
        verdict = "reversed"
    elif expected is not None and mdd is not None and expected >= mdd:
        verdict = "not reproduced"
    else:
        verdict = NOT_DETECTABLE
    return {**c, "verdict": verdict, "mdd": None if mdd is None else round(mdd, 4),
            "expected": None if expected is None else round(expected, 4), "gain": gain}


def _get(d: Mapping, *path: Any) -> Any:
    for p in path:
        if not isinstance(d, Mapping) or p not in d:
            return None
        d = d[p]
    return d


def holds(c: Mapping | None) -> bool | str | None:
    """A comparison as a claim part: True where ``a`` is better beyond the spread, False where it
    is not, ``ONE_SEED`` where no spread exists, None where it was not measured. Chapter 8."""
    if c is None:
        return None
    return ONE_SEED if c["verdict"] == ONE_SEED else c["verdict"] in ("better", "reproduced")


def claim_status(parts: Sequence[bool | str | None]) -> str:
    """Every measured part holds: reproduced; some: partly; none: not reproduced; only one-seed
    parts: one seed, no spread; nothing measured: not measured. (A part is None where its arm or
    size was not run, ``ONE_SEED`` where it rests on a single seed; one-seed parts beside
    measured ones are left out.) Chapter 8."""
    known = [p for p in parts if p is not None and p != ONE_SEED]
    if not known:
        return ONE_SEED if ONE_SEED in parts else "not measured"
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


def pretraining_runs(results: Mapping, arm: str) -> list[dict]:
    """Every pre-training run of ``arm`` in a results dict, first pre-training seed first (each
    with its final ``heldout`` gauges and ``compute``); empty for an arm that was not run.
    Chapters 2 and 8."""
    entry = _get(results, "arms", arm)
    if not entry:
        return []
    return [entry, *entry.get("other_pretraining_seeds", [])]


def gauge(results: Mapping, arm: str, name: str) -> float | None:
    """The mean over ``arm``'s pre-training runs of its final held-out gauge ``name``
    (``mlm_loss``, ``head_loss``, ``cls_swap_gap``, ``cls_swap_noise``, ``cls_cosine``), or None
    where it was not measured. Chapters 2 and 8."""
    values = [(r.get("heldout") or {}).get(name) for r in pretraining_runs(results, arm)]
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


# The commit that fixed the pre-registered rules above (its message starts "Pre-register:"); a
# results file made under them records it in its provenance (evidence.provenance).
PRE_REGISTRATION_COMMIT = "59b4084943f1ff1ff5041095c1e5190f26812d3e"
PRE_REGISTERED_RULES = f"pre-registered rules (issue 17, commit {PRE_REGISTRATION_COMMIT[:7]})"
OLD_RULES = ("old rules, for a results file without the [CLS]-reliance gauges: C0 by the [CLS]-swap gap "
             f"(> {CLS_GAP_MARGIN:g} x its noise) and the cosine against stage-1 BERT; C1 and C7 by the spread alone")


def run_reliance(heldout: Mapping | None) -> dict | None:
    """One pre-training run's [CLS] reliance, recomputed by the pre-registered ``cls_reliance``
    from the losses its final gauges logged (``reliance_{own,ablated,late}_loss``; ``zero`` and
    ``mean`` with the zero / mean [CLS] as the ablation), with the gauge's ``noise`` over blocks
    and masks; None where the run has no reliance gauges. Chapters 2 and 8."""
    h = heldout or {}
    if h.get("reliance_own_loss") is None:
        return None
    own, late = h["reliance_own_loss"], h["reliance_late_loss"]
    return {"reliance": cls_reliance(own, h["reliance_ablated_loss"], late), "noise": h.get("cls_reliance_noise"),
            "zero": cls_reliance(own, h["reliance_zero_loss"], late), "mean": cls_reliance(own, h["reliance_mean_loss"], late)}


def reliance_by_seed(results: Mapping, arm: str) -> list[dict]:
    """``run_reliance`` of each of ``arm``'s pre-training runs (first seed first); empty where
    any run lacks the gauges. Chapters 2 and 8."""
    runs = [run_reliance(r.get("heldout")) for r in pretraining_runs(results, arm)]
    return runs if runs and all(r is not None for r in runs) else []


def head_arms(results: Mapping) -> list[str]:
    """The Condenser-family arms of a results file: those whose runs logged the reliance gauges
    (condenser, cocondenser, the coCondenser ablations, any modified Condenser). Chapter 8."""
    return [a for a in results.get("arms", {}) if reliance_by_seed(results, a)]


def pre_registered(results: Mapping) -> bool:
    """Whether ``scorecard`` judges ``results`` by the pre-registered rules (the Condenser arm
    logged the reliance gauges) or by the ``OLD_RULES`` (an older file). Chapter 8."""
    return bool(reliance_by_seed(results, "condenser"))


def head_gate(results: Mapping, arm: str) -> bool | None:
    """Whether ``arm``'s own head relies on [CLS] (the C3 gate reads coCondenser's): by the
    pre-registered ``head_relies`` where the results hold reliance gauges, else by the old rule
    (the swap gap above ``CLS_GAP_MARGIN`` x its noise on every pre-training run); None where
    not gauged. Chapter 8."""
    if pre_registered(results):
        runs = reliance_by_seed(results, arm)
        return head_relies([r["reliance"] for r in runs]) if runs else None
    swaps = [h for h in (r.get("heldout") or {} for r in pretraining_runs(results, arm)) if h.get("cls_swap_gap") is not None]
    return all(h["cls_swap_gap"] > CLS_GAP_MARGIN * h["cls_swap_noise"] for h in swaps) if swaps else None


def power_claim_status(records: Sequence[Mapping | None], extra: Sequence[bool | None] = ()) -> str:
    """A power-aware claim's status from its comparisons (``power_verdict`` records) and any
    further parts (``extra``, e.g. C1's narrowing gap): every measured comparison reproduced
    (and no extra part False): reproduced; some: partly reproduced; none: reversed where any is
    reversed, else not reproduced where any is, else not detectable at this power. One-seed
    comparisons beside measured ones are left out. Chapter 8."""
    verdicts = [c["verdict"] for c in records if c]
    if not verdicts:
        return "not measured"
    measured = [v for v in verdicts if v != ONE_SEED]
    if not measured:
        return ONE_SEED
    if all(v == "reproduced" for v in measured):
        return "reproduced" if all(p is not False for p in extra) else "partly reproduced"
    if "reproduced" in measured:
        return "partly reproduced"
    for v in ("reversed", "not reproduced"):
        if v in measured:
            return v
    return NOT_DETECTABLE


def _said(c: Mapping | None, a: str, b: str, digits: int = 3) -> str:
    """One comparison in words: ``a 0.123 vs b 0.100 (better)``; a power-aware one adds the
    smallest difference the run could detect and the paper's effect at our scale."""
    if c is None:
        return f"{a} vs {b} not measured"
    power = "" if c.get("mdd") is None else (
        f"; detectable {c['mdd']:.{digits}f}" + ("" if c.get("expected") is None else
                                                 f", the paper's gain here {c['expected']:.{digits}f}"))
    return f"{a} {c['a']:.{digits}f} vs {b} {c['b']:.{digits}f} ({c['verdict']}{power})"


def _claim(cid: str, statement: str, arms: Sequence[str], comparison: str, ours: Any, status: str) -> dict:
    return {"id": cid, "statement": statement, "arms": [label(a) for a in arms], "comparison": comparison,
            "paper": paper_text(cid), "ours": ours, "status": status, "verdict": status}


def _c0_old(results: Mapping) -> dict:
    """C0 by the ``OLD_RULES`` (a results file without reliance gauges): the [CLS]-swap gap above
    ``CLS_GAP_MARGIN`` x its noise on every pre-training run, the cosine against stage-1 BERT."""
    runs = [r.get("heldout") or {} for r in pretraining_runs(results, "condenser")]
    swaps = [(r["cls_swap_gap"], r["cls_swap_noise"]) for r in runs if r.get("cls_swap_gap") is not None]
    cos_c, cos_b = gauge(results, "condenser", "cls_cosine"), gauge(results, "bert", "cls_cosine")
    gap_part = all(g > CLS_GAP_MARGIN * n for g, n in swaps) if swaps else None
    cos_part = None if cos_c is None or cos_b is None else cos_c < cos_b
    gap, noise = gauge(results, "condenser", "cls_swap_gap"), gauge(results, "condenser", "cls_swap_noise")
    words = ("not measured (no Condenser pre-training gauges)" if gap is None else
             f"Condenser's head loses {gap:.4f} nats per masked token (noise {noise:.4f}; clear when above "
             f"{CLS_GAP_MARGIN:g} x noise) when it reads another block's late [CLS] instead of its own")
    if cos_c is not None:
        words += f"; mean cosine between blocks' late [CLS]: Condenser {cos_c:.3f}" + (
            f", BERT {cos_b:.3f}" if cos_b is not None else "")
    return _claim(
        "C0", f"The Condenser head relies on the late [CLS]: its held-out MLM loss rises when it reads another "
        f"block's [CLS] (the [CLS]-swap gap exceeds {CLS_GAP_MARGIN:g} x its noise) and the late [CLS] vectors of "
        "different blocks are less alike than BERT's (lower mean cosine).",
        ["condenser", "bert"], words + ".",
        {"rules": OLD_RULES, "cls_swap": [{"gap": g, "noise": n} for g, n in swaps], "margin": CLS_GAP_MARGIN,
         "cls_cosine": {"condenser": cos_c, "bert": cos_b}, "gap_clear": gap_part, "cosine_lower": cos_part},
        claim_status([gap_part, cos_part]))


def _c0(results: Mapping) -> dict:
    """C0 by the pre-registered ``c0_rule``: the Condenser's reliance on every pre-training seed,
    its late MLM loss against BERT-continued's and the cosine half against BERT-continued."""
    runs = reliance_by_seed(results, "condenser")
    held = [r.get("heldout") or {} for r in pretraining_runs(results, "condenser")]
    control = [r.get("heldout") or {} for r in pretraining_runs(results, "bert_cont")]
    reliance = [r["reliance"] for r in runs]
    paired = len(control) == len(held) and all(h.get("mlm_loss") is not None for h in control)
    cos = [h.get("cls_cosine") for h in held], [h.get("cls_cosine") for h in control]
    has_cos = paired and None not in cos[0] + cos[1]
    rule = (c0_rule(reliance, [h["mlm_loss"] for h in held], [h["mlm_loss"] for h in control],
                    *(cos if has_cos else (None, None))) if paired else
            {"relies": None, "cosine_lower": None, "status": "not measured"})
    summary = reliance_summary(runs)

    ctl = label("bert_cont")

    def num(x, digits=3):
        return "undefined" if x is None else f"{x:.{digits}f}"

    words = (f"reliance of the Condenser's head per pre-training seed {', '.join(num(r) for r in reliance)} "
             f"(mean {num(summary['mean'])}, noise {num(summary['noise'])} over {summary['noise_covers'] or 'nothing'}; "
             f"with a zero [CLS] {', '.join(num(r['zero']) for r in runs)}, a mean [CLS] "
             f"{', '.join(num(r['mean']) for r in runs)})")
    if paired:
        words += ("; late MLM loss Condenser " + ", ".join(f"{h['mlm_loss']:.3f}" for h in held) + f" vs {ctl} "
                  + ", ".join(f"{h['mlm_loss']:.3f}" for h in control) + f" (within {LATE_LOSS_MARGIN:g} nats: "
                  + ", ".join("yes" if x else "no" for x in rule["late_loss_matched"]) + ")")
        if has_cos:
            words += ("; mean cosine between blocks' late [CLS]: Condenser " + ", ".join(f"{c:.3f}" for c in cos[0])
                      + f", {ctl} " + ", ".join(f"{c:.3f}" for c in cos[1]))
    else:
        words += f"; no {ctl} run per pre-training seed to hold the late MLM loss against: not measured"
    return _claim(
        "C0", f"The Condenser head relies on the late [CLS] (pre-registered): on every pre-training seed its own "
        f"late [CLS] closes at least {RELIANCE_THRESHOLD:.0%} of its held-out MLM-loss deficit against the "
        f"backbone's late layer (reliance >= {RELIANCE_THRESHOLD:g}, against a [CLS] from another document), its "
        f"late MLM loss within {LATE_LOSS_MARGIN:g} nats of the equal-step control's ({ctl}), and the late "
        "[CLS] vectors of different blocks are less alike than the control's (lower mean cosine).",
        ["condenser", "bert_cont"], words + ".",
        {"rules": PRE_REGISTERED_RULES, "reliance": reliance, "reliance_summary": summary,
         "reliance_zero": [r["zero"] for r in runs], "reliance_mean": [r["mean"] for r in runs],
         "cls_cosine": {"condenser": cos[0], "bert_cont": cos[1]}, **{k: v for k, v in rule.items() if k != "status"}},
        rule["status"])


def scorecard(results: Mapping) -> list[dict]:
    """Claims C0-C7 with the papers' numbers, ours and a status from ``STATUSES``.

    A difference counts only where it exceeds the seed spread (``compare``: |mean difference| >
    std_a + std_b; from a single seed none is called). Retrieval claims read the first metric of
    the budget (nDCG@10 on SciFact) and the recall metric (R@100). C0, the mechanism the other
    Condenser claims rest on, reads the pre-training gauges: the head relies on [CLS] when the
    [CLS]-swap gap exceeds ``CLS_GAP_MARGIN`` times its noise on every pre-training run and the
    Condenser's late [CLS] vectors are less alike (mean cosine between blocks) than BERT's.
    Each claim carries plain-words fields for the book (``arms``, ``comparison``, ``paper``,
    ``verdict``) beside the machine-readable ``ours`` and ``status``. Explained in the closing
    chapter.
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

    # C0: the Condenser head relies on the late [CLS] (the mechanism of Condenser section 3).
    rules = PRE_REGISTERED_RULES if pre_registered(results) else OLD_RULES
    claims.append(_c0(results) if pre_registered(results) else _c0_old(results))

    # C1: Condenser beats both BERT arms, most at the smallest size, gap narrowing with data.
    powered = pre_registered(results)  # the power-aware verdict for results made under the pre-registered rules

    def c1_compare(s, b):
        a_, b_ = r1("condenser", s, main_m), r1(b, s, main_m)
        return power_verdict(a_, b_, expected_gain("C1", s, sizes)) if powered else compare(a_, b_)

    per_size = {s: {b: c1_compare(s, b) for b in ("bert", "bert_cont")} for s in sizes}
    beats_small = [holds(per_size.get(small, {}).get(b)) for b in ("bert", "bert_cont")] if small else [None]
    gaps = {s: [c["diff"] for c in per_size[s].values() if c] for s in sizes}
    narrowing = None
    if small and full and small != full and gaps.get(small) and gaps.get(full):
        narrowing = min(gaps[small]) > min(gaps[full])
    if powered:  # every size counts (the paper's gain shows at each), the narrowing only where ahead at the small size
        c1_status = power_claim_status([c for s in sizes for c in per_size[s].values()],
                                       [narrowing if beats_small and all(b is True for b in beats_small) else None])
    else:  # a narrowing gap only means something where Condenser is ahead at the small size
        c1_status = claim_status([*beats_small, narrowing if beats_small and all(b is True for b in beats_small)
                                  else None])
    c1_words = "; ".join(f"{main_m} at {s} training queries: " + ", ".join(
        _said(per_size[s][b], "Condenser", label(b)) for b in ("bert", "bert_cont")) for s in sizes)
    claims.append(_claim(
        "C1", "Condenser beats both BERT arms as a retriever initialiser, most at the smallest training "
        "size, the gap narrowing with more data (round 1, BM25 negatives).",
        ["condenser", "bert", "bert_cont"], (c1_words or "not measured") + ".",
        {"metric": main_m, "by_size": per_size, "bm25": _get(results, "bm25", "full", main_m), "narrowing": narrowing,
         "rules": rules}, c1_status))

    # C2: coCondenser beats Condenser, visibly in recall, and not only by seeing the target corpus.
    c2 = {m: compare(r1("cocondenser", full, m), r1("condenser", full, m)) for m in (main_m, recall_m)}
    c2r2 = {m: compare(_get(retrieval, "cocondenser", "round2", full, m), _get(retrieval, "condenser", "round2", full, m))
            for m in (main_m, recall_m)}
    c2ctl = {m: compare(r1("cocondenser", full, m), r1("co_mlm_only", full, m)) for m in (main_m, recall_m)}
    claims.append(_claim(
        "C2", "coCondenser beats Condenser, visibly in recall (full training set; round 1 and, where run, round 2), "
        "and beats the equal-step control that continues Condenser's MLM on the target corpus without the "
        "contrastive loss, so the gain is not target-corpus exposure alone.",
        ["cocondenser", "condenser", "co_mlm_only"],
        f"{recall_m}, full training set: round 1 {_said(c2[recall_m], 'coCondenser', 'Condenser')}, "
        f"{_said(c2ctl[recall_m], 'coCondenser', 'Condenser MLM only on the target corpus')}; round 2 "
        f"{_said(c2r2[recall_m], 'coCondenser', 'Condenser')}.",
        {"round1": c2, "round2": c2r2, "vs_target_corpus_mlm": c2ctl},
        claim_status([holds(c) for c in (c2[recall_m], c2r2[recall_m], c2ctl[recall_m])])))

    # C3: both terms of the coCondenser loss add something (table 4); the MLM term's share is the
    # Condenser head's only where the head relies on [CLS] (C0).
    c3 = {name: {m: compare(r1("cocondenser", full, m), r1(abl, full, m)) for m in (main_m, recall_m)}
          for name, abl in (("mlm_term", "co_contrastive_only"), ("contrastive_term", "co_mlm_only"))}
    c3_parts = {}
    for name in c3:
        cs = [holds(c) for c in c3[name].values() if c]
        known = [p for p in cs if p != ONE_SEED]
        c3_parts[name] = None if not cs else (any(known) if known else ONE_SEED)
    c3_status = claim_status(list(c3_parts.values()))
    co_head = head_gate(results, "cocondenser")  # coCondenser's own head, not the Condenser arm's
    if c3_parts["mlm_term"] is True and co_head is not True:
        c3_status = NOT_ATTRIBUTABLE if co_head is False else NOT_ATTRIBUTABLE_UNGAUGED
    claims.append(_claim(
        "C3", "Both coCondenser loss terms add something: coCondenser beats Condenser further trained "
        "with the contrastive loss only, and with the Condenser MLM loss only (full training set, round 1).",
        ["cocondenser", "co_contrastive_only", "co_mlm_only"],
        "Full training set, round 1: " + "; ".join(
            f"{m}: " + ", ".join(_said(c3[name][m], "coCondenser", label(abl)) for name, abl in
                                 (("mlm_term", "co_contrastive_only"), ("contrastive_term", "co_mlm_only")))
            for m in (main_m, recall_m)) + {
                NOT_ATTRIBUTABLE: "; the MLM term's gain is not the Condenser head's: coCondenser's own head does not "
                                  "rely on [CLS]",
                NOT_ATTRIBUTABLE_UNGAUGED: "; the MLM term's gain cannot be credited to the Condenser head: "
                                           "coCondenser's own head was not gauged"}.get(c3_status, "")
        + ".", {**c3, "cocondenser_head_relies": co_head, "rules": rules}, c3_status))

    # C4: hard negatives help the pre-trained arms (no collapse).
    c4 = {arm: compare(_get(retrieval, arm, "round2", full, main_m), r1(arm, full, main_m)) for arm in MAIN_ARMS}
    c4_parts = [holds(c4[a]) for a in ("condenser", "cocondenser")]
    collapse = [a for a, c in c4.items() if c and c["verdict"] == "worse"]
    c4_words = f"{main_m}, round 2 vs round 1: " + ", ".join(
        _said(c4[a], f"{label(a)} round 2", "round 1") for a in MAIN_ARMS if c4[a])
    if collapse:
        c4_words += "; collapsed (round 2 below round 1 beyond the spread): " + ", ".join(label(a) for a in collapse)
    claims.append(_claim(
        "C4", "Round 2 with hard negatives mined by the arm's own round-1 retriever improves the "
        "pre-trained arms (Condenser, coCondenser) without collapse.",
        ["condenser", "cocondenser", "bert"], c4_words + ".",
        {"metric": main_m, "round2_vs_round1": c4, "collapsed": collapse, "nb_recall": results.get("nb_recall", {})},
        claim_status(c4_parts)))

    # C5: BERT's CLS attention changes more in fine-tuning than Condenser's.
    entropy = results.get("entropy", {})
    c5 = {b: compare(_get(entropy, b, "mean_abs_change"), _get(entropy, "condenser", "mean_abs_change"))
          for b in ("bert", "bert_cont")}
    claims.append(_claim(
        "C5", "BERT's CLS attention entropy profile changes more in fine-tuning than Condenser's "
        "(mean |after - before| over layers; after = round-1 retrievers on the full training set).",
        ["bert", "bert_cont", "condenser"],
        "Mean change of the per-layer CLS attention entropy (nats): " + ", ".join(
            _said(c5[b], label(b), "Condenser") for b in c5) + ".",
        {"change": {a: _get(entropy, a, "mean_abs_change") for a in entropy}, "bert_minus_condenser": c5},
        claim_status([holds(c) for c in c5.values()])))

    # C6: Condenser's fine-tuning loss falls faster early.
    early = {a: early_loss(results, a, full) for a in MAIN_ARMS}
    c6 = {b: compare(early[b], early["condenser"]) for b in ("bert", "bert_cont")}
    claims.append(_claim(
        "C6", "Condenser's retrieval fine-tuning loss is lower early in training than BERT's "
        "(mean loss over the first 25% of round-1 steps, full training set).",
        ["condenser", "bert", "bert_cont"],
        "Mean loss over the first quarter of round-1 steps (higher is worse): " + ", ".join(
            _said(c6[b], label(b), "Condenser") for b in c6) + ".",
        {"early_loss": early, "bert_minus_condenser": c6},
        claim_status([holds(c) for c in c6.values()])))

    # C7: Condenser matches or beats BERT on STS-b at low data.
    sts = results.get("sts", {})
    low = [str(s) for s in results.get("sts_sizes", [])][:2]
    all_sts = [str(s) for s in results.get("sts_sizes", [])]

    def c7_compare(s, b):
        a_, b_ = _get(sts, "condenser", s), _get(sts, b, s)
        return power_verdict(a_, b_, expected_gain("C7", s, all_sts)) if powered else compare(a_, b_)

    c7 = {s: {b: c7_compare(s, b) for b in ("bert", "bert_cont")} for s in low}
    c7_parts = [c for s in low for c in c7[s].values()]
    claims.append(_claim(
        "C7", "Condenser beats BERT on STS-b with little training data (the smallest two sizes); "
        "'matches' shows as 'within spread' in ours.",
        ["condenser", "bert", "bert_cont"],
        ("; ".join(f"STS-b Spearman at {s} pairs: " + ", ".join(_said(c7[s][b], "Condenser", label(b)) for b in c7[s])
                   for s in low) or "not measured") + ".",
        {"by_size": c7, "all": sts, "rules": rules},
        power_claim_status(c7_parts) if powered else claim_status([holds(c) for c in c7_parts])))
    return claims


def _compares(d: Any, path: tuple = ()) -> list[tuple[tuple, dict]]:
    if isinstance(d, Mapping):
        if {"a", "b", "diff", "spread", "verdict"} <= set(d):
            return [(path, d)]
        return [x for k, v in d.items() for x in _compares(v, path + (str(k),))]
    return []


def claim_numbers(claim: Mapping) -> str:
    """Our numbers behind one scorecard claim, one comparison per line: ``where: a vs b
    (difference, spread[, minimum detectable difference, the paper's gain at our scale]) verdict``.
    For the scorecard page (chapter 8)."""
    lines = []
    for path, c in _compares(claim.get("ours", {})):
        where = " ".join(p for p in path if p not in ("by_size", "round2_vs_round1", "bert_minus_condenser"))
        power = "" if c.get("mdd") is None else f", detectable {c['mdd']:.3f}" + (
            "" if c.get("expected") is None else f", paper's gain here {c['expected']:.3f}")
        lines.append(f"{where}: {c['a']:.3f} vs {c['b']:.3f} (diff {c['diff']:+.3f}, spread {c['spread']:.3f}{power}) "
                     f"{c['verdict']}")
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
