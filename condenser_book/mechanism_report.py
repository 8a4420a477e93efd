"""The mechanism page's analysis ("When does the head need [CLS]?", ``notebooks/10_mechanism.md``,
and its scaling part, ``notebooks/14_scaling.md``):
what ``results/mechanism.json`` (the study) and ``results/small.json`` (the committed run) show,
as the page's tables and as the short phrases it pastes into its prose (``readings``).

Every number comes from the two files; every rule from ``rules`` and ``onset``, applied again
here where the page checks the committed verdicts. A phrase describes the data the file holds:
a part or a seed the study has not run yet is named as "to run", never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import groupby

import numpy as np

from condenser_lite.studies.onset import ONSET_SEEDS, SEEN_SEEDS, fraction_interval, onset
from condenser_lite.studies.mechanism_rules import reliance_above_noise
from condenser_lite.reproduction.evidence.results import judged_seeds, pretraining_runs, run_reliance
from condenser_lite.reproduction.statistics.rules import RELIANCE_THRESHOLD, c0_rule
from condenser_lite.reproduction.statistics.wording import fixed, seeds_text, sentence, trend_text, words

ORDER = ("e0", "e1", "e2", "e3", "e4", "e5", "l48", "s1x4", "w256")  # the page's order
SCALING_PARTS = ("e0", "e1", "l48", "s1x4", "w256")
LENGTH_PARTS = ("e0", "e1", "l48")  # the training-length series, which the trend is fitted to


# ---- words ---------------------------------------------------------------------------------------


def values_text(values: Iterable[float | None], digits: int = 3) -> str:
    """Numbers as the page prints them: ``0.210, 0.221 and 0.021`` (``undefined`` for None)."""
    return words("undefined" if v is None else fixed(v, digits) for v in values)


# ---- one part's final gauges ---------------------------------------------------------------------


def finals(study: Mapping, part: str, arm: str = "condenser") -> dict[str, dict]:
    """``{seed: final held-out gauges}`` of ``arm``'s stage in ``part``, over the seeds that ran it
    (a seed trained without its control has no ``bert_cont``)."""
    return {s: arms[arm]["final"] for s, arms in study[part]["per_seed"].items() if arm in arms}


def uncontrolled(study: Mapping, part: str) -> list[str]:
    """The seeds of ``part`` trained without their equal-step control (BERT-continued): C0 is
    judged without them (``studies.mechanism.judge``)."""
    return [s for s, arms in study[part]["per_seed"].items() if "bert_cont" not in arms]


def reliances(study: Mapping, part: str) -> list[float | None]:
    """The Condenser's final reliance per seed, recomputed from its committed losses."""
    return [run_reliance(f)["reliance"] for f in finals(study, part).values()]


def deficits(study: Mapping, part: str) -> list[float]:
    """The head's deficit without its own [CLS], L_ablated - L_late, per seed (nats)."""
    return [f["reliance_ablated_loss"] - f["reliance_late_loss"] for f in finals(study, part).values()]


def recompute_c0(study: Mapping, part: str) -> dict:
    """The pre-registered rule C0 (``rules.c0_rule``) applied again to a part's committed gauges,
    over the seeds that have their control."""
    ctl = finals(study, part, "bert_cont")
    cond = [finals(study, part)[s] for s in ctl]
    return c0_rule([run_reliance(f)["reliance"] for f in cond], [f["mlm_loss"] for f in cond],
                   [c["mlm_loss"] for c in ctl.values()], [f["cls_cosine"] for f in cond],
                   [c["cls_cosine"] for c in ctl.values()])


def final_table(study: Mapping, part: str):
    """A part's final gauges, one column per pre-training seed: the reliance and its noise, the same ratio
    with a zero or a mean [CLS], the deficit it is a share of, and the Condenser's late MLM loss and late
    [CLS] cosine minus its control's (BERT-continued's; empty for a seed trained without it)."""
    import pandas as pd

    rows = {}
    for s, arms in study[part]["per_seed"].items():
        cd, cont = arms["condenser"]["final"], arms.get("bert_cont", {}).get("final")
        rows[f"seed {s}"] = {
            "reliance": cd.get("cls_reliance"), "noise": cd["cls_reliance_noise"],
            "zero [CLS]": cd.get("cls_reliance_zero"), "mean [CLS]": cd.get("cls_reliance_mean"),
            "deficit (nats)": cd["reliance_ablated_loss"] - cd["reliance_late_loss"],
            "late loss - control": cd["mlm_loss"] - cont["mlm_loss"] if cont else None,
            "cosine - control": cd["cls_cosine"] - cont["cls_cosine"] if cont else None}
    return pd.DataFrame(rows).round(4) + 0.0  # + 0.0: no -0.0000


def onsets(study: Mapping, part: str) -> dict[str, int | None]:
    """Per seed, the update from which the reliance stays above twice its noise (``onset.onset``)."""
    return {s: onset(arms["condenser"]["curve"]) for s, arms in study[part]["per_seed"].items()}


# ---- where each run ran --------------------------------------------------------------------------


def _hours(study: Mapping, part: str, arm: str) -> float:
    # one worker's hours for a stage, over the part's seeds: CPU time on a CPU, wall time on a GPU
    on_gpu = study[part]["provenance"]["machine"].get("gpu")
    return sum(v[arm]["wall_seconds" if on_gpu else "cpu_seconds"]
               for v in study[part]["per_seed"].values() if arm in v) / 3600


def provenance_table(study: Mapping):
    """Where each part ran: its seeds, machine, torch build and commits (one per study command
    that trained its seeds), and one worker's hours per stage, summed over the seeds (CPU time
    on a CPU, wall time on a GPU; "E0's" where a part's stage 1 is E0's checkpoint; the seeds
    trained without their control named beside its hours)."""
    import pandas as pd

    rows = {}
    for part in (p for p in ORDER if p in study):
        entry = study[part]
        runs = [*entry.get("provenance_of_other_seeds", []), entry["provenance"]]
        e0 = study["e0"]["per_seed"]
        shared = part != "e0" and all(s in e0 and v["bert"]["checkpoint_key"] == e0[s]["bert"]["checkpoint_key"]
                                      for s, v in entry["per_seed"].items())
        rows[part.upper()] = {
            "seeds": words(entry["per_seed"]),
            "machine": words(sorted({r["machine"].get("gpu") or f"{r['machine']['cores']}-core {r['machine']['cpu']}"
                                     for r in runs})),
            "torch": words(sorted({r["packages"]["torch"].split("+")[0] for r in runs})),
            "commit": words(r["commit"][:7] for r in runs),
            "stage 1 (h)": "E0's" if shared else f"{_hours(study, part, 'bert'):.2f}",
            "Condenser (h)": f"{_hours(study, part, 'condenser'):.2f}",
            "control (h)": f"{_hours(study, part, 'bert_cont'):.2f}" + (
                f" (seeds {words(uncontrolled(study, part))} without)" if uncontrolled(study, part) else "")}
    return pd.DataFrame(rows).T


# ---- the scaling part ----------------------------------------------------------------------------


def _mean_log_flops(study: Mapping, part: str) -> float:
    return float(np.mean([v["log_flops"] for v in study["scaling"]["points"][part]["per_seed"].values()]))


def points_table(study: Mapping):
    """The scaling points: stage 1's and the Condenser stage's FLOPs (the seeds' mean, 10^12), the
    stage's updates, the final reliance per seed with its noise, and whether the point reads [CLS]
    by C0's rule (a seed a point has not run yet: "to run")."""
    import pandas as pd

    rows = {}
    for part, point in study["scaling"]["points"].items():
        per_seed, stages = point["per_seed"], study[part]["per_seed"]
        reads = {True: "yes", False: "no"}.get(point["reads_cls"], "when all seeds are in")
        rows[part.upper()] = {
            "stage 1 (10¹² FLOPs)": round(np.mean([v["bert"]["flops"] for v in stages.values()]) / 1e12, 1),
            "Condenser updates": f"{round(np.mean([v['steps'] for v in per_seed.values()])):,}",
            "Condenser (10¹² FLOPs)": round(10 ** (_mean_log_flops(study, part) - 12), 1),
            **{f"seed {s}": f"{fixed(v['reliance'] or 0.0, 4)} "
                              f"({fixed(stages[s]['condenser']['final']['cls_reliance_noise'], 4)})"
               for s, v in per_seed.items()},
            "reads [CLS]": reads}
    return pd.DataFrame(rows).T.fillna("to run")


def quarter_means(stage: Mapping) -> list[float]:
    """A stage's reliance averaged over each quarter of its updates."""
    rows = [r for r in stage["curve"] if r.get("cls_reliance") is not None]
    edges = np.linspace(0, stage["steps"], 5)
    return [float(np.mean([r["cls_reliance"] for r in rows if lo < r["step"] <= hi]))
            for lo, hi in zip(edges[:-1], edges[1:])]


def _versus(study: Mapping) -> dict[str, str]:
    # S1X4 and W256 against E0: the one-sided paired test over seeds, in two short phrases each
    out = {}
    for part, t in (study["scaling"].get("versus_e0") or {}).items():
        verdict = {"better": "above E0's by the test", "worse": "below E0's by the test"}.get(
            t["verdict"], "not detectably above E0's")
        out[f"{part}_versus"] = f"{part.upper()}'s reliance is {verdict}"
        out[f"{part}_versus_p"] = f"p = {t['p']:.2f}, MDD {fixed(t['mdd'], 4 if t['mdd'] < 0.01 else 3)}"
    return out


def scaling_readings(study: Mapping) -> dict[str, str]:
    """The scaling part's phrases: L48's seeds past the threshold and its quarter means, the trend
    in words (or what it waits for), and the comparisons with E0."""
    points, trend = study["scaling"]["points"], study["scaling"]["trend"]
    out = {}
    if "l48" in points:
        l48 = points["l48"]["per_seed"]
        passed = [s for s, v in l48.items() if (v["reliance"] or 0.0) >= RELIANCE_THRESHOLD]
        out["l48_passed"] = seeds_text(passed) if passed else "no seed"
        out["l48_short"] = seeds_text(s for s in l48 if s not in passed) if len(passed) < len(l48) else "no seed"
        # the scaling point reads the seeds the rules name (SCALING_SEEDS), the part may hold more
        out["l48_scaling_seeds"] = seeds_text(l48)
        out["l48_scaling_reliance"] = values_text(v["reliance"] for v in l48.values())
        quarters = {s: quarter_means(study["l48"]["per_seed"][s]["condenser"]) for s in l48}
        slowing = [s for s, q in quarters.items() if all(np.diff(q) > 0) and all(np.diff(q, 2) < 0)]
        out["l48_quarters"] = ("Over the four quarters of the stage the reliance averages "
                               + "; ".join(f"{values_text(q)} on seed {s}" for s, q in quarters.items()) + ".")
        if slowing:
            out["l48_quarters"] += f" On {seeds_text(slowing)} it rises by less each quarter than the last."
    if trend is None:
        out["trend"] = "The trend is fitted once E0, E1 and L48 hold the same seeds"
        out["trend_finding"] = out["trend_interval"] = "to fit"
        out["trend_slope"] = ""
    else:
        top = max(v["log_flops"] for v in points["l48"]["per_seed"].values())
        out["trend"] = trend_text(trend, top, brief=True)
        lo, hi = trend["slope_interval"]
        out["trend_slope"] = (f"Over the {len(trend['slopes'])} seeds the mean slope is {trend['mean_slope']:.3f} "
                              f"reliance per tenfold FLOPs, with a 95% interval of {lo:.3f} to {hi:.3f}.")
        out["trend_finding"] = "no detectable rise" if trend["flat"] else "a rise"
        out["trend_interval"] = (f"mean slope {trend['mean_slope']:.3f} per tenfold FLOPs, "
                                 f"95% interval {lo:.3f} to {hi:.3f}")
    out.update(_versus(study))
    return out


# ---- the onset over L48 --------------------------------------------------------------------------


def onset_table(study: Mapping):
    """The onset estimates (``study["onset"]``) over all the seeds the study holds and over the
    seeds unseen when the rules were written: seeds, the fraction switched on with its exact 95%
    interval, the onsets' median and range, the update by which half had switched on, and the
    plateau's mean with its 95% t-interval (over the seeds that switched on)."""
    import pandas as pd

    summary = study["onset"]
    held = [int(s) for s in summary["per_seed"]]
    rows = {}
    for name, seeds in (("all seeds", ONSET_SEEDS), ("unseen seeds", [s for s in ONSET_SEEDS if s not in SEEN_SEEDS])):
        e, have = summary.get("all" if name == "all seeds" else "unseen"), [s for s in seeds if s in held]
        if not e:
            rows[name] = {"seeds": f"{seeds_text(seeds)} to run"}
            continue
        interval = lambda pair, fmt: ("–" if not pair else fmt(pair[0]) if pair[0] == pair[1]  # noqa: E731
                                      else f"{fmt(pair[0])} to {fmt(pair[1])}")
        rows[name] = {
            "seeds": seeds_text(have), "switched on": f"{e['switched_on']} of {e['n']}",
            "fraction (95% interval)": f"{e['fraction']:.0%} ({interval(e['fraction_interval'], '{:.0%}'.format)})",
            "onset median": "–" if e["onset_median"] is None else f"{e['onset_median']:,.0f}",
            "onset range": interval(e["onset_range"], "{:,}".format),
            # no "half on by" (the Kaplan-Meier median): with 8 seeds its interval runs past the stage's end
            "plateau mean (95% interval)": "–" if e["plateau_mean"] is None else
            f"{e['plateau_mean']:.3f} ({interval(e['plateau_interval'], '{:.3f}'.format)})"}
    return pd.DataFrame(rows).T.fillna("")


def _near_misses(study: Mapping) -> str:
    """How near the seeds without an onset came to one: on how many evaluations each was above its
    bar (twice its noise), and its longest run of them (a switch needs ``MIN_STAY`` in a row)."""
    summary, curves = study["onset"], study["l48"]["per_seed"]
    off = [s for s, v in summary["per_seed"].items() if v["onset"] is None]
    if not off:
        return ""
    counts, longest = [], 0
    for s in off:
        above = [reliance_above_noise(r) for r in curves[s]["condenser"]["curve"]]
        counts.append((s, sum(above), len(above)))
        longest = max([longest, *(len(list(run)) for kept, run in groupby(above) if kept)])
    said = words(f"{k} of {n}{' evaluations' * (i == 0)} (seed {s})" for i, (s, k, n) in enumerate(counts))
    return f"Seeds without an onset rose above their bar on {said}, at most {longest} in a row."


def fraction_power(n: int = len(ONSET_SEEDS), likely: float = 0.9) -> str:
    """What ``n`` seeds can tell of the fraction switched on, before any of them runs: the counts
    whose exact 95% interval (rule 5) lies wholly above one half, which rule 7 needs to say "most",
    or wholly below it, for "a minority"; and how often that many would switch on were a share
    ``likely`` of all models to.

    >>> print(fraction_power(8))
    With 8 seeds, the fraction's 95% interval lies above one half only if all 8 switch on, and below \
it only if none does. Were nine in ten models to switch on, all 8 would do so 43% of the time.
    """
    from scipy.stats import binom

    most = [k for k in range(n + 1) if fraction_interval(k, n)[0] > 0.5]
    few = [k for k in range(n + 1) if fraction_interval(k, n)[1] < 0.5]
    if not most:
        return f"With {n} seeds, the fraction's 95% interval never lies wholly above or below one half."
    above = f"all {n}" if most[0] == n else f"at least {most[0]} of the {n}"
    below = "none does" if few[-1] == 0 else f"at most {few[-1]} do"
    share = {0.9: "nine in ten", 0.75: "three in four"}.get(likely, f"{likely:.0%}")
    return (f"With {n} seeds, the fraction's 95% interval lies above one half only if {above} switch on, and "
            f"below it only if {below}. Were {share} models to switch on, {above} would do so "
            f"{binom.sf(most[0] - 1, n, likely):.0%} of the time.")


def plateau_notes(study: Mapping) -> dict[str, str]:
    """What the plateau's estimate covers: only the seeds that switched on (and the mean over
    all), the seen and unseen ones among them, and whether their reliance still rises from the
    stage's third quarter to its last (the plateau is where the stage ends, not a level reached)."""
    summary, curves = study["onset"], study["l48"]["per_seed"]
    per_seed, steps = summary["per_seed"], summary["steps"]
    on = [s for s, v in per_seed.items() if v["switched_on"]]
    if len(on) < 2:
        return {"onset_conditional": "", "onset_seen": "", "onset_rising": ""}
    every = float(np.mean([v["plateau"] for v in per_seed.values()]))
    near = ""
    if summary["reading"] and "near" in summary["reading"]["plateau"]:
        near = f" \"Near\" means only that the interval holds {RELIANCE_THRESHOLD}."
    seen = [s for s in on if int(s) in SEEN_SEEDS]
    unseen = [s for s in on if int(s) not in SEEN_SEEDS]

    def levels(seeds):
        return words(fixed(per_seed[s]["plateau"]) for s in seeds)

    rises = []
    for s in on:
        rows = curves[s]["condenser"]["curve"]
        third = [r["cls_reliance"] or 0.0 for r in rows if steps / 2 < r["step"] <= 3 * steps / 4]
        last = [r["cls_reliance"] or 0.0 for r in rows if r["step"] > 3 * steps / 4]
        rises.append(float(np.mean(last) - np.mean(third)))
    up = sum(r > 0 for r in rises)
    return {
        "onset_conditional": (f"The plateau's mean and interval cover only the {len(on)} seeds that switched on, "
                              f"a group picked by its own reliance. Over all {len(per_seed)} seeds, the mean "
                              f"plateau is {fixed(every)}.{near}"),
        "onset_seen": sentence((f"{seeds_text(seen)}, seen before the rules, "
                                f"{'plateaus' if len(seen) == 1 else 'plateau'} at {levels(seen)}; " if seen else "")
                               + (f"the unseen seeds that switched on, at {levels(unseen)}." if unseen else
                                  "no unseen seed switched on.")) + _machines(curves),
        "onset_rising": (f"From the stage's third quarter to its last, the mean reliance rises on "
                         f"{'all' if up == len(on) else f'{up} of the'} {len(on)} seeds that switched on "
                         f"(by {fixed(min(rises))} to {fixed(max(rises))})."
                         if up else "From the stage's third quarter to its last, no seed that switched on "
                         "rises further."),
    }


def _machines(curves: Mapping) -> str:
    """A sentence where the seen and the unseen seeds' Condenser stages took CPU seconds that do not
    overlap (they ran on other machines): then the seen/unseen difference cannot be told from the
    hardware's. Empty otherwise."""
    cpu = {int(s): v["condenser"].get("cpu_seconds") for s, v in curves.items()}
    seen = [c for s, c in cpu.items() if s in SEEN_SEEDS and c]
    unseen = [c for s, c in cpu.items() if s not in SEEN_SEEDS and c]
    if not seen or not unseen or (max(seen) >= min(unseen) and max(unseen) >= min(seen)):
        return ""

    def span(values):
        low, high = (round(v, -2) for v in (min(values), max(values)))
        return f"{low:,.0f}" if low == high else f"{low:,.0f} to {high:,.0f}"

    return (f" The seen seeds' Condenser stages also took {span(seen)} CPU seconds, the unseen seeds' "
            f"{span(unseen)}: the same stage on other hardware. Which seeds were seen and which hardware ran "
            "them cannot be told apart: a difference between the two groups could come from either.")


def onset_readings(study: Mapping) -> dict[str, str]:
    """The onset's phrases: which seeds the file holds (and which are to run), what they show,
    and the rules' reading once all of ``ONSET_SEEDS`` are in (``onset.reading``)."""
    summary = study["onset"]
    e, held = summary["all"], list(summary["per_seed"])
    on = [s for s, v in summary["per_seed"].items() if v["switched_on"]]
    missing = summary["missing_seeds"]
    out = {"onset_seeds": seeds_text(held),
           "onset_scope": (f"The study holds {seeds_text(held)}; {seeds_text(missing)} "
                           f"{'is' if len(missing) == 1 else 'are'} to run. The figure and the table cover the "
                           "seeds it holds." if missing else "The study holds every one of them."),
           "onset_finding": (f"{len(on)} of {e['n']} switch on, at updates "
                             + words(f"{t:,}" for t in sorted(summary["per_seed"][s]["onset"] for s in on)) if on else
                             f"none of {e['n']} switches on"),
           "onset_uncertainty": f"fraction switched on: 95% interval {e['fraction_interval'][0]:.0%} to "
                                f"{e['fraction_interval'][1]:.0%}",
           "onset_near": _near_misses(study)}
    n_unseen = len([s for s in ONSET_SEEDS if s not in SEEN_SEEDS])
    out["onset_power"] = fraction_power() + " " + fraction_power(n_unseen).replace(
        f"With {n_unseen} seeds", f"With the {n_unseen} unseen seeds alone", 1)
    out.update(plateau_notes(study))
    if e["plateau_interval"]:
        lo, hi = e["plateau_interval"]
        out["onset_uncertainty"] += (f"; plateau of those switched on {e['plateau_mean']:.3f}, 95% interval "
                                     f"{lo:.3f} to {hi:.3f}")
    if summary["reading"]:  # every seed in: the rules' own two sentences (rule 7)
        out["onset_fraction"], out["onset_plateau"] = summary["reading"]["fraction"], summary["reading"]["plateau"]
        return out
    lo, hi = e["fraction_interval"]
    out["onset_fraction"] = (f"On {seeds_text(held)}, the share of pre-trained models that switch on has a 95% "
                             f"interval of {lo:.0%} to {hi:.0%}.")
    out["onset_plateau"] = (f"Once {seeds_text(missing)} {'is' if len(missing) == 1 else 'are'} in, the "
                            "pre-registered reading (rule 7 of onset.py) turns these estimates into the book's "
                            "sentences; until then they only describe the seeds the study holds.")
    return out


# ---- the small run: the reference of the scaling figure, C0, C0m and Am -------------------------------


def reference(small: Mapping) -> dict:
    """The scaling figure's diamonds: the modified Condenser of the committed run on the seeds its
    choice never saw (C0m's seeds), at its Condenser stage's mean FLOPs."""
    judged = judged_seeds(small, "condenser_mod")
    runs = [r for r in pretraining_runs(small, "condenser_mod") if r.get("seed") in judged]
    return {"label": "modified Condenser (small)",
            "log_flops": float(np.log10(np.mean([r["compute"]["stage"]["flops"] for r in runs]))),
            "reliance": [run_reliance(r["heldout"])["reliance"] for r in runs]}


def small_readings(small: Mapping) -> dict[str, str]:
    """The committed run's C0 (its seeds, its verdict and why), C0m and Am, as phrases."""
    claims = {c["id"]: c for c in small["claims"]}
    cond = {r.get("seed"): r["heldout"] for r in pretraining_runs(small, "condenser")}
    cont = {r.get("seed"): r["heldout"] for r in pretraining_runs(small, "bert_cont")}
    closer = [s for s in cond if cond[s]["cls_cosine"] >= cont[s]["cls_cosine"]]
    c0m, am = claims["C0m"], claims["Am"]
    settings = am["ours"]["settings"]
    gained = [n for n, st in settings.items() if st["gain"]["verdict"] == "better"]
    held = [n for n in gained if settings[n]["attributed"]]
    return {"small_seeds": seeds_text(cond), "small_c0": claims["C0"]["verdict"],
            "small_max_reliance": fixed(max(abs(r) for r in claims["C0"]["ours"]["reliance"]), 4),
            "small_cosine_seeds": seeds_text(closer) if closer else "no seed",
            "c0m_seeds": seeds_text(judged_seeds(small, "condenser_mod")),
            "c0m_reliance": values_text(c0m["ours"]["reliance"], 2), "c0m_verdict": c0m["verdict"],
            "c0m_cosine": values_text(c0m["ours"]["cls_cosine"]["condenser_mod"], 2),
            "c0m_control_cosine": values_text(c0m["ours"]["cls_cosine"]["bert_cont"], 2),
            "am_verdict": am["verdict"], "am_settings": words(settings),
            "am_held": f"{len(held)} of the {len(gained)}", "am_gained": f"{len(gained)} of the {len(settings)}",
            "mod_seeds": seeds_text(r.get("seed") for r in pretraining_runs(small, "condenser_mod"))}


# ---- the page's phrases --------------------------------------------------------------------------


def part_readings(study: Mapping, part: str) -> dict[str, str]:
    """One part's phrases, each named ``<part>_<what>``: its seeds, reliance, noise, deficit,
    C0 status, the seeds whose reliance ends above its noise and the update it stays there from."""
    fin, rel = finals(study, part), reliances(study, part)
    above = [s for s, f in fin.items() if reliance_above_noise(f)]
    starts, control = onsets(study, part), finals(study, part, "bert_cont")
    cos = [fin[s]["cls_cosine"] - c["cls_cosine"] for s, c in control.items()]
    late = [fin[s]["mlm_loss"] - c["mlm_loss"] for s, c in control.items()]
    noise = max(f["cls_reliance_noise"] for f in fin.values())
    return {f"{part}_seeds": seeds_text(fin),
            f"{part}_reliance": values_text(rel, 4 if max(map(abs, rel)) < 0.01 else 3),
            f"{part}_noise": fixed(noise, 4), f"{part}_max": fixed(max(rel), 3),
            f"{part}_threshold_over_noise": f"{RELIANCE_THRESHOLD / noise:.0f}",
            f"{part}_deficit": values_text(deficits(study, part), 2),
            f"{part}_status": study[part]["c0"]["status"],
            f"{part}_above": seeds_text(above) if above else "no seed",
            f"{part}_below": seeds_text(s for s in fin if s not in above) if len(above) < len(fin) else "no seed",
            f"{part}_from": words(f"{starts[s]:,}" for s in above if starts[s] is not None),
            f"{part}_cosine": values_text((f["cls_cosine"] for f in fin.values()), 3),
            f"{part}_control_cosine": values_text((f["cls_cosine"] for f in control.values()), 3),
            f"{part}_cosine_drop": fixed(-float(np.mean(cos)), 3),
            f"{part}_late_gap": fixed(max(abs(x) for x in late), 3),
            f"{part}_late_diff": words(f"{x:+.3f}" for x in late),
            f"{part}_stage1": values_text((v["bert"]["final"]["mlm_loss"] for v in study[part]["per_seed"].values()),
                                          2)}


def readings(study: Mapping, small: Mapping) -> dict[str, str]:
    """Every phrase the page pastes (``book.glue``), by name: each part's (``part_readings``), the
    scaling part's, the onset's and the committed run's."""
    out = {}
    for part in (p for p in ORDER if p in study):
        out.update(part_readings(study, part))
    out["chosen"] = study["modified"]["part"].upper()
    if "scaling" in study:
        out.update(scaling_readings(study))
    if "onset" in study:
        out.update(onset_readings(study))
    out.update(small_readings(small))
    return out


def check(study: Mapping) -> list[str]:
    """What the committed study would contradict: each part's C0 against the rule applied again,
    each point's "reads [CLS]" against its part's C0, and every seed's FLOPs against its stage's.
    Empty for a study whose verdicts are its rules' (the page asserts it)."""
    wrong = [f"{p}: C0 {study[p]['c0']['status']!r} is not the rule's" for p in ORDER
             if p in study and recompute_c0(study, p) != study[p]["c0"]]
    for part, point in study.get("scaling", {}).get("points", {}).items():
        expected = None if point["missing_seeds"] else study[part]["c0"]["relies"]
        if point["reads_cls"] != expected:
            wrong.append(f"{part}: reads_cls {point['reads_cls']} but C0's reliance half says {expected}")
        for s, v in point["per_seed"].items():
            flops = study[part]["per_seed"][s]["condenser"]["flops"]
            if abs(10 ** v["log_flops"] - flops) > 1e-6 * flops:
                wrong.append(f"{part} seed {s}: log_flops is not its stage's FLOPs")
    return wrong

