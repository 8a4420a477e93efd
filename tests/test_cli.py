import os
import shlex
import shutil
from pathlib import Path

import pytest
from command_line import FINETUNE, cli, one_error_line
from locations import MIRROR

from condenser_lite.cli import build_parser, main
from condenser_lite.cli_settings import apply_settings, recipe_from_args, stage_config_from_args
from condenser_lite.parameters import parse_settings
from condenser_lite.reproduction.runs.arms import arm_config
from condenser_lite.reproduction.configuration.presets import get_preset, paper_cocondenser, paper_condenser, stage_config
from condenser_lite.training.stage_cache import is_done
from condenser_lite.utils.errors import ConfigError

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"
FIXTURE = Path(__file__).parent / "fixtures" / "tevatron_tiny"  # a hand-written Tevatron MS MARCO mirror


def test_settings_convert_to_field_types():
    settings = parse_settings(["stages.bert.lr=1e-3", "stages.condenser.max_steps=7", "stages.condenser.late_mlm=false",
                               "stages.cocondenser.chunk_size=none", "stages.bert.mixed-precision=bf16", "seeds=[0, 1]"])
    assert settings == {"stages.bert.lr": 1e-3, "stages.condenser.max_steps": 7, "stages.condenser.late_mlm": False,
                        "stages.cocondenser.chunk_size": None, "stages.bert.mixed_precision": "bf16", "seeds": (0, 1)}
    assert isinstance(settings["stages.condenser.max_steps"], int)


@pytest.mark.parametrize("bad,msg", [(["nope=1"], "unknown setting 'nope'"), (["lr"], "path=value"),
                                     (["stages.bert.nope=1"],
                                      "unknown setting 'stages.bert.nope'; stages.bert's fields: batch_size"),
                                     (["stages.nope.lr=1"], "unknown setting 'stages.nope.lr'; paths start with"),
                                     (["lr=1"], "ambiguous: name its path, stages.bert.lr or stages.condenser.lr or "
                                                "stages.cocondenser.lr or finetune.lr or sts.lr"),
                                     (["max_steps=1"], "ambiguous: name its path, stages.bert.max_steps or "),
                                     (["pretraining.s1_steps=1"], "unknown setting 'pretraining.s1_steps'; paths start"),
                                     (["cocondenser_lr=1"], "unknown setting 'cocondenser_lr'; did you mean "
                                                            "stages.cocondenser.lr[?]$"),
                                     (["stage.max_steps=1"], r"set stages.<bert\|condenser\|cocondenser>.max_steps$")])
def test_settings_reject_unknown_and_ambiguous(bad, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_settings(bad)


def own_checkpoint(folder, name):
    """A folder standing for a checkpoint the library trained (``loading.mark_saved``'s file in it;
    a real checkpoint's stage would learn at the papers' rate instead), or None for ``name`` None."""
    if name is None:
        return None
    (folder / name).mkdir(exist_ok=True)
    (folder / name / "condenser_lite.json").write_text("{}")
    return str(folder / name)


@pytest.mark.parametrize("method, init, arm", [("mlm", None, "bert"), ("mlm", "ckpt", "bert_cont"),
                                              ("condenser", "ckpt", "condenser"), ("cocondenser", "ckpt", "cocondenser")])
def test_pretrain_command_runs_the_books_stages(method, init, arm, tmp_path):
    """`pretrain --preset tiny` builds exactly the stage the chapters' arms run (the same preset),
    from a checkpoint the library trained."""
    init = own_checkpoint(tmp_path, init)
    args = build_parser().parse_args(["pretrain", "--preset", "tiny", "--method", method, *(["--init", init] if init else [])])
    cfg = stage_config_from_args(args)
    assert cfg == arm_config(arm, get_preset("tiny"), init)
    tiny = get_preset("tiny")
    recipe = tiny.stages.cocondenser if method == "cocondenser" else tiny.stages.condenser if init else tiny.stages.bert
    assert (cfg.lr, cfg.max_steps, cfg.model) == (recipe.lr, recipe.max_steps, tiny.model)


@pytest.mark.parametrize("method, init, arm, pair", [
    ("mlm", None, "bert", "stages.bert.max_steps=5"), ("mlm", None, "bert", "stages.bert.lr=0.002"),
    ("mlm", None, "bert", "stages.bert.batch_size=16"), ("mlm", None, "bert", "model.hidden_size=64"),
    ("mlm", None, "bert", "stages.bert.mlm_probability=0.2"),
    ("mlm", "ckpt", "bert_cont", "stages.condenser.max_steps=7"),
    ("condenser", "ckpt", "condenser", "stages.condenser.corpus_limit=50"),
    ("condenser", "ckpt", "condenser", "model.skip_from=1"),
    ("cocondenser", "ckpt", "cocondenser", "stages.cocondenser.max_steps=9"),
    ("cocondenser", "ckpt", "cocondenser", "stages.cocondenser.lr=0.0003"),
    ("cocondenser", "ckpt", "cocondenser", "stages.cocondenser.chunk_size=8"),
    ("cocondenser", "ckpt", "cocondenser", "stages.cocondenser.batch_size=8"),
    ("cocondenser", "ckpt", "cocondenser", "task=nfcorpus")])
def test_one_set_dialect_pretrain_reads_the_experiments_keys(method, init, arm, pair, tmp_path):
    """A path ``experiments --set`` takes means the same to ``pretrain``: the stage is the arm's
    stage of the preset with that change, the field under the same name."""
    init = own_checkpoint(tmp_path, init)
    argv = ["pretrain", "--preset", "tiny", "--method", method, *(["--init", init] if init else []), "--set", pair]
    cfg = stage_config_from_args(build_parser().parse_args(argv))
    changed = apply_settings(get_preset("tiny"), parse_settings([pair]))
    assert cfg == arm_config(arm, changed, init) != arm_config(arm, get_preset("tiny"), init)
    path, value = next(iter(parse_settings([pair]).items()))
    if path.startswith("stages."):  # the stage's field of the same name holds the value
        assert getattr(cfg, path.rpartition(".")[2]) == value


PATHS = ["model.hidden_size=64", "stages.bert.lr=0.002", "stages.bert.max_steps=5", "stages.condenser.lr=0.003",
         "stages.cocondenser.lr=0.0001", "finetune.lr=0.0002", "finetune.batch_size=4", "sts.epochs_full=1.5",
         "seeds=[0, 1]"]


@pytest.mark.parametrize("pair", PATHS)
def test_one_path_lands_on_one_setting_in_every_command(pair, monkeypatch):
    """The same ``path=value`` through ``pretrain``, ``finetune``, ``experiments`` and a chapter's
    ``-p settings`` sets the same field, or is refused in one line by the command that does not
    read it."""
    import condenser_lite.reproduction.runs.estimate as estimate
    from condenser_lite.book import setup

    path, value = pair.split("=", 1)
    part, _, name = path.rpartition(".")
    part = part.partition(".")[0]  # stages.<stage> -> stages
    expected = parse_settings([pair])[path]
    tiny = get_preset("tiny")

    def read(config, part):  # the field the path names, in the config a command built
        return getattr(config.model if part == "model" else config, name)

    def run(argv):
        try:
            return ("set", fn(build_parser().parse_args(argv)))
        except ConfigError as err:
            return ("refused", str(err))

    fn = stage_config_from_args
    pretrain = run(["pretrain", "--preset", "tiny", "--method", "mlm", "--set", pair])
    fn = recipe_from_args
    finetune = run(["finetune", "--init", "x", "--output-dir", "o", "--preset", "tiny", "--set", pair])
    seen = []
    monkeypatch.setattr(estimate, "estimate_protocol", lambda preset, *a, **k: seen.append(preset) or preset)
    monkeypatch.setattr(estimate, "format_estimate", lambda e: "(estimate)")
    try:
        main(["experiments", "--preset", "tiny", "--dry-run", "--set", pair])
        experiments = ("set", seen[0])
    except SystemExit:
        experiments = ("refused", "")
    try:
        chapter = ("set", setup(preset="tiny", settings=shlex.join([pair])).rerun_preset)  # as papermill -p passes it
    except ConfigError as err:
        chapter = ("refused", str(err))

    owner = {"": lambda p: p, "model": lambda p: p, "stages": lambda p: p.get(path.rpartition(".")[0]),
             "finetune": lambda p: p.finetune, "sts": lambda p: p.sts}[part]
    assert read(owner(experiments[1]), part) == read(owner(chapter[1]), part) == expected != read(owner(tiny), part)
    assert experiments[1] == chapter[1] == tiny.replace(**{path: expected})
    if part == "finetune":
        assert read(finetune[1], "") == expected and pretrain[0] == "refused"
    else:
        assert finetune[0] == "refused" and "finetune runs one recipe and reads only finetune.*" in finetune[1]
    if part == "model" or path.startswith("stages.bert."):  # the stage pretrain builds from the changed preset
        assert pretrain[1] == arm_config("bert", tiny.replace(**{path: expected}), None)
        assert read(pretrain[1], part) == expected
    elif part == "stages":  # another stage's: pretrain --method mlm from scratch trains by stages.bert
        assert pretrain[0] == "refused" and "trains by stages.bert; set stages.bert." in pretrain[1]
    elif part in ("sts", ""):
        assert pretrain[0] == "refused" and "pretrain runs one pre-training stage" in pretrain[1]


def test_one_set_dialect_refuses_what_the_command_does_not_read():
    """A path the command does not read is refused in one line naming it and the fix, not ignored."""
    for argv, match in ((["pretrain", "--method", "mlm", "--set", "epochs_round1=2"],
                         "finetune.epochs_round1: pretrain runs one pre-training stage, which does not read it; "
                         "set it for experiments"),
                        (["pretrain", "--method", "mlm", "--set", "stages.condenser.max_steps=5"],
                         "stages.condenser.max_steps: the mlm stage from scratch trains by stages.bert; set "
                         "stages.bert.max_steps"),
                        (["pretrain", "--method", "mlm", "--init", "x", "--set", "stages.bert.max_steps=5"],
                         "the mlm stage continuing --init trains by stages.condenser"),
                        # a Condenser trains by its own stage, from scratch as when continuing
                        (["pretrain", "--method", "condenser", "--set", "stages.bert.lr=1e-3"],
                         "the condenser stage from scratch trains by stages.condenser; set stages.condenser.lr"),
                        (["pretrain", "--method", "mlm", "--set", "s2_steps=5"], "unknown setting 's2_steps'"),
                        (["pretrain", "--method", "mlm", "--set", "nonsense=1"], "unknown setting 'nonsense'"),
                        (["experiments", "--set", "lr=1"], "ambiguous"),  # pretrain reads it as its stage's
                        (["finetune", "--init", "x", "--output-dir", "o", "--data", "scifact", "--set",
                          "stages.bert.max_steps=5"], "finetune runs one recipe and reads only finetune.*.*finetune.max_steps"
                         ".*belongs to pretrain or experiments$"),
                        (["finetune", "--init", "x", "--output-dir", "o", "--set", "sts.lr=5"],
                         "sts.lr belongs to experiments$"),
                        (["pretrain", "--method", "condenser", "--set", "finetune.lr=1"], "set it for experiments"),
                        (["finetune", "--init", "x", "--output-dir", "o", "--set", "finetune.seed=1"],
                         "finetune.seed is no setting of finetune: a run.s seed comes from finetune --seed"),
                        (["finetune", "--init", "x", "--output-dir", "o", "--set", "finetune.grad_accum=2"],
                         "the contrastive loss needs the whole batch: set chunk_size")):
        with pytest.raises(ConfigError, match=match):
            args = build_parser().parse_args(argv)
            stage_config_from_args(args) if argv[0] == "pretrain" else recipe_from_args(args)


def test_experiments_and_a_chapter_refuse_a_path_the_protocol_does_not_read(capsys):
    """The protocol runs each arm's stages on the arm's pre-training seed: the continuing stages'
    own seeds are read by ``pretrain`` only, and an unknown name is refused naming the paths."""
    assert ("--set stages.condenser.seed: the protocol pre-trains each arm's stages on the arm's seed; set "
            "stages.bert.seed") in one_error_line(
        cli(["experiments", "--preset", "micro", "--set", "stages.condenser.seed=3", "--dry-run"], capsys))
    assert "--set s3_steps=3: unknown setting 's3_steps'; paths start with" in one_error_line(
        cli(["experiments", "--preset", "micro", "--set", "s3_steps=3", "--dry-run"], capsys))
    from condenser_lite.book import setup

    with pytest.raises(ConfigError, match="parameter 'settings' stages.cocondenser.seed: the protocol pre-trains"):
        setup(preset="micro", settings="stages.cocondenser.seed=1")
    with pytest.raises(ConfigError, match="parameter 'settings' stage.lr=1: stage.lr is no path"):
        setup(preset="micro", settings="stage.lr=1")
    with pytest.raises(ConfigError, match="parameter 'settings' changes a re-run's preset; pass the preset"):
        setup(settings="finetune.lr=1")
    with pytest.raises(ConfigError, match="parameter 'settings' lr=1: setting 'lr' is ambiguous"):
        setup(preset="micro", settings="lr=1")


@pytest.mark.parametrize("method, pair", [("condenser", "stages.condenser.chunk_size=8"),
                                          ("condenser", "stages.condenser.min_span=4"),
                                          ("condenser", "stages.condenser.mlm_weight=0.5"),
                                          ("condenser", "stages.condenser.co_weight=0.5"),
                                          ("mlm", "skip_from=2"), ("mlm", "stages.bert.detach_early=true"),
                                          ("mlm", "stages.bert.head_cls=constant"), ("mlm", "stages.bert.head=load"),
                                          ("cocondenser", "stages.cocondenser.grad_accum=2")])
def test_a_stage_setting_its_method_does_not_read_is_refused(method, pair):
    """coCondenser's settings change a Condenser stage's cache key and nothing it computes, the
    head's an MLM stage's, accumulation coCondenser's (its contrastive batch is never split):
    refused in one line, so the same computation does not train again."""
    argv = ["pretrain", "--preset", "tiny", "--method", method, *(["--init", "x"] if method == "condenser" else [])]
    with pytest.raises(ConfigError, match=f"{method} stages do not"):
        stage_config_from_args(build_parser().parse_args([*argv, "--set", pair]))
    stage_config_from_args(build_parser().parse_args(["pretrain", "--preset", "tiny", "--method", "cocondenser",
                                                      "--init", "x", "--set", "stages.cocondenser.chunk_size=8"]))


@pytest.mark.parametrize("pairs", [["chunk_size=8", "min_span=4", "mlm_weight=0.5"],
                                   ["stages.cocondenser.chunk_size=8"], ["stages.cocondenser.min_span=4"],
                                   ["stages.condenser.chunk_size=8"], ["stages.condenser.min_span=4"],
                                   ["mlm_weight=0.5"]])
def test_the_condenser_stage_refuses_cocondensers_settings(pairs):
    """``pretrain --method condenser --set chunk_size=8 min_span=4 mlm_weight=0.5``: each is
    either ambiguous (name its path) or a path the Condenser stage does not read; none reaches the
    stage's cache key."""
    argv = ["pretrain", "--preset", "tiny", "--method", "condenser", "--init", "x"] + [a for p in pairs for a in ("--set", p)]
    with pytest.raises(ConfigError, match="ambiguous|trains by stages.condenser|condenser stages do not|"
                       "only cocondenser stages read .*the condenser stage continuing --init does not"):
        stage_config_from_args(build_parser().parse_args(argv))


def test_one_set_dialect_finetune_reads_the_experiments_keys():
    """``finetune --set finetune.lr=...`` is the recipe ``experiments --set finetune.lr=...`` would
    fine-tune with; a bare name that one path ends in (``train_n_passages``) stands for it."""
    def recipe(*pairs):
        return recipe_from_args(build_parser().parse_args(["finetune", "--init", "x", "--output-dir", "o", "--data", "scifact", "--preset", "tiny",
                                                  *[a for p in pairs for a in ("--set", p)]]))

    dotted, plain = recipe("finetune.lr=0.0002", "finetune.train_n_passages=4"), recipe("finetune.lr=0.0002", "train_n_passages=4")
    changed = apply_settings(get_preset("tiny"), parse_settings(["finetune.lr=0.0002", "finetune.train_n_passages=4"]))
    assert dotted == plain == changed.finetune


def test_pretrain_command_paper_preset():
    for method, expected in (("condenser", paper_condenser()), ("cocondenser", paper_cocondenser())):
        args = build_parser().parse_args(["pretrain", "--preset", "paper", "--method", method])
        assert stage_config_from_args(args) == expected  # starts from the published checkpoint


def test_preset_settings_are_paths():
    preset = apply_settings(get_preset("micro"), parse_settings(["finetune.lr=2e-4", "stages.bert.max_steps=5",
                                                                 "seeds=[0, 1, 2]", "model.tokenizer=t"]))
    assert (preset.finetune.lr, preset.stages.bert.max_steps, preset.seeds, preset.model.tokenizer) == (2e-4, 5, (0, 1, 2), "t")
    with pytest.raises(ConfigError, match="stages.cocondenser.chunk_size or finetune.chunk_size"):
        parse_settings(["chunk_size=4"])  # every owner named


@pytest.mark.protocol  # pre-trains a stage
@pytest.mark.skipif(not MIRROR.exists(), reason="local data mirror not found")
def test_pretrain_command_runs_a_stage(tmp_path, monkeypatch, capsys):
    from condenser_lite.data.tokenizer import train_wordpiece

    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    tok = tmp_path / "tok"
    train_wordpiece(["the cat sat on the mat. a dog ran."] * 50, vocab_size=200, save_dir=tok)
    main(["pretrain", "--method", "mlm", "--data-dir", str(MIRROR), "--output-dir", str(tmp_path / "out"),
          "--set", f"tokenizer={tok}", "--set", "stages.bert.max_steps=1", "--set", "stages.bert.batch_size=2",
          "--set", "hidden_size=32", "--set", "num_attention_heads=2", "--set", "intermediate_size=64",
          "--set", "stages.bert.corpus_limit=5",
          "--set", "model.max_len=32"])
    assert is_done(tmp_path / "out")
    assert str(tmp_path / "out") in capsys.readouterr().out


@pytest.mark.protocol  # fine-tunes two rounds
def test_retrieval_commands_end_to_end_on_the_tiny_fixture(tmp_path, capsys, monkeypatch):
    """finetune (two rounds) -> search -> evaluate -> encode, as a full-scale user types them."""
    import json

    import numpy as np
    from tiny_checkpoint import make_checkpoint

    from condenser_lite.training import finetune

    texts = [json.loads(line)["text"] for line in (FIXTURE / "msmarco-passage" / "corpus.jsonl").open()]
    init = make_checkpoint(tmp_path / "init", texts * 3)
    common = ["--data", "msmarco", "--data-dir", str(FIXTURE)]
    encodings = []
    real = finetune.encode_corpus
    monkeypatch.setattr(finetune, "encode_corpus", lambda *a, **kw: encodings.append(kw) or real(*a, **kw))
    main(["finetune", "--init", str(init), "--output-dir", str(tmp_path / "ft"), "--rounds", "2", "--set", "finetune.max_steps=2",
          "--set", "finetune.batch_size=2", "--set", "train_n_passages=2", "--set", "finetune.mixed_precision=no", *common])
    assert (tmp_path / "ft" / "round2" / "config.json").exists()
    # round 2 mined over the corpus encoded by round 1's model into a float16 memmap (MS MARCO's
    # recipe), a scratch file gone once mining is done
    assert [(kw["dtype"], kw["path"]) for kw in encodings] == [("float16", tmp_path / "ft" / "round2" / "mining_embeddings.npy")]
    assert not (tmp_path / "ft" / "round2" / "mining_embeddings.npy").exists()
    capsys.readouterr()
    # MS MARCO's metrics by default (MRR@10, R@1000): the run is as deep as R@1000 reads
    main(["search", "--model", str(tmp_path / "ft" / "round2"), "--split", "dev", "--out", str(tmp_path / "dev.trec"),
          *common])
    searched = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(searched) == {"RR@10", "R@1000"}
    lines = (tmp_path / "dev.trec").read_text().splitlines()
    assert len(lines) == 3 * len(texts)  # 3 dev queries x the whole 12-passage corpus (< 1000)
    main(["evaluate", "--run", str(tmp_path / "dev.trec"), "--split", "dev", *common])
    evaluated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert searched == evaluated
    main(["encode", "--model", str(tmp_path / "ft" / "round2"), "--out", str(tmp_path / "e.npz"), "--split", "dev", *common])
    saved = np.load(tmp_path / "e.npz")
    assert saved["embeddings"].shape == (len(texts), 32) and len(saved["ids"]) == len(texts)


def test_evaluate_refuses_a_cutoff_deeper_than_the_run(tmp_path, capsys):
    """A top-5 run scored at R@10 would silently be R@5: refused, naming the fix."""
    common = ["--data", "msmarco", "--data-dir", str(FIXTURE), "--split", "dev"]
    run = tmp_path / "top5.trec"
    run.write_text("".join(f"d1 Q0 p{i} {i + 1} {10.0 - i} x\n" for i in range(5)))
    main(["evaluate", "--run", str(run), "--metrics", "RR@5", *common])
    assert "RR@5" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="^1$"):  # a known error (ConfigError): one line on stderr
        main(["evaluate", "--run", str(run), "--metrics", "RR@5", "R@10", *common])
    assert "at most 5 documents per query, but R@10 reads the top 10: search again with --k 10" in \
        capsys.readouterr().err
    # a run that ranks the whole (12-passage) corpus is complete at any cutoff
    run.write_text("".join(f"d1 Q0 p{i} {i + 1} {12.0 - i} x\n" for i in range(12)))
    main(["evaluate", "--run", str(run), "--metrics", "RR@10", "R@1000", *common])


def test_help_lists_the_presets_of_the_registry():
    """The presets named in `--help` are the registry's, whatever it holds."""
    from condenser_lite.reproduction.configuration.presets import ALIASES, PRESETS

    parser = build_parser()
    top = " ".join(parser.format_help().split())
    subs = parser._subparsers._group_actions[0].choices
    finetune = " ".join(subs["finetune"].format_help().split())
    for name in [*PRESETS, *ALIASES]:
        assert name in top and name in finetune
    assert "micro, tiny, small, colab, paper (alias full)" in top
    assert "paper/full" not in top and "(micro | tiny | paper)" not in finetune


@pytest.mark.parametrize("setting", ["stages.bert.max_steps=0", "stages.bert.grad_accum=0"])
def test_a_stage_of_no_updates_is_refused_before_the_estimate(setting, capsys):
    """``--set stages.bert.max_steps=0`` would be estimated as nothing to do and fail after loading the data:
    refused at once, one line naming the setting."""
    with pytest.raises(SystemExit, match="^1$"):
        main(["pretrain", "--preset", "small", "--method", "mlm", "--set", setting, "--dry-run"])
    captured = capsys.readouterr()
    name = setting.split("=")[0].rpartition(".")[2]
    assert f"StageRecipe.{name}=0 must be > 0" in captured.err and "estimate" not in captured.out


def mirror_with(beir: Path, tmp_path: Path, name: str, content: bytes) -> Path:
    """A copy of the mini mirror with ``scifact/<name>`` replaced by ``content``."""
    root = tmp_path / "mirror"
    shutil.copytree(beir, root)
    (root / "scifact" / name).write_bytes(content)
    return root


def corpus_bytes(beir: Path) -> bytes:
    return (beir / "scifact" / "corpus.jsonl").read_bytes()


def truncated_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    data = (dst / "model.safetensors").read_bytes()
    (dst / "model.safetensors").write_bytes(data[: len(data) // 2])
    return dst


CASES = {
    "corpus cut mid-line": (lambda b, r, t: ["evaluate", "--run", t / "x.trec", "--data-dir",
                                             mirror_with(b, t, "corpus.jsonl", corpus_bytes(b)[:-40])],
                            "corpus.jsonl (ArrowInvalid: JSON parse error"),
    "empty queries file": (lambda b, r, t: ["search", "--model", r, "--data-dir", mirror_with(b, t, "queries.jsonl", b"")],
                           "queries.jsonl is empty"),
    "non-UTF-8 byte": (lambda b, r, t: ["search", "--model", r, "--data-dir", mirror_with(
        b, t, "corpus.jsonl", corpus_bytes(b).replace(b"Volcano", b"Volc\xffno"))], "corpus.jsonl:3 is not UTF-8 text"),
    "unknown data set": (lambda b, r, t: ["finetune", "--init", r, "--output-dir", t / "ft", "--data", "nosuch"],
                         "unknown data set 'nosuch'"),
    "split without labels": (lambda b, r, t: ["evaluate", "--run", t / "x.trec", "--split", "dev", "--data-dir", b],
                             "data set 'scifact' has no 'dev' split (qrels for: ['test', 'train']); pass one of those "
                             "with --split"),
    "missing model folder": (lambda b, r, t: ["search", "--model", t / "no" / "such", "--data-dir", b],
                             "no model folder"),
    "weights cut short": (lambda b, r, t: ["search", "--model", truncated_copy(r, t / "cut"), "--data-dir", b],
                          "as AutoModel (SafetensorError"),
    "--set max_steps=abc": (lambda b, r, t: ["pretrain", "--method", "mlm", "--set", "stages.bert.max_steps=abc"],
                            "--set stages.bert.max_steps=abc: stages.bert.max_steps takes an integer"),
    "--set finetune.batch_size=eight": (lambda b, r, t: ["finetune", "--init", r, "--output-dir", t / "ft", "--set",
                                                         "finetune.batch_size=eight"],
                                        "--set finetune.batch_size=eight: finetune.batch_size takes an integer"),
    "heads that do not divide the width": (lambda b, r, t: ["pretrain", "--preset", "micro", "--method", "mlm",
                                                            "--set", "num_attention_heads=3", "--dry-run"],
                                           "hidden_size=32 must be divisible by num_attention_heads=3"),
    "a block longer than any model's": (lambda b, r, t: ["pretrain", "--preset", "micro", "--method", "mlm",
                                                        "--set", "model.max_len=640000", "--dry-run"],
                                        "max_len=640000 is beyond the 8,192 positions a block may have"),
    "a repeated pre-training seed": (lambda b, r, t: ["experiments", "--preset", "micro", "--set",
                                                      "pretrain_seeds=[1, 1]", "--dry-run"],
                                     "must be None (one seed: stages.bert.seed) or distinct seeds"),
    "a temperature of 0": (lambda b, r, t: ["finetune", "--init", r, "--output-dir", t / "ft", "--set",
                                            "finetune.temperature=0"],
                           "FinetuneConfig.temperature=0.0 is invalid: use a value > 0, or None"),
    "a weight decay of nan": (lambda b, r, t: ["finetune", "--init", r, "--output-dir", t / "ft", "--set",
                                               "finetune.weight_decay=nan"],
                              "finetune.weight_decay=nan: finetune.weight_decay takes a finite number"),
    "a path given twice": (lambda b, r, t: ["finetune", "--init", r, "--output-dir", t / "ft", "--set",
                                            "finetune.lr=1e-4", "--set", "finetune.lr=2e-4"],
                           "--set finetune.lr=2e-4: finetune.lr is set twice; give it once"),
    "a seed that is no whole number": (lambda b, r, t: ["experiments", "--preset", "micro", "--set", "seeds=[0.5]",
                                                        "--dry-run"],
                                       "--set seeds=[0.5]: seeds takes a list of integers"),
    "a tokenizer larger than the embeddings": (lambda b, r, t: ["pretrain", "--preset", "micro", "--method", "mlm",
                                                                "--init", foreign_tokenizer(r, t), "--dry-run"],
                                               "has 30522 tokens, but the model's embeddings hold"),
}


def foreign_tokenizer(checkpoint, tmp_path):
    """A copy of ``checkpoint`` whose tokenizer is the shipped real model's (30,522 tokens, far
    more than its embedding table)."""
    import shutil

    from condenser_lite.utils.loading import shipped_model

    folder = tmp_path / "foreign"
    shutil.copytree(checkpoint, folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).unlink(missing_ok=True)
        if (Path(shipped_model()) / name).is_file():
            shutil.copy(Path(shipped_model()) / name, folder / name)
    return folder


@pytest.mark.parametrize("case", list(CASES))
def test_cli_names_the_cause_in_one_line(case, beir, retriever, tmp_path, capsys):
    make_args, expected = CASES[case]
    (tmp_path / "x.trec").write_text("d1 Q0 p1 1 1.0 x\n")
    line = one_error_line(cli(make_args(beir, retriever, tmp_path), capsys))
    assert expected in line


def test_run_tag_is_a_short_model_name_not_a_path(beir, retriever, tmp_path, capsys):
    """A run's tag column is the model folder's name, not its path, or `--tag`; a tag of two words is
    refused in one line."""
    run = tmp_path / "run.trec"
    common = ["search", "--model", retriever, "--out", run, "--data-dir", beir, "--p-max-len", "64"]
    assert cli(common, capsys)[0] == 0
    assert {line.split()[5] for line in run.read_text().splitlines()} == {retriever.name}
    assert cli([*common, "--tag", "cocondenser-r2"], capsys)[0] == 0
    assert {line.split()[5] for line in run.read_text().splitlines()} == {"cocondenser-r2"}
    assert "--tag 'my model': a run tag is one word" in one_error_line(cli([*common, "--tag", "my model"], capsys))


def test_an_unknown_finetune_preset_is_one_line(beir, retriever, tmp_path, capsys):
    """`finetune --preset nosuch` is refused in one line listing the presets and the recipes."""
    line = one_error_line(cli(["finetune", "--init", retriever, "--data-dir", beir, "--preset", "nosuch",
                               "--output-dir", tmp_path / "ft"], capsys))
    assert line == ("error: --preset nosuch: no such preset or recipe; choose one of micro, tiny, small, colab, paper "
                    "(alias full) or a recipe: msmarco, nq, pretrained")


def test_a_condenser_head_deeper_than_the_init_is_one_line(retriever, tmp_path, capsys):
    """A Condenser head that reads a layer the `--init` does not have is refused in one line naming
    the fix, before the estimate."""
    line = one_error_line(cli(["pretrain", "--method", "condenser", "--preset", "micro", "--init", retriever,
                               "--output-dir", tmp_path / "p"], capsys))
    assert line == (f"error: --init {retriever} has 2 layers, but the Condenser head reads layer skip_from=2; pass "
                    "--set model.skip_from=1 (or lower), or an --init with more layers")


def _not_reached(*args, **kwargs):
    raise AssertionError("the command went on past a bad --out")


def test_an_out_path_that_cannot_be_written_is_refused_first(beir, retriever, tmp_path, monkeypatch, capsys):
    """An output path under a file (or in a folder without write permission) is refused in one line
    by `experiments` (with and without `--dry-run`), `merge`, `search`, `encode`, `finetune` and
    `pretrain`, before anything is estimated, encoded or trained (the steps after the check are
    replaced by `_not_reached`)."""
    from condenser_lite.reproduction.runs import estimate, merge, protocol

    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    for module, name in ((protocol, "cached_results"), (protocol, "run_protocol"), (estimate, "estimate_protocol"),
                         (estimate, "estimate_stage"), (merge, "read_part")):
        monkeypatch.setattr(module, name, _not_reached)
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file where a folder should be")
    cases = {
        ("experiments", "--preset", "micro", "--out", blocker / "micro.json"): "--out",
        ("experiments", "--preset", "micro", "--dry-run", "--out", blocker / "micro.json"): "--out",
        ("merge", "a.json", "b.json", "--out", blocker / "small.json"): "--out",
        ("search", "--model", retriever, "--data-dir", beir, "--p-max-len", "64", "--out", blocker / "r.trec"): "--out",
        ("encode", "--model", retriever, "--data-dir", beir, "--out", blocker / "e.npz"): "--out",
        ("finetune", "--init", retriever, *FINETUNE, "--data-dir", beir, "--output-dir", blocker / "ft"): "--output-dir",
        ("pretrain", "--preset", "micro", "--output-dir", blocker / "p"): "--output-dir",
    }
    for args, flag in cases.items():
        line = one_error_line(cli(list(args), capsys))
        assert line.startswith(f"error: {flag} {blocker}/") and f"{blocker} is a file, not a folder" in line, line
    if os.geteuid() != 0:  # root writes into a read-only folder anyway
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        line = one_error_line(cli(["experiments", "--preset", "micro", "--out", locked / "micro.json"], capsys))
        assert f"{locked} cannot be written" in line


def test_seed_lists_and_worker_counts_are_checked_where_they_enter():
    import argparse

    from condenser_lite.utils.cli_args import positive_int, seed_list

    assert seed_list("42,43,44") == [42, 43, 44] and seed_list("0") == [0]
    for bad in ("", "42,,43", "abc", "-1", "1.5"):
        with pytest.raises(ConfigError, match="give at least one seed"):
            seed_list(bad)
    assert positive_int("2") == 2
    for bad in ("0", "-3", "two"):
        with pytest.raises(argparse.ArgumentTypeError, match="at least 1"):
            positive_int(bad)


def test_lr_reaches_the_optimizer_from_the_command_line_through_no_copy(tokenizer_dir, tmp_path, monkeypatch):
    """``--set stages.bert.lr`` lands in the stage the command builds, that stage object itself is
    the loop's config (no ``TrainConfig`` built from it), and AdamW starts from that rate; a
    fine-tuning round is the recipe, with only its updates and seed replaced."""
    import dataclasses

    import torch

    import condenser_lite.training.pretraining as pretraining
    from condenser_lite.training.finetune import FinetuneConfig, round_config

    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    args = build_parser().parse_args(["pretrain", "--preset", "micro", "--method", "mlm", "--set",
                                      "stages.bert.lr=1.5e-4"])
    stage = dataclasses.replace(stage_config_from_args(args), max_steps=1, heldout_fraction=None,
                                model=dataclasses.replace(get_preset("micro").model, tokenizer=tokenizer_dir))
    seen = {}
    real_train = pretraining.train

    def spy_train(model, data, cfg, **kw):
        seen["cfg"] = cfg
        return real_train(model, data, cfg, **kw)

    class SpyAdamW(torch.optim.AdamW):
        def __init__(self, params, lr, **kw):
            seen["lr"] = lr
            super().__init__(params, lr=lr, **kw)

    monkeypatch.setattr(pretraining, "train", spy_train)
    monkeypatch.setattr(torch.optim, "AdamW", SpyAdamW)
    pretraining.pretrain(stage, output_dir=tmp_path / "stage", data_dir=str(MIRROR))
    assert seen["cfg"] is stage and seen["lr"] == 1.5e-4

    recipe = recipe_from_args(build_parser().parse_args(
        ["finetune", "--init", "x", "--output-dir", "o", "--preset", "tiny", "--set", "finetune.lr=2.5e-4"]))
    rnd = round_config(recipe, 1, n_queries=100, seed=3)
    assert isinstance(rnd, FinetuneConfig) and rnd.lr == 2.5e-4
    assert dataclasses.replace(rnd, max_steps=recipe.max_steps, seed=recipe.seed) == recipe


@pytest.mark.parametrize("args, said", [
    (["search", "--model", "m", "--batch-size", "-1"], "--batch-size: '-1': give a whole number of at least 1"),
    (["encode", "--model", "m", "--out", "e", "--batch-size", "0"], "--batch-size: '0'"),
    (["search", "--model", "m", "--q-max-len", "1"], "--q-max-len: '1': give a whole number of tokens of at least 3"),
    (["search", "--model", "m", "--p-max-len", "-1"], "--p-max-len: '-1'"),
    (["finetune", "--init", "m", "--output-dir", "o", "--train-size", "0"], "--train-size: '0'"),
    (["pretrain", "--min-span", "0"], "--min-span: '0'"),
])
def test_counts_and_lengths_are_refused_where_they_enter(args, said, capsys):
    """A batch of -1 made every embedding zero, a length of 1 was not truncated at all: both
    are refused by the parser, before any model loads."""
    code, _, err = cli(args, capsys)
    assert code == 2 and said in err and "Traceback" not in err


def test_a_setting_given_by_its_flag_and_by_set_is_refused(capsys):
    """Which of two values wins is not for a reader to guess: `--seeds` against `--set seeds`,
    `--task` against `--set task`, `--min-span` and `--corpus` against their stage's paths."""
    for args, said in [
            (["experiments", "--preset", "micro", "--seeds", "0,1", "--set", "seeds=[2,3]", "--dry-run"], "--seeds and --set seeds"),
            (["experiments", "--preset", "micro", "--task", "scifact", "--set", "task=nq", "--dry-run"], "--task and --set task"),
            (["pretrain", "--preset", "small", "--method", "cocondenser", "--init", "x", "--min-span", "6",
              "--set", "stages.cocondenser.min_span=16", "--dry-run"], "--min-span and --set stages.cocondenser.min_span"),
            (["pretrain", "--preset", "small", "--method", "mlm", "--corpus", "general",
              "--set", "stages.bert.corpus=wikipedia", "--dry-run"], "--corpus and --set stages.bert.corpus")]:
        assert said in one_error_line(cli(args, capsys))


def test_an_out_path_is_no_folder_and_no_input_of_the_command(beir, tmp_path, capsys):
    """`search --out` onto the corpus it reads would overwrite it; a folder as a file path is named;
    `mechanism --merge` will not rewrite a file that is not its study, nor re-judge a file that is
    not there."""
    from condenser_lite.cli import check_writable

    with pytest.raises(ConfigError, match="one of this command's input files"):
        check_writable("--out", Path(beir) / "scifact" / "corpus.jsonl", inputs=Path(beir) / "scifact")
    with pytest.raises(ConfigError, match="is a folder; give a file path"):
        check_writable("--out", tmp_path)
    check_writable("--out", tmp_path / "run.trec", inputs=Path(beir) / "scifact")  # elsewhere is fine
    protocol = tmp_path / "small.json"
    protocol.write_text('{"preset": {"name": "small"}}')
    for out, said in [(protocol, "is a JSON file that is no results file of this library, not the mechanism study's"),
                      (tmp_path / "none.json", "no such file"),
                      (tmp_path, "a folder")]:
        assert said in one_error_line(cli(["mechanism", "--merge", "--out", out], capsys))
    assert protocol.read_text() == '{"preset": {"name": "small"}}'


def test_a_corpus_whose_text_is_not_a_string_or_a_table_is_refused(tmp_path):
    """A list of paragraphs would have been trained on as its Python text, brackets and quotes;
    a .csv or .tsv as one document per line, header and ids included."""
    from condenser_lite.data.beir import load_documents
    from condenser_lite.utils.errors import SchemaError

    listed = tmp_path / "list.jsonl"
    listed.write_text('{"text": "fine"}\n{"text": ["para 1", "para 2"]}\n')
    with pytest.raises(SchemaError, match="list.jsonl:2: 'text' is a list, not text"):
        load_documents(listed)
    table = tmp_path / "collection.tsv"
    table.write_text("pid\tpassage\n1\tsome text\n")
    with pytest.raises(SchemaError, match="a .tsv file is read as one document per line"):
        load_documents(table)
    fine = tmp_path / "docs.jsonl"
    fine.write_text('{"text": "one"}\n{"title": "t", "text": "two"}\n')
    assert load_documents(fine)["text"] == ["one", "two"]


@pytest.mark.parametrize("change, said", [
    ({"mlm_probability": 1.5}, r"mlm_probability=1.5 must be in \(0, 1\)"),
    ({"mlm_probability": 0.0}, r"mlm_probability=0.0 must be in \(0, 1\)"),
    ({"chunk_size": 0}, "chunk_size=0 must be >= 1"),
    ({"method": "cocondenser", "corpus": "scifact", "min_span": 63}, "min_span=63 must be at most max_len - 2 = 62"),
    ({"method": "condenser", "skip_from": 4}, "skip_from=4: the head reads one of the 4 layers, 0 to 3"),
])
def test_a_stage_that_cannot_run_is_refused_where_it_is_built(change, said):
    """Each of these reached the model or the span sampler and stopped there with a traceback."""
    from condenser_lite.training.pretraining_config import StageConfig

    base = StageConfig().replace(max_len=64, num_hidden_layers=4)
    with pytest.raises(ConfigError, match=said):
        base.replace(**change)
    base.replace(skip_from=4, method="condenser", init="some/checkpoint")  # an --init's own layers decide


def test_an_index_faiss_cannot_build_is_one_line():
    """A factory string faiss cannot parse, or an IVF with more lists than passages."""
    import numpy as np

    from condenser_lite.retrieval.search import FaissIndex

    embs = np.random.default_rng(0).standard_normal((42, 8)).astype(np.float32)
    for spec, said in [("nonsense", "could not parse index string nonsense"),
                       ("IVF4096,Flat", r"Number of training points \(42\)")]:
        with pytest.raises(ConfigError, match=f"index '{spec}': faiss cannot build it for 42 passages of 8 dims.*{said}"):
            FaissIndex(embs, [str(i) for i in range(42)], index_type=spec)


def test_a_setting_only_another_method_reads_is_not_redirected_to_this_stage(capsys):
    """`--method mlm --set stages.cocondenser.chunk_size=8` once advised `stages.bert.chunk_size`,
    which is then refused too: the line says which stages read the setting."""
    line = one_error_line(cli(["pretrain", "--preset", "small", "--method", "mlm", "--set",
                               "stages.cocondenser.chunk_size=8"], capsys))
    assert "only cocondenser stages read chunk_size" in line and "stages.bert.chunk_size" not in line
    line = one_error_line(cli(["pretrain", "--preset", "small", "--method", "mlm", "--set",
                               "stages.condenser.max_steps=8"], capsys))
    assert "set stages.bert.max_steps" in line  # a setting the stage does read: its own path


def test_pretrain_reads_a_bare_field_as_its_one_stages(capsys):
    """A command that trains one stage reads ``max_steps=2`` and ``stage.max_steps=2`` as that
    stage's field (``experiments`` refuses the bare name as ambiguous); a typo of a stage's field is
    answered with the nearest one."""
    for given in ("max_steps=2", "stage.max_steps=2", "stages.bert.max_steps=2"):
        args = build_parser().parse_args(["pretrain", "--preset", "micro", "--method", "mlm", "--set", given])
        assert stage_config_from_args(args).max_steps == 2, given
    args = build_parser().parse_args(["pretrain", "--preset", "micro", "--method", "mlm", "--set", "lr=3e-4"])
    assert stage_config_from_args(args).lr == 3e-4
    with pytest.raises(ConfigError, match="ambiguous"):
        parse_settings(["max_steps=2"])  # elsewhere the bare name names several paths
    line = one_error_line(cli(["pretrain", "--preset", "micro", "--method", "mlm", "--set", "stages.bert.max_step=2",
                               "--dry-run"], capsys))
    assert "unknown setting 'stages.bert.max_step'; did you mean stages.bert.max_steps?" in line


def test_a_condenser_stage_reads_its_own_settings_from_scratch_too():
    """``pretrain --method condenser`` without ``--init`` trains by ``stages.condenser``, as it does
    continuing a checkpoint: the stage is named by its method."""
    for pair in ("stages.condenser.lr=0.003", "lr=0.003", "stage.lr=0.003"):
        cfg = stage_config_from_args(build_parser().parse_args(
            ["pretrain", "--preset", "tiny", "--method", "condenser", "--set", pair, "--set", "max_steps=3"]))
        assert (cfg.method, cfg.init, cfg.lr, cfg.max_steps) == ("condenser", None, 0.003, 3), pair
    assert stage_config_from_args(build_parser().parse_args(["pretrain", "--preset", "tiny", "--method", "condenser"])) \
        == stage_config(get_preset("tiny"), "condenser", None)
    stages = get_preset("tiny").stages
    assert stage_config(get_preset("tiny"), "condenser", None).max_steps == stages.condenser.max_steps \
        != stages.bert.max_steps
