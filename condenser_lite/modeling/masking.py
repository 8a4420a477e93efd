"""Whole-word MLM masking, the objective both pre-training models share.

``MLMCollator`` pads blocks and masks 15% of their tokens a whole word at a time (BERT's rule,
80% [MASK], 10% a random token, 10% unchanged); with ``head_mlm_probability`` it also makes the
Condenser head's own, more heavily masked copy of each block (the modified Condenser's head).

Explained in chapter 2, ``notebooks/02_condenser.ipynb``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F


class MLMCollator:
    """Pad a list of `{"input_ids": ...}` examples and apply (whole-word) MLM masking.

    Returns `input_ids`, `attention_mask` (1 = token) and `labels` (-100 except at
    selected positions). Per sequence, words (a token plus its following `##`
    continuation tokens) are visited in random order and each is taken if it still fits
    a budget of round(mlm_probability x non-special tokens) (BERT's rule); the first
    word drawn is always taken, so every sequence with a non-special token has at
    least one label. Each
    selected token becomes [MASK] with probability `mask_replace_prob`, a random
    non-special vocabulary token with probability `random_replace_prob`, else stays.
    Special tokens (including padding and [UNK]) are never selected.

    All randomness comes from the global torch RNG, so `torch.manual_seed(s)` before a
    call reproduces it exactly (the training loop's determinism rule).

    With `head_mlm_probability` (the modified Condenser's head, after RetroMAE's decoder),
    each batch also holds `head_input_ids`: the masked block with further whole words turned
    into [MASK] until that share of its tokens is selected (the words of `labels` first, so
    they stay selected), and `head_labels`: the original tokens at every selected position.
    The Condenser head reads that copy; the backbone still reads `input_ids`.

    (transformers 5's `DataCollatorForLanguageModeling(whole_word_mask=True)` needs
    character offsets, which packed blocks do not have, and turns the 80/10/10
    replacement off in whole-word mode, so it does not fit here.)

    Explained in chapter 2, `notebooks/02_condenser.ipynb`.
    """

    def __init__(
        self,
        tokenizer,
        mlm_probability: float = 0.15,
        whole_word: bool = True,
        pad_to_multiple_of: int | None = None,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        head_mlm_probability: float | None = None,
    ):
        if not 0.0 < mlm_probability < 1.0:
            raise ValueError(f"mlm_probability={mlm_probability} must be in (0, 1).")
        if head_mlm_probability is not None and not mlm_probability < head_mlm_probability < 1.0:
            raise ValueError(f"head_mlm_probability={head_mlm_probability} must be in (mlm_probability="
                             f"{mlm_probability}, 1): the head's copy masks more than the backbone's input.")
        if mask_replace_prob < 0 or random_replace_prob < 0 or mask_replace_prob + random_replace_prob > 1:
            raise ValueError(
                f"mask_replace_prob={mask_replace_prob} and random_replace_prob={random_replace_prob} "
                "must be >= 0 and sum to at most 1."
            )
        if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
            raise ValueError(f"pad_to_multiple_of={pad_to_multiple_of} must be a positive int or None.")
        if not hasattr(tokenizer, "convert_ids_to_tokens"):
            raise TypeError(
                "tokenizer must be a transformers tokenizer (e.g. from condenser_lite.tokenizer.load_tokenizer); "
                "wrap a raw tokenizers.Tokenizer with transformers.PreTrainedTokenizerFast(tokenizer_object=...)."
            )
        if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
            raise ValueError("tokenizer needs mask_token and pad_token for MLM batches.")
        self.tokenizer = tokenizer
        self.mlm_probability = mlm_probability
        self.whole_word = whole_word
        self.pad_to_multiple_of = pad_to_multiple_of
        self.mask_replace_prob = mask_replace_prob
        self.random_replace_prob = random_replace_prob
        self.head_mlm_probability = head_mlm_probability
        self.mask_id = tokenizer.mask_token_id
        self.pad_id = tokenizer.pad_token_id

        # Per-vocabulary lookup tables, so masking is a few tensor ops per batch.
        vocab_size = len(tokenizer)
        tokens = tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
        prefix = getattr(getattr(getattr(tokenizer, "backend_tokenizer", None), "model", None),
                         "continuing_subword_prefix", None) or "##"
        self.is_special = torch.zeros(vocab_size, dtype=torch.bool)
        self.is_special[list(tokenizer.all_special_ids)] = True
        self.is_continuation = torch.tensor([t is not None and t.startswith(prefix) for t in tokens])
        # Random replacements: never a special or reserved token such as bert's "[unused17]".
        reserved = torch.tensor([t is not None and len(t) > 2 and t[0] == "[" and t[-1] == "]" for t in tokens])
        self.random_ids = (~self.is_special & ~reserved).nonzero().squeeze(1)
        if len(self.random_ids) == 0:
            raise ValueError("tokenizer has no ordinary (non-special) tokens to use as random replacements.")

    def __call__(self, examples: Sequence[Mapping | Sequence[int] | torch.Tensor]) -> dict[str, torch.Tensor]:
        if len(examples) == 0:
            raise ValueError("cannot collate an empty list of examples.")
        seqs = [torch.as_tensor(e["input_ids"] if isinstance(e, Mapping) else e, dtype=torch.long) for e in examples]
        length = max(len(s) for s in seqs)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        input_ids = torch.full((len(seqs), length), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(seqs), length), dtype=torch.long)
        for i, s in enumerate(seqs):
            input_ids[i, : len(s)] = s
            attention_mask[i, : len(s)] = 1
        original = input_ids
        input_ids, labels = self.mask(input_ids, attention_mask)
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
        if self.head_mlm_probability is not None:
            # drawn after the backbone's masks, so those are the same as without the variant
            selected = self._select(original, attention_mask, self.head_mlm_probability, first=labels != -100)
            batch["head_input_ids"] = input_ids.masked_fill(selected & (labels == -100), self.mask_id)
            batch["head_labels"] = torch.where(selected, original, torch.full_like(original, -100))
        return batch

    def mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked copy of `input_ids` [B, T] and its `labels`; usable by other collators."""
        if int(input_ids.max()) >= len(self.is_special) or int(input_ids.min()) < 0:
            raise ValueError(
                f"input_ids contain ids outside the tokenizer's vocabulary (size {len(self.is_special)}); "
                "were the blocks made with a different tokenizer?"
            )
        selected = self._select(input_ids, attention_mask, self.mlm_probability)
        labels = torch.where(selected, input_ids, torch.full_like(input_ids, -100))
        u = torch.rand(*input_ids.shape)
        to_mask = selected & (u < self.mask_replace_prob)
        to_random = selected & ~to_mask & (u < self.mask_replace_prob + self.random_replace_prob)
        random_tokens = self.random_ids[torch.randint(len(self.random_ids), input_ids.shape)]
        masked = input_ids.masked_fill(to_mask, self.mask_id)
        masked = torch.where(to_random, random_tokens, masked)
        return masked, labels

    def _select(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rate: float,
                first: torch.Tensor | None = None) -> torch.Tensor:
        """Which tokens to mask [B, T]: whole words in random order within a budget of
        round(rate x non-special tokens), the words holding a ``first`` position drawn first."""
        B, T = input_ids.shape
        special = self.is_special[input_ids] | (attention_mask == 0)
        if self.whole_word:
            # A word starts at a non-continuation token (or a "##" piece right after a special
            # token, as when a block starts inside a cut sentence).
            prev_special = F.pad(special[:, :-1], (1, 0), value=True)
            start = ~special & (~self.is_continuation[input_ids] | prev_special)
        else:
            start = ~special
        positions = torch.arange(T).expand(B, T)
        # For every token, the position of its word's first token.
        word_start = torch.where(start, positions, -1).cummax(dim=1).values.clamp(min=0)
        word_len = torch.zeros(B, T, dtype=torch.long).scatter_add_(1, word_start, (~special).long())

        # Visit words in a random order and take each one that still fits the budget
        # (BERT's rule); the first word is always taken, so no sequence is left without a label.
        priority = torch.rand(B, T)
        if first is not None:  # those words ahead of every other (priorities in [-1, 0))
            ahead = torch.zeros(B, T, dtype=torch.long).scatter_add_(1, word_start, (first & ~special).long()) > 0
            priority = torch.where(ahead, priority - 1.0, priority)
        priority = priority.masked_fill(~start, 2.0)
        order = priority.argsort(dim=1)  # word starts first, shuffled
        len_sorted = word_len.gather(1, order)
        remaining = ((~special).sum(1) * rate).round().long()
        take_sorted = torch.zeros(B, T, dtype=torch.bool)
        take_sorted[:, 0] = len_sorted[:, 0] > 0
        remaining -= len_sorted[:, 0]
        for j in range(1, int(start.sum(1).max())):  # one vector step per word rank, not per token
            if not bool((remaining > 0).any()):
                break
            fits = (len_sorted[:, j] > 0) & (len_sorted[:, j] <= remaining)
            take_sorted[:, j] = fits
            remaining -= len_sorted[:, j] * fits
        take_start = torch.zeros(B, T, dtype=torch.bool).scatter_(1, order, take_sorted)
        selected = take_start.gather(1, word_start) & ~special
        if not bool(selected.any()):
            raise ValueError("no maskable token in the batch (only special tokens or padding); check the blocks.")
        return selected
