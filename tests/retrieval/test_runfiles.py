"""TREC run files (condenser_lite/retrieval/runfiles.py): written and read back, ids with whitespace,
'%' and non-ASCII included, and malformed lines refused."""

import pytest

from condenser_lite.retrieval.runfiles import read_trec_run, write_trec_run
from condenser_lite.utils.errors import SchemaError


def test_trec_run_round_trip(tmp_path):
    run = {"q1": {"d1": 3.25, "d2": -1.0, "d3": 0.1234567891}, "q2": {"d9": 7.0}}
    path = tmp_path / "runs" / "run.trec"
    write_trec_run(run, path, tag="tiny")
    lines = path.read_text().splitlines()
    assert lines[0] == "q1 Q0 d1 1 3.25 tiny" and lines[2].split()[3] == "3"
    assert read_trec_run(path) == run
    # ids with whitespace (BEIR's climate-fever: 'Sustainable development:135'), '%' and non-ASCII
    odd = {"query one": {"a b": 2.0, "tab\there": 1.0, "100%": 0.5, "Café\u00a0ü": 0.25}, "Frage ä": {"x%41": 1.0}}
    write_trec_run(odd, path)
    assert all(len(line.split()) == 6 for line in path.read_text(encoding="utf-8").splitlines())
    assert path.read_text(encoding="utf-8").splitlines()[0].startswith("query%20one Q0 a%20b 1 ")
    assert read_trec_run(path) == odd
    path.write_text("q1 Q0 a%41b 1 1.0 other_tool\n")  # another tool's literal '%41' is not ours to decode
    assert read_trec_run(path) == {"q1": {"a%41b": 1.0}}
    with pytest.raises(SchemaError, match="empty query or document id"):
        write_trec_run({"q": {"": 1.0}}, path)
    path.write_text("q1 Q0 d1 1\n")
    with pytest.raises(ValueError, match="6 fields"):
        read_trec_run(path)


def test_another_tools_run_with_spaces_in_document_ids(tmp_path):
    """A BEIR set whose ids are article titles (`Tour de France:12`) in a run another tool wrote
    unescaped: the query id, Q0 and the last three fields leave the document id unambiguous."""
    path = tmp_path / "run.trec"
    path.write_text("q1 Q0 Tour de France:12 1 9.5 bm25\nq1\tQ0\tMount  Etna\t2\t3.0\tbm25\nq2 0 a b 1 1 x\n")
    assert read_trec_run(path) == {"q1": {"Tour de France:12": 9.5, "Mount  Etna": 3.0}, "q2": {"a b": 1.0}}
    path.write_text("query one Q0 d1 1 9.5 bm25\n")  # where the query id ends cannot be known
    with pytest.raises(SchemaError, match=r"run.trec:1: .*the query id holds whitespace.*query%20one"):
        read_trec_run(path)
    path.write_text("q1 Q0 d 1 2.0 my run\n")  # a tag with a space: the rank field is not an integer
    with pytest.raises(SchemaError, match=r"run.trec:1: expected 6 fields.*rank '2.0' is not an integer"):
        read_trec_run(path)
