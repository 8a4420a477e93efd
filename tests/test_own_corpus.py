"""Your own corpus, end to end through the command line, on a BEIR-format folder the project has
never seen (`tests/fixtures/bike_beir`: 42 documents about bicycles, 12 of them one-line tips too
short for two spans at the default min_span; 16 train and 10 test queries): coCondenser pre-training on it, fine-tuning, search, evaluation and
the whole scaled-down protocol with `experiments --task PATH`."""

import json
import os
import shutil
from pathlib import Path

import pytest

from condenser_lite.cli import main
from condenser_lite.data.beir import load_beir
from condenser_lite.data.tokenizer import load_tokenizer, train_wordpiece
from condenser_lite.modeling.condenser import Condenser
from condenser_lite.training.pretraining_config import ModelConfig
from condenser_lite.modeling.spans import tokenize_documents
from condenser_lite.training.stage_cache import DONE_FILE
from condenser_lite.utils.errors import SchemaError

FOLDER = Path(__file__).parent / "fixtures" / "bike_beir"
MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="module")
def condenser_dir(tmp_path_factory):
    """A tiny Condenser checkpoint *with its head* and a WordPiece trained on the folder's text."""
    out = tmp_path_factory.mktemp("condenser")
    beir = load_beir(FOLDER)
    texts = [f"{t} {x}" for t, x in zip(beir.corpus["title"], beir.corpus["text"])] + list(beir.queries["text"])
    tok = train_wordpiece(texts * 3, vocab_size=400, save_dir=out, min_frequency=1)
    config = ModelConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64,
                         max_len=64).bert_config(tok)
    Condenser.from_config(config, skip_from=2, n_head_layers=2).save_pretrained(out)
    return out


@pytest.mark.protocol  # pre-trains (condenser_dir, then coCondenser)
def test_pretrain_cocondenser_on_a_folder_reports_short_documents(condenser_dir, tmp_path, capsys):
    common = ["pretrain", "--method", "cocondenser", "--init", str(condenser_dir), "--corpus", str(FOLDER),
              "--set", "stages.cocondenser.max_steps=2", "--set", "stages.cocondenser.batch_size=4",
              "--set", "stages.cocondenser.save_every=null"]
    main([*common, "--output-dir", str(tmp_path / "co16")])
    printed = capsys.readouterr().err  # the command line prints the warning as one line
    record = json.loads((tmp_path / "co16" / DONE_FILE).read_text())
    assert record["steps"] == 2 and record["config"]["corpus"] == str(FOLDER.resolve())
    lengths = [len(ids) for ids in tokenize_documents(load_beir(FOLDER).corpus, load_tokenizer(condenser_dir))]
    assert sum(n < 32 for n in lengths) >= 5  # the single sentences
    assert record["documents"] == 42 and record["skipped_documents"] == sum(n < 32 for n in lengths)
    assert f"warning: coCondenser spans: skipped {record['skipped_documents']} of 42 documents" in printed
    assert "--min-span" in printed
    # a lower min_span keeps them
    main([*common, "--min-span", "4", "--output-dir", str(tmp_path / "co4")])
    assert json.loads((tmp_path / "co4" / DONE_FILE).read_text())["skipped_documents"] == sum(n < 8 for n in lengths) == 0
    # a .jsonl of documents and a text file with one document per line are corpora too
    lines = tmp_path / "docs.txt"
    lines.write_text("\n".join(json.loads(r)["text"] for r in (FOLDER / "corpus.jsonl").read_text().splitlines()))
    main([*common, "--min-span", "4", "--corpus", str(lines), "--output-dir", str(tmp_path / "co_txt")])
    assert json.loads((tmp_path / "co_txt" / DONE_FILE).read_text())["documents"] == 42


@pytest.mark.protocol  # pre-trains (condenser_dir) and fine-tunes
def test_finetune_search_evaluate_on_a_folder(condenser_dir, tmp_path, capsys):
    data = ["--data", str(FOLDER)]
    main(["finetune", "--init", str(condenser_dir), "--output-dir", str(tmp_path / "ft"), "--rounds", "2",
          "--set", "finetune.max_steps=3", "--preset", "micro", "--set", "finetune.batch_size=4", *data])
    assert (tmp_path / "ft" / "round2" / "config.json").exists()
    capsys.readouterr()
    main(["search", "--model", str(tmp_path / "ft" / "round2"), "--out", str(tmp_path / "test.trec"), "--p-max-len", "64",
          *data])
    searched = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    queries = {line.split()[0] for line in (tmp_path / "test.trec").read_text().splitlines()}
    assert queries == {f"q{i}" for i in range(17, 27)}  # the 10 test queries
    main(["evaluate", "--run", str(tmp_path / "test.trec"), *data])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == searched
    with pytest.raises(SystemExit, match="^1$"):  # a known error: one line on stderr
        main(["evaluate", "--run", str(tmp_path / "test.trec"), "--split", "dev", *data])
    assert "error: data set 'bike_beir' has no 'dev' split (qrels for: ['test', 'train'])" in capsys.readouterr().err


@pytest.mark.skipif(not MIRROR.exists(), reason="the protocol's general corpus and STS-b come from ../shared/data")
def test_experiments_on_a_folder_runs_the_whole_protocol(tokenizer_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CONDENSER_LITE_DATA", str(MIRROR))
    out = tmp_path / "results.json"
    main(["experiments", "--preset", "micro", "--task", str(FOLDER), "--set", f"tokenizer={tokenizer_dir}",
          "--set", "stages.cocondenser.min_span=4", "--out", str(out)])
    results = json.loads(out.read_text())
    assert results["task"] == {"name": "bike_beir", "split": "test", "corpus": 42, "train_queries": 8,
                               "eval_queries": 10}
    co = results["arms"]["cocondenser"]
    stage = json.loads((Path(co["checkpoint"]) / DONE_FILE).read_text())
    assert stage["config"]["corpus"] == str(FOLDER.resolve())  # coCondenser pre-trained on the folder's corpus
    assert stage["documents"] == 40 and stage["config"]["min_span"] == 4  # micro: stages.cocondenser.corpus_limit 40 and co["pretrain_steps"] == 2
    assert set(results["retrieval"]["cocondenser"]["round1"]) == {"4", "8"}
    assert "nDCG@10" in results["bm25"]["full"] and results["claims"]
    assert "bike_beir" in capsys.readouterr().out


def test_experiments_refuses_a_folder_without_a_test_split(tmp_path):
    from condenser_lite.reproduction.configuration.presets import get_preset
    from condenser_lite.reproduction.runs.tasks import load_task

    folder = tmp_path / "mine"
    shutil.copytree(FOLDER, folder)
    (folder / "qrels" / "test.tsv").unlink()
    with pytest.raises(SchemaError, match=r"no 'test' qrels \(it has \['train'\]\).*add qrels/test.tsv"):
        load_task(get_preset("micro", task=str(folder)))


def test_task_cache_key_follows_the_folder_content_not_its_timestamps(tmp_path):
    """The task and results caches are keyed by the folder's content (``sources.data_id``): a new
    modification time alone keeps the key, an edited qrels file gives a new one."""
    from condenser_lite.reproduction.runs.tasks import data_location

    folder = tmp_path / "mine"
    shutil.copytree(FOLDER, folder)
    key = data_location(None, str(folder))
    os.utime(folder / "corpus.jsonl", ns=(1, 1))  # same bytes, another mtime
    assert data_location(None, str(folder)) == key
    with (folder / "qrels" / "test.tsv").open("a") as f:
        f.write("q17\td02\t1\n")
    assert data_location(None, str(folder)) != key


@pytest.mark.protocol  # pre-trains two short stages
@pytest.mark.skipif(not MIRROR.exists(), reason="the held-out gauges read the general corpus of ../shared/data")
def test_pretrain_mlm_and_condenser_on_your_own_corpus(condenser_dir, tmp_path, monkeypatch, capsys):
    """`pretrain --method mlm|condenser --corpus FILE_OR_FOLDER` trains on those documents (before:
    a ValueError traceback, only coCondenser read a reader's corpus); the held-out gauges still
    read the general corpus's held-out set, so they compare with the book's stages."""
    monkeypatch.setenv("CONDENSER_LITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CONDENSER_LITE_DATA", str(MIRROR))
    lines = tmp_path / "my_text.txt"
    lines.write_text("\n".join(json.loads(r)["text"] for r in (FOLDER / "corpus.jsonl").read_text().splitlines()))
    common = ["--init", str(condenser_dir), "--set", "stages.condenser.max_steps=2", "--set", "stages.condenser.batch_size=4",
              "--set", "stages.condenser.save_every=null", "--set", "stages.condenser.eval_blocks=8"]
    for method, corpus in (("mlm", lines), ("condenser", FOLDER)):
        out = tmp_path / method
        main(["pretrain", "--method", method, "--corpus", str(corpus), *common, "--output-dir", str(out)])
        record = json.loads((out / DONE_FILE).read_text())
        assert record["steps"] == 2 and record["config"]["corpus"] == str(corpus.resolve())
        assert str(corpus.resolve()) in record["settings"]["data"]  # the key hashes the reader's corpus
        assert record["heldout"]["mlm_loss"] > 0 and record["heldout_set"]["sections"] > 0
    assert "Traceback" not in capsys.readouterr().err
