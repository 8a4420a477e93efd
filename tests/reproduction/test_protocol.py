"""The reproduction protocol (condenser_lite/reproduction/runs/protocol.py) on the micro preset: every arm,
every claim, a well-formed results file, read back from the cache, the same with one worker or two;
`experiments --out` must name a results file of the same preset."""

import json

import pytest
from command_line import cli, one_error_line
from locations import MIRROR

from condenser_lite.cli import main
from condenser_lite.reproduction.configuration.presets import get_preset
from condenser_lite.reproduction.runs.protocol import run_protocol
from condenser_lite.reproduction.configuration.registry import ABLATION_ARMS, MAIN_ARMS, STANDARD_ARMS
from condenser_lite.reproduction.statistics.rules import STATUSES

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
    assert ids == [f"C{i}" for i in range(0, 9)]
    for c in on_disk["claims"]:
        assert c["statement"] and c["paper"] and c["ours"] is not None
        assert {c["status"], c["verdict"]} <= set(STATUSES), c["status"]  # one the scorecard page knows how to show
        # plain words for the book: arms by name, numbers in the sentence
        assert c["arms"] and not any("_" in a for a in c["arms"]) and any(ch.isdigit() for ch in c["comparison"])

    # held-out gauges: every stage scored on the same held-out blocks; the Condenser family has the swap gap
    heldout = on_disk["heldout"]
    assert heldout["n_blocks"] == budget.stages.bert.eval_blocks and heldout["unigram_entropy"] > 0
    for arm in STANDARD_ARMS:
        gauges = arms[arm]["heldout"]
        assert gauges["step"] == 2 and gauges["mlm_loss"] > 0 and -1 <= gauges["cls_cosine"] <= 1
        assert ("cls_swap_gap" in gauges) == (arm not in ("bert", "bert_cont")), arm
        # evaluated every step (eval_every=1): the curves chapter 2 draws
        assert [r["step"] for r in arms[arm]["pretrain_log"] if "eval_mlm_loss" in r] == [1, 2]
    # compute: own stage, and cumulative with the stages the arm continues
    c = {arm: arms[arm]["compute"] for arm in STANDARD_ARMS}
    assert c["bert"]["stage"]["sequences"] == 2 * budget.stages.bert.batch_size
    assert c["cocondenser"]["stage"]["sequences"] == 2 * 2 * budget.stages.cocondenser.batch_size  # two spans
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


@needs_mirror
def test_cli_experiments_reads_the_cached_results(micro_cache, tmp_path, capsys):
    from condenser_lite.cli import main

    budget, out, results, _ = micro_cache
    target = tmp_path / "cli.json"
    main(["experiments", "--preset", "micro", "--set", f"tokenizer={budget.model.tokenizer}", "--out", str(target)])
    assert json.loads(target.read_text())["key"] == results["key"]  # same settings: the cached file
    printed = capsys.readouterr().out
    assert all(f"C{i} " in printed for i in range(0, 9))


@needs_mirror
def test_parallel_workers_give_the_serial_results(tokenizer_dir, tmp_path, monkeypatch):
    """Both cores (two one-thread worker processes) compute exactly what one process computes
    alone: every part is a function of its inputs, not of where or when it ran. One thread
    throughout, since float sums differ between thread counts."""
    from condenser_lite.reproduction.runs.jobs import num_threads

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


def test_binned_log_keeps_every_evaluation_and_averages_the_steps_between():
    """The results file keeps a pre-training log of at most about LOG_ROWS rows: the held-out
    evaluations exactly, the training losses between them averaged."""
    from condenser_lite.reproduction.runs.protocol import binned_log

    log = [{"step": s, "loss": float(s)} for s in range(1, 101)]
    for row in log:
        if row["step"] % 25 == 0:
            row["eval_mlm_loss"] = row["step"] / 10
    out = binned_log(log, max_rows=10)
    assert [r for r in out if "eval_mlm_loss" in r] == [r for r in log if "eval_mlm_loss" in r]
    assert out[0] == {"step": 10, "loss": 5.5}  # steps 1-10 averaged
    assert len(out) <= 10 + 4 + 4  # the bins, the evaluations, a short bin before each
    assert sum(r["loss"] for r in out if "eval_mlm_loss" in r) == 25 + 50 + 75 + 100
    assert binned_log(log[:10], max_rows=10) == log[:10]  # short logs unchanged


@needs_mirror
def test_rules_version_2_run_with_the_modified_condenser_and_its_controls(tokenizer_dir, tmp_path, monkeypatch):
    """The small preset's design at micro scale: two pre-training seeds, the modified Condenser
    with its two controls, the ablations on both seeds. The equal-compute control trains
    EQUAL_FLOPS_RATIO x the steps; every claim of version 2 is made, C0m judged on no seed the
    choice read, and every comparison is a test over the two pre-trained models."""
    from condenser_lite.reproduction.configuration.registry import CONTROL_ARMS, MODIFIED_ARM
    from condenser_lite.reproduction.statistics.rules import EQUAL_FLOPS_RATIO, RULES_VERSION

    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CONDENSER_LITE_DATA", str(MIRROR))
    budget = get_preset("micro", tokenizer=tokenizer_dir, pretrain_seeds=(42, 44), ablation_pretrain_seeds=2,
                        arms=STANDARD_ARMS + (MODIFIED_ARM, *CONTROL_ARMS),
                        modified_condenser={"head_mlm_probability": 0.5},
                        round2_arms=("bert", "condenser", "cocondenser", MODIFIED_ARM),
                        sts_arms=MAIN_ARMS + (MODIFIED_ARM, *CONTROL_ARMS))
    results = run_protocol(budget, verbose=False, workers=2)
    assert results["provenance"]["rules"]["version"] == RULES_VERSION == 2
    arms = results["arms"]
    assert arms["bert_cont_flops"]["pretrain_steps"] == round(budget.stages.condenser.max_steps * EQUAL_FLOPS_RATIO)
    for arm in (*ABLATION_ARMS, *CONTROL_ARMS, MODIFIED_ARM):
        assert [arms[arm]["seed"]] + [o["seed"] for o in arms[arm]["other_pretraining_seeds"]] == [42, 44], arm
    nocls = [arms["condenser_mod_nocls"], *arms["condenser_mod_nocls"]["other_pretraining_seeds"]]
    assert all(r["heldout"]["reliance_own_loss"] == pytest.approx(r["heldout"]["reliance_ablated_loss"], abs=1e-5)
               for r in nocls)  # the cut path: another document's [CLS] changes nothing
    claims = {c["id"]: c for c in results["claims"]}
    assert {"C4m", "C5m", "C6m", "C8m", "Am"} <= set(claims)
    assert len(claims["C0m"]["ours"]["reliance"]) == 1 and "judged on pre-training seeds 44" in claims["C0m"]["comparison"]
    c1m = claims["C1m"]["ours"]["by_size"]["8"]["bert_cont"]
    assert c1m["paired"] and c1m["n"] == 2 and set(c1m["per_seed"]) == {"42", "44"} and c1m["p"] is not None
    for c in claims.values():
        assert {c["status"], c["verdict"]} <= set(STATUSES), (c["id"], c["status"])
    assert set(claims["Am"]["ours"]["settings"]) >= {"nDCG@10 at 8 training queries"}
    from condenser_lite.reproduction.claims.scorecard import claim_rows

    rows = claim_rows(claims["C1m"])
    for r in rows:  # each pre-trained model's difference and the test over them
        assert r["per pre-trained model (a - b)"].startswith("42: ") and ", 44: " in r["per pre-trained model (a - b)"]
        assert 0 <= r["p (one-sided)"] <= 1


def test_experiments_out_must_be_a_results_file_of_the_same_preset(tmp_path, monkeypatch, capsys):
    """`--out` onto a folder, onto a file that is not protocol results, or onto another preset's
    results: refused in one line before anything runs, and those files are left as they were; the
    same preset's file is regenerated. Here the estimate and the protocol, which follow the checks,
    are replaced by a stand-in (the small preset's estimate measures its stages: minutes): reaching
    it means the command was not refused."""
    from condenser_lite.reproduction.runs import estimate, protocol

    def not_here(*args, **kwargs):
        raise RuntimeError("past the checks")

    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(estimate, "estimate_protocol", not_here)
    monkeypatch.setattr(protocol, "_run", not_here)
    folder, notes, other = tmp_path / "results", tmp_path / "notes.json", tmp_path / "small.json"
    folder.mkdir()
    notes.write_text('{"my": "notes"}')
    other.write_text(json.dumps({"protocol": "condenser_lite.protocol", "preset": {"name": "small"}}))
    command = ["experiments", "--preset", "micro", "--out"]
    assert f"--out {folder} is a folder; give a file path, e.g. {folder}/micro.json" in one_error_line(
        cli([*command, folder], capsys))
    said = one_error_line(cli([*command, notes], capsys))
    assert f"--out {notes} is a JSON file that is no results file of this library, not a protocol results" in said
    assert f"--out {other} holds the 'small' preset's results, not 'micro''s" in one_error_line(
        cli([*command, other], capsys))
    assert notes.read_text() == '{"my": "notes"}' and json.loads(other.read_text())["preset"] == {"name": "small"}
    with pytest.raises(RuntimeError, match="past the checks"):  # the same budget's file: regenerated
        main(["experiments", "--preset", "small", "--out", str(other)])


@needs_mirror
def test_a_training_size_beyond_the_data_is_refused_before_any_training(tmp_path, monkeypatch, capsys):
    """The micro task has 8 training queries: `train_sizes` 100 would train on all 8 under the
    label 8, the same run as None's. Refused in one line, before the first stage trains."""
    from condenser_lite.reproduction.runs import protocol

    def trained(*args, **kwargs):
        raise RuntimeError("a stage trained")

    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CONDENSER_LITE_DATA", str(MIRROR))
    monkeypatch.setattr(protocol, "pretrain_arm", trained)
    command = ["experiments", "--preset", "micro", "--out", tmp_path / "micro.json", "--set"]
    line = one_error_line(cli([*command, "train_sizes=[100,null]"], capsys))
    assert "train_sizes (100, None): 100 is more than the 8 training queries" in line
    assert "--set train_sizes='[4,null]'" in line
    assert "is all of the 8" in one_error_line(cli([*command, "train_sizes=[8,null]"], capsys))
    with pytest.raises(RuntimeError, match="a stage trained"):  # sizes within the data: it goes on
        main([*map(str, command), "train_sizes=[4,null]"])
