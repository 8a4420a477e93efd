"""Fixtures of the retrieval tests: a tiny random BERT with its WordPiece, saved as one folder (the
bi-encoder and the search tests both encode with it)."""

import pytest
from tiny_checkpoint import make_checkpoint


WORDS = (
    "the cat sat on a mat dogs chase cats in park protein binds dna cells divide gene "
    "volcano lava magma erupts ice glacier snow music jazz violin code python compiler "
    "what how which why is are of to and from into with for by title text query passage"
)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("tiny_bert"), [WORDS] * 3, max_positions=64)


@pytest.fixture(scope="module")
def tokenizer(ckpt):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(ckpt)
