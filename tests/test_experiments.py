"""The reproduction protocol on the micro preset: every arm, every claim, a well-formed results file
(protocol, arms, presets, scorecard, plots)."""

import json
from pathlib import Path

import pytest

from condenser_lite.reproduction.arms import needed_arms
from condenser_lite.reproduction.presets import Preset, get_preset
from condenser_lite.reproduction.protocol import run_protocol
from condenser_lite.reproduction.registry import ABLATION_ARMS, MAIN_ARMS, STANDARD_ARMS
from condenser_lite.reproduction.rules import ONE_SEED, POWER_VERDICTS, claim_status, compare, stats
from condenser_lite.reproduction.scorecard import claim_numbers, scorecard

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_mirror = pytest.mark.skipif(not MIRROR.exists(), reason="local data mirror ../shared/data not found")


@pytest.fixture
def micro_cache(micro_run, monkeypatch):
    """The micro run's cache and the data mirror, for tests that read them."""
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(micro_run[3] / "cache"))
    monkeypatch.setenv("CONDENSER_LITE_DATA", str(MIRROR))
    return micro_run


@needs_mirror
def test_results_file_has_every_arm_and_claim(micro_run):
    budget, out, results, _ = micro_run
    on_disk = json.loads(out.read_text())
    assert on_disk["key"] == results["key"]
    for part in ("preset", "seeds", "environment", "wall_time", "arms", "bm25", "retrieval", "nb_recall",
                 "loss_curves", "entropy", "sts", "claims", "notes"):
        assert part in on_disk, part
    assert on_disk["seeds"] == [0, 1]
    assert on_disk["environment"]["packages"]["torch"]
    assert on_disk["wall_time"]["total"] > 0 and on_disk["wall_time"]["pretrain_first_stage"] > 0
    assert on_disk["execution"]["workers"] == 2
    assert set(on_disk["arms"]) == set(STANDARD_ARMS)
    # the chain: bert_cont and condenser continue bert; coCondenser and the ablations continue condenser
    arms = on_disk["arms"]
    assert arms["bert"]["parent"] is None and arms["condenser"]["parent"] == "bert"
    assert {arms[a]["parent"] for a in ("cocondenser", "co_contrastive_only", "co_mlm_only")} == {"condenser"}
    assert len({arms[a]["checkpoint"] for a in STANDARD_ARMS}) == len(STANDARD_ARMS)  # six distinct stages
    assert [r["step"] for r in arms["bert"]["pretrain_log"]] == [1, 2]

    sizes = [str(s) for s in on_disk["train_sizes"]]
    assert sizes == ["4", "8"]
    for arm in MAIN_ARMS:
        for size in sizes:
            m = on_disk["retrieval"][arm]["round1"][size]["nDCG@10"]
            assert m["n"] == 2 and m["mean"] == pytest.approx(sum(m["values"]) / 2)
        if arm in budget.round2_arms:  # round 2 for BERT, Condenser and coCondenser
            assert on_disk["retrieval"][arm]["round2"]["8"]["R@100"]["n"] == 2
        else:
            assert "round2" not in on_disk["retrieval"][arm]
        assert on_disk["sts"][arm]["16"]["n"] == 2  # the "full" STS set (capped at 16 pairs here)
        assert len(on_disk["loss_curves"][arm]["8"]) == 2  # one curve per seed
        ent = on_disk["entropy"][arm]
        assert len(ent["before"]) == budget.model.num_hidden_layers and len(ent["after"]["mean"]) == budget.model.num_hidden_layers
        assert ent["mean_abs_change"]["n"] == 2
    for arm in ABLATION_ARMS:
        assert list(on_disk["retrieval"][arm]["round1"]) == ["8"]
        assert "round2" not in on_disk["retrieval"][arm]
    nb = on_disk["nb_recall"]["cocondenser"]
    assert set(nb) == {f"n{n}@k{k}" for n in budget.nb_n for k in budget.nb_k}
    assert all(v["n"] == 2 for v in nb.values())
    assert set(on_disk["bm25"]) >= {"full", "truncated"}

    ids = [c["id"] for c in on_disk["claims"]]
    assert ids == [f"C{i}" for i in range(0, 8)]
    for c in on_disk["claims"]:
        assert c["statement"] and c["paper"] and c["ours"] is not None and c["verdict"] == c["status"]
        # plain words for the book: arms by name, numbers in the sentence
        assert c["arms"] and not any("_" in a for a in c["arms"]) and any(ch.isdigit() for ch in c["comparison"])

    # held-out gauges: every stage scored on the same held-out blocks; the Condenser family has the swap gap
    heldout = on_disk["heldout"]
    assert heldout["n_blocks"] == budget.pretraining.eval_blocks and heldout["unigram_entropy"] > 0
    for arm in STANDARD_ARMS:
        gauges = arms[arm]["heldout"]
        assert gauges["step"] == 2 and gauges["mlm_loss"] > 0 and -1 <= gauges["cls_cosine"] <= 1
        assert ("cls_swap_gap" in gauges) == (arm not in ("bert", "bert_cont")), arm
        # evaluated every step (eval_every=1): the curves chapter 2 draws
        assert [r["step"] for r in arms[arm]["pretrain_log"] if "eval_mlm_loss" in r] == [1, 2]
    # compute: own stage, and cumulative with the stages the arm continues
    c = {arm: arms[arm]["compute"] for arm in STANDARD_ARMS}
    assert c["bert"]["stage"]["sequences"] == 2 * budget.pretraining.batch_size
    assert c["cocondenser"]["stage"]["sequences"] == 2 * 2 * budget.pretraining.cocondenser_batch  # two spans
    assert 0 < c["bert"]["stage"]["tokens"] <= c["bert"]["stage"]["positions"]
    for key in ("tokens", "flops", "steps"):
        assert c["cocondenser"]["cumulative"][key] == pytest.approx(
            c["cocondenser"]["stage"][key] + c["condenser"]["stage"][key] + c["bert"]["stage"][key])
    # same steps and batches, but a Condenser step also runs the head: more FLOPs than an MLM step
    assert c["condenser"]["stage"]["flops"] / c["condenser"]["stage"]["tokens"] > \
        1.3 * c["bert_cont"]["stage"]["flops"] / c["bert_cont"]["stage"]["tokens"]
    assert "not equal compute" in " ".join(on_disk["notes"])

    prov = on_disk["provenance"]
    assert prov["command"] == "python -m condenser_lite experiments --preset micro" and prov["preset"] == "micro"
    assert prov["settings"] == on_disk["preset"] and prov["parts_reused"] == 0
    assert prov["wall_seconds"] > 0 and prov["cpu_seconds"] > 0 and set(prov["parts"]) == {
        "setup", "pretrain_first_stage", "jobs"}
    assert prov["machine"]["cores"] and prov["packages"]["torch"]
    assert on_disk["headline"]["wall_minutes"] == round(prov["wall_seconds"] / 60, 1)


@needs_mirror
def test_second_call_is_cached(micro_cache, tmp_path):
    budget, out, results, root = micro_cache
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
    assert claim_status([ONE_SEED, None]) == ONE_SEED and claim_status([ONE_SEED, True]) == "reproduced"


def test_scorecard_on_made_up_numbers():
    """A hand-made results dict where Condenser clearly wins at the small size only."""

    def m(*vals):
        return {"nDCG@10": stats(vals), "R@100": stats(vals)}

    results = {
        "preset": {"metrics": ["nDCG@10", "R@100"]},
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
    assert claims["C0"]["status"] == "not measured"  # no pre-training gauges either


def test_presets():
    tiny, micro, full = get_preset("tiny"), get_preset("micro"), get_preset("full")
    assert tiny.seeds == (0, 1, 2) and tiny.arms == STANDARD_ARMS
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
    # pre-training seeds: one by default; more pre-train the main arms once each, the ablations once
    from condenser_lite.reproduction.protocol import arm_pretrain_seeds

    assert tiny.pretraining_seeds == (tiny.pretraining.seed,) and micro.pretraining_seeds == (42,)
    two = tiny.replace(pretrain_seeds=(1, 2))
    assert [arm_pretrain_seeds(two, a) for a in ("bert", "cocondenser", "co_mlm_only")] == [(1, 2), (1, 2), (1,)]
    with pytest.raises(ValueError, match="distinct seeds"):
        tiny.replace(pretrain_seeds=(1, 1))


@needs_mirror
def test_cli_experiments_reads_the_cached_results(micro_cache, tmp_path, capsys):
    from condenser_lite.cli import main

    budget, out, results, _ = micro_cache
    target = tmp_path / "cli.json"
    main(["experiments", "--preset", "micro", "--set", f"tokenizer={budget.model.tokenizer}", "--out", str(target)])
    assert json.loads(target.read_text())["key"] == results["key"]  # same settings: the cached file
    printed = capsys.readouterr().out
    assert all(f"C{i} " in printed for i in range(0, 8))


@needs_mirror
def test_plots_and_tables_from_results(micro_run, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from condenser_lite.reproduction import plots, registry

    _, out, _, _ = micro_run
    results = json.loads(out.read_text())  # what the chapters read: the JSON file, not the in-memory dict
    table = plots.retrieval_table(results)
    assert table.index.get_level_values(0)[0] == "BM25"
    assert {registry.label(a) for a in STANDARD_ARMS} <= set(table.index.get_level_values(0))
    assert set(plots.sts_table(results).columns) == {str(s) for s in results["sts_sizes"]}
    assert list(plots.scorecard_table(results).index) == [f"C{i}" for i in range(0, 8)]
    table = plots.compute_table(results)
    assert list(table.index) == [registry.label(a) for a in STANDARD_ARMS] and (table["TFLOPs"] >= 0).all()
    for name in ("plot_low_data", "plot_rounds", "plot_nb_recall", "plot_entropy", "plot_loss_curves", "plot_sts",
                 "plot_pretrain_losses", "plot_gauges"):
        path = plots.save(getattr(plots, name)(results), tmp_path / f"{name}.png")
        assert path.stat().st_size > 1000, name
    # the scorecard page's numbers: one line per comparison, each naming its verdict
    text = claim_numbers(results["claims"][1])
    verdicts = ("better", "worse", "within spread", *POWER_VERDICTS)  # power-aware where the run is pre-registered
    assert text and all(line.endswith(verdicts) or "narrows" in line for line in text.splitlines())


def test_smooth_is_a_trailing_mean():
    from condenser_lite.reproduction.plots import smooth

    assert smooth([1, 2, 3, 4], 2).tolist() == [1.0, 1.5, 2.5, 3.5]
    assert smooth([5.0], 10).tolist() == [5.0]


def _results_with(condenser: dict, bert: dict) -> dict:
    """A minimal results dict for C1: nDCG@10 per training size for three arms."""
    def arm(by_size):
        return {"round1": {s: {"nDCG@10": {"mean": m, "std": sd, "n": 3}} for s, (m, sd) in by_size.items()}}

    return {"preset": {"metrics": ["nDCG@10", "R@100"]}, "train_sizes": [100, 809],
            "retrieval": {"condenser": arm(condenser), "bert": arm(bert), "bert_cont": arm(bert)}}


def c1(results: dict) -> dict:
    return next(c for c in scorecard(results) if c["id"] == "C1")


def test_c1_narrowing_counts_only_when_condenser_is_ahead():
    # no difference beyond the spread at any size: a "narrowing" gap of noise is not a partial reproduction
    noise = _results_with({"100": (0.010, 0.002), "809": (0.028, 0.01)}, {"100": (0.008, 0.002), "809": (0.027, 0.01)})
    assert c1(noise)["status"] == "not reproduced at this scale"
    ahead = _results_with({"100": (0.30, 0.01), "809": (0.40, 0.01)}, {"100": (0.20, 0.01), "809": (0.35, 0.01)})
    assert c1(ahead)["status"] == "reproduced"  # ahead at 100, gap 0.10 -> 0.05
    widening = _results_with({"100": (0.30, 0.01), "809": (0.50, 0.01)}, {"100": (0.20, 0.01), "809": (0.35, 0.01)})
    assert c1(widening)["status"] == "partly reproduced"


@needs_mirror
def test_parallel_workers_give_the_serial_results(tokenizer_dir, tmp_path, monkeypatch):
    """Both cores (two one-thread worker processes) compute exactly what one process computes
    alone: every part is a function of its inputs, not of where or when it ran. One thread
    throughout, since float sums differ between thread counts."""
    from condenser_lite.reproduction.jobs import num_threads

    monkeypatch.setenv("CONDENSER_LITE_DATA", str(MIRROR))
    budget = get_preset("micro", tokenizer=tokenizer_dir, seeds=(0,), arms=("bert", "condenser", "cocondenser"))
    runs = {}
    for workers in (1, 2):
        monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / f"cache{workers}"))
        with num_threads(1), pytest.warns(UserWarning, match="one fine-tuning seed"):
            runs[workers] = run_protocol(budget, verbose=False, workers=workers)
    serial, parallel = runs[1], runs[2]
    assert parallel["execution"]["workers"] == 2 and serial["execution"]["workers"] == 1
    for part in ("retrieval", "sts", "nb_recall", "entropy"):
        assert parallel[part] == serial[part], part
    for arm in serial["arms"]:
        assert parallel["arms"][arm]["heldout"] == serial["arms"][arm]["heldout"], arm
