"""Made-up data shared by tests in several folders.

* ``pseudo_text``: documents of made-up words built from syllables, and ``pseudo_tokenizer``, a
  100-piece WordPiece trained on them (many ## pieces), for the packing and masking tests
  (``data/test_packing.py``, ``modeling/test_masking.py``; the fixture ``pseudo_tokenizer`` in
  tests/conftest.py);
* ``EXAMPLES``: two queries in Tevatron's training schema, with their positive and negative passages
  (``retrieval/test_biencoder.py``, ``data/test_tevatron.py``);
* ``write_beir``: a 12-document BEIR folder built from ``fixtures/tevatron_tiny`` (``tiny_rows``), its
  ids renamed at will, and ``rewrite``, an edit of one of its files in place: the fixture ``beir`` in
  tests/conftest.py, and the tests of what the commands say about a user's own data and folders.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Callable

from locations import FIXTURES
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

# ---- pseudo-text and its WordPiece ------------------------------------------------------------

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def pseudo_text(seed: int, n_docs: int, sentences_per_doc=(1, 12)) -> list[str]:
    """Documents of made-up words built from syllables, so a small WordPiece has many ## pieces."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ren", "tas", "vo", "pri", "del", "sun", "mar", "tek", "o", "a", "is", "the"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.choice([1, 1, 2, 2, 3, 4]))) for _ in range(80)]

    def sentence() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(3, 14))).capitalize() + rng.choice(".!?")

    return [" ".join(sentence() for _ in range(rng.randint(*sentences_per_doc))) for _ in range(n_docs)]


def pseudo_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(pseudo_text(0, 200), trainers.WordPieceTrainer(vocab_size=100, special_tokens=SPECIALS))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]",
    )


# ---- Tevatron-schema training examples -----------------------------------------------------------


def passage(d, title, text):
    return {"docid": d, "title": title, "text": text}


EXAMPLES = [
    {
        "query_id": "q1", "query": "what erupts lava",
        "positive_passages": [passage("v", "volcano", "magma erupts as lava")],
        "negative_passages": [passage(f"n{i}", "music", f"jazz violin {'code ' * i}") for i in range(5)],
    },
    {
        "query_id": "q2", "query": "how do cells divide",
        "positive_passages": [passage("c1", "cells", "cells divide"), passage("c2", "gene", "gene and dna")],
        "negative_passages": [passage(f"m{i}", "ice", f"glacier snow {'park ' * i}") for i in range(4)],
    },
]


# ---- a 12-document BEIR folder ---------------------------------------------------------------------

TINY_MSMARCO = FIXTURES / "tevatron_tiny" / "msmarco-passage"


def tiny_rows(name: str) -> list[dict]:
    """The records of ``fixtures/tevatron_tiny/msmarco-passage/<name>`` (``corpus.jsonl``,
    ``train.jsonl``, ``dev.jsonl``)."""
    return [json.loads(line) for line in (TINY_MSMARCO / name).open()]


def write_beir(root: Path, ids: dict[str, str] | None = None) -> Path:
    """A 12-document BEIR set in the SciFact mirror layout (6 train, 3 test queries); ``ids``
    renames documents and queries (a qrels field holding a tab is quoted, as csv writes it)."""
    rename = lambda i: (ids or {}).get(i, i)  # noqa: E731
    folder = root / "scifact"
    (folder / "qrels").mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for r in tiny_rows("corpus.jsonl"):
            f.write(json.dumps({"_id": rename(r["docid"]), "title": r["title"], "text": r["text"]}) + "\n")
    queries = {"train": tiny_rows("train.jsonl"), "test": tiny_rows("dev.jsonl")}
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as f:
        for split_rows in queries.values():
            for r in split_rows:
                f.write(json.dumps({"_id": rename(r["query_id"]), "text": r["query"]}) + "\n")
    for split, split_rows in queries.items():
        with (folder / "qrels" / f"{split}.tsv").open("w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f, delimiter="\t", lineterminator="\n")
            writer.writerow(["query-id", "corpus-id", "score"])
            writer.writerows([rename(r["query_id"]), rename(p["docid"]), 1] for r in split_rows
                             for p in r["positive_passages"])
    return root


def rewrite(path: Path, edit: Callable[[bytes], bytes]) -> None:
    """Replace the bytes of ``path`` by ``edit`` of them."""
    path.write_bytes(edit(path.read_bytes()))
