"""The reproduction protocol on the micro preset: every arm, every claim, a well-formed results file
(protocol, arms, presets, scorecard, plots)."""

import json
from pathlib import Path

import pytest

from condenser_lite.arms import needed_arms
from condenser_lite.presets import ABLATION_ARMS, ARMS, MAIN_ARMS, Preset, get_preset
from condenser_lite.protocol import run_protocol
from condenser_lite.scorecard import STATUSES, claim_numbers, claim_status, compare, scorecard, stats

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_mirror = pytest.mark.skipif(not MIRROR.exists(), reason="local data mirror ../shared/data not found")


@pytest.fixture(scope="module")
def micro_run(tmp_path_factory, tokenizer_dir):
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("exp")
    mp.setenv("CONDENSER_LITE_CACHE", str(root / "cache"))
    mp.setenv("CONDENSER_LITE_DATA", str(MIRROR))
    budget = get_preset("micro", tokenizer=tokenizer_dir)
    out = root / "results.json"
    # two worker processes: the default path on a CPU (one thread each)
    results = run_protocol(budget, out_path=out, verbose=False, workers=2)
    yield budget, out, results, root
    mp.undo()


@needs_mirror
def test_results_file_has_every_arm_and_claim(micro_run):
    budget, out, results, _ = micro_run
    on_disk = json.loads(out.read_text())
    assert on_disk["key"] == results["key"]
    for part in ("budget", "seeds", "environment", "wall_time", "arms", "bm25", "retrieval", "nb_recall",
                 "loss_curves", "entropy", "sts", "claims", "notes"):
        assert part in on_disk, part
    assert on_disk["seeds"] == [0, 1]
    assert on_disk["environment"]["packages"]["torch"]
    assert on_disk["wall_time"]["total"] > 0 and on_disk["wall_time"]["pretrain_first_stage"] > 0
    assert on_disk["execution"]["workers"] == 2
    assert set(on_disk["arms"]) == set(ARMS)
    # the chain: bert_cont and condenser continue bert; coCondenser and the ablations continue condenser
    arms = on_disk["arms"]
    assert arms["bert"]["parent"] is None and arms["condenser"]["parent"] == "bert"
    assert {arms[a]["parent"] for a in ("cocondenser", "co_contrastive_only", "co_mlm_only")} == {"condenser"}
    assert len({arms[a]["checkpoint"] for a in ARMS}) == len(ARMS)  # six distinct stages
    assert [r["step"] for r in arms["bert"]["pretrain_log"]] == [1, 2]

    sizes = [str(s) for s in on_disk["train_sizes"]]
    assert sizes == ["4", "8"]
    for arm in MAIN_ARMS:
        for size in sizes:
            m = on_disk["retrieval"][arm]["round1"][size]["nDCG@10"]
            assert m["n"] == 2 and len(m["values"]) == 2 and 0.0 <= m["mean"] <= 1.0
        if arm in budget.round2_arms:  # round 2 for BERT, Condenser and coCondenser
            assert on_disk["retrieval"][arm]["round2"]["8"]["R@100"]["n"] == 2
        else:
            assert "round2" not in on_disk["retrieval"][arm]
        assert on_disk["sts"][arm]["16"]["n"] == 2  # the "full" STS set (capped at 16 pairs here)
        assert len(on_disk["loss_curves"][arm]["8"]) == 2  # one curve per seed
        ent = on_disk["entropy"][arm]
        assert len(ent["before"]) == budget.model.num_hidden_layers and len(ent["after"]["mean"]) == budget.model.num_hidden_layers
        assert 0 <= min(ent["before"]) and ent["mean_abs_change"]["n"] == 2
    for arm in ABLATION_ARMS:
        assert list(on_disk["retrieval"][arm]["round1"]) == ["8"]
        assert "round2" not in on_disk["retrieval"][arm]
    nb = on_disk["nb_recall"]["cocondenser"]
    assert set(nb) == {f"n{n}@k{k}" for n in budget.nb_n for k in budget.nb_k}
    assert all(0.0 <= v["mean"] <= 1.0 for v in nb.values())
    assert set(on_disk["bm25"]) >= {"full", "truncated"}

    ids = [c["id"] for c in on_disk["claims"]]
    assert ids == [f"C{i}" for i in range(1, 8)]
    for c in on_disk["claims"]:
        assert c["status"] in STATUSES
        assert c["statement"] and c["paper"] and c["ours"] is not None


@needs_mirror
def test_second_call_is_cached(micro_run, tmp_path):
    budget, out, results, root = micro_run
    again = run_protocol(budget, out_path=tmp_path / "again.json", verbose=False)
    assert again == json.loads(out.read_text())  # read back from the cache, not recomputed
    assert len(list((root / "cache" / "experiments").glob("results-micro-*.json"))) == 1


def test_compare_and_status_rules():
    a, b = stats([0.5, 0.52, 0.54]), stats([0.40, 0.41, 0.42])
    assert compare(a, b)["verdict"] == "better" and compare(b, a)["verdict"] == "worse"
    c = stats([0.35, 0.45, 0.55])  # wide spread: no verdict
    assert compare(c, b)["verdict"] == "within spread"
    assert compare(None, b) is None
    assert claim_status([True, True]) == "reproduced"
    assert claim_status([True, False]) == "partly reproduced"
    assert claim_status([False, None]) == "not reproduced at this scale"
    assert claim_status([None]) == "not measured"


def test_scorecard_on_made_up_numbers():
    """A hand-made results dict where Condenser clearly wins at the small size only."""

    def m(*vals):
        return {"nDCG@10": stats(vals), "R@100": stats(vals)}

    results = {
        "budget": {"metrics": ["nDCG@10", "R@100"]},
        "train_sizes": [100, 809],
        "retrieval": {
            "bert": {"round1": {"100": m(0.10, 0.11, 0.12), "809": m(0.30, 0.31, 0.32)}},
            "bert_cont": {"round1": {"100": m(0.12, 0.13, 0.14), "809": m(0.31, 0.32, 0.33)}},
            "condenser": {"round1": {"100": m(0.25, 0.26, 0.27), "809": m(0.32, 0.33, 0.34)}},
        },
    }
    claims = {c["id"]: c for c in scorecard(results)}
    assert claims["C1"]["status"] == "reproduced"
    assert claims["C1"]["ours"]["narrowing"] is True
    assert claims["C2"]["status"] == "not measured"  # no coCondenser arm in this dict
    assert all(c["status"] in STATUSES for c in claims.values())


def test_presets():
    tiny, micro, full = get_preset("tiny"), get_preset("micro"), get_preset("full")
    assert tiny.seeds == (0, 1, 2) and tiny.arms == ARMS
    assert micro.model.hidden_size == 32
    # full scale: the papers' checkpoints and Tevatron's MS MARCO recipe, through the same protocol
    assert full.pretrained["condenser"] == "Luyu/condenser" and full.pretrained["cocondenser"] == "Luyu/co-condenser-marco"
    assert full.task == "msmarco" and full.finetune.lr == 5e-6 and full.finetune.train_n_passages == 8
    assert needed_arms(full.arms, full.pretrained) == ["bert", "condenser", "cocondenser"]
    assert needed_arms(["cocondenser"], {}) == ["bert", "condenser", "cocondenser"]
    # the scaled-down book's settings, one object for the protocol, the chapters and the command line
    assert (tiny.pretraining.s1_steps, tiny.pretraining.batch_size, tiny.pretraining.lr, tiny.model.max_len) == (
        1200, 32, 1e-3, 64)
    assert (tiny.finetune.lr, tiny.finetune.train_n_passages, tiny.finetune.p_max_len) == (1e-3, 2, 64)
    assert get_preset("paper") is full and full.name == "paper"
    changed = tiny.replace(**{"finetune.lr": 5e-4}, s1_steps=10, seeds=(0,))
    assert (changed.finetune.lr, changed.pretraining.s1_steps, changed.seeds, changed.pretraining.lr) == (
        5e-4, 10, (0,), 1e-3)
    with pytest.raises(TypeError, match="ambiguous"):
        tiny.replace(lr=1e-4)  # pre-training, fine-tuning and STS-b each have one
    with pytest.raises(ValueError, match="unknown preset"):
        get_preset("huge")
    with pytest.raises(ValueError, match="unknown arm"):
        Preset(arms=("bert", "electra"))
    with pytest.raises(TypeError, match="unknown Preset field"):
        tiny.replace(steps=3)


@needs_mirror
def test_cli_experiments_reads_the_cached_results(micro_run, tmp_path, capsys):
    from condenser_lite.cli import main

    budget, out, results, _ = micro_run
    target = tmp_path / "cli.json"
    main(["experiments", "--budget", "micro", "--set", f"tokenizer={budget.model.tokenizer}", "--out", str(target)])
    assert json.loads(target.read_text())["key"] == results["key"]  # same settings: the cached file
    printed = capsys.readouterr().out
    assert all(f"C{i} " in printed for i in range(1, 8))


@needs_mirror
def test_plots_and_tables_from_results(micro_run, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from condenser_lite import plots

    _, out, _, _ = micro_run
    results = json.loads(out.read_text())  # what the chapters read: the JSON file, not the in-memory dict
    table = plots.retrieval_table(results)
    assert table.index.get_level_values(0)[0] == "BM25"
    assert {plots.label(a) for a in ARMS} <= set(table.index.get_level_values(0))
    assert set(plots.sts_table(results).columns) == {str(s) for s in results["sts_sizes"]}
    assert list(plots.scorecard_table(results).index) == [f"C{i}" for i in range(1, 8)]
    for name in ("plot_low_data", "plot_rounds", "plot_nb_recall", "plot_entropy", "plot_loss_curves", "plot_sts",
                 "plot_pretrain_losses"):
        path = plots.save(getattr(plots, name)(results), tmp_path / f"{name}.png")
        assert path.stat().st_size > 1000, name
    # the scorecard page's numbers: one line per comparison, each naming its verdict
    text = claim_numbers(results["claims"][0])
    assert text and all(line.endswith(("better", "worse", "within spread")) or "narrows" in line for line in text.splitlines())


def test_smooth_is_a_trailing_mean():
    from condenser_lite.plots import smooth

    assert smooth([1, 2, 3, 4], 2).tolist() == [1.0, 1.5, 2.5, 3.5]
    assert smooth([5.0], 10).tolist() == [5.0]


def _results_with(condenser: dict, bert: dict) -> dict:
    """A minimal results dict for C1: nDCG@10 per training size for three arms."""
    def arm(by_size):
        return {"round1": {s: {"nDCG@10": {"mean": m, "std": sd}} for s, (m, sd) in by_size.items()}}

    return {"budget": {"metrics": ["nDCG@10", "R@100"]}, "train_sizes": [100, 809],
            "retrieval": {"condenser": arm(condenser), "bert": arm(bert), "bert_cont": arm(bert)}}


def test_c1_narrowing_counts_only_when_condenser_is_ahead():
    # no difference beyond the spread at any size: a "narrowing" gap of noise is not a partial reproduction
    noise = _results_with({"100": (0.010, 0.002), "809": (0.028, 0.01)}, {"100": (0.008, 0.002), "809": (0.027, 0.01)})
    assert scorecard(noise)[0]["status"] == "not reproduced at this scale"
    ahead = _results_with({"100": (0.30, 0.01), "809": (0.40, 0.01)}, {"100": (0.20, 0.01), "809": (0.35, 0.01)})
    assert scorecard(ahead)[0]["status"] == "reproduced"  # ahead at 100, gap 0.10 -> 0.05
    widening = _results_with({"100": (0.30, 0.01), "809": (0.50, 0.01)}, {"100": (0.20, 0.01), "809": (0.35, 0.01)})
    assert scorecard(widening)[0]["status"] == "partly reproduced"
