"""Tests for condenser_lite.tokenizer: WordPiece training, save/reload, determinism, caching, and a
model folder without its tokenizer files refused."""

from __future__ import annotations

import shutil

import pytest
from command_line import cli, one_error_line
from transformers import AutoTokenizer

from condenser_lite.data import sources as data
from condenser_lite.data import tokenizer
from condenser_lite.data.tokenizer import load_tokenizer
from condenser_lite.utils.cache import CACHE_ENV
from condenser_lite.utils.errors import CheckpointError

TEXTS = [
    "The quick brown fox jumps over the lazy dog. Tokenizers are fun; tokenization is fun too.",
    "Condenser pre-trains a dense retriever: the CLS vector must condense the whole passage.",
    "Café, naïve and résumé lose their accents. UPPER case text is lowercased by the normaliser.",
    "Welcome to the tokenizers library, where tokens, tokenized tokenizing and tokenizer meet.",
] * 3


@pytest.fixture(scope="module")
def tok():
    return tokenizer.train_wordpiece(TEXTS, vocab_size=200, min_frequency=1, model_max_length=128)


def test_special_tokens_and_size(tok):
    vocab = tok.get_vocab()
    assert [vocab[t] for t in tokenizer.SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id) \
        == (0, 1, 2, 3, 4)
    assert len(tok) <= 200
    assert tok.model_max_length == 128


def test_encoding_conventions(tok):
    enc = tok("Tokenization condenses passages")
    ids = enc["input_ids"]
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert tok(["HELLO Fox"])["input_ids"] == tok(["hello fox"])["input_ids"]  # uncased
    assert tok("café")["input_ids"] == tok("cafe")["input_ids"]  # accents stripped
    pieces = tok.tokenize("tokenizers condenses")
    assert any(p.startswith("##") for p in pieces)  # a word split into continuation pieces
    assert tok.decode(ids, skip_special_tokens=True) == "tokenization condenses passages"
    pair = tok("a fox", "the dog")
    assert pair["input_ids"].count(tok.sep_token_id) == 2
    assert pair["token_type_ids"][-1] == 1 and pair["token_type_ids"][0] == 0
    assert tok.convert_ids_to_tokens(tok("[UNK] [MASK]")["input_ids"]) == ["[CLS]", "[UNK]", "[MASK]", "[SEP]"]


def test_save_and_autotokenizer_reload(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    for text in TEXTS[:4] + ["unseen wordz with ümlauts!"]:
        assert again(text)["input_ids"] == tok(text)["input_ids"]
    assert again.get_vocab() == tok.get_vocab()
    assert again.model_max_length == 128
    assert tokenizer.load_tokenizer(tmp_path).get_vocab() == tok.get_vocab()


def test_train_with_save_dir(tmp_path):
    tokenizer.train_wordpiece(TEXTS, vocab_size=150, save_dir=tmp_path / "tok", min_frequency=1)
    assert (tmp_path / "tok" / "tokenizer.json").exists()
    assert len(AutoTokenizer.from_pretrained(tmp_path / "tok")) <= 150


def test_training_is_deterministic():
    # Many equally frequent merges: before the workaround, repeated runs in one process
    # learnt different vocabularies most of the time (tokenizers issue #1794).
    texts = ["Wel come to the Tok en izers libr ary.", "the quick brown fox jumps over the lazy dog"]
    vocabs = [tokenizer.train_wordpiece(texts, vocab_size=120, min_frequency=1).get_vocab()
              for _ in range(6)]
    assert all(v == vocabs[0] for v in vocabs)


def test_bad_arguments():
    with pytest.raises(ValueError, match="no text"):
        tokenizer.train_wordpiece(["", ""])
    with pytest.raises(ValueError, match="vocab_size"):
        tokenizer.train_wordpiece(TEXTS, vocab_size=3)


def test_tiny_tokenizer_cache(tmp_path, monkeypatch):
    calls = []
    texts_fn = lambda: calls.append(1) or TEXTS  # noqa: E731
    first = tokenizer.tiny_tokenizer(texts_fn, vocab_size=150, cache_dir=tmp_path, min_frequency=1)
    saved = list((tmp_path / "tokenizers").iterdir())
    assert len(saved) == 1 and (saved[0] / "tokenizer.json").exists()

    def no_training(*args, **kwargs):
        raise AssertionError("tiny_tokenizer retrained although the cache holds the tokenizer")

    monkeypatch.setattr(tokenizer, "train_wordpiece", no_training)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))  # the environment variable finds it too
    second = tokenizer.tiny_tokenizer(texts_fn, vocab_size=150, min_frequency=1)
    assert second.get_vocab() == first.get_vocab()
    monkeypatch.undo()
    tokenizer.tiny_tokenizer(texts_fn, vocab_size=140, cache_dir=tmp_path, min_frequency=1)
    assert len(list((tmp_path / "tokenizers").iterdir())) == 2  # other settings, other entry


def test_load_tokenizer_errors(tmp_path, monkeypatch):
    import huggingface_hub.constants

    with pytest.raises(CheckpointError, match="save_pretrained"):
        tokenizer.load_tokenizer(tmp_path / "missing")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(data.DataSourceError, match="could not load tokenizer 'condenser-lite-tests/no-such-tokenizer'"):
        tokenizer.load_tokenizer("condenser-lite-tests/no-such-tokenizer")


def test_model_folder_without_tokenizer_files_is_refused(beir, retriever, tmp_path, capsys):
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(retriever / name, bare / name)
    with pytest.raises(CheckpointError, match=f"tokenizer in {bare} cannot encode ordinary text"):
        load_tokenizer(bare)
    for command in (["search", "--model", bare], ["encode", "--model", bare, "--out", tmp_path / "e.npz"]):
        line = one_error_line(cli([*command, "--data-dir", beir, "--p-max-len", "64"], capsys))
        assert str(bare) in line and "tokenizer files" in line
    assert load_tokenizer(retriever)("a plain sentence")["input_ids"]  # a complete folder loads
