"""Checkpoint files (condenser_lite/utils/loading.py): a saved Condenser's backbone is a plain BERT
checkpoint every loader reads, and the authors' head file (model.pt, local or from the Hub) loads."""

import json
import os

import pytest
import torch
from toy_models import make_batch, make_condenser
from transformers import AutoModel, AutoModelForMaskedLM, BertForMaskedLM, BertModel

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
