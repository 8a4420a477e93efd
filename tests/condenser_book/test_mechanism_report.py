"""The mechanism page's analysis (condenser_book/mechanism_report.py) and its figures
(plots_mechanism.py): on the committed study, on made-up ones, and on a made-up study whose L48
holds all eight onset seeds, as the page will read it once seeds 45-49 have run."""

import copy
import json
import math
import re

import matplotlib
import pytest
from locations import ROOT

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from condenser_book import mechanism_report as report  # noqa: E402
from condenser_book import plots, plots_mechanism  # noqa: E402
from condenser_lite.studies.onset import ONSET_SEEDS, onset, study_onset  # noqa: E402

pytestmark = pytest.mark.unit

PAGE = ROOT / "notebooks" / "10_mechanism.md"


@pytest.fixture(scope="module")
def committed():
    read = lambda name: json.loads((ROOT / "results" / f"{name}.json").read_text())  # noqa: E731
    return read("mechanism"), read("small")


def _curve(steps: int, start: int | None, level: float) -> list[dict]:
    """A made-up L48 curve: zero until ``start``, then ``level`` well above its noise."""
    return [{"step": s, "cls_reliance": level if start is not None and s >= start else 0.0,
             "cls_reliance_noise": 0.005} for s in range(500, steps + 1, 500)]


def eight_seeds(study: dict, starts: dict[int, int | None]) -> dict:
    """The committed study with L48 run on seeds 45-49 too (made-up curves that switch on at
    ``starts``), its onset summary recomputed by the pre-registered rules."""
    study = copy.deepcopy(study)
    l48 = study["l48"]["per_seed"]
    for seed, start in starts.items():
        entry = copy.deepcopy(l48["42"])
        entry["condenser"]["curve"] = _curve(entry["condenser"]["steps"], start, 0.15 + 0.01 * (seed - 45))
        l48[str(seed)] = entry
    study["onset"] = study_onset(study["l48"])
    return study


def only_seeds(study: dict, seeds) -> dict:
    """The committed study with L48 cut back to ``seeds``, its onset summary recomputed: the
    study as it stood before the other seeds were merged."""
    study = copy.deepcopy(study)
    study["l48"]["per_seed"] = {str(s): study["l48"]["per_seed"][str(s)] for s in seeds}
    study["onset"] = study_onset(study["l48"])
    return study


def test_words_and_seeds():
    assert report.words([42]) == "42" and report.words([42, 43]) == "42 and 43"
    assert report.words([42, 43, 44], "or") == "42, 43 or 44"
    assert report.seeds_text(["42"]) == "seed 42" and report.seeds_text([43, 44]) == "seeds 43 and 44"
    assert report.seeds_text([45, 46, 47, 48, 49]) == "seeds 45-49" and report.seeds_text([42, 44, 46]) == "seeds 42, 44 and 46"
    assert report.values_text([0.21049, None, -0.0001]) == "0.210, undefined and 0.000"  # never -0.000


def test_the_committed_study_is_its_rules(committed):
    study, _ = committed
    assert report.check(study) == []
    tampered = copy.deepcopy(study)
    tampered["e0"]["c0"]["status"] = "reproduced"
    tampered["scaling"]["points"]["e1"]["reads_cls"] = True
    wrong = report.check(tampered)
    assert any(w.startswith("e0: C0") for w in wrong) and any(w.startswith("e1: reads_cls") for w in wrong)


def test_final_table_one_column_per_seed(committed):
    study, _ = committed
    table = report.final_table(study, "e2")
    assert list(table.columns) == ["seed 42", "seed 43"]
    f = study["e2"]["per_seed"]["43"]["condenser"]["final"]
    assert table.loc["deficit (nats)", "seed 43"] == pytest.approx(
        f["reliance_ablated_loss"] - f["reliance_late_loss"], abs=1e-4)
    assert not any(v == 0 and math.copysign(1, v) < 0 for v in table.to_numpy().flat)  # no -0.0000


def test_provenance_names_a_shared_stage_1_and_sums_hours(committed):
    study, _ = committed
    table = report.provenance_table(study)
    assert table.loc["E1", "stage 1 (h)"] == "E0's" and table.loc["E2", "stage 1 (h)"] != "E0's"
    cpu = sum(v["condenser"]["cpu_seconds"] for v in study["e2"]["per_seed"].values()) / 3600
    assert float(table.loc["E2", "Condenser (h)"]) == pytest.approx(cpu, abs=0.01)


def test_a_seed_still_to_run_shows_as_to_run(committed):
    study, _ = committed
    study = copy.deepcopy(study)
    point = study["scaling"]["points"]["l48"]
    del point["per_seed"]["44"]
    point["missing_seeds"], point["reads_cls"] = [44], None
    table = report.points_table(study)
    assert table.loc["L48", "seed 44"] == "to run" and table.loc["L48", "reads [CLS]"] == "when all seeds are in"


def test_onset_readings_now_and_with_all_eight_seeds(committed):
    """Before the new seeds (42-44 only): the seeds to run are named, the estimates described,
    the rules' reading not given. With all of ONSET_SEEDS in: the reading's two sentences, word
    for word, and the unseen seeds' row in the table."""
    study, _ = committed
    study = only_seeds(study, [42, 43, 44])
    now = report.onset_readings(study)
    assert now["onset_scope"] == ("The study holds seeds 42-44; seeds 45-49 are to run. The figure and the "
                                  "table cover the seeds it holds.")
    assert "Once seeds 45-49 are in, the pre-registered reading" in now["onset_plateau"]
    one_left = eight_seeds(only_seeds(study, [42, 43, 44]), {45: 4000, 46: None, 47: 9000, 48: None})
    assert "Once seed 49 is in," in report.onset_readings(one_left)["onset_plateau"]
    assert report.onset_table(study).loc["unseen seeds", "seeds"] == "seeds 45-49 to run"
    full = eight_seeds(study, {45: 4000, 46: 20000, 47: None, 48: 9000, 49: 47000})
    assert full["onset"]["missing_seeds"] == [] and full["onset"]["reading"]
    later = report.onset_readings(full)
    assert later["onset_scope"] == "The study holds every one of them."
    assert (later["onset_fraction"], later["onset_plateau"]) == (
        full["onset"]["reading"]["fraction"], full["onset"]["reading"]["plateau"])
    # seed 49 switches on at the last evaluations: fewer than MIN_STAY of them, so not switched on
    assert later["onset_finding"].startswith("5 of 8 switch on")
    table = report.onset_table(full)
    assert table.loc["unseen seeds", "switched on"] == "3 of 5"
    assert table.loc["all seeds", "onset range"] == "4,000 to 20,000"
    assert "half on by" not in table.columns  # an estimate shown only with its interval


def test_every_phrase_the_page_pastes_exists_now_and_with_eight_seeds(committed):
    study, small = committed
    names = set(re.findall(r"\{glue:text\}`([^`]+)`", PAGE.read_text()))
    glued_in_page = {"trend_ratio"}  # glued by the page itself
    for s in (study, eight_seeds(study, {45: 4000, 46: 20000, 47: None, 48: 9000, 49: 47000})):
        said = report.readings(s, small)
        assert names - glued_in_page <= set(said), sorted(names - glued_in_page - set(said))
        assert all(isinstance(v, str) for v in said.values())
        long = [v for v in said.values() for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", v)
                if len(sentence.split()) > 40]
        assert not long, long


def test_onset_figure_marks_each_onset_and_draws_both_curves_with_eight_seeds(committed):
    study, _ = committed
    full = eight_seeds(study, {45: 4000, 46: 20000, 47: None, 48: 9000, 49: 47000})
    fig = plots_mechanism.plot_onset(full)
    top, bottom = fig.axes[:2]
    marks = [line for line in top.lines if line.get_marker() == "v"]
    switched = [s for s, v in full["onset"]["per_seed"].items() if v["switched_on"]]
    assert sorted(m.get_xdata()[0] for m in marks) == sorted(full["onset"]["per_seed"][s]["onset"] for s in switched)
    assert [line.get_label() for line in bottom.lines] == ["all 8 seeds", "seeds 45-49 alone"]
    fig2 = plots_mechanism.plot_onset(only_seeds(study, [42, 43, 44, 45, 46]))  # the unseen seeds it holds
    assert [line.get_label() for line in fig2.axes[1].lines] == ["all 5 seeds", "seeds 45 and 46 alone"]
    plt.close(fig2)
    assert not plots.legibility(fig)["too_small"]
    plt.close(fig)
    fig = plots_mechanism.plot_onset(only_seeds(study, [42, 43, 44]))  # no unseen seed: one curve below
    assert [line.get_label() for line in fig.axes[1].lines] == ["all 3 seeds"]
    plt.close(fig)


def test_a_seed_without_its_control_is_left_out_of_c0_only(committed):
    """L48's seeds 45 and 46 ran without the equal-step control: C0, recomputed, reads the seeds
    that have one; the reliance, the final table and the onset read every seed, and the
    provenance names the seeds without a control."""
    study, _ = committed
    missing = report.uncontrolled(study, "l48")
    assert missing == [s for s in study["l48"]["per_seed"] if int(s) not in study["l48"]["c0_seeds"]]
    assert report.recompute_c0(study, "l48") == study["l48"]["c0"]
    table = report.final_table(study, "l48")
    assert list(table.columns) == [f"seed {s}" for s in study["l48"]["per_seed"]]
    for s in missing:
        assert math.isnan(table.loc["cosine - control", f"seed {s}"])
        assert not math.isnan(table.loc["reliance", f"seed {s}"])
    if missing:
        assert f"seeds {report.words(missing)} without" in report.provenance_table(study).loc["L48", "control (h)"]


def test_the_page_s_exercise_reads_an_onset_by_hand(committed):
    study, _ = committed
    curve = study["l48"]["per_seed"]["43"]["condenser"]["curve"]
    by_hand = None
    for row in reversed(curve):
        if (row["cls_reliance"] or 0.0) <= 2 * row["cls_reliance_noise"]:
            break
        by_hand = row["step"]
    assert by_hand == onset(curve) == study["onset"]["per_seed"]["43"]["onset"]
    assert report.onsets(study, "l48") == {s: v["onset"] for s, v in study["onset"]["per_seed"].items()}


def test_the_scaling_curves_draw_the_threshold_in_every_panel(committed):
    from condenser_lite.reproduction.statistics.rules import RELIANCE_THRESHOLD

    study, _ = committed
    fig = plots_mechanism.plot_scaling_curves(study)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == len(study["scaling"]["points"])
    for ax in shown:
        assert any(list(line.get_ydata()) == [RELIANCE_THRESHOLD] * 2 for line in ax.lines), ax.get_title()
    plt.close(fig)


def test_the_page_keeps_its_code_short():
    """The page calls this module and shows what it returns: its code stays under 400 lines."""
    cells = re.findall(r"```\{code-cell\} ipython3\n(.*?)```", PAGE.read_text(), re.S)
    lines = sum(len(cell.strip("\n").splitlines()) for cell in cells)
    assert lines < 400, lines
    assert ONSET_SEEDS == tuple(range(42, 50))  # the onset rows the page's table names


def test_fraction_power_matches_the_binomial_tail(committed):
    """The exact interval lies above one half exactly when k or more of n switching on is less
    than 2.5% likely under a fair coin: the counts the phrase names, checked by the tail."""
    from scipy.stats import binom

    for n in range(1, 41):
        most = [k for k in range(n + 1) if binom.sf(k - 1, n, 0.5) < 0.025]
        said = report.fraction_power(n)
        if not most:
            assert "never lies" in said, n
        elif most[0] == n:
            assert f"only if all {n} switch on" in said and "only if none does" in said, n
        else:
            assert f"at least {most[0]} of the {n} switch on" in said and f"at most {n - most[0]} do" in said, n
    # all eight switch on with probability 0.9 ** 8 where nine in ten models do
    assert f"all 8 would do so {0.9 ** 8:.0%} of the time" in report.fraction_power(8)
    assert report.onset_readings(committed[0])["onset_power"].endswith(
        "With the 5 unseen seeds alone, the fraction's 95% interval never lies wholly above or below one half.")


def test_plateau_notes_say_whom_it_covers_and_whether_curves_still_rise(committed):
    """Made-up L48 seeds: flat ones (switched on early, the same level in the stage's last two
    quarters) do not rise; a seed whose curve climbs to the end does. The mean over all seeds
    is the mean of every seed's plateau, not of those switched on."""
    study, _ = committed
    flat = only_seeds(study, [42])
    for seed, start in {45: 4000, 46: 8000, 47: None}.items():
        entry = copy.deepcopy(flat["l48"]["per_seed"]["42"])
        entry["condenser"]["curve"] = _curve(entry["condenser"]["steps"], start, 0.3)
        flat["l48"]["per_seed"][str(seed)] = entry
    del flat["l48"]["per_seed"]["42"]
    flat["onset"] = study_onset(flat["l48"])
    notes = report.plateau_notes(flat)
    assert notes["onset_rising"].startswith("From the stage's third quarter to its last, no seed")
    assert "cover only the 2 seeds that switched on" in notes["onset_conditional"]
    assert "Over all 3 seeds, the mean plateau is 0.200." in notes["onset_conditional"]
    assert notes["onset_seen"] == "The unseen seeds that switched on, at 0.300 and 0.300."
    climbing = copy.deepcopy(flat)
    curve = climbing["l48"]["per_seed"]["45"]["condenser"]["curve"]
    for row in curve:
        row["cls_reliance"] = 0.3 * row["step"] / curve[-1]["step"]
    climbing["onset"] = study_onset(climbing["l48"])
    assert "rises on 1 of the 2 seeds that switched on" in report.plateau_notes(climbing)["onset_rising"]


def test_near_misses_count_the_evaluations_above_the_bar(committed):
    study, _ = committed
    full = eight_seeds(study, {45: 4000, 46: 20000, 47: None, 48: 9000, 49: 47000})
    near = report.onset_readings(full)["onset_near"]
    # seed 47's made-up curve is zero throughout: never above its bar; seed 49 starts too late to count
    assert "0 of 96 (seed 47)" in near and "(seed 49)" not in near
    curve = full["l48"]["per_seed"]["44"]["condenser"]["curve"]
    above = sum(r["cls_reliance"] > 2 * r["cls_reliance_noise"] for r in curve)
    assert f"{above} of 96 evaluations (seed 44)" in near


def test_the_seen_seeds_hardware_is_said_where_their_stages_cost_apart(committed):
    """The seeds read before the rules ran on other hardware than the unseen ones (their
    Condenser stages' CPU seconds do not overlap): the page says the two cannot be told apart;
    with overlapping costs it says nothing."""
    import copy

    study, _ = committed
    curves = study["l48"]["per_seed"]
    said = report._machines(curves)
    assert "cannot be told apart" in said and "4,400 to 4,500" in said and "7,400 to 8,200" in said
    same = copy.deepcopy(curves)
    for entry in same.values():
        entry["condenser"]["cpu_seconds"] = 5000.0
    assert report._machines(same) == ""
