"""The mechanism page's figures ("When does the head need [CLS]?", ``notebooks/10_mechanism.md``,
and its scaling part, ``notebooks/14_scaling.md``),
drawn from ``results/mechanism.json`` by the legibility rule of ``plots``: the reliance curves of
the study's parts, the scaling points against FLOPs, each scaling point's curves, and the
onsets of L48's seeds with the fraction switched on against updates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from condenser_lite.studies.onset import SEEN_SEEDS
from condenser_lite.studies.onset import onset as onset_of
from .plots import FIGURE_WIDTH, SMALL, figure_for, legend_above, panels, thousands
from condenser_lite.reproduction.statistics.rules import RELIANCE_THRESHOLD
from condenser_lite.reproduction.statistics.wording import FAR_DECADES, seeds_text

# one colour per pre-training seed, the same in every figure of the page (Okabe-Ito's, without
# its yellow, then Tol's wine): seeds 42-49
# seed 46 in black: it and seed 44 both stay near zero on L48, and need the two most distinct colours
SEED_COLOURS = dict(zip(map(str, range(42, 50)), ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#000000",
                                                  "#e69f00", "#56b4e9", "#882255")))
SEED_STYLES = {"42": "-", "43": ":", "44": "-."}  # where colour names the part instead (C0's line is dashed)
PART_NAMES = {"e0": "E0, faithful", "e1": "E1, 4x as long", "e2": "E2, 6 layers", "e3": "E3, no gradient to layer 1",
              "e4": "E4, reads the embeddings", "e5": "E5, reads a 50%-masked copy", "l48": "L48, 16x as long",
              "s1x4": "S1X4, stage 1 4x as long", "w256": "W256, hidden size 256"}
PART_COLOURS = {"e0": "#0072b2", "e3": "#009e73", "e4": "#e69f00", "e5": "#cc79a7"}


def reliance_curve(stage: Mapping, deficit: bool = False) -> tuple[list[int], list[float]]:
    """A Condenser stage's held-out evaluations where the reliance is defined: updates, and the
    reliance (``deficit``: the head's deficit L_ablated - L_late, of which the reliance is a share)."""
    rows = [r for r in stage["curve"] if r.get("cls_reliance") is not None]
    values = [r["reliance_ablated_loss"] - r["reliance_late_loss"] if deficit else r["cls_reliance"] for r in rows]
    return [r["step"] for r in rows], values


def _threshold(ax, label: bool = True) -> None:
    ax.axhline(RELIANCE_THRESHOLD, color="black", ls="--", lw=1,
               label=f"C0's threshold ({RELIANCE_THRESHOLD:g})" if label else None)
    ax.axhline(0, color="grey", lw=0.5)


def _proxy(**style):
    from matplotlib.lines import Line2D

    return Line2D([], [], **style)


def plot_part_curves(study: Mapping, parts: Sequence[str], deficit: bool = False):
    """The reliance on the late [CLS] over the Condenser stage of each of ``parts`` (one colour
    per pre-training seed; the first of two parts dotted with hollow squares, the second solid),
    C0's threshold, and with ``deficit`` a second panel: the head's deficit without its own
    [CLS], L_ablated - L_late, the share of which the reliance is."""
    fig, axes = panels(1 + deficit, height=3.0)
    styles = ([dict(ls="-", marker="o", ms=3)] if len(parts) == 1 else
              [dict(ls=":", marker="s", ms=4, mfc="none", zorder=3), dict(ls="-", marker="o", ms=2.5, zorder=2)])
    seeds = []
    for part, style in zip(parts, styles):
        for s, arms in study[part]["per_seed"].items():
            seeds += [s] if s not in seeds else []
            axes[0].plot(*reliance_curve(arms["condenser"]), color=SEED_COLOURS[s], **style)
            if deficit:
                axes[1].plot(*reliance_curve(arms["condenser"], deficit=True), color=SEED_COLOURS[s], **style)
    _threshold(axes[0])
    axes[0].set_ylabel("reliance on the late [CLS]")
    if deficit:
        axes[1].set_ylabel("$L_{ablated} - L_{late}$ (nats)")
    for ax in axes:
        ax.set_xlabel("Condenser update")
        thousands(ax)
    handles = [_proxy(color=SEED_COLOURS[s], label=f"seed {s}") for s in seeds]
    if len(parts) > 1:
        handles += [_proxy(color="0.3", label=PART_NAMES[p], **st) for p, st in zip(parts, styles)]
    handles.append(_proxy(color="black", ls="--", lw=1, label=f"C0's threshold ({RELIANCE_THRESHOLD:g})"))
    legend_above(fig, ncol=3, handles=handles)
    return fig


def plot_variants(study: Mapping, parts: Sequence[str] = ("e0", "e3", "e4", "e5")):
    """The reliance over the 3,000-update Condenser stage of the faithful head (the first of
    ``parts``: hollow squares, every seed) and the deviations (one colour per part, one line style
    per pre-training seed), C0's threshold."""
    fig, ax = figure_for(figsize=(FIGURE_WIDTH, 3.4))
    seeds = []
    for part in parts:
        for s, arms in study[part]["per_seed"].items():
            seeds += [s] if s not in seeds else []
            # the faithful head on top as hollow squares, no line: a deviation at zero shows through
            first = part == parts[0]
            ax.plot(*reliance_curve(arms["condenser"]), color=PART_COLOURS[part],
                    ls="none" if first else SEED_STYLES.get(s, "-"),
                    marker="s" if first else "o", ms=5 if first else 2, mfc="none" if first else None,
                    zorder=3 if first else 2)
    _threshold(ax)
    ax.set(xlabel="Condenser update", ylabel="reliance on the late [CLS]")
    thousands(ax)
    handles = [_proxy(color=PART_COLOURS[p], label=PART_NAMES[p], **(dict(marker="s", mfc="none", ms=5, ls="none")
                                                                   if p == parts[0] else {})) for p in parts]
    handles += [_proxy(color="0.3", ls=SEED_STYLES.get(s, "-"), label=f"seed {s}") for s in seeds]
    handles.append(_proxy(color="black", ls="--", lw=1, label=f"C0's threshold ({RELIANCE_THRESHOLD:g})"))
    legend_above(fig, ncol=3, handles=handles)
    return fig


def plot_scaling_curves(study: Mapping, parts: Sequence[str] = ("e0", "e1", "l48", "s1x4", "w256")):
    """The reliance over each scaling point's Condenser stage, one panel per point (three a row,
    on one y axis), one line per pre-training seed, C0's threshold in every panel: C0 asks for
    it at the stage's end on every seed."""
    parts = [p for p in parts if p in study["scaling"]["points"]]
    cols = min(3, len(parts))
    fig, axes = panels(len(parts), height=2.3, columns=cols, sharey=True, extra=0.6)
    last_row = (len(parts) - 1) // cols * cols
    seeds = []
    for i, (ax, part) in enumerate(zip(axes, parts)):
        for s, arms in study[part]["per_seed"].items():
            seeds += [s] if s not in seeds else []
            ax.plot(*reliance_curve(arms["condenser"]), color=SEED_COLOURS[s], marker="o", ms=2)
        _threshold(ax, label=False)
        steps = next(iter(study[part]["per_seed"].values()))["condenser"]["steps"]
        ax.set_title(f"{part.upper()} ({steps:,} updates)", fontsize=SMALL)
        thousands(ax)
        if i % cols == 0:
            ax.set_ylabel("reliance")
        if i >= last_row:
            ax.set_xlabel("Condenser update")
    handles = [_proxy(color=SEED_COLOURS[s], marker="o", ms=3, label=f"seed {s}") for s in seeds]
    handles.append(_proxy(color="black", ls="--", lw=1, label=f"C0's threshold ({RELIANCE_THRESHOLD:g})"))
    legend_above(fig, ncol=4, handles=handles)
    return fig


def plot_onset(study: Mapping, part: str = "l48"):
    """When the faithful head switches on over ``part``'s stage (``onset.py``): above, the
    reliance of each pre-training seed the study holds against updates, its onset marked (a
    triangle at the first evaluation from which it stays above twice its noise) and C0's
    threshold; below, the Kaplan-Meier fraction of the seeds switched on by each update
    (``study["onset"]``; over the seeds unseen when the rules were written alone, dashed)."""
    import matplotlib.pyplot as plt

    summary = study["onset"]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(FIGURE_WIDTH, 5.2),
                                      gridspec_kw={"height_ratios": [2, 1]})
    handles = []
    for s, result in summary["per_seed"].items():
        stage = study[part]["per_seed"][s]["condenser"]
        steps, values = reliance_curve(stage)
        top.plot(steps, values, color=SEED_COLOURS[s], lw=1.2)
        at = onset_of(stage["curve"])
        if at is not None and result["switched_on"]:
            top.plot(at, values[steps.index(at)], "v", color=SEED_COLOURS[s], ms=9, mec="black", mew=0.6)
        handles.append(_proxy(color=SEED_COLOURS[s], label=f"seed {s}"))
    _threshold(top)
    top.set_ylabel("reliance on the late [CLS]")
    handles += [_proxy(color="0.4", marker="v", ls="", ms=8, mec="black", mew=0.6, label="onset"),
                _proxy(color="black", ls="--", lw=1, label=f"C0's threshold ({RELIANCE_THRESHOLD:g})")]
    for name, ls in (("all", "-"), ("unseen", "--")):
        km = (summary.get(name) or {}).get("kaplan_meier")
        if km:
            unseen = [s for s in summary["per_seed"] if int(s) not in SEEN_SEEDS]
            label = f"{seeds_text(unseen)} alone" if name == "unseen" else f"all {summary[name]['n']} seeds"
            bottom.step([p["step"] for p in km], [p["switched"] for p in km], where="post", color="black", ls=ls,
                        label=label)
    bottom.set_ylim(-0.05, 1.05)
    bottom.set_ylabel("share switched on")
    bottom.set_xlabel("Condenser update")
    bottom.legend(fontsize=SMALL, frameon=False, loc="lower right")
    thousands(bottom)
    legend_above(fig, ncol=5, handles=handles)
    return fig


SCALING_STYLE = {"training length": ("#0072B2", "o"), "stage-1 length": ("#E69F00", "s"),
                 "width": ("#009E73", "^")}  # series of the mechanism study's scaling part


def _scaling_points(ax, points: Mapping, labels: bool) -> tuple[list[float], list[float]]:
    """``plot_scaling``'s markers: hollow per seed, filled at each point's mean, a line through each series'
    means; a point still missing some of its seeds (``missing_seeds``) has its seeds' markers only, since a
    mean over other seeds than its neighbours' would join a line it does not belong to (a series with no
    complete point yet is named in the legend as "<series> (seeds so far)"). The first series' means are drawn
    smaller and on top of the others', so a point of another series at the same FLOPs (S1X4 at E0's) leaves
    both in sight. Returns every seed's FLOPs and reliance."""
    xs_all, ys_all = [], []
    for rank, (series, (col, marker)) in enumerate(SCALING_STYLE.items()):
        parts = [p for p, v in points.items() if v["series"] == series]
        means = []
        for part in parts:
            per_seed = points[part]["per_seed"].values()
            x = [10 ** v["log_flops"] for v in per_seed]
            y = [v["reliance"] or 0.0 for v in per_seed]
            xs_all += x
            ys_all += y
            ax.scatter(x, y, facecolors="none", edgecolors=col, marker=marker, s=28, lw=1)
            if not points[part].get("missing_seeds"):
                means.append((float(np.mean(x)), float(np.mean(y))))
        if means:
            means.sort()
            ax.plot(*zip(*means), color=col, marker=marker, ms=6 if rank == 0 else 10,
                    zorder=3 if rank == 0 else 2, ls="-" if len(means) > 1 else "none",
                    label=series if labels else None)
        elif parts and labels:  # no mean to label yet: the legend names its seeds' markers
            ax.scatter([], [], facecolors="none", edgecolors=col, marker=marker, s=28, lw=1,
                       label=f"{series} (seeds so far)")
    return xs_all, ys_all


def _two_and_five(x: float, pos=None) -> str:
    """A minor tick's label on a log axis: "2×10¹⁴" or "5×10¹⁴", nothing at the other multiples."""
    exponent = math.floor(math.log10(x) + 1e-9)
    coefficient = round(x / 10 ** exponent)
    return rf"${coefficient}\times10^{{{exponent}}}$" if coefficient in (2, 5) else ""


def plot_scaling(scaling: Mapping, reference: Mapping | None = None, ax=None):
    """The faithful Condenser's [CLS] reliance against its Condenser stage's FLOPs (log axis): ``scaling`` is
    ``results/mechanism.json``'s ``"scaling"`` (``points``: per part its ``series`` and per seed ``reliance``
    and ``log_flops``; ``trend``: ``mechanism_rules.scaling_trend``'s result or None). A hollow marker per
    seed, a filled one at each point's mean (none for a point still missing some of its seeds; an undefined
    reliance counts as 0, as the rule counts it), a line through the training-length series, C0's threshold,
    the pre-registered trend line with where it would reach the threshold (and the range its slope's limits
    give; the axis stops ``FAR_DECADES`` past the data, as the prose does), and ``reference``
    (``{"label", "log_flops", "reliance": [per seed]}``, e.g. the modified Condenser of ``small``) for
    comparison; an inset repeats the points on their own scale where they stay under half the threshold and
    the reference passes it. Chapter 14 (``notebooks/14_scaling.md``)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fig, ax = figure_for(ax, figsize=(FIGURE_WIDTH, 3.8))
    points = scaling.get("points") or {}
    if not points:
        raise ValueError("plot_scaling: the scaling part has no points yet "
                         "(run python -m condenser_lite mechanism --only e0, then --only e1 ...)")
    xs_all, ys_all = _scaling_points(ax, points, labels=True)
    # Where the faithful points sit far below the threshold and the reference far above it,
    # one axis squeezes them into a line: an inset repeats them on their own scale.
    if reference and max(map(abs, ys_all)) < RELIANCE_THRESHOLD / 2 < max(reference["reliance"]):
        inset = ax.inset_axes([0.47, 0.38, 0.45, 0.48])
        _scaling_points(inset, points, labels=False)
        inset.axhline(0, color="black", lw=0.6)
        inset.set_xscale("log")
        pad = 0.1 * (max(ys_all) - min(ys_all)) + 0.005
        inset.set_ylim(min(ys_all) - pad, max(ys_all) + pad)
        inset.tick_params(which="both", labelsize=SMALL)
        inset.xaxis.set_minor_formatter(NullFormatter())  # minor labels crowd a small inset
        inset.set_title("the faithful points, zoomed", fontsize=SMALL)
    if reference:
        x = 10 ** reference["log_flops"]
        ax.scatter([x] * len(reference["reliance"]), reference["reliance"], color="#CC79A7", marker="D",
                   s=22, label=reference.get("label", "reference"))
        xs_all.append(x)
    ax.axhline(RELIANCE_THRESHOLD, color="black", ls=":", lw=1, label=f"C0's threshold ({RELIANCE_THRESHOLD:g})")
    ax.axhline(0, color="black", lw=0.6)
    trend = scaling.get("trend")
    if trend:
        lo, hi = np.log10(min(xs_all)), np.log10(max(xs_all))
        far = hi + FAR_DECADES  # the axis stops where the prose stops giving a number
        end = trend.get("crossing_log_flops") or trend.get("bound_log_flops")
        if end is not None:
            hi = min(max(hi, end), far)
        grid = np.linspace(lo, hi, 50)
        line = trend["r_mean"] + trend["mean_slope"] * (grid - trend["x_mean"])
        ax.plot(10 ** grid, line, color="black", lw=1, ls="--", label="trend (pre-registered)")
        cross, bound = trend.get("crossing_log_flops"), trend.get("bound_log_flops")
        if cross is not None and cross <= far:
            left, right = (min(x, far) for x in trend["crossing_interval"])
            ax.errorbar([10 ** cross], [RELIANCE_THRESHOLD],
                        xerr=[[10 ** cross - 10 ** left], [10 ** right - 10 ** cross]], fmt="x",
                        color="black", capsize=3, label="reaches 0.2 (slope's 95% limits)")
        elif bound is not None and bound <= far:
            ax.axvline(10 ** bound, color="grey", ls="-.", lw=1, label="no sooner than (upper slope)")
    ax.set_xscale("log")
    # minor labels at every tick run into each other: 2 and 5 times each power of ten, up to two decades
    lo, hi = ax.get_xlim()
    ax.xaxis.set_minor_formatter(FuncFormatter(_two_and_five) if np.log10(hi / lo) <= 2 else NullFormatter())
    ax.set_xlabel("FLOPs of the Condenser stage")
    ax.set_ylabel("reliance on the late [CLS]")
    legend_above(fig, ncol=3)
    return fig
