"""Figures and tables of the book, drawn from the results of ``protocol.run_protocol``.

Every function takes the results dict (or the JSON file's contents) and returns a matplotlib
``Figure`` (or a pandas ``DataFrame`` for tables), so a chapter is: load results, call, save.
Colours and labels are fixed per arm so that the same arm looks the same in every chapter.
Explained in chapters 4-7.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from .registry import CLAIM, MAIN_ARMS, color, label
from .results import arm_seeds, gauge, gauge_defined
from .rules import RELIANCE_THRESHOLD, model_means
from .scorecard import claim_rows, scorecard
from .wording import fixed, p_text


def figure_for(ax=None, figsize=None):
    """``(fig, ax)``: ``ax``'s figure, or a new one at the book's width (``FIGURE_WIDTH``)."""
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=figsize or (FIGURE_WIDTH, 3.6))
    return ax.figure, ax


# ---------------------------------------------------------------------------------------
# The legibility rule: every figure of the book is read at the text column's width
# ---------------------------------------------------------------------------------------
# The notebooks show a figure at DPI dots per inch, cropped to its drawing plus PAD inches a
# side (``bbox_inches="tight"``), and the page shrinks an image wider than its column to
# COLUMN_PX pixels. A font of f points then reads as f * shown_scale(width) points, which
# must be at least MIN_FONT. A figure FIGURE_WIDTH inches wide fills the column at its own
# size (scale 1), so its fonts read at the size they are set.
COLUMN_PX = 690  # the book's text column, in pixels
DPI = 100  # the notebooks' figure.dpi (``book.setup``)
PAD = 0.1  # inches around a figure's drawing (matplotlib's savefig.pad_inches)
FIGURE_WIDTH = COLUMN_PX / DPI - 2 * PAD  # 6.7 inches: with its padding, the column's width
MIN_FONT = 9  # points, as the page shows them
SMALL = MIN_FONT  # the size of every secondary text (legends, ticks, notes): the rule's floor
MIN_GAP_PX = 4  # pixels between two texts at least, or they read as one ("CondensercoCondenser")
MIN_CONTRAST = 2.2  # a line or marker against the white page: Okabe-Ito's lightest kept colours
# (orange 2.25, sky blue 2.31) pass; their yellow (1.32) would vanish beside other series


def shown_scale(width_inches: float) -> float:
    """How much the page shrinks a figure ``width_inches`` wide (padding included): 1 when it
    fits the column, ``COLUMN_PX / (width_inches * DPI)`` when wider."""
    return min(1.0, COLUMN_PX / (width_inches * DPI))


def _contrast(rgba) -> float:
    # WCAG contrast ratio against white, of a colour blended over white by its alpha
    *rgb, a = rgba
    lin = [x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4 for x in (1 - a + a * c for c in rgb)]
    return 1.05 / (0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2] + 0.05)


def _inks(fig) -> list[tuple[str, tuple]]:
    # (artist label, rgba) of every line and marker colour drawn (areas and fills are left out)
    from matplotlib.collections import PathCollection
    from matplotlib.colors import to_rgba
    from matplotlib.lines import Line2D

    inks = []
    for art in fig.findobj(lambda a: isinstance(a, (Line2D, PathCollection)) and a.get_visible()):
        alpha = art.get_alpha()
        if isinstance(art, Line2D):
            colours = [art.get_color()] if art.get_linestyle() not in ("None", "none", "", " ") else []
            if art.get_marker() not in (None, "None", "none", "", " "):
                colours += [c for c in (art.get_markeredgecolor(), art.get_markerfacecolor())
                            if not (isinstance(c, str) and c.lower() == "none")]
            colours = [to_rgba(c, alpha) for c in colours]
        else:
            colours = [tuple(c) for c in (*art.get_edgecolors(), *art.get_facecolors())]
        inks += [(str(art.get_label()), c) for c in colours if c[3] > 0 and c[:3] != (1.0, 1.0, 1.0)]
    return inks


def legibility(fig) -> dict:
    """``fig`` measured by the rule above: ``width_px`` as the page receives it, ``scale``
    (``shown_scale``), ``texts`` (each drawn text with its size as shown, in points),
    ``smallest`` (the smallest of them), ``too_small`` (those under ``MIN_FONT``), ``overlaps``
    (pairs of texts closer than ``MIN_GAP_PX``) and ``faint`` (line or marker colours under
    ``MIN_CONTRAST``). Every chapter's figure passes it (``tests/reproduction/test_figure_legibility.py``)."""
    from unittest import mock

    from matplotlib.text import Text

    drawn, draw = [], Text.draw

    def record(text, renderer):  # the texts a drawing really shows, with their text
        if text.get_visible() and text.get_text().strip() and text not in drawn:
            drawn.append(text)
        return draw(text, renderer)

    with mock.patch.object(Text, "draw", record):
        fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width = fig.get_tightbbox(renderer).width + 2 * PAD
    scale = shown_scale(width)
    texts = [(t.get_text(), t.get_fontsize() * scale) for t in drawn]
    boxes = [t.get_window_extent(renderer) for t in drawn]
    overlaps = [(drawn[i].get_text(), drawn[j].get_text()) for i in range(len(drawn)) for j in range(i)
                if min(boxes[i].x1, boxes[j].x1) - max(boxes[i].x0, boxes[j].x0) > -MIN_GAP_PX
                and min(boxes[i].y1, boxes[j].y1) - max(boxes[i].y0, boxes[j].y0) > -MIN_GAP_PX]
    faint = sorted({(name, round(_contrast(c), 2)) for name, c in _inks(fig) if _contrast(c) < MIN_CONTRAST})
    return {"width_px": round(width * DPI), "scale": scale, "texts": texts,
            "smallest": min(texts, key=lambda t: t[1]) if texts else None,
            "too_small": [t for t in texts if t[1] < MIN_FONT - 1e-9], "overlaps": overlaps, "faint": faint}


def panels(n: int, height: float = 2.9, columns: int = 2):
    """A figure of ``n`` panels at the book's width, at most ``columns`` a row (several rows
    rather than a strip too small to read); returns ``(fig, axes)`` with the unused cells hidden."""
    import matplotlib.pyplot as plt

    cols = min(n, columns)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(FIGURE_WIDTH, height * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def thousands(ax, axis: str = "x") -> None:
    """Tick labels in thousands (``12k``) on a step axis, so long labels never collide."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(MaxNLocator(nbins=5, integer=True))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:g}k" if abs(v) >= 1000 else f"{v:g}"))


def legend_above(fig, ax=None, ncol: int = 4, handles=None, below: bool = False) -> None:
    """One legend for the figure (``handles``, or its panels' entries, each once), above the
    panels (``below``: under them), which are laid out beside it: it covers no data, no title
    and no axis label."""
    labels = [h.get_label() for h in handles or []]
    handles = list(handles or [])
    for a in fig.axes if not handles else ():
        for h, lab in zip(*a.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    legend = fig.legend(handles, labels, loc="lower center" if below else "upper center",
                        bbox_to_anchor=(0.5, 0.0 if below else 1.0), ncol=min(ncol, len(labels)), frameon=False,
                        fontsize=SMALL)
    height = legend.get_window_extent(fig.canvas.get_renderer()).height / fig.bbox.height + 0.01
    fig.tight_layout(rect=(0, height, 1, 1) if below else (0, 0, 1, 1 - height))


def log_axis(ax, axis: str = "y") -> None:
    """Put ``axis`` on a log scale with plain tick labels (0.02, 0.05, 0.1, ...), not
    ``2x10^-2`` and unlabelled in-between ticks. Call it after plotting: the ticks follow the
    current limits. Chapters 4 and 6."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    getattr(ax, f"set_{axis}scale")("log", nonpositive="clip")
    lo, hi = getattr(ax, f"get_{axis}lim")()
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(FixedLocator(_log_ticks(lo, hi)))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_locator(NullLocator())


def _log_ticks(lo: float, hi: float, least: int = 4, most: int = 6) -> list[float]:
    # the sparsest of the 1-2-5 style sequences that puts at least `least` ticks in [lo, hi],
    # or the densest under `most` where the next one would crowd the axis (0.2, 0.3, ..., 0.9)
    lo, hi = max(lo, 1e-12), max(hi, 2e-12)
    decades = range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
    ticks = []
    for mantissas in ((1,), (1, 2, 5), (1, 2, 3, 5), tuple(range(1, 10))):
        denser = [m * 10.0**d for d in decades for m in mantissas if lo <= m * 10.0**d <= hi]
        if len(denser) > most and len(ticks) >= 2:
            break
        ticks = denser
        if len(ticks) >= least:
            break
    return ticks


def save(fig, path: str | Path) -> Path:
    """Save ``fig`` as PNG (the folder is created) and return the path. Chapter 4."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    return path


def _sizes(results: Mapping) -> list[str]:
    return [str(s) for s in results.get("train_sizes", [])]


def _full(results: Mapping) -> str:
    return _sizes(results)[-1]


def fmt(stat: Mapping | None, digits: int = 3) -> str:
    """``mean ± std`` of a ``rules.stats`` dict, each number by ``wording.fixed`` (``digits``
    decimals, never ``-0.000``), or an empty string. Chapters 4-8."""
    if not stat or stat.get("mean") is None:
        return ""
    return f"{fixed(stat['mean'], digits)} ± {fixed(stat.get('std') or 0.0, digits)}"


def by_model(results: Mapping, arm: str, stat: Mapping) -> np.ndarray:
    """One number per pre-trained model of ``arm``: the runs of ``stat`` (a ``rules.stats`` dict,
    its ``values`` in the protocol's order: pre-training seed, then fine-tuning seed) averaged
    over fine-tuning seeds (``rules.model_means``), the unit chapter 8's tests compare. A stat
    without its runs gives its mean. Chapters 4-8."""
    values = stat.get("values") or [stat["mean"]]
    seeds = arm_seeds(results, arm) or [None]
    if len(values) % len(seeds):  # runs of the first pre-trained model only (a published checkpoint)
        seeds = [None]
    return np.asarray(model_means(values, seeds)["means"], dtype=float)


def by_model_rows(results: Mapping, arm: str, runs: Sequence[Sequence[float]]) -> np.ndarray:
    """``runs`` (one row per fine-tuning run, in the protocol's order, e.g. a loss curve or an
    entropy profile each) averaged per pre-trained model: one row per model. Chapters 5 and 6."""
    n = min(len(r) for r in runs)
    a = np.asarray([list(r)[:n] for r in runs], dtype=float)
    seeds = arm_seeds(results, arm) or [None]
    models = len(seeds) if len(a) % len(seeds) == 0 else 1
    return a.reshape(models, -1, n).mean(1)


def unit_stat(results: Mapping, arm: str, stat: Mapping) -> dict:
    """``{"mean", "std", "n"}`` of ``stat`` over ``arm``'s pre-trained models (``by_model``): the
    same mean as over every run, the spread of the unit the tests use. Chapters 4-8."""
    x = by_model(results, arm, stat)
    return {"mean": float(x.mean()), "std": float(x.std(ddof=1)) if len(x) > 1 else 0.0, "n": len(x)}


# ---------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------


def retrieval_table(results: Mapping, metrics: Sequence[str] | None = None, digits: int = 3):
    """One row per arm, training size and round; one column per metric: the mean ± std over
    pre-trained models (``unit_stat``: fine-tuning seeds averaged first), with BM25 on top.
    Chapter 4."""
    import pandas as pd

    metrics = list(metrics or results["preset"]["metrics"])
    rows = []
    bm = results.get("bm25", {})
    for kind in ("full", "truncated"):
        if kind in bm:
            name = "BM25" if kind == "full" else f"BM25, first {bm.get('truncated_tokens')} tokens"
            rows.append({"model": name, "round": "", "train queries": "", **{m: f"{bm[kind][m]:.{digits}f}" for m in metrics}})
    for arm, rounds in results["retrieval"].items():
        for rnd, by_size in rounds.items():
            for size, ms in sorted(by_size.items(), key=lambda kv: int(kv[0])):
                rows.append({"model": label(arm), "round": rnd.replace("round", ""), "train queries": size,
                             **{m: fmt(unit_stat(results, arm, ms[m]), digits) if m in ms else "" for m in metrics}})
    return pd.DataFrame(rows).set_index(["model", "round", "train queries"])


def sts_table(results: Mapping, digits: int = 3):
    """STS-b test Spearman, mean ± std over pre-trained models (``unit_stat``), one row per arm,
    one column per training size. Chapter 7."""
    import pandas as pd

    rows = {label(arm): {size: fmt(unit_stat(results, arm, s), digits) for size, s in by_size.items()}
            for arm, by_size in results["sts"].items()}
    return pd.DataFrame(rows).T.rename_axis("model").rename_axis("training pairs", axis=1)


def compute_table(results: Mapping):
    """What each arm's pre-training cost: its own stage (steps, non-padding tokens, FLOPs
    estimate, CPU seconds) and, cumulative with the stages it continues, tokens, FLOPs and CPU
    seconds (``accounting``; first pre-training seed). CPU seconds, not wall seconds: the
    stages' wall time depends on what else ran on the machine (both are in the results).
    Chapter 4."""
    import pandas as pd

    rows = []
    for arm, entry in results["arms"].items():
        compute = entry.get("compute") or {}
        own, total = compute.get("stage"), compute.get("cumulative")
        if not own:
            continue
        rows.append({"model": label(arm), "steps": own["steps"],
                     "tokens (M)": round(own["tokens"] / 1e6, 2), "TFLOPs": round(own["flops"] / 1e12, 2),
                     "CPU s": round(own["cpu_seconds"]),
                     "total tokens (M)": round(total["tokens"] / 1e6, 2),
                     "total TFLOPs": round(total["flops"] / 1e12, 2),
                     "total CPU s": round(total["cpu_seconds"])})
    return pd.DataFrame(rows).set_index("model")


GAUGE_NAMES = {"mlm_loss": "held-out MLM loss", "head_loss": "head MLM loss", "cls_swap_gap": "[CLS]-swap gap",
               "cls_swap_noise": "its noise", "cls_reliance": "[CLS] reliance", "cls_cosine": "late [CLS] cosine"}


def gauge_table(results: Mapping, arms: Sequence[str], digits: int = 4):
    """The held-out gauges at the end of each arm's pre-training (``results.gauge``: the mean
    over its pre-training seeds), one column per arm, one row per gauge (``GAUGE_NAMES``), as
    text with ``digits`` decimals (never in exponent form, never "-0.0000"); "undefined on k of
    n seeds" where only some seeds define it (the reliance without a deficit); empty where an
    arm has no such gauge (BERT has no head). Chapters 2 and 3."""
    import pandas as pd

    def text(arm: str, key: str) -> str:
        value = gauge(results, arm, key)
        if value is not None:
            return fixed(value, digits)
        have, runs = gauge_defined(results, arm, key)
        return f"undefined on {runs - have} of {runs} seeds" if have else ""

    return pd.DataFrame({label(a): {name: text(a, key) for key, name in GAUGE_NAMES.items()} for a in arms}
                        ).rename_axis("end of pre-training")


_SHORT = {"BERT-continued, equal FLOPs": "equal-FLOPs control", "modified Condenser, [CLS] cut": "[CLS]-cut control"}


def claim_table(results: Mapping, ids: Sequence[str]):
    """The comparisons behind the claims ``ids`` as one table (``scorecard.claim_rows``): per
    claim and setting the two models with our numbers, the verdict, and the difference: under
    rules version 2 each pre-trained model's and the mean's with the one-sided test's p, under
    version 1 the mean's with its spread; the pre-registered claims also the smallest difference
    the run could detect and the paper's effect at our scale. Chapters 4, 6, 7 and 8 show their
    claims with it."""
    import pandas as pd

    claims = {c["id"]: c for c in results.get("claims") or scorecard(results)}
    # a registered claim this run does not make (C1m without a modified Condenser) is left out;
    # an id the book does not know, or one id passed as a bare string, is a mistake
    unknown = [cid for cid in ids if cid not in CLAIM] if not isinstance(ids, str) else [ids]
    if unknown:
        raise ValueError(f"claim_table(ids={ids!r}): {unknown} not among the book's claims {sorted(CLAIM)}; "
                         "pass a list of them, e.g. ['C1', 'C2']")
    rows = [{"claim": cid, **r} for cid in ids if cid in claims for r in claim_rows(claims[cid])]
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    # four narrow columns, so the table fits the page: who with which number, the verdict, the
    # difference with its spread, and (pre-registered claims) what the run could detect beside
    # the paper's effect at our scale; a dash where a claim has no power analysis (C2-C6)
    if "p (one-sided)" in table:  # rules version 2: each pre-trained model's difference, the test's p
        table["per pre-trained model"] = table["per pre-trained model (a - b)"]
        table["difference (p)"] = ["{} ({})".format(fixed(d, signed=True), p_text(p))
                                   for d, p in zip(table["difference"], table["p (one-sided)"])]
    else:
        table["difference (spread)"] = [f"{fixed(d, signed=True)} ({s:.3f})"
                                        for d, s in zip(table["difference"], table["spread"])]
    if "detectable" in table:
        table["detectable / paper's"] = [
            "–" if pd.isna(m) else f"{m:.3f} / " + ("–" if pd.isna(e) else f"{e:.3f}")
            for m, e in zip(table["detectable"], table["paper's effect here"])]
    # short names, and (rules version 2) the verdict and the test's p first, so they show at the
    # column's width without scrolling; each pre-trained model's difference comes last
    for long, short in (*_SHORT.items(), ("training queries", "queries"), ("training pairs", "pairs"),
                        (": the gain", ": gain"), (": against the control", ": vs a control"),
                        (": the control's own gain", ": control's gain")):
        table["setting"] = table["setting"].str.replace(long, short, regex=False)
        table["compared"] = table["compared"].str.replace(long, short, regex=False)
    cols = (["claim", "setting", "verdict", "difference (p)", "compared"] if "difference (p)" in table else
            ["claim", "setting", "compared", "verdict", "difference (spread)"])
    cols += ["detectable / paper's", "per pre-trained model"]
    return table[[c for c in cols if c in table]].set_index(["claim", "setting"])


def scorecard_table(results: Mapping):
    """The claims (C0-C8, and C0m, C1m, C7m where a run has a modified Condenser) in plain words,
    one row each: ``claim`` (a short name), ``statement`` (what exactly is tested), ``models`` compared (a list), ``this run`` (the comparison, a
    sentence with our numbers), ``papers`` (their numbers) and ``verdict``. Chapter 8."""
    import pandas as pd

    claims = results.get("claims") or scorecard(results)
    rows = [{"id": c["id"], "claim": CLAIM[c["id"]].title if c["id"] in CLAIM else c["statement"], "statement": c["statement"],
             "models": list(c["arms"]), "this run": c["comparison"], "papers": c["paper"],
             "verdict": c["verdict"]} for c in claims]
    return pd.DataFrame(rows).set_index("id")


def _lines(text: str) -> str:
    # one comparison (or one published source) per line: the claims join them with "; ", which
    # also appears inside a source's parentheses ("(MS MARCO dev; MRR@10 / R@1000)")
    from html import escape

    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and text.startswith("; ", i):
            parts.append(text[start:i])
            start = i + 2
    return "<br>".join(escape(part) for part in [*parts, text[start:]])


def scorecard_html(results: Mapping) -> str:
    """The scorecard as a compact HTML table for the book (class ``scorecard``): per claim its
    name, the models compared and the verdict; the claim's exact statement, this run's numbers
    and the papers' fold out beneath its name, so the table stays narrow and the numbers are
    one click away. Chapter 8."""
    from html import escape

    table = scorecard_table(results)
    head = "".join(f"<th>{escape(h)}</th>" for h in ("Claim", "Models", "Verdict"))
    rows = []
    for cid, row in table.iterrows():
        claim = (f"<details><summary><b>{escape(cid)}</b> {escape(row['claim'])}</summary>"
                 f"<p>{escape(row['statement'])}</p><p><b>This run:</b><br>{_lines(row['this run'])}</p>"
                 f"<p><b>Papers:</b><br>{_lines(row['papers'])}</p></details>")
        verdict = row["verdict"]
        css = "verdict-" + ("yes" if verdict == "reproduced" else "partly" if verdict.startswith("partly") else
                            "no" if verdict.startswith("not reproduced") else "other")
        cells = [claim, ", ".join(escape(m) for m in row["models"]), f'<span class="{css}">{escape(verdict)}</span>']
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (f'<table class="scorecard"><thead><tr>{head}</tr></thead><tbody>' + "".join(rows)
            + "</tbody></table>")


# ---------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------


def _models_and_mean(ax, results: Mapping, arm: str, by_x: Mapping[str, Mapping], dodge: float = 1.0) -> None:
    """One arm against x (the keys of ``by_x``, x scaled by ``dodge``): a hollow dot per
    pre-trained model (``by_model``) and a line through their mean."""
    xs = sorted(int(x) for x in by_x)
    points = [by_model(results, arm, by_x[str(x)]) for x in xs]
    at = np.array(xs) * dodge
    ax.plot(at, [p.mean() for p in points], marker="o", color=color(arm), label=label(arm))
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
    import matplotlib.pyplot as plt

    R, full = results["retrieval"], _full(results)
    arms = [a for a in (arms or R) if "round2" in R.get(a, {})]
    if not isinstance(metric, (str, type(None))):
        fig, axes = plt.subplots(1, len(metric), sharey=True, squeeze=False,
                                 figsize=(FIGURE_WIDTH, 0.55 * len(arms) + 1.4))
        for i, (a, m) in enumerate(zip(axes[0], metric)):
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
    ax.set_xlabel("k (depth of the round-1 ranking)")
    ax.set_ylabel(f"nb-recall, round-2 top {n}")
    ax.legend(fontsize=SMALL, frameon=False)
    return fig


def plot_entropy(results: Mapping, arms: Sequence[str] = ("bert", "condenser", "cocondenser")):
    """CLS attention entropy per layer before (pre-trained) and after retrieval fine-tuning,
    one panel per arm: Condenser figure 2. After fine-tuning: the mean over pre-trained models
    (each the average of its fine-tuning seeds), the band from their lowest to their highest.
    Chapter 5."""
    import matplotlib.pyplot as plt

    E = results["entropy"]
    arms = [a for a in arms if a in E]
    cols = min(len(arms), 3)  # three panels a row at most: each wide enough for its ticks
    rows = -(-len(arms) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(FIGURE_WIDTH, 2.4 * rows + 0.5), sharey=True, squeeze=False)
    for ax in axes.flat[len(arms):]:
        ax.set_visible(False)
    for ax, arm in zip(axes.flat, arms):
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
        ax.set_xlabel("layer")
        ax.set_xticks(layers)
    for row in axes:
        row[0].set_ylabel("entropy (nats)")
    for i, ax in enumerate(axes.flat[:len(arms)]):  # the x axis named once per column, at its lowest panel
        if i + cols < len(arms):
            ax.set_xlabel("")
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

    size = size or _full(results)
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


def plot_health(reference: Mapping[str, Sequence[Mapping]], runs: Mapping[str, Sequence[Mapping]],
                gauge_name: str = "mlm_loss"):
    """A reader's runs against the committed ones (chapter 2): the band where one more committed
    seed should fall (``health.bands``, shaded), each committed seed's curve (grey), and each of
    ``runs`` (``{name: [{"step", gauge_name, "health"}]}``), a cross where it left the band; the
    whole stage on the left, the updates the runs cover on the right."""
    fig, axes = panels(2, height=3.6)
    last = max(r["step"] for rows in runs.values() for r in rows)
    for ax, upto in zip(axes, (None, last)):
        _health_panel(ax, reference, runs, gauge_name, upto)
    axes[1].set_title(f"the first {last:,} updates", fontsize=SMALL)
    legend_above(fig, ncol=2, handles=axes[0].get_legend_handles_labels()[0], below=True)  # clear of the curves
    return fig


def _health_panel(ax, reference, runs, gauge_name, upto):
    from .health import bands

    table = [b for b in bands(reference, gauge_name) if upto is None or b.step <= upto]
    ax.fill_between([b.step for b in table], [b.low for b in table], [b.high for b in table], color="0.85",
                    label=f"committed runs' band ({table[0].n if table else 0} seeds)")
    for i, rows in enumerate(reference.values()):
        pts = [(r["step"], r[gauge_name]) for r in rows
               if r.get(gauge_name) is not None and (upto is None or r["step"] <= upto)]
        ax.plot(*zip(*pts), color="0.45", lw=0.8, label="a committed seed" if i == 0 else None)
    for i, (name, rows) in enumerate(runs.items()):
        c = f"C{i}"
        ax.plot([r["step"] for r in rows], [r[gauge_name] for r in rows], color=c, lw=1.5, label=name)
        for r in rows:
            out = r.get("health") in ("above", "below")
            ax.plot(r["step"], r[gauge_name], "x" if out else "o", color=c, ms=7 if out else 4)
    ax.set_xlabel("update")
    ax.set_ylabel(GAUGES[gauge_name])


GAUGES = {  # the held-out gauges plot_gauges can draw: log key -> axis label
    "mlm_loss": "held-out MLM loss (nats)",
    "cls_swap_gap": "[CLS]-swap gap (nats), ±2 noise",
    "cls_cosine": "mean cosine of late [CLS]",
    "cls_reliance": "[CLS] reliance, ±2 noise",
}
GAUGE_TITLES = {"mlm_loss": "Does the model learn language?", "cls_swap_gap": "Does the head read [CLS]? (swap)",
                "cls_cosine": "How alike are the [CLS] vectors?", "cls_reliance": "Does the head rely on [CLS]?"}


def plot_gauges(results: Mapping, arms: Sequence[str] | None = None, gauges: Sequence[str] = tuple(GAUGES),
                zoom: bool = False):
    """The held-out gauges logged during pre-training, against the cumulative pre-training step
    (a continuing arm starts where its parent ended), one panel per name in ``gauges``: the
    held-out MLM loss with the unigram entropy of the same tokens (``mlm_loss``), the [CLS]-swap
    gap with its noise band (``cls_swap_gap``, Condenser-family arms), the mean cosine between
    blocks' late [CLS] (``cls_cosine``), the pre-registered [CLS] reliance with its noise band and
    C0's threshold (``cls_reliance``, where logged). Each arm's first pre-training seed (the
    results keep one log per arm). ``zoom``: one more panel, the MLM loss over the continuations
    alone (from where the first continuing arm starts), which the whole axis squeezes into its
    last part. Chapters 1 and 2."""
    unknown = [g for g in gauges if g not in GAUGES]
    if unknown or not gauges or (zoom and "mlm_loss" not in gauges):
        raise ValueError(f"plot_gauges(gauges={list(gauges)}, zoom={zoom}): choose from {list(GAUGES)} "
                         "(zoom needs mlm_loss)")
    fig, grid = panels(len(gauges) + zoom)
    ax = dict(zip(gauges, grid))
    curves = []  # (steps, MLM losses, style, where the arm starts) for the zoom
    for arm in arms or results["arms"]:
        entry = results["arms"][arm]
        log = [r for r in entry.get("pretrain_log") or [] if "eval_mlm_loss" in r]
        if not log:
            continue
        compute = entry.get("compute") or {}
        offset = (compute.get("cumulative") or {}).get("steps", 0) - (compute.get("stage") or {}).get("steps", 0)
        steps = [offset + r["step"] for r in log]
        style = dict(color=color(arm), label=label(arm), marker="o", ms=3)
        for name in ("mlm_loss", "cls_cosine"):
            if name in ax:
                ax[name].plot(steps, [r[f"eval_{name}"] for r in log], **style)
        curves.append((steps, [r["eval_mlm_loss"] for r in log], style, offset))
        if "cls_reliance" in ax:  # undefined evaluations (no deficit) are left out of the log
            rel = [(x, r["eval_cls_reliance"], r.get("eval_cls_reliance_noise", 0.0))
                   for x, r in zip(steps, log) if "eval_cls_reliance" in r]
            if rel:
                x, y, e = (np.array(v) for v in zip(*rel))
                ax["cls_reliance"].plot(x, y, **style)
                ax["cls_reliance"].fill_between(x, y - 2 * e, y + 2 * e, color=color(arm), alpha=0.15)
        if "cls_swap_gap" in ax and "eval_cls_swap_gap" in log[0]:
            gap = np.array([r["eval_cls_swap_gap"] for r in log])
            noise = np.array([r["eval_cls_swap_noise"] for r in log])
            ax["cls_swap_gap"].plot(steps, gap, **style)
            ax["cls_swap_gap"].fill_between(steps, gap - 2 * noise, gap + 2 * noise, color=color(arm),
                                            alpha=0.15)
    entropy = (results.get("heldout") or {}).get("unigram_entropy")
    if "mlm_loss" in ax and entropy is not None:
        ax["mlm_loss"].axhline(entropy, color="black", ls="--", lw=1, label="unigram entropy")
    if "cls_swap_gap" in ax:
        ax["cls_swap_gap"].axhline(0, color="black", lw=0.8)
    if "cls_reliance" in ax:

        ax["cls_reliance"].axhline(0, color="black", lw=0.8)
        ax["cls_reliance"].axhline(RELIANCE_THRESHOLD, color="black", ls=":", lw=1, label="C0's threshold")
    if zoom:
        ax["zoom"] = z = grid[-1]
        runs = [(offset, steps[-1]) for steps, _, _, offset in curves if offset > 0]
        if runs:
            first, last = min(o for o, _ in runs), max(e for _, e in runs)
            start = first - 0.15 * (last - first)  # and the parent's last evaluations before it
            shown = []
            for steps, loss, style, _ in curves:
                keep = [(x, y) for x, y in zip(steps, loss) if x >= start]
                if keep:
                    z.plot(*zip(*keep), **style)
                    shown += [y for _, y in keep]
            pad = 0.1 * (max(shown) - min(shown) or 1.0)
            z.set_ylim(min(shown) - pad, max(shown) + pad)
        else:  # say so rather than leave an empty frame
            z.text(0.5, 0.5, "no continuing arm\nin this figure", ha="center", va="center", transform=z.transAxes)
    for name, a in ax.items():
        a.set_xlabel("pre-training update (cumulative)")
        a.set_title("The continuations, closer" if name == "zoom" else GAUGE_TITLES.get(name, GAUGES[name]),
                    fontsize=SMALL + 1)
        a.set_ylabel(GAUGES["mlm_loss" if name == "zoom" else name])
        a.ticklabel_format(axis="y", useOffset=False)
        thousands(a)
    legend_above(fig, grid[0])
    return fig


def plot_gain_vs_paper(results: Mapping, arms: Sequence[str] = ("condenser", "condenser_mod")):
    """Our relative gain over BERT beside the paper's, for the two claims the paper quantifies
    at several training sizes: C1 (round-1 retrieval, our first metric; the paper's MS MARCO
    MRR@10, Condenser table 5) and C7 (STS-b Spearman, Condenser table 1). Each of our sizes sits
    at the paper's column it is compared with (``papers.expected_gain``); a hollow dot per
    pre-trained model (its gain over the BERT of the same seed), a filled one for the gain of
    the means. Chapter 8."""
    from .papers import EXPECTED_GAIN_SOURCE, expected_gain, paper_column

    fig, axes = panels(2, height=3.2)
    metric = results["preset"]["metrics"][0]
    panels_data = (
        ("C1", "retrieval, round 1", {a: results["retrieval"].get(a, {}).get("round1", {}) for a in ("bert", *arms)},
         lambda d: d[metric], "training queries"),
        ("C7", "STS-b", {a: results.get("sts", {}).get(a, {}) for a in ("bert", *arms)}, lambda d: d,
         "training pairs"),
    )
    for ax, (cid, title, by_arm, pick, unit) in zip(axes, panels_data):
        sizes = [s for s in by_arm["bert"]]
        ordered = sorted(sizes, key=int)
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
        a, b = _SHORT.get(a, a), _SHORT.get(b, b)
        out.append((None, f"vs {b}" if a == claimed[cid] else f"{a} vs {b}", c))
    return out


def plot_differences(results: Mapping, ids: Sequence[str], ax=None):
    """The comparisons behind the claims ``ids`` as a test over pre-trained models sees them
    (rules version 2): one row per comparison, under a bold heading per claim and setting, a
    hollow dot per pre-trained model's difference (a - b, fine-tuning seeds averaged), a filled
    dot for their mean (green where the one-sided test says a is better, red where it says
    worse, grey where neither), a grey bar from 0 to the smallest difference the test detects
    with 80% power, and a black tick at the paper's effect at our scale where the claim
    quantifies one. Chapter 8."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from .scorecard import comparisons

    claims = {c["id"]: c for c in results.get("claims") or scorecard(results)}
    rows = [(cid, setting, a, b, c) for cid in ids if cid in claims
            for setting, a, b, c in comparisons(claims[cid]) if c.get("per_seed")]
    claimed = {cid: claims[cid]["arms"][0] if claims[cid]["arms"] else "" for cid in ids if cid in claims}
    lines = _difference_rows(rows, claimed, len({cid for cid, *_ in rows}) > 1)
    if ax is None:
        fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 0.25 * len(lines) + 1.5))
    else:
        fig = ax.figure
    for y, (_, _, c) in enumerate(lines):
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
    ax.set_yticks(range(len(lines)), [text for _, text, _ in lines], fontsize=SMALL)
    for tick, (heading, _, _) in zip(ax.yaxis.get_major_ticks(), lines):
        if heading:  # a heading row: bold, flush with the axis, no tick mark
            tick.label1.set_fontweight("bold")
            tick.tick1line.set_visible(False)
    ax.set_ylim(len(lines) - 0.5, -0.5)  # the first row on top
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
