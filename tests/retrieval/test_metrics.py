"""metrics.py: ir_measures wrapper against hand-computed values, nb-recall, DPR top-k accuracy, and
queries without a relevant document named."""

import math
import random
import shutil

import pytest
from command_line import cli
from toy_data import rewrite

from condenser_lite.retrieval.metrics import (
    check_run_depth,
    dpr_tokens,
    evaluate_run,
    has_answer,
    metric_depth,
    nb_recall,
    topk_answer_accuracy,
)


def _ranked(docs):
    return [d for d, _ in sorted(docs.items(), key=lambda x: -x[1])]


def brute_ndcg(qrel, docs, k):
    ranked = _ranked(docs)[:k]
    dcg = sum(qrel.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked))
    ideal = sorted(qrel.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg


def brute_rr(qrel, docs, k):
    for i, d in enumerate(_ranked(docs)[:k]):
        if qrel.get(d, 0) > 0:
            return 1 / (i + 1)
    return 0.0


def brute_recall(qrel, docs, k):
    rel = {d for d, g in qrel.items() if g > 0}
    return len(rel & set(_ranked(docs)[:k])) / len(rel)


QRELS = {"q1": {"d1": 1, "d2": 2, "d5": 1}, "q2": {"d9": 1}, "q3": {"d1": 1}}
RUN = {
    "q1": {"d3": 0.9, "d2": 0.8, "d1": 0.7, "d4": 0.6},
    # d9 at rank 11: outside the top 10, inside the top 100
    "q2": {**{f"x{i}": 1.0 - i / 100 for i in range(10)}, "d9": 0.5},
    # q3 missing: counts as zero; q4 has no qrels: ignored
    "q4": {"d1": 1.0},
}


def test_hand_values():
    # q1 by hand: DCG = 2/log2(3) + 1/log2(4); IDCG = 2 + 1/log2(3) + 1/log2(4)
    ndcg_q1 = (2 / math.log2(3) + 0.5) / (2 + 1 / math.log2(3) + 0.5)
    got = evaluate_run(QRELS, RUN, ("nDCG@10", "RR@10", "R@100", "R@10"))
    assert got["nDCG@10"] == pytest.approx(ndcg_q1 / 3, abs=1e-6)
    assert got["RR@10"] == pytest.approx(0.5 / 3, abs=1e-6)
    assert got["R@100"] == pytest.approx((2 / 3 + 1 + 0) / 3, abs=1e-6)
    assert got["R@10"] == pytest.approx((2 / 3 + 0 + 0) / 3, abs=1e-6)


def test_per_query_and_missing_queries_are_zero():
    table = evaluate_run(QRELS, RUN, per_query=True)
    assert set(table) == {"q1", "q2", "q3"}
    assert table["q3"] == {"nDCG@10": 0.0, "RR@10": 0.0, "R@100": 0.0}
    assert table["q2"]["R@100"] == pytest.approx(1.0)


def test_matches_brute_force_on_random_runs():
    rng = random.Random(0)
    docs = [f"d{i}" for i in range(60)]
    qrels, run = {}, {}
    for q in range(20):
        rel = rng.sample(docs, rng.randint(1, 4))
        qrels[f"q{q}"] = {d: rng.choice([1, 2, 3]) for d in rel}
        # distinct scores: no ties, so the order is unambiguous
        scores = rng.sample(range(10_000), 30)
        run[f"q{q}"] = {d: s / 100 for d, s in zip(rng.sample(docs, 30), scores)}
    got = evaluate_run(qrels, run, ("nDCG@10", "MRR@10", "R@20"))
    n = len(qrels)
    assert got["nDCG@10"] == pytest.approx(sum(brute_ndcg(qrels[q], run[q], 10) for q in qrels) / n, abs=1e-6)
    assert got["MRR@10"] == pytest.approx(sum(brute_rr(qrels[q], run[q], 10) for q in qrels) / n, abs=1e-6)
    assert got["R@20"] == pytest.approx(sum(brute_recall(qrels[q], run[q], 20) for q in qrels) / n, abs=1e-6)


def test_bad_inputs():
    with pytest.raises(ValueError, match="qrels are empty"):
        evaluate_run({}, RUN)
    with pytest.raises(ValueError, match="cannot parse"):
        evaluate_run(QRELS, RUN, ("notAMetric@x",))


def test_nb_recall_hand_examples():
    stage2 = {"q1": {"a": 5, "b": 4, "c": 3, "d": 2}, "q2": {"x": 2, "y": 1}}
    stage1 = {"q1": {"b": 9, "z": 8, "a": 7, "c": 1}, "q2": {"y": 1, "w": 0.5}}
    # q1: stage-2 top 2 = {a, b}; stage-1 top 3 = {b, z, a} -> 2/2. q2: top 2 {x, y}; top 3 {y, w} -> 1/2
    assert nb_recall(stage1, stage2, n=2, k=3) == pytest.approx((1.0 + 0.5) / 2)
    # q1 with k=1: stage-1 top 1 = {b} -> 1/2; q2: {y} -> 1/2
    assert nb_recall(stage1, stage2, n=2, k=1) == pytest.approx(0.5)
    # n=4 on q1: top 4 of stage 2 {a,b,c,d} vs stage-1 top 4 {b,z,a,c} -> 3/4; q2 has 2 docs: |{y}|/4
    assert nb_recall(stage1, stage2, n=4, k=4) == pytest.approx((0.75 + 0.25) / 2)
    # a query missing from stage 1 scores zero
    assert nb_recall({}, stage2, n=2, k=3) == 0.0
    with pytest.raises(ValueError):
        nb_recall(stage1, stage2, n=0, k=3)


def test_answer_matching_follows_dpr():
    """DPR's rule (its SimpleTokenizer): punctuation characters are tokens, articles are kept."""
    assert dpr_tokens("The U.S.-based  Company!") == ["the", "u", ".", "s", ".", "-", "based", "company", "!"]
    assert has_answer("It was founded in the United States in 1999.", ["united states"])
    assert has_answer("Café del Mar", ["cafe\u0301 del mar"])  # composed vs decomposed accent
    assert not has_answer("Unitedstates", ["united states"])
    assert not has_answer("a start", ["art"])  # whole tokens only
    # where DPR and a SQuAD-style normaliser (punctuation and articles dropped) disagree:
    assert not has_answer("An apple a day", ["the apple"])  # articles are not dropped
    assert not has_answer("the band The Who played", ["who played the"])
    assert not has_answer("AT T was founded", ["AT&T"])  # "&" is a token of its own
    assert has_answer("AT&T was founded", ["at&t"]) and has_answer("in the U.S. army", ["U.S."])
    assert not has_answer("in the US army", ["U.S."])


def test_topk_answer_accuracy():
    passages = {"p1": "Paris is the capital.", "p2": "Berlin is big.", "p3": "Rome, Italy"}
    run = {
        "q1": {"p2": 3.0, "p1": 2.0, "p3": 1.0},  # answer at rank 2
        "q2": {"p3": 3.0, "p1": 2.0},  # answer at rank 1
        # q3 missing from the run: counts as a miss
    }
    answers = {"q1": ["paris"], "q2": ["Rome"], "q3": ["Madrid"]}
    got = topk_answer_accuracy(run, passages, answers, ks=(1, 2, 100))
    assert got == {"Top-1": pytest.approx(1 / 3), "Top-2": pytest.approx(2 / 3), "Top-100": pytest.approx(2 / 3)}
    with pytest.raises(KeyError, match="not in passages_text"):
        topk_answer_accuracy({"q1": {"nope": 1.0}}, passages, {"q1": ["x"]})


def test_run_depth_must_cover_the_deepest_metric():
    assert metric_depth(["RR@10", "R@1000", "nDCG@10"]) == 1000 and metric_depth(["Top-5", "Top-100"]) == 100
    assert metric_depth(["MRR@10"]) == 10 and metric_depth(["AP"]) is None
    run = {"q1": {f"d{i}": float(-i) for i in range(100)}, "q2": {"d1": 1.0}}
    assert check_run_depth(run, ["RR@10", "R@100"]) == 100
    with pytest.raises(ValueError, match=r"at most 100 documents.*R@1000.*--k 1000"):
        check_run_depth(run, ["RR@10", "R@1000"], n_docs=8_841_823)
    # a run that ranks the whole corpus is complete at any cutoff
    assert check_run_depth(run, ["R@1000"], n_docs=100) == 100
    with pytest.raises(ValueError, match="Top-200"):
        check_run_depth(run, ["Top-20", "Top-200"])


def test_queries_with_no_relevant_document_are_said(beir, retriever, tmp_path, capsys):
    """A query whose qrels are all 0 scores 0, as in BEIR, and a warning names it with the way to
    leave it out of the mean."""
    root = tmp_path / "zero"
    shutil.copytree(beir, root)
    rewrite(root / "scifact" / "qrels" / "test.tsv", lambda b: b.replace(b"\t1\n", b"\t0\n", 1))
    code, out, err = cli(["search", "--model", retriever, "--data-dir", root, "--p-max-len", "64"], capsys)
    assert code == 0
    assert ("warning: 1 of the 3 labelled queries have no relevant document (every grade is 0 or less, e.g. ['d1']): "
            "they score 0, as in BEIR and pytrec_eval; drop their qrels lines") in err


def test_ties_are_ranked_one_way_for_every_measure():
    """Every measure of one call orders tied scores by document id, ascending: the same as
    pytrec_eval (trec_eval itself) given the run with the ties broken that way beforehand. Plain
    ir_measures gives the tie in the issue's example two orders in one call (nDCG 0.631, RR 1.0)."""
    import pytrec_eval

    assert evaluate_run({"q": {"a": 1}}, {"q": {"a": 1.0, "b": 1.0}}, ("nDCG@10", "RR@10")) == \
        {"nDCG@10": 1.0, "RR@10": 1.0}
    rng = random.Random(3)
    qrels, run = {}, {}
    for q in range(30):  # scores drawn from three values: a run full of ties, as BM25's can be
        docs = [f"d{j:02d}" for j in range(40)]
        run[f"q{q}"] = {d: float(rng.choice((1, 2, 3))) for d in docs}
        qrels[f"q{q}"] = {d: rng.choice((1, 2)) for d in rng.sample(docs, 3)}
    ours = evaluate_run(qrels, run, ("nDCG@10", "RR@10", "R@20"), per_query=True)
    # the same order, made explicit: rank by score, then document id ascending; RR@10 reads the top 10
    broken = {q: {d: -i for i, d in enumerate(sorted(docs, key=lambda d: (-docs[d], d)))} for q, docs in run.items()}
    top10 = {q: {d: s for d, s in docs.items() if s > -10} for q, docs in broken.items()}
    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.20"}).evaluate(broken)
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    for q in run:
        assert ours[q]["nDCG@10"] == pytest.approx(full[q]["ndcg_cut_10"], abs=1e-9)
        assert ours[q]["R@20"] == pytest.approx(full[q]["recall_20"], abs=1e-9)
        assert ours[q]["RR@10"] == pytest.approx(rr[q]["recip_rank"], abs=1e-9)
