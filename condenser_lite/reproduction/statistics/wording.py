"""Numbers in words, as the scorecard, the claims tables and the chapters print them: a number
with fixed decimals and never ``-0.000`` (``fixed``), a p-value (``p_text``), a FLOPs count
(``flops_text``), one comparison of two arms (``comparison_text``, in ``COMPARISON_WORDS``), lists and seeds in prose
(``words``, ``seeds_text``) and the mechanism study's trend (``trend_text``). Explained in chapter 8 (``notebooks/08_scorecard.md``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np


def fixed(value: float, digits: int = 3, signed: bool = False) -> str:
    """``value`` with ``digits`` decimals (``signed``: with its sign, ``+0.012``), never
    ``-0.000``: a tiny negative rounds to zero. Chapter 8."""
    return f"{round(value, digits) + 0.0:{'+' if signed else ''}.{digits}f}"


def words(items: Iterable, conjunction: str = "and") -> str:
    """``42`` / ``42 and 43`` / ``42, 43 and 44``. Chapter 10."""
    items = [str(x) for x in items]
    return f" {conjunction} ".join(items) if len(items) < 3 else ", ".join(items[:-1]) + f" {conjunction} " + items[-1]


def sentence(text: str) -> str:
    """``text`` with its first letter a capital: ``seeds 42 and 43 ...`` / ``Seeds 42 and 43 ...``.
    Chapter 10."""
    return text[:1].upper() + text[1:]


def seeds_text(seeds: Iterable) -> str:
    """``seed 42`` / ``seeds 43 and 44`` / ``seeds 45-49`` (a run of three or more consecutive
    seeds). Chapter 10."""
    seeds = [int(s) for s in seeds]
    if not seeds:
        return "no seed"
    if len(seeds) >= 3 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return ("seed " if len(seeds) == 1 else "seeds ") + words(seeds)


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
    """The mechanism study's pre-registered trend (``mechanism_rules.scaling_trend``'s result) in words,
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


# A power-aware comparison (``rules.unit_test`` with the paper's effect) in the words every
# comparison uses, so that only claims are "reproduced": better, worse, not significant (the
# paper's effect at our scale would have been detectable) or not detectable at this power.
COMPARISON_WORDS = {"reproduced": "better", "reversed": "worse", "not reproduced": "not significant"}


def comparison_word(verdict: str) -> str:
    """A comparison's verdict in the comparisons' vocabulary (``COMPARISON_WORDS``): ``"better"``
    for a power-aware ``"reproduced"``; the other words as they are. Chapter 8."""
    return COMPARISON_WORDS.get(verdict, verdict)


def comparison_text(c: Mapping | None, a: str, b: str, digits: int = 3) -> str:
    """One comparison of arm ``a`` with arm ``b`` in words: ``a 0.123 vs b 0.100 (better)``; a
    power-aware one adds the smallest difference the run could detect and the paper's effect at
    our scale; one tested over pre-trained models its p-value and the number of models. Chapter 8."""
    if c is None:
        return f"{a} vs {b} not measured"
    if c.get("p") is not None:
        n = c["n"] if isinstance(c["n"], int) else "/".join(map(str, c["n"]))
        verdict = (f"{comparison_word(c['verdict'])}, one-sided {p_text(c['p'], equals=' = ')} over {n} "
                   "pre-trained models")
        c = {**c, "verdict": verdict}
    power = "" if c.get("mdd") is None else (
        f"; detectable {c['mdd']:.{digits}f}" + ("" if c.get("expected") is None else
                                                 f", the paper's gain here {c['expected']:.{digits}f}"))
    return f"{a} {c['a']:.{digits}f} vs {b} {c['b']:.{digits}f} ({comparison_word(c['verdict'])}{power})"

