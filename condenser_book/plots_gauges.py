"""Figures of the held-out gauges logged during pre-training (``plot_gauges``, chapters 1-2) and
of a reader's stage against the committed seeds' band (``plot_health``, the health page).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .plots import SMALL, legend_above, panels, thousands
from condenser_lite.reproduction.configuration.registry import color, label
from condenser_lite.reproduction.statistics.rules import RELIANCE_THRESHOLD


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
    from condenser_lite.reproduction.runs.health import bands

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
    """The held-out gauges logged during pre-training, against the cumulative pre-training step (a continuing
    arm starts where its parent ended), one panel per name in ``gauges``: the held-out MLM loss with the
    unigram entropy of the same tokens (``mlm_loss``), the [CLS]-swap gap with its noise band
    (``cls_swap_gap``, Condenser-family arms), the mean cosine between blocks' late [CLS] (``cls_cosine``),
    the pre-registered [CLS] reliance with its noise band and C0's threshold (``cls_reliance``, where logged).
    Each arm's first pre-training seed (the results keep one log per arm). ``zoom``: one more panel, the MLM
    loss over the continuations alone (from where the first continuing arm starts), which the whole axis
    squeezes into its last part. Chapters 1 and 2."""
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
        for name, noise in (("cls_reliance", "eval_cls_reliance_noise"), ("cls_swap_gap", "eval_cls_swap_noise")):
            # with its noise band; undefined evaluations (a reliance without a deficit) are left out of the log
            band = [(x, r[f"eval_{name}"], r.get(noise, 0.0)) for x, r in zip(steps, log) if f"eval_{name}" in r]
            if name in ax and band:
                x, y, e = (np.array(v) for v in zip(*band))
                ax[name].plot(x, y, **style)
                ax[name].fill_between(x, y - 2 * e, y + 2 * e, color=color(arm), alpha=0.15)
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

