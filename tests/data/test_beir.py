"""Tests for condenser_lite.data.beir: BEIR sets by name (SciFact on the local mirror), a folder of
your own in BEIR's layout, your documents, and the errors that name the missing file or field.
Through the commands: a folder in an equivalent layout gives the same metrics, and a bad one (ids
repeated or empty, qrels in another layout) is refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from command_line import cli, one_error_line
from locations import FIXTURES
from toy_data import rewrite, write_beir

from condenser_lite.cli import main
from condenser_lite.data import beir
from condenser_lite.data import sources as data
from condenser_lite.data.beir import corpus_columns
from condenser_lite.utils.errors import DataSourceError, SchemaError


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


def test_a_document_without_a_text_key_is_said(beir, retriever, tmp_path, capsys):
    """A corpus record with no `text` key is named in a warning (its id and row) and encoded from
    its title; the command goes on."""
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


def test_a_corpus_line_that_is_not_a_json_object_is_named(tmp_path, capsys):
    """A `.jsonl` line that is JSON but not an object is named (file and line) with the layout to
    write; a line that is not JSON at all gets the parser's own reason."""
    from condenser_lite.data.beir import load_documents

    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "one document"}\n"a string"\n{"text": "another"}\n')
    with pytest.raises(SchemaError, match=r"docs.jsonl:2 is not a JSON object \('\"a string\"'\); write one object "
                                          r"a line, such as \{\"text\": \"...\", \"title\": \"...\"\}"):
        load_documents(path)
    path.write_text('{"text": "one document"}\n{"text": "cut\n')  # not JSON at all: the parser's own reason
    with pytest.raises(DataSourceError, match=r"docs.jsonl \(ArrowInvalid: JSON parse error.*cut short"):
        load_documents(path)


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
    "CRLF line endings": (None, lambda d: [rewrite(p, lambda b: b.replace(b"\n", b"\r\n")) for p in _all_files(d)]),
    "UTF-8 byte-order marks": (None, lambda d: [rewrite(p, lambda b: b"\xef\xbb\xbf" + b) for p in _all_files(d)]),
    "qrels without a header": (None, lambda d: [rewrite(p, lambda b: b.split(b"\n", 1)[1]) for p in _all_files(d)[2:]]),
    "TREC qrels (qid 0 docid rel)": (None, lambda d: [rewrite(p, _trec_qrels) for p in _all_files(d)[2:]]),
    "qrels with an extra column": (None, lambda d: [rewrite(p, lambda b: b.replace(b"score\n", b"score\tnote\n")
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
    """Each folder of SAME_DATA (CRLF line endings, byte-order marks, qrels without a header, in
    TREC's four columns or with an extra column, integer ids, integer and string ids mixed, a gzipped
    corpus), and a path with spaces and non-ASCII, gives the plain folder's metrics without a
    warning, through `search` and through `evaluate` of its run."""
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
    rewrite(path, lambda b: b + b.split(b"\n")[0].replace(b'"text": "', b'"text": "Copy: ') + b"\n")


BAD_DATA = {
    "a document id twice": (lambda d: _duplicate_first_line(d / "corpus.jsonl"),
                            "corpus.jsonl: document id 'p0' appears 2 times (lines 1 and 13); ids must be unique"),
    "a query id twice": (lambda d: _duplicate_first_line(d / "queries.jsonl"),
                         "queries.jsonl: query id 'q1' appears 2 times (lines 1 and 10)"),
    "a document without _id": (lambda d: rewrite(d / "corpus.jsonl", lambda b: b.replace(b'"_id": "p2"', b'"_id": ""')),
                               "corpus.jsonl:3: a document without an _id (row 2)"),
    "space-separated qrels": (lambda d: rewrite(d / "qrels" / "test.tsv", lambda b: b.replace(b"\t", b" ")),
                              "test.tsv:1: 'query-id corpus-id score' is neither BEIR's header"),
    "an id holding a tab in the qrels": (lambda d: rewrite(d / "qrels" / "test.tsv",
                                                            lambda b: b + b"q1\tp\t1\t1\n"),
                                         "has 4 tab-separated fields where the file's first lines have 3; an id "
                                         "there holds a tab"),
    "qrels naming a query that is not there": (lambda d: rewrite(d / "qrels" / "test.tsv",
                                                                  lambda b: b + b"nosuchq\tp1\t1\n"),
                                               "1 query ids in the qrels have no query text (e.g. ['nosuchq']); the "
                                               "qrels and the queries come from different data sets or versions: add "
                                               "those queries to the queries file, or drop their lines from the qrels"),
}


@pytest.mark.parametrize("case", list(BAD_DATA))
def test_bad_beir_folders_are_refused_in_one_line(case, retriever, tmp_path, capsys):
    """A repeated document or query id, an empty id, space-separated qrels, an id holding a tab in
    the qrels, and qrels naming a query the queries file lacks: each refused in one line that says
    what is wrong and, for the qrels, what to do."""
    edit, expected = BAD_DATA[case]
    folder = write_beir(tmp_path) / "scifact"
    edit(folder)
    assert expected in one_error_line(cli(["search", "--model", retriever, "--data", folder, "--p-max-len", "64"],
                                          capsys))
