"""No silent wrong results (issue 13): each numbered defect, and the command line's one-line errors.

Every test here failed on the code before the fix (item 4's on the code before commit c805239):
a reused output folder returned another run's result, a folder without tokenizer files was
encoded with 5 tokens, stage caches were keyed by paths, two writers shared a folder, bad run
files were scored, text-less documents passed silently, ``max_steps=2.5`` ran 3 steps, an
incomplete checkpoint was deleted. The data are tiny hand-made mirrors (built here from
``fixtures/tevatron_tiny``) so each command takes about a second.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_checkpoint import make_checkpoint

from condenser_lite.cli import main, parse_overrides
from condenser_lite.data.beir import corpus_columns
from condenser_lite.data.tokenizer import load_tokenizer
from condenser_lite.retrieval.metrics import evaluate_run
from condenser_lite.retrieval.runfiles import read_trec_run
from condenser_lite.training.loop import TrainConfig, train
from condenser_lite.training.pretraining import StageConfig, pretrain
from condenser_lite.utils.errors import CheckpointError, ConfigError, DataSourceError, SchemaError

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).parent / "fixtures" / "tevatron_tiny" / "msmarco-passage"
MIRROR = ROOT.parent / "shared" / "data"
needs_mirror = pytest.mark.skipif(not MIRROR.exists(), reason="local data mirror ../shared/data not found")


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURE / name).open()]


def write_beir(root: Path, ids: dict[str, str] | None = None) -> Path:
    """A 12-document BEIR set in the SciFact mirror layout (6 train, 3 test queries); ``ids``
    renames documents and queries (a qrels field holding a tab is quoted, as csv writes it)."""
    rename = lambda i: (ids or {}).get(i, i)  # noqa: E731
    folder = root / "scifact"
    (folder / "qrels").mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for r in rows("corpus.jsonl"):
            f.write(json.dumps({"_id": rename(r["docid"]), "title": r["title"], "text": r["text"]}) + "\n")
    queries = {"train": rows("train.jsonl"), "test": rows("dev.jsonl")}
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as f:
        for split_rows in queries.values():
            for r in split_rows:
                f.write(json.dumps({"_id": rename(r["query_id"]), "text": r["query"]}) + "\n")
    for split, split_rows in queries.items():
        with (folder / "qrels" / f"{split}.tsv").open("w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f, delimiter="\t", lineterminator="\n")
            writer.writerow(["query-id", "corpus-id", "score"])
            writer.writerows([rename(r["query_id"]), rename(p["docid"]), 1] for r in split_rows
                             for p in r["positive_passages"])
    return root


@pytest.fixture(scope="module")
def beir(tmp_path_factory) -> Path:
    return write_beir(tmp_path_factory.mktemp("beir"))


@pytest.fixture(scope="module")
def retriever(tmp_path_factory) -> Path:
    """A tiny random BERT with its WordPiece, saved as one folder."""
    texts = [f"{r['title']} {r['text']}" for r in rows("corpus.jsonl")] + [r["query"] for r in rows("train.jsonl")]
    return make_checkpoint(tmp_path_factory.mktemp("retriever"), texts * 3)


def cli(args: list, capsys) -> tuple[int, str, str]:
    """Run the command line in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(result: tuple[int, str, str]) -> str:
    """The single ``error: ...`` line of a refused command (exit status 1, no traceback)."""
    code, _, err = result
    assert code == 1, err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    return errors[0]


def perturbed_copy(src: Path, dst: Path) -> Path:
    """``src`` with one weight changed: same files, other content."""
    shutil.copytree(src, dst)
    weights = load_file(dst / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name] + 0.5
    save_file(weights, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


FINETUNE = ["--data", "scifact", "--max-steps", "2", "--set", "batch_size=2", "--set", "train_n_passages=1",
            "--set", "p_max_len=64", "--set", "n_bm25_negatives=3"]


# ---- 1. a reused output folder must hold the same run -------------------------------------------

@pytest.mark.protocol  # fine-tunes (three short runs)
def test_reused_finetune_folder_must_come_from_the_same_init(beir, retriever, tmp_path, capsys):
    other = perturbed_copy(retriever, tmp_path / "other")
    out = tmp_path / "ft"
    common = [*FINETUNE, "--data-dir", beir, "--output-dir", out]
    code, _, err = cli(["finetune", "--init", retriever, *common], capsys)
    assert code == 0, err
    first = load_file(out / "model.safetensors")

    line = one_error_line(cli(["finetune", "--init", other, *common], capsys))
    assert "init: checkpoint" in line and "--restart" in line  # names the differing field and the way out
    assert all(torch.equal(first[k], v) for k, v in load_file(out / "model.safetensors").items())
    code, _, err = cli(["finetune", "--init", retriever, *common], capsys)  # the same run: reused, and said so
    assert code == 0 and "reusing the finished run" in err

    assert cli(["finetune", "--init", other, *common, "--restart"], capsys)[0] == 0
    assert not all(torch.equal(first[k], v) for k, v in load_file(out / "model.safetensors").items())


def tiny_stage(tokenizer_dir: str, **changes) -> StageConfig:
    base = dict(tokenizer=tokenizer_dir, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                intermediate_size=64, max_len=64, batch_size=4, max_steps=1, corpus_limit=20, save_every=None)
    return StageConfig(**{**base, **changes})


@needs_mirror
def test_pretrain_into_another_stages_folder_is_refused(tokenizer_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    folder = pretrain(tiny_stage(tokenizer_dir, method="condenser"), output_dir=tmp_path / "cd", data_dir=MIRROR)
    settings = ["--set", f"tokenizer={tokenizer_dir}", "--set", "hidden_size=32", "--set", "num_attention_heads=2",
                "--set", "intermediate_size=64", "--set", "batch_size=4", "--set", "max_steps=1",
                "--set", "corpus_limit=20", "--data-dir", MIRROR, "--output-dir", folder]
    line = one_error_line(cli(["pretrain", "--method", "mlm", *settings], capsys))
    assert "method: saved 'condenser' vs now 'mlm'" in line
    assert (folder / "condenser_head.pt").exists()  # left as it was
    (folder / "pretrain_config.json").unlink()  # now a model that no finished stage claims: not overwritten
    with pytest.raises(CheckpointError, match="no pretrain_config.json"):
        pretrain(tiny_stage(tokenizer_dir, method="condenser"), output_dir=folder, data_dir=MIRROR)


# ---- 2. a model folder without its tokenizer ----------------------------------------------------

def test_model_folder_without_tokenizer_files_is_refused(beir, retriever, tmp_path, capsys):
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(retriever / name, bare / name)
    with pytest.raises(CheckpointError, match=f"tokenizer in {bare} cannot encode ordinary text"):
        load_tokenizer(bare)
    for command in (["search", "--model", bare], ["encode", "--model", bare, "--out", tmp_path / "e.npz"]):
        line = one_error_line(cli([*command, "--data-dir", beir, "--p-max-len", "64"], capsys))
        assert str(bare) in line and "tokenizer files" in line
    assert load_tokenizer(retriever)("a plain sentence")["input_ids"]  # a complete folder loads


# ---- 3. stage caches keyed by content -----------------------------------------------------------

@needs_mirror
def test_stage_cache_follows_the_weights_at_init_and_the_data(tokenizer_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CONDENSER_LITE_DATA", str(MIRROR))
    bert = pretrain(tiny_stage(tokenizer_dir, method="mlm"))
    init = tmp_path / "runs" / "bert"  # a user's folder (no stage record): only its files say what it is
    shutil.copytree(bert, init, ignore=shutil.ignore_patterns("train", "pretrain_config.json", ".lock"))
    cfg = tiny_stage(tokenizer_dir, method="condenser", init=str(init))
    first = pretrain(cfg)

    shutil.rmtree(init)  # replace the files at that path with other weights
    shutil.copytree(pretrain(tiny_stage(tokenizer_dir, method="mlm", seed=1)), init,
                    ignore=shutil.ignore_patterns("train", "pretrain_config.json", ".lock"))
    second = pretrain(cfg)
    assert second != first
    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert not all(torch.equal(a[k], b[k]) for k in a)

    # another copy of the data: one file changed -> another stage; a mirror that is not there -> refused
    other = tmp_path / "mirror"
    shutil.copytree(MIRROR / "enwiki-sample", other / "enwiki-sample")
    (other / "wikitext-2-tokenized").symlink_to(MIRROR / "wikitext-2-tokenized")
    with (other / "enwiki-sample" / "lee_background.cor").open("a") as f:
        f.write("One more news article about the weather, added to change the corpus.\n")
    mlm = tiny_stage(tokenizer_dir, method="mlm")
    assert pretrain(mlm, data_dir=other) != bert
    monkeypatch.setenv("CONDENSER_LITE_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(DataSourceError, match="nowhere"):
        pretrain(mlm)


# ---- 4. identical runs, identical weights -------------------------------------------------------

def run_module(args: list, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "condenser_lite", *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def child_env(tmp_path: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "CONDENSER_LITE_CACHE": str(tmp_path / "cache"),
            "CONDENSER_LITE_DATA": str(MIRROR), "OMP_NUM_THREADS": "1"}


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    out = dict(load_file(folder / "model.safetensors"))
    out.update({f"head/{k}": v for k, v in torch.load(folder / "condenser_head.pt", weights_only=True).items()})
    return out


@needs_mirror
def test_two_identical_pretrain_commands_give_identical_weights(tokenizer_dir, tmp_path):
    """Separate processes, so torch's per-process start-up seed would show: a Condenser from
    scratch, and a fresh Condenser head on an --init."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    init = tmp_path / "init"
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(vocab_size=600, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                               intermediate_size=64, max_position_embeddings=64)).save_pretrained(init)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(init)
    settings = ["pretrain", "--method", "condenser", "--set", f"tokenizer={tokenizer_dir}", "--set", "hidden_size=32",
                "--set", "num_attention_heads=2", "--set", "intermediate_size=64", "--set", "batch_size=4",
                "--set", "corpus_limit=20", "--set", "max_steps=1"]
    # each process runs both commands (one start-up, two fresh initialisations), as `python -m
    # condenser_lite pretrain ...` would one after the other
    script = "import sys, json; from condenser_lite.cli import main; [main(a) for a in json.loads(sys.argv[1])]"
    procs = []
    for i in (1, 2):
        commands = [[*settings, "--output-dir", str(tmp_path / f"scratch{i}")],
                    [*settings, "--init", str(init), "--output-dir", str(tmp_path / f"head{i}")]]
        procs.append(subprocess.Popen([sys.executable, "-c", script, json.dumps(commands)], cwd=ROOT,
                                      env=child_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    for name in ("scratch", "head"):
        a, b = tensors(tmp_path / f"{name}1"), tensors(tmp_path / f"{name}2")
        assert a.keys() == b.keys() and len(a) > 70
        assert [k for k in a if not torch.equal(a[k], b[k])] == []


# ---- 5. one writer per output folder ------------------------------------------------------------

WAITER = """
import sys
from condenser_lite.utils.cache import output_lock
with output_lock(sys.argv[1]):
    print("in", flush=True)
"""


def test_a_second_process_waits_for_the_lock(tmp_path):
    from condenser_lite.utils.cache import output_lock

    with output_lock(tmp_path / "out"):
        child = subprocess.Popen([sys.executable, "-c", WAITER, str(tmp_path / "out")], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        message = child.stderr.readline()  # blocks until the child reports that it waits
        assert "out is being written by process" in message and "waiting" in message
        time.sleep(0.5)
        assert child.poll() is None  # still waiting while this process holds the lock
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0 and out == "in\n"


@needs_mirror
def test_two_identical_pretrain_commands_at_once(tokenizer_dir, tmp_path):
    out = tmp_path / "stage"
    args = ["pretrain", "--method", "mlm", "--set", f"tokenizer={tokenizer_dir}", "--set", "hidden_size=32",
            "--set", "num_attention_heads=2", "--set", "intermediate_size=64", "--set", "batch_size=4",
            "--set", "corpus_limit=20", "--set", "max_steps=12", "--set", "save_every=3", "--output-dir", out]
    procs = [run_module(args, child_env(tmp_path)) for _ in range(2)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    steps = [json.loads(line)["step"] for line in (out / "train" / "log.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 13))  # trained once, not twice into one log
    assert sum("reusing the pre-trained stage" in e for e in errs) == 1


# ---- 6. evaluate checks its inputs --------------------------------------------------------------

def test_evaluate_refuses_bad_runs_and_labels(beir, retriever, tmp_path, capsys):
    run = tmp_path / "run.trec"
    common = ["--data-dir", beir, "--metrics", "nDCG@10", "RR@10"]
    code, searched, _ = cli(["search", "--model", retriever, "--out", run, "--k", "10", "--p-max-len", "64", *common],
                            capsys)
    assert code == 0
    lines = run.read_text().splitlines()
    assert cli(["evaluate", "--run", run, *common], capsys)[1] == searched  # the good run scores as searched

    def evaluate(text: str, data: Path = beir) -> str:
        bad = tmp_path / "bad.trec"
        bad.write_text(text)
        return one_error_line(cli(["evaluate", "--run", bad, "--data-dir", data, "--metrics", "nDCG@10"], capsys))

    assert f"bad.trec:{len(lines) + 1}: query" in evaluate("\n".join([*lines, lines[1]]) + "\n")  # duplicate
    assert "holds no run lines" in evaluate("")
    nan = lines[0].split()
    nan[4] = "nan"
    assert "bad.trec:1: score 'nan' is not finite" in evaluate(" ".join(nan) + "\n")
    assert "not in the corpus" in evaluate(lines[0].replace(lines[0].split()[2], "nosuchdoc") + "\n")
    labels = tmp_path / "labels"  # qrels naming a document the corpus lacks
    shutil.copytree(beir, labels)
    with (labels / "scifact" / "qrels" / "test.tsv").open("a") as f:
        f.write("d1\tnosuchdoc\t1\n")
    assert "not in the corpus" in evaluate(run.read_text(), labels)

    with pytest.raises(SchemaError, match="non-finite"):
        evaluate_run({"q": {"d": 1}}, {"q": {"d": float("nan")}})
    with pytest.raises(SchemaError, match="empty"):
        evaluate_run({"q": {"d": 1}}, {})


# ---- 7. documents without text ------------------------------------------------------------------

def test_documents_without_text_are_counted_and_named():
    docs = [{"_id": f"d{i}", "title": f"title {i}", "text": "some text"} for i in range(10)]
    docs[3]["text"] = ""
    docs[7]["text"] = None
    with pytest.warns(UserWarning, match=r"2 of the corpus's 10 documents have no 'text' \(e.g. ids \['d3', 'd7'\]"):
        corpus_columns(docs)
    for d in docs[:6]:
        d["text"] = ""
    with pytest.raises(SchemaError, match="7 of the corpus's 10 documents have no 'text'"):
        corpus_columns(docs)


# ---- 8. integer settings take integers ----------------------------------------------------------

def test_integer_settings_refuse_fractions(capsys):
    with pytest.raises(ConfigError, match="max_steps takes an integer"):
        parse_overrides(StageConfig(), ["max_steps=2.5"])
    with pytest.raises(ConfigError, match=r"TrainConfig.max_steps=2.5 must be int or None"):
        TrainConfig("unused", max_steps=2.5)
    with pytest.raises(ConfigError, match=r"StageConfig.batch_size=4.0 must be int"):
        StageConfig(batch_size=4.0)
    assert "max_steps takes an integer" in one_error_line(cli(["pretrain", "--set", "max_steps=2.5"], capsys))


# ---- 9. a checkpoint is never deleted unasked ---------------------------------------------------

def regression(n=16):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(3, generator=g), torch.randn(1, generator=g)) for _ in range(n)]


class Regressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 1)

    def forward(self, x, y):
        return {"loss": torch.nn.functional.mse_loss(self.lin(x), y)}


def collate(examples):
    return {"x": torch.stack([e[0] for e in examples]), "y": torch.stack([e[1] for e in examples])}


def crash_in_step(step: int, cfg: TrainConfig) -> None:
    """Train with ``cfg`` until step ``step`` crashes (a checkpoint of the last ``save_every`` stays)."""
    calls = {"n": 0}

    def crashing(examples):
        calls["n"] += 1
        if calls["n"] == step:
            raise RuntimeError(f"simulated crash in step {step}")
        return collate(examples)

    with pytest.raises(RuntimeError, match="simulated"):
        train(Regressor(), regression(), cfg, collate_fn=crashing)


def test_incomplete_or_damaged_checkpoint_is_refused_not_deleted(tmp_path):
    cfg = TrainConfig(str(tmp_path), max_steps=6, batch_size=4, save_every=2, progress=False)
    crash_in_step(5, cfg)
    ckpt = tmp_path / "checkpoint"
    state = (ckpt / "state.json").read_text()
    (ckpt / "state.json").unlink()
    with pytest.raises(CheckpointError, match=f"checkpoint {ckpt} is incomplete: state.json missing"):
        train(Regressor(), regression(), cfg, collate_fn=collate)
    assert (ckpt / "model.pt").exists()  # still there

    (ckpt / "state.json").write_text(state)
    (ckpt / "optimizer.pt").write_bytes((ckpt / "optimizer.pt").read_bytes()[:100])  # cut short
    with pytest.raises(CheckpointError, match="optimizer.pt cannot be read.*--restart"):
        train(Regressor(), regression(), cfg, collate_fn=collate)

    fresh = TrainConfig(str(tmp_path), max_steps=6, batch_size=4, save_every=2, progress=False, resume=False)
    res = train(Regressor(), regression(), fresh, collate_fn=collate)
    assert res.resumed_from is None and res.step == 6  # asked for: starts over


# ---- errors that name their cause: one line each on the command line ----------------------------

def mirror_with(beir: Path, tmp_path: Path, name: str, content: bytes) -> Path:
    """A copy of the mini mirror with ``scifact/<name>`` replaced by ``content``."""
    root = tmp_path / "mirror"
    shutil.copytree(beir, root)
    (root / "scifact" / name).write_bytes(content)
    return root


def corpus_bytes(beir: Path) -> bytes:
    return (beir / "scifact" / "corpus.jsonl").read_bytes()


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
    "--set max_steps=abc": (lambda b, r, t: ["pretrain", "--set", "max_steps=abc"],
                            "--set max_steps=abc: max_steps takes an integer"),
    "--set batch_size=eight": (lambda b, r, t: ["finetune", "--init", r, "--output-dir", t / "ft", "--set",
                                                "batch_size=eight"], "--set batch_size=eight: batch_size takes an integer"),
}


def truncated_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    data = (dst / "model.safetensors").read_bytes()
    (dst / "model.safetensors").write_bytes(data[: len(data) // 2])
    return dst


@pytest.mark.parametrize("case", list(CASES))
def test_cli_names_the_cause_in_one_line(case, beir, retriever, tmp_path, capsys):
    make_args, expected = CASES[case]
    (tmp_path / "x.trec").write_text("d1 Q0 p1 1 1.0 x\n")
    line = one_error_line(cli(make_args(beir, retriever, tmp_path), capsys))
    assert expected in line


@pytest.mark.protocol  # fine-tunes
def test_damaged_training_checkpoint_is_named_and_debug_shows_the_traceback(beir, retriever, tmp_path, capsys):
    args = ["finetune", "--init", retriever, *FINETUNE, "--data-dir", beir, "--output-dir", tmp_path / "ft"]
    assert cli(args, capsys)[0] == 0
    model_pt = tmp_path / "ft" / "checkpoint" / "model.pt"
    model_pt.write_bytes(model_pt.read_bytes()[:64])
    line = one_error_line(cli(args, capsys))
    assert f"{model_pt.parent}: model.pt cannot be read" in line and "--restart" in line
    with pytest.raises(CheckpointError):
        main([str(a) for a in [*args, "--debug"]])
    model_pt.unlink()
    assert "incomplete: model.pt missing" in one_error_line(cli(args, capsys))
    assert cli([*args, "--restart"], capsys)[0] == 0


def test_a_resumed_run_says_so_in_one_line(tmp_path, caplog):
    cfg = TrainConfig(str(tmp_path), max_steps=6, batch_size=4, save_every=2, progress=False)
    crash_in_step(4, cfg)
    with caplog.at_level("INFO", logger="condenser_lite"):
        train(Regressor(), regression(), cfg, collate_fn=collate)
    assert [r.getMessage() for r in caplog.records] == [f"resuming from the checkpoint in {tmp_path} at step 2 of 6"]


def test_loading_an_mlm_checkpoint_as_an_encoder_reports_only_real_gaps(tmp_path, capfd):
    import warnings

    from transformers import BertConfig, BertForMaskedLM, BertModel

    from condenser_lite.utils.loading import load_encoder

    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    BertForMaskedLM(config).save_pretrained(tmp_path / "mlm")
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_encoder(tmp_path / "mlm")  # the MLM head is dropped on purpose: nothing to say
    assert "LOAD REPORT" not in capfd.readouterr().err and not caught

    encoder = BertModel(config, add_pooling_layer=False)
    encoder.save_pretrained(tmp_path / "enc")
    with pytest.warns(UserWarning, match=r"6 weights missing from the checkpoint.*\[.cls.predictions"):
        from condenser_lite.modeling.condenser import BertMLM

        BertMLM.from_pretrained(tmp_path / "enc")  # an MLM without its head: that is worth a word


# ==== issue 21: own data without surprises ======================================================
# Each test below failed on the code before issue 21's fix for it (say which in its docstring).

ODD_IDS = {"p0": "Sustainable development:135", "p1": "tab\there", "p2": "Café ünïcode", "p3": "100%_(song)",
           "p4": "literal%20escape", "d1": "query one", "q1": "train\tq", "q2": "Frage ä"}


@pytest.mark.protocol  # fine-tunes
def test_ids_with_whitespace_round_trip_through_run_files(retriever, tmp_path, capsys):
    """Before: `search` wrote `query one Q0 tab<TAB>here ...` and `evaluate` refused its own run
    (`expected 6 fields ..., got 8`)."""
    data = write_beir(tmp_path / "odd", ODD_IDS) / "scifact"
    run = tmp_path / "run.trec"
    common = ["--data", data, "--p-max-len", "64"]
    code, searched, err = cli(["search", "--model", retriever, "--out", run, *common], capsys)
    assert code == 0, err
    lines = run.read_text(encoding="utf-8").splitlines()
    assert all(len(line.split()) == 6 for line in lines)  # what trec_eval and ir_measures read
    code, evaluated, err = cli(["evaluate", "--run", run, "--data", data], capsys)
    assert code == 0, err
    assert evaluated == searched
    back = read_trec_run(run)  # the original ids, not their escaped form
    assert "query one" in back and {"Sustainable development:135", "tab\there", "Café ünïcode", "100%_(song)",
                                     "literal%20escape"} <= set(back["query one"])
    # fine-tuning reads the same folder (its training queries include 'train<TAB>q' and 'Frage ä')
    code, _, err = cli(["finetune", "--init", retriever, *FINETUNE[2:], "--data", data, "--output-dir", tmp_path / "ft"],
                       capsys)
    assert code == 0, err


def test_run_tag_is_a_short_model_name_not_a_path(beir, retriever, tmp_path, capsys):
    """Before: the tag column was the model folder's full path (`/tmp/.../retriever0`)."""
    run = tmp_path / "run.trec"
    common = ["search", "--model", retriever, "--out", run, "--data-dir", beir, "--p-max-len", "64"]
    assert cli(common, capsys)[0] == 0
    assert {line.split()[5] for line in run.read_text().splitlines()} == {retriever.name}
    assert cli([*common, "--tag", "cocondenser-r2"], capsys)[0] == 0
    assert {line.split()[5] for line in run.read_text().splitlines()} == {"cocondenser-r2"}
    assert "--tag 'my model': a run tag is one word" in one_error_line(cli([*common, "--tag", "my model"], capsys))


class _Payload:
    """What a hostile checkpoint folder could hold: unpickling it creates ``marker`` (it could
    as well run any command)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickle_payload_in_a_checkpoint_is_refused_not_run(tmp_path):
    """Before: `restore_rng` read rng.pt with a full unpickler (weights_only off): the payload ran
    (the marker file appeared) before anything was checked (a KeyError followed)."""
    cfg = TrainConfig(str(tmp_path / "run"), max_steps=6, batch_size=4, save_every=2, progress=False)
    crash_in_step(5, cfg)
    ckpt = tmp_path / "run" / "checkpoint"
    assert isinstance(torch.load(ckpt / "rng.pt", weights_only=True), dict)  # plain tensors, lists and numbers
    good = {name: (ckpt / name).read_bytes() for name in ("rng.pt", "model.pt")}
    for name in good:
        marker = tmp_path / f"ran_{name}"
        torch.save({"state": _Payload(marker)}, ckpt / name)
        with pytest.raises(CheckpointError, match=rf"{name} holds Python objects other than tensors \(.*pathlib"
                                                  r".*not loaded.*--restart"):
            train(Regressor(), regression(), cfg, collate_fn=collate)
        assert not marker.exists()
        (ckpt / name).write_bytes(good[name])
    assert train(Regressor(), regression(), cfg, collate_fn=collate).resumed_from == 4


def test_model_loading_is_quiet_unless_debug(beir, retriever, tmp_path, capfd):
    """Before: every `search` printed transformers' per-tensor `Loading weights: 100%|...|` bar.
    A weight really missing still gets its one-line warning (see the MLM test above)."""
    from transformers.utils import logging as hf_logging

    args = ["search", "--model", retriever, "--data-dir", beir, "--p-max-len", "64"]
    hf_logging.enable_progress_bar()  # as in a terminal; pytest's capture alone would not hide them
    capfd.readouterr()
    main([str(a) for a in args])
    quiet = capfd.readouterr().err
    assert "Loading weights" not in quiet and "LOAD REPORT" not in quiet
    main([str(a) for a in [*args, "--debug"]])
    assert "Loading weights" in capfd.readouterr().err
    main([str(a) for a in args])  # --debug did not stay on for the next command
    assert "Loading weights" not in capfd.readouterr().err


# ---- issue 21, item 5: a second round of hostile BEIR folders ----------------------------------

def _rewrite(path: Path, edit) -> None:
    path.write_bytes(edit(path.read_bytes()))


def _all_files(folder: Path) -> list[Path]:
    return [folder / "corpus.jsonl", folder / "queries.jsonl", *sorted((folder / "qrels").glob("*.tsv"))]


def _gzip_corpus(folder: Path) -> None:
    import gzip

    (folder / "corpus.jsonl.gz").write_bytes(gzip.compress((folder / "corpus.jsonl").read_bytes()))
    (folder / "corpus.jsonl").unlink()


def _trec_qrels(data: bytes) -> bytes:  # 'q<TAB>0<TAB>d<TAB>1' rows, no header
    rows = [line.split(b"\t") for line in data.splitlines()[1:]]
    return b"".join(b"%s\t0\t%s\t%s\n" % (q, d, s) for q, d, s in rows)


INT_IDS = {f"{c}{i}": {"p": 1000, "q": 2000, "d": 3000}[c] + i for c in "pqd" for i in range(20)}
# each edit turns the 12-document folder into an equivalent one: the same metrics must come out
SAME_DATA = {
    "CRLF line endings": (None, lambda d: [_rewrite(p, lambda b: b.replace(b"\n", b"\r\n")) for p in _all_files(d)]),
    "UTF-8 byte-order marks": (None, lambda d: [_rewrite(p, lambda b: b"\xef\xbb\xbf" + b) for p in _all_files(d)]),
    "qrels without a header": (None, lambda d: [_rewrite(p, lambda b: b.split(b"\n", 1)[1]) for p in _all_files(d)[2:]]),
    "TREC qrels (qid 0 docid rel)": (None, lambda d: [_rewrite(p, _trec_qrels) for p in _all_files(d)[2:]]),
    "qrels with an extra column": (None, lambda d: [_rewrite(p, lambda b: b.replace(b"score\n", b"score\tnote\n")
                                                             .replace(b"\t1\n", b"\t1\tchecked\n")) for p in _all_files(d)[2:]]),
    "integer ids": (INT_IDS, None),
    "integer and string ids mixed": ({"p3": 3, "q2": 2}, None),
    "corpus.jsonl.gz": (None, _gzip_corpus),
}


@pytest.fixture(scope="module")
def plain_metrics(beir, retriever) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main([str(a) for a in ["search", "--model", retriever, "--data-dir", beir, "--p-max-len", "64"]])
    return out.getvalue()


@pytest.mark.parametrize("case", [*SAME_DATA, "a path with spaces and non-ASCII"])
def test_equivalent_beir_folders_give_the_same_metrics(case, plain_metrics, retriever, tmp_path, capsys):
    """Before: qrels without a header or in TREC's four columns were refused as 'cut short'
    (KeyError: Field "query-id" does not exist), and ids mixing integers and strings were read as
    their JSON text ('"p0"'), so no qrels matched. CRLF, byte-order marks, an extra qrels column,
    integer ids, a gzipped corpus and such a path already gave the same metrics (guarded here)."""
    ids, edit = SAME_DATA.get(case, (None, None))
    root = tmp_path / ("my data ü" if case.startswith("a path") else "data")
    folder = write_beir(root, ids) / "scifact"
    if edit:
        edit(folder)
    run = tmp_path / "run.trec"
    code, out, err = cli(["search", "--model", retriever, "--data", folder, "--p-max-len", "64", "--out", run], capsys)
    assert (code, out) == (0, plain_metrics), err
    assert "warning" not in err
    assert cli(["evaluate", "--run", run, "--data", folder], capsys)[1] == plain_metrics


def _duplicate_first_line(path: Path) -> None:
    _rewrite(path, lambda b: b + b.split(b"\n")[0].replace(b'"text": "', b'"text": "Copy: ') + b"\n")


BAD_DATA = {
    "a document id twice": (lambda d: _duplicate_first_line(d / "corpus.jsonl"),
                            "corpus.jsonl: document id 'p0' appears 2 times (lines 1 and 13); ids must be unique"),
    "a query id twice": (lambda d: _duplicate_first_line(d / "queries.jsonl"),
                         "queries.jsonl: query id 'q1' appears 2 times (lines 1 and 10)"),
    "a document without _id": (lambda d: _rewrite(d / "corpus.jsonl", lambda b: b.replace(b'"_id": "p2"', b'"_id": ""')),
                               "corpus.jsonl:3: a document without an _id (row 2)"),
    "space-separated qrels": (lambda d: _rewrite(d / "qrels" / "test.tsv", lambda b: b.replace(b"\t", b" ")),
                              "test.tsv:1: 'query-id corpus-id score' is neither BEIR's header"),
    "an id holding a tab in the qrels": (lambda d: _rewrite(d / "qrels" / "test.tsv",
                                                            lambda b: b + b"q1\tp\t1\t1\n"),
                                         "has 4 tab-separated fields where the file's first lines have 3; an id "
                                         "there holds a tab"),
    "qrels naming a query that is not there": (lambda d: _rewrite(d / "qrels" / "test.tsv",
                                                                  lambda b: b + b"nosuchq\tp1\t1\n"),
                                               "1 query ids in the qrels have no query text (e.g. ['nosuchq']); the "
                                               "qrels and the queries come from different data sets or versions: add "
                                               "those queries to the queries file, or drop their lines from the qrels"),
}


@pytest.mark.parametrize("case", list(BAD_DATA))
def test_bad_beir_folders_are_refused_in_one_line(case, retriever, tmp_path, capsys):
    """Before: a repeated document id was searched as one document and reported as a too-shallow
    run ('ranks at most 12 documents per query'), a repeated query id and an empty id passed
    silently, space-separated qrels were 'cut short', and qrels naming a missing query said why
    but not what to do."""
    edit, expected = BAD_DATA[case]
    folder = write_beir(tmp_path) / "scifact"
    edit(folder)
    assert expected in one_error_line(cli(["search", "--model", retriever, "--data", folder, "--p-max-len", "64"],
                                          capsys))


def test_queries_with_no_relevant_document_are_said(beir, retriever, tmp_path, capsys):
    """Before: a query whose qrels are all 0 scored 0 silently (the mean fell from 0.754 to 0.421)."""
    root = tmp_path / "zero"
    shutil.copytree(beir, root)
    _rewrite(root / "scifact" / "qrels" / "test.tsv", lambda b: b.replace(b"\t1\n", b"\t0\n", 1))
    code, out, err = cli(["search", "--model", retriever, "--data-dir", root, "--p-max-len", "64"], capsys)
    assert code == 0
    assert ("warning: 1 of the 3 labelled queries have no relevant document (every grade is 0 or less, e.g. ['d1']): "
            "they score 0, as in BEIR and pytrec_eval; drop their qrels lines") in err


# ---- issue 21, item 5: zero, negative and empty settings ----------------------------------------

SETTINGS = {  # each refused in one line before any training, naming the setting and a valid value
    "finetune lr=0": (["finetune", *FINETUNE, "--set", "lr=0"], "FinetuneConfig.lr=0.0 must be > 0"),
    "finetune batch_size=0": (["finetune", *FINETUNE, "--set", "batch_size=0"], "FinetuneConfig.batch_size=0 must be > 0"),
    "finetune train_n_passages=0": (["finetune", *FINETUNE, "--set", "train_n_passages=0"],
                                    "FinetuneConfig.train_n_passages=0 must be > 0"),
    "finetune --max-steps 0": (["finetune", *FINETUNE, "--max-steps", "0"], "--max-steps 0: give a count >= 1"),
    "finetune --train-size 0": (["finetune", *FINETUNE, "--train-size", "0"], "--train-size 0: give a count >= 1"),
    "pretrain lr=0": (["pretrain", "--set", "lr=0"], "StageConfig.lr=0.0 must be > 0"),
    "pretrain lr<0": (["pretrain", "--set", "lr=-1e-4"], "StageConfig.lr=-0.0001 must be > 0"),
    "pretrain batch_size=0": (["pretrain", "--set", "batch_size=0"], "StageConfig.batch_size=0 must be > 0"),
    "pretrain --min-span 0": (["pretrain", "--method", "cocondenser", "--corpus", "scifact", "--min-span", "0"],
                              "StageConfig.min_span=0 must be > 0"),
    "pretrain min_span<0": (["pretrain", "--method", "cocondenser", "--corpus", "scifact", "--set", "min_span=-1"],
                            "StageConfig.min_span=-1 must be > 0"),
    "experiments --seeds ''": (["experiments", "--preset", "micro", "--seeds", ""], "--seeds '': give at least one"),
    "experiments seeds=[]": (["experiments", "--preset", "micro", "--set", "seeds=[]"],
                             "Preset.seeds must name at least one seed"),
    "experiments finetune.lr=0": (["experiments", "--preset", "micro", "--set", "finetune.lr=0"],
                                  "FinetuneConfig.lr=0.0 must be > 0"),
    "experiments sts.batch_size=-1": (["experiments", "--preset", "micro", "--set", "sts.batch_size=-1"],
                                      "STSConfig.batch_size=-1 must be > 0"),
}


@pytest.mark.parametrize("case", list(SETTINGS))
def test_zero_negative_and_empty_settings_are_refused(case, beir, retriever, tmp_path, capsys):
    """Before: lr=0 trained nothing without a word, batch_size=0 stopped with a ZeroDivisionError
    traceback, --max-steps 0 / --min-span 0 / --train-size 0 / --seeds '' were ignored (the
    preset's values ran: a whole protocol for --seeds ''), a negative min_span,
    train_n_passages=0 and an empty seed list were tracebacks (ValueError). The finetune cases and
    seeds=[] were run on the old code; the others would start long runs there, so were checked by
    reading it (and --min-span 0 by hand)."""
    args, expected = SETTINGS[case]
    if args[0] == "finetune":
        args = [*args, "--init", retriever, "--data-dir", beir, "--output-dir", tmp_path / "ft"]
    assert expected in one_error_line(cli(args, capsys))
    assert not (tmp_path / "ft").exists()  # refused before anything was written


# ---- issue 21, item 5: results files and where they are -----------------------------------------

def test_results_folder_from_the_environment_must_be_there(tmp_path, monkeypatch):
    """Before: `$CONDENSER_LITE_RESULTS` pointing nowhere said `.../small.json not found: run
    experiments ...` (hours of computing) instead of naming the variable."""

    from condenser_lite.reproduction import results as evidence

    monkeypatch.setenv(evidence.RESULTS_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(DataSourceError, match=r"\$CONDENSER_LITE_RESULTS=.*nowhere is not a folder.*unset it"):
        evidence.load_results("small")


def test_a_results_file_whose_headline_disagrees_with_its_body_is_refused(tmp_path):
    """Before: `load_results` returned it, and a chapter would show the edited headline."""
    from condenser_lite.reproduction.results import RESULTS_DIR, load_results

    results = json.loads((RESULTS_DIR / "small.json").read_text())
    true = results["headline"]["ndcg10"]["cocondenser"]
    results["headline"]["ndcg10"]["cocondenser"] = 0.2
    (tmp_path / "small.json").write_text(json.dumps(results))
    with pytest.raises(SchemaError, match=rf"small.json: its headline says ndcg10.cocondenser=0.2 but its body gives "
                                          rf"{true}; .*experiments --preset small --out"):
        load_results("small", folder=tmp_path)


@pytest.mark.protocol  # the command measures the small preset's stages before the stand-in protocol: minutes
def test_experiments_out_must_be_a_results_file_of_the_same_preset(tmp_path, monkeypatch, capsys):
    """Before: `--out` onto a folder ran the whole protocol and then stopped with an
    IsADirectoryError traceback; onto any other file it overwrote it (a results file of another
    budget, or a file that was not results at all). Here the protocol itself is replaced by a
    stand-in: reaching it means the command was not refused."""
    from condenser_lite.reproduction import protocol

    def not_here(*args, **kwargs):
        raise RuntimeError("the protocol ran")

    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(protocol, "_run", not_here)
    folder, notes, other = tmp_path / "results", tmp_path / "notes.json", tmp_path / "small.json"
    folder.mkdir()
    notes.write_text('{"my": "notes"}')
    other.write_text(json.dumps({"protocol": "condenser_lite.protocol", "preset": {"name": "small"}}))
    command = ["experiments", "--preset", "micro", "--out"]
    assert f"--out {folder} is a folder; give a file path, e.g. {folder}/micro.json" in one_error_line(
        cli([*command, folder], capsys))
    assert f"--out {notes} exists and is not a protocol results file" in one_error_line(cli([*command, notes], capsys))
    assert f"--out {other} holds the 'small' preset's results, not 'micro''s" in one_error_line(
        cli([*command, other], capsys))
    assert notes.read_text() == '{"my": "notes"}' and json.loads(other.read_text())["preset"] == {"name": "small"}
    with pytest.raises(RuntimeError, match="the protocol ran"):  # the same budget's file: regenerated
        main(["experiments", "--preset", "small", "--out", str(other)])


def test_a_cache_that_cannot_be_written_is_named(beir, tmp_path, monkeypatch, capsys):
    """Before: a `$CONDENSER_LITE_CACHE` that is a file stopped with a NotADirectoryError traceback,
    and a read-only cache folder failed later, in whichever write came first. (The tests run as
    root, for whom every folder is writable: the read-only folder is simulated through os.access.)"""
    from condenser_lite.utils.cache import cache_dir

    afile = tmp_path / "cachefile"
    afile.write_text("not a folder")
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(afile))
    line = one_error_line(cli(["pretrain", "--set", "max_steps=1"], capsys))
    assert f"the cache folder {afile} ($CONDENSER_LITE_CACHE) cannot be written" in line
    assert "point $CONDENSER_LITE_CACHE at a writable folder" in line

    readonly = tmp_path / "readonly"
    readonly.mkdir()
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(readonly))
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p).is_relative_to(readonly) and mode == os.W_OK
                        else real_access(p, mode))
    with pytest.raises(ConfigError, match=rf"cache folder {readonly}/experiments .* cannot be written \(read-only"):
        cache_dir("experiments")


@pytest.mark.protocol  # fine-tunes
def test_ctrl_c_during_finetune_then_the_same_command_gives_the_uninterrupted_result(beir, retriever, tmp_path,
                                                                                      monkeypatch, capsys):
    """Ctrl-C in step 4 of 6 (exit status 130, a checkpoint of steps 1-3), then the same command:
    the weights and the search metrics are those of a run never interrupted. (It passed before
    issue 21 too; the training loop's exact resume, here through the command line.)"""
    from condenser_lite.retrieval import biencoder

    common = ["finetune", "--init", retriever, *FINETUNE[:2], "--max-steps", "6", *FINETUNE[4:], "--data-dir", beir]
    assert cli([*common, "--output-dir", tmp_path / "whole"], capsys)[0] == 0

    calls = {"n": 0}
    collate = biencoder.RetrievalCollator.__call__

    def interrupted(self, examples):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return collate(self, examples)

    with monkeypatch.context() as patch:
        patch.setattr(biencoder.RetrievalCollator, "__call__", interrupted)
        code, _, err = cli([*common, "--output-dir", tmp_path / "cut"], capsys)
    assert code == 130 and "checkpoint at step 3" in err and "interrupted" in err
    code, _, err = cli([*common, "--output-dir", tmp_path / "cut"], capsys)
    assert code == 0 and "resuming from the checkpoint" in err and "at step 3 of 6" in err
    whole, cut = load_file(tmp_path / "whole" / "model.safetensors"), load_file(tmp_path / "cut" / "model.safetensors")
    assert [k for k in whole if not torch.equal(whole[k], cut[k])] == []
    search = ["search", "--data-dir", beir, "--p-max-len", "64", "--model"]
    assert cli([*search, tmp_path / "whole"], capsys)[1] == cli([*search, tmp_path / "cut"], capsys)[1]


# ---- inputs readers bring: their corpus, their model folder, their output paths ------------------

def gpt2_folder(retriever: Path, folder: Path) -> Path:
    """A decoder checkpoint (GPT-2) with a tokenizer beside it: loads, but is no retriever."""
    from transformers import GPT2Config, GPT2Model

    GPT2Model(GPT2Config(n_layer=1, n_embd=32, n_head=2)).save_pretrained(folder)
    for f in retriever.iterdir():
        if f.name.startswith(("tokenizer", "vocab", "special_tokens")):
            shutil.copy(f, folder / f.name)
    return folder


def test_a_document_without_a_text_key_is_said(beir, retriever, tmp_path, capsys):
    """Before: a record with no `text` key (or an empty one) was encoded from its title without a word."""
    root = tmp_path / "mirror"
    shutil.copytree(beir, root)
    path = root / "scifact" / "corpus.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    del records[4]["text"]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, _, err = cli(["search", "--model", retriever, "--data-dir", root, "--p-max-len", "64"], capsys)
    assert code == 0, err
    assert "warning: 1 of the corpus's 12 documents have no 'text' (e.g. ids ['p4'] at rows [4]): they are " \
           "encoded from their title alone" in err


def test_a_model_of_another_architecture_is_refused(beir, retriever, tmp_path, capsys):
    """Before: a GPT-2 folder was searched with (exit 0, one score for every document)."""
    gpt2 = gpt2_folder(retriever, tmp_path / "gpt2")
    for command in (["search", "--model", gpt2, "--data-dir", beir],
                    ["finetune", "--init", gpt2, *FINETUNE, "--data-dir", beir, "--output-dir", tmp_path / "ft"]):
        line = one_error_line(cli(command, capsys))
        assert f"{gpt2} holds a gpt2 model (GPT2Model), not a BERT-family encoder" in line
        assert not (tmp_path / "ft").exists()


def test_lengths_above_the_models_position_limit_are_one_line(beir, retriever, tmp_path, capsys):
    """Before: a ValueError traceback (search: after reading the data; finetune: after building
    the BM25 negatives)."""
    line = one_error_line(cli(["search", "--model", retriever, "--data-dir", beir, "--p-max-len", "1000"], capsys))
    assert line == (f"error: --p-max-len=1000 exceeds the position limit of {retriever} (max_position_embeddings="
                    "128); use 128 or less")
    line = one_error_line(cli(["finetune", "--init", retriever, *FINETUNE, "--set", "p_max_len=1000", "--data-dir",
                               beir, "--output-dir", tmp_path / "ft"], capsys))
    assert "--set p_max_len=1000 exceeds the position limit" in line and not (tmp_path / "ft").exists()


def _not_reached(*args, **kwargs):
    raise AssertionError("the command went on past a bad --out")


def test_an_out_path_that_cannot_be_written_is_refused_first(beir, retriever, tmp_path, monkeypatch, capsys):
    """Before: `experiments` measured its estimate and ran, then a traceback (NotADirectoryError,
    FileExistsError, PermissionError); `search`, `encode` and `finetune` encoded or trained first."""
    from condenser_lite.reproduction import estimate, merge, protocol

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


def test_a_run_file_from_another_tool_with_spaces_in_document_ids(retriever, tmp_path, capsys):
    """Before: `expected 6 fields ..., got 8`, with no fix named; ids with spaces are legal in BEIR."""
    data = write_beir(tmp_path / "titles", {"p1": "Tour de France:12", "p3": "Mount  Etna"}) / "scifact"
    run = tmp_path / "other_tool.trec"
    run.write_text("d1 Q0 Tour de France:12 1 9.5 bm25\nd1 Q0 p0 2 3.0 bm25\n"
                   "d2\tQ0\tMount  Etna\t1\t8.0\tbm25\nd3 Q0 p11 1 7.0 bm25\n", encoding="utf-8")
    code, out, err = cli(["evaluate", "--run", run, "--data", data, "--metrics", "RR@2"], capsys)
    assert code == 0, err
    assert json.loads(out) == {"RR@2": 1.0}
    run.write_text("query one Q0 p1 1 9.5 bm25\n")
    line = one_error_line(cli(["evaluate", "--run", run, "--data", data], capsys))
    assert "the query id holds whitespace" in line and "%20" in line


def test_an_unknown_finetune_preset_is_one_line(beir, retriever, tmp_path, capsys):
    """Before: a ValueError traceback."""
    line = one_error_line(cli(["finetune", "--init", retriever, "--data-dir", beir, "--preset", "nosuch",
                               "--output-dir", tmp_path / "ft"], capsys))
    assert line == ("error: --preset nosuch: no such preset or recipe; choose one of micro, tiny, small, colab, paper "
                    "(alias full) or a data set's recipe: msmarco, nq")


def test_a_tokenizer_of_another_model_is_refused(beir, retriever, tmp_path, capsys):
    """Before: `IndexError: index out of range in self` from the embedding layer, a traceback."""
    from condenser_lite.data.tokenizer import train_wordpiece

    mixed = tmp_path / "mixed"
    shutil.copytree(retriever, mixed)
    for f in mixed.iterdir():
        if f.name.startswith(("tokenizer", "vocab", "special_tokens")):
            f.unlink()
    texts = [f"{r['title']} {r['text']}" for r in rows("corpus.jsonl")] + [" ".join(f"w{i}" for i in range(2000))]
    train_wordpiece(texts * 3, vocab_size=1000, save_dir=mixed, min_frequency=1)  # the model's embeddings: 300
    for command in (["search", "--model", mixed, "--data-dir", beir, "--p-max-len", "64"],
                    ["finetune", "--init", mixed, *FINETUNE, "--data-dir", beir, "--output-dir", tmp_path / "ft"]):
        line = one_error_line(cli(command, capsys))
        assert f"the tokenizer in {mixed} has" in line and "the model's embeddings hold 300" in line, line


def test_a_corpus_line_that_is_not_a_json_object_is_named(tmp_path, capsys):
    """Before: `cannot read docs.jsonl (ArrowInvalid: JSON parse error: Column() changed from object to
    string in row 0); the file is cut short or not in its format`."""
    from condenser_lite.data.beir import load_documents

    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "one document"}\n"a string"\n{"text": "another"}\n')
    with pytest.raises(SchemaError, match=r"docs.jsonl:2 is not a JSON object \('\"a string\"'\); write one object "
                                          r"a line, such as \{\"text\": \"...\", \"title\": \"...\"\}"):
        load_documents(path)
    path.write_text('{"text": "one document"}\n{"text": "cut\n')  # not JSON at all: the parser's reason, as before
    with pytest.raises(DataSourceError, match=r"docs.jsonl \(ArrowInvalid: JSON parse error.*cut short"):
        load_documents(path)


def test_a_condenser_head_deeper_than_the_init_is_one_line(retriever, tmp_path, capsys):
    """Before: `ValueError: skip_from=2 must be an int with 0 <= skip_from < num_hidden_layers=2`, a
    traceback after the estimate started."""
    line = one_error_line(cli(["pretrain", "--method", "condenser", "--preset", "micro", "--init", retriever,
                               "--output-dir", tmp_path / "p"], capsys))
    assert line == (f"error: --init {retriever} has 2 layers, but the Condenser head reads layer skip_from=2; pass "
                    "--set skip_from=1 (or lower), or an --init with more layers")
