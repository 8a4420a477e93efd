import numpy as np
import pytest
import torch
from scipy.stats import entropy
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

from condenser_lite.analysis import cls_attention_entropy

WORDS = "the cat sat on a mat dog ran fast slow big small red".split()


@pytest.fixture
def tokenizer():
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def test_entropy_matches_brute_force(tokenizer):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=3,
                        num_attention_heads=2, intermediate_size=32)
    model = BertModel(config)
    texts = ["the cat sat on a mat", "dog ran", "big red dog ran fast on the mat"]
    got = cls_attention_entropy(model, tokenizer, texts, batch_size=2)
    assert got.shape == (3,)
    assert model.config._attn_implementation == "sdpa"  # restored

    # brute force: one text at a time (no padding), scipy entropy of each head's CLS row
    model.set_attn_implementation("eager")
    model.eval()  # no attention dropout, as in the function
    per_text = []
    for text in texts:
        enc = tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            att = model(**enc, output_attentions=True).attentions
        per_text.append([np.mean([entropy(a[0, h, 0].numpy()) for h in range(a.shape[1])]) for a in att])
    np.testing.assert_allclose(got, np.mean(per_text, axis=0), rtol=1e-4)
    # entropy is bounded by log(sequence length) and positive for a random model
    assert np.all(got > 0) and np.all(got <= np.log(10) + 1e-6)


def test_entropy_rejects_empty(tokenizer):
    model = BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=32))
    with pytest.raises(ValueError, match="at least one text"):
        cls_attention_entropy(model, tokenizer, [])
