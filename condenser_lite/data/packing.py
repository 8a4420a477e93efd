"""MLM pre-training data: sentences -> packed blocks, and the held-out blocks the gauges read.

The recipe is BERT's, as the Condenser authors used it: split text into sentences,
pack whole sentences greedily into blocks of at most `max_len - 2` tokens without
crossing a document (sometimes aiming at a shorter random length, so the model also
sees short inputs) and wrap each block as `[CLS] ... [SEP]`; the masking is
`modeling.masking.MLMCollator`'s. `heldout_split` keeps whole documents out of
training, and `mlm_eval_batches` fixes the held-out blocks and masks every stage is
measured on.

Explained in chapter 2, `notebooks/02_condenser.ipynb`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

import torch

# Words followed by "." that rarely end a sentence. ("etc." often does, so it is not here.)
_ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st mt ft vs cf al fig figs eq eqs no nos vol vols pp ed eds
    inc ltd co corp bros jan feb mar apr jun jul aug sep sept oct nov dec gen col lt sgt
    capt cmdr adm rev gov sen rep pres approx est dept univ ca op ch sec art""".split()
)
# A candidate end: terminal punctuation, optional closing quotes/brackets, whitespace.
_END = re.compile(r"([.!?\u2026]+[\"'\u201d\u2019)\]]*)(\s+)")
_NEXT_STARTS_SENTENCE = re.compile(r"[\"'\u201c\u2018(\[]*[A-Z0-9]")
_DOTTED_ACRONYM = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]$")  # U.S, e.g, i.e, Ph.D


def _is_abbreviation(word: str) -> bool:
    word = word.lstrip("\"'(\u201c\u2018[")
    return (
        len(word) == 1  # an initial, as in "J. Smith"
        or word.lower() in _ABBREVIATIONS
        or bool(_DOTTED_ACRONYM.match(word))
    )


def split_sentences(text: str) -> list[str]:
    """Split text into sentences with a small regex rule set (no downloads).

    Line breaks are hard boundaries (paragraphs). Inside a line, a sentence ends at
    `.`, `!`, `?` or `...` (plus closing quotes/brackets) followed by whitespace and
    a capital letter, digit or opening quote -- unless the `.` closes an
    abbreviation ("Dr.", "e.g.", "U.S.", an initial "J."). In a line with no capital
    letters at all (lower-cased text) any following character may start a sentence.

    Explained in chapter 2, `notebooks/02_condenser.ipynb`.
    """
    sentences = []
    for line in text.split("\n"):
        line = line.strip()
        if not line:
            continue
        cased = any(c.isupper() for c in line)
        start = 0
        for m in _END.finditer(line):
            rest = line[m.end():]
            if not rest or (cased and not _NEXT_STARTS_SENTENCE.match(rest)):
                continue
            if m.group(1).rstrip("\"'\u201d\u2019)]") == ".":
                words = line[start:m.start()].split()
                if words and _is_abbreviation(words[-1]):
                    continue
            sentence = line[start:m.end(1)].strip()
            if sentence:
                sentences.append(sentence)
            start = m.end()
        tail = line[start:].strip()
        if tail:
            sentences.append(tail)
    return sentences


def _pack_document(
    sentences: list[list[int]], max_tokens: int, min_len: int, short_seq_prob: float, rng: random.Random
) -> list[list[int]]:
    """Greedy packing of one document's tokenized sentences into blocks of <= target tokens."""

    def new_target() -> int:
        # BERT's recipe: sometimes aim shorter, so fine-tuning-length inputs are not a surprise.
        if rng.random() < short_seq_prob:
            return rng.randint(min(min_len, max_tokens), max_tokens)
        return max_tokens

    blocks: list[list[int]] = []
    current: list[int] = []
    target = new_target()
    for sentence in sentences:
        if current and len(current) + len(sentence) > target:
            blocks.append(current)
            current, target = [], new_target()
        while len(sentence) > target:  # only when `current` is empty: cut, don't drop
            blocks.append(sentence[:target])
            sentence, target = sentence[target:], new_target()
        current = current + sentence
    if current:
        blocks.append(current)
    return [b for b in blocks if len(b) >= min_len]


def pack_blocks(
    dataset,
    tokenizer,
    max_len: int = 128,
    short_seq_prob: float = 0.1,
    seed: int = 0,
    num_proc: int | None = None,
    min_len: int = 8,
    text_column: str = "text",
):
    """Pack each document's sentences into `[CLS] ... [SEP]` blocks of at most `max_len` tokens.

    `dataset` is a `datasets.Dataset` whose `text_column` holds one document (or
    section) per row. Sentences are tokenized without special tokens and packed
    greedily, whole, into blocks of at most `max_len - 2` tokens within a row, never
    across rows. With probability `short_seq_prob` a block aims at a random shorter
    length. A sentence longer than the target is cut into pieces. Blocks with fewer
    than `min_len` tokens (not counting [CLS]/[SEP]) are dropped. Randomness comes
    from a generator seeded by (seed, row index), so the result does not depend on
    batching or `num_proc`.

    Returns a `datasets.Dataset` with columns `input_ids` and `doc_index` (the source row).

    Explained in chapter 2, `notebooks/02_condenser.ipynb`.
    """
    if text_column not in dataset.column_names:
        raise ValueError(
            f"dataset has no column {text_column!r} (columns: {dataset.column_names}); "
            "pass text_column=... or rename the column."
        )
    if max_len < min_len + 2:
        raise ValueError(f"max_len={max_len} must be at least min_len + 2 = {min_len + 2} ([CLS] and [SEP]).")
    if min_len < 1:
        raise ValueError(f"min_len={min_len} must be >= 1.")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise ValueError(f"short_seq_prob={short_seq_prob} must be in [0, 1].")
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    if cls_id is None or sep_id is None:
        raise ValueError("tokenizer needs cls_token and sep_token (a BERT-style WordPiece tokenizer).")
    max_tokens = max_len - 2

    def pack(batch: dict, indices: list[int]) -> dict:
        docs = [split_sentences(text or "") for text in batch[text_column]]
        flat = [s for doc in docs for s in doc]
        # One tokenizer call per batch: the fast tokenizer parallelises it in Rust.
        ids = (
            tokenizer(
                flat, add_special_tokens=False, return_attention_mask=False, return_token_type_ids=False, verbose=False
            )["input_ids"]
            if flat
            else []
        )
        out_ids, out_doc = [], []
        pos = 0
        for doc_index, doc in zip(indices, docs):
            sentences = ids[pos:pos + len(doc)]
            pos += len(doc)
            rng = random.Random(f"{seed}:{doc_index}")
            for block in _pack_document(sentences, max_tokens, min_len, short_seq_prob, rng):
                out_ids.append([cls_id, *block, sep_id])
                out_doc.append(doc_index)
        return {"input_ids": out_ids, "doc_index": out_doc}

    return dataset.map(
        pack,
        batched=True,
        with_indices=True,
        remove_columns=dataset.column_names,
        num_proc=num_proc,
        desc="packing blocks",
    )


def heldout_split(corpus, fraction: float = 0.05, key_columns: Sequence[str] = ("source", "doc_id"),
                  salt: str = "heldout"):
    """Split a corpus into `(train, heldout)` by a hash of each row's document id.

    A row is held out when `sha256(salt, its key_columns)` falls in the lowest `fraction` of
    the hash range. The key is the document (by default `source` + `doc_id`), not the
    section, so no held-out section shares an article with a training one; and a hash, not
    a position, so the split does not move when rows are added, removed or reordered.
    Pre-training then never sees the held-out text the study measures MLM loss on.

    Explained in the study page, `notebooks/09_study.md`, and chapter 2, `notebooks/02_condenser.ipynb`.
    """
    import hashlib

    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction={fraction} must be in (0, 1).")
    missing = [c for c in key_columns if c not in corpus.column_names]
    if missing:
        raise ValueError(f"corpus has no column(s) {missing} to key the split on (columns: "
                         f"{corpus.column_names}); pass key_columns=... naming a document id.")

    def is_heldout(*keys) -> list[bool]:
        out = []
        for row in zip(*keys):
            digest = hashlib.sha256("\x1f".join([salt, *map(str, row)]).encode()).digest()
            out.append(int.from_bytes(digest[:8], "big") < fraction * 2**64)
        return out

    flags = is_heldout(*(corpus[c] for c in key_columns))
    held = [i for i, f in enumerate(flags) if f]
    kept = [i for i, f in enumerate(flags) if not f]
    if not held or not kept:
        raise ValueError(f"fraction={fraction} leaves one side empty ({len(kept)} train rows, "
                         f"{len(held)} held out); use a fraction that fits the corpus size.")
    return corpus.select(kept), corpus.select(held)


def mlm_eval_batches(blocks, collator, n_blocks: int = 256, batch_size: int = 64,
                     seed: int = 0, mask_seed: int | None = None,
                     columns: Sequence[str] = ()) -> list[dict[str, torch.Tensor]]:
    """A fixed held-out evaluation set: `n_blocks` blocks with fixed masks, as batches.

    The blocks are a seeded random choice (all of them if there are fewer), kept in a fixed
    order; masking draws from the global torch RNG inside `torch.random.fork_rng`, seeded by
    `mask_seed` (default `seed`), so every call gives the same masked tokens and leaves the
    caller's RNG untouched. Every model then sees the same inputs and the same labels, and losses
    compare directly; another `mask_seed` masks the same blocks afresh (another mask draw).
    `columns` of the blocks (e.g. `doc_index`) join each batch as integer tensors.

    Explained in the study page, `notebooks/09_study.md`.
    """
    if n_blocks < 1 or batch_size < 1:
        raise ValueError(f"n_blocks={n_blocks} and batch_size={batch_size} must be >= 1.")
    n = len(blocks)
    if n == 0:
        raise ValueError("no held-out blocks to evaluate on; check the held-out split and max_len.")
    g = torch.Generator().manual_seed(seed)
    chosen = sorted(torch.randperm(n, generator=g)[:n_blocks].tolist())
    examples = [blocks[i] for i in chosen]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed if mask_seed is None else mask_seed)
        batches = [collator(examples[i:i + batch_size]) for i in range(0, len(examples), batch_size)]
    for i, batch in enumerate(batches):
        for c in columns:
            batch[c] = torch.tensor([e[c] for e in examples[i * batch_size:(i + 1) * batch_size]], dtype=torch.long)
    return batches
