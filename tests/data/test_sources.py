"""Tests for condenser_lite.data.sources: where data come from (the Hub or the local mirror), the
registry, STS-b and the pre-training corpus on the mirror, and the error messages that say what to do."""

from __future__ import annotations

import json

import datasets
import huggingface_hub.constants
import pytest
from locations import MIRROR as SHARED

from condenser_lite.data import beir, tevatron, wikitext
from condenser_lite.data import sources as data


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


def test_loading_summary_is_logged_once_per_process(mirror, caplog, monkeypatch):
    """A run loads the corpus at every stage; its per-source counts are logged the first time
    only, and every load still carries them in ``info.description``."""
    monkeypatch.setattr(data, "_REPORTED", set())
    with caplog.at_level("INFO", logger=data.logger.name):
        first, second = data.load_pretraining_corpus(["news"]), data.load_pretraining_corpus(["news"])
    lines = [r.getMessage() for r in caplog.records if "documents ->" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("news: 300 documents -> 300 sections, ")
    assert json.loads(first.info.description) == json.loads(second.info.description)
    assert json.loads(second.info.description)["news"]["documents"] == 300


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


# ---- full scale, read from a tiny made-up mirror of the Hub's parquet files ----------------------


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
