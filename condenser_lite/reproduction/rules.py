"""The rules that turn numbers into verdicts, fixed before the runs they judge.

Pure functions over a results file's numbers: the spread of a set of runs (``stats``) and whether
two differ beyond it (``compare``); the pre-registered rules of the [CLS] mechanism (C0:
``c0_rule`` on the reliance, ``cls_reliance`` being the gauge's ratio, ``modeling.gauges``) and of
the claims' power (``minimum_detectable_difference``, ``power_verdict``), committed in
``PRE_REGISTRATION_COMMIT`` before the run they judged; the pre-registered choice of a modified
Condenser (``choose_modified``, ``MODIFIED_RULE_COMMIT``); and the few readers of a results file's
pre-training runs and gauges they need. The results file (``results.py``), the scorecard and the
chapters' checks all judge with these, so a verdict is computed one way. Explained in chapter 8
(``notebooks/08_scorecard.ipynb``) and chapter 2.
"""


from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from ..modeling.gauges import cls_reliance

ONE_SEED = "one seed, no spread"  # a verdict, and a claim's status, where no spread exists
NOT_ATTRIBUTABLE = "not attributable: the head ignores [CLS]"
NOT_ATTRIBUTABLE_C0 = "not attributable: C0 does not hold"  # the old gate's status (kept for older files)
NOT_ATTRIBUTABLE_UNGAUGED = "not attributable: coCondenser's head was not gauged"
STATUSES = ("reproduced", "partly reproduced", "not reproduced at this scale", ONE_SEED, NOT_ATTRIBUTABLE,
            NOT_ATTRIBUTABLE_C0, NOT_ATTRIBUTABLE_UNGAUGED, "not measured",
            "reversed", "not reproduced", "not detectable at this power")  # the last three: power-aware claims
CLS_GAP_MARGIN = 2.0  # the old C0 rule (results files without the reliance gauges): the [CLS]-swap gap above this x its noise

# Pre-registered rules: fixed before the runs they judge, never changed after seeing a number.
RELIANCE_THRESHOLD = 0.2  # C0: the head's own late [CLS] closes at least this share of its deficit
LATE_LOSS_MARGIN = 0.05  # C0: nats; the Condenser's late MLM loss this close to BERT-continued's
ALPHA = 0.05  # two-sided significance level of the minimum detectable difference
POWER = 0.8  # the chance of detecting a true difference of that size
NOT_DETECTABLE = "not detectable at this power"
POWER_VERDICTS = ("reproduced", "reversed", "not reproduced", NOT_DETECTABLE, ONE_SEED)


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
    # six decimals: the book rounds these to three, and rounding twice (0.13150 -> 0.1315 -> 0.132)
    # would show a mean other than the tables' (0.131); the verdict above used the exact values
    return {"a": round(a["mean"], 6), "b": round(b["mean"], 6), "diff": round(diff, 6), "spread": round(spread, 6),
            "verdict": verdict}


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


def get_path(d: Mapping, *path: Any) -> Any:
    """``d[path[0]][path[1]]...``, or None where a step is missing: results files of other presets
    lack some parts. Chapter 8."""
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


def pretraining_runs(results: Mapping, arm: str) -> list[dict]:
    """Every pre-training run of ``arm`` in a results dict, first pre-training seed first (each
    with its final ``heldout`` gauges and ``compute``); empty for an arm that was not run.
    Chapters 2 and 8."""
    entry = get_path(results, "arms", arm)
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
# results file made under them records it in its provenance (results.provenance).
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
