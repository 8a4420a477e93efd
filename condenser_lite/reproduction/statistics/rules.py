"""The rules that turn numbers into verdicts, fixed before the runs they judge.

Pure functions over numbers: the spread of a set of runs (``stats``) and whether two differ
beyond it (``compare``); the pre-registered rules of the [CLS] mechanism (C0: ``c0_rule`` on the
reliance, ``cls_reliance`` being the gauge's ratio, ``modeling.gauges``) and of the claims' power
(``minimum_detectable_difference``, ``power_verdict``), committed in ``PRE_REGISTRATION_COMMIT``
before the run they judged; a claim's status from its parts (``claim_status``,
``power_claim_status``); and the rules of version 2, which test every comparison over pre-trained
models (``model_means``, ``unit_test``, ``RULES_V2_COMMIT``). The mechanism study's own rules are
``mechanism_rules.py``'s; what a results file holds is read by ``results.py``. The scorecard and
the chapters' checks all judge with these, so a verdict is computed one way. Explained in
chapter 8 (``notebooks/08_scorecard.ipynb``) and chapter 2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats as scipy_stats

ONE_SEED = "one seed, no spread"  # a verdict, and a claim's status, where no spread exists
NOT_ATTRIBUTABLE = "not attributable: the head ignores [CLS]"
NOT_ATTRIBUTABLE_UNGAUGED = "not attributable: coCondenser's head was not gauged"
STATUSES = ("reproduced", "partly reproduced", "not reproduced at this scale", ONE_SEED, NOT_ATTRIBUTABLE,
            NOT_ATTRIBUTABLE_UNGAUGED, "not measured",
            "reversed", "not reproduced", "not detectable at this power")  # the last three: power-aware claims

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


def power_call(call: str, expected: float | None, mdd: float | None) -> str:
    """A claimed improvement's call (``"better"``, ``"worse"`` or neither) read with its power:
    ``"reproduced"``, ``"reversed"``, ``"not reproduced"`` (neither, and the paper's effect
    ``expected`` is at least the ``mdd``) or ``NOT_DETECTABLE`` (below it, or unknown). Chapter 8."""
    if call in ("better", "worse"):
        return "reproduced" if call == "better" else "reversed"
    return "not reproduced" if expected is not None and mdd is not None and expected >= mdd else NOT_DETECTABLE


def power_verdict(a: Mapping | None, b: Mapping | None, gain: float | None,
                  alpha: float = ALPHA, power: float = POWER) -> dict | None:
    """A claimed improvement of arm ``a`` over arm ``b`` (each ``stats``) judged with its power:
    ``compare``'s call (beyond the spread, diff > std_a + std_b) read by ``power_call``, with the
    paper's effect ``expected`` = its relative ``gain`` x b's mean and ``mdd`` the minimum
    detectable difference. "not reproduced": a real effect of the paper's size would most likely
    have shown, and it did not; ``NOT_DETECTABLE``: the run could not have told; ``ONE_SEED``
    where a side has a single run (no spread, no mdd). Returns ``compare``'s record with this
    ``verdict``, plus ``mdd``, ``expected`` and ``gain``. Chapter 8 (``notebooks/08_scorecard.ipynb``).
    """
    c = compare(a, b)
    if c is None:
        return None
    mdd = minimum_detectable_difference(a["std"] or 0.0, a.get("n", 2), b["std"] or 0.0, b.get("n", 2), alpha, power)
    expected = None if gain is None else gain * b["mean"]
    verdict = ONE_SEED if c["verdict"] == ONE_SEED else power_call(c["verdict"], expected, mdd)
    return {**c, "verdict": verdict, "mdd": None if mdd is None else round(mdd, 4),
            "expected": None if expected is None else round(expected, 4), "gain": gain}


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


# The commit that fixed the pre-registered rules above (its message starts "Pre-register:"); a
# results file made under them records it in its provenance (results.provenance).
PRE_REGISTRATION_COMMIT = "59b4084943f1ff1ff5041095c1e5190f26812d3e"
PRE_REGISTERED_RULES = f"pre-registered rules version 1 (commit {PRE_REGISTRATION_COMMIT[:7]})"


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


# ---- Rules version 2: the pre-trained model is the unit -----------------------------------------
#
# Fine-tunings of one pre-trained model share it, so they are not independent samples of a
# pre-training method: most of the spread lies between pre-trained models. Version 2 averages
# each pre-trained model's fine-tuning runs into one number and tests the arms over pre-training
# seeds. Fixed before the runs it judges (``RULES_V2_COMMIT``); a results file records its rules'
# version in its provenance (``results.provenance``), and ``scorecard`` refuses one made under others.
#
# What version 2 fixes, for the `small` run (presets.SMALL) it judges:
# 1. Design: pre-training seeds 42-46 for every arm (the ablations too), three fine-tuning seeds
#    each; the modified Condenser's two controls, BERT-continued for its FLOPs (EQUAL_FLOPS_RATIO)
#    and the modified Condenser with its [CLS] path cut (the head reads a learned constant).
# 2. Every comparison between arms (C1-C8 and the modified arm's C1m, C4m-C8m, Am): ``unit_test``,
#    one-sided at ALPHA_ONE_SIDED over pre-training seeds, paired where both arms continue the
#    same stage-1 models; power-aware where the paper gives an effect (C1, C7 and theirs), with
#    the minimum detectable difference from the spread of the per-seed differences. Each test at
#    5% on its own: a claim of several comparisons is not corrected for their number, so a
#    "partly reproduced" of many parts reads as weak evidence.
# 3. Claim status from its parts as in version 1 (``claim_status`` / ``power_claim_status``).
# 4. C0 and C0m: the per-seed reliance rule of version 1 (``c0_rule``), unchanged; C0m on the
#    seeds the choice of the modified Condenser never saw (not MODIFIED_CHOICE_SEEDS).
# 5. Am, "the modified Condenser's gains come from its head reading [CLS]": wherever the modified
#    Condenser beats BERT-continued (C1m's and C7m's settings), it must also beat both controls;
#    reproduced where every such setting holds, partly where some do; the equal-compute control
#    counts only where its FLOPs are within FLOPS_MATCH of the modified Condenser's.

RULES_VERSION = 2  # what a results file made now is judged by
ALPHA_ONE_SIDED = 0.05  # each test: one-sided, 5%, over pre-training seeds
NOT_SIGNIFICANT = "not significant"  # neither one-sided test rejects at ALPHA_ONE_SIDED
# The seeds on which the mechanism page's choice of the modified Condenser was made: C0m is judged
# on the other pre-training seeds only, the ones the choice never saw.
MODIFIED_CHOICE_SEEDS = (42, 43)
# Equal compute: the modified Condenser's stage cost 64.36 TFLOPs per 3,000 updates and an MLM
# stage 35.37 (results/small.json at 3e4a03e, accounting.stage_flops, seeds 42 and 43 agree to
# 0.01%): 1.8196 times as many MLM updates spend the same FLOPs, 5,459 for the 3,000 of `small`.
EQUAL_FLOPS_RATIO = 1.8196
EQUAL_FLOPS_STEPS = round(3000 * EQUAL_FLOPS_RATIO)
FLOPS_MATCH = 0.05  # the equal-compute control counts as matched where its FLOPs are within 5%
# The commit that fixed version 2 (its message starts "Pre-register: rules version 2").
RULES_V2_COMMIT = "d199379665bfdfdfb7ae2d9fb9cddeca5f60843a"
RULES_V2 = ("rules version 2: the pre-trained model as the unit, fine-tuning seeds averaged; one-sided paired "
            f"t-test at {ALPHA_ONE_SIDED:.0%} over pre-training seeds, Welch's where unpaired "
            f"(commit {RULES_V2_COMMIT[:7]})")


def model_means(values: Sequence[float], seeds: Sequence) -> dict | None:
    """``values`` (every fine-tuning run of one arm, in the protocol's order: pre-training seed,
    then fine-tuning seed) averaged per pre-trained model: ``{"seeds", "means", "runs"}``. Each
    model must have the same number of runs; None where there are no values. Chapter 8."""
    v = np.asarray([float(x) for x in values], dtype=np.float64)
    if v.size == 0 or not seeds:
        return None
    if v.size % len(seeds):
        raise ValueError(f"{v.size} runs do not split evenly over {len(seeds)} pre-trained models ({list(seeds)})")
    return {"seeds": list(seeds), "means": v.reshape(len(seeds), -1).mean(1).tolist(), "runs": int(v.size)}


def unit_test(a: Mapping, b: Mapping, expected: float | None = None, alpha: float = ALPHA_ONE_SIDED,
              power: float = POWER) -> dict:
    """Arm ``a`` against arm ``b``, each ``model_means``, with the pre-trained model as the unit.

    Paired where both arms have models of the same pre-training seeds (they continue the same
    stage-1 models): the per-seed differences d_k = a_k - b_k, t = mean(d) / (sd(d) / sqrt(n)),
    n - 1 degrees of freedom (``scipy.stats.ttest_rel``). Otherwise unpaired: Welch's t over the
    model means (``scipy.stats.ttest_ind(equal_var=False)``). Two one-sided tests at ``alpha``:
    ``p`` (a above b) and ``p_reversed`` (b above a). The verdict is ``"better"`` where ``p <
    alpha``, ``"worse"`` where ``p_reversed < alpha``, else ``NOT_SIGNIFICANT``; ``ONE_SEED``
    where a side has a single model (nothing to test with).

    ``mdd``, the minimum detectable difference, comes from the spread of the per-seed differences:
    (t_{1-alpha, df} + t_{power, df}) x sd(d) / sqrt(n), the true difference this test detects with
    probability ``power``. With ``expected`` (the paper's effect at our scale) the verdict is
    power-aware (``power_call``). Returns the means (``a``, ``b``), ``diff``, ``spread`` (paired:
    sd of the differences; unpaired: Welch's standard error), ``n``, ``paired``, ``per_seed``
    differences, ``p``, ``p_reversed``, ``mdd``, ``expected`` and ``verdict``. Explained in
    chapter 8 (``notebooks/08_scorecard.ipynb``)."""
    sa, sb = list(a["seeds"]), list(b["seeds"])
    paired = sa == sb
    xa, xb = np.asarray(a["means"], dtype=np.float64), np.asarray(b["means"], dtype=np.float64)
    diff = float(xa.mean() - xb.mean())
    out = {"a": round(float(xa.mean()), 6), "b": round(float(xb.mean()), 6), "diff": round(diff, 6),
           "n": len(sa) if paired else [len(sa), len(sb)], "paired": paired,
           "per_seed": {str(s): round(float(x - y), 6) for s, x, y in zip(sa, xa, xb)} if paired else None,
           "expected": None if expected is None else round(expected, 4)}
    t = scipy_stats.t
    if min(len(sa), len(sb)) < 2:
        return {**out, "spread": 0.0, "p": None, "p_reversed": None, "mdd": None, "verdict": ONE_SEED}
    if paired:
        d = xa - xb
        n, sd, df = len(d), float(d.std(ddof=1)), len(d) - 1
        se = sd / math.sqrt(n)
        if sd <= 1e-12 * max(1.0, abs(diff)):  # identical differences (to rounding): the sign decides
            se = 0.0
            p = 0.0 if diff > 0 else 1.0
        else:
            p = float(scipy_stats.ttest_rel(xa, xb, alternative="greater").pvalue)
        spread = sd
    else:
        va, vb = xa.var(ddof=1) / len(xa), xb.var(ddof=1) / len(xb)
        se = math.sqrt(va + vb)
        se = 0.0 if se <= 1e-12 * max(1.0, abs(diff)) else se
        df = (va + vb) ** 2 / (va ** 2 / (len(xa) - 1) + vb ** 2 / (len(xb) - 1)) if se > 0 else len(xa) + len(xb) - 2
        p = (0.0 if diff > 0 else 1.0) if se == 0 else float(
            scipy_stats.ttest_ind(xa, xb, equal_var=False, alternative="greater").pvalue)
        spread = se
    p_rev = (0.0 if diff < 0 else 1.0) if se == 0 else 1.0 - p
    mdd = float((t.ppf(1 - alpha, df) + t.ppf(power, df)) * se)
    verdict = "better" if p < alpha else "worse" if p_rev < alpha else NOT_SIGNIFICANT
    if expected is not None:
        verdict = power_call(verdict, expected, mdd)
    return {**out, "spread": round(spread, 6), "p": round(p, 4), "p_reversed": round(p_rev, 4),
            "mdd": round(mdd, 4), "verdict": verdict}


