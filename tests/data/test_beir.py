"""Tests for condenser_lite.data.beir: BEIR sets by name (SciFact on the local mirror), a folder of
your own in BEIR's layout, your documents, and the errors that name the missing file or field."""

from __future__ import annotations

import shutil

import pytest
from locations import FIXTURES

from condenser_lite.data import beir
from condenser_lite.data import sources as data


def test_load_beir_scifact(mirror):
    scifact = beir.load_beir("scifact")
    assert scifact.corpus.column_names == ["_id", "title", "text"]
    assert scifact.queries.column_names == ["_id", "text"]
    assert len(scifact.corpus) == 5183
    assert {s: len(q) for s, q in scifact.qrels.items()} == {"train": 809, "test": 300}
    assert sum(len(d) for d in scifact.qrels["test"].values()) == 339
    train, test = scifact.queries_for("train"), scifact.queries_for("test")
    assert len(train) == 809 and len(test) == 300
    assert set(test["_id"]) == set(scifact.qrels["test"])
    doc_ids = set(scifact.corpus["_id"])
    assert all(d in doc_ids for q in scifact.qrels["test"].values() for d in q)
    with pytest.raises(data.SchemaError, match=r"no 'dev' split \(qrels for: \['test', 'train'\]\)"):
        scifact.queries_for("dev")


def test_any_beir_name_reads_its_mirror_folder_or_says_where_it_looked(tmp_path):
    fixture = FIXTURES / "bike_beir"
    shutil.copytree(fixture, tmp_path / "nfcorpus")
    found = beir.load_beir("nfcorpus", data_dir=tmp_path)  # any BEIR name, not only scifact
    assert found.name == "nfcorpus" and len(found.corpus) == 42
    with pytest.raises(data.DataSourceError, match=r"fiqa is not a folder.*BeIR/fiqa"):
        beir.load_beir("fiqa", data_dir=tmp_path)
    with pytest.raises(ValueError, match="neither a BEIR name"):
        beir.load_beir("two words", data_dir=tmp_path)
    # its cache key is the mirror folder's content: an edited file gives a new one
    key = data.data_id(["nfcorpus"], data_dir=tmp_path)["nfcorpus"]
    assert isinstance(key, dict) and {"corpus.jsonl", "queries.jsonl", "qrels"} <= set(key)
    (tmp_path / "nfcorpus" / "queries.jsonl").write_text('{"_id": "q1", "text": "a changed query"}\n')
    assert data.data_id(["nfcorpus"], data_dir=tmp_path)["nfcorpus"] != key


def test_load_beir_from_a_folder_path():
    """A user's own data in BEIR's format, by path (no mirror involved), every qrels split found."""
    folder = FIXTURES / "bike_beir"
    found = beir.load_beir(str(folder))
    assert found.name == "bike_beir"
    assert found.corpus.column_names == ["_id", "title", "text"] and len(found.corpus) == 42
    assert {s: len(q) for s, q in found.qrels.items()} == {"test": 10, "train": 16}
    assert found.qrels["train"]["q04"] == {"d04": 1, "d40": 1}
    assert len(found.queries_for("test")) == 10
    assert beir.load_beir(folder).name == "bike_beir"  # a Path works too


def test_beir_folder_errors_name_the_missing_file(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "corpus.jsonl").write_text('{"_id": "1", "title": "t", "text": "x"}\n')
    with pytest.raises(data.DataSourceError, match=r"lacks queries.jsonl, qrels/<split>.tsv.*corpus.jsonl \(_id, title, text\)"):
        beir.load_beir(tmp_path / "mine")
    with pytest.raises(data.DataSourceError, match="is not a folder"):
        beir.load_beir(str(tmp_path / "nope"))


def test_load_documents_from_folder_jsonl_or_text(tmp_path):
    folder = FIXTURES / "bike_beir"
    docs = beir.load_documents(str(folder))
    assert len(docs) == 42 and docs[0]["title"] == "Chain lubrication"
    (tmp_path / "docs.jsonl").write_text('{"text": "first doc"}\n{"text": "second", "title": "T", "docid": "x"}\n')
    rows = beir.load_documents(str(tmp_path / "docs.jsonl"))
    assert rows.column_names == ["_id", "title", "text"] and list(rows["title"]) == ["", "T"]
    assert list(rows["_id"]) == ["0", "x"]
    (tmp_path / "lines.txt").write_text("one document per line.\n\nanother one.\n")
    assert list(beir.load_documents(str(tmp_path / "lines.txt"))["text"]) == ["one document per line.", "another one."]
    (tmp_path / "bad.jsonl").write_text('{"body": "no text field"}\n')
    with pytest.raises(data.SchemaError, match="no field 'text'"):
        beir.load_documents(str(tmp_path / "bad.jsonl"))
    with pytest.raises(data.DataSourceError, match="does not exist"):
        beir.load_documents(str(tmp_path / "missing.txt"))
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(data.SchemaError, match="no document"):
        beir.load_documents(str(tmp_path / "empty.txt"))


def test_beir_schema_error_names_field_and_file(tmp_path):
    d = tmp_path / "scifact"
    (d / "qrels").mkdir(parents=True)
    (d / "corpus.jsonl").write_text('{"_id": "1", "text": "no title here"}\n')
    (d / "queries.jsonl").write_text('{"_id": "q", "text": "a claim"}\n')
    for split in ("train", "test"):
        (d / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\nq\t1\t1\n")
    with pytest.raises(data.SchemaError, match="no field 'title'") as err:
        beir.load_beir("scifact", data_dir=tmp_path)
    assert str(d / "corpus.jsonl") in str(err.value)


def test_documents_without_text_are_said_however_the_corpus_is_read(tmp_path):
    """A record without a `text` key, with `text: null` or with blank text: counted and named
    when a Dataset corpus is read lazily (as `search` and `finetune` read it) and when
    `pretrain --corpus` reads a .jsonl of documents."""
    from datasets import Dataset

    rows = [{"_id": f"d{i}", "title": f"title {i}", "text": f"text {i}"} for i in range(6)]
    rows[1]["text"], rows[3]["text"] = None, "  "
    corpus = Dataset.from_list(rows)
    with pytest.warns(UserWarning, match=r"2 of the corpus's 6 documents have no 'text' \(e.g. ids \['d1', 'd3'\]"):
        ids, _, texts = beir.corpus_columns(corpus, lazy=True)
    assert ids == [f"d{i}" for i in range(6)] and texts[0] == "text 0"
    with pytest.warns(UserWarning, match=r"1 of the corpus's 3 documents have no 'text' \(e.g. ids \['d1'\] at "
                                         r"rows \[2\]"):
        beir.corpus_columns(corpus.select([4, 0, 1]), lazy=True)  # a selection: rows of the selection
    path = tmp_path / "docs.jsonl"
    path.write_text('{"title": "a", "text": "one"}\n{"title": "only a title"}\n{"title": "c", "text": "three"}\n')
    with pytest.warns(UserWarning, match=r"1 of the corpus's 3 documents have no 'text' \(e.g. ids \['1'\] at rows "
                                         r"\[1\]\): they are pre-trained on their title alone"):
        docs = beir.load_documents(path)
    assert docs["text"] == ["one", "", "three"]


def test_reading_a_beir_folder_draws_no_progress_bars(tmp_path, capfd):
    """datasets' `Generating train split` bar, once per file, said nothing; bars stay on after."""
    import datasets

    folder = tmp_path / "mine"
    shutil.copytree(FIXTURES / "bike_beir", folder)
    with (folder / "corpus.jsonl").open("a") as f:  # new content: datasets generates the split again
        f.write('{"_id": "fresh", "title": "t", "text": "a document no cache has seen"}\n')
    capfd.readouterr()
    beir.load_beir(folder)
    assert "Generating" not in capfd.readouterr().err
    assert datasets.is_progress_bar_enabled()
