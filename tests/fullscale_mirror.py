"""A small local data mirror laid out like the Hub data sets the ``full`` budget reads, written
(seeded, in about a second) into a test's temporary folder, plus tiny checkpoints standing in for
the published Hub models. ``tests/test_fullscale_path.py`` runs the full budget's own code path on
it (the loaders, ``tasks.load_task("msmarco")``, the BM25 baseline, ``paper_condenser`` /
``paper_cocondenser``, two fine-tuning rounds, evaluation, the scorecard).

Layout (``sources.REGISTRY``'s mirror files; the Hub copy of each in brackets):

    msmarco-passage/{train,dev,corpus}.jsonl    [Tevatron/msmarco-passage, -corpus] 2,100 passages
                                                 (40 of them under 16 tokens), 32 train, 16 dev queries
    wikipedia-nq/{train,dev,test,corpus}.jsonl  [Tevatron/wikipedia-nq, -corpus] 300 passages, answers
    wikipedia-20231101.en/train-00000-of-00001.parquet   [wikimedia/wikipedia 20231101.en]
    wikitext-103-raw-v1/train-00000-of-00001.parquet     [Salesforce/wikitext wikitext-103-raw-v1]
    enwiki-sample/lee_background.cor            the news sample (one article per line)
    stsb/stsb-en-{train,dev,test}.csv           STS-b (no header, score in [0, 5])

The text is made up from pseudo-words (syllables drawn with a fixed seed) around English function
words; each topic has its own keywords, which a query about it shares with its positive passage.
Sizes: more passages than R@1000 and the mining depth (200) read, and enough Wikipedia for a few
hundred Condenser blocks of 128 tokens.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import datasets
import torch
from transformers import BertConfig, BertForMaskedLM

from condenser_lite.data.tokenizer import train_wordpiece

SYLLABLES = ("ka", "lo", "mi", "ren", "tas", "vo", "du", "pel", "sor", "an", "zi", "gar", "bu", "nel", "qua", "ti",
             "mo", "ves", "ri", "hal", "pon", "e", "lu", "fra", "dem", "o", "sen", "cor", "yu", "bel")
FUNCTION_WORDS = ("the", "of", "and", "in", "to", "a", "is", "was", "for", "on", "with", "by", "as", "from", "that")
N_TOPICS, N_PASSAGES, N_SHORT = 80, 2100, 40
WHO = "voltar"  # NQ: a word in most passages, and the answer "The Voltar" that DPR's rule never finds


def _word(rng: random.Random, n: int | None = None) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(n or rng.randint(2, 3)))


def _sentence(rng: random.Random, common: list[str], keywords: list[str] = (), n_key: int = 0) -> str:
    words = [rng.choice(common) if rng.random() < 0.6 else rng.choice(FUNCTION_WORDS) for _ in range(rng.randint(7, 12))]
    for k in rng.sample(list(keywords), min(n_key, len(keywords))):
        words.insert(rng.randrange(len(words) + 1), k)
    return " ".join(words).capitalize() + "."


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def build_mirror(root: Path, seed: int = 0) -> Path:
    """Write the mirror under ``root`` (see the module docstring) and return ``root``."""
    rng = random.Random(seed)
    common = sorted({_word(rng) for _ in range(400)})[:300]
    topics = [[_word(rng, 4) for _ in range(4)] for _ in range(N_TOPICS)]

    # ---- MS MARCO: passages by topic, short ones among them, queries sharing a topic's keywords
    corpus, by_topic = [], {t: [] for t in range(N_TOPICS)}
    for i in range(N_PASSAGES):
        if i < N_SHORT:
            text = f"{_word(rng).capitalize()} {rng.choice(common)}."  # too short for two 8-token spans
        else:
            t = i % N_TOPICS
            text = " ".join(_sentence(rng, common, topics[t], 2) for _ in range(rng.randint(2, 4)))
            by_topic[t].append(f"m{i}")
        corpus.append({"docid": f"m{i}", "title": "", "text": text})
    text_of = {p["docid"]: p for p in corpus}
    queries = []
    for j in range(48):
        t = j % N_TOPICS
        query = " ".join(rng.sample(topics[t], 2) + [rng.choice(common)])
        positive = by_topic[t][j // N_TOPICS]
        negatives = rng.sample([d for d in text_of if d not in by_topic[t]], 8)
        queries.append({"query_id": f"mq{j}", "query": query, "positive_passages": [text_of[positive]],
                        "negative_passages": [text_of[d] for d in negatives]})
    _jsonl(root / "msmarco-passage" / "corpus.jsonl", corpus)
    _jsonl(root / "msmarco-passage" / "train.jsonl", queries[:32])
    _jsonl(root / "msmarco-passage" / "dev.jsonl", [{**q, "negative_passages": []} for q in queries[32:]])

    # ---- NQ: titled passages, questions with answer strings (the test split has no passages)
    entities = [(_word(rng, 3).capitalize(), f"{_word(rng).capitalize()} {_word(rng).capitalize()}") for _ in range(40)]
    nq_corpus = []
    for i in range(300):
        name, answer = entities[i % 40]
        words = _sentence(rng, common) + " " + _sentence(rng, common)
        if i < 40:
            words += f" {name} was made by {answer}."
        if i % 3:
            words += f" Who knows {WHO} now."
        nq_corpus.append({"docid": f"w{i}", "title": name, "text": words})
    questions = []
    for j, (name, answer) in enumerate(entities):
        answers = [answer] if j < 36 else ["The Voltar"] if j < 38 else [_word(rng, 4)]  # 2 never in any passage
        pos = [nq_corpus[j]] if j < 36 else []
        questions.append({"query_id": f"nq{j}", "query": f"who made {name.lower()}", "answers": answers,
                          "positive_passages": pos, "negative_passages": rng.sample(nq_corpus[40:], 3) if pos else []})
    _jsonl(root / "wikipedia-nq" / "corpus.jsonl", nq_corpus)
    _jsonl(root / "wikipedia-nq" / "train.jsonl", [q for q in questions[:20]])
    _jsonl(root / "wikipedia-nq" / "dev.jsonl", [{**q, "negative_passages": []} for q in questions[20:30]])
    _jsonl(root / "wikipedia-nq" / "test.jsonl", [{**q, "positive_passages": [], "negative_passages": []}
                                                  for q in questions[20:]])

    # ---- general corpus: Wikipedia articles (parquet, as on the Hub), WikiText-103, the news sample
    def paragraph(n: int) -> str:
        return " ".join(_sentence(rng, common) for _ in range(n))

    articles = []
    for a in range(80):
        text = "\n\n".join([paragraph(9), paragraph(9), "History", paragraph(9), paragraph(9)])
        articles.append({"id": str(a + 1), "url": f"https://en.wikipedia.org/wiki/A{a}", "title": _word(rng, 3).capitalize(),
                         "text": text})
    (root / "wikipedia-20231101.en").mkdir(parents=True)
    datasets.Dataset.from_list(articles).to_parquet(root / "wikipedia-20231101.en" / "train-00000-of-00001.parquet")
    lines = []
    for a in range(20):
        lines += [f" = {_word(rng, 3).capitalize()} = \n", f" {paragraph(9)} \n", " = = Career = = \n", f" {paragraph(9)} \n"]
    (root / "wikitext-103-raw-v1").mkdir(parents=True)
    datasets.Dataset.from_dict({"text": lines}).to_parquet(root / "wikitext-103-raw-v1" / "train-00000-of-00001.parquet")
    (root / "enwiki-sample").mkdir(parents=True)
    (root / "enwiki-sample" / "lee_background.cor").write_text("".join(paragraph(6) + "\n" for _ in range(20)))

    # ---- STS-b: sentence pairs scored by word overlap
    (root / "stsb").mkdir(parents=True)
    for split, n in (("train", 32), ("dev", 16), ("test", 16)):
        with open(root / "stsb" / f"stsb-en-{split}.csv", "w", newline="") as f:
            writer = csv.writer(f, quoting=csv.QUOTE_ALL)
            for _ in range(n):
                a = _sentence(rng, common)
                words = a[:-1].split()
                keep = rng.randint(0, len(words))
                b = " ".join(words[:keep] + [rng.choice(common) for _ in range(len(words) - keep)]).capitalize() + "."
                writer.writerow([a, b, f"{5 * keep / len(words):.2f}"])
    return root


def mirror_texts(root: Path) -> list[str]:
    """Every text of the mirror's MS MARCO and NQ corpora and queries, and of the Wikipedia sample."""
    texts = []
    for path in sorted(root.glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            texts += [row.get("text") or "", row.get("query") or "", row.get("title") or ""]
    wiki = datasets.Dataset.from_parquet(str(root / "wikipedia-20231101.en" / "train-00000-of-00001.parquet"))
    return [t for t in texts + list(wiki["text"]) if t]


def make_standins(root: Path, texts: list[str], layers: int = 8, hidden: int = 32) -> dict[str, str]:
    """Tiny checkpoints standing in for the Hub models, with one WordPiece (as the three published
    models share bert-base-uncased's): ``bert`` (a BertForMaskedLM, like bert-base-uncased),
    ``condenser`` (the same kind, *without* head weights, like Luyu/condenser) and ``cocondenser``
    (with a head file in the authors' format, ``model.pt`` with ``c_head.`` keys, like
    Luyu/co-condenser-marco). ``layers`` > 6 so the paper's ``skip_from=6`` fits."""
    out = {}
    for i, name in enumerate(("bert", "condenser", "cocondenser")):
        path = root / name
        tok = train_wordpiece(texts, vocab_size=2000, save_dir=path, min_frequency=1)
        torch.manual_seed(i)
        config = BertConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                            intermediate_size=2 * hidden, max_position_embeddings=512, pad_token_id=tok.pad_token_id)
        BertForMaskedLM(config).save_pretrained(path)
        if name == "cocondenser":
            from condenser_lite.modeling.condenser import Condenser

            head = Condenser.from_config(config, skip_from=layers - 1, n_head_layers=2).head.state_dict()
            torch.save({f"c_head.{k}": v for k, v in head.items()}, path / "model.pt")
        out[name] = str(path)
    return out
