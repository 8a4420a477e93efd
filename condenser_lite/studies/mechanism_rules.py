"""The mechanism study's pre-registered rules, fixed before the runs they judge.

Which of the study's deviations becomes the "modified Condenser" arm (``choose_modified``, fixed
in ``MODIFIED_RULE_COMMIT``); when the faithful Condenser's head starts to read [CLS] as it grows
(``scaling_trend``, ``trend_sensitivity``, fixed in ``SCALING_RULE_COMMIT``); and the book's
description of a head that has started to use its [CLS] (``reliance_above_noise``). Both build on
C0's rule and threshold (``rules.c0_rule``, ``rules.RELIANCE_THRESHOLD``). Explained on the page
"When does the head need [CLS]?" (``notebooks/10_mechanism.md``) and in chapter 8.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from ..reproduction.statistics.rules import RELIANCE_THRESHOLD

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


def reliance_above_noise(gauges: Mapping, times: float = 2.0) -> bool:
    """Whether one evaluation's ``cls_reliance`` is more than ``times`` its ``cls_reliance_noise``
    (a stage's final gauges or a row of its curve): the book's description of a head that has
    started to use its [CLS], beside C0's pre-registered 0.2; False where it is undefined. The
    page "When does the head need [CLS]?" and chapter 8."""
    reliance = gauges.get("cls_reliance")
    return reliance is not None and reliance > times * gauges["cls_reliance_noise"]


# ---- The faithful Condenser against scale: when does its head start to read [CLS]? ---------------
#
# Fixed before the runs it judges (``SCALING_RULE_COMMIT``), for the mechanism study's scaling part
# (``studies/mechanism.py``, parts "l48"/"s1x4"/"w256" beside E0 and E1):
# 1. Each point is a faithful Condenser stage on SCALING_SEEDS with its equal-step BERT-continued
#    control from the same stage-1 model; its reliance is the gauge's final value (``run_reliance``)
#    and it "reads [CLS]" where ``c0_rule``'s ``relies`` holds: reliance >= RELIANCE_THRESHOLD on
#    every seed with the late MLM loss within LATE_LOSS_MARGIN nats of the control's.
# 2. The x axis is log10 of the Condenser stage's own FLOPs (``accounting.stage_flops``).
# 3. The trend, for the series "training length" (Condenser stages of 3,000, 12,000 and 48,000
#    updates from the same stage-1 models): per seed, the least-squares slope of reliance on log10
#    FLOPs; their mean with a two-sided 95% t-interval over seeds; the line through the mean point
#    (mean log10 FLOPs, mean reliance) with that slope. Where the interval's lower end is above 0,
#    the FLOPs at which the line reaches RELIANCE_THRESHOLD, with the interval the slope's limits
#    give; otherwise the trend is called flat and reported as a bound: the fewest FLOPs at which a
#    line with the interval's upper slope would reach the threshold (none if that slope is <= 0).
# 4. The other series (stage 1 four times as long; hidden size 256 with its own stage 1), each at
#    the preset's Condenser length, are compared with the training-length series' point of the same
#    length by a one-sided paired t-test over seeds (``unit_test``: is the reliance higher?).
SCALING_SEEDS = (42, 43, 44)
SCALING_RULE_COMMIT = "9ab310ba47451c5ea041c8ad7c20b7b2cfcfa681"  # the commit that fixed these rules
SCALING_CONFIDENCE = 0.95


def scaling_trend(points: Sequence[Mapping], threshold: float = RELIANCE_THRESHOLD,
                  confidence: float = SCALING_CONFIDENCE) -> dict:
    """The pre-registered trend of reliance against log10 FLOPs (rule 3 above). ``points``: one
    per seed and stage, ``{"seed", "log_flops", "reliance"}`` (an undefined reliance counts as 0:
    a head that never trails its backbone reads nothing). Returns per-seed ``slopes``, their
    ``mean_slope`` and ``slope_interval``, the mean point (``x_mean``, ``r_mean``), ``flat``, and
    ``crossing_log_flops`` with ``crossing_interval`` (log10 FLOPs; None where no line reaches
    the threshold) or, for a flat trend, ``bound_log_flops``. Explained on the page "When does the
    head need [CLS]?" (``notebooks/10_mechanism.md``)."""
    by_seed: dict[Any, list[tuple[float, float]]] = {}
    for p in points:
        by_seed.setdefault(p["seed"], []).append((float(p["log_flops"]), float(p["reliance"] or 0.0)))
    slopes = {}
    for seed, xy in by_seed.items():
        if len({x for x, _ in xy}) < 2:
            raise ValueError(f"seed {seed} has points at fewer than two FLOPs: no slope")
        x, y = np.asarray(xy).T
        slopes[seed] = float(np.polyfit(x, y, 1)[0])
    s = np.asarray(list(slopes.values()))
    n = s.size
    mean = float(s.mean())
    if n < 2:
        raise ValueError("the trend needs at least two pre-training seeds")
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, n - 1) * s.std(ddof=1) / math.sqrt(n))
    lo, hi = mean - half, mean + half
    xs = np.asarray([x for xy in by_seed.values() for x, _ in xy])
    rs = np.asarray([r for xy in by_seed.values() for _, r in xy])
    x_mean, r_mean = float(xs.mean()), float(rs.mean())

    def reach(slope: float) -> float | None:
        return None if slope <= 0 else x_mean + (threshold - r_mean) / slope

    flat = lo <= 0
    out = {"slopes": {str(k): round(v, 6) for k, v in slopes.items()}, "mean_slope": round(mean, 6),
           "slope_interval": [round(lo, 6), round(hi, 6)], "confidence": confidence, "x_mean": round(x_mean, 4),
           "r_mean": round(r_mean, 6), "threshold": threshold, "flat": flat}
    if flat:
        return {**out, "crossing_log_flops": None, "crossing_interval": None, "bound_log_flops": reach(hi)}
    # low end first: below the threshold the steeper slope reaches it sooner, above it later
    return {**out, "crossing_log_flops": reach(mean), "crossing_interval": sorted([reach(hi), reach(lo)]),
            "bound_log_flops": None}


def trend_sensitivity(n: int, confidence: float = SCALING_CONFIDENCE) -> dict:
    """What ``scaling_trend``'s interval over ``n`` seeds can detect, known before any run: its
    lower end clears zero only where the mean slope exceeds ``ratio`` times the seeds' slopes'
    standard deviation, so a rise on ``blind_to`` seeds of ``n`` or fewer, the others flat, is
    never called a rise however steep (equal slopes on the rising seeds come closest to passing,
    by Cauchy-Schwarz). The page "When does the head need [CLS]?"."""
    t = float(scipy_stats.t.ppf(0.5 + confidence / 2, n - 1))
    # k equal slopes b, n - k zero: mean / (sd / sqrt(n)) = sqrt(k (n - 1) / (n - k)), against t
    blind = [k for k in range(1, n) if math.sqrt(k * (n - 1) / (n - k)) <= t]
    return {"ratio": t / math.sqrt(n), "blind_to": max(blind, default=0)}
