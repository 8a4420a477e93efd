"""Tests for condenser_lite.data.tevatron: Tevatron's training schema read from a mirror folder or
checked in memory, with errors that name the field and the file."""

from __future__ import annotations

import json

import datasets
import pytest
from locations import FIXTURES
from toy_data import EXAMPLES

from condenser_lite.data import sources as data
from condenser_lite.data import tevatron
from condenser_lite.data.tevatron import check_qrels, sample_queries, validate_training_schema
from condenser_lite.utils.errors import SchemaError


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


# ---- the training schema in memory, qrels and query samples --------------------------------------


def test_schema_errors_name_the_field():
    ds = datasets.Dataset.from_list(EXAMPLES)
    validate_training_schema(ds)  # fine
    with pytest.raises(SchemaError, match="negative_passages"):
        validate_training_schema(ds.remove_columns("negative_passages"))
    with pytest.raises(SchemaError, match="'query'"):
        validate_training_schema(ds.remove_columns("query"))
    bad = [dict(EXAMPLES[0], positive_passages=[{"title": "t", "text": "x"}])]
    with pytest.raises(SchemaError, match="docid"):
        validate_training_schema(datasets.Dataset.from_list(bad))
    with pytest.raises(SchemaError, match="no queries"):
        validate_training_schema(ds.select([]))


def test_check_qrels_counts_missing_ids():
    with pytest.raises(SchemaError, match=r"2 document ids .*'x1'"):
        check_qrels({"q": {"d1": 1, "x1": 1}, "r": {"x2": 1}}, ["d1", "d2"])
    with pytest.raises(SchemaError, match="1 query ids"):
        check_qrels({"q": {"d1": 1}, "zz": {"d1": 1}}, ["d1"], query_ids=["q"])
    with pytest.raises(SchemaError, match="empty"):
        check_qrels({}, ["d1"])


def test_sample_queries_seeded_nested_and_checked():
    ds = datasets.Dataset.from_dict({"query_id": [str(i) for i in range(50)]})
    a = sample_queries(ds, 10, seed=3)
    assert a["query_id"] == sample_queries(ds, 10, seed=3)["query_id"]
    assert a["query_id"] != sample_queries(ds, 10, seed=4)["query_id"]
    assert sample_queries(ds, 20, seed=3)["query_id"][:10] == a["query_id"]
    with pytest.raises(ValueError, match="only 50"):
        sample_queries(ds, 51, seed=0)
