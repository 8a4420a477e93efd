"""The book's figures and tables (condenser_book/plots.py), on hand-made results and on
the micro run's results file."""

import json
import math

import matplotlib
import numpy as np
import pytest
from locations import MIRROR

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from condenser_book import plots, plots_arms, plots_gauges, plots_mechanism, tables
from condenser_lite.reproduction.configuration import registry  # noqa: E402
from condenser_lite.reproduction.configuration.registry import STANDARD_ARMS  # noqa: E402
from condenser_lite.reproduction.statistics.rules import POWER_VERDICTS  # noqa: E402
from condenser_lite.reproduction.claims.scorecard import claim_rows  # noqa: E402
from condenser_lite.reproduction.statistics.wording import p_text  # noqa: E402

needs_mirror = pytest.mark.skipif(not MIRROR.exists(), reason="local data mirror ../shared/data not found")


def test_log_axis_labels_plain_numbers():
    assert plots._log_ticks(0.006, 0.8) == [0.01, 0.02, 0.05, 0.1, 0.2, 0.5]
    assert plots._log_ticks(0.45, 3.2) == [0.5, 1.0, 2.0, 3.0]
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [0.6, 2.0, 6.0])
    plots.log_axis(ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert ax.get_yscale() == "log" and labels and all("10^" not in t and "times" not in t for t in labels)
    assert "2" in labels and "5" in labels
    plt.close(fig)


def test_low_data_plot_is_on_a_log_scale_with_dodged_arms():
    stat = lambda m: {"mean": m, "std": 0.001, "values": [m]}  # noqa: E731
    results = {"preset": {"metrics": ["nDCG@10"]}, "train_sizes": [100, 809],
               "retrieval": {a: {"round1": {"100": {"nDCG@10": stat(0.01)}, "809": {"nDCG@10": stat(0.02)}}}
                             for a in ("bert", "condenser")},
               "bm25": {"full": {"nDCG@10": 0.69}, "truncated": {"nDCG@10": 0.5}, "truncated_tokens": 64}}
    fig = plots_arms.plot_low_data(results)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    xs = [line.get_xdata()[0] for line in ax.lines if line.get_label() in ("BERT", "Condenser")]
    assert len(xs) == 2 and xs[0] != xs[1]  # the two arms sit side by side, not on top
    plt.close(fig)


def test_figures_show_one_point_per_pre_trained_model():
    """Two pre-trained models with three fine-tuning runs each: the low-data figure shows two
    hollow dots per arm and size, each the mean of its model's runs, and a line through their
    mean; the tables' spread is over the two models, not the six runs."""
    runs = [0.10, 0.11, 0.12, 0.20, 0.21, 0.22]  # model 42: 0.11, model 43: 0.21
    stat = {"mean": float(np.mean(runs)), "std": float(np.std(runs, ddof=1)), "values": runs}
    arm = {"seed": 42, "other_pretraining_seeds": [{"seed": 43}]}
    results = {"preset": {"metrics": ["nDCG@10"]}, "train_sizes": [100, 809], "arms": {"condenser": arm},
               "retrieval": {"condenser": {"round1": {"100": {"nDCG@10": stat}, "809": {"nDCG@10": stat}}}}}
    assert list(tables.by_model(results, "condenser", stat)) == pytest.approx([0.11, 0.21])
    fig = plots_arms.plot_low_data(results)
    dots = [line for line in fig.axes[0].lines if line.get_markerfacecolor() == "white"]
    assert len(dots) == 2 and all(list(d.get_ydata()) == pytest.approx([0.11, 0.21]) for d in dots)
    mean = next(line for line in fig.axes[0].lines if line.get_label() == "Condenser")
    assert list(mean.get_ydata()) == pytest.approx([0.16, 0.16])
    assert tables.unit_stat(results, "condenser", stat)["std"] == pytest.approx(np.std([0.11, 0.21], ddof=1))
    assert tables.retrieval_table(results).iloc[0]["nDCG@10"] == "0.160\u00a0±\u00a00.071"
    plt.close(fig)


def _claim(cid, verdict):
    return {"id": cid, "statement": f"statement of {cid} <b>", "arms": ["Condenser", "BERT"],
            "comparison": "Condenser 0.100 vs BERT 0.050 (better).", "paper": "table 5 (1.0)",
            "verdict": verdict}


def test_scorecard_html_one_row_per_claim_in_plain_words():
    results = {"claims": [_claim("C0", "reproduced"), _claim("C1", "not reproduced at this scale"),
                          _claim("C2", "partly reproduced")]}
    table = tables.scorecard_table(results)
    assert list(table.index) == ["C0", "C1", "C2"]
    assert table.loc["C1", "claim"] == registry.CLAIM["C1"].title and table.loc["C1", "models"] == ["Condenser", "BERT"]
    html = tables.scorecard_html(results)
    assert html.startswith('<table class="scorecard">') and html.count("<tr>") == 4  # head + 3 claims
    assert "&lt;b&gt;" in html and "<b>C1</b>" in html  # text escaped, ids bold
    assert "verdict-yes" in html and "verdict-no" in html and "verdict-partly" in html
    assert "Condenser 0.100 vs BERT 0.050 (better)." in html and "Condenser, BERT" in html
    # the numbers fold out under the claim's name: three cells a row, the table stays narrow
    assert html.count("<td>") == 3 * 3 and "<details><summary><b>C1</b>" in html
    # one published source per line, a source's own "; " kept
    assert tables._lines("table 5 (dev; MRR@10): 1.0; figure 3 (NQ)", {"MRR@10"}) == \
        "table 5 (dev; MRR@10): 1.0<br>figure 3 (NQ)"


def test_plot_gauges_draws_the_panels_asked_for():
    log = [{"step": s, "eval_mlm_loss": 8.0 - s, "eval_cls_cosine": 0.9} for s in (1, 2)]
    results = {"arms": {"bert": {"pretrain_log": log, "compute": {"stage": {"steps": 2}, "cumulative": {"steps": 2}}}},
               "heldout": {"unigram_entropy": 6.5}}
    fig = plots_gauges.plot_gauges(results, gauges=["mlm_loss"])
    assert len(fig.axes) == 1 and fig.axes[0].get_ylabel() == plots_gauges.GAUGES["mlm_loss"]
    assert [line.get_ydata()[0] for line in fig.axes[0].lines] == [7.0, 6.5]  # the loss, the entropy
    plt.close(fig)
    assert len(plots_gauges.plot_gauges(results).axes) == 4
    with pytest.raises(ValueError, match="choose from"):
        plots_gauges.plot_gauges(results, gauges=["loss"])


def test_the_zoom_panel_shows_the_continuations_alone():
    """The whole axis squeezes a continuation into its last part; the zoom shows it from
    where it starts (and the parent's last evaluations), scaled to those losses only."""
    bert = [{"step": s, "eval_mlm_loss": 4.0 + 5.0 * math.exp(-s / 2000)} for s in range(500, 12001, 500)]
    cont = [{"step": s, "eval_mlm_loss": 4.0 - s / 10000} for s in range(500, 3001, 500)]
    stage1 = {"stage": {"steps": 12000}, "cumulative": {"steps": 12000}}
    results = {"arms": {"bert": {"pretrain_log": bert, "compute": stage1}, "bert_cont": {
        "pretrain_log": cont, "compute": {"stage": {"steps": 3000}, "cumulative": {"steps": 15000}}}}}
    fig = plots_gauges.plot_gauges(results, gauges=["mlm_loss"], zoom=True)
    whole, zoom = fig.axes
    assert len(whole.lines) == len(zoom.lines) == 2 and zoom.get_title() == "The continuations, closer"
    assert min(min(line.get_xdata()) for line in zoom.lines) >= 12000 - 0.15 * 3000  # only where they run
    assert zoom.get_ylim()[1] < 5.0 < whole.get_ylim()[1]  # BERT's early losses are off the zoom's scale
    plt.close(fig)
    with pytest.raises(ValueError, match="zoom needs mlm_loss"):
        plots_gauges.plot_gauges(results, gauges=["cls_cosine"], zoom=True)
    alone = plots_gauges.plot_gauges({"arms": {"bert": results["arms"]["bert"]}}, gauges=["mlm_loss"], zoom=True)
    assert "no continuing arm" in alone.axes[1].texts[0].get_text()  # not an empty frame
    plt.close(alone)


def test_gauge_table_one_column_per_arm_blank_where_not_measured():
    results = {"arms": {"bert": {"heldout": {"mlm_loss": 6.54321, "cls_cosine": 0.99}},
                        "condenser": {"heldout": {"mlm_loss": 6.5, "head_loss": 6.6, "cls_swap_gap": 0.0123456,
                                                  "cls_swap_noise": 0.001, "cls_cosine": 0.5},
                                      "other_pretraining_seeds": [{"heldout": {"mlm_loss": 6.7, "head_loss": 6.6,
                                                                               "cls_swap_gap": 0.0, "cls_swap_noise": 0.001,
                                                                               "cls_cosine": 0.7, "cls_reliance": 0.3}}]}}}
    table = tables.gauge_table(results, ["bert", "condenser"])
    assert list(table.columns) == ["BERT", "Condenser"] and list(table.index) == list(tables.GAUGE_NAMES.values())
    assert table.loc["held-out MLM loss", "BERT"] == "6.5432" and table.loc["[CLS]-swap gap", "BERT"] == ""
    assert table.loc["held-out MLM loss", "Condenser"] == "6.6000"  # the mean over pre-training seeds
    assert table.loc["[CLS]-swap gap", "Condenser"] == "0.0062"  # fixed decimals, no exponent
    # defined on one seed of two (no deficit on the other): not that seed's value as the mean
    assert table.loc["[CLS] reliance", "Condenser"] == "undefined on 1 of 2 seeds"


def test_plot_gauges_draws_the_reliance_with_its_threshold():
    from condenser_lite.reproduction.statistics.rules import RELIANCE_THRESHOLD

    log = [{"step": 1, "eval_mlm_loss": 5.0, "eval_cls_reliance": 0.1, "eval_cls_reliance_noise": 0.01},
           {"step": 2, "eval_mlm_loss": 4.9},  # an undefined reliance is not logged: left out
           {"step": 3, "eval_mlm_loss": 4.8, "eval_cls_reliance": 0.3, "eval_cls_reliance_noise": 0.02}]
    results = {"arms": {"condenser": {"pretrain_log": log, "compute": {"stage": {"steps": 3}, "cumulative": {"steps": 10}}}}}
    fig = plots_gauges.plot_gauges(results, gauges=["cls_reliance"])
    ys = [list(line.get_ydata()) for line in fig.axes[0].lines]
    assert [0.1, 0.3] in ys and [RELIANCE_THRESHOLD, RELIANCE_THRESHOLD] in ys
    assert list(fig.axes[0].lines[0].get_xdata()) == [8, 10]  # cumulative steps
    plt.close(fig)


def test_smooth_is_a_trailing_mean():
    from condenser_book.plots_arms import smooth

    assert smooth([1, 2, 3, 4], 2).tolist() == [1.0, 1.5, 2.5, 3.5]
    assert smooth([5.0], 10).tolist() == [5.0]


@needs_mirror
def test_plots_and_tables_from_results(micro_run, tmp_path):
    import matplotlib

    matplotlib.use("Agg")

    _, out, _, _ = micro_run
    results = json.loads(out.read_text())  # what the chapters read: the JSON file, not the in-memory dict
    table = tables.retrieval_table(results)
    assert table.index.get_level_values(0)[0] == "BM25"
    assert {registry.label(a) for a in STANDARD_ARMS} <= set(table.index.get_level_values(0))
    assert set(tables.sts_table(results).columns) == {str(s) for s in results["sts_sizes"]}
    assert list(tables.scorecard_table(results).index) == [f"C{i}" for i in range(0, 9)]
    table = tables.compute_table(results)
    assert list(table.index) == [registry.label(a) for a in STANDARD_ARMS] and (table["TFLOPs"] >= 0).all()
    for module, name in [*((plots_arms, n) for n in ("plot_low_data", "plot_rounds", "plot_nb_recall", "plot_entropy",
                                                       "plot_loss_curves", "plot_sts")), (plots_gauges, "plot_gauges")]:
        path = plots.save(getattr(module, name)(results), tmp_path / f"{name}.png")
        assert path.stat().st_size > 1000, name
    # the scorecard page's numbers: one row per comparison, each naming its verdict
    rows = claim_rows(next(c for c in results["claims"] if c["id"] == "C1"))
    verdicts = ("better", "worse", "within spread", *POWER_VERDICTS)  # C1 is power-aware
    assert rows and all(r["verdict"] in verdicts for r in rows)


def test_gain_vs_paper_sets_ours_beside_the_papers(micro_run):
    """One panel per quantified claim (C1, C7): the paper's relative gain at the columns our
    sizes are compared with, and ours per size: each pre-trained model's and the means'."""
    from condenser_lite.reproduction.evidence.papers import expected_gain

    _, _, results, _ = micro_run
    fig = plots_arms.plot_gain_vs_paper(results)
    c1, c7 = fig.axes[:2]
    assert c1.get_title().startswith("C1") and c7.get_title().startswith("C7")
    sizes = sorted(results["retrieval"]["bert"]["round1"], key=int)
    stars = c1.lines[0].get_xydata()
    expected = [100 * g for g in (expected_gain("C1", s, sizes) for s in sizes) if g is not None]
    assert list(stars[:, 1]) == pytest.approx(expected)
    bert, cd = (results["retrieval"][a]["round1"][sizes[0]]["nDCG@10"]["mean"] for a in ("bert", "condenser"))
    ours = next(line for line in c1.lines if line.get_label() == "ours, Condenser")  # the gain of the means
    assert ours.get_ydata()[0] == pytest.approx(100 * (cd / bert - 1))


def test_plot_health_draws_the_band_the_seeds_and_the_runs_whole_and_zoomed():
    reference = {k: [{"step": s, "mlm_loss": 7 - s / 1000 + d} for s in (500, 1000, 1500, 2000)]
                 for k, d in (("a", 0.0), ("b", 0.05), ("c", 0.1))}
    runs = {"mine": [{"step": 500, "mlm_loss": 7.6, "health": "above"},
                     {"step": 1000, "mlm_loss": 6.0, "health": "within"}]}
    fig = plots_gauges.plot_health(reference, runs)
    whole, zoom = [ax for ax in fig.axes if ax.get_visible()]
    assert len(whole.collections) == len(zoom.collections) == 1  # the band
    labels = [ln.get_label() for ln in whole.lines if not ln.get_label().startswith("_")]
    assert labels == ["a committed seed", "mine"] and len(whole.lines) == 3 + 1 + 2  # seeds, run, its markers
    assert max(zoom.lines[0].get_xdata()) == 1000 and max(whole.lines[0].get_xdata()) == 2000
    assert zoom.get_title() == "the first 1,000 updates"


def test_differences_figure_draws_each_pre_trained_models_difference_and_the_tests_power():
    """A committed rules-version-2 part: one row per comparison of C1m and C7m, two hollow dots
    per row (its two pre-trained models' differences), the filled mean green exactly where the
    test says better, and the grey bar as long as the detectable difference."""
    from condenser_lite.reproduction.claims.scorecard import comparisons, scorecard

    from locations import ROOT

    results = json.loads((ROOT / "results" / "parts" / "small-44-45.json").read_text())
    claims = {c["id"]: c for c in scorecard(results)}
    rows = [c for cid in ("C1m", "C7m") for *_, c in comparisons(claims[cid])]
    fig = plots_arms.plot_differences({**results, "claims": list(claims.values())}, ["C1m", "C7m"])
    # one panel per task (retrieval, STS-b), each on its own scale
    headings = [[t.get_text() for t in ax.get_yticklabels() if t.get_fontweight() == "bold"] for ax in fig.axes]
    assert headings == [["C1m, 100 queries", "C1m, 809 queries"], ["C7m, 500 pairs", "C7m, 1000 pairs"]]
    assert fig.axes[0].get_xlim()[1] < fig.axes[1].get_xlim()[1]  # nDCG@10's differences are not squeezed
    ticks = sum(len(ax.get_yticks()) for ax in fig.axes)
    assert ticks - sum(map(len, headings)) == len(rows) == 8  # a row per comparison, under its heading
    lines = [line for ax in fig.axes for line in ax.lines]
    hollow = [line for line in lines if line.get_markerfacecolor() == "white"]
    assert [list(h.get_xdata()) for h in hollow] == [pytest.approx(list(c["per_seed"].values())) for c in rows]
    filled = [line for line in lines if line.get_marker() == "o" and line.get_markerfacecolor() != "white"]
    green = [matplotlib.colors.to_hex(f.get_color()) == plots_arms.VERDICT_COLOURS["better"] for f in filled]
    assert green == [c["verdict"] in ("reproduced", "better") for c in rows]
    assert [b.get_width() for ax in fig.axes for b in ax.patches] == pytest.approx([c["mdd"] for c in rows])
    plt.close(fig)


def test_p_values_never_print_as_zero():
    assert p_text(0.0421) == "p 0.042"
    assert p_text(0.0004) == "p < 0.001" and p_text(0.0) == "p < 0.001"
    assert p_text(0.0005) == "p 0.001"  # rounds to 0.001, not to zero
    assert p_text(None) == "–" and p_text(float("nan")) == "–"


def _scaling(trend):
    def seeds(flops, rel):
        return {s: {"reliance": r, "log_flops": flops + d, "steps": 1} for s, r, d in
                zip(("42", "43", "44"), rel, (0.0, 0.001, -0.001))}
    return {"points": {"e0": {"series": "training length", "per_seed": seeds(14.0, [0.0, None, 0.01])},
                       "e1": {"series": "training length", "per_seed": seeds(14.6, [0.05, 0.0, 0.02])},
                       "l48": {"series": "training length", "per_seed": seeds(15.2, [0.1, 0.04, 0.06])},
                       "w256": {"series": "width", "per_seed": seeds(14.5, [0.0, 0.0, 0.01])}},
            "trend": trend}


def test_plot_scaling_draws_every_seed_the_threshold_and_the_trend():
    import matplotlib.pyplot as plt

    from condenser_lite.studies.mechanism_rules import scaling_trend
    from condenser_lite.reproduction.statistics.rules import RELIANCE_THRESHOLD

    data = _scaling(None)
    points = [{"seed": s, **v} for p in ("e0", "e1", "l48") for s, v in data["points"][p]["per_seed"].items()]
    data["trend"] = scaling_trend(points)
    fig = plots_mechanism.plot_scaling(data, reference={"label": "modified", "log_flops": 14.2, "reliance": [0.7, 0.5]})
    ax = fig.axes[0]
    hollow = sum(len(c.get_offsets()) for c in ax.collections if len(c.get_facecolors()) == 0)
    assert hollow == 12  # one per seed and point, an undefined reliance drawn at 0
    assert any(line.get_ydata()[0] == RELIANCE_THRESHOLD for line in ax.lines)
    labels = ax.get_legend_handles_labels()[1]
    assert {"training length", "width", "modified", "trend (pre-registered)"} <= set(labels)
    assert ("reaches 0.2 (slope's 95% limits)" in labels) != data["trend"]["flat"]
    assert ax.get_xscale() == "log"
    plt.close(fig)
    rising = _scaling(None)  # every seed rising alike: a trend that crosses, with its interval
    for part, r in (("e0", 0.0), ("e1", 0.06), ("l48", 0.12)):
        for s, v in rising["points"][part]["per_seed"].items():
            v["reliance"] = r + 0.002 * int(s[-1])
    points = [{"seed": s, **v} for p in ("e0", "e1", "l48") for s, v in rising["points"][p]["per_seed"].items()]
    rising["trend"] = scaling_trend(points)
    assert not rising["trend"]["flat"]
    labels = plots_mechanism.plot_scaling(rising).axes[0].get_legend_handles_labels()[1]
    assert "reaches 0.2 (slope's 95% limits)" in labels and "no sooner than (upper slope)" not in labels
    bare = plots_mechanism.plot_scaling(_scaling(None))  # before the series is complete: no trend line
    assert "trend (pre-registered)" not in bare.axes[0].get_legend_handles_labels()[1]
    plt.close(bare)
    with pytest.raises(ValueError, match="no points yet"):
        plots_mechanism.plot_scaling({"points": {}, "trend": None})
    low = _scaling(None)  # every seed far under the threshold, the reference far above: an inset
    for v in (v for p in low["points"].values() for v in p["per_seed"].values()):
        v["reliance"] = 0.0 if v["reliance"] is None else v["reliance"] / 4
    fig = plots_mechanism.plot_scaling(low, reference={"label": "modified", "log_flops": 14.2, "reliance": [0.7, 0.5]})
    (inset,) = fig.axes[0].child_axes
    assert sum(len(c.get_offsets()) for c in inset.collections) == 12
    plt.close(fig)
    assert not plots_mechanism.plot_scaling(low).axes[0].child_axes  # nothing to squeeze it against
    assert not plots_mechanism.plot_scaling(data).axes[0].child_axes  # a point at half the threshold: one scale


def test_a_point_on_some_of_its_seeds_has_no_mean_on_the_series_line():
    """L48 run on one seed so far: its seed is drawn, but the training-length line joins only
    the points on all their seeds (a mean over another set of seeds would bend it)."""
    import matplotlib.pyplot as plt

    data = _scaling(None)
    data["points"]["l48"]["per_seed"] = {"42": {"reliance": 0.3, "log_flops": 15.2, "steps": 1}}
    data["points"]["l48"]["missing_seeds"] = [43, 44]
    fig = plots_mechanism.plot_scaling(data)
    ax = fig.axes[0]
    (length,) = [line for line in ax.lines if line.get_label() == "training length"]
    assert len(length.get_xdata()) == 2 and max(length.get_ydata()) < 0.1
    hollow = sum(len(c.get_offsets()) for c in ax.collections if len(c.get_facecolors()) == 0)
    assert hollow == 10  # L48's one seed among them
    assert ax.get_xlim()[1] > 10 ** 15.2
    fig.canvas.draw()  # over a decade the minor ticks are labelled at 2 and 5 times a power only
    minor = [t.get_text() for t in ax.xaxis.get_minorticklabels() if t.get_text()]
    assert minor and all(label.startswith(("$2\\times", "$5\\times")) for label in minor), minor
    plt.close(fig)
    # a series whose only point is on some of its seeds still has its entry in the legend
    data["points"]["s1x4"] = {"series": "stage-1 length", "missing_seeds": [43, 44],
                              "per_seed": {"42": {"reliance": 0.01, "log_flops": 14.0, "steps": 1}}}
    fig = plots_mechanism.plot_scaling(data)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "stage-1 length (seeds so far)" in labels and "training length" in labels
    plt.close(fig)


def test_a_point_at_another_series_place_leaves_both_in_sight():
    """S1X4's Condenser stage is E0's, so its mean sits at E0's FLOPs: the training-length
    series is drawn smaller and above it, or its first point would hide behind the square."""
    import matplotlib.pyplot as plt

    data = _scaling(None)
    data["points"]["s1x4"] = {"series": "stage-1 length",
                              "per_seed": {k: dict(v) for k, v in data["points"]["e0"]["per_seed"].items()}}
    fig = plots_mechanism.plot_scaling(data)
    lines = {line.get_label(): line for line in fig.axes[0].lines}
    length, stage1 = lines["training length"], lines["stage-1 length"]
    assert length.get_xdata()[0] == pytest.approx(stage1.get_xdata()[0])  # the same place
    assert length.get_zorder() > stage1.get_zorder()
    assert length.get_markersize() < stage1.get_markersize()
    plt.close(fig)


def test_plot_scaling_stops_the_axis_where_the_prose_stops_giving_a_number():
    """A flat trend whose upper slope reaches the threshold only absurdly far away (10^307
    FLOPs) draws no bound and keeps the axis within FAR_DECADES of the data: no overflow."""
    import matplotlib.pyplot as plt

    from condenser_lite.reproduction.statistics.wording import FAR_DECADES

    data = _scaling({"r_mean": 0.01, "mean_slope": 0.0001, "x_mean": 14.6, "slope_interval": [-0.001, 0.0002],
                     "flat": True, "crossing_log_flops": None, "crossing_interval": None,
                     "bound_log_flops": 307.9})
    fig = plots_mechanism.plot_scaling(data)
    ax = fig.axes[0]
    assert np.log10(ax.get_xlim()[1]) < 15.2 + FAR_DECADES + 0.5
    assert "no sooner than (upper slope)" not in ax.get_legend_handles_labels()[1]
    plt.close(fig)
