"""Tests for condenser_lite.data.sources and beir: loaders on the local mirror, parsers, and the error messages."""

from __future__ import annotations

import bz2
import json
import shutil
from pathlib import Path

import datasets
import huggingface_hub.constants
import pytest

from condenser_lite.data import beir, tevatron, wikitext
from condenser_lite.data import sources as data

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
needs_mirror = pytest.mark.skipif(not (SHARED / "README.md").exists(),
                                  reason=f"local data mirror not found at {SHARED}")


@pytest.fixture
def mirror(monkeypatch) -> Path:
    """Point the loaders at the shared mirror through the environment, as CI does."""
    if not (SHARED / "README.md").exists():
        pytest.skip(f"local data mirror not found at {SHARED}")
    monkeypatch.setenv(data.DATA_ENV, str(SHARED))
    return SHARED


@pytest.fixture
def offline(monkeypatch):
    """No mirror and no Hub: what a user sees on an offline machine."""
    monkeypatch.delenv(data.DATA_ENV, raising=False)
    # The libraries read HF_HUB_OFFLINE at import time, so set their flags directly.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


@pytest.fixture(scope="module")
def corpus():
    """The scaled-down pre-training corpus, parsed once for the module (about 2 s)."""
    if not (SHARED / "README.md").exists():
        pytest.skip(f"local data mirror not found at {SHARED}")
    return data.load_pretraining_corpus(data_dir=SHARED)


# ---- where data come from ----------------------------------------------------------------------

def test_resolve_mirror_precedence(tmp_path, monkeypatch):
    env_dir, arg_dir = tmp_path / "env", tmp_path / "arg"
    env_dir.mkdir()
    arg_dir.mkdir()
    monkeypatch.delenv(data.DATA_ENV, raising=False)
    assert data.resolve_mirror() is None  # default: the Hub
    monkeypatch.setenv(data.DATA_ENV, str(env_dir))
    assert data.resolve_mirror() == env_dir.resolve()
    assert data.resolve_mirror(arg_dir) == arg_dir.resolve()  # the argument wins
    with pytest.raises(data.DataSourceError, match="not a directory"):
        data.resolve_mirror(tmp_path / "missing")


def test_registry_lists_hub_ids():
    for name in (*data.PRETRAINING_SOURCES, "scifact", "stsb", *data.TEVATRON_NAMES):
        spec = data.REGISTRY[name]
        assert spec.hub_id and spec.mirror_files


# ---- SciFact -----------------------------------------------------------------------------------

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


# ---- STS-b -------------------------------------------------------------------------------------

def test_load_stsb(mirror):
    test = data.load_stsb("test")
    assert test.column_names == ["sentence1", "sentence2", "score"]
    assert len(test) == 1379
    scores = test["score"]
    assert min(scores) >= 0.0 and max(scores) <= 1.0
    assert max(scores) == pytest.approx(1.0) and min(scores) == pytest.approx(0.0)  # [0,5] / 5
    assert test[0]["score"] == pytest.approx(2.5 / 5)  # first pair of the CSV
    assert len(data.load_stsb("dev")) == len(data.load_stsb("validation")) == 1500
    with pytest.raises(ValueError, match="split must be one of"):
        data.load_stsb("val")


# ---- pre-training corpus -----------------------------------------------------------------------

def test_pretraining_corpus_shape(corpus):
    assert corpus.column_names == ["source", "doc_id", "title", "section", "text"]
    summary = data.corpus_summary(corpus)
    assert set(summary) == {"enwiki", "news", "wikitext"}
    assert summary["news"]["documents"] == 300
    assert summary["enwiki"]["documents"] > 90  # 106 articles, a few may lose every section
    for stats in summary.values():
        assert stats["words"] > 50_000
    assert all(len(t.split()) >= wikitext.MIN_SECTION_WORDS for t in corpus["text"])
    # Headings survive: many sections of the wiki sources are named, the lead ones are "".
    for src in ("enwiki", "wikitext"):
        sections = [s for s, so in zip(corpus["section"], corpus["source"]) if so == src]
        assert sum(bool(s) for s in sections) > len(sections) / 2
        assert "" in sections
    # The stored parse report agrees with the rows.
    report = json.loads(corpus.info.description)
    assert {s: r["sections"] for s, r in report.items()} == {s: v["sections"] for s, v in summary.items()}
    assert report["enwiki"]["dropped_boilerplate"] > 0 and report["enwiki"]["dropped_short"] > 0


def test_pretraining_corpus_is_clean(corpus):
    by_source: dict[str, list[str]] = {}
    for src, text in zip(corpus["source"], corpus["text"]):
        by_source.setdefault(src, []).append(text)
    enwiki = "\n".join(by_source["enwiki"])
    for residue in ("{{", "}}", "[[", "]]", "<ref", "'''", "{|", "&nbsp;", "Category:"):
        assert residue not in enwiki, residue
    wikitext_sections = "\n".join(by_source["wikitext"])
    for residue in ("<unk>", " @-@ ", " @,@ ", " @.@ ", "\ufeff"):
        assert residue not in wikitext_sections, residue
    assert "[UNK]" in wikitext_sections
    assert all("\n" not in t for t in by_source["news"])  # one paragraph per news article


def test_pretraining_sources_subset_and_unknown(mirror):
    news = data.load_pretraining_corpus(["news"])
    assert set(news["source"]) == {"news"} and len(news) == 300
    with pytest.raises(ValueError, match="known data sets: enwiki, news, wikitext"):
        data.load_pretraining_corpus(["enwiki", "books"])
    with pytest.raises(ValueError, match="non-empty list"):
        data.load_pretraining_corpus("enwiki")


# ---- parsers on small made-up inputs ------------------------------------------------------------

MARKUP = """{{Infobox person|name=X|note={{nested|deep}}}}
'''Ada''' was a [[mathematician]] and [[Writer|writer]].<ref name="a">{{cite book|title=T}}</ref> She wrote [http://example.org notes] on the [[Analytical Engine]].
[[File:Ada.jpg|thumb|Portrait of [[Ada Lovelace|Ada]]]]
{| class="wikitable"
| cell || {{flag}}
|}
== Early life ==
Born in London.<!-- a comment --> See [[Category:1815 births]].
* a list item with ''italics''
[[de:Ada Lovelace]]"""


def test_clean_wikitext_markup():
    plain = wikitext.clean_wikitext_markup(MARKUP)
    sections = wikitext.split_wiki_sections(plain)
    assert [h for h, _ in sections] == ["", "Early life"]
    lead, early = ("\n".join(p) for _, p in sections)
    assert lead == ("Ada was a mathematician and writer. She wrote notes on the Analytical Engine.")
    assert early == "Born in London. See.\na list item with italics"


def _write_dump(path: Path) -> None:
    body = "Plain words here. " * 10
    page = ("<page><title>{title}</title><ns>{ns}</ns><id>{pid}</id>{redirect}"
            "<revision><text xml:space=\"preserve\">{text}</text></revision></page>")
    pages = [
        page.format(title="Alpha", ns=0, pid=1, redirect="",
                    text=f"{body}\n\n== History ==\n{body}\n== Short ==\ntoo short\n== References ==\n{body}"),
        page.format(title="Beta", ns=0, pid=2, redirect='<redirect title="Alpha" />', text="#REDIRECT [[Alpha]]"),
        page.format(title="Wikipedia:About", ns=4, pid=3, redirect="", text=body),
    ]
    xml = ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">'
           + "".join(pages) + "</mediawiki>")
    with bz2.open(path, "wt", encoding="utf-8") as fh:
        fh.write(xml)


def test_parse_mediawiki_dump(tmp_path):
    dump = tmp_path / "tiny.xml.bz2"
    _write_dump(dump)
    rows, stats = wikitext.parse_mediawiki_dump(dump)
    assert [(r["doc_id"], r["title"], r["section"]) for r in rows] == [
        ("enwiki-1", "Alpha", ""), ("enwiki-1", "Alpha", "History")]
    assert stats.documents == 1  # redirect and project page skipped
    assert stats.dropped_short == 1 and stats.dropped_boilerplate == 1


def test_parse_wikitext_lines():
    body = "word @-@ like , 3 @.@ 5 <unk> text " * 4
    lines = ["\ufeff ", " = Title One = ", "", f" {body}", " = = Part = = ", f" {body}",
             " = = = Deeper = = = ", " tiny ", " = Title Two = ", f" {body}"]
    rows, stats = wikitext.parse_wikitext_lines(lines, prefix="wt")
    assert [(r["doc_id"], r["title"], r["section"]) for r in rows] == [
        ("wt-0", "Title One", ""), ("wt-0", "Title One", "Part"), ("wt-1", "Title Two", "")]
    assert rows[0]["text"].startswith("word-like , 3.5 [UNK] text")
    assert stats.dropped_short == 1 and stats.documents == 2


# ---- Tevatron ----------------------------------------------------------------------------------

def test_load_tevatron_fixture():
    ds = tevatron.load_tevatron("Tevatron/scifact", "train", data_dir=FIXTURES / "tevatron_mirror")
    assert ds.column_names[:4] == list(tevatron.TEVATRON_FIELDS)
    assert len(ds) == 3
    assert ds[1]["negative_passages"] == []
    assert ds[0]["positive_passages"][0] == {"docid": "d1", "title": "Vitamin D and fractures",
                                             "text": ds[0]["positive_passages"][0]["text"]}
    tevatron.validate_tevatron(ds)
    corpus = tevatron.load_tevatron_corpus("scifact", data_dir=FIXTURES / "tevatron_mirror")
    assert corpus.column_names == ["docid", "title", "text"] and len(corpus) == 3
    with pytest.raises(ValueError, match="known: Tevatron/msmarco-passage"):
        tevatron.load_tevatron("Tevatron/trec-covid")
    with pytest.raises(ValueError, match="split must be one of"):
        tevatron.load_tevatron("scifact", "validation", data_dir=FIXTURES / "tevatron_mirror")


def test_tevatron_integer_ids_become_strings(tmp_path):
    (tmp_path / "msmarco-passage").mkdir()
    row = {"query_id": 7, "query": "q", "positive_passages": [{"docid": 1, "title": "", "text": "t"}],
           "negative_passages": []}
    (tmp_path / "msmarco-passage" / "train.jsonl").write_text(json.dumps(row) + "\n")
    ds = tevatron.load_tevatron("msmarco-passage", data_dir=tmp_path)
    assert ds[0]["query_id"] == "7" and ds[0]["positive_passages"][0]["docid"] == "1"


@pytest.mark.parametrize("drop, missing", [("query", "query"), ("docid", "docid")])
def test_tevatron_schema_error(tmp_path, drop, missing):
    (tmp_path / "scifact").mkdir()
    rows = [json.loads(line) for line in
            (FIXTURES / "tevatron_mirror" / "scifact" / "train.jsonl").read_text().splitlines()]
    for r in rows:
        r.pop(drop, None)
        for p in r["negative_passages"]:
            p.pop(drop, None)
    bad = tmp_path / "scifact" / "train.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(data.SchemaError, match=rf"no field '{missing}'") as err:
        tevatron.load_tevatron("scifact", data_dir=tmp_path)
    assert str(bad) in str(err.value)


def test_validate_tevatron_in_memory():
    good = datasets.Dataset.from_list([{"query_id": "1", "query": "q",
                                        "positive_passages": [{"docid": "a", "title": "", "text": "x"}],
                                        "negative_passages": [{"docid": "b", "title": "", "text": "y"}]}])
    assert tevatron.validate_tevatron(good) is good
    bad = good.remove_columns("negative_passages")
    with pytest.raises(data.SchemaError, match="negative_passages"):
        tevatron.validate_tevatron(bad, source="my rows")
    assert tevatron.validate_tevatron(bad, require_passages=False) is bad
    streamed = good.to_iterable_dataset()
    assert tevatron.validate_tevatron(streamed) is streamed


# ---- errors that say what to do ----------------------------------------------------------------

def test_offline_without_mirror_names_hub_id_and_fix(offline):
    with pytest.raises(data.DataSourceError) as err:
        beir.load_beir("scifact")
    msg = str(err.value)
    assert "BeIR/scifact" in msg and "CONDENSER_LITE_DATA" in msg and "data_dir=" in msg
    with pytest.raises(data.DataSourceError, match="sentence-transformers/stsb"):
        data.load_stsb("test")
    with pytest.raises(data.DataSourceError, match="Salesforce/wikitext"):
        data.load_pretraining_corpus(["wikitext"])
    with pytest.raises(data.DataSourceError, match="Tevatron/wikipedia-nq"):
        tevatron.load_tevatron("wikipedia-nq")


def test_mirror_missing_a_file(tmp_path):
    (tmp_path / "scifact").mkdir()
    (tmp_path / "scifact" / "corpus.jsonl").write_text('{"_id": "1", "title": "t", "text": "x"}\n')
    with pytest.raises(data.DataSourceError) as err:
        beir.load_beir("scifact", data_dir=tmp_path)
    msg = str(err.value)
    assert str(tmp_path / "scifact") in msg and "queries.jsonl, qrels/<split>.tsv" in msg
    assert "qrels/<split>.tsv (query-id, corpus-id, score)" in msg  # the expected layout is spelled out
    assert "BeIR/scifact" in msg  # and the Hub alternative
    with pytest.raises(data.DataSourceError, match="stsb-en-test.csv"):
        data.load_stsb("test", data_dir=tmp_path)


def test_any_beir_name_reads_its_mirror_folder_or_says_where_it_looked(tmp_path):
    fixture = Path(__file__).parent / "fixtures" / "bike_beir"
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
    folder = Path(__file__).parent / "fixtures" / "bike_beir"
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
    folder = Path(__file__).parent / "fixtures" / "bike_beir"
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


# ---- full scale, read from a tiny made-up mirror of the Hub's parquet files ----------------------

def test_split_plain_article():
    body = "This paragraph is long enough to be prose and it ends with a full stop."
    text = f"{body}\n\n{body}\n\nEarly life\n\n{body}\nSecond line.\n\nSee also\n\nOther page\nAnother page"
    sections = wikitext.split_plain_article(text)
    assert [h for h, _ in sections] == ["", "Early life", "See also"]
    assert sections[1][1] == [body, "Second line."]


def test_full_scale_streams_sections(tmp_path):
    prose = " ".join(["Words of a long enough paragraph for the section filter."] * 3)
    wiki = tmp_path / "wikipedia-20231101.en"
    wiki.mkdir()
    datasets.Dataset.from_dict({
        "id": ["12"], "url": ["u"], "title": ["Anarchism"],
        "text": [f"{prose}\n\nHistory\n\n{prose}\n\nReferences\n\n{prose}"],
    }).to_parquet(wiki / "train-00000-of-00001.parquet")
    wt = tmp_path / "wikitext-103-raw-v1"
    wt.mkdir()
    datasets.Dataset.from_dict({"text": ["", " = Robert = \n", f" {prose} \n", " = = Career = = \n",
                                         f" {prose} \n"]}).to_parquet(wt / "train-00000-of-00001.parquet")
    stream = data.load_pretraining_corpus(["enwiki", "wikitext"], data_dir=tmp_path, full=True)
    assert isinstance(stream, datasets.IterableDataset)
    rows = [(r["source"], r["title"], r["section"]) for r in stream]
    assert rows == [("enwiki", "Anarchism", ""), ("enwiki", "Anarchism", "History"),
                    ("wikitext", "Robert", ""), ("wikitext", "Robert", "Career")]
