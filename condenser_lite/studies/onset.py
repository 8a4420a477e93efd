"""When does the faithful Condenser head switch on? The onset rules for the mechanism study's
longest training-length point (L48: a 48,000-update Condenser stage), fixed before the runs of
its pre-training seeds 45-49 (``ONSET_RULE_COMMIT``). Chapter 14, "The faithful Condenser
against scale" (``notebooks/14_scaling.md``), reads them.

The rules, each on one Condenser stage's held-out gauge curve (a row every ``eval_every``
updates with the reliance ``cls_reliance`` and its noise ``cls_reliance_noise``):

1. **Above noise.** An evaluation is above noise where its reliance exceeds twice its noise
   (``mechanism_rules.reliance_above_noise``).
2. **Onset.** The update of the first evaluation from which every evaluation to the stage's end
   is above noise. A curve whose last evaluation is not above noise has no onset.
3. **Switched on.** The onset exists and the stay above noise spans at least ``MIN_STAY``
   evaluations (a last-minute blip is not a switch).
4. **Plateau.** The mean reliance over the evaluations after three quarters of the stage.
5. **Estimates** over the pre-training seeds ``ONSET_SEEDS`` (the unit is a pre-trained model):
   the fraction switched on with its exact (Clopper-Pearson) 95% interval; the onsets' median and
   range over the seeds that switched; a Kaplan-Meier curve (and its median, ``half_by``) of the fraction switched on against
   updates, a seed that never switches censored at the stage's end; the plateau's mean with a
   two-sided 95% t-interval over the seeds that switched on.
6. **Seen seeds.** The curves of seeds 42-44 were seen before these rules were written; the
   estimates are also reported over the unseen seeds 45-49 alone.
7. **What the book may say** (``reading``):
   * the fraction: "most models switch on within the stage" only where the interval's lower end
     is above one half; "a minority" only where its upper end is below one half; otherwise the
     interval, and that these seeds cannot tell most from a minority;
   * the plateau: "below C0's threshold" only where the t-interval's upper end is below 0.2,
     "above" only where its lower end is above it, otherwise "near it; these seeds cannot
     tell on which side";
   * the onset: a description (median, range), no test.

Example::

    >>> curve = [{"step": 500 * (i + 1), "cls_reliance": r, "cls_reliance_noise": 0.01}
    ...          for i, r in enumerate([0.0, 0.01, 0.05, 0.04, 0.06, 0.07, 0.08, 0.08])]
    >>> onset(curve)
    1500
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
from scipy import stats as scipy_stats

from .mechanism_rules import reliance_above_noise
from ..reproduction.statistics.rules import RELIANCE_THRESHOLD

ONSET_SEEDS = (42, 43, 44, 45, 46, 47, 48, 49)
SEEN_SEEDS = (42, 43, 44)  # their curves were read before these rules were written
MIN_STAY = 4  # evaluations (2,000 updates of L48) above noise, at least, to count as switched on
PLATEAU_FROM = 0.75  # the plateau: the evaluations after this share of the stage
CONFIDENCE = 0.95
ONSET_RULE_COMMIT = "24a6e9f265ace175328d76ac58d4b790807ea355"  # the commit that fixed these rules


def onset(curve: Sequence[Mapping]) -> int | None:
    """Rule 2: the update from which every evaluation of ``curve`` stays above noise, or None."""
    start = None
    for row in curve:
        if reliance_above_noise(row):
            start = row["step"] if start is None else start
        else:
            start = None
    return start


def switched_on(curve: Sequence[Mapping]) -> bool:
    """Rule 3: an onset with at least ``MIN_STAY`` evaluations above noise from it."""
    start = onset(curve)
    return start is not None and sum(row["step"] >= start for row in curve) >= MIN_STAY


def plateau(curve: Sequence[Mapping], steps: int) -> float:
    """Rule 4: the mean reliance over the evaluations after ``PLATEAU_FROM`` of ``steps``."""
    late = [row["cls_reliance"] or 0.0 for row in curve if row["step"] > PLATEAU_FROM * steps]
    if not late:
        raise ValueError(f"no evaluation after {PLATEAU_FROM:.0%} of the stage's {steps} updates")
    return float(np.mean(late))


def seed_summary(curve: Sequence[Mapping], steps: int) -> dict:
    """One seed's ``onset``, ``switched_on`` and ``plateau``."""
    return {"onset": onset(curve), "switched_on": switched_on(curve), "plateau": plateau(curve, steps)}


def kaplan_meier(onsets: Sequence[int | None], end: int) -> list[dict]:
    """The fraction switched on by each onset, a seed without one censored at ``end`` (scipy's
    ``ecdf`` of the onsets; right-censored at the stage's end)."""
    seen = [float(t) for t in onsets if t is not None]
    censored = [float(end)] * (len(onsets) - len(seen))
    if not seen:
        return [{"step": 0, "switched": 0.0}]
    fit = scipy_stats.ecdf(scipy_stats.CensoredData(uncensored=seen, right=censored))
    return [{"step": 0, "switched": 0.0}] + [{"step": int(t), "switched": float(p)}
                                              for t, p in zip(fit.cdf.quantiles, fit.cdf.probabilities)]


def fraction_interval(k: int, n: int, confidence: float = CONFIDENCE) -> list[float]:
    """Rule 5's exact (Clopper-Pearson) interval of the fraction switched on, ``k`` of ``n``."""
    ci = scipy_stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return [float(ci.low), float(ci.high)]


def estimates(per_seed: Mapping[str, Mapping], end: int, confidence: float = CONFIDENCE) -> dict:
    """Rule 5 over ``per_seed`` (seed: ``seed_summary``)."""
    n = len(per_seed)
    on = {s: v for s, v in per_seed.items() if v["switched_on"]}
    k = len(on)
    onsets = [v["onset"] for v in on.values()]
    curve = kaplan_meier([v["onset"] if v["switched_on"] else None for v in per_seed.values()], end)
    plateaus = [v["plateau"] for v in on.values()]
    out = {"n": n, "switched_on": k, "fraction": k / n if n else None,
           "fraction_interval": fraction_interval(k, n, confidence) if n else None,
           "onset_median": float(np.median(onsets)) if onsets else None,
           "onset_range": [min(onsets), max(onsets)] if onsets else None,
           "kaplan_meier": curve,
           # the Kaplan-Meier median: the first update by which half the models had switched on
           "half_by": next((p["step"] for p in curve if p["switched"] >= 0.5), None),
           "plateau_mean": float(np.mean(plateaus)) if plateaus else None, "plateau_interval": None}
    if k >= 2:
        half = scipy_stats.t.ppf(0.5 + confidence / 2, k - 1) * np.std(plateaus, ddof=1) / math.sqrt(k)
        out["plateau_interval"] = [out["plateau_mean"] - float(half), out["plateau_mean"] + float(half)]
    return out


def study_onset(part: Mapping, seeds: Sequence[int] = ONSET_SEEDS) -> dict:
    """The onset summary of a mechanism-study part (``results/mechanism.json``'s ``l48``): each of
    its seeds among ``seeds``, the estimates over all of them and over the unseen ones, the
    ``missing_seeds`` still to run and the ``reading`` (rule 7) once none is missing."""
    have = [s for s in seeds if str(s) in part["per_seed"]]
    steps = {part["per_seed"][str(s)]["condenser"]["steps"] for s in have}
    if len(steps) > 1:
        raise ValueError(f"the seeds' Condenser stages differ in length ({sorted(steps)}): one stage per part")
    end = steps.pop() if steps else 0
    per_seed = {str(s): seed_summary(part["per_seed"][str(s)]["condenser"]["curve"], end) for s in have}
    unseen = {s: v for s, v in per_seed.items() if int(s) not in SEEN_SEEDS}
    missing = [s for s in seeds if s not in have]
    every = estimates(per_seed, end) if per_seed else None
    return {"rule_commit": ONSET_RULE_COMMIT, "steps": end, "per_seed": per_seed, "missing_seeds": missing,
            "all": every, "unseen": estimates(unseen, end) if unseen else None,
            "reading": None if missing or every is None else reading(every)}


def reading(e: Mapping, threshold: float = RELIANCE_THRESHOLD) -> dict:
    """Rule 7: what the estimates let the book say, one sentence each for the fraction and the
    plateau (the onset is described, not tested)."""
    lo, hi = e["fraction_interval"]
    span = f"{lo:.0%} to {hi:.0%}"
    if lo > 0.5:
        fraction = f"Most pre-trained models switch their head on within the stage (95% interval {span})."
    elif hi < 0.5:
        fraction = f"A minority of pre-trained models switch their head on within the stage (95% interval {span})."
    else:
        fraction = (f"The share of pre-trained models that switch their head on within the stage has a 95% "
                    f"interval of {span}; {e['n']} seeds cannot tell most from a minority.")
    if e["plateau_interval"] is None:
        level = "Too few seeds switched on to put an interval on their plateau."
    else:
        p_lo, p_hi = e["plateau_interval"]
        where = "below" if p_hi < threshold else "above" if p_lo > threshold else "near"
        side = "; these seeds cannot tell on which side" if where == "near" else ""
        # the plateau is the last quarter's mean: a level, not a test that the curve stopped rising
        level = (f"Over the stage's last quarter, those that switch on average {where} C0's threshold of "
                 f"{threshold}{side} (mean {e['plateau_mean']:.3f}, 95% interval {p_lo:.3f} to {p_hi:.3f}).")
    return {"fraction": fraction, "plateau": level}
