"""The committed protocol results (``results/*.json``) are whole and agree with themselves: schema
and version, provenance, the headline recomputed from the body, the scorecard recomputed from the
numbers. The same checks run on a micro results file made in a temporary folder, and fail when
one of its headline numbers is edited; a results folder named by the environment must exist."""

import json
from pathlib import Path

import numpy as np
import pytest

from condenser_lite.reproduction.runs.release import verify_checkpoints
from condenser_lite.reproduction.evidence import results as reading
from condenser_lite.reproduction.evidence.results import (RESULTS_DIR, RESULTS_VERSION, headline, load_results,
                                                          runs_without_reliance)
from condenser_lite.reproduction.statistics.rules import PRE_REGISTERED_RULES, PRE_REGISTRATION_COMMIT
from condenser_lite.reproduction.claims.scorecard import scorecard
from condenser_lite.utils.errors import DataSourceError, SchemaError

PROVENANCE = ("commit", "dirty", "command", "preset", "settings", "started", "finished", "wall_seconds", "cpu_seconds",
              "parts", "parts_reused", "work_cpu_seconds", "machine", "python", "packages")
MACHINE = ("cpu", "cores", "ram_gib", "load_average_start", "load_average_end")
HEADLINE = {"mlm_loss", "unigram_entropy", "cls_swap_gap", "cls_swap_noise", "ndcg10", "wall_minutes", "cls_reliance",
            "pretraining_seeds"}


def protocol_files() -> list[Path]:
    """The committed results files the protocol wrote, and the parts a merged one is made of
    (``results/parts/``: runs on some pre-training seeds); the study's own files are skipped."""
    return [p for p in [*sorted(RESULTS_DIR.glob("*.json")), *sorted(RESULTS_DIR.glob("parts/*.json"))]
            if json.loads(p.read_text()).get("protocol") == "condenser_lite.protocol"]


def check(results: dict) -> None:
    """Every check of a protocol results file; raises AssertionError naming what disagrees."""
    assert results["version"] == RESULTS_VERSION, "stale results version: re-run the protocol"
    prov = results["provenance"]
    assert not [k for k in PROVENANCE if k not in prov], [k for k in PROVENANCE if k not in prov]
    assert not [k for k in MACHINE if k not in prov["machine"]]
    assert prov["preset"] == results["preset"]["name"] and prov["settings"] == results["preset"]
    assert prov["command"] and prov["wall_seconds"] > 0 and prov["packages"]["torch"]

    head = results["headline"]
    assert set(head) == HEADLINE and set(head["ndcg10"]) == {"bert", "condenser", "cocondenser", "bm25_same_tokens"}
    assert head == headline(results), "the headline disagrees with the body"
    # recomputed independently from the per-seed values
    full = str(results["train_sizes"][-1])
    for arm in ("bert", "condenser", "cocondenser"):
        values = results["retrieval"][arm]["round1"][full]["nDCG@10"]["values"]
        assert head["ndcg10"][arm] == pytest.approx(np.mean(values), abs=1e-4), arm
    assert head["ndcg10"]["bm25_same_tokens"] == pytest.approx(results["bm25"]["truncated"]["nDCG@10"], abs=1e-4)
    runs = [results["arms"]["bert"], *results["arms"]["bert"].get("other_pretraining_seeds", [])]
    assert head["mlm_loss"] == pytest.approx(np.mean([r["heldout"]["mlm_loss"] for r in runs]), rel=1e-5)
    assert head["unigram_entropy"] == pytest.approx(results["heldout"]["unigram_entropy"], rel=1e-5)
    runs = [results["arms"]["condenser"], *results["arms"]["condenser"].get("other_pretraining_seeds", [])]
    for name in ("cls_swap_gap", "cls_swap_noise"):
        assert head[name] == pytest.approx(np.mean([r["heldout"][name] for r in runs]), rel=1e-5, abs=1e-12), name
    assert head["wall_minutes"] == round(prov["wall_seconds"] / 60, 1)
    assert head["pretraining_seeds"] == len(results["pretraining_seeds"])
    # the reliance of every arm that logged its parts, recomputed from the logged losses
    logged = {arm for arm, e in results["arms"].items() if "reliance_own_loss" in (e.get("heldout") or {})}
    assert set(head["cls_reliance"]) == logged
    for arm in logged:
        runs = [results["arms"][arm], *results["arms"][arm].get("other_pretraining_seeds", [])]
        values = [(h["reliance_ablated_loss"] - h["reliance_own_loss"]) / (h["reliance_ablated_loss"] - h["reliance_late_loss"])
                  for h in (r["heldout"] for r in runs)]
        undefined = any(h["reliance_ablated_loss"] <= h["reliance_late_loss"] for h in (r["heldout"] for r in runs))
        assert head["cls_reliance"][arm] == (None if undefined else pytest.approx(np.mean(values), rel=1e-5)), arm
    if "condenser" in logged:  # judged by the pre-registered rules: the file names them
        assert prov["pre_registration"]["commit"] == PRE_REGISTRATION_COMMIT
    if "checkpoints" in prov:  # the committed checkpoints are the ones the provenance names, by content
        assert not verify_checkpoints(prov["checkpoints"]), verify_checkpoints(prov["checkpoints"])

    # the stored verdicts are the current rules' verdicts on the stored numbers
    assert json.loads(json.dumps(scorecard(results))) == results["claims"], "claims differ from scorecard(results)"


@pytest.mark.parametrize("path", protocol_files(), ids=lambda p: p.name)
def test_committed_results(path):
    results = load_results(path.stem, folder=path.parent)  # results/ or results/parts/
    check(results)


def test_micro_results_pass_and_an_edited_headline_fails(micro_run, tmp_path):
    _, out, _, _ = micro_run
    results = json.loads(out.read_text())
    (tmp_path / "micro.json").write_text(json.dumps(results))
    check(load_results("micro", folder=tmp_path))
    # a run made now logs the reliance gauges, so the pre-registered rules judge it
    assert {"condenser", "cocondenser"} <= set(results["headline"]["cls_reliance"])
    assert results["claims"][0]["ours"]["rules"] == PRE_REGISTERED_RULES
    assert results["provenance"]["pre_registration"]["commit"] == PRE_REGISTRATION_COMMIT

    edited = json.loads(json.dumps(results))
    edited["headline"]["ndcg10"]["cocondenser"] = 0.2
    with pytest.raises(AssertionError, match="headline"):
        check(edited)
    edited = json.loads(json.dumps(results))
    edited["claims"][3]["status"] = "reproduced"
    with pytest.raises(AssertionError, match="scorecard"):
        check(edited)


def test_load_results_names_the_file_and_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"experiments --preset small --out .*small\.json"):
        load_results("small", folder=tmp_path)
    (tmp_path / "old.json").write_text(json.dumps({"protocol": "condenser_lite.protocol", "version": 1}))
    with pytest.raises(ValueError, match="stale"):
        load_results("old", folder=tmp_path)
    (tmp_path / "study.json").write_text(json.dumps({"figures": []}))
    with pytest.raises(ValueError, match="not a protocol results file"):
        load_results("study", folder=tmp_path)


def test_results_are_found_when_the_package_is_installed_away_from_its_clone(tmp_path, monkeypatch):
    """On Colab the package sits in site-packages: the clone's results come from
    $CONDENSER_LITE_RESULTS (set by scripts/colab_install.py), or from results/ beside the
    working directory (a chapter run from a clone's notebooks/)."""
    from condenser_lite.reproduction.evidence import results as evidence

    clone = tmp_path / "clone"
    (clone / "results").mkdir(parents=True)
    (clone / "notebooks").mkdir()
    (clone / "results" / "small.json").write_text(json.dumps({"protocol": "condenser_lite.protocol",
                                                              "version": RESULTS_VERSION}))
    monkeypatch.delenv(evidence.RESULTS_ENV, raising=False)
    monkeypatch.setattr(evidence, "RESULTS_DIR", tmp_path / "site-packages" / "results")  # not there
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="experiments --preset small"):
        load_results("small")
    monkeypatch.chdir(clone / "notebooks")
    assert load_results("small")["version"] == RESULTS_VERSION
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(evidence.RESULTS_ENV, str(clone / "results"))
    assert evidence.results_dir() == clone / "results"
    assert load_results("small")["version"] == RESULTS_VERSION


def test_results_folder_from_the_environment_must_be_there(tmp_path, monkeypatch):
    """`$CONDENSER_LITE_RESULTS` pointing nowhere is named as the cause, with the way out (unset
    it), rather than reported as a results file to compute."""

    from condenser_lite.reproduction.evidence import results as evidence

    monkeypatch.setenv(evidence.RESULTS_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(DataSourceError, match=r"\$CONDENSER_LITE_RESULTS=.*nowhere is not a folder.*unset it"):
        evidence.load_results("small")


def test_a_results_file_whose_headline_disagrees_with_its_body_is_refused(tmp_path):
    """A results file whose headline was edited away from its body is refused, naming the number
    and the command that remakes the file."""
    from condenser_lite.reproduction.evidence.results import RESULTS_DIR, load_results

    results = json.loads((RESULTS_DIR / "small.json").read_text())
    true = results["headline"]["ndcg10"]["cocondenser"]
    results["headline"]["ndcg10"]["cocondenser"] = 0.2
    (tmp_path / "small.json").write_text(json.dumps(results))
    with pytest.raises(SchemaError, match=rf"small.json: its headline says ndcg10.cocondenser=0.2 but its body gives "
                                          rf"{true}; .*experiments --preset small --out"):
        load_results("small", folder=tmp_path)


def test_runs_without_reliance_are_heads_gauged_before_the_reliance_gauge():
    """A run that logged its head's swap gap but no reliance predates the reliance gauge; a
    published checkpoint (no gauges at all) and BERT (no head) do not."""
    gauged = {"cls_swap_gap": 0.01, "cls_swap_noise": 0.001, "reliance_own_loss": 2.9}
    old = {"cls_swap_gap": 0.01, "cls_swap_noise": 0.001}
    results = {"arms": {"bert": {"heldout": {"mlm_loss": 4.0}}, "condenser": {"heldout": gauged},
                        "cocondenser": {"heldout": gauged, "other_pretraining_seeds": [{"heldout": old}]},
                        "published": {"seed": None, "heldout": None}}}
    assert runs_without_reliance(results) == ["cocondenser"]  # its second pre-training seed
    assert runs_without_reliance({"arms": {"condenser": {"heldout": old}}}) == ["condenser"]
    assert runs_without_reliance({}) == []


def test_the_readers_find_each_number_where_the_file_keeps_it():
    """Each reader of results.py returns the number at its place in the committed file, and None
    where the file has no such arm, size or run."""
    small = json.loads((RESULTS_DIR / "small.json").read_text())
    full, pairs = str(small["train_sizes"][-1]), str(small["sts_sizes"][0])
    runs = reading.pretraining_runs(small, "condenser_mod")
    assert runs[0] is small["arms"]["condenser_mod"] and len(runs) == len(small["pretraining_seeds"])
    assert reading.arm_seeds(small, "condenser_mod") == small["pretraining_seeds"]
    assert reading.preset_name(small) == "small"
    assert reading.retrieval_score(small, "condenser", "round2", full, "nDCG@10") is \
        small["retrieval"]["condenser"]["round2"][full]["nDCG@10"]
    assert reading.bm25_score(small, "nDCG@10") == small["bm25"]["full"]["nDCG@10"]
    assert reading.sts_score(small, "bert", pairs) is small["sts"]["bert"][pairs]
    assert reading.entropy_change(small, "bert") is small["entropy"]["bert"]["mean_abs_change"]
    assert reading.nb_recall(small, "bert", "n50@k10") is small["nb_recall"]["bert"]["n50@k10"]
    assert reading.loss_curves(small, "bert", full) is small["loss_curves"]["bert"][full]
    assert reading.stage_flops(runs[0]) == runs[0]["compute"]["stage"]["flops"]
    assert reading.gauge(small, "bert", "mlm_loss") == pytest.approx(
        np.mean([r["heldout"]["mlm_loss"] for r in reading.pretraining_runs(small, "bert")]))
    for missing in (reading.retrieval_score(small, "nobody", "round1", full, "nDCG@10"),
                    reading.retrieval_score(small, "bert", "round1", "7", "nDCG@10"),
                    reading.sts_score(small, "bert", None), reading.nb_recall(small, "bert", "n7@k7"),
                    reading.gauge(small, "nobody", "mlm_loss")):
        assert missing is None
    assert reading.pretraining_runs(small, "nobody") == [] and reading.rules_version(small) == 2


@pytest.mark.unit
def test_the_machine_record_tells_cpu_generations_apart():
    """Names like "AMD EPYC" cover several generations, whose CPU seconds per update differ: the
    record keeps the family and model numbers and the matrix flags beside the name."""
    from condenser_lite.reproduction.evidence.results import machine

    m = machine(None)
    assert set(MACHINE) <= set(m) and isinstance(m["matrix_flags"], list)
    if Path("/proc/cpuinfo").exists():
        family, _, model = m["cpu_family_model"].partition("/")
        assert family.isdigit() and model.isdigit()


def test_git_state_names_the_changed_files_and_leaves_out_the_runs_own(monkeypatch):
    """The provenance's dirty bit comes with the files behind it (a results file read at the
    start reads differently from changed code), and the file a run rewrites is left out."""
    asked = []

    def fake_git(*args):
        asked.append(args)
        # git() strips the output, so the first line has lost its leading space
        return "abc123" if args[0] == "rev-parse" else "M results/mechanism.json\nM  condenser_lite/x.py"

    monkeypatch.setattr(reading, "git", fake_git)
    state = reading.git_state(exclude=reading.REPO_ROOT / "results" / "health.json")
    assert state == {"commit": "abc123", "dirty": True,
                     "dirty_files": ["results/mechanism.json", "condenser_lite/x.py"]}
    assert any(a.endswith("results/health.json") and a.startswith(":(exclude)") for a in asked[0])
    monkeypatch.setattr(reading, "git", lambda *args: "abc123" if args[0] == "rev-parse" else "")
    assert reading.git_state() == {"commit": "abc123", "dirty": False, "dirty_files": []}
    monkeypatch.setattr(reading, "git", lambda *args: None)  # no git
    assert reading.git_state(exclude=Path("/elsewhere/out.json")) == {"commit": None, "dirty": None,
                                                                     "dirty_files": None}


def test_every_committed_results_file_names_its_kind():
    kinds = {p.name: reading.file_kind(json.loads(p.read_text())) for p in sorted(RESULTS_DIR.glob("*.json"))
             if p.name != "zero_shot.json"}  # a benchmark's record, which no study command writes
    assert kinds == {"health.json": "health", "mechanism.json": "mechanism", "small.json": "protocol",
                     "study.json": "sizing", "real_model.json": "real-model"}


@pytest.mark.parametrize("command", [
    ["sizing", "--collect", "--out"],
    ["health-runs", "--preset", "micro", "--runs", "short", "--steps", "2", "--out"],
    ["mechanism", "--merge", "--out"],
    ["experiments", "--preset", "micro", "--out"]])
def test_a_study_command_writes_only_its_own_kind_of_file(command, tmp_path, capsys):
    """Given another study's results file or a user's text file as --out, every study command
    refuses in one line before any work, naming what the file is, and leaves it as it was."""
    from command_line import cli, one_error_line

    own = {"sizing": "study.json", "health-runs": "health.json", "mechanism": "mechanism.json",
           "experiments": "small.json"}[command[0]]
    other = next(n for n in ("health.json", "mechanism.json", "small.json", "study.json") if n != own)
    given = {"another study's": tmp_path / other, "a user's": tmp_path / "notes.txt"}
    given["another study's"].write_bytes((RESULTS_DIR / other).read_bytes())
    given["a user's"].write_text("my notes, not JSON\n")
    for kind, path in given.items():
        before = path.read_bytes()
        line = one_error_line(cli([*command, path], capsys))
        said = "not JSON" if kind == "a user's" else reading.KINDS[reading.file_kind(json.loads(before))]
        assert said in line and "nothing was written" in line, (kind, line)
        assert path.read_bytes() == before


def test_a_results_file_that_contradicts_its_rules_is_refused_at_loading(tmp_path):
    """A stored p-value edited with its verdict left (or a verdict edited) is refused where the
    chapters load the file, naming the first claim and field that differ; the committed files
    pass as they are."""
    from condenser_lite.reproduction.runs.merge import read_part
    from condenser_lite.reproduction.claims.scorecard import check_judged

    committed = json.loads((RESULTS_DIR / "small.json").read_text())
    check_judged(committed, "small.json")  # the rules make of its numbers what it stores
    edited = json.loads(json.dumps(committed))
    claim = next(c for c in edited["claims"] if c["status"] != "reproduced")
    claim["status"] = "reproduced"
    with pytest.raises(SchemaError, match=f"claim {claim['id']}'s stored status is not what the rules make"):
        check_judged(edited, "small.json")
    path = tmp_path / "small.json"
    path.write_text(json.dumps(edited))
    with pytest.raises(SchemaError, match=f"claim {claim['id']}"):
        read_part(path)

    def tests_in(tree):  # every dict holding a p-value, depth first
        if isinstance(tree, dict):
            yield from ([tree] if "p" in tree else [])
            for value in tree.values():
                yield from tests_in(value)
        elif isinstance(tree, list):
            for value in tree:
                yield from tests_in(value)

    edited = json.loads(json.dumps(committed))
    test = next(t for c in edited["claims"] for t in tests_in(c["ours"]) if isinstance(t["p"], float))
    test["p"] = 0.001 if test["p"] > 0.5 else 0.999  # the p changed, its verdict left
    with pytest.raises(SchemaError, match=r"stored ours\..*p is not what the rules make"):
        check_judged(edited, "small.json")
