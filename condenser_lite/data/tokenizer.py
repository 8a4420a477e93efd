"""A BERT-style uncased WordPiece tokenizer, trained with `tokenizers` and cached; or a checkpoint's own.

Explained in chapter 1, `notebooks/01_readiness.ipynb`: the scaled-down models cannot use
bert-base-uncased's 30,522-row vocabulary on a CPU budget (the output layer alone would
dominate every MLM step), so the book trains an 8,192-word WordPiece vocabulary on the
text those models are allowed to see: the pre-training corpus and the SciFact abstracts
(unlabelled). Same normaliser, pre-tokeniser, special tokens and [CLS] ... [SEP] template as
BERT, so the result is a drop-in `BertTokenizer` that `AutoTokenizer` reloads.
"""

from __future__ import annotations

import hashlib
import json
import os
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable

import tokenizers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer, BertTokenizer, PreTrainedTokenizerBase

from ..utils import cache
from ..utils.errors import CheckpointError
from . import beir, wikitext
from . import sources as data

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4, [PAD] = 0 as in BERT
LIMIT_ALPHABET = 1000  # as BERT's WordPiece recipe: rare characters fall back to [UNK]


def _is_bert_punctuation(ch: str) -> bool:
    """BertPreTokenizer's notion of punctuation: such a character is always a word of its own."""
    o = ord(ch)
    return 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126 \
        or unicodedata.category(ch).startswith("P")


def _alphabet(texts: list[str], normalizer: normalizers.Normalizer, limit: int) -> tuple[list[str], list[str]]:
    """The characters the vocabulary starts from, and those that can continue a word.

    Counting raw characters and normalising each distinct one is much cheaper than normalising
    the text; BertNormalizer acts character by character, so the result is the same.
    """
    raw: Counter[str] = Counter()
    for t in texts:
        raw.update(t)
    counts: Counter[str] = Counter()
    isolated = set()  # CJK characters: the normaliser puts spaces around them
    for ch, n in raw.items():
        out = normalizer.normalize_str(ch)
        for c in out:
            if not c.isspace():
                counts[c] += n
                if out != out.strip():
                    isolated.add(c)
    alphabet = sorted(counts, key=lambda c: (-counts[c], c))[:limit]
    continuing = sorted(c for c in alphabet if c not in isolated and not _is_bert_punctuation(c))
    return alphabet, continuing


def _wordpiece_pipeline(vocab_size: int, min_frequency: int, texts: list[str]) -> tuple[Tokenizer, trainers.WordPieceTrainer]:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=True, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    # Determinism workaround (tokenizers issue #1794, 0.23): the trainer numbers the "##x"
    # pieces in hash-map order, and that numbering breaks ties between equally frequent merges,
    # so two runs can learn different vocabularies. Declaring every "##x" up front (as extra
    # special tokens, in sorted order) and fixing the alphabet ourselves removes every
    # hash-order dependence. These "##x" are ordinary vocabulary entries in the final tokenizer.
    alphabet, continuing = _alphabet(texts, tok.normalizer, LIMIT_ALPHABET)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency,
        special_tokens=[*SPECIAL_TOKENS, *(f"##{c}" for c in continuing)],
        initial_alphabet=alphabet, limit_alphabet=len(alphabet),
        continuing_subword_prefix="##", show_progress=False)
    return tok, trainer


def train_wordpiece(texts: Iterable[str], vocab_size: int = 8192, save_dir: str | os.PathLike | None = None,
                    min_frequency: int = 2, model_max_length: int = 512) -> BertTokenizer:
    """Train an uncased BERT WordPiece vocabulary on `texts` and wrap it as a `BertTokenizer`.

    BertNormalizer (lowercase, strip accents), BertPreTokenizer, "##" continuation pieces,
    special tokens [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4, and the template
    `[CLS] A [SEP]` / `[CLS] A [SEP] B [SEP]`. With `save_dir`, `save_pretrained` there so
    `AutoTokenizer.from_pretrained(save_dir)` reloads it. Training is deterministic: the same
    texts give the same vocabulary. Explained in chapter 1, `notebooks/01_readiness.ipynb`.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise ValueError(f"vocab_size must exceed the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}")
    if min_frequency < 1:
        raise ValueError(f"min_frequency must be >= 1, got {min_frequency}")
    if isinstance(texts, str):
        raise ValueError("texts must be an iterable of strings (e.g. a list), not one string")
    texts = [t for t in texts if t]  # read twice: once for the alphabet, once for training
    if not texts:
        raise ValueError("train_wordpiece got no text to learn from (texts was empty)")
    tok, trainer = _wordpiece_pipeline(vocab_size, min_frequency, texts)
    tok.train_from_iterator(texts, trainer=trainer)
    vocab = tok.get_vocab()
    for i, special in enumerate(SPECIAL_TOKENS):  # the models and collators rely on these ids
        assert vocab[special] == i, (special, vocab[special])
    # BertTokenizer rebuilds exactly this pipeline (normaliser, pre-tokeniser, decoder, template)
    # around the learnt vocabulary, so saving and reloading goes through transformers' own code.
    hf = BertTokenizer(vocab=vocab, do_lower_case=True, strip_accents=True,
                       model_max_length=model_max_length)
    if save_dir is not None:
        hf.save_pretrained(str(save_dir))
    return hf


def load_tokenizer(name_or_path: str | os.PathLike | PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """A tokenizer from a local directory (saved with `save_pretrained`) or a Hub id.

    Offline and not cached, a Hub id raises `data.DataSourceError` saying what to do.
    Explained in chapter 1, `notebooks/01_readiness.ipynb`.
    """
    if isinstance(name_or_path, PreTrainedTokenizerBase):
        return name_or_path
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return check_tokenizer(AutoTokenizer.from_pretrained(str(path)), path)
    name = str(name_or_path)
    if path.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise CheckpointError(
            f"tokenizer path {name!r} is not a directory saved with save_pretrained (no such folder); "
            f"pass such a directory (e.g. a checkpoint folder, or the one tiny_tokenizer() caches) or a Hub id")
    try:
        return check_tokenizer(AutoTokenizer.from_pretrained(name), name)
    except (OSError, ValueError) as err:
        raise data.DataSourceError(
            f"could not load tokenizer {name!r}: no such local directory, and the Hugging Face Hub "
            f"could not provide it ({type(err).__name__}: {err}). If this machine is offline "
            f"(HF_HUB_OFFLINE), pass a local directory saved with save_pretrained, e.g. "
            f"tiny_tokenizer()'s cache, or run once with network access to fill the Hub cache."
        ) from err


PROBE_TEXT = "The results of the study were published in a journal."


def check_tokenizer(tokenizer: PreTrainedTokenizerBase, where: str | os.PathLike) -> PreTrainedTokenizerBase:
    """``tokenizer`` if it can encode ordinary text, else ``CheckpointError`` naming ``where``.

    A model folder without its tokenizer files still loads: transformers builds a tokenizer of
    the special tokens alone, which turns every word into [UNK], and retrieval then scores 0.0
    without a word of warning. Chapter 1, ``notebooks/01_readiness.ipynb``."""
    ids = tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"]
    if not ids or all(i == tokenizer.unk_token_id for i in ids):
        raise CheckpointError(
            f"the tokenizer in {where} cannot encode ordinary text (a vocabulary of {len(tokenizer)} tokens turns "
            f"{PROBE_TEXT!r} into {len(ids)} x {tokenizer.unk_token}): the folder lacks its tokenizer files "
            "(vocab.txt or tokenizer.json). Copy them from the checkpoint the model was trained from, or save "
            "the tokenizer there with tokenizer.save_pretrained(folder).")
    return tokenizer


def tokenizer_key(tokenizer: PreTrainedTokenizerBase) -> str:
    """A hash of everything the tokenizer does (vocabulary, normaliser, special tokens), as part of
    a cache key: two folders holding the same tokenizer get the same key. Chapter 1."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(f"{type(tokenizer).__name__}\n{text}".encode()).hexdigest()[:16]


def tiny_tokenizer_texts(data_dir: str | os.PathLike | None = None) -> Iterable[str]:
    """The unlabelled text of the scaled-down book: every pre-training section (all three
    sources), then every SciFact abstract as "title text". Explained in chapter 1."""
    corpus = data.load_pretraining_corpus(data.PRETRAINING_SOURCES, data_dir=data_dir)
    scifact = beir.load_beir("scifact", data_dir=data_dir)
    yield from corpus["text"]
    for title, text in zip(scifact.corpus["title"], scifact.corpus["text"]):
        yield f"{title} {text}".strip()


def _code_fingerprint() -> str:
    """Hash of the code that makes the training text and the vocabulary (data.py, beir.py, wikitext.py,
    this file): a parser fix then gets a fresh cache entry instead of a stale tokenizer."""
    h = hashlib.sha256()
    for module_file in (data.__file__, beir.__file__, wikitext.__file__, __file__):
        h.update(Path(module_file).read_bytes())
    return h.hexdigest()[:16]


def tiny_tokenizer(texts_fn: Callable[[], Iterable[str]] | None = None, vocab_size: int = 8192,
                   cache_dir: str | os.PathLike | None = None,
                   data_dir: str | os.PathLike | None = None,
                   min_frequency: int = 2) -> BertTokenizer:
    """The scaled-down book's tokenizer: trained once, then reloaded from the cache.

    Trained on `tiny_tokenizer_texts(data_dir)` (or on `texts_fn()` when given) and saved
    under `<cache>/tokenizers/<hash>/`, where the cache is `cache_dir`, else
    `$CONDENSER_LITE_CACHE`, else `~/.cache/condenser_lite`, and the hash covers the settings,
    the sources (`sources.data_id`: the mirror files' content or Hub ids; the texts themselves when
    `texts_fn` is given)
    and the code of `data/sources.py` and `data/tokenizer.py`.
    Explained in chapter 1, `notebooks/01_readiness.ipynb`.
    """
    settings = {"vocab_size": vocab_size, "min_frequency": min_frequency, "lowercase": True,
                "special": SPECIAL_TOKENS, "limit_alphabet": LIMIT_ALPHABET,
                "code": _code_fingerprint(), "tokenizers": tokenizers.__version__}
    if texts_fn is None:
        texts = None
        settings["sources"] = data.data_id((*data.PRETRAINING_SOURCES, "scifact"), data_dir)
    else:
        texts = [t for t in texts_fn() if t]
        settings["texts_sha256"] = hashlib.sha256("\x00".join(texts).encode()).hexdigest()
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    target = (Path(cache_dir).expanduser() if cache_dir else cache.cache_dir()) / "tokenizers" / key

    def build(folder: Path) -> None:
        train_wordpiece(texts if texts is not None else tiny_tokenizer_texts(data_dir), vocab_size=vocab_size,
                        save_dir=folder, min_frequency=min_frequency)
        (folder / "condenser_lite_settings.json").write_text(json.dumps(settings, indent=1, sort_keys=True))

    cache.build_once(target, build)
    # loaded from the cache folder, so a freshly trained tokenizer is the object later calls load
    return AutoTokenizer.from_pretrained(str(target))
