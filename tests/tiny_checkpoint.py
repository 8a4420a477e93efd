"""A tiny WordPiece tokenizer and a random BERT saved together as one Hugging Face folder,
shared by the retrieval, similarity, full-scale-path and command-line tests."""

from pathlib import Path

import torch
from transformers import BertConfig, BertModel

from condenser_lite.data.tokenizer import train_wordpiece


def make_checkpoint(path: Path, texts: list[str], hidden: int = 32, layers: int = 2, dropout: float = 0.1,
                    vocab_size: int = 300, max_positions: int = 128) -> Path:
    """Train a WordPiece on ``texts`` and save it with a seeded random ``BertModel`` in ``path``."""
    tok = train_wordpiece(texts, vocab_size=vocab_size, save_dir=path, min_frequency=1)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=2 * hidden, max_position_embeddings=max_positions,
                        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    BertModel(config).save_pretrained(path)
    return path
