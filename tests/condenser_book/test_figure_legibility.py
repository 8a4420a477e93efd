"""Every figure of the book, drawn from the committed results as its chapter draws it, is legible
at the text column's width: measured by ``plots.legibility`` (the rule is stated once, at the top
of ``condenser_book/plots.py``), each drawn text reads at ``plots.MIN_FONT`` points
or more once the page has shrunk the figure to its column, no two texts cover each other, and no
line or marker is too faint to see on the white page."""

import json

import matplotlib
import pytest
from locations import ROOT

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from condenser_lite import book  # noqa: E402
from condenser_book import plots, plots_arms, plots_gauges  # noqa: E402

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def committed():
    """The committed results the chapters read, with the chapters' figure settings."""
    book._figures_inline()  # what every chapter's setup call sets: figure.dpi, font.size
    assert plt.rcParams["figure.dpi"] == plots.DPI, "the rule's DPI is the one the chapters show figures at"
    read = lambda name: json.loads((ROOT / "results" / f"{name}.json").read_text())  # noqa: E731
    return {"small": read("small"), "mechanism": read("mechanism"), "study": read("study")}


def _reference(small):
    # the scaling figure's diamonds, as the mechanism page builds them
    from condenser_lite.reproduction.evidence.results import judged_seeds, pretraining_runs, run_reliance

    judged = judged_seeds(small, "condenser_mod")
    runs = [r for r in pretraining_runs(small, "condenser_mod") if r.get("seed") in judged]
    return {"label": "modified Condenser (small)",
            "log_flops": float(__import__("numpy").log10(sum(r["compute"]["stage"]["flops"] for r in runs) / len(runs))),
            "reliance": [run_reliance(r["heldout"])["reliance"] for r in runs]}


def _health(_):
    from condenser_lite.reproduction.runs.health import reference_curves

    # chapter 2: a reader's runs of the committed schedule, named as the chapter names them
    demo = json.loads((ROOT / "results" / "health.json").read_text())
    names = {"schedule": "the preset's settings", "lr_x100": "a learning rate 100x too high",
             "mask_5pct": "masked at 5%", "leak": "held-out blocks in the training data"}
    runs = {names.get(n, n): run["evaluations"] for n, run in demo["runs"].items() if n in names}
    return plots_gauges.plot_health(reference_curves()["bert"], runs)


def _nb_recall(small):
    # chapter 6: one panel per n, one legend above them
    fig, axes = plots.panels(2, height=3.2)
    for ax, n in zip(axes, small["preset"]["nb_n"]):
        plots_arms.plot_nb_recall(small, n=n, ax=ax)
        ax.set_title(f"round-2 top {n}")
        ax.get_legend().remove()
    plots.legend_above(fig, axes[0], ncol=4)
    return fig


def _chapter_4(kind):
    from condenser_lite.reproduction.configuration.registry import MAIN_ARMS, MODIFIED_ARM

    def draw(small):
        metrics = small["preset"]["metrics"]
        pair = [metrics[0], next(m for m in metrics if m.startswith("R@"))]
        if kind == "low_data":
            return plots_arms.plot_low_data(small, pair, arms=[*MAIN_ARMS, MODIFIED_ARM])
        return plots_arms.plot_rounds(small, pair)
    return draw


def _mechanism(name, deficit=False):
    # the mechanism page: a figure function of plots_mechanism, or the reliance curves of parts
    def draw(committed):
        from condenser_book import plots_mechanism

        study = committed["mechanism"]
        if name == "plot_scaling":
            return plots_mechanism.plot_scaling(study["scaling"], reference=_reference(committed["small"]))
        if isinstance(name, tuple):
            return plots_mechanism.plot_part_curves(study, name, deficit=deficit)
        return getattr(plots_mechanism, name)(study)
    return draw


# chapter figure: how its chapter draws it from the committed results
SMALL_FIGURES = {
    "01_heldout_mlm_loss": lambda r: plots_gauges.plot_gauges(r, arms=["bert"], gauges=["mlm_loss"]),
    "02_gauges": lambda r: plots_gauges.plot_gauges(r, arms=["bert", "bert_cont", "condenser"],
                                                    gauges=["mlm_loss", "cls_cosine", "cls_reliance"], zoom=True),
    "02_health": _health,
    "04_low_data": _chapter_4("low_data"),
    "04_rounds": _chapter_4("rounds"),
    "05_cls_attention_entropy": lambda r: plots_arms.plot_entropy(
        r, arms=("bert", "bert_cont", "condenser", "cocondenser", "condenser_mod")),
    "06_loss_curves": lambda r: plots_arms.plot_loss_curves(
        r, arms=("bert", "bert_cont", "condenser", "cocondenser", "condenser_mod"), window=10),
    "06_nb_recall": _nb_recall,
    "07_sts": lambda r: plots_arms.plot_sts(r),
    "08_differences": lambda r: plots_arms.plot_differences(r, ["C1", "C1m", "C7", "C7m"]),
    "08_gain_vs_paper": lambda r: plots_arms.plot_gain_vs_paper(r),
    "12_controls": lambda r: plots_arms.plot_differences(r, ["Am"]),
}
MECHANISM_FIGURES = {
    "10_reliance": _mechanism(("e0",), deficit=True),
    "10_reliance_long": _mechanism(("e0", "e1")),
    "10_reliance_e2": _mechanism(("e0", "e2"), deficit=True),
    "10_variants": _mechanism("plot_variants"),
    "14_scaling": _mechanism("plot_scaling"),
    "14_scaling_curves": _mechanism("plot_scaling_curves"),
    "14_onset": _mechanism("plot_onset"),
}

STUDY_FIGURES = {"09_throughput": "plot_throughput", "09_sweep": "plot_sweep", "09_long": "plot_long",
                 "09_condenser": "plot_condenser_splits"}


def _problems(report) -> list[str]:
    out = []
    if report["too_small"]:
        small = sorted(report["too_small"], key=lambda t: t[1])
        out.append(f"{len(small)} texts under {plots.MIN_FONT} pt as shown (figure {report['width_px']} px, "
                   f"shrunk by {report['scale']:.2f}): smallest {small[0][0]!r} at {small[0][1]:.1f} pt")
    if report["overlaps"]:
        out.append(f"texts that cover each other: {report['overlaps'][:3]}")
    if report["faint"]:
        out.append(f"lines or markers too faint on white (contrast < {plots.MIN_CONTRAST}): {report['faint']}")
    return out


@pytest.mark.parametrize("name", sorted(SMALL_FIGURES))
def test_the_small_runs_figures_are_legible_at_the_columns_width(committed, name):
    fig = SMALL_FIGURES[name](committed["small"])
    problems = _problems(plots.legibility(fig))
    plt.close(fig)
    assert not problems, f"{name}: " + "; ".join(problems)


@pytest.mark.parametrize("name", sorted(MECHANISM_FIGURES))
def test_the_mechanism_pages_figures_are_legible_at_the_columns_width(committed, name):
    fig = MECHANISM_FIGURES[name](committed)
    problems = _problems(plots.legibility(fig))
    plt.close(fig)
    assert not problems, f"{name}: " + "; ".join(problems)


@pytest.mark.parametrize("name", sorted(STUDY_FIGURES))
def test_the_study_pages_figures_are_legible_at_the_columns_width(committed, name):
    from condenser_book import plots_study

    fig = getattr(plots_study, STUDY_FIGURES[name])(committed["study"])
    problems = _problems(plots.legibility(fig))
    plt.close(fig)
    assert not problems, f"{name}: " + "; ".join(problems)


def test_the_rule_sees_a_figure_too_wide_or_too_small_or_too_faint():
    """The measurement fails where it should: a 12-inch figure is shrunk, and its 10-point
    text with it; an 8-point legend in a figure that fits is too small; two labels at one
    place cover each other; a yellow line vanishes on white."""
    assert plots.shown_scale(plots.FIGURE_WIDTH + 2 * plots.PAD) == pytest.approx(1.0)
    assert plots.shown_scale(2 * plots.COLUMN_PX / plots.DPI) == pytest.approx(0.5)
    wide, ax = plt.subplots(figsize=(12, 3))
    ax.plot([0, 1], [0, 1], color="#0072b2")
    ax.set_xlabel("updates", fontsize=10)
    report = plots.legibility(wide)
    assert report["scale"] < 0.75 and ("updates", pytest.approx(10 * report["scale"])) in report["texts"]
    assert report["too_small"] and not report["faint"]
    fits, ax = plt.subplots(figsize=(plots.FIGURE_WIDTH - 0.6, 3))
    ax.plot([0, 1], [0, 1], color="#f0e442", label="a yellow series")
    ax.legend(fontsize=8)
    ax.text(0.5, 0.5, "one label")
    ax.text(0.5, 0.5, "another label")
    report = plots.legibility(fits)
    assert report["scale"] == 1.0 and report["smallest"] == ("a yellow series", 8.0)
    assert ("another label", "one label") in report["overlaps"] or ("one label", "another label") in report["overlaps"]
    assert ("a yellow series", pytest.approx(1.32, abs=0.01)) in report["faint"]
    plt.close("all")
