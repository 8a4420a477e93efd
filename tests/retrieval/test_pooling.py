"""pooling.py and real checkpoints in and out: the shipped all-MiniLM-L6-v2 is read with its own
mean pooling (and ranks a SciFact slice as independent code does), every folder the library saves
is a sentence-transformers folder that encodes as the library does, a folder with only
tokenizer.json loads, and the command line says in one line when a pooling or a recipe is chosen
for a real checkpoint."""

import json
import random
import shutil

import numpy as np
import pytest
import torch
from command_line import cli, one_error_line
from locations import MIRROR, ROOT

from condenser_lite.retrieval.biencoder import BiEncoder
from condenser_lite.retrieval.pooling import CLS, Pooling, read_pooling, write_pooling
from condenser_lite.retrieval.search import encode
from condenser_lite.training.checkpoint import save_model
from condenser_lite.utils.errors import CheckpointError, ConfigError
from condenser_lite.utils.loading import saved_here, shipped_model

TEXTS = ["the cat sat on a mat", "volcano lava magma erupts", "jazz", "protein binds dna in cells that divide"]
needs_mirror = pytest.mark.skipif(not MIRROR.exists(), reason="local data mirror not found (../shared/data)")


def test_parse_and_refuse():
    assert Pooling.parse("mean+norm") == Pooling("mean", True) and str(Pooling.parse("CLS")) == "cls"
    assert Pooling("mean", True).default_temperature == 0.05 and CLS.default_temperature is None
    with pytest.raises(ConfigError, match="use cls, mean, cls"):
        Pooling.parse("max")


def test_mean_pooling_leaves_padding_out():
    hidden = torch.tensor([[[1.0, 0.0], [3.0, 2.0], [100.0, 100.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert Pooling("mean")(hidden, mask).tolist() == [[2.0, 1.0]]
    assert CLS(hidden, mask).tolist() == [[1.0, 0.0]]
    assert torch.linalg.norm(Pooling("mean", True)(hidden, mask)).item() == pytest.approx(1.0)


def test_the_shipped_model_is_found_through_its_package_and_declares_mean_pooling():
    folder = shipped_model()
    assert "site-packages" in folder or "dist-packages" in folder
    assert read_pooling(folder) == Pooling("mean", True)
    assert not saved_here(folder)  # a real checkpoint: fine-tuned with the pre-trained recipe
    model = BiEncoder.from_pretrained(folder)
    assert model.pooling == Pooling("mean", True) and model.temperature == 0.05


def test_a_pooling_the_library_cannot_compute_is_refused_in_one_line(ckpt, tmp_path):
    folder = tmp_path / "maxpool"
    shutil.copytree(ckpt, folder)
    write_pooling(folder, Pooling("mean"))
    config = json.loads((folder / "1_Pooling" / "config.json").read_text())
    config.update(pooling_mode_mean_tokens=False, pooling_mode_max_tokens=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="pools by max_tokens, which this library does not compute"):
        read_pooling(folder)


@pytest.mark.parametrize("pooling", ["cls", "mean+norm"])
def test_a_saved_retriever_encodes_in_sentence_transformers_as_in_the_library(ckpt, tokenizer, tmp_path, pooling):
    """What the library saves, sentence-transformers reads with the same pooling: without the
    sentence-transformers files it falls back to mean pooling, far from a CLS retriever's vectors."""
    from sentence_transformers import SentenceTransformer

    folder = tmp_path / "saved"
    model = BiEncoder.from_pretrained(ckpt, pooling=pooling)
    save_model(model, folder)
    tokenizer.save_pretrained(folder)
    assert saved_here(folder) and read_pooling(folder) == Pooling.parse(pooling)
    ours = encode(folder, TEXTS, max_len=32)
    theirs = SentenceTransformer(str(folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert np.abs(ours - theirs).max() < 1e-4


def test_the_committed_checkpoints_encode_in_sentence_transformers_as_transformers_cls():
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    folders = sorted((ROOT / "results" / "checkpoints").glob("*/*"))
    assert folders
    for folder in folders:
        st = SentenceTransformer(str(folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
        tok, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
        with torch.no_grad():
            cls = np.stack([model(**tok(t, return_tensors="pt")).last_hidden_state[0, 0].numpy() for t in TEXTS])
        assert np.abs(st - cls).max() < 1e-4, folder


def test_a_folder_with_only_tokenizer_json_loads(tmp_path):
    from condenser_lite.data.tokenizer import load_tokenizer

    folder = tmp_path / "no_vocab"
    shutil.copytree(shipped_model(), folder)
    (folder / "vocab.txt").unlink()
    assert (load_tokenizer(folder)(TEXTS)["input_ids"] == load_tokenizer(shipped_model())(TEXTS)["input_ids"])


def _scifact_slice(folder, n_queries=40, n_others=200):
    """A BEIR folder of the first ``n_queries`` SciFact test queries, their judged abstracts and
    ``n_others`` others drawn with a fixed seed."""
    src = MIRROR / "scifact"
    docs = [json.loads(line) for line in (src / "corpus.jsonl").open()]
    queries = {q["_id"]: q for q in map(json.loads, (src / "queries.jsonl").open())}
    qrels = {}
    for line in list((src / "qrels" / "test.tsv").open())[1:]:
        q, d, g = line.split()
        qrels.setdefault(q, {})[d] = int(g)
    qids = sorted(qrels)[:n_queries]
    judged = {d for q in qids for d in qrels[q]}
    others = random.Random(0).sample([d["_id"] for d in docs if d["_id"] not in judged], n_others)
    keep = [d for d in docs if d["_id"] in judged | set(others)]
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in keep))
    (folder / "queries.jsonl").write_text("".join(json.dumps(queries[q]) + "\n" for q in qids))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q in qids for d, g in qrels[q].items()))
    return keep, [queries[q]["text"] for q in qids], {q: qrels[q] for q in qids}, qids


@needs_mirror
@pytest.mark.protocol
def test_search_on_the_real_model_ranks_as_independent_mean_pooling_code(tmp_path, capsys):
    """``search`` uses the model's own mean pooling: on a SciFact slice its nDCG@10 is within 0.01
    of a plain transformers loop that mean-pools, normalises and joins title and text with a
    space (MTEB's way). Pooled by [CLS], as the library did before, it scores 0.02 lower."""
    import ir_measures
    from transformers import AutoModel, AutoTokenizer

    docs, queries, qrels, qids = _scifact_slice(tmp_path / "slice")
    tok, model = AutoTokenizer.from_pretrained(shipped_model()), AutoModel.from_pretrained(shipped_model()).eval()

    def mean_pooled(texts):
        out = []
        with torch.no_grad():
            for s in range(0, len(texts), 32):
                batch = tok(texts[s:s + 32], padding=True, truncation=True, max_length=256, return_tensors="pt")
                hidden, mask = model(**batch).last_hidden_state, batch["attention_mask"].unsqueeze(-1).float()
                out.append(torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy())
        return np.concatenate(out)

    scores = mean_pooled(queries) @ mean_pooled([f"{d.get('title', '')} {d['text']}".strip() for d in docs]).T
    run = {q: {docs[j]["_id"]: float(scores[i, j]) for j in range(len(docs))} for i, q in enumerate(qids)}
    independent = ir_measures.calc_aggregate([ir_measures.nDCG @ 10], qrels, run)[ir_measures.nDCG @ 10]
    code, out, err = cli(["search", "--model", shipped_model(), "--data", tmp_path / "slice", "--p-max-len", 256,
                          "--q-max-len", 256], capsys)
    assert code == 0, err
    ours = json.loads(out.strip().splitlines()[-1])["nDCG@10"]
    assert abs(ours - independent) < 0.01, (ours, independent)
    code, out, err = cli(["search", "--model", shipped_model(), "--data", tmp_path / "slice", "--p-max-len", 256,
                          "--q-max-len", 256, "--pooling", "cls"], capsys)
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert code == 0 and len(warnings) == 1 and "pools by mean+norm; encoding by cls" in warnings[0], err
    assert json.loads(out.strip().splitlines()[-1])["nDCG@10"] < independent - 0.01


def test_finetune_names_its_recipe_by_the_checkpoint(monkeypatch, capsys, tmp_path, ckpt):
    """Without --preset, a checkpoint this library did not train gets the pre-trained recipe (lr
    2e-5), one of its own the tiny one; either way one line names it."""
    import argparse

    from condenser_lite.cli_settings import recipe_from_args

    def recipe(init):
        capsys.readouterr()
        cfg = recipe_from_args(argparse.Namespace(preset=None, data="scifact", init=init, set=[]))
        return cfg.lr, capsys.readouterr().err

    lr, said = recipe(shipped_model())
    assert lr == 2e-5 and said.count("\n") == 1 and "recipe: pretrained (lr 2e-05)" in said
    own = tmp_path / "own"
    shutil.copytree(ckpt, own)
    (own / "condenser_lite.json").write_text("{}")
    lr, said = recipe(own)
    assert lr == 1e-3 and "recipe: tiny (lr 0.001)" in said


def test_a_real_checkpoint_is_pre_trained_at_the_papers_rate_and_its_missing_head_is_said(capsys):
    import argparse
    import warnings

    from condenser_lite.cli_settings import stage_config_from_args
    from condenser_lite.modeling.condenser import BertMLM

    def stage(extra):
        args = argparse.Namespace(preset="tiny", method="condenser", init=shipped_model(), corpus=None,
                                  min_span=None, set=extra)
        capsys.readouterr()
        return stage_config_from_args(args), capsys.readouterr().err

    cfg, said = stage([])
    assert cfg.lr == 1e-4 and "pre-training rate: lr 0.0001" in said
    cfg, said = stage(["stages.condenser.lr=3e-5"])
    assert cfg.lr == 3e-5 and said == ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        BertMLM.from_pretrained(shipped_model())
    lines = [str(w.message) for w in caught]
    assert len(lines) == 1 and "has no MLM head" in lines[0], lines


def test_finetune_pooling_is_checked_where_it_enters(ckpt, capsys, tmp_path):
    line = one_error_line(cli(["finetune", "--init", ckpt, "--output-dir", tmp_path / "ft",
                               "--set", "finetune.pooling=max"], capsys))
    assert "pooling 'max': use cls, mean, cls+norm or mean+norm" in line
