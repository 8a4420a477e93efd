import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from condenser_lite import plots  # noqa: E402


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
    results = {"budget": {"metrics": ["nDCG@10"]}, "train_sizes": [100, 809],
               "retrieval": {a: {"round1": {"100": {"nDCG@10": stat(0.01)}, "809": {"nDCG@10": stat(0.02)}}}
                             for a in ("bert", "condenser")},
               "bm25": {"full": {"nDCG@10": 0.69}, "truncated": {"nDCG@10": 0.5}, "truncated_tokens": 64}}
    fig = plots.plot_low_data(results)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    xs = [bars.lines[0].get_xdata()[0] for bars in ax.containers]
    assert len(xs) == 2 and xs[0] != xs[1]  # the two arms sit side by side, not on top
    plt.close(fig)
