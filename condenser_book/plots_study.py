"""The study page's figures ("Choosing the scaled-down world", ``notebooks/09_study.md``), drawn from
``results/study.json`` (``python -m condenser_lite sizing``) by the legibility rule of ``plots``:
the training loop's throughput per lever, the recipe sweep, the long run, and the Condenser splits.
"""

from __future__ import annotations

from collections.abc import Mapping

from .plots import FIGURE_WIDTH, SMALL, figure_for, legend_above, panels

# up to eight series on one panel, each told apart by colour, marker and line style together;
# every second one hollow, larger and dashed, so two series on one line both stay in sight (a
# filled marker inside a hollow one); colour-blind-safe colours, no yellow
SERIES_STYLES = [dict(color=c, marker=m, ls=ls, ms=ms, mfc="none" if ls != "-" else c) for c, m, ls, ms in (
    ("#0072b2", "o", "-", 4), ("#d55e00", "s", "--", 7), ("#009e73", "^", "-", 5), ("#cc79a7", "D", "--", 7),
    ("#56b4e9", "v", "-", 5), ("#882255", "P", "--", 7), ("#e69f00", "X", "-", 5), ("#000000", "*", "--", 8))]


def plot_throughput(study: Mapping, shape: str = "4L/128H, 32x64 (tiny)"):
    """Tokens per CPU second of one MLM step per lever of the training loop (blue), beside the
    transformers ``Trainer`` on the same blocks (grey)."""
    tp = study["throughput"]
    rows = {k: v["tokens_per_cpu_s"] for k, v in tp["variants"][shape].items()}
    trainer = tp["trainer"][shape.split(" (")[0]]
    rows.update({k: v["tokens_per_cpu_s"] for k, v in trainer.items() if k.startswith("Trainer")})
    fig, ax = figure_for(figsize=(FIGURE_WIDTH, 0.35 * len(rows) + 1.0))
    names = list(rows)[::-1]
    ax.barh(names, [rows[n] / 1000 for n in names],
            color=["#999999" if n.startswith("Trainer") else "#0072b2" for n in names])
    ax.set_xlabel("thousand tokens per CPU second (one thread)")
    ax.set_title("One MLM step, 4L/128H, 32 blocks x 64 tokens", fontsize=SMALL + 1)
    fig.tight_layout()
    return fig


def plot_sweep(study: Mapping, first_round: int = 6):
    """Held-out MLM loss minus the unigram entropy of each run's own vocabulary against CPU seconds, one panel
    per sweep (the first ``first_round`` runs, then the rest), each panel's legend below it."""
    sweep = study["sweep"]
    round1 = list(sweep)[:first_round]
    fig, axes = panels(2, height=5.8)
    for ax, names, title in ((axes[0], round1, "first sweep: from the base"),
                             (axes[1], [n for n in sweep if n not in round1], "second sweep: from dropout 0")):
        for name, style in zip(names, SERIES_STYLES):
            curve, floor = sweep[name]["curve"], sweep[name]["unigram_entropy"]
            ax.plot([c["cpu"] for c in curve], [c["eval_mlm_loss"] - floor for c in curve], label=name,
                    **{**style, "ms": style["ms"] - 1})
        ax.axhline(0, color="black", ls=":", lw=1)
        ax.set_title(title, fontsize=SMALL + 1)
        ax.set_xlabel("CPU seconds")
        ax.set_ylim(-0.75, 0.6)
        # below the panel, one entry a row: the runs' names are long
        ax.legend(fontsize=SMALL, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    axes[0].set_ylabel("MLM loss − unigram entropy (nats)")
    fig.tight_layout()
    return fig


def plot_long(study: Mapping):
    """The chosen recipe's held-out MLM loss over its long run, against the unigram entropy of
    the same tokens."""
    long = next(iter(study["long"].values()))
    fig, ax = figure_for(figsize=(FIGURE_WIDTH, 3.4))
    curve = long["curve"]
    ax.plot([c["cpu"] for c in curve], [c["eval_mlm_loss"] for c in curve], marker="o", color="#0072b2",
            label="held-out MLM loss")
    ax.axhline(long["unigram_entropy"], color="black", ls=":", lw=1, label="unigram entropy")
    ax.set_xlabel("CPU seconds")
    ax.set_ylabel("nats")
    ax.legend(frameon=False, fontsize=SMALL)
    fig.tight_layout()
    return fig


def plot_condenser_splits(study: Mapping):
    """The Condenser continuations of the long run for each split of the backbone: the head's held-out MLM
    loss (left) and the mean cosine between different blocks' late [CLS] (right), with the plain-MLM control
    dashed black; each split its own colour, marker and line style, so two splits on one line both show."""
    cond = study["condenser"]
    splits = {n: r for n, r in cond.items() if r["run"]["method"] == "condenser"}
    control = next(r for r in cond.values() if r["run"]["method"] == "mlm")
    fig, axes = panels(2, height=3.2)
    for (name, r), style in zip(splits.items(), SERIES_STYLES):
        n = r["run"]["n_head_layers"]
        label = f"{r['run']['skip_from']} early + {n} head layer{'s' * (n != 1)}"
        steps = [c["step"] for c in r["curve"]]
        axes[0].plot(steps, [c["eval_head_loss"] for c in r["curve"]], label=label, **style)
        axes[1].plot(steps, [c["eval_cls_cosine"] for c in r["curve"]], label=label, **style)
    steps = [c["step"] for c in control["curve"]]
    for ax, key in zip(axes, ("eval_mlm_loss", "eval_cls_cosine")):
        ax.plot(steps, [c[key] for c in control["curve"]], color="black", ls="--", lw=1.2,
                label="control (MLM only)")
        ax.set_xlabel("updates")
    axes[0].set_ylabel("held-out head MLM loss")
    axes[1].set_ylabel("mean cosine of late [CLS]")
    legend_above(fig, ncol=3)
    return fig
