"""TREC run files (condenser_lite/retrieval/runfiles.py): written and read back, ids with whitespace,
'%' and non-ASCII included, and malformed lines refused. Through `search` and `evaluate`: such ids
round-trip, another tool's run is read, and runs or labels that do not fit the corpus are refused."""

import json
import shutil
from pathlib import Path

import pytest
from command_line import FINETUNE, cli, one_error_line
from toy_data import write_beir

from condenser_lite.retrieval.metrics import evaluate_run
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


def test_a_run_file_from_another_tool_with_spaces_in_document_ids(retriever, tmp_path, capsys):
    """Another tool's run with unescaped document ids holding spaces (legal in BEIR) is read, the
    query id first and rank, score and tag last; a query id holding whitespace is ambiguous and
    refused in one line that names the fix (%20)."""
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


ODD_IDS = {"p0": "Sustainable development:135", "p1": "tab\there", "p2": "Café ünïcode", "p3": "100%_(song)",
           "p4": "literal%20escape", "d1": "query one", "q1": "train\tq", "q2": "Frage ä"}


@pytest.mark.protocol  # fine-tunes
def test_ids_with_whitespace_round_trip_through_run_files(retriever, tmp_path, capsys):
    """Ids with spaces, tabs, '%' and non-ASCII: `search` writes six fields a line (the ids
    percent-encoded), `evaluate` reads that run back to the ids and metrics `search` printed, and
    `finetune` reads the same folder."""
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
