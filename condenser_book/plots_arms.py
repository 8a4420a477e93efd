"""Figures of the protocol's arms: retrieval against training size and round, the
nearest-neighbour recall, attention entropy, fine-tuning loss curves, STS-b, and the scorecard's
gains and differences beside the paper's (chapters 4-8). Every function takes the results dict
(the JSON file's contents) and returns a matplotlib ``Figure``, so a chapter is: load results,
call, ``plots.save``. Colours and labels are fixed per arm (``registry``), so the same arm looks
the same in every chapter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .plots import FIGURE_WIDTH, SMALL, figure_for, legend_above, log_axis, panels
from condenser_lite.reproduction.configuration.registry import CONTROL_ARMS, MAIN_ARMS, color, label
from condenser_lite.reproduction.evidence.results import arm_seeds
from condenser_lite.reproduction.claims.scorecard import scorecard
from .tables import SHORT_LABELS, by_model, by_model_rows, full_size


def _models_and_mean(ax, results: Mapping, arm: str, by_x: Mapping[str, Mapping], dodge: float = 1.0) -> None:
    """One arm against x (the keys of ``by_x``, x scaled by ``dodge``): a hollow dot per
    pre-trained model (``by_model``) and a line through their mean, dashed for a control, so
    the equal-FLOPs control's light blue is not read as Condenser's blue."""
    xs = sorted(int(x) for x in by_x)
    points = [by_model(results, arm, by_x[str(x)]) for x in xs]
    at = np.array(xs) * dodge
    ax.plot(at, [p.mean() for p in points], marker="o", color=color(arm), label=label(arm),
            ls="--" if arm in CONTROL_ARMS else "-")
    for x, p in zip(at, points):
        ax.plot([x] * len(p), p, "o", ms=3.5, color=color(arm), markerfacecolor="white")


def _dodges(n: int, step: float = 0.03) -> list[float]:
    # factors that spread n arms around each x of a log axis, so their error bars do not overlap
    return [(1 + step) ** (i - (n - 1) / 2) for i in range(n)]


def plot_low_data(results: Mapping, metric: str | Sequence[str] | None = None, arms: Sequence[str] | None = None,
                  ax=None):
    """Round-1 retrieval quality against the number of training queries (a hollow dot per
    pre-trained model, fine-tuning seeds averaged; the line through their mean), with BM25 as
    horizontal lines: the low-data curves of Condenser tables 3 and 5. The y axis is
    logarithmic, so that dense models far below BM25 are not squeezed into a sliver under its
    lines. A list of metrics draws one panel each, under one legend. Chapter 4."""
    if not isinstance(metric, (str, type(None))):
        fig, axes = panels(len(metric), height=3.3)
        for a, m in zip(axes, metric):
            plot_low_data(results, m, arms, ax=a)
            a.set_title(f"{m}, round 1")
            a.get_legend().remove()
        legend_above(fig, ncol=3)
        return fig
    metric = metric or results["preset"]["metrics"][0]
    fig, ax = figure_for(ax)
    R = results["retrieval"]
    arms = [a for a in (arms or R) if a in R and len(R[a]["round1"]) > 1]
    for arm, dodge in zip(arms, _dodges(len(arms))):
        _models_and_mean(ax, results, arm, {x: st[metric] for x, st in R[arm]["round1"].items()}, dodge)
    bm = results.get("bm25", {})
    if "full" in bm:
        ax.axhline(bm["full"][metric], color="black", ls="--", lw=1, label="BM25")
    if "truncated" in bm:
        ax.axhline(bm["truncated"][metric], color="black", ls=":", lw=1,
                   label=f"BM25, first {bm.get('truncated_tokens')} tokens")
    ax.set_xscale("log")
    xs = sorted({int(s) for a in arms for s in R[a]["round1"]})
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.minorticks_off()
    ax.set_xlabel("training queries (round 1)")
    ax.set_ylabel(f"{metric} (log scale)")
    log_axis(ax, "y")
    ax.legend(fontsize=SMALL, frameon=False)
    return fig


def plot_rounds(results: Mapping, metric: str | Sequence[str] | None = None, arms: Sequence[str] | None = None,
                ax=None):
    """Round 1 (BM25 negatives, light) vs round 2 (+ self-mined hard negatives, dark) per arm
    at the full training set, with one dot per pre-trained model (fine-tuning seeds averaged):
    horizontal bars, the arms' names on the y axis, where they never run into each other. A
    list of metrics draws one panel each, side by side on the same arms. Chapter 4."""
    R, full = results["retrieval"], full_size(results)
    arms = [a for a in (arms or R) if "round2" in R.get(a, {})]
    if not isinstance(metric, (str, type(None))):
        fig, axes = panels(len(metric), height=0.55 * len(arms) + 1.4, columns=len(metric), sharey=True)
        for i, (a, m) in enumerate(zip(axes, metric)):
            plot_rounds(results, m, arms, ax=a)
            a.set_title(m)
            if i:
                a.get_legend().remove()
        fig.tight_layout()
        return fig
    metric = metric or results["preset"]["metrics"][0]
    fig, ax = figure_for(ax)
    height = 0.38
    for i, arm in enumerate(arms):
        for j, rnd in enumerate(("round1", "round2")):
            st = R[arm][rnd][full][metric]
            y = i + (j - 0.5) * height
            ax.barh(y, st["mean"], height * 0.95, color=color(arm), alpha=0.55 if j == 0 else 1.0,
                    label=("round 1" if j == 0 else "round 2") if i == 0 else None)
            models = by_model(results, arm, st)
            ax.plot(models, [y] * len(models), "k.", ms=4)
    ax.set_yticks(range(len(arms)), [label(a) for a in arms])
    ax.invert_yaxis()  # the first arm on top
    ax.set_xlabel(metric)
    ax.legend(fontsize=SMALL, frameon=False, loc="lower right")
    return fig


def plot_nb_recall(results: Mapping, n: int | None = None, ax=None):
    """nb-recall (coCondenser eq. 17) of each arm: the share of the round-2 top ``n`` that the
    round-1 retriever already had in its top ``k``, against ``k`` (a hollow dot per pre-trained
    model, the line through their mean). Chapter 6."""
    nb = results.get("nb_recall", {})
    fig, ax = figure_for(ax)
    if not nb:
        return fig
    names = next(iter(nb.values())).keys()
    ns = sorted({int(k.split("@")[0][1:]) for k in names})
    n = n if n is not None else ns[0]
    ks = sorted({int(k.split("@k")[1]) for k in names if k.startswith(f"n{n}@")})
    for arm, d in nb.items():
        _models_and_mean(ax, results, arm, {str(k): d[f"n{n}@k{k}"] for k in ks})
    ax.set_xscale("log")  # depths 10 to 200: on a linear axis the shallow ones crowd together
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("k (round-1 depth)")
    ax.set_ylabel(f"nb-recall, round-2 top {n}")
    ax.legend(fontsize=SMALL, frameon=False)
    return fig


def plot_entropy(results: Mapping, arms: Sequence[str] = ("bert", "condenser", "cocondenser")):
    """CLS attention entropy per layer before (pre-trained) and after retrieval fine-tuning, one panel per
    arm: Condenser figure 2. After fine-tuning: the mean over pre-trained models (each the average of its
    fine-tuning seeds), the band from their lowest to their highest. Chapter 5."""
    import matplotlib.pyplot as plt

    E = results["entropy"]
    arms = [a for a in arms if a in E]
    cols = min(len(arms), 3)  # three panels a row at most: each wide enough for its ticks
    fig, axes = panels(len(arms), height=2.4, columns=cols, sharey=True, extra=0.5)
    for i, (ax, arm) in enumerate(zip(axes, arms)):
        before = np.asarray(E[arm]["before"])
        layers = np.arange(1, len(before) + 1)
        ax.plot(layers, before, "o-", color=color(arm), label="pre-trained")
        if "after" in E[arm]:
            after = E[arm]["after"]
            models = by_model_rows(results, arm, after["values"]) if after.get("values") else np.asarray([after["mean"]])
            m = models.mean(0)
            # the arm's own colour, dashed and hollow: black would be one arm's (BERT-continued's) colour
            ax.plot(layers, m, "s--", color=color(arm), markerfacecolor="white", label="fine-tuned")
            ax.fill_between(layers, models.min(0), models.max(0), color=color(arm), alpha=0.15)
        ax.set_title(label(arm), fontsize=plt.rcParams["font.size"])
        if i + cols >= len(arms):  # the x axis named once per column, at its lowest panel
            ax.set_xlabel("layer")
        ax.set_xticks(layers)
        if i % cols == 0:
            ax.set_ylabel("entropy (nats)")
    legend_above(fig, ncol=2)
    return fig


def smooth(values: Sequence[float], window: int) -> np.ndarray:
    """Trailing moving average (the first points average what exists so far). Chapter 6."""
    v = np.asarray(values, dtype=float)
    if window <= 1 or len(v) == 0:
        return v
    c = np.cumsum(np.insert(v, 0, 0.0))
    idx = np.arange(1, len(v) + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)


def plot_loss_curves(results: Mapping, size: str | None = None, arms: Sequence[str] | None = None,
                     window: int = 10, log: bool = True, ax=None):
    """Round-1 fine-tuning loss per step on a log scale, the preprint's loss figure: each
    pre-trained model's curve (the average of its fine-tuning seeds) smoothed over ``window``
    steps; the line is their mean, the band runs from their lowest to their highest. Chapter 6."""
    size = size or full_size(results)
    fig, ax = figure_for(ax)
    curves = results["loss_curves"]
    for arm in arms or MAIN_ARMS:
        runs = curves.get(arm, {}).get(size)
        if not runs:
            continue
        a = np.stack([smooth(r, window) for r in by_model_rows(results, arm, runs)])
        steps = np.arange(1, a.shape[1] + 1)
        ax.plot(steps, a.mean(0), color=color(arm), label=label(arm))
        ax.fill_between(steps, a.min(0), a.max(0), color=color(arm), alpha=0.15)
    if log:
        log_axis(ax, "y")
    ax.set_xlabel("fine-tuning step")
    ax.set_ylabel("fine-tuning loss (nats)")
    ax.legend(fontsize=SMALL, frameon=False)
    return fig


def plot_sts(results: Mapping, arms: Sequence[str] | None = None, ax=None):
    """STS-b test Spearman against the number of training pairs (a hollow dot per pre-trained
    model, fine-tuning seeds averaged; the line through their mean): Condenser table 1. Chapter 7."""
    fig, ax = figure_for(ax)
    S = results["sts"]
    arms = [a for a in (arms or S) if a in S]
    for arm, dodge in zip(arms, _dodges(len(arms))):
        _models_and_mean(ax, results, arm, S[arm], dodge)
    xs = sorted({int(k) for a in S for k in S[a]})
    ax.set_xscale("log")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.minorticks_off()
    ax.set_xlabel("training pairs")
    ax.set_ylabel("Spearman correlation")
    if len(arms) > 4:  # seven arms' labels would cover their lines: above the panel
        legend_above(fig, ncol=3)
    else:
        ax.legend(fontsize=SMALL, frameon=False)
    return fig


def plot_gain_vs_paper(results: Mapping, arms: Sequence[str] = ("condenser", "condenser_mod")):
    """Our relative gain over BERT beside the paper's, for the two claims the paper quantifies at several
    training sizes: C1 (round-1 retrieval, our first metric; the paper's MS MARCO MRR@10, Condenser table 5)
    and C7 (STS-b Spearman, Condenser table 1). Each of our sizes sits at the paper's column it is compared
    with (``papers.expected_gain``); a hollow dot per pre-trained model (its gain over the BERT of the same
    seed), a filled one for the gain of the means. Chapter 8."""
    from condenser_lite.reproduction.evidence.papers import EXPECTED_GAIN_SOURCE, expected_gain, paper_column

    fig, axes = panels(2, height=3.2)
    metric = results["preset"]["metrics"][0]
    panels_data = (
        ("C1", "retrieval, round 1", {a: results["retrieval"].get(a, {}).get("round1", {}) for a in ("bert", *arms)},
         lambda d: d[metric], "training queries"),
        ("C7", "STS-b", {a: results.get("sts", {}).get(a, {}) for a in ("bert", *arms)}, lambda d: d,
         "training pairs"),
    )
    for ax, (cid, title, by_arm, pick, unit) in zip(axes, panels_data):
        ordered = sorted(by_arm["bert"], key=int)
        xs = np.arange(len(ordered))
        paper = [expected_gain(cid, s, ordered) for s in ordered]
        ax.plot([x for x, g in zip(xs, paper) if g is not None], [100 * g for g in paper if g is not None],
                "k*", ms=11, label="the paper")
        for j, arm in enumerate(a for a in arms if by_arm.get(a)):
            paired = arm_seeds(results, arm) == arm_seeds(results, "bert")
            at, means = xs + 0.12 * (j + 1), []
            for x, s in zip(at, ordered):
                a, b = by_model(results, arm, pick(by_arm[arm][s])), by_model(results, "bert", pick(by_arm["bert"][s]))
                gains = 100 * (a / b - 1) if paired else 100 * (a / b.mean() - 1)
                ax.plot([x] * len(gains), gains, "o", ms=3.5, color=color(arm), markerfacecolor="white")
                means.append(100 * (a.mean() / b.mean() - 1))
            ax.plot(at, means, "o", ms=7, color=color(arm), label=f"ours, {label(arm)}")
        ax.axhline(0, color="grey", lw=0.6)
        columns = [paper_column(cid, s, ordered) or "-" for s in ordered]
        ax.set_xticks(xs, [f"{s}\n(paper: {c})" for s, c in zip(ordered, columns)], fontsize=SMALL)
        ax.set_xlabel(unit)
        ax.set_ylabel("gain over BERT (%)")
        ax.set_title(f"{cid}: {title}\n(paper: {EXPECTED_GAIN_SOURCE[cid]})", fontsize=SMALL)
    legend_above(fig, axes[0], ncol=3)
    return fig


VERDICT_COLOURS = {"reproduced": "#2a9d4b", "better": "#2a9d4b", "reversed": "#c0392b", "worse": "#c0392b"}


def _difference_rows(rows: Sequence[tuple], claimed: Mapping[str, str], several: bool) -> list[tuple]:
    # the rows grouped under a heading per claim and setting: [(heading or None, label, row or None)]
    out, last = [], None
    for cid, setting, a, b, c in rows:
        where = setting.replace("training queries", "queries").replace("training pairs", "pairs").split(": ")[0]
        heading = f"{cid}, {where}" if several else where  # Am's kind of comparison shows in its sides
        if heading != last:
            out.append((heading, heading, None))
            last = heading
        a, b = SHORT_LABELS.get(a, a), SHORT_LABELS.get(b, b)
        out.append((None, f"vs {b}" if a == claimed[cid] else f"{a} vs {b}", c))
    return out


def plot_differences(results: Mapping, ids: Sequence[str]):
    """The comparisons behind the claims ``ids`` as a test over pre-trained models sees them (rules version
    2): one row per comparison, under a bold heading per claim and setting, a hollow dot per pre-trained
    model's difference (a - b, fine-tuning seeds averaged), a filled dot for their mean (green where the
    one-sided test says a is better, red where it says worse, grey where neither), a grey bar from 0 to the
    smallest difference the test detects with 80% power, and a black tick at the paper's effect at our scale
    where the claim quantifies one. One panel per task (retrieval, STS-b), each on its own scale: an STS-b
    difference of 0.1 would squeeze nDCG@10's 0.01 to a few pixels. Chapter 8."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from condenser_lite.reproduction.claims.scorecard import comparisons

    claims = {c["id"]: c for c in results.get("claims") or scorecard(results)}
    rows = [(cid, setting, a, b, c) for cid in ids if cid in claims
            for setting, a, b, c in comparisons(claims[cid]) if c.get("per_seed")]
    claimed = {cid: claims[cid]["arms"][0] if claims[cid]["arms"] else "" for cid in ids if cid in claims}
    lines = _difference_rows(rows, claimed, len({cid for cid, *_ in rows}) > 1)
    groups: dict[str, list] = {}  # the lines by task, in order: a heading ends in "queries" or "pairs"
    for line in lines:
        task = line[0].split()[-1] if line[0] else task
        groups.setdefault(task, []).append(line)
    fig, axes = plt.subplots(len(groups), 1, squeeze=False, gridspec_kw={"height_ratios": [len(g) for g in groups.values()]},
                             figsize=(FIGURE_WIDTH, 0.25 * len(lines) + 1.5 + 0.4 * (len(groups) - 1)))
    for ax, group in zip(axes.flat, groups.values()):
        for y, (_, _, c) in enumerate(group):
            if c is None:
                continue
            if c.get("mdd") is not None:
                ax.barh(y, c["mdd"], left=0, height=0.5, color="0.88", zorder=0)
            per = list(c["per_seed"].values())
            ax.plot(per, [y] * len(per), "o", ms=4, color="0.35", markerfacecolor="white")
            ax.plot(c["diff"], y, "o", ms=7, color=VERDICT_COLOURS.get(c["verdict"], "0.5"))
            if c.get("expected") is not None:
                ax.plot(c["expected"], y, "|", ms=13, mew=2, color="black")
        ax.axvline(0, color="black", lw=0.7)
        ax.set_yticks(range(len(group)), [text for _, text, _ in group], fontsize=SMALL)
        for tick, (heading, _, _) in zip(ax.yaxis.get_major_ticks(), group):
            if heading:  # a heading row: bold, flush with the axis, no tick mark
                tick.label1.set_fontweight("bold")
                tick.tick1line.set_visible(False)
        ax.set_ylim(len(group) - 0.5, -0.5)  # the first row on top
    ax.set_xlabel("difference a - b per pre-trained model")
    handles = [Line2D([], [], marker="o", ls="", color="0.35", markerfacecolor="white", label="one pre-trained model"),
               Line2D([], [], marker="o", ls="", color=VERDICT_COLOURS["better"], label="mean: better (one-sided test)"),
               Line2D([], [], marker="o", ls="", color="0.5", label="mean: not significant")]
    if any(c["verdict"] in ("worse", "reversed") for *_, c in rows):
        handles.append(Line2D([], [], marker="o", ls="", color=VERDICT_COLOURS["worse"], label="mean: worse"))
    handles.append(Patch(color="0.88", label="below the detectable difference"))
    if any(c.get("expected") is not None for *_, c in rows):
        handles.append(Line2D([], [], marker="|", ms=10, mew=2, ls="", color="black", label="the paper's effect here"))
    legend_above(fig, ncol=2, handles=handles)
    return fig
