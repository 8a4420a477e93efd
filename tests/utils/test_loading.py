"""Checkpoint files (condenser_lite/utils/loading.py): a saved Condenser's backbone is a plain BERT
checkpoint every loader reads, and the authors' head file (model.pt, local or from the Hub) loads.
Loading reports only real gaps and is quiet unless --debug; a model of another architecture, a
tokenizer of another model and a length above the position limit are refused in one line."""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from command_line import FINETUNE, cli, finetune_with, one_error_line
from toy_data import tiny_rows
from toy_models import make_batch, make_condenser
from transformers import AutoModel, AutoModelForMaskedLM, BertForMaskedLM, BertModel

from condenser_lite.cli import main
from condenser_lite.modeling.condenser import Condenser
from condenser_lite.utils import loading
from condenser_lite.utils.errors import CheckpointError
from condenser_lite.utils.loading import AUTHORS_HEAD_FILE, CONDENSER_CONFIG_FILE, HEAD_FILE, load_encoder


def test_saved_backbone_is_a_plain_bert_checkpoint(tmp_path):
    m = make_condenser().eval()
    m.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists() and (tmp_path / HEAD_FILE).exists()
    assert json.loads((tmp_path / CONDENSER_CONFIG_FILE).read_text()) == m.condenser_config()
    batch = make_batch(lengths=[16, 12])
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        expected = m.backbone.bert(ids, attention_mask=mask).last_hidden_state
        expected_logits = m.backbone(ids, attention_mask=mask).logits
        encoders = (BertModel.from_pretrained(tmp_path), AutoModel.from_pretrained(tmp_path), load_encoder(tmp_path))
        for encoder in encoders:
            got = encoder.eval()(ids, attention_mask=mask).last_hidden_state
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
        mlm = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
        torch.testing.assert_close(mlm(ids, attention_mask=mask).logits, expected_logits, rtol=0, atol=1e-6)
    assert load_encoder(tmp_path).pooler is None


def test_loads_authors_head_file_and_hub_ids(tmp_path, monkeypatch):
    """The authors save the head as model.pt with keys c_head.<i>...; Hub ids fetch it with hf_hub_download."""
    m = make_condenser(skip_from=2, n_head_layers=2).eval()
    m.backbone.save_pretrained(tmp_path)
    torch.save({f"c_head.{k}": v for k, v in m.head.state_dict().items()}, tmp_path / AUTHORS_HEAD_FILE)
    batch = make_batch()
    local = Condenser.from_pretrained(tmp_path).eval()  # no condenser_config.json: inferred
    assert (local.skip_from, local.n_head_layers) == (2, 2)
    torch.testing.assert_close(local(**batch).loss, m(**batch).loss, rtol=0, atol=0)

    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError

    asked = []

    def fake_download(repo_id, filename, **kwargs):
        asked.append(filename)
        path = tmp_path / filename
        if not path.exists():
            raise EntryNotFoundError(f"{filename} not in {repo_id}")
        return str(path)

    original = BertForMaskedLM.from_pretrained.__func__
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(
        BertForMaskedLM, "from_pretrained", classmethod(lambda cls, name, **kw: original(cls, tmp_path, **kw))
    )
    hub = Condenser.from_pretrained("someone/co-condenser").eval()
    assert HEAD_FILE in asked and asked.index(HEAD_FILE) < asked.index(AUTHORS_HEAD_FILE)
    torch.testing.assert_close(hub(**batch).loss, m(**batch).loss, rtol=0, atol=0)
    os.remove(tmp_path / AUTHORS_HEAD_FILE)
    with pytest.raises(CheckpointError, match="head='random'"):
        Condenser.from_pretrained("someone/co-condenser")
    assert loading.read_head_state(tmp_path) is None


def test_loading_an_mlm_checkpoint_as_an_encoder_reports_only_real_gaps(tmp_path, capfd):
    import warnings

    from transformers import BertConfig, BertForMaskedLM, BertModel

    from condenser_lite.utils.loading import load_encoder

    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    BertForMaskedLM(config).save_pretrained(tmp_path / "mlm")
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_encoder(tmp_path / "mlm")  # the MLM head is dropped on purpose: nothing to say
    assert "LOAD REPORT" not in capfd.readouterr().err and not caught

    encoder = BertModel(config, add_pooling_layer=False)
    encoder.save_pretrained(tmp_path / "enc")
    with pytest.warns(UserWarning, match=r"has no MLM head: BertForMaskedLM's head \(cls.predictions.\*, 6 weights\) "
                      "starts fresh"):
        from condenser_lite.modeling.condenser import BertMLM

        BertMLM.from_pretrained(tmp_path / "enc")  # an MLM without its head: that is worth a word


def test_model_loading_is_quiet_unless_debug(beir, retriever, tmp_path, capfd):
    """`search` loads its model without transformers' per-tensor `Loading weights: 100%|...|` bar
    or load report; `--debug` shows the bar, for that command only. A weight really missing still
    gets its one-line warning (test_loading_an_mlm_checkpoint_as_an_encoder_reports_only_real_gaps)."""
    from transformers.utils import logging as hf_logging

    args = ["search", "--model", retriever, "--data-dir", beir, "--p-max-len", "64"]
    hf_logging.enable_progress_bar()  # as in a terminal; pytest's capture alone would not hide them
    capfd.readouterr()
    main([str(a) for a in args])
    quiet = capfd.readouterr().err
    assert "Loading weights" not in quiet and "LOAD REPORT" not in quiet
    main([str(a) for a in [*args, "--debug"]])
    assert "Loading weights" in capfd.readouterr().err
    main([str(a) for a in args])  # --debug did not stay on for the next command
    assert "Loading weights" not in capfd.readouterr().err


def gpt2_folder(retriever: Path, folder: Path) -> Path:
    """A decoder checkpoint (GPT-2) with a tokenizer beside it: loads, but is no retriever."""
    from transformers import GPT2Config, GPT2Model

    GPT2Model(GPT2Config(n_layer=1, n_embd=32, n_head=2)).save_pretrained(folder)
    for f in retriever.iterdir():
        if f.name.startswith(("tokenizer", "vocab", "special_tokens")):
            shutil.copy(f, folder / f.name)
    return folder


def test_a_model_of_another_architecture_is_refused(beir, retriever, tmp_path, capsys):
    """A GPT-2 folder with a tokenizer beside it is refused by `search` and by `finetune` in one line,
    before anything is written."""
    gpt2 = gpt2_folder(retriever, tmp_path / "gpt2")
    for command in (["search", "--model", gpt2, "--data-dir", beir],
                    ["finetune", "--init", gpt2, *FINETUNE, "--data-dir", beir, "--output-dir", tmp_path / "ft"]):
        line = one_error_line(cli(command, capsys))
        assert f"{gpt2} holds a gpt2 model (GPT2Model), not a BERT-family encoder" in line
        assert not (tmp_path / "ft").exists()


def test_a_tokenizer_of_another_model_is_refused(beir, retriever, tmp_path, capsys):
    """A model folder whose tokenizer has more tokens than the model's embeddings is refused by
    `search` and by `finetune` in one line naming both sizes."""
    from condenser_lite.data.tokenizer import train_wordpiece

    mixed = tmp_path / "mixed"
    shutil.copytree(retriever, mixed)
    for f in mixed.iterdir():
        if f.name.startswith(("tokenizer", "vocab", "special_tokens")):
            f.unlink()
    texts = [f"{r['title']} {r['text']}" for r in tiny_rows("corpus.jsonl")] + [" ".join(f"w{i}" for i in range(2000))]
    train_wordpiece(texts * 3, vocab_size=1000, save_dir=mixed, min_frequency=1)  # the model's embeddings: 300
    for command in (["search", "--model", mixed, "--data-dir", beir, "--p-max-len", "64"],
                    ["finetune", "--init", mixed, *FINETUNE, "--data-dir", beir, "--output-dir", tmp_path / "ft"]):
        line = one_error_line(cli(command, capsys))
        assert f"the tokenizer in {mixed} has" in line and "the model's embeddings hold 300" in line, line


def test_lengths_not_given_fit_the_models_position_limit(tmp_path, capsys):
    """Without --p-max-len, search and encode read 128 tokens, or fewer where the model holds
    fewer positions: a book model (64) searches as typed, with no length to look up."""
    root = Path(__file__).resolve().parents[2]
    model, data = root / "results" / "checkpoints" / "small" / "cocondenser", root / "tests" / "fixtures" / "bike_beir"
    assert json.loads((model / "config.json").read_text())["max_position_embeddings"] == 64
    code, out, err = cli(["search", "--model", model, "--data", data, "--metrics", "nDCG@10"], capsys)
    assert code == 0 and set(json.loads(out.strip().splitlines()[-1])) == {"nDCG@10"}, err
    code, _, err = cli(["encode", "--model", model, "--data", data, "--out", tmp_path / "corpus"], capsys)
    assert code == 0 and (tmp_path / "corpus.npz").is_file(), err


def test_lengths_above_the_models_position_limit_are_one_line(beir, retriever, tmp_path, capsys):
    """A `--p-max-len` (search) or `--set p_max_len` (finetune) above the model's position limit is
    refused in one line naming the limit, before anything is written."""
    line = one_error_line(cli(["search", "--model", retriever, "--data-dir", beir, "--p-max-len", "1000"], capsys))
    assert line == (f"error: --p-max-len=1000 exceeds the position limit of {retriever} (max_position_embeddings="
                    "128); use 128 or less")
    line = one_error_line(cli(["finetune", "--init", retriever, *finetune_with("p_max_len=1000"), "--data-dir",
                               beir, "--output-dir", tmp_path / "ft"], capsys))
    assert "--set p_max_len=1000 exceeds the position limit" in line and not (tmp_path / "ft").exists()
